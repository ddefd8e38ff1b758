"""Stable-hypothesis policies (2022 paper §3.3) and the factory that builds one per stream."""

from __future__ import annotations

import math

from simulst.config import PolicyOptions
from simulst.policies.base import Policy, longest_common_prefix
from simulst.policies.ctc_end import CtcEnd
from simulst.policies.hold_n import HoldN
from simulst.policies.local_agreement import LocalAgreement
from simulst.policies.offline import Offline
from simulst.policies.shared_prefix import SharedPrefix
from simulst.policies.wait_k import WaitK

# Speech carries about 3 BPE tokens per second (English, Whisper's tokenizer); wait-k writes that many per chunk.
WAIT_K_TOKENS_PER_SECOND = 3.0

__all__ = [
    "CtcEnd",
    "HoldN",
    "LocalAgreement",
    "Offline",
    "Policy",
    "SharedPrefix",
    "WaitK",
    "longest_common_prefix",
    "make_policy",
]


def make_policy(options: PolicyOptions, chunk_ms: float) -> Policy:
    """A fresh policy object (with empty history) for one stream."""
    if options.name == "la":
        return LocalAgreement(options.n)
    if options.name == "hold":
        return HoldN(options.n)
    if options.name == "sp":
        return SharedPrefix(options.n)
    if options.name == "ctc":
        return CtcEnd()  # the stopping half of the CTC policy is in the searcher (make_searcher)
    if options.name == "wait":
        per_chunk = max(1, math.ceil(WAIT_K_TOKENS_PER_SECOND * chunk_ms / 1000.0))
        return WaitK(options.n, per_chunk)
    return Offline()
