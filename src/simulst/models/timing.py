"""Token timing from cross-attention: where in the audio each decoded token was read.

The method of Whisper's word timestamps (Radford et al., 2022; openai/whisper ``timing.py``): the cross-attention
of the checkpoint's *alignment heads* over the audio frames, for the decoder positions that predict each token,
is made comparable across heads (softmax over the frames, standardised over the tokens, median-filtered over
time) and averaged; dynamic time warping then finds the monotone path through the (token × frame) matrix that
collects the most attention. A token starts at the first frame of its row on that path.

The rows need no decoder pass of their own: a search records them as it decodes (:class:`RowTrace`: the rows of
the forced pass over the committed prefix and of every step, carried per hypothesis through the beams'
reordering), so a commit is timed by DTW over rows already computed - the spoken times of the emissions
(:mod:`simulst.streaming.decoding`) and where long-form streaming trims its audio buffer behind committed text
(:mod:`simulst.streaming.buffer`). ``WhisperModel.token_starts`` makes the same rows in one forced pass, for a
hypothesis decoded without them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

MEDIAN_WIDTH = 7  # frames (openai/whisper's medfilt_width)
LEVEL_FRAME_MS = 10.0  # the audio level is read in frames of this length
PAUSE_MS = 200.0  # quiet at least this long is a pause (shorter: the closure of a stop consonant, a breath)
QUIET_DB = 20.0  # a pause is at least this much below the speech level (the 95th percentile of the frames)...
MIN_RANGE_DB = 20.0  # ... in audio whose speech is this much above its quietest frames (else no pause is found)
SNAP_MS = 600.0  # a word boundary this close to a pause is moved to it


def median_filter(x: np.ndarray, width: int = MEDIAN_WIDTH) -> np.ndarray:
    """Median over a sliding window of odd ``width`` along the last axis (edges reflected).

    (Computed by sorting the ``width`` shifted copies with a network of elementwise min/max - odd-even
    transposition sort - which gives exactly the elements ``np.median`` picks, without a per-window call.)"""
    if width % 2 != 1 or width < 1:
        raise ValueError(f"the median filter width must be odd and >= 1, got {width}")
    pad = width // 2
    if width == 1 or x.shape[-1] <= pad:
        return x.copy()
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    n = x.shape[-1]
    shifted = [padded[..., k : k + n] for k in range(width)]
    for rnd in range(width):
        for k in range(rnd % 2, width - 1, 2):
            low, high = np.minimum(shifted[k], shifted[k + 1]), np.maximum(shifted[k], shifted[k + 1])
            shifted[k], shifted[k + 1] = low, high
    return shifted[pad]


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The monotone path of least total ``cost`` (N, M) from (0, 0) to (N-1, M-1), steps (+1, +1), (+1, 0) or
    (0, +1): its (row indices, column indices), in order. On equal totals the diagonal step is preferred, then the
    row step.

    Each row of accumulated costs is computed at once: with D[j] the best way into cell j from the row above
    (diagonal or straight down) and P the running sum of the row's costs, A[j] = P[j] + min over k <= j of
    (D[k] - P[k-1]) - the min-plus recurrence A[j] = cost[j] + min(D[j], A[j-1]) unrolled."""
    n, m = cost.shape
    if n == 0 or m == 0:
        raise ValueError("DTW needs a non-empty cost matrix")
    acc = np.full((n + 1, m + 1), np.inf)
    acc[0, 0] = 0.0
    sums = np.cumsum(np.asarray(cost, dtype=np.float64), axis=1)
    before = np.concatenate([np.zeros((n, 1)), sums[:, :-1]], axis=1)  # the row's costs left of each cell
    for i in range(1, n + 1):
        above = acc[i - 1]
        into = np.minimum(above[:-1], above[1:])  # diagonal or straight down into each column
        acc[i, 1:] = sums[i - 1] + np.minimum.accumulate(into - before[i - 1])
    rows, cols = [], []
    i, j = n, m
    while i > 0 and j > 0:
        rows.append(i - 1)
        cols.append(j - 1)
        diag, up, left = acc[i - 1, j - 1], acc[i - 1, j], acc[i, j - 1]
        if diag <= up and diag <= left:
            i, j = i - 1, j - 1
        elif up <= left:
            i -= 1
        else:
            j -= 1
    return np.array(rows[::-1]), np.array(cols[::-1])


