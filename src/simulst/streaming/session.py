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

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from simulst.audio.io import check_audio, is_silent
from simulst.audio.level import normalize_level
from simulst.audio.vad import WINDOW as VAD_RATES
from simulst.audio.vad import VoiceActivity, VoiceEvent, holds_speech
from simulst.config import StreamOptions
from simulst.errors import AudioError, ModelLoadError
from simulst.models.base import Encoded, PreviousTextPrompter, SpeechJudge, SpeechModel, TaskedModel, TokenTimer
from simulst.policies import Policy, PolicyContext, PolicyState, make_policy
from simulst.search import Query, Searcher, SearchState, make_searcher
from simulst.streaming.commit import Output, OutputView, loop_free_length, target_tokens
from simulst.types import Costs, Emission, Hypothesis


@dataclass
class Decoded:
    """One decode of the buffer: the source samples read then (since the stream began), the hypotheses (over
    the whole committed output), the encoding and the decoder prompt it used."""

    read: int
    hyps: list[Hypothesis]
    enc: Encoded | None = None
    prompt: tuple[int, ...] = ()


@dataclass
class StreamState:
    """All mutable data of one stream.

    Attributes:
        audio: the audio buffer: the source samples read and not yet trimmed (``samples`` of it are valid).
        next_decode: the source sample count (since the stream began) at which the next chunk is decoded.
        samples: number of valid samples in ``audio``.
        offset: source samples trimmed off the front of the buffer so far (long-form streaming).
        base: committed tokens that belong to audio before the buffer (the rest are forced as the prefix).
        context_from: the previous-text prompt carries committed tokens from here to ``base`` (reset by a long
            pause, with VAD; with the sentence scope, by every VAD segment end).
        speech_in_buffer: with VAD: the buffer holds speech (else it is not decoded).
        pause_from: with VAD: where the current pause began (None while speaking).
        output: the committed tokens, text and emissions.
        policy: the policy's history.
        search: what the searches carry across chunks (kept beams, ``Seen``).
        prompt: the decoder prompt, fixed at the first decode (None before).
        costs: work counters.
        chunks: number of non-final decodes that produced hypotheses.
        last: the last decode (its encoding too: a decode of the same source again reuses it whole).
        finished: True after :meth:`Session.finish`.
    """

    audio: np.ndarray
    next_decode: int
    samples: int = 0
    offset: int = 0
    base: int = 0
    context_from: int = 0
    speech_in_buffer: bool = False
    pause_from: int | None = None
    output: Output = field(default_factory=Output)
    policy: PolicyState = field(default_factory=PolicyState)
    search: SearchState = field(default_factory=SearchState)
    prompt: tuple[int, ...] | None = None
    costs: Costs = field(default_factory=Costs)
    chunks: int = 0
    last: Decoded = field(default_factory=lambda: Decoded(-1, []))
    finished: bool = False

    @property
    def read(self) -> int:
        """Source samples read since the stream began."""
        return self.offset + self.samples


