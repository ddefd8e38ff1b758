"""Live subtitles: a stream's committed output as timed SRT or WebVTT captions, each written once it is closed.

:class:`SubtitleWriter` reads a stream's emissions (:meth:`~SubtitleWriter.add`) and appends every caption that
closes to a text sink, flushing it, so a player can follow a file that is still being written; nothing written is
ever changed (emissions are never retracted, and neither are captions)::

    with open("talk.srt", "w", encoding="utf-8") as sink:
        writer = SubtitleWriter(sink, "srt")
        feed_fast(stream, audio, lambda emission, _wall_ms: writer.add(emission))
        writer.close(end_ms=1000.0 * len(audio) / stream.sample_rate)

**Words.** Captions hold whole words: a word is complete once whitespace follows it (or at :meth:`close`), because
an emission can end inside a word (a commit may stop after punctuation: ``"3."`` then ``"5 percent"``), so the
word that ends an emission waits for the next one - and a caption closed at a sentence end or a pause is written
when the next emission arrives (or at :meth:`close`). The captions' texts joined with single spaces are exactly the
stream's committed text with its whitespace normalised (``" ".join(text.split())``): nothing dropped, nothing
retracted, no word split.

**Closing.** Words fill lines of at most ``max_chars`` characters (a longer word gets a line of its own), at most
``max_lines`` lines a caption. A caption is closed

* when the next word does not fit (*full*);
* after a word that ends a sentence (``.``, ``?``, ``!`` or ``…``, possibly followed by closing quotes or
  brackets) (*sentence*);
* before a word committed more than ``pause_ms`` of audio after the caption's last emission (*pause*);
* by :meth:`close` (*end*).

**Timing: spoken times (default) or commit times.** Times are on the audio timeline. Each word has a start and
an end time: with ``times="spoken"`` where it was spoken (the emissions' :attr:`~simulst.types.Emission.words`,
from the alignment-head timing; a word split across emissions runs from its first piece's start to its last
piece's end; an untimed piece takes its emission's commit time), so a caption shows while its words are heard, as
offline subtitles do; with ``times="commit"`` both are the ``source_ms`` of the emission holding the word's
first, resp. last, character (the audio read when the text was committed): what a live viewer sees, about a
second or two later. Either way a caption is written once its words are committed and closed, and never changed.
With those word times:

* a caption starts when its first word starts, or when the previous caption ends if that is later - captions
  never overlap;
* a *pause* is a word starting more than ``pause_ms`` after the caption's last word ends;
* a *full* caption ends when the next caption's first word starts;
* a *sentence* or *pause* caption ends ``display_ms`` after its last word ends, or earlier when the next caption's
  first word starts sooner (when that word is already known as the caption is written; otherwise the next
  caption starts later instead);
* the caption still open at :meth:`close` ends at ``close(end_ms)`` (the end of the audio);
* every caption lasts at least ``min_ms``: when several captions close at once (a burst of text committed in one
  emission, e.g. the whole output of the offline policy at the end), each is shown for ``min_ms`` and the next
  one starts that much later.

So start times are non-decreasing, every caption ends after it starts, and no two captions overlap.

**Short captions in a file** (``merge_short``; the CLI's ``-o FILE`` of a run that is not real time): a caption
shorter than ``short_ms`` or with fewer than ``short_words`` words (``"Ask not."``) is held and merged into the
next one when their words fit in one caption (``max_lines`` lines of ``max_chars``; openai-whisper's and the
subtitle conventions' 42 characters, two lines) and the next starts within ``pause_ms`` of its end: the merged
caption runs from the short one's start to the next one's end, and is held again if it is still short. A short
caption that fits nowhere, or the last one, is written as it is. Captions followed live (stdout, a real-time run,
the server) are not merged: a held caption would be written late, and one written cannot be taken back.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from itertools import groupby
from typing import Literal, TextIO

from simulst.errors import OptionError
from simulst.types import Emission

SubtitleFormat = Literal["srt", "vtt"]
FORMATS: tuple[SubtitleFormat, ...] = ("srt", "vtt")
CueTimes = Literal["spoken", "commit"]
CUE_TIMES: tuple[CueTimes, ...] = ("spoken", "commit")

SENTENCE_END = re.compile(r"[.?!…。？！][\"'”’»)\]]*$")
_TIMESTAMP = re.compile(r"^(\d+):(\d{2}):(\d{2})[,.](\d{3})$")


@dataclass(frozen=True)
class CaptionLimits:
    """How captions are cut and timed (see the module docstring).

    Attributes:
        max_chars: characters per line (a single longer word gets a line of its own).
        max_lines: lines per caption.
        pause_ms: a word committed more than this after the caption's last emission starts a new caption.
        display_ms: how long a caption closed at a sentence end or a pause stays after its last emission.
        min_ms: the shortest a caption is shown.
        merge_short: merge each short caption into the next one where they fit (a caption is then written once
            the next is known; for files, not for captions followed live).
        short_ms, short_words: a caption is short when it lasts less than ``short_ms`` or has fewer than
            ``short_words`` words.
    """

    max_chars: int = 42
    max_lines: int = 2
    pause_ms: float = 2000.0
    display_ms: float = 1500.0
    min_ms: float = 500.0
    merge_short: bool = False
    short_ms: float = 1000.0
    short_words: int = 3

    def __post_init__(self) -> None:
        if self.max_chars < 1 or self.max_lines < 1:
            raise OptionError("captions need max_chars >= 1 and max_lines >= 1")
        if self.pause_ms < 0 or self.display_ms < 0 or self.min_ms < 1:
            raise OptionError("caption times need pause_ms >= 0, display_ms >= 0 and min_ms >= 1")
        if self.short_ms < 0 or self.short_words < 0:
            raise OptionError("short captions need short_ms >= 0 and short_words >= 0")

    def short(self, caption: Caption) -> bool:
        """The caption is shorter than ``short_ms`` or has fewer than ``short_words`` words."""
        return caption.end_ms - caption.start_ms < self.short_ms or len(caption.text.split()) < self.short_words

    def merged(self, first: Caption, second: Caption) -> Caption | None:
        """``first`` merged into ``second`` (``first``'s index), or None where their words do not fit in one
        caption or ``second`` starts more than ``pause_ms`` after ``first`` ends."""
        if second.start_ms - first.end_ms > self.pause_ms:
            return None
        lines = wrap(first.text.split() + second.text.split(), self.max_chars, self.max_lines)
        if lines is None:
            return None
        return Caption(first.index, first.start_ms, second.end_ms, tuple(lines))


def wrap(words: list[str], max_chars: int, max_lines: int) -> list[str] | None:
    """``words`` filled into lines of at most ``max_chars`` characters (a longer word on a line of its own), as a
    caption fills them; None when more than ``max_lines`` lines are needed."""
    lines: list[str] = []
    for word in words:
        if lines and len(lines[-1]) + 1 + len(word) <= max_chars:
            lines[-1] += " " + word
        elif len(lines) < max_lines:
            lines.append(word)
        else:
            return None
    return lines


@dataclass(frozen=True)
class Caption:
    """One written caption: its number (from 1), its times on the audio timeline (ms) and its lines."""

    index: int
    start_ms: float
    end_ms: float
    lines: tuple[str, ...]

    @property
    def text(self) -> str:
        """The caption's words joined with single spaces."""
        return " ".join(self.lines)


def format_timestamp(ms: float, fmt: SubtitleFormat) -> str:
    """``HH:MM:SS,mmm`` (SRT) or ``HH:MM:SS.mmm`` (WebVTT) of a time in milliseconds (rounded to the ms)."""
    total = max(0, round(ms))
    hours, rest = divmod(total, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    sep = "," if fmt == "srt" else "."
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{sep}{millis:03d}"


def format_caption(caption: Caption, fmt: SubtitleFormat) -> str:
    """The caption's block, ending with the blank line that separates blocks (WebVTT text is escaped)."""
    times = f"{format_timestamp(caption.start_ms, fmt)} --> {format_timestamp(caption.end_ms, fmt)}\n"
    if fmt == "vtt":
        lines = [line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") for line in caption.lines]
        return times + "\n".join(lines) + "\n\n"
    return f"{caption.index}\n{times}" + "\n".join(caption.lines) + "\n\n"


def parse_captions(content: str) -> list[Caption]:
    """Read back the captions of an SRT or WebVTT text as this module writes them (numbered from 1 in either
    case); for tests and tools, not a general subtitle parser."""
    captions: list[Caption] = []
    vtt = content.lstrip("\ufeff").startswith("WEBVTT")
    blocks = [b for b in re.split(r"\n\s*\n", content.replace("\r\n", "\n").strip()) if b.strip()]
    for block in blocks[1:] if vtt else blocks:
        lines = block.split("\n")
        while lines and "-->" not in lines[0]:
            lines.pop(0)  # the SRT number (or a WebVTT cue id)
        if not lines:
            raise ValueError(f"not a caption: {block!r}")
        start, _, end = lines[0].partition("-->")
        text = lines[1:]
        if vtt:
            text = [line.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&") for line in text]
        captions.append(Caption(len(captions) + 1, _parse_timestamp(start), _parse_timestamp(end), tuple(text)))
    return captions


def _parse_timestamp(stamp: str) -> float:
    match = _TIMESTAMP.match(stamp.strip().split(" ")[0])
    if match is None:
        raise ValueError(f"not a timestamp: {stamp!r}")
    hours, minutes, seconds, millis = (int(g) for g in match.groups())
    return float(((hours * 60 + minutes) * 60 + seconds) * 1000 + millis)


@dataclass
class _Open:
    """The caption being filled: its lines, its first word's start and its last word's end."""

    lines: list[str]
    first_ms: float
    last_ms: float


@dataclass
class _Closed:
    """A caption closed at a sentence end or a pause, written once the next caption's start is known (or at the
    end of the emission that closed it)."""

    lines: list[str]
    first_ms: float
    end_ms: float


class SubtitleWriter:
    """Turns a stream's emissions into SRT or WebVTT captions written to ``sink`` as soon as each is closed.

    Args:
        sink: where the captions go (flushed after each); WebVTT's ``WEBVTT`` header is written at once.
        fmt: ``srt`` or ``vtt``.
        limits: line length, lines per caption and the timing constants.
        times: ``spoken`` (the words' spoken times) or ``commit`` (the emissions' commit times).

    Attributes:
        captions: the captions written so far.

    Raises:
        OptionError: an unknown format or kind of times.
    """

    def __init__(self, sink: TextIO, fmt: str = "srt", limits: CaptionLimits | None = None,
                 times: str = "spoken") -> None:
        if fmt not in FORMATS:
            raise OptionError(f"unknown subtitle format {fmt!r} (srt or vtt)")
        if times not in CUE_TIMES:
            raise OptionError(f"unknown cue times {times!r} ({' or '.join(CUE_TIMES)})")
        self.sink = sink
        self.format: SubtitleFormat = "srt" if fmt == "srt" else "vtt"
        self.limits = limits or CaptionLimits()
        self.spoken = times == "spoken"
        self.captions: list[Caption] = []
        self._held: Caption | None = None  # a short caption waiting for the next (``limits.merge_short``)
        self._open: _Open | None = None
        self._closed: _Closed | None = None
        self._word = ""  # the word being read (no whitespace has followed it yet)
        self._word_first_ms = 0.0
        self._word_last_ms = 0.0
        self._last_ms = 0.0  # the latest word time
        self._commit_ms = 0.0  # the latest emission's source_ms (emissions are in commit order)
        self._prev_end = 0.0
        self._finished = False
        if self.format == "vtt":
            self._write("WEBVTT\n\n")

    # ------------------------------------------------------------------------------------------ the stream side
    def add(self, emission: Emission) -> list[Caption]:
        """Read an emission; write (and return) the captions it closes."""
        if self._finished:
            raise RuntimeError("the subtitle writer is closed")
        n_before = len(self.captions)
        self._commit_ms = max(emission.source_ms, self._commit_ms)
        if not self.spoken:
            self._last_ms = self._commit_ms
        pieces = iter(self._piece_times(emission))
        for is_space, run in groupby(emission.text, str.isspace):
            if is_space:
                self._end_word()
            else:
                chars = "".join(run)
                first_ms, last_ms = next(pieces)
                if not self._word:
                    self._start_word(first_ms)
                self._word += chars
                self._word_last_ms = last_ms
                self._last_ms = max(self._last_ms, last_ms)
        if self._closed is not None and not emission.final:
            self._write_closed(next_ms=None)  # the next caption's start is not known yet: do not wait for it
        return self.captions[n_before:]

    def close(self, end_ms: float | None = None) -> list[Caption]:
        """The stream has ended at ``end_ms`` of audio (default: the last emission's time + ``display_ms``):
        write (and return) the remaining captions; the last one ends at ``end_ms``. Idempotent."""
        if self._finished:
            return []
        n_before = len(self.captions)
        self._end_word()
        end = self._last_ms + self.limits.display_ms if end_ms is None else end_ms
        if self._open is not None:
            self._write_closed(next_ms=self._open.first_ms)
            self._emit(self._open.lines, self._open.first_ms, end)
            self._open = None
        elif self._closed is not None:
            self._closed.end_ms = end
            self._write_closed(next_ms=None)
        if self._held is not None:
            self._put(self._held)
            self._held = None
        self._finished = True
        return self.captions[n_before:]

    # ---------------------------------------------------------------------------------------------- internals
    def _piece_times(self, emission: Emission) -> list[tuple[float, float]]:
        """(start, end) of each whitespace-separated piece of the emission's text: its spoken times (an untimed
        piece: the emission's commit time), or with commit times the commit time (made non-decreasing)."""
        n = len(emission.text.split())
        commit_ms = self._commit_ms
        if not self.spoken or len(emission.words) != n:
            return [(commit_ms, commit_ms)] * n
        return [(commit_ms if w.start_ms is None else w.start_ms, commit_ms if w.end_ms is None else w.end_ms)
                for w in emission.words]

    def _start_word(self, ms: float) -> None:
        """A word starts at commit time ``ms``: it is the next caption's start, or it comes after a pause."""
        self._word_first_ms = ms
        if self._closed is not None:
            self._write_closed(next_ms=ms)
        cap = self._open
        if cap is not None and ms - cap.last_ms > self.limits.pause_ms:
            self._open = None
            self._emit(cap.lines, cap.first_ms, min(cap.last_ms + self.limits.display_ms, ms))

    def _end_word(self) -> None:
        """Whitespace follows the word being read (or the stream ended): place it in a caption."""
        word = self._word
        if not word:
            return
        self._word = ""
        first_ms, last_ms = self._word_first_ms, self._word_last_ms
        cap = self._open
        if cap is None:
            cap = self._open = _Open([word], first_ms, last_ms)
        elif len(cap.lines[-1]) + 1 + len(word) <= self.limits.max_chars:
            cap.lines[-1] += " " + word
            cap.last_ms = last_ms
        elif len(cap.lines) < self.limits.max_lines:
            cap.lines.append(word)
            cap.last_ms = last_ms
        else:  # full: the word starts the next caption, at its commit time
            self._emit(cap.lines, cap.first_ms, first_ms)
            cap = self._open = _Open([word], first_ms, last_ms)
        if SENTENCE_END.search(word):
            self._closed = _Closed(cap.lines, cap.first_ms, cap.last_ms + self.limits.display_ms)
            self._open = None

    def _write_closed(self, next_ms: float | None) -> None:
        closed = self._closed
        if closed is None:
            return
        self._closed = None
        end = closed.end_ms if next_ms is None else min(closed.end_ms, next_ms)
        self._emit(closed.lines, closed.first_ms, end)

    def _emit(self, lines: list[str], first_ms: float, end_ms: float) -> None:
        # Whole milliseconds, as written: a caption never starts before the previous one ends, and lasts min_ms.
        start = float(round(max(first_ms, self._prev_end, 0.0)))
        end = float(round(max(end_ms, start + self.limits.min_ms)))
        self._prev_end = end
        caption = Caption(len(self.captions) + 1, start, end, tuple(lines))
        if not self.limits.merge_short:
            self._put(caption)
            return
        held, self._held = self._held, None
        if held is not None:
            merged = self.limits.merged(held, caption)
            if merged is None:
                self._put(held)
            caption = merged or caption
        if self.limits.short(caption):
            self._held = caption
        else:
            self._put(caption)

    def _put(self, caption: Caption) -> None:
        """Write a caption, numbered after those written."""
        caption = Caption(len(self.captions) + 1, caption.start_ms, caption.end_ms, caption.lines)
        self.captions.append(caption)
        self._write(format_caption(caption, self.format))

    def _write(self, text: str) -> None:
        self.sink.write(text)
        self.sink.flush()


def render_subtitles(
    emissions: list[Emission], fmt: str = "srt", end_ms: float | None = None, limits: CaptionLimits | None = None,
    times: str = "spoken",
) -> str:
    """The whole SRT / WebVTT text of a finished stream's emissions (what :class:`SubtitleWriter` writes live)."""
    sink = io.StringIO()
    writer = SubtitleWriter(sink, fmt, limits, times)
    for emission in emissions:
        writer.add(emission)
    writer.close(end_ms)
    return sink.getvalue()
