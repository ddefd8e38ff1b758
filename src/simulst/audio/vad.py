"""Voice activity detection with Silero VAD (PyPI ``silero-vad``, which ships its model; MIT).

A :class:`VoiceActivity` follows one stream: fed the stream's audio piece by piece, it reports where speech starts
and where it ends (after a pause of at least ``pause_ms``), as sample positions since the stream began. The
model keeps a recurrent state: the process loads the model once and every stream keeps its own state.

Silero misses quiet speech (on FLEURS recordings peaking at 0.005 of full scale its speech probability stays near
0.01, where Whisper transcribes them well), so the VAD hears the audio through an automatic gain: each window is
scaled so that the loudest peak of the last second reaches half of full scale (at most +40 dB; digital
silence stays silent).
"""

from __future__ import annotations

import threading
import warnings
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulst.errors import ModelLoadError, OptionError

WINDOW = {16000: 512, 8000: 256}  # samples per Silero VAD call (32 ms)
SAMPLE_RATES = frozenset(WINDOW)  # the sample rates Silero VAD reads
GAIN_TARGET = 0.5  # peak level the VAD hears
GAIN_MAX = 100.0  # at most +40 dB
GAIN_MEMORY_S = 1.0  # the gain follows the loudest peak of the last second


_LOCK = threading.RLock()  # guards the one model (its load, and each stream's turn at it)
_MODEL: list[Any] = []  # the process's Silero model, once loaded


def _silero() -> Any:
    """The process's one Silero VAD model (its ONNX export, on ONNX Runtime), loaded at the first call.

    Why ONNX and one copy: the TorchScript model slows down by orders of magnitude once a second copy has been
    loaded in the process, or after some sequences of calls (torch 2.13, silero-vad 6.2), while the ONNX model
    runs every window fast with the same probabilities (to 1e-6); the timings are in the reading of
    ``bench/results/longform.md``. The ONNX Runtime session holds no stream state: streams share it and each keeps
    its own (:class:`_StreamModel`).
    """
    with _LOCK:
        if not _MODEL:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)  # its package-data notice
                    _MODEL.append(_package().load_silero_vad(onnx=True))
            except ImportError as exc:
                raise ModelLoadError("voice activity detection needs onnxruntime (pip install onnxruntime)") from exc
        return _MODEL[0]


def _package() -> Any:
    """The ``silero_vad`` package, imported without its side effect: its first import calls
    ``torch.set_num_threads(1)`` for the whole process, and the models need their threads."""
    import torch

    threads = torch.get_num_threads()
    try:
        import silero_vad
    except ImportError as exc:
        raise ModelLoadError("voice activity detection needs silero-vad (pip install silero-vad)") from exc
    finally:
        torch.set_num_threads(threads)
    return silero_vad


class _StreamModel:
    """One stream's view of the shared Silero model: the wrapper's recurrent state (``_state``, ``_context`` and
    what they were computed for) is swapped in for each of this stream's calls and saved after it."""

    _SLOTS = ("_state", "_context", "_last_sr", "_last_batch_size")

    def __init__(self, model: Any) -> None:
        self._model = model
        self._saved: tuple[Any, ...] | None = None

    def reset_states(self) -> None:
        self._saved = None

    def __call__(self, x: Any, sample_rate: int) -> Any:
        model = self._model
        with _LOCK:
            if self._saved is None:
                model.reset_states()
            else:
                for name, value in zip(self._SLOTS, self._saved, strict=True):
                    setattr(model, name, value)
            out = model(x, sample_rate)
            self._saved = tuple(getattr(model, name) for name in self._SLOTS)
        return out


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
        if sample_rate not in SAMPLE_RATES:
            raise OptionError(f"Silero VAD needs 16000 or 8000 Hz audio, not {sample_rate} Hz")
        if not 0.0 < threshold < 1.0:
            raise OptionError(f"the VAD threshold is a probability in (0, 1), got {threshold}")
        if pause_ms < 0:
            raise OptionError(f"the VAD pause must be >= 0 ms, got {pause_ms}")
        import torch

        self._torch = torch
        self.window = WINDOW[sample_rate]
        model = _StreamModel(_silero())
        self._iterator = _package().VADIterator(model, threshold=threshold, sampling_rate=sample_rate,
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


def holds_speech(audio: np.ndarray, sample_rate: int = 16000, threshold: float = 0.5) -> bool:
    """True when Silero VAD (through the same automatic gain) finds speech anywhere in ``audio``.

    Raises:
        ModelLoadError: ``silero-vad`` or ``onnxruntime`` is not installed.
        OptionError: a sample rate the model does not support, or a threshold outside (0, 1).
    """
    vad = VoiceActivity(sample_rate, threshold)
    return any(event.kind == "start" for event in vad.feed(audio)) or vad.speaking
