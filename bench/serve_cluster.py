"""Serving capacity of ``simulst serve`` as one process and on Ray Serve (``--cluster ray``) with 1 and 2 replicas
of one CPU each, on this machine.

Each setup is a ``simulst serve`` process with the same model and stream options (``--server-args``) and one
stream at a time per model (``--batching off``): ``process`` (one process, torch's threads, ``--workers 1``),
``ray-1`` (``--cluster ray --replicas 1 --replica-cpus 1``: a local Ray instance, one replica of one CPU behind
Serve's proxy) and ``ray-2`` (two such replicas, each with its own model); ``parallel`` (one process, one stream
per core: the CPU default since 2026-11-26, one model for two workers) is offered beside them. Then, with
:mod:`serve_load`'s clients and columns:

1. **Reference**: each utterance (jfk + fleurs-en-dev, or the first ``--items``) is streamed alone at the pace of a
   live speaker.
2. **Load**: for N = 1, 2, 4, ... clients at once, client i streams utterance i mod the set's size (starts
   staggered over one chunk); AL_CA, AL, WER, the largest lag and the outputs equal to the reference, per N.

The capacity of a setup is the largest N whose mean AL_CA is at most ``--target-al`` (2 s). What it is read for:
two replicas of one core each should hold about what one process on both cores holds (Serve's proxy adds a hop
per websocket message), and one replica about half. Results: ``bench/results/serve_cluster.md`` (+ ``.csv``).
Run on a quiet machine (nothing else running; the Ray setups start their own local Ray instance):

    OMP_NUM_THREADS=2 .venv/bin/python bench/serve_cluster.py [--clients 1,2,4,6,8] [--setups process,ray-1,ray-2]
        [--server-args "--policy la-2"] [--items 6]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    Item,
    english_set,
    load_average,
    machine_note,
    markdown_table,
    speed_anchor_ms,
    write_csv,
    write_report,
)
from serve_load import COLUMNS, free_port, row, run_clients
from simulst.config.presets import preset
from simulst.server.client import ClientResult

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]
SETUPS = {  # name -> its serve flags
    "process": ["--workers", "1"],
    "parallel": [],
    "ray-1": ["--cluster", "ray", "--replicas", "1", "--replica-cpus", "1"],
    "ray-2": ["--cluster", "ray", "--replicas", "2", "--replica-cpus", "1"],
}


class Setup:
    """A ``simulst serve`` process (and, for a Ray setup, the local Ray instance it starts) on a free port,
    up once ``/health`` answers for all its replicas."""

    def __init__(self, name: str, extra: list[str]) -> None:
        self.name = name
        self.port = free_port()
        flags = SETUPS[name]
        args = [str(ROOT / ".venv" / "bin" / "simulst"), "serve", "--port", str(self.port), "--max-streams", "64",
                "--max-per-client", "64", "--max-speed", "4", "--log-level", "warning", "--batching", "off", *flags,
                *extra]
        replicas = int(flags[flags.index("--replicas") + 1]) if "--replicas" in flags else 1
        # a Ray setup starts a Ray instance of its own on this machine, whatever RAY_ADDRESS says
        env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
        self.process = subprocess.Popen(args, env={**env, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + 300
        while True:
            try:
                health = self.health()
                up = len(health["replicas"]) if "replicas" in health else 1  # (one process lists none)
                if up == replicas:
                    return
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{name} did not start: {self.process.stderr.read().decode()[-2000:]}"
                                   if self.process.stderr else f"{name} did not start")
            time.sleep(0.5)

    def health(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as response:
            result: dict[str, Any] = json.loads(response.read())
            return result

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def stop(self) -> None:
        """SIGINT (a Ray setup drains, then stops its Ray instance); killed with its process group after 60 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def run_setup(name: str, extra: list[str], items: list[Item], clients: list[int], chunk_s: float) -> list[dict]:
    setup = Setup(name, extra)
    rows: list[dict[str, object]] = []
    try:
        reference: dict[str, str] = {}
        for item in items:  # each utterance alone: the reference output
            [result] = asyncio.run(run_clients(setup.ws, [item], [0.0]))
            reference[item.id] = result.text
        print(f"{name}: references done", file=sys.stderr, flush=True)
        for n in clients:
            chosen = [items[i % len(items)] for i in range(n)]
            delays = [chunk_s * i / n for i in range(n)]
            before = setup.health()
            results: list[ClientResult] = asyncio.run(run_clients(setup.ws, chosen, delays))
            time.sleep(1.5)  # (a cluster's /health adds the other replicas' reports, up to 1 s old)
            rows.append(row(name, n, chosen, results, reference, before, setup.health()))
            print(f"  {rows[-1]}", file=sys.stderr, flush=True)
    finally:
        setup.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="1,2,4,6,8")
    parser.add_argument("--setups", default=",".join(SETUPS), help=f"of {', '.join(SETUPS)}")
    parser.add_argument("--server-args", default="",
                        help="model and stream options of every setup (default: none, the defaults)")
    parser.add_argument("--items", type=int, default=6, help="the first ITEMS utterances of the set (default 6: all)")
    parser.add_argument("--target-al", type=float, default=2.0, help="mean AL_CA bound of the capacity (s)")
    parser.add_argument("--chunk-s", type=float, default=preset("transcribe").settings["chunk_ms"] / 1000.0,
                        help="the servers' chunk (staggers the clients; default: the default preset's)")
    parser.add_argument("--out", default=str(RESULTS / "serve_cluster.md"))
    args = parser.parse_args()
    setups = args.setups.split(",")
    unknown = sorted(set(setups) - set(SETUPS))
    if unknown:
        parser.error(f"unknown setup(s) {', '.join(unknown)}; known: {', '.join(SETUPS)}")
    load_before = load_average()
    anchor_ms = speed_anchor_ms()
    items = english_set()[: max(1, args.items)]
    clients = [int(n) for n in args.clients.split(",")]
    extra = shlex.split(args.server_args)
    rows: list[dict[str, object]] = []
    for name in setups:
        rows += run_setup(name, extra, items, clients, args.chunk_s)
    capacity = {}
    for name in setups:
        ok = [int(str(r["N"])) for r in rows if r["mode"] == name and float(str(r["AL_CA mean"])) <= args.target_al]
        capacity[name] = max(ok) if ok else 0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    columns = ["setup" if c == "mode" else c for c in COLUMNS if not c.endswith(" batch")]
    table = [{("setup" if k == "mode" else k): v for k, v in r.items()} for r in rows]
    write_csv(out.with_suffix(".csv"), table, columns)
    caps = ", ".join(f"{name} {n}" for name, n in capacity.items())
    text = "\n".join([
        "# Serving capacity: one process against Ray Serve replicas of one CPU (loopback)",
        "",
        f"`python bench/serve_cluster.py --clients {args.clients} --setups {args.setups} --items {len(items)}"
        + (f" --server-args \"{args.server_args}\"" if args.server_args else "") + "`",
        "",
        f"Machine: {machine_note(load_before, anchor_ms)}.",
        "",
        "Setups (each `simulst serve --batching off --max-streams 64`, its own process): process: one process, "
        "torch's threads; ray-1: `--cluster ray --replicas 1 --replica-cpus 1` (a local Ray instance, Serve's proxy "
        "in front of one replica of one CPU); ray-2: two such replicas, each with its own model. Each client "
        f"streams one of the first {len(items)} shared English utterances (jfk + fleurs-en-dev) at the pace of a "
        "live speaker in 100 ms frames. AL_CA: each word's delay is the client's clock when it arrived; AL: on the "
        "source clock; max lag: the largest (arrival - source time) of an emission; equal: outputs equal to the "
        "utterance's output streamed alone on the same setup; jobs: decoding jobs run (all replicas).",
        "",
        markdown_table(table, columns),
        "",
        f"**Capacity** (largest N with a mean AL_CA <= {args.target_al:g} s): {caps}.",
    ])
    write_report(out, text)
    print(text)


if __name__ == "__main__":
    main()
