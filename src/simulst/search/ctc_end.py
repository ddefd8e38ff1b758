"""The CTC online policy's end test (Polák et al., CUNI-KIT IWSLT 2023, §2.3 and §3.5), a stop rule of the search.

Instead of re-generating the output until it agrees with itself (LA-n), the search of each chunk asks a CTC output
after each token (or word) whether the audio read so far is used up:

    log Odds_end(g) = log p_ctc(g⊕<eos>|X) − log p_ctc(g⊕c_att…|X),   c_att = argmax_{c≠eos} p_att(c|g, X)

(eq. 5: ``p_ctc(g⊕<eos>|X)`` = γ_T^(n)(g) + γ_T^(b)(g), the probability that g is *all* the audio says;
``p_ctc(g⊕c…|X)`` the CTC prefix probability that it goes on with c). When log Odds_end(g) > C_end the search of
this chunk stops, and g *minus its last token* is committed (the last token is the one most likely produced from
a cut word at the chunk's end). C_end in [−2, 2] works across models (paper §2.3); C_end = +inf never stops early.
The word-level odds of a character head live on a much larger scale (see ``DEFAULT_C_END_WORD``).

The two halves live where they act: :class:`CtcEndRule` here is the :class:`~simulst.search.stopping.StopRule`
that the greedy / beam search asks before every expansion on its best hypothesis; the policy
(:class:`~simulst.policies.ctc_end.CtcEnd`) commits the searched best hypothesis minus its last token and hands
this rule to the searcher.

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

The forward variables are recomputed for each chunk (a full-context encoder changes old frames) from
the committed prefix, then extended incrementally label by label as the hypothesis grows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from simulst.errors import OptionError
from simulst.models.base import CtcLabels, DecoderModel, Encoded, Tokenizer
from simulst.scorers.ctc_forward import PrefixForward, log_odds
from simulst.search.stopping import StopCheck, StopRule
from simulst.types import Costs

ODDS = ("next", "any")
# Default C_end when none is given. Token level: the paper's middle value (§2.3: C_end in [-2, 2] works across its
# models). Word level with the character head: a word-level log Odds_end is a sum over many frames and characters,
# so it spans about -150..+50 (a word of speech the hypothesis leaves unexplained costs tens of nats) and [-2, 2]
# holds few decisions; -20 is the best trade-off measured on the shared English set (bench/results/ctc_policy.md).
DEFAULT_C_END_TOKEN = 0.0
DEFAULT_C_END_WORD = -20.0


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


def _best_non_eos(next_log_probs: torch.Tensor, eos: int) -> int:
    logp = next_log_probs.clone()
    logp[eos] = -math.inf
    return int(torch.argmax(logp))


class _EndCheck(StopCheck):
    """The CTC forward variables of one chunk and C_end."""

    def __init__(self, threshold: float, log_probs: torch.Tensor, blank: int, eos: int, costs: Costs) -> None:
        self.threshold = threshold
        self.forward = PrefixForward(log_probs, blank)
        self.eos = eos
        self.costs = costs

    def next_token(self, next_log_probs: torch.Tensor) -> int | None:
        """c_att, the decoder's best non-``<eos>`` next token; None when C_end = +inf (never stop)."""
        return None if self.threshold == math.inf else _best_non_eos(next_log_probs, self.eos)


class _TokenCheck(_EndCheck):
    """Same vocabulary: eq. 5 after every token."""

    def __call__(self, tokens: Sequence[int], next_log_probs: torch.Tensor, state: object) -> bool:
        c_att = self.next_token(next_log_probs)
        if c_att is None:
            return False
        self.forward.set(tokens)
        odds = log_odds(self.forward.log_end(len(tokens)), self.forward.log_next(len(tokens), c_att))
        return _count(self.costs, odds > self.threshold)


class _WordCheck(_EndCheck):
    """Another vocabulary: at word boundaries, on the re-tokenised word prefix."""

    def __init__(self, threshold: float, odds: str, log_probs: torch.Tensor, labels: CtcLabels,
                 tokenizer: Tokenizer, eos: int, costs: Costs) -> None:
        super().__init__(threshold, log_probs, labels.blank, eos, costs)
        self.odds = odds
        self.labels = labels
        self.tokenizer = tokenizer

    def __call__(self, tokens: Sequence[int], next_log_probs: torch.Tensor, state: object) -> bool:
        c_att = self.next_token(next_log_probs)
        if c_att is None or not self.tokenizer.starts_word(c_att):  # g ends inside a word: wait for it to end
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
    costs.count("ctc_checks")
    if stop:
        costs.count("ctc_stops")
    return stop
