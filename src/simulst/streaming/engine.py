"""Engines and streams (the sherpa-onnx shape): a loaded model is a shared engine with no per-stream state, and
``engine.open(options)`` starts a :class:`Stream` that owns everything that changes while it is decoded.

* :class:`SpeechEngine` - a speech model; its streams are :class:`~simulst.streaming.session.Session` s.
* :class:`~simulst.streaming.cascade.CascadeEngine` - ASR → MT (→ speech); its streams are cascades.

Whatever runs streams (the CLI, the evaluation runner) takes an :class:`Engine`.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Protocol

import numpy as np

from simulst.config import ModelOptions, StreamOptions
from simulst.models.base import SpeechModel
from simulst.models.loading import load_model
from simulst.streaming.session import Session
from simulst.types import Costs, Emission


class Stream(Protocol):
    """One stream: push source audio, get committed emissions; ``finish`` when the source ends."""

    @property
    def sample_rate(self) -> int:
        """Samples per second of the audio :meth:`push` takes."""
        ...

    @property
    def chunk_samples(self) -> int:
        """Samples per chunk."""
        ...

    @property
    def next_decode(self) -> int:
        """The sample count at which the stream decodes next."""
        ...

    @property
    def text(self) -> str:
        """The output so far."""
        ...

    @property
    def emissions(self) -> list[Emission]:
        """All emissions so far."""
        ...

    @property
    def costs(self) -> Costs:
        """Work counters."""
        ...

    def push(self, audio: np.ndarray) -> list[Emission]:
        """Read more source audio; returns the new emissions."""
        ...

    def finish(self) -> list[Emission]:
        """The source has ended; returns the last emissions."""
        ...


class Engine(Protocol):
    """Shared models that open streams."""

    @property
    def sample_rate(self) -> int:
        """Samples per second of the streams' audio."""
        ...

    def open(self, options: StreamOptions, catch_up: bool = False) -> Stream:
        """A new stream (``catch_up``: decode once per push when several chunks are pending - real-time use)."""
        ...

    def describe(self) -> dict[str, Any]:
        """A JSON-able description of the loaded models (what a run's ``config.json`` records)."""
        ...


class SpeechEngine:
    """A speech model as an engine: :meth:`open` starts a :class:`~simulst.streaming.session.Session`.

    Args:
        model: the loaded model (shared by every stream).
    """

    def __init__(self, model: SpeechModel) -> None:
        self.model = model

    @property
    def sample_rate(self) -> int:
        """The model's sample rate."""
        return int(self.model.sample_rate)

    @classmethod
    def load(cls, options: ModelOptions) -> SpeechEngine:
        """Load the model the options name (picklable: ``functools.partial(SpeechEngine.load, options)`` loads the
        same model in a worker process)."""
        return cls(load_model(options))

    def open(self, options: StreamOptions, catch_up: bool = False) -> Session:
        """A new stream of this model."""
        return Session(self.model, options, catch_up)

    def describe(self) -> dict[str, Any]:
        """The options the model was loaded with."""
        options = getattr(self.model, "options", None)
        return asdict(options) if isinstance(options, ModelOptions) else {"model": type(self.model).__name__}
