"""wait-k over chunks (Ma et al. 2019, with a chunk as the source unit): a fixed-schedule baseline.

Nothing is written during the first k−1 chunks; from chunk k on, the output may hold ``tokens_per_chunk`` more
tokens of the best hypothesis after each chunk, i.e. after chunk c at most (c − k + 1)·tokens_per_chunk tokens.
Unlike hold-n / LA-n it ignores how stable the hypothesis is: its latency is set by the schedule alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from simulst.errors import OptionError
from simulst.policies.base import Policy
from simulst.types import Hypothesis


class WaitK(Policy):
    """After chunk c, commit at most (c − k + 1)·tokens_per_chunk tokens of the best hypothesis."""

    def __init__(self, k: int, tokens_per_chunk: int) -> None:
        if k < 1 or tokens_per_chunk < 1:
            raise OptionError(f"wait-k needs k >= 1 and tokens_per_chunk >= 1, got {k}, {tokens_per_chunk}")
        self.k = k
        self.tokens_per_chunk = tokens_per_chunk
        self._chunks = 0

    def stable_prefix(self, hyps: Sequence[Hypothesis]) -> tuple[int, ...]:
        self._chunks += 1
        allowed = max(0, self._chunks - self.k + 1) * self.tokens_per_chunk
        return tuple(hyps[0].tokens[:allowed])
