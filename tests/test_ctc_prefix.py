"""Tests of the CTC prefix scorer (simulst.scorers.ctc_prefix) against brute-force enumeration of alignments."""

from __future__ import annotations

import functools
import itertools
import math
from collections import defaultdict

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from simulst.scorers.ctc_prefix import (
    CtcPrefixBatch,
    CtcPrefixScorer,
    candidate_logprobs,
    extend_candidates,
    extend_frames,
    extend_state,
    initial_batch,
    initial_state,
    log_odds_end,
    prefix_logprobs,
)

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


def _brute(x: np.ndarray, prefix: tuple[int, ...], blank: int) -> tuple[np.ndarray, float]:
    """(ext (V,), end) by summing path probabilities (probability space, float64), returned as logs."""
    t, v = x.shape
    paths, exact, starts = _path_groups(v, t, blank)
    probs = np.exp(x[np.arange(t)[None, :], paths].sum(axis=1)) if t else np.ones(1)

    def log_sum(ix: np.ndarray | None) -> float:
        total = probs[ix].sum() if ix is not None else 0.0
        return math.log(total) if total > 0 else NEG_INF

    end = log_sum(exact.get(prefix))
    ext = np.array([NEG_INF if c == blank else log_sum(starts.get((*prefix, c))) for c in range(v)])
    return ext, end


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


def _check_against_brute(x: np.ndarray, prefix: tuple[int, ...], blank: int) -> float:
    ext, end = prefix_logprobs(x, prefix, blank=blank)
    want_ext, want_end = _brute(x, prefix, blank)
    assert ext.shape == (x.shape[1],) and ext.dtype == torch.float64
    assert _close(float(end), want_end), (prefix, float(end), want_end)
    err = _max_err(ext, want_ext)
    assert err <= TOL, (prefix, ext, want_ext)
    return max(err, 0.0 if math.isinf(want_end) else abs(float(end) - want_end))


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
def test_prefix_logprobs_matches_brute_force(case: tuple[np.ndarray, tuple[int, ...], int]) -> None:
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
    ext, end = prefix_logprobs(x, [])
    assert math.isclose(float(end), math.log(0.18), abs_tol=1e-12)
    assert float(ext[0]) == NEG_INF
    assert math.isclose(float(ext[1]), math.log(0.82), abs_tol=1e-12)

    ext, end = prefix_logprobs(x, [1])
    assert math.isclose(float(end), math.log(0.82), abs_tol=1e-12)
    assert float(ext[1]) == NEG_INF and float(ext[0]) == NEG_INF

    st_a = initial_state(x, [1])
    assert np.allclose(st_a.gamma_n.exp().numpy(), [0.4, 0.7], atol=1e-12)
    assert np.allclose(st_a.gamma_b.exp().numpy(), [0.0, 0.12], atol=1e-12)
    assert math.isclose(st_a.log_prefix, math.log(0.82), abs_tol=1e-12)
    st_0 = initial_state(x, [])
    assert np.allclose(st_0.gamma_b.exp().numpy(), [0.6, 0.18], atol=1e-12)
    assert torch.isneginf(st_0.gamma_n).all()
    assert st_0.log_prefix == 0.0

    assert math.isclose(log_odds_end(x, [], c_att=1), math.log(0.18 / 0.82), abs_tol=1e-12)
    assert log_odds_end(x, [1], c_att=1) == math.inf  # p(a) = 0.82 > 0 = p(aa…)


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
    """p(g…) = p(g) + Σ_c p(g⊕c…), and p(g…) is also what the parent's ext says (or 1 for g = ∅)."""
    x = _posteriors(seed, t, 6, scale)
    ext, end = prefix_logprobs(x, prefix)
    total = torch.logaddexp(end, torch.logsumexp(ext, 0))
    if prefix:
        parent_ext, _ = prefix_logprobs(x, prefix[:-1])
        want = float(parent_ext[prefix[-1]])
    else:
        want = 0.0
    assert _close(float(total), want, 1e-10), (float(total), want)
    assert math.isclose(initial_state(x, prefix).log_prefix, want, abs_tol=1e-10) or want == NEG_INF


