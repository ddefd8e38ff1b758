"""One decode of a stream's buffer: why it happens, the search that produces its hypotheses, and where their
tokens were spoken.

Every decode encodes the audio read (level-normalised; with ``reencode_s`` only its recent part, the rest kept
from the last encoding), force-decodes the committed tokens of the buffer in one parallel pass and lets the
searcher continue them (2022 paper §3). Its :class:`DecodeReason` says what may be committed from it and which
guards apply.

**Token timing.** Where each token of the best hypothesis starts in the buffer comes from DTW over the alignment
heads' cross-attention rows that the search recorded as it decoded (:class:`~simulst.models.base.TracingDecoder`,
:mod:`simulst.models.timing`): no decoder pass of its own. The rows of a hypothesis run from the one that predicts
its first token after the buffer's committed prefix to the one after its last token (that token was read: the
search went on, or ended with ``<|endoftext|>``), so the text's end is timed too; a hypothesis whose last token was
never read (the token budget ran out) lacks that row, and its text is taken to end where the audio ends. The cuts
of long-form trimming (:meth:`ChunkDecoder.token_starts`) read that timing, falling back to a forced pass
(``TokenTimer.token_starts``) where the rows do not reach the text's end. The spoken times of a commit
(:meth:`ChunkDecoder.spoken_times`) read it too, with the word boundaries next to a pause in the decoded audio moved
to the pause (:func:`~simulst.models.timing.snapped_spans`: DTW leaves a pause to a neighbouring word).
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import math
import time
from dataclasses import dataclass, field

import numpy as np

from simulst.audio.io import is_silent
from simulst.audio.level import normalize_level
from simulst.config import StreamOptions
from simulst.models.base import Encoded, SpeechModel, TokenTimer, TracingDecoder
from simulst.models.timing import SNAP_MS, pauses, snapped_spans
from simulst.search import Query, Searcher, SearchState
from simulst.streaming.buffer import AudioBuffer
from simulst.streaming.commit import Output
from simulst.streaming.guards import Guards
from simulst.streaming.prompt import PromptBuilder
from simulst.types import Costs, Hypothesis


class DecodeReason(enum.Enum):
    """Why the buffer is decoded."""

    CHUNK = "chunk"
    """A chunk boundary: the policy commits a stable prefix; a later chunk reads the same audio again."""
    SEGMENT_END = "segment end"
    """A segment ended - a pause in the speech (VAD), a completed sentence in a cascade's MT stage: its best
    hypothesis is committed whole and its source not read again."""
    BUFFER_FULL = "buffer full"
    """The buffer is full and could not be trimmed: its best hypothesis is committed whole (unless unsure)."""
    SOURCE_END = "source end"
    """The source has ended: the whole best hypothesis is committed, the stream's final emission."""

    @property
    def commits_whole(self) -> bool:
        """The whole best hypothesis is committed (its audio is not read again): the search is a final one, and
        the low-confidence guard does not hold the decode back (its words would be lost unread)."""
        return self is not DecodeReason.CHUNK

    @property
    def ends_source(self) -> bool:
        """The source has ended: the decode's emission is the stream's final one."""
        return self is DecodeReason.SOURCE_END

    def judges_speech(self, trimmed: bool) -> bool:
        """The no-speech guard applies: to every decode but the end of a stream never ``trimmed`` (whose one final
        decode stays offline decoding)."""
        return self is not DecodeReason.SOURCE_END or trimmed


