"""Sequence algorithms the whole pipeline shares: the longest common prefix, the edit distance, and the repetition
loops of a decoder's output (what the stream's loop guard never commits and a chunk's search stops at)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from itertools import pairwise


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


def edit_distance(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """Levenshtein distance between two sequences (words or characters; unit cost substitution, insertion,
    deletion)."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


LOOP_MAX_NGRAM = 16  # tokens: the longest n-gram checked for immediate repetition
LOOP_SPAN = 12  # tokens: a span said a third time ...
LOOP_LOOKBACK = 100  # ... within this many tokens of its first time is a loop
COPY_SPAN = 6  # tokens: a span said a second time ...
COPY_LOOKBACK = 60  # ... within this many tokens of its first time (about 15 s of speech) is a loop


def loop_cut(tokens: Sequence[int], end: int, first: int = 0) -> int | None:
    """Where the loop that ``tokens[:end]`` ends in starts its extra copy (None: it ends in no loop), looking back
    no further than position ``first`` for earlier copies of a span.

    A loop is an n-gram of 1-3 tokens following itself more than 3 times in a row, a longer one (up to 16 tokens)
    more than twice (the cut: where the extra copy starts), a span of 12 tokens said a third time within 100 tokens
    of its first (a sentence repeated with small changes in between), or a span of 6 tokens said again within 60
    tokens: Whisper reading the audio of a sentence it has transcribed a second time ("... the chemical is. The
    cabbage juice changes color ..."), which speakers seldom do word for word within a few seconds. Earlier copies
    of a span end before the copy at ``end`` starts."""
    found = loop_span(tokens, end, first)
    return None if found is None else found[0]


def loop_span(tokens: Sequence[int], end: int, first: int = 0) -> tuple[int, int] | None:
    """:func:`loop_cut` and where the copy it cuts repeats from: (where the extra copy starts, where the copy
    before it starts), or None."""
    for n in range(1, LOOP_MAX_NGRAM + 1):
        copies = 4 if n <= 3 else 3  # one more than allowed
        if n * copies > end:
            break
        gram = tokens[end - n : end]
        if all(tokens[end - k * n - n : end - k * n] == gram for k in range(1, copies)):
            return end - n, end - 2 * n
    copy = end - LOOP_SPAN
    if copy >= first:
        span = tokens[copy:end]
        earlier = [o for o in range(max(first, copy - LOOP_LOOKBACK), copy - LOOP_SPAN + 1)
                   if tokens[o] == span[0] and tokens[o : o + LOOP_SPAN] == span]
        if len(earlier) >= 2 and earlier[-1] - earlier[0] >= LOOP_SPAN:
            return copy, earlier[-1]
    again = end - COPY_SPAN
    if again >= first:
        span = tokens[again:end]
        for o in range(again - COPY_SPAN, max(first, again - COPY_LOOKBACK) - 1, -1):
            if tokens[o] == span[0] and tokens[o : o + COPY_SPAN] == span:
                return again, o
    return None


def loop_free_length(tokens: Sequence[int], start: int) -> int:
    """Length of the longest prefix of ``tokens`` (at least ``start``) free of repetition loops (:func:`loop_cut`):
    the loop guard against Whisper's "however, however, however, ..." and a sentence said again and again.

    The cut comes where the extra copy starts; tokens before ``start`` (committed already) are never cut, though
    they count as what came before (as far back as 100 tokens). (A copy begun inside the committed output is not
    finished; the stream trims its buffer behind the committed text, so the model stops reading that audio again:
    :class:`~simulst.streaming.session.Session`.)"""
    found = first_loop(tokens, start)
    return len(tokens) if found is None else max(start, found[0])


def first_loop(tokens: Sequence[int], start: int) -> tuple[int, int] | None:
    """The first repetition loop past ``start`` (:func:`loop_span`: where its extra copy starts, where the copy
    before it starts), or None: what :func:`loop_free_length` cuts."""
    first = _lookback(start)
    for end in range(start + 1, len(tokens) + 1):
        found = loop_span(tokens, end, first)
        if found is not None:
            return found
    return None


def ends_in_loop(tokens: Sequence[int], start: int) -> bool:
    """True when the last of ``tokens``, past the first ``start``, completes a repetition loop (:func:`loop_cut`,
    earlier copies looked for as far back as :func:`loop_free_length` looks)."""
    return len(tokens) > start and loop_cut(tokens, len(tokens), _lookback(start)) is not None


def _lookback(start: int) -> int:
    """The first position whose spans a loop check past ``start`` compares with."""
    return max(0, start - LOOP_LOOKBACK)


def repeated_share(before: Sequence[Hashable], items: Sequence[Hashable]) -> float:
    """The share of the adjacent pairs of ``items`` (words) that occur earlier: in ``before`` (what preceded
    them), across its end, or earlier in ``items`` itself (0.0 when ``items`` holds no pair): how much of a text
    says again what was said just before, in other pieces (a paraphrased copy that no exact loop rule finds)."""
    seen = set(pairwise(before))
    joined = [*before[-1:], *items]  # (the pair across the end of ``before`` is one of them)
    pairs = list(pairwise(joined))
    repeated = 0
    for pair in pairs:
        repeated += pair in seen
        seen.add(pair)
    return repeated / len(pairs) if pairs else 0.0


def longest_shared_run(items: Sequence[Hashable], source: Sequence[Hashable]) -> tuple[int, int]:
    """The longest run of consecutive ``items`` that ``source`` also holds consecutively: (its start in ``items``,
    its length); (0, 0) when they share nothing. The earliest such run when several are as long."""
    best_start, best_length = 0, 0
    previous = [0] * (len(source) + 1)  # previous[j + 1]: the run ending at the item before and at source[j]
    for i, item in enumerate(items):
        current = [0] * (len(source) + 1)
        for j, other in enumerate(source):
            if item == other:
                current[j + 1] = previous[j] + 1
                if current[j + 1] > best_length:
                    best_start, best_length = i - current[j + 1] + 1, current[j + 1]
        previous = current
    return best_start, best_length
