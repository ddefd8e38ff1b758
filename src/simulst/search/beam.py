"""Beam search with length normalisation and a forced prefix (the papers' baseline BS); greedy is its one-beam case.

All beams advance in one batched decoder call per step; the forced prefix is decoded once and its KV cache is
shared by the beams. Finished hypotheses (ending in ``<eos>``) are collected until there are ``beam`` of them
(openai/whisper's stopping rule with patience 1); if fewer finish within the budget, the open beams join them.
Hypotheses are ranked by score / length**length_penalty.

Two optional parts make it the CTC searches of Polák et al., IWSLT 2023: joint CTC/attention scoring (λ > 0,
:class:`~simulst.search.joint.JointCtcScores`, §2.2) and a stop rule asked before each expansion (the CTC online
policy's end test, :mod:`simulst.search.ctc_end`, §2.3), never on the final chunk.
"""

from __future__ import annotations

from simulst.errors import OptionError
from simulst.models.base import AlignedDecoder, DecoderModel
from simulst.search.base import Query, Searcher, SearchState
from simulst.search.core import Beam, BeamRule, Scores, expand
from simulst.search.joint import JointCtcScores
from simulst.search.stopping import StopRule
from simulst.types import Costs, Hypothesis


class BeamSearch(Searcher):
    """Length-normalised beam search of width ``beam`` (1: greedy search).

    Args:
        beam: beam size K.
        length_penalty: ranking by score / length**length_penalty.
        stop: a rule asked about the best beam before each expansion of a non-final chunk (None: never stop early).
        ctc_weight: λ of joint CTC/attention scoring, in [0, 1] (0: the decoder alone).
        pre_beam: attention candidates per beam scored by the CTC (None: max(4, 1.5 × beam)).
    """

    def __init__(self, beam: int = 1, length_penalty: float = 1.0, stop: StopRule | None = None,
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

    @property
    def final_differs(self) -> bool:  # type: ignore[override]
        """Only a stop rule (asked before the source ends) makes the final chunk search differently."""
        return self.stop is not None

    def search(self, model: DecoderModel, query: Query, state: SearchState, costs: Costs) -> list[Hypothesis]:
        prefix = query.prefix
        if query.max_new_tokens <= 0:
            return [Hypothesis(prefix, 0.0, False)]
        check = None if self.stop is None or query.final else self.stop.start(model, query.enc, prefix, costs)
        if check is not None and self.stop is not None and self.stop.needs_alignment:
            if not isinstance(model, AlignedDecoder):
                raise OptionError("this stop rule needs a decoder that reports its cross-attention (Whisper)")
            logp, decoder = model.start(query.enc, prefix, costs, prompt=query.prompt, alignment=True)
        else:
            logp, decoder = model.start(query.enc, prefix, costs, prompt=query.prompt)
        scores: Scores | None = None
        if self.ctc_weight > 0:
            scores = JointCtcScores(model, query.enc, prefix, self.ctc_weight, self.pre_beam)
        rule = BeamRule(self.beam, self.length_penalty, check)
        beams = expand(model, decoder, [Beam(prefix)], logp.unsqueeze(0), query.max_new_tokens, costs, rule, scores)
        return [b.hypothesis() for b in beams]
