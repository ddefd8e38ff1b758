"""The onlinized MT stage of a cascade: committed source text in, committed target text out.

The stage is onlinized like the ASR :class:`~simulst.streaming.session.Session` (Polák et al., IWSLT 2022, §3), on the
same commit path (:mod:`simulst.streaming.commit`): for
every new committed source increment (an ASR emission) it translates the whole committed source prefix, continuing
its own committed target tokens (forced decoding; a black-box backend aligns a fresh translation to them), and a
policy picks the stable prefix of the hypotheses; what extends the committed target, cut back to whole words, is
emitted and never changed. When the source ends, the full source is translated once more and the best hypothesis
is committed whole, so a source that arrives at once is translated exactly as offline MT translates it.

Long streams (``MTOptions.sentences``): once the committed source completes a sentence, that sentence is
translated once more and its translation committed whole (as at the end of the source); later steps translate
only the source after it, continuing only the target committed after it.

Times are on the *audio* timeline: a target emission carries the ``source_ms`` of the ASR emission that triggered
it, and as ``elapsed_ms`` that emission's computation-aware time plus the MT compute this stream has spent so far
(the two stages run one after the other, so each one's compute delays everything after it).

**Spoken times.** A target emission is spoken-timed by the source it was made from: from the start of the first
source increment received since the previous target emission (the increments this commit is the first to
consume) to the end of the latest one - the span of source speech that became available to it. When it consumes
no new source (a second commit on the same increment, e.g. a sentence committed whole and then the text after
it), it gets the empty span at the end of the latest source. The MT stage has no word alignment: each target word
carries its emission's span. Untimed source (no ``spoken`` given) leaves the target untimed::

    stage = MTStage(backend, MTOptions(policy=PolicyOptions.parse("la-2")))
    for asr_emission in asr_emissions:
        for target in stage.push(asr_emission.text, asr_emission.source_ms, asr_emission.elapsed_ms):
            print(target.text, end="")
    stage.finish("", source_ms=total_ms, elapsed_ms=total_ms + asr_compute_ms)
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from simulst.errors import SimulstError
from simulst.models.base import Tokenizer
from simulst.mt.backend import MTBackend, MTRequest
from simulst.mt.options import MTOptions
from simulst.policies import Policy, PolicyContext, PolicyState, make_policy
from simulst.search import Searcher, SearchState, make_searcher
from simulst.streaming.commit import Output, OutputView, target_tokens
from simulst.streaming.decoding import DecodeReason
from simulst.types import Costs, Emission, Hypothesis


@dataclass
class MTStageState:
    """All mutable data of one stream's MT stage.

    Attributes:
        source: the committed source text received so far (increments concatenated).
        segment: the part of ``source`` after the last translated sentence (all of it without ``sentences``).
        base: committed target tokens of the sentences before ``segment``.
        output: the committed target tokens, text and emissions.
        policy: the policy's history.
        search: what the searches carry across steps.
        costs: the MT stage's own work counters (``compute_s`` is MT compute only).
        steps: number of translations of a non-final source prefix.
        last_source: the source of the last translation (a prefix is never translated twice).
        finished: True after :meth:`MTStage.finish`.
        spoken_start: where the first source increment received since the last target emission was spoken
            (None: none received, or untimed).
        spoken_end: where the latest timed source increment ends (None: none yet).
    """

    source: str = ""
    segment: str = ""
    base: int = 0
    output: Output = field(default_factory=Output)
    policy: PolicyState = field(default_factory=PolicyState)
    search: SearchState = field(default_factory=SearchState)
    costs: Costs = field(default_factory=Costs)
    steps: int = 0
    last_source: str = ""
    finished: bool = False
    spoken_start: float | None = None
    spoken_end: float | None = None


class MTStage(OutputView):
    """One stream's MT stage over a shared backend: ``push(source increment) -> target emissions``, ``finish()``."""

    state: MTStageState

    def __init__(self, backend: MTBackend, options: MTOptions | None = None) -> None:
        self.backend = backend
        self.options = options or MTOptions()
        self.policy: Policy = make_policy(self.options.policy, chunk_ms=None)  # wait-k counts source words
        self.searcher: Searcher = make_searcher(self.options.search, self.policy.stop_rule())
        self.state = MTStageState()

    # ------------------------------------------------------------------------------------ public API
    @property
    def source_text(self) -> str:
        """The source text received so far."""
        return self.state.source

    @property
    def tokenizer(self) -> Tokenizer:
        """The backend's target tokenizer."""
        return self.backend.tokenizer

    def push(self, increment: str, source_ms: float, elapsed_ms: float,
             spoken: tuple[float | None, float | None] | None = None) -> list[Emission]:
        """Read a committed source increment (its text, as the ASR emitted it) stamped with the audio time
        ``source_ms`` and computation-aware time ``elapsed_ms`` at which it was committed, and ``spoken``: where
        it was spoken, (start_ms, end_ms) (None, or None times: untimed)."""
        st = self.state
        if st.finished:
            raise SimulstError("this MT stage has finished; start a new one for a new source")
        self._hear(spoken)
        st.source += increment
        st.segment += increment
        out: list[Emission] = []
        if self.options.sentences and self.policy.commits_early:
            head, tail = _split_after_sentence(st.segment)
            if head:
                out += self._step(head, source_ms, elapsed_ms, DecodeReason.SEGMENT_END)
                st.segment, st.base, st.policy, st.search = tail, len(st.output.committed), PolicyState(), SearchState()
        source = _normalise(st.segment)
        if not source or source == st.last_source or not self.policy.commits_early:
            return out
        st.last_source = source
        return out + self._step(source, source_ms, elapsed_ms, DecodeReason.CHUNK)

    def finish(self, increment: str, source_ms: float, elapsed_ms: float,
               spoken: tuple[float | None, float | None] | None = None) -> list[Emission]:
        """The source has ended (after ``increment``, possibly empty, spoken at ``spoken`` as in :meth:`push`):
        translate it all and commit the best hypothesis whole (no policy)."""
        st = self.state
        if st.finished:
            return []
        st.finished = True
        self._hear(spoken)
        st.source += increment
        st.segment += increment
        source = _normalise(st.segment)
        if not source:
            return []
        return self._step(source, source_ms, elapsed_ms, DecodeReason.SOURCE_END)

    # ------------------------------------------------------------------------------------ internals
    def _hear(self, spoken: tuple[float | None, float | None] | None) -> None:
        """Note where a source increment was spoken (the span of the next target emission)."""
        st = self.state
        if spoken is None or spoken[0] is None or spoken[1] is None:
            return
        if st.spoken_start is None:
            st.spoken_start = spoken[0]
        st.spoken_end = spoken[1] if st.spoken_end is None else max(st.spoken_end, spoken[1])

    def _spoken_span(self, tokens: int) -> list[tuple[float, float]] | None:
        """The spoken span of a target emission of ``tokens`` tokens, per token (see the module docstring); the
        source it consumed is then used up."""
        st = self.state
        if st.spoken_end is None:
            return None
        start = st.spoken_end if st.spoken_start is None else st.spoken_start
        st.spoken_start = None
        return [(start, st.spoken_end)] * tokens

    def _step(self, source: str, source_ms: float, elapsed_ms: float, reason: DecodeReason) -> list[Emission]:
        """Translate ``source`` (the current segment), continuing the target committed for it; unless the
        ``reason`` is a new source increment (``CHUNK``), commit the best translation whole: the segment is a
        complete sentence (``SEGMENT_END``) or the source has ended (``SOURCE_END``)."""
        st = self.state
        start = time.perf_counter()
        before = tuple(st.output.committed[: st.base])
        whole, final = reason.commits_whole, reason.ends_source
        request = MTRequest(source, tuple(st.output.committed[st.base :]), whole, self.options, self.searcher,
                            st.search)
        hyps: list[Hypothesis] = self.backend.translate(request, st.costs)
        if before:  # the policies and the commit path see the whole target
            hyps = [Hypothesis(before + h.tokens, h.score, h.finished) for h in hyps]
        if hyps and not final:
            st.steps += 1
        context = PolicyContext(self.tokenizer, source_words=len(source.split()))
        target = target_tokens(hyps, whole, st.output.committed, self.policy, st.policy, context)
        st.costs.compute_s += time.perf_counter() - start
        added = len(target) - len(st.output.committed)
        times = self._spoken_span(added) if added > 0 else None
        emission = st.output.commit(target, self.tokenizer, source_ms, elapsed_ms + st.costs.compute_s * 1000.0, final,
                                    times)
        return [] if emission is None else [emission]


def _normalise(text: str) -> str:
    return " ".join(text.split())


SENTENCE_END = re.compile(r"[.?!。？！][\"'»”)\]]*(?=\s|$)")


def _split_after_sentence(text: str) -> tuple[str, str]:
    """(the complete sentences of ``text``, normalised; the rest, raw): split after its last sentence end."""
    ends = list(SENTENCE_END.finditer(text))
    if not ends:
        return "", text
    cut = ends[-1].end()
    return _normalise(text[:cut]), text[cut:]
