"""Beam search with length normalisation and a forced prefix (the papers' baseline BS); greedy is its one-beam case.

All beams advance in one batched decoder call per step; the forced prefix is decoded once and its KV cache is
shared by the beams. Finished hypotheses (ending in ``<eos>``) are collected until there are ``beam`` of them
(openai/whisper's stopping rule with patience 1); if fewer finish within the budget, the open beams join them.
Hypotheses are ranked by score / length**length_penalty.

Two optional parts make it the CTC searches of Polák et al., IWSLT 2023: joint CTC/attention scoring (λ > 0,
:class:`~simulst.search.joint.JointCtcScores`, §2.2) and a stop rule asked before each expansion (the CTC online
policy's end test, :mod:`simulst.search.ctc_end`, §2.3), never on the final chunk. A query's ``next_tokens``
bound the first token after the prefix (every beam's).

A chunk's search (not a final one) asked to (``Query.stop_at_loops``: the stream's loop guard is on) also ends
where its best beam runs into a repetition loop: the loop guard would commit nothing from there on, and a beam
search that keeps the loop as its best beam would otherwise search on to the token budget every chunk. The stream
then searches a decode committed whole of the same audio again, and trims its buffer as after a loop cut
(``SearchState.looped``).
"""

from __future__ import annotations

import torch

from simulst.errors import OptionError
from simulst.models.base import Ahead, AheadDecoder, AlignedDecoder, DecoderModel
from simulst.search.base import Query, Searcher, SearchState
from simulst.search.core import Beam, BeamRule, DecoderScores, FirstTokenScores, LoopBlockingScores, Scores, expand
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

    def judges_speech(self, model: DecoderModel) -> bool:
        """With a model that judges the speech in its forced pass (Whisper), unless the stop rule needs the
        alignment-tracking pass (AlignAtt)."""
        return isinstance(model, AheadDecoder) and not (self.stop is not None and self.stop.needs_alignment)

    def search(self, model: DecoderModel, query: Query, state: SearchState, costs: Costs) -> list[Hypothesis]:
        prefix = query.prefix
        if query.max_new_tokens <= 0:
            return [Hypothesis(prefix, 0.0, False)]
        check = None if self.stop is None or query.final else self.stop.start(model, query.enc, prefix, costs)
        beam = Beam(prefix)
        drafting = (self.beam == 1 and check is None and self.ctc_weight == 0 and bool(query.draft)
                    and query.next_tokens is None)
        if check is not None and self.stop is not None and self.stop.needs_alignment:
            if not isinstance(model, AlignedDecoder):
                raise OptionError("this stop rule needs a decoder that reports its cross-attention (Whisper)")
            logp, decoder = model.start(query.enc, prefix, costs, prompt=query.prompt, alignment=True)
        elif isinstance(model, AheadDecoder) and (drafting or query.no_speech_threshold is not None):
            draft = query.draft[: query.max_new_tokens - 1] if drafting else ()
            prompt = query.prompt if query.prompt is not None else model.prompt(query.enc, costs)
            judge = query.no_speech_threshold is not None
            ahead = model.start_ahead(query.enc, prefix, draft, costs, prompt, judge=judge)
            if query.no_speech_threshold is not None and (ahead.no_speech or 0.0) > query.no_speech_threshold:
                costs.count("no_speech_skips")
                return []
            beam, logp, decoder = accept_draft(model, ahead, beam, draft)
        else:
            logp, decoder = model.start(query.enc, prefix, costs, prompt=query.prompt)
        scores: Scores | None = None
        if self.ctc_weight > 0:
            scores = JointCtcScores(model, query.enc, prefix, self.ctc_weight, self.pre_beam)
        if query.block_loops:
            scores = LoopBlockingScores(scores or DecoderScores(), len(prefix), model.eos_id)
        if query.next_tokens is not None:
            scores = FirstTokenScores(scores or DecoderScores(), len(prefix), query.next_tokens)
        loops = query.stop_at_loops and not query.final
        rule = BeamRule(self.beam, self.length_penalty, check, loop_floor=len(prefix) if loops else None)
        budget = query.max_new_tokens - (len(beam.tokens) - len(prefix))
        beams = expand(model, decoder, [beam], logp.unsqueeze(0), budget, costs, rule, scores)
        state.looped = rule.looped
        if rule.looped:
            costs.count("loop_stops")
        return [b.hypothesis() for b in beams]


def accept_draft(model: AheadDecoder, ahead: Ahead, beam: Beam, draft: tuple[int, ...]) -> tuple[Beam, torch.Tensor,
                                                                                                object]:
    """Greedy search's check of a draft scored in the forced pass (``ahead``): the draft tokens that are the
    greedy choices in turn are taken, up to the first that is not. Returns ``beam`` extended by them (scored as a
    step-by-step search scores them), the (V,) log-probs after them and the decoder state there (the rest of the
    draft rewound)."""
    choices = ahead.logp.argmax(dim=-1).tolist()
    taken = 0
    while taken < len(draft) and choices[taken] == draft[taken]:
        taken += 1
    score = torch.zeros((), dtype=ahead.logp.dtype, device=ahead.logp.device)
    for i in range(taken):  # cumulative float scores, added as the search core adds them
        score = score + ahead.logp[i, draft[i]]
        beam = beam.extend(draft[i], float(score), model.eos_id)
    return beam, ahead.logp[taken], model.rewind(ahead.state, len(draft) - taken)
