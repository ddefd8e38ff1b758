"""Hand-worked tests of greedy and beam search on scripted toy decoders."""

from __future__ import annotations

import math

import pytest
import torch

from simulst.errors import OptionError
from simulst.models.base import Encoded
from simulst.search import BeamSearch, Query, SearchState
from simulst.types import Costs, Hypothesis
from tests.toy import ScriptedDecoder, stream_search

PIECES = ["<eos>", " a", " b", "c"]
ENC = Encoded(frames=torch.zeros(1, 1, 1), audio_samples=1000)


def table(rows: dict[tuple[int, ...], dict[int, float]]) -> ScriptedDecoder:
    return ScriptedDecoder(PIECES, lambda tokens, _samples: rows.get(tokens, {0: 1.0}))


GREEDY_TABLE = {(): {1: 0.6, 2: 0.4}, (1,): {3: 0.7, 0: 0.3}, (1, 3): {0: 1.0}}


def test_greedy_takes_argmax_until_eos() -> None:
    model, costs = table(GREEDY_TABLE), Costs()
    [hyp] = stream_search(BeamSearch(1)).search(model, ENC, [], 10, costs, final=True)
    assert hyp.tokens == (1, 3) and hyp.finished
    assert hyp.score == pytest.approx(math.log(0.6) + math.log(0.7), abs=1e-9)
    assert costs.decoder_calls == 3  # start, step after " a", step after "c"


def test_greedy_forces_the_prefix_in_one_call() -> None:
    model, costs = table(GREEDY_TABLE), Costs()
    [hyp] = stream_search(BeamSearch(1)).search(model, ENC, [1], 10, costs, final=False)
    assert hyp.tokens == (1, 3) and hyp.finished
    assert hyp.score == pytest.approx(math.log(0.7), abs=1e-9)  # the forced token is not scored
    assert costs.decoder_calls == 2
    assert model.calls[0] == ((1,),)  # the prefix went in one call
    assert costs.decoder_positions == 2 + 1


def test_greedy_stops_at_max_new_tokens_without_an_extra_step() -> None:
    model, costs = table({(): {1: 1.0}, (1,): {1: 1.0}, (1, 1): {1: 1.0}}), Costs()
    [hyp] = stream_search(BeamSearch(1)).search(model, ENC, [], 2, costs, final=False)
    assert hyp.tokens == (1, 1) and not hyp.finished
    assert costs.decoder_calls == 2
    [empty] = stream_search(BeamSearch(1)).search(model, ENC, [2], 0, Costs(), final=False)
    assert empty == Hypothesis((2,), 0.0, False)


BEAM_TABLE = {
    (): {1: 0.5, 2: 0.4, 0: 0.1},
    (1,): {0: 0.9, 3: 0.1},
    (2,): {3: 0.9, 0: 0.1},
    (2, 3): {0: 1.0},
    (1, 3): {0: 1.0},
}


def test_beam_search_hand_worked() -> None:
    # Step 1: beams " a" (.5), " b" (.4); <eos> (.1) ranks third and is not kept.
    # Step 2: " a"<eos> = .45 -> finished; " b""c" = .36 and " a""c" = .05 -> beams.
    # Step 3: both beams end: " b""c"<eos> = .36, " a""c"<eos> = .05 -> 3 finished >= 2, stop.
    # Length-normalised (tokens + <eos>): " a": log(.45)/2 = -0.399, " b""c": log(.36)/3 = -0.341,
    # " a""c": log(.05)/3 = -0.999, so " b""c" beats the more probable but shorter " a".
    model, costs = table(BEAM_TABLE), Costs()
    result = stream_search(BeamSearch(2)).search(model, ENC, [], 10, costs, final=True)
    assert [h.tokens for h in result] == [(2, 3), (1,)]
    assert result[0].score == pytest.approx(math.log(0.36), abs=1e-9)
    assert result[1].score == pytest.approx(math.log(0.45), abs=1e-9)
    assert all(h.finished for h in result)
    assert costs.decoder_calls == 3  # one batched call per step, whatever the beam
    assert [len(rows) for rows in model.calls] == [1, 2, 2]


def test_beam_search_without_length_normalisation_prefers_short() -> None:
    result = stream_search(BeamSearch(2, length_penalty=0.0)).search(
        table(BEAM_TABLE), ENC, [], 10, Costs(), final=True)
    assert result[0].tokens == (1,)


def test_beam_one_equals_greedy() -> None:
    for rows in (GREEDY_TABLE, BEAM_TABLE):
        greedy = stream_search(BeamSearch(1)).search(table(rows), ENC, [], 10, Costs(), final=True)
        beam = stream_search(BeamSearch(1)).search(table(rows), ENC, [], 10, Costs(), final=True)
        assert beam[0].tokens == greedy[0].tokens


def test_beam_search_keeps_forced_prefix_and_open_beams_at_max_length() -> None:
    model = table({(2,): {1: 0.6, 3: 0.4}, (2, 1): {1: 1.0}, (2, 3): {1: 1.0}})
    result = stream_search(BeamSearch(2)).search(model, ENC, [2], 1, Costs(), final=False)
    assert [h.tokens for h in result] == [(2, 1), (2, 3)]
    assert not any(h.finished for h in result)


def looping(tokens: tuple[int, ...], _samples: int) -> dict[int, float]:
    """After " b": " a" over and over (.8 each, <eos> .2), or (.2) "c" " b" "c" " b" ... (1.0 each)."""
    if tokens == (2,):
        return {1: 0.8, 3: 0.2}
    if tokens[:2] == (2, 3):
        return {2: 1.0} if tokens[-1] == 3 else {3: 1.0}
    return {1: 0.8, 0: 0.2}


