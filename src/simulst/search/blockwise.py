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

How the algorithms meet :class:`~simulst.session.Session` (which encodes, applies the policy and commits):

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
* SPEC §3 and the papers: ``minScore`` is reset every block (2023 Alg. 1 l. 5), only ``Seen`` and the active
  beam live across chunks; the rewinding step goes back two steps (see :mod:`simulst.search.rewind`).
* On the final chunk (``final=True``) every searcher is offline beam search (:class:`BeamSearch`) from its
  forced prefix (BWBS: continuing all its beams), so one final chunk is exactly offline beam search.
* BWBS returns all its beams, best first; the policy sees them all (SP-n uses every beam). With ``carry_over``
  the next chunk continues all of them except those that contradict the committed output (shown incrementally).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from simulst.errors import OptionError
from simulst.models.base import DecoderModel, Encoded
from simulst.search.base import Searcher
from simulst.search.beam import BeamSearch
from simulst.types import Costs, Hypothesis

TRIMMED_TOKENS = 2  # "remove the last two tokens" (IBWBS paper Alg. 1 l. 6, Alg. 2 l. 8; 2023 Alg. 1 l. 20)


# --------------------------------------------------------------------------------------------- beams
@dataclass(frozen=True)
class Beam:
    """One beam of a chunk's search.

    Attributes:
        tokens: output tokens, forced prefix included, ``<eos>`` excluded.
        scores: cumulative score after each searched token (``<eos>`` included when ``finished``); the forced
            prefix is not scored.
        finished: the beam ended with ``<eos>``.
    """

    tokens: tuple[int, ...]
    scores: tuple[float, ...] = ()
    finished: bool = False

    @property
    def score(self) -> float:
        """Sum of the searched tokens' log-probabilities."""
        return self.scores[-1] if self.scores else 0.0

    @property
    def n_forced(self) -> int:
        """Length of the forced (unscored) prefix."""
        return len(self.tokens) + int(self.finished) - len(self.scores)

    def extend(self, token: int, score: float, eos_id: int) -> Beam:
        """This beam followed by ``token`` (``<eos>`` finishes it), with cumulative ``score``."""
        if token == eos_id:
            return Beam(self.tokens, (*self.scores, score), True)
        return Beam((*self.tokens, token), (*self.scores, score), False)

    def normalized(self, length_penalty: float) -> float:
        """Length-normalised score: score / (searched tokens, ``<eos>`` included)^length_penalty."""
        return self.score / (max(1, len(self.scores)) ** length_penalty)

    def drop_last(self, n: int, floor: int) -> Beam:
        """The beam without its last ``n`` tokens (``<eos>`` counts as one), never shorter than ``floor`` tokens."""
        positions = len(self.tokens) + int(self.finished)
        keep = min(len(self.tokens), max(floor, positions - n))
        if keep == len(self.tokens) and not self.finished:
            return self
        searched = max(0, keep - self.n_forced)
        return Beam(self.tokens[:keep], self.scores[:searched], False)

    def hypothesis(self) -> Hypothesis:
        """As a :class:`Hypothesis` (its score: the searched tokens' log-probabilities)."""
        return Hypothesis(self.tokens, self.score, self.finished)


