"""The MT backend interface of the cascade's MT stage, and the backend that drives any text decoder model.

A backend is shared by many streams and holds no per-stream state; each call gets an :class:`MTRequest` with the
stream's searcher and its search state. ``translate`` returns hypotheses that start with the committed target
tokens ``prefix`` - by forced decoding for a neural model, by aligning a fresh translation to the prefix for a
black box.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from simulst.models.base import DecoderModel, Encoded, Tokenizer
from simulst.mt.options import MTOptions
from simulst.search import Query, Searcher, SearchState, make_searcher
from simulst.types import Costs, Hypothesis


@dataclass(frozen=True)
class MTRequest:
    """One translation of a stream's MT stage.

    Attributes:
        source: the source text committed so far (stripped, non-empty).
        prefix: the committed target tokens; every hypothesis starts with them.
        final: True when the source has ended.
        options: the MT options (search budget).
        searcher: the stream's searcher (neural backends).
        state: what the stream's searches carry across steps.
    """

    source: str
    prefix: tuple[int, ...] = ()
    final: bool = True
    options: MTOptions = field(default_factory=MTOptions)
    searcher: Searcher | None = None
    state: SearchState = field(default_factory=SearchState)

    def search(self) -> Searcher:
        """The searcher (the options' one when none was given)."""
        return self.searcher if self.searcher is not None else make_searcher(self.options.search)


class MTBackend(ABC):
    """A translator of source text into target tokens, driven by :class:`~simulst.streaming.mt_stage.MTStage`."""

    name: str = "mt"
    searches: bool = True  # False: a black box that takes no search options (``MTOptions.search``: Apertium)

    @property
    @abstractmethod
    def tokenizer(self) -> Tokenizer:
        """The target vocabulary of the token ids in the hypotheses."""

    @abstractmethod
    def translate(self, request: MTRequest, costs: Costs) -> list[Hypothesis]:
        """Hypotheses (best first) of the translation of ``request.source`` that continue ``request.prefix``;
        ``costs`` are the work counters the backend increments."""

    def translate_text(self, source: str, options: MTOptions | None = None) -> str:
        """Offline translation of a whole source text (what the MT stage equals when the source arrives at once)."""
        options = options or MTOptions()
        source = " ".join(source.split())
        if not source:
            return ""
        hyps = self.translate(MTRequest(source, options=options), Costs())
        return self.tokenizer.decode(hyps[0].tokens).strip() if hyps else ""


@runtime_checkable
class TextDecoderModel(DecoderModel, Protocol):
    """A text-to-text model: a text encoder plus a :class:`~simulst.models.base.DecoderModel`."""

    def encode_text(self, text: str, costs: Costs) -> Encoded:
        """Encode a source text; ``Encoded.frames`` is (1, S, D) over its S source tokens."""
        ...


class NeuralMT(MTBackend):
    """An MT backend over a :class:`TextDecoderModel`: re-encode the source prefix, force-decode the committed
    target tokens in one parallel pass, and continue them with the stream's searcher (the same searchers as the
    speech models)."""

    def __init__(self, model: TextDecoderModel, name: str = "neural") -> None:
        self.model = model
        self.name = name

    @property
    def tokenizer(self) -> Tokenizer:
        return self.model.tokenizer

    def translate(self, request: MTRequest, costs: Costs) -> list[Hypothesis]:
        prefix, options = request.prefix, request.options
        enc = self.model.encode_text(request.source, costs)
        room = self.model.max_length - len(prefix)
        if options.search.max_new_tokens is not None:
            max_new = min(options.search.max_new_tokens, room)
        else:
            max_new = min(options.budget(int(enc.frames.shape[1])) - len(prefix), room)
        max_new = max(0, max_new)
        return request.search().search(self.model, Query(enc, prefix, max_new, request.final), request.state, costs)
