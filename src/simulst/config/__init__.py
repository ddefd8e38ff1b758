"""Frozen option groups, validated once when built: how a model is loaded (:mod:`~simulst.config.model`), how a
stream is chunked and searched (:mod:`~simulst.config.stream`, :mod:`~simulst.config.search`), and which policy
commits text (:mod:`~simulst.config.policy`). All are plain picklable values, so a worker process loads and runs
exactly what the parent asked for.

One source of truth: each option's default, validation, command-line flag and help live on its dataclass field
(:mod:`~simulst.config.fields`); the named things the options choose from - policies, searches - live in
registries (:mod:`~simulst.config.registry`) that their implementations fill and the parsers, the errors, the CLI
and the web page read.
"""

from simulst.config.fields import Flag, Nested, auto_or_optional_float, flag, nested, optional_float
from simulst.config.model import PRECISIONS, TASKS, WINDOWS, ModelOptions
from simulst.config.policy import (
    CTC_ODDS,
    POLICIES,
    AlignAttPolicyOptions,
    CtcPolicyOptions,
    PolicyOptions,
    PolicySpec,
    text_policies,
)
from simulst.config.registry import Registry
from simulst.config.search import SEARCHES, SearchOptions, SearchSpec
from simulst.config.stream import CONTEXT_SCOPES, EARLY_LOGPROB_WHEN_TRANSCRIBING, StreamOptions

__all__ = [
    "CONTEXT_SCOPES",
    "CTC_ODDS",
    "EARLY_LOGPROB_WHEN_TRANSCRIBING",
    "POLICIES",
    "PRECISIONS",
    "SEARCHES",
    "TASKS",
    "WINDOWS",
    "AlignAttPolicyOptions",
    "CtcPolicyOptions",
    "Flag",
    "ModelOptions",
    "Nested",
    "PolicyOptions",
    "PolicySpec",
    "Registry",
    "SearchOptions",
    "SearchSpec",
    "StreamOptions",
    "auto_or_optional_float",
    "flag",
    "nested",
    "optional_float",
    "text_policies",
]
