"""The CTC online policy (Polák et al., CUNI-KIT IWSLT 2023, §2.3 and §3.5; SPEC §4).

Instead of re-generating the output until it agrees with itself (LA-n), the search of each chunk asks a CTC output
after each token (or word) whether the audio read so far is used up:

    log Odds_end(g) = log p_ctc(g⊕<eos>|X) − log p_ctc(g⊕c_att…|X),   c_att = argmax_{c≠eos} p_att(c|g, X)

(eq. 5: ``p_ctc(g⊕<eos>|X)`` = γ_T^(n)(g) + γ_T^(b)(g), the probability that g is *all* the audio says;
``p_ctc(g⊕c…|X)`` the CTC prefix probability that it goes on with c). When log Odds_end(g) > C_end the search of
this chunk stops, and g *minus its last token* is committed (the last token is the one most likely produced from
a cut word at the chunk's end). C_end in [−2, 2] works across models (paper §2.3); C_end = +inf never stops early.
The word-level odds of a character head live on a much larger scale (see ``DEFAULT_C_END_WORD``).

The two halves live where they act:

* :class:`CtcEndRule` is a :class:`~simulst.search.stopping.StopRule`: the greedy/beam searches of
  :mod:`simulst.search.ctc` ask it after every step, on their best hypothesis.
* :class:`CtcEnd` is the :class:`~simulst.policies.base.Policy`: it commits the searched best hypothesis minus its
  last token. The session then cuts the commitment back to whole words (SPEC §1) - so "drop the last token" and
  "drop the last word" coincide: after a word-level stop at g = w_1 … w_k the dropped token belongs to w_k, and
  w_k is held back entirely.

**Two kinds of CTC head** (``Encoded.ctc_labels.token_level``):

* *Same vocabulary* (a CTC head over the decoder's tokens, as the paper's blockwise models have): the rule runs
  after every token exactly as eq. 5, with c_att the decoder's best non-<eos> next token.
* *Another vocabulary* (paper §3.5: the offline model borrowed the CTC output of another model; here the
  character head on Whisper's frozen encoder, :mod:`simulst.ctc`): the rule runs only when the hypothesis has
  completed a word, i.e. when the decoder's best non-<eos> next token starts a new word. The word-level prefix is
  *re-tokenised* for the CTC: g_ctc = labels(normalised text of g). What c_att means there: the paper approximates
  the sum over every continuation (eq. 4) by the one the attention decoder predicts; at a word boundary the
  decoder predicts a *word*, whose CTC-side start is the word separator followed by the word's first label
  (``" c"`` for the next word "country" with characters; ``"▁co"``-like pieces with a SentencePiece CTC
  vocabulary). So c_att is that label sequence - ``ctc_odds="next"``, the default:

      log Odds_end(g) = log p_ctc(g_ctc|X) − log p_ctc(g_ctc ⊕ " " ⊕ first(w_next) …|X)

  (at the very start, g = ∅, there is no separator: c_att = first(w_next)). ``ctc_odds="any"`` uses eq. 4
  itself: with CTC prefix probabilities the sum over all continuations is exact and cheap,
  Σ_{c≠eos} p_ctc(g⊕c…) = p_ctc(g…) − p_ctc(g) (the prefix probability of g minus g alone), so no c_att is
  needed: the odds that the audio ends after g against *anything* following (another word or a longer last word).
  As in the paper, a head of another vocabulary is not used for rescoring (joint scoring needs the same labels).

The forward variables are recomputed for each chunk (a full-context encoder changes old frames, SPEC §4) from
the committed prefix, then extended incrementally label by label as the hypothesis grows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from simulst.errors import OptionError
from simulst.models.base import CtcLabels, DecoderModel, Encoded, Tokenizer
from simulst.policies.base import Policy
from simulst.search.stopping import StopCheck, StopRule
from simulst.types import Costs, Hypothesis

ODDS = ("next", "any")
# Default C_end when none is given. Token level: the paper's middle value (§2.3: C_end in [-2, 2] works across its
# models). Word level with the character head: a word-level log Odds_end is a sum over many frames and characters,
# so it spans about -150..+50 (a word of speech the hypothesis leaves unexplained costs tens of nats) and [-2, 2]
# holds few decisions; -20 is the best trade-off measured on the shared English set (bench/results/ctc_policy.md).
DEFAULT_C_END_TOKEN = 0.0
DEFAULT_C_END_WORD = -20.0


class CtcEnd(Policy):
    """Commit the chunk's best hypothesis minus its last token (the search stopped where the CTC said to)."""

    def stable_prefix(self, hyps: Sequence[Hypothesis]) -> tuple[int, ...]:
        best = hyps[0].tokens
        return tuple(best[: max(0, len(best) - 1)])


