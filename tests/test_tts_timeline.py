"""Speech output: segments at max(end of previous, emission time), StartOffset / EndOffset, the wav file."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from simulst.config import PolicyOptions, StreamOptions
from simulst.errors import OptionError, SimulstError
from simulst.evaluation.asr_bleu import normalize_for_asr_bleu
from simulst.mt.options import MTOptions
from simulst.streaming.cascade import CascadeSession
from simulst.tts.base import SpeechSynthesizer
from simulst.tts.timeline import SpeechOutput, SpeechTimeline
from simulst.types import Emission
from tests.toy import ScriptedMT, ToySpeechModel, push_in_pieces, tone


class BeepSynthesizer(SpeechSynthesizer):
    """100 ms of tone per word, at 1 kHz (one sample per ms keeps the arithmetic readable)."""

    sample_rate = 1000

    def __init__(self) -> None:
        self.texts: list[str] = []

    def synthesize(self, text: str) -> np.ndarray:
        self.texts.append(text)
        n = 100 * len(text.split())
        return (0.5 * np.sin(np.arange(n) / 2.0)).astype(np.float32)


def emission(text: str, source_ms: float, elapsed_ms: float | None = None) -> Emission:
    return Emission(text, (), source_ms, source_ms if elapsed_ms is None else elapsed_ms)


def test_placement_hand_worked() -> None:
    # "a b" at 1000 ms -> [1000, 1200); "c d e" at 1100 ms -> waits for the first: [1200, 1500);
    # "f" at 2000 ms -> [2000, 2100). Source 1800 ms: StartOffset 1000, EndOffset 2100 - 1800 = 300.
    # Speech: 200 + 300 + 100 = 600 ms; the rendering runs to the last segment's end, 2100 ms (at 1 kHz: samples).
    out = SpeechOutput(BeepSynthesizer())
    for e in (emission("a b", 1000), emission(" c d e", 1100), emission("  ", 1500), emission(" f", 2000)):
        out.add(e)
    segments = out.timeline.segments
    assert [(s.text, s.start_ms, s.end_ms) for s in segments] == [
        ("a b", 1000.0, 1200.0), ("c d e", 1200.0, 1500.0), ("f", 2000.0, 2100.0)
    ]
    metrics = out.metrics(1800.0)
    assert metrics.start_offset_ms == 1000.0 and metrics.end_offset_ms == pytest.approx(300.0)
    assert metrics.segments == 3 and metrics.speech_ms == 600.0 and metrics.duration_ms == 2100.0
    audio = out.timeline.render()
    assert audio.shape[0] == 2100
    assert not audio[:1000].any() and audio[1000:1500].any() and not audio[1500:2000].any()
    assert out.timeline.speech().shape[0] == 600


def test_elapsed_clock_adds_synthesis_time() -> None:
    out = SpeechOutput(BeepSynthesizer(), clock="elapsed")
    first = out.add(emission("a", 1000, elapsed_ms=1500))
    assert first is not None and first.start_ms >= 1500.0
    assert first.ready_ms == pytest.approx(1500.0 + first.synthesis_s * 1000.0)
    second = out.add(emission(" b", 1000, elapsed_ms=1400))  # ready before the first ended: queued after it
    assert second is not None and second.start_ms == first.end_ms
    with pytest.raises(OptionError):
        SpeechOutput(BeepSynthesizer(), clock="later")
    wall = SpeechOutput(BeepSynthesizer(), clock="wall")
    with pytest.raises(OptionError):
        wall.add(emission("a", 1000))
    third = wall.add(emission("a", 1000, elapsed_ms=5000), wall_ms=1200.0)
    assert third is not None and 1200.0 <= third.start_ms < 1500.0


def test_write_wav(tmp_path: Path) -> None:
    timeline = SpeechTimeline(1000)
    timeline.place(np.full(200, 0.25, dtype=np.float32), 300.0, "x")  # [300, 500) ms
    path = timeline.write(tmp_path / "sub" / "out.wav", min_ms=1000.0)
    audio, rate = sf.read(str(path), dtype="float32")
    info = sf.info(str(path))
    # padded with silence to min_ms: 1000 ms at 1 kHz = 1000 samples
    assert rate == timeline.sample_rate and info.subtype == "PCM_16" and audio.shape == (1000,)
    assert np.allclose(audio[300:500], 0.25, atol=1e-4) and not audio[:300].any()
    with pytest.raises(SimulstError):
        timeline.place(np.array([np.nan], dtype=np.float32), 0.0)
    with pytest.raises(OptionError):
        timeline.place(np.zeros((2, 2), dtype=np.float32), 0.0)
    empty = SpeechTimeline(1000).metrics(500.0)
    assert empty.start_offset_ms is None and empty.end_offset_ms is None and empty.segments == 0


def test_cascade_speaks_each_increment() -> None:
    synth = BeepSynthesizer()
    speech = SpeechOutput(synth)
    cascade = CascadeSession(ToySpeechModel(), ScriptedMT(), StreamOptions(chunk_ms=1000),
                             MTOptions(policy=PolicyOptions.parse("hold-0")), speech=speech)
    out = push_in_pieces(cascade, tone(5000), 1000)
    assert synth.texts == [e.text for e in out]
    segments = speech.timeline.segments
    assert [s.ready_ms for s in segments] == [e.source_ms for e in out]
    assert all(s.start_ms >= e.source_ms for s, e in zip(segments, out, strict=True))
    assert all(b.start_ms >= a.end_ms for a, b in itertools.pairwise(segments))
    metrics = speech.metrics(5000.0)
    assert metrics.start_offset_ms == out[0].source_ms
    assert metrics.end_offset_ms == pytest.approx(segments[-1].end_ms - 5000.0)


def test_asr_bleu_normalisation() -> None:
    assert normalize_for_asr_bleu("¿Qué  puedes hacer, por tu país?") == "qué puedes hacer por tu país"
