"""Hand-worked tests of the CTC online policy (2023 paper §2.3) and joint CTC/attention search on toy models."""

from __future__ import annotations

import argparse
import math
import random

import pytest
import torch

from simulst.cli.options import add_stream_arguments, ctc_head_from_args, stream_options_from_args
from simulst.config import CtcPolicyOptions, PolicyOptions, SearchOptions
from simulst.errors import OptionError
from simulst.models.base import Encoded
from simulst.models.ctc_vocabulary import CharVocabulary
from simulst.policies import CtcEnd, make_policy
from simulst.scorers.ctc_forward import PrefixForward, log_odds
from simulst.scorers.ctc_prefix import CtcPrefixScorer
from simulst.search import BeamSearch, make_searcher
from simulst.search.ctc_end import CtcEndRule
from simulst.types import Costs, Hypothesis
from tests.toy import ScriptedDecoder, stream_policy, stream_search

# Decoder vocabulary; the token-level CTC head shares it and adds a blank (id 4).
PIECES = ["<eos>", " a", " b", " c", "<blank>"]
EOS, A, B, C, BLANK = range(5)


class TokenLabels:
    """A CTC head over the decoder's own tokens."""

    blank = BLANK
    token_level = True

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError


def posteriors(rows: list[dict[int, float]], vocab: int) -> torch.Tensor:
    """(T, vocab) log-probabilities from sparse rows (missing entries: probability 0)."""
    p = torch.zeros(len(rows), vocab, dtype=torch.float64)
    for t, row in enumerate(rows):
        for k, v in row.items():
            p[t, k] = v
    return torch.log(p)


def token_enc(rows: list[dict[int, float]]) -> Encoded:
    return Encoded(frames=torch.zeros(1, 1, 1), audio_samples=1000, ctc_log_probs=posteriors(rows, len(PIECES)),
                   ctc_labels=TokenLabels())


def decoder(rows: dict[tuple[int, ...], dict[int, float]]) -> ScriptedDecoder:
    return ScriptedDecoder(PIECES, lambda tokens, _samples: rows.get(tokens, {EOS: 1.0}))


# Frame 1 says "a" for sure; frame 2 says blank (.8) or "b" (.2).
#   p_ctc(a|X) = 1·.8 = .8;  p_ctc(a⊕b…|X) = Φ_2(a)·p(z_2 = b) = 1·.2 = .2   ->  log Odds_end(a) = log 4 ≈ 1.386
#   p_ctc(a b|X) = .2;       p_ctc(a b⊕c…|X) = 0                              ->  log Odds_end(a b) = +inf
CTC_AB = [{A: 1.0}, {BLANK: 0.8, B: 0.2}]
TABLE = {(): {A: 0.9, EOS: 0.1}, (A,): {B: 0.6, EOS: 0.3, C: 0.1}, (A, B): {EOS: 0.9, C: 0.1}}


def test_greedy_stops_when_log_odds_end_exceeds_c_end() -> None:
    costs = Costs()
    [hyp] = stream_search(BeamSearch(1, 1.0, CtcEndRule(1.0))).search(
        decoder(TABLE), token_enc(CTC_AB), [], 10, costs, final=False)
    # g = ∅: p_ctc(∅) = 0 -> odds −inf, go on; g = a: c_att = b (best non-eos), log 4 > 1 -> stop at "a".
    assert hyp == Hypothesis((A,), pytest.approx(math.log(0.9)), False)
    assert costs.decoder_calls == 2  # start + the step after "a"; no step after the stop
    assert costs.extra == {"ctc_checks": 2, "ctc_stops": 1}
    assert stream_policy(CtcEnd()).stable_prefix([hyp]) == ()  # the last token is dropped


def test_higher_c_end_decodes_further() -> None:
    [hyp] = stream_search(BeamSearch(1, 1.0, CtcEndRule(2.0))).search(
        decoder(TABLE), token_enc(CTC_AB), [], 10, Costs(), final=False)
    # log 4 < 2 at "a"; at "a b" c_att = c (eos excluded) has p_ctc = 0 -> +inf > 2 -> stop before <eos>.
    assert hyp.tokens == (A, B) and not hyp.finished
    assert stream_policy(CtcEnd()).stable_prefix([hyp]) == (A,)


