"""Stable-hypothesis policies (2022 paper §3.3; the CTC online policy of the 2023 paper; AlignAtt, Papi et al.
2023), each registered by name (:func:`register_policy`), and their factory.

Every module of this package is imported with it, so a new policy is one new module holding its class and the
decorator; ``simulst --list-policies`` shows what is registered.
"""

from __future__ import annotations

import importlib
import pkgutil

from simulst.config import POLICIES, PolicyOptions
from simulst.policies.alignatt import AlignAtt
from simulst.policies.base import Policy, PolicyContext, PolicyState
from simulst.policies.beam_agreement import BeamAgreement
from simulst.policies.ctc_end import CtcEnd
from simulst.policies.hold_n import HoldN
from simulst.policies.local_agreement import LocalAgreement
from simulst.policies.offline import Offline
from simulst.policies.registry import register_policy
from simulst.policies.shared_prefix import SharedPrefix
from simulst.policies.wait_k import WAIT_K_TOKENS_PER_SECOND, WaitK, WaitKWords

__all__ = [
    "WAIT_K_TOKENS_PER_SECOND",
    "AlignAtt",
    "BeamAgreement",
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
    "register_policy",
]

for _module in pkgutil.iter_modules(__path__):  # the policies not imported above register too
    importlib.import_module(f"{__name__}.{_module.name}")


def make_policy(options: PolicyOptions, chunk_ms: float | None) -> Policy:
    """The policy the options name (its registered class's ``from_options``).

    Args:
        options: the policy options.
        chunk_ms: the chunk size of a speech stream; None for a stream of committed source text (a cascade's MT
            stage), where wait-k counts source words.
    """
    policy = POLICIES.lookup(options.name).factory(options, chunk_ms)
    if not isinstance(policy, Policy):
        raise TypeError(f"policy {options.name!r} is registered with a factory that builds no Policy")
    return policy
