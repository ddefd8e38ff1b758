"""Voice activity segmentation of a stream (``--vad``): where speech starts and pauses.

Silero VAD (:class:`~simulst.audio.vad.VoiceActivity`) hears the source as it is read. While the buffer holds no
speech, chunks are not decoded and the silence is dropped; a pause of ``vad_pause_ms`` ends a segment, which the
stream then commits whole; a pause of ``context_reset_s`` or more starts the previous-text context afresh.

A :data:`VoiceListener` may follow the segmentation (the server's Realtime endpoint turns it into its speech
events): it is told every speech start and end the detector reports, as soon as it reports them, and each end
again once the stream has taken it (committed the segment it ends).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Protocol

import numpy as np

from simulst.audio.vad import SAMPLE_RATES as VAD_RATES
from simulst.audio.vad import VoiceActivity, VoiceEvent
from simulst.config import StreamOptions
from simulst.errors import OptionError
from simulst.types import Costs

VoiceListener = Callable[[str, int], None]
"""Told ``(kind, sample)``: ``start`` / ``end`` for each speech start and end the detector reports (those that do
not reset the context included), right after it heard the audio, before the stream commits anything of it; then
``taken`` for an end once the stream has taken it (its segment committed)."""


class VoiceDetector(Protocol):
    """What the segmenter needs of a voice activity detector (:class:`~simulst.audio.vad.VoiceActivity`)."""

    @property
    def window(self) -> int:
        """Samples per step: the detector hears the stream in whole windows of this many samples."""
        ...

    @property
    def speaking(self) -> bool:
        """True while speech goes on (no pause heard since it started)."""
        ...

    def feed(self, audio: np.ndarray) -> list[VoiceEvent]:
        """Hear more audio; the speech starts and ends (pauses) it completes."""
        ...


class VadSegmenter:
    """Where one stream's speech is.

    Args:
        detector: the stream's own voice activity detector.
        rate: samples per second.
        reset_samples: a pause at least this long starts the previous-text context afresh.
        listener: told what the segmenter hears (:data:`VoiceListener`; None: no one).

    Attributes:
        speech_in_buffer: the stream's audio buffer holds speech (else it is not decoded).
        pause_from: the source sample where the current pause began (None while speaking or before any speech).
    """

    def __init__(self, detector: VoiceDetector, rate: int, reset_samples: float,
                 listener: VoiceListener | None = None) -> None:
        self.detector, self.rate = detector, rate
        self.reset_samples = reset_samples
        self.listener = listener
        self.speech_in_buffer = False
        self.pause_from: int | None = None

    @classmethod
    def for_stream(cls, options: StreamOptions, rate: int) -> VadSegmenter:
        """The segmenter of a stream with these options: its own Silero VAD.

        Raises:
            OptionError: a model sample rate Silero cannot read (the message says how to turn the VAD off, which
                the transcribe ``balanced`` preset turns on), or a bad threshold or pause.
        """
        if rate not in VAD_RATES:
            raise OptionError(f"Silero VAD reads 16000 or 8000 Hz audio and this model's is {rate} Hz: turn the "
                              "VAD off (--no-vad; StreamOptions(vad=False))")
        detector = VoiceActivity(rate, options.vad_threshold, options.vad_pause_ms)
        return cls(detector, rate, options.context_reset_s * rate)

    @property
    def silent(self) -> bool:
        """No speech goes on and none is in the buffer: its audio may be dropped."""
        return not self.detector.speaking and not self.speech_in_buffer

    def hear(self, audio: np.ndarray, costs: Costs) -> Iterator[VoiceEvent]:
        """Hear the next source samples (the detector's time counted as compute): the speech starts that end a
        pause long enough to reset the context, and the pauses (speech ends), in order - each taken before the
        segmenter moves on, as the stream commits the segment a pause ends."""
        start = time.perf_counter()
        events = self.detector.feed(audio)
        costs.compute_s += time.perf_counter() - start
        self._tell(*((event.kind, event.sample) for event in events))
        for event in events:
            if event.kind == "start":
                pause = event.sample - self.pause_from if self.pause_from is not None else 0
                self.speech_in_buffer, self.pause_from = True, None
                if pause >= self.reset_samples:
                    yield event
            else:
                self.pause_from = event.sample
                yield event
                self._tell(("taken", event.sample))

    def _tell(self, *heard: tuple[str, int]) -> None:
        if self.listener is not None:
            for kind, sample in heard:
                self.listener(kind, sample)

    def silence_to_drop(self, samples: int) -> int:
        """How many of the buffer's ``samples`` to drop as silence: all but the last 0.5 s (where speech would
        start again) while no speech goes on and none is in the buffer; else none."""
        keep = self.rate // 2
        return samples - keep if self.silent and samples > keep else 0
