"""The one search core: a beam search over weighted scorers, with the algorithm's decisions in a step rule.

Every search of simulst - greedy, length-normalised beam search, joint CTC/attention search, BWBS, IBWBS, improved
IBWBS, CMU's rewinding step - is the same loop (after openai/whisper's ``decoding.py`` and ESPnet's scorer
interface: small interfaces built once, a plain loop)::

    for each step (at most the chunk's token budget):
        rule.stop_before(beams)?       -> the search of this chunk ends (the CTC end test, 2023 paper §2.3)
        candidates = scores.top(beams, rule.width())   # one-token extensions, best first (weighted scorers)
        for each candidate: rule.judge(parent, extended) -> CONTINUE | SET_ASIDE | END
        rule.done(beams)? or budget spent -> rule.result(beams)
        one batched decoder step over the continuing beams (their KV cache reordered)

Greedy search is beam search with one beam: the best candidate continues, ``<eos>`` finishes it.

The rules (what differs between the papers' algorithms):

* :class:`BeamRule` - standard beam search (the papers' baseline BS): ``2K`` candidates are read, ``<eos>``
  candidates are set aside as finished, the first K others continue; the search ends when K have finished;
  finished hypotheses (plus the open beams when fewer finished) are ranked by score / length**length_penalty
  (openai/whisper's rule with patience 1). With a stop check (the CTC online policy) it ends early and returns
  its best beam first.
* :class:`IncrementalRule` - IBWBS (Polák et al., Interspeech 2023, Alg. 2) and improved IBWBS (Polák et al., IWSLT
  2023, Alg. 1): a beam that ends in ``<eos>`` (or repeats a token, with repetition detection; or, improved,
  scores ≤ minScore without having been seen) is set aside into ``Stopped`` and leaves the search; the number of
  active beams shrinks by one per stopped beam.
* :class:`SynchronousRule` - BWBS (Tsunoo et al. 2021; Interspeech 2023 Alg. 1) and CMU's rewinding step (Yan et
  al., IWSLT 2023, Alg. 1): K beams advance together; when any kept candidate is ``<eos>`` (or a repetition),
  every beam is rewound two steps; at the budget the search reverts to the chunk's start.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from simulst.models.base import DecoderModel, TracingDecoder
from simulst.search.stopping import StopCheck
from simulst.sequences import ends_in_loop
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
        trace: the decoder's record of the beam's cross-attention rows (:class:`~simulst.models.base.TracingDecoder`;
            None: none), up to the row that predicts the beam's last token - or the token after it, once that was
            read; rows of a longer beam serve any prefix of it.
    """

    tokens: tuple[int, ...]
    scores: tuple[float, ...] = ()
    finished: bool = False
    trace: object | None = field(default=None, compare=False, repr=False)

    @property
    def score(self) -> float:
        """Sum of the searched tokens' (weighted) scores."""
        return self.scores[-1] if self.scores else 0.0

    @property
    def n_forced(self) -> int:
        """Length of the forced (unscored) prefix."""
        return len(self.tokens) + int(self.finished) - len(self.scores)

    def extend(self, token: int, score: float, eos_id: int) -> Beam:
        """This beam followed by ``token`` (``<eos>`` finishes it), with cumulative ``score``."""
        if token == eos_id:
            return Beam(self.tokens, (*self.scores, score), True, self.trace)
        return Beam((*self.tokens, token), (*self.scores, score), False, self.trace)

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
        return Beam(self.tokens[:keep], self.scores[:searched], False, self.trace)

    def hypothesis(self) -> Hypothesis:
        """As a :class:`Hypothesis` (its score: the searched tokens' scores, each token's own among its
        ``token_scores``; its trace as its ``alignment``)."""
        steps = [b - a for a, b in zip((0.0, *self.scores), self.scores, strict=False)]
        return Hypothesis(self.tokens, self.score, self.finished, self.trace,
                          tuple(steps[:-1] if self.finished else steps))


def rank(beams: Sequence[Beam], length_penalty: float) -> list[Beam]:
    """``beams`` by length-normalised score, best first (stable)."""
    return sorted(beams, key=lambda b: b.normalized(length_penalty), reverse=True)


def is_repetition(beam: Beam, token: int) -> bool:
    """Tsunoo's repetition: ``token`` already occurs in the hypothesis (ESPnet ``yseq[-1] in yseq[:-1]``)."""
    return token in beam.tokens


def is_unreliable(parent: Beam, extended: Beam, repetition_detection: bool) -> bool:
    """Tsunoo's end detection for ``parent`` extended by one token: ``<eos>``, or a repetition when detection is
    on."""
    return extended.finished or (repetition_detection and is_repetition(parent, extended.tokens[-1]))


