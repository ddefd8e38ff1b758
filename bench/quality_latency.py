"""The quality-latency frontier: each task's presets (``--latency low|balanced|accurate``), offline decoding, the
defaults before the presets, and the peers run on the same data (``bench/peers.py``), in one table and one plot.

Writes ``bench/results/quality_latency.md`` (+ ``.csv``, ``quality_latency_<task>.png``) and keeps every run's
per-utterance log under ``bench/results/quality_latency/<task>/<config>/instances.log`` (the evaluation runner's
format), so that any two rows can be compared again with a paired bootstrap. Per row: quality (English: WER after
Whisper's ``EnglishTextNormalizer``, and this repository's normaliser as a second column; X→English: sacreBLEU
BLEU and chrF), AL / LAAL / AL_CA (word unit, mean over utterances, source clock; AL_CA adds the stream's compute
as SimulEval does), RTF = compute / audio, the hardware-free costs ``enc_frames_s`` (encoder input frames per
second of audio: how much audio the encoder reads again and again) and ``dec_calls_s`` (decoder calls per second
of audio), and the paired bootstrap 95 % interval of the quality difference to greedy offline decoding
(``d_offline``; the row ``offline-beam`` decodes offline with the ``balanced`` preset's search) and to the
defaults before the presets (``d_before``), over utterances.

With ``--realtime`` each utterance is also fed at real-time pace (``simulst eval --realtime``: audio arrives at
wall-clock speed, a decode reads all that arrived) and ``AL_live`` (the wall-clock delay of each word after it
was spoken, averaged like AL: that run's ``AL_CA``) and ``RTF_live`` are added: what a live listener meets on
this machine. (Until 2026-12-07 this feed opened a stream without catch-up, which decodes every chunk in turn
where two arrive during one decode; the rows timed before then read so.)

Data (dev sets only; the held-out sets judge the defaults elsewhere):

* ``transcribe``: Whisper tiny.en on jfk + fleurs-en-dev + librispeech-other-dev (56 utterances, 7.3 min).
* ``translate``: Whisper base X→English on the fleurs-multi de and fr utterances with English references (20).

    OMP_NUM_THREADS=2 .venv/bin/python bench/quality_latency.py --task translate [--configs offline,balanced,...]
        [--realtime] [--peers FOLDER] [--limit N]

Variants: ``--variant NAME="FLAGS"`` (repeatable) runs the task with FLAGS as a user would give them on the command
line (under ``--latency balanced`` unless FLAGS name another), logs it under
``bench/results/quality_latency/<task>_explore/NAME/`` (``instances.log`` and ``flags.txt``), and writes
``bench/results/quality_latency_variants.md``: every logged variant of the task against ``offline`` and
``balanced`` (``d_balanced``), as the main table does. ``--configs ""`` runs the variants alone::

    .venv/bin/python bench/quality_latency.py --task translate --configs "" --variant chunk-800="--chunk-ms 800"
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulst.cli.options import add_stream_arguments, model_options_from_args, stream_options_from_args
from simulst.config import ModelOptions, PolicyOptions, SearchOptions, StreamOptions
from simulst.config.presets import LATENCIES, preset_options
from simulst.evaluation.bootstrap import paired_bootstrap
from simulst.evaluation.instances import SIMULST_KEY, InstanceRecord, read_log, write_log
from simulst.evaluation.latency import average_lagging
from simulst.evaluation.manifest import TestItem
from simulst.evaluation.runner import EvalOptions, run_instance
from simulst.evaluation.scoring import ScoreOptions, score_records
from simulst.streaming.engine import SpeechEngine

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    DATA,
    READING,
    X2EN_LANGUAGES,
    load_average,
    machine_note,
    markdown_table,
    read_csv,
    seconds,
    speed_anchor_ms,
    write_csv,
    write_report,
    x2en_items,
)

RESULTS = Path(__file__).resolve().parent / "results"
TASKS = ("transcribe", "translate")
QUALITY = {"transcribe": ("WER_whisper", "WER_norm"), "translate": ("BLEU", "chrF")}
COLUMNS = ["task", "config", "options", "n", "Q1", "Q2", "AL", "LAAL", "AL_CA", "RTF", "enc_frames_s", "dec_calls_s",
           "AL_live", "RTF_live", "d_offline", "d_before"]


@dataclasses.dataclass(frozen=True)
class Config:
    """A named configuration of a task: the model and stream options it runs with."""

    name: str
    model: ModelOptions
    stream: StreamOptions
    summary: str


def configs(task: str) -> dict[str, Config]:
    """``offline`` (greedy), ``offline-beam`` (the ``balanced`` preset's search), ``before`` (the option defaults,
    as every task ran before the presets) and the presets.

    Both offline rows decode the whole utterance once with the ``balanced`` preset's model options in float32; they
    differ in the search only. ``offline`` is greedy, the reference every ``d_offline`` of the table is computed
    against (its kept rows were made when ``balanced`` was greedy); ``offline-beam`` searches as ``balanced`` does
    (a beam of 3), so that a preset's distance to offline decoding with its own search can be read too."""
    base = ModelOptions("whisper-base" if task == "translate" else None, task=task)
    out = {"before": Config("before", base, StreamOptions(), "the option defaults (before the presets)")}
    model, stream = preset_options(task, "balanced", base)
    model = dataclasses.replace(model, encoder_precision="fp32", precision="fp32")
    whole = dataclasses.replace(stream, policy=PolicyOptions("offline"), vad=False)
    out["offline"] = Config("offline", model, dataclasses.replace(whole, search=SearchOptions()),
                            "offline greedy decoding of the whole utterance (the balanced preset's model options in "
                            "float32)")
    out["offline-beam"] = Config("offline-beam", model, whole,
                                 "offline decoding of the whole utterance with the balanced preset's search "
                                 f"({whole.search.name}, beam {whole.search.beam}) and model options in float32")
    for latency in LATENCIES:
        model, stream = preset_options(task, latency, base)
        out[latency] = Config(latency, model, stream, f"--latency {latency}")
    return out


