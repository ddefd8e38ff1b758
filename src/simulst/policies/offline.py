"""The offline 'policy': no chunk is decoded; the buffer is decoded and committed whole only when it must be - the
source ends, the buffer fills the model's window, or (with the VAD) speech pauses."""

from __future__ import annotations

from collections.abc import Sequence

from simulst.policies.base import Policy, PolicyContext, PolicyState
from simulst.policies.registry import register_policy
from simulst.types import Hypothesis


@register_policy("offline", syntax="offline", pattern=r"offline",
                 help="no chunk decoded: the audio is decoded and committed whole when the source ends, when it "
                      "fills the model's window (Whisper: 30 s) and, with --vad, at each pause (the offline "
                      "baseline); in a cascade's MT stage, the source is translated once, at its end")
class Offline(Policy):
    """Never commits on a chunk, so a stream does not decode chunks: its buffer (the model's whole window) is
    decoded and committed whole at the source's end, when it is full, and at a VAD pause (the stream's
    :class:`~simulst.streaming.session.Session`)."""

    commits_early = False

    def stable_prefix(self, hyps: Sequence[Hypothesis], state: PolicyState, context: PolicyContext) -> tuple[int, ...]:
        return ()
