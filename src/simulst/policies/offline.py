"""The offline 'policy': commit nothing before the source ends (the final decode commits everything)."""

from __future__ import annotations

from collections.abc import Sequence

from simulst.policies.base import Policy, PolicyContext, PolicyState
from simulst.policies.registry import register_policy
from simulst.types import Hypothesis


@register_policy("offline", syntax="offline", pattern=r"offline",
                 help="decode once, when the source has ended (the offline baseline: no simultaneity)")
class Offline(Policy):
    """Never commits on a non-final chunk, so a stream need not decode before the source ends."""

    commits_early = False

    def stable_prefix(self, hyps: Sequence[Hypothesis], state: PolicyState, context: PolicyContext) -> tuple[int, ...]:
        return ()