def variant(task: str, name: str, flags: str) -> Config:
    """The config ``name`` that the command-line ``flags`` give ``task`` (over its ``--latency`` preset, as the CLI
    resolves them, ``balanced`` where the flags name none - the kept variants' flags are changes to it, whichever
    preset the task's default is; translation on Whisper base unless ``--model`` is given).

    Raises:
        SystemExit: flags the command line does not take.
        OptionError: values the options refuse.
    """
    parser = argparse.ArgumentParser(prog=f"--variant {name}")
    add_stream_arguments(parser)
    parser.set_defaults(latency="balanced", **({"model": "whisper-base"} if task == "translate" else {}))
    args = parser.parse_args(shlex.split(flags))
    model = model_options_from_args(args, task)
    return Config(name, model, stream_options_from_args(args, task), flags)


def parse_variant(task: str, spec: str) -> Config:
    """``--variant NAME="FLAGS"``: the config :func:`variant` gives.

    Raises:
        SystemExit: not ``NAME=FLAGS``, a name with a ``/``, or flags the command line does not take.
    """
    name, sep, flags = spec.partition("=")
    if not sep or not name or "/" in name:
        raise SystemExit(f'bad --variant {spec!r}: NAME="FLAGS"')
    return variant(task, name, flags)


def explored(logs_root: Path, task: str) -> dict[str, tuple[str, list[InstanceRecord]]]:
    """The logged variants of ``task`` (``<task>_explore/NAME/`` with its ``flags.txt``): name -> (flags, log)."""
    out: dict[str, tuple[str, list[InstanceRecord]]] = {}
    for flags_file in sorted((logs_root / f"{task}_explore").glob("*/flags.txt")):
        log = flags_file.parent / "instances.log"
        if log.is_file():
            out[flags_file.parent.name] = (flags_file.read_text(encoding="utf-8").strip(), read_log(log))
    return out


def items(task: str) -> list[tuple[str, TestItem]]:
    """The task's dev utterances with their references, each with its source language."""
    out = []
    if task == "transcribe":
        for manifest in ("jfk.tsv", "fleurs-en-dev.tsv", "librispeech-other-dev.tsv"):
            for line in (DATA / manifest).read_text(encoding="utf-8").splitlines()[1:]:
                uid, audio, duration, text = line.split("\t")[:4]
                out.append(("en", TestItem(uid, DATA / audio, text.strip(), float(duration), "en")))
        return out
    return [(lang, item) for lang in X2EN_LANGUAGES for item in x2en_items(lang)]


