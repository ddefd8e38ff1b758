"""Latency metrics on hand-worked instances that exercise every branch of each formula.

Each case is worked out by hand in the comments (|X| = source ms, |Y*| = reference length, r = |X|/|Y*|).
The same instances are checked against SimulEval's own scorers in test_scoring_vs_simuleval.py.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulst.errors import OptionError
from simulst.evaluation.latency import (
    DEFAULT_LATENCY_METRICS,
    LATENCY_METRICS,
    Timing,
    average_lagging,
    average_proportion,
    average_token_delay,
    compute_increments,
    corpus_latency,
    differentiable_average_lagging,
    end_offset,
    get_latency_metric,
    length_adaptive_average_lagging,
    reference_length,
    start_offset,
)

# (name, delays, |X|, |Y*|, expected {metric: value}); elapsed cases below.
CASES = [
    # An ordinary instance, τ = 3 < |Y| = 4. r = 2500/4 = 625.
    # AL = (1000 + (2000-625) + (3000-1250)) / 3 = 1375 (d_3 = 3000 ≥ |X| stops the sum).
    # LAAL: max(|Y|,|Y*|) = 4, same as AL. AP = 9000 / (2500·4) = 0.9.
    # DAL (r' = |X|/|Y| = 625): d' = 1000, 2000, 3000, max(3000, 3625) = 3625;
    #   (1000 + 1375 + 1750 + (3625-1875)) / 4 = 1468.75.
    # ATD: source chunks at 1000/2000/3000 ms, each cut into 300,300,300,100 ms tokens (ends 300..3000);
    #   output chunks {1}, {2}, {3,4}; pairs (t, s) = (1,1), (2,2), (3,3), (4,4):
    #   (1000-300) + (2000-600) + (3000-900) + (3000-1000) = 6200 → 1550.
    ("ordinary", [1000.0, 2000.0, 3000.0, 3000.0], 2500.0, 4,
     {"AL": 1375.0, "LAAL": 1375.0, "AP": 0.9, "DAL": 1468.75, "ATD": 1550.0,
      "StartOffset": 1000.0, "EndOffset": 500.0}),
    # d_1 > |X|: AL = LAAL = d_1 (the early return). AP = 7000/(3000·2). DAL (r' = 1500): 3500, max(3500, 5000)
    #   → (3500 + 3500)/2 = 3500. ATD: one source chunk of 3500 ms = 11 tokens of 300 + one of 200; output
    #   chunk {1,2}: s = 1, 2 → (3500-300 + 3500-600)/2 = 3050.
    ("starts after the source", [3500.0, 3500.0], 3000.0, 2,
     {"AL": 3500.0, "LAAL": 3500.0, "AP": 7000.0 / 6000.0, "DAL": 3500.0, "ATD": 3050.0,
      "StartOffset": 3500.0, "EndOffset": 500.0}),
    # d_1 = |X| exactly: the sum stops at τ = 1 and gives d_1 too.
    ("all words at the end", [3000.0, 3000.0, 3000.0], 3000.0, 3,
     # AP = 9000/(3000·3) = 1. DAL (r' = 1000): 3000, 4000, 5000 → (3000 + 3000 + 3000)/3 = 3000.
     # ATD: 10 source tokens of 300 ms, one output chunk: (3000-300 + 3000-600 + 3000-900)/3 = 2400.
     {"AL": 3000.0, "LAAL": 3000.0, "AP": 1.0, "DAL": 3000.0, "ATD": 2400.0,
      "StartOffset": 3000.0, "EndOffset": 0.0}),
    # Output longer than the reference (|Y| = 6 > |Y*| = 3): r = 1000 for AL, 500 for LAAL; τ = 5.
    # AL = (500 + 0 - 500 - 1000 - 1000)/5 = -400; LAAL = (500 + 500 + 500 + 500 + 1000)/5 = 600.
    # AP = 11000/(3000·3). DAL (r' = 500): d' = 500, 1000, 1500, 2000, 3000, 3500;
    #   minus 0, 500, ..., 2500 → (500·4 + 1000 + 1000)/6 = 4000/6.
    # ATD: source chunks 500 (300+200), 500 (300+200), 500, 500, 1000 (300·3+100); output chunks one per
    #   distinct delay ({1},{2},{3},{4},{5,6}). s(t) = t - max(0, Acc_y - Acc_x) = t (Acc_x ≥ Acc_y):
    #   ends of source tokens 1..6: 300, 500, 800, 1000, 1300, 1500;
    #   lags 200, 500, 700, 1000, 1700, 1500 → 5600/6.
    ("longer than the reference", [500.0, 1000.0, 1500.0, 2000.0, 3000.0, 3000.0], 3000.0, 3,
     {"AL": -400.0, "LAAL": 600.0, "AP": 11000.0 / 9000.0, "DAL": 4000.0 / 6.0, "ATD": 5600.0 / 6.0,
      "StartOffset": 500.0, "EndOffset": 0.0}),
    # A single word before the end: τ = |Y| = 1 without reaching |X|. AP = 1200/3000. DAL = 1200.
    # ATD: 4 source tokens of 300; the word pairs with token 1 (ends at 300): 900.
    ("single word", [1200.0], 3000.0, 1,
     {"AL": 1200.0, "LAAL": 1200.0, "AP": 0.4, "DAL": 1200.0, "ATD": 900.0,
      "StartOffset": 1200.0, "EndOffset": -1800.0}),
    # More output chunks than source tokens: output words at 0 ms (source chunk of 0 ms: no token) then 100 ms.
    # ATD: chunk 1 = {1,2} at 0 ms with no source token: s = min(t, 0) = 0 → lags 0, 0;
    #   chunk 2 = {3} at 100 ms (one 100 ms token): Acc_y = 2 > Acc_x = 0 → s = 3 - 2 = 1 → 100 - 100 = 0.
    # AL (r = 1000/3): 0, 0 - 333.3, 100 - 666.7 → τ = 3 (no d ≥ |X|): -900/3 = -300.
    ("output before any source", [0.0, 0.0, 100.0], 1000.0, 3,
     {"AL": -300.0, "LAAL": -300.0, "AP": 100.0 / 3000.0, "ATD": 0.0, "StartOffset": 0.0,
      "EndOffset": -900.0}),
]


@pytest.mark.parametrize(("label", "d", "x", "y_ref", "expected"), CASES, ids=[c[0] for c in CASES])
def test_hand_worked(label: str, d: list[float], x: float, y_ref: int, expected: dict[str, float]) -> None:
    t = Timing(tuple(d), (), x, y_ref)
    for name, value in expected.items():
        got = get_latency_metric(name).compute(t)
        assert got == pytest.approx(value, abs=1e-9), (label, name)


def test_formula_functions_match_registry() -> None:
    d, x, y = [1000.0, 2000.0, 3000.0, 3000.0], 2500.0, 4
    assert average_lagging(d, x, y) == pytest.approx(1375.0)
    assert length_adaptive_average_lagging(d, x, y) == pytest.approx(1375.0)
    assert average_proportion(d, x, y) == pytest.approx(0.9)
    assert differentiable_average_lagging(d, x) == pytest.approx(1468.75)
    assert average_token_delay(d) == pytest.approx(1550.0)
    assert start_offset(d) == 1000.0  # d_1
    assert end_offset(d, x) == 500.0  # d_|Y| - |X| = 3000 - 2500


def test_computation_aware_hand_worked() -> None:
    # delays as in "ordinary"; elapsed adds 100, 300, 500, 500 ms of compute.
    d = (1000.0, 2000.0, 3000.0, 3000.0)
    e = (1100.0, 2300.0, 3500.0, 3500.0)
    t = Timing(d, e, 2500.0, 4)
    # AL_CA on elapsed: 1100, 2300-625, 3500-1250 (≥ |X|, τ = 3) → 5025/3 = 1675.
    assert get_latency_metric("AL").compute(t, True) == pytest.approx(1675.0)
    assert get_latency_metric("StartOffset").compute(t, True) == 1100.0  # e_1
    assert get_latency_metric("EndOffset").compute(t, True) == 1000.0  # e_|Y| - |X| = 3500 - 2500
    # ATD_CA: compute increments 100, 200, 200, 0; output ends max(d_t, prev) + ct:
    #   1100, 2200, 3200, 3200 → lags 800, 1600, 2300, 2200 → 1725.
    assert compute_increments(d, e) == pytest.approx([100.0, 200.0, 200.0, 0.0])
    assert get_latency_metric("ATD").compute(t, True) == pytest.approx(1725.0)
    # All-zero elapsed means "not recorded": no compute time.
    assert compute_increments(d, (0.0,) * 4) == [0.0] * 4


def test_use_ref_len_false_uses_output_length() -> None:
    t = Timing((500.0, 1000.0, 1500.0, 2000.0, 3000.0, 3000.0), (), 3000.0, 3)
    # |Y*| := |Y| = 6 → r = 500 → same as LAAL of the "longer than the reference" case.
    assert get_latency_metric("AL", use_ref_len=False).compute(t) == pytest.approx(600.0)
    no_ref = Timing(t.delays, (), 3000.0, None)
    assert get_latency_metric("AL").compute(no_ref) == pytest.approx(600.0)


def test_reference_length_counts_like_simuleval() -> None:
    assert reference_length("a b c") == 3
    assert reference_length("a  b") == 3  # split(" "): a double space counts an empty word
    assert reference_length("") == 1
    assert reference_length(None) is None
    assert reference_length(" 你好 世界 ", "char") == 5  # strip(), inner space counted
    with pytest.raises(OptionError):
        reference_length("a", "spm")
    with pytest.raises(OptionError):
        reference_length("a", "syllable")


class _Pieces:
    def encode(self, text: str, out_type: object = str) -> list[str]:
        return ["▁" + w for w in text.split()] + ["."]


def test_reference_length_spm() -> None:
    assert reference_length("a b", "spm", _Pieces()) == 3


def test_corpus_mean_skips_empty_and_counts_it() -> None:
    timings = [
        Timing((1000.0, 2000.0, 3000.0, 3000.0), (), 2500.0, 4),
        Timing((), (), 1500.0, 1),
        Timing((1200.0,), (), 3000.0, 1),
    ]
    result = corpus_latency("AL", timings)
    assert result.score == pytest.approx((1375.0 + 1200.0) / 2)
    assert result.skipped == 1
    assert result.per_instance[1] is None
    # _CA with no elapsed anywhere: nothing applies.
    ca = corpus_latency("AL_CA", timings)
    assert ca.score is None and ca.skipped == 3


def test_registry() -> None:
    for name in DEFAULT_LATENCY_METRICS:
        assert name in LATENCY_METRICS
        cls = LATENCY_METRICS[name]
        assert cls.__doc__ and cls.name == name
    assert get_latency_metric("LAAL_CA").name == "LAAL"
    with pytest.raises(OptionError):
        get_latency_metric("XYZ")


def test_formula_docstrings_cite_a_source() -> None:
    for fn in (average_lagging, length_adaptive_average_lagging, average_proportion,
               differentiable_average_lagging, average_token_delay):
        doc = fn.__doc__ or ""
        assert "SimulEval" in doc and ("arXiv" in doc or "20" in doc), fn.__name__


delays_strategy = st.lists(st.floats(0, 20000, allow_nan=False), min_size=1, max_size=30).map(sorted)


@given(d=delays_strategy, x=st.floats(100, 20000), y_ref=st.integers(1, 40))
def test_laal_never_below_al_and_equal_when_not_overlong(d: list[float], x: float, y_ref: int) -> None:
    al = average_lagging(d, x, y_ref)
    laal = length_adaptive_average_lagging(d, x, y_ref)
    # LAAL divides |X| by max(|Y|, |Y*|) ≥ |Y*|: it subtracts less, so LAAL ≥ AL; equal when |Y| ≤ |Y*|.
    assert laal >= al - 1e-6 * max(1.0, abs(al))
    if len(d) <= y_ref:
        assert math.isclose(al, laal, rel_tol=1e-12, abs_tol=1e-9)


@given(d=delays_strategy, x=st.floats(100, 20000))
def test_dal_is_at_least_the_mean_delay_minus_oracle(d: list[float], x: float) -> None:
    # d'_i ≥ d_i, so DAL ≥ (1/|Y|) Σ (d_i − (i−1)|X|/|Y|); and DAL ≥ d_1 − ... is exercised by the cases above.
    n = len(d)
    lower = sum(di - i * x / n for i, di in enumerate(d)) / n
    assert differentiable_average_lagging(d, x) >= lower - 1e-6 * max(1.0, abs(lower))


@given(d=delays_strategy)
def test_atd_is_finite_and_zero_compute_equals_cu(d: list[float]) -> None:
    cu = average_token_delay(d)
    assert math.isfinite(cu)
    assert average_token_delay(d, [0.0] * len(d)) == cu


def test_spm_model_must_exist() -> None:
    from simulst.evaluation.scoring import load_spm

    with pytest.raises(OptionError, match="SentencePiece"):
        load_spm("/nonexistent/model.spm")
