"""Input level: quiet recordings are amplified before the model hears them.

Whisper's log-mel front end is not level-invariant: its features are log10 power shifted by a constant, so a
recording 40 dB below the usual level reaches the encoder as a spectrogram shifted down by 1 (in the normalised
units of ``(log10 + 4) / 4``), far from anything it was trained on. Some FLEURS recordings peak at -49 dBFS; Whisper
tiny.en hears "and confluence" for "and can fly" there, and the right words once the audio is lifted (the
offline WER with and without: ``bench/results/performance.md``).

The gain is computed from the audio being decoded (the stream's buffer up to the decode point), so it is causal and
follows a change of speaker once the buffer has been trimmed; it never attenuates, and it is capped (``MAX_GAIN``)
so that near-silence is not lifted into loud noise.
"""

from __future__ import annotations

import numpy as np

MAX_GAIN = 100.0  # +40 dB


def peak_gain(audio: np.ndarray, target: float, max_gain: float = MAX_GAIN) -> float:
    """The gain that lifts the loudest sample of ``audio`` to ``target`` (full scale 1.0): at least 1 (loud audio
    is left as it is), at most ``max_gain``; 1 for empty audio.

    >>> round(peak_gain(np.array([0.01, -0.03], dtype=np.float32), 0.3), 6)
    10.0
    >>> peak_gain(np.array([0.5, -0.2], dtype=np.float32), 0.3)
    1.0
    """
    if not target > 0 or not max_gain >= 1:
        raise ValueError(f"need a target level > 0 and a maximum gain >= 1, got {target} and {max_gain}")
    peak = float(np.max(np.abs(audio))) if audio.size else 0.0
    if peak <= 0.0:
        return 1.0
    return float(min(max_gain, max(1.0, target / peak)))


def normalize_level(audio: np.ndarray, target: float | None) -> np.ndarray:
    """``audio`` amplified by :func:`peak_gain` (``target`` None: unchanged, the same array)."""
    if target is None:
        return audio
    gain = peak_gain(audio, target)
    return audio if gain == 1.0 else (audio * np.float32(gain)).astype(np.float32, copy=False)