def test_zero_frames_and_too_long_prefixes_give_minus_inf_not_nan() -> None:
    x0 = np.zeros((0, 5))
    ext, end = prefix_logprobs(x0, [])
    assert float(end) == 0.0 and torch.isneginf(ext).all()
    ext, end = prefix_logprobs(x0, [1, 2])
    assert float(end) == NEG_INF and torch.isneginf(ext).all()
    x = _posteriors(3, 3, 5)
    for prefix in ([1, 2, 3, 4], [1, 1, 1], [2, 2, 3, 3]):
        ext, end = prefix_logprobs(x, prefix)
        assert float(end) == NEG_INF and torch.isneginf(ext).all()
        assert not torch.isnan(ext).any()
        assert log_odds_end(x, prefix, c_att=1) == math.inf  # 0/0: the hypothesis ran past the audio
    state = initial_state(x, [1, 2, 3, 4])
    assert state.log_prefix == NEG_INF and state.log_end == NEG_INF
    scores, _ = CtcPrefixScorer().score(CtcPrefixBatch.stack([state]), torch.tensor([[1, 2]]))
    assert torch.isneginf(scores).all()


def test_input_validation_and_numpy_equals_torch() -> None:
    x = _posteriors(5, 4, 5)
    a = prefix_logprobs(x, [1, 2])
    b = prefix_logprobs(torch.from_numpy(x), [1, 2])
    c = prefix_logprobs(torch.from_numpy(x).float(), [1, 2])
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert _max_err(a[0], c[0]) < 1e-5  # float32 posteriors, float64 arithmetic
    with pytest.raises(ValueError):
        prefix_logprobs(x, [0])  # blank in the prefix
    with pytest.raises(ValueError):
        prefix_logprobs(x, [7])  # outside the vocabulary
    with pytest.raises(ValueError):
        prefix_logprobs(x[0], [1])  # not (T, V)


