"""Stop rules: a search asks one, before each expansion, whether to stop this chunk's search early.

A rule is a stream-independent object; :meth:`StopRule.start` gives the per-search :class:`StopCheck` for one
chunk (it may precompute per-encoding data, e.g. CTC forward variables). The CTC online policy's end test
(Polák et al., IWSLT 2023, §2.3: :mod:`simulst.search.ctc_end`) and AlignAtt's attention test (Papi et al.,
Interspeech 2023: :mod:`simulst.search.alignatt`) are such rules.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

from simulst.models.base import DecoderModel, Encoded
from simulst.types import Costs

if TYPE_CHECKING:
    import torch


class StopCheck(ABC):
    """The stop decision for the hypotheses of one chunk's search."""

    @abstractmethod
    def __call__(self, tokens: Sequence[int], next_log_probs: torch.Tensor, state: object) -> bool:
        """True: stop searching this chunk at hypothesis ``tokens``.

        Args:
            tokens: the hypothesis g (forced prefix included, ``<eos>`` excluded), the search's best beam.
            next_log_probs: (V,) the decoder's log-probabilities of the token after g.
            state: the decoder state of the search's beams (g is its first row).
        """


class StopRule(ABC):
    """Makes a :class:`StopCheck` for each chunk's search."""

    needs_alignment: bool = False  # True: the search starts its decoder states with alignment tracking

    @abstractmethod
    def start(self, model: DecoderModel, enc: Encoded, prefix: Sequence[int], costs: Costs) -> StopCheck:
        """The check for a search of ``enc`` continuing ``prefix``; ``costs.extra`` may count its work."""
