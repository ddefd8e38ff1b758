"""Batched CTC prefix scoring for joint CTC/attention beam search (Watanabe et al. 2017, after Graves 2008).

References: A. Graves, S. Fernández, F. Gomez, J. Schmidhuber, "Connectionist temporal classification", ICML 2006
(forward variables); A. Graves, "Supervised sequence labelling with recurrent neural networks", PhD thesis, TU Munich
2008 (CTC prefix probability, prefix search decoding); S. Watanabe, T. Hori, S. Kim, J. R. Hershey, T. Hayashi,
"Hybrid CTC/attention architecture for end-to-end speech recognition", IEEE JSTSP 11(8), 2017 (the γ^(n), γ^(b)
recursions of a growing prefix, joint scoring); P. Polák et al., "CUNI-KIT system for simultaneous track at IWSLT
2023", IWSLT 2023, §2.2 eqs. 1–3 (the notation below) and §2.3 eqs. 4–5 (the CTC online policy built on them).

Notation.  ``x_t(k) = log p(z_t = k | X)`` are the CTC log-posteriors of frame t = 1..T (row t−1 of a (T, V)
tensor).  For a label prefix g (no blanks):

* γ_t^(n)(g), γ_t^(b)(g) — the forward probabilities that the first t frames collapse to exactly g, with the
  path ending in a non-blank (n) or a blank (b) frame.  Initialisation (t = 0, the empty input):
  γ_0^(b)(∅) = 1, γ_0^(n)(∅) = 0, and γ_0^(n)(g) = γ_0^(b)(g) = 0 for g ≠ ∅.
* Φ_t(g) = γ_{t−1}^(b)(g) + (0 if last(g) = c else γ_{t−1}^(n)(g)) — the probability that frames 1..t−1
  collapse to g *and* a new label c may start at frame t (a repeated label needs a blank in between).
* p_ctc(g⊕c…|X) = Σ_{t=1..T} Φ_t(g)·p(z_t = c|X)       — prefix probability: labellings that START with g⊕c
  (2023 eq. 3).
* p_ctc(g|X)     = γ_T^(n)(g) + γ_T^(b)(g)              — g as the complete labelling (= p_ctc(g⊕<eos>|X), eq. 2).
* Recursions for h = g⊕c:  γ_t^(n)(h) = p(z_t=c|X)·(γ_{t−1}^(n)(h) + Φ_t(g)),
                           γ_t^(b)(h) = p(z_t=blank|X)·(γ_{t−1}^(b)(h) + γ_{t−1}^(n)(h)).
  Invariant: p_ctc(g…|X) = p_ctc(g|X) + Σ_{c≠blank} p_ctc(g⊕c…|X)  (eq. 1).

Everything is computed in log space in float64 on the device of the posteriors.  The two recursions are
linear first-order recurrences y_t = a_t·(y_{t−1} + u_t); instead of a Python loop over frames they are
evaluated in closed form, log y_t = A_t + logcumsumexp_{s≤t}(log u_s − A_{s−1}) with A_t = Σ_{r≤t} log a_r
(see :func:`_scan`), so one prefix extension costs a handful of vectorised tensor operations whatever T is.
The price is a rounding error that grows with |A_T| (about 1e-12 in log space for T = 1500 frames of
log-probabilities around −5), which is why results agree with a frame-by-frame recursion to ~1e-12 rather
than bit for bit.

Probability-zero conventions: a prefix that cannot be produced (longer than the frames allow, T = 0) and a
candidate that is the blank or an id outside the CTC vocabulary get log-probability −inf; nothing returns NaN.

Two implementations of these recursions, on purpose.  This module is the *batched* one: B hypotheses × K
candidates at once, torch on the posteriors' device, children materialised only for the candidates a beam keeps —
what joint CTC/attention beam search needs (:mod:`simulst.search.joint`).
:class:`simulst.scorers.ctc_forward.PrefixForward` is the *single-sequence* one (the single-prefix API): one label
sequence growing label by label in NumPy float64 on the CPU, the access pattern of the CTC online policy's end test
(:mod:`simulst.search.ctc_end`), several times cheaper per label than a batch of one here.  Both evaluate the same
closed-form scan, each in its own backend, because torch's ``logcumsumexp`` and NumPy's ``logaddexp.accumulate``
round differently: routing the policy through this module would change its bit-for-bit decisions (pinned by golden
outputs), and routing this module through NumPy would take it off the posteriors' device (GPU).  The two are tested
against each other (to ~1e-9) and each against brute-force enumeration of all alignments (tests/test_ctc_prefix.py).

Public API
----------
* :class:`CtcPrefixScorer` — a partial scorer for joint CTC/attention beam search (ESPnet-style deltas):
  ``init_state``, ``score``, ``select``.
* :class:`CtcPrefixBatch` — the forward state of B prefixes (``log_prefix``, ``log_end``, ``select``).
* :class:`CtcCandidates` — scored, not yet materialised extensions (what ``score`` returns for ``select``).

The single-prefix quantities of the CTC online policy — log p_ctc(g|X), log p_ctc(g⊕c…|X), Σ_c p_ctc(g⊕c…|X) and
log Odds_end(g) — are :class:`~simulst.scorers.ctc_forward.PrefixForward` and
:func:`~simulst.scorers.ctc_forward.log_odds`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import torch

__all__ = ["CtcCandidates", "CtcPrefixBatch", "CtcPrefixScorer"]

_F64 = torch.float64
_NEG_INF = float("-inf")
# log a_t below this floor is clamped inside the closed-form scan so that the cumulative sums stay finite
# (exp(-1e5) is 0 in float64 anyway); entries with a_t = 0 exactly are set back to -inf afterwards.
_LOG_FLOOR = -1.0e5

LogProbs: TypeAlias = torch.Tensor | np.ndarray


# ----------------------------------------------------------------------------------------------------
# states


@dataclass(frozen=True, eq=False)
class CtcPrefixBatch:
    """CTC forward states of B label prefixes over the same frames 1..T (one row per hypothesis).

    Attributes:
        prefixes: B tuples of labels (CTC vocabulary ids; a row that selected the blank or an id outside the
            vocabulary as a candidate is a dead state, all −inf, and so are its extensions).
        gamma_n: (B, T) float64, log γ_t^(n)(g_i), t = 1..T.
        gamma_b: (B, T) float64, log γ_t^(b)(g_i).
        log_prefix: (B,) float64, log p_ctc(g_i…|X), the prefix probabilities (0 for the empty prefix).
        log_probs: (T, V) shared CTC log-posteriors (a reference; any float dtype).
        blank: id of the CTC blank.
    """

    prefixes: tuple[tuple[int, ...], ...]
    gamma_n: torch.Tensor
    gamma_b: torch.Tensor
    log_prefix: torch.Tensor
    log_probs: torch.Tensor
    blank: int = 0

    def __post_init__(self) -> None:
        b, t = len(self.prefixes), self.log_probs.shape[0]
        if self.gamma_n.shape != (b, t) or self.gamma_b.shape != (b, t):
            raise ValueError(f"gamma_n/gamma_b must have shape ({b}, {t}), got {tuple(self.gamma_n.shape)}")
        if self.log_prefix.shape != (b,):
            raise ValueError(f"log_prefix must have shape ({b},), got {tuple(self.log_prefix.shape)}")

    def __len__(self) -> int:
        return len(self.prefixes)

    @property
    def frames(self) -> int:
        """T, the number of frames the states cover."""
        return int(self.log_probs.shape[0])

    @property
    def log_end(self) -> torch.Tensor:
        """(B,) log p_ctc(g_i|X) = log(γ_T^(n)(g_i) + γ_T^(b)(g_i)) (= log p_ctc(g_i⊕<eos>|X))."""
        if self.frames == 0:  # γ_0: 1 for ∅ (blank-ending), 0 otherwise
            return torch.tensor(
                [0.0 if not p else _NEG_INF for p in self.prefixes], dtype=_F64, device=self.gamma_n.device
            )
        return torch.logaddexp(self.gamma_n[:, -1], self.gamma_b[:, -1])

    def select(self, indices: torch.Tensor | Sequence[int]) -> CtcPrefixBatch:
        """Keep (and reorder, repeat) rows ``indices`` (B',)."""
        idx = torch.as_tensor(indices, dtype=torch.long, device=self.gamma_n.device).reshape(-1)
        return CtcPrefixBatch(
            prefixes=tuple(self.prefixes[i] for i in idx.tolist()),
            gamma_n=self.gamma_n[idx],
            gamma_b=self.gamma_b[idx],
            log_prefix=self.log_prefix[idx],
            log_probs=self.log_probs,
            blank=self.blank,
        )


@dataclass(frozen=True, eq=False)
class CtcCandidates:
    """Scored, not yet materialised extensions g_b⊕c_{b,k} of a batch (from :meth:`CtcPrefixScorer.score`).

    Only the γ's of the candidates a beam search keeps are computed, by :meth:`CtcPrefixScorer.select`.

    Attributes:
        parents: the B parent states.
        candidates: (B, K) long, candidate token ids.
        ext: (B, K) float64, log p_ctc(g_b⊕c_{b,k}…|X) (−inf for blank / ids outside the CTC vocabulary), or
            log p_ctc(g_b|X) where c_{b,k} is ``eos``.
        eos: the end-of-sentence id whose selection keeps the parent state (None: no such id).
    """

    parents: CtcPrefixBatch
    candidates: torch.Tensor
    ext: torch.Tensor
    eos: int | None = None


# ----------------------------------------------------------------------------------------------------
# core recursions


def _as_log_probs(log_probs: LogProbs) -> torch.Tensor:
    """(T, V) tensor view of ``log_probs`` (numpy accepted); raises ValueError on another rank or dtype."""
    x = torch.from_numpy(log_probs) if isinstance(log_probs, np.ndarray) else log_probs
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or not x.is_floating_point():
        raise ValueError("log_probs must be a (T, V) floating-point tensor or array")
    return x


def _scan(log_a: torch.Tensor, log_u: torch.Tensor, y0: torch.Tensor) -> torch.Tensor:
    """Solve y_t = a_t·(y_{t−1} + u_t), t = 1..Δ, from y_0 = ``y0``, in log space without a loop over t.

    Closed form: y_t = Σ_{s≤t} u'_s·Π_{r=s..t} a_r with u'_1 = u_1 + y_0, i.e.
    log y_t = A_t + logcumsumexp_{s≤t}(log u'_s − A_{s−1}),  A_t = Σ_{r≤t} log a_r, A_0 = 0.
    (The NumPy twin for one sequence, y_0 = 0, is :func:`simulst.scorers.ctc_forward._scan`.)

    Args:
        log_a: (B, Δ) or (Δ,) log a_t (finite or −inf; clamped to a floor for the cumulative sum).
        log_u: (B, Δ) log u_t.
        y0: (B,) log y_0.

    Returns:
        (B, Δ) log y_t.
    """
    u = torch.cat([torch.logaddexp(log_u[:, :1], y0[:, None]), log_u[:, 1:]], dim=1)
    a = log_a.clamp(min=_LOG_FLOOR).expand_as(u)
    cum = torch.cumsum(a, dim=1)  # A_t
    cum_prev = torch.cat([torch.zeros_like(cum[:, :1]), cum[:, :-1]], dim=1)  # A_{t−1}
    y = cum + torch.logcumsumexp(u - cum_prev, dim=1)
    return torch.where(torch.isneginf(log_a).expand_as(y), _NEG_INF, y)


def _slot_step(
    prev_n: torch.Tensor,
    prev_b: torch.Tensor,
    same: torch.Tensor,
    x_c: torch.Tensor,
    x_blank: torch.Tensor,
    n0: torch.Tensor,
    b0: torch.Tensor,
    psi0: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Forward variables of h = g⊕c over frames t = 1..T, from those of g and h's values at t = 0.

    Args:
        prev_n: (B, T) log γ_{t−1}^(n)(g) for t = 1..T.
        prev_b: (B, T) log γ_{t−1}^(b)(g).
        same: (B,) bool, last(g) = c (then only blank-ending paths of g may continue with c).
        x_c: (B, T) log p(z_t = c|X).
        x_blank: (T,) log p(z_t = blank|X).
        n0, b0: (B,) log γ_0^(n)(h), log γ_0^(b)(h).
        psi0: (B,) the prefix probability of h contributed before frame 1 (−inf for h ≠ ∅).

    Returns:
        (n, b, psi): (B, T) log γ_t^(n)(h), (B, T) log γ_t^(b)(h), (B,) log p_ctc(h…|X).
    """
    # Φ_t(g) = γ_{t−1}^(b)(g) + (0 if last(g) = c else γ_{t−1}^(n)(g))
    phi = torch.where(same[:, None], prev_b, torch.logaddexp(prev_b, prev_n))
    # p(h…) += Σ_t Φ_t(g)·p(z_t = c)
    psi = torch.logaddexp(psi0, torch.logsumexp(phi + x_c, dim=1))
    # γ_t^(n)(h) = p(z_t = c)·(γ_{t−1}^(n)(h) + Φ_t(g))
    n = _scan(x_c, phi, n0)
    # γ_t^(b)(h) = p(z_t = blank)·(γ_{t−1}^(b)(h) + γ_{t−1}^(n)(h))
    n_prev = torch.cat([n0[:, None], n[:, :-1]], dim=1)
    b = _scan(x_blank, n_prev, b0)
    return n, b, psi


def _gather_labels(x: torch.Tensor, labels: torch.Tensor, blank: int) -> torch.Tensor:
    """x (T, V) gathered at ``labels`` (...) → (..., T), x's dtype; −inf where a label is blank, < 0 or ≥ V."""
    v = x.shape[1]
    valid = (labels >= 0) & (labels < v) & (labels != blank)
    g = x[:, labels.clamp(0, max(v - 1, 0)).reshape(-1)].T.reshape(*labels.shape, x.shape[0])
    return torch.where(valid[..., None], g, _NEG_INF)


def _check_prefix(prefix: Sequence[int], vocab: int, blank: int) -> tuple[int, ...]:
    out = tuple(int(c) for c in prefix)
    for c in out:
        if c == blank or not 0 <= c < vocab:
            raise ValueError(f"prefix label {c} is the blank or outside the CTC vocabulary (V = {vocab})")
    return out


def _root(x: torch.Tensor, blank: int) -> CtcPrefixBatch:
    """The state of ∅ over all frames of ``x`` (T, V): γ_t^(n)(∅) = 0, γ_t^(b)(∅) = Π_{r≤t} p(z_r = blank)."""
    t = x.shape[0]
    neg = torch.full((1, t), _NEG_INF, dtype=_F64, device=x.device)
    zero = torch.zeros(1, dtype=_F64, device=x.device)
    # γ^(b)(∅) by the scan from γ_0^(b)(∅) = 1 (u_t = γ_{t−1}^(n)(∅) = 0), as every other γ^(b)
    gamma_b = _scan(x[:, blank].to(_F64), neg, zero) if t else neg
    return CtcPrefixBatch(prefixes=((),), gamma_n=neg, gamma_b=gamma_b, log_prefix=zero, log_probs=x, blank=blank)


def _previous_gammas(batch: CtcPrefixBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) log γ_{t−1}^(n)(g), log γ_{t−1}^(b)(g) for t = 1..T, γ_0 included (γ_0^(b)(∅) = 1, else 0)."""
    b_rows = len(batch)
    dev = batch.gamma_n.device
    g0_n = torch.full((b_rows, 1), _NEG_INF, dtype=_F64, device=dev)
    g0_b = torch.tensor([[0.0 if not p else _NEG_INF] for p in batch.prefixes], dtype=_F64, device=dev)
    g0_b = g0_b.reshape(b_rows, 1)
    t = batch.frames
    prev_n = torch.cat([g0_n, batch.gamma_n[:, :-1]], dim=1)[:, :t]
    prev_b = torch.cat([g0_b, batch.gamma_b[:, :-1]], dim=1)[:, :t]
    return prev_n, prev_b


def _last_labels(batch: CtcPrefixBatch) -> torch.Tensor:
    """(B,) last label of each prefix, −1 for ∅."""
    lasts = [p[-1] if p else -1 for p in batch.prefixes]
    return torch.tensor(lasts, dtype=torch.long, device=batch.gamma_n.device)


def _candidate_logprobs(states: CtcPrefixBatch, candidates: torch.Tensor) -> torch.Tensor:
    """log p_ctc(g_b⊕c_{b,k}…|X) for B prefixes and K candidates each, vectorised over all of them.

    Args:
        states: B prefixes g_b over T frames.
        candidates: (B, K) long token ids; blank and ids outside [0, V) get −inf.

    Returns:
        (B, K) float64.  Memory: one (B, K, T) float64 temporary — pass the pre-beam top-K, not the vocabulary.
    """
    cands = torch.as_tensor(candidates, dtype=torch.long, device=states.gamma_n.device)
    if cands.dim() != 2 or cands.shape[0] != len(states):
        raise ValueError(f"candidates must have shape ({len(states)}, K), got {tuple(cands.shape)}")
    b_rows, k = cands.shape
    if states.frames == 0 or k == 0:
        return torch.full((b_rows, k), _NEG_INF, dtype=_F64, device=cands.device)
    x64_c = _gather_labels(states.log_probs, cands, states.blank).to(_F64)  # (B, K, T)
    prev_n, prev_b = _previous_gammas(states)
    phi_full = torch.logaddexp(prev_b, prev_n)  # Φ_t(g) for c ≠ last(g)
    same = cands == _last_labels(states)[:, None]  # (B, K)
    phi = torch.where(same[..., None], prev_b[:, None, :], phi_full[:, None, :])  # Φ_t(g) per candidate
    return torch.logsumexp(phi + x64_c, dim=-1)  # Σ_t Φ_t(g)·p(z_t = c)


def _children(
    parents: CtcPrefixBatch, rows: torch.Tensor, tokens: torch.Tensor, ext: torch.Tensor | None
) -> CtcPrefixBatch:
    """Materialise the states of g_{rows[i]}⊕tokens[i] (N children).  ``ext`` (N,) reuses already computed
    prefix probabilities (so that scores telescope exactly); None recomputes them.  A blank or out-of-vocabulary
    token gives a dead state (all −inf) whose children are dead too."""
    par = parents.select(rows)
    prev_n, prev_b = _previous_gammas(par)
    x_c = _gather_labels(par.log_probs, tokens, par.blank).to(_F64)  # (N, T)
    x_blank = par.log_probs[:, par.blank].to(_F64)
    same = tokens == _last_labels(par)
    neg = torch.full((len(par),), _NEG_INF, dtype=_F64, device=prev_n.device)  # γ_0(h) = 0 for h ≠ ∅
    if par.frames == 0:
        n = b = torch.zeros((len(par), 0), dtype=_F64, device=prev_n.device)
        psi = neg
    else:
        n, b, psi = _slot_step(prev_n, prev_b, same, x_c, x_blank, neg, neg, neg)
    if ext is not None:
        psi = ext.to(_F64)
    return CtcPrefixBatch(
        prefixes=tuple((*p, int(c)) for p, c in zip(par.prefixes, tokens.tolist(), strict=True)),
        gamma_n=n,
        gamma_b=b,
        log_prefix=psi,
        log_probs=par.log_probs,
        blank=par.blank,
    )


# ----------------------------------------------------------------------------------------------------
# beam-search scorer


class CtcPrefixScorer:
    """CTC prefix scorer for joint CTC/attention beam search (Watanabe et al. 2017; ESPnet's CTCPrefixScorer).

    Per step, a hypothesis g extended by candidate c gets

        joint(g⊕c) = joint(g) + (1−λ)·log p_att(c|g, X) + λ·Δ_ctc(g, c),
        Δ_ctc(g, c) = log p_ctc(g⊕c…|X) − log p_ctc(g…|X)        for c ≠ <eos>,
        Δ_ctc(g, <eos>) = log p_ctc(g|X) − log p_ctc(g…|X).

    :meth:`score` returns Δ_ctc.  Why the difference: the Δ's telescope, so the accumulated CTC part of a
    running hypothesis h is exactly log p_ctc(h…|X) − log p_ctc(forced…|X) (the prefix probability: h may
    still go on), and for a finished one it is log p_ctc(h|X) − log p_ctc(forced…|X) (the full-sequence
    probability, as the <eos> term replaces the prefix probability).  Hence the accumulated joint score is
    the proper joint log-likelihood (1−λ)·log p_att(h) + λ·log p_ctc(h…) at every step — the same quantity
    for hypotheses of any length, unlike adding log p_ctc(g⊕c…) itself at every step (which would count the
    CTC prefix probability L times). With a forced prefix the constant log p_ctc(forced…) is the same for all
    hypotheses and does not matter.

    The scorer holds no stream state: everything lives in the :class:`CtcPrefixBatch` objects.
    Usage::

        scorer = CtcPrefixScorer(blank=0, eos=eos_id)
        st = scorer.init_state(enc.ctc_log_probs, prefix=committed)  # batch of 1
        st = scorer.select(st, [0] * beam)
        d, cand = scorer.score(st, topk_ids)  # (B, K) Δ_ctc of the pre-beam top-K candidates
        joint = beam_scores[:, None] + (1 - lam) * topk_att + lam * d
        best = joint.flatten().topk(beam).indices  # flat indices b·K + k
        st = scorer.select(cand, best)  # γ computed for the kept ones only
    """

    def __init__(self, blank: int = 0, eos: int | None = None) -> None:
        """Args: blank — the CTC blank id; eos — the decoder's end id (its Δ uses log p_ctc(g|X)), or None."""
        self.blank = blank
        self.eos = eos

    def init_state(self, log_probs: LogProbs, prefix: Sequence[int] = ()) -> CtcPrefixBatch:
        """A batch of one state: ``prefix`` (e.g. the committed tokens) over the (T, V) posteriors.

        Computed from scratch, label by label (O(len(prefix)) vectorised operations on (1, T) tensors).

        Args:
            log_probs: (T, V) CTC log-posteriors (tensor or numpy array; T may be 0).
            prefix: labels (no blank, ids < V; ValueError otherwise).
        """
        x = _as_log_probs(log_probs)
        state = _root(x, self.blank)
        first = torch.zeros(1, dtype=torch.long, device=x.device)
        for c in _check_prefix(prefix, x.shape[1], self.blank):
            state = _children(state, first, torch.tensor([c], dtype=torch.long, device=x.device), None)
        return state

    def score(self, states: CtcPrefixBatch, candidates: torch.Tensor) -> tuple[torch.Tensor, CtcCandidates]:
        """Δ_ctc of K candidates for each of B hypotheses, vectorised (no loop over frames or candidates).

        Args:
            states: B hypotheses.
            candidates: (B, K) long token ids (the pre-beam top-K attention candidates; may include eos).

        Returns:
            (scores, new_states): scores (B, K) float64 = Δ_ctc(g_b, c_{b,k}) (−inf for blank / ids outside
            the CTC vocabulary / prefixes the CTC cannot produce); new_states, the lazily materialised
            extensions, to be passed to :meth:`select` with flat indices b·K + k.
        """
        cands = torch.as_tensor(candidates, dtype=torch.long, device=states.gamma_n.device)
        ext = _candidate_logprobs(states, cands)
        if self.eos is not None:
            ext = torch.where(cands == self.eos, states.log_end[:, None], ext)
        prev = states.log_prefix[:, None]
        scores = torch.where(torch.isneginf(prev), _NEG_INF, ext - prev)
        return scores, CtcCandidates(parents=states, candidates=cands, ext=ext, eos=self.eos)

    def select(self, states: CtcPrefixBatch | CtcCandidates, indices: torch.Tensor | Sequence[int]) -> CtcPrefixBatch:
        """Keep hypotheses ``indices`` (B',).

        For a :class:`CtcPrefixBatch`, row indices.  For :class:`CtcCandidates`, flat indices b·K + k into
        the (B, K) candidates: the γ's of the kept extensions are computed here (O(1) vectorised operations
        on (B', T) tensors).  Selecting <eos> keeps the parent's state (prefix unchanged: the hypothesis is
        finished); selecting a blank / out-of-vocabulary id gives a dead state (log-probabilities −inf).
        """
        if isinstance(states, CtcPrefixBatch):
            return states.select(indices)
        k = states.candidates.shape[1]
        idx = torch.as_tensor(indices, dtype=torch.long, device=states.candidates.device).reshape(-1)
        rows = torch.div(idx, k, rounding_mode="floor")
        tokens = states.candidates.reshape(-1)[idx]
        children = _children(states.parents, rows, tokens, states.ext.reshape(-1)[idx])
        if states.eos is None:
            return children
        is_eos = tokens == states.eos
        if not bool(is_eos.any()):
            return children
        par = states.parents.select(rows)
        return CtcPrefixBatch(
            prefixes=tuple(
                p if e else c for p, c, e in zip(par.prefixes, children.prefixes, is_eos.tolist(), strict=True)
            ),
            gamma_n=torch.where(is_eos[:, None], par.gamma_n, children.gamma_n),
            gamma_b=torch.where(is_eos[:, None], par.gamma_b, children.gamma_b),
            log_prefix=torch.where(is_eos, par.log_prefix, children.log_prefix),
            log_probs=children.log_probs,
            blank=children.blank,
        )
