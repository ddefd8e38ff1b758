"""Long-form latency metrics of resegmented sentences, in a registry keyed by their IWSLT / OmniSTEval names.

Per sentence s with output: d_i its words' delays minus the sentence offset o_s (ms), |X| = the sentence
duration, |Y*| = ``len(reference.split(" "))`` (char unit: the reference's length):

* ``StreamLAAL`` = LAAL (:func:`~simulst.evaluation.latency.length_adaptive_average_lagging`): the sum stops at
  the first delay ≥ |X| (included); a first delay > |X| is the score. OmniSTEval: ``long_laal``.
* ``LongYAAL`` (OmniSTEval's ``long_yaal``; :func:`long_yaal_of`): (1/τ) Σ_{i ≤ τ} (d_i − (i−1)·|X|/max(|Y|, |Y*|))
  over the delays before the *end of the talk* (E_s = end of the talk's last segment − o_s, ms): words delayed
  past the sentence end still count, words after the talk's end do not; a sentence whose first delay is ≥ E_s
  is skipped.
* ``NAME_CA``: the same on the ``elapsed`` times (with ``fix_elapsed``, as
  :func:`~simulst.evaluation.longform.resegment.fix_elapsed_times` corrects them).

A corpus score is the mean over the sentences a metric scores (:func:`~simulst.evaluation.latency.corpus_mean`;
sentences without output are skipped). A metric is registered with :func:`register_longform_metric`; the CLI's
``--latency-metrics`` choices under ``--long-form``, its help and the errors read :data:`LONGFORM_METRICS`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import ClassVar

from simulst.config.registry import Registry
from simulst.evaluation.latency import corpus_mean, length_adaptive_average_lagging, reference_length
from simulst.evaluation.longform.resegment import SentenceOutput


def long_yaal_of(d: Sequence[float], x: float, y_ref: float, time_to_end: float) -> float | None:
    r"""LongYAAL of one sentence (OmniSTEval's ``YAALScorer(is_longform=True)``).

    YAAL = (1/τ) Σ_{i=1..τ} (d_i − (i−1)·|X|/max(|Y|, |Y*|)), τ = the number of delays before the first
    d_i ≥ ``time_to_end`` (the end of the talk, relative to the sentence's offset). Delays past the sentence's
    own end still count. None (skipped) when there is no delay or d_1 ≥ ``time_to_end``.
    """
    if not d or d[0] >= time_to_end:
        return None
    gamma = max(len(d), y_ref) / x
    total = 0.0
    tau = 0
    for i_minus_1, di in enumerate(d):
        if di >= time_to_end:
            break
        total += di - i_minus_1 / gamma
        tau = i_minus_1 + 1
    return total / tau


class LongformMetric(ABC):
    """A latency metric of one resegmented sentence; None where the sentence is skipped.

    Args:
        unit: ``word`` or ``char``: how the reference length |Y*| is counted.
    """

    name: ClassVar[str]
    omnisteval_key: ClassVar[str]

    def __init__(self, unit: str = "word") -> None:
        self.unit = unit

    def compute(self, s: SentenceOutput, computation_aware: bool = False) -> float | None:
        """The metric of ``s`` on its delays (or ``elapsed`` times); None when it has none."""
        d = s.elapsed if computation_aware else s.delays
        if not d:
            return None
        y_ref = reference_length(s.reference, self.unit)
        assert y_ref is not None
        return self.formula(d, s, y_ref)

    @abstractmethod
    def formula(self, d: Sequence[float], s: SentenceOutput, y_ref: int) -> float | None:
        """The metric of delays ``d`` (not empty) of sentence ``s`` whose reference length is ``y_ref``."""


#: The long-form latency metrics by name, in registration order (long-form scoring computes all by default).
LONGFORM_METRICS: Registry[type[LongformMetric]] = Registry("long-form latency metric")


def register_longform_metric(name: str, omnisteval_key: str) -> Callable[[type[LongformMetric]], type[LongformMetric]]:
    """Class decorator adding a metric to :data:`LONGFORM_METRICS` under ``name``; ``omnisteval_key`` is its key
    in OmniSTEval's scores (``ca_`` + key for ``NAME_CA``)."""

    def register(cls: type[LongformMetric]) -> type[LongformMetric]:
        cls.name = name
        cls.omnisteval_key = omnisteval_key
        return LONGFORM_METRICS.register(name)(cls)

    return register


@register_longform_metric("StreamLAAL", "long_laal")
class StreamLAAL(LongformMetric):
    """LAAL of the sentence (IWSLT 2025's StreamLAAL); see
    :func:`~simulst.evaluation.latency.length_adaptive_average_lagging`."""

    def formula(self, d: Sequence[float], s: SentenceOutput, y_ref: int) -> float | None:
        return length_adaptive_average_lagging(d, s.source_length, y_ref)


@register_longform_metric("LongYAAL", "long_yaal")
class LongYAAL(LongformMetric):
    """LongYAAL of the sentence; see :func:`long_yaal_of` (None: the first word comes after the talk's end)."""

    def formula(self, d: Sequence[float], s: SentenceOutput, y_ref: int) -> float | None:
        return long_yaal_of(d, s.source_length, y_ref, s.time_to_talk_end)


#: our metric name -> OmniSTEval 0.1.10's key in ``evaluate_instances(..., is_longform=True)``
OMNISTEVAL_KEYS = {"BLEU": "bleu", "chrF": "chrf"} | {
    name + suffix: prefix + cls.omnisteval_key
    for name, cls in LONGFORM_METRICS.items()
    for suffix, prefix in (("", ""), ("_CA", "ca_"))
}


def get_longform_metric(name: str, unit: str = "word") -> LongformMetric:
    """An instance of a registered metric (``NAME`` or ``NAME_CA``: the suffix is dropped here)."""
    return LONGFORM_METRICS.lookup(name.removesuffix("_CA"))(unit)


def per_sentence(name: str, sentences: Sequence[SentenceOutput], unit: str = "word") -> list[float | None]:
    """``NAME`` (or ``NAME_CA``: on ``elapsed``) of every sentence, None where skipped."""
    metric = get_longform_metric(name, unit)
    aware = name.endswith("_CA")
    return [metric.compute(s, aware) for s in sentences]


def sentence_stream_laal(s: SentenceOutput, computation_aware: bool = False, unit: str = "word") -> float | None:
    """LAAL of one resegmented sentence (None when it has no output)."""
    return StreamLAAL(unit).compute(s, computation_aware)


def sentence_long_yaal(s: SentenceOutput, computation_aware: bool = False, unit: str = "word") -> float | None:
    """LongYAAL of one resegmented sentence (None when skipped)."""
    return LongYAAL(unit).compute(s, computation_aware)


def stream_laal(
    sentences: Sequence[SentenceOutput], computation_aware: bool = False, unit: str = "word"
) -> float | None:
    """StreamLAAL: the mean LAAL over the resegmented sentences with output (None when none has any)."""
    return corpus_mean([sentence_stream_laal(s, computation_aware, unit) for s in sentences])


def long_yaal(
    sentences: Sequence[SentenceOutput], computation_aware: bool = False, unit: str = "word"
) -> float | None:
    """LongYAAL: the mean of :func:`long_yaal_of` over the sentences it does not skip."""
    return corpus_mean([sentence_long_yaal(s, computation_aware, unit) for s in sentences])
