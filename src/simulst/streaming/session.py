"""The onlinization loop (Polák et al., IWSLT 2022, §3): chunked incremental decoding of an offline model.

A :class:`Session` is one stream through a shared, stateless model (the engine,
:class:`~simulst.streaming.engine.SpeechEngine`); everything that changes while the stream is decoded lives in the
session and its parts, so one loaded model serves any number of streams::

    engine = SpeechEngine(load_model())
    session = engine.open(StreamOptions(chunk_ms=1000, policy=PolicyOptions.parse("la-2")))
    for piece in audio_pieces:
        for emission in session.push(piece):
            print(emission.text, end="", flush=True)
    session.finish()

Every ``chunk_ms`` of source the buffer is decoded and the policy picks a stable prefix; what extends the
committed output, cut back to a whole word, is emitted and never retracted. When the source ends, one last decode
commits the whole best hypothesis (one final chunk is exactly offline decoding). The session schedules; its parts
do the rest (:mod:`~simulst.streaming.buffer`, :mod:`~simulst.streaming.decoding`, :mod:`~simulst.streaming.guards`,
:mod:`~simulst.streaming.prompt`, :mod:`~simulst.streaming.segmenter`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from simulst.audio.io import check_audio
from simulst.config import StreamOptions
from simulst.errors import AudioError, OptionError
from simulst.models.base import SpeechModel, TaskedModel
from simulst.policies import Policy, PolicyContext, PolicyState, make_policy
from simulst.search import make_final_searcher, make_searcher
from simulst.streaming.buffer import AudioBuffer
from simulst.streaming.commit import Output, OutputView, ends_sentence, target_tokens
from simulst.streaming.decoding import ChunkDecoder, Decoded, DecodeReason
from simulst.streaming.guards import Guards
from simulst.streaming.memory import release_free_memory
from simulst.streaming.prompt import PromptBuilder, initial_prompt
from simulst.streaming.segmenter import VadSegmenter
from simulst.types import Costs, Emission, Hypothesis

ESCAPE_S = 1.0  # seconds of audio after the committed text from which a decode that adds nothing reads it alone


@dataclass
class StreamState:
    """What one stream has committed (``output``) and done: the policy's history, work counters, the source
    sample count at which the next chunk is decoded, finished."""

    next_decode: int
    output: Output = field(default_factory=Output)
    policy: PolicyState = field(default_factory=PolicyState)
    costs: Costs = field(default_factory=Costs)
    finished: bool = False


def check_window(options: StreamOptions, model: SpeechModel) -> None:
    """Check that the stream's segment and buffer fit the model's window (Whisper: 30 s), the most audio it reads.

    Raises:
        OptionError: ``segment_s`` or ``max_buffer_s`` is longer; the message names the window.
    """
    window_s = model.max_source_samples / model.sample_rate
    for name, flag, value in (("segment", "--segment-s", options.segment_s),
                              ("maximum buffer", "--max-buffer-s", options.max_buffer_s)):
        if round(value * model.sample_rate) > model.max_source_samples:
            raise OptionError(f"the {name} ({flag} {value:g}) is longer than the model's window: at most "
                              f"{window_s:g} s")


class Session(OutputView):
    """One stream through a shared model: ``push(audio) -> emissions``, then ``finish()``.

    Args:
        model: the speech model (shared across sessions; it holds no per-stream state).
        options: chunking, search and policy options.
        catch_up: when several chunk boundaries are pending at a push, decode only once, at the latest
            (real-time use: a slow model reads bigger chunks instead of falling further behind).

    Raises ``OptionError`` when the options' segment or buffer is longer than the model's window
    (:func:`check_window`), or when they hold a prompt and the model takes no previous text
    (:func:`~simulst.streaming.prompt.initial_prompt`).

    Streams of any length: the model sees a bounded :class:`~simulst.streaming.buffer.AudioBuffer`, trimmed behind
    committed text; the committed tokens before it become the previous-text prompt.
    """

    state: StreamState

    def __init__(self, model: SpeechModel, options: StreamOptions | None = None, catch_up: bool = False) -> None:
        self.model = model
        self.options = options = options or StreamOptions()
        check_window(options, model)
        self.catch_up = catch_up
        self.policy: Policy = make_policy(options.policy, options.chunk_ms)
        self.context = PolicyContext(model.tokenizer)
        rate = model.sample_rate
        self.chunk_samples = max(1, round(options.chunk_ms * rate / 1000))
        # a policy that commits only at the end (offline) decodes whole windows: its buffer is the model's window
        capacity = model.max_source_samples
        if self.policy.commits_early:
            capacity = min(capacity, round(options.max_buffer_s * rate))
        self.buffer = AudioBuffer(rate, capacity, min(capacity, round(options.segment_s * rate)), self.chunk_samples)
        translates = isinstance(model, TaskedModel) and model.task == "translate"
        self.guards = Guards(options, translates, self.buffer.segment)
        self.prompt = PromptBuilder(options.context_tokens, options.context_in_force(translates),
                                    initial_prompt(model, options.prompt) if options.prompt else ())
        first = options.initial_wait_ms or options.chunk_ms
        self.state = st = StreamState(next_decode=max(1, round(first * rate / 1000)))
        searcher = make_searcher(options.search, self.policy.stop_rule())
        self.decoder = ChunkDecoder(model, options, searcher, make_final_searcher(options.search), self.buffer,
                                    self.guards, self.prompt, st.output, st.costs)
        self.segmenter = VadSegmenter.for_stream(options, rate) if options.vad else None
        self._previous_best: tuple[int, ...] = ()  # the last chunk decode's best hypothesis (the unsure-word guard)
        self._held_at: int | None = None  # the committed length after which a sentence end is held (None: none)
        self._marks: tuple[int, ...] | None = None  # the model's punctuation-only tokens (once needed)

    @property
    def sample_rate(self) -> int:
        """The model's sample rate."""
        return int(self.model.sample_rate)

    @property
    def next_decode(self) -> int:
        """The source sample count (since the stream began) at which the next chunk is decoded."""
        return self.state.next_decode

    @property
    def read(self) -> int:
        """Source samples read since the stream began."""
        return self.buffer.read

    def push(self, audio: np.ndarray) -> list[Emission]:
        """Read more source samples (mono, ``model.sample_rate``); decode every chunk boundary reached.

        Without ``catch_up`` what a stream emits does not depend on how its audio is cut into pushes: the samples
        are read in the order of the source, each chunk boundary decoded once the audio before it is read and
        before any after it, each VAD window's speech start or pause taken when that window is read, and the VAD's
        silence dropped only at whole chunks of the stream (:meth:`_follow_voice`). With ``catch_up`` only the
        decodes depend on the cut: one per push, at its last chunk boundary."""
        if self.state.finished:
            raise AudioError("this stream has finished; start a new Session for new audio")
        check_audio(audio)
        audio = np.asarray(audio, dtype=np.float32)
        out: list[Emission] = []
        pos, end = 0, audio.shape[0]
        while pos < end:
            if self.buffer.room <= 0:
                out += self._empty_buffer()
            stop = self._to_next_stop()
            piece = audio[pos : pos + (self.buffer.room if stop is None else min(self.buffer.room, stop))]
            pos += piece.shape[0]
            self.buffer.append(piece)
            if self.segmenter is not None:
                out += self._follow_voice(piece)
            if not self.catch_up or pos == end or self.buffer.room <= 0:
                out += self._decode_due()
        return out

    def _to_next_stop(self) -> int | None:
        """Samples to read before the stream next acts on what it read: with a VAD, the end of its window (where
        it may hear a pause or speech) and of the stream's chunk (where its silence may be dropped); without
        ``catch_up``, the next chunk boundary to decode. None: nowhere (the push is read whole)."""
        read = self.buffer.read
        stops = []
        if self.segmenter is not None:
            window = self.segmenter.detector.window
            stops += [window - read % window, self.chunk_samples - read % self.chunk_samples]
        if not self.catch_up and self.policy.commits_early and self.state.next_decode > read:
            stops.append(self.state.next_decode - read)
        return min(stops, default=None)

    def finish(self) -> list[Emission]:
        """The source has ended: decode the buffer once more and commit the whole best hypothesis."""
        if self.state.finished:
            return []
        self.state.finished = True
        buf, vad = self.buffer, self.segmenter
        if vad is not None and not vad.speech_in_buffer:
            return []  # only silence left (the stream's own VAD says so: no second VAD pass below)
        if vad is None and buf.offset > 0 and self.guards.silent_tail(buf.head(buf.samples), buf.rate,
                                                                      self.state.costs):
            return []
        return self._commit(self._decode_whole(DecodeReason.SOURCE_END, buf.samples), DecodeReason.SOURCE_END)[0]

    def _decode_due(self) -> list[Emission]:
        """Decode at every chunk boundary the source has reached (with ``catch_up``: once, at the latest)."""
        st, buf = self.state, self.buffer
        out: list[Emission] = []
        if not self.policy.commits_early:
            return out
        while buf.read >= st.next_decode:
            boundary = st.next_decode
            if self.catch_up:
                boundary += (buf.read - boundary) // self.chunk_samples * self.chunk_samples
            st.next_decode = boundary + self.chunk_samples
            if boundary <= buf.offset or (self.segmenter is not None and not self.segmenter.speech_in_buffer):
                continue  # audio committed and dropped already (a VAD segment end), or silence: no decoding
            samples = boundary - buf.offset
            decoded = self.decoder.decode(DecodeReason.CHUNK, samples, next_tokens=self._after_held_end())
            emitted, loop_cut = self._commit(decoded, DecodeReason.CHUNK)
            out += emitted
            # a loop (cut from the commit, or where the search stopped): the model reads committed audio again -
            # trim it away now (else once the buffer is long)
            loop = loop_cut or decoded.looped
            if loop or samples > buf.segment:
                self._trim(decoded, samples, eager=loop)
        return out

    def _commit(self, decoded: Decoded, reason: DecodeReason) -> tuple[list[Emission], bool]:
        """Commit what the policy (or, for ``reason.commits_whole``, the whole best hypothesis) takes from a
        decode, short of a repetition loop; the emissions, and whether a loop was cut."""
        st = self.state
        start = time.perf_counter()
        committed = st.output.committed
        target = target_tokens(decoded.hyps, reason.commits_whole, committed, self.policy, st.policy, self.context,
                               self.options.hold_sentence_end, self._previous_best)
        if not reason.commits_whole:
            if decoded.hyps:
                target = self.guards.sure_words(target, decoded.hyps[0], self._previous_best, len(committed),
                                                self.model.tokenizer, st.costs)
            searched = self.decoder.last.hyps  # (the decode as searched: a held one's hypotheses too)
            self._previous_best = searched[0].tokens if searched else ()
        best = decoded.hyps[0].tokens if decoded.hyps else None
        target, loop_cut = self.guards.loop_free(target, len(committed), self.model.tokenizer, st.costs, best)
        if not reason.commits_whole and len(target) > len(committed) and self._restart_context(decoded.hyps[0]):
            target = committed  # (the next chunk decodes without the context)
        st.costs.compute_s += time.perf_counter() - start
        source_ms = decoded.read * 1000.0 / self.model.sample_rate
        times = None  # where the new tokens were spoken (a prefix of the best hypothesis: its timing)
        if len(target) > len(committed) and tuple(decoded.hyps[0].tokens[: len(target)]) == tuple(target):
            times = self.decoder.spoken_times(decoded, len(committed), len(target))
        elapsed_ms = source_ms + st.costs.compute_s * 1000.0
        emission = st.output.commit(target, self.model.tokenizer, source_ms, elapsed_ms, reason.ends_source, times)
        self._follow_held_end(reason)
        return ([] if emission is None else [emission]), loop_cut

    def _follow_held_end(self, reason: DecodeReason) -> None:
        """After a commit, with ``punctuate_held_end``: where a sentence end is held. It is held right after the
        committed text when the chunk decode's best hypothesis is the committed text and a sentence end, and stays
        held while that decode's best hypothesis writes punctuation there and nothing past it is committed."""
        if not (self.options.hold_sentence_end and self.options.punctuate_held_end) or reason.commits_whole:
            self._held_at = None
            return
        committed, best, tokenizer = self.state.output.committed, self._previous_best, self.model.tokenizer
        n = len(committed)
        if len(best) <= n or tuple(best[:n]) != tuple(committed) or not tokenizer.is_punctuation(best[n]):
            self._held_at = None
        elif len(best) == n + 1 and ends_sentence(best[n], tokenizer):
            self._held_at = n
        elif self._held_at != n:
            self._held_at = None

    def _after_held_end(self) -> tuple[int, ...] | None:
        """The tokens a chunk's search may write first (``Query.next_tokens``): where a sentence end is held right
        after the committed text (:meth:`_follow_held_end`), a punctuation-only token (not ``<eos>``: a text that
        ends there is a sentence that ends without a mark, and the next decode's would be free again); else None
        (any)."""
        if self._held_at is None or self._held_at != len(self.state.output.committed):
            return None
        if self._marks is None:
            tokenizer = self.model.tokenizer
            self._marks = tuple(t for t in range(self.model.vocab_size) if tokenizer.is_punctuation(t))
        return self._marks

    def _trim(self, decoded: Decoded, samples: int, eager: bool) -> None:
        """Trim the buffer behind committed text after a chunk decode (:meth:`AudioBuffer.trim_point`)."""
        if not decoded.hyps:
            return
        point = self.buffer.trim_point(
            decoded.hyps[0].tokens, self.state.output.committed, samples, eager,
            lambda token: ends_sentence(token, self.model.tokenizer),
            lambda: self.decoder.token_starts(decoded),
        )
        if point is not None:
            self._drop(*point)

    def _empty_buffer(self) -> list[Emission]:
        """The buffer is full and could not be trimmed: commit its best hypothesis whole and drop the audio it
        covers (:meth:`AudioBuffer.text_end_cut`). Where the model skipped the speech before its text, that audio
        is decoded alone and committed first, the rest kept; an unsure hypothesis - mostly a hallucination loop,
        which committed whole would also become the prompt of the next buffers - is dropped (counted)."""
        st, buf, reason = self.state, self.buffer, DecodeReason.BUFFER_FULL
        decoded = self._decode_whole(reason, buf.samples)
        starts = self.decoder.token_starts(decoded)
        skipped = buf.skipped_start(starts, nothing_committed=buf.base >= len(st.output.committed))
        if skipped:
            st.costs.count("skipped_starts")
            decoded = self._decode_whole(reason, skipped)
        if decoded.hyps and self.guards.unsure(decoded.hyps[0], len(st.output.committed), skipped or buf.samples,
                                               st.costs):
            decoded, starts = decoded.held(), None
            st.costs.count("unsure_buffer_drops")
        emitted = self._commit(decoded, reason)[0]
        st.costs.count("segment_commits")
        cut = skipped or buf.text_end_cut(starts)  # (skipped: what the model did read stays, to be read again)
        self._drop(cut, len(st.output.committed))
        if self.segmenter is not None:
            self.segmenter.speech_in_buffer = buf.samples > 0 or self.segmenter.detector.speaking
        return emitted

    def _decode_whole(self, reason: DecodeReason, samples: int) -> Decoded:
        """A decode to be committed whole (a full buffer, a segment, the source's end) of the buffer's first
        ``samples``. When its best hypothesis, prompted with the stream's previous text, is a repetition loop from
        its first new token or writes the source language of a translation (:meth:`_restart_context`), the context
        starts afresh after the committed tokens (counted) and the audio is decoded again. When the best hypothesis
        (so decoded) still runs into a loop (:meth:`Guards.kept_before_loop`), the audio is searched once more with
        the loop barred (``Query.block_loops``), and that search is committed in its place when it adds to the text
        the loop guard keeps, the low-confidence guard finds it sure (:meth:`Guards.confident`) and what it adds does
        not say that text again in other words (:meth:`Guards.says_again`; counted either way). When neither adds
        a word to the committed text, the rest of the audio is decoded alone (:meth:`_escape_loop`).

        Why: the loop guard commits none of a loop, and a decode committed whole is not read again, so the speech
        after the loop would be dropped unsaid (``bench/results/longform_phases_vad_translate/``; openai/whisper
        decodes a window whose text compresses too well again at a higher temperature). A prompt that holds a loop's
        text makes Whisper recite it: left, the next buffer would be read with the same prompt, until the stream
        ends (``bench/results/longform_phases_loop_retry/``)."""
        decoded = self.decoder.decode(reason, samples)
        committed, costs = self.state.output.committed, self.state.costs
        if decoded.hyps and self._restart_context(decoded.hyps[0], loop_only=True):
            decoded = self.decoder.decode(reason, samples)
        kept = self.guards.kept_before_loop(decoded.hyps[0].tokens, len(committed), self.model.tokenizer) \
            if decoded.hyps else None
        if kept is None:
            return decoded
        blocked = self.decoder.decode(reason, samples, block_loops=True)
        if not blocked.hyps or not self._says_more(blocked.hyps[0], decoded.hyps[0].tokens[:kept]):
            costs.count("loop_fallbacks_dropped")
            return self._escape_loop(reason, samples, decoded) if kept <= len(committed) else decoded
        costs.count("loop_fallbacks")
        return blocked

    def _escape_loop(self, reason: DecodeReason, samples: int, decoded: Decoded) -> Decoded:
        """A decode committed whole of the buffer's first ``samples`` that adds no word to the committed text: its
        best hypothesis continues the committed text with a loop that began inside it (each decode is forced to
        continue the committed tokens), and neither a fresh context nor a loop-barred search leaves it. Where the
        committed text ends (the search's token timing) at least :data:`ESCAPE_S` before ``samples``, the buffer
        is cut there, the context starts afresh, and the audio after the cut is decoded alone: committed (counted
        ``loop_escapes``) unless what it says mostly says the committed text again (:meth:`Guards.says_again`: the
        token timing put the cut too early; counted ``loop_escapes_dropped``, nothing committed); else ``decoded``.

        Why: that audio's speech would be dropped unsaid; decoded without the looping text before it, Whisper
        translates it (fleurs-de-003 on a shifted chunk grid: "... have lived their time and have lived their time
        and" lost its second half, "who were murdered there ...";
        ``bench/results/longform_phases_escape_translate/``)."""
        committed = len(self.state.output.committed)
        starts = self.decoder.token_starts(decoded)
        index = committed - decoded.base
        if starts is None or not 0 <= index < len(starts):
            return decoded
        end = starts[index]
        if samples - end < ESCAPE_S * self.buffer.rate:
            return decoded
        self._drop(end, committed, count=False)  # (the decoder's searches start afresh with it)
        self.prompt.restart(committed)
        escaped = self.decoder.decode(reason, samples - end)
        if escaped.hyps and self.guards.says_again(escaped.hyps[0].tokens, committed, self.model.tokenizer):
            self.state.costs.count("loop_escapes_dropped")
            return escaped.held()
        self.state.costs.count("loop_escapes")
        return escaped

    def _restart_context(self, best: Hypothesis, loop_only: bool = False) -> bool:
        """True when ``best``, prompted with the stream's previous text, writes the source language where the stream
        translates into English (:meth:`Guards.foreign`) or, with ``loop_only``, says nothing but a repetition loop
        (:meth:`Guards.loop_only`): the context then starts afresh after the committed tokens (counted as
        ``foreign_context_restarts`` or ``loop_context_restarts``), since Whisper goes on writing what its context
        holds - the source language, a loop's text."""
        committed, tokenizer = self.state.output.committed, self.model.tokenizer
        if not self.prompt.carries_context(self.model, committed[: self.buffer.base]):
            return False
        if self.guards.foreign(best.tokens, len(committed), tokenizer):
            counter = "foreign_context_restarts"
        elif loop_only and self.guards.loop_only(best.tokens, len(committed), tokenizer):
            counter = "loop_context_restarts"
        else:
            return False
        self.prompt.restart(len(committed))
        self.decoder.reprompted()
        self.state.costs.count(counter)
        return True

    def _says_more(self, blocked: Hypothesis, kept: Sequence[int]) -> bool:
        """A search with loops barred is committed in place of one whose loop the guard cuts (leaving ``kept``)
        when it adds to ``kept`` (or, taking another way, to the committed text), the low-confidence guard finds it
        sure, and what it adds is not mostly said before."""
        committed = len(self.state.output.committed)
        added = len(kept) if tuple(blocked.tokens[: len(kept)]) == tuple(kept) else committed
        return len(blocked.tokens) > added and self.guards.confident(blocked, committed) \
            and not self.guards.says_again(blocked.tokens, added, self.model.tokenizer)

    def _drop(self, cut: int, base: int, count: bool = True) -> None:
        """Remove the first ``cut`` samples of the buffer; committed tokens up to ``base`` now precede it."""
        self.buffer.drop(cut, base)
        self.decoder.restart()
        release_free_memory()  # (a long stream's heap stays flat: :mod:`simulst.streaming.memory`)
        if count:
            self.state.costs.count("trims")

    def _follow_voice(self, piece: np.ndarray) -> list[Emission]:
        """VAD: a long pause restarts the context; a pause commits the segment before it; silence with no speech
        in the buffer is dropped at the end of each whole chunk of the stream (``chunk_ms`` since it began), all
        but its last 0.5 s.

        Why at whole chunks: where the buffer starts decides what every later decode reads; dropped after each
        push, it moved with the push sizes (a server's late job pushes more at once), and so did the text."""
        assert self.segmenter is not None
        out: list[Emission] = []
        for event in self.segmenter.hear(piece, self.state.costs):
            if event.kind == "start":
                self.prompt.restart(len(self.state.output.committed))
                self.state.costs.count("context_resets")
            else:
                out += self._end_segment(event.sample)
        if self.buffer.read % self.chunk_samples:
            return out  # (silence is dropped at whole chunks of the stream only, however its audio was pushed)
        silence = self.segmenter.silence_to_drop(self.buffer.samples)
        if silence:
            self._drop(silence, len(self.state.output.committed), count=False)
        return out

    def _end_segment(self, end: int) -> list[Emission]:
        """VAD: speech ended at source sample ``end``: commit the segment's best hypothesis whole, drop it."""
        assert self.segmenter is not None
        st, buf = self.state, self.buffer
        cut = min(buf.samples, end - buf.offset)
        if cut <= 0 or not self.segmenter.speech_in_buffer:
            self.segmenter.speech_in_buffer = False  # (its speech was trimmed away behind committed text already)
            return []
        emitted = self._commit(self._decode_whole(DecodeReason.SEGMENT_END, cut), DecodeReason.SEGMENT_END)[0]
        st.costs.count("vad_segments")
        self.prompt.end_sentence(len(st.output.committed))
        self._drop(min(buf.samples, end - buf.offset), len(st.output.committed))  # (the buffer may start later now)
        self.segmenter.speech_in_buffer = False
        return emitted
