"""Two sequence algorithms the whole pipeline shares: the longest common prefix and the edit distance."""

from __future__ import annotations

from collections.abc import Hashable, Sequence


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
