"""hold-n (Liu et al. 2020; 2022 paper eq. 1): the best hypothesis minus its last n tokens."""

from __future__ import annotations

from collections.abc import Sequence

from simulst.errors import OptionError
from simulst.policies.base import Policy
from simulst.types import Hypothesis


class HoldN(Policy):
    """prefix(W_best^c) = W_{0:max(0, |W|-n)}; nothing if the hypothesis has n or fewer tokens."""

    def __init__(self, n: int) -> None:
        if n < 0:
            raise OptionError(f"hold-n needs n >= 0, got {n}")
        self.n = n

    def stable_prefix(self, hyps: Sequence[Hypothesis]) -> tuple[int, ...]:
        best = hyps[0].tokens
        return tuple(best[: max(0, len(best) - self.n)])
