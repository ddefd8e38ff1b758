"""The onlinization loop (2022 paper §3, SPEC §1): chunked incremental decoding of an offline model.

``Session`` = a shared, stateless model + one :class:`StreamState` holding everything that changes while a
stream is decoded, so one loaded model serves any number of streams::

    session = Session(model, StreamOptions(chunk_ms=1000, policy=PolicyOptions.parse("la-2")))
    for piece in audio_pieces:
        for emission in session.push(piece):
            print(emission.text, end="", flush=True)
    session.finish()

Every ``chunk_ms`` of source (the first after ``initial_wait_ms`` if set) the whole source read so far is
encoded, the committed tokens are force-decoded in one parallel pass, the search continues them, and the policy
picks a stable prefix. What extends the committed output, cut back to a whole word, is emitted and never
changed. An ``<eos>`` before the source ends only ends that chunk's hypothesis (2022 paper §4.1). When the source
ends, one last search commits the whole best hypothesis - so one final chunk is exactly offline decoding.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from simulst.audio.io import check_audio, is_silent
from simulst.config import StreamOptions
from simulst.errors import AudioError, InputTooLongError
from simulst.models.base import SpeechModel, Tokenizer
from simulst.policies import Policy, make_policy
from simulst.search import Searcher, make_searcher
from simulst.types import Costs, Emission, Hypothesis


class Stream(Protocol):
    """What runs a stream (the CLI, the evaluation runner) needs: a :class:`Session`, or a cascade of stages."""

    @property
    def sample_rate(self) -> int:
        """Samples per second of the audio :meth:`push` takes."""
        ...

    @property
    def chunk_samples(self) -> int:
        """Samples per chunk."""
        ...

    @property
    def next_decode(self) -> int:
        """The sample count at which the stream decodes next."""
        ...

    @property
    def text(self) -> str:
        """The output so far."""
        ...

    @property
    def emissions(self) -> list[Emission]:
        """All emissions so far."""
        ...

    @property
    def costs(self) -> Costs:
        """Work counters."""
        ...

    def push(self, audio: np.ndarray) -> list[Emission]:
        """Read more source audio; returns the new emissions."""
        ...

    def finish(self) -> list[Emission]:
        """The source has ended; returns the last emissions."""
        ...


@dataclass
class StreamState:
    """All mutable data of one stream.

    Attributes:
        audio: the source samples read so far (a growing buffer; ``samples`` of it are valid).
        samples: number of valid samples in ``audio``.
        next_decode: the sample count at which the next chunk is decoded.
        committed: tokens emitted so far (never retracted).
        text: text emitted so far (the concatenation of the emission texts).
        emissions: every emission of the stream.
        policy, searcher: this stream's policy and searcher (they may keep cross-chunk history).
        costs: work counters.
        chunks: number of decodes so far.
        last_decoded: sample count of the last decode; with ``last_hyps``, its hypotheses.
        finished: True after :meth:`Session.finish`.
    """

    audio: np.ndarray
    next_decode: int
    policy: Policy
    searcher: Searcher
    samples: int = 0
    committed: list[int] = field(default_factory=list)
    text: str = ""
    emissions: list[Emission] = field(default_factory=list)
    costs: Costs = field(default_factory=Costs)
    chunks: int = 0
    last_decoded: int = -1
    last_hyps: list[Hypothesis] = field(default_factory=list)
    finished: bool = False


class Session:
    """One stream through a shared model: ``push(audio) -> emissions``, then ``finish()``.

    Args:
        model: the speech model (shared across sessions; it holds no per-stream state).
        options: chunking, search and policy options.
        catch_up: when several chunk boundaries are pending at a push, decode only once, at the latest
            (real-time use: a slow model reads bigger chunks instead of falling further behind).
    """

    def __init__(self, model: SpeechModel, options: StreamOptions | None = None, catch_up: bool = False) -> None:
        self.model = model
        self.options = options or StreamOptions()
        self.catch_up = catch_up
        rate = model.sample_rate
        self.chunk_samples = max(1, round(self.options.chunk_ms * rate / 1000))
        first = self.options.initial_wait_ms or self.options.chunk_ms
        self.state = StreamState(
            audio=np.zeros(rate * 4, dtype=np.float32),
            next_decode=max(1, round(first * rate / 1000)),
            policy=make_policy(self.options.policy, self.options.chunk_ms),
            searcher=make_searcher(self.options.search, self.options.policy),
        )

    # ------------------------------------------------------------------------------------ public API
    @property
    def sample_rate(self) -> int:
        """The model's sample rate."""
        return int(self.model.sample_rate)

    @property
    def next_decode(self) -> int:
        """The sample count at which the next chunk is decoded."""
        return self.state.next_decode

    @property
    def costs(self) -> Costs:
        """Work counters of this stream."""
        return self.state.costs

    @property
    def text(self) -> str:
        """The output so far."""
        return self.state.text

    @property
    def emissions(self) -> list[Emission]:
        """All emissions so far."""
        return self.state.emissions

    def push(self, audio: np.ndarray) -> list[Emission]:
        """Read more source samples (mono, ``model.sample_rate``); decode every chunk boundary reached."""
        st = self.state
        if st.finished:
            raise AudioError("this stream has finished; start a new Session for new audio")
        check_audio(audio)
        self._append(np.asarray(audio, dtype=np.float32))
        out: list[Emission] = []
        if self.options.policy.name == "offline":
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
        elif samples == st.last_decoded and st.last_hyps and (not final or self._reusable_for_final()):
            hyps = st.last_hyps  # the source did not grow since the last decode: same search, same result
        else:
            hyps = self._search(audio, final)
        st.last_decoded, st.last_hyps = samples, hyps
        if final:
            target: Sequence[int] = hyps[0].tokens if hyps else st.committed
        elif hyps:
            st.chunks += 1
            stable = st.policy.stable_prefix(hyps)
            target = stable[: whole_words(stable, hyps[0], self.model.tokenizer)]
        else:
            target = st.committed
        st.costs.compute_s += time.perf_counter() - start
        return self._commit(target, samples, final)

    def _reusable_for_final(self) -> bool:
        # Offline searches give the same hypotheses whether or not the source has ended (not with the CTC
        # policy: its search stops early only before the source ends).
        return self.options.search.name in ("greedy", "beam") and self.options.policy.name != "ctc"

    def _search(self, audio: np.ndarray, final: bool) -> list[Hypothesis]:
        st = self.state
        enc = self.model.encode(audio, st.costs)
        seconds = audio.shape[0] / self.model.sample_rate
        budget = self.options.search.max_new_tokens or math.ceil(seconds * self.options.search.max_tokens_per_s + 10)
        max_new = min(budget, self.model.max_length - len(st.committed))
        return st.searcher.search(self.model, enc, st.committed, max_new, st.costs, final)

    def _commit(self, target: Sequence[int], samples: int, final: bool) -> Emission | None:
        st = self.state
        n_old = len(st.committed)
        if len(target) <= n_old:
            return None
        if list(target[:n_old]) != st.committed:
            raise AssertionError("a hypothesis does not continue the committed prefix")  # searcher bug
        new_tokens = list(target[n_old:])
        st.committed.extend(new_tokens)
        full = self.model.tokenizer.decode(st.committed).lstrip()
        # Emissions end at word boundaries, so the decoded text only grows; should a byte-level BPE merge ever
        # change shown characters, the increment falls back to the new tokens' own text - never a retraction.
        increment = full[len(st.text) :] if full.startswith(st.text) else self.model.tokenizer.decode(new_tokens)
        st.text += increment
        source_ms = samples * 1000.0 / self.model.sample_rate
        emission = Emission(
            text=increment,
            tokens=tuple(new_tokens),
            source_ms=source_ms,
            elapsed_ms=source_ms + st.costs.compute_s * 1000.0,
            final=final,
        )
        st.emissions.append(emission)
        return emission


