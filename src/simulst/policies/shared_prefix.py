"""SP-n, shared prefix (Nguyen et al. 2021, generalised in the 2022 paper eq. 3)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from simulst.errors import OptionError
from simulst.policies.base import Policy, longest_common_prefix
from simulst.types import Hypothesis


class SharedPrefix(Policy):
    """Nothing for the first n−1 chunks; then the LCP of all beams of the last n chunks."""

    def __init__(self, n: int) -> None:
        if n < 1:
            raise OptionError(f"SP-n needs n >= 1, got {n}")
        self.n = n
        self._history: deque[list[tuple[int, ...]]] = deque(maxlen=n)

    def stable_prefix(self, hyps: Sequence[Hypothesis]) -> tuple[int, ...]:
        self._history.append([h.tokens for h in hyps])
        if len(self._history) < self.n:
            return ()
        return longest_common_prefix([tokens for beams in self._history for tokens in beams])
