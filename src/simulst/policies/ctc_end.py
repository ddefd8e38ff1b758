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

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from simulst.config import CtcPolicyOptions, PolicyOptions
from simulst.errors import OptionError
from simulst.policies.base import Policy, PolicyContext, PolicyState
from simulst.policies.registry import register_policy
from simulst.types import Hypothesis

if TYPE_CHECKING:
    from simulst.search.stopping import StopRule


def _options(match: re.Match[str]) -> PolicyOptions:
    """``ctc``, ``ctc:C`` (C_end, e.g. ``-1.5``, ``inf``), optionally ``:any`` (the odds)."""
    threshold = None if match.group(1) is None else float(match.group(1))
    return CtcPolicyOptions(threshold=threshold, odds=match.group(2) or "next")


@register_policy("ctc", syntax="ctc[:C[:any]]",
                 pattern=r"ctc(?::([-+]?(?:inf|\d+(?:\.\d*)?|\.\d+)))?(?::(next|any))?",
                 options=_options, options_type=CtcPolicyOptions, text_source=False,
                 help="the CTC online policy: each chunk's search stops where a CTC head on the encoder says the "
                      "audio is used up (log Odds_end > C; :any for every continuation), and all but its last "
                      "token is committed (2023 paper §2.3; needs a CTC head)")
class CtcEnd(Policy):
    """Commit the chunk's best hypothesis minus its last token (the search stopped where the CTC said to).

    Args:
        threshold: C_end (None: the default of the CTC head's kind).
        odds: ``next`` or ``any`` (see :class:`~simulst.search.ctc_end.CtcEndRule`).
    """

    def __init__(self, threshold: float | None = None, odds: str = "next") -> None:
        from simulst.search.ctc_end import CtcEndRule  # (torch: loaded when a stream builds the policy)

        self.rule = CtcEndRule(threshold, odds)

    @classmethod
    def from_options(cls, options: PolicyOptions, chunk_ms: float | None) -> Policy:
        if not isinstance(options, CtcPolicyOptions):
            raise OptionError("the CTC policy's options are CtcPolicyOptions (or PolicyOptions.parse('ctc'))")
        return cls(options.threshold, options.odds)

    def stable_prefix(self, hyps: Sequence[Hypothesis], state: PolicyState, context: PolicyContext) -> tuple[int, ...]:
        best = hyps[0].tokens
        return tuple(best[: max(0, len(best) - 1)])

    def stop_rule(self) -> StopRule:
        return self.rule
