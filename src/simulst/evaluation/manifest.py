"""Test-set readers: a TSV manifest (as in ``../shared/data``) or SimulEval's pair of list files.

Manifest: UTF-8 TSV, one header line, columns ``id``, ``audio`` (a path relative to the manifest's folder, or
absolute), optionally ``duration_s``, and the text to score against: ``transcript`` and/or a reference column
(``reference``, ``translation``, ``tgt_text`` or ``target``; ``--reference-column`` picks another). Optional
``tgt_lang`` column. Fields are never quoted (``line.split("\\t")``).

References may also come from a separate TSV keyed by id (``--references``, e.g. ``references.es.tsv`` with
columns ``id``, ``translation_es``: its second column, or ``--reference-column``, is used).

SimulEval lists: ``--source`` has one wav path per line, ``--target`` one reference per line (same order),
``--tgt-lang`` a language code for all, or a file with one code per line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from simulst.errors import OptionError

REFERENCE_COLUMNS = ("reference", "translation", "tgt_text", "target")


class TestSetError(OptionError):
    """A test set (manifest, list files, reference file) is missing or malformed."""

    __test__ = False  # not a pytest test class


@dataclass(frozen=True)
class TestItem:
    """One utterance of a test set.

    Attributes:
        id: the utterance id (the manifest's ``id``; for SimulEval lists, the wav file's stem).
        audio: path of the audio file.
        reference: the text to score the output against, or None.
        duration_s: the manifest's duration (informative; |X| is measured on the audio).
        tgt_lang: target language code, if the test set gives one.
    """

    __test__ = False  # not a pytest test class

    id: str
    audio: Path
    reference: str | None = None
    duration_s: float | None = None
    tgt_lang: str | None = None


def _read_tsv(path: Path) -> tuple[list[str], list[list[str]]]:
    if not path.is_file():
        raise TestSetError(f"no such file: {path}")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise TestSetError(f"{path} is not UTF-8 text: {exc}") from exc
    if not lines:
        raise TestSetError(f"{path} is empty")
    header = lines[0].split("\t")
    rows = []
    for n, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != len(header):
            raise TestSetError(f"{path}:{n}: {len(fields)} fields, the header has {len(header)}")
        rows.append(fields)
    return header, rows


def read_reference_file(path: str | Path, column: str | None = None) -> dict[str, str]:
    """References keyed by id from a TSV with an ``id`` column (the text: ``column``, else the 2nd column)."""
    header, rows = _read_tsv(Path(path))
    if "id" not in header or len(header) < 2:
        raise TestSetError(f"{path}: a reference file needs an 'id' column and a text column")
    if column is not None and column not in header:
        raise TestSetError(f"{path}: no column {column!r} (columns: {', '.join(header)})")
    text_col = header.index(column) if column else next(i for i, h in enumerate(header) if h != "id")
    id_col = header.index("id")
    return {row[id_col]: row[text_col] for row in rows}


def read_manifest(
    path: str | Path,
    reference_column: str | None = None,
    references: str | Path | None = None,
    tgt_lang: str | None = None,
    src_langs: Sequence[str] | None = None,
    max_duration_s: float | None = None,
) -> list[TestItem]:
    """Read a TSV manifest.

    Args:
        path: the manifest.
        reference_column: the manifest column holding the reference (default: the first of
            :data:`REFERENCE_COLUMNS` present, else ``transcript``, else none). With ``references``, the
            column of that file instead.
        references: a TSV of references keyed by id; every manifest id must be in it.
        tgt_lang: target language code for all items (overrides a ``tgt_lang`` column).
        src_langs: keep only the rows whose source language (column ``src_lang`` or ``lang``) is one of these.
        max_duration_s: keep only the rows whose ``duration_s`` is at most this.
    """
    path = Path(path)
    header, rows = _read_tsv(path)
    for required in ("id", "audio"):
        if required not in header:
            raise TestSetError(f"{path}: the manifest has no {required!r} column (columns: {', '.join(header)})")
    col = {name: i for i, name in enumerate(header)}
    rows = _select_rows(path, header, rows, src_langs, max_duration_s)
    refs = _references(path, header, reference_column, references)
    items = []
    seen: set[str] = set()
    for fields in rows:
        item_id = fields[col["id"]]
        if item_id in seen:
            raise TestSetError(f"{path}: id {item_id!r} appears twice")
        seen.add(item_id)
        audio = Path(fields[col["audio"]])
        if not audio.is_absolute():
            audio = path.parent / audio
        reference = refs.of(item_id, fields)
        duration = _duration(path, col, fields, item_id)
        lang = tgt_lang or (fields[col["tgt_lang"]] if "tgt_lang" in col else None) or None
        items.append(TestItem(item_id, audio, reference, duration, lang))
    if not items:
        selected = src_langs is not None or max_duration_s is not None
        raise TestSetError(f"{path} lists no utterances" + (" in that selection" if selected else ""))
    return items


@dataclass(frozen=True)
class _References:
    """Where a manifest's references come from: a reference file keyed by id, else a manifest column, else none.

    Attributes:
        file: the reference file (named in errors), or None.
        by_id: that file's references by id.
        column: the manifest column holding the reference.
    """

    file: str | Path | None
    by_id: dict[str, str] | None
    column: int | None

    def of(self, item_id: str, fields: Sequence[str]) -> str | None:
        """The reference of the manifest row ``fields`` (a reference file must cover every id)."""
        if self.by_id is not None:
            if item_id not in self.by_id:
                raise TestSetError(f"{self.file}: no reference for id {item_id!r} (a reference file must cover "
                                   "every utterance evaluated; --src-lang / --max-duration select rows)")
            return self.by_id[item_id]
        return fields[self.column] if self.column is not None else None


def _references(path: Path, header: list[str], reference_column: str | None,
                references: str | Path | None) -> _References:
    """The references of a manifest (see :func:`read_manifest`)."""
    if references is not None:
        return _References(references, read_reference_file(references, reference_column), None)
    col = {name: i for i, name in enumerate(header)}
    if reference_column is not None:
        if reference_column not in col:
            raise TestSetError(f"{path}: no column {reference_column!r} (columns: {', '.join(header)})")
        return _References(None, None, col[reference_column])
    found = next((c for c in (*REFERENCE_COLUMNS, "transcript") if c in col), None)
    return _References(None, None, col[found] if found is not None else None)


def _duration(path: Path, col: dict[str, int], fields: Sequence[str], item_id: str) -> float | None:
    """The row's ``duration_s`` (None when the manifest has none or leaves it empty)."""
    if "duration_s" not in col or not fields[col["duration_s"]]:
        return None
    try:
        return float(fields[col["duration_s"]])
    except ValueError as exc:
        raise TestSetError(f"{path}: id {item_id!r}: bad duration_s {fields[col['duration_s']]!r}") from exc


