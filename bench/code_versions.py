"""Two versions of the code on the same runs: the rows of ``quality_latency.py`` logs written by each, side by side.

To time a change of the code (not of the options), run ``quality_latency.py`` with the code before it
(``PYTHONPATH=<a worktree of the commit before>/src``) and after, each into its own ``--out`` folder, one after the
other on a quiet machine, and the first of the two again (A, B, A: the machine's speed drifts by more than many
changes save within half an hour; the two A runs show how much); then this script reads both logs of each run
and writes one table: quality, latency, compute (RTF; with ``--realtime``, AL_live and RTF_live), how many
utterances' texts are equal, and the paired bootstrap 95 % intervals over utterances of the quality difference
(after − before, ``d_before``, as ``quality_latency.py`` computes it) and of the RTF difference (``d_RTF``, as
``paired_compute.py`` does); run it once more with the second A as ``--after`` to see the drift::

    .venv/bin/python bench/code_versions.py --task translate --run balanced=quality_latency/translate/balanced \\
        --before bench/results/decoder_steps/before --after bench/results/decoder_steps/after \\
        --out bench/results/decoder_steps/code_versions.md

A run is named ``NAME=PATH``: PATH is its ``instances.log`` folder relative to each ``--before`` / ``--after``
folder. Timings compare only within one sitting of the machine: the note under each folder's own
``quality_latency.md`` gives its load and speed anchor.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from simulst.evaluation.instances import read_log

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import markdown_table, write_csv, write_report
from paired_compute import compute_of, rtf_interval
from quality_latency import QUALITY, score_row

COLUMNS = ["task", "run", "code", "n", "Q1", "Q2", "AL", "LAAL", "RTF", "AL_live", "RTF_live", "equal_texts",
           "d_before", "d_RTF"]


def compare(task: str, name: str, before: Path, after: Path) -> list[dict[str, Any]]:
    """The rows of one run: the code before, the code after (with the texts equal to before's and the interval)."""
    logs = {"before": read_log(before / "instances.log"), "after": read_log(after / "instances.log")}
    if [r.source for r in logs["before"]] != [r.source for r in logs["after"]]:
        raise SystemExit(f"{name}: the two logs are not of the same utterances in the same order")
    rows = []
    for code, records in logs.items():
        against = (("before", "d_before"),) if code == "after" else ()
        row = score_row(task, name, "", records, {"before": logs["before"]}, against=against)
        row.update(run=name, code=code)
        if code == "after":
            equal = sum(a.prediction == b.prediction for a, b in zip(logs["before"], records, strict=True))
            row["equal_texts"] = f"{equal}/{len(records)}"
            row["d_RTF"] = rtf_interval([compute_of(logs["before"])], [compute_of(records)]).describe(3)
        rows.append({column: row.get(column, "") for column in COLUMNS})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=tuple(QUALITY), required=True)
    parser.add_argument("--run", action="append", required=True, metavar="NAME=PATH",
                        help="a run's instances.log folder, relative to --before and --after (repeatable)")
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="the Markdown table (+ .csv beside it)")
    args = parser.parse_args()
    rows = []
    for spec in args.run:
        name, _, path = spec.partition("=")
        if not path:
            raise SystemExit(f"--run wants NAME=PATH, got {spec!r}")
        rows += compare(args.task, name, args.before / path, args.after / path)
    q1, q2 = QUALITY[args.task]
    write_csv(args.out.with_suffix(".csv"), rows, COLUMNS)
    header = (f"# The code before and after, {args.task}\n\nWritten by `bench/code_versions.py` (its docstring says "
              f"how). Q1 / Q2: {q1} / {q2}; latencies in seconds; d_before / d_RTF: Q1 / RTF after − before, paired "
              "bootstrap 95 % interval over utterances.")
    write_report(args.out, f"{header}\n\n{markdown_table(rows, COLUMNS)}\n")


if __name__ == "__main__":
    main()
