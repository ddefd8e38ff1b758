"""Read an audio file in any format as mono float32 at the model's rate.

libsndfile (soundfile) reads what it knows (wav, flac, ogg / vorbis / opus, mp3); anything else - m4a / mp4 /
aac, webm, mp3 that libsndfile refuses, ... - is decoded with FFmpeg (PyAV, :mod:`simulst.audio.container`).
libsndfile goes first because it reads PCM files exactly and fastest, and every result measured on the shared wav
and flac files was read by it; FFmpeg is the fallback for the containers it does not know.

**A file read a block at a time** (:class:`AudioReader`, the CLI's reader): the same decoders, a block at a time, so
that a file of any length is streamed in bounded memory.

**A duration limit** (``max_s``, the server's ``--max-audio-s`` for uploads): decoding stops as soon as the audio
decoded passes the limit, raising :class:`AudioTooLong`, and the rest of the file is never decoded (a long upload
costs the server no more than the limit's worth of decoding): libsndfile reads at most one frame past it (a header
that says the file is longer than the limit; a shorter one is read whole, as without a limit), FFmpeg decodes
frame by frame and stops at the first frame past it.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Generator, Iterator
from contextlib import closing
from pathlib import Path
from typing import BinaryIO

import numpy as np
import soundfile as sf
import soxr

from simulst.errors import AudioError

SILENCE_PEAK = 1e-4  # about -80 dBFS: below this the whole signal is treated as digital silence


class AudioTooLong(AudioError):
    """The audio passed a duration limit; its decoding stopped there.

    Args:
        message: what the user is told.
        limit_s: the limit.
    """

    def __init__(self, message: str, limit_s: float) -> None:
        super().__init__(message)
        self.limit_s = limit_s


def too_long(what: str, limit_s: float) -> AudioTooLong:
    """The error for ``what``, longer than ``limit_s`` seconds."""
    return AudioTooLong(f"{what} is longer than the limit of {limit_s:g} s", limit_s)


def load_audio(path: str | Path, sample_rate: int = 16000) -> np.ndarray:
    """Decode ``path`` (any format: libsndfile's, else FFmpeg's), average its channels, resample to
    ``sample_rate`` (soxr, high quality).

    Raises:
        AudioError: the file is missing, not audio, unreadable, empty, or holds NaN/Inf samples.
    """
    path = _audio_file(path)
    with path.open("rb") as file:
        return _decode(file, sample_rate, str(path))


class AudioReader:
    """An audio file read a block at a time as mono float32 at ``sample_rate``: the memory it holds is one block's,
    whatever the file's length (libsndfile's blocks of ``block_s`` seconds, else FFmpeg's frames; channels averaged,
    resampled by a streaming soxr, high quality). Iterate it once for the blocks, in order.

    Opening reads the header and the first block, so a file that is missing, not audio or empty (or whose first
    block holds NaN/Inf) fails here; a later block that cannot be decoded or holds NaN/Inf raises when the iteration
    reaches it. ``warnings`` says what is odd but readable: a file shorter than its header announces (truncated),
    read as far as it goes.

    Attributes:
        samples: samples read so far (all of them once iterated: ``duration_s``).
        peak: the largest magnitude read so far (:meth:`silent`).
        warnings: one sentence per oddity found on opening.

    Raises:
        AudioError: as :func:`load_audio`.
    """

    def __init__(self, path: str | Path, sample_rate: int = 16000, block_s: float = 10.0) -> None:
        path = _audio_file(path)
        self.what = str(path)
        self.sample_rate = sample_rate
        self.samples = 0
        self.peak = 0.0
        self.warnings: list[str] = []
        self._blocks = self._open(path, block_s)
        self._first = next(self._blocks, None)
        if self._first is None:
            raise AudioError(f"{self.what} holds no audio samples")
        check_audio(self._first, self.what)

    def __iter__(self) -> Iterator[np.ndarray]:
        first, self._first = self._first, None
        if first is not None:
            yield self._count(first)
        for block in self._blocks:
            yield self._count(block)

    def __enter__(self) -> AudioReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file (an unfinished iteration ends)."""
        self._blocks.close()

    @property
    def duration_s(self) -> float:
        """Seconds read so far."""
        return self.samples / self.sample_rate

    def silent(self) -> bool:
        """True when every sample read is below ``SILENCE_PEAK`` in magnitude (as :func:`is_silent`)."""
        return self.peak < SILENCE_PEAK

    def _count(self, block: np.ndarray) -> np.ndarray:
        check_audio(block, self.what)
        self.samples += block.shape[0]
        if block.size:
            self.peak = max(self.peak, float(np.max(np.abs(block))))
        return block

    def _open(self, path: Path, block_s: float) -> Generator[np.ndarray, None, None]:
        """The non-empty blocks: libsndfile's when it opens the file and reads its first block, else FFmpeg's (the
        first block read here either way, so that a file neither reads is refused on opening, naming both
        reasons)."""
        try:
            sound = sf.SoundFile(str(path))
            warnings = _truncation(sound, self.what)
            blocks = self._sndfile_blocks(sound, max(1, int(block_s * sound.samplerate)))
            first = next(blocks, None)
        except (sf.LibsndfileError, RuntimeError, ValueError, TypeError, AudioError) as sndfile_error:
            from simulst.audio.container import decode_blocks

            blocks = decode_blocks(path, self.sample_rate, self.what)
            try:
                first = next((block for block in blocks if block.size), None)
            except AudioError as err:
                raise _unreadable(self.what, sndfile_error, err) from err
            return _then(first, blocks)
        self.warnings += warnings
        return _then(first, blocks)

    def _sndfile_blocks(self, sound: sf.SoundFile, frames: int) -> Generator[np.ndarray, None, None]:
        rate = int(sound.samplerate)
        resampler = None if rate == self.sample_rate else soxr.ResampleStream(rate, self.sample_rate, 1,
                                                                               dtype="float32", quality="HQ")
        with sound:
            if sound.seekable():
                sound.seek(0)  # (libsndfile's Opus decoder reads right only after one)
            while True:
                try:
                    data = sound.read(frames, dtype="float32", always_2d=True)
                except (sf.LibsndfileError, RuntimeError) as err:
                    raise AudioError(f"cannot read {self.what} after {self.duration_s:.2f} s: {err}") from err
                last = data.shape[0] < frames
                mono = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
                mono = np.ascontiguousarray(mono, dtype=np.float32)
                if resampler is not None:
                    mono = np.asarray(resampler.resample_chunk(mono, last=last), dtype=np.float32)
                if mono.size:
                    yield mono
                if last:
                    return


