"""Parameter sweeps: run a grid of stream configurations over one test set and tabulate quality vs. latency.

The grid is policy × chunk size × search × any other stream option (``--grid search.beam=4,8``). The offline
policy decodes once at the source end, so it enters the grid once (chunk size irrelevant). Each configuration
is an ordinary, resumable ``simulst eval`` folder under ``OUT/runs/<label>/``; the sweep then writes
``OUT/sweep.csv`` (every metric), ``OUT/sweep.md`` (the main columns) and the plots of :mod:`plots`.

With ``jobs == 1`` the model is loaded once and reused by every configuration; with ``jobs > 1`` each worker
process loads it once and runs configurations in parallel (computation-aware numbers then include the
contention between workers: compare ``_CA`` metrics only between sweeps run alike). :func:`run_sweep_on_cluster`
spreads the (configuration, utterance) pairs over a Ray cluster instead.
"""

from __future__ import annotations

import concurrent.futures as cf
import csv
import dataclasses
import itertools
import logging
import math
import multiprocessing
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from simulst.config import ModelOptions, PolicyOptions, StreamOptions
from simulst.errors import OptionError
from simulst.evaluation.cluster import ClusterOptions, ClusterRun, run_on_cluster
from simulst.evaluation.manifest import TestItem
from simulst.evaluation.runner import EvalOptions, make_run_config, run_eval
from simulst.evaluation.scoring import ScoreReport
from simulst.streaming.engine import Engine

logger = logging.getLogger(__name__)

SWEEP_CSV = "sweep.csv"
SWEEP_MD = "sweep.md"
MD_LATENCY = ("AL", "LAAL", "AL_CA", "LAAL_CA", "StartOffset", "EndOffset")
MD_COST = ("ComputeRTF", "DecoderCallsPerWord", "DecoderCalls", "DecoderPositions", "Emissions", "EmptyOutputs")


@dataclass(frozen=True)
class SweepPoint:
    """One configuration of a sweep.

    Attributes:
        label: a short unique name, e.g. ``la-2 1000ms`` or ``offline``.
        options: the stream options.
        overrides: the grid values beyond policy and chunk size (``{"search.beam": "8"}``).
    """

    label: str
    options: StreamOptions
    overrides: Mapping[str, str] = field(default_factory=dict)

    @property
    def dirname(self) -> str:
        """A folder name for the label."""
        return re.sub(r"[^A-Za-z0-9_.=-]+", "_", self.label).strip("_")


def _convert(current: Any, value: str, key: str) -> Any:
    if isinstance(current, bool):
        if value.lower() in ("1", "true", "yes"):
            return True
        if value.lower() in ("0", "false", "no"):
            return False
        raise OptionError(f"{key}: expected true/false, got {value!r}")
    try:
        if isinstance(current, int):
            return int(value)
        if isinstance(current, float):
            return float(value)
        if current is None or isinstance(current, str):  # an optional number, or a word or a number ("auto")
            if value.lower() == "none":
                return None
            return int(value) if re.fullmatch(r"-?\d+", value) else float(value)
    except ValueError as exc:
        if isinstance(current, str):
            return value
        raise OptionError(f"{key}: cannot read {value!r} as {type(current).__name__}") from exc
    return value


def apply_override(options: StreamOptions, key: str, value: str) -> StreamOptions:
    """``options`` with one field set from text: ``chunk_ms``, ``policy`` (``la-2``), ``search.beam``, ...

    Raises :class:`OptionError` for an unknown key or a value of the wrong type.
    """
    if key == "policy":
        return dataclasses.replace(options, policy=PolicyOptions.parse(value))
    head, _, rest = key.partition(".")
    names = {f.name for f in dataclasses.fields(options)}
    if head not in names:
        raise OptionError(f"unknown stream option {key!r}; known: {', '.join(sorted(names))} (and search.*)")
    current = getattr(options, head)
    if rest:
        if not dataclasses.is_dataclass(current) or isinstance(current, type):
            raise OptionError(f"{head} has no sub-options")
        sub_names = {f.name for f in dataclasses.fields(current)}
        if rest not in sub_names:
            raise OptionError(f"unknown option {key!r}; {head} has {', '.join(sorted(sub_names))}")
        new_sub: Any = dataclasses.replace(current, **{rest: _convert(getattr(current, rest), value, key)})
        changes: dict[str, Any] = {head: new_sub}
        return dataclasses.replace(options, **changes)
    if dataclasses.is_dataclass(current):
        raise OptionError(f"{key} is a group of options; set {key}.FIELD")
    return dataclasses.replace(options, **{head: _convert(current, value, key)})


def parse_grid(specs: Sequence[str]) -> dict[str, list[str]]:
    """Parse ``KEY=V1,V2,...`` grid specifications."""
    grid: dict[str, list[str]] = {}
    for spec in specs:
        key, sep, values = spec.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise OptionError(f"a grid axis is KEY=V1,V2,...; got {spec!r}")
        grid[key.strip()] = [v.strip() for v in values.split(",") if v.strip()]
    return grid


