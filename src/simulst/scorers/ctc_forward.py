"""CTC forward variables of one growing label sequence: the single-prefix CTC API, used by the CTC online policy.

The end test of the CTC online policy (P. Polák et al., "CUNI-KIT system for simultaneous track at IWSLT 2023",
IWSLT 2023, §2.3, :mod:`simulst.search.ctc_end`) needs, for one hypothesis g that grows word by word,
log p_ctc(g|X) (g is all the audio says; eq. 2), log p_ctc(g⊕c…|X) (g goes on with c; eq. 3, the CTC prefix
probability of A. Graves, PhD thesis, TU Munich 2008) and, for eq. 4, Σ_{c≠eos} p_ctc(g⊕c…|X).
:class:`PrefixForward` gives them from the forward variables γ_t^(n), γ_t^(b) (Graves et al., ICML 2006) of every
prefix of the sequence, extended label by label with the recursions of Watanabe et al., "Hybrid CTC/attention
architecture for end-to-end speech recognition", IEEE JSTSP 2017; :func:`log_odds` turns two of them into
log Odds_end(g) (eqs. 4-5).  The notation, recursions and −inf conventions are written out in
:mod:`simulst.scorers.ctc_prefix`.

This is one of two implementations of those recursions, on purpose.  The batched
:class:`~simulst.scorers.ctc_prefix.CtcPrefixScorer` (torch, B hypotheses × K candidates on the posteriors'
device, for joint CTC/attention scoring) would cost several times more per label for this access pattern (one
sequence, one label at a time, on the CPU).  Both evaluate the recursions with the same closed-form scan (no Python
loop over frames), each in its own backend: this NumPy float64 one (:func:`_scan`) and the torch one
(:func:`simulst.scorers.ctc_prefix._scan`) round differently (``np.logaddexp.accumulate`` vs
``torch.logcumsumexp``), and the policy's decisions are pinned bit for bit by golden outputs, so neither routes
through the other.  Do not change the arithmetic or its order here.  The two implementations are tested against
each other (to ~1e-9) and each against brute-force enumeration of all alignments (tests/test_ctc_prefix.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

_LOG_FLOOR = -1.0e5  # log a_t clamp inside the closed-form scan (exp(-1e5) is 0 in float64 anyway)


def _scan(log_a: np.ndarray, log_u: np.ndarray) -> np.ndarray:
    """y_t = a_t·(y_{t−1} + u_t), t = 1..T, from y_0 = 0 (log y_0 = −inf), in log space, no Python loop over t:
    log y_t = A_t + logcumsumexp_{s≤t}(log u_s − A_{s−1}), A_t = Σ_{r≤t} log a_r.  The NumPy twin of
    :func:`simulst.scorers.ctc_prefix._scan` (which also takes y_0 and a batch); kept separate, see the module notes.
    """
    cum = np.cumsum(np.maximum(log_a, _LOG_FLOOR))
    prev = np.concatenate(([0.0], cum[:-1]))
    y = cum + np.logaddexp.accumulate(log_u - prev)
    y[np.isneginf(log_a)] = -np.inf
    return y


class PrefixForward:
    """CTC forward variables of one growing label sequence and all its prefixes, in NumPy float64.

    The policy asks, within one chunk, about one hypothesis that grows word by word (beam search: the best beam,
    which may switch). This keeps γ_t^(n), γ_t^(b) (t = 0..T) of every prefix g_{1:j} of the current labels and
    extends them label by label with the closed-form scan, O(1) vectorised NumPy operations per label; a label
    sequence that leaves the current one is recomputed from the common prefix. Same recursions as the batched
    :class:`~simulst.scorers.ctc_prefix.CtcPrefixScorer`, specialised for this access pattern (see the module
    notes); their agreement is tested.

    Conventions: a label that is the blank or outside [0, V) is accepted and makes the sequence impossible from
    there on (all its quantities −inf), and so does a sequence longer than the frames allow; nothing returns NaN.

    Attributes:
        labels: the current label sequence g (g_{1:j} is its prefix of length j).
        gn, gb: index j holds log γ_t^(n)(g_{1:j}), log γ_t^(b)(g_{1:j}) for t = 0..T, arrays of shape (T + 1,).
        psi: index j holds log p_ctc(g_{1:j}…|X), the prefix probability (0 for j = 0).

    Args:
        log_probs: (T, V) CTC log-posteriors.
        blank: the blank id.
    """

    def __init__(self, log_probs: torch.Tensor, blank: int) -> None:
        self.x = log_probs.detach().to("cpu", torch.float64).numpy()
        self.blank = blank
        self.x_blank = self.x[:, blank]
        frames = self.x.shape[0]
        self.labels: list[int] = []
        # index j holds the prefix of length j; γ_0^(b)(∅) = 1, γ_t^(b)(∅) = Π_{r≤t} p(z_r = blank)
        self.gn: list[np.ndarray] = [np.full(frames + 1, -np.inf)]
        self.gb: list[np.ndarray] = [np.concatenate(([0.0], np.cumsum(self.x_blank)))]
        self.psi: list[float] = [0.0]  # log p_ctc(g_{1:j}…|X)

    def set(self, labels: Sequence[int]) -> None:
        """Make ``labels`` the current sequence (reusing the common prefix with the previous one)."""
        common = 0
        while common < min(len(labels), len(self.labels)) and labels[common] == self.labels[common]:
            common += 1
        del self.labels[common:], self.gn[common + 1 :], self.gb[common + 1 :], self.psi[common + 1 :]
        for label in labels[common:]:
            self._push(int(label))

    def _phi(self, j: int, c: int) -> np.ndarray:
        """Φ_t(g_{1:j}) for t = 1..T, for the next label c."""
        gb, gn = self.gb[j][:-1], self.gn[j][:-1]
        return gb if j > 0 and self.labels[j - 1] == c else np.logaddexp(gb, gn)

    def _push(self, c: int) -> None:
        j = len(self.labels)
        phi = self._phi(j, c)
        x_c = self.x[:, c] if 0 <= c < self.x.shape[1] and c != self.blank else np.full(self.x.shape[0], -np.inf)
        n = np.concatenate(([-np.inf], _scan(x_c, phi)))
        b = np.concatenate(([-np.inf], _scan(self.x_blank, n[:-1])))
        self.labels.append(c)
        self.gn.append(n)
        self.gb.append(b)
        self.psi.append(_logsumexp(phi + x_c))

    def log_end(self, j: int) -> float:
        """log p_ctc(g_{1:j}|X) = log(γ_T^(n) + γ_T^(b)): the first j labels are all the audio says."""
        return float(np.logaddexp(self.gn[j][-1], self.gb[j][-1]))

    def log_next(self, j: int, c: int) -> float:
        """log p_ctc(g_{1:j}⊕c…|X) = log Σ_t Φ_t(g_{1:j})·p(z_t = c|X)."""
        if not 0 <= c < self.x.shape[1] or c == self.blank:
            return -math.inf
        return _logsumexp(self._phi(j, c) + self.x[:, c])

    def log_continue_any(self, j: int) -> float:
        """log Σ_{c≠eos} p_ctc(g_{1:j}⊕c…|X) = log(p_ctc(g_{1:j}…|X) − p_ctc(g_{1:j}|X)) (eq. 4's denominator)."""
        log_prefix, log_end = self.psi[j], self.log_end(j)
        if log_end >= log_prefix:
            return -math.inf
        return log_prefix + math.log1p(-math.exp(log_end - log_prefix))


def _logsumexp(v: np.ndarray) -> float:
    top = float(np.max(v)) if v.size else -math.inf
    if top == -math.inf:
        return -math.inf
    return top + math.log(float(np.sum(np.exp(v - top))))


def log_odds(log_end: float, log_continue: float) -> float:
    """log_end − log_continue, with 0/0 -> +inf (g cannot be produced from the frames read: stop)."""
    if log_end == -math.inf and log_continue == -math.inf:
        return math.inf
    return log_end - log_continue
