"""The audio file a command streams: read a block at a time, what is odd about it said on stderr, fed to a stream
under the command's output."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from simulst.audio.io import AudioReader
from simulst.cli.printing import StreamOutput
from simulst.streaming.feed import Emit, feed_fast, feed_realtime

if TYPE_CHECKING:
    from simulst.streaming.engine import Stream


def open_audio(path: str) -> AudioReader:
    """The audio file a command streams, read a block at a time (its length does not matter), its warnings printed.

    Raises:
        AudioError: missing, not audio, or empty (before any model is loaded).
    """
    reader = AudioReader(path)
    for warning in reader.warnings:
        print(f"simulst: warning: {warning}", file=sys.stderr)
    return reader


def at_rate(reader: AudioReader, path: str, sample_rate: int) -> AudioReader:
    """``reader`` if it reads ``path`` at ``sample_rate`` (the model's), else the file reopened at that rate (the
    first reader closed; its warnings were printed when it was opened)."""
    if reader.sample_rate == sample_rate:
        return reader
    reader.close()
    return AudioReader(path, sample_rate)


def stream_file(stream: Stream, reader: AudioReader, output: StreamOutput, emit: Emit, realtime: bool) -> float:
    """Feed the file's blocks to ``stream`` (at a live speaker's pace with ``realtime``, else as fast as the model
    goes) and finish it, each emission handed to ``emit``, under ``output``'s streaming; the reader is closed after.
    Returns the wall-clock seconds it took."""
    feed = feed_realtime if realtime else feed_fast
    start = time.perf_counter()
    with reader, output.streaming(end_ms=lambda: reader.duration_s * 1000.0):
        feed(stream, reader, emit)
    return time.perf_counter() - start
