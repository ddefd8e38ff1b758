"""``WhisperModel.step_many``: one decoder call over the hypotheses of several streams equals separate steps.

Streams differ in encoder window T (audio window, different audio lengths), in decoded length L (different
forced prefixes) and in hypothesis count B; the batched step pads and masks them, and must return what
``step`` returns for each stream alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pytest
import torch

from simulst.audio.io import load_audio
from simulst.models.base import Encoded
from simulst.models.loading import load_model
from simulst.models.whisper import WhisperModel, WhisperState
from simulst.types import Costs
from tests.shared_assets import JFK, WHISPER_TINY_EN, english_items, needs_shared
from tests.toy import ENGLISH_VOCAB, make_checkpoint

pytestmark = [needs_shared, pytest.mark.usefixtures("one_thread")]

ATOL = 1e-5


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> WhisperModel:
    directory = make_checkpoint(tmp_path_factory.mktemp("batched") / "tiny", ENGLISH_VOCAB)
    return load_model(str(directory), window="audio", window_min_ms=0)


def tone(seconds: float, freq: float) -> np.ndarray:
    t = np.arange(int(seconds * 16000)) / 16000
    return (0.1 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def begin(
    model: WhisperModel, audio: np.ndarray, prefix: Sequence[int], beams: int
) -> tuple[WhisperState, torch.Tensor]:
    """A stream's state after its forced prefix, expanded to ``beams`` hypotheses, and their first tokens."""
    logp, state = model.start(model.encode(audio, Costs()), prefix, Costs())
    return model.expand(state, beams), torch.topk(logp, beams).indices


def assert_states_close(a: WhisperState, b: WhisperState) -> None:
    assert a.length == b.length and a.cross is b.cross
    for (ka, va), (kb, vb) in zip(a.cache, b.cache, strict=True):
        assert ka.shape == kb.shape and va.shape == vb.shape
        assert torch.allclose(ka, kb, atol=ATOL) and torch.allclose(va, vb, atol=ATOL)


