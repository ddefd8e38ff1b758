"""LA-n, local agreement (Liu et al. 2020, generalised in the 2022 paper eq. 2)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from simulst.errors import OptionError
from simulst.policies.base import Policy, longest_common_prefix
from simulst.types import Hypothesis


class LocalAgreement(Policy):
    """Nothing for the first n−1 chunks; then LCP(W_best^{c−n+1}, …, W_best^c)."""

    def __init__(self, n: int) -> None:
        if n < 1:
            raise OptionError(f"LA-n needs n >= 1, got {n}")
        self.n = n
        self._history: deque[tuple[int, ...]] = deque(maxlen=n)

    def stable_prefix(self, hyps: Sequence[Hypothesis]) -> tuple[int, ...]:
        self._history.append(hyps[0].tokens)
        if len(self._history) < self.n:
            return ()
        return longest_common_prefix(list(self._history))
