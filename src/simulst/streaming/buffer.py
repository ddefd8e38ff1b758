"""The audio buffer of a long-form stream: what the model sees, and where it may be trimmed.

The model reads a bounded buffer of the source, never more than ``capacity`` samples. Once the buffer is longer
than a segment, it is trimmed behind the last committed sentence end; a buffer about to be full is trimmed behind
the last committed word; a full buffer with nothing committed is committed whole and trimmed behind where its
text ends. This module holds the samples and decides the cuts from the token timing
(:class:`~simulst.models.base.TokenTimer`) the stream hands it; what is committed is the stream's business.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

MIN_TAIL_S = 3.0  # a trim before the buffer is full keeps at least this much audio after the cut
SKIPPED_START_S = 3.0  # a full buffer's first token spanning more audio than this: Whisper skipped speech


class AudioBuffer:
    """The source samples read and not yet trimmed, and the committed tokens that belong to audio before them.

    Args:
        rate: samples per second.
        capacity: the most samples the buffer holds (``max_buffer_s``, at most the model's window).
        segment: once longer than this, the buffer is trimmed behind the last committed sentence end.
        chunk: samples per chunk (a buffer is *full* when the next chunk would not fit).

    Attributes:
        samples: valid samples at the front of ``audio``.
        offset: source samples trimmed off the front so far.
        base: committed tokens of the audio before the buffer (the rest are forced as the decoder's prefix).
    """

    def __init__(self, rate: int, capacity: int, segment: int, chunk: int) -> None:
        self.rate, self.capacity, self.segment, self.chunk = rate, capacity, segment, chunk
        self.audio = np.zeros(rate * 4, dtype=np.float32)
        self.samples = 0
        self.offset = 0
        self.base = 0

    @property
    def read(self) -> int:
        """Source samples read since the stream began."""
        return self.offset + self.samples

    @property
    def room(self) -> int:
        """Samples that still fit."""
        return self.capacity - self.samples

    def head(self, samples: int) -> np.ndarray:
        """The first ``samples`` of the buffer (a view)."""
        return self.audio[:samples]

    def append(self, audio: np.ndarray) -> None:
        """Add samples at the end (at most :attr:`room` of them)."""
        needed = self.samples + audio.shape[0]
        if needed > self.audio.shape[0]:
            grown = np.zeros(min(self.capacity, max(needed, 2 * self.audio.shape[0])), dtype=np.float32)
            grown[: self.samples] = self.audio[: self.samples]
            self.audio = grown
        self.audio[self.samples : needed] = audio
        self.samples = needed

    def drop(self, cut: int, base: int) -> None:
        """Remove the first ``cut`` samples; the first ``base`` committed tokens now precede the buffer."""
        self.audio[: self.samples - cut] = self.audio[cut : self.samples]
        self.samples -= cut
        self.offset += cut
        self.base = base

    def trim_point(self, best: Sequence[int], committed: Sequence[int], samples: int, eager: bool,
                   ends_sentence: Callable[[int], bool],
                   token_starts: Callable[[], Sequence[int] | None]) -> tuple[int, int] | None:
        """Where to trim the buffer after a chunk decode of its first ``samples``: the cut (samples) and the new
        :attr:`base`, or None (not now).

        The cut comes behind the last committed token that ends a sentence or, when the next chunk would not fit,
        behind the last committed token (the committed output ends at a whole word); ``token_starts`` (called only
        then: the search's recorded timing, or a forced decoder pass) gives where each token of the ``best``
        hypothesis after :attr:`base` starts, plus its text's end. A trim before the buffer is full keeps at least
        ``MIN_TAIL_S`` after the cut (a short tail, often the pause after the sentence, invites hallucinations)
        unless ``eager`` (after a loop cut).
        """
        in_buffer = committed[self.base :]
        if not in_buffer or tuple(best[self.base : len(committed)]) != tuple(in_buffer):
            return None  # (nothing committed here, or a decode that ignored the prefix: it cannot time it)
        full = samples + self.chunk > self.capacity
        ends = [i for i, token in enumerate(in_buffer) if ends_sentence(token)]
        if not ends and not full:
            return None
        last = ends[-1] if ends else len(in_buffer) - 1
        starts = token_starts()
        if starts is None:
            return None  # (no token timing)
        cut = min(samples, starts[last + 1])
        if cut <= 0 or (not full and not eager and samples - cut < MIN_TAIL_S * self.rate):
            return None
        return cut, self.base + last + 1

    def skipped_start(self, starts: Sequence[int] | None, nothing_committed: bool) -> int:
        """Samples before a full buffer's text starts when the model skipped speech there: nothing in the buffer
        is committed and the first token of its text spans more than ``SKIPPED_START_S`` (``starts``: where each token
        of the text starts, plus where it ends); else 0."""
        if starts is None or len(starts) < 3 or not nothing_committed:
            return 0  # (fewer than 2 tokens: no second start)
        second = starts[1]
        return second if SKIPPED_START_S * self.rate < second < self.samples else 0

    def text_end_cut(self, starts: Sequence[int] | None) -> int:
        """Where a full buffer committed whole is cut: where its text ends (``starts[-1]``; the model may end a
        long window's text early, and the rest stays for the next decode, as openai/whisper seeks to its last
        timestamp), unless too little was read or too little would be left: then the whole buffer."""
        end = None if starts is None else starts[-1]
        least, most = MIN_TAIL_S * self.rate, self.samples - self.chunk
        return end if end is not None and least <= end <= most else self.samples