def _fmt_ms(ms: float) -> str:
    return f"{ms:g}ms"


def build_grid(
    base: StreamOptions,
    policies: Sequence[str],
    chunk_ms: Sequence[float] = (),
    searches: Sequence[str] = (),
    grid: Mapping[str, Sequence[str]] | None = None,
    beams: Mapping[str, int] | None = None,
) -> list[SweepPoint]:
    """The configurations of a sweep: every combination, the offline policy once per search/grid value.

    Args:
        base: the options every point starts from.
        policies: policy names (``la-2``, ``hold-6``, ``sp-2``, ``offline``, ...).
        chunk_ms: chunk sizes (empty: the base chunk size only).
        searches: search names (empty: the base search only).
        grid: other axes, dotted option names to values (a ``search.beam`` axis wins over ``beams``).
        beams: the beam size of each search of ``searches`` (a search it does not name: the base's beam).
    """
    if not policies:
        raise OptionError("a sweep needs at least one policy")
    grid = dict(grid or {})
    chunks = list(chunk_ms) or [base.chunk_ms]
    search_names = list(searches) or [base.search.name]
    axes = list(grid.items())
    points: list[SweepPoint] = []
    labels: set[str] = set()
    for policy in policies:
        parsed = PolicyOptions.parse(policy)
        for search in search_names:
            for combo in itertools.product(*[values for _, values in axes]):
                overrides = {k: v for (k, _), v in zip(axes, combo, strict=True)}
                for chunk in chunks if parsed.name != "offline" else [base.chunk_ms]:
                    opts = dataclasses.replace(base, policy=parsed, chunk_ms=float(chunk))
                    opts = apply_override(opts, "search.name", search)
                    if beams and search in beams:
                        opts = dataclasses.replace(opts, search=dataclasses.replace(opts.search, beam=beams[search]))
                    for key, value in overrides.items():
                        opts = apply_override(opts, key, value)
                    parts = [str(parsed)]
                    if parsed.name != "offline":
                        parts.append(_fmt_ms(float(chunk)))
                    if len(search_names) > 1:
                        parts.append(search if search == "greedy" else f"{search}{opts.search.beam}")
                    parts += [f"{k}={v}" for k, v in overrides.items()]
                    label = " ".join(parts)
                    if label in labels:
                        continue
                    labels.add(label)
                    points.append(SweepPoint(label, opts, overrides))
    return points


