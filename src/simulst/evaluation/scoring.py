"""Score an ``instances.log`` (ours or SimulEval's): latency, quality and cost metrics in one report.

The corpus scores are keyed by SimulEval's metric names (``AL``, ``LAAL``, ``AP``, ``DAL``, ``ATD``,
``StartOffset``, ``EndOffset``, ``BLEU``, ... and ``NAME_CA`` for the computation-aware ones), and equal what
``simuleval --score-only`` computes on the same log. simulst adds, under names SimulEval does not use:

* ``Instances`` — instances in the log; ``EmptyOutputs`` — how many produced no output unit. Latency
  averages skip those instances, as SimulEval does; quality metrics score them as empty strings.
* ``ComputeRTF`` — compute real-time factor, Σ compute ms / Σ |X| ms (from simulst's per-instance costs;
  for a SimulEval log, compute ms ≈ elapsed_|Y| − d_|Y| of each non-empty instance).
* ``Emissions`` — mean number of emissions (non-empty writes) per instance.
* ``DecoderCallsPerWord`` — Σ decoder forward calls / Σ output words (simulst logs only): the papers'
  hardware-free cost measure.
* ``DecoderCalls``, ``DecoderPositions``, ``EncoderCalls`` — totals over the instances (simulst logs only):
  decoder forward calls (one batched step over all beams counts once; the papers' "# fw. passes"), token positions
  the decoder computed (batch × new tokens), encoder calls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from simulst.errors import OptionError
from simulst.evaluation.instances import InstanceRecord, read_log
from simulst.evaluation.latency import (
    DEFAULT_LATENCY_METRICS,
    LATENCY_UNITS,
    PieceEncoder,
    Timing,
    corpus_latency,
    get_latency_metric,
    reference_length,
)
from simulst.evaluation.quality import (
    DEFAULT_SACREBLEU_TOKENIZER,
    QUALITY_METRICS,
    check_quality_metrics,
    check_sacrebleu_tokenizer,
    normalize_for_wer,
    quality_scores,
    wer,
    whisper_normalize,
)
from simulst.evaluation.report import (
    ReportBuilder,
    ScoreReport,
    format_table,
    instances_to_score,
    latency_names,
    write_report,
)

__all__ = [
    "METRICS_TSV",
    "SCORES_JSON",
    "SCORES_TSV",
    "ScoreOptions",
    "ScoreReport",
    "format_table",
    "load_spm",
    "score_log",
    "score_records",
    "timings_of",
    "write_scores",
]

SCORES_TSV = "scores.tsv"
SCORES_JSON = "scores.json"
METRICS_TSV = "metrics.tsv"
# per-instance cost counters of simulst logs -> the name of their total
_COUNTERS = (("decoder_calls", "DecoderCalls"), ("decoder_positions", "DecoderPositions"),
             ("encoder_calls", "EncoderCalls"))


@dataclass(frozen=True)
class ScoreOptions:
    """How a log is scored.

    Attributes:
        latency_unit: ``word``, ``char`` or ``spm`` (SimulEval's ``--eval-latency-unit``); it sets how the
            reference length |Y*| is counted; the log's delays are already one per unit.
        spm_model: SentencePiece model file for the ``spm`` unit.
        latency_metrics: registered latency metric names (without ``_CA``).
        quality_metrics: names from :data:`~simulst.evaluation.quality.QUALITY_METRICS`.
        sacrebleu_tokenizer: sacreBLEU tokenizer for BLEU (``13a``; ``zh`` / ``ja-mecab`` for zh / ja).
        computation_aware: add the ``_CA`` metrics (None: when the log has ``elapsed`` times).
        use_ref_len: |Y*| from the reference (SimulEval's default; False is ``--no-use-ref-len``).
    """

    latency_unit: str = "word"
    spm_model: str | None = None
    latency_metrics: tuple[str, ...] = DEFAULT_LATENCY_METRICS
    quality_metrics: tuple[str, ...] = QUALITY_METRICS
    sacrebleu_tokenizer: str = DEFAULT_SACREBLEU_TOKENIZER
    computation_aware: bool | None = None
    use_ref_len: bool = True

    def __post_init__(self) -> None:
        if self.latency_unit not in LATENCY_UNITS:
            raise OptionError(f"unknown latency unit {self.latency_unit!r}; choose one of {', '.join(LATENCY_UNITS)}")
        if self.latency_unit == "spm" and not self.spm_model:
            raise OptionError("the spm latency unit needs --eval-latency-spm-model")
        for name in self.latency_metrics:
            get_latency_metric(name)  # raises on an unknown name
        check_quality_metrics(self.quality_metrics)
        if "BLEU" in self.quality_metrics:
            check_sacrebleu_tokenizer(self.sacrebleu_tokenizer)


def load_spm(path: str) -> PieceEncoder:
    """Load a SentencePiece model for the ``spm`` latency unit."""
    try:
        import sentencepiece  # lazy: only the spm latency unit needs it
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise OptionError("the spm latency unit needs the sentencepiece package") from exc
    if not Path(path).is_file():
        raise OptionError(f"no SentencePiece model at {path}")
    processor: Any = sentencepiece.SentencePieceProcessor(model_file=str(path))
    return cast(PieceEncoder, processor)


def timings_of(records: Sequence[InstanceRecord], options: ScoreOptions) -> list[Timing]:
    """The latency view of each record (|Y*| counted in ``options.latency_unit``)."""
    spm = load_spm(options.spm_model) if options.latency_unit == "spm" and options.spm_model else None
    out = []
    for rec in records:
        # SimulEval's LogInstance reads a missing "reference" key as "", a null one as None
        ref = "" if rec.reference_missing else rec.reference
        out.append(
            Timing(
                delays=tuple(rec.delays),
                elapsed=tuple(rec.elapsed),
                source_length=rec.source_length,
                reference_length=reference_length(ref, options.latency_unit, spm),
            )
        )
    return out


def _compute_ms(rec: InstanceRecord) -> float | None:
    info = rec.simulst
    if "compute_ms" in info:
        return float(info["compute_ms"])
    if rec.elapsed and rec.delays:
        return rec.elapsed[-1] - rec.delays[-1]
    return None


def _emissions(rec: InstanceRecord) -> int:
    info = rec.simulst
    if isinstance(info.get("emissions"), list):
        return sum(1 for e in info["emissions"] if str(e.get("text", "")).strip())
    runs = 0
    prev: float | None = None
    for d in rec.delays:
        if d != prev:
            runs += 1
        prev = d
    return runs


def score_records(records: Sequence[InstanceRecord], options: ScoreOptions | None = None) -> ScoreReport:
    """Score a list of log records (see the module docstring for the metrics)."""
    options = options or ScoreOptions()
    records = instances_to_score(records)
    timings = timings_of(records, options)
    builder = ReportBuilder([
        {
            "index": rec.index,
            "id": rec.simulst.get("id", ""),
            "source_length": rec.source_length,
            "prediction_length": len(rec.delays),
            "reference_length": t.reference_length,
        }
        for rec, t in zip(records, timings, strict=True)
    ])
    _add_quality(builder, records, options)  # quality first, as SimulEval's scores.tsv does
    has_elapsed = any(r.elapsed for r in records)
    ca = has_elapsed if options.computation_aware is None else options.computation_aware
    if ca and not has_elapsed:
        builder.note("computation-aware metrics asked for, but the log has no elapsed times")
    builder.add_latency(latency_names(options.latency_metrics, ca),
                        lambda name: corpus_latency(name, timings, options.use_ref_len).per_instance)
    empty = sum(1 for r in records if r.is_empty)
    builder.add_scores({"Instances": len(records), "EmptyOutputs": empty})
    if empty:
        builder.note(
            f"{empty} of {len(records)} instances produced no output: latency metrics average the other "
            f"{len(records) - empty} (as SimulEval does); quality metrics count them as empty outputs"
        )
    _add_costs(builder, records)
    units = {str(r.simulst["latency_unit"]) for r in records if r.simulst.get("latency_unit")}
    if units and units != {options.latency_unit}:
        builder.note(
            f"the log's delays are per {'/'.join(sorted(units))} but |Y*| is counted per {options.latency_unit} "
            "(SimulEval does the same; re-run eval with --eval-latency-unit to change the unit of the delays)"
        )
    return builder.report()


def _add_quality(builder: ReportBuilder, records: Sequence[InstanceRecord], options: ScoreOptions) -> None:
    """Corpus quality over the instances with a reference (and each one's ``WER_norm`` / ``WER_whisper``)."""
    if not options.quality_metrics:
        return
    with_ref = [r for r in records if r.reference is not None]
    if not with_ref:
        builder.note("no instance has a reference: quality metrics not computed")
        return
    if len(with_ref) < len(records):
        builder.note(f"quality metrics over the {len(with_ref)} of {len(records)} instances with a reference")
    hyps = [r.prediction for r in with_ref]
    refs = [r.reference or "" for r in with_ref]
    builder.add_scores(quality_scores(options.quality_metrics, hyps, refs, options.sacrebleu_tokenizer))
    for name, normalize in (("WER_norm", normalize_for_wer), ("WER_whisper", whisper_normalize)):
        if name in options.quality_metrics:
            for row, rec in zip(builder.rows, records, strict=True):
                if rec.reference is not None:
                    row[name] = wer([rec.prediction], [rec.reference], normalize)


def _add_costs(builder: ReportBuilder, records: Sequence[InstanceRecord]) -> None:
    """ComputeRTF, Emissions and (simulst logs) the decoder and encoder counters."""
    compute = [(_compute_ms(r), r.source_length) for r in records]
    known = [(c, x) for c, x in compute if c is not None]
    rtf = math.fsum(c for c, _ in known) / math.fsum(x for _, x in known) if known else None
    builder.add_metric("ComputeRTF", rtf, [None if c is None else c / x for c, x in compute])
    emissions = [_emissions(r) for r in records]
    builder.add_metric("Emissions", math.fsum(emissions) / len(emissions), emissions)
    calls = [r.simulst.get("decoder_calls") for r in records]
    words = [r.simulst.get("n_words") for r in records]
    if all(isinstance(c, int | float) for c in calls) and all(isinstance(w, int | float) for w in words):
        total_words = math.fsum(float(w) for w in words if w is not None)
        total_calls = math.fsum(float(c) for c in calls if c is not None)
        builder.add_scores({"DecoderCallsPerWord": total_calls / total_words if total_words else None})
        builder.add_column("decoder_calls", calls)
        builder.add_column("DecoderCallsPerWord",
                           [(c / w) if c is not None and w else None for c, w in zip(calls, words, strict=True)])
    for key, name in _COUNTERS:  # totals: the papers' "# fw. passes" (simulst logs)
        counts = [r.simulst.get(key) for r in records]
        if all(isinstance(c, int) for c in counts):
            builder.add_scores({name: sum(int(c) for c in counts if c is not None)})
            builder.add_column(key, counts)


def score_log(log_dir: str | Path, options: ScoreOptions | None = None) -> ScoreReport:
    """Score the ``instances.log`` in ``log_dir`` (or the log file itself)."""
    return score_records(read_log(log_dir), options)


def write_scores(out_dir: str | Path, report: ScoreReport) -> None:
    """Write ``scores.tsv`` (one header row, one value row, as SimulEval's), ``scores.json`` and
    ``metrics.tsv`` (one row per instance) into ``out_dir``."""
    out = Path(out_dir)
    write_report(out / SCORES_TSV, out / SCORES_JSON, out / METRICS_TSV, report)
