"""Shared helpers of the benchmarks: the shared English test set, streaming a file, and scoring a run."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simulst.audio.io import load_audio
from simulst.config import StreamOptions
from simulst.evaluation.bootstrap import ScoreFromStats, utterance_statistics
from simulst.evaluation.latency import average_lagging, length_adaptive_average_lagging
from simulst.evaluation.manifest import TestItem, read_manifest
from simulst.evaluation.quality import normalize_for_wer, wer
from simulst.models.base import SpeechModel
from simulst.streaming.engine import SpeechEngine
from simulst.streaming.feed import feed_fast
from simulst.types import Costs, Emission

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
DATA = SHARED / "data"
WHISPER_TINY_EN = SHARED / "models" / "whisper-tiny.en"


@dataclass(frozen=True)
class Item:
    """One utterance of a test set: its reference ``transcript`` (of a translation set: the English reference) and
    its source ``language``."""

    id: str
    audio: np.ndarray
    transcript: str
    language: str = "en"

    @property
    def source_ms(self) -> float:
        return self.audio.shape[0] / 16.0


def english_set() -> list[Item]:
    """jfk + fleurs-en-dev (6 utterances, 51.9 s), audio loaded at 16 kHz."""
    items = []
    for manifest in ("jfk.tsv", "fleurs-en-dev.tsv"):
        for line in (DATA / manifest).read_text(encoding="utf-8").splitlines()[1:]:
            uid, audio, _duration, transcript = line.split("\t")[:4]
            items.append(Item(uid, load_audio(DATA / audio), transcript))
    return items


X2EN_LANGUAGES = ("de", "fr")  # the fleurs-multi languages with English references (references.en.tsv)


def x2en_items(language: str) -> list[TestItem]:
    """The fleurs-multi utterances of ``language`` (one of :data:`X2EN_LANGUAGES`) with their English references,
    in manifest order."""
    items = read_manifest(DATA / "fleurs-multi.tsv", references=DATA / "references.en.tsv", tgt_lang="en",
                          src_langs=[language])
    return [dataclasses.replace(item, reference=str(item.reference).strip()) for item in items]


def translation_set(per_language: int = 3) -> list[Item]:
    """The first ``per_language`` German and French fleurs-multi utterances with their English references, audio
    loaded at 16 kHz; each :attr:`Item.language` is its source language."""
    return [Item(item.id, load_audio(item.audio), str(item.reference), language)
            for language in X2EN_LANGUAGES for item in x2en_items(language)[:per_language]]


@dataclass
class Run:
    """One utterance streamed through one configuration."""

    emissions: list[Emission]
    costs: Costs
    text: str


def stream(model: SpeechModel, options: StreamOptions, audio: np.ndarray) -> Run:
    """Push ``audio`` chunk by chunk (computation-unaware feeding; compute time is measured), then finish."""
    session = SpeechEngine(model).open(options)
    out = feed_fast(session, audio)
    return Run(out, session.costs, session.text)


def word_delays(emissions: Sequence[Emission], aware: bool) -> list[float]:
    """Per output word, the source ms (or computation-aware elapsed ms) of the emission that wrote it."""
    return [e.elapsed_ms if aware else e.source_ms for e in emissions for _ in e.text.split()]


def score(items: Sequence[Item], runs: Sequence[Run]) -> dict[str, float]:
    """WER (normalised), AL, LAAL, AL_CA (SimulEval semantics, word unit, mean over non-empty outputs), RTF,
    emissions per utterance, decoder passes and encoder calls (totals)."""
    al, laal, al_ca = [], [], []
    for item, run in zip(items, runs, strict=True):
        ref_words = len(item.transcript.split())
        d, e = word_delays(run.emissions, False), word_delays(run.emissions, True)
        if d:
            al.append(average_lagging(d, item.source_ms, ref_words))
            laal.append(length_adaptive_average_lagging(d, item.source_ms, ref_words))
            al_ca.append(average_lagging(e, item.source_ms, ref_words))
    compute = sum(r.costs.compute_s for r in runs)
    audio_s = sum(i.source_ms for i in items) / 1000.0
    return {
        "WER": wer([r.text for r in runs], [i.transcript for i in items], normalize_for_wer),
        "AL": statistics.fmean(al) / 1000 if al else float("nan"),
        "LAAL": statistics.fmean(laal) / 1000 if laal else float("nan"),
        "AL_CA": statistics.fmean(al_ca) / 1000 if al_ca else float("nan"),
        "RTF": compute / audio_s,
        "emissions": statistics.fmean(len(r.emissions) for r in runs),
        "decoder_passes": float(sum(r.costs.decoder_calls for r in runs)),
        "encoder_calls": float(sum(r.costs.encoder_calls for r in runs)),
        "empty": float(sum(1 for r in runs if not r.text)),
    }


def word_units(units: Sequence[str], delays: Sequence[float],
               elapsed: Sequence[float]) -> tuple[list[str], list[float], list[float]]:
    """``units`` (SimulEval's word units of an output), ``delays`` and ``elapsed`` (one per unit; ``elapsed`` may be
    empty) without the units that are only punctuation (a mark emitted on its own, as "country .").

    Why: a mark emitted apart from its word counts as a word unit in AL and StreamLAAL, so a change that emits marks
    on their own moves those figures without moving a word; the delays of the words alone do not.

    Raises:
        SystemExit: ``delays`` (or a non-empty ``elapsed``) has another length than ``units``."""
    if len(delays) != len(units) or (elapsed and len(elapsed) != len(units)):
        raise SystemExit(f"{len(units)} output units, {len(delays)} delays, {len(elapsed)} elapsed")
    keep = [i for i, unit in enumerate(units) if any(c.isalnum() for c in unit)]
    return [units[i] for i in keep], [delays[i] for i in keep], [elapsed[i] for i in keep] if elapsed else []


def seconds(ms: float | None) -> float:
    """Milliseconds as seconds; NaN for a score that had nothing to score (None)."""
    return math.nan if ms is None else ms / 1000.0


def load_average() -> float:
    """The 1-minute load average (NaN where the platform has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def median_s(fn: Callable[[], object], repeats: int) -> float:
    """The median wall time of ``repeats`` calls of ``fn`` (seconds), after one warm-up call."""
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def ct2_whisper(audio: np.ndarray, compute_type: str = "float32") -> tuple[Any, Any]:
    """CTranslate2's Whisper on the tiny.en weights (torch's thread count) and ``audio``'s log-mel features padded
    to the 30 s window, as CTranslate2 takes them. Raises ImportError without ``ctranslate2`` and ModelLoadError
    without the model."""
    import ctranslate2
    import torch

    from simulst.models.catalog import resolve
    from simulst.models.mel import log_mel_spectrogram

    path = resolve("whisper-tiny.en")
    mel = log_mel_spectrogram(torch.from_numpy(audio), 80, 3000)
    features = ctranslate2.StorageView.from_array(np.ascontiguousarray(mel.unsqueeze(0).numpy()))
    model = ctranslate2.models.Whisper(str(path), device="cpu", compute_type=compute_type,
                                       intra_threads=torch.get_num_threads())
    return model, features


def speed_anchor_ms(repeats: int = 5) -> float | None:
    """The machine's speed, so that timings taken on different days can be compared: CTranslate2's encoder (the
    engine of faster-whisper, not ours, so our changes never move it) running Whisper tiny.en over a 30 s window
    (jfk, padded), median milliseconds with torch's thread count; None where ``ctranslate2`` or the model is
    missing. Read it before a timed run starts, as the load average.

    Why: this shared machine's speed drifts from day to day by as much as 1.4x (the encoder took 319 ms on one day
    and 442 ms on another), more than many of the differences a timing table is read for."""
    from simulst.errors import ModelLoadError

    try:
        model, features = ct2_whisper(load_audio(DATA / "audio" / "jfk" / "jfk.wav"))
    except (ImportError, ModelLoadError):  # (no ctranslate2, or the model is not installed: no anchor)
        return None
    return median_s(lambda: model.encode(features), repeats) * 1000.0


def add_code_version_arguments(parser: argparse.ArgumentParser) -> None:
    """``--src`` (the ``src`` folder of the code to time: another checkout's, e.g. a ``git worktree`` of an earlier
    commit) and ``--label`` (its rows' label), for the benchmarks that time code versions in one sitting."""
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the src folder of the code to time")
    parser.add_argument("--label", default=None, help="the rows' label (default: this checkout and its commit)")


def code_version(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[Path, str]:
    """The ``src`` folder and the label the arguments name (a ``--src`` without the package is the parser's error);
    the default label is this checkout and its commit."""
    if not (args.src / "simulst").is_dir():
        parser.error(f"--src {args.src}: no simulst package there")
    if args.label:
        return args.src, str(args.label)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return args.src, f"this checkout ({commit.stdout.strip() or 'unknown commit'})"


def timed_spread(measure: Callable[[], float], repeats: int) -> dict[str, Any]:
    """One untimed call of ``measure`` (its files into the OS cache), then ``repeats`` timed ones: the median, min
    and max of the seconds each returns, and the count (a code-version table's columns)."""
    measure()
    times = [measure() for _ in range(repeats)]
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "repeats": repeats}


def write_version_rows(path: Path, label: str, rows: Sequence[dict[str, Any]],
                       columns: Sequence[str]) -> list[dict[str, Any]]:
    """Write the code-version table ``path`` (CSV) with ``rows`` in place of its rows labelled ``label``, the other
    versions' kept before them; returns the table."""
    kept = [r for r in read_csv(path) if r["label"] != label] if path.is_file() else []
    table = [*kept, *rows]
    write_csv(path, table, columns)
    return table


def machine_note(load_before: float | None = None, anchor_ms: float | None = None) -> str:
    """One line on where and when a benchmark ran (the machine is shared: timings are noisy).

    ``load_before``: the load average read before the benchmark started (a quiet machine reads well under 1;
    the value at the end includes the benchmark's own threads). ``anchor_ms``: :func:`speed_anchor_ms`, read
    before the start.
    """
    before = "" if load_before is None else f"{load_before:.2f} before the start, "
    anchor = "" if anchor_ms is None else (f", speed anchor {anchor_ms:.0f} ms (CTranslate2's tiny.en encoder on a "
                                           "30 s window, before the start: lower is a faster machine)")
    return (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, load average {before}{load_average():.1f} at the end, torch threads "
        f"{os.environ.get('OMP_NUM_THREADS', 'default')}{anchor}"
    )


READING = "## Reading"


def write_csv(path: Path, rows: Sequence[dict[str, object]], columns: Sequence[str]) -> None:
    """A result table as CSV (one column per name in ``columns``)."""
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows(rows)


def read_csv(path: Path) -> list[dict[str, Any]]:
    """A result table written by :func:`write_csv`, its numbers back as numbers (:func:`csv_number`)."""
    with path.open(encoding="utf-8") as f:
        return [{k: csv_number(v) for k, v in row.items()} for row in csv.DictReader(f)]


def csv_number(text: str) -> Any:
    """A CSV cell back as an int or a float where it is one (else the text)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def write_report(path: Path, text: str) -> None:
    """Write a Markdown result page, keeping the hand-written ``## Reading`` section of the page it replaces
    (re-check it against the new numbers)."""
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    reading = old[old.index(READING) :] if READING in old else ""
    path.write_text(text.rstrip("\n") + "\n" + ("\n" + reading if reading else ""), encoding="utf-8")


def markdown_table(rows: Sequence[dict[str, object]], columns: Sequence[str]) -> str:
    """A GitHub Markdown table; floats with 3 significant decimals."""

    def cell(value: object) -> str:
        if isinstance(value, float):
            return f"{value:.3f}" if abs(value) < 100 else f"{value:.0f}"
        return str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def grid_statistics(metric: str, grids: Sequence[Sequence[str]],
                    references: Sequence[str]) -> tuple[np.ndarray, ScoreFromStats]:
    """Per-sentence statistics of ``metric`` summed over chunk grids (``grids``: each grid's hypotheses of the
    ``references``, in order), and the score of their column sums. A paired bootstrap on them
    (:func:`~simulst.evaluation.bootstrap.bootstrap_from_stats`) draws a sentence with its outputs on every grid:
    the grids of one sentence are not independent draws, the sentences are."""
    scored = [utterance_statistics(metric, hypotheses, references) for hypotheses in grids]
    return np.sum([stats for stats, _ in scored], axis=0), scored[0][1]


def grid_delay_statistics(grids: Sequence[Sequence[float | None]]) -> tuple[np.ndarray, ScoreFromStats]:
    """Per-sentence delay statistics summed over chunk grids (``grids``: each grid's per-sentence delay in ms, None
    where the sentence has no output): the sum of its delays and the count of grids it has one on; and their score,
    the mean delay in seconds over every (sentence, grid) with output (StreamLAAL over all the grids when the
    delays are each sentence's LAAL). As :func:`grid_statistics`, a bootstrap on them draws whole sentences."""
    values = np.array([[np.nan if d is None else d for d in grid] for grid in grids], dtype=np.float64)
    stats = np.stack([np.nansum(values, axis=0), np.sum(~np.isnan(values), axis=0)], axis=1)

    def mean_s(sums: np.ndarray) -> float:
        return float(sums[0] / sums[1] / 1000.0) if sums[1] else float("nan")

    return stats, mean_s

