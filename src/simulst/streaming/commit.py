"""The one commit path of every stream (the ASR :class:`~simulst.streaming.session.Session` and a cascade's
:class:`~simulst.streaming.mt_stage.MTStage`): from a chunk's hypotheses to the emitted increment.

1. :func:`target_tokens` - on a non-final chunk the policy picks a stable prefix of the hypotheses, cut back to a
   whole word of the best one (:func:`whole_words`); when the source has ended, the whole best hypothesis.
2. :meth:`Output.commit` - what extends the committed output is emitted and never changed (2022 paper §3.3:
   nothing shown is retracted); the emitted text is the decoded committed tokens' growth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from simulst.models.base import Tokenizer
from simulst.policies import Policy, PolicyContext, PolicyState
from simulst.types import Costs, Emission, Hypothesis


@dataclass
class Output:
    """What a stream has committed.

    Attributes:
        committed: tokens emitted so far (never retracted).
        text: text emitted so far (the concatenation of the emission texts).
        emissions: every emission.
    """

    committed: list[int] = field(default_factory=list)
    text: str = ""
    emissions: list[Emission] = field(default_factory=list)

    def commit(
        self, target: Sequence[int], tokenizer: Tokenizer, source_ms: float, elapsed_ms: float, final: bool
    ) -> Emission | None:
        """Commit what ``target`` adds to the committed tokens (None when it adds nothing).

        Raises:
            AssertionError: ``target`` does not continue the committed tokens (a searcher or backend bug).
        """
        n_old = len(self.committed)
        if len(target) <= n_old:
            return None
        if list(target[:n_old]) != self.committed:
            raise AssertionError("a hypothesis does not continue the committed output")
        new_tokens = list(target[n_old:])
        self.committed.extend(new_tokens)
        full = tokenizer.decode(self.committed).lstrip()
        # Emissions end at word boundaries, so the decoded text only grows; should a byte-level BPE merge ever
        # change shown characters, the increment falls back to the new tokens' own text - never a retraction.
        increment = full[len(self.text) :] if full.startswith(self.text) else tokenizer.decode(new_tokens)
        self.text += increment
        emission = Emission(increment, tuple(new_tokens), source_ms, elapsed_ms, final)
        self.emissions.append(emission)
        return emission


class StreamData(Protocol):
    """The part of a stream's state every stream has."""

    output: Output
    costs: Costs


class OutputView:
    """``text``, ``emissions`` and ``costs`` of a stream whose ``state`` is :class:`StreamData`."""

    state: StreamData

    @property
    def text(self) -> str:
        """The output so far."""
        return self.state.output.text

    @property
    def emissions(self) -> list[Emission]:
        """All emissions so far."""
        return self.state.output.emissions

    @property
    def costs(self) -> Costs:
        """This stream's work counters."""
        return self.state.costs


def target_tokens(
    hyps: Sequence[Hypothesis],
    final: bool,
    committed: Sequence[int],
    policy: Policy,
    state: PolicyState,
    context: PolicyContext,
) -> Sequence[int]:
    """The tokens a chunk's hypotheses (best first; empty: nothing decoded) justify committing."""
    if final:
        return hyps[0].tokens if hyps else committed
    if not hyps:
        return committed
    stable = policy.stable_prefix(hyps, state, context)
    return stable[: whole_words(stable, hyps[0], context.tokenizer)]


def whole_words(stable: Sequence[int], best: Hypothesis, tokenizer: Tokenizer) -> int:
    """Length of the longest prefix of ``stable`` that ends at a word boundary of the best hypothesis.

    The last word of ``stable`` is complete when the best hypothesis continues with a token that starts a new
    word, ends right after it with ``<eos>``, or when ``stable`` ends in punctuation (CMU 2023 §4: an output is
    delayed by one token unless its last token completes a word or is punctuation). Otherwise the trailing,
    possibly partial, word is held back.
    """
    k = len(stable)
    if k == 0:
        return 0
    following = best.tokens[k] if k < len(best.tokens) else None
    if following is not None and tokenizer.starts_word(following):
        return k
    if following is None and best.finished:
        return k
    if tokenizer.is_punctuation(stable[k - 1]):
        return k
    while k > 0 and not tokenizer.starts_word(stable[k - 1]):
        k -= 1
    return max(0, k - 1)