@dataclass
class Decoded:
    """One decode of the buffer: the source samples read then (since the stream began), the hypotheses (over
    the whole committed output; none: nothing to commit), the encoding and the decoder prompt it used, the source
    samples before the buffer (``offset``) and the committed tokens before it (``base``: the hypotheses' tokens
    after them were decoded on the buffer)."""

    read: int
    hyps: list[Hypothesis]
    enc: Encoded | None = None
    prompt: tuple[int, ...] = ()
    offset: int = 0
    base: int = 0
    looped: bool = False
    """(its search ended where the best hypothesis ran into a repetition loop: the loop guard cuts where that loop
    starts, the buffer is trimmed as after a loop cut, and a decode committed whole of the same source searches
    again)"""
    bounds: tuple[list[int], bool] | None = field(default=None, init=False, repr=False, compare=False)
    """(memo of :meth:`ChunkDecoder.token_bounds`)"""
    spans: list[tuple[int, int]] | None = field(default=None, init=False, repr=False, compare=False)
    """(memo of :meth:`ChunkDecoder.spoken_times`: each token's spoken span in the buffer, samples)"""

    def held(self) -> Decoded:
        """The same decode with its hypotheses held back (nothing committed from it)."""
        return Decoded(self.read, [], self.enc, self.prompt, self.offset, self.base, self.looped)


NOTHING = Decoded(-1, [])


