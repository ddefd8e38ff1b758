"""The score report shared by short-form (:mod:`~simulst.evaluation.scoring`) and long-form
(:mod:`~simulst.evaluation.longform`) scoring: how it is built, printed and written.

A report has corpus ``scores`` (in the order they were added: quality, latency, counts, costs), one
``per_instance`` row per scored item (a log instance; a reference sentence in long-form scoring) and ``notes``
saying what the numbers leave out. Both scorers fill it through one :class:`ReportBuilder`: a latency metric
is one column of per-item values and the corpus score is their :func:`~simulst.evaluation.latency.corpus_mean`,
computed in :meth:`ReportBuilder.add_latency` for both.

Files (:func:`write_report`): the scores as a TSV of one header row and one value row (SimulEval's
``scores.tsv``), the scores and notes as JSON, and the rows as a TSV whose columns are the union of the rows'
keys in first-seen order (a missing or None value is an empty field; floats are written with ``repr``).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulst.errors import OptionError
from simulst.evaluation.instances import InstanceRecord
from simulst.evaluation.latency import corpus_mean

Score = float | int | None


@dataclass
class ScoreReport:
    """The scores of one log.

    Attributes:
        scores: corpus scores by name (None where a metric had nothing to score).
        per_instance: one row per instance (``index``, ``id``, lengths, each metric).
        notes: what the numbers leave out (empty outputs, missing references, unit mismatches).
    """

    scores: dict[str, Score]
    per_instance: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        """One JSON object keyed by metric name (NaN/None written as null)."""
        return json.dumps({k: _json_number(v) for k, v in self.scores.items()})


def _json_number(v: Score) -> Score:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def instances_to_score(records: Sequence[InstanceRecord]) -> list[InstanceRecord]:
    """A log's records in index order; an :class:`~simulst.errors.OptionError` when there is none."""
    if not records:
        raise OptionError("nothing to score: the log holds no instances")
    return sorted(records, key=lambda r: r.index)


def latency_names(metrics: Sequence[str], computation_aware: bool) -> list[str]:
    """The latency columns of a report: every metric, then (computation-aware) every ``NAME_CA``."""
    return list(metrics) + ([f"{n}_CA" for n in metrics] if computation_aware else [])


class ReportBuilder:
    """Collects a report's scores, per-item rows and notes.

    Args:
        rows: one row per scored item, holding the item's own columns (index, lengths); metric columns are
            added to every row, in the order of the calls.
    """

    def __init__(self, rows: Sequence[Mapping[str, Any]]) -> None:
        self.rows: list[dict[str, Any]] = [dict(row) for row in rows]
        self.scores: dict[str, Score] = {}
        self.notes: list[str] = []

    def add_scores(self, scores: Mapping[str, Score]) -> None:
        """Corpus scores without a per-item column (quality metrics, counts)."""
        self.scores.update(scores)

    def add_column(self, key: str, values: Sequence[Any]) -> None:
        """A per-item column, one value per row (None: no value)."""
        for row, value in zip(self.rows, values, strict=True):
            row[key] = value

    def add_metric(self, name: str, score: Score, values: Sequence[Any]) -> None:
        """A corpus score and its per-item column of the same name."""
        self.scores[name] = score
        self.add_column(name, values)

    def add_latency(self, names: Sequence[str], per_item: Callable[[str], Sequence[float | None]]) -> None:
        """Latency metrics: for each name the per-item values (None: skipped) and their corpus mean."""
        for name in names:
            values = per_item(name)
            self.add_metric(name, corpus_mean(values), values)

    def note(self, text: str) -> None:
        """Say what the numbers leave out."""
        self.notes.append(text)

    def report(self) -> ScoreReport:
        """The collected report."""
        return ScoreReport(self.scores, self.rows, self.notes)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.3f}"
    return str(value)


def format_table(report: ScoreReport) -> str:
    """The corpus scores as an aligned two-column text table, then the notes."""
    width = max(len(k) for k in report.scores)
    lines = [f"{'metric':<{width}}  value", f"{'-' * width}  {'-' * 10}"]
    lines += [f"{name:<{width}}  {_fmt(value)}" for name, value in report.scores.items()]
    lines += [f"note: {note}" for note in report.notes]
    return "\n".join(lines)


def tsv_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows as TSV: a header of every key in first-seen order, then one line per row."""
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    buf = io.StringIO()
    writer = csv.writer(buf, delimiter="\t", lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row.get(c) is None else _tsv_value(row[c]) for c in columns])
    return buf.getvalue()


def _tsv_value(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def write_report(scores_tsv: Path, scores_json: Path, rows_tsv: Path, report: ScoreReport) -> None:
    """Write the scores (TSV: one header row, one value row), the scores and notes (JSON) and the rows (TSV)."""
    scores_tsv.write_text(tsv_text([report.scores]), encoding="utf-8")
    payload = {"scores": json.loads(report.to_json()), "notes": report.notes}
    scores_json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    rows_tsv.write_text(tsv_text(report.per_instance), encoding="utf-8")
