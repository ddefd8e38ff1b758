"""Read any audio file soundfile understands (wav, flac, ogg, ...) as mono float32 at the model's rate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from simulst.errors import AudioError

SILENCE_PEAK = 1e-4  # about -80 dBFS: below this the whole signal is treated as digital silence


def load_audio(path: str | Path, sample_rate: int = 16000) -> np.ndarray:
    """Decode ``path``, average its channels, resample to ``sample_rate`` (soxr, high quality).

    Raises:
        AudioError: the file is missing, not audio, unreadable, empty, or holds NaN/Inf samples.
    """
    path = Path(path)
    if not path.exists():
        raise AudioError(f"audio file not found: {path}")
    if not path.is_file():
        raise AudioError(f"not a file: {path}")
    try:
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, ValueError, TypeError) as err:
        raise AudioError(f"cannot read {path} as audio (supported: wav, flac, ogg, ...): {err}") from err
    if data.shape[0] == 0:
        raise AudioError(f"{path} holds no audio samples")
    audio = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
    check_audio(audio, str(path))
    if rate != sample_rate:
        audio = soxr.resample(audio, rate, sample_rate, quality="HQ").astype(np.float32)
    return np.ascontiguousarray(audio, dtype=np.float32)


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
