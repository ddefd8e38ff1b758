"""The offline 'policy': commit nothing before the source ends (the final decode commits everything)."""

from __future__ import annotations

from collections.abc import Sequence

from simulst.policies.base import Policy
from simulst.types import Hypothesis


class Offline(Policy):
    """Never commits on a non-final chunk."""

    def stable_prefix(self, hyps: Sequence[Hypothesis]) -> tuple[int, ...]:
        return ()