def test_default_c_end_depends_on_the_kind_of_head() -> None:
    # token level: the paper's 0 -> log 4 > 0 stops at "a"
    [hyp] = stream_search(BeamSearch(1, 1.0, CtcEndRule(None))).search(
        decoder(TABLE), token_enc(CTC_AB), [], 10, Costs(), False)
    assert hyp.tokens == (A,)
    # word level: -20 -> the "any" odds of "the cat" (log(.5/.5) = 0) exceed it: stop before " sat"
    enc = char_enc("the cat", last={"<blank>": 0.5, " ": 0.5})
    model = ScriptedDecoder(WORD_PIECES, lambda tokens, _s: WORD_TABLE.get(tokens, {0: 1.0}))
    [hyp] = stream_search(BeamSearch(1, 1.0, CtcEndRule(None, "any"))).search(model, enc, [], 10, Costs(), final=False)
    assert hyp.tokens == (1, 2, 3)


def test_c_end_infinite_never_stops_and_equals_plain_greedy() -> None:
    costs = Costs()
    [hyp] = stream_search(BeamSearch(1, 1.0, CtcEndRule(math.inf))).search(
        decoder(TABLE), token_enc(CTC_AB), [], 10, costs, False)
    [plain] = stream_search(BeamSearch(1)).search(decoder(TABLE), token_enc(CTC_AB), [], 10, Costs(), False)
    assert hyp == plain and hyp.tokens == (A, B) and hyp.finished
    assert "ctc_stops" not in costs.extra


def test_the_final_chunk_never_stops_early() -> None:
    [hyp] = stream_search(BeamSearch(1, 1.0, CtcEndRule(-100.0))).search(
        decoder(TABLE), token_enc(CTC_AB), [], 10, Costs(), True)
    assert hyp.tokens == (A, B) and hyp.finished


def test_stop_at_the_forced_prefix_commits_nothing_new() -> None:
    [hyp] = stream_search(BeamSearch(1, 1.0, CtcEndRule(1.0))).search(
        decoder(TABLE), token_enc(CTC_AB), [A], 10, Costs(), False)
    assert hyp.tokens == (A,)  # stopped before searching anything
    assert stream_policy(CtcEnd()).stable_prefix([hyp]) == ()


def test_beam_search_stops_on_its_best_beam() -> None:
    result = stream_search(BeamSearch(2, stop=CtcEndRule(1.0))).search(
        decoder(TABLE), token_enc(CTC_AB), [], 10, Costs(), False)
    assert result[0].tokens == (A,) and not result[0].finished


@pytest.mark.parametrize("rows", [TABLE, {(): {A: 0.5, B: 0.4, EOS: 0.1}, (A,): {EOS: 0.9, C: 0.1},
                                          (B,): {C: 0.9, EOS: 0.1}, (B, C): {EOS: 1.0}, (A, C): {EOS: 1.0}}])
@pytest.mark.parametrize("beam", [1, 2, 3])
def test_c_end_infinite_beam_equals_beam_search(rows: dict[tuple[int, ...], dict[int, float]], beam: int) -> None:
    enc = token_enc(CTC_AB)
    ctc = stream_search(BeamSearch(beam, stop=CtcEndRule(math.inf))).search(decoder(rows), enc, [], 10, Costs(), False)
    plain = stream_search(BeamSearch(beam)).search(decoder(rows), enc, [], 10, Costs(), False)
    assert ctc == plain


# ----------------------------------------------------------------------------------------- word level
WORD_PIECES = ["<eos>", " the", " ca", "t", " sat"]
WORD_TABLE = {(): {1: 0.9, 0: 0.1}, (1,): {2: 0.9, 0: 0.1}, (1, 2): {3: 0.9, 0: 0.1}, (1, 2, 3): {4: 0.8, 0: 0.2},
              (1, 2, 3, 4): {0: 1.0}}
CHARS = CharVocabulary()


def char_enc(text: str, last: dict[str, float] | None = None) -> Encoded:
    """One frame per character of ``text`` (probability 1), then optionally a last, uncertain frame."""
    rows: list[dict[int, float]] = [{CHARS.encode(ch)[0] if ch != " " else 1: 1.0} for ch in text]
    if last is not None:
        rows.append({(0 if ch == "<blank>" else 1 if ch == " " else CHARS.encode(ch)[0]): p for ch, p in last.items()})
    return Encoded(frames=torch.zeros(1, 1, 1), audio_samples=1000, ctc_log_probs=posteriors(rows, len(CHARS)),
                   ctc_labels=CHARS)


