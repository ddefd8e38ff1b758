"""BA-n, beam agreement: local agreement of the best hypothesis with any beam of each earlier chunk."""

from __future__ import annotations

from collections.abc import Sequence

from simulst.policies.base import NPolicy, PolicyContext, PolicyState
from simulst.policies.registry import register_policy
from simulst.sequences import longest_common_prefix
from simulst.types import Hypothesis


@register_policy("ba", syntax="ba-N", pattern=r"ba-?(\d+)", needs_beams=True,
                 help="beam agreement: commit the longest prefix of the best hypothesis that one of the beams of "
                      "each of the last N-1 chunks also holds (with greedy search it is LA-n)")
class BeamAgreement(NPolicy):
    """Nothing for the first n−1 chunks; then min over the earlier chunks of max over their beams of
    LCP(W_best^c, beam)."""

    label = "BA-n"

    def stable_prefix(self, hyps: Sequence[Hypothesis], state: PolicyState, context: PolicyContext) -> tuple[int, ...]:
        state.observe(hyps, self.n)
        if len(state.history) < self.n:
            return ()
        best = state.history[-1][0]
        length = len(best)
        for beams in state.history[:-1]:
            length = min(length, max(len(longest_common_prefix([best, tokens])) for tokens in beams))
        return best[:length]
