"""The audio file a command streams: read a block at a time, what is odd about it said on stderr."""

from __future__ import annotations

import sys

from simulst.audio.io import AudioReader


def open_audio(path: str) -> AudioReader:
    """The audio file a command streams, read a block at a time (its length does not matter), its warnings printed.

    Raises:
        AudioError: missing, not audio, or empty (before any model is loaded).
    """
    reader = AudioReader(path)
    for warning in reader.warnings:
        print(f"simulst: warning: {warning}", file=sys.stderr)
    return reader
