"""Blockwise streaming beam searches: BWBS, IBWBS and improved IBWBS (with cost-saving early stopping).

Papers (in ``/work/shared/papers``):

* **BWBS** — Tsunoo et al. 2021, as Alg. 1 of Polák et al., *Incremental Blockwise Beam Search* (Interspeech
  2023, "IBWBS paper"): per block, extend all beams (l. 4); if *any* beam contains a repetition or ``<eos>``
  (l. 5), remove the last two tokens from *every* beam (l. 6) and wait for the next block (l. 7). All beams are
  kept from block to block: a re-translation search.
* **IBWBS** — IBWBS paper Alg. 2: per block, ``Stopped ← ∅`` (l. 3); while beams are active (l. 4), extend them
  (l. 5); a beam that contains a repetition or ends in ``<eos>`` (l. 7) loses its last two tokens (l. 8), joins
  ``Stopped`` (l. 9) and leaves the search (l. 10); then ``Stopped`` is sorted by length-normalised score (l. 14),
  the best becomes the single active beam (l. 15: incremental pruning) and the policy is applied (l. 16).
* **Improved IBWBS** — Polák et al., CUNI-KIT IWSLT 2023, Alg. 1: ``Seen ← ∅`` once per stream (l. 1);
  per block ``Stopped ← ∅`` (l. 4), ``minScore ← −∞`` (l. 5); a beam stops when it ends in ``<eos>`` or
  ``score ≤ minScore and b ∉ Seen`` (l. 9), setting ``minScore ← max(minScore, score)`` (l. 10); after the
  block ``Seen ← Seen ∪ Stopped`` (l. 16), the best stopped beam by length-normalised score becomes the active
  beam (l. 17-18), the policy is applied (l. 19), and *then* the last two tokens of the active beam are removed
  (l. 20).

How the algorithms meet the stream (:class:`~simulst.streaming.session.Session`, which encodes, applies the policy
and commits):

* A *block* is a chunk: the session calls :meth:`Searcher.search` once per chunk on the encoding of the whole
  source read so far (full-context models recompute encoder and decoder states every chunk, IBWBS paper §3.3).
* *Extend beams* is one batched decoder step over all active beams (:meth:`DecoderModel.step`); the prefix
  every beam shares is force-decoded once per chunk in one parallel pass (:meth:`DecoderModel.start`) and its KV
  cache is shared by the beams (:meth:`DecoderModel.expand` / ``select``).
* The *active beam* after the policy (IBWBS Alg. 2 l. 15-16; 2023 Alg. 1 l. 18-20; CMU's pruned 1-best) is
  what the next chunk continues. Two mappings (``carry_over``):

  - ``carry_over=False`` (default): the active beam is cut back to what the policy showed - the next chunk
    restarts from the committed output, as ESPnet's online search does with hold-n (it truncates its running
    hypothesis by n tokens) and as CMU does (its output *is* the pruned 1-best). The policies keep their role:
    the unshown tail is searched again with more audio.
  - ``carry_over=True``: the searcher keeps the whole active beam (``kept``; BWBS: all its beams, Tsunoo's
    re-translation) and the next chunk force-decodes the committed output plus the kept uncommitted tokens in its
    one parallel pass, so they are not searched again (fewer decoder passes). The policy then only decides how
    much is *shown*: with IBWBS the best hypothesis of a chunk always extends the one before, so LA-n agrees on it
    by construction (it delays, never revises), and an early hallucination of an offline model stays in every
    later hypothesis (see ``bench/results/blockwise_searches.md``). Improved IBWBS re-opens the last two tokens
    every chunk (l. 20). The kept beam always extends the committed output (the policy commits a prefix of the
    best hypothesis); when the policy has committed more, the committed output is the forced prefix.
* *Remove the last two tokens*: ``<eos>`` counts as one of them (the beam "A B <eos>" becomes "A"), as in ESPnet's
  ``BatchBeamSearchOnline`` (Tsunoo's implementation, which rewinds the search two steps); tokens already
  committed are never removed (the session cannot retract them).
* ``Stopped`` is ranked by the length-normalised score each beam had *when it stopped* (score / (searched tokens
  + 1 for ``<eos>``), the ranking of finished hypotheses in beam search, IBWBS paper §3.2); the two-token removal
  then applies to the chosen beam. Ranking the shortened beams instead would favour any beam that stopped within
  its first two tokens: its remainder is empty, with score 0.
* IBWBS's "active beams" (l. 4) start at the beam size K and shrink by one for each stopped beam: stopped beams
  are not replaced, so a chunk ends when the last beam stops, or at the chunk's token budget (the papers' "max.
  length"; the session allows 12 tokens per second of audio + 10, far more than speech needs). Only stopped
  beams can become the active beam (l. 14-15): beams still active at the budget are dropped, and when none has
  stopped the chunk has no reliable hypothesis and the active beam stays (ESPnet's online search likewise
  reverts to its previous incremental hypothesis when a non-final chunk reaches the maximum length). BWBS and
  the rewinding step revert to the chunk's start in that case.
* Improved IBWBS compares raw scores (sums of the searched tokens' log-probabilities; all beams of a chunk start
  from the same forced prefix, so they are comparable) and checks the beams of a step best first, so within a
  step a beam ranked below a beam that has just stopped on ``<eos>`` stops as well (l. 9-10 in the order of the
  beam). ``Seen`` holds the token sequences (``<eos>`` included) of every beam stopped in earlier chunks.
* Repetition (the last token already occurs in the hypothesis, forced prefix included, as in ESPnet) is checked
  only with ``repetition_detection=True``: the papers use it for blockwise models and switch it off for offline
  (full-context) models (IBWBS paper §4.2; 2023 paper §3.2), the only kind simulst has so far. With it, improved
  IBWBS also stops beams on a repetition (the 2023 paper's Alg. 1 omits it, its §3.2 keeps it for blockwise
  models).
* The token budget ``max_new_tokens`` counts from the committed output, carried-over tokens included.
* The papers: ``minScore`` is reset every block (2023 Alg. 1 l. 5), only ``Seen`` and the active
  beam live across chunks; the rewinding step goes back two steps (see :mod:`simulst.search.rewind`).
* On the final chunk (``final=True``) every searcher is offline beam search (:class:`BeamSearch`) from its
  forced prefix (BWBS: continuing all its beams), so one final chunk is exactly offline beam search.
* BWBS returns all its beams, best first; the policy sees them all (SP-n uses every beam). With ``carry_over``
  the next chunk continues all of them except those that contradict the committed output (shown incrementally).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from simulst.errors import OptionError
from simulst.models.base import DecoderModel, Encoded
from simulst.search.base import Query, Searcher, SearchState
from simulst.search.beam import BeamSearch
from simulst.search.core import (
    TRIMMED_TOKENS,
    Beam,
    BeamRule,
    IncrementalRule,
    SynchronousRule,
    expand,
    rank,
    seen_key,
)
from simulst.sequences import longest_common_prefix
from simulst.types import Costs, Hypothesis


def continued_prefix(committed: Sequence[int], kept: Sequence[int]) -> tuple[int, ...]:
    """The forced prefix of a chunk: the kept active beam when it extends the committed output, else the latter."""
    committed = tuple(committed)
    if len(kept) > len(committed) and tuple(kept[: len(committed)]) == committed:
        return tuple(kept)
    return committed


class ChunkSearcher(Searcher):
    """Shared skeleton: a non-final chunk runs the blockwise algorithm, the final chunk offline beam search.

    Args:
        beam: the beam size K.
        length_penalty: the exponent of the length normalisation.
        repetition_detection: stop on a repeated token as well (for blockwise models; off for offline ones).
        carry_over: continue the kept active beam (BWBS: all beams) in the next chunk, as the papers' algorithms
            do; False (default): restart every chunk from the committed output (the active beam cut back to what
            the policy showed).
    """

    def __init__(
        self, beam: int, length_penalty: float = 1.0, repetition_detection: bool = False, carry_over: bool = False
    ) -> None:
        if beam < 1:
            raise OptionError(f"beam size must be >= 1, got {beam}")
        if not math.isfinite(length_penalty):
            raise OptionError(f"length penalty must be finite, got {length_penalty}")
        self.beam = beam
        self.length_penalty = length_penalty
        self.repetition_detection = repetition_detection
        self.carry_over = carry_over

    def search(self, model: DecoderModel, query: Query, state: SearchState, costs: Costs) -> list[Hypothesis]:
        committed = query.prefix
        forced = continued_prefix(committed, state.kept) if self.carry_over else committed
        budget = query.max_new_tokens - (len(forced) - len(committed))
        if budget <= 0:
            return [Hypothesis(forced, 0.0, False)]
        if query.final:
            offline = Query(query.enc, forced, budget, True, query.prompt)
            return BeamSearch(self.beam, self.length_penalty).search(model, offline, state, costs)
        return self.search_block(model, query, state, forced, budget, costs)

    def search_block(
        self, model: DecoderModel, query: Query, state: SearchState, forced: tuple[int, ...], budget: int,
        costs: Costs,
    ) -> list[Hypothesis]:
        """One non-final chunk (block) of the algorithm, searching at most ``budget`` >= 1 tokens after
        ``forced``; the hypotheses returned start with the committed ``query.prefix``."""
        raise NotImplementedError


# --------------------------------------------------------------------------------------------- IBWBS
class IncrementalBlockwiseBeamSearch(ChunkSearcher):
    """IBWBS (IBWBS paper Alg. 2): per-beam stopping, the best stopped beam kept as the single active beam.

    Example::

        searcher = IncrementalBlockwiseBeamSearch(beam=5)
        hyps = searcher.search(model, Query(enc, committed, 50), state, costs)
        # hyps[0]: the active beam (state.kept; the next chunk continues it with carry_over=True),
        # then the rest of Stopped, best first
    """

    improved = False

    def search_block(
        self, model: DecoderModel, query: Query, state: SearchState, forced: tuple[int, ...], budget: int,
        costs: Costs,
    ) -> list[Hypothesis]:
        logp, decoder = model.start(query.enc, forced, costs, prompt=query.prompt)
        rule = IncrementalRule(self.beam, self.repetition_detection, state.seen if self.improved else None)
        stopped = expand(model, decoder, [Beam(forced)], logp.unsqueeze(0), budget, costs, rule)
        if self.improved:
            state.seen.update(seen_key(b) for b in stopped)  # l. 16
        if not stopped:  # no beam stopped within the budget: no reliable hypothesis, the active beam stays
            return [Hypothesis(forced, 0.0, False)]
        floor = len(query.prefix)
        pool = rank(stopped, self.length_penalty)  # l. 14
        if self.improved:  # stopped beams stay whole; the active beam loses two tokens after the policy (l. 20)
            shown = pool
            state.kept = pool[0].drop_last(TRIMMED_TOKENS, floor).tokens
        else:  # l. 8: a stopped beam loses its last two tokens; l. 15: the best is the active beam
            shown = [b.drop_last(TRIMMED_TOKENS, floor) for b in pool]
            state.kept = shown[0].tokens
        return [b.hypothesis() for b in shown]


class ImprovedIncrementalBlockwiseBeamSearch(IncrementalBlockwiseBeamSearch):
    """Improved IBWBS (CUNI-KIT IWSLT 2023 Alg. 1): ``minScore`` / ``Seen`` stopping; the last two tokens are
    removed from the active beam after the policy. ``Seen`` lives in the stream's :class:`SearchState`;
    ``minScore`` is reset every block (l. 5)."""

    improved = True


# --------------------------------------------------------------------------------------------- BWBS
def rescore_beams(
    model: DecoderModel, enc: Encoded, kept: Sequence[tuple[int, ...]], costs: Costs,
    prompt: tuple[int, ...] | None = None,
) -> tuple[list[Beam], torch.Tensor, object]:
    """Recompute the decoder states of carried beams of equal length on a new encoding.

    Their longest common prefix is force-decoded in one parallel pass; each position after it is one batched
    step over all beams, which also scores those tokens on the new encoding. Returns the beams, their (B, V)
    next-token log-probabilities and the decoder state.
    """
    common = longest_common_prefix(kept)
    logp, state = model.start(enc, common, costs, prompt=prompt)
    beams = [Beam(common) for _ in kept]
    step_logp = logp.unsqueeze(0).expand(len(kept), -1)
    if len(kept) > 1:
        state = model.expand(state, len(kept))
    for pos in range(len(common), len(kept[0])):
        tokens = [k[pos] for k in kept]
        beams = [
            b.extend(t, b.score + float(step_logp[i, t]), model.eos_id)
            for i, (b, t) in enumerate(zip(beams, tokens, strict=True))
        ]
        step_logp, state = model.step(state, torch.tensor(tokens), costs)
    return beams, step_logp, state


class BlockwiseBeamSearch(ChunkSearcher):
    """BWBS (Tsunoo et al. 2021; IBWBS paper Alg. 1): all beams stop on any ``<eos>`` / repetition; all are kept.

    Cross-chunk state: ``SearchState.beams``, the beams the next chunk continues with ``carry_over=True`` (a
    re-translation search: they may differ anywhere after the committed output); by default it restarts from the
    committed output, where it shows the same best beam as :class:`~simulst.search.rewind.RewindingBeamSearch`.
    """

    def search(self, model: DecoderModel, query: Query, state: SearchState, costs: Costs) -> list[Hypothesis]:
        committed = query.prefix
        kept = [b for b in state.beams if len(b) >= len(committed) and b[: len(committed)] == committed]
        kept = (kept if self.carry_over else []) or [committed]
        budget = query.max_new_tokens - (len(kept[0]) - len(committed))
        if budget <= 0:
            return [Hypothesis(b, 0.0, False) for b in kept]
        if query.final and len(kept) == 1:
            offline = Query(query.enc, kept[0], budget, True, query.prompt)
            return BeamSearch(self.beam, self.length_penalty).search(model, offline, state, costs)
        beams, step_logp, decoder = rescore_beams(model, query.enc, kept, costs, query.prompt)
        if query.final:  # the last block: offline beam search continuing every beam
            rule = BeamRule(self.beam, self.length_penalty)
            return [b.hypothesis() for b in expand(model, decoder, beams, step_logp, budget, costs, rule)]
        beams = expand(model, decoder, beams, step_logp, budget, costs,
                       SynchronousRule(self.beam, self.repetition_detection, beams))
        beams = sorted(beams, key=lambda b: b.score, reverse=True)  # equal lengths: as length-normalised
        state.beams = [b.tokens for b in beams]
        return [b.hypothesis() for b in beams]