def test_full_sequence_probability_matches_torch_ctc_loss_long_input() -> None:
    """end = −ctc_loss for a long input where brute force is impossible (T = 300, V = 12, repeats included)."""
    x = _posteriors(9, 300, 12, scale=3.0)
    rng = np.random.default_rng(0)
    for length in (1, 10, 40, 90):
        target = rng.integers(1, 12, size=length).tolist()
        target[length // 2 :: 7] = [target[length // 2]] * len(target[length // 2 :: 7])  # some repeats
        _, end = prefix_logprobs(x, target)
        loss = torch.nn.functional.ctc_loss(
            torch.from_numpy(x)[:, None, :],
            torch.tensor([target]),
            torch.tensor([300]),
            torch.tensor([length]),
            blank=0,
            reduction="sum",
        )
        assert abs(float(end) + float(loss)) < 1e-9 * max(1.0, float(loss)), (length, float(end), float(loss))


# ---------------------------------------------------------------------------------------------------------
# batched scorer, incremental states


PREFIXES = [(), (1,), (1, 1), (2, 3, 2), (4, 4, 5, 1), (3, 1, 2, 5, 4, 6)]


def _ref_prefix_logprob(x: np.ndarray, prefix: tuple[int, ...]) -> float:
    if not prefix:
        return 0.0
    return float(prefix_logprobs(x, prefix[:-1])[0][prefix[-1]])


def test_batched_scorer_equals_unbatched() -> None:
    x = _posteriors(21, 9, 8)
    eos = 7
    scorer = CtcPrefixScorer(blank=0, eos=eos)
    states = CtcPrefixBatch.stack([initial_state(x, p) for p in PREFIXES])
    assert states.chain_n.shape == (len(PREFIXES), 7)  # left-padded to the longest prefix
    # candidates: the last label (repeat), blank, eos, an id outside the CTC vocabulary, others
    cands = torch.tensor([[(p[-1] if p else 1), 0, eos, 11, 2, 5] for p in PREFIXES])
    scores, new = scorer.score(states, cands)
    assert scores.shape == cands.shape
    worst = 0.0
    for b, prefix in enumerate(PREFIXES):
        ext, end = prefix_logprobs(x, prefix)
        base = _ref_prefix_logprob(x, prefix)
        for k, c in enumerate(cands[b].tolist()):
            if c == eos:
                want = float(end) - base
            elif c == 0 or c >= 8:
                want = NEG_INF
            else:
                want = float(ext[c]) - base
            got = float(scores[b, k])
            assert _close(got, want, 1e-10), (prefix, c, got, want)
            if math.isfinite(want):
                worst = max(worst, abs(got - want))
    assert worst < 1e-10
    # select some extensions (flat indices b·K + k), eos and a repeat included
    k = cands.shape[1]
    picks = [0 * k + 4, 2 * k + 0, 3 * k + 2, 5 * k + 5, 1 * k + 2, 4 * k + 0]
    kept = scorer.select(new, torch.tensor(picks))
    for row, flat in enumerate(picks):
        b, j = divmod(flat, k)
        c = int(cands[b, j])
        want_prefix = PREFIXES[b] if c == eos else (*PREFIXES[b], c)
        got = kept.state(row)
        ref = initial_state(x, want_prefix)
        assert got.prefix == want_prefix
        assert _max_err(got.gamma_n, ref.gamma_n) < 1e-12 and _max_err(got.gamma_b, ref.gamma_b) < 1e-12
        assert _max_err(got.chain_psi, ref.chain_psi) < 1e-12 and _max_err(got.chain_b, ref.chain_b) < 1e-12
    # plain row selection
    assert kept.select([1, 1, 0]).prefixes == (kept.prefixes[1], kept.prefixes[1], kept.prefixes[0])


def test_extend_candidates_batched_equals_single() -> None:
    x = _posteriors(22, 8, 7)
    states = initial_batch(x, PREFIXES[:5])
    cands = torch.tensor([[1, 2, 3, 4], [1, 6, 0, 2], [1, 5, 5, 3], [2, 3, 4, 5], [1, 4, 5, 6]])
    ext, children = extend_candidates(states, cands)
    assert torch.equal(ext, candidate_logprobs(states, cands))
    assert len(children) == cands.numel()
    for b in range(len(states)):
        ext1, kids1 = extend_state(states.state(b), cands[b])
        assert _max_err(ext1, ext[b]) < 1e-12
        ref_ext, _ = prefix_logprobs(x, PREFIXES[b])
        assert _max_err(ext1, ref_ext[cands[b]]) < 1e-12
        for j in range(cands.shape[1]):
            one, many = kids1.state(j), children.state(b * cands.shape[1] + j)
            assert one.prefix == many.prefix
            assert _max_err(one.gamma_n, many.gamma_n) < 1e-12
            assert _max_err(one.gamma_b, many.gamma_b) < 1e-12
    # the blank candidate of row 1 gives a dead state that stays dead when frames are added
    dead = children.state(1 * 4 + 2)
    assert torch.isneginf(dead.gamma_n).all() and dead.log_prefix == NEG_INF
    more = extend_frames(dead, _posteriors(23, 3, 7))
    assert torch.isneginf(more.gamma_n).all() and torch.isneginf(more.gamma_b).all()


def _assert_states_equal(a: CtcPrefixBatch, b: CtcPrefixBatch, tol: float = 1e-12) -> float:
    assert a.prefixes == b.prefixes and a.frames == b.frames
    errs = [
        _max_err(a.gamma_n, b.gamma_n),
        _max_err(a.gamma_b, b.gamma_b),
        _max_err(a.chain_n[:, -1], b.chain_n[:, -1]),
        _max_err(a.chain_b[:, -1], b.chain_b[:, -1]),
        _max_err(a.log_prefix, b.log_prefix),
        _max_err(a.log_end, b.log_end),
        _max_err(a.log_probs, b.log_probs),
    ]
    assert max(errs) <= tol, errs
    return max(errs)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    t=st.integers(0, 14),
    cuts=st.lists(st.integers(0, 14), max_size=4),
    prefixes=st.lists(st.lists(st.integers(1, 4), max_size=7).map(tuple), min_size=1, max_size=3),
)
@example(seed=0, t=10, cuts=[0, 0, 4, 4, 7], prefixes=[(1, 1), (), (2, 3, 2, 3)])
def test_extend_frames_equals_recompute(seed: int, t: int, cuts: list[int], prefixes: list[tuple]) -> None:
    x = torch.from_numpy(_posteriors(seed, t, 5))
    bounds = [0, *sorted(min(c, t) for c in cuts), t]
    state = initial_batch(x[: bounds[1]], prefixes)
    single = initial_state(x[: bounds[1]], prefixes[0])
    for lo, hi in itertools.pairwise(bounds[1:]):
        state = extend_frames(state, x[lo:hi])
        single = extend_frames(single, x[lo:hi])
    _assert_states_equal(state, initial_batch(x, prefixes))
    _assert_states_equal(CtcPrefixBatch.stack([single]), initial_batch(x, prefixes[:1]))


