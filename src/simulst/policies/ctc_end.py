"""The CTC online policy (Polák et al., CUNI-KIT IWSLT 2023, §2.3 and §3.5).

Instead of re-generating the output until it agrees with itself (LA-n), the search of each chunk asks a CTC output
after each token (or word) whether the audio read so far is used up, and stops there: that end test is the
policy's stop rule, :class:`~simulst.search.ctc_end.CtcEndRule`, which the searcher asks before each expansion.
The policy then commits the searched best hypothesis *minus its last token* (the one most likely produced from a
word cut at the chunk's end). The stream cuts the commitment back to whole words - so "drop the last token" and
"drop the last word" coincide: after a word-level stop at g = w_1 … w_k the dropped token belongs to w_k, and w_k
is held back entirely.
"""

from __future__ import annotations

from collections.abc import Sequence

from simulst.policies.base import Policy, PolicyContext, PolicyState
from simulst.search.ctc_end import CtcEndRule
from simulst.search.stopping import StopRule
from simulst.types import Hypothesis


class CtcEnd(Policy):
    """Commit the chunk's best hypothesis minus its last token (the search stopped where the CTC said to).

    Args:
        threshold: C_end (None: the default of the CTC head's kind).
        odds: ``next`` or ``any`` (see :class:`~simulst.search.ctc_end.CtcEndRule`).
    """

    def __init__(self, threshold: float | None = None, odds: str = "next") -> None:
        self.rule = CtcEndRule(threshold, odds)

    def stable_prefix(self, hyps: Sequence[Hypothesis], state: PolicyState, context: PolicyContext) -> tuple[int, ...]:
        best = hyps[0].tokens
        return tuple(best[: max(0, len(best) - 1)])

    def stop_rule(self) -> StopRule:
        return self.rule
