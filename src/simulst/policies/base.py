"""The policy interface: which prefix of this chunk's hypotheses is stable enough to commit.

A policy is built once from its options and holds no per-stream data: the history it reads (the hypotheses of
earlier chunks, the number of chunks) lives in the stream's :class:`PolicyState`. It sees the hypotheses of each
non-final chunk, best first, and returns a token prefix of the best hypothesis. The stream commits only what
extends the committed output, so a policy can never shorten it (2022 paper §3.3). At the end of the source every
policy is bypassed: the stream commits the whole final best hypothesis.

What a policy changes beyond the prefix it picks is a capability of the policy object, not a name to compare:
``commits_early`` (False: nothing is decoded before the source ends), ``stop_rule`` (a rule the searcher asks
before each expansion: the CTC online policy). A policy is built from its options by :meth:`Policy.from_options`
and registered by name with :func:`~simulst.policies.registry.register_policy`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from simulst.config import PolicyOptions
from simulst.errors import OptionError
from simulst.types import Hypothesis

if TYPE_CHECKING:  # (for the annotations: a policy's module is read without loading the model code)
    from simulst.models.base import Tokenizer
    from simulst.search.stopping import StopRule


@dataclass
class PolicyState:
    """A stream's policy history.

    Attributes:
        chunks: non-final chunks seen so far.
        history: the hypotheses (token tuples, best first) of the most recent chunks, oldest first.
    """

    chunks: int = 0
    history: list[tuple[tuple[int, ...], ...]] = field(default_factory=list)

    def observe(self, hyps: Sequence[Hypothesis], keep: int) -> None:
        """Count a chunk and remember its hypotheses, keeping the last ``keep`` chunks."""
        self.chunks += 1
        self.history.append(tuple(h.tokens for h in hyps))
        del self.history[: max(0, len(self.history) - keep)]


@dataclass(frozen=True)
class PolicyContext:
    """What a policy may read besides the hypotheses.

    Attributes:
        tokenizer: the output vocabulary (word boundaries).
        source_words: words of committed source text (a cascade's MT stage; 0 for speech).
    """

    tokenizer: Tokenizer
    source_words: int = 0


class Policy(ABC):
    """Stable-hypothesis detection: ``prefix(W^c)`` of the 2022 paper."""

    commits_early: bool = True  # False: nothing is committed before the source ends (no decoding needed)
    minimum_n: ClassVar[int] = 0  # the smallest n its options may name

    @classmethod
    def from_options(cls, options: PolicyOptions, chunk_ms: float | None) -> Policy:
        """The policy the (validated) options name; ``chunk_ms`` is the chunk size of a speech stream, None for a
        stream of committed source text (a cascade's MT stage)."""
        return cls()

    @abstractmethod
    def stable_prefix(self, hyps: Sequence[Hypothesis], state: PolicyState, context: PolicyContext) -> tuple[int, ...]:
        """The stable prefix for this chunk, given its hypotheses ``hyps`` (best first, non-empty)."""

    def stop_rule(self) -> StopRule | None:
        """The rule the searcher asks before each expansion (None: the search runs to its own end)."""
        return None


class NPolicy(Policy):
    """A policy with one parameter n (hold-n, LA-n, SP-n), at least ``minimum_n``."""

    minimum_n: ClassVar[int] = 1
    label: ClassVar[str] = "n"

    def __init__(self, n: int) -> None:
        if n < self.minimum_n:
            raise OptionError(f"{self.label} needs n >= {self.minimum_n}, got {n}")
        self.n = n

    @classmethod
    def from_options(cls, options: PolicyOptions, chunk_ms: float | None) -> Policy:
        return cls(options.n)