def token_start_frames(scores: np.ndarray) -> list[int]:
    """Start frame of each row of ``scores`` (heads, rows, frames): the raw cross-attention scores of the
    alignment heads, one row per decoder position that predicts a token (the last row: the end token), over the
    frames of the audio only. Non-decreasing; the last entry is where the text ends."""
    if scores.ndim != 3 or scores.shape[1] == 0 or scores.shape[2] == 0:
        raise ValueError(f"expected (heads, tokens, frames) scores, got shape {scores.shape}")
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)  # softmax over the audio frames
    mean = weights.mean(axis=-2, keepdims=True)
    std = weights.std(axis=-2, keepdims=True)
    weights = (weights - mean) / np.where(std > 0, std, 1.0)  # comparable across heads
    matrix = median_filter(weights).mean(axis=0)
    rows, frames = dtw(-matrix)
    starts = [0] * matrix.shape[0]
    seen = -1
    for row, frame in zip(rows.tolist(), frames.tolist(), strict=True):
        if row != seen:
            starts[row] = frame
            seen = row
    return starts


@dataclass(frozen=True, eq=False)
class RowTrace:
    """What the alignment heads need to score every position a decoder state has read - the cross-attention queries
    of the layers that have alignment heads - per hypothesis, kept through the beams' reordering without copying: a
    chain of links, each either the queries one decoder pass added to every hypothesis, or a reordering of the
    hypotheses (a beam search's selection). Queries are what the pass computes anyway; scoring them against the
    encoding's keys (``WhisperModel.traced_starts``) is left to whoever times a hypothesis, for the one it times.

    A position's row is the query that predicts the next token, so the rows of positions p..q time the tokens
    p+1..q+1: a trace started at the prompt's last position gives one row per token decoded after the prompt and,
    once a token has been read, the row after it (which predicts the token after it, or ``<|endoftext|>``).

    Attributes:
        queries: per layer with alignment heads, (B, H, n, D/H) the queries of n positions a pass added to the B
            hypotheses (None: a reordering).
        back: for each hypothesis, the hypothesis of ``parent`` it continues (None: the same one).
        parent: the chain before this link (None: the first pass).
    """

    queries: tuple[torch.Tensor, ...] | None
    back: tuple[int, ...] | None
    parent: RowTrace | None

    @classmethod
    def first(cls, queries: Sequence[torch.Tensor]) -> RowTrace:
        """The trace of a forced pass's queries (per layer (B, H, n, D/H))."""
        return cls(tuple(queries), None, None)

    def extended(self, queries: Sequence[torch.Tensor]) -> RowTrace:
        """The trace with the queries of one more pass."""
        return RowTrace(tuple(queries), None, self)

    def reordered(self, rows: Sequence[int]) -> RowTrace:
        """The trace of the hypotheses ``rows`` (each an index into this trace's), in that order."""
        return RowTrace(None, tuple(rows), self)

    def rewound(self, n: int) -> RowTrace | None:
        """The trace without its last ``n`` positions (None: they were not added by the last pass)."""
        if n == 0:
            return self
        if self.queries is None or self.queries[0].shape[2] <= n:
            return None
        return RowTrace(tuple(q[:, :, :-n] for q in self.queries), self.back, self.parent)

    def rows(self, row: int) -> list[torch.Tensor]:
        """Per layer, (H, positions, D/H): the queries of hypothesis ``row``, oldest first."""
        pieces: list[tuple[torch.Tensor, ...]] = []
        link: RowTrace | None = self
        while link is not None:
            if link.queries is not None:
                pieces.append(tuple(q[row] for q in link.queries))
            if link.back is not None:
                row = link.back[row]
            link = link.parent
        pieces.reverse()
        return [torch.cat(layer, dim=1) if len(layer) > 1 else layer[0] for layer in zip(*pieces, strict=True)]


@dataclass(frozen=True, eq=False)
class Traced:
    """One hypothesis's rows in a :class:`RowTrace` (what a search hands on with the hypothesis)."""

    trace: RowTrace
    row: int

    def rows(self) -> list[torch.Tensor]:
        """Per layer, (H, positions, D/H): the hypothesis's queries, oldest first."""
        return self.trace.rows(self.row)