class CtcEndRule(StopRule):
    """Stop a chunk's search when log Odds_end(g) > C_end (see the module notes).

    Args:
        threshold: C_end (+inf: never stop); None: ``DEFAULT_C_END_TOKEN`` or ``DEFAULT_C_END_WORD`` by the head.
        odds: ``next`` (c_att: the start of the decoder's next word) or ``any`` (eq. 4, every continuation);
            only used with a head of another vocabulary.
    """

    def __init__(self, threshold: float | None, odds: str = "next") -> None:
        if threshold is not None and math.isnan(threshold):
            raise OptionError("C_end must be a number")
        if odds not in ODDS:
            raise OptionError(f"unknown CTC odds {odds!r}; choose one of {', '.join(ODDS)}")
        self.threshold = threshold
        self.odds = odds

    def start(self, model: DecoderModel, enc: Encoded, prefix: Sequence[int], costs: Costs) -> StopCheck:
        """The check for one chunk; raises OptionError when the encoding has no CTC posteriors."""
        if enc.ctc_log_probs is None or enc.ctc_labels is None:
            raise OptionError("the CTC policy needs a model with a CTC head (--ctc-head PATH; Whisper tiny.en has "
                              "a shipped one)")
        if enc.ctc_labels.token_level:
            threshold = DEFAULT_C_END_TOKEN if self.threshold is None else self.threshold
            return _TokenCheck(threshold, enc.ctc_log_probs, enc.ctc_labels.blank, model.eos_id, costs)
        threshold = DEFAULT_C_END_WORD if self.threshold is None else self.threshold
        return _WordCheck(threshold, self.odds, enc.ctc_log_probs, enc.ctc_labels, model.tokenizer, model.eos_id,
                          costs)


_LOG_FLOOR = -1.0e5  # log a_t clamp inside the closed-form scan (exp(-1e5) is 0 in float64 anyway)


def _scan(log_a: np.ndarray, log_u: np.ndarray) -> np.ndarray:
    """y_t = a_t·(y_{t−1} + u_t), t = 1..T, from y_0 = 0 (log y_0 = −inf), in log space, no Python loop over t:
    log y_t = A_t + logcumsumexp_{s≤t}(log u_s − A_{s−1}), A_t = Σ_{r≤t} log a_r (as :mod:`simulst.scorers.ctc_prefix`).
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
    sequence that leaves the current one is recomputed from the common prefix. Same recursions as
    :mod:`simulst.scorers.ctc_prefix` (SPEC §4), specialised for this access pattern: a fraction of a millisecond
    per label instead of the general batched scorer's milliseconds (which would make the policy cost about as much
    as the decoder steps it saves). Agreement with the scorer is tested.

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


def _best_non_eos(next_log_probs: torch.Tensor, eos: int) -> int:
    logp = next_log_probs.clone()
    logp[eos] = -math.inf
    return int(torch.argmax(logp))


class _TokenCheck(StopCheck):
    """Same vocabulary: eq. 5 after every token."""

    def __init__(self, threshold: float, log_probs: torch.Tensor, blank: int, eos: int, costs: Costs) -> None:
        self.threshold = threshold
        self.forward = PrefixForward(log_probs, blank)
        self.eos = eos
        self.costs = costs

    def __call__(self, tokens: Sequence[int], next_log_probs: torch.Tensor) -> bool:
        if self.threshold == math.inf:
            return False
        c_att = _best_non_eos(next_log_probs, self.eos)
        self.forward.set(tokens)
        odds = log_odds(self.forward.log_end(len(tokens)), self.forward.log_next(len(tokens), c_att))
        return _count(self.costs, odds > self.threshold)


class _WordCheck(StopCheck):
    """Another vocabulary: at word boundaries, on the re-tokenised word prefix."""

    def __init__(self, threshold: float, odds: str, log_probs: torch.Tensor, labels: CtcLabels,
                 tokenizer: Tokenizer, eos: int, costs: Costs) -> None:
        self.threshold = threshold
        self.odds = odds
        self.labels = labels
        self.tokenizer = tokenizer
        self.forward = PrefixForward(log_probs, labels.blank)
        self.eos = eos
        self.costs = costs

    def __call__(self, tokens: Sequence[int], next_log_probs: torch.Tensor) -> bool:
        if self.threshold == math.inf:
            return False
        c_att = _best_non_eos(next_log_probs, self.eos)
        if not self.tokenizer.starts_word(c_att):
            return False  # g ends inside a word: wait for the word to complete
        text = self.tokenizer.decode(tokens)
        g = self.labels.encode(text)
        start = self.next_word_start(text, g, c_att) if self.odds == "next" else None
        if start is None:
            self.forward.set(g)
            log_continue = self.forward.log_continue_any(len(g))
        else:  # keep the separator(s) in the forward state: the next check's g most likely starts with them
            self.forward.set([*g, *start[:-1]])
            log_continue = self.forward.log_next(len(g) + len(start) - 1, start[-1])
        return _count(self.costs, log_odds(self.forward.log_end(len(g)), log_continue) > self.threshold)

    def next_word_start(self, text: str, g: Sequence[int], c_att: int) -> list[int] | None:
        """The CTC labels that start the decoder's next word after g: separator(s) + the word's first label.

        None when the next piece has no labels of its own (e.g. a dash) or re-tokenising g with it does not
        extend g's labels: then eq. 4's exact sum over every continuation is used instead.
        """
        piece = self.tokenizer.decode([c_att])
        full = self.labels.encode(text + piece)
        word = self.labels.encode(piece)
        if not word or len(full) <= len(g) or list(full[: len(g)]) != list(g):
            return None
        separators = max(0, len(full) - len(g) - len(word))
        return list(full[len(g) : len(g) + separators + 1])


def _count(costs: Costs, stop: bool) -> bool:
    costs.extra["ctc_checks"] = costs.extra.get("ctc_checks", 0) + 1
    if stop:
        costs.extra["ctc_stops"] = costs.extra.get("ctc_stops", 0) + 1
    return stop
