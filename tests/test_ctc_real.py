"""The shipped CTC head on the real Whisper tiny.en, the CTC policy on real speech, and a tiny train-ctc run."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from simulst.audio.io import load_audio
from simulst.config import PolicyOptions, SearchOptions, StreamOptions
from simulst.ctc.train import evaluate_head
from simulst.errors import ModelLoadError
from simulst.models.ctc_head import SAMPLES_PER_FRAME, default_head_for, load_head
from simulst.models.loading import load_model
from simulst.streaming.session import Session
from simulst.types import Costs

SHARED = Path(__file__).resolve().parents[2] / "shared"
MODEL = SHARED / "models" / "whisper-tiny.en"
JFK = SHARED / "data" / "jfk.tsv"

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(not (MODEL / "config.json").is_file() or not JFK.is_file(), reason="../shared is missing"),
]

# Greedy CTC character error rate of the shipped head on jfk, measured at training time (see the head's
# metadata and bench/results/ctc_head.md); the bound leaves a margin for float16 storage and BLAS differences.
JFK_CER_BOUND = 0.30


@pytest.fixture(scope="module")
def model():  # type: ignore[no-untyped-def]
    # the audio window keeps the streaming tests cheap; evaluate_head picks its own window
    return load_model(str(MODEL), ctc_head="default", window="audio")


def test_the_shipped_head_matches_tiny_en_and_its_ct2_conversion(model) -> None:  # type: ignore[no-untyped-def]
    assert model.ctc_head is not None
    path = default_head_for(model)
    assert path is not None and path.name == "whisper-tiny.en-char.safetensors"
    try:
        default = load_model(None)
    except ModelLoadError:
        pytest.skip("the offline default model package is not installed")
    assert default_head_for(default) == path


def test_the_shipped_head_transcribes_jfk(model) -> None:  # type: ignore[no-untyped-def]
    assert model.ctc_head is not None
    score = evaluate_head(model, model.ctc_head, [JFK])
    assert score.cer < JFK_CER_BOUND, score.outputs


@pytest.mark.parametrize("window", ["full", "audio"])
def test_encode_fills_ctc_log_probs_for_the_audio_frames(model, window: str) -> None:  # type: ignore[no-untyped-def]
    audio = load_audio(SHARED / "data" / "audio" / "jfk" / "jfk.wav")[: 16000 * 3 + 100]
    model.window = window
    try:
        enc = model.encode(audio, Costs())
    finally:
        model.window = "audio"
    assert enc.ctc_log_probs is not None and enc.ctc_labels is model.ctc_head.vocabulary
    assert enc.ctc_log_probs.shape == (math.ceil(audio.shape[0] / SAMPLES_PER_FRAME), 29)


def run(model, policy: str, search: str = "greedy", draft: bool = True):  # type: ignore[no-untyped-def]
    audio = load_audio(SHARED / "data" / "audio" / "jfk" / "jfk.wav")
    session = Session(model, StreamOptions(chunk_ms=1000, policy=PolicyOptions.parse(policy),
                                           search=SearchOptions(search, beam=3, draft=draft)))
    out = []
    for pos in range(0, audio.shape[0], 16000):
        out += session.push(audio[pos : pos + 16000])
    out += session.finish()
    return session, out


def test_c_end_infinite_equals_hold_one(model) -> None:  # type: ignore[no-untyped-def]
    # C_end = +inf never stops early: the search is plain greedy, and the policy drops one token (hold-1).
    ctc, ctc_out = run(model, "ctc:inf")
    hold, hold_out = run(model, "hold-1")
    assert [(e.text, e.tokens, e.source_ms) for e in ctc_out] == [(e.text, e.tokens, e.source_ms) for e in hold_out]
    # the same searches, except that the final chunk is searched again (its CTC-policy search may have stopped
    # early, so the session does not reuse it; jfk is exactly 11 chunks long), on the last chunk's encoding
    assert ctc.costs.encoder_calls == hold.costs.encoder_calls
    assert ctc.costs.decoder_calls > hold.costs.decoder_calls
    assert "ctc_stops" not in ctc.costs.extra


def test_the_ctc_policy_streams_jfk(model) -> None:  # type: ignore[no-untyped-def]
    session, out = run(model, "ctc")  # the default C_end
    la, _ = run(model, "la-2", draft=False)  # (LA-2 re-generating its hypothesis every chunk, as in the paper)
    words = session.text.lower().replace(",", "").replace(".", "").split()
    assert words[:4] == ["and", "so", "my", "fellow"] and words[-3:] == ["for", "your", "country"]
    assert len(out) >= 5  # it commits while the audio streams in
    assert session.costs.extra.get("ctc_stops", 0) > 0
    assert session.costs.decoder_calls < la.costs.decoder_calls  # it stops instead of re-generating
    beam, _ = run(model, "ctc", "beam")
    assert beam.text.lower().startswith("and so my fellow")


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_train_ctc_tiny_run(tmp_path: Path) -> None:
    from simulst.cli.ctc import main

    out = tmp_path / "head.safetensors"
    code = main(["--model", str(MODEL), "--synthesize", "3", "--work-dir", str(tmp_path / "work"), "--out", str(out),
                 "--epochs", "1", "--max-steps", "3", "--hidden", "32", "--layers", "1", "--workers", "1"])
    assert code == 0
    head = load_head(out)
    assert head.config.training["steps"] <= 3 and head.config.training["data"]["utterances"] == 3
    assert len(list((tmp_path / "work" / "corpus" / "audio").glob("*.wav"))) == 3
    attached = load_model(str(MODEL), ctc_head=out)
    assert attached.ctc_head is not None
