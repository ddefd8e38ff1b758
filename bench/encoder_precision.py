"""The encoder's cost and error at each ``--encoder-precision``: float32, bfloat16 linear layers, int8 linear layers.

For Whisper tiny.en (transcription) and Whisper base (X→English translation), on audio windows of 10 s (the
shortest window a stream's encoder reads), 16 s (a transcription's longest buffer + padding) and 30 s (Whisper's
whole window; a translation's buffer holds up to 30 s), at 1 and 2 torch threads: the median wall time of one
encoder call (``WhisperModel.encode``: the log-mel features, the encoder and the decoder's cross-attention keys and
values), and the error of the encoder frames against float32's (the norm of the difference over the norm of
float32's) on real speech (jfk and fleurs-en-dev joined, cut to the window). ``auto`` (the presets' value) is
``bf16`` on a CPU with bfloat16 instructions, else ``fp32``: the page says which this CPU is.

Timings are worth keeping only from a quiet machine (check the load average; nothing else running).
Writes ``bench/results/encoder_precision.md`` (+ ``.csv``).

    .venv/bin/python bench/encoder_precision.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    english_set,
    load_average,
    machine_note,
    markdown_table,
    median_s,
    speed_anchor_ms,
    write_csv,
    write_report,
)
from simulst.config import ModelOptions
from simulst.models.device import cpu_has_bfloat16
from simulst.models.loading import load_model
from simulst.models.whisper import WhisperModel
from simulst.types import Costs

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = ("whisper-tiny.en", "whisper-base")
PRECISIONS = ("fp32", "bf16", "int8")
WINDOWS_S = (10, 16, 30)
THREADS = (1, 2)
COLUMNS = ["model", "window_s", "threads", "precision", "encode_ms", "vs_fp32", "frame_error"]


def speech(seconds: int) -> np.ndarray:
    """``seconds`` of real English speech: jfk and the fleurs-en-dev utterances joined, cut to length."""
    joined = np.concatenate([item.audio for item in english_set()])  # (jfk first)
    return np.ascontiguousarray(joined[: seconds * 16000 - 2 * 16000])  # (the window adds 2 s of padding)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    load_before = load_average()
    anchor = speed_anchor_ms()
    rows = []
    for name in MODELS:
        models = {p: load_model(ModelOptions(name, encoder_precision=p)) for p in PRECISIONS}
        for window_s in WINDOWS_S:
            audio = speech(window_s)
            exact = None
            for threads in THREADS:
                torch.set_num_threads(threads)
                base_ms = None
                for precision, model in models.items():
                    assert isinstance(model, WhisperModel)
                    frames = model.encode(audio, Costs()).frames
                    if precision == "fp32":
                        exact = frames
                    assert exact is not None
                    error = float(torch.linalg.vector_norm(frames - exact) / torch.linalg.vector_norm(exact))
                    ms = median_s(functools.partial(model.encode, audio, Costs()), args.repeats) * 1000.0
                    base_ms = base_ms or ms
                    rows.append({"model": name, "window_s": window_s, "threads": threads, "precision": precision,
                                 "encode_ms": round(ms, 1), "vs_fp32": round(ms / base_ms, 3),
                                 "frame_error": f"{error:.1e}"})
                    print(rows[-1], flush=True)
    write_csv(args.out / "encoder_precision.csv", rows, COLUMNS)
    native = "has" if cpu_has_bfloat16() else "does not have"
    text = "\n".join([
        "# The encoder at each `--encoder-precision`",
        "",
        "Written by `bench/encoder_precision.py` (its docstring defines the columns): `encode_ms` is the median wall "
        "time of one encoder call over the window (log-mel, encoder, cross-attention keys and values), `vs_fp32` "
        "its ratio to float32's at the same window and threads, `frame_error` the encoder frames' relative "
        "error against float32's on real speech.",
        "",
        f"Machine: {machine_note(load_before, anchor)}. This CPU {native} bfloat16 instructions "
        "(`--encoder-precision auto` runs `bf16` on it" + ("" if cpu_has_bfloat16() else ": no, `fp32`") + ").",
        "",
        markdown_table(rows, COLUMNS),
    ])
    write_report(args.out / "encoder_precision.md", text)


if __name__ == "__main__":
    main()