class Session(OutputView):
    """One stream through a shared model: ``push(audio) -> emissions``, then ``finish()``.

    Args:
        model: the speech model (shared across sessions; it holds no per-stream state).
        options: chunking, search and policy options.
        catch_up: when several chunk boundaries are pending at a push, decode only once, at the latest
            (real-time use: a slow model reads bigger chunks instead of falling further behind).

    Streams of any length: the model sees an audio buffer of at most ``max_buffer_s`` (and its window). Once the
    buffer is longer than ``segment_s``, it is trimmed behind the last committed sentence end, which the model's
    token timing (:class:`~simulst.models.base.TokenTimer`) locates in the audio; the committed tokens before the
    cut leave the forced prefix and are carried as the previous-text prompt
    (:class:`~simulst.models.base.PreviousTextPrompter`, ``context_tokens`` of them; with ``context_scope``
    ``sentence``, only those of the sentence the buffer starts in). When the buffer is full
    with no committed sentence end, it is trimmed behind the last committed word; when nothing in it is
    committed (or the model has no token timing, or the policy commits only at the end), its best hypothesis is
    committed whole and the buffer emptied. Nothing committed is ever retracted.
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
        # a policy that commits only at the end (offline) decodes whole windows: its buffer is the model's window
        self.max_buffer = model.max_source_samples
        if self.policy.commits_early:
            self.max_buffer = min(self.max_buffer, round(self.options.max_buffer_s * rate))
        self.segment_samples = min(self.max_buffer, round(self.options.segment_s * rate))
        translates = isinstance(model, TaskedModel) and model.task == "translate"
        self.early_logprob_threshold = self.options.early_threshold(translates)
        self.context_scope = self.options.context_in_force(translates)
        first = self.options.initial_wait_ms or self.options.chunk_ms
        self.state = StreamState(np.zeros(rate * 4, dtype=np.float32), next_decode=max(1, round(first * rate / 1000)))
        self.vad: VoiceActivity | None = None
        if self.options.vad:
            self.vad = VoiceActivity(rate, self.options.vad_threshold, self.options.vad_pause_ms)

    # ------------------------------------------------------------------------------------ public API
    @property
    def sample_rate(self) -> int:
        """The model's sample rate."""
        return int(self.model.sample_rate)

    @property
    def next_decode(self) -> int:
        """The source sample count (since the stream began) at which the next chunk is decoded."""
        return self.state.next_decode

    def push(self, audio: np.ndarray) -> list[Emission]:
        """Read more source samples (mono, ``model.sample_rate``); decode every chunk boundary reached."""
        st = self.state
        if st.finished:
            raise AudioError("this stream has finished; start a new Session for new audio")
        check_audio(audio)
        audio = np.asarray(audio, dtype=np.float32)
        out: list[Emission] = []
        pos = 0
        while pos < audio.shape[0]:
            if st.samples >= self.max_buffer:
                out += self._empty_buffer()
            piece = audio[pos : pos + self.max_buffer - st.samples]
            pos += piece.shape[0]
            self._append(piece)
            if self.vad is not None:
                start = time.perf_counter()
                events = self.vad.feed(piece)
                st.costs.compute_s += time.perf_counter() - start
                out += self._follow_voice(events)
            out += self._decode_due()
        return out

    def finish(self) -> list[Emission]:
        """The source has ended: decode the buffer once more and commit the whole best hypothesis."""
        st = self.state
        if st.finished:
            return []
        st.finished = True
        if self.vad is not None and not st.speech_in_buffer:
            return []  # only silence left (the stream's own VAD says so: no second VAD pass below)
        if self.vad is None and st.offset > 0 and self._silent_tail():
            return []
        # a trimmed stream's last buffer may hold only the pause after a committed sentence: the VAD checks above
        # and the no-speech guard keep Whisper from hallucinating there (" you"); an untrimmed stream's final
        # decode stays offline decoding
        decoded = self._decode(st.samples, final=True, guarded=st.offset > 0)
        emission = self._commit(decoded, final=True)
        return [] if emission is None else [emission]

    # ------------------------------------------------------------------------------------ internals
    def _append(self, audio: np.ndarray) -> None:
        st = self.state
        needed = st.samples + audio.shape[0]
        if needed > st.audio.shape[0]:
            grown = np.zeros(min(self.max_buffer, max(needed, 2 * st.audio.shape[0])), dtype=np.float32)
            grown[: st.samples] = st.audio[: st.samples]
            st.audio = grown
        st.audio[st.samples : needed] = audio
        st.samples = needed

    def _decode_due(self) -> list[Emission]:
        """Decode at every chunk boundary the source has reached (with ``catch_up``: once, at the latest)."""
        st = self.state
        out: list[Emission] = []
        if not self.policy.commits_early:
            return out
        while st.read >= st.next_decode:
            boundary = st.next_decode
            if self.catch_up:
                boundary += (st.read - boundary) // self.chunk_samples * self.chunk_samples
            st.next_decode = boundary + self.chunk_samples
            if boundary <= st.offset or (self.vad is not None and not st.speech_in_buffer):
                continue  # audio committed and dropped already (a VAD segment end), or silence: no decoding
            decoded = self._decode(boundary - st.offset, final=False)
            cuts = st.costs.extra.get("loop_cuts", 0)
            emission = self._commit(decoded, final=False)
            if emission is not None:
                out.append(emission)
            # a loop cut: the model reads committed audio again - trim it away now (else once the buffer is long)
            eager = st.costs.extra.get("loop_cuts", 0) > cuts
            if eager or boundary - st.offset > self.segment_samples:
                self._trim(decoded, boundary - st.offset, eager)
        return out

    def _decode(self, samples: int, final: bool, guarded: bool | None = None) -> Decoded:
        """Search the first ``samples`` of the buffer (``guarded``: apply the no-speech guard, and when not ``final``
        the low-confidence guard; default: when not ``final``).

        A ``final`` decode is committed whole and its audio is never read again (the source's end, a VAD segment's
        end, a full buffer): the low-confidence guard, which holds back early commits a later decode can improve,
        would drop its words unread (jfk's "ask not", a segment of its own at 0.5 s pauses). Only a full buffer
        applies it itself (:meth:`_empty_buffer`)."""
        st = self.state
        guarded = not final if guarded is None else guarded
        start = time.perf_counter()
        audio = st.audio[:samples]
        read = st.offset + samples
        if samples == 0 or is_silent(audio):
            decoded = Decoded(read, [])
        elif read == st.last.read and st.last.hyps and (not final or not self.searcher.final_differs):
            decoded = st.last  # the source did not grow since the last decode: same result
        else:
            decoded = self._search(audio, final, guarded)
        st.last = decoded
        if decoded.hyps and guarded and not final and self._unsure(decoded.hyps[0], samples):
            decoded = Decoded(read, [], decoded.enc, decoded.prompt)
        st.costs.compute_s += time.perf_counter() - start
        return decoded

    def _commit(self, decoded: Decoded, final: bool, whole: bool = False) -> Emission | None:
        """Commit what the policy (``final`` / ``whole``: the whole best hypothesis) takes from a decode."""
        st = self.state
        start = time.perf_counter()
        hyps = decoded.hyps
        if hyps and not final:
            st.chunks += 1
        committed = st.output.committed
        target = target_tokens(hyps, final or whole, committed, self.policy, st.policy, self.context)
        if self.options.loop_guard:
            keep = loop_free_length(target, len(committed))
            if keep < len(target):
                while keep > len(committed) and not self.model.tokenizer.starts_word(target[keep]):
                    keep -= 1  # cut back to a whole word
                target = target[:keep]
                st.costs.count("loop_cuts")
        st.costs.compute_s += time.perf_counter() - start
        source_ms = decoded.read * 1000.0 / self.model.sample_rate
        elapsed_ms = source_ms + st.costs.compute_s * 1000.0
        return st.output.commit(target, self.model.tokenizer, source_ms, elapsed_ms, final)

    def _unsure(self, best: Hypothesis, samples: int) -> bool:
        """The low-confidence guard: the best hypothesis's new tokens (searched over the first ``samples`` of the
        buffer) have a mean log-probability below the threshold - the stricter early one while ``samples`` is at
        most a segment - and nothing is committed from this chunk."""
        threshold = self.options.logprob_threshold
        early = self.early_logprob_threshold
        if early is not None and samples <= self.segment_samples:
            threshold = early if threshold is None else max(threshold, early)
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

    def _silent_tail(self) -> bool:
        """The no-speech guard at the end of a trimmed stream: True when Silero VAD finds no speech in what is left
        of the buffer (nothing more is committed).

        Why: the last buffer often holds only the pause after the last committed sentence; lifted by the level
        normalisation and read with the previous text as prompt, it makes Whisper invent a sentence that its own
        no-speech judge lets through (fleurs-de-000: "The island of Hong Kong is a very beautiful island.").
        """
        st = self.state
        if self.options.no_speech_threshold is None or self.sample_rate not in VAD_RATES:
            return False
        start = time.perf_counter()
        try:
            speech = holds_speech(st.audio[: st.samples], self.sample_rate, self.options.vad_threshold)
        except ModelLoadError:  # (the VAD's packages are missing: the end is decoded, as without the check)
            st.costs.count("silent_tail_unchecked")
            speech = True
        st.costs.compute_s += time.perf_counter() - start
        if speech:
            return False
        st.costs.count("silent_tail_skips")
        return True

    def _search(self, audio: np.ndarray, final: bool, guarded: bool) -> Decoded:
        st = self.state
        enc = self.model.encode(normalize_level(audio, self.options.normalize_peak), st.costs)
        read = st.offset + audio.shape[0]
        # a searcher that judges the speech in its forced pass needs no pass of its own (once the prompt is
        # pinned: a multilingual model detects the language only in audio judged to hold speech)
        judged = guarded and st.prompt is not None and self.searcher.judges_speech(self.model)
        if guarded and not judged and self._judged_silent(enc):
            return Decoded(read, [], enc)
        if st.prompt is None:  # fixed once per stream: a multilingual model detects the language here
            st.prompt = tuple(self.model.prompt(enc, st.costs))
        prompt = st.prompt
        before = tuple(st.output.committed[: st.base])
        earlier = before[st.context_from :][-self.options.context_tokens :] if self.options.context_tokens else ()
        if self.context_scope == "sentence":
            earlier = earlier[self._sentence_start(earlier) :]
        if earlier and isinstance(self.model, PreviousTextPrompter):
            prompt = (*self.model.previous_text(earlier, self.options.context_tokens), *prompt)
        seconds = audio.shape[0] / self.model.sample_rate
        budget = self.options.search.max_new_tokens or math.ceil(seconds * self.options.search.max_tokens_per_s + 10)
        prefix = tuple(st.output.committed[st.base :])
        max_new = min(budget, self.model.max_length - len(prefix))
        query = Query(enc, prefix, max_new, final, prompt, draft=self._draft(),
                      no_speech_threshold=self.options.no_speech_threshold if judged else None)
        hyps = self.searcher.search(self.model, query, st.search, st.costs)
        if not hyps:  # (the searcher judged the encoding to hold no speech)
            return Decoded(read, [], enc, prompt)
        if before:  # the policies and the commit path see whole outputs
            hyps = [Hypothesis(before + h.tokens, h.score, h.finished) for h in hyps]
        return Decoded(read, hyps, enc, prompt)

    def _sentence_start(self, tokens: Sequence[int]) -> int:
        """Where the last sentence of ``tokens`` starts: after the last token that ends a sentence (0: none)."""
        for i in range(len(tokens) - 1, -1, -1):
            if self._ends_sentence(tokens[i]):
                return i + 1
        return 0

    def _ends_sentence(self, token: int) -> bool:
        return self.model.tokenizer.decode([token]).rstrip().endswith(SENTENCE_ENDS)

    def _draft(self) -> tuple[int, ...]:
        """What the last decode's best hypothesis had after the committed output (the searcher's draft)."""
        st = self.state
        if not self.options.search.draft or not st.last.hyps:
            return ()
        best, committed = st.last.hyps[0].tokens, st.output.committed
        if len(best) <= len(committed) or list(best[: len(committed)]) != committed:
            return ()
        return tuple(best[len(committed) :])

    # ------------------------------------------------------------------------------------ long-form
    def _trim(self, decoded: Decoded, samples: int, eager: bool = False) -> None:
        """Trim the buffer behind the last committed sentence end (full buffer: the last committed word); ``eager``:
        however little audio follows it."""
        st = self.state
        committed = st.output.committed
        in_buffer = committed[st.base :]
        if not in_buffer or not decoded.hyps:
            return
        best = decoded.hyps[0].tokens[st.base :]
        if tuple(best[: len(in_buffer)]) != tuple(in_buffer):
            return  # (a decode that ignored the prefix cannot time it)
        ends = [i for i, t in enumerate(in_buffer) if self._ends_sentence(t)]
        full = samples + self.chunk_samples > self.max_buffer
        if ends:
            last = ends[-1]
        elif full:
            last = len(in_buffer) - 1  # committed output ends at a whole word
        else:
            return
        starts = self._buffer_starts(decoded)
        if starts is None:
            return  # (no token timing)
        cut = min(samples, starts[last + 1])
        if cut <= 0 or (not full and not eager and samples - cut < MIN_TAIL_S * self.model.sample_rate):
            return  # (a short tail, often the pause after the sentence, invites hallucinations: trim later)
        self._drop(cut, st.base + last + 1)

    def _empty_buffer(self) -> list[Emission]:
        """The buffer is full and could not be trimmed: commit its best hypothesis whole (unless the low-confidence
        guard finds it unsure), then drop the audio it covers - up to where the text ends, which the model's token
        timing locates (Whisper without timestamps may end a long window's text early: the rest of the audio stays
        for the next decode, as openai/whisper seeks to its last timestamp), or the whole buffer."""
        st = self.state
        decoded = self._decode(st.samples, final=True, guarded=True)
        starts = self._buffer_starts(decoded)
        skipped = self._skipped(starts)  # (0: none)
        if skipped:
            # Whisper read only the end of the buffer (a confusing start: a trim cut into a word, say) and skipped
            # the speech before its text, which committing the text and dropping the buffer would lose unread: the
            # skipped audio is decoded alone and committed first; the rest stays for the next chunks
            st.costs.count("skipped_starts")
            decoded = dataclasses.replace(self._decode(skipped, final=True, guarded=True), read=st.read)
        if decoded.hyps and self._unsure(decoded.hyps[0], skipped or st.samples):
            # a full buffer of speech with nothing agreed on, read with low confidence: mostly a hallucination loop,
            # which committed whole would also become the prompt of the next buffers (Whisper base, the German talk
            # of bench/longform.py: BLEU 10.9 and 100 loop cuts committing it, 14.1 and 21 not); counted, not silent
            decoded, starts = Decoded(decoded.read, [], decoded.enc, decoded.prompt), None
            st.costs.count("unsure_buffer_drops")
        emission = self._commit(decoded, final=False, whole=True)
        st.costs.count("segment_commits")
        if skipped:
            cut = skipped  # (what Whisper did read stays, to be decoded again)
        else:
            end = None if starts is None else starts[-1]  # where the committed text ends
            least, most = MIN_TAIL_S * self.model.sample_rate, st.samples - self.chunk_samples
            # (else too little read, or too little left: the whole buffer, so the stream goes on)
            cut = end if end is not None and least <= end <= most else st.samples
        self._drop(cut, len(st.output.committed))
        st.speech_in_buffer = cut < st.samples or (self.vad is not None and self.vad.speaking)
        return [] if emission is None else [emission]

    def _buffer_starts(self, decoded: Decoded) -> list[int] | None:
        """Where each token of the best hypothesis after the committed prefix starts in the buffer (samples), and
        one more entry: where its text ends (None: no such tokens, or no token timing). One forced decoder pass."""
        st = self.state
        if not decoded.hyps or decoded.enc is None or not isinstance(self.model, TokenTimer):
            return None
        tokens = decoded.hyps[0].tokens[st.base :]
        if not tokens:
            return None
        frames = self.model.token_starts(decoded.enc, decoded.prompt, tokens, st.costs)
        return [int(frame) * self.model.frame_samples for frame in frames]

    def _skipped(self, starts: list[int] | None) -> int:
        """Buffer samples before the best hypothesis's text starts (its ``starts``, :meth:`_buffer_starts`), when
        nothing in the buffer is committed and its first token spans more than ``SKIPPED_START_S`` of audio
        (Whisper skipped what came before it); else 0."""
        st = self.state
        if starts is None or len(starts) < 3 or st.base < len(st.output.committed):
            return 0  # (fewer than 2 tokens: no second start)
        second = starts[1]
        return second if SKIPPED_START_S * self.model.sample_rate < second < st.samples else 0

    def _follow_voice(self, events: list[VoiceEvent]) -> list[Emission]:
        """VAD: a speech end commits the segment before it; silence with no speech in the buffer is dropped."""
        st = self.state
        out: list[Emission] = []
        for event in events:
            if event.kind == "start":
                pause = event.sample - st.pause_from if st.pause_from is not None else 0
                if pause >= self.options.context_reset_s * self.model.sample_rate:
                    st.context_from = len(st.output.committed)
                    st.costs.count("context_resets")
                st.speech_in_buffer, st.pause_from = True, None
            else:
                st.pause_from = event.sample
                out += self._end_segment(event.sample)
        if self.vad is not None and not self.vad.speaking and not st.speech_in_buffer:
            keep = self.model.sample_rate // 2  # the last 0.5 s: where speech would start again
            if st.samples > keep:
                self._drop(st.samples - keep, len(st.output.committed), count=False)
        return out

    def _end_segment(self, end: int) -> list[Emission]:
        """VAD: speech ended at source sample ``end``: commit the segment's best hypothesis whole, drop it."""
        st = self.state
        cut = min(st.samples, end - st.offset)
        if cut <= 0 or not st.speech_in_buffer:
            st.speech_in_buffer = False  # (its speech was trimmed away behind committed text already)
            return []
        # decided now, with the source read so far (the pause had to be heard): stamped with that time
        decoded = dataclasses.replace(self._decode(cut, final=True, guarded=True), read=st.read)
        emission = self._commit(decoded, final=False, whole=True)
        st.costs.count("vad_segments")
        if self.context_scope == "sentence":
            # the pause ends the sentence for the prompt, full stop written or not (else an unpunctuated segment
            # keeps every sentence before it in the prompt, and Whisper copies their words into the next)
            st.context_from = len(st.output.committed)
        self._drop(cut, len(st.output.committed))
        st.speech_in_buffer = False
        return [] if emission is None else [emission]

    def _drop(self, cut: int, base: int, count: bool = True) -> None:
        """Remove the first ``cut`` samples of the buffer; committed tokens up to ``base`` now precede it."""
        st = self.state
        st.audio[: st.samples - cut] = st.audio[cut : st.samples]
        st.samples -= cut
        st.offset += cut
        st.base = base
        st.search = SearchState()
        st.last = Decoded(-1, [])
        if count:
            st.costs.count("trims")


SENTENCE_ENDS = (".", "?", "!", "。", "？", "！")
MIN_TAIL_S = 3.0  # a trim before the buffer is full keeps at least this much audio after the cut
SKIPPED_START_S = 3.0  # a full buffer's first token spanning more audio than this: Whisper skipped speech
