"""Two configurations' compute on the same utterances, with its paired bootstrap interval.

Reads the kept logs (``instances.log`` of ``bench/quality_latency.py``, one or more runs per configuration, each of
the same utterances) and prints, per run, the real-time factor (the summed compute over the summed audio), then the
difference B − A of the two configurations' RTF (each utterance's compute the mean of its runs) with the paired
bootstrap 95 % interval over utterances (1000 resamples), and whether every run wrote the same text per utterance
(a change meant to leave the outputs alone must show ``True``). It runs nothing: time the runs alone, alternating
A and B, on a quiet machine.

    .venv/bin/python bench/paired_compute.py --a A1/instances.log,A2/instances.log --b B1/instances.log,B2/...
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from simulst.evaluation.bootstrap import PairedInterval, bootstrap_from_stats
from simulst.evaluation.instances import InstanceRecord, read_log


def compute_of(records: list[InstanceRecord]) -> dict[str, tuple[float, float, str]]:
    """Per utterance id: (compute ms, audio ms, output text)."""
    out = {}
    for record in records:
        simulst = record.extra["simulst"]
        out[str(simulst["id"])] = (float(simulst["compute_ms"]), float(record.source_length), record.prediction)
    return out


def rtf(runs: dict[str, tuple[float, float, str]]) -> float:
    """Summed compute over summed audio."""
    return sum(c for c, _, _ in runs.values()) / sum(a for _, a, _ in runs.values())


def rtf_interval(a: list[dict[str, tuple[float, float, str]]],
                 b: list[dict[str, tuple[float, float, str]]]) -> PairedInterval:
    """RTF of B − A (runs of each: :func:`compute_of`, of the same utterances; an utterance's compute the mean of
    its runs) with the paired bootstrap 95 % interval over utterances."""
    ids = sorted(a[0])
    stats = [np.array([[np.mean([run[i][0] for run in runs]), runs[0][i][1]] for i in ids]) for runs in (a, b)]
    return bootstrap_from_stats("rtf", stats[0], stats[1], lambda s: float(s[0] / s[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--a", required=True, help="A's logs, comma-separated")
    parser.add_argument("--b", required=True, help="B's logs, comma-separated")
    args = parser.parse_args()
    sides = [[compute_of(read_log(Path(p))) for p in paths.split(",")] for paths in (args.a, args.b)]
    ids = sorted(sides[0][0])
    for run in sides[0] + sides[1]:
        if sorted(run) != ids:
            raise SystemExit("the logs do not hold the same utterances: not a paired comparison")
    for name, paths, side in zip("AB", (args.a, args.b), sides, strict=True):
        for path, one in zip(paths.split(","), side, strict=True):
            print(f"{name} {path}: RTF {rtf(one):.4f}")
    interval = rtf_interval(sides[0], sides[1])
    same = all(run[i][2] == sides[0][0][i][2] for runs in sides for run in runs for i in ids)
    print(f"RTF A {interval.a:.3f}, B {interval.b:.3f}: B - A {interval.describe(3)} ({interval.b / interval.a:.3f}x) "
          f"over {len(ids)} utterances; the same outputs in every run: {same}")


if __name__ == "__main__":
    main()
