"""A cascade stream: streaming ASR :class:`~simulst.streaming.session.Session` → :class:`MTStage` → optional speech.

Each stage keeps its own state; what one stage commits feeds the next as soon as it is committed. A cascade is a
:class:`~simulst.streaming.engine.Stream` (``push(audio) -> list[Emission]``, ``finish()``, ``text``, ``costs``,
``emissions``, ``chunk_samples``) and :class:`CascadeEngine` an engine, so whatever runs streams (the CLI, the
evaluation runner) runs a cascade unchanged; its emissions are the *translated* increments, timed on the audio
timeline, their spoken span that of the source speech they were made from (:mod:`~simulst.streaming.mt_stage`)::

    engine = CascadeEngine(load_model(), ApertiumMT("eng-spa"), MTOptions(policy=PolicyOptions.parse("la-2")))
    cascade = engine.open(StreamOptions(chunk_ms=1000))
    for piece in audio_pieces:
        for emission in cascade.push(piece):
            print(emission.text, end="", flush=True)
    cascade.finish()
    print(cascade.source_text)                           # the ASR transcript
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from typing import Any

import numpy as np

from simulst.config import StreamOptions
from simulst.errors import OptionError
from simulst.models.base import SpeechModel
from simulst.mt.backend import MTBackend
from simulst.mt.options import MTOptions
from simulst.streaming.mt_stage import MTStage
from simulst.streaming.session import Session
from simulst.tts.timeline import SpeechOutput
from simulst.types import Costs, Emission


def cascade_source(language: str | None) -> str:
    """The language a cascade's speech model transcribes and its MT stage translates from: ``language``, English
    where none is named. (Left to detect the language, a multilingual speech model would hand the MT stage text in
    a language it cannot read.)

    Raises:
        OptionError: ``auto``: the MT stage cannot be chosen for a language not yet heard.
    """
    source = language or "en"
    if source.strip().lower() == "auto":
        raise OptionError("a cascade's MT stage needs the source language: give its code (--language on the "
                          'command line, "language" to the server), not auto')
    return source


class CascadeSession:
    """One stream through ASR → MT (→ TTS); models and backends are shared, the per-stream state is here.

    Args:
        asr: the speech-recognition model (shared).
        mt: the MT backend (shared).
        options: the ASR stage's chunking, search and policy.
        mt_options: the MT stage's policy and search.
        speech: an optional speech output that synthesises each translated increment.
        catch_up: see :class:`~simulst.streaming.session.Session` (real-time use).
    """

    def __init__(
        self,
        asr: SpeechModel,
        mt: MTBackend,
        options: StreamOptions | None = None,
        mt_options: MTOptions | None = None,
        speech: SpeechOutput | None = None,
        catch_up: bool = False,
    ) -> None:
        self.asr = Session(asr, options, catch_up=catch_up)
        self.mt = MTStage(mt, mt_options)
        self.speech = speech
        self.options = self.asr.options
        self.mt_options = self.mt.options

    # ------------------------------------------------------------------------------------ Session's surface
    @property
    def chunk_samples(self) -> int:
        """Samples per ASR chunk."""
        return self.asr.chunk_samples

    @property
    def sample_rate(self) -> int:
        """The ASR model's sample rate."""
        return int(self.asr.model.sample_rate)

    @property
    def next_decode(self) -> int:
        """The sample count at which the ASR decodes next."""
        return self.asr.next_decode

    @property
    def text(self) -> str:
        """The translation so far."""
        return self.mt.text

    @property
    def emissions(self) -> list[Emission]:
        """All translated emissions so far."""
        return self.mt.emissions

    @property
    def costs(self) -> Costs:
        """ASR + MT work counters (a fresh sum; ``extra`` keeps the MT stage's own counts under ``mt_*``)."""
        total = Costs()
        total.add(self.asr.costs)
        mt = self.mt.costs
        total.add(mt)
        total.extra["mt_decoder_calls"] = mt.decoder_calls
        total.extra["mt_encoder_calls"] = mt.encoder_calls
        total.extra["mt_compute_ms"] = round(mt.compute_s * 1000.0)
        return total

    @property
    def source_text(self) -> str:
        """The ASR transcript so far."""
        return self.asr.text

    @property
    def source_emissions(self) -> list[Emission]:
        """The ASR stage's emissions."""
        return self.asr.emissions

    def push(self, audio: np.ndarray) -> list[Emission]:
        """Read more audio; every ASR emission goes through the MT stage at once. Returns translated emissions."""
        out: list[Emission] = []
        for source in self.asr.push(audio):
            out += self._speak(self.mt.push(source.text, source.source_ms, source.elapsed_ms,
                                            (source.start_ms, source.end_ms)))
        return out

    def finish(self) -> list[Emission]:
        """The audio has ended: finish the ASR, then translate the whole transcript once more (no policy)."""
        if self.mt.state.finished:
            return []
        final = self.asr.finish()
        increment = "".join(e.text for e in final)
        source_ms = self.asr.read * 1000.0 / self.asr.model.sample_rate
        elapsed_ms = source_ms + self.asr.costs.compute_s * 1000.0
        starts = [e.start_ms for e in final if e.start_ms is not None]
        ends = [e.end_ms for e in final if e.end_ms is not None]
        spoken = (min(starts), max(ends)) if starts and ends else None
        return self._speak(self.mt.finish(increment, source_ms, elapsed_ms, spoken))

    def _speak(self, emissions: list[Emission]) -> list[Emission]:
        if self.speech is not None:
            for emission in emissions:
                self.speech.add(emission)
        return emissions


class CascadeEngine:
    """The shared models of a cascade, an :class:`~simulst.streaming.engine.Engine`: :meth:`open` starts one stream.

    Args:
        asr: the speech-recognition model.
        mt: the MT backend.
        mt_options: the MT stage's policy and search.
        speech_factory: makes a fresh speech output per stream (None: text only).
    """

    def __init__(
        self,
        asr: SpeechModel,
        mt: MTBackend,
        mt_options: MTOptions | None = None,
        speech_factory: Callable[[], SpeechOutput] | None = None,
    ) -> None:
        self.asr = asr
        self.mt = mt
        self.mt_options = mt_options or MTOptions()
        self.speech_factory = speech_factory

    @property
    def sample_rate(self) -> int:
        """The ASR model's sample rate."""
        return int(self.asr.sample_rate)

    def describe(self) -> dict[str, Any]:
        """The ASR model's options, the MT backend's name and the MT stage's policy."""
        options = getattr(self.asr, "options", None)
        asr = asdict(options) if is_dataclass(options) and not isinstance(options, type) else type(self.asr).__name__
        return {"asr": asr, "mt": self.mt.name, "mt_policy": str(self.mt_options.policy)}

    def open(self, options: StreamOptions, catch_up: bool = False) -> CascadeSession:
        """A new stream with the ASR stage's ``options`` (``catch_up``: as for a speech stream, real-time use)."""
        speech = self.speech_factory() if self.speech_factory is not None else None
        return CascadeSession(self.asr, self.mt, options, self.mt_options, speech, catch_up)
