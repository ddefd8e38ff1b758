"""Input level normalisation (simulst.audio.level): hand-worked gains, invariants, and what it does for a quiet real
recording."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulst.audio import level
from simulst.audio.io import load_audio
from simulst.audio.level import MAX_GAIN, normalize_level, peak_gain
from simulst.cli.options import add_stream_arguments, stream_options_from_args
from simulst.config import PolicyOptions, StreamOptions
from simulst.errors import OptionError
from tests.shared_assets import DATA, WHISPER_TINY_EN, needs_shared


def test_the_docstring_examples_hold() -> None:
    result = doctest.testmod(level)
    assert result.attempted >= 2 and result.failed == 0


def test_hand_worked_gains() -> None:
    quiet = np.array([0.0, 0.01, -0.03, 0.02], dtype=np.float32)
    assert peak_gain(quiet, 0.3) == pytest.approx(10.0)  # the loudest sample, 0.03, lifted to 0.3
    assert peak_gain(np.array([0.5, -0.2], dtype=np.float32), 0.3) == 1.0  # loud audio is left as it is
    assert peak_gain(np.array([1e-5], dtype=np.float32), 0.3) == MAX_GAIN  # near-silence: +40 dB at most
    assert peak_gain(np.zeros(4, dtype=np.float32), 0.3) == 1.0
    assert peak_gain(np.zeros(0, dtype=np.float32), 0.3) == 1.0
    lifted = normalize_level(quiet, 0.3)
    assert lifted.dtype == np.float32 and np.allclose(lifted, quiet * 10.0)
    assert normalize_level(quiet, None) is quiet


def test_bad_levels_are_refused() -> None:
    with pytest.raises(ValueError):
        peak_gain(np.ones(2, dtype=np.float32), 0.0)
    with pytest.raises(OptionError, match="normalisation peak"):
        StreamOptions(normalize_peak=1.5)
    with pytest.raises(OptionError, match="normalisation peak"):
        StreamOptions(normalize_peak=0.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1.0, 1.0, allow_nan=False, width=32), min_size=1, max_size=64),
       st.floats(0.01, 1.0))
def test_the_gain_never_attenuates_and_reaches_the_target_when_it_may(samples: list[float], target: float) -> None:
    audio = np.array(samples, dtype=np.float32)
    peak = float(np.max(np.abs(audio)))
    out = normalize_level(audio, target)
    gain = peak_gain(audio, target)
    assert 1.0 <= gain <= MAX_GAIN
    new_peak = float(np.max(np.abs(out)))
    assert new_peak >= peak - 1e-7  # never quieter
    if peak > 0 and target / peak <= MAX_GAIN:
        assert new_peak == pytest.approx(max(peak, target), rel=1e-5)


def test_the_command_line_sets_the_level() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_stream_arguments(parser)
    assert stream_options_from_args(parser.parse_args([])).normalize_peak == StreamOptions().normalize_peak == 0.3
    assert stream_options_from_args(parser.parse_args(["--normalize-peak", "none"])).normalize_peak is None
    assert stream_options_from_args(parser.parse_args(["--normalize-peak", "0.5"])).normalize_peak == 0.5


@needs_shared
def test_a_quiet_recording_is_heard_once_lifted() -> None:
    # fleurs-en-004 peaks at -49 dBFS: Whisper tiny.en hears "and confluence" for "and can fly" at that level,
    # and the right words once the stream lifts the audio (offline decoding: one final chunk).
    from simulst.models.loading import load_model
    from simulst.streaming.engine import SpeechEngine
    from simulst.streaming.feed import feed_fast

    engine = SpeechEngine(load_model(str(WHISPER_TINY_EN)))
    audio = load_audio(DATA / "audio" / "fleurs-en-dev" / "fleurs-en-004.wav")
    assert float(np.max(np.abs(audio))) < 0.004

    def text(level: float | None) -> str:
        stream = engine.open(StreamOptions(policy=PolicyOptions.parse("offline"), normalize_peak=level))
        feed_fast(stream, audio)
        return stream.text.lower()

    assert "can fly" in text(0.3)
    assert "can fly" not in text(None)
