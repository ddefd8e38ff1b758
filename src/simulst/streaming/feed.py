"""Feeding a whole recording through a stream, as fast as the model goes or at the pace of a live speaker."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from simulst.streaming.engine import Stream
from simulst.types import Emission

Emit = Callable[[Emission, float], None]


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


def feed_fast(stream: Stream, audio: np.ndarray, emit: Emit | None = None) -> list[Emission]:
    """Computation-unaware: push ``audio`` chunk by chunk as fast as the model goes, then finish the stream.

    ``emit(emission, wall_ms)`` is called for each emission as it is made; returns all emissions.
    """
    collect = _Collector(emit)
    step = stream.chunk_samples
    for pos in range(0, audio.shape[0], step):
        collect(stream.push(audio[pos : pos + step]))
    collect(stream.finish())
    return collect.emissions


def feed_realtime(stream: Stream, audio: np.ndarray, emit: Emit | None = None) -> list[Emission]:
    """Computation-aware: audio becomes available at wall-clock speed; the model reads whatever has arrived.

    ``emit(emission, wall_ms)`` is called for each emission as it is made; returns all emissions.
    """
    rate = stream.sample_rate
    collect = _Collector(emit)
    start = collect.start
    pos = 0
    total = audio.shape[0]
    while pos < total:
        now = time.perf_counter() - start
        available = min(total, int(now * rate))
        if available > pos:
            collect(stream.push(audio[pos:available]))
            pos = available
        else:
            time.sleep(max(0.001, min(total, stream.next_decode) / rate - now))
    collect(stream.finish())
    return collect.emissions
