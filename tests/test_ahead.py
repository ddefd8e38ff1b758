"""The forced pass that scores a draft and judges the speech (``WhisperModel.start_ahead``), greedy search's check
of the previous chunk's hypothesis (speculative decoding with a free draft), and the stream that uses both: the same
hypotheses and emissions as step-by-step decoding, in fewer decoder passes. Real Whisper tiny.en on jfk."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from simulst.config import PolicyOptions, SearchOptions, StreamOptions
from simulst.models.loading import load_model
from simulst.models.whisper import WhisperModel
from simulst.search import BeamSearch, Query, SearchState
from simulst.streaming.engine import SpeechEngine
from simulst.streaming.feed import feed_fast
from simulst.types import Costs
from tests.shared_assets import WHISPER_TINY_EN, needs_shared

pytestmark = [pytest.mark.real, needs_shared]


@pytest.fixture(scope="module")
def model() -> WhisperModel:
    return load_model(str(WHISPER_TINY_EN))


@pytest.fixture(scope="module")
def offline(model: WhisperModel, jfk: np.ndarray) -> tuple[int, ...]:
    enc = model.encode(jfk, Costs())
    prompt = tuple(model.prompt(enc, Costs()))
    hyp = BeamSearch(1).search(model, Query(enc, (), 60, True, prompt), SearchState(), Costs())[0]
    assert hyp.finished and len(hyp.tokens) > 12
    return hyp.tokens


def test_one_pass_scores_the_draft_as_steps_would(model: WhisperModel, jfk: np.ndarray,
                                                  offline: tuple[int, ...]) -> None:
    enc = model.encode(jfk[: 7 * 16000], Costs())
    prompt = model.prompt(enc, Costs())
    prefix, draft = offline[:4], offline[4:9]
    costs = Costs()
    ahead = model.start_ahead(enc, prefix, draft, costs, prompt, judge=True)
    assert costs.decoder_calls == 1 and ahead.logp.shape == (len(draft) + 1, model.vocab_size)
    assert ahead.state.length == len(prompt) + len(prefix) + len(draft)
    for i in range(len(draft) + 1):  # row i: the next-token log-probs after prefix + draft[:i]
        want, _ = model.start(enc, (*prefix, *draft[:i]), Costs(), prompt)
        assert int(ahead.logp[i].argmax()) == int(want.argmax())
        finite = torch.isfinite(want)
        assert torch.allclose(ahead.logp[i][finite], want[finite], atol=2e-3)
    assert ahead.no_speech == pytest.approx(model.no_speech_prob(enc, Costs()), abs=1e-3)
    # rewinding drops positions: stepping from the rewound state is stepping from a shorter prefix
    rewound = model.rewind(ahead.state, 3)  # prefix + draft[:2]
    got, _ = model.step(rewound, torch.tensor([draft[2]]), Costs())
    want, _ = model.start(enc, (*prefix, *draft[:3]), Costs(), prompt)
    assert int(got[0].argmax()) == int(want.argmax())
    assert torch.allclose(got[0][torch.isfinite(want)], want[torch.isfinite(want)], atol=2e-3)
    with pytest.raises(ValueError):
        model.rewind(ahead.state, ahead.state.length)


@pytest.mark.parametrize("case", ["whole", "wrong-middle", "wrong-first", "too-long"])
def test_greedy_with_a_draft_equals_greedy_without(model: WhisperModel, jfk: np.ndarray,
                                                   offline: tuple[int, ...], case: str) -> None:
    enc = model.encode(jfk, Costs())
    prompt = tuple(model.prompt(enc, Costs()))
    prefix = offline[:3]
    budget = 40
    draft = {
        "whole": offline[3:],
        "wrong-middle": (*offline[3:7], 1000, *offline[8:]),
        "wrong-first": (1000, *offline[4:]),
        "too-long": (*offline[3:], *offline[3:], *offline[3:]),
    }[case]
    plain_costs, ahead_costs = Costs(), Costs()
    plain = BeamSearch(1).search(model, Query(enc, prefix, budget, True, prompt), SearchState(), plain_costs)[0]
    drafted = BeamSearch(1).search(model, Query(enc, prefix, budget, True, prompt, draft=draft), SearchState(),
                                   ahead_costs)[0]
    assert drafted.tokens == plain.tokens and drafted.finished == plain.finished
    assert drafted.score == pytest.approx(plain.score, abs=5e-3)
    if case == "wrong-first":  # nothing taken from the draft: the same passes
        assert ahead_costs.decoder_calls == plain_costs.decoder_calls
    else:
        assert ahead_costs.decoder_calls < plain_costs.decoder_calls
    if case == "whole":  # the whole hypothesis checked in one pass: nothing left to step
        assert ahead_costs.decoder_calls == 1


def test_the_search_judges_the_speech_in_its_forced_pass(model: WhisperModel) -> None:
    searcher = BeamSearch(1)
    assert searcher.judges_speech(model)
    rng = np.random.default_rng(0)
    hiss = (0.001 * rng.standard_normal(3 * 16000)).astype(np.float32)
    enc = model.encode(hiss, Costs())
    prompt = tuple(model.prompt(enc, Costs()))
    probability = model.no_speech_prob(enc, Costs())
    costs = Costs()
    below = Query(enc, (), 20, False, prompt, no_speech_threshold=probability - 0.01)
    assert searcher.search(model, below, SearchState(), costs) == []
    assert costs.extra["no_speech_skips"] == 1 and costs.decoder_calls == 1
    above = Query(enc, (), 20, False, prompt, no_speech_threshold=min(1.0, probability + 0.01))
    assert searcher.search(model, above, SearchState(), Costs())


def test_batched_drafts_equal_each_alone(model: WhisperModel, jfk: np.ndarray, offline: tuple[int, ...]) -> None:
    encs = [model.encode(jfk[: seconds * 16000], Costs()) for seconds in (4, 7, 11)]
    prompt = model.prompt(encs[0], Costs())
    prefixes, drafts = [offline[:2], (), offline[:6]], [offline[2:5], offline[:3], ()]
    costs = [Costs() for _ in encs]
    together = model.start_ahead_many(encs, prefixes, drafts, costs, [prompt] * 3, [True, False, True])
    assert costs[0].decoder_calls == 1
    for enc, prefix, draft, judge, got in zip(encs, prefixes, drafts, [True, False, True], together, strict=True):
        alone = model.start_ahead(enc, prefix, draft, Costs(), prompt, judge=judge)
        assert got.logp.shape == alone.logp.shape
        assert torch.equal(got.logp.argmax(-1), alone.logp.argmax(-1))
        finite = torch.isfinite(alone.logp)
        assert torch.allclose(got.logp[finite], alone.logp[finite], atol=1e-3)
        assert (got.no_speech is None) == (not judge)
        if judge:
            assert got.no_speech == pytest.approx(alone.no_speech, abs=1e-4)


def test_a_stream_with_drafts_emits_what_step_by_step_decoding_emits(model: WhisperModel, jfk: np.ndarray) -> None:
    engine = SpeechEngine(model)
    runs = {}
    for draft in (True, False):
        stream = engine.open(StreamOptions(chunk_ms=600, policy=PolicyOptions.parse("la-2"),
                                           search=SearchOptions(draft=draft)))
        emissions = feed_fast(stream, jfk)
        runs[draft] = ([(e.text, e.source_ms) for e in emissions], stream.costs)
    assert runs[True][0] == runs[False][0]
    assert "fellow americans" in "".join(text for text, _ in runs[True][0]).lower()
    with_drafts, without = runs[True][1], runs[False][1]
    assert with_drafts.decoder_calls < 0.8 * without.decoder_calls
    assert with_drafts.encoder_calls == without.encoder_calls
