"""How long a command waits for its model: ``load_model`` of each catalog model (read the weights, build the
network, prepare it as the default options run it), timed in a fresh process each time, imports not counted, the
weights' files in the OS cache (one untimed load first).

``--src`` times another checkout's code (its ``src`` folder; e.g. a ``git worktree`` of an earlier commit) under
its own ``--label``: rows are kept per (label, model), so a page compares code versions timed in one sitting.
Writes ``bench/results/model_load.csv`` and ``model_load.md``; run it alone on a quiet machine.

    .venv/bin/python bench/model_load.py [--repeats 7] [--src DIR --label NAME]
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    ROOT,
    add_code_version_arguments,
    code_version,
    load_average,
    machine_note,
    markdown_table,
    speed_anchor_ms,
    timed_spread,
    write_report,
    write_version_rows,
)

RESULTS = ROOT / "bench" / "results"
MODELS = ("whisper-tiny.en", "whisper-base")
COLUMNS = ("label", "model", "median_s", "min_s", "max_s", "repeats", "machine")
TIMED = """
import sys, time
from simulst.config import ModelOptions
from simulst.models.loading import load_model
start = time.perf_counter()
load_model(ModelOptions(name=sys.argv[1]))
print(time.perf_counter() - start)
"""


def load_seconds(model: str, src: Path) -> float:
    """One fresh process's ``load_model`` wall time (seconds)."""
    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", TIMED, model], env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="fresh processes per model (7)")
    add_code_version_arguments(parser)
    args = parser.parse_args()
    src, label = code_version(parser, args)
    load_before, anchor = load_average(), speed_anchor_ms()
    rows = []
    for model in MODELS:
        # (the untimed first load: the weights into the OS cache, and the base model joined once)
        spread = timed_spread(functools.partial(load_seconds, model, src), args.repeats)
        rows.append({"label": label, "model": model, **spread})
        print(f"{label}  {model}: median {rows[-1]['median_s']:.3f} s", flush=True)
    note = machine_note(load_before, anchor)
    for row in rows:
        row["machine"] = note
    table = write_version_rows(RESULTS / "model_load.csv", label, rows, COLUMNS)  # (a label times every model)
    write_report(RESULTS / "model_load.md", "\n".join([
        "# Model load time", "",
        "`load_model` of each catalog model in a fresh process (imports not counted, weights in the OS cache), "
        "seconds over the repeats; written by `bench/model_load.py`.", "",
        markdown_table(table, COLUMNS), "",
    ]))


if __name__ == "__main__":
    main()
