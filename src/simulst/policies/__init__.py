"""Stable-hypothesis policies (2022 paper §3.3; the CTC online policy of the 2023 paper; AlignAtt, Papi et al.
2023) and their factory."""

from __future__ import annotations

import math

from simulst.config import AlignAttPolicyOptions, CtcPolicyOptions, PolicyOptions
from simulst.policies.alignatt import AlignAtt
from simulst.policies.base import Policy, PolicyContext, PolicyState
from simulst.policies.ctc_end import CtcEnd
from simulst.policies.hold_n import HoldN
from simulst.policies.local_agreement import LocalAgreement
from simulst.policies.offline import Offline
from simulst.policies.shared_prefix import SharedPrefix
from simulst.policies.wait_k import WaitK, WaitKWords

# Speech carries about 3 BPE tokens per second (English, Whisper's tokenizer); wait-k writes that many per chunk.
WAIT_K_TOKENS_PER_SECOND = 3.0

__all__ = [
    "AlignAtt",
    "CtcEnd",
    "HoldN",
    "LocalAgreement",
    "Offline",
    "Policy",
    "PolicyContext",
    "PolicyState",
    "SharedPrefix",
    "WaitK",
    "WaitKWords",
    "make_policy",
]


def make_policy(options: PolicyOptions, chunk_ms: float | None) -> Policy:
    """The policy the options name.

    Args:
        options: the policy options.
        chunk_ms: the chunk size of a speech stream; None for a stream of committed source text (a cascade's MT
            stage), where wait-k counts source words.
    """
    if isinstance(options, CtcPolicyOptions):
        return CtcEnd(options.threshold, options.odds)
    if isinstance(options, AlignAttPolicyOptions):
        return AlignAtt(options.frames)
    if options.name == "la":
        return LocalAgreement(options.n)
    if options.name == "hold":
        return HoldN(options.n)
    if options.name == "sp":
        return SharedPrefix(options.n)
    if options.name == "wait":
        if chunk_ms is None:
            return WaitKWords(options.n)
        return WaitK(options.n, max(1, math.ceil(WAIT_K_TOKENS_PER_SECOND * chunk_ms / 1000.0)))
    return Offline()
