"""Greedy and beam search with a CTC output: joint CTC/attention scoring and/or an early-stop rule.

* **Joint scoring** (Watanabe et al. 2017; 2023 paper §2.2; SPEC §3): a candidate c of hypothesis g scores
  (1−λ)·log p_att(c|g, X) + λ·Δ_ctc(g, c), Δ_ctc from :class:`~simulst.scorers.ctc_prefix.CtcPrefixScorer`
  (the increments telescope to λ·log p_ctc(g…|X)); CTC is evaluated only on the ``pre_beam`` best attention
  candidates of each hypothesis (ESPnet's pre-beam; 1.5 × beam, at least 4). It needs a CTC head over the
  decoder's own vocabulary (``Encoded.ctc_labels.token_level``); with λ = 0 no CTC is computed and the searches
  are exactly :class:`~simulst.search.GreedySearch` / :class:`~simulst.search.BeamSearch`.
* **Stop rule** (:class:`~simulst.search.stopping.StopRule`, e.g. the CTC online policy's
  :class:`~simulst.policies.ctc_end.CtcEndRule`): before every expansion the rule sees the best hypothesis g and
  the decoder's distribution of its next token; when it says stop, the search of this chunk ends and returns g
  first (beam search: the other beams after it, best first). The rule is never asked on the final chunk (the
  source has ended: everything is decoded, as offline).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from simulst.errors import OptionError
from simulst.models.base import DecoderModel, Encoded
from simulst.scorers.ctc_prefix import CtcCandidates, CtcPrefixBatch, CtcPrefixScorer
from simulst.search.base import Searcher
from simulst.search.stopping import StopCheck, StopRule
from simulst.types import Costs, Hypothesis


class _Joint:
    """Joint CTC/attention scoring state of one chunk's search."""

    def __init__(self, model: DecoderModel, enc: Encoded, prefix: Sequence[int], weight: float) -> None:
        if enc.ctc_log_probs is None or enc.ctc_labels is None:
            raise OptionError("joint CTC/attention scoring (--ctc-weight > 0) needs a model with a CTC head")
        if not enc.ctc_labels.token_level:
            raise OptionError(
                "joint CTC/attention scoring (--ctc-weight > 0) needs a CTC head over the decoder's own vocabulary; "
                "this head has another vocabulary (e.g. characters), which only the CTC policy can use (word by word)"
            )
        self.weight = weight
        self.scorer = CtcPrefixScorer(blank=enc.ctc_labels.blank, eos=model.eos_id)
        self.states: CtcPrefixBatch = self.scorer.init_state(enc.ctc_log_probs, tuple(prefix))

    def candidates(
        self, att: torch.Tensor, pre_beam: int, base: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, CtcCandidates]:
        """Joint scores of the pre-beam candidates.

        Args:
            att: (B, V) attention log-probs of the B hypotheses' next token.
            pre_beam: candidates per hypothesis K.
            base: (B,) accumulated scores of the hypotheses.

        Returns:
            (scores (B, K) float64, ids (B, K), the scorer's candidate states for :meth:`keep`).
        """
        top_att, top_ids = torch.topk(att, min(pre_beam, att.shape[1]), dim=1)
        delta, cands = self.scorer.score(self.states, top_ids)
        scores = base.to(torch.float64)[:, None] + (1 - self.weight) * top_att.to(torch.float64) + self.weight * delta
        return scores, top_ids, cands

    def keep(self, cands: CtcCandidates, flat: Sequence[int]) -> None:
        """Keep the candidates of flat indices b·K + k (in the order of the new hypotheses)."""
        self.states = self.scorer.select(cands, torch.tensor(list(flat), dtype=torch.long))


class CtcGreedySearch(Searcher):
    """Greedy search with joint CTC/attention scoring (``ctc_weight`` λ) and/or a stop rule.

    Args:
        stop: the rule asked before each expansion (None: never stop early).
        ctc_weight: λ in [0, 1].
        pre_beam: attention candidates scored by the CTC per step.
    """

    def __init__(self, stop: StopRule | None = None, ctc_weight: float = 0.0, pre_beam: int = 4) -> None:
        if not 0.0 <= ctc_weight <= 1.0:
            raise OptionError(f"CTC weight must be in [0, 1], got {ctc_weight}")
        self.stop = stop
        self.ctc_weight = ctc_weight
        self.pre_beam = max(1, pre_beam)

    def search(
        self,
        model: DecoderModel,
        enc: Encoded,
        prefix: Sequence[int],
        max_new_tokens: int,
        costs: Costs,
        final: bool,
    ) -> list[Hypothesis]:
        tokens = list(prefix)
        if max_new_tokens <= 0:
            return [Hypothesis(tuple(tokens), 0.0, False)]
        logp, state = model.start(enc, prefix, costs)
        check = None if self.stop is None or final else self.stop.start(model, enc, prefix, costs)
        joint = _Joint(model, enc, prefix, self.ctc_weight) if self.ctc_weight > 0 else None
        score = 0.0
        for i in range(max_new_tokens):
            if check is not None and check(tokens, logp):
                return [Hypothesis(tuple(tokens), score, False)]
            if joint is None:
                token = int(torch.argmax(logp))
                gain = float(logp[token])
            else:
                scores, ids, cands = joint.candidates(logp.unsqueeze(0), self.pre_beam, torch.zeros(1))
                k = int(torch.argmax(scores[0]))
                token, gain = int(ids[0, k]), float(scores[0, k])
                if token != model.eos_id:
                    joint.keep(cands, [k])
            if token == model.eos_id:
                return [Hypothesis(tuple(tokens), score, True)]
            score += gain
            tokens.append(token)
            if i + 1 == max_new_tokens:
                break  # no decoder step for a token that would never be read
            step_logp, state = model.step(state, torch.tensor([token]), costs)
            logp = step_logp[0]
        return [Hypothesis(tuple(tokens), score, False)]