def top_extensions(beams: Sequence[Beam], logp: torch.Tensor, width: int) -> list[tuple[int, int, float]]:
    """The ``width`` best one-token extensions ``(source beam, token, cumulative score)``, best first.

    Args:
        beams: the B active beams.
        logp: (B, V) next-token log-probabilities of the beams.
        width: how many extensions to keep.
    """
    scores = torch.tensor([b.score for b in beams], dtype=logp.dtype).unsqueeze(1) + logp
    vocab = scores.shape[1]
    values, flat = torch.topk(scores.flatten(), min(width, scores.numel()))
    return [(f // vocab, f % vocab, v) for v, f in zip(values.tolist(), flat.tolist(), strict=True)]


def is_repetition(beam: Beam, token: int) -> bool:
    """Tsunoo's repetition: ``token`` already occurs in the hypothesis (ESPnet ``yseq[-1] in yseq[:-1]``)."""
    return token in beam.tokens


def longest_common_prefix(sequences: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """The longest token prefix shared by all ``sequences``."""
    first = sequences[0]
    length = min(len(s) for s in sequences)
    for i in range(length):
        if any(s[i] != first[i] for s in sequences):
            return tuple(first[:i])
    return tuple(first[:length])


def continued_prefix(committed: Sequence[int], kept: Sequence[int]) -> tuple[int, ...]:
    """The forced prefix of a chunk: the kept active beam when it extends the committed output, else the latter."""
    committed = tuple(committed)
    if len(kept) > len(committed) and tuple(kept[: len(committed)]) == committed:
        return tuple(kept)
    return committed


def advance(
    model: DecoderModel, state: object, beams: Sequence[Beam], sources: Sequence[int], costs: Costs
) -> tuple[torch.Tensor, object]:
    """One batched decoder step: reorder the state to ``sources`` and feed each beam's last token.

    Returns the (B, V) next-token log-probabilities of ``beams`` and the new state.
    """
    state = model.select(state, torch.tensor(list(sources)))
    return model.step(state, torch.tensor([b.tokens[-1] for b in beams]), costs)


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
        self.kept: tuple[int, ...] = ()  # the active beam carried to the next chunk

    def search(
        self,
        model: DecoderModel,
        enc: Encoded,
        prefix: Sequence[int],
        max_new_tokens: int,
        costs: Costs,
        final: bool,
    ) -> list[Hypothesis]:
        committed = tuple(prefix)
        forced = continued_prefix(committed, self.kept) if self.carry_over else committed
        budget = max_new_tokens - (len(forced) - len(committed))
        if budget <= 0:
            return [Hypothesis(forced, 0.0, False)]
        if final:
            return BeamSearch(self.beam, self.length_penalty).search(model, enc, forced, budget, costs, True)
        return self.search_block(model, enc, committed, forced, budget, costs)

    def unreliable(self, parent: Beam, token: int, eos_id: int) -> bool:
        """Tsunoo's end detection for the extension of ``parent`` by ``token``: ``<eos>``, or a repetition when
        detection is on."""
        return token == eos_id or (self.repetition_detection and is_repetition(parent, token))

    def search_block(
        self,
        model: DecoderModel,
        enc: Encoded,
        committed: tuple[int, ...],
        forced: tuple[int, ...],
        budget: int,
        costs: Costs,
    ) -> list[Hypothesis]:
        """One non-final chunk (block) of the algorithm, searching at most ``budget`` >= 1 tokens after
        ``forced``; the hypotheses returned start with ``committed``."""
        raise NotImplementedError


# --------------------------------------------------------------------------------------------- IBWBS
class IncrementalBlockwiseBeamSearch(ChunkSearcher):
    """IBWBS (IBWBS paper Alg. 2): per-beam stopping, the best stopped beam kept as the single active beam.

    Example::

        searcher = IncrementalBlockwiseBeamSearch(beam=5)
        hyps = searcher.search(model, enc, committed, 50, costs, final=False)
        # hyps[0]: the active beam (searcher.kept; the next chunk continues it with carry_over=True),
        # then the rest of Stopped, best first
    """

    def search_block(
        self,
        model: DecoderModel,
        enc: Encoded,
        committed: tuple[int, ...],
        forced: tuple[int, ...],
        budget: int,
        costs: Costs,
    ) -> list[Hypothesis]:
        self.begin_block()
        stopped = self.expand_until_stopped(model, enc, forced, budget, costs)
        self.end_block(stopped)
        if not stopped:  # no beam stopped within the budget: no reliable hypothesis, the active beam stays
            return [Hypothesis(forced, 0.0, False)]
        floor = len(committed)
        pool = sorted(stopped, key=lambda b: b.normalized(self.length_penalty), reverse=True)  # l. 14
        shown = [self.after_stop(b, floor) for b in pool]
        self.kept = self.kept_after_policy(shown[0], floor)  # l. 15 (improved: 18-20)
        return [b.hypothesis() for b in shown]

    # ---- the steps where the improved version differs
    def begin_block(self) -> None:
        """Per-block initialisation (``Stopped ← ∅``, l. 3, is a local list)."""

    def should_stop(self, parent: Beam, extended: Beam, eos_id: int) -> bool:
        """l. 7: the beam contains a repetition or ends in ``<eos>``."""
        return self.unreliable(parent, eos_id if extended.finished else extended.tokens[-1], eos_id)

    def end_block(self, stopped: list[Beam]) -> None:
        """After the block's search (the improved version updates ``Seen``)."""

    def after_stop(self, beam: Beam, floor: int) -> Beam:
        """l. 8: a stopped beam loses its last two tokens."""
        return beam.drop_last(TRIMMED_TOKENS, floor)

    def kept_after_policy(self, active: Beam, floor: int) -> tuple[int, ...]:
        """The active beam the next chunk continues (l. 15)."""
        return active.tokens

    # ---- the search loop (l. 4-13)
    def expand_until_stopped(
        self, model: DecoderModel, enc: Encoded, forced: tuple[int, ...], budget: int, costs: Costs
    ) -> list[Beam]:
        """Extend the active beams, best first, until every beam has stopped or the budget is spent.

        Returns ``Stopped`` (beams still active at the budget are dropped: only stopped beams can become the
        active beam, l. 14-15). One decoder call per step, none after the last.
        """
        logp, state = model.start(enc, forced, costs)
        beams, step_logp = [Beam(forced)], logp.unsqueeze(0)
        stopped: list[Beam] = []
        width = self.beam  # the number of active beams: K, minus one per stopped beam
        for step in range(budget):
            active: list[Beam] = []
            sources: list[int] = []
            for source, token, score in top_extensions(beams, step_logp, width):
                extended = beams[source].extend(token, score, model.eos_id)
                if self.should_stop(beams[source], extended, model.eos_id):
                    stopped.append(extended)  # l. 9-10: into Stopped, out of the search
                else:
                    active.append(extended)
                    sources.append(source)
            beams, width = active, len(active)
            if not beams or step + 1 == budget:
                break
            step_logp, state = advance(model, state, beams, sources, costs)
        return stopped


class ImprovedIncrementalBlockwiseBeamSearch(IncrementalBlockwiseBeamSearch):
    """Improved IBWBS (CUNI-KIT IWSLT 2023 Alg. 1): ``minScore`` / ``Seen`` stopping; the last two tokens are
    removed from the active beam after the policy.

    Cross-chunk state: ``seen`` (l. 1, 16) and the kept active beam; ``min_score`` is reset every block (l. 5).
    """

    def __init__(
        self, beam: int, length_penalty: float = 1.0, repetition_detection: bool = False, carry_over: bool = False
    ) -> None:
        super().__init__(beam, length_penalty, repetition_detection, carry_over)
        self.seen: set[tuple[int, ...]] = set()  # l. 1
        self.min_score = -math.inf

    def begin_block(self) -> None:
        self.min_score = -math.inf  # l. 5

    def should_stop(self, parent: Beam, extended: Beam, eos_id: int) -> bool:
        """l. 9-10: ``<eos>`` (or a repetition), or ``score ≤ minScore`` for a beam not stopped in an earlier
        block; a stop raises ``minScore`` to the beam's score."""
        if super().should_stop(parent, extended, eos_id) or (
            extended.score <= self.min_score and seen_key(extended) not in self.seen
        ):
            self.min_score = max(self.min_score, extended.score)
            return True
        return False

    def end_block(self, stopped: list[Beam]) -> None:
        self.seen.update(seen_key(b) for b in stopped)  # l. 16

    def after_stop(self, beam: Beam, floor: int) -> Beam:
        return beam  # stopped beams stay whole: the removal comes after the policy (l. 20)

    def kept_after_policy(self, active: Beam, floor: int) -> tuple[int, ...]:
        return active.drop_last(TRIMMED_TOKENS, floor).tokens  # l. 20


def seen_key(beam: Beam) -> tuple[int, ...]:
    """A beam's identity in ``Seen``: its tokens, with ``<eos>`` (as -1) appended when finished."""
    return (*beam.tokens, -1) if beam.finished else beam.tokens


# --------------------------------------------------------------------------------------------- BWBS
def rescore_beams(
    model: DecoderModel, enc: Encoded, kept: Sequence[tuple[int, ...]], costs: Costs
) -> tuple[list[Beam], torch.Tensor, object]:
    """Recompute the decoder states of carried beams of equal length on a new encoding.

    Their longest common prefix is force-decoded in one parallel pass; each position after it is one batched
    step over all beams, which also scores those tokens on the new encoding. Returns the beams, their (B, V)
    next-token log-probabilities and the decoder state.
    """
    common = longest_common_prefix(kept)
    logp, state = model.start(enc, common, costs)
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


def expand_synchronously(
    searcher: ChunkSearcher,
    model: DecoderModel,
    state: object,
    beams: list[Beam],
    step_logp: torch.Tensor,
    budget: int,
    costs: Costs,
) -> tuple[list[Beam], bool]:
    """Standard beam steps (width K) until an extension is unreliable or the budget is spent.

    On an unreliable extension (``<eos>`` or repetition) of any kept candidate, every beam is rewound two steps:
    the unreliable token and the one before it are removed (IBWBS paper Alg. 1 l. 5-7; ESPnet
    ``BatchBeamSearchOnline`` keeps ``prev_hyps``, "2 behind the ended hyps"; CMU Alg. 1 l. 12-14 ``newHyps =
    prevHyps``), never past the chunk's start. When the budget runs out first the beams have run away (a legit
    hypothesis ends well within it): the search reverts to the chunk's start, as ESPnet's online search reverts
    to its previous incremental hypothesis when a non-final chunk reaches the maximum length. Returns the beams
    and whether the end was detected (False: the budget ran out).
    """
    levels = [beams]
    for step in range(budget):
        extensions = top_extensions(beams, step_logp, searcher.beam)
        if any(searcher.unreliable(beams[source], token, model.eos_id) for source, token, _ in extensions):
            return levels[max(0, len(levels) - 2)], True
        sources = [source for source, _, _ in extensions]
        beams = [beams[s].extend(t, v, model.eos_id) for s, t, v in extensions]
        levels.append(beams)
        if step + 1 == budget:
            break
        step_logp, state = advance(model, state, beams, sources, costs)
    return levels[0], False


class BlockwiseBeamSearch(ChunkSearcher):
    """BWBS (Tsunoo et al. 2021; IBWBS paper Alg. 1): all beams stop on any ``<eos>`` / repetition; all are kept.

    Cross-chunk state: ``beams``, the beams the next chunk continues with ``carry_over=True`` (a re-translation
    search: they may differ anywhere after the committed output); by default it restarts from the committed
    output, where it shows the same best beam as :class:`~simulst.search.rewind.RewindingBeamSearch`.
    """

    def __init__(
        self, beam: int, length_penalty: float = 1.0, repetition_detection: bool = False, carry_over: bool = False
    ) -> None:
        super().__init__(beam, length_penalty, repetition_detection, carry_over)
        self.beams: list[tuple[int, ...]] = []

    def search(
        self,
        model: DecoderModel,
        enc: Encoded,
        prefix: Sequence[int],
        max_new_tokens: int,
        costs: Costs,
        final: bool,
    ) -> list[Hypothesis]:
        committed = tuple(prefix)
        kept = [b for b in self.beams if len(b) >= len(committed) and b[: len(committed)] == committed]
        kept = (kept if self.carry_over else []) or [committed]
        budget = max_new_tokens - (len(kept[0]) - len(committed))
        if budget <= 0:
            return [Hypothesis(b, 0.0, False) for b in kept]
        if final and len(kept) == 1:
            return BeamSearch(self.beam, self.length_penalty).search(model, enc, kept[0], budget, costs, True)
        beams, step_logp, state = rescore_beams(model, enc, kept, costs)
        if final:  # the last block: offline beam search continuing every beam
            return continue_offline(model, state, beams, step_logp, budget, costs, self.beam, self.length_penalty)
        beams, _ = expand_synchronously(self, model, state, beams, step_logp, budget, costs)
        beams = sorted(beams, key=lambda b: b.score, reverse=True)  # equal lengths: as length-normalised
        self.beams = [b.tokens for b in beams]
        return [b.hypothesis() for b in beams]


def continue_offline(
    model: DecoderModel,
    state: object,
    beams: list[Beam],
    step_logp: torch.Tensor,
    budget: int,
    costs: Costs,
    beam: int,
    length_penalty: float,
) -> list[Hypothesis]:
    """Offline beam search (the rules of :class:`BeamSearch`) continuing several beams at once.

    BWBS's final block, whose beams need not share a prefix. ``step_logp``: (B, V) for ``beams``.
    """
    finished: list[Beam] = []
    for step in range(budget):
        next_beams: list[Beam] = []
        sources: list[int] = []
        for source, token, value in top_extensions(beams, step_logp, 2 * beam):
            extended = beams[source].extend(token, value, model.eos_id)
            if extended.finished:
                finished.append(extended)
            else:
                next_beams.append(extended)
                sources.append(source)
            if len(next_beams) == beam:
                break
        beams = next_beams
        if len(finished) >= beam or not beams or step + 1 == budget:
            break
        step_logp, state = advance(model, state, beams, sources, costs)
    pool = finished if len(finished) >= beam else finished + beams
    pool.sort(key=lambda b: b.normalized(length_penalty), reverse=True)
    return [b.hypothesis() for b in pool[:beam]]
