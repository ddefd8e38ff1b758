"""SimulEval's own ``simuleval --score-only`` run on a log folder, for tests that compare our scores with it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

LATENCY = ("AL", "LAAL", "AP", "DAL", "ATD", "StartOffset", "EndOffset")
"""The latency metrics both SimulEval and simulst compute (each also ``_CA``, computation-aware)."""


def simuleval_cli(log_dir: Path, computation_aware: bool) -> dict[str, float]:
    """The scores ``simuleval --score-only`` prints for ``log_dir`` (an ``instances.log`` and ``config.yaml``)."""
    script = (
        "import sys, pandas as pd\n"
        "pd.set_option('display.width', 10000); pd.set_option('display.max_columns', 1000)\n"
        "from simuleval.cli import main\n"
        "sys.argv = ['simuleval'] + sys.argv[1:]\n"
        "main()\n"
    )
    args = ["--score-only", "--output", str(log_dir), "--latency-metrics", *LATENCY]
    if computation_aware:
        args.append("--computation-aware")
    proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    header, values = [line.split() for line in proc.stdout.strip().splitlines()[-2:]]
    return dict(zip(header, (float(v) for v in values[1:]), strict=True))  # values[0] is the row label