def _audio_file(path: str | Path) -> Path:
    """``path``, checked to be a file (:class:`AudioError`: missing, or not a file)."""
    path = Path(path)
    if not path.exists():
        raise AudioError(f"audio file not found: {path}")
    if not path.is_file():
        raise AudioError(f"not a file: {path}")
    return path


def _unreadable(what: str, sndfile_error: Exception, ffmpeg_error: AudioError) -> AudioError:
    """The error for audio that neither libsndfile nor FFmpeg decodes, with both reasons."""
    reason = str(getattr(sndfile_error, "error_string", None) or sndfile_error).rstrip(".")
    ffmpeg_reason = getattr(ffmpeg_error.__cause__, "strerror", None) or ffmpeg_error
    return AudioError(f"cannot read {what}: it is not audio that libsndfile ({reason}) or FFmpeg ({ffmpeg_reason}) "
                      "decodes")


def _then(first: np.ndarray | None, rest: Generator[np.ndarray, None, None]) -> Generator[np.ndarray, None, None]:
    """``first`` (if any), then ``rest``'s non-empty blocks (closing this closes ``rest``)."""
    with closing(rest):
        if first is not None:
            yield first
        for block in rest:
            if block.size:
                yield block


def _truncation(sound: sf.SoundFile, what: str) -> list[str]:
    """A warning when libsndfile found the file shorter than its header announces (a WAV's data chunk; a streamed
    file's unknown length, announced as 0 or 0xFFFFFFFF bytes, is not a truncation)."""
    log = sound.extra_info
    found = re.search(r"^data\s*:\s*(\d+)\s*\(should be (\d+)\)", log, re.MULTILINE)
    if found is None:
        return []
    announced, held = int(found.group(1)), int(found.group(2))
    if announced <= held or announced >= 0xFFFFFFFF:
        return []
    rate = re.search(r"Bytes/sec\s*:\s*(\d+)", log)
    if rate is None or int(rate.group(1)) == 0:
        return [f"{what} is truncated: its header announces {announced} bytes of audio, the file holds {held}; "
                "reading what it holds"]
    per_s = int(rate.group(1))
    return [f"{what} is truncated: it holds {held / per_s:.2f} s of the {announced / per_s:.2f} s its header "
            "announces; reading what it holds"]