def test_extend_frames_after_scoring_and_selecting() -> None:
    """Children made by the scorer carry their ancestors' frontier, so they can be extended with new frames."""
    x = torch.from_numpy(_posteriors(31, 16, 6))
    scorer = CtcPrefixScorer(blank=0, eos=5)
    states = scorer.init_state(x[:6], prefix=[2])
    states = scorer.select(states, [0, 0, 0])
    _, new = scorer.score(states, torch.tensor([[2, 3], [1, 4], [5, 3]]))
    kept = scorer.select(new, torch.tensor([0, 3, 4, 1]))  # (2,2), (2,4), (2) eos, (2,3)
    assert kept.prefixes == ((2, 2), (2, 4), (2,), (2, 3))
    _, new = scorer.score(kept, torch.tensor([[1], [4], [3], [3]]))
    kept = scorer.select(new, torch.arange(4))
    for lo, hi in [(6, 7), (7, 7), (7, 12), (12, 16)]:
        kept = scorer.extend_frames(kept, x[lo:hi])
    _assert_states_equal(kept, initial_batch(x, list(kept.prefixes)))


def test_extend_frames_with_full_posteriors_keeps_a_reference() -> None:
    x = torch.from_numpy(_posteriors(32, 12, 6))
    start = initial_batch(x[:5], [(1, 1), (2,)])
    copied = extend_frames(start, x[5:])
    shared = extend_frames(start, x[5:], full_log_probs=x)
    assert shared.log_probs is x
    assert _assert_states_equal(copied, shared, tol=0.0) == 0.0
    with pytest.raises(ValueError):
        extend_frames(start, x[5:], full_log_probs=x[:11])


def test_joint_scores_telescope_to_prefix_and_full_probabilities() -> None:
    """Summing the scorer's Δ's along a hypothesis gives log p(h…) − log p(forced…), and log p(h) after <eos>."""
    x = _posteriors(41, 12, 6)
    eos = 5
    scorer = CtcPrefixScorer(blank=0, eos=eos)
    forced = (3,)
    states = scorer.init_state(x, forced)
    path = [1, 1, 4, 2]
    total = 0.0
    for i, c in enumerate(path):
        d, new = scorer.score(states, torch.tensor([[c, eos]]))
        total += float(d[0, 0])
        states = scorer.select(new, [0])
        want = _ref_prefix_logprob(x, (*forced, *path[: i + 1])) - _ref_prefix_logprob(x, forced)
        assert math.isclose(total, want, abs_tol=1e-10)
    d, _ = scorer.score(states, torch.tensor([[eos]]))
    _, end = prefix_logprobs(x, (*forced, *path))
    assert math.isclose(total + float(d[0, 0]), float(end) - _ref_prefix_logprob(x, forced), abs_tol=1e-10)


def test_log_odds_end_batched_and_from_candidates() -> None:
    x = _posteriors(51, 10, 6)
    scorer = CtcPrefixScorer(blank=0)
    prefixes = [(), (1,), (2, 2), (3, 4, 1)]
    states = initial_batch(x, prefixes)
    c_att = [1, 1, 3, 5]
    odds = scorer.log_odds_end(states, c_att)
    for b, p in enumerate(prefixes):
        assert math.isclose(float(odds[b]), log_odds_end(x, p, c_att[b]), abs_tol=1e-12)
        ext, end = prefix_logprobs(x, p)
        assert math.isclose(float(odds[b]), float(end - ext[c_att[b]]), abs_tol=1e-10)
    _, cand = scorer.score(states, torch.tensor(c_att)[:, None])
    assert _max_err(states.log_end - cand.ext[:, 0], odds) < 1e-12


def test_stack_state_roundtrip() -> None:
    x = _posteriors(61, 7, 7)
    singles = [initial_state(x, p) for p in PREFIXES]
    batch = CtcPrefixBatch.stack(singles)
    for s, r in zip(singles, batch.unbind(), strict=True):
        assert s.prefix == r.prefix
        assert torch.equal(s.chain_n, r.chain_n) and torch.equal(s.chain_psi, r.chain_psi)
        assert torch.equal(s.gamma_n, r.gamma_n) and torch.equal(s.gamma_b, r.gamma_b)
        assert s.frames == 7
