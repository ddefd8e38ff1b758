"""Long-form evaluation: one instance per talk, scored per reference sentence after resegmentation.

SimulEval's long-form convention (IWSLT simultaneous track since 2025): an instance is a whole talk, its output
one prediction with one delay per output unit (``delays``: ms of the talk's audio read; ``elapsed``: the
computation-aware time). The reference is a list of sentences with the talks' segmentation.

Scoring (:func:`score_longform`) reproduces OmniSTEval 0.1.10 (``omnisteval longform --speech_segmentation``;
Polák et al. 2025, "Better Late Than Never", arXiv:2509.17349) to floating-point precision, one module a step:

* :mod:`~simulst.evaluation.longform.inputs` — read the segmentation and the reference sentences, group the
  segments into talks, match each talk with its log instance.
* :mod:`~simulst.evaluation.longform.align` — give each output unit of a talk a reference sentence: the
  registered resegmenters, OmniSTEval's SoftSegmenter (``soft``) and the minimum-WER cut (``mwer``).
* :mod:`~simulst.evaluation.longform.resegment` — cut a talk's output and delays into per-sentence outputs,
  the delays made relative to each sentence's offset.
* :mod:`~simulst.evaluation.longform.metrics` — the registered long-form latency metrics, ``StreamLAAL`` and
  ``LongYAAL`` (and their ``_CA`` forms).
* :mod:`~simulst.evaluation.longform.scoring` — options, the report (built by the same
  :class:`~simulst.evaluation.report.ReportBuilder` as short-form scores, with BLEU, chrF and WER of the
  resegmented sentences) and its files.

``unit="char"`` is OmniSTEval's ``--char_level`` (zh/ja): units are characters, the references lose their
spaces, tokens match only when equal.
"""

from simulst.evaluation.longform.align import (
    PUNCTUATION,
    RESEGMENTERS,
    Resegmenter,
    align_to_sentences,
    register_resegmenter,
)
from simulst.evaluation.longform.inputs import (
    LONGFORM_UNITS,
    LongformInputError,
    Segment,
    Talk,
    group_talks,
    match_talks,
    read_reference_sentences,
    read_segmentation,
    segments_from_entries,
)
from simulst.evaluation.longform.metrics import (
    LONGFORM_METRICS,
    OMNISTEVAL_KEYS,
    LongformMetric,
    get_longform_metric,
    long_yaal,
    long_yaal_of,
    register_longform_metric,
    sentence_long_yaal,
    sentence_stream_laal,
    stream_laal,
)
from simulst.evaluation.longform.resegment import SentenceOutput, fix_elapsed_times, resegment
from simulst.evaluation.longform.scoring import (
    LONGFORM_SCORES_JSON,
    LONGFORM_SCORES_TSV,
    LONGFORM_SENTENCES_TSV,
    RESEGMENTED_JSONL,
    LongformOptions,
    LongformReport,
    resegmented_records,
    score_longform,
    score_longform_log,
    write_longform_scores,
)

__all__ = [
    "LONGFORM_METRICS",
    "LONGFORM_SCORES_JSON",
    "LONGFORM_SCORES_TSV",
    "LONGFORM_SENTENCES_TSV",
    "LONGFORM_UNITS",
    "OMNISTEVAL_KEYS",
    "PUNCTUATION",
    "RESEGMENTED_JSONL",
    "RESEGMENTERS",
    "LongformInputError",
    "LongformMetric",
    "LongformOptions",
    "LongformReport",
    "Resegmenter",
    "Segment",
    "SentenceOutput",
    "Talk",
    "align_to_sentences",
    "fix_elapsed_times",
    "get_longform_metric",
    "group_talks",
    "long_yaal",
    "long_yaal_of",
    "match_talks",
    "read_reference_sentences",
    "read_segmentation",
    "register_longform_metric",
    "register_resegmenter",
    "resegment",
    "resegmented_records",
    "score_longform",
    "score_longform_log",
    "segments_from_entries",
    "sentence_long_yaal",
    "sentence_stream_laal",
    "stream_laal",
    "write_longform_scores",
]
