"""A file read a block at a time (:class:`AudioReader`, the CLI's reader) gives the samples of the whole-file reader,
holds one block at a time, refuses bad files on opening and says when a file is shorter than its header; the
feeders push a stream the same pieces from the blocks as from the whole array."""

from __future__ import annotations

import itertools
import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from hypothesis import given, settings
from hypothesis import strategies as st

from simulst.audio.container import decode_audio
from simulst.audio.io import AudioReader, load_audio
from simulst.errors import AudioError
from simulst.streaming.feed import feed_fast, feed_realtime
from simulst.types import Emission
from tests.container_fixtures import encode

RATE = 16000


def tone(seconds: float, rate: int = RATE) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * 220.0 * t) * (1 + 0.5 * np.sin(2 * np.pi * 0.7 * t))).astype(np.float32)


def write(path: Path, data: np.ndarray, rate: int = RATE, subtype: str = "PCM_16") -> Path:
    sf.write(str(path), data, rate, subtype=subtype)
    return path


def test_blocks_of_a_16k_file_are_the_whole_files_samples(tmp_path: Path) -> None:
    path = write(tmp_path / "a.wav", tone(2.35))
    with AudioReader(path, block_s=0.3) as reader:
        blocks = list(reader)
    assert max(b.shape[0] for b in blocks) == int(0.3 * RATE) and len(blocks) == 8
    np.testing.assert_array_equal(np.concatenate(blocks), load_audio(path))
    assert reader.duration_s == pytest.approx(2.35, abs=1 / RATE) and not reader.silent()
    assert reader.peak == pytest.approx(float(np.max(np.abs(load_audio(path)))))


def test_a_resampled_stereo_file_matches_the_whole_file_resampling(tmp_path: Path) -> None:
    left = tone(3.0, 44100)
    path = write(tmp_path / "b.flac", np.stack([left, 0.5 * left], axis=1), 44100)
    whole = load_audio(path)
    with AudioReader(path, block_s=0.5) as reader:
        blocks = list(reader)
    streamed = np.concatenate(blocks)
    assert streamed.shape == whole.shape  # the streaming resampler gives every sample the whole-file one does
    assert max(b.shape[0] for b in blocks) <= int(0.5 * RATE) + 200  # (the last holds the resampler's delay)
    assert np.max(np.abs(streamed[200:-200] - whole[200:-200])) < 1e-3


def test_a_container_libsndfile_does_not_read_is_decoded_by_ffmpeg_in_frames(tmp_path: Path) -> None:
    path = tmp_path / "c.m4a"
    path.write_bytes(b"".join(encode(tone(1.5), "m4a")))
    with AudioReader(path) as reader:
        blocks = list(reader)
    assert len(blocks) > 10  # a frame at a time, not the whole file at once
    np.testing.assert_array_equal(np.concatenate(blocks), decode_audio(path, RATE))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: d / "missing.wav", "not found"),
        (lambda d: d, "not a file"),
        (lambda d: (d / "notes.wav").write_text("hello, not audio") and d / "notes.wav", "cannot read"),
        (lambda d: write(d / "empty.wav", np.zeros(0, dtype=np.float32)), "no audio samples"),
    ],
)
def test_bad_files_are_refused_on_opening(tmp_path: Path, make, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(AudioError, match=message):
        AudioReader(make(tmp_path))


def test_nan_samples_raise_when_their_block_is_reached(tmp_path: Path) -> None:
    data = tone(1.0)
    data[12000] = np.nan
    reader = AudioReader(write(tmp_path / "nan.wav", data, subtype="FLOAT"), block_s=0.25)
    blocks = iter(reader)
    assert [next(blocks).shape[0] for _ in range(3)] == [4000] * 3
    with pytest.raises(AudioError, match="NaN"):
        next(blocks)
    reader.close()


def test_a_truncated_wav_is_read_as_far_as_it_goes_with_a_warning(tmp_path: Path) -> None:
    whole = write(tmp_path / "whole.wav", tone(2.0))
    cut = tmp_path / "cut.wav"
    cut.write_bytes(whole.read_bytes()[: 44 + 2 * RATE // 2])  # the header (44 bytes) and 0.5 s of its 2 s
    with AudioReader(cut) as reader:
        samples = np.concatenate(list(reader))
    assert reader.warnings == [f"{cut} is truncated: it holds 0.50 s of the 2.00 s its header announces; "
                               "reading what it holds"]
    np.testing.assert_array_equal(samples, load_audio(whole)[: RATE // 2])
    with AudioReader(whole) as reader:
        assert reader.warnings == []


def test_a_streamed_wav_of_unknown_length_is_not_called_truncated(tmp_path: Path) -> None:
    data = write(tmp_path / "w.wav", tone(0.5)).read_bytes()
    streamed = tmp_path / "streamed.wav"  # RIFF and data sizes 0xFFFFFFFF: what a recorder writing a pipe leaves
    streamed.write_bytes(data[:4] + struct.pack("<I", 0xFFFFFFFF) + data[8:40] + struct.pack("<I", 0xFFFFFFFF)
                         + data[44:])
    with AudioReader(streamed) as reader:
        assert reader.warnings == [] and reader.duration_s == 0 and sum(b.shape[0] for b in reader) == RATE // 2


def test_a_silent_file_reads_as_silent(tmp_path: Path) -> None:
    with AudioReader(write(tmp_path / "s.wav", np.zeros(RATE, dtype=np.float32))) as reader:
        assert sum(b.shape[0] for b in reader) == RATE and reader.silent()


class _Recorder:
    """A stream that records the pieces it is pushed (its decodes due every ``chunk_samples``)."""

    sample_rate = RATE

    def __init__(self, chunk_samples: int) -> None:
        self.chunk_samples = chunk_samples
        self.pieces: list[np.ndarray] = []

    @property
    def next_decode(self) -> int:
        return (sum(p.shape[0] for p in self.pieces) // self.chunk_samples + 1) * self.chunk_samples

    def push(self, audio: np.ndarray) -> list[Emission]:
        self.pieces.append(audio.copy())
        return []

    def finish(self) -> list[Emission]:
        return []


@settings(max_examples=60, deadline=None)
@given(total=st.integers(0, 5000), step=st.integers(1, 700), cuts=st.lists(st.integers(0, 5000), max_size=8))
def test_feed_fast_pushes_the_same_pieces_from_blocks_as_from_the_array(total: int, step: int,
                                                                        cuts: list[int]) -> None:
    audio = np.arange(total, dtype=np.float32)
    bounds = sorted({0, total, *(c for c in cuts if c < total)})
    blocks = [audio[a:b] for a, b in itertools.pairwise(bounds)]
    whole, blocked = _Recorder(step), _Recorder(step)
    feed_fast(whole, audio)  # type: ignore[arg-type]
    feed_fast(blocked, iter(blocks))  # type: ignore[arg-type]
    assert [p.tolist() for p in blocked.pieces] == [p.tolist() for p in whole.pieces]
    assert all(p.shape[0] == step for p in whole.pieces[:-1])


def test_feed_realtime_pushes_every_sample_of_the_blocks_in_order() -> None:
    audio = np.arange(int(0.4 * RATE), dtype=np.float32)
    stream = _Recorder(1600)
    blocks = [audio[:1000], audio[1000:1000], audio[1000:5000], audio[5000:]]
    feed_realtime(stream, iter(blocks))  # type: ignore[arg-type]
    np.testing.assert_array_equal(np.concatenate(stream.pieces), audio)
    assert len(stream.pieces) > 1  # paced: pieces as they arrived, not the whole at once
