"""Load on ``simulst serve``: N concurrent real-time clients on loopback, batched, one stream at a time, or one
stream per core.

For each server mode (``batched``: the streams' encoder and decoder calls gathered into batched calls;
``serial``: each stream's work runs alone, in the order the streams came due, reading all its pending audio
when its turn comes, as the peers serve streams behind a lock; ``parallel``: as serial, but as many streams at once
as there are cores, each on one core, the CPU default) a server process is started with the same model and stream
options (``--server-args``; ``--batching on`` / ``--batching off --workers 1`` / ``--batching off``), then:

1. **Reference**: each of the 6 shared English utterances (jfk + fleurs-en-dev) is streamed alone, at the pace
   of a live speaker (100 ms frames, sent when they would have been spoken). ``--task translate``: 3 German and 3
   French fleurs-multi utterances instead, each stream asking for Whisper's translation into English with its
   language named, on a multilingual model (``--model whisper-base`` unless ``--server-args`` say otherwise).
2. **Load**: for N = 1, 2, 4, 8, ... clients at once, client i streams utterance i mod 6 (starts staggered over
   one chunk of the task's default preset, as real clients come at random phases). Per client: AL_CA = AL
   (SimulEval, word unit, |Y*| = reference words) on each word's delay = the client's clock when the emission that
   wrote it arrived (from its first frame); AL on the source clock (``source_ms``). Per N: AL_CA p50 / p95 over
   clients, the mean AL, WER (a translation: BLEU), the largest lag (arrival − source time of an emission) and how
   many outputs equal that utterance's reference output of step 1 (equal text).

The capacity of a mode is the largest N whose mean AL_CA is at most ``--target-al`` (2 s). Results:
``bench/results/serve_load.md`` (+ ``.csv``). Run on a quiet machine (nothing else running):

    OMP_NUM_THREADS=2 .venv/bin/python bench/serve_load.py [--clients 1,2,4,6,8,10] [--modes batched,serial,parallel]
        [--server-args "--policy ctc"] [--repeat 3] [--task translate] [--target-al 3] [--out FILE]

A single run of N clients lasts about as long as the longest utterance, and near the capacity a few late streams
dominate its mean, so one run is a noisy figure. ``--repeat R`` runs each N R times (run k staggers the clients by
(i + k/R)/N of a chunk) and pools the clients of all runs in the row, with the range of the runs' own means.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import socket
import statistics
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
    translation_set,
    write_csv,
    write_report,
)
from simulst.config.presets import preset
from simulst.evaluation.latency import average_lagging
from simulst.evaluation.quality import bleu, normalize_for_wer, wer
from simulst.server.client import ClientResult, stream_audio

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ["mode", "N", "AL_CA mean", "AL_CA p50", "AL_CA p95", "AL", "WER", "max lag s", "equal", "encode batch",
           "start batch", "step batch", "jobs", "runs", "AL_CA runs"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """A ``simulst serve`` process on a free loopback port."""

    def __init__(self, mode: str, extra: list[str]) -> None:
        self.port = free_port()
        args = [str(ROOT / ".venv" / "bin" / "simulst"), "serve", "--port", str(self.port), "--max-streams", "64",
                "--max-per-client", "64", "--max-speed", "4", "--log-level", "warning", *extra]
        args += {"batched": ["--batching", "on"], "serial": ["--batching", "off", "--workers", "1"],
                 "parallel": ["--batching", "off"]}[mode]
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        self.process = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while True:
            try:
                self.health()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the server did not start: {self.process.stderr.read().decode()[-2000:]}"
                                       if self.process.stderr else "the server did not start") from None
                time.sleep(0.5)

    def health(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as response:
            result: dict[str, Any] = json.loads(response.read())
            return result

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


async def run_clients(url: str, items: list[Item], delays_s: list[float], task: str = "transcribe"
                      ) -> list[ClientResult]:
    async def one(item: Item, delay: float) -> ClientResult:
        await asyncio.sleep(delay)
        start = {"task": task, "language": item.language} if task == "translate" else None
        return await stream_audio(url, item.audio, 16000, start=start, frame_ms=100.0, realtime=True)

    return list(await asyncio.gather(*(one(i, d) for i, d in zip(items, delays_s, strict=True))))


def al_ca(result: ClientResult, item: Item) -> float | None:
    delays = [m["received_ms"] for m in result.emissions for _ in m["text"].split()]
    return average_lagging(delays, item.source_ms, len(item.transcript.split())) if delays else None


def al(result: ClientResult, item: Item) -> float | None:
    delays = [m["source_ms"] for m in result.emissions for _ in m["text"].split()]
    return average_lagging(delays, item.source_ms, len(item.transcript.split())) if delays else None


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    low, high = int(k), min(len(ordered) - 1, int(k) + 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def mean_s(values_ms: list[float | None]) -> float:
    """The mean in seconds of the values that exist (NaN when none does)."""
    present = [v / 1000 for v in values_ms if v is not None]
    return statistics.fmean(present) if present else float("nan")


def quality(task: str, results: list[ClientResult], items: list[Item]) -> dict[str, float]:
    """The clients' outputs scored against the references: WER (%, normalised) of a transcription, sacreBLEU's
    BLEU of a translation."""
    texts, references = [r.text for r in results], [i.transcript for i in items]
    if task == "translate":
        return {"BLEU": bleu(texts, references)}
    return {"WER": wer(texts, references, normalize_for_wer)}


def row(mode: str, n: int, items: list[Item], results: list[ClientResult], reference: dict[str, str],
        before: dict[str, Any], after: dict[str, Any], runs: int = 1, task: str = "transcribe") -> dict[str, object]:
    """One table row of N clients from ``runs`` runs of them: ``items`` and ``results`` hold every run's clients
    (run by run), pooled; ``AL_CA runs`` is the range of the runs' own means and ``jobs`` the mean per run
    (rounded)."""
    per_client = [al_ca(r, i) for r, i in zip(results, items, strict=True)]
    ca = [v / 1000 for v in per_client if v is not None]
    run_means = [mean_s(per_client[k * n:(k + 1) * n]) for k in range(runs)]
    lags = [(m["received_ms"] - m["source_ms"]) / 1000 for r in results for m in r.emissions]
    equal = sum(1 for r, i in zip(results, items, strict=True) if r.text == reference[i.id])
    failed = [r.error for r in results if r.error]
    if failed:
        print(f"  {mode} N={n}: {len(failed)} clients got errors: {failed[:2]}", file=sys.stderr)
    out: dict[str, object] = {
        "mode": mode, "N": n, "AL_CA mean": mean_s(per_client),
        "AL_CA p50": percentile(ca, 0.5), "AL_CA p95": percentile(ca, 0.95),
        "AL": mean_s([al(r, i) for r, i in zip(results, items, strict=True)]),
        **quality(task, results, items),
        "max lag s": max(lags) if lags else float("nan"), "equal": f"{equal}/{len(results)}",
        "jobs": round((after["jobs"] - before["jobs"]) / runs), "runs": runs,
        "AL_CA runs": f"{min(run_means):.3f}-{max(run_means):.3f}",
    }
    b0, b1 = before.get("batching"), after.get("batching")
    if b0 and b1:
        for kind in ("encode", "start", "step"):
            batches = b1["batches"].get(kind, 0) - b0["batches"].get(kind, 0)
            calls = b1["calls"].get(kind, 0) - b0["calls"].get(kind, 0)
            out[f"{kind} batch"] = calls / batches if batches else float("nan")
    return out


def run_mode(mode: str, extra: list[str], items: list[Item], clients: list[int], chunk_s: float,
             repeat: int = 1, task: str = "transcribe") -> list[dict]:
    server = Server(mode, extra)
    rows: list[dict[str, object]] = []
    try:
        reference: dict[str, str] = {}
        alone: list[ClientResult] = []
        for item in items:  # each utterance alone: the reference output
            [result] = asyncio.run(run_clients(server.ws, [item], [0.0], task))
            reference[item.id] = result.text
            alone.append(result)
        print(f"{mode}: references done", file=sys.stderr, flush=True)
        for n in clients:
            chosen = [items[i % len(items)] for i in range(n)]
            before = server.health()
            results: list[ClientResult] = []
            for k in range(repeat):  # run k staggers its clients by (i + k / repeat) / n of a chunk
                delays = [chunk_s * (i + k / repeat) / n for i in range(n)]
                results += asyncio.run(run_clients(server.ws, chosen, delays, task))
            rows.append(row(mode, n, chosen * repeat, results, reference, before, server.health(), repeat, task))
            print(f"  {rows[-1]}", file=sys.stderr, flush=True)
    finally:
        server.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=("transcribe", "translate"), default="transcribe",
                        help="what the clients ask for: English transcription (the 6 English utterances), or "
                             "X->English translation (3 German and 3 French fleurs-multi utterances, each stream "
                             "naming its language; the server's model must be multilingual: --server-args "
                             "\"--model whisper-base\", the default for this task)")
    parser.add_argument("--clients", default="1,2,4,6,8,10")
    parser.add_argument("--modes", default="batched,serial,parallel")
    parser.add_argument("--server-args", default=None,
                        help="model and stream options of the servers (default: none, the defaults; with --task "
                             "translate: --model whisper-base)")
    parser.add_argument("--target-al", type=float, default=2.0, help="mean AL_CA bound of the capacity (s)")
    parser.add_argument("--chunk-s", type=float, default=None,
                        help="the servers' chunk (staggers the clients; default: the task's default preset's)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each N, their clients pooled in its row (each run at other stagger phases)")
    parser.add_argument("--out", default=str(RESULTS / "serve_load.md"))
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat must be >= 1, not {args.repeat}")
    load_before = load_average()
    anchor_ms = speed_anchor_ms()
    translating = args.task == "translate"
    items = translation_set() if translating else english_set()
    if args.server_args is None:
        args.server_args = "--model whisper-base" if translating else ""
    if args.chunk_s is None:
        args.chunk_s = preset(args.task).settings["chunk_ms"] / 1000.0
    columns = [("BLEU" if c == "WER" else c) for c in COLUMNS] if translating else COLUMNS
    clients = [int(n) for n in args.clients.split(",")]
    extra = shlex.split(args.server_args)
    rows: list[dict[str, object]] = []
    for mode in args.modes.split(","):
        rows += run_mode(mode, extra, items, clients, args.chunk_s, args.repeat, args.task)
    capacity = {}
    for mode in args.modes.split(","):
        ok = [int(str(r["N"])) for r in rows if r["mode"] == mode and float(str(r["AL_CA mean"])) <= args.target_al]
        capacity[mode] = max(ok) if ok else 0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(out.with_suffix(".csv"), rows, columns)
    caps = ", ".join(f"{mode} {n}" for mode, n in capacity.items())
    text = "\n".join([
        "# Concurrent real-time streams on `simulst serve` (loopback)",
        "",
        "`python bench/serve_load.py" + (" --task translate" if translating else "")
        + f" --clients {args.clients} --modes {args.modes}"
        + (f" --repeat {args.repeat}" if args.repeat != 1 else "")
        + (f" --server-args \"{args.server_args}\"" if args.server_args else "") + "`",
        "",
        f"Machine: {machine_note(load_before, anchor_ms)}.",
        "",
        ("Each client streams one of 6 German and French fleurs-multi utterances (the first 3 of each language), "
         "asking for its translation into English (Whisper's translate task, the stream's language named), "
         if translating else "Each client streams one of the 6 shared English utterances (jfk + fleurs-en-dev) ")
        + "at the pace of a live speaker in 100 ms frames; the server runs in its own process. AL_CA: each word's "
        "delay is the client's clock when it arrived (|Y*| = reference words); AL: on the source clock; max lag: "
        "the largest (arrival - source time) of an emission; equal: outputs equal to the utterance's output "
        "streamed alone; encode / step batch: the mean number of streams per batched call; runs: runs of the N "
        "clients pooled in the row (each staggered at other phases of a chunk), AL_CA runs: the range of their own "
        "mean AL_CA, jobs: per run.",
        "",
        markdown_table(rows, columns),
        "",
        f"**Capacity** (largest N with a mean AL_CA <= {args.target_al:g} s): {caps}.",
    ])
    write_report(out, text)
    print(text)


if __name__ == "__main__":
    main()
