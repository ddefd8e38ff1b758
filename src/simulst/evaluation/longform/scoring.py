"""Long-form scoring of a whole test set: resegment every talk, score its sentences, write the files.

The report (:class:`LongformReport`) is built like a short-form one (:class:`~simulst.evaluation.report.
ReportBuilder`), one row per reference sentence: quality first (sacreBLEU BLEU and chrF of the resegmented
predictions against the reference sentences, as OmniSTEval; ``WER`` / ``WER_norm`` / ``WER_whisper`` for words,
which OmniSTEval lacks), then the long-form latency metrics (:mod:`~simulst.evaluation.longform.metrics`) and
their ``_CA`` forms, then the counts ``Talks``, ``Sentences``, ``EmptySentences``, ``DroppedUnits``.

Files (:func:`write_longform_scores`): ``scores.longform.tsv`` / ``.json`` and ``metrics.longform.tsv`` as the
short-form ``scores.tsv`` / ``.json`` and ``metrics.tsv``, plus OmniSTEval's ``instances.resegmented.jsonl``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulst.errors import OptionError
from simulst.evaluation.instances import InstanceRecord, read_log
from simulst.evaluation.latency import reference_length
from simulst.evaluation.longform.align import check_resegmenter
from simulst.evaluation.longform.inputs import (
    LongformInputError,
    Segment,
    Talk,
    group_talks,
    match_talks,
    output_units,
    read_reference_sentences,
    read_segmentation,
)
from simulst.evaluation.longform.metrics import LONGFORM_METRICS, get_longform_metric, per_sentence
from simulst.evaluation.longform.resegment import SentenceOutput, resegment
from simulst.evaluation.quality import (
    DEFAULT_SACREBLEU_TOKENIZER,
    QUALITY_METRICS,
    check_quality_metrics,
    check_sacrebleu_tokenizer,
    quality_scores,
)
from simulst.evaluation.report import ReportBuilder, ScoreReport, instances_to_score, latency_names, write_report

LONGFORM_SCORES_TSV = "scores.longform.tsv"
LONGFORM_SCORES_JSON = "scores.longform.json"
LONGFORM_SENTENCES_TSV = "metrics.longform.tsv"
RESEGMENTED_JSONL = "instances.resegmented.jsonl"  # OmniSTEval's name and keys
#: quality metrics that count words: not scored at the char unit
WORD_QUALITY_METRICS = ("WER", "WER_norm", "WER_whisper")


@dataclass(frozen=True)
class LongformOptions:
    """How a long-form log is scored.

    Attributes:
        method: a registered resegmenter, ``soft`` (OmniSTEval) or ``mwer``
            (:data:`~simulst.evaluation.longform.align.RESEGMENTERS`).
        lang: Moses tokenizer language for the soft alignment (OmniSTEval's ``--lang``); None: none.
        unit: ``word`` or ``char`` (OmniSTEval's ``--word_level`` / ``--char_level``).
        sacrebleu_tokenizer: sacreBLEU tokenizer for BLEU.
        computation_aware: score the ``_CA`` metrics (None: when every talk has ``elapsed`` times).
        fix_elapsed: OmniSTEval's ``--fix_simuleval_emission_ca`` (see
            :func:`~simulst.evaluation.longform.resegment.fix_elapsed_times`).
        offset_delays: OmniSTEval's ``--offset_delays`` (delays count from the talk's first segment).
        latency_metrics: registered long-form latency metric names (without ``_CA``); None: every one
            registered (:data:`~simulst.evaluation.longform.metrics.LONGFORM_METRICS`).
        quality_metrics: quality metric names; None: every one registered, less :data:`WORD_QUALITY_METRICS` at
            the char unit.
    """

    method: str = "soft"
    lang: str | None = None
    unit: str = "word"
    sacrebleu_tokenizer: str = DEFAULT_SACREBLEU_TOKENIZER
    computation_aware: bool | None = None
    fix_elapsed: bool = False
    offset_delays: bool = False
    latency_metrics: tuple[str, ...] | None = None
    quality_metrics: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        check_resegmenter(self.method, self.unit)
        check_sacrebleu_tokenizer(self.sacrebleu_tokenizer)
        for name in self.latency_metrics or ():
            get_longform_metric(name)  # raises on an unknown name
        if self.quality_metrics is not None:
            check_quality_metrics(self.quality_metrics)
            counting_words = [n for n in self.quality_metrics if n in WORD_QUALITY_METRICS]
            if self.unit == "char" and counting_words:
                raise OptionError(f"{', '.join(counting_words)} count words: not scored at the char unit")

    @property
    def latency(self) -> tuple[str, ...]:
        """The long-form latency metrics to score."""
        return tuple(LONGFORM_METRICS) if self.latency_metrics is None else self.latency_metrics

    @property
    def quality(self) -> tuple[str, ...]:
        """The quality metrics to score."""
        if self.quality_metrics is not None:
            return self.quality_metrics
        return tuple(n for n in QUALITY_METRICS if self.unit == "word" or n not in WORD_QUALITY_METRICS)


@dataclass
class LongformReport(ScoreReport):
    """The scores of a long-form log (``scores``, one ``per_instance`` row per reference sentence, ``notes``)
    and the resegmented sentences themselves."""

    sentences: list[SentenceOutput] = field(default_factory=list)


def score_longform(
    records: Sequence[InstanceRecord],
    references: Sequence[str],
    segments: Sequence[Segment],
    options: LongformOptions | None = None,
) -> LongformReport:
    """Resegment every talk of a long-form log and score it (see the module docstring).

    Args:
        records: the log's instances, one per talk.
        references: the reference sentences, one per segment, in segmentation order.
        segments: the segmentation.
        options: how to resegment and score.

    Returns:
        A report with the quality metrics (default ``BLEU``, ``chrF``, and for words ``WER``, ``WER_norm``,
        ``WER_whisper``), the latency metrics (default ``StreamLAAL``, ``LongYAAL``) and their ``_CA`` forms when
        computation-aware, ``Talks``, ``Sentences``, ``EmptySentences``, ``DroppedUnits``; one row per reference
        sentence.
    """
    options = options or LongformOptions()
    records = instances_to_score(records)
    if len(references) != len(segments):
        raise LongformInputError(
            f"{len(references)} reference sentences but {len(segments)} segments: the reference file needs one "
            "line per segment of the segmentation"
        )
    talks = group_talks(segments)
    matched = match_talks(records, talks)
    asked, all_elapsed = options.computation_aware, all(len(r.elapsed) > 0 for r in matched)
    ca = all_elapsed if asked is None else asked and all_elapsed
    sentences, dropped = _resegment_talks(talks, matched, references, segments, options, ca)
    builder = ReportBuilder([_sentence_row(s, options.unit) for s in sentences])
    if asked and not all_elapsed:
        builder.note("computation-aware metrics asked for, but not every talk has elapsed times: not computed")
    hyps, refs = [s.prediction for s in sentences], [s.reference for s in sentences]
    builder.add_scores(quality_scores(options.quality, hyps, refs, options.sacrebleu_tokenizer))
    builder.add_latency(latency_names(options.latency, ca),
                        lambda name: per_sentence(name, sentences, options.unit))
    empty = sum(1 for s in sentences if s.is_empty)
    builder.add_scores({"Talks": len(talks), "Sentences": len(sentences), "EmptySentences": empty,
                        "DroppedUnits": dropped})
    if empty:
        builder.note(
            f"{empty} of {len(sentences)} sentences received no output after resegmentation: latency metrics skip "
            "them, quality metrics score them as empty"
        )
    if dropped:
        builder.note(f"{dropped} output {options.unit}s could not be placed in any sentence and are not scored")
    report = builder.report()
    return LongformReport(report.scores, report.per_instance, report.notes, sentences)


def _resegment_talks(
    talks: Sequence[Talk],
    records: Sequence[InstanceRecord],
    references: Sequence[str],
    segments: Sequence[Segment],
    options: LongformOptions,
    computation_aware: bool,
) -> tuple[list[SentenceOutput], int]:
    """Every talk's sentences (``records[k]`` is the instance of ``talks[k]``) and how many units were dropped."""
    sentences: list[SentenceOutput] = []
    dropped = 0
    for talk, rec in zip(talks, records, strict=True):
        units = output_units(rec.prediction, options.unit)
        outputs = resegment(
            units,
            rec.delays,
            rec.elapsed if computation_aware else None,
            [references[i] for i in talk.sentences],
            [segments[i] for i in talk.sentences],
            method=options.method,
            lang=options.lang,
            unit=options.unit,
            fix_elapsed=options.fix_elapsed,
            offset_delays=options.offset_delays,
            first_index=talk.sentences.start,
        )
        dropped += len(units) - sum(len(s.delays) for s in outputs)
        sentences += outputs
    return sentences, dropped