# --------------------------------------------------------------------------------------------- scorers
@dataclass(frozen=True)
class Candidate:
    """A one-token extension: the beam it extends, the token, the cumulative score, its index among the scored."""

    source: int
    token: int
    score: float
    flat: int


class Scores(ABC):
    """The weighted scorers of a search: turn the decoder's next-token log-probs into ranked candidates."""

    @abstractmethod
    def top(self, beams: Sequence[Beam], logp: torch.Tensor, n: int) -> list[Candidate]:
        """The ``n`` best extensions of ``beams`` (``logp``: (B, V) decoder log-probs), best first."""

    def keep(self, chosen: Sequence[Candidate]) -> None:  # noqa: B027 - only partial scorers keep states
        """The candidates that continue (in the order of the new beams): partial scorers keep their states."""


def beam_scores(beams: Sequence[Beam], logp: torch.Tensor) -> torch.Tensor:
    """(B,) the beams' scores as a tensor of the decoder log-probabilities' ``logp`` dtype, on their device (the
    model's: a GPU's, where it runs there)."""
    return torch.tensor([b.score for b in beams], dtype=logp.dtype, device=logp.device)


class DecoderScores(Scores):
    """The decoder alone: score(g⊕c) = score(g) + log p_att(c|g, X)."""

    def top(self, beams: Sequence[Beam], logp: torch.Tensor, n: int) -> list[Candidate]:
        scores = beam_scores(beams, logp).unsqueeze(1) + logp
        vocab = scores.shape[1]
        values, flat = torch.topk(scores.flatten(), min(n, scores.numel()))
        return [Candidate(f // vocab, f % vocab, v, f) for v, f in zip(values.tolist(), flat.tolist(), strict=True)]


class LoopBlockingScores(Scores):
    """Other scorers' candidates, less every one-token extension that completes a repetition loop past the first
    ``floor`` tokens (the forced prefix; :func:`~simulst.sequences.ends_in_loop`): such a token is scored -inf and
    the next best is taken in its place.

    Why: a decode committed whole that runs into a loop loses every word after it (the loop guard commits none of
    the loop, and that audio is not read again); openai/whisper decodes such a window again at a higher temperature
    (its compression-ratio fallback). Barred from the loop, the search continues with what the audio says next."""

    def __init__(self, inner: Scores, floor: int, eos_id: int) -> None:
        self.inner, self.floor, self.eos_id = inner, floor, eos_id

    def top(self, beams: Sequence[Beam], logp: torch.Tensor, n: int) -> list[Candidate]:
        blocked = logp
        while True:
            candidates = self.inner.top(beams, blocked, n)
            looping = [c for c in candidates
                       if c.token != self.eos_id and ends_in_loop((*beams[c.source].tokens, c.token), self.floor)]
            if not looping:
                return candidates
            if blocked is logp:
                blocked = logp.clone()
            for c in looping:
                blocked[c.source, c.token] = -math.inf

    def keep(self, chosen: Sequence[Candidate]) -> None:
        self.inner.keep(chosen)


class FirstTokenScores(Scores):
    """Other scorers' candidates, where a beam is still the forced prefix (``floor`` tokens) only among
    ``allowed``: every other token is scored -inf there, and each allowed one by its log-probability given that one
    of them is written (renormalised over ``allowed``) - a boundary the stream keeps open (``Query.next_tokens``).

    Why renormalised: the tokens' scores are the model's confidence to the low-confidence guard, and the bound is
    the stream's choice, not the model's; what the guard should judge is which of them the model writes there."""

    def __init__(self, inner: Scores, floor: int, allowed: Sequence[int]) -> None:
        self.inner, self.floor = inner, floor
        self.allowed = torch.tensor(sorted(set(allowed)), dtype=torch.long)

    def top(self, beams: Sequence[Beam], logp: torch.Tensor, n: int) -> list[Candidate]:
        rows = [i for i, b in enumerate(beams) if len(b.tokens) == self.floor and not b.finished]
        if not rows:
            return self.inner.top(beams, logp, n)
        masked = logp.clone()
        allowed = self.allowed.to(logp.device)
        kept = masked[rows][:, allowed]
        kept = kept - torch.logsumexp(kept, dim=1, keepdim=True)
        masked[rows] = -math.inf
        masked[torch.tensor(rows, device=logp.device).unsqueeze(1), allowed.unsqueeze(0)] = kept
        candidates = self.inner.top(beams, masked, n)
        finite = [c for c in candidates if c.score > -math.inf]
        return finite or candidates[:1]

    def keep(self, chosen: Sequence[Candidate]) -> None:
        self.inner.keep(chosen)


# --------------------------------------------------------------------------------------------- rules
class Verdict(enum.Enum):
    """What a rule decides about one extended beam."""

    CONTINUE = "continue"  # stays in the search
    SET_ASIDE = "set aside"  # leaves the search (finished / stopped): the rule keeps it
    END = "end"  # the whole chunk's search ends now (rewind)


class StepRule(ABC):
    """The decisions of one search algorithm within the shared loop (one rule object per chunk's search)."""

    ended = False  # set by a rule whose search ended early (END or a stop check)

    def stop_before(self, beams: Sequence[Beam], logp: torch.Tensor, state: object) -> bool:
        """Asked before each expansion (``state``: the beams' decoder state): True ends the search (the CTC
        online policy's and AlignAtt's checks)."""
        return False

    @abstractmethod
    def width(self, beams: Sequence[Beam]) -> int:
        """How many candidates this step reads."""

    @abstractmethod
    def judge(self, parent: Beam, extended: Beam) -> Verdict:
        """The fate of ``extended`` (``parent`` plus one candidate token)."""

    def full(self, continuing: int) -> bool:
        """True when enough beams continue: the step reads no more candidates."""
        return False

    def done(self, beams: Sequence[Beam]) -> bool:
        """After a step with the continuing ``beams``: True ends the search."""
        return not beams

    @abstractmethod
    def result(self, beams: Sequence[Beam]) -> list[Beam]:
        """The search's beams, best first, when it ends with the open ``beams``."""


class BeamRule(StepRule):
    """Standard beam search of width K (K = 1: greedy), with an optional stop check before each expansion, and
    optionally a stop where the best beam runs into a repetition loop.

    Args:
        loop_floor: stop when the best beam's last token, past this many tokens (the forced prefix), completes a
            repetition loop (:func:`~simulst.sequences.loop_cut`): the stream's loop guard commits nothing from
            there on, so a chunk's search past it is spent in vain. None: never.
    """

    def __init__(self, beam: int, length_penalty: float, check: StopCheck | None = None,
                 loop_floor: int | None = None) -> None:
        self.beam = beam
        self.length_penalty = length_penalty
        self.check = check
        self.loop_floor = loop_floor
        self.looped = False
        self.finished: list[Beam] = []

    def stop_before(self, beams: Sequence[Beam], logp: torch.Tensor, state: object) -> bool:
        self.looped = self.loop_floor is not None and ends_in_loop(beams[0].tokens, self.loop_floor)
        self.ended = self.looped or (self.check is not None and self.check(beams[0].tokens, logp[0], state))
        return self.ended

    def width(self, beams: Sequence[Beam]) -> int:
        return 2 * self.beam

    def judge(self, parent: Beam, extended: Beam) -> Verdict:
        if extended.finished:
            self.finished.append(extended)
            return Verdict.SET_ASIDE
        return Verdict.CONTINUE

    def full(self, continuing: int) -> bool:
        return continuing == self.beam

    def done(self, beams: Sequence[Beam]) -> bool:
        return len(self.finished) >= self.beam or not beams

    def result(self, beams: Sequence[Beam]) -> list[Beam]:
        if self.ended:  # stopped by the check: its best beam first, then the rest
            return [beams[0], *rank([*self.finished, *beams[1:]], self.length_penalty)][: self.beam]
        pool = self.finished if len(self.finished) >= self.beam else [*self.finished, *beams]
        return rank(pool, self.length_penalty)[: self.beam]


class IncrementalRule(StepRule):
    """IBWBS's per-beam stopping (Interspeech 2023 Alg. 2 l. 4-13); ``improved``: 2023 Alg. 1 l. 9-10.

    Args:
        beam: K, the initial number of active beams (one fewer per stopped beam).
        repetition_detection: a repeated token stops a beam too.
        seen: improved IBWBS's ``Seen`` (the stream's, from earlier blocks); None: plain IBWBS.
    """

    def __init__(self, beam: int, repetition_detection: bool, seen: set[tuple[int, ...]] | None = None) -> None:
        self.active = beam
        self.repetition_detection = repetition_detection
        self.seen = seen
        self.min_score = -math.inf  # l. 5: reset every block
        self.stopped: list[Beam] = []

    def width(self, beams: Sequence[Beam]) -> int:
        return self.active

    def judge(self, parent: Beam, extended: Beam) -> Verdict:
        stop = is_unreliable(parent, extended, self.repetition_detection)
        low = extended.score <= self.min_score
        if self.seen is not None and (stop or (low and seen_key(extended) not in self.seen)):
            self.min_score = max(self.min_score, extended.score)
            stop = True
        if stop:
            self.stopped.append(extended)
            return Verdict.SET_ASIDE
        return Verdict.CONTINUE

    def done(self, beams: Sequence[Beam]) -> bool:
        self.active = len(beams)
        return not beams

    def result(self, beams: Sequence[Beam]) -> list[Beam]:
        return self.stopped  # beams still active at the budget are dropped (l. 14-15)


class SynchronousRule(StepRule):
    """K beams advance together; an ``<eos>`` / repetition candidate rewinds them all two steps (BWBS, rewind).

    ``result`` is the beams two steps before the unreliable candidate (never before the chunk's start); when the
    budget runs out first, the beams at the chunk's start (``ended`` stays False).
    """

    def __init__(self, beam: int, repetition_detection: bool, start: Sequence[Beam]) -> None:
        self.beam = beam
        self.repetition_detection = repetition_detection
        self.levels: list[Sequence[Beam]] = [start]

    def width(self, beams: Sequence[Beam]) -> int:
        return self.beam

    def judge(self, parent: Beam, extended: Beam) -> Verdict:
        if is_unreliable(parent, extended, self.repetition_detection):
            self.ended = True
            return Verdict.END
        return Verdict.CONTINUE

    def done(self, beams: Sequence[Beam]) -> bool:
        self.levels.append(beams)
        return not beams

    def result(self, beams: Sequence[Beam]) -> list[Beam]:
        return list(self.levels[max(0, len(self.levels) - 2)] if self.ended else self.levels[0])


def seen_key(beam: Beam) -> tuple[int, ...]:
    """A beam's identity in improved IBWBS's ``Seen``: its tokens, with ``<eos>`` (as -1) when finished."""
    return (*beam.tokens, -1) if beam.finished else beam.tokens


# --------------------------------------------------------------------------------------------- the loop
Tracer = Callable[[object, int], object]


def tracer(model: DecoderModel) -> Tracer | None:
    """How to read a beam's trace from a decoder state of ``model`` (None: the model records none)."""
    return model.trace if isinstance(model, TracingDecoder) else None


def traced(beams: Sequence[Beam], state: object, trace: Tracer | None) -> list[Beam]:
    """``beams`` (the hypotheses of ``state``, in order) with their traces read from ``state``."""
    if trace is None:
        return list(beams)
    return [dataclasses.replace(b, trace=trace(state, i)) for i, b in enumerate(beams)]


def advance(
    model: DecoderModel, state: object, parents: int, beams: Sequence[Beam], sources: Sequence[int], costs: Costs
) -> tuple[torch.Tensor, object]:
    """One batched decoder step: reorder the state of ``parents`` hypotheses to ``sources`` and feed each beam's
    last token.

    Returns the (B, V) next-token log-probabilities of ``beams`` and the new state.
    """
    if not (parents == 1 and list(sources) == [0]):  # one beam continuing itself (greedy) needs no reordering
        state = model.select(state, torch.tensor(list(sources)))
    return model.step(state, torch.tensor([b.tokens[-1] for b in beams]), costs)


def expand(
    model: DecoderModel,
    state: object,
    beams: Sequence[Beam],
    logp: torch.Tensor,
    budget: int,
    costs: Costs,
    rule: StepRule,
    scores: Scores | None = None,
) -> list[Beam]:
    """Run the search loop from ``beams`` (``logp``: their (B, V) next-token log-probs, ``state``: their decoder
    state) for at most ``budget`` >= 1 tokens; returns ``rule.result``. One decoder call per step, none after the
    last (a token that would never be read is not fed). Each beam carries its trace (:attr:`Beam.trace`) of the
    state it was last read in."""
    scores = scores or DecoderScores()
    trace = tracer(model)
    beams = traced(beams, state, trace)
    for step in range(budget):
        if rule.stop_before(beams, logp, state):
            break
        continuing: list[Beam] = []
        chosen: list[Candidate] = []
        for candidate in scores.top(beams, logp, rule.width(beams)):
            parent = beams[candidate.source]
            extended = parent.extend(candidate.token, candidate.score, model.eos_id)
            verdict = rule.judge(parent, extended)
            if verdict is Verdict.END:
                return rule.result(beams)
            if verdict is Verdict.CONTINUE:
                continuing.append(extended)
                chosen.append(candidate)
                if rule.full(len(continuing)):
                    break
        parents, beams = len(beams), continuing
        if rule.done(beams) or step + 1 == budget:
            break
        scores.keep(chosen)
        logp, state = advance(model, state, parents, beams, [c.source for c in chosen], costs)
        beams = traced(beams, state, trace)
    return rule.result(beams)
