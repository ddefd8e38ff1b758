"""Two configurations of ``bench/quality_latency.py`` compared over several chunk grids of the short-form dev set.

One grid's WER is one draw of where the chunk boundaries fall (``--initial-wait-ms`` shifts the grid), and two
configurations on one grid often differ by less than the grids do. This script reads the kept logs of each
configuration on every grid and compares them over all the grids at once: a paired bootstrap (95 %, 1000
resamples) that draws utterances, each with its outputs on every grid (an utterance's statistics are summed over
the grids: its grids are not independent draws, the utterances are).

    .venv/bin/python bench/pooled_grids.py --task transcribe \\
        --compare "segment-10,segment-10-grid-1,segment-10-grid-2:vad,vad-grid-1,vad-grid-2" [--compare ...]

``A1,A2,...:B1,B2,...``: the logs of A and of B on the same grids, in the same order; a name is a row of the main
table (``quality_latency/<task>/NAME/``) or a variant (``quality_latency/<task>_explore/NAME/``). Writes
``bench/results/quality_latency_grids.md`` (transcribe; ``quality_latency_grids_translate.md``: translate): per
comparison, each side's mean quality and AL over the grids, and the pooled interval of B − A. ``--per-set A:B``
(repeatable) adds a table of that comparison on each dev set alone (jfk, fleurs-en-dev, librispeech-other-dev;
fleurs-de, fleurs-fr): a goal stated for one set (LibriSpeech) is checked on it, not only on the pool. It runs
nothing: the logs come from ``quality_latency.py`` (``--variant``).

The page's earlier rows stay as they were computed (:func:`merged_rows`): a comparison asked for again replaces its
row, a new one is added after them. Why: a main-table name (``balanced``) reads whatever log that row holds now, a
later preset's, so an old comparison computed again would pair the new log with the old grids' variants.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import grid_statistics, markdown_table, seconds, word_units, write_report
from quality_latency import QUALITY, RESULTS, TASKS
from simulst.evaluation.bootstrap import PairedInterval, bootstrap_from_stats
from simulst.evaluation.instances import InstanceRecord, read_log
from simulst.evaluation.scoring import ScoreOptions, score_records


def log_of(task: str, name: str) -> list[InstanceRecord]:
    """The kept log of ``name``: a main-table config, else a variant.

    Raises:
        SystemExit: no log of that name.
    """
    for folder in (RESULTS / "quality_latency" / task / name, RESULTS / "quality_latency" / f"{task}_explore" / name):
        if (folder / "instances.log").is_file():
            return read_log(folder / "instances.log")
    raise SystemExit(f"no log of {name!r} for {task} under {RESULTS / 'quality_latency'}")


def mean_al(task: str, records: Sequence[InstanceRecord]) -> float:
    """AL in seconds (word unit, source clock, the mean over utterances), as the main table's AL column."""
    scores = score_records(records, ScoreOptions(quality_metrics=QUALITY[task][:1])).scores
    return float(seconds(scores["AL"]))


def words_only(record: InstanceRecord) -> InstanceRecord:
    """``record`` without its punctuation-only output units, their delays with them (:func:`common.word_units`;
    in AL each extra unit lowers the ideal-delay line of the units after it)."""
    units, delays, elapsed = word_units(record.prediction.split(), record.delays, record.elapsed)
    return dataclasses.replace(record, prediction=" ".join(units), delays=delays, elapsed=elapsed,
                               prediction_length=len(units))


def pooled_interval(metric: str, grids_a: Sequence[Sequence[InstanceRecord]],
                    grids_b: Sequence[Sequence[InstanceRecord]],
                    references: Sequence[str] | None = None) -> PairedInterval:
    """B − A over all the grids: per utterance the statistics of its outputs on every grid, summed; scored against
    ``references`` (None: the logs' own)."""
    if len(grids_a) != len(grids_b) or not grids_a:
        raise SystemExit(f"{len(grids_a)} grids of A and {len(grids_b)} of B: name the same grids for both")
    if references is None:
        references = [r.reference or "" for r in grids_a[0]]
    stats_a, score = grid_statistics(metric, [[r.prediction for r in log] for log in grids_a], references)
    stats_b, _ = grid_statistics(metric, [[r.prediction for r in log] for log in grids_b], references)
    return bootstrap_from_stats(metric, stats_a, stats_b, score)


def dev_set(record: InstanceRecord) -> str:
    """The dev set an utterance comes from: its audio's folder (``jfk``, ``fleurs-en-dev``,
    ``librispeech-other-dev``), or for the multilingual FLEURS folder its language's (``fleurs-de``, ...)."""
    folder = Path(record.source or "").parent.name
    uid = str(((record.extra or {}).get("simulst") or {}).get("id", ""))
    return uid.rsplit("-", 1)[0] if folder == "fleurs-multi" and "-" in uid else folder


def split_by_set(grids: Sequence[Sequence[InstanceRecord]],
                 order: Sequence[InstanceRecord]) -> dict[str, list[list[InstanceRecord]]]:
    """Each grid's records grouped by the dev set of the utterance at the same place in ``order`` (the grids
    hold the same utterances in the same order), sets in order of first appearance."""
    sets = [dev_set(r) for r in order]
    if any(len(grid) != len(sets) for grid in grids):
        raise SystemExit("the logs compared per dev set hold different numbers of utterances")
    return {name: [[r for r, s in zip(grid, sets, strict=True) if s == name] for grid in grids]
            for name in dict.fromkeys(sets)}


