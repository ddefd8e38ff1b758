"""How the stream commands print emissions: one live line of text, one JSON line (the CLI contract), live subtitles
(SRT / WebVTT captions, each written as soon as it is closed), or one timed line per emission: TSV (openai-whisper's
``--output_format tsv``: a ``start``, ``end``, ``text`` header, then integer milliseconds and the text) or
whisper_streaming's line format.

**whisper_streaming's lines** (ufal/whisper_streaming, ``whisper_online.py``'s ``output_transcript``): one line per
emission with text, ``"%1.4f %1.0f %1.0f %s" % (emission time ms, begin ms, end ms, text)``. The emission time is
when the text was committed: the audio read then (``source_ms``; whisper_streaming's ``--comp_unaware`` simulation
prints the end of the audio read), or with ``--realtime`` the wall-clock time since the start, as its default,
simultaneous mode prints. Begin and end are where the text was spoken (an untimed emission: its emission time for
both). The text is the emission's increment as committed, leading space included, as whisper_streaming's default
faster-whisper back-end joins its words (line breaks become spaces); an emission without text prints nothing, as
there.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

from simulst.errors import OptionError
from simulst.streaming.subtitles import CUE_TIMES, CaptionLimits, SubtitleWriter
from simulst.streaming.subtitles import FORMATS as SUBTITLE_FORMATS
from simulst.types import Emission

if TYPE_CHECKING:  # (the engine loads torch; the output only reads a stream)
    from simulst.streaming.engine import Stream

LINE_FORMATS = ("tsv", "whisper-streaming")
FILE_FORMATS = (*SUBTITLE_FORMATS, *LINE_FORMATS)  # the formats that may go to a file (-o)
STREAM_FORMATS = ("text", "json", *FILE_FORMATS)


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--format`` (``--json``), ``--cue-times`` and ``-o`` of the commands that stream emissions (for
    :class:`StreamOutput`)."""
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--format", choices=STREAM_FORMATS, default="text",
                     help="text: a live line per emission (default); json: JSON lines only (one per emission, with "
                          "its spoken start_ms/end_ms and words, then a final one); srt | vtt: live subtitles, each "
                          "caption written as it closes; tsv: 'start end text' lines in spoken milliseconds "
                          "(openai-whisper's tsv); whisper-streaming: 'emission_ms begin_ms end_ms text' lines "
                          "(ufal/whisper_streaming's output)")
    fmt.add_argument("--json", dest="format", action="store_const", const="json", default="text",
                     help="same as --format json")
    parser.add_argument("--cue-times", choices=CUE_TIMES, default="spoken",
                        help="srt | vtt captions timed by when their words were spoken (default) or by when they were "
                             "committed (what a live viewer sees)")
    parser.add_argument("--merge-short-cues", action=argparse.BooleanOptionalAction, default=None,
                        help="srt | vtt: merge each caption shorter than 1 s or 3 words into the next where their "
                             "words fit in one caption (2 lines of 42 characters); default: on for a FILE (-o) written "
                             "by a run that is not --realtime, off on stdout and in real time, where captions are "
                             "followed as they are written")
    parser.add_argument("--output", "-o", metavar="FILE", default=None,
                        help="with --format srt|vtt|tsv|whisper-streaming: write to FILE (stdout then shows the live "
                             "lines); default: that output alone on stdout, the summary on stderr")


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


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def json_printer(emission: Emission, wall_ms: float | None) -> None:
    """One JSON line of the CLI contract; ``elapsed_ms`` is the wall clock in real-time mode; ``start_ms`` and
    ``end_ms`` are where the text was spoken (null: untimed), ``words`` its whitespace-separated pieces, timed."""
    record = {
        "event": "emission",
        "text": emission.text,
        "source_ms": round(emission.source_ms, 3),
        "elapsed_ms": round(wall_ms if wall_ms is not None else emission.elapsed_ms, 3),
        "start_ms": _ms(emission.start_ms),
        "end_ms": _ms(emission.end_ms),
        "words": [{"text": w.text, "start_ms": _ms(w.start_ms), "end_ms": _ms(w.end_ms),
                   "joins_previous": w.joins_previous} for w in emission.words],
    }
    print(json.dumps(record, ensure_ascii=False), flush=True)


TSV_HEADER = "start\tend\ttext\n"