def _row(point: SweepPoint, scores: Mapping[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {
        "label": point.label,
        "policy": str(point.options.policy),
        "chunk_ms": "" if point.options.policy.name == "offline" else point.options.chunk_ms,
        "search": point.options.search.name,
        "beam": point.options.search.beam if point.options.search.name != "greedy" else "",
    }
    row.update({k: v for k, v in point.overrides.items() if k not in row})
    row.update(scores)
    return row


# Worker state of parallel sweeps: one engine per process.
_WORKER_ENGINE: Engine | None = None


def _init_worker(factory: Callable[[], Engine], threads: int) -> None:
    global _WORKER_ENGINE
    torch.set_num_threads(max(1, threads))
    _WORKER_ENGINE = factory()


def _run_point_in_worker(
    point: SweepPoint, items: Sequence[TestItem], out: str, eval_options: EvalOptions
) -> dict[str, Any]:
    assert _WORKER_ENGINE is not None, "worker not initialised"
    return _run_point(_WORKER_ENGINE, point, items, Path(out), eval_options)


def _run_point(
    engine: Engine, point: SweepPoint, items: Sequence[TestItem], out: Path, eval_options: EvalOptions
) -> dict[str, Any]:
    config = make_run_config(engine.describe(), point.options, items, eval_options, {"sweep_label": point.label})
    report = run_eval(engine, point.options, items, out, eval_options, config)
    return dict(report.scores)


def run_sweep(
    engine_factory: Callable[[], Engine],
    points: Sequence[SweepPoint],
    items: Sequence[TestItem],
    out_dir: str | Path,
    eval_options: EvalOptions | None = None,
    jobs: int = 1,
    progress: Callable[[SweepPoint, Mapping[str, Any]], None] | None = None,
    mp_context: str = "spawn",
) -> list[dict[str, Any]]:
    """Run every point over ``items``; returns one row per point (grid values + scores), in grid order.

    Args:
        engine_factory: loads the engine (called once, or once per worker process; must be picklable when
            ``jobs > 1``, e.g. ``functools.partial(SpeechEngine.load, model_options)``: every worker then loads
            the model from the same :class:`~simulst.config.ModelOptions`).
        points: the configurations (:func:`build_grid`).
        items: the test set.
        out_dir: the sweep folder; configuration ``p`` is evaluated into ``out_dir/runs/<p.dirname>``.
        eval_options: evaluation options shared by all points.
        jobs: worker processes (1: run in this process, loading the model once).
        progress: called with each finished point and its scores.
        mp_context: multiprocessing start method of the workers.
    """
    if jobs < 1:
        raise OptionError(f"--jobs must be >= 1, got {jobs}")
    if not points:
        raise OptionError("the sweep grid is empty")
    eval_options = eval_options or EvalOptions()
    if eval_options.realtime and jobs > 1:
        raise OptionError("a real-time run must not share the CPU with other runs: --jobs 1")
    out = Path(out_dir)
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    results: dict[int, dict[str, Any]] = {}
    if jobs == 1:
        engine = engine_factory()
        for i, point in enumerate(points):
            results[i] = _run_point(engine, point, items, runs / point.dirname, eval_options)
            if progress:
                progress(point, results[i])
    else:
        quiet = dataclasses.replace(eval_options, progress=False)
        threads = max(1, (multiprocessing.cpu_count() or 1) // jobs)
        ctx = multiprocessing.get_context(mp_context)
        with cf.ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_init_worker,
                                    initargs=(engine_factory, threads)) as pool:
            futures = {
                pool.submit(_run_point_in_worker, point, list(items), str(runs / point.dirname), quiet): i
                for i, point in enumerate(points)
            }
            for future in cf.as_completed(futures):
                i = futures[future]
                results[i] = future.result()
                if progress:
                    progress(points[i], results[i])
    return [_row(point, results[i]) for i, point in enumerate(points)]


def run_sweep_on_cluster(
    model: ModelOptions,
    points: Sequence[SweepPoint],
    items: Sequence[TestItem],
    out_dir: str | Path,
    eval_options: EvalOptions | None = None,
    cluster: ClusterOptions | None = None,
    progress: Callable[[SweepPoint, Mapping[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """:func:`run_sweep` on a Ray cluster (:mod:`simulst.evaluation.cluster`): one task per (point, utterance),
    the same folders and rows as a local sweep.

    Raises:
        ClusterRunError: instances that failed after their retries (every other point is written and scored).
    """
    if not points:
        raise OptionError("the sweep grid is empty")
    runs_dir = Path(out_dir) / "runs"
    runs = [ClusterRun(p.options, runs_dir / p.dirname, {"sweep_label": p.label}) for p in points]

    def report(r: int, scores: ScoreReport) -> None:
        if progress:
            progress(points[r], scores.scores)

    reports = run_on_cluster(model, runs, items, eval_options, cluster, report)
    return [_row(point, dict(rep.scores)) for point, rep in zip(points, reports, strict=True)]


def quality_metric_for(rows: Sequence[Mapping[str, Any]], preferred: str | None = None) -> str:
    """The quality column to plot: ``preferred`` if given, else BLEU, else the first quality metric present."""
    if preferred:
        return preferred
    for name in ("BLEU", "WER_whisper", "WER_norm", "chrF", "WER"):
        if any(isinstance(r.get(name), int | float) for r in rows):
            return name
    raise OptionError("the sweep has no quality metric to plot (no references?)")


def _cell(value: Any) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.3f}"
    return str(value)


def write_table(
    rows: Sequence[Mapping[str, Any]], out_dir: str | Path, quality: Sequence[str] = ()
) -> tuple[Path, Path]:
    """Write ``sweep.csv`` (all columns) and ``sweep.md`` (grid, ``quality`` and the main latency/cost columns)."""
    out = Path(out_dir)
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    csv_path = out / SWEEP_CSV
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow(["" if row.get(c) is None else row.get(c) for c in columns])
    grid_cols = ["policy"] + [c for c in ("chunk_ms",) if any(r.get(c) not in ("", None) for r in rows)]
    grid_cols += [c for c in ("search", "beam") if len({str(r.get(c)) for r in rows}) > 1]
    extra_grid = [c for c in columns if "." in c or c in ("initial_wait_ms",)]
    md_cols = grid_cols + extra_grid + [c for c in (*quality, *MD_LATENCY, *MD_COST) if c in columns]
    lines = ["| " + " | ".join(md_cols) + " |", "|" + "|".join("---" for _ in md_cols) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(c)) for c in md_cols) + " |")
    md_path = out / SWEEP_MD
    md_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return csv_path, md_path


def read_table(path: str | Path) -> list[dict[str, Any]]:
    """Read a ``sweep.csv`` back (numbers as floats)."""
    rows: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as f:
        for raw in csv.DictReader(f):
            row: dict[str, Any] = {}
            for k, v in raw.items():
                try:
                    row[k] = float(v) if v not in ("", None) and k not in ("label", "policy", "search") else v
                except ValueError:
                    row[k] = v
            rows.append(row)
    return rows
