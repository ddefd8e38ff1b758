"""The onlinized MT stage of a cascade: committed source text in, committed target text out.

The stage is onlinized like the ASR :class:`~simulst.session.Session` (2022 paper §3; SPEC §5 "cascades"): for
every new committed source increment (an ASR emission) it translates the whole committed source prefix, continuing
its own committed target tokens (forced decoding; a black-box backend aligns a fresh translation to them), and a
policy picks the stable prefix of the hypotheses; what extends the committed target, cut back to whole words, is
emitted and never changed. When the source ends, the full source is translated once more and the best hypothesis
is committed whole, so a source that arrives at once is translated exactly as offline MT translates it.

Times are on the *audio* timeline: a target emission carries the ``source_ms`` of the ASR emission that triggered
it, and as ``elapsed_ms`` that emission's computation-aware time plus the MT compute this stream has spent so far
(the two stages run one after the other, so each one's compute delays everything after it)::

    stage = MTStage(backend, MTOptions(policy=PolicyOptions.parse("la-2")))
    for asr_emission in asr_emissions:
        for target in stage.push(asr_emission.text, asr_emission.source_ms, asr_emission.elapsed_ms):
            print(target.text, end="")
    stage.finish("", source_ms=total_ms, elapsed_ms=total_ms + asr_compute_ms)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from simulst.cascade.backend import MTBackend
from simulst.cascade.options import MTOptions
from simulst.errors import SimulstError
from simulst.models.base import Tokenizer
from simulst.policies import Policy, make_policy
from simulst.search import Searcher, make_searcher
from simulst.session import whole_words
from simulst.types import Costs, Emission, Hypothesis


@dataclass
class MTStageState:
    """All mutable data of one stream's MT stage.

    Attributes:
        source: the committed source text received so far (increments concatenated).
        committed: target tokens emitted so far (never retracted).
        text: target text emitted so far (the concatenation of the emission texts).
        emissions: every target emission.
        costs: the MT stage's own work counters (``compute_s`` is MT compute only).
        steps: number of translations of a non-final source prefix.
        last_source: the source of the last translation (a prefix is never translated twice).
        finished: True after :meth:`MTStage.finish`.
    """

    policy: Policy
    searcher: Searcher
    source: str = ""
    committed: list[int] = field(default_factory=list)
    text: str = ""
    emissions: list[Emission] = field(default_factory=list)
    costs: Costs = field(default_factory=Costs)
    steps: int = 0
    last_source: str = ""
    finished: bool = False


class MTStage:
    """One stream's MT stage over a shared backend: ``push(source increment) -> target emissions``, ``finish()``."""

    def __init__(self, backend: MTBackend, options: MTOptions | None = None) -> None:
        self.backend = backend
        self.options = options or MTOptions()
        # make_policy's chunk size only scales wait-k, which the MT stage applies on source words itself.
        self.state = MTStageState(
            policy=make_policy(self.options.policy, 1000.0), searcher=make_searcher(self.options.search)
        )

    # ------------------------------------------------------------------------------------ public API
    @property
    def text(self) -> str:
        """The target text so far."""
        return self.state.text

    @property
    def source_text(self) -> str:
        """The source text received so far."""
        return self.state.source

    @property
    def emissions(self) -> list[Emission]:
        """All target emissions so far."""
        return self.state.emissions

    @property
    def costs(self) -> Costs:
        """The MT stage's work counters."""
        return self.state.costs

    def push(self, increment: str, source_ms: float, elapsed_ms: float) -> list[Emission]:
        """Read a committed source increment (its text, as the ASR emitted it) stamped with the audio time
        ``source_ms`` and computation-aware time ``elapsed_ms`` at which it was committed."""
        st = self.state
        if st.finished:
            raise SimulstError("this MT stage has finished; start a new one for a new source")
        st.source += increment
        source = _normalise(st.source)
        if not source or source == st.last_source or self.options.policy.name == "offline":
            return []
        start = time.perf_counter()
        st.last_source = source
        hyps = self._translate(source, final=False)
        target: Sequence[int] = st.committed
        if hyps:
            st.steps += 1
            stable = self._stable(hyps, source)
            target = stable[: whole_words(stable, hyps[0], self.tokenizer)]
        st.costs.compute_s += time.perf_counter() - start
        return self._commit(target, source_ms, elapsed_ms, final=False)

    def finish(self, increment: str, source_ms: float, elapsed_ms: float) -> list[Emission]:
        """The source has ended (after ``increment``, possibly empty): translate it all and commit the best
        hypothesis whole (no policy)."""
        st = self.state
        if st.finished:
            return []
        st.finished = True
        st.source += increment
        source = _normalise(st.source)
        if not source:
            return []
        start = time.perf_counter()
        hyps = self._translate(source, final=True)
        st.costs.compute_s += time.perf_counter() - start
        return self._commit(hyps[0].tokens if hyps else st.committed, source_ms, elapsed_ms, final=True)

    @property
    def tokenizer(self) -> Tokenizer:
        """The backend's target tokenizer."""
        return self.backend.tokenizer

    # ------------------------------------------------------------------------------------ internals
    def _translate(self, source: str, final: bool) -> list[Hypothesis]:
        st = self.state
        return self.backend.translate(source, st.committed, st.searcher, self.options, st.costs, final)

    def _stable(self, hyps: Sequence[Hypothesis], source: str) -> tuple[int, ...]:
        if self.options.policy.name == "wait":
            return wait_k_words(hyps[0], len(source.split()), self.options.policy.n, self.tokenizer)
        return self.state.policy.stable_prefix(hyps)

    def _commit(self, target: Sequence[int], source_ms: float, elapsed_ms: float, final: bool) -> list[Emission]:
        st = self.state
        n_old = len(st.committed)
        if len(target) <= n_old:
            return []
        if list(target[:n_old]) != st.committed:
            raise AssertionError("a translation does not continue the committed target")  # backend bug
        new_tokens = list(target[n_old:])
        st.committed.extend(new_tokens)
        full = self.tokenizer.decode(st.committed).lstrip()
        # As in Session._commit: the shown text only grows; fall back to the new tokens' own text otherwise.
        increment = full[len(st.text) :] if full.startswith(st.text) else self.tokenizer.decode(new_tokens)
        st.text += increment
        emission = Emission(
            text=increment,
            tokens=tuple(new_tokens),
            source_ms=source_ms,
            elapsed_ms=elapsed_ms + st.costs.compute_s * 1000.0,
            final=final,
        )
        st.emissions.append(emission)
        return [emission]


def wait_k_words(best: Hypothesis, source_words: int, k: int, tokenizer: Tokenizer) -> tuple[int, ...]:
    """wait-k on words (Ma et al. 2019, γ = 1): the longest prefix of ``best`` with at most
    ``source_words − k + 1`` whole target words, cut before the token that would start one word too many."""
    allowed = source_words - k + 1
    if allowed <= 0:
        return ()
    words = 0
    for i, token in enumerate(best.tokens):
        if tokenizer.starts_word(token) or i == 0:
            words += 1
            if words > allowed:
                return tuple(best.tokens[:i])
    return tuple(best.tokens)


def _normalise(text: str) -> str:
    return " ".join(text.split())