def run(task: str, config: Config, test: Sequence[tuple[str, TestItem]], realtime: bool) -> list[InstanceRecord]:
    """Stream every utterance (fast feed; ``realtime``: also at real-time pace) and return the log records."""
    engines: dict[str, SpeechEngine] = {}
    records: list[InstanceRecord] = []
    for lang, item in test:
        if lang not in engines:
            model = config.model if task == "transcribe" else dataclasses.replace(config.model, language=lang)
            engines[lang] = SpeechEngine.load(model)
        record = run_instance(engines[lang], config.stream, item, len(records), EvalOptions(progress=False))
        if realtime:
            record.extra["live"] = live(engines[lang], config.stream, item)
        records.append(record)
    return records


def live(engine: SpeechEngine, options: StreamOptions, item: TestItem) -> dict[str, float]:
    """Feed the item's audio at real-time pace (``simulst eval --realtime``: a catch-up stream, as ``--realtime``
    runs): AL of the words' wall-clock times, and the compute / audio."""
    record = run_instance(engine, options, item, 0, EvalOptions(progress=False, realtime=True))
    reference_words = len((item.reference or "").split())
    compute_ms = record.extra[SIMULST_KEY]["compute_ms"]
    return {"AL_live": average_lagging(record.elapsed, record.source_length, reference_words) if record.elapsed
            else float("nan"), "RTF_live": compute_ms / record.source_length}


def score_row(task: str, name: str, summary: str, records: Sequence[InstanceRecord],
              logs: dict[str, list[InstanceRecord]],
              against: Sequence[tuple[str, str]] = (("offline", "d_offline"), ("before", "d_before"))
              ) -> dict[str, Any]:
    """One table row: quality, latency, compute, and the bootstrap intervals against the logged configs of
    ``against`` (config, column): offline and before unless told."""
    q1, q2 = QUALITY[task]
    scores = score_records(records, ScoreOptions(quality_metrics=(q1, q2), computation_aware=True)).scores
    info = [r.extra.get("simulst", {}) for r in records]
    compute = sum(i.get("compute_ms", 0.0) for i in info)
    source = sum(r.source_length for r in records)
    row: dict[str, Any] = {"task": task, "config": name, "options": summary, "n": len(records), "Q1": scores[q1],
                           "Q2": scores[q2], "AL": seconds(scores["AL"]), "LAAL": seconds(scores["LAAL"]),
                           "AL_CA": seconds(scores.get("AL_CA")), "RTF": compute / source,
                           "enc_frames_s": _per_audio_s(info, "encoder_frames", source),
                           "dec_calls_s": _per_audio_s(info, "decoder_calls", source)}
    lives = [r.extra["live"] for r in records if "live" in r.extra]
    if lives and len(lives) == len(records):
        row["AL_live"] = sum(x["AL_live"] for x in lives) / len(lives) / 1000.0
        row["RTF_live"] = sum(x["RTF_live"] * r.source_length for x, r in zip(lives, records, strict=True)) / source
    for other, column in against:
        if other in logs and other != name and len(logs[other]) == len(records):
            refs = [r.reference or "" for r in records]
            interval = paired_bootstrap(q1, [r.prediction for r in logs[other]], [r.prediction for r in records],
                                        refs)
            row[column] = interval.describe()
    return row


def _per_audio_s(info: Sequence[dict[str, Any]], key: str, source_ms: float) -> float:
    """The records' ``key`` summed per second of audio; NaN where the logs do not count it (the peers')."""
    if not any(key in i for i in info):
        return math.nan
    return sum(i.get(key, 0) for i in info) * 1000.0 / source_ms


