"""Long-form inputs: the segmentation, the reference sentences, the talks and the log instance of each talk.

The reference is a list of sentences (one per line) with the talks' segmentation: per sentence its ``wav``,
``offset`` and ``duration`` in seconds, a YAML list as MuST-C's
``- {duration: 3.1, offset: 12.4, speaker_id: .., wav: talk.wav}`` (or the same list as JSON). The consecutive
segments of one ``wav`` form a talk; the log holds one instance per talk, matched by its audio name. An output
is cut into units (:func:`output_units`): words, or characters for zh/ja (OmniSTEval's ``--char_level``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

from simulst.errors import OptionError
from simulst.evaluation.instances import InstanceRecord
from simulst.evaluation.manifest import TestSetError

#: the units of long-form scoring, and their plural in messages
LONGFORM_UNITS = {"word": "words", "char": "characters"}


class LongformInputError(TestSetError):
    """Long-form inputs that do not fit together: a malformed segmentation, a reference file with another
    number of sentences than the segmentation has segments, a log whose talks do not match it, or a talk whose
    delays are not one per output unit."""

    __test__ = False  # not a pytest test class


def check_unit(unit: str) -> None:
    """Raise :class:`~simulst.errors.OptionError` unless ``unit`` is one of :data:`LONGFORM_UNITS`."""
    if unit not in LONGFORM_UNITS:
        raise OptionError(f"long-form scoring counts words or characters, not {unit!r}; choose word or char")


def output_units(text: str, unit: str) -> list[str]:
    """A text's units: its characters (``char``), else its whitespace-separated words."""
    return list(text) if unit == "char" else text.split()


@dataclass(frozen=True)
class Segment:
    """One reference sentence's place in its talk's audio.

    Attributes:
        wav: the talk's audio file, as the segmentation names it.
        offset: start of the sentence in the talk, seconds.
        duration: length of the sentence's audio, seconds (> 0).
        extra: the entry's other keys (``speaker_id``, ...), kept verbatim.
    """

    wav: str
    offset: float
    duration: float
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def offset_ms(self) -> float:
        """The offset in ms (``offset * 1000``, as OmniSTEval converts it)."""
        return self.offset * 1000

    @property
    def duration_ms(self) -> float:
        """The duration in ms (|X| of the sentence)."""
        return self.duration * 1000


def _number(entry: Mapping[str, Any], key: str, where: str) -> float:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise LongformInputError(f"{where}: {key!r} must be a number (seconds), got {value!r}")
    if not math.isfinite(value):
        raise LongformInputError(f"{where}: {key!r} must be finite, got {value}")
    return value


def segments_from_entries(entries: Any, source: str = "segmentation") -> list[Segment]:
    """Validate a parsed segmentation (a list of mappings with ``wav``, ``offset``, ``duration``)."""
    if not isinstance(entries, list) or not entries:
        raise LongformInputError(f"{source}: expected a non-empty list of segments, got {type(entries).__name__}")
    segments = []
    for n, entry in enumerate(entries):
        where = f"{source}: segment {n}"
        if not isinstance(entry, Mapping):
            raise LongformInputError(f"{where}: expected a mapping with wav, offset, duration; got {entry!r}")
        wav = entry.get("wav")
        if not isinstance(wav, str) or not wav:
            raise LongformInputError(f"{where}: 'wav' must name the talk's audio file, got {wav!r}")
        offset = _number(entry, "offset", where)
        duration = _number(entry, "duration", where)
        if offset < 0:
            raise LongformInputError(f"{where}: offset must be >= 0 s, got {offset}")
        if duration <= 0:
            raise LongformInputError(f"{where}: duration must be > 0 s, got {duration}")
        extra = {k: v for k, v in entry.items() if k not in ("wav", "offset", "duration")}
        segments.append(Segment(wav, offset, duration, extra))
    return segments


