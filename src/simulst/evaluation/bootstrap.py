"""Paired bootstrap resampling (Koehn 2004): is configuration B better than A on this test set, or is it noise?

Both configurations decode the same N utterances. Each resample draws N utterance indices with replacement and
scores A and B on the *same* draw; the difference B − A over ``samples`` resamples gives a percentile interval
(95 % by default). A difference whose interval excludes zero is one the test set can tell apart; one whose
interval holds zero is not a result, whatever its point value.

Corpus metrics are not means of per-utterance scores (WER is Σ errors / Σ reference words, BLEU combines n-gram
counts), so each utterance contributes *sufficient statistics* (:func:`utterance_statistics`), the resample sums
them, and the metric is computed from the sums - the way sacreBLEU's own significance tests resample BLEU.

Utterances that are not independent draws - copies of one sentence in a talk that repeats it - are drawn together
(``clusters``: a cluster bootstrap): their statistics are summed per cluster and the resample draws clusters, so
an error repeated in every copy counts as one draw, not as many.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np
from sacrebleu.metrics import BLEU, CHRF

from simulst.errors import OptionError
from simulst.evaluation.quality import DEFAULT_SACREBLEU_TOKENIZER, normalize_for_wer, whisper_normalize
from simulst.sequences import edit_distance

#: Corpus score from summed statistics (one row of :func:`utterance_statistics` per utterance, summed).
ScoreFromStats = Callable[[np.ndarray], float]

BOOTSTRAP_METRICS = ("WER", "WER_norm", "WER_whisper", "BLEU", "chrF")
LOWER_IS_BETTER = frozenset({"WER", "WER_norm", "WER_whisper"})
_WER_NORMALIZERS: dict[str, Callable[[str], str] | None] = {
    "WER": None, "WER_norm": normalize_for_wer, "WER_whisper": whisper_normalize}


@dataclass(frozen=True)
class PairedInterval:
    """B − A on a metric, with its paired-bootstrap percentile interval.

    Attributes:
        metric: the metric's name.
        a, b: the corpus scores of A and B on the whole test set.
        delta: b − a.
        low, high: the interval's bounds of b − a.
        confidence: the interval's coverage (0.95: the 2.5th and 97.5th percentiles).
        samples: resamples drawn.
        n: the units each resample draws: utterances, or clusters of them.
    """

    metric: str
    a: float
    b: float
    delta: float
    low: float
    high: float
    confidence: float
    samples: int
    n: int

    @property
    def excludes_zero(self) -> bool:
        """True when the interval lies wholly on one side of zero: the test set tells A and B apart."""
        return self.low > 0.0 or self.high < 0.0

    @property
    def b_better(self) -> bool:
        """True when B is better than A beyond the interval (lower WER, higher BLEU / chrF)."""
        if self.metric in LOWER_IS_BETTER:
            return self.high < 0.0
        return self.low > 0.0

    def describe(self, digits: int = 2) -> str:
        """``-1.23 [-2.01, -0.40]``: the difference and its interval."""
        return f"{self.delta:+.{digits}f} [{self.low:+.{digits}f}, {self.high:+.{digits}f}]"


def utterance_statistics(
    metric: str, hypotheses: Sequence[str], references: Sequence[str],
    sacrebleu_tokenizer: str = DEFAULT_SACREBLEU_TOKENIZER,
) -> tuple[np.ndarray, ScoreFromStats]:
    """Per-utterance sufficient statistics of a corpus metric, an (N, K) array, and the score of their column sums.

    WER (raw, ``_norm`` or ``_whisper`` normalised): (word edit distance, reference words); BLEU and chrF:
    sacreBLEU's own sentence statistics (n-gram matches and totals, lengths).
    """
    if len(hypotheses) != len(references):
        raise OptionError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    if metric in _WER_NORMALIZERS:
        normalize = _WER_NORMALIZERS[metric]
        rows = []
        for hyp, ref in zip(hypotheses, references, strict=True):
            if normalize is not None:
                hyp, ref = normalize(hyp), normalize(ref)
            rows.append((edit_distance(hyp.split(), ref.split()), len(ref.split())))
        return np.array(rows, dtype=np.float64).reshape(-1, 2), _wer_from_stats
    if metric == "BLEU":
        scorer: BLEU | CHRF = BLEU(tokenize=sacrebleu_tokenizer)
    elif metric == "chrF":
        scorer = CHRF()
    else:
        raise OptionError(f"unknown metric {metric!r}; choose from {', '.join(BOOTSTRAP_METRICS)}")
    stats = np.array(scorer._extract_corpus_statistics(list(hypotheses), [list(references)]), dtype=np.float64)

    def score(summed: np.ndarray) -> float:
        return float(scorer._compute_score_from_stats([round(x) for x in summed]).score)

    return stats, score


def cluster_sums(stats: np.ndarray, clusters: Sequence[Hashable]) -> np.ndarray:
    """Per-utterance statistics (N, K) summed per cluster label, in the order the labels first occur: (C, K).

    Raises:
        OptionError: not one label per utterance.
    """
    if len(clusters) != stats.shape[0]:
        raise OptionError(f"{len(clusters)} cluster labels for {stats.shape[0]} utterances")
    index: dict[Hashable, int] = {}
    rows = [index.setdefault(label, len(index)) for label in clusters]
    summed = np.zeros((len(index), stats.shape[1]), dtype=np.float64)
    np.add.at(summed, rows, stats)
    return summed


def _wer_from_stats(summed: np.ndarray) -> float:
    return 0.0 if summed[1] == 0 else 100.0 * float(summed[0]) / float(summed[1])


def paired_bootstrap(
    metric: str, hypotheses_a: Sequence[str], hypotheses_b: Sequence[str], references: Sequence[str],
    samples: int = 1000, confidence: float = 0.95, seed: int = 12345,
    sacrebleu_tokenizer: str = DEFAULT_SACREBLEU_TOKENIZER, clusters: Sequence[Hashable] | None = None,
) -> PairedInterval:
    """The paired bootstrap interval of metric(B) − metric(A) over the utterances (same draws for A and B);
    ``clusters``: a label per utterance, the utterances of one label drawn together (None: each on its own).

    Raises:
        OptionError: unequal lengths, an empty test set, fewer than 10 samples, a confidence outside (0, 1), or
            an unknown metric.
    """
    if len(hypotheses_a) != len(hypotheses_b):
        raise OptionError(f"A has {len(hypotheses_a)} hypotheses and B {len(hypotheses_b)}: not a paired test")
    if not references:
        raise OptionError("the bootstrap needs at least one utterance")
    if samples < 10:
        raise OptionError(f"the bootstrap needs at least 10 samples, got {samples}")
    if not 0.0 < confidence < 1.0:
        raise OptionError(f"the confidence is in (0, 1), got {confidence}")
    stats_a, score = utterance_statistics(metric, hypotheses_a, references, sacrebleu_tokenizer)
    stats_b, _ = utterance_statistics(metric, hypotheses_b, references, sacrebleu_tokenizer)
    return bootstrap_from_stats(metric, stats_a, stats_b, score, samples, confidence, seed, clusters)


def bootstrap_from_stats(
    metric: str, stats_a: np.ndarray, stats_b: np.ndarray, score: ScoreFromStats,
    samples: int = 1000, confidence: float = 0.95, seed: int = 12345, clusters: Sequence[Hashable] | None = None,
) -> PairedInterval:
    """:func:`paired_bootstrap` on precomputed per-utterance statistics (N, K) of A and B."""
    if stats_b.shape != stats_a.shape:
        raise OptionError(f"statistics of shapes {stats_a.shape} and {stats_b.shape}: not a paired test")
    if clusters is not None:
        stats_a, stats_b = cluster_sums(stats_a, clusters), cluster_sums(stats_b, clusters)
    n = stats_a.shape[0]
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(samples, n))
    counts = np.stack([np.bincount(row, minlength=n) for row in draws]).astype(np.float64)  # (samples, N)
    sums_a, sums_b = counts @ stats_a, counts @ stats_b
    deltas = np.array([score(b) - score(a) for a, b in zip(sums_a, sums_b, strict=True)])
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(deltas, [tail, 100.0 - tail])
    a, b = score(stats_a.sum(axis=0)), score(stats_b.sum(axis=0))
    return PairedInterval(metric, a, b, b - a, float(low), float(high), confidence, samples, n)
