"""Tests of the two implementations of the CTC prefix recursions against brute-force enumeration of alignments.

* :class:`~simulst.scorers.ctc_forward.PrefixForward` — one growing label sequence (the single-prefix API, used by
  the CTC online policy's end test): ``log_end``, ``log_next``, ``log_continue_any``, ``psi``, ``gn``/``gb``.
* :class:`~simulst.scorers.ctc_prefix.CtcPrefixScorer` — the batched scorer of joint CTC/attention search:
  ``init_state``, ``score``, ``select``.

Both are checked against the brute force and against each other (their agreement on longer inputs, where brute
force is impossible, is also in tests/test_ctc_policy.py).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from simulst.scorers.ctc_forward import PrefixForward, log_odds
from simulst.scorers.ctc_prefix import CtcPrefixBatch, CtcPrefixScorer

NEG_INF = float("-inf")
TOL = 1e-9


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    m = logits.max(axis=-1, keepdims=True)
    z = logits - m
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _posteriors(seed: int, t: int, v: int, scale: float = 2.0) -> np.ndarray:
    """(T, V) float64 CTC log-posteriors: log-softmax of random logits."""
    rng = np.random.default_rng(seed)
    return _log_softmax(rng.normal(size=(t, v)) * scale)


# ---------------------------------------------------------------------------------------------------------
# brute force: enumerate every alignment path of length T over V symbols


@functools.cache
def _path_groups(v: int, t: int, blank: int) -> tuple[np.ndarray, dict, dict]:
    """All V^T paths, grouped by collapsed labelling (exact) and by every prefix of it (starts-with)."""
    paths = np.array(list(itertools.product(range(v), repeat=t)), dtype=np.int64).reshape(v**t, t)
    exact: dict[tuple[int, ...], list[int]] = defaultdict(list)
    starts: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for i, path in enumerate(paths.tolist()):
        collapsed = [k for j, k in enumerate(path) if j == 0 or k != path[j - 1]]
        labelling = tuple(k for k in collapsed if k != blank)
        exact[labelling].append(i)
        for n in range(len(labelling) + 1):
            starts[labelling[:n]].append(i)
    as_arrays = lambda d: {k: np.array(ix) for k, ix in d.items()}  # noqa: E731
    return paths, as_arrays(exact), as_arrays(starts)


def _brute(x: np.ndarray, prefix: tuple[int, ...], blank: int) -> tuple[np.ndarray, float, float]:
    """(ext (V,), end, pre) by summing path probabilities (probability space, float64), returned as logs:
    ext[c] = log p(g⊕c…) (−inf for the blank), end = log p(g), pre = log p(g…)."""
    t, v = x.shape
    paths, exact, starts = _path_groups(v, t, blank)
    probs = np.exp(x[np.arange(t)[None, :], paths].sum(axis=1)) if t else np.ones(1)

    def log_sum(ix: np.ndarray | None) -> float:
        total = probs[ix].sum() if ix is not None else 0.0
        return math.log(total) if total > 0 else NEG_INF

    end = log_sum(exact.get(prefix))
    ext = np.array([NEG_INF if c == blank else log_sum(starts.get((*prefix, c))) for c in range(v)])
    return ext, end, log_sum(starts.get(prefix))


def _close(a: float, b: float, tol: float = TOL) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= tol


def _max_err(a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray) -> float:
    """Max |a − b| over entries; inf if the −inf patterns differ; NaN anywhere fails."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    assert not np.isnan(a).any() and not np.isnan(b).any()
    if not np.array_equal(np.isneginf(a), np.isneginf(b)):
        return math.inf
    fin = np.isfinite(a)
    return float(np.abs(a[fin] - b[fin]).max()) if fin.any() else 0.0


def _logsumexp(v: Sequence[float] | np.ndarray) -> float:
    return float(torch.logsumexp(torch.as_tensor(np.asarray(v, dtype=np.float64)), 0))


def _forward(x: np.ndarray | torch.Tensor, prefix: Sequence[int], blank: int = 0) -> PrefixForward:
    f = PrefixForward(torch.as_tensor(x), blank)
    f.set(prefix)
    return f


def _forward_ext(f: PrefixForward, j: int) -> np.ndarray:
    """(V,) log p(g_{1:j}⊕c…) for every label c (the blank and all), from :meth:`PrefixForward.log_next`."""
    return np.array([f.log_next(j, c) for c in range(f.x.shape[1])])


