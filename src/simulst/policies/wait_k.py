"""wait-k (Ma et al. 2019): a fixed-schedule baseline, over chunks of speech or over words of source text.

* :class:`WaitK` - a chunk is the source unit: nothing is written during the first k−1 chunks; from chunk k on,
  the output may hold ``tokens_per_chunk`` more tokens of the best hypothesis after each chunk, i.e. after chunk c
  at most (c − k + 1)·tokens_per_chunk tokens.
* :class:`WaitKWords` - a cascade's MT stage, whose source is committed text: target word i may be written once
  k + i − 1 source words are committed (γ = 1).

Unlike hold-n / LA-n they ignore how stable the hypothesis is: the latency is set by the schedule alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from simulst.config import PolicyOptions
from simulst.errors import OptionError
from simulst.policies.base import Policy, PolicyContext, PolicyState
from simulst.policies.registry import register_policy
from simulst.types import Hypothesis

# Speech carries about 3 BPE tokens per second (English, Whisper's tokenizer); wait-k writes that many per chunk.
WAIT_K_TOKENS_PER_SECOND = 3.0


@register_policy("wait", syntax="wait-N", pattern=r"wait-?(\d+)", example="wait-3",
                 help="wait-k: nothing for the first N-1 chunks, then about 3 more tokens per second of each chunk; "
                      "in a cascade's MT stage, target word i once N+i-1 source words are committed (Ma et al. 2019)")
class WaitK(Policy):
    """After chunk c, commit at most (c − k + 1)·tokens_per_chunk tokens of the best hypothesis."""

    minimum_n: ClassVar[int] = 1

    def __init__(self, k: int, tokens_per_chunk: int) -> None:
        if k < 1 or tokens_per_chunk < 1:
            raise OptionError(f"wait-k needs k >= 1 and tokens_per_chunk >= 1, got {k}, {tokens_per_chunk}")
        self.k = k
        self.tokens_per_chunk = tokens_per_chunk

    @classmethod
    def from_options(cls, options: PolicyOptions, chunk_ms: float | None) -> Policy:
        """wait-k over chunks of ``chunk_ms`` (:data:`WAIT_K_TOKENS_PER_SECOND`), or over source words
        (:class:`WaitKWords`) when the stream's source is committed text (``chunk_ms`` None)."""
        if chunk_ms is None:
            return WaitKWords(options.n)
        return cls(options.n, max(1, math.ceil(WAIT_K_TOKENS_PER_SECOND * chunk_ms / 1000.0)))

    def stable_prefix(self, hyps: Sequence[Hypothesis], state: PolicyState, context: PolicyContext) -> tuple[int, ...]:
        state.observe((), 0)
        allowed = max(0, state.chunks - self.k + 1) * self.tokens_per_chunk
        return tuple(hyps[0].tokens[:allowed])


class WaitKWords(Policy):
    """The longest prefix of the best hypothesis with at most ``source_words − k + 1`` whole target words, cut
    before the token that would start one word too many."""

    def __init__(self, k: int) -> None:
        if k < 1:
            raise OptionError(f"wait-k needs k >= 1, got {k}")
        self.k = k

    def stable_prefix(self, hyps: Sequence[Hypothesis], state: PolicyState, context: PolicyContext) -> tuple[int, ...]:
        allowed = context.source_words - self.k + 1
        best = hyps[0].tokens
        if allowed <= 0:
            return ()
        words = 0
        for i, token in enumerate(best):
            if context.tokenizer.starts_word(token) or i == 0:
                words += 1
                if words > allowed:
                    return tuple(best[:i])
        return tuple(best)
