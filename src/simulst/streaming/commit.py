"""The one commit path of every stream (the ASR :class:`~simulst.streaming.session.Session` and a cascade's
:class:`~simulst.streaming.mt_stage.MTStage`): from a chunk's hypotheses to the emitted increment.

1. :func:`target_tokens` - on a non-final chunk the policy picks a stable prefix of the hypotheses, cut back to a
   whole word of the best one (:func:`whole_words`); when the source has ended, the whole best hypothesis.
2. :meth:`Output.commit` - what extends the committed output is emitted and never changed (2022 paper §3.3:
   nothing shown is retracted); the emitted text is the decoded committed tokens' growth.

**Spoken times.** Given where each new token was spoken (its start and end), a commit times its emission and
words (:class:`~simulst.types.Word`): a word runs from the start of the token that carries its first character to
the end of the token that carries its last (a character split across tokens belongs to the token that completes
it); the emission, from its first word's start to its last word's end. A token never starts before one committed
earlier (its start is raised to theirs), ends no earlier than it starts, and both lie within the audio read (the
emission's ``source_ms``); so the starts of a stream's emissions never decrease. A word split across emissions
(no whitespace between an emission's first piece and the text before it) is a piece in each, the later one
marked :attr:`~simulst.types.Word.joins_previous`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from simulst.models.base import Tokenizer
from simulst.policies import Policy, PolicyContext, PolicyState
from simulst.types import Costs, Emission, Hypothesis, Word

TAIL_TOKENS = 16  # how far back a commit decodes (to the start of the last word, at most this many tokens)
SENTENCE_ENDS = (".", "?", "!", "。", "？", "！")


@dataclass
class Output:
    """What a stream has committed.

    Attributes:
        committed: tokens emitted so far (never retracted).
        text: text emitted so far (the concatenation of the emission texts).
        emissions: every emission.
        spoken_ms: the latest start of a committed token (no later token starts before it).
    """

    committed: list[int] = field(default_factory=list)
    text: str = ""
    emissions: list[Emission] = field(default_factory=list)
    spoken_ms: float = 0.0

    def commit(
        self, target: Sequence[int], tokenizer: Tokenizer, source_ms: float, elapsed_ms: float, final: bool,
        times: Sequence[tuple[float, float]] | None = None,
    ) -> Emission | None:
        """Commit what ``target`` adds to the committed tokens (None when it adds nothing); ``times``: where each
        added token was spoken, (start, end) in ms (None: untimed; see the module docstring).

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
        # The increment is what decoding adds to the text: decoded from just before the start of the last
        # committed word (a bounded tail, so a long stream's commits stay cheap), which also joins a character
        # split across tokens. Emissions end at word boundaries, so the decoded text only grows; should a
        # byte-level BPE merge ever change shown characters, the increment falls back to the new tokens' own
        # text - never a retraction.
        anchor = n_old
        while anchor > max(0, n_old - TAIL_TOKENS) and not tokenizer.starts_word(self.committed[anchor]):
            anchor -= 1
        anchor -= 1  # one token of context before the word (SentencePiece drops a leading space when decoding)
        if anchor > 0:
            before = tokenizer.decode(self.committed[anchor:n_old])
            after = tokenizer.decode(self.committed[anchor:])
        else:
            before, after = self.text, tokenizer.decode(self.committed).lstrip()
        grown = after.startswith(before)
        increment = after[len(before) :] if grown else tokenizer.decode(new_tokens)
        joins = bool(self.text) and not self.text[-1].isspace()
        self.text += increment
        words: tuple[Word, ...]
        if times is not None and len(times) == len(new_tokens):
            spans = self._clamped(times, source_ms)
            if grown:
                context = self.committed[max(anchor, 0) : n_old]
                ends = text_ends(new_tokens, lambda tokens: _decoded(tokenizer, context + tokens, anchor), before,
                                 increment)
            else:
                ends = text_ends(new_tokens, tokenizer.decode, "", increment)
            words = timed_words(increment, ends, spans, joins)
        else:
            words = tuple(Word(piece, None, None, joins and i == 0 and not increment[0].isspace())
                          for i, piece in enumerate(increment.split()))
        start = words[0].start_ms if words else None
        end = words[-1].end_ms if words else None
        emission = Emission(increment, tuple(new_tokens), source_ms, elapsed_ms, final, start, end, words)
        self.emissions.append(emission)
        return emission

    def _clamped(self, times: Sequence[tuple[float, float]], source_ms: float) -> list[tuple[float, float]]:
        """The tokens' spoken (start, end): starts never before an earlier token's, ends never before the start,
        both within the audio read."""
        spans = []
        for start, end in times:
            start = min(max(start, self.spoken_ms, 0.0), source_ms)
            spans.append((start, min(max(end, start), source_ms)))
            self.spoken_ms = start
        return spans


