"""Stop rules: a search asks one, after each decoding step, whether to stop this chunk's search early.

A rule is a stream-independent object; :meth:`StopRule.start` gives the per-search :class:`StopCheck` for one
chunk (it may precompute per-encoding data, e.g. CTC forward variables). The CTC online policy (2023 paper §2.3,
:mod:`simulst.policies.ctc_end`) is the rule that exists so far.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import torch

from simulst.models.base import DecoderModel, Encoded
from simulst.types import Costs


class StopCheck(ABC):
    """The stop decision for the hypotheses of one chunk's search."""

    @abstractmethod
    def __call__(self, tokens: Sequence[int], next_log_probs: torch.Tensor) -> bool:
        """True: stop searching this chunk at hypothesis ``tokens``.

        Args:
            tokens: the hypothesis g (forced prefix included, ``<eos>`` excluded).
            next_log_probs: (V,) the decoder's log-probabilities of the token after g.
        """


class StopRule(ABC):
    """Makes a :class:`StopCheck` for each chunk's search."""

    @abstractmethod
    def start(self, model: DecoderModel, enc: Encoded, prefix: Sequence[int], costs: Costs) -> StopCheck:
        """The check for a search of ``enc`` continuing ``prefix``; ``costs.extra`` may count its work."""
