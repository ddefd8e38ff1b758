"""How long the commands that run no model wait: ``simulst --help``, a subcommand's help, a registry's listing, an
unknown policy's error and a missing file's error, each a fresh ``python -m simulst.cli`` process timed whole
from outside (interpreter start, imports, parsing, the exit), seconds over the repeats after one untimed run.

``--src`` times another checkout's code (its ``src`` folder; e.g. a ``git worktree`` of an earlier commit) under
its own ``--label``: rows are kept per (label, command), so a page compares code versions timed in one sitting.
Writes ``bench/results/cli_startup.csv`` and ``cli_startup.md``; run it alone on a quiet machine.

    .venv/bin/python bench/cli_startup.py [--repeats 7] [--src DIR --label NAME]
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    ROOT,
    add_code_version_arguments,
    code_version,
    load_average,
    machine_note,
    markdown_table,
    timed_spread,
    write_report,
    write_version_rows,
)

RESULTS = ROOT / "bench" / "results"
COMMANDS = {
    "--help": ["--help"],
    "transcribe --help": ["transcribe", "--help"],
    "--list-policies": ["--list-policies"],
    "unknown policy": ["transcribe", "missing.wav", "--policy", "soon"],
    "missing file": ["transcribe", "missing.wav"],
}
EXIT_CODES = {"unknown policy": 2, "missing file": 2}
COLUMNS = ("label", "command", "median_s", "min_s", "max_s", "repeats", "machine")


def command_seconds(argv: list[str], src: Path, expected: int) -> float:
    """One fresh process's wall time (seconds); its exit code must be ``expected``."""
    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "simulst.cli", *argv], env=env, capture_output=True, cwd=ROOT)
    wall = time.perf_counter() - start
    if done.returncode != expected:
        raise SystemExit(f"simulst {' '.join(argv)}: exit code {done.returncode}, expected {expected}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="fresh processes per command (7)")
    add_code_version_arguments(parser)
    args = parser.parse_args()
    src, label = code_version(parser, args)
    load_before = load_average()
    rows = []
    for name, argv in COMMANDS.items():
        expected = EXIT_CODES.get(name, 0)
        spread = timed_spread(functools.partial(command_seconds, argv, src, expected), args.repeats)
        rows.append({"label": label, "command": f"simulst {name}", **spread})
        print(f"{label}  simulst {name}: median {rows[-1]['median_s']:.3f} s", flush=True)
    note = machine_note(load_before)
    for row in rows:
        row["machine"] = note
    table = write_version_rows(RESULTS / "cli_startup.csv", label, rows, COLUMNS)
    write_report(RESULTS / "cli_startup.md", "\n".join([
        "# Command start-up", "",
        "Commands that run no model, each a fresh `python -m simulst.cli` process timed whole (interpreter start, "
        "imports, parsing, exit), seconds over the repeats after one untimed run; written by "
        "`bench/cli_startup.py`.", "",
        markdown_table(table, COLUMNS), "",
    ]))


if __name__ == "__main__":
    main()
