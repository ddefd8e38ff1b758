"""What ``simulst serve`` holds: one loaded model (and MT / speech back-ends on demand) that opens streams.

Every stream's model is a variant of the one loaded model (its own language and task, the same weights) seen
through the server's runner (:mod:`simulst.streaming.batching`): with batching, the streams' encoder and decoder
calls are gathered into batched calls; without, the streams' jobs run ``workers`` at a time, each on one core.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from simulst.config import POLICIES, PolicyOptions, StreamOptions
from simulst.errors import OptionError
from simulst.models.base import SpeechModel
from simulst.models.whisper import WhisperModel
from simulst.mt.backend import MTBackend
from simulst.mt.loading import load_mt
from simulst.server.protocol import Limits, StartRequest
from simulst.streaming.batching import Batcher, Runner, ThreadRunner
from simulst.streaming.cascade import CascadeSession, cascade_source
from simulst.streaming.engine import Stream
from simulst.streaming.session import Session, check_window
from simulst.tts.base import SpeechSynthesizer
from simulst.tts.espeak import EspeakSynthesizer


@dataclass(frozen=True)
class ServerConfig:
    """How the server runs.

    Attributes:
        model_name: the name clients see (and may pass as ``model`` to the OpenAI endpoints).
        options: every stream's options; a ``start`` message may change ``chunk_ms``, ``policy``, ``vad`` and
            ``prompt`` (an empty one keeps the server's).
        translate_options: the options of the streams whose task is ``translate`` (Whisper's X → English: the
            translate ``--latency`` preset); None: ``options``.
        limits: what clients may send.
        max_streams: the most concurrent streams (websockets and file requests); more are refused.
        token: a shared secret clients must present (None: none needed).
        transcripts: a directory where every stream's committed output is appended (None: not kept).
        batched: decode concurrent streams in batched model calls (False: each stream's work in its own job).
        workers: without batching, the most jobs at once, each on one core (1: one at a time, on all of torch's
            threads; 0: as many as torch has threads).
        mt: the cascade's MT back-end (``apertium``, or a Hugging Face directory) for ``to`` requests.
        default_language: the source language of a stream that names none (None: the model's own).
        allow_origins: browser origins allowed beside the server's own and loopback ones (``*``: any).
        max_per_client: the most connections (websockets, uploads) one client address may hold open at once.
        max_body_bytes: the largest HTTP request body (an upload).
        shutdown_grace_s: at shutdown, how long open streams get to finish their final decode.
    """

    model_name: str = "whisper-tiny.en"
    options: StreamOptions = field(default_factory=StreamOptions)
    translate_options: StreamOptions | None = None
    limits: Limits = field(default_factory=Limits)
    max_streams: int = 16
    token: str | None = None
    transcripts: Path | None = None
    batched: bool = True
    workers: int = 0
    mt: str = "apertium"
    default_language: str | None = None
    allow_origins: tuple[str, ...] = ()
    max_per_client: int = 8
    max_body_bytes: int = 25 << 20
    shutdown_grace_s: float = 10.0


@dataclass
class OpenedStream:
    """A stream opened for a client, with what its output channels are."""

    stream: Stream
    channels: tuple[str, ...]
    synthesizer: SpeechSynthesizer | None = None

    @property
    def cascade(self) -> CascadeSession | None:
        """The stream as a cascade (None: a speech model's own stream)."""
        return self.stream if isinstance(self.stream, CascadeSession) else None


class Service:
    """The loaded model and its back-ends: opens streams for ``start`` requests.

    Args:
        model: the loaded speech model (shared by every stream).
        config: the server's configuration.

    Raises:
        OptionError: the configured streams' segment or buffer is longer than the model's window (checked at
            start, not at every stream).
    """

    def __init__(self, model: SpeechModel, config: ServerConfig) -> None:
        for options in (config.options, config.translate_options or config.options):
            check_window(options, model)
        self.model = model
        self.config = config
        self.runner: Runner
        if config.batched and isinstance(model, WhisperModel):
            self.runner = Batcher(model, config.max_streams)
        else:
            self.runner = ThreadRunner(config.workers or torch.get_num_threads())
        self._lock = threading.Lock()
        self._mts: dict[tuple[str, str], MTBackend] = {}
        self._voices: dict[str, SpeechSynthesizer] = {}

    @property
    def sample_rate(self) -> int:
        """The model's sample rate (streams' audio is resampled to it)."""
        return int(self.model.sample_rate)

    @property
    def multilingual(self) -> bool:
        """True when the model translates into English and knows other languages than English."""
        return bool(getattr(self.model, "multilingual", False))

    def stream_options(self, start: StartRequest) -> StreamOptions:
        """The server's stream options for the request's task, with the client's choices."""
        options = self.config.options
        if start.task == "translate" and self.config.translate_options is not None:
            options = self.config.translate_options
        changes: dict[str, Any] = {}
        if start.chunk_ms is not None:
            changes["chunk_ms"] = start.chunk_ms
        if start.policy is not None:
            changes["policy"] = PolicyOptions.parse(start.policy)
        if start.vad is not None:
            changes["vad"] = start.vad
        if start.prompt and start.prompt.strip():  # (an empty prompt: the server's own, if any)
            changes["prompt"] = start.prompt
        options = dataclasses.replace(options, **changes)
        if options.policy.needs_ctc_head and getattr(self.model, "ctc_head", None) is None:
            raise OptionError(f"policy {options.policy} needs a CTC head, and this server's model has none "
                              "(start the server with --policy ctc or --ctc-head)")
        return options

    def open(self, start: StartRequest) -> OpenedStream:
        """A new stream for a validated ``start`` request.

        Raises:
            OptionError, ModelLoadError: the model cannot do what the client asks (an English-only model asked to
                translate, an unknown language, an MT pair that is not installed, ...).
        """
        options = self.stream_options(start)
        language = start.language or self.config.default_language
        if start.to:
            if start.task != "transcribe":
                raise OptionError('a cascade ("to") translates the transcript: use task "transcribe" with it')
            source = cascade_source(language)
            asr = self.runner.view(self._variant(source, "transcribe"))
            cascade = CascadeSession(asr, self._mt(source, start.to), options, catch_up=True)
            voice = self._voice(start.to) if start.speech else None
            return OpenedStream(cascade, ("source", "target"), voice)
        if start.speech:
            raise OptionError('speech output needs a cascade into a target language ("to")')
        model = self.runner.view(self._variant(language, start.task))
        channel = "target" if start.task == "translate" else "source"
        return OpenedStream(Session(model, options, catch_up=True), (channel,))

    def _variant(self, language: str | None, task: str) -> SpeechModel:
        model = self.model
        if isinstance(model, WhisperModel):
            return model.variant(None if language == "auto" else language, task)
        if task != "transcribe" or language not in (None, getattr(model, "language", None)):
            raise OptionError(f"this server's model serves only {getattr(model, 'language', None) or 'its'} "
                              "transcription")
        return model

    def _mt(self, source: str, target: str) -> MTBackend:
        with self._lock:
            key = (source, target)
            if key not in self._mts:
                self._mts[key] = load_mt(self.config.mt, source, target, "cpu")
            return self._mts[key]

    def _voice(self, language: str) -> SpeechSynthesizer:
        with self._lock:
            if language not in self._voices:
                self._voices[language] = EspeakSynthesizer(language)
            return self._voices[language]

    def offered_policies(self) -> list[str]:
        """The web page's policy list: an example of every registered policy this server's streams can run (one
        that compares beams only with a beam search, the CTC policy only with a CTC head; the page adds the
        server's default)."""
        greedy = self.config.options.search.name == "greedy"
        has_head = getattr(self.model, "ctc_head", None) is not None
        return [spec.example for spec in POLICIES.entries() if not (spec.needs_beams and greedy)
                and (has_head or not PolicyOptions.parse(spec.example).needs_ctc_head)]

    def describe(self) -> dict[str, Any]:
        """What the web page needs to know (``/api/config``)."""
        options = self.config.options
        limits = self.config.limits
        return {
            "model": self.config.model_name,
            "sample_rate": self.sample_rate,
            "multilingual": self.multilingual,
            "tasks": ["transcribe", "translate"] if self.multilingual else ["transcribe"],
            "policy": str(options.policy),
            "policies": self.offered_policies(),
            "chunk_ms": {"default": options.chunk_ms, "min": limits.min_chunk_ms, "max": limits.max_chunk_ms},
            "vad": options.vad,
            "targets": ["es"] if self.config.mt == "apertium" else [],
            "token_required": self.config.token is not None,
            "batched": isinstance(self.runner, Batcher),
            "max_streams": self.config.max_streams,
        }