def _assert_continue_any(f: PrefixForward, j: int, want_ext: np.ndarray, want_pre: float) -> None:
    """log_continue_any(j) = log Σ_c p(g⊕c…) = log(p(g…) − p(g)): error bounded relative to p(g…) (it is a
    difference), and tight in log space when the continuations are not negligible next to p(g)."""
    got, want = f.log_continue_any(j), _logsumexp(want_ext)
    assert not math.isnan(got)
    if want_pre == NEG_INF:
        assert got == NEG_INF
        return
    assert abs(math.exp(got - want_pre) - math.exp(want - want_pre)) <= TOL, (got, want, want_pre)
    if want - want_pre > math.log(1e-3):
        assert _close(got, want, 1e-6), (got, want)


def _check_against_brute(x: np.ndarray, prefix: tuple[int, ...], blank: int) -> float:
    """Both implementations against the brute force: ext for every label, end, the prefix probability, the
    continuation sum (PrefixForward) and the Δ scores (scorer).  Returns the worst log-space error."""
    want_ext, want_end, want_pre = _brute(x, prefix, blank)
    j, v = len(prefix), x.shape[1]
    # single sequence
    f = _forward(x, prefix, blank)
    ext_f = _forward_ext(f, j)
    assert _close(f.log_end(j), want_end), (prefix, f.log_end(j), want_end)
    assert _close(f.psi[j], want_pre), (prefix, f.psi[j], want_pre)
    err_f = _max_err(ext_f, want_ext)
    assert err_f <= TOL, (prefix, ext_f, want_ext)
    _assert_continue_any(f, j, want_ext, want_pre)
    # batched scorer (a batch of one, every label as a candidate)
    scorer = CtcPrefixScorer(blank=blank)
    state = scorer.init_state(x, prefix)
    scores, cand = scorer.score(state, torch.arange(v)[None, :])
    assert cand.ext.shape == (1, v) and cand.ext.dtype == torch.float64
    assert _close(float(state.log_end[0]), want_end), (prefix, float(state.log_end[0]), want_end)
    assert _close(float(state.log_prefix[0]), want_pre), (prefix, float(state.log_prefix[0]), want_pre)
    err_s = _max_err(cand.ext[0], want_ext)
    assert err_s <= TOL, (prefix, cand.ext[0], want_ext)
    want_scores = np.full(v, NEG_INF) if want_pre == NEG_INF else want_ext - want_pre
    assert _max_err(scores[0], want_scores) <= 2 * TOL
    end_errs = [abs(e - want_end) for e in (f.log_end(j), float(state.log_end[0])) if math.isfinite(want_end)]
    return max(err_f, err_s, *end_errs)


@st.composite
def _cases(draw: st.DrawFn) -> tuple[np.ndarray, tuple[int, ...], int]:
    v = draw(st.integers(3, 4))
    t = draw(st.integers(0, 6))
    blank = draw(st.sampled_from([0, v - 1]))
    labels = [k for k in range(v) if k != blank]
    prefix = tuple(draw(st.lists(st.sampled_from(labels), max_size=t + 1)))
    seed = draw(st.integers(0, 2**32 - 1))
    scale = draw(st.sampled_from([0.3, 2.0, 6.0]))
    return _posteriors(seed, t, v, scale), prefix, blank


@settings(max_examples=300, deadline=None)
@given(_cases())
@example((_posteriors(1, 4, 3), (1, 1), 0))
@example((_posteriors(2, 3, 3), (1, 1), 0))  # [1,1] needs 3 frames: just possible
@example((_posteriors(3, 2, 3), (1, 1), 0))  # ... impossible with 2
@example((_posteriors(4, 6, 4), (), 0))
@example((_posteriors(5, 6, 4), (3, 3, 3), 0))  # 5 frames needed
@example((_posteriors(6, 0, 3), (), 0))
@example((_posteriors(7, 0, 3), (2,), 0))
def test_prefix_probabilities_match_brute_force(case: tuple[np.ndarray, tuple[int, ...], int]) -> None:
    x, prefix, blank = case
    _check_against_brute(x, prefix, blank)


def test_brute_force_exhaustive_small() -> None:
    """Every prefix of length ≤ T+1 over 2 labels (repeats included), T = 0..6, V = 3, two blanks positions."""
    checked, worst = 0, 0.0
    for t in range(7):
        for blank in (0, 2):
            labels = [k for k in range(3) if k != blank]
            x = _posteriors(100 + t, t, 3)
            for n in range(t + 2):
                for prefix in itertools.product(labels, repeat=n):
                    worst = max(worst, _check_against_brute(x, prefix, blank))
                    checked += 1
    assert checked == sum(2 * (2 ** (t + 2) - 1) for t in range(7)) == 1002
    assert worst <= TOL


