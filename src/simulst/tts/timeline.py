"""Speech output on a timeline (Yan et al., CMU IWSLT 2023, §3.3), and its latency: StartOffset, EndOffset.

Each committed text increment is synthesised and its audio is placed at ``max(end of the previous audio, the
time the increment was ready)``, so the translated speech never overlaps itself and never starts before its text
exists. The output timeline shares its origin with the source audio, so

* StartOffset = start of the first speech segment (ms after the source began),
* EndOffset = end of the last speech segment − |X| (the source duration, ms),

as SimulEval scores speech output (Ma et al. 2020). The "ready" time of an increment is its emission's
``source_ms`` (clock ``source``, computation-unaware), or its ``elapsed_ms`` plus the synthesis compute (clock
``elapsed``, computation-aware; the synthesiser works through the increments one after another), or the
wall-clock time at which it was emitted plus the synthesis compute (clock ``wall``, for real-time feeding).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf

from simulst.errors import OptionError, SimulstError
from simulst.tts.base import SpeechSynthesizer
from simulst.types import Emission

CLOCKS = ("source", "elapsed", "wall")


@dataclass(frozen=True)
class SpeechSegment:
    """One synthesised increment on the output timeline.

    Attributes:
        text: the text spoken.
        ready_ms: when the audio could start (its text's emission time, + synthesis on the ``elapsed`` clock).
        start_ms: where it starts: max(end of the previous segment, ready_ms), on the sample grid.
        end_ms: where it ends.
        start_sample: ``start_ms`` in samples of the timeline's rate.
        synthesis_s: compute spent synthesising it.
    """

    text: str
    ready_ms: float
    start_ms: float
    end_ms: float
    start_sample: int
    synthesis_s: float = 0.0


@dataclass(frozen=True)
class SpeechMetrics:
    """Latency and size of one stream's speech output.

    Attributes:
        start_offset_ms: StartOffset (None when nothing was spoken).
        end_offset_ms: EndOffset (None when nothing was spoken).
        speech_ms: total duration of the spoken segments (gaps excluded).
        duration_ms: length of the rendered timeline (source duration if longer).
        segments: number of segments.
        synthesis_s: synthesis compute, all segments.
    """

    start_offset_ms: float | None
    end_offset_ms: float | None
    speech_ms: float
    duration_ms: float
    segments: int
    synthesis_s: float


@dataclass
class SpeechTimeline:
    """Audio segments placed one after another, none before its ready time."""

    sample_rate: int
    segments: list[SpeechSegment] = field(default_factory=list)
    _audio: list[np.ndarray] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if self.sample_rate <= 0:
            raise OptionError(f"sample rate must be > 0, got {self.sample_rate}")

    @property
    def end_sample(self) -> int:
        """The sample after the last segment (0 when empty)."""
        if not self.segments:
            return 0
        return self.segments[-1].start_sample + self._audio[-1].shape[0]

    @property
    def end_ms(self) -> float:
        """Where the last segment ends (0 when empty)."""
        return self.end_sample * 1000.0 / self.sample_rate

    def place(self, audio: np.ndarray, ready_ms: float, text: str = "", synthesis_s: float = 0.0) -> SpeechSegment:
        """Append ``audio`` (mono, the timeline's rate) at max(end of the previous segment, ``ready_ms``)."""
        audio = np.asarray(audio, dtype=np.float32)
        if audio.ndim != 1:
            raise OptionError(f"speech segments must be mono (1-D), got shape {audio.shape}")
        if not np.all(np.isfinite(audio)):
            raise SimulstError("a synthesised speech segment contains NaN or Inf")
        ready_sample = max(0, int(np.ceil(ready_ms * self.sample_rate / 1000.0 - 1e-9)))
        start = max(self.end_sample, ready_sample)
        segment = SpeechSegment(
            text=text,
            ready_ms=ready_ms,
            start_ms=start * 1000.0 / self.sample_rate,
            end_ms=(start + audio.shape[0]) * 1000.0 / self.sample_rate,
            start_sample=start,
            synthesis_s=synthesis_s,
        )
        self.segments.append(segment)
        self._audio.append(audio)
        return segment

    def render(self, min_ms: float = 0.0) -> np.ndarray:
        """The whole output: silence, then each segment at its place; at least ``min_ms`` long."""
        total = max(self.end_sample, int(np.ceil(min_ms * self.sample_rate / 1000.0)))
        out = np.zeros(total, dtype=np.float32)
        for segment, audio in zip(self.segments, self._audio, strict=True):
            out[segment.start_sample : segment.start_sample + audio.shape[0]] = audio
        return out

    def speech(self) -> np.ndarray:
        """The spoken segments back to back, without the waits between them (what ASR-BLEU transcribes)."""
        return np.concatenate(self._audio) if self._audio else np.zeros(0, dtype=np.float32)

    def segment_audio(self) -> list[np.ndarray]:
        """Each segment's audio."""
        return list(self._audio)

    def write(self, path: str | Path, min_ms: float = 0.0) -> Path:
        """Write the rendered output as 16-bit PCM WAV (peaks clipped to [-1, 1])."""
        path = Path(path)
        if path.parent and not path.parent.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
        audio = np.clip(self.render(min_ms), -1.0, 1.0)
        try:
            sf.write(str(path), audio, self.sample_rate, subtype="PCM_16", format="WAV")
        except (OSError, RuntimeError) as err:
            raise SimulstError(f"cannot write {path}: {err}") from err
        return path

    def metrics(self, source_ms: float) -> SpeechMetrics:
        """StartOffset / EndOffset against a source of ``source_ms`` ms, and sizes."""
        speech_ms = sum(a.shape[0] for a in self._audio) * 1000.0 / self.sample_rate
        if not self.segments:
            return SpeechMetrics(None, None, 0.0, source_ms, 0, 0.0)
        return SpeechMetrics(
            start_offset_ms=self.segments[0].start_ms,
            end_offset_ms=self.segments[-1].end_ms - source_ms,
            speech_ms=speech_ms,
            duration_ms=max(self.end_ms, source_ms),
            segments=len(self.segments),
            synthesis_s=sum(s.synthesis_s for s in self.segments),
        )


class SpeechOutput:
    """One stream's speech output: synthesise each emission and place it on the timeline.

    Args:
        synthesizer: the TTS engine (shared).
        clock: ``source`` (ready at the emission's ``source_ms``), ``elapsed`` (ready at its ``elapsed_ms``
            plus the synthesis compute, the synthesiser handling increments one at a time) or ``wall`` (as
            ``elapsed``, from the wall-clock time passed to :meth:`add`).
    """

    def __init__(self, synthesizer: SpeechSynthesizer, clock: str = "source") -> None:
        if clock not in CLOCKS:
            raise OptionError(f"unknown speech clock {clock!r}; choose one of {', '.join(CLOCKS)}")
        self.synthesizer = synthesizer
        self.clock = clock
        self.timeline = SpeechTimeline(synthesizer.sample_rate)
        self._synth_free_ms = 0.0  # elapsed clock: when the synthesiser finishes its previous increment

    def add(self, emission: Emission, wall_ms: float | None = None) -> SpeechSegment | None:
        """Speak an emission's text (nothing for blank text); ``wall_ms``: when it was emitted (clock ``wall``)."""
        if not emission.text.strip():
            return None
        if self.clock == "wall" and wall_ms is None:
            raise OptionError("the wall speech clock needs the wall-clock time of each emission")
        start = time.perf_counter()
        audio = self.synthesizer.synthesize(emission.text)
        synthesis_s = time.perf_counter() - start
        if audio.shape[0] == 0:
            return None
        if self.clock != "source":
            emitted = emission.elapsed_ms if wall_ms is None or self.clock == "elapsed" else wall_ms
            ready = max(emitted, self._synth_free_ms) + synthesis_s * 1000.0
            self._synth_free_ms = ready
        else:
            ready = emission.source_ms
        return self.timeline.place(audio, ready, emission.text.strip(), synthesis_s)

    def metrics(self, source_ms: float) -> SpeechMetrics:
        """See :meth:`SpeechTimeline.metrics`."""
        return self.timeline.metrics(source_ms)

    def write(self, path: str | Path, min_ms: float = 0.0) -> Path:
        """See :meth:`SpeechTimeline.write`."""
        return self.timeline.write(path, min_ms)
