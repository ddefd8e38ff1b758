"""Read an audio file in any format as mono float32 at the model's rate.

libsndfile (soundfile) reads what it knows (wav, flac, ogg / vorbis / opus, mp3); anything else - m4a / mp4 /
aac, webm, mp3 that libsndfile refuses, ... - is decoded with FFmpeg (PyAV, :mod:`simulst.audio.container`).
libsndfile goes first because it reads PCM files exactly and fastest, and every result measured on the shared wav
and flac files was read by it; FFmpeg is the fallback for the containers it does not know.

**A duration limit** (``max_s``, the server's ``--max-audio-s`` for uploads): decoding stops as soon as the audio
decoded passes the limit, raising :class:`AudioTooLong`, and the rest of the file is never decoded (a long upload
costs the server no more than the limit's worth of decoding): libsndfile reads at most one frame past it (a header
that says the file is longer than the limit; a shorter one is read whole, as without a limit), FFmpeg decodes
frame by frame and stops at the first frame past it.
"""

from __future__ import annotations

import io
import math
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
    path = Path(path)
    if not path.exists():
        raise AudioError(f"audio file not found: {path}")
    if not path.is_file():
        raise AudioError(f"not a file: {path}")
    with path.open("rb") as file:
        return _decode(file, sample_rate, str(path))


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
            reason = str(getattr(sndfile_error, "error_string", None) or sndfile_error).rstrip(".")
            ffmpeg_reason = getattr(err.__cause__, "strerror", None) or err
            raise AudioError(f"cannot read {what}: it is not audio that libsndfile ({reason}) or FFmpeg "
                             f"({ffmpeg_reason}) decodes") from err
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