def test_masked_labels_with_minus_inf_posteriors() -> None:
    """Posteriors with exact zeros (−inf logs, e.g. a masked label) give no NaN and match the brute force."""
    x = _posteriors(11, 5, 4)
    x[:, 2] = NEG_INF
    x = _log_softmax(x)
    x[1, 3] = NEG_INF
    x = _log_softmax(x)
    for prefix in [(), (1,), (2,), (3, 1), (1, 3, 1), (1, 1)]:
        _check_against_brute(x, prefix, 0)


def test_batched_scorer_matches_brute_force() -> None:
    """A batch grown level by level through score/select (every candidate kept: labels, repeats, the blank, <eos>
    and an id outside the CTC vocabulary) matches the brute force in every row: ext, Δ, log_end, log_prefix."""
    blank, eos, oov = 0, 4, 7
    x = _posteriors(12, 6, 5)
    scorer = CtcPrefixScorer(blank=blank, eos=eos)
    states = scorer.init_state(x)
    cands_row = [blank, 1, 2, 3, eos, oov]
    rows_checked = 0
    for _level in range(3):
        cands = torch.tensor([cands_row] * len(states))
        scores, new = scorer.score(states, cands)
        for b, prefix in enumerate(states.prefixes):
            rows_checked += 1
            if blank in prefix or oov in prefix:  # a dead state: everything −inf
                assert states.log_prefix[b] == NEG_INF and states.log_end[b] == NEG_INF
                assert torch.isneginf(states.gamma_n[b]).all() and torch.isneginf(states.gamma_b[b]).all()
                assert torch.isneginf(new.ext[b]).all() and torch.isneginf(scores[b]).all()
                continue
            want_ext, want_end, want_pre = _brute(x, prefix, blank)
            assert _close(float(states.log_end[b]), want_end) and _close(float(states.log_prefix[b]), want_pre)
            want = np.array([want_end if c == eos else NEG_INF if c == oov else want_ext[c] for c in cands_row])
            assert _max_err(new.ext[b], want) <= TOL, (prefix, new.ext[b], want)
            assert _max_err(scores[b], want - want_pre) <= 2 * TOL
        states = scorer.select(new, torch.arange(cands.numel()))
        # selecting <eos> keeps the parent's prefix; anything else appends the candidate
        assert states.prefixes == tuple(p if c == eos else (*p, c) for p in new.parents.prefixes for c in cands_row)
    assert rows_checked == 1 + 6 + 36


# ---------------------------------------------------------------------------------------------------------
# hand-worked example