class ChunkDecoder:
    """Decodes a stream's buffer; holds what the searches carry across chunks.

    Args:
        model: the speech model.
        options: the stream's options (search, level normalisation).
        searcher: the stream's searcher.
        final_searcher: the searcher of the decodes committed whole (None: ``searcher``).
        buffer: the stream's audio buffer.
        guards: the stream's guards (the no-speech judgement).
        prompt: the stream's prompt builder.
        output: what the stream has committed (the decodes continue it).
        costs: the stream's work counters.

    Attributes:
        search: what the searches carry across chunks (kept beams, ``Seen``).
        last: the last decode (its encoding too: a decode of the same source again reuses it whole).
    """

    def __init__(self, model: SpeechModel, options: StreamOptions, searcher: Searcher,
                 final_searcher: Searcher | None, buffer: AudioBuffer, guards: Guards, prompt: PromptBuilder,
                 output: Output, costs: Costs) -> None:
        self.model, self.options, self.searcher, self.buffer = model, options, searcher, buffer
        self.final_searcher = final_searcher or searcher
        self.guards, self.prompt, self.output, self.costs = guards, prompt, output, costs
        self.search = SearchState()
        self.last = NOTHING
        self.encoded: Encoded | None = None  # with reencode_s: the last encoding, part of which the next reuses

    def restart(self) -> None:
        """The buffer was trimmed: the searches start afresh."""
        self.search = SearchState()
        self.last = NOTHING

    def reprompted(self) -> None:
        """The prompt changed: the next decode searches afresh, of the same source too (on its encoding)."""
        self.search = SearchState()
        self.last = dataclasses.replace(self.last, hyps=[])

    def decode(self, reason: DecodeReason, samples: int, block_loops: bool = False,
               next_tokens: tuple[int, ...] | None = None) -> Decoded:
        """Decode the buffer's first ``samples`` after the committed tokens (its time counted as compute);
        ``block_loops``: a search that never extends a hypothesis into a repetition loop (``Query.block_loops``);
        ``next_tokens``: the tokens the search may write first (``Query.next_tokens``; None: any).

        A chunk whose new text the low-confidence guard finds unsure is held back; a decode committed whole is
        decided now, with all the source read: it is stamped with that time."""
        start = time.perf_counter()
        buf, committed, costs = self.buffer, self.output.committed, self.costs
        audio, read = buf.head(samples), buf.offset + samples
        if audio.shape[0] == 0 or is_silent(audio):
            decoded = Decoded(read, [])
        elif read == self.last.read and self.last.hyps and not block_loops and next_tokens is None \
                and not (reason.commits_whole and self._final_differs):
            decoded = self.last  # the source did not grow since the last decode: same result
        else:  # (a decode committed whole of the same source as the last searches again on its encoding)
            decoded = self._search(audio, read, reason, self.last.enc if read == self.last.read else None,
                                   block_loops, next_tokens)
        self.last = decoded
        if reason.commits_whole:
            decoded = dataclasses.replace(decoded, read=buf.read)
        elif decoded.hyps and self.guards.unsure(decoded.hyps[0], len(committed), samples, costs):
            decoded = decoded.held()
        costs.compute_s += time.perf_counter() - start
        return decoded

    @property
    def _final_differs(self) -> bool:
        """A decode committed whole searches differently from the last chunk's decode of the same audio."""
        return self.final_searcher is not self.searcher or self.searcher.final_differs or self.last.looped

    def token_starts(self, decoded: Decoded) -> list[int] | None:
        """Where each token of the best hypothesis after the buffer's base starts in the buffer (samples), and
        one more entry: where its text ends (None: no such tokens, or no token timing): the search's recorded
        timing (:meth:`token_bounds`) when it reaches the text's end, else one forced decoder pass."""
        bounds = self.token_bounds(decoded)
        if bounds is not None and bounds[1]:
            return bounds[0]
        if not decoded.hyps or decoded.enc is None or not isinstance(self.model, TokenTimer):
            return None
        tokens = decoded.hyps[0].tokens[decoded.base :]
        if not tokens:
            return None
        start = time.perf_counter()
        frames = self.model.token_starts(decoded.enc, decoded.prompt, tokens, self.costs)
        self.costs.compute_s += time.perf_counter() - start
        return [int(frame) * self.model.frame_samples for frame in frames]

    def token_bounds(self, decoded: Decoded) -> tuple[list[int], bool] | None:
        """Where each token of the best hypothesis after the decode's base starts in the buffer (samples), then
        where its text ends, from the rows its search recorded (no decoder pass; computed once per decode), and
        whether that end was timed (False: the last token was never read, and the text is taken to end with the
        audio). None: no such tokens, or the model records no timing."""
        if decoded.bounds is not None:
            return decoded.bounds
        model, enc = self.model, decoded.enc
        if not decoded.hyps or enc is None or not isinstance(model, TracingDecoder) \
                or not isinstance(model, TokenTimer):
            return None
        tokens = len(decoded.hyps[0].tokens) - decoded.base
        start = time.perf_counter()
        frames = model.traced_starts(enc, decoded.hyps[0].alignment, tokens)
        self.costs.compute_s += time.perf_counter() - start
        if frames is None:
            return None
        samples = [int(frame) * model.frame_samples for frame in frames]
        complete = len(samples) > tokens
        decoded.bounds = (samples if complete else [*samples, enc.audio_samples]), complete
        return decoded.bounds

    def spoken_times(self, decoded: Decoded, first: int, last: int) -> list[tuple[float, float]] | None:
        """Where tokens ``first``..``last - 1`` of the decode's best hypothesis were spoken: per token its start
        and end (:meth:`token_bounds`, the word boundaries next to a pause in the buffer's audio moved to it), in
        milliseconds on the stream's audio timeline (the audio trimmed off the buffer included), within the audio
        read. None: untimed (no recorded timing, or tokens committed before the buffer). Asked before the buffer
        is trimmed (it reads the buffer's audio)."""
        if first < decoded.base or not decoded.hyps or last > len(decoded.hyps[0].tokens) or first >= last:
            return None
        if decoded.spans is None:
            bounds = self.token_bounds(decoded)
            if bounds is None or decoded.enc is None:
                return None
            start = time.perf_counter()
            tokens = decoded.hyps[0].tokens[decoded.base :]
            tokenizer, rate = self.model.tokenizer, self.model.sample_rate
            words = [tokenizer.starts_word(token) for token in tokens]
            silent = [tokenizer.is_punctuation(token) for token in tokens]
            found = pauses(self.buffer.head(min(decoded.enc.audio_samples, self.buffer.samples)), rate)
            decoded.spans = snapped_spans(bounds[0], words, silent, found, round(SNAP_MS * rate / 1000.0))
            self.costs.compute_s += time.perf_counter() - start
        rate, base = self.model.sample_rate, decoded.base
        def ms(sample: int) -> float:
            return min(decoded.read, decoded.offset + sample) * 1000.0 / rate
        return [(ms(decoded.spans[i - base][0]), ms(decoded.spans[i - base][1])) for i in range(first, last)]

    def _search(self, audio: np.ndarray, read: int, reason: DecodeReason, enc: Encoded | None = None,
                block_loops: bool = False, next_tokens: tuple[int, ...] | None = None,
                initial: bool = True) -> Decoded:
        """Search the buffer's ``audio`` (``initial``: prompted with the initial prompt, if any). A search whose
        best hypothesis recites the initial prompt (:meth:`Guards.recital`) is done again without it, and that
        one is the decode unless it says the recited words too (:meth:`Guards.echoes`; counted either way)."""
        committed, costs = self.output.committed, self.costs
        if enc is None:
            enc = self.model.encode(normalize_level(audio, self.options.normalize_peak), costs, self.encoded,
                                    self.options.reencode_s)
            self.encoded = enc if self.options.reencode_s is not None else None
        base, guarded = self.buffer.base, reason.judges_speech(trimmed=self.buffer.offset > 0)
        # a searcher that judges the speech in its forced pass needs no pass of its own (once the prompt is
        # pinned: a multilingual model detects the language only in audio judged to hold speech)
        judged = guarded and self.prompt.pinned and self.searcher.judges_speech(self.model)
        if guarded and not judged and self.guards.judged_silent(self.model, enc, costs):
            return Decoded(read, [], enc)
        self.prompt.pin(self.model, enc, costs)
        before = tuple(committed[:base])
        prompt = self.prompt.build(self.model, before, initial)
        prefix = tuple(committed[base:])
        query = Query(enc, prefix, self._max_new(audio, len(prefix)), reason.commits_whole, prompt,
                      draft=() if block_loops else self._draft(),  # (a draft is taken unscored: unblocked)
                      no_speech_threshold=self.guards.no_speech_threshold if judged else None,
                      stop_at_loops=self.guards.loop_guard, block_loops=block_loops, next_tokens=next_tokens)
        searcher = self.final_searcher if reason.commits_whole else self.searcher
        self.search.looped = False
        hyps = searcher.search(self.model, query, self.search, costs)
        if not hyps:  # (the searcher judged the encoding to hold no speech)
            return Decoded(read, [], enc, prompt, self.buffer.offset, base)
        tokenizer = self.model.tokenizer
        recital = self.guards.recital(hyps[0].tokens[len(prefix) :], self.prompt.initial, tokenizer) \
            if initial else []
        if recital:
            state = copy.deepcopy(self.search)  # (restored when the prompted search is kept)
            unprompted = self._search(audio, read, reason, enc, block_loops, next_tokens, initial=False)
            if not unprompted.hyps or not self.guards.echoes(recital, unprompted.hyps[0].tokens[len(committed) :],
                                                             tokenizer):
                costs.count("prompt_recitals")
                return unprompted
            costs.count("prompt_recitals_said")
            self.search = state
        if before:  # the policies and the commit path see whole outputs
            hyps = [Hypothesis(before + h.tokens, h.score, h.finished, h.alignment, h.token_scores) for h in hyps]
        return Decoded(read, hyps, enc, prompt, self.buffer.offset, base, self.search.looped)

    def _max_new(self, audio: np.ndarray, prefix: int) -> int:
        """The most tokens searched after a forced ``prefix``: the option, or a budget per second of audio (a
        runaway repetition loop stops there), and never past the model's limit."""
        search = self.options.search
        seconds = audio.shape[0] / self.model.sample_rate
        budget = search.max_new_tokens or math.ceil(seconds * search.max_tokens_per_s + 10)
        return min(budget, self.model.max_length - prefix)

    def _draft(self) -> tuple[int, ...]:
        """What the last decode's best hypothesis had after the committed output (the searcher's draft)."""
        if not self.options.search.draft or not self.last.hyps:
            return ()
        best, committed = self.last.hyps[0].tokens, self.output.committed
        if len(best) <= len(committed) or list(best[: len(committed)]) != committed:
            return ()
        return tuple(best[len(committed) :])