def pauses(audio: np.ndarray, rate: int) -> list[tuple[int, int]]:
    """The pauses of ``audio``: runs of at least ``PAUSE_MS`` whose level (per ``LEVEL_FRAME_MS`` frame, median over
    5 frames) lies ``QUIET_DB`` below the speech level (the 95th percentile of the frames) and below the middle
    between the quietest frames (5th percentile) and the speech; none when the two are less than ``MIN_RANGE_DB``
    apart (noise, or speech throughout). Each as (first sample, end sample), in order."""
    frame = max(1, round(rate * LEVEL_FRAME_MS / 1000.0))
    n = audio.shape[0] // frame
    if n == 0:
        return []
    frames = np.asarray(audio[: n * frame], dtype=np.float32).reshape(n, frame)
    power = np.einsum("ij,ij->i", frames, frames) / frame
    level = median_filter(10.0 * np.log10(power + 1e-12), 5)
    speech, floor = np.percentile(level, 95), np.percentile(level, 5)
    if speech - floor < MIN_RANGE_DB:
        return []
    quiet = level < min(speech - QUIET_DB, (speech + floor) / 2.0)
    shortest = PAUSE_MS / LEVEL_FRAME_MS
    found, start = [], None
    for i, q in enumerate([*quiet.tolist(), False]):
        if q and start is None:
            start = i
        elif not q and start is not None:
            if i - start >= shortest:
                found.append((start * frame, audio.shape[0] if i == n else i * frame))
            start = None
    return found


def snapped_spans(bounds: Sequence[int], word_starts: Sequence[bool], silent: Sequence[bool],
                  pauses: Sequence[tuple[int, int]], reach: int) -> list[tuple[int, int]]:
    """Each token's (start, end) from DTW ``bounds`` (token starts, then the text's end; samples), with a word
    boundary moved to each pause: DTW leaves a pause to whichever token it attends least, so a word after a pause
    often starts inside it, or a word's trailing punctuation runs on over it into the next word.

    The words are runs of tokens from one that ``word_starts`` to the next; a word's voiced part runs from its start
    to the end of its last token that is not ``silent`` (punctuation). A boundary is the text's start, a word's
    start, or the text's end. For each pause (in order), of the boundaries within ``reach`` samples of it and after
    the one the previous pause took, the pause takes the one that puts the least voiced time on the wrong side of it
    (voiced time of the words before the boundary after the pause, of the words after it before the pause; on equal
    terms, the boundary nearest the pause's end): the tokens before it end by the pause's start, the word after it
    starts at its end (the tokens after it no earlier). Otherwise a token ends where the next one starts. Starts
    never decrease; ends are never before starts."""
    n = len(bounds) - 1
    starts = [int(b) for b in bounds[:-1]]
    ends = [int(b) for b in bounds[1:]]
    firsts = [0, *[i for i in range(1, n) if word_starts[i]]] if n > 0 else []
    voiced = []  # per word, (start, end) of its voiced part
    for w, first in enumerate(firsts):
        last = firsts[w + 1] if w + 1 < len(firsts) else n
        spoken = [i for i in range(first, last) if not silent[i]]
        voiced.append((starts[first], ends[spoken[-1]] if spoken else starts[first]))
    edges = [*firsts, n]  # boundary k: the first token of word k (k = len(firsts): the text's end)
    taken = -1
    for p0, p1 in pauses:
        def misplaced(k: int, p0: int = p0, p1: int = p1) -> int:
            return (sum(max(0, end - max(begin, p1)) for begin, end in voiced[:k])
                    + sum(max(0, min(end, p0) - begin) for begin, end in voiced[k:]))
        near = [k for k in range(taken + 1, len(edges)) if _distance(int(bounds[edges[k]]), p0, p1) <= reach]
        if not near:
            continue
        taken = min(near, key=lambda k: (misplaced(k), abs(int(bounds[edges[k]]) - p1)))
        cut = edges[taken]
        for i in range(cut):
            starts[i], ends[i] = min(starts[i], p0), min(ends[i], p0)
        for i in range(cut, n):
            starts[i], ends[i] = max(starts[i], p1), max(ends[i], p1)
        if cut < n:
            starts[cut] = p1
    spans, last = [], 0
    for start, end in zip(starts, ends, strict=True):
        last = max(last, start)
        spans.append((last, max(end, last)))
    return spans


def _distance(at: int, p0: int, p1: int) -> int:
    """How far ``at`` lies from the span [p0, p1] (0 within it)."""
    return 0 if p0 <= at <= p1 else min(abs(at - p0), abs(at - p1))