def test_hand_worked_T2() -> None:
    # V = {blank = 0, a = 1}, T = 2.
    #   frame 1: p(blank) = 0.6, p(a) = 0.4        frame 2: p(blank) = 0.3, p(a) = 0.7
    # Paths: (-,-) 0.6·0.3 = 0.18 → ∅;  (-,a) 0.6·0.7 = 0.42 → a;  (a,-) 0.4·0.3 = 0.12 → a;  (a,a) 0.4·0.7 = 0.28 → a
    # Prefix ∅:  γ_0^(b)(∅) = 1, γ_1^(b)(∅) = 0.6, γ_2^(b)(∅) = 0.18, γ^(n)(∅) = 0
    #   end   = p(∅)   = γ_2^(b)(∅) = 0.18
    #   ext[a] = Σ_t Φ_t(∅)·p(z_t=a) = Φ_1·0.4 + Φ_2·0.7 = 1·0.4 + 0.6·0.7 = 0.82   (= 0.42 + 0.12 + 0.28)
    # Prefix [a]: γ_1^(n)(a) = 0.4·Φ_1(∅) = 0.4,  γ_1^(b)(a) = 0.6·0 = 0
    #             γ_2^(n)(a) = 0.7·(γ_1^(n)(a) + Φ_2(∅)) = 0.7·(0.4 + 0.6) = 0.7
    #             γ_2^(b)(a) = 0.3·(γ_1^(b)(a) + γ_1^(n)(a)) = 0.3·0.4 = 0.12
    #   end = 0.7 + 0.12 = 0.82 (all three a-paths);  ext[a] = Φ_t(a) uses only γ_{t−1}^(b)(a) = 0, 0 → 0 (−inf)
    # Invariants: p(∅…) = 1 = 0.18 + 0.82;  p(a…) = 0.82 = p(a) + p(aa…) = 0.82 + 0.
    # log Odds_end(∅ | c_att = a) = log(0.18 / 0.82)
    x = np.log(np.array([[0.6, 0.4], [0.3, 0.7]]))
    # single sequence: index j of gn/gb holds γ_t for t = 0..T
    f = _forward(x, [1])
    assert math.isclose(f.log_end(0), math.log(0.18), abs_tol=1e-12)
    assert f.log_next(0, 0) == NEG_INF
    assert math.isclose(f.log_next(0, 1), math.log(0.82), abs_tol=1e-12)
    assert math.isclose(f.log_continue_any(0), math.log(0.82), abs_tol=1e-12)  # p(∅…) − p(∅) = 1 − 0.18
    assert math.isclose(f.log_end(1), math.log(0.82), abs_tol=1e-12)
    assert f.log_next(1, 1) == NEG_INF and f.log_next(1, 0) == NEG_INF
    assert np.allclose(np.exp(f.gn[1]), [0.0, 0.4, 0.7], atol=1e-12)
    assert np.allclose(np.exp(f.gb[1]), [0.0, 0.0, 0.12], atol=1e-12)
    assert math.isclose(f.psi[1], math.log(0.82), abs_tol=1e-12)
    assert np.allclose(np.exp(f.gb[0]), [1.0, 0.6, 0.18], atol=1e-12)
    assert np.isneginf(f.gn[0]).all()
    assert f.psi[0] == 0.0
    assert math.isclose(log_odds(f.log_end(0), f.log_next(0, 1)), math.log(0.18 / 0.82), abs_tol=1e-12)
    assert log_odds(f.log_end(1), f.log_next(1, 1)) == math.inf  # p(a) = 0.82 > 0 = p(aa…)

    # batched scorer: γ_t for t = 1..T
    scorer = CtcPrefixScorer(blank=0, eos=5)  # an <eos> id outside the CTC vocabulary
    st_a = scorer.init_state(x, [1])
    assert np.allclose(st_a.gamma_n[0].exp().numpy(), [0.4, 0.7], atol=1e-12)
    assert np.allclose(st_a.gamma_b[0].exp().numpy(), [0.0, 0.12], atol=1e-12)
    assert math.isclose(float(st_a.log_prefix[0]), math.log(0.82), abs_tol=1e-12)
    assert math.isclose(float(st_a.log_end[0]), math.log(0.82), abs_tol=1e-12)
    st_0 = scorer.init_state(x, [])
    assert np.allclose(st_0.gamma_b[0].exp().numpy(), [0.6, 0.18], atol=1e-12)
    assert torch.isneginf(st_0.gamma_n).all()
    assert float(st_0.log_prefix[0]) == 0.0
    scores, cand = scorer.score(st_0, torch.tensor([[0, 1, 5]]))
    assert float(cand.ext[0, 0]) == NEG_INF
    assert math.isclose(float(cand.ext[0, 1]), math.log(0.82), abs_tol=1e-12)
    assert math.isclose(float(cand.ext[0, 2]), math.log(0.18), abs_tol=1e-12)  # <eos>: p(∅)
    assert torch.equal(scores, cand.ext)  # log p(∅…) = 0
    odds = st_0.log_end - cand.ext[:, 1]
    assert math.isclose(float(odds[0]), math.log(0.18 / 0.82), abs_tol=1e-12)
    _, cand_a = scorer.score(st_a, torch.tensor([[1, 0]]))
    assert torch.isneginf(cand_a.ext).all()  # p(aa…) = 0; blank
    kept = scorer.select(cand, [1])  # ∅ → a
    assert kept.prefixes == ((1,),)
    assert _max_err(kept.gamma_n, st_a.gamma_n) < 1e-15 and _max_err(kept.gamma_b, st_a.gamma_b) < 1e-15


# ---------------------------------------------------------------------------------------------------------
# invariants and edge cases


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    t=st.integers(0, 15),
    prefix=st.lists(st.integers(1, 5), max_size=9),
    scale=st.sampled_from([0.5, 3.0]),
)
def test_prefix_probability_decomposes(seed: int, t: int, prefix: list[int], scale: float) -> None:
    """p(g…) = p(g) + Σ_c p(g⊕c…), and p(g…) is also what the parent's ext says (or 1 for g = ∅) — in both
    implementations."""
    x = _posteriors(seed, t, 6, scale)
    j = len(prefix)
    # single sequence
    f = _forward(x, prefix)
    ext = _forward_ext(f, j)
    total = float(np.logaddexp(f.log_end(j), _logsumexp(ext)))
    want = f.log_next(j - 1, prefix[-1]) if prefix else 0.0
    assert _close(total, want, 1e-10), (total, want)
    assert _close(f.psi[j], want, 1e-10), (f.psi[j], want)
    _assert_continue_any(f, j, ext, want)
    # batched scorer
    scorer = CtcPrefixScorer(blank=0)
    state = scorer.init_state(x, prefix)
    _, cand = scorer.score(state, torch.arange(6)[None, :])
    total_s = float(torch.logaddexp(state.log_end[0], torch.logsumexp(cand.ext[0], 0)))
    if prefix:
        _, parent = scorer.score(scorer.init_state(x, prefix[:-1]), torch.tensor([[prefix[-1]]]))
        want_s = float(parent.ext[0, 0])
    else:
        want_s = 0.0
    assert _close(total_s, want_s, 1e-10), (total_s, want_s)
    assert _close(float(state.log_prefix[0]), want_s, 1e-10)
    assert _close(want_s, want, 1e-10)  # the two implementations agree


