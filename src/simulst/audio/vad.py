"""Voice activity detection with Silero VAD (PyPI ``silero-vad``, which ships its model; MIT).

A :class:`VoiceActivity` follows one stream: fed the stream's audio piece by piece, it reports where speech starts
and where it ends (after a pause of at least ``pause_ms``), as sample positions since the stream began. The
model keeps a recurrent state, so every stream has its own copy (2 MB; loading it takes milliseconds).

Silero misses quiet speech (on FLEURS recordings peaking at 0.005 of full scale its speech probability stays near
0.01, where Whisper transcribes them well), so the VAD hears the audio through an automatic gain: each window is
scaled so that the loudest peak of the last second reaches half of full scale (at most +40 dB; digital
silence stays silent).
"""

from __future__ import annotations

import warnings
from collections import deque
from dataclasses import dataclass

import numpy as np

from simulst.errors import ModelLoadError, OptionError

WINDOW = {16000: 512, 8000: 256}  # samples per Silero VAD call (32 ms)
GAIN_TARGET = 0.5  # peak level the VAD hears
GAIN_MAX = 100.0  # at most +40 dB
GAIN_MEMORY_S = 1.0  # the gain follows the loudest peak of the last second


@dataclass(frozen=True)
class VoiceEvent:
    """Speech starts (``start``) or ends (``end``, reported once the pause is long enough) at ``sample``."""

    kind: str
    sample: int


class VoiceActivity:
    """Silero VAD over one stream.

    Args:
        sample_rate: 16000 or 8000 (what the model supports).
        threshold: speech probability above which a 32 ms window counts as speech (Silero's default 0.5).
        pause_ms: silence after speech that ends it (reported that late).
        pad_ms: the reported speech boundaries are widened by this much (Silero's ``speech_pad_ms``).

    Raises:
        ModelLoadError: ``silero-vad`` is not installed.
        OptionError: a sample rate the model does not support, or a threshold outside (0, 1).
    """

    def __init__(self, sample_rate: int = 16000, threshold: float = 0.5, pause_ms: float = 500.0,
                 pad_ms: float = 30.0) -> None:
        if sample_rate not in WINDOW:
            raise OptionError(f"Silero VAD needs 16000 or 8000 Hz audio, not {sample_rate} Hz")
        if not 0.0 < threshold < 1.0:
            raise OptionError(f"the VAD threshold is a probability in (0, 1), got {threshold}")
        if pause_ms < 0:
            raise OptionError(f"the VAD pause must be >= 0 ms, got {pause_ms}")
        import torch

        threads = torch.get_num_threads()
        try:  # lazy: an optional dependency, loaded only by streams that use it
            from silero_vad import VADIterator, load_silero_vad
        except ImportError as exc:
            raise ModelLoadError("voice activity detection needs silero-vad (pip install silero-vad)") from exc
        finally:  # its first import sets torch.set_num_threads(1) for the whole process; the models need theirs
            torch.set_num_threads(threads)

        self._torch = torch
        self.window = WINDOW[sample_rate]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # its package-data and torch.jit notices
            model = load_silero_vad()
        self._iterator = VADIterator(model, threshold=threshold, sampling_rate=sample_rate,
                                     min_silence_duration_ms=int(pause_ms), speech_pad_ms=int(pad_ms))
        self._rest = np.zeros(0, dtype=np.float32)
        self._peaks: deque[float] = deque(maxlen=max(1, round(GAIN_MEMORY_S * sample_rate / self.window)))
        self.speaking = False

    def feed(self, audio: np.ndarray) -> list[VoiceEvent]:
        """Read the next samples of the stream; the speech starts and ends found (in order)."""
        buffer = np.concatenate([self._rest, np.asarray(audio, dtype=np.float32)])
        whole = buffer.shape[0] // self.window * self.window
        events: list[VoiceEvent] = []
        with self._torch.inference_mode():
            for pos in range(0, whole, self.window):
                window = buffer[pos : pos + self.window]
                self._peaks.append(float(np.abs(window).max()))
                loudest = max(self._peaks)
                gain = min(GAIN_MAX, GAIN_TARGET / loudest) if loudest > 0 else 1.0
                found = self._iterator(self._torch.from_numpy(window * np.float32(gain)))
                if found:
                    kind = "start" if "start" in found else "end"
                    self.speaking = kind == "start"
                    events.append(VoiceEvent(kind, int(found[kind])))
        self._rest = buffer[whole:]
        return events
