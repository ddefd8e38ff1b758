"""Token timing from cross-attention: where in the audio each decoded token was read.

The method of Whisper's word timestamps (Radford et al., 2022; openai/whisper ``timing.py``): the cross-attention
of the checkpoint's *alignment heads* over the audio frames, for the decoder positions that predict each token,
is made comparable across heads (softmax over the frames, standardised over the tokens, median-filtered over
time) and averaged; dynamic time warping then finds the monotone path through the (token × frame) matrix that
collects the most attention. A token starts at the first frame of its row on that path.

Long-form streaming uses it to find where the committed text ends in the audio buffer, so that the buffer can
be trimmed behind it (:mod:`simulst.streaming.session`).
"""

from __future__ import annotations

import numpy as np

MEDIAN_WIDTH = 7  # frames (openai/whisper's medfilt_width)


def median_filter(x: np.ndarray, width: int = MEDIAN_WIDTH) -> np.ndarray:
    """Median over a sliding window of odd ``width`` along the last axis (edges reflected)."""
    if width % 2 != 1 or width < 1:
        raise ValueError(f"the median filter width must be odd and >= 1, got {width}")
    pad = width // 2
    if width == 1 or x.shape[-1] <= pad:
        return x.copy()
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    windows = np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1)
    return np.median(windows, axis=-1)


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The monotone path of least total ``cost`` (N, M) from (0, 0) to (N-1, M-1), steps (+1, +1), (+1, 0) or
    (0, +1): its (row indices, column indices), in order."""
    n, m = cost.shape
    if n == 0 or m == 0:
        raise ValueError("DTW needs a non-empty cost matrix")
    acc = np.full((n + 1, m + 1), np.inf)
    acc[0, 0] = 0.0
    move = np.zeros((n + 1, m + 1), dtype=np.int8)  # 0 diagonal, 1 from above (row step), 2 from the left
    c = cost.tolist()
    a = acc.tolist()
    for j in range(1, m + 1):
        for i in range(1, n + 1):
            diag, up, left = a[i - 1][j - 1], a[i - 1][j], a[i][j - 1]
            if diag <= up and diag <= left:
                best, step = diag, 0
            elif up <= left:
                best, step = up, 1
            else:
                best, step = left, 2
            a[i][j] = c[i - 1][j - 1] + best
            move[i, j] = step
    rows, cols = [], []
    i, j = n, m
    while i > 0 and j > 0:
        rows.append(i - 1)
        cols.append(j - 1)
        moved = int(move[i, j])
        if moved == 0:
            i, j = i - 1, j - 1
        elif moved == 1:
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
