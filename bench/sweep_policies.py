"""Policy sweep on the shared English sets (jfk + fleurs-en-dev) with Whisper tiny.en: quality vs. latency.

Grid (the 2022 paper's policies and chunk sizes, SPEC §8):

* LA-2, LA-3, hold-3, hold-6 with greedy search, SP-2 with beam search (K = 5: SP-n needs several beams),
  each at 250 / 500 / 1000 / 2000 ms chunks;
* offline (one decode of the whole utterance), greedy and beam 5, as the quality ceiling.

Quality is the normalised WER against the transcripts (ASR: tiny.en transcribes; see
``simulst.evaluation.quality``); latency AL / LAAL (computation-unaware) and AL_CA (with the compute time
actually spent, on whatever machine ran the sweep). Every configuration is a resumable ``simulst eval`` folder
under ``OUT/runs/``; rerunning the script only computes what is missing.

    OMP_NUM_THREADS=1 .venv/bin/python bench/sweep_policies.py [--jobs 2] [--output bench/results/sweep_policies]

Equivalent CLI (one search at a time)::

    simulst sweep ../shared/data/jfk.tsv ../shared/data/fleurs-en-dev.tsv --model ../shared/models/whisper-tiny.en \\
        --policies la-2 la-3 hold-3 hold-6 offline --chunks 250 500 1000 2000 --output OUT
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import platform
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from simulst.config import ModelOptions, SearchOptions, StreamOptions
from simulst.evaluation.manifest import read_manifest
from simulst.evaluation.plots import plot_sweep
from simulst.evaluation.runner import EvalOptions
from simulst.evaluation.sweep import SweepPoint, build_grid, run_sweep, write_table
from simulst.streaming.engine import SpeechEngine

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
CHUNKS = (250.0, 500.0, 1000.0, 2000.0)
GREEDY_POLICIES = ("la-2", "la-3", "hold-3", "hold-6")
BEAM = 5


def grid(chunks: tuple[float, ...] = CHUNKS) -> list[SweepPoint]:
    """The configurations of the benchmark."""
    greedy = StreamOptions(search=SearchOptions("greedy"))
    beam = StreamOptions(search=SearchOptions("beam", beam=BEAM))
    points = build_grid(greedy, GREEDY_POLICIES, chunks)
    points += [dataclasses.replace(p, label=f"{p.label} beam{BEAM}") for p in build_grid(beam, ["sp-2"], chunks)]
    points += build_grid(greedy, ["offline"])
    points += [dataclasses.replace(p, label=f"offline beam{BEAM}") for p in build_grid(beam, ["offline"])]
    return points


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "sweep_policies"))
    parser.add_argument("--model", default=str(SHARED / "models" / "whisper-tiny.en"))
    parser.add_argument("--data", default=str(SHARED / "data"))
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--chunks", nargs="+", type=float, default=list(CHUNKS))
    args = parser.parse_args()

    data = Path(args.data)
    items = read_manifest(data / "jfk.tsv") + read_manifest(data / "fleurs-en-dev.tsv")
    points = grid(tuple(args.chunks))
    out = Path(args.output)
    start = time.perf_counter()

    def report(point: SweepPoint, scores: Mapping[str, Any]) -> None:
        print(f"[{time.perf_counter() - start:7.1f} s] {point.label:22s} WER_norm {scores['WER_norm']:6.2f}  "
              f"AL {scores['AL']:7.1f}  LAAL {scores['LAAL']:7.1f}  AL_CA {scores['AL_CA']:7.1f}",
              file=sys.stderr, flush=True)

    factory = functools.partial(SpeechEngine.load, ModelOptions(args.model))
    rows = run_sweep(factory, points, items, out, EvalOptions(progress=False), jobs=args.jobs, progress=report)
    # BLEU / chrF against lower-case, unpunctuated FLEURS transcripts say little; they stay in sweep.csv
    _, md = write_table(rows, out, quality=["WER_norm"])
    plot_sweep(rows, out, "WER_norm", title="Whisper tiny.en, jfk + fleurs-en-dev (6 utt., 51.9 s): WER vs latency")
    env_path = out / "environment.json"
    previous = json.loads(env_path.read_text(encoding="utf-8")) if env_path.is_file() else {}
    earlier = float(previous.get("wall_s_total", previous.get("wall_s_of_last_invocation", 0.0)))
    env = {
        "utterances": len(items),
        "audio_s": round(sum(it.duration_s or 0.0 for it in items), 2),
        "configurations": len(points),
        "jobs": args.jobs,
        # wall-clock over every invocation (a resumed run adds only its own, mostly new, work)
        "wall_s_total": round(earlier + time.perf_counter() - start, 1),
        "compute_s_per_configuration": {
            str(r["label"]): round(float(r["ComputeRTF"]) * sum(it.duration_s or 0.0 for it in items), 1)
            for r in rows
        },
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "note": "computation-aware metrics (_CA, ComputeRTF) depend on this machine and its load",
    }
    env_path.write_text(json.dumps(env, indent=2) + "\n", encoding="utf-8")
    print(md.read_text(encoding="utf-8"), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
