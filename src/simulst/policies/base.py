"""The policy interface: which prefix of this chunk's hypotheses is stable enough to commit.

A policy object belongs to one stream (it may keep a history of earlier chunks). It sees the hypotheses of
each non-final chunk, best first, and returns a token prefix of the best hypothesis. The session commits only
what extends the committed output, so a policy can never shorten it (2022 paper §3.3). At the end of the source
every policy is bypassed: the session commits the whole final best hypothesis.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from simulst.types import Hypothesis


class Policy(ABC):
    """Stable-hypothesis detection: ``prefix(W^c)`` of the 2022 paper."""

    @abstractmethod
    def stable_prefix(self, hyps: Sequence[Hypothesis]) -> tuple[int, ...]:
        """The stable prefix for this chunk, given its hypotheses ``hyps`` (best first, non-empty)."""


def longest_common_prefix(sequences: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """LCP(·) of the 2022 paper: the longest token prefix shared by all ``sequences`` (empty input: ())."""
    if not sequences:
        return ()
    first = sequences[0]
    length = min(len(s) for s in sequences)
    for i in range(length):
        token = first[i]
        if any(s[i] != token for s in sequences):
            return tuple(first[:i])
    return tuple(first[:length])