def test_word_level_policy_checks_only_at_word_ends() -> None:
    model = ScriptedDecoder(WORD_PIECES, lambda tokens, _s: WORD_TABLE.get(tokens, {0: 1.0}))
    costs = Costs()
    [hyp] = stream_search(BeamSearch(1, 1.0, CtcEndRule(0.0))).search(
        model, char_enc("the cat"), [], 10, costs, final=False)
    # Checks at g = ∅ (p_ctc(∅) = 0), g = "the" (p_ctc("the") = 0: the frames go on), not inside "ca|t", and at
    # g = "the cat": p_ctc("the cat") = 1 against p_ctc("the cat" ⊕ " s"…) = 0 -> +inf > 0 -> stop before " sat".
    assert hyp.tokens == (1, 2, 3)
    assert costs.extra == {"ctc_checks": 3, "ctc_stops": 1}
    assert stream_policy(CtcEnd()).stable_prefix([hyp]) == (1, 2)  # the session then holds back the cut word "ca"


def test_word_level_c_att_is_the_start_of_the_next_word() -> None:
    # The last frame: blank .5 or " " .5.  p_ctc("the cat") = .5, p_ctc("the cat "…) = .5, p_ctc("the cat s"…) = 0.
    enc = char_enc("the cat", last={"<blank>": 0.5, " ": 0.5})
    model = ScriptedDecoder(WORD_PIECES, lambda tokens, _s: WORD_TABLE.get(tokens, {0: 1.0}))
    # "next": c_att = " s" (the decoder's next word " sat") -> odds +inf: stops even at a high C_end.
    [hyp] = stream_search(BeamSearch(1, 1.0, CtcEndRule(5.0, "next"))).search(model, enc, [], 10, Costs(), final=False)
    assert hyp.tokens == (1, 2, 3)
    # "any": eq. 4, p_ctc(g…) − p_ctc(g) = .5 -> log Odds_end = log(.5/.5) = 0: stops iff C_end < 0.
    [hyp] = stream_search(BeamSearch(1, 1.0, CtcEndRule(-0.5, "any"))).search(model, enc, [], 10, Costs(), final=False)
    assert hyp.tokens == (1, 2, 3)
    [hyp] = stream_search(BeamSearch(1, 1.0, CtcEndRule(0.5, "any"))).search(model, enc, [], 10, Costs(), final=False)
    assert hyp.tokens == (1, 2, 3, 4)  # (then "the cat sat" cannot be produced at all: +inf, stop before <eos>)


def test_eq4_denominator_is_prefix_minus_end() -> None:
    enc = char_enc("the cat", last={"<blank>": 0.5, " ": 0.5})
    assert enc.ctc_log_probs is not None
    forward = PrefixForward(enc.ctc_log_probs, 0)
    g = CHARS.encode("the cat")
    forward.set(g)
    assert forward.log_end(len(g)) == pytest.approx(math.log(0.5))
    assert forward.log_continue_any(len(g)) == pytest.approx(math.log(0.5))