def _select_rows(path: Path, header: list[str], rows: list[list[str]], src_langs: Sequence[str] | None,
                 max_duration_s: float | None) -> list[list[str]]:
    """The rows of the requested source languages and duration (a filter on a missing column is an error)."""
    if src_langs is not None:
        lang_col = next((c for c in ("src_lang", "lang") if c in header), None)
        if lang_col is None:
            raise TestSetError(f"{path}: no 'src_lang' or 'lang' column to select languages by")
        index = header.index(lang_col)
        wanted = set(src_langs)
        rows = [r for r in rows if r[index] in wanted]
    if max_duration_s is not None:
        if "duration_s" not in header:
            raise TestSetError(f"{path}: no 'duration_s' column to select durations by")
        index = header.index("duration_s")
        try:
            rows = [r for r in rows if float(r[index]) <= max_duration_s]
        except ValueError as exc:
            raise TestSetError(f"{path}: a duration_s that is not a number: {exc}") from exc
    return rows


def _read_lines(path: Path) -> list[str]:
    if not path.is_file():
        raise TestSetError(f"no such file: {path}")
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]


def read_simuleval_lists(
    source: str | Path, target: str | Path | None = None, tgt_lang: str | None = None
) -> list[TestItem]:
    """Read SimulEval's ``--source`` / ``--target`` list files (and ``--tgt-lang``: a code or a file of codes).

    Relative wav paths are taken relative to the current directory, as SimulEval does.
    """
    sources = _read_lines(Path(source))
    while sources and not sources[-1]:
        sources.pop()
    if not sources:
        raise TestSetError(f"{source} lists no audio files")
    targets: Sequence[str | None]
    if target is not None:
        targets = _read_lines(Path(target))
        if len(targets) == len(sources) + 1 and targets[-1] == "":
            targets = targets[:-1]
        if len(targets) != len(sources):
            raise TestSetError(f"{source} lists {len(sources)} sources but {target} has {len(targets)} references")
    else:
        targets = [None] * len(sources)
    langs: list[str | None] = [tgt_lang] * len(sources)
    if tgt_lang is not None and Path(tgt_lang).is_file():
        codes = [c for c in _read_lines(Path(tgt_lang)) if c]
        if len(codes) != len(sources):
            raise TestSetError(f"{tgt_lang} has {len(codes)} language codes for {len(sources)} sources")
        langs = list(codes)
    items = []
    for wav, ref, lang in zip(sources, targets, langs, strict=True):
        if not wav:
            raise TestSetError(f"{source}: empty line among the sources")
        audio = Path(wav)
        items.append(TestItem(audio.stem, audio, ref, None, lang))
    return items