def assert_logp_close(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape
    assert torch.equal(torch.isinf(a), torch.isinf(b))  # the same suppressed tokens
    finite = torch.isfinite(a)
    assert torch.allclose(a[finite], b[finite], atol=ATOL)
    assert torch.equal(a.argmax(-1), b.argmax(-1))
    return float((a[finite] - b[finite]).abs().max())


def next_beams(logp: torch.Tensor, beams: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Beam-search bookkeeping: (hypothesis indices, tokens) of the ``beams`` best continuations."""
    best = torch.topk(logp.reshape(-1), beams).indices
    return best // logp.shape[1], best % logp.shape[1]


def test_step_many_equals_separate_steps_and_continues(tiny: WhisperModel) -> None:
    model = tiny
    # three streams: different audio lengths (T), forced prefixes (L) and beam counts (B)
    specs = [(tone(0.5, 220.0), [], 1), (tone(1.7, 330.0), [300, 400], 3), (tone(3.1, 440.0), [11, 12, 13, 14, 15], 2)]
    begun = [begin(model, audio, prefix, beams) for audio, prefix, beams in specs]
    frames = {state.cross[0][0].shape[2] for state, _ in begun}
    lengths = {state.length for state, _ in begun}
    assert len(frames) == 3 and len(lengths) == 3  # the padding and both masks are exercised
    states = [state for state, _ in begun]
    tokens = [first for _, first in begun]
    worst = 0.0

    # step 1: batched vs sequential
    seq_costs = [Costs() for _ in specs]
    sequential = [model.step(s, t, c) for s, t, c in zip(states, tokens, seq_costs, strict=True)]
    costs = [Costs() for _ in specs]
    batched = model.step_many(states, tokens, costs)
    assert len(batched) == len(specs)
    for (lp_b, st_b), (lp_s, st_s) in zip(batched, sequential, strict=True):
        worst = max(worst, assert_logp_close(lp_b, lp_s))
        assert_states_close(st_b, st_s)
    assert [c.decoder_calls for c in costs] == [1, 0, 0]  # one call in total, counted on the first stream
    assert [c.decoder_positions for c in costs] == [c.decoder_positions for c in seq_costs] == [1, 3, 2]

    # step 2: reorder the beams (from the sequential choice), a second step_many on the returned states
    choices = [next_beams(lp_s, beams) for (lp_s, _), (_, _, beams) in zip(sequential, specs, strict=True)]
    seq_states = [model.select(st, idx) for (_, st), (idx, _) in zip(sequential, choices, strict=True)]
    bat_states = [model.select(st, idx) for (_, st), (idx, _) in zip(batched, choices, strict=True)]
    step_tokens = [tok for _, tok in choices]
    sequential = [model.step(s, t, Costs()) for s, t in zip(seq_states, step_tokens, strict=True)]
    kept = model.stack_cross(bat_states)  # a caller that keeps the stacked encodings across steps
    assert kept.slots(bat_states) == [0, 1, 2] and kept.slots(bat_states[::-1]) == [2, 1, 0]
    elsewhere = dataclasses.replace(seq_states[0], cross=list(seq_states[0].cross))  # another encoding's list
    assert kept.slots([*bat_states, elsewhere]) is None  # an encoding it does not hold
    # a stack serves any subset of its streams, in any order (streams whose search ended drop out)
    subset = model.step_many([bat_states[2], bat_states[0]], [step_tokens[2], step_tokens[0]], [Costs(), Costs()],
                             cross=kept)
    for (lp_b, st_b), (lp_s, st_s) in zip(subset, [sequential[2], sequential[0]], strict=True):
        worst = max(worst, assert_logp_close(lp_b, lp_s))
        assert_states_close(st_b, st_s)
    batched = model.step_many(bat_states, step_tokens, costs, cross=kept)
    for (lp_b, st_b), (lp_s, st_s) in zip(batched, sequential, strict=True):
        worst = max(worst, assert_logp_close(lp_b, lp_s))
        assert_states_close(st_b, st_s)
    assert [c.decoder_calls for c in costs] == [2, 0, 0]
    assert [c.decoder_positions for c in costs] == [2, 6, 4]

    # step 3: each stream goes on alone with a plain step from the batched states
    last = [lp.argmax(-1) for lp, _ in sequential]
    for (_, st_b), (_, st_s), tok in zip(batched, sequential, last, strict=True):
        lp_b, after_b = model.step(st_b, tok, Costs())
        lp_s, after_s = model.step(st_s, tok, Costs())
        worst = max(worst, assert_logp_close(lp_b, lp_s))
        assert_states_close(after_b, after_s)
    print(f"max |batched - sequential| log-prob: {worst:.3g}")


def test_step_many_equal_shapes_one_stream_and_errors(tiny: WhisperModel) -> None:
    model = tiny
    audio = tone(1.0, 200.0)
    # two streams of equal T and L: no masks at all
    a, ta = begin(model, audio, [5, 6], 2)
    b, tb = begin(model, audio * 0.5, [7, 8], 1)
    assert a.length == b.length and a.cross[0][0].shape == b.cross[0][0].shape
    batched = model.step_many([a, b], [ta, tb], [Costs(), Costs()])
    for (lp_b, st_b), (state, tok) in zip(batched, [(a, ta), (b, tb)], strict=True):
        lp_s, st_s = model.step(state, tok, Costs())
        assert_logp_close(lp_b, lp_s)
        assert_states_close(st_b, st_s)
    # one stream: exactly step (bit-identical, one decoder call)
    costs = Costs()
    [(lp_one, st_one)] = model.step_many([a], [ta], [costs])
    lp_s, st_s = model.step(a, ta, Costs())
    assert torch.equal(lp_one, lp_s) and costs.decoder_calls == 1 and costs.decoder_positions == 2
    assert all(torch.equal(x[0], y[0]) for x, y in zip(st_one.cache, st_s.cache, strict=True))
    assert model.step_many([], [], []) == []
    with pytest.raises(ValueError, match="one state"):
        model.step_many([a, b], [ta], [Costs(), Costs()])
    with pytest.raises(ValueError, match="hypotheses"):
        model.step_many([a, b], [ta, ta], [Costs(), Costs()])


def greedy(model: WhisperModel, streams: Sequence[tuple[Encoded, list[int]]], batched: bool,
           limit: int = 40) -> list[list[int]]:
    """Greedy decoding of several streams, each alone (start + step) or advanced together by step_many."""
    outputs: list[list[int]] = []
    states: list[WhisperState] = []
    nexts: list[torch.Tensor] = []
    for enc, prefix in streams:
        logp, state = model.start(enc, prefix, Costs())
        outputs.append([int(logp.argmax())])
        states.append(state)
        nexts.append(logp.argmax().view(1))
    active = [i for i, out in enumerate(outputs) if out[-1] != model.eos_id]
    while active:
        if batched:
            results = model.step_many([states[i] for i in active], [nexts[i] for i in active],
                                      [Costs() for _ in active])
        else:
            results = [model.step(states[i], nexts[i], Costs()) for i in active]
        for i, (logp, state) in zip(active, results, strict=True):
            states[i], nexts[i] = state, logp.argmax(-1)
            outputs[i].append(int(nexts[i]))
        active = [i for i in active if outputs[i][-1] != model.eos_id and len(outputs[i]) < limit]
    return outputs


@pytest.mark.real
def test_step_many_greedy_equals_single_stream_greedy_on_real_speech() -> None:
    model = load_model(str(WHISPER_TINY_EN), window="audio", window_min_ms=0)
    fleurs = next(path for uid, path, _ in english_items() if uid == "fleurs-en-001")
    jfk, other = load_audio(JFK), load_audio(fleurs)
    assert len(jfk) != len(other)
    # different audio lengths (T) and different committed prefixes (L)
    streams = [(model.encode(jfk, Costs()), model.tokenizer.encode(" And so my")), (model.encode(other, Costs()), [])]
    alone = greedy(model, streams, batched=False)
    together = greedy(model, streams, batched=True)
    assert together == alone
    assert all(out[-1] == model.eos_id and len(out) > 10 for out in alone)
    assert "ask not what your country" in model.tokenizer.decode(alone[0])