def comparison(task: str, spec: str) -> tuple[str, str, list[list[InstanceRecord]], list[list[InstanceRecord]]]:
    """The names and logs of ``A1,A2,...:B1,B2,...``."""
    side_a, sep, side_b = spec.partition(":")
    if not sep:
        raise SystemExit(f"bad comparison {spec!r}: A1,A2,...:B1,B2,...")
    return (side_a, side_b, [log_of(task, n) for n in side_a.split(",")],
            [log_of(task, n) for n in side_b.split(",")])


def compared(task: str, grids_a: Sequence[Sequence[InstanceRecord]],
             grids_b: Sequence[Sequence[InstanceRecord]]) -> dict[str, object]:
    """One row's figures: each side's quality over all its grids, their mean AL, and the pooled intervals."""
    metric, second = QUALITY[task]
    interval, also = pooled_interval(metric, grids_a, grids_b), pooled_interval(second, grids_a, grids_b)
    return {"grids": len(grids_a), "n": interval.n, f"{metric}_A": interval.a, f"{metric}_B": interval.b,
            "AL_A": float(np.mean([mean_al(task, g) for g in grids_a])),
            "AL_B": float(np.mean([mean_al(task, g) for g in grids_b])),
            "AL_words_A": float(np.mean([mean_al(task, [words_only(r) for r in g]) for g in grids_a])),
            "AL_words_B": float(np.mean([mean_al(task, [words_only(r) for r in g]) for g in grids_b])),
            "B − A": interval.describe(), f"B − A ({second})": also.describe()}


def merged_rows(old_page: str, first_column: str, rows: Sequence[dict[str, object]],
                columns: Sequence[str], key_until: str = "grids") -> list[str]:
    """The table lines of ``rows`` merged into the page's earlier table whose header starts with ``first_column``:
    each earlier line kept in place unless a row of the same key (every column before ``key_until``) replaces
    it, the other rows added after them."""
    key_width = columns.index(key_until)
    new = [markdown_table([row], columns).splitlines()[2] for row in rows]
    def key(line: str) -> tuple[str, ...]:
        return tuple(cell.strip() for cell in line.strip().strip("|").split("|")[:key_width])
    lines = old_page.splitlines()
    header = f"| {first_column} | "
    start = next((i for i, line in enumerate(lines) if line.startswith(header)), None)
    earlier = []
    if start is not None:
        for line in lines[start + 2 :]:
            if not line.startswith("|"):
                break
            earlier.append(line)
    replacing = {key(line): line for line in new}
    kept = [replacing.pop(key(line), line) for line in earlier]
    return kept + [line for line in new if key(line) in replacing]


def grids_page(task: str) -> str:
    """The task's page: one per task (each run adds the comparisons it is given, or replaces them)."""
    return "quality_latency_grids.md" if task == "transcribe" else f"quality_latency_grids_{task}.md"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=TASKS, required=True)
    parser.add_argument("--compare", action="append", default=[], metavar="A1,A2,...:B1,B2,...")
    parser.add_argument("--per-set", action="append", default=[], metavar="A1,A2,...:B1,B2,...",
                        help="also compare these on each dev set alone (a second table)")
    args = parser.parse_args()
    if not args.compare and not args.per_set:
        parser.error("nothing to compare: give --compare or --per-set")
    metric, second = QUALITY[args.task]
    rows = []
    for spec in args.compare:
        side_a, side_b, grids_a, grids_b = comparison(args.task, spec)
        rows.append({"task": args.task, "A": side_a, "B": side_b, **compared(args.task, grids_a, grids_b)})
    set_rows = []
    for spec in args.per_set:
        side_a, side_b, grids_a, grids_b = comparison(args.task, spec)
        by_set_a, by_set_b = split_by_set(grids_a, grids_a[0]), split_by_set(grids_b, grids_a[0])
        set_rows += [{"set": name, "A": side_a, "B": side_b, **compared(args.task, by_set_a[name], by_set_b[name])}
                     for name in by_set_a]
    columns = ["task", "A", "B", "grids", "n", f"{metric}_A", f"{metric}_B", "AL_A", "AL_B", "AL_words_A",
               "AL_words_B", "B − A",
               f"B − A ({second})"]
    header = (
        "# Configurations compared over chunk grids (short-form dev set)\n\n"
        "Written by `bench/pooled_grids.py` (its docstring says how) from the logs of `bench/quality_latency.py`. "
        f"`{metric}_A` / `_B`: the corpus score of all the grids' outputs together; AL: the mean over the grids "
        "(seconds, source clock); `AL_words`: the same over the words alone (output units that are only punctuation "
        "left out with their delays: a mark emitted on its own counts as a word unit in AL); `B − A`: the paired "
        "bootstrap 95 % interval over utterances, each drawn with its outputs on every grid; "
        f"`B − A ({second})`: the same for {second}.\n\n"
    )
    page = RESULTS / grids_page(args.task)
    old = page.read_text(encoding="utf-8") if page.is_file() else ""
    table = markdown_table([], columns) + "\n" + "\n".join(merged_rows(old, "task", rows, columns))
    text = header + table.rstrip("\n")
    set_columns = ["set", *columns[1:]]
    set_lines = merged_rows(old, "set", set_rows, set_columns)
    if set_lines:
        text += ("\n\n## Per dev set\n\nThe same, each dev set's utterances alone (`--per-set`); an interval over "
                 "a few utterances is wide.\n\n" + markdown_table([], set_columns) + "\n" + "\n".join(set_lines))
    write_report(page, text)
    print(page.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
