"""Latency metrics of simultaneous translation, in a registry keyed by SimulEval's metric names.

Notation (per instance): source X of duration |X| ms; output units y_1..y_|Y| (words, characters or SentencePiece
pieces, see :data:`LATENCY_UNITS`) with delays d_1..d_|Y| (ms of source read when y_i was written; for the
computation-aware ``_CA`` variants, d_i is the ``elapsed`` time instead: source read + compute time spent on
this instance so far); |Y*| the reference length in the same unit.

Every formula here reproduces SimulEval 1.1.4 (``simuleval/evaluator/scorers/latency_scorer.py``) on the same
``instances.log`` to floating-point precision, including its conventions:

* |Y*| is the reference length when the instance has a reference (``use_ref_len``), else |Y|;
  the word length of a reference is ``len(reference.split(" "))`` (so a double space counts one more word, and
  the empty reference counts 1), its char length ``len(reference.strip())``, its spm length the number of pieces.
* Corpus scores are the mean of the per-instance scores over the instances that produced output; instances
  with an empty output are skipped (SimulEval does so silently; :func:`corpus_latency` returns how many).
* The latency unit changes only |Y*|: the delays in a log are already one per unit.

A metric is registered under its SimulEval name (:func:`register_formula` on a formula function, or
:func:`register_latency_metric` on a :class:`LatencyMetric` class); ``NAME_CA`` is the same metric on ``elapsed``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar, cast

from simulst.config.registry import Registry
from simulst.errors import OptionError

LATENCY_UNITS = ("word", "char", "spm")
DEFAULT_LATENCY_METRICS = ("AL", "LAAL", "AP", "DAL", "ATD", "StartOffset", "EndOffset")

# ATD (Kano et al. 2023) for speech input: the source is cut into virtual "tokens" of 300 ms; a text output
# token has no duration (SimulEval's SRC_TOKEN_LEN / TGT_TOKEN_LEN for speech-to-text).
ATD_SOURCE_TOKEN_MS = 300.0
ATD_TARGET_TOKEN_MS = 0.0


class PieceEncoder(Protocol):
    """The part of a SentencePiece processor the spm latency unit needs."""

    def encode(self, text: str, out_type: Any = ...) -> Any:
        """Pieces of a text (``out_type=str``)."""
        ...


def reference_length(reference: str | None, unit: str = "word", spm: PieceEncoder | None = None) -> int | None:
    """|Y*| of a reference in a latency unit, as SimulEval counts it (None when there is no reference).

    word: ``len(reference.split(" "))``; char: ``len(reference.strip())``; spm: number of pieces.
    """
    if reference is None:
        return None
    if unit == "word":
        return len(reference.split(" "))
    if unit == "char":
        return len(reference.strip())
    if unit == "spm":
        if spm is None:
            raise OptionError("the spm latency unit needs a SentencePiece model (--eval-latency-spm-model)")
        return len(spm.encode(reference, out_type=str))
    raise OptionError(f"unknown latency unit {unit!r}; choose one of {', '.join(LATENCY_UNITS)}")


# --------------------------------------------------------------------------------------------------------------
# The registry


@dataclass(frozen=True)
class Timing:
    """What a latency metric sees of one instance.

    Attributes:
        delays: d_i per output unit, ms of source read (computation-unaware).
        elapsed: per output unit, source read + compute spent (computation-aware); empty when not recorded.
        source_length: |X| in ms.
        reference_length: |Y*| in latency units, or None when the instance has no reference.
    """

    delays: tuple[float, ...]
    elapsed: tuple[float, ...]
    source_length: float
    reference_length: int | None


class LatencyMetric(ABC):
    """A per-instance latency metric; the corpus score is the mean over instances with output."""

    name: ClassVar[str]

    def __init__(self, use_ref_len: bool = True) -> None:
        self.use_ref_len = use_ref_len

    def timestamps(self, t: Timing, computation_aware: bool) -> tuple[float, ...]:
        """The sequence the metric reads: ``delays``, or ``elapsed`` when computation-aware."""
        return t.elapsed if computation_aware else t.delays

    def applies(self, t: Timing, computation_aware: bool) -> bool:
        """False for an instance SimulEval skips (no output, or no ``elapsed`` when computation-aware)."""
        return len(self.timestamps(t, computation_aware)) > 0

    def target_length(self, t: Timing, d: Sequence[float]) -> int:
        """|Y*| when there is a reference and ``use_ref_len``, else |Y| (SimulEval's ``get_delays_lengths``)."""
        if not self.use_ref_len or t.reference_length is None:
            return len(d)
        return t.reference_length

    @abstractmethod
    def compute(self, t: Timing, computation_aware: bool = False) -> float:
        """The metric on one instance (call only when :meth:`applies`)."""


#: The short-form latency metrics by SimulEval name, in registration order (the CLI's choices).
LATENCY_METRICS: Registry[type[LatencyMetric]] = Registry("latency metric")


def register_latency_metric(name: str) -> Callable[[type[LatencyMetric]], type[LatencyMetric]]:
    """Class decorator adding a metric to :data:`LATENCY_METRICS` under a SimulEval name."""

    def register(cls: type[LatencyMetric]) -> type[LatencyMetric]:
        cls.name = name
        return LATENCY_METRICS.register(name)(cls)

    return register


class FormulaMetric(LatencyMetric):
    """A metric that is one formula of the instance's timestamps; its subclasses say what else it reads."""

    formula: Callable[..., float]


class LengthMetric(FormulaMetric):
    """A formula of the delays, the source length |X| and the target length |Y*| (AL, LAAL, AP)."""

    def compute(self, t: Timing, computation_aware: bool = False) -> float:
        d = self.timestamps(t, computation_aware)
        return self.formula(d, t.source_length, self.target_length(t, d))


class SourceMetric(FormulaMetric):
    """A formula of the delays and the source length |X| (DAL, EndOffset, RTF)."""

    def compute(self, t: Timing, computation_aware: bool = False) -> float:
        return self.formula(self.timestamps(t, computation_aware), t.source_length)


class DelayMetric(FormulaMetric):
    """A formula of the delays alone (StartOffset, NumChunks)."""

    def compute(self, t: Timing, computation_aware: bool = False) -> float:
        return self.formula(self.timestamps(t, computation_aware))


F = TypeVar("F", bound=Callable[..., float])


def register_formula(name: str, kind: type[FormulaMetric]) -> Callable[[F], F]:
    """Function decorator registering a formula as the latency metric ``name``: a ``kind`` metric (what the
    formula reads after the delays: :class:`LengthMetric` |X| and |Y*|, :class:`SourceMetric` |X|,
    :class:`DelayMetric` nothing) whose docstring is the formula's."""

    def add(formula: F) -> F:
        attrs = {"formula": staticmethod(formula), "__doc__": formula.__doc__, "__module__": __name__}
        register_latency_metric(name)(cast(type[LatencyMetric], type(name, (kind,), attrs)))
        return formula

    return add


# --------------------------------------------------------------------------------------------------------------
# The metrics in SimulEval's order, each a formula on plain sequences (one instance) registered under its
# SimulEval name. d: delays (or elapsed), x: |X| in ms, y_ref: |Y*|.


@register_formula("AL", LengthMetric)
def average_lagging(d: Sequence[float], x: float, y_ref: float) -> float:
    r"""Average Lagging (Ma et al. 2019, STACL, arXiv:1810.08398; SimulEval ``ALScorer``).

    AL = (1/τ) Σ_{i=1..τ} (d_i − (i−1)·|X|/|Y*|), with τ = the first i such that d_i ≥ |X| (τ = |Y| when no
    delay reaches |X|). When d_1 > |X| (an output that starts after the source ended), AL = d_1; at d_1 = |X|
    the sum gives the same value.
    """
    return _lagging(d, x, y_ref)


def _lagging(d: Sequence[float], x: float, y: float) -> float:
    """(1/τ) Σ_{i=1..τ} (d_i − (i−1)·|X|/y), τ the first i with d_i ≥ |X| (|Y| when none); d_1 when d_1 > |X|."""
    if d[0] > x:
        return d[0]
    gamma = y / x  # SimulEval divides by the rate y/|X| rather than multiply by |X|/y
    total = 0.0
    tau = 0
    for i_minus_1, di in enumerate(d):
        total += di - i_minus_1 / gamma
        tau = i_minus_1 + 1
        if di >= x:
            break
    return total / tau


@register_formula("LAAL", LengthMetric)
def length_adaptive_average_lagging(d: Sequence[float], x: float, y_ref: float) -> float:
    r"""Length-Adaptive Average Lagging (Polák et al. 2022, CUNI-KIT IWSLT 2022, eq. 6; Papi et al. 2022,
    arXiv:2206.05807; SimulEval ``LAALScorer``).

    LAAL = (1/τ) Σ_{i=1..τ} (d_i − (i−1)·|X|/max(|Y|, |Y*|)), τ as in AL; LAAL = d_1 when d_1 > |X|.
    An over-long output (|Y| > |Y*|) no longer makes the oracle run faster than the source, so it cannot
    earn a negative lag.
    """
    return _lagging(d, x, max(len(d), y_ref))


@register_formula("AP", LengthMetric)
def average_proportion(d: Sequence[float], x: float, y_ref: float) -> float:
    r"""Average Proportion (Cho & Esipova 2016, arXiv:1606.02012; SimulEval ``APScorer``).

    AP = Σ_{i=1..|Y|} d_i / (|X|·|Y*|)  (SimulEval divides by the reference length |Y*|, not |Y|).
    """
    return math.fsum(d) / (x * y_ref)


@register_formula("DAL", SourceMetric)
def differentiable_average_lagging(d: Sequence[float], x: float) -> float:
    r"""Differentiable Average Lagging (Arivazhagan et al. 2019, MILk, arXiv:1906.05218; SimulEval
    ``DALScorer``).

    d'_1 = d_1, d'_i = max(d_i, d'_{i−1} + |X|/|Y|); DAL = (1/|Y|) Σ_{i=1..|Y|} (d'_i − (i−1)·|X|/|Y|).
    SimulEval uses the output length |Y| here, not |Y*|, and sums over all outputs (no τ cut-off).
    """
    n = len(d)
    gamma = n / x
    total = 0.0
    prev = 0.0
    for i_minus_1, di in enumerate(d):
        g = di if i_minus_1 == 0 else max(di, prev + 1 / gamma)
        total += g - i_minus_1 / gamma
        prev = g
    return total / n


def average_token_delay(
    delays: Sequence[float],
    compute_times: Sequence[float] | None = None,
    source_token_ms: float = ATD_SOURCE_TOKEN_MS,
    target_token_ms: float = ATD_TARGET_TOKEN_MS,
) -> float:
    r"""Average Token Delay (Kano et al. 2023, arXiv:2211.13173; SimulEval ``ATDScorer``, speech → text).

    The source read up to the last output is cut into chunks at the distinct delays, and every chunk into
    virtual source tokens of ``source_token_ms`` (the remainder is a shorter last token); output tokens are
    grouped into chunks of equal consecutive delay. Each output token t, in chunk c, is paired with source
    token s(t) = min(t − max(0, Acc_y(c) − Acc_x(c)), Acc_x(c+1)), where Acc_y(c)/Acc_x(c) count the output /
    source tokens of the chunks before c. Output token t ends at T_y(t) = max(d_t, T_y(t−1)) + len_y + ct_t,
    where ct_t is the compute time spent on it (0 when computation-unaware; with ``elapsed``:
    ct_t = (e_t − d_t) − (e_{t−1} − d_{t−1})), and source token s ends at T_x(s) (its cumulative length).
    ATD = (1/|Y|) Σ_t (T_y(t) − T_x(s(t))).

    Args:
        delays: d_1..d_|Y| (always the computation-unaware delays: they define the chunks).
        compute_times: ct_1..ct_|Y|, or None for zeros.
    """
    ct = list(compute_times) if compute_times is not None else [0.0] * len(delays)
    tgt_chunk_sizes, tgt_token_chunk = _target_chunks(delays)
    src_chunk_sizes, src_token_end = _source_tokens(delays, source_token_ms)
    tgt_token_end: list[float] = [0.0]
    for di, ci in zip(delays, ct, strict=False):
        start = max(di, tgt_token_end[-1])
        tgt_token_end.append(start + target_token_ms + ci)

    lags = []
    for t in range(1, len(tgt_token_chunk)):
        c = tgt_token_chunk[t]
        acc_x = sum(src_chunk_sizes[:c])
        acc_y = sum(tgt_chunk_sizes[:c])
        s = t - max(0, acc_y - acc_x)
        current_src = sum(src_chunk_sizes[: c + 1])
        s = min(s, current_src)
        lags.append(tgt_token_end[t] - src_token_end[s])
    return math.fsum(lags) / len(lags)


def _target_chunks(delays: Sequence[float]) -> tuple[list[int], list[int]]:
    """ATD's target chunks, runs of equal consecutive delays: the chunk sizes and each output token's chunk.

    Both lists start with a placeholder (chunk 0 of size 0, token 0 in chunk 0), so that chunks and tokens are
    numbered from 1 as in the paper.
    """
    sizes: list[int] = [0]
    prev: float | None = None
    for di in delays:
        if di != prev:
            sizes.append(1)
        else:
            sizes[-1] += 1
        prev = di
    token_chunk: list[int] = [0]
    for c, size in enumerate(sizes[1:], 1):
        token_chunk += [c] * size
    return sizes, token_chunk


def _source_tokens(delays: Sequence[float], source_token_ms: float) -> tuple[list[int], list[float]]:
    """ATD's source chunks, the audio between the distinct delays (in order of first appearance), each cut into
    virtual tokens of ``source_token_ms`` (the remainder a shorter last one): the number of tokens per chunk and
    every token's end time T_x(s), each list after a placeholder 0 (numbering from 1)."""
    distinct = list(dict.fromkeys(delays))
    sizes: list[int] = [0]
    token_end: list[float] = [0.0]
    for cur, before in zip(distinct, [0.0, *distinct[:-1]], strict=True):
        whole, rest = divmod(cur - before, source_token_ms)
        lens = int(whole) * [source_token_ms] + ([rest] if rest != 0 else [])
        sizes.append(len(lens))
        for length in lens:
            token_end.append(token_end[-1] + length)
    return sizes, token_end


def compute_increments(delays: Sequence[float], elapsed: Sequence[float]) -> list[float]:
    """Compute time spent on each output unit: ct_t = (e_t − d_t) − (e_{t−1} − d_{t−1}), e_0 − d_0 = 0.

    SimulEval's ATD_CA convention; an all-zero ``elapsed`` means "no compute information" (zeros).
    """
    if all(e == 0 for e in elapsed):
        return [0.0] * len(elapsed)
    spent = [e - d for e, d in zip(elapsed, delays, strict=False)]
    return [s - p for s, p in zip(spent, [0.0, *spent[:-1]], strict=True)]


@register_latency_metric("ATD")
class ATD(LatencyMetric):
    """Average Token Delay; see :func:`average_token_delay`. Computation-aware, it reads ``delays`` for the
    chunks and the increments of ``elapsed − delays`` as per-token compute time (SimulEval ``ATDScorer``)."""

    def applies(self, t: Timing, computation_aware: bool = False) -> bool:
        return len(t.delays) > 0 and (not computation_aware or len(t.elapsed) > 0)

    def compute(self, t: Timing, computation_aware: bool = False) -> float:
        ct = compute_increments(t.delays, t.elapsed) if computation_aware else None
        return average_token_delay(t.delays, ct)


@register_formula("StartOffset", DelayMetric)
def start_offset(d: Sequence[float]) -> float:
    """StartOffset (SimulEval ``StartOffsetScorer``): d_1, the time of the first output unit."""
    return d[0]


@register_formula("EndOffset", SourceMetric)
def end_offset(d: Sequence[float], x: float) -> float:
    """EndOffset (SimulEval ``EndOffsetScorer``, text output): d_|Y| − |X|, how long after the source ended the
    last output unit came."""
    return d[-1] - x


@register_formula("NumChunks", DelayMetric)
def output_length(d: Sequence[float]) -> float:
    """SimulEval's ``NumChunks``: |Y|, the number of output units of the instance (its name notwithstanding)."""
    return float(len(d))


@register_formula("RTF", SourceMetric)
def end_ratio(d: Sequence[float], x: float) -> float:
    """SimulEval's ``RTF`` scorer: d_|Y| / |X| (with ``elapsed``: end of output relative to the source length).

    Not the compute real-time factor (see ``ComputeRTF`` in :mod:`simulst.evaluation.scoring`).
    """
    return d[-1] / x


def get_latency_metric(name: str, use_ref_len: bool = True) -> LatencyMetric:
    """An instance of a registered metric (``NAME`` or ``NAME_CA``: the suffix is dropped here)."""
    return LATENCY_METRICS.lookup(name.removesuffix("_CA"))(use_ref_len=use_ref_len)


@dataclass(frozen=True)
class CorpusLatency:
    """A latency metric over a test set.

    Attributes:
        name: ``NAME`` or ``NAME_CA``.
        score: mean of ``per_instance`` over the instances it applies to; None when it applies to none.
        per_instance: the score of each instance, None where skipped.
        skipped: how many instances were skipped (empty output, or no ``elapsed`` for ``_CA``).
    """

    name: str
    score: float | None
    per_instance: tuple[float | None, ...]
    skipped: int


def corpus_latency(name: str, timings: Sequence[Timing], use_ref_len: bool = True) -> CorpusLatency:
    """Score ``name`` (``NAME`` or ``NAME_CA``) over a test set, as SimulEval averages it."""
    metric = get_latency_metric(name, use_ref_len)
    ca = name.endswith("_CA")
    per = [metric.compute(t, ca) if metric.applies(t, ca) else None for t in timings]
    return CorpusLatency(name, corpus_mean(per), tuple(per), sum(1 for v in per if v is None))


def corpus_mean(per_instance: Sequence[float | None]) -> float | None:
    """A latency metric's corpus score: the mean of the per-instance scores that are not None (skipped), or None
    when every instance was skipped (``math.fsum``, as SimulEval's mean to floating-point precision)."""
    values = [v for v in per_instance if v is not None]
    return math.fsum(values) / len(values) if values else None