def read_peers(folder: Path, task: str) -> dict[str, list[InstanceRecord]]:
    """The peers' logs of ``task`` written by ``bench/peers.py`` (``FOLDER/<peer>_<task>_<chunk>ms/instances.log``),
    by ``<peer> <chunk>ms``."""
    return {log.parent.name.replace(f"_{task}_", " "): read_log(log)
            for log in sorted(folder.glob(f"*_{task}_*ms/instances.log"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=TASKS, required=True)
    parser.add_argument("--configs", default="offline,offline-beam,before,low,balanced,accurate")
    parser.add_argument("--realtime", action="store_true", help="also feed each utterance at real-time pace")
    parser.add_argument("--peers", type=Path, default=RESULTS / "peers",
                        help="bench/peers.py's output folder, whose logs of the task are scored as the peers' rows "
                             "(default: %(default)s; a table written without them would drop the peers)")
    parser.add_argument("--limit", type=int, default=None, help="the first N utterances only (a smoke run)")
    parser.add_argument("--rescore", action="store_true", help="score the kept logs again; run nothing")
    parser.add_argument("--variant", action="append", default=[], metavar='NAME="FLAGS"',
                        help="also run a variant: the command-line FLAGS (over --latency balanced unless given), "
                             "scored in quality_latency_variants.md (repeatable)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the results folder (default: bench/results)")
    args = parser.parse_args()
    logs_root = args.out / "quality_latency"
    load_before = load_average()
    anchor_ms = speed_anchor_ms() if args.realtime and not args.rescore else None  # (timings compare by machine)
    table = configs(args.task)
    test = items(args.task)[: args.limit]
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    variants = [parse_variant(args.task, spec) for spec in args.variant]
    logs: dict[str, list[InstanceRecord]] = {}
    for name in table:
        path = logs_root / args.task / name / "instances.log"
        if path.is_file():
            logs[name] = read_log(path)
    for name in names:
        if args.rescore:
            break
        if name not in table:
            raise SystemExit(f"unknown config {name!r}; choose from {', '.join(table)}")
        started = time.perf_counter()
        logs[name] = run(args.task, table[name], test, args.realtime)
        path = logs_root / args.task / name / "instances.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_log(path, logs[name])
        print(f"{args.task} {name}: {time.perf_counter() - started:.0f} s", flush=True)
    for config in [] if args.rescore else variants:
        started = time.perf_counter()
        records = run(args.task, config, test, args.realtime)
        folder = logs_root / f"{args.task}_explore" / config.name
        folder.mkdir(parents=True, exist_ok=True)
        write_log(folder / "instances.log", records)
        (folder / "flags.txt").write_text(config.summary + "\n", encoding="utf-8")
        print(f"{args.task} variant {config.name}: {time.perf_counter() - started:.0f} s", flush=True)
    if variants or args.rescore:
        variant_rows = [
            score_row(args.task, name, flags, records, logs, (("offline", "d_offline"), ("balanced", "d_balanced")))
            for name, (flags, records) in explored(logs_root, args.task).items()
            if len(records) == len(logs.get("offline", records))]
        if variant_rows:  # (a task with no logged variant leaves the page as it is)
            write_variants(args.out, args.task, variant_rows)
    if not names and not args.rescore:
        return
    rows = [score_row(args.task, name, table[name].summary, records, logs) for name, records in logs.items()
            if name in table]
    rows += [score_row(args.task, f"peer: {name}", name, records, logs)
             for name, records in read_peers(args.peers, args.task).items()]
    write(args.out, args.task, rows, machine_note(load_before, anchor_ms), [] if args.rescore else names,
          args.realtime)


def write(out: Path, task: str, rows: list[dict[str, Any]], note: str, ran: Sequence[str], realtime: bool) -> None:
    """Replace ``task``'s rows of the table (the other task's stay), note the run, redraw the task's plot."""
    csv_path, md_path = out / "quality_latency.csv", out / "quality_latency.md"
    kept: list[dict[str, Any]] = []
    if csv_path.is_file():
        kept = [r for r in read_csv(csv_path) if r["task"] != task]
    all_rows = sorted(kept + rows, key=lambda r: TASKS.index(r["task"]))  # (each task's rows together, in order)
    old = md_path.read_text(encoding="utf-8") if md_path.is_file() else ""
    runs = [line for line in old.splitlines() if line.startswith("* Run ")]
    if ran:  # (a rescore runs nothing: the notes of the runs that made the logs stay as they are)
        runs.append(f"* Run {len(runs) + 1} ({task}: {', '.join(ran)}{'; realtime' if realtime else ''}): {note}.")
    header = (
        "# Quality against latency: the presets, offline, the defaults before them, and the peers\n\n"
        "Written by `bench/quality_latency.py` (its docstring defines every column). Q1 / Q2: WER_whisper / "
        "WER_norm (%) for `transcribe` (Whisper tiny.en, jfk + fleurs-en-dev + librispeech-other-dev), BLEU / "
        "chrF for `translate` (Whisper base X→English, fleurs-multi de + fr). Latencies in seconds. d_offline / "
        "d_before: Q1 of the row minus Q1 of offline / of the defaults before the presets, with the paired "
        "bootstrap 95 % interval over utterances (1000 resamples).\n\n" + "\n".join(runs) + "\n\n"
    )
    write_report(md_path, header + markdown_table(all_rows, COLUMNS))
    write_csv(csv_path, all_rows, COLUMNS)
    print("wrote", plot(out, task, rows))


VARIANT_COLUMNS = ["task", "config", "options", "n", "Q1", "Q2", "AL", "LAAL", "enc_frames_s", "dec_calls_s",
                   "d_offline", "d_balanced"]


def write_variants(out: Path, task: str, rows: list[dict[str, Any]]) -> None:
    """Replace ``task``'s rows of ``quality_latency_variants.md`` (the other task's stay)."""
    path = out / "quality_latency_variants.md"
    marker = f"## {task}"
    sections = {}
    if path.is_file():
        text = path.read_text(encoding="utf-8")
        for block in text[: text.index(READING) if READING in text else len(text)].split("\n## ")[1:]:
            title = "## " + block.split("\n", 1)[0]
            sections[title] = "## " + block.rstrip("\n")
    sections[marker] = "\n\n".join([marker, markdown_table(rows, VARIANT_COLUMNS)])
    header = (
        "# Quality against latency: variants of the presets\n\n"
        "Written by `bench/quality_latency.py --variant NAME=\"FLAGS\"` (its docstring defines every column): each "
        "row is a task run with the command-line flags in `options` (over `--latency balanced` unless they name "
        "another preset), on the same dev utterances as `quality_latency.md`, logged under "
        "`quality_latency/<task>_explore/NAME/`. `d_offline` / `d_balanced`: Q1 of the row minus Q1 of offline / of "
        "the `balanced` preset (its row in `quality_latency.md` when the page was written: a row's `d_balanced` "
        "moves with the preset), with the paired bootstrap 95 % interval over utterances (1000 resamples). Quality "
        "and the source-clock latencies do not depend on the machine's load (the torch thread count can flip a rare "
        "decision: see `quality_latency.md`'s reading); no timing column is kept here.\n\n"
    )
    write_report(path, header + "\n\n".join(sections[k] for k in sorted(sections)))


def plot(out: Path, task: str, rows: Sequence[dict[str, Any]]) -> Path:
    """Q1 against AL and AL_CA (and AL_live when measured): simulst's rows and the peers', offline as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    latencies = [m for m in ("AL", "AL_CA", "AL_live") if any(_finite(r.get(m)) for r in rows)]
    fig, axes = plt.subplots(1, len(latencies), figsize=(5.4 * len(latencies), 4.4), squeeze=False)
    offline = [float(r["Q1"]) for r in rows if r["config"] == "offline"]
    for ax, latency in zip(axes[0], latencies, strict=True):
        for peer in (False, True):
            shown = [r for r in rows if str(r["config"]).startswith("peer") == peer and r["config"] != "offline"
                     and _finite(r.get(latency))]
            xs, ys = [float(r[latency]) for r in shown], [float(r["Q1"]) for r in shown]
            ax.plot(xs, ys, "s" if peer else "o", label="peers" if peer else "simulst")
            for r, x, y in zip(shown, xs, ys, strict=True):
                ax.annotate(str(r["config"]).removeprefix("peer: "), (x, y), textcoords="offset points",
                            xytext=(3, 3), fontsize=7)
        if offline:
            ax.axhline(offline[0], linestyle="--", color="grey", label="offline")
        ax.set_xlabel(f"{latency} (s)")
        ax.set_ylabel(QUALITY[task][0])
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{task}: {QUALITY[task][0]} against latency (dev sets)")
    fig.tight_layout()
    path = out / f"quality_latency_{task}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _finite(value: Any) -> bool:
    try:
        return value not in (None, "") and float(value) == float(value)
    except (TypeError, ValueError):
        return False


if __name__ == "__main__":
    main()
