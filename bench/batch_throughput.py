"""Compute throughput of batched decoding across streams, without a clock.

N streams (the 6 shared English utterances, cycled) are pushed chunk by chunk in lockstep: every stream's next
chunk is submitted at once and all run to the end before the next step (computation-unaware). One stream at a
time (``SerialRunner``) against the batcher (``Batcher``: the streams' encoder, no-speech, forced-prefix and
decoder-step calls gathered into batched calls); the texts must be equal. Wall seconds for all the audio, and how
the model time splits (the encoder is compute-bound on a CPU and gains nothing from batching; the decoder
passes are memory-bound and do). Results: ``bench/results/batch_throughput.md``. Quiet machine only:

    OMP_NUM_THREADS=2 .venv/bin/python bench/batch_throughput.py [--streams 2,4,8] [--model-args "..."]
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import english_set, load_average, machine_note, markdown_table, speed_anchor_ms, write_csv, write_report
from simulst.cli.options import add_stream_arguments, model_from_args, stream_options_from_args
from simulst.models.whisper import WhisperModel
from simulst.streaming.batching import Batcher, SerialRunner
from simulst.streaming.session import Session

RESULTS = Path(__file__).resolve().parent / "results"
COLUMNS = ["N", "audio s", "serial s", "batched s", "speed-up", "serial encoder s", "batched encoder s",
           "serial decoder s", "batched decoder s", "equal"]
ENCODER = ("encode_many",)
DECODER = ("no_speech_prob", "no_speech_many", "start", "start_many", "step", "step_many")


def timed(model: WhisperModel, spent: defaultdict[str, float]) -> None:
    """Count the wall time of the model's encoder and decoder calls (nested calls counted once)."""
    depth = {"n": 0}
    for name in (*ENCODER, *DECODER):
        original: Callable[..., Any] = getattr(type(model), name)

        def wrapper(self: WhisperModel, *args: Any, _original: Callable[..., Any] = original, _name: str = name,
                    **kwargs: Any) -> Any:
            depth["n"] += 1
            began = time.perf_counter()
            try:
                return _original(self, *args, **kwargs)
            finally:
                depth["n"] -= 1
                if depth["n"] == 0:
                    spent["encoder" if _name in ENCODER else "decoder"] += time.perf_counter() - began

        setattr(type(model), name, wrapper)


def run_all(runner: SerialRunner | Batcher, jobs: list[Callable[[], object]]) -> None:
    """Run the jobs; a job's error is raised, not counted as a stream with no text."""
    for result in runner.run(jobs):
        if isinstance(result, Exception):
            raise result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", default="2,4,8")
    parser.add_argument("--model-args", default="--window audio --policy ctc")
    parser.add_argument("--out", default=str(RESULTS / "batch_throughput.md"))
    args = parser.parse_args()
    load_before = load_average()
    anchor_ms = speed_anchor_ms()
    options_parser = argparse.ArgumentParser()
    add_stream_arguments(options_parser)
    parsed = options_parser.parse_args(shlex.split(args.model_args))
    model = model_from_args(parsed)
    assert isinstance(model, WhisperModel)
    options = stream_options_from_args(parsed)
    spent: defaultdict[str, float] = defaultdict(float)
    timed(model, spent)
    items = english_set()
    rows: list[dict[str, object]] = []
    for n in (int(x) for x in args.streams.split(",")):
        chosen = [items[i % len(items)] for i in range(n)]
        row: dict[str, object] = {"N": n, "audio s": sum(i.source_ms for i in chosen) / 1000}
        texts = {}
        for name, runner in (("serial", SerialRunner()), ("batched", Batcher(model))):
            spent.clear()
            sessions = [Session(runner.view(model), options) for _ in chosen]
            step = sessions[0].chunk_samples
            began = time.perf_counter()
            for pos in range(0, max(i.audio.shape[0] for i in chosen), step):
                run_all(runner, [partial(s.push, i.audio[pos : pos + step])
                                 for s, i in zip(sessions, chosen, strict=True) if pos < i.audio.shape[0]])
            run_all(runner, [s.finish for s in sessions])
            row[f"{name} s"] = time.perf_counter() - began
            row[f"{name} encoder s"] = spent["encoder"]
            row[f"{name} decoder s"] = spent["decoder"]
            texts[name] = [s.text for s in sessions]
            runner.close()
        row["speed-up"] = float(str(row["serial s"])) / float(str(row["batched s"]))
        row["equal"] = f"{sum(a == b for a, b in zip(texts['serial'], texts['batched'], strict=True))}/{n}"
        rows.append(row)
        print(row, file=sys.stderr, flush=True)
    out = Path(args.out)
    write_csv(out.with_suffix(".csv"), rows, COLUMNS)
    text = "\n".join([
        "# Batched decoding across streams: compute throughput in lockstep (no clock)",
        "",
        f"`python bench/batch_throughput.py --streams {args.streams} --model-args \"{args.model_args}\"`",
        "",
        f"Machine: {machine_note(load_before, anchor_ms)}.",
        "",
        "N streams of the 6 shared English utterances (cycled), every stream's next chunk submitted together, "
        "one stream at a time (serial) or batched; wall seconds for all the audio, and the part of it spent in "
        "the encoder and in the decoder passes (no-speech, forced prefix, steps); equal: texts equal to serial.",
        "",
        markdown_table(rows, COLUMNS),
    ])
    write_report(out, text)
    print(text)


if __name__ == "__main__":
    main()