def loop_search(beam: int, prefix: tuple[int, ...], *, stop: bool, final: bool = False) -> tuple[
        list[Hypothesis], Costs, SearchState]:
    model, costs, state = ScriptedDecoder(PIECES, looping), Costs(), SearchState()
    query = Query(ENC, prefix, 10, final, stop_at_loops=stop)
    return BeamSearch(beam).search(model, query, state, costs), costs, state


def test_a_chunk_search_stops_where_its_best_hypothesis_loops() -> None:
    # greedy: " b" then " a" x 4 - the 4th " a" in a row completes a loop: no expansion after it (start + 4 steps)
    [hyp], costs, state = loop_search(1, (2,), stop=True)
    assert hyp.tokens == (2, 1, 1, 1, 1) and not hyp.finished
    assert costs.decoder_calls == 5 and costs.extra["loop_stops"] == 1 and state.looped
    # a final search, or a stream without the loop guard, searches on to the budget (10 tokens)
    for stop, final in ((True, True), (False, False)):
        [hyp], costs, state = loop_search(1, (2,), stop=stop, final=final)
        assert hyp.tokens == (2, *[1] * 10) and costs.decoder_calls == 10 and not state.looped
        assert "loop_stops" not in costs.extra
    # a loop running on from the forced prefix stops at the first searched token; one inside it alone does not
    [hyp], costs, _ = loop_search(1, (2, 1, 1, 1), stop=True)
    assert hyp.tokens == (2, 1, 1, 1, 1) and costs.decoder_calls == 2
    # a beam of 2: " a a a a" (.8^4 = .41) leads "c b c b" (.2) when its 4th " a" loops; it is returned first,
    # the other open beam after it
    result, costs, state = loop_search(2, (2,), stop=True)
    assert [h.tokens for h in result] == [(2, 1, 1, 1, 1), (2, 3, 2, 3, 2)]
    assert costs.decoder_calls == 5 and state.looped and costs.extra["loop_stops"] == 1


def test_a_search_with_loops_barred_takes_the_best_token_that_completes_none() -> None:
    # greedy, final: " b" then " a" x 3; the 4th " a" (.8) would complete a loop: barred, <eos> (.2) is taken
    model, costs = ScriptedDecoder(PIECES, looping), Costs()
    [hyp] = BeamSearch(1).search(model, Query(ENC, (2,), 10, True, block_loops=True), SearchState(), costs)
    assert hyp.tokens == (2, 1, 1, 1) and hyp.finished
    assert hyp.score == pytest.approx(3 * math.log(0.8) + math.log(0.2), abs=1e-6)
    # a loop that the forced prefix holds three copies of: barred at the first searched token
    [hyp] = BeamSearch(1).search(model, Query(ENC, (2, 1, 1, 1), 10, True, block_loops=True), SearchState(), Costs())
    assert hyp.tokens == (2, 1, 1, 1) and hyp.finished and hyp.score == pytest.approx(math.log(0.2), abs=1e-6)
    # not barred: the loop runs on to the budget
    [hyp] = BeamSearch(1).search(model, Query(ENC, (2,), 10, True), SearchState(), Costs())
    assert hyp.tokens == (2, *[1] * 10)


def test_a_search_bound_to_next_tokens_takes_its_first_token_among_them() -> None:
    # BEAM_TABLE after the empty prefix: " a" .5, " b" .4, <eos> .1; bound to " b" and <eos>, which are scored
    # given that one of them is written: .8 and .2
    model = table(BEAM_TABLE)
    [hyp] = BeamSearch(1).search(model, Query(ENC, (), 10, False, next_tokens=(2, 0)), SearchState(), Costs())
    assert hyp.tokens == (2, 3) and hyp.finished  # " b" (.8), then free: "c" (.9), <eos>
    assert hyp.score == pytest.approx(math.log(0.8) + math.log(0.9), abs=1e-6)
    assert hyp.token_scores[0] == pytest.approx(math.log(0.8), abs=1e-6)
    # a beam of 2: both beams start within the bound (<eos> .2 finishes one, " b" .8 goes on), not with " a" (.5);
    # then " b" <eos> (.08) finishes the second: ranked per token, log(.08) / 2 over log(.2) / 1
    hyps = BeamSearch(2).search(model, Query(ENC, (), 10, False, next_tokens=(2, 0)), SearchState(), Costs())
    assert [h.tokens for h in hyps] == [(2,), ()]
    # bound to " a" only: the best free path anyway; a draft is not checked under a bound (same hypothesis)
    [hyp] = BeamSearch(1).search(model, Query(ENC, (), 10, False, draft=(2, 3), next_tokens=(1,)), SearchState(),
                                 Costs())
    assert hyp.tokens == (1,) and hyp.finished
    # the bound is on the first token after a forced prefix only: after " b", "c" is free (.9)
    [hyp] = BeamSearch(1).search(model, Query(ENC, (2,), 10, False, next_tokens=(0,)), SearchState(), Costs())
    assert hyp.tokens == (2,) and hyp.finished


def test_beam_rejects_bad_size() -> None:
    with pytest.raises(OptionError):
        stream_search(BeamSearch(0))


def test_normalized_score() -> None:
    assert Hypothesis((1, 2, 3), -3.0, True).normalized_score(1) == pytest.approx(-1.0)
    assert Hypothesis((1, 2, 3), -3.0, False).normalized_score(1) == pytest.approx(-1.5)
    assert Hypothesis((1,), -3.0, False).normalized_score(1) == pytest.approx(-3.0)