def test_zero_frames_and_too_long_prefixes_give_minus_inf_not_nan() -> None:
    scorer = CtcPrefixScorer(blank=0)
    x0 = np.zeros((0, 5))
    f = _forward(x0, [1, 2])
    assert f.log_end(0) == 0.0 and f.psi[0] == 0.0 and np.isneginf(_forward_ext(f, 0)).all()
    assert f.log_continue_any(0) == NEG_INF
    assert f.log_end(2) == NEG_INF and f.psi[2] == NEG_INF and np.isneginf(_forward_ext(f, 2)).all()
    assert log_odds(f.log_end(2), f.log_next(2, 1)) == math.inf  # 0/0: the hypothesis ran past the audio
    for prefix, end in (((), 0.0), ((1, 2), NEG_INF)):
        state = scorer.init_state(x0, prefix)
        assert float(state.log_end[0]) == end and state.gamma_n.shape == (1, 0)
        scores, cand = scorer.score(state, torch.arange(5)[None, :])
        assert torch.isneginf(cand.ext).all() and torch.isneginf(scores).all()
    x = _posteriors(3, 3, 5)
    for prefix in ([1, 2, 3, 4], [1, 1, 1], [2, 2, 3, 3]):
        j = len(prefix)
        f = _forward(x, prefix)
        ext = _forward_ext(f, j)
        assert f.log_end(j) == NEG_INF and f.psi[j] == NEG_INF and np.isneginf(ext).all()
        assert not np.isnan(ext).any() and f.log_continue_any(j) == NEG_INF
        assert log_odds(f.log_end(j), f.log_next(j, 1)) == math.inf  # 0/0: the hypothesis ran past the audio
        state = scorer.init_state(x, prefix)
        assert float(state.log_prefix[0]) == NEG_INF and float(state.log_end[0]) == NEG_INF
        scores, cand = scorer.score(state, torch.tensor([[1, 2]]))
        assert torch.isneginf(scores).all() and torch.isneginf(cand.ext).all()
        assert not torch.isnan(state.gamma_n).any() and not torch.isnan(state.gamma_b).any()


def test_input_validation_and_numpy_equals_torch() -> None:
    x = _posteriors(5, 4, 5)
    scorer = CtcPrefixScorer(blank=0)
    cands = torch.arange(5)[None, :]
    a = scorer.init_state(x, [1, 2])
    b = scorer.init_state(torch.from_numpy(x), [1, 2])
    c = scorer.init_state(torch.from_numpy(x).float(), [1, 2])
    ext_a, ext_b, ext_c = (scorer.score(s, cands)[1].ext for s in (a, b, c))
    assert torch.equal(ext_a, ext_b) and torch.equal(a.log_end, b.log_end) and torch.equal(a.gamma_n, b.gamma_n)
    assert _max_err(ext_a, ext_c) < 1e-5 and _max_err(a.log_end, c.log_end) < 1e-5  # float32 posteriors
    with pytest.raises(ValueError):
        scorer.init_state(x, [0])  # blank in the prefix
    with pytest.raises(ValueError):
        scorer.init_state(x, [7])  # outside the vocabulary
    with pytest.raises(ValueError):
        scorer.init_state(x[0], [1])  # not (T, V)
    with pytest.raises(ValueError):
        scorer.score(a, torch.tensor([1, 2]))  # candidates not (B, K)
    # PrefixForward takes float32 posteriors (float64 arithmetic) ...
    f64, f32 = _forward(x, [1, 2]), _forward(torch.from_numpy(x).float(), [1, 2])
    assert f32.x.dtype == np.float64
    assert _max_err(_forward_ext(f64, 2), _forward_ext(f32, 2)) < 1e-5 and abs(f64.log_end(2) - f32.log_end(2)) < 1e-5
    # ... and, by convention, a blank or out-of-vocabulary label: the sequence is impossible from there on
    for bad in (0, 7, -1):
        f = _forward(x, [1, bad, 2])
        assert f.log_end(1) == f64.log_end(1) and f.psi[1] == f64.psi[1]
        for j in (2, 3):
            assert f.log_end(j) == NEG_INF and f.psi[j] == NEG_INF and np.isneginf(_forward_ext(f, j)).all()
        assert f.log_next(1, bad) == NEG_INF


