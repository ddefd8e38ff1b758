"""AlignAtt (Papi, Negri, Turchi, Interspeech 2023), the policy SimulStreaming and WhisperLiveKit use by default.

The search of each chunk stops before the first token whose cross-attention (the alignment heads, summed) peaks
within the last F encoder frames of the audio read (:class:`~simulst.search.alignatt.AlignAttRule`, the policy's
stop rule); everything searched before that point is committed, cut back to a whole word by the stream. Works
with greedy and beam search (the rule is asked about the best beam), with the full and the audio-sized window.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from simulst.config import AlignAttPolicyOptions, PolicyOptions
from simulst.errors import OptionError
from simulst.policies.base import Policy, PolicyContext, PolicyState
from simulst.policies.registry import register_policy
from simulst.types import Hypothesis

if TYPE_CHECKING:
    from simulst.search.stopping import StopRule


def _options(match: re.Match[str]) -> PolicyOptions:
    """``alignatt`` (F = 25) or ``alignatt:F``."""
    return AlignAttPolicyOptions() if match.group(1) is None else AlignAttPolicyOptions(frames=int(match.group(1)))


@register_policy("alignatt", syntax="alignatt[:F]", pattern=r"alignatt(?::(\d+))?", options=_options,
                 options_type=AlignAttPolicyOptions, text_source=False,
                 help="AlignAtt: each chunk's search stops before a token whose cross-attention peaks within the "
                      "last F encoder frames of the audio read (default 25 = 0.5 s; Papi et al. 2023)")
class AlignAtt(Policy):
    """Commit the chunk's best hypothesis (its search stopped where the attention reached the audio's end).

    Args:
        frames: F, the frame threshold of the stop rule.
    """

    def __init__(self, frames: int) -> None:
        from simulst.search.alignatt import AlignAttRule  # (torch: loaded when a stream builds the policy)

        self.rule = AlignAttRule(frames)

    @classmethod
    def from_options(cls, options: PolicyOptions, chunk_ms: float | None) -> Policy:
        if not isinstance(options, AlignAttPolicyOptions):
            raise OptionError("AlignAtt's options are AlignAttPolicyOptions (or PolicyOptions.parse('alignatt'))")
        return cls(options.frames)

    def stable_prefix(self, hyps: Sequence[Hypothesis], state: PolicyState, context: PolicyContext) -> tuple[int, ...]:
        return tuple(hyps[0].tokens)

    def stop_rule(self) -> StopRule:
        return self.rule
