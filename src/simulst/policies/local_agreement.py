"""LA-n, local agreement (Liu et al. 2020, generalised in the 2022 paper eq. 2)."""

from __future__ import annotations

from collections.abc import Sequence

from simulst.policies.base import NPolicy, PolicyContext, PolicyState
from simulst.policies.registry import register_policy
from simulst.sequences import longest_common_prefix
from simulst.types import Hypothesis


@register_policy("la", syntax="la-N", pattern=r"la-?(\d+)",
                 help="local agreement: commit the longest common prefix of the best hypotheses of the last N "
                      "chunks (LA-n, 2022 paper eq. 2)")
class LocalAgreement(NPolicy):
    """Nothing for the first n−1 chunks; then LCP(W_best^{c−n+1}, …, W_best^c)."""

    label = "LA-n"

    def stable_prefix(self, hyps: Sequence[Hypothesis], state: PolicyState, context: PolicyContext) -> tuple[int, ...]:
        state.observe(hyps[:1], self.n)
        if len(state.history) < self.n:
            return ()
        return longest_common_prefix([beams[0] for beams in state.history])
