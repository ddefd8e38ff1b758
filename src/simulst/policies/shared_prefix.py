"""SP-n, shared prefix (Nguyen et al. 2021, generalised in the 2022 paper eq. 3)."""

from __future__ import annotations

from collections.abc import Sequence

from simulst.policies.base import NPolicy, PolicyContext, PolicyState
from simulst.policies.registry import register_policy
from simulst.sequences import longest_common_prefix
from simulst.types import Hypothesis


@register_policy("sp", syntax="sp-N", pattern=r"sp-?(\d+)", needs_beams=True,
                 help="shared prefix: commit the longest common prefix of all beams of the last N chunks (SP-n, "
                      "2022 paper eq. 3; with greedy search it is LA-n)")
class SharedPrefix(NPolicy):
    """Nothing for the first n−1 chunks; then the LCP of all beams of the last n chunks."""

    label = "SP-n"

    def stable_prefix(self, hyps: Sequence[Hypothesis], state: PolicyState, context: PolicyContext) -> tuple[int, ...]:
        state.observe(hyps, self.n)
        if len(state.history) < self.n:
            return ()
        return longest_common_prefix([tokens for beams in state.history for tokens in beams])
