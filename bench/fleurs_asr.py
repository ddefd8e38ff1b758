"""Multilingual ASR with Whisper base on the fleurs-multi transcripts (German, French, Spanish, Portuguese).

Writes ``bench/results/fleurs_asr.md`` (+ ``.csv``): per language and configuration, the normalised WER
(lower case, punctuation removed, as FLEURS writes its transcripts) against the manifest's transcripts, AL / AL_CA
(word unit, source clock), RTF and decoder passes. The language is given (``--language L``, task transcribe), as
``simulst transcribe AUDIO --model whisper-base --language L`` runs it. Every fleurs-multi utterance up to 30 s is
used (``fleurs-de-009`` is 43 s and waits for long-form streaming). The records are the evaluation runner's.

    OMP_NUM_THREADS=2 .venv/bin/python bench/fleurs_asr.py [--configs offline,la-2] [--chunk-ms 1000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from simulst.config import ModelOptions, PolicyOptions, StreamOptions
from simulst.evaluation.manifest import read_manifest
from simulst.evaluation.runner import EvalOptions, run_instance
from simulst.evaluation.scoring import ScoreOptions, score_records
from simulst.streaming.engine import SpeechEngine

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DATA, machine_note, markdown_table, seconds, write_csv

RESULTS = Path(__file__).resolve().parent / "results"
LANGUAGES = ("de", "fr", "es", "pt")
COLUMNS = ["config", "chunk_ms", "language", "utterances", "WER", "AL", "AL_CA", "RTF", "decoder_passes"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default="offline,la-2", help="policies, comma-separated")
    parser.add_argument("--chunk-ms", type=float, default=1000.0)
    args = parser.parse_args()
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    outputs: list[tuple[str, str, str, str]] = []
    for spec in args.configs.split(","):
        policy = PolicyOptions.parse(spec)
        options = StreamOptions(chunk_ms=args.chunk_ms, policy=policy)
        all_records = []
        for lang in LANGUAGES:
            engine = SpeechEngine.load(ModelOptions("whisper-base", language=lang, task="transcribe"))
            items = read_manifest(DATA / "fleurs-multi.tsv", "transcript", src_langs=[lang], max_duration_s=30.0)
            records = [run_instance(engine, options, item, n, EvalOptions(progress=False))
                       for n, item in enumerate(items)]
            all_records += records
            rows.append(_row(str(policy), args.chunk_ms, lang, records))
            outputs += [(str(policy), item.id, item.reference or "", r.prediction)
                        for item, r in zip(items, records, strict=True)]
            print(markdown_table([rows[-1]], COLUMNS).splitlines()[-1], flush=True)
        rows.append(_row(str(policy), args.chunk_ms, "all", all_records))
    write(rows, outputs, time.perf_counter() - started)


def _row(config: str, chunk_ms: float, language: str, records: list[Any]) -> dict[str, Any]:
    report = score_records(records, ScoreOptions(quality_metrics=("WER_norm",), computation_aware=True))
    compute = sum(r.extra["simulst"]["compute_ms"] for r in records) / 1000.0
    source = sum(r.source_length for r in records) / 1000.0
    return {"config": config, "chunk_ms": "" if config == "offline" else int(chunk_ms), "language": language,
            "utterances": len(records), "WER": report.scores["WER_norm"], "AL": seconds(report.scores["AL"]),
            "AL_CA": seconds(report.scores["AL_CA"]), "RTF": compute / source,
            "decoder_passes": sum(r.extra["simulst"]["decoder_calls"] for r in records)}


def write(rows: list[dict[str, Any]], outputs: list[tuple[str, str, str, str]], wall_s: float) -> None:
    RESULTS.mkdir(exist_ok=True)
    write_csv(RESULTS / "fleurs_asr.csv", rows, COLUMNS)
    lines = [
        "# Multilingual ASR with Whisper base on fleurs-multi",
        "",
        "Written by `bench/fleurs_asr.py`: `--model whisper-base --language L` (task transcribe; CTranslate2 fp16 "
        "weights, fp32 compute, full 30 s window, greedy) on the fleurs-multi utterances up to 30 s. WER in % "
        "against the FLEURS transcripts, both normalised (lower case, punctuation removed: the transcripts are "
        "already so); AL / AL_CA in seconds (word unit, source clock, mean over utterances); RTF = compute / audio. "
        "The guards (no-speech, low confidence) are on, as by default.",
        "",
        f"Run: {machine_note()}; {wall_s:.0f} s in all.",
        "",
        markdown_table(rows, COLUMNS),
        "",
        "## Outputs",
        "",
        "| config | id | transcript | output |",
        "|---|---|---|---|",
        *[f"| {c} | {i} | {ref} | {hyp} |" for c, i, ref, hyp in outputs],
        "",
    ]
    (RESULTS / "fleurs_asr.md").write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    main()
