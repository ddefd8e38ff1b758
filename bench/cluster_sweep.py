"""The same sweep on one machine's processes and on a Ray cluster of two nodes: what Ray costs at equal cores.

1. **local**: ``simulst sweep ... --jobs 2`` (two worker processes of one torch thread each, a configuration per
   process at a time).
2. **ray, 2 nodes**: two Ray nodes of one CPU each started on this machine as separate processes (``ray start
   --head --num-cpus 1`` and ``ray start --address ... --num-cpus 1``, as on two machines), then
   ``simulst sweep ... --cluster ray --ray-address ...`` (one task per configuration and utterance, a worker
   process per CPU, each loading the model once). The nodes are started before the clock starts, as a cluster
   is up before its users come; the driver's connection, the workers' start and their model loads are inside it.

Per mode: the wall time of the whole command, and the overhead of Ray against local. The two sweeps' logs are
compared with their measured compute times zeroed (the rest must be equal) and the tasks each node ran are
counted. The sweep: LA-2 and LA-3 at 600 and 1000 ms chunks over librispeech-other-dev (50 utterances, 6.4 min),
Whisper tiny.en. Run on a quiet machine (nothing else running):

    .venv/bin/python bench/cluster_sweep.py [--limit N]

Writes ``bench/results/cluster_sweep.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DATA, load_average, machine_note, markdown_table, write_report

RESULTS = Path(__file__).resolve().parent / "results"
GRID = ["--policies", "la-2", "la-3", "--chunks", "600", "1000"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_node(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``ray start ... --block`` (it stops its node's processes when terminated), once the node is up."""
    with log.open("wb") as f:
        process = subprocess.Popen([str(Path(sys.executable).with_name("ray")), "start", *args, "--block"], stdout=f,
                                   stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + 120
    while "block forever" not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise SystemExit(f"ray start failed:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.5)
    return process


def untimed(log: Path) -> list[str]:
    """A log's lines with the measured compute times zeroed."""
    out = []
    for line in log.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        record["elapsed"] = []
        record["simulst"]["compute_ms"] = 0.0
        for emission in record["simulst"]["emissions"]:
            emission["elapsed_ms"] = 0.0
        out.append(json.dumps(record))
    return out


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=None, help="the first N utterances only (a smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS / "cluster_sweep.md")
    args = parser.parse_args()
    load_before = load_average()
    work = Path(tempfile.mkdtemp(prefix="cluster_sweep_"))
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    sweep = [sys.executable, "-m", "simulst.cli", "sweep", str(DATA / "librispeech-other-dev.tsv"), *GRID,
             "--no-progress-bar", *(["--limit", str(args.limit)] if args.limit else [])]
    local_s = timed([*sweep, "--output", str(work / "local"), "--jobs", "2"], env)

    port = free_port()
    common = ["--node-ip-address", "127.0.0.1", "--num-cpus", "1"]
    nodes = [start_node(["--head", "--port", str(port), "--include-dashboard=false", "--ray-client-server-port",
                         str(free_port()), "--dashboard-agent-listen-port", str(free_port()), *common],
                        work / "head.log", env)]
    try:
        nodes.append(start_node(["--address", f"127.0.0.1:{port}", "--dashboard-agent-listen-port", str(free_port()),
                                 *common], work / "worker.log", env))
        ray_s = timed([*sweep, "--output", str(work / "ray"), "--cluster", "ray", "--ray-address",
                       f"127.0.0.1:{port}"], env)
    finally:
        for node in reversed(nodes):
            os.killpg(node.pid, signal.SIGTERM)
        for node in nodes:
            node.wait(60)

    runs = sorted(p.name for p in (work / "local" / "runs").iterdir())
    equal = all(untimed(work / "local" / "runs" / r / "instances.log") == untimed(work / "ray" / "runs" / r /
                                                                                  "instances.log") for r in runs)
    per_node = Counter(json.loads(line)["node"][:8] for r in runs
                       for line in (work / "ray" / "runs" / r / "cluster.jsonl").read_text().splitlines())
    tasks = sum(per_node.values())
    rows: list[dict[str, object]] = [
        {"mode": "local --jobs 2", "cores": 2, "tasks": len(runs), "wall s": local_s, "overhead": "",
         "equal to local": "", "tasks per node": ""},
        {"mode": "ray, 2 nodes x 1 CPU", "cores": 2, "tasks": tasks, "wall s": ray_s,
         "overhead": f"{100 * (ray_s / local_s - 1):+.1f} %", "equal to local": "yes" if equal else "NO",
         "tasks per node": ", ".join(f"{n}: {c}" for n, c in sorted(per_node.items()))},
    ]
    header = (
        "# One sweep on local processes and on two Ray nodes, at equal cores\n\n"
        "Written by `bench/cluster_sweep.py` (its docstring says what runs). Sweep: LA-2 and LA-3 at 600 and "
        f"1000 ms over librispeech-other-dev ({args.limit or 50} utterances), Whisper tiny.en; wall s: the whole "
        "command; equal to local: every instance log equal to the local one's once the measured compute times "
        "are zeroed.\n\n"
        f"* Run: {machine_note(load_before)}.\n\n"
    )
    write_report(args.out, header + markdown_table(rows, list(rows[0])))
    print(args.out.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