def test_full_sequence_probability_matches_torch_ctc_loss_long_input() -> None:
    """end = −ctc_loss for a long input where brute force is impossible (T = 300, V = 12, repeats included)."""
    x = _posteriors(9, 300, 12, scale=3.0)
    rng = np.random.default_rng(0)
    scorer = CtcPrefixScorer(blank=0)
    for length in (1, 10, 40, 90):
        target = rng.integers(1, 12, size=length).tolist()
        target[length // 2 :: 7] = [target[length // 2]] * len(target[length // 2 :: 7])  # some repeats
        loss = torch.nn.functional.ctc_loss(
            torch.from_numpy(x)[:, None, :],
            torch.tensor([target]),
            torch.tensor([300]),
            torch.tensor([length]),
            blank=0,
            reduction="sum",
        )
        ends = {
            "forward": _forward(x, target).log_end(length),
            "scorer": float(scorer.init_state(x, target).log_end[0]),
        }
        for name, end in ends.items():
            assert abs(end + float(loss)) < 1e-9 * max(1.0, float(loss)), (name, length, end, float(loss))


# ---------------------------------------------------------------------------------------------------------
# batched scorer: growing batches, selection, agreement with PrefixForward


PREFIXES = [(), (1,), (1, 1), (2, 3, 2), (4, 4, 5, 1), (3, 1, 2, 5, 4, 6)]


def _grow(x: np.ndarray | torch.Tensor, prefixes: Sequence[tuple[int, ...]], eos: int) -> CtcPrefixBatch:
    """A batch of ``prefixes`` grown from ∅ through score/select, as a beam search does (a row that is already
    complete selects <eos>, which keeps its state)."""
    scorer = CtcPrefixScorer(blank=0, eos=eos)
    states = scorer.select(scorer.init_state(x), [0] * len(prefixes))
    for i in range(max(len(p) for p in prefixes)):
        cands = torch.tensor([[p[i] if i < len(p) else eos] for p in prefixes])
        _, new = scorer.score(states, cands)
        states = scorer.select(new, torch.arange(len(prefixes)))
    assert states.prefixes == tuple(prefixes)
    return states


def _assert_rows_equal_recompute(states: CtcPrefixBatch, x: np.ndarray | torch.Tensor, tol: float = 1e-12) -> None:
    """Every row equals its state computed from scratch (init_state) and PrefixForward's (to 1e-9)."""
    scorer = CtcPrefixScorer(blank=states.blank)
    f = PrefixForward(torch.as_tensor(x), states.blank)
    for b, prefix in enumerate(states.prefixes):
        ref = scorer.init_state(x, prefix)
        errs = [
            _max_err(states.gamma_n[b], ref.gamma_n[0]),
            _max_err(states.gamma_b[b], ref.gamma_b[0]),
            _max_err(states.log_prefix[b : b + 1], ref.log_prefix),
            _max_err(states.log_end[b : b + 1], ref.log_end),
        ]
        assert max(errs) <= tol, (prefix, errs)
        f.set(prefix)
        j = len(prefix)
        assert _max_err(states.gamma_n[b], f.gn[j][1:]) <= 1e-9 and _max_err(states.gamma_b[b], f.gb[j][1:]) <= 1e-9
        assert _close(float(states.log_prefix[b]), f.psi[j]) and _close(float(states.log_end[b]), f.log_end(j))


def test_batched_scorer_equals_unbatched() -> None:
    x = _posteriors(21, 9, 8)
    eos = 7
    scorer = CtcPrefixScorer(blank=0, eos=eos)
    states = _grow(x, PREFIXES, eos)
    _assert_rows_equal_recompute(states, x)
    # candidates: the last label (repeat), blank, eos, an id outside the CTC vocabulary, others
    cands = torch.tensor([[(p[-1] if p else 1), 0, eos, 11, 2, 5] for p in PREFIXES])
    scores, new = scorer.score(states, cands)
    assert scores.shape == cands.shape
    worst = 0.0
    f = PrefixForward(torch.from_numpy(x), 0)
    for b, prefix in enumerate(PREFIXES):
        f.set(prefix)
        j = len(prefix)
        for k, c in enumerate(cands[b].tolist()):
            if c == eos:
                want = f.log_end(j) - f.psi[j]
            elif c == 0 or c >= 8:
                want = NEG_INF
            else:
                want = f.log_next(j, c) - f.psi[j]
            got = float(scores[b, k])
            assert _close(got, want, 1e-10), (prefix, c, got, want)
            if math.isfinite(want):
                worst = max(worst, abs(got - want))
    assert worst < 1e-10
    # select some extensions (flat indices b·K + k), eos and a repeat included
    k = cands.shape[1]
    picks = [0 * k + 4, 2 * k + 0, 3 * k + 2, 5 * k + 5, 1 * k + 2, 4 * k + 0]
    kept = scorer.select(new, torch.tensor(picks))
    want_prefixes = []
    for flat in picks:
        b, j = divmod(flat, k)
        c = int(cands[b, j])
        want_prefixes.append(PREFIXES[b] if c == eos else (*PREFIXES[b], c))
    assert kept.prefixes == tuple(want_prefixes)
    _assert_rows_equal_recompute(kept, x)
    # the kept rows' scores telescope: a child's log_prefix is exactly the ext it was scored with
    for row, flat in enumerate(picks):
        b, j = divmod(flat, k)
        if int(cands[b, j]) != eos:
            assert float(kept.log_prefix[row]) == float(new.ext[b, j])
    # plain row selection
    assert scorer.select(kept, [1, 1, 0]).prefixes == (kept.prefixes[1], kept.prefixes[1], kept.prefixes[0])


def test_selecting_every_candidate_equals_single_rows() -> None:
    """Scoring B rows × K candidates and materialising all B·K children equals doing it row by row (batches of
    one) and matches PrefixForward; a blank candidate gives a dead state that stays dead as labels are added."""
    x = _posteriors(22, 8, 7)
    scorer = CtcPrefixScorer(blank=0)
    states = _grow(x, PREFIXES[:5], eos=6)
    cands = torch.tensor([[1, 2, 3, 4], [1, 6, 0, 2], [1, 5, 5, 3], [2, 3, 4, 5], [1, 4, 5, 6]])
    _, new = scorer.score(states, cands)
    children = scorer.select(new, torch.arange(cands.numel()))
    assert len(children) == cands.numel()
    f = PrefixForward(torch.from_numpy(x), 0)
    for b in range(len(states)):
        _, one = scorer.score(scorer.select(states, [b]), cands[b : b + 1])
        assert _max_err(one.ext[0], new.ext[b]) < 1e-12
        f.set(states.prefixes[b])
        ref = np.array([f.log_next(len(states.prefixes[b]), c) for c in cands[b].tolist()])
        assert _max_err(one.ext[0], ref) < 1e-12
        kids = scorer.select(one, torch.arange(cands.shape[1]))
        for j in range(cands.shape[1]):
            assert kids.prefixes[j] == children.prefixes[b * cands.shape[1] + j]
            assert _max_err(kids.gamma_n[j], children.gamma_n[b * cands.shape[1] + j]) < 1e-12
            assert _max_err(kids.gamma_b[j], children.gamma_b[b * cands.shape[1] + j]) < 1e-12
    live = [i for i, p in enumerate(children.prefixes) if 0 not in p]
    _assert_rows_equal_recompute(children.select(live), x)
    # the blank candidate of row 1 gives a dead state that stays dead when labels are added
    dead = children.select([1 * 4 + 2])
    assert torch.isneginf(dead.gamma_n).all() and float(dead.log_prefix[0]) == NEG_INF
    assert float(dead.log_end[0]) == NEG_INF
    _, more = scorer.score(dead, torch.tensor([[1, 2, 3]]))
    assert torch.isneginf(more.ext).all()
    more_kids = scorer.select(more, [0, 1, 2])
    assert torch.isneginf(more_kids.gamma_n).all() and torch.isneginf(more_kids.gamma_b).all()
    assert torch.isneginf(more_kids.log_prefix).all() and torch.isneginf(more_kids.log_end).all()


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    t=st.integers(0, 14),
    prefixes=st.lists(st.lists(st.integers(1, 4), max_size=7).map(tuple), min_size=1, max_size=3),
)
@example(seed=0, t=10, prefixes=[(1, 1), (), (2, 3, 2, 3)])
@example(seed=1, t=2, prefixes=[(1, 2, 3), (1,)])  # <eos> selected while the prefixes outgrow the frames
def test_grown_batch_equals_recompute(seed: int, t: int, prefixes: list[tuple]) -> None:
    """Incremental states (score/select, <eos> rows kept) equal from-scratch states and PrefixForward's."""
    x = torch.from_numpy(_posteriors(seed, t, 6))
    states = _grow(x, prefixes, eos=5)
    assert states.log_probs is x  # a reference to the posteriors, not a copy
    assert states.gamma_n.shape == states.gamma_b.shape == (len(prefixes), t)
    _assert_rows_equal_recompute(states, x)