def _decoded(tokenizer: Tokenizer, tokens: list[int], anchor: int) -> str:
    """The text of ``tokens`` as :meth:`Output.commit` decodes it (from the stream's start: left-stripped)."""
    text = tokenizer.decode(tokens)
    return text if anchor > 0 else text.lstrip()


def text_ends(new_tokens: Sequence[int], decode: Callable[[list[int]], str], before: str, increment: str) -> list[int]:
    """For each of ``new_tokens``, how many characters of ``increment`` are complete once it is decoded: the
    text of ``before``'s tokens plus the new tokens up to it (``decode``) agrees with ``before + increment`` that
    far (a byte-level token that ends inside a character completes nothing). Non-decreasing; the last is
    ``len(increment)``."""
    whole = before + increment
    ends: list[int] = []
    for i in range(1, len(new_tokens) + 1):
        text = decode(list(new_tokens[:i]))
        agree = 0
        limit = min(len(text), len(whole))
        while agree < limit and text[agree] == whole[agree]:
            agree += 1
        ends.append(min(len(increment), max(ends[-1] if ends else 0, agree - len(before))))
    if ends:
        ends[-1] = len(increment)
    return ends


def timed_words(increment: str, ends: Sequence[int], spans: Sequence[tuple[float, float]],
                joins: bool) -> tuple[Word, ...]:
    """The whitespace-separated pieces of ``increment``, each from the start of the token that completes its first
    character to the end of the token that completes its last (``ends``: per token, the characters complete once
    it is decoded; ``spans``: per token, its spoken (start, end)); the first piece ``joins`` the text before when
    it follows it without whitespace."""
    words = []
    for match in re.finditer(r"\S+", increment):
        first = next(k for k, end in enumerate(ends) if end > match.start())
        last = next(k for k, end in enumerate(ends) if end >= match.end())
        words.append(Word(match.group(), spans[first][0], max(spans[last][1], spans[first][0]),
                          joins and match.start() == 0))
    return tuple(words)


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
    hold_sentence_end: bool = False,
    previous: Sequence[int] = (),
) -> Sequence[int]:
    """The tokens a chunk's hypotheses (best first; empty: nothing decoded) justify committing
    (``hold_sentence_end``: less a mark that only the end of the audio read justifies, :func:`held_sentence_end`;
    ``previous``: the previous chunk decode's best hypothesis)."""
    if final:
        return hyps[0].tokens if hyps else committed
    if not hyps:
        return committed
    stable = policy.stable_prefix(hyps, state, context)
    stable = stable[: whole_words(stable, hyps[0], context.tokenizer)]
    if hold_sentence_end:
        return stable[: held_sentence_end(stable, hyps[0], context.tokenizer, previous)]
    return stable


def held_sentence_end(stable: Sequence[int], best: Hypothesis, tokenizer: Tokenizer,
                      previous: Sequence[int] = ()) -> int:
    """Length of ``stable`` without a mark that only the end of the audio read justifies:
    - a full stop, question or exclamation mark (a punctuation-only token) that is the best hypothesis's last token
      is held until the hypothesis continues past it;
    - a punctuation-only token where the ``previous`` chunk decode's best hypothesis ended in such a mark (the
      held mark, kept or replaced: "truth." then "truth, tell me") is held until a word after it is committed too.
    (When the source or its segment ends, the whole best hypothesis is committed.)

    Why: a decode whose audio stops in a pause ends its text there, so "ask not" before a pause reads "Ask not.";
    once committed, that full stop makes the model start a new sentence after it ("Watch your country" for "what
    your country") and lets the buffer be trimmed in mid-sentence. A comma that replaces it, committed alone, forces
    a run-on sentence the model may find unlikely, and the low-confidence guard then holds every decode after it."""
    k = len(stable)
    if k == 0 or not tokenizer.is_punctuation(stable[k - 1]):
        return k
    if k == len(best.tokens) and _sentence_mark(stable[k - 1], tokenizer):
        return k - 1
    if (len(previous) == k and _sentence_mark(previous[k - 1], tokenizer)
            and tuple(previous[: k - 1]) == tuple(stable[: k - 1])):
        return k - 1
    return k


def _sentence_mark(token: int, tokenizer: Tokenizer) -> bool:
    """True for a punctuation-only token that ends a sentence (a full stop, question or exclamation mark)."""
    return tokenizer.is_punctuation(token) and ends_sentence(token, tokenizer)


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


def ends_sentence(token: int, tokenizer: Tokenizer) -> bool:
    """True when ``token``'s text ends a sentence (a full stop, question or exclamation mark)."""
    return tokenizer.decode([token]).rstrip().endswith(SENTENCE_ENDS)


def sentence_start(tokens: Sequence[int], tokenizer: Tokenizer) -> int:
    """Where the last sentence of ``tokens`` starts: after the last token that ends a sentence (0: none)."""
    for i in range(len(tokens) - 1, -1, -1):
        if ends_sentence(tokens[i], tokenizer):
            return i + 1
    return 0
