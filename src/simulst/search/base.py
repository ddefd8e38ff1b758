"""The searcher interface: hypotheses for one chunk, continuing a forced (committed) prefix.

A searcher is built once from the options and holds no per-stream data; what a blockwise search carries from one
chunk to the next (the kept active beam, BWBS's beams, improved IBWBS's ``Seen``) lives in the stream's
:class:`SearchState`, passed to every call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from simulst.models.base import DecoderModel, Encoded
from simulst.types import Costs, Hypothesis


@dataclass(frozen=True)
class Query:
    """One chunk's search.

    Attributes:
        enc: the encoding of the source read so far.
        prefix: the committed tokens; force-decoded in one parallel pass.
        max_new_tokens: the most tokens searched after the prefix.
        final: True when the source has ended (every searcher then decodes as offline).
        prompt: the decoder prompt pinned for the stream (None: the model's own, e.g. detected per encoding).
        draft: a guess at the tokens after the prefix (the previous chunk's hypothesis): a searcher that can
            checks it in its forced pass (:class:`~simulst.models.base.AheadDecoder`) - the same hypotheses in
            fewer decoder passes. Others ignore it.
        no_speech_threshold: for a searcher that :meth:`~Searcher.judges_speech`: when the model judges the
            encoding to hold no speech with a higher probability, it returns no hypotheses (None: no judging).
        stop_at_loops: a searcher that can ends the search where its best hypothesis runs into a repetition loop
            past the prefix (:func:`~simulst.sequences.loop_cut`; the stream's loop guard would commit nothing
            from there on); never on a ``final`` query.
        block_loops: a searcher that can never extends a hypothesis with a token that completes a repetition loop
            past the prefix (:func:`~simulst.sequences.ends_in_loop`), so its search takes the best way on that
            says something new: the fallback of a decode committed whole whose best hypothesis ran into a loop.
        next_tokens: a searcher that can take only one of these tokens right after the prefix (``<eos>`` among
            them or not; None: any) and checks no draft: a boundary the stream keeps open
            (``StreamOptions.punctuate_held_end``). Others ignore it.
    """

    enc: Encoded
    prefix: tuple[int, ...]
    max_new_tokens: int
    final: bool = False
    prompt: tuple[int, ...] | None = None
    draft: tuple[int, ...] = ()
    no_speech_threshold: float | None = None
    stop_at_loops: bool = False
    block_loops: bool = False
    next_tokens: tuple[int, ...] | None = None


@dataclass
class SearchState:
    """What a stream's searches carry across chunks.

    Attributes:
        kept: the active beam the next chunk continues (IBWBS, improved IBWBS, rewind; with ``carry_over``).
        beams: BWBS's beams (with ``carry_over``).
        seen: improved IBWBS's ``Seen`` (2023 Alg. 1 l. 1, 16).
        looped: the last search ended where its best hypothesis ran into a repetition loop
            (``Query.stop_at_loops``): a search of the same encoding that must not stop early (``Query.final``)
            would find more.
    """

    kept: tuple[int, ...] = ()
    beams: list[tuple[int, ...]] = field(default_factory=list)
    seen: set[tuple[int, ...]] = field(default_factory=set)
    looped: bool = False


class Searcher(ABC):
    """Searches the continuations of a forced prefix. Every decoder call it makes is counted in ``costs`` by the
    model (one batched call over all beams counts once)."""

    final_differs: bool = True  # False: the search ignores ``Query.final`` (same hypotheses once the source ends)

    @abstractmethod
    def search(self, model: DecoderModel, query: Query, state: SearchState, costs: Costs) -> list[Hypothesis]:
        """Hypotheses (best first, at least one) that start with ``query.prefix``; none when the searcher judges
        the speech (:meth:`judges_speech`) and the encoding holds none."""

    def judges_speech(self, model: DecoderModel) -> bool:
        """True when this searcher applies ``Query.no_speech_threshold`` with ``model`` in its own forced pass (the
        stream then needs no separate no-speech pass)."""
        return False

