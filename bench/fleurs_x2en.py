"""End-to-end X→English speech translation with the multilingual Whisper base on FLEURS German and French.

Writes ``bench/results/fleurs_x2en.md`` (+ ``.csv``): per configuration, corpus BLEU / chrF (sacreBLEU) against
``../shared/data/references.en.tsv`` (English references exist for the de and fr utterances only), AL / LAAL /
AL_CA (word unit, source clock; SimulEval semantics), RTF, decoder passes, and how often the hallucination guards
fired. Every utterance of the shared fleurs-multi de/fr sets up to 30 s is used (``fleurs-de-009`` is 43 s and
waits for long-form streaming). The records are the evaluation runner's, so the numbers are what
``simulst eval`` computes.

    OMP_NUM_THREADS=2 .venv/bin/python bench/fleurs_x2en.py [--configs offline,la-2,alignatt ...] [--chunks 1000]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from simulst.config import ModelOptions, PolicyOptions, StreamOptions
from simulst.evaluation.instances import InstanceRecord
from simulst.evaluation.manifest import TestItem
from simulst.evaluation.plots import plot_sweep
from simulst.evaluation.runner import EvalOptions, run_instance
from simulst.evaluation.scoring import ScoreOptions, score_records
from simulst.streaming.engine import SpeechEngine

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DATA, machine_note, markdown_table, read_csv, seconds, write_csv, write_report

RESULTS = Path(__file__).resolve().parent / "results"
LANGUAGES = ("de", "fr")
COLUMNS = ["config", "chunk_ms", "guards", "BLEU", "chrF", "AL", "LAAL", "AL_CA", "RTF", "decoder_passes",
           "no_speech_skips", "unsure_skips", "empty"]


RUN_PREFIX = "* Run "


def items_by_language() -> dict[str, list[TestItem]]:
    """The de / fr utterances of fleurs-multi up to 30 s, with their English references."""
    references = dict(line.split("\t", 1) for line in
                      (DATA / "references.en.tsv").read_text(encoding="utf-8").splitlines()[1:])
    out: dict[str, list[TestItem]] = {lang: [] for lang in LANGUAGES}
    for line in (DATA / "fleurs-multi.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        uid, audio, duration, _transcript, lang = line.split("\t")[:5]
        if lang in out and float(duration) <= 30.0 and uid in references:
            out[lang].append(TestItem(uid, DATA / audio, references[uid].strip(), float(duration), "en"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default="offline,la-2,la-2/noguard,alignatt,alignatt/noguard",
                        help="POLICY or POLICY/noguard (the no-speech and low-confidence guards off)")
    parser.add_argument("--chunks", default="1000", help="chunk sizes in ms, comma-separated")
    parser.add_argument("--window", default="full", choices=("full", "audio"))
    parser.add_argument("--out", default="fleurs_x2en")
    parser.add_argument("--append", action="store_true", help="keep the rows already in OUT.csv and add these")
    parser.add_argument("--plot-only", action="store_true", help="only redraw the plots from OUT.csv")
    args = parser.parse_args()
    if args.plot_only:
        plot(args.out, read_csv(RESULTS / f"{args.out}.csv"))
        return
    sets = items_by_language()
    engines = {lang: SpeechEngine.load(ModelOptions("whisper-base", language=lang, task="translate",
                                                    window=args.window)) for lang in LANGUAGES}
    rows: list[dict[str, Any]] = []
    csv_path, md_path = RESULTS / f"{args.out}.csv", RESULTS / f"{args.out}.md"
    if args.append and csv_path.is_file():
        rows = read_csv(csv_path)
    for spec in args.configs.split(","):
        policy_spec, _, flag = spec.partition("/")
        policy = PolicyOptions.parse(policy_spec)
        for chunk in [float(c) for c in args.chunks.split(",")] if policy.name != "offline" else [1000.0]:
            options = StreamOptions(chunk_ms=chunk, policy=policy)
            if flag == "noguard":
                options = dataclasses.replace(options, no_speech_threshold=None, logprob_threshold=None,
                                              early_logprob_threshold=None)
            records: list[InstanceRecord] = []
            started, source_s = time.perf_counter(), 0.0
            compute = passes = no_speech = unsure = 0.0
            for lang in LANGUAGES:
                for item in sets[lang]:
                    record = run_instance(engines[lang], options, item, len(records), EvalOptions(progress=False))
                    records.append(record)
                    info = record.extra["simulst"]
                    source_s += record.source_length / 1000.0
                    compute += info["compute_ms"] / 1000.0
                    passes += info["decoder_calls"]
            report = score_records(records, ScoreOptions(quality_metrics=("BLEU", "chrF"), computation_aware=True))
            for record in records:
                extra = record.extra["simulst"].get("extra", {})
                no_speech += extra.get("no_speech_skips", 0)
                unsure += extra.get("unsure_skips", 0)
            scores = report.scores
            row: dict[str, object] = {"config": str(policy), "chunk_ms": "" if policy.name == "offline" else int(chunk),
                   "guards": "off" if flag == "noguard" else "on", "BLEU": scores["BLEU"], "chrF": scores["chrF"],
                   "AL": seconds(scores["AL"]), "LAAL": seconds(scores["LAAL"]),
                   "AL_CA": seconds(scores["AL_CA"]), "RTF": compute / source_s, "decoder_passes": int(passes),
                   "no_speech_skips": int(no_speech), "unsure_skips": int(unsure),
                   "empty": scores.get("EmptyOutputs", 0)}
            rows.append(row)
            print(markdown_table([row], COLUMNS).splitlines()[-1], f"({time.perf_counter() - started:.0f} s)",
                  flush=True)
    n = sum(len(v) for v in sets.values())
    header = (
        f"# X→English with Whisper base (CTranslate2 fp16 weights, fp32 compute), {args.window} window\n\n"
        f"Written by `bench/fleurs_x2en.py` on the {n} German and French fleurs-multi utterances up to 30 s "
        f"(references: `references.en.tsv`). BLEU / chrF: sacreBLEU, corpus; AL / LAAL / AL_CA in seconds (word "
        "unit, mean over utterances, source clock; AL_CA adds the stream's compute); RTF = compute / audio; "
        "guards: the no-speech (P > 0.6) and low-confidence (mean log-prob < -1.5) chunk guards; *_skips: "
        "chunks they kept from committing.\n\n"
    )
    RESULTS.mkdir(exist_ok=True)
    # with --append the notes of the earlier runs survive (and, always, the hand-written reading: write_report)
    old = md_path.read_text(encoding="utf-8") if md_path.is_file() else ""
    runs = [line for line in old.splitlines() if line.startswith(RUN_PREFIX)] if args.append else []
    runs.append(f"{RUN_PREFIX}{len(runs) + 1} ({args.configs}; {args.chunks} ms): {machine_note()}.")
    header += "\n".join(runs) + "\n\n"
    write_report(md_path, header + markdown_table(rows, COLUMNS))
    write_csv(csv_path, rows, COLUMNS)
    plot(args.out, rows)


def plot(out: str, rows: list[dict[str, Any]]) -> None:
    """BLEU against AL / LAAL / AL_CA, one curve per policy (guards off: its own curve), labels = chunk ms:
    ``bench/results/OUT_plots/``."""
    folder = RESULTS / f"{out}_plots"
    folder.mkdir(exist_ok=True)
    points = [{"policy": str(r["config"]) + (" (no guards)" if r["guards"] == "off" else ""),
               "chunk_ms": r["chunk_ms"], "BLEU": r["BLEU"],
               **{m: r[m] * 1000.0 for m in ("AL", "LAAL", "AL_CA")}} for r in rows]
    for path in plot_sweep(points, folder, "BLEU", title="Whisper base X→English (de+fr), BLEU vs latency"):
        print("wrote", path.relative_to(RESULTS.parent.parent))


if __name__ == "__main__":
    main()
