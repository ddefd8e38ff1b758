"""The searcher interface: hypotheses for one chunk, continuing a forced (committed) prefix."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from simulst.models.base import DecoderModel, Encoded
from simulst.types import Costs, Hypothesis


class Searcher(ABC):
    """Searches the continuations of a forced prefix.

    A searcher object belongs to one stream: blockwise searches keep state across chunks. Every decoder call it
    makes is counted in ``costs`` by the model (one batched call over all beams counts once).
    """

    @abstractmethod
    def search(
        self,
        model: DecoderModel,
        enc: Encoded,
        prefix: Sequence[int],
        max_new_tokens: int,
        costs: Costs,
        final: bool,
    ) -> list[Hypothesis]:
        """Hypotheses (best first, at least one) that start with ``prefix``.

        Args:
            model: the decoder.
            enc: the encoding of the source read so far.
            prefix: the committed tokens; force-decoded in one parallel pass.
            max_new_tokens: the most tokens searched after the prefix.
            costs: counters the model increments.
            final: True when the source has ended (offline searchers ignore it).
        """