def read_segmentation(path: str | Path) -> list[Segment]:
    """Read a segmentation file: YAML (MuST-C's ``- {duration: .., offset: .., wav: ..}`` list) or JSON
    (``.json``), one entry per reference sentence, in the order of the reference file."""
    file = Path(path)
    if not file.is_file():
        raise LongformInputError(f"no such segmentation file: {file}")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise LongformInputError(f"{file} is not UTF-8 text: {exc}") from exc
    if file.suffix.lower() == ".json":
        try:
            entries = json.loads(text)
        except json.JSONDecodeError as exc:
            raise LongformInputError(f"{file}: not valid JSON: {exc}") from exc
    else:
        import yaml  # lazy: only long-form scoring reads YAML

        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        try:
            entries = yaml.load(text, Loader=loader)  # a safe loader
        except yaml.YAMLError as exc:
            raise LongformInputError(f"{file}: not valid YAML: {exc}") from exc
    return segments_from_entries(entries, str(file))


def read_reference_sentences(path: str | Path) -> list[str]:
    """The reference sentences, one per line, stripped (an empty line is an empty sentence; a final newline
    does not add one)."""
    file = Path(path)
    if not file.is_file():
        raise LongformInputError(f"no such reference file: {file}")
    try:
        with open(file, encoding="utf-8") as f:  # universal newlines, as OmniSTEval reads it
            return [line.strip() for line in f]
    except UnicodeDecodeError as exc:
        raise LongformInputError(f"{file} is not UTF-8 text: {exc}") from exc


@dataclass(frozen=True)
class Talk:
    """A talk of the segmentation: its audio name and the (global) indices of its sentences."""

    wav: str
    sentences: range


def group_talks(segments: Sequence[Segment]) -> list[Talk]:
    """The talks in segmentation order; every talk's segments must be consecutive."""
    talks: list[Talk] = []
    start = 0
    for i in range(1, len(segments) + 1):
        if i == len(segments) or segments[i].wav != segments[start].wav:
            talks.append(Talk(segments[start].wav, range(start, i)))
            start = i
    seen: set[str] = set()
    for talk in talks:
        if talk.wav in seen:
            raise LongformInputError(
                f"the segments of {talk.wav} are not consecutive in the segmentation (a talk's sentences must "
                "follow each other)"
            )
        seen.add(talk.wav)
    return talks


def _record_names(record: InstanceRecord) -> list[str]:
    names = []
    source = record.source
    if isinstance(source, list | tuple) and source:
        source = source[0]
    if isinstance(source, str) and source:
        names.append(source)
    utterance = record.simulst.get("id")
    if isinstance(utterance, str) and utterance:
        names.append(utterance)
    return names


def _same_audio(name: str, wav: str) -> bool:
    a, b = PurePath(name), PurePath(wav)
    return name == wav or a.name == b.name or a.stem == b.stem


def match_talks(records: Sequence[InstanceRecord], talks: Sequence[Talk]) -> list[InstanceRecord]:
    """The log record of every talk, matched by audio name (the record's ``source`` path or simulst id against
    the segmentation's ``wav``: equal, same file name, or same stem); a single record and a single talk always
    match."""
    if len(records) != len(talks):
        raise LongformInputError(
            f"the log holds {len(records)} instances but the segmentation {len(talks)} talks "
            f"({', '.join(t.wav for t in talks[:5])}{', ...' if len(talks) > 5 else ''}); long-form scoring needs "
            "one instance per talk"
        )
    if len(talks) == 1:
        return [records[0]]
    out = []
    used: set[int] = set()
    for talk in talks:
        found = [
            k for k, rec in enumerate(records) if any(_same_audio(name, talk.wav) for name in _record_names(rec))
        ]
        if len(found) != 1:
            what = "no instance" if not found else f"{len(found)} instances ({', '.join(str(k) for k in found)})"
            raise LongformInputError(f"talk {talk.wav}: {what} of the log match its audio name")
        if found[0] in used:
            raise LongformInputError(f"instance {records[found[0]].index} matches two talks")
        used.add(found[0])
        out.append(records[found[0]])
    return out
