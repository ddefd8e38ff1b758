"""hold-n (Liu et al. 2020; 2022 paper eq. 1): the best hypothesis minus its last n tokens."""

from __future__ import annotations

from collections.abc import Sequence

from simulst.policies.base import NPolicy, PolicyContext, PolicyState
from simulst.policies.registry import register_policy
from simulst.types import Hypothesis


@register_policy("hold", syntax="hold-N", pattern=r"hold-?(\d+)",
                 help="hold-n: commit the best hypothesis minus its last N tokens (2022 paper eq. 1)")
class HoldN(NPolicy):
    """prefix(W_best^c) = W_{0:max(0, |W|-n)}; nothing if the hypothesis has n or fewer tokens."""

    minimum_n, label = 0, "hold-n"

    def stable_prefix(self, hyps: Sequence[Hypothesis], state: PolicyState, context: PolicyContext) -> tuple[int, ...]:
        best = hyps[0].tokens
        return tuple(best[: max(0, len(best) - self.n)])
