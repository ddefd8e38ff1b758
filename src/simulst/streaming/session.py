"""The onlinization loop (Polák et al., IWSLT 2022, §3): chunked incremental decoding of an offline model.

A :class:`Session` is one stream through a shared, stateless model (the engine,
:class:`~simulst.streaming.engine.SpeechEngine`); everything that changes while the stream is decoded lives in its
:class:`StreamState`, so one loaded model serves any number of streams::

    engine = SpeechEngine(load_model())
    session = engine.open(StreamOptions(chunk_ms=1000, policy=PolicyOptions.parse("la-2")))
    for piece in audio_pieces:
        for emission in session.push(piece):
            print(emission.text, end="", flush=True)
    session.finish()

Every ``chunk_ms`` of source (the first after ``initial_wait_ms`` if set) the whole source read so far is
encoded, the committed tokens are force-decoded in one parallel pass, the search continues them, and the policy
picks a stable prefix. What extends the committed output, cut back to a whole word, is emitted and never
changed (:mod:`simulst.streaming.commit`). An ``<eos>`` before the source ends only ends that chunk's hypothesis
(2022 paper §4.1). When the source ends, one last search commits the whole best hypothesis - so one final chunk
is exactly offline decoding. The decoder prompt (for a multilingual model: the language, detected from the first
audio decoded) is fixed once per stream.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from simulst.audio.io import check_audio, is_silent
from simulst.config import StreamOptions
from simulst.errors import AudioError, InputTooLongError
from simulst.models.base import Encoded, SpeechJudge, SpeechModel
from simulst.policies import Policy, PolicyContext, PolicyState, make_policy
from simulst.search import Query, Searcher, SearchState, make_searcher
from simulst.streaming.commit import Output, OutputView, target_tokens
from simulst.types import Costs, Emission, Hypothesis


@dataclass
class StreamState:
    """All mutable data of one stream.

    Attributes:
        audio: the source samples read so far (a growing buffer; ``samples`` of it are valid).
        samples: number of valid samples in ``audio``.
        next_decode: the sample count at which the next chunk is decoded.
        output: the committed tokens, text and emissions.
        policy: the policy's history.
        search: what the searches carry across chunks (kept beams, ``Seen``).
        prompt: the decoder prompt, fixed at the first decode (None before).
        costs: work counters.
        chunks: number of non-final decodes that produced hypotheses.
        last_decoded: sample count of the last decode; with ``last_hyps``, its hypotheses.
        finished: True after :meth:`Session.finish`.
    """

    audio: np.ndarray
    next_decode: int
    samples: int = 0
    output: Output = field(default_factory=Output)
    policy: PolicyState = field(default_factory=PolicyState)
    search: SearchState = field(default_factory=SearchState)
    prompt: tuple[int, ...] | None = None
    costs: Costs = field(default_factory=Costs)
    chunks: int = 0
    last_decoded: int = -1
    last_hyps: list[Hypothesis] = field(default_factory=list)
    finished: bool = False


class Session(OutputView):
    """One stream through a shared model: ``push(audio) -> emissions``, then ``finish()``.

    Args:
        model: the speech model (shared across sessions; it holds no per-stream state).
        options: chunking, search and policy options.
        catch_up: when several chunk boundaries are pending at a push, decode only once, at the latest
            (real-time use: a slow model reads bigger chunks instead of falling further behind).
    """

    state: StreamState

    def __init__(self, model: SpeechModel, options: StreamOptions | None = None, catch_up: bool = False) -> None:
        self.model = model
        self.options = options or StreamOptions()
        self.catch_up = catch_up
        self.policy: Policy = make_policy(self.options.policy, self.options.chunk_ms)
        self.searcher: Searcher = make_searcher(self.options.search, self.policy.stop_rule())
        self.context = PolicyContext(model.tokenizer)
        rate = model.sample_rate
        self.chunk_samples = max(1, round(self.options.chunk_ms * rate / 1000))
        first = self.options.initial_wait_ms or self.options.chunk_ms
        self.state = StreamState(np.zeros(rate * 4, dtype=np.float32), next_decode=max(1, round(first * rate / 1000)))

    # ------------------------------------------------------------------------------------ public API
    @property
    def sample_rate(self) -> int:
        """The model's sample rate."""
        return int(self.model.sample_rate)

    @property
    def next_decode(self) -> int:
        """The sample count at which the next chunk is decoded."""
        return self.state.next_decode

    def push(self, audio: np.ndarray) -> list[Emission]:
        """Read more source samples (mono, ``model.sample_rate``); decode every chunk boundary reached."""
        st = self.state
        if st.finished:
            raise AudioError("this stream has finished; start a new Session for new audio")
        check_audio(audio)
        self._append(np.asarray(audio, dtype=np.float32))
        out: list[Emission] = []
        if not self.policy.commits_early:
            return out
        while st.samples >= st.next_decode:
            boundary = st.next_decode
            if self.catch_up:
                pending = (st.samples - boundary) // self.chunk_samples
                boundary += pending * self.chunk_samples
            st.next_decode = boundary + self.chunk_samples
            emission = self._decode(boundary, final=False)
            if emission is not None:
                out.append(emission)
        return out

    def finish(self) -> list[Emission]:
        """The source has ended: decode it all once more and commit the whole best hypothesis."""
        st = self.state
        if st.finished:
            return []
        st.finished = True
        emission = self._decode(st.samples, final=True)
        return [] if emission is None else [emission]

    # ------------------------------------------------------------------------------------ internals
    def _append(self, audio: np.ndarray) -> None:
        st = self.state
        needed = st.samples + audio.shape[0]
        ensure_fits(self.model, needed)
        if needed > st.audio.shape[0]:
            grown = np.zeros(max(needed, 2 * st.audio.shape[0]), dtype=np.float32)
            grown[: st.samples] = st.audio[: st.samples]
            st.audio = grown
        st.audio[st.samples : needed] = audio
        st.samples = needed

    def _decode(self, samples: int, final: bool) -> Emission | None:
        st = self.state
        start = time.perf_counter()
        audio = st.audio[:samples]
        if samples == 0 or is_silent(audio):
            hyps: list[Hypothesis] = []
        elif samples == st.last_decoded and st.last_hyps and (not final or not self.searcher.final_differs):
            hyps = st.last_hyps  # the source did not grow since the last decode: same search, same result
        else:
            hyps = self._search(audio, final)
        st.last_decoded, st.last_hyps = samples, hyps
        if hyps and not final and self._unsure(hyps[0]):
            hyps = []
        if hyps and not final:
            st.chunks += 1
        target = target_tokens(hyps, final, st.output.committed, self.policy, st.policy, self.context)
        st.costs.compute_s += time.perf_counter() - start
        source_ms = samples * 1000.0 / self.model.sample_rate
        elapsed_ms = source_ms + st.costs.compute_s * 1000.0
        return st.output.commit(target, self.model.tokenizer, source_ms, elapsed_ms, final)

    def _unsure(self, best: Hypothesis) -> bool:
        """The low-confidence guard: the best hypothesis's new tokens have a mean log-probability below the
        threshold (nothing is committed from this chunk)."""
        threshold = self.options.logprob_threshold
        searched = len(best.tokens) - len(self.state.output.committed) + int(best.finished)
        if threshold is None or searched <= 0 or best.score / searched >= threshold:
            return False
        self.state.costs.count("unsure_skips")
        return True

    def _judged_silent(self, enc: Encoded) -> bool:
        """The no-speech guard: True when the model judges the encoding to hold no speech (nothing committed)."""
        threshold = self.options.no_speech_threshold
        if threshold is None or not isinstance(self.model, SpeechJudge):
            return False
        if self.model.no_speech_prob(enc, self.state.costs) <= threshold:
            return False
        self.state.costs.count("no_speech_skips")
        return True

    def _search(self, audio: np.ndarray, final: bool) -> list[Hypothesis]:
        st = self.state
        enc = self.model.encode(audio, st.costs)
        if not final and self._judged_silent(enc):
            return []
        if st.prompt is None:  # fixed once per stream: a multilingual model detects the language here
            st.prompt = tuple(self.model.prompt(enc, st.costs))
        seconds = audio.shape[0] / self.model.sample_rate
        budget = self.options.search.max_new_tokens or math.ceil(seconds * self.options.search.max_tokens_per_s + 10)
        committed = tuple(st.output.committed)
        max_new = min(budget, self.model.max_length - len(committed))
        return self.searcher.search(self.model, Query(enc, committed, max_new, final, st.prompt), st.search, st.costs)


def ensure_fits(model: SpeechModel, samples: int) -> None:
    """Raise :class:`InputTooLongError` when ``samples`` of source exceed the model's window."""
    if samples > model.max_source_samples:
        raise InputTooLongError(
            f"the source is longer than the model's {model.max_source_samples / model.sample_rate:.0f} s window; "
            "long-form streaming is not supported yet - split the audio"
        )
