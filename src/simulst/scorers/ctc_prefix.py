"""CTC prefix scoring (Watanabe et al. 2017, after Graves 2008) and the CTC end-of-audio odds (2023 §2.2–2.3).

Notation (SPEC §4, 2023 paper eqs. 1–5).  ``x_t(k) = log p(z_t = k | X)`` are the CTC log-posteriors of frame
t = 1..T (row t−1 of a (T, V) tensor).  For a label prefix g (no blanks):

* γ_t^(n)(g), γ_t^(b)(g) — the forward probabilities that the first t frames collapse to exactly g, with the
  path ending in a non-blank (n) or a blank (b) frame.  Initialisation (t = 0, the empty input):
  γ_0^(b)(∅) = 1, γ_0^(n)(∅) = 0, and γ_0^(n)(g) = γ_0^(b)(g) = 0 for g ≠ ∅.
* Φ_t(g) = γ_{t−1}^(b)(g) + (0 if last(g) = c else γ_{t−1}^(n)(g)) — the probability that frames 1..t−1
  collapse to g *and* a new label c may start at frame t (a repeated label needs a blank in between).
* p_ctc(g⊕c…|X) = Σ_{t=1..T} Φ_t(g)·p(z_t = c|X)       — prefix probability: labellings that START with g⊕c.
* p_ctc(g|X)     = γ_T^(n)(g) + γ_T^(b)(g)              — g as the complete labelling (= p_ctc(g⊕<eos>|X)).
* Recursions for h = g⊕c:  γ_t^(n)(h) = p(z_t=c|X)·(γ_{t−1}^(n)(h) + Φ_t(g)),
                           γ_t^(b)(h) = p(z_t=blank|X)·(γ_{t−1}^(b)(h) + γ_{t−1}^(n)(h)).
  Invariant: p_ctc(g…|X) = p_ctc(g|X) + Σ_{c≠blank} p_ctc(g⊕c…|X).

Everything is computed in log space in float64 on the device of the posteriors.  The two recursions are
linear first-order recurrences y_t = a_t·(y_{t−1} + u_t); instead of a Python loop over frames they are
evaluated in closed form, log y_t = A_t + logcumsumexp_{s≤t}(log u_s − A_{s−1}) with A_t = Σ_{r≤t} log a_r
(see :func:`_scan`), so one prefix extension costs a handful of vectorised tensor operations whatever T is.
The price is a rounding error that grows with |A_T| (about 1e-12 in log space for T = 1500 frames of
log-probabilities around −5), which is why results agree with a frame-by-frame recursion to ~1e-12 rather
than bit for bit.

Probability-zero conventions: a prefix that cannot be produced (longer than the frames allow, T = 0, or
containing the blank / an id outside the CTC vocabulary) gets log-probability −inf; no function returns NaN.

Public API
----------
* :func:`prefix_logprobs` — ext (V,) = log p(prefix⊕c…) for every label c, and end = log p(prefix).
* :class:`CtcPrefixState` (one prefix) and :class:`CtcPrefixBatch` (B prefixes) — incremental forward state;
  :func:`initial_state`, :func:`initial_batch`, :func:`candidate_logprobs`, :func:`extend_candidates`,
  :func:`extend_state`, :func:`extend_frames`.
* :class:`CtcPrefixScorer` — a partial scorer for joint CTC/attention beam search (ESPnet-style deltas).
* :func:`log_odds_end` — the CTC online policy's statistic log Odds_end(g) (SPEC §4).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias, overload

import numpy as np
import torch

__all__ = [
    "CtcCandidates",
    "CtcPrefixBatch",
    "CtcPrefixScorer",
    "CtcPrefixState",
    "candidate_logprobs",
    "extend_candidates",
    "extend_frames",
    "extend_state",
    "initial_batch",
    "initial_state",
    "log_odds_end",
    "prefix_logprobs",
]

_F64 = torch.float64
_NEG_INF = float("-inf")
# log a_t below this floor is clamped inside the closed-form scan so that the cumulative sums stay finite
# (exp(-1e5) is 0 in float64 anyway); entries with a_t = 0 exactly are set back to -inf afterwards.
_LOG_FLOOR = -1.0e5
# prefix_logprobs evaluates the (T, V) candidate table in column blocks of at most this many elements.
_BLOCK_ELEMENTS = 1 << 22

LogProbs: TypeAlias = torch.Tensor | np.ndarray


# ----------------------------------------------------------------------------------------------------
# states


@dataclass(frozen=True, eq=False)
class CtcPrefixState:
    """CTC forward state of ONE label prefix g = ``prefix`` over frames 1..T.

    Attributes:
        prefix: the labels of g (CTC vocabulary ids, no blank).
        gamma_n: (T,) float64, log γ_t^(n)(g) for t = 1..T.
        gamma_b: (T,) float64, log γ_t^(b)(g) for t = 1..T.
        chain_n: (L+1,) float64, log γ_T^(n)(g_{1:l}) for every prefix g_{1:l} of g, l = 0..L (l = 0 is ∅).
            At T = 0 this is the γ_0 initialisation.  Needed by :func:`extend_frames`: extending γ(g) to new
            frames needs γ of all of g's ancestors at those frames, which are recomputed from their values at
            frame T.
        chain_b: (L+1,) float64, log γ_T^(b)(g_{1:l}), l = 0..L.
        chain_psi: (L+1,) float64, log p_ctc(g_{1:l}…|X_{1:T}), l = 0..L (prefix probabilities; 0 for ∅).
        log_probs: (T, V) the CTC log-posteriors the state covers (a reference, not a copy; any float dtype).
        blank: id of the CTC blank.
    """

    prefix: tuple[int, ...]
    gamma_n: torch.Tensor
    gamma_b: torch.Tensor
    chain_n: torch.Tensor
    chain_b: torch.Tensor
    chain_psi: torch.Tensor
    log_probs: torch.Tensor
    blank: int = 0

    def __post_init__(self) -> None:
        t = self.log_probs.shape[0]
        if self.gamma_n.shape != (t,) or self.gamma_b.shape != (t,):
            raise ValueError(f"gamma_n/gamma_b must have shape ({t},), got {tuple(self.gamma_n.shape)}")
        if not self.chain_n.shape == self.chain_b.shape == self.chain_psi.shape == (len(self.prefix) + 1,):
            raise ValueError("chain_n/chain_b/chain_psi must have shape (len(prefix) + 1,)")

    @property
    def frames(self) -> int:
        """T, the number of frames the state covers."""
        return int(self.log_probs.shape[0])

    @property
    def log_prefix(self) -> float:
        """log p_ctc(g…|X): probability that the labelling starts with g (0.0 for the empty prefix)."""
        return float(self.chain_psi[-1])

    @property
    def log_end(self) -> float:
        """log p_ctc(g|X) = log(γ_T^(n)(g) + γ_T^(b)(g)): g as the complete labelling (= g⊕<eos>)."""
        return float(torch.logaddexp(self.chain_n[-1], self.chain_b[-1]))


@dataclass(frozen=True, eq=False)
class CtcPrefixBatch:
    """CTC forward states of B label prefixes over the same frames 1..T (one row per hypothesis).

    Prefixes may have different lengths: the ``chain_*`` tensors are left-padded with −inf to S = 1 + the
    longest prefix length (a padded slot behaves as an impossible ancestor of ∅, so it changes nothing).

    Attributes:
        prefixes: B tuples of labels.
        gamma_n: (B, T) float64, log γ_t^(n)(g_i), t = 1..T.
        gamma_b: (B, T) float64, log γ_t^(b)(g_i).
        chain_n: (B, S) float64, log γ_T^(n) of the ancestors of g_i; column S−1−l holds the ancestor that
            lacks the last l labels (so column S−1 is g_i itself and column S−1−len(g_i) is ∅).
        chain_b: (B, S) float64, the same for γ_T^(b).
        chain_psi: (B, S) float64, log p_ctc(ancestor…|X) (0 for ∅, −inf for padding).
        log_probs: (T, V) shared CTC log-posteriors (a reference; any float dtype).
        blank: id of the CTC blank.
    """

    prefixes: tuple[tuple[int, ...], ...]
    gamma_n: torch.Tensor
    gamma_b: torch.Tensor
    chain_n: torch.Tensor
    chain_b: torch.Tensor
    chain_psi: torch.Tensor
    log_probs: torch.Tensor
    blank: int = 0

    def __post_init__(self) -> None:
        b, t = len(self.prefixes), self.log_probs.shape[0]
        if self.gamma_n.shape != (b, t) or self.gamma_b.shape != (b, t):
            raise ValueError(f"gamma_n/gamma_b must have shape ({b}, {t}), got {tuple(self.gamma_n.shape)}")
        s = 1 + max((len(p) for p in self.prefixes), default=0)
        if not self.chain_n.shape == self.chain_b.shape == self.chain_psi.shape or self.chain_n.shape[0] != b:
            raise ValueError("chain_n/chain_b/chain_psi must have the same shape (B, S)")
        if self.chain_n.shape[1] < s:
            raise ValueError(f"chain width {self.chain_n.shape[1]} < 1 + longest prefix ({s})")

    def __len__(self) -> int:
        return len(self.prefixes)

    @property
    def frames(self) -> int:
        """T, the number of frames the states cover."""
        return int(self.log_probs.shape[0])

    @property
    def log_prefix(self) -> torch.Tensor:
        """(B,) log p_ctc(g_i…|X), the prefix probabilities (0 for the empty prefix)."""
        return self.chain_psi[:, -1]

    @property
    def log_end(self) -> torch.Tensor:
        """(B,) log p_ctc(g_i|X) = log(γ_T^(n)(g_i) + γ_T^(b)(g_i)) (= log p_ctc(g_i⊕<eos>|X))."""
        return torch.logaddexp(self.chain_n[:, -1], self.chain_b[:, -1])

    @staticmethod
    def stack(states: Sequence[CtcPrefixState]) -> CtcPrefixBatch:
        """A batch of single states.  They must cover the same posteriors (the first one's are kept)."""
        if not states:
            raise ValueError("cannot stack an empty sequence of states")
        first = states[0]
        for s in states:
            if s.log_probs.shape != first.log_probs.shape or s.blank != first.blank:
                raise ValueError("states must cover posteriors of the same shape with the same blank")
        width = 1 + max(len(s.prefix) for s in states)
        return CtcPrefixBatch(
            prefixes=tuple(s.prefix for s in states),
            gamma_n=torch.stack([s.gamma_n for s in states]),
            gamma_b=torch.stack([s.gamma_b for s in states]),
            chain_n=torch.stack([_pad_left(s.chain_n, width) for s in states]),
            chain_b=torch.stack([_pad_left(s.chain_b, width) for s in states]),
            chain_psi=torch.stack([_pad_left(s.chain_psi, width) for s in states]),
            log_probs=first.log_probs,
            blank=first.blank,
        )

    def state(self, i: int) -> CtcPrefixState:
        """The single state of row ``i`` (padding removed)."""
        keep = len(self.prefixes[i]) + 1
        return CtcPrefixState(
            prefix=self.prefixes[i],
            gamma_n=self.gamma_n[i],
            gamma_b=self.gamma_b[i],
            chain_n=self.chain_n[i, -keep:],
            chain_b=self.chain_b[i, -keep:],
            chain_psi=self.chain_psi[i, -keep:],
            log_probs=self.log_probs,
            blank=self.blank,
        )

    def unbind(self) -> list[CtcPrefixState]:
        """All rows as single states."""
        return [self.state(i) for i in range(len(self))]

    def select(self, indices: torch.Tensor | Sequence[int]) -> CtcPrefixBatch:
        """Keep (and reorder, repeat) rows ``indices`` (B',)."""
        idx = torch.as_tensor(indices, dtype=torch.long, device=self.gamma_n.device).reshape(-1)
        prefixes = tuple(self.prefixes[i] for i in idx.tolist())
        width = 1 + max((len(p) for p in prefixes), default=0)
        return CtcPrefixBatch(
            prefixes=prefixes,
            gamma_n=self.gamma_n[idx],
            gamma_b=self.gamma_b[idx],
            chain_n=self.chain_n[idx, -width:],
            chain_b=self.chain_b[idx, -width:],
            chain_psi=self.chain_psi[idx, -width:],
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
        ext: (B, K) float64, log p_ctc(g_b⊕c_{b,k}…|X) (−inf for blank / ids outside the CTC vocabulary).
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


def _pad_left(t: torch.Tensor, width: int) -> torch.Tensor:
    """Left-pad the last dimension of ``t`` with −inf to ``width``."""
    missing = width - t.shape[-1]
    if missing <= 0:
        return t
    pad = torch.full((*t.shape[:-1], missing), _NEG_INF, dtype=t.dtype, device=t.device)
    return torch.cat([pad, t], dim=-1)


def _scan(log_a: torch.Tensor, log_u: torch.Tensor, y0: torch.Tensor) -> torch.Tensor:
    """Solve y_t = a_t·(y_{t−1} + u_t), t = 1..Δ, from y_0 = ``y0``, in log space without a loop over t.

    Closed form: y_t = Σ_{s≤t} u'_s·Π_{r=s..t} a_r with u'_1 = u_1 + y_0, i.e.
    log y_t = A_t + logcumsumexp_{s≤t}(log u'_s − A_{s−1}),  A_t = Σ_{r≤t} log a_r, A_0 = 0.

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
    """Forward variables of h = g⊕c over frames t = T0+1..T0+Δ, from those of g and h's values at T0.

    Args:
        prev_n: (B, Δ) log γ_{t−1}^(n)(g) for t = T0+1..T0+Δ.
        prev_b: (B, Δ) log γ_{t−1}^(b)(g).
        same: (B,) bool, last(g) = c (then only blank-ending paths of g may continue with c).
        x_c: (B, Δ) log p(z_t = c|X).
        x_blank: (Δ,) log p(z_t = blank|X).
        n0, b0: (B,) log γ_{T0}^(n)(h), log γ_{T0}^(b)(h).
        psi0: (B,) log p_ctc(h…|X_{1:T0}).

    Returns:
        (n, b, psi): (B, Δ) log γ_t^(n)(h), (B, Δ) log γ_t^(b)(h), (B,) log p_ctc(h…|X_{1:T0+Δ}).
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


def _label_matrix(prefixes: Sequence[tuple[int, ...]], width: int, device: torch.device) -> torch.Tensor:
    """(B, width) long: the labels of each prefix right-aligned; −1 for ∅ and the padding slots."""
    rows = [[-1] * (width - len(p)) + list(p) for p in prefixes]
    return torch.tensor(rows, dtype=torch.long, device=device).reshape(len(prefixes), width)


def _gather_labels(x: torch.Tensor, labels: torch.Tensor, blank: int) -> torch.Tensor:
    """x (Δ, V) gathered at ``labels`` (...) → (..., Δ), x's dtype; −inf where a label is blank, < 0 or ≥ V."""
    v = x.shape[1]
    valid = (labels >= 0) & (labels < v) & (labels != blank)
    g = x[:, labels.clamp(0, max(v - 1, 0)).reshape(-1)].T.reshape(*labels.shape, x.shape[0])
    return torch.where(valid[..., None], g, _NEG_INF)


def _extend_chain(
    batch: CtcPrefixBatch, new: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Advance every ancestor slot of every row over the Δ new frames ``new`` (Δ, V).

    Loops over the S prefix slots (not over frames): slot l's γ over the new frames needs its parent's γ over
    the frames before (the parent's value at T from the chain, then the parent's freshly computed values).

    Returns:
        (gamma_n, gamma_b, chain_n, chain_b, chain_psi): (B, Δ) new γ's of the rows' own prefixes and the (B,
        S) chains at frame T+Δ.
    """
    dev = new.device
    delta = new.shape[0]
    b_rows, width = batch.chain_n.shape
    labels = _label_matrix(batch.prefixes, width, dev)
    x_lab = _gather_labels(new, labels, batch.blank).to(_F64)  # (B, S, Δ), gathered before the cast
    x_blank = new[:, batch.blank].to(_F64)
    parent_n = torch.full((b_rows, delta), _NEG_INF, dtype=_F64, device=dev)
    parent_b = parent_n
    n = b = parent_n
    cols_n, cols_b, cols_psi = [], [], []
    for slot in range(width):
        if slot == 0:
            same = torch.zeros(b_rows, dtype=torch.bool, device=dev)
        else:
            same = (labels[:, slot] == labels[:, slot - 1]) & (labels[:, slot - 1] >= 0)
        n, b, psi = _slot_step(
            parent_n,
            parent_b,
            same,
            x_lab[:, slot],
            x_blank,
            batch.chain_n[:, slot],
            batch.chain_b[:, slot],
            batch.chain_psi[:, slot],
        )
        cols_n.append(n[:, -1])
        cols_b.append(b[:, -1])
        cols_psi.append(psi)
        # γ_{t−1} of this slot for t = T+1..T+Δ, the "previous" values its child needs
        parent_n = torch.cat([batch.chain_n[:, slot : slot + 1], n[:, :-1]], dim=1)
        parent_b = torch.cat([batch.chain_b[:, slot : slot + 1], b[:, :-1]], dim=1)
    return n, b, torch.stack(cols_n, 1), torch.stack(cols_b, 1), torch.stack(cols_psi, 1)


def _empty_batch(log_probs: torch.Tensor, prefixes: Sequence[tuple[int, ...]], blank: int) -> CtcPrefixBatch:
    """States of ``prefixes`` over zero frames (γ_0 initialisation); ``log_probs`` gives V, dtype, device."""
    b_rows = len(prefixes)
    width = 1 + max((len(p) for p in prefixes), default=0)
    dev = log_probs.device
    chain_n = torch.full((b_rows, width), _NEG_INF, dtype=_F64, device=dev)
    chain_b = chain_n.clone()
    lengths = torch.tensor([len(p) for p in prefixes], dtype=torch.long, device=dev)
    root = (width - 1 - lengths).reshape(-1, 1)  # column of ∅ in each row
    chain_b.scatter_(1, root, 0.0)  # γ_0^(b)(∅) = 1
    chain_psi = chain_b.clone()  # p(∅…) = 1; p(g…|no frames) = 0 for g ≠ ∅
    empty = torch.zeros((b_rows, 0), dtype=_F64, device=dev)
    return CtcPrefixBatch(
        prefixes=tuple(prefixes),
        gamma_n=empty,
        gamma_b=empty,
        chain_n=chain_n,
        chain_b=chain_b,
        chain_psi=chain_psi,
        log_probs=log_probs[:0],
        blank=blank,
    )


def _check_prefix(prefix: Sequence[int], vocab: int, blank: int) -> tuple[int, ...]:
    out = tuple(int(c) for c in prefix)
    for c in out:
        if c == blank or not 0 <= c < vocab:
            raise ValueError(f"prefix label {c} is the blank or outside the CTC vocabulary (V = {vocab})")
    return out


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


# ----------------------------------------------------------------------------------------------------
# public functions


def initial_batch(log_probs: LogProbs, prefixes: Sequence[Sequence[int]], blank: int = 0) -> CtcPrefixBatch:
    """States of ``prefixes`` over all frames of ``log_probs``, computed from scratch.

    Cost: O(S) vectorised operations on (B, T) tensors, S = 1 + the longest prefix.

    Args:
        log_probs: (T, V) CTC log-posteriors (tensor or numpy array; T may be 0).
        prefixes: B label sequences (no blank, ids < V).
        blank: id of the CTC blank.
    """
    x = _as_log_probs(log_probs)
    checked = [_check_prefix(p, x.shape[1], blank) for p in prefixes]
    if not checked:
        raise ValueError("prefixes must not be empty")
    return extend_frames(_empty_batch(x, checked, blank), x)


def initial_state(log_probs: LogProbs, prefix: Sequence[int] = (), blank: int = 0) -> CtcPrefixState:
    """State of one ``prefix`` over all frames of ``log_probs`` (T, V), computed from scratch."""
    return initial_batch(log_probs, [prefix], blank).state(0)


def candidate_logprobs(states: CtcPrefixBatch, candidates: torch.Tensor) -> torch.Tensor:
    """log p_ctc(g_b⊕c_{b,k}…|X) for B prefixes and K candidates each, vectorised over all of them.

    Args:
        states: B prefixes g_b over T frames.
        candidates: (B, K) long token ids; blank and ids outside [0, V) get −inf.

    Returns:
        (B, K) float64.  Memory: one (B, K, T) float64 temporary — pass the pre-beam top-K, not the vocabulary
        (use :func:`prefix_logprobs` for all labels of one prefix).
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
    prefix probabilities (so that scores telescope exactly); None recomputes them."""
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
    last_n = n[:, -1] if par.frames else neg
    last_b = b[:, -1] if par.frames else neg
    return CtcPrefixBatch(
        prefixes=tuple((*p, int(c)) for p, c in zip(par.prefixes, tokens.tolist(), strict=True)),
        gamma_n=n,
        gamma_b=b,
        chain_n=torch.cat([par.chain_n, last_n[:, None]], dim=1),
        chain_b=torch.cat([par.chain_b, last_b[:, None]], dim=1),
        chain_psi=torch.cat([par.chain_psi, psi[:, None]], dim=1),
        log_probs=par.log_probs,
        blank=par.blank,
    )


def extend_candidates(states: CtcPrefixBatch, candidates: torch.Tensor) -> tuple[torch.Tensor, CtcPrefixBatch]:
    """Scores and full states of all B·K extensions g_b⊕c_{b,k}.

    Args:
        states: B prefixes over T frames.
        candidates: (B, K) long token ids.

    Returns:
        (ext, children): ext (B, K) float64 = log p_ctc(g_b⊕c_{b,k}…|X); children, a batch of B·K rows, row
        b·K + k holding g_b⊕c_{b,k} (γ's of shape (B·K, T)).  A blank or out-of-vocabulary candidate gives
        ext = −inf and a dead state (all −inf) that stays dead.
    """
    cands = torch.as_tensor(candidates, dtype=torch.long, device=states.gamma_n.device)
    ext = candidate_logprobs(states, cands)
    k = cands.shape[1]
    rows = torch.arange(len(states), device=cands.device).repeat_interleave(k)
    return ext, _children(states, rows, cands.reshape(-1), ext.reshape(-1))


def extend_state(
    state: CtcPrefixState, candidates: torch.Tensor | Sequence[int]
) -> tuple[torch.Tensor, CtcPrefixBatch]:
    """:func:`extend_candidates` for one prefix: candidates (K,) → ext (K,) and a batch of K child states."""
    cands = torch.as_tensor(candidates, dtype=torch.long).reshape(1, -1)
    ext, children = extend_candidates(CtcPrefixBatch.stack([state]), cands)
    return ext[0], children


@overload
def extend_frames(
    state: CtcPrefixState, new_log_probs: LogProbs, full_log_probs: LogProbs | None = None
) -> CtcPrefixState: ...
@overload
def extend_frames(
    state: CtcPrefixBatch, new_log_probs: LogProbs, full_log_probs: LogProbs | None = None
) -> CtcPrefixBatch: ...
def extend_frames(
    state: CtcPrefixState | CtcPrefixBatch, new_log_probs: LogProbs, full_log_probs: LogProbs | None = None
) -> CtcPrefixState | CtcPrefixBatch:
    """Extend state(s) over T frames with Δ new frames whose predecessors never change (blockwise encoders).

    Equals recomputing from scratch on the concatenated posteriors (to float rounding, ~1e-12): γ_t of every
    ancestor of g is continued from its value at frame T (kept in ``chain_*``), so the cost is O(L)
    vectorised operations on Δ-frame tensors, independent of T.  The prefix probabilities p(g…)
    (``log_prefix``) grow too.

    Args:
        state: a :class:`CtcPrefixState` or :class:`CtcPrefixBatch` over T frames.
        new_log_probs: (Δ, V) log-posteriors of frames T+1..T+Δ (Δ may be 0).
        full_log_probs: optional (T+Δ, V) posteriors of all frames, when the caller holds them already (e.g.
            ``Encoded.ctc_log_probs`` of the whole audio read so far): the new state keeps a reference to them
            instead of concatenating (an O(T·V) copy that dominates the cost for large vocabularies).  Their
            first T rows are trusted to equal the state's posteriors.

    Returns:
        The same kind of state over T+Δ frames, whose ``log_probs`` is ``full_log_probs`` or the concatenation.
    """
    new = _as_log_probs(new_log_probs)
    if new.shape[1] != state.log_probs.shape[1]:
        raise ValueError(f"vocabulary mismatch: {new.shape[1]} new vs {state.log_probs.shape[1]} old")
    full = None if full_log_probs is None else _as_log_probs(full_log_probs)
    if full is not None and full.shape != (state.frames + new.shape[0], new.shape[1]):
        raise ValueError(f"full_log_probs must have shape ({state.frames + new.shape[0]}, {new.shape[1]})")
    if new.shape[0] == 0:
        return state
    batch = CtcPrefixBatch.stack([state]) if isinstance(state, CtcPrefixState) else state
    new = new.to(device=batch.log_probs.device)
    n, b, chain_n, chain_b, chain_psi = _extend_chain(batch, new)
    if full is not None:
        log_probs = full
    elif batch.frames == 0:
        log_probs = new
    else:
        log_probs = torch.cat([batch.log_probs, new.to(batch.log_probs.dtype)], dim=0)
    out = CtcPrefixBatch(
        prefixes=batch.prefixes,
        gamma_n=torch.cat([batch.gamma_n, n], dim=1),
        gamma_b=torch.cat([batch.gamma_b, b], dim=1),
        chain_n=chain_n,
        chain_b=chain_b,
        chain_psi=chain_psi,
        log_probs=log_probs,
        blank=batch.blank,
    )
    return out.state(0) if isinstance(state, CtcPrefixState) else out


def prefix_logprobs(log_probs: LogProbs, prefix: Sequence[int], blank: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """CTC prefix and full-sequence log-probabilities of one prefix g, for all next labels at once.

    Args:
        log_probs: (T, V) CTC log-posteriors log p(z_t = k|X) (tensor or numpy array; T may be 0).
        prefix: g, label ids (no blank).
        blank: id of the CTC blank.

    Returns:
        (ext, end): ext (V,) float64 with ext[c] = log p_ctc(g⊕c…|X) = log Σ_t Φ_t(g)·p(z_t = c|X) and
        ext[blank] = −inf; end () float64 = log p_ctc(g|X) = log(γ_T^(n)(g) + γ_T^(b)(g)).
    """
    x = _as_log_probs(log_probs)
    state = initial_batch(x, [prefix], blank)
    t, v = x.shape
    end = state.log_end[0]
    ext = torch.full((v,), _NEG_INF, dtype=_F64, device=x.device)
    if t == 0:
        return ext, end
    prev_n, prev_b = _previous_gammas(state)
    phi_full = torch.logaddexp(prev_b[0], prev_n[0])  # (T,) Φ_t(g) for c ≠ last(g)
    block = max(1, _BLOCK_ELEMENTS // t)
    for lo in range(0, v, block):  # column blocks bound the (T, block) temporary; not a per-label loop
        ext[lo : lo + block] = torch.logsumexp(phi_full[:, None] + x[:, lo : lo + block].to(_F64), dim=0)
    g = state.prefixes[0]
    if g:
        # c = last(g): Φ_t(g) = γ_{t−1}^(b)(g) only (a repeated label needs a blank in between)
        ext[g[-1]] = torch.logsumexp(prev_b[0] + x[:, g[-1]].to(_F64), dim=0)
    ext[blank] = _NEG_INF
    return ext, end


def _odds(log_end: torch.Tensor, log_ext: torch.Tensor) -> torch.Tensor:
    """log_end − log_ext with 0/0 → +inf (a prefix the CTC cannot produce from the frames read: stop)."""
    both = torch.isneginf(log_end) & torch.isneginf(log_ext)
    return torch.where(both, float("inf"), log_end - log_ext)


def log_odds_end(log_probs: LogProbs, prefix: Sequence[int], c_att: int, blank: int = 0) -> float:
    """log Odds_end(g) = log p_ctc(g⊕<eos>|X) − log p_ctc(g⊕c_att…|X)  (2023 eq. 5, SPEC §4).

    The CTC online policy stops decoding the chunk (and drops g's last token) when this exceeds C_end.

    Args:
        log_probs: (T, V) CTC log-posteriors.
        prefix: g (no blank).
        c_att: argmax_{c≠eos} p_att(c|g, X), as a CTC vocabulary id.
        blank: id of the CTC blank.

    Returns:
        A float in [−inf, +inf].  +inf when p_ctc(g⊕c_att…) = 0 < p_ctc(g) and also when both are 0 (g cannot
        be produced from the frames read so far — the hypothesis has run past the audio, so stopping is
        right); −inf when p_ctc(g) = 0 < p_ctc(g⊕c_att…).  Never NaN.
    """
    x = _as_log_probs(log_probs)
    state = initial_batch(x, [prefix], blank)
    ext = candidate_logprobs(state, torch.tensor([[int(c_att)]], device=x.device))[0, 0]
    return float(_odds(state.log_end[0], ext))


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
        st = st.select([0] * beam)  # or scorer.select(st, zeros)
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
        """A batch of one state: ``prefix`` (e.g. the committed tokens) over the (T, V) posteriors."""
        return initial_batch(log_probs, [prefix], self.blank)

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
        ext = candidate_logprobs(states, cands)
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
        width = children.chain_n.shape[1]

        def pick(child: torch.Tensor, parent: torch.Tensor) -> torch.Tensor:
            return torch.where(is_eos[:, None], _pad_left(parent, width), child)

        merged = CtcPrefixBatch(
            prefixes=tuple(
                p if e else c for p, c, e in zip(par.prefixes, children.prefixes, is_eos.tolist(), strict=True)
            ),
            gamma_n=pick(children.gamma_n, par.gamma_n),
            gamma_b=pick(children.gamma_b, par.gamma_b),
            chain_n=pick(children.chain_n, par.chain_n),
            chain_b=pick(children.chain_b, par.chain_b),
            chain_psi=pick(children.chain_psi, par.chain_psi),
            log_probs=children.log_probs,
            blank=children.blank,
        )
        return merged.select(torch.arange(len(merged)))  # trims the chain padding if only eos rows were long

    def extend_frames(
        self, states: CtcPrefixBatch, new_log_probs: LogProbs, full_log_probs: LogProbs | None = None
    ) -> CtcPrefixBatch:
        """:func:`extend_frames` (blockwise encoders: old frames fixed; pass ``full_log_probs`` to avoid a copy).

        ``log_prefix`` changes with the new frames, so a beam's accumulated CTC part should be re-based on the
        new ``states.log_prefix`` (see the class notes).
        """
        return extend_frames(states, new_log_probs, full_log_probs)

    def log_odds_end(self, states: CtcPrefixBatch, c_att: torch.Tensor | Sequence[int]) -> torch.Tensor:
        """(B,) log Odds_end(g_b) = log p_ctc(g_b|X) − log p_ctc(g_b⊕c_att,b…|X) for c_att (B,) (SPEC §4).

        If c_att was among the candidates just scored, the same value is
        ``states.log_end[b] − ext[b, k]`` with ``ext`` from :attr:`CtcCandidates.ext` — no extra work.
        Conventions as :func:`log_odds_end`.
        """
        c = torch.as_tensor(c_att, dtype=torch.long, device=states.gamma_n.device).reshape(-1, 1)
        ext = candidate_logprobs(states, c)[:, 0]
        return _odds(states.log_end, ext)
