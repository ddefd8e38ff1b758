"""Re-encoding only the recent audio (``StreamOptions.reencode_s``): which positions are computed, what the others
keep, and that a stream with it still transcribes real speech."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from simulst.audio.io import load_audio
from simulst.config import ModelOptions, StreamOptions
from simulst.config.presets import preset_options
from simulst.errors import OptionError
from simulst.models.loading import load_model
from simulst.models.mel import log_mel_spectrogram
from simulst.models.whisper import WhisperModel
from simulst.models.whisper_net import STEM_MIN_POSITIONS, placed
from simulst.streaming.engine import SpeechEngine
from simulst.streaming.feed import feed_fast
from simulst.types import Costs
from tests.shared_assets import JFK, needs_shared, phrase
from tests.toy import ENGLISH_VOCAB, make_checkpoint

RECENT = 32000  # 2 s

pytestmark = [needs_shared, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("reuse") / "tiny", ENGLISH_VOCAB)


def speechlike(seconds: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (0.1 * rng.standard_normal(int(seconds * 16000))).astype(np.float32)


def test_placed_writes_the_new_rows_over_the_old_and_extends_with_zeros() -> None:
    past = torch.tensor([1.0, 2.0, 3.0]).view(1, 1, 3, 1)
    new = torch.tensor([9.0, 8.0]).view(1, 1, 2, 1)
    out = placed(past, new, torch.tensor([1, 3]), 5)
    assert out.flatten().tolist() == [1.0, 9.0, 3.0, 8.0, 0.0]
    assert past.flatten().tolist() == [1.0, 2.0, 3.0]  # (a new tensor)
    rows = placed(torch.ones(1, 2, 2), torch.full((1, 1, 2), 5.0), torch.tensor([2]), 3, dim=1)
    assert rows.tolist() == [[[1.0, 1.0], [1.0, 1.0], [5.0, 5.0]]]


def test_the_encoder_at_every_position_is_the_whole_forward(checkpoint: Path) -> None:
    model = load_model(str(checkpoint), window="audio", window_min_ms=0)
    encoder = model.net.model.encoder
    mel = log_mel_spectrogram(torch.from_numpy(speechlike(3.0)), 80, model.window_frames(48000))[None]
    with torch.inference_mode():
        whole = encoder(mel)
        states, layers = encoder.forward_at(mel)
        assert torch.equal(states, whole)
        total = whole.shape[1]
        assert [k.shape[2] for k, _ in layers] == [total]
        # every position computed again over any earlier keys/values: the same states
        stale = [(torch.randn_like(k), torch.randn_like(v)) for k, v in layers]
        again, _ = encoder.forward_at(mel, torch.arange(total), stale)
        assert torch.allclose(again, whole, atol=1e-5)


def test_the_convolutions_from_a_position_on_are_those_of_the_whole_window(checkpoint: Path) -> None:
    # (a re-encoding convolves only the mel frames its first computed position reads: bit for bit the same, for
    # at least STEM_MIN_POSITIONS positions; fewer take another kernel on oneDNN, which sums in another order)
    model = load_model(str(checkpoint), window="audio", window_min_ms=0)
    encoder = model.net.model.encoder
    mel = log_mel_spectrogram(torch.from_numpy(speechlike(6.0)), 80, model.window_frames(96000))[None]
    with torch.inference_mode():
        whole = encoder.stem(mel)
        total = whole.shape[1]
        for first in (1, 2, 37, total - STEM_MIN_POSITIONS):
            assert torch.equal(encoder.stem(mel, first), whole[:, first:])
        assert torch.allclose(encoder.stem(mel, total - 1), whole[:, -1:], atol=1e-6)


def test_a_grown_stream_computes_only_its_recent_audio_and_new_silence(checkpoint: Path) -> None:
    model = load_model(str(checkpoint), window="audio", window_min_ms=10000, window_pad_ms=2000)
    audio = speechlike(12.0)
    first_costs, costs = Costs(), Costs()
    first = model.encode(audio[:64000], first_costs, None, 2.0)  # 4 s: the 10 s window, all 500 positions computed
    assert first.frames.shape[1] == 500 and first_costs.encoder_frames == 1000
    # 4.5 s: 4 s - 2 s = 100 positions kept, the audio to 4.5 s (+2 for the edge: 227) computed, and the window's
    # silence after it kept (the window did not grow)
    positions = model._reencoded(audio[:72000], 500, first.memory, RECENT)
    assert positions is not None and positions.tolist() == list(range(100, 227))
    grown = model.encode(audio[:72000], costs, first, 2.0)
    assert costs.encoder_frames == 2 * 127 and costs.encoder_calls == 1
    assert torch.equal(grown.frames[:, :100], first.frames[:, :100])
    assert torch.equal(grown.frames[:, 227:], first.frames[:, 227:])
    assert not torch.equal(grown.frames[:, 100:227], first.frames[:, 100:227])
    assert [k.shape[2] for k, _ in grown.extra] == [500]
    # 9 s after 8.5 s: the window grew to 11 s; the positions new to it are computed too
    before = model.encode(audio[:136000], Costs(), None, 2.0)
    positions = model._reencoded(audio[:144000], 550, before.memory, RECENT)
    assert positions is not None and positions.tolist() == list(range(325, 452)) + list(range(525, 550))
    later = model.encode(audio[:144000], Costs(), before, 2.0)
    assert later.frames.shape[1] == 550 and torch.equal(later.frames[:, 452:525], before.frames[:, 452:525])


def test_an_encoding_starts_whole_where_the_audio_changed(checkpoint: Path) -> None:
    model = load_model(str(checkpoint), window="audio", window_min_ms=10000)
    audio = speechlike(8.0)
    first = model.encode(audio[:64000], Costs(), None, 2.0)
    assert model._reencoded(audio[:72000] * 2, 500, first.memory, RECENT) is None  # a new level: other samples
    assert model._reencoded(audio[16000:88000], 500, first.memory, RECENT) is None  # a trimmed buffer
    assert model._reencoded(audio[:60000], 500, first.memory, RECENT) is None  # less audio than before
    costs = Costs()
    again = model.encode(audio[16000:88000], costs, first, 2.0)
    assert costs.encoder_frames == 1000
    plain = model.encode(audio[16000:88000], Costs())  # (no reencode_s: the whole window, nothing kept)
    assert torch.equal(again.frames, plain.frames) and plain.memory is None


def test_a_streams_first_seconds_compute_all_their_audio_and_the_silence_near_it(checkpoint: Path) -> None:
    """Under REUSE_MIN_FRAMES (1 s) of audio to keep, every audio position and RECENT (2 s = 100 positions) of the
    silence after it are computed; the farther silence keeps the earlier encoding's states."""
    model = load_model(str(checkpoint), window="audio", window_min_ms=10000)
    audio = speechlike(8.0)
    first = model.encode(audio[:8000], Costs(), None, 2.0)  # 0.5 s: a whole 10 s window (500 positions)
    # 1 s: ceil(16000 / 320) = 50 positions of audio, + 2 at the edge, + 100 of silence
    assert model._reencoded(audio[:16000], 500, first.memory, RECENT).tolist() == list(range(152))
    costs = Costs()
    second = model.encode(audio[:16000], costs, first, 2.0)
    assert costs.encoder_frames == 2 * 152
    assert torch.equal(second.frames[:, 152:], first.frames[:, 152:])
    assert not torch.equal(second.frames[:, :152], first.frames[:, :152])
    # 3.3 s after 2.8 s: 0.8 s would be kept (40 positions, under 50): positions 0-266 (165 of audio + 2 + 100)
    short = model.encode(audio[:44800], Costs(), None, 2.0)
    assert model._reencoded(audio[:52800], 500, short.memory, RECENT).tolist() == list(range(267))
    # 3.5 s after 3 s: 1 s kept (50 positions): as later in a stream, the recent and new audio alone
    after_3s = model.encode(audio[:48000], Costs(), None, 2.0)
    assert model._reencoded(audio[:56000], 500, after_3s.memory, RECENT).tolist() == list(range(50, 177))