class CtcBeamSearch(Searcher):
    """:class:`~simulst.search.BeamSearch` with joint CTC/attention scoring and/or a stop rule.

    Args:
        beam: beam size.
        length_penalty: ranking by score / length**length_penalty.
        stop: the rule, asked about the best beam before each expansion (None: never stop early).
        ctc_weight: λ in [0, 1].
        pre_beam: attention candidates per beam scored by the CTC (None: max(4, 1.5 × beam)).
    """

    def __init__(self, beam: int, length_penalty: float = 1.0, stop: StopRule | None = None,
                 ctc_weight: float = 0.0, pre_beam: int | None = None) -> None:
        if beam < 1:
            raise OptionError(f"beam size must be >= 1, got {beam}")
        if not 0.0 <= ctc_weight <= 1.0:
            raise OptionError(f"CTC weight must be in [0, 1], got {ctc_weight}")
        self.beam = beam
        self.length_penalty = length_penalty
        self.stop = stop
        self.ctc_weight = ctc_weight
        self.pre_beam = pre_beam or max(4, int(1.5 * beam))

    def search(
        self,
        model: DecoderModel,
        enc: Encoded,
        prefix: Sequence[int],
        max_new_tokens: int,
        costs: Costs,
        final: bool,
    ) -> list[Hypothesis]:
        n_forced = len(prefix)
        if max_new_tokens <= 0:
            return [Hypothesis(tuple(prefix), 0.0, False)]
        logp, state = model.start(enc, prefix, costs)
        check: StopCheck | None = None if self.stop is None or final else self.stop.start(model, enc, prefix, costs)
        joint = _Joint(model, enc, prefix, self.ctc_weight) if self.ctc_weight > 0 else None
        beams: list[Hypothesis] = [Hypothesis(tuple(prefix), 0.0, False)]
        step_logp = logp.unsqueeze(0)  # (B, V)
        finished: list[Hypothesis] = []
        for step in range(max_new_tokens):
            if check is not None and check(beams[0].tokens, step_logp[0]):
                rest = sorted(finished + beams[1:], key=lambda h: h.normalized_score(n_forced, self.length_penalty),
                              reverse=True)
                return [beams[0], *rest][: self.beam]
            base = torch.tensor([b.score for b in beams], dtype=step_logp.dtype)
            cands: CtcCandidates | None = None
            if joint is None:
                scores = base.unsqueeze(1) + step_logp
                ids = None
            else:
                scores, ids, cands = joint.candidates(step_logp, self.pre_beam, base)
            width = scores.shape[1]
            top_scores, top_flat = torch.topk(scores.flatten(), min(2 * self.beam, scores.numel()))
            next_beams: list[Hypothesis] = []
            sources: list[int] = []
            kept: list[int] = []
            for value, flat in zip(top_scores.tolist(), top_flat.tolist(), strict=True):
                source, column = divmod(flat, width)
                token = column if ids is None else int(ids[source, column])
                if token == model.eos_id:
                    finished.append(Hypothesis(beams[source].tokens, value, True))
                else:
                    next_beams.append(Hypothesis((*beams[source].tokens, token), value, False))
                    sources.append(source)
                    kept.append(flat)
                if len(next_beams) == self.beam:
                    break
            beams = next_beams
            if len(finished) >= self.beam or step + 1 == max_new_tokens or not beams:
                break
            if joint is not None and cands is not None:
                joint.keep(cands, kept)
            state = model.select(state, torch.tensor(sources))
            step_logp, state = model.step(state, torch.tensor([b.tokens[-1] for b in beams]), costs)
        pool = finished if len(finished) >= self.beam else finished + beams
        pool.sort(key=lambda h: h.normalized_score(n_forced, self.length_penalty), reverse=True)
        return pool[: self.beam]
