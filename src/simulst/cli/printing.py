"""How the stream commands print emissions: one live line of text, one JSON line (the CLI contract), or live
subtitles (SRT / WebVTT captions, each written as soon as it is closed)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from simulst.errors import OptionError
from simulst.streaming.engine import Stream
from simulst.streaming.subtitles import FORMATS as SUBTITLE_FORMATS
from simulst.streaming.subtitles import SubtitleWriter
from simulst.types import Emission

STREAM_FORMATS = ("text", "json", *SUBTITLE_FORMATS)


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--format`` (``--json``) and ``-o`` of the commands that stream emissions (for :class:`StreamOutput`)."""
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--format", choices=STREAM_FORMATS, default="text",
                     help="text: a live line per emission (default); json: JSON lines only (one per emission, then "
                          "a final one); srt | vtt: live subtitles, each caption written as it closes")
    fmt.add_argument("--json", dest="format", action="store_const", const="json", default="text",
                     help="same as --format json")
    parser.add_argument("--output", "-o", metavar="FILE", default=None,
                        help="with --format srt|vtt: write the captions to FILE (stdout then shows the live lines); "
                             "default: the captions alone on stdout, the summary on stderr")


def final_record(stream: Stream, source_s: float, wall_s: float) -> dict[str, Any]:
    """The ``{"event": "final", ...}`` JSON line of a finished stream (the CLI contract)."""
    costs = stream.costs
    return {
        "event": "final",
        "text": stream.text,
        "source_ms": round(source_s * 1000.0, 3),
        "compute_s": round(costs.compute_s, 4),
        "rtf": round(costs.compute_s / source_s if source_s else 0.0, 4),
        "decoder_passes": costs.decoder_calls,
        "decoder_positions": costs.decoder_positions,
        "encoder_calls": costs.encoder_calls,
        "emissions": len(stream.emissions),
        "wall_s": round(wall_s, 4),
    }


def text_printer(emission: Emission, wall_ms: float | None) -> None:
    """One live line: ``[source s (wall s)] text``."""
    clock = f" wall {wall_ms / 1000.0:6.2f} s" if wall_ms is not None else ""
    print(f"[{emission.source_ms / 1000.0:6.2f} s{clock}] {emission.text}", flush=True)


def json_printer(emission: Emission, wall_ms: float | None) -> None:
    """One JSON line of the CLI contract; ``elapsed_ms`` is the wall clock in real-time mode."""
    record = {
        "event": "emission",
        "text": emission.text,
        "source_ms": round(emission.source_ms, 3),
        "elapsed_ms": round(wall_ms if wall_ms is not None else emission.elapsed_ms, 3),
    }
    print(json.dumps(record, ensure_ascii=False), flush=True)


class StreamOutput:
    """Where a stream command's output goes (``--format``, ``--output``).

    ``text`` and ``json`` print live lines on stdout. ``srt`` and ``vtt`` write live subtitles
    (:class:`~simulst.streaming.subtitles.SubtitleWriter`) to ``path``, stdout showing the live text lines as usual,
    or, without a path (or ``-``), to stdout and nothing else: the summary then goes to stderr (:attr:`summary`).

    Raises:
        OptionError: an unknown format, a path without a subtitle format, or a path that cannot be written.
    """

    def __init__(self, fmt: str, path: str | None = None, realtime: bool = False) -> None:
        if fmt not in STREAM_FORMATS:
            raise OptionError(f"unknown output format {fmt!r} ({', '.join(STREAM_FORMATS)})")
        if path is not None and fmt not in SUBTITLE_FORMATS:
            raise OptionError(f"--output FILE is for subtitles: add --format {' or --format '.join(SUBTITLE_FORMATS)}")
        self.format = fmt
        self.realtime = realtime
        self.subtitles: SubtitleWriter | None = None
        self._file: TextIO | None = None
        self._on_stdout = fmt in SUBTITLE_FORMATS and path in (None, "-")
        if fmt in SUBTITLE_FORMATS:
            if self._on_stdout:
                sink = sys.stdout
            else:
                try:
                    sink = self._file = open(str(path), "w", encoding="utf-8")  # noqa: SIM115 - closed by close()
                except OSError as err:
                    raise OptionError(f"cannot write subtitles to {path}: {err.strerror or err}") from err
            self.subtitles = SubtitleWriter(sink, fmt)
        self._printer = json_printer if fmt == "json" else None if self._on_stdout else text_printer

    @property
    def json(self) -> bool:
        """JSON lines: the summary is a ``{"event": "final"}`` line."""
        return self.format == "json"

    @property
    def summary(self) -> TextIO:
        """Where the human summary goes: stderr when the captions are on stdout, else stdout."""
        return sys.stderr if self._on_stdout else sys.stdout

    def emit(self, emission: Emission, wall_ms: float) -> None:
        """Print an emission (wall-clock time shown in real-time mode) and feed it to the subtitles."""
        if self._printer is not None:
            self._printer(emission, wall_ms if self.realtime else None)
        if self.subtitles is not None:
            self.subtitles.add(emission)

    @contextmanager
    def streaming(self, end_ms: float) -> Iterator[None]:
        """Around the feeding of a stream: then write the last captions, the last ending at ``end_ms`` (the end of
        the audio); should the stream fail or be interrupted, what was committed is still written."""
        try:
            yield
        except BaseException:
            self.close(None)
            raise
        self.close(end_ms)

    def close(self, end_ms: float | None) -> None:
        """Write the remaining captions and close the output file (if any)."""
        if self.subtitles is not None:
            self.subtitles.close(end_ms)
        if self._file is not None:
            self._file.close()
            self._file = None