def test_eos_selection_with_fewer_frames_than_labels() -> None:
    """Selecting <eos> next to a growing row, with fewer frames than the longest prefix has labels."""
    x = _posteriors(33, 2, 5)
    scorer = CtcPrefixScorer(blank=0, eos=4)
    states = scorer.select(scorer.init_state(x, [1]), [0, 0])
    for c in (2, 3):
        _, new = scorer.score(states, torch.tensor([[c, 4]] * 2))
        states = scorer.select(new, [0, 3])  # row 0 grows, row 1 finishes (keeps its prefix)
    assert states.prefixes == ((1, 2, 3), (1,))
    assert float(states.log_end[0]) == NEG_INF  # 3 labels cannot come from 2 frames
    _assert_rows_equal_recompute(states, x)


def test_joint_scores_telescope_to_prefix_and_full_probabilities() -> None:
    """Summing the scorer's Δ's along a hypothesis gives log p(h…) − log p(forced…), and log p(h) after <eos>."""
    x = _posteriors(41, 12, 6)
    eos = 5
    scorer = CtcPrefixScorer(blank=0, eos=eos)
    forced = (3,)
    states = scorer.init_state(x, forced)
    path = [1, 1, 4, 2]
    f = _forward(x, (*forced, *path))
    base = f.psi[len(forced)]
    total = 0.0
    for i, c in enumerate(path):
        d, new = scorer.score(states, torch.tensor([[c, eos]]))
        total += float(d[0, 0])
        states = scorer.select(new, [0])
        assert math.isclose(total, f.psi[len(forced) + i + 1] - base, abs_tol=1e-10)
    d, _ = scorer.score(states, torch.tensor([[eos]]))
    assert math.isclose(total + float(d[0, 0]), f.log_end(len(forced) + len(path)) - base, abs_tol=1e-10)


