"""Feeding a whole recording through a stream, as fast as the model goes or at the pace of a live speaker.

The recording is an array of samples, or its blocks in order (an :class:`~simulst.audio.io.AudioReader`: a file of
any length in bounded memory); either way the stream is pushed the same pieces: ``chunk_samples`` at a time as fast
as the model goes, or what has arrived by the wall clock at the pace of a speaker.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from simulst.types import Emission

if TYPE_CHECKING:
    from simulst.streaming.engine import Stream

Emit = Callable[[Emission, float], None]
Audio = np.ndarray | Iterable[np.ndarray]  # the samples, or their blocks in order


class _Collector:
    """Gathers a stream's emissions and hands each to ``emit`` with the wall-clock ms since the feeding began."""

    def __init__(self, emit: Emit | None) -> None:
        self.emit = emit
        self.start = time.perf_counter()
        self.emissions: list[Emission] = []

    def __call__(self, emissions: list[Emission]) -> None:
        for emission in emissions:
            self.emissions.append(emission)
            if self.emit is not None:
                self.emit(emission, (time.perf_counter() - self.start) * 1000.0)


def feed_fast(stream: Stream, audio: Audio, emit: Emit | None = None) -> list[Emission]:
    """Computation-unaware: push ``audio`` chunk by chunk as fast as the model goes, then finish the stream.

    ``emit(emission, wall_ms)`` is called for each emission as it is made; returns all emissions.
    """
    collect = _Collector(emit)
    for chunk in _chunks(audio, stream.chunk_samples):
        collect(stream.push(chunk))
    collect(stream.finish())
    return collect.emissions


def feed_realtime(stream: Stream, audio: Audio, emit: Emit | None = None) -> list[Emission]:
    """Computation-aware: audio becomes available at wall-clock speed; the model reads whatever has arrived.

    ``emit(emission, wall_ms)`` is called for each emission as it is made; returns all emissions.
    """
    rate = stream.sample_rate
    collect = _Collector(emit)
    start = collect.start
    source = _Arrivals(audio)
    pos = 0
    while True:
        now = time.perf_counter() - start
        available = source.upto(int(now * rate))
        if available > pos:
            collect(stream.push(source.take(available - pos)))
            pos = available
        elif source.ended and pos >= source.read:
            break
        else:  # wait for the next decode, or the end of the audio if it comes first
            time.sleep(max(0.001, source.upto(stream.next_decode) / rate - now))
    collect(stream.finish())
    return collect.emissions


def _blocks(audio: Audio) -> Iterator[np.ndarray]:
    return iter([audio]) if isinstance(audio, np.ndarray) else iter(audio)


def _chunks(audio: Audio, step: int) -> Iterator[np.ndarray]:
    """``audio`` in pieces of ``step`` samples (the last one shorter), whatever its blocks' sizes."""
    pending = np.zeros(0, dtype=np.float32)
    for block in _blocks(audio):
        pending = np.concatenate([pending, block]) if pending.size else block
        whole = pending.shape[0] // step * step
        for pos in range(0, whole, step):
            yield pending[pos : pos + step]
        pending = pending[whole:]
    if pending.size:
        yield pending


class _Arrivals:
    """The audio's samples, its blocks read only as far as asked (:meth:`upto`) and handed out in order."""

    def __init__(self, audio: Audio) -> None:
        self._blocks = _blocks(audio)
        self._pending = np.zeros(0, dtype=np.float32)  # read, not taken yet
        self.read = 0  # samples read from the blocks
        self.ended = False  # every block read

    def upto(self, samples: int) -> int:
        """Read blocks until ``samples`` samples are read or the audio ends; how many of them there are."""
        while self.read < samples and not self.ended:
            block = next(self._blocks, None)
            if block is None:
                self.ended = True
            elif block.size:
                self._pending = np.concatenate([self._pending, block]) if self._pending.size else block
                self.read += block.shape[0]
        return min(samples, self.read)

    def take(self, samples: int) -> np.ndarray:
        """The next ``samples`` samples read (all read already)."""
        piece, self._pending = self._pending[:samples], self._pending[samples:]
        return piece