def _sentence_row(s: SentenceOutput, unit: str) -> dict[str, Any]:
    """A sentence's own columns in ``metrics.longform.tsv``."""
    return {
        "index": s.index,
        "talk": s.talk,
        "offset_ms": s.offset,
        "source_length": s.source_length,
        "prediction_length": len(s.delays),
        "reference_length": reference_length(s.reference, unit),
    }


def score_longform_log(
    log: str | Path,
    references: str | Path,
    segmentation: str | Path,
    options: LongformOptions | None = None,
) -> LongformReport:
    """Score the ``instances.log`` in ``log`` (or the log file) against a reference file and a segmentation."""
    return score_longform(read_log(log), read_reference_sentences(references), read_segmentation(segmentation),
                          options)


def resegmented_records(report: LongformReport) -> list[dict[str, Any]]:
    """The resegmented sentences as OmniSTEval's ``instances.resegmented.jsonl`` objects (``emission_cu`` /
    ``emission_ca`` relative to the sentence offset; ``omnisteval longform --resegmented_hypothesis`` reads them)."""
    talk_ids = {t: k for k, t in enumerate(dict.fromkeys(s.talk for s in report.sentences))}
    out = []
    segid: dict[str, int] = {}
    for s in report.sentences:
        seg = segid.get(s.talk, 0)
        segid[s.talk] = seg + 1
        info: dict[str, Any] = {
            "index": s.index,
            "docid": talk_ids[s.talk],
            "segid": seg,
            "prediction": s.prediction,
            "reference": s.reference,
            "source_length": s.source_length,
        }
        if s.delays:
            info["emission_cu"] = list(s.delays)
            if s.elapsed is not None:
                info["emission_ca"] = list(s.elapsed)
            info["time_to_recording_end"] = s.time_to_talk_end
        out.append(info)
    return out


def write_longform_scores(out_dir: str | Path, report: LongformReport) -> list[Path]:
    """Write ``scores.longform.tsv`` (header row, value row), ``scores.longform.json``, ``metrics.longform.tsv``
    (one row per sentence) and ``instances.resegmented.jsonl`` into ``out_dir``; returns the paths."""
    out = Path(out_dir)
    paths = [out / LONGFORM_SCORES_TSV, out / LONGFORM_SCORES_JSON, out / LONGFORM_SENTENCES_TSV,
             out / RESEGMENTED_JSONL]
    write_report(paths[0], paths[1], paths[2], report)
    lines = [json.dumps(r, ensure_ascii=False) for r in resegmented_records(report)]
    paths[3].write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return paths