def tsv_line(emission: Emission) -> str:
    """An emission as openai-whisper's TSV writes a segment: spoken start and end in integer milliseconds (empty:
    untimed), the text stripped, its tabs and line breaks as spaces. Empty for an emission without text."""
    text = " ".join(emission.text.replace("\t", " ").split())
    if not text:
        return ""
    start = "" if emission.start_ms is None else str(round(emission.start_ms))
    end = "" if emission.end_ms is None else str(round(emission.end_ms))
    return f"{start}\t{end}\t{text}\n"


def whisper_streaming_line(emission: Emission, wall_ms: float | None = None) -> str:
    """An emission as whisper_streaming prints a commit (see the module docstring); empty without text."""
    if not emission.text.strip():
        return ""
    now = emission.source_ms if wall_ms is None else wall_ms
    begin = now if emission.start_ms is None else emission.start_ms
    end = now if emission.end_ms is None else emission.end_ms
    text = emission.text.replace("\r", " ").replace("\n", " ")
    return "%1.4f %1.0f %1.0f %s\n" % (now, begin, end, text)  # noqa: UP031 - whisper_streaming's format, verbatim


class StreamOutput:
    """Where a stream command's output goes (``--format``, ``--cue-times``, ``--output``).

    ``text`` and ``json`` print live lines on stdout. ``srt`` and ``vtt`` write live subtitles
    (:class:`~simulst.streaming.subtitles.SubtitleWriter`, timed by ``cue_times``; to a file, short captions merged
    into the next, ``merge_short``: by default when the file is written by a run that is not ``realtime``), ``tsv`` and
    ``whisper-streaming`` a line per emission, to ``path``, stdout showing the live text lines as usual, or,
    without a path (or ``-``), to stdout and nothing else: the summary then goes to stderr (:attr:`summary`).

    Raises:
        OptionError: an unknown format or cue times, a path with a format that is not for files, or a path that
            cannot be written.
    """

    def __init__(self, fmt: str, path: str | None = None, realtime: bool = False, cue_times: str = "spoken",
                 merge_short: bool | None = None) -> None:
        if fmt not in STREAM_FORMATS:
            raise OptionError(f"unknown output format {fmt!r} ({', '.join(STREAM_FORMATS)})")
        if path is not None and fmt not in FILE_FORMATS:
            raise OptionError(f"--output FILE is for --format {', '.join(FILE_FORMATS)}")
        self.format = fmt
        self.realtime = realtime
        self.subtitles: SubtitleWriter | None = None
        self._file: TextIO | None = None
        self._sink: TextIO | None = None
        self._on_stdout = fmt in FILE_FORMATS and path in (None, "-")
        if fmt in FILE_FORMATS:
            if self._on_stdout:
                self._sink = sys.stdout
            else:
                try:
                    self._sink = self._file = open(str(path), "w", encoding="utf-8")  # noqa: SIM115 - closed by close()
                except OSError as err:
                    raise OptionError(f"cannot write {fmt} to {path}: {err.strerror or err}") from err
        if fmt in SUBTITLE_FORMATS and self._sink is not None:
            to_file = not self._on_stdout
            merge = (to_file and not realtime) if merge_short is None else (merge_short and to_file)
            self.subtitles = SubtitleWriter(self._sink, fmt, CaptionLimits(merge_short=merge), times=cue_times)
        elif fmt == "tsv" and self._sink is not None:
            self._write(TSV_HEADER)
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
        """Print an emission (wall-clock time shown in real-time mode) and feed it to the subtitles or lines."""
        if self._printer is not None:
            self._printer(emission, wall_ms if self.realtime else None)
        if self.subtitles is not None:
            self.subtitles.add(emission)
        elif self.format == "tsv":
            self._write(tsv_line(emission))
        elif self.format == "whisper-streaming":
            self._write(whisper_streaming_line(emission, wall_ms if self.realtime else None))

    def _write(self, text: str) -> None:
        if text and self._sink is not None:
            self._sink.write(text)
            self._sink.flush()

    @contextmanager
    def streaming(self, end_ms: Callable[[], float]) -> Iterator[None]:
        """Around the feeding of a stream: then write the last captions, the last ending at ``end_ms()`` (the end of
        the audio, known once it is read); should the stream fail or be interrupted, what was committed is still
        written."""
        try:
            yield
        except BaseException:
            self.close(None)
            raise
        self.close(end_ms())

    def close(self, end_ms: float | None) -> None:
        """Write the remaining captions and close the output file (if any)."""
        if self.subtitles is not None:
            self.subtitles.close(end_ms)
        if self._file is not None:
            self._file.close()
            self._file = None
