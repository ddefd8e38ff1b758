"""The paired bootstrap: hand-worked toy cases, its invariants, and BLEU / chrF statistics equal to sacreBLEU's."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulst.errors import OptionError
from simulst.evaluation.bootstrap import cluster_sums, paired_bootstrap, utterance_statistics
from simulst.evaluation.quality import bleu, chrf, wer, whisper_normalize

REFS = ["a b", "c d"]


def test_two_utterances_by_hand() -> None:
    # A is perfect; B misses one of utterance 0's two words. The four equally likely ordered draws of two indices:
    # (0, 0): B's WER 2/4 = 50, (0, 1) and (1, 0): 1/4 = 25, (1, 1): 0 -> B - A is 50, 25, 25 or 0.
    # The 2.5th and 97.5th percentiles of that distribution are 0 and 50; on the whole set B - A = 25.
    interval = paired_bootstrap("WER", ["a b", "c d"], ["a x", "c d"], REFS, samples=2000)
    assert (interval.a, interval.b, interval.delta) == (0.0, 25.0, 25.0)
    assert (interval.low, interval.high) == (0.0, 50.0)
    assert not interval.excludes_zero and not interval.b_better
    assert interval.describe(1) == "+25.0 [+0.0, +50.0]"


def test_copies_of_one_sentence_are_drawn_together_in_a_cluster_bootstrap() -> None:
    # Three copies each of "a b" and "c d"; B misses one word of every "a b" copy (B - A = 3/12 = 25).
    # As 6 independent utterances, k error copies drawn give 100 k/12: P(k = 0) = P(k = 6) = 1/64 < 2.5 % and
    # P(k <= 1) = P(k >= 5) = 7/64 > 2.5 %, so the interval is [100/12, 500/12] and "excludes zero".
    # As 2 clusters (the copies drawn together) it is the two-utterance case by hand above: [0, 50].
    refs = ["a b", "c d"] * 3
    hyp_a, hyp_b = refs, ["a x", "c d"] * 3
    alone = paired_bootstrap("WER", hyp_a, hyp_b, refs, samples=2000)
    assert alone.n == 6 and alone.excludes_zero
    assert (alone.low, alone.high) == pytest.approx((100 / 12, 500 / 12))
    together = paired_bootstrap("WER", hyp_a, hyp_b, refs, samples=2000, clusters=refs)
    assert together.n == 2 and together.delta == alone.delta == 25.0
    assert (together.low, together.high) == (0.0, 50.0) and not together.excludes_zero
    assert cluster_sums(np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), ["y", "x", "y"]).tolist() == [[6.0, 8.0],
                                                                                                      [3.0, 4.0]]
    with pytest.raises(OptionError):
        cluster_sums(np.zeros((2, 2)), ["one"])


def test_worse_on_every_utterance_excludes_zero() -> None:
    # B misses one word of each utterance: every draw has B - A = 2/4 = 50 exactly
    interval = paired_bootstrap("WER", ["a b", "c d"], ["a x", "c x"], REFS, samples=100)
    assert (interval.low, interval.high, interval.delta) == (50.0, 50.0, 50.0)
    assert interval.excludes_zero and not interval.b_better
    better = paired_bootstrap("WER", ["a x", "c x"], ["a b", "c d"], REFS, samples=100)
    assert better.b_better and (better.low, better.high) == (-50.0, -50.0)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=8), st.integers(0, 2**31))
def test_swapping_a_and_b_negates_the_interval(errors: list[tuple[int, int]], seed: int) -> None:
    refs = ["w x y z"] * len(errors)
    hyp_a = [" ".join(["q"] * ea + ["w", "x", "y", "z"][ea:]) for ea, _ in errors]
    hyp_b = [" ".join(["q"] * eb + ["w", "x", "y", "z"][eb:]) for _, eb in errors]
    ab = paired_bootstrap("WER", hyp_a, hyp_b, refs, samples=200, seed=seed)
    ba = paired_bootstrap("WER", hyp_b, hyp_a, refs, samples=200, seed=seed)
    assert ab.delta == pytest.approx(-ba.delta)
    assert (ab.low, ab.high) == pytest.approx((-ba.high, -ba.low))
    assert ab.low <= ab.high
    assert ab.delta == pytest.approx(wer(hyp_b, refs) - wer(hyp_a, refs))


def test_corpus_scores_from_statistics_equal_sacrebleu() -> None:
    hyps = ["The cat sat on the mat.", "A dog barked loudly at night", "Hello there"]
    refs = ["The cat sat on a mat.", "A dog barked at night.", "Hello, there!"]
    for metric, corpus in (("BLEU", bleu), ("chrF", chrf)):
        stats, score = utterance_statistics(metric, hyps, refs)
        assert stats.shape[0] == 3
        assert score(stats.sum(axis=0)) == pytest.approx(corpus(hyps, refs))
    stats, score = utterance_statistics("WER_whisper", hyps, refs)
    assert score(stats.sum(axis=0)) == pytest.approx(wer(hyps, refs, whisper_normalize))


def test_identical_systems_give_a_zero_interval() -> None:
    hyps = ["one two three", "four five", "six"]
    interval = paired_bootstrap("BLEU", hyps, hyps, ["one two three", "four six", "six seven"], samples=50)
    assert (interval.delta, interval.low, interval.high) == (0.0, 0.0, 0.0)
    assert not interval.excludes_zero


def test_bad_input_is_refused() -> None:
    with pytest.raises(OptionError, match="not a paired test"):
        paired_bootstrap("WER", ["a"], ["a", "b"], ["a"])
    with pytest.raises(OptionError, match="unknown metric 'METEOR'"):
        paired_bootstrap("METEOR", ["a"], ["a"], ["a"])
    with pytest.raises(OptionError, match="at least one utterance"):
        paired_bootstrap("WER", [], [], [])
    with pytest.raises(OptionError, match="at least 10 samples"):
        paired_bootstrap("WER", ["a"], ["a"], ["a"], samples=5)
    with pytest.raises(OptionError, match="confidence"):
        paired_bootstrap("WER", ["a"], ["a"], ["a"], confidence=1.0)


def test_the_draws_depend_on_the_seed_only() -> None:
    rng = np.random.default_rng(0)
    refs = [" ".join(rng.choice(list("abcdef"), 6)) for _ in range(20)]
    hyp_a = [r if i % 3 else "a b" for i, r in enumerate(refs)]
    hyp_b = [r if i % 4 else "a b" for i, r in enumerate(refs)]
    first = paired_bootstrap("WER", hyp_a, hyp_b, refs, seed=7)
    assert first == paired_bootstrap("WER", hyp_a, hyp_b, refs, seed=7)