def test_end_odds_from_candidates_match_prefix_forward() -> None:
    """log Odds_end(g) (2023 eq. 5) from a scored batch, log_end − ext of c_att, equals the policy's
    log_odds(PrefixForward.log_end, PrefixForward.log_next); log_odds' conventions for zero probabilities."""
    x = _posteriors(51, 10, 6)
    scorer = CtcPrefixScorer(blank=0, eos=6)
    prefixes = [(), (1,), (2, 2), (3, 4, 1)]
    states = _grow(x, prefixes, eos=6)
    c_att = [1, 1, 3, 5]
    _, cand = scorer.score(states, torch.tensor(c_att)[:, None])
    odds = states.log_end - cand.ext[:, 0]
    f = PrefixForward(torch.from_numpy(x), 0)
    for b, p in enumerate(prefixes):
        f.set(p)
        want = log_odds(f.log_end(len(p)), f.log_next(len(p), c_att[b]))
        assert math.isclose(float(odds[b]), want, abs_tol=1e-10)
    assert log_odds(NEG_INF, NEG_INF) == math.inf  # g cannot be produced from the frames read: stop
    assert log_odds(-1.0, NEG_INF) == math.inf and log_odds(NEG_INF, -1.0) == NEG_INF
    assert log_odds(-1.0, -3.0) == 2.0


def test_select_rows_roundtrip() -> None:
    x = _posteriors(61, 7, 7)
    states = _grow(x, PREFIXES, eos=7)
    order = [5, 0, 5, 2]
    picked = states.select(order)
    assert picked.prefixes == tuple(PREFIXES[i] for i in order) and picked.frames == 7 and len(picked) == 4
    for row, i in enumerate(order):
        assert torch.equal(picked.gamma_n[row], states.gamma_n[i]) and torch.equal(
            picked.gamma_b[row], states.gamma_b[i]
        )
        assert torch.equal(picked.log_prefix[row], states.log_prefix[i])
        assert torch.equal(picked.log_end[row], states.log_end[i])
    assert picked.log_probs is states.log_probs
    with pytest.raises(ValueError):
        CtcPrefixBatch(
            prefixes=((1,),),
            gamma_n=states.gamma_n[:1, :3],
            gamma_b=states.gamma_b[:1],
            log_prefix=states.log_prefix[:1],
            log_probs=states.log_probs,
            blank=0,
        )