def ensure_fits(model: SpeechModel, samples: int) -> None:
    """Raise :class:`InputTooLongError` when ``samples`` of source exceed the model's window."""
    if samples > model.max_source_samples:
        raise InputTooLongError(
            f"the source is longer than the model's {model.max_source_samples / model.sample_rate:.0f} s window; "
            "long-form streaming is not supported yet - split the audio"
        )


def whole_words(stable: Sequence[int], best: Hypothesis, tokenizer: Tokenizer) -> int:
    """Length of the longest prefix of ``stable`` that ends at a word boundary of the best hypothesis.

    The last word of ``stable`` is complete when the best hypothesis continues with a token that starts a new
    word, ends right after it with ``<eos>``, or when ``stable`` ends in punctuation (CMU 2023 §4: an output is
    delayed by one token unless its last token completes a word or is punctuation). Otherwise the trailing,
    possibly partial, word is held back.
    """
    k = len(stable)
    if k == 0:
        return 0
    following = best.tokens[k] if k < len(best.tokens) else None
    if following is not None and tokenizer.starts_word(following):
        return k
    if following is None and best.finished:
        return k
    if tokenizer.is_punctuation(stable[k - 1]):
        return k
    while k > 0 and not tokenizer.starts_word(stable[k - 1]):
        k -= 1
    return max(0, k - 1)
