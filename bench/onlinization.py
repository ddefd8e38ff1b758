"""Issue-2 benchmark: offline vs LA-2 / hold-n / SP-2 at 500/1000/2000 ms chunks, 30 s vs audio-sized window.

Whisper tiny.en (../shared/models), the 6 shared English utterances. Writes bench/results/onlinization.{md,csv}.

    OMP_NUM_THREADS=2 .venv/bin/python bench/onlinization.py [--quick]
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import WHISPER_TINY_EN, english_set, machine_note, markdown_table, score, stream
from simulst.config import PolicyOptions, SearchOptions, StreamOptions
from simulst.models.loading import load_model

RESULTS = Path(__file__).resolve().parent / "results"
READING_MARK = "## Reading"
COLUMNS = ["window", "policy", "search", "chunk_ms", "WER", "AL", "LAAL", "AL_CA", "RTF", "emissions",
           "decoder_passes", "encoder_calls", "empty"]


def configs(quick: bool) -> list[tuple[str, str, int]]:
    """(policy, search, chunk_ms) rows; SP-n needs all beams, so it runs with beam 5 (at 1000 ms only, to keep
    the run short on this 2-core machine)."""
    chunks = [1000] if quick else [500, 1000, 2000]
    rows = [("offline", "greedy", 0), ("offline", "beam", 0)]
    for chunk in chunks:
        rows += [("la-2", "greedy", chunk), ("hold-6", "greedy", chunk)]
    return [*rows, ("sp-2", "beam", 1000)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="1000 ms chunks only")
    parser.add_argument("--windows", default="full,audio,audio+int8")
    args = parser.parse_args()
    items = english_set()
    rows = []
    for window in args.windows.split(","):
        precision = "int8" if window.endswith("+int8") else "fp32"
        model = load_model(str(WHISPER_TINY_EN), window=window.removesuffix("+int8"), precision=precision)
        grid = configs(args.quick) if precision == "fp32" else [("la-2", "greedy", 1000), ("la-2", "beam", 1000)]
        for policy, search, chunk in grid:
            options = StreamOptions(
                chunk_ms=chunk or 60_000.0, policy=PolicyOptions.parse(policy), search=SearchOptions(search, beam=5)
            )
            runs = [stream(model, options, item.audio) for item in items]
            row = {"window": window, "policy": policy, "search": search if search == "greedy" else "beam-5",
                   "chunk_ms": chunk or "-", **score(items, runs)}
            rows.append(row)
            print(markdown_table([row], COLUMNS).splitlines()[-1], flush=True)
    RESULTS.mkdir(exist_ok=True)
    with (RESULTS / "onlinization.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    header = (
        "# Onlinization of Whisper tiny.en: policies × chunk size × encoder window\n\n"
        "Written by `bench/onlinization.py` on the 6 shared English utterances (jfk + fleurs-en-dev, 51.9 s). "
        "WER is normalised (lower case, no punctuation); AL, LAAL (computation-unaware) and AL_CA (elapsed = "
        "source + cumulative compute of the utterance, SimulEval semantics) are in seconds, word unit, mean over "
        "utterances; RTF = compute / audio; emissions per utterance; decoder passes and encoder calls are totals "
        "(a batched beam step counts once). `audio` window = the audio read + 4 s of silence instead of "
        "Whisper's 30 s; `+int8`: the decoder's weights in int8 (`--precision int8`). Offline rows decode once at "
        "the end (their AL is the source length).\n\n"
        f"Run: {machine_note()}. The machine is shared; compare ratios within one table.\n\n"
    )
    target = RESULTS / "onlinization.md"
    # The hand-written reading below the table survives re-runs (it is re-checked against the new numbers).
    old = target.read_text() if target.exists() else ""
    reading = old[old.index(READING_MARK) :] if READING_MARK in old else ""
    target.write_text(header + markdown_table(rows, COLUMNS) + "\n\n" + reading)


if __name__ == "__main__":
    main()