def read_audio_bytes(data: bytes, sample_rate: int = 16000, what: str = "the uploaded audio",
                     max_s: float | None = None) -> np.ndarray:
    """:func:`load_audio` for a file's bytes (an upload), decoded only up to ``max_s`` seconds.

    Raises:
        AudioTooLong: the audio is longer than ``max_s`` (found as soon as that much of it is decoded).
        AudioError: empty, not audio, or holds NaN/Inf samples.
    """
    if not data:
        raise AudioError(f"{what} is empty")
    return _decode(io.BytesIO(data), sample_rate, what, max_s)


def _decode(file: BinaryIO, sample_rate: int, what: str, max_s: float | None = None) -> np.ndarray:
    """libsndfile first; FFmpeg for what it does not read; either stops once past ``max_s`` seconds."""
    try:
        data, rate = _read_sndfile(file, what, max_s)
    except (sf.LibsndfileError, RuntimeError, ValueError, TypeError) as sndfile_error:
        from simulst.audio.container import decode_audio

        file.seek(0)
        try:
            audio = decode_audio(file.read(), sample_rate, what, max_s)
        except AudioTooLong:
            raise
        except AudioError as err:
            raise _unreadable(what, sndfile_error, err) from err
        check_audio(audio, what)
        return audio
    if data.shape[0] == 0:
        raise AudioError(f"{what} holds no audio samples")
    audio = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
    check_audio(audio, what)
    if rate != sample_rate:
        audio = soxr.resample(audio, rate, sample_rate, quality="HQ").astype(np.float32)
    return np.ascontiguousarray(audio, dtype=np.float32)


def _read_sndfile(file: BinaryIO, what: str, max_s: float | None) -> tuple[np.ndarray, int]:
    """The file's frames (frames x channels, float32) and rate, read by libsndfile as ``soundfile.read`` does (from a
    seek to the start: libsndfile's Opus decoder reads right only after one), in one call when the header's length
    is within ``max_s`` seconds (the very samples ``soundfile.read`` gives), else at most one frame past the limit.

    Raises:
        AudioTooLong: more than ``max_s`` seconds of frames.
    """
    with sf.SoundFile(file) as sound:
        rate = int(sound.samplerate)
        if sound.seekable():
            sound.seek(0)
        if max_s is None or sound.frames <= max_s * rate:
            return sound.read(dtype="float32", always_2d=True), rate
        data = sound.read(math.floor(max_s * rate) + 1, dtype="float32", always_2d=True)
    if data.shape[0] > max_s * rate:
        raise too_long(what, max_s)
    return data, rate  # (the header said longer than the audio holds)


def check_audio(audio: np.ndarray, what: str = "audio") -> None:
    """Raise :class:`AudioError` unless ``audio`` is a 1-D array of finite samples."""
    if not isinstance(audio, np.ndarray):
        raise AudioError(f"{what}: expected a numpy array of samples, got {type(audio).__name__}")
    if audio.ndim != 1:
        raise AudioError(f"{what}: expected mono 1-D samples, got shape {audio.shape}")
    if not np.issubdtype(audio.dtype, np.floating) and not np.issubdtype(audio.dtype, np.integer):
        raise AudioError(f"{what}: samples must be numbers, got dtype {audio.dtype}")
    if audio.size and not np.isfinite(audio).all():
        raise AudioError(f"{what}: contains NaN or infinite samples")


def is_silent(audio: np.ndarray) -> bool:
    """True when every sample is below ``SILENCE_PEAK`` in magnitude (digital silence)."""
    return audio.size == 0 or float(np.max(np.abs(audio))) < SILENCE_PEAK