def test_the_option_is_checked_and_off_by_default() -> None:
    assert StreamOptions().reencode_s is None
    assert StreamOptions(reencode_s=2.0).reencode_s == 2.0
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(OptionError, match="re-encoded"):
            StreamOptions(reencode_s=bad)


@pytest.fixture(scope="module")
def tiny_en() -> WhisperModel:
    model_options, _ = preset_options("transcribe", "balanced", ModelOptions())
    return load_model(model_options)


def test_a_real_stream_re_encoding_its_last_two_seconds_transcribes_jfk(tiny_en: WhisperModel) -> None:
    _, stream_options = preset_options("transcribe", "balanced", ModelOptions())
    stream = SpeechEngine(tiny_en).open(dataclasses.replace(stream_options, reencode_s=2.0))
    text = " ".join(e.text for e in feed_fast(stream, load_audio(JFK)))
    assert phrase("ask not what your country can do for you ask what you can do for your country") in phrase(text)
    # (jfk's 11 s at 500 ms chunks: far fewer encoder frames computed than its windows hold)
    assert stream.costs.encoder_frames < 0.6 * stream.costs.encoder_calls * 1000


def test_several_streams_encode_together_as_each_alone(checkpoint: Path) -> None:
    model = load_model(str(checkpoint), window="audio", window_min_ms=10000)
    a, b = speechlike(6.0, 1), speechlike(6.0, 2)
    first = model.encode(a[:64000], Costs(), None, 2.0)
    together = model.encode_many([a[:72000], b[:72000]], [Costs(), Costs()], [first, None], [2.0, None])
    alone = [model.encode(a[:72000], Costs(), first, 2.0), model.encode(b[:72000], Costs())]
    for got, want in zip(together, alone, strict=True):
        assert torch.equal(got.frames, want.frames)
    assert together[0].memory is not None and together[1].memory is None