@pytest.mark.parametrize("seed", range(4))
def test_prefix_forward_agrees_with_the_prefix_scorer(seed: int) -> None:
    """The two implementations of the CTC prefix recursions (the policy's PrefixForward, the batched scorer of
    joint search) agree on every quantity, both from scratch and grown label by label."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.log_softmax(3 * torch.randn(40, 6, generator=gen, dtype=torch.float64), dim=-1)
    labels = torch.randint(1, 6, (12,), generator=gen).tolist()
    eos = 6  # a decoder id outside the CTC vocabulary
    scorer = CtcPrefixScorer(blank=0, eos=eos)
    cands = torch.tensor([[0, 1, 2, 3, 4, 5, eos]])
    forward = PrefixForward(x, 0)
    forward.set(labels[:5])
    forward.set(labels)  # grows from a common prefix
    grown = scorer.init_state(x)
    for j in range(13):
        scratch = scorer.init_state(x, labels[:j])
        for states in (scratch, grown):
            _, cand = scorer.score(states, cands)
            ext, end = cand.ext[0, :6], float(states.log_end[0])
            assert float(cand.ext[0, 6]) == end  # <eos>: log p_ctc(g|X)
            assert forward.log_end(j) == pytest.approx(end, abs=1e-9)
            assert forward.psi[j] == pytest.approx(float(states.log_prefix[0]), abs=1e-9)
            assert forward.log_next(j, 0) == float(ext[0]) == -math.inf  # the blank
            for c in range(1, 6):
                assert forward.log_next(j, c) == pytest.approx(float(ext[c]), abs=1e-9)
            assert forward.log_continue_any(j) == pytest.approx(float(torch.logsumexp(ext, 0)), abs=1e-9)
            odds = log_odds(forward.log_end(j), forward.log_next(j, 2))
            assert odds == pytest.approx(end - float(ext[2]), abs=1e-9)
            assert torch.allclose(states.gamma_n[0], torch.from_numpy(forward.gn[j][1:]), rtol=0, atol=1e-9)
            assert torch.allclose(states.gamma_b[0], torch.from_numpy(forward.gb[j][1:]), rtol=0, atol=1e-9)
        if j < 12:
            _, cand = scorer.score(grown, torch.tensor([[labels[j]]]))
            grown = scorer.select(cand, [0])
    forward.set([*labels[:3], 5, 5])  # leaves the sequence: recomputed from the common prefix
    other = scorer.init_state(x, [*labels[:3], 5, 5])
    assert forward.log_end(5) == pytest.approx(float(other.log_end[0]), abs=1e-9)
    assert forward.psi[5] == pytest.approx(float(other.log_prefix[0]), abs=1e-9)


# ----------------------------------------------------------------------------------------- joint scoring
JOINT_TABLE = {(): {A: 0.5, B: 0.4, EOS: 0.1}, (A,): {EOS: 1.0}, (B,): {EOS: 0.9, A: 0.1}}
CTC_B = [{B: 1.0}]  # the CTC hears "b"


def test_joint_greedy_follows_the_ctc() -> None:
    enc = token_enc(CTC_B)
    [att] = stream_search(BeamSearch(1, 1.0, ctc_weight=0.0)).search(decoder(JOINT_TABLE), enc, [], 10, Costs(), True)
    assert att.tokens == (A,)  # attention alone prefers "a"
    [joint] = stream_search(BeamSearch(1, 1.0, ctc_weight=0.3)).search(decoder(JOINT_TABLE), enc, [], 10, Costs(), True)
    # a: Δ_ctc = log p(a…) − log p(∅…) = −inf;  b: 0.7·log .4 + 0.3·0;  then <eos>: 0.7·log .9 + 0.3·Δ, with
    # Δ = log p(b) − log p(b…) = 0 (the <eos> step's score counts, as for every finished hypothesis of beam search).
    assert joint.tokens == (B,) and joint.finished
    assert joint.score == pytest.approx(0.7 * math.log(0.4) + 0.7 * math.log(0.9))
    [beam] = stream_search(BeamSearch(2, ctc_weight=0.3)).search(decoder(JOINT_TABLE), enc, [], 10, Costs(), True)[:1]
    assert beam.tokens == (B,)


def random_table(rng: random.Random) -> dict[tuple[int, ...], dict[int, float]]:
    rows: dict[tuple[int, ...], dict[int, float]] = {}

    def grow(prefix: tuple[int, ...]) -> None:
        weights = [rng.random() + 0.01 for _ in range(4)]
        rows[prefix] = {t: w / sum(weights) for t, w in zip((EOS, A, B, C), weights, strict=True)}
        if len(prefix) < 4:
            for t in (A, B, C):
                grow((*prefix, t))

    grow(())
    return rows


@pytest.mark.parametrize("seed", range(5))
def test_weight_zero_equals_attention_only(seed: int) -> None:
    rng = random.Random(seed)
    rows = random_table(rng)
    ctc = [{k: rng.random() for k in (A, B, C, BLANK)} for _ in range(6)]
    ctc = [{k: v / sum(r.values()) for k, v in r.items()} for r in ctc]
    enc = token_enc(ctc)
    for beam in (1, 3):
        assert stream_search(BeamSearch(beam, ctc_weight=0.0)).search(decoder(rows), enc, [A], 5, Costs(), True) == \
            stream_search(BeamSearch(beam)).search(decoder(rows), enc, [A], 5, Costs(), True)
    assert stream_search(BeamSearch(1, 1.0, ctc_weight=0.0)).search(decoder(rows), enc, [], 5, Costs(), True) == \
        stream_search(BeamSearch(1)).search(decoder(rows), enc, [], 5, Costs(), True)
    # and λ > 0 does change the search's scores (the CTC is really used)
    joint = stream_search(BeamSearch(1, 1.0, ctc_weight=0.5)).search(decoder(rows), enc, [], 5, Costs(), True)
    assert joint != stream_search(BeamSearch(1)).search(decoder(rows), enc, [], 5, Costs(), True)


# ----------------------------------------------------------------------------------------- errors, options
def test_joint_scoring_needs_a_head_over_the_decoder_vocabulary() -> None:
    model = ScriptedDecoder(WORD_PIECES, lambda tokens, _s: WORD_TABLE.get(tokens, {0: 1.0}))
    with pytest.raises(OptionError, match="own vocabulary"):
        stream_search(BeamSearch(1, 1.0, ctc_weight=0.3)).search(model, char_enc("the cat"), [], 5, Costs(), True)


def test_the_policy_needs_a_ctc_head() -> None:
    no_head = Encoded(frames=torch.zeros(1, 1, 1), audio_samples=1000)
    with pytest.raises(OptionError, match="CTC head"):
        stream_search(BeamSearch(1, 1.0, CtcEndRule(0.0))).search(decoder(TABLE), no_head, [], 5, Costs(), False)


def test_options_and_factories() -> None:
    assert PolicyOptions.parse("ctc") == CtcPolicyOptions(threshold=None)  # the head kind's default
    assert str(PolicyOptions.parse("ctc")) == "ctc"
    assert PolicyOptions.parse("ctc:-1.5").threshold == -1.5
    assert PolicyOptions.parse("ctc:inf").threshold == math.inf
    assert str(PolicyOptions.parse("ctc:2")) == "ctc:2"
    assert PolicyOptions.parse("ctc:-1:any") == CtcPolicyOptions(threshold=-1.0, odds="any")
    assert str(PolicyOptions.parse("ctc:-1:any")) == "ctc:-1:any"
    with pytest.raises(OptionError):
        PolicyOptions.parse("ctc:x")
    with pytest.raises(OptionError):
        CtcPolicyOptions(odds="all")
    with pytest.raises(OptionError):
        PolicyOptions("ctc", 1)  # the CTC policy's options are CtcPolicyOptions
    with pytest.raises(OptionError):
        SearchOptions(ctc_weight=1.5)
    policy = make_policy(PolicyOptions.parse("ctc:-1:any"), 1000.0)
    assert isinstance(policy, CtcEnd) and PolicyOptions.parse("ctc").needs_ctc_head
    rule = policy.stop_rule()
    assert isinstance(rule, CtcEndRule) and (rule.threshold, rule.odds) == (-1.0, "any")
    assert make_policy(PolicyOptions.parse("la-2"), 1000.0).stop_rule() is None
    greedy = make_searcher(SearchOptions(), rule)
    assert isinstance(greedy, BeamSearch) and (greedy.beam, greedy.stop) == (1, rule) and greedy.final_differs
    beam = make_searcher(SearchOptions("beam", beam=3), rule)
    assert isinstance(beam, BeamSearch) and (beam.beam, beam.stop) == (3, rule)
    joint = make_searcher(SearchOptions(ctc_weight=0.3))
    assert isinstance(joint, BeamSearch) and (joint.beam, joint.ctc_weight) == (1, 0.3) and not joint.final_differs
    with pytest.raises(OptionError, match="greedy and beam"):
        make_searcher(SearchOptions("ibwbs"), rule)
    with pytest.raises(OptionError, match="greedy and beam"):
        make_searcher(SearchOptions("bwbs", ctc_weight=0.3))


def test_cli_options() -> None:
    parser = argparse.ArgumentParser()
    add_stream_arguments(parser)
    args = parser.parse_args(["--policy", "ctc", "--ctc-threshold", "-1", "--ctc-odds", "any", "--ctc-weight", "0"])
    options = stream_options_from_args(args)
    assert options.policy == CtcPolicyOptions(threshold=-1.0, odds="any")
    assert ctc_head_from_args(args) == "default"  # the shipped head, without further options
    assert ctc_head_from_args(parser.parse_args(["--policy", "la-2"])) is None
    assert ctc_head_from_args(parser.parse_args(["--ctc-head", "h.safetensors"])) == "h.safetensors"
    policy = stream_options_from_args(parser.parse_args(["--policy", "ctc:2"])).policy
    assert isinstance(policy, CtcPolicyOptions) and policy.threshold == 2.0
