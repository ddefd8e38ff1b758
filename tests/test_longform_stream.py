"""Long-form streaming: a bounded audio buffer trimmed behind committed text, token timing by DTW, the loop
guard, sentence-by-sentence MT; hand-worked cases, properties over trims, and real Whisper on a minute of speech."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from simulst.audio.io import load_audio
from simulst.audio.vad import VoiceEvent
from simulst.config import PolicyOptions, StreamOptions
from simulst.evaluation.quality import normalize_for_wer, wer
from simulst.models.base import Encoded, PreviousTextPrompter, TokenTimer
from simulst.models.timing import dtw, median_filter, token_start_frames
from simulst.mt.options import MTOptions
from simulst.sequences import first_loop, loop_cut, loop_free_length, repeated_share
from simulst.streaming.cascade import CascadeSession
from simulst.streaming.feed import feed_fast
from simulst.streaming.guards import Guards
from simulst.streaming.mt_stage import MTStage
from simulst.streaming.segmenter import VadSegmenter
from simulst.streaming.session import Session
from simulst.types import Costs
from tests.shared_assets import DATA, JFK, JFK_PHRASE, needs_shared
from tests.toy import EOS, ScriptedMT, ToySpeechModel, ToyState, ToyTokenizer

# ----------------------------------------------------------------------------------------- the loop guard


def test_loop_guard_hand_worked() -> None:
    assert loop_free_length([5, 6] * 4, 0) == 6  # a 2-token n-gram: the 4th copy in a row is cut
    assert loop_free_length([7] * 5, 0) == 3  # one token: three in a row pass, the 4th is cut
    assert loop_free_length([1, 2, 3, 4] * 3, 0) == 8  # 4 tokens (a phrase): twice in a row pass, the 3rd is cut
    assert loop_free_length([1, 2, 3, 4, 9, 1, 2, 3, 4], 0) == 9  # not in a row: kept
    assert loop_free_length([1, 2, 3, 4, 5], 0) == 5
    # what is committed already is never cut; a loop running on into the new tokens is cut at once
    assert loop_free_length([5, 6] * 4 + [9], 8) == 9
    assert loop_free_length([5, 6] * 5, 8) == 8
    assert loop_free_length([5, 6] * 3 + [5], 6) == 7
    # a 14-token sentence said again within 60 tokens, with other tokens in between: the copy is cut where it starts
    sentence = list(range(20, 34))
    one = len(sentence) + 1  # a copy and the token after it
    assert loop_free_length([*sentence, 1, *sentence, 2, 3], 0) == one  # cut where the copy starts
    phrase = [*sentence, 1, *sentence[:5], 2, 3]
    assert loop_free_length(phrase, 0) == len(phrase)  # 5 tokens again: a phrase, kept
    near = sentence + list(range(40, 86)) + sentence  # the copy starts 60 tokens after the first: cut
    assert loop_free_length(near, 0) == len(near) - len(sentence) == 60
    far = sentence + list(range(40, 90)) + sentence + list(range(90, 140)) + sentence
    assert loop_free_length(far, 0) == len(far)  # each copy starts more than 60 tokens after the one before
    # the third time within 100 tokens, the second time more than 60 tokens back: the third copy is cut
    spaced = [*sentence, *range(40, 87), *sentence, 2, *sentence]
    assert loop_free_length(spaced, 0) == len(spaced) - len(sentence)  # (76: where the third copy starts)
    thrice = [*sentence, 1, *sentence, 2, *sentence]
    assert loop_free_length(thrice, 2 * one) == 2 * one  # two are committed already: the third is cut at once
    assert loop_free_length(thrice, one) == one  # a copy running into new tokens


@given(st.lists(st.integers(0, 3), max_size=30), st.integers(0, 30))
def test_loop_guard_properties(tokens: list[int], start: int) -> None:
    start = min(start, len(tokens))
    keep = loop_free_length(tokens, start)
    assert start <= keep <= len(tokens)
    kept = tokens[:keep]
    # nothing past ``start`` completes a 4th copy of a 1-3 token n-gram or a 3rd copy of a longer one
    for end in range(start + 1, keep + 1):
        for n in range(1, 17):
            copies = 4 if n <= 3 else 3
            if n * copies <= end:
                gram = kept[end - n : end]
                assert not all(kept[end - k * n - n : end - k * n] == gram for k in range(1, copies))
        # nor ends a 6-token span said already, apart, starting at most 60 tokens earlier
        if end >= 12:
            span = kept[end - 6 : end]
            assert not any(kept[o : o + 6] == span for o in range(max(0, end - 66), end - 11))


def incremental_loop_free_length(tokens: Sequence[int], start: int) -> int:
    """The loop guard as it was first written (one pass, the earlier spans kept in dictionaries): the reference
    :func:`loop_free_length` (one :func:`loop_cut` per end) must equal."""
    seen: dict[tuple[int, ...], list[int]] = {}
    recent: dict[tuple[int, ...], int] = {}
    first = max(0, start - 100)
    for end in range(first + 1, len(tokens) + 1):
        if end > start:
            for n in range(1, 17):
                copies = 4 if n <= 3 else 3
                if n * copies > end:
                    continue
                gram = tokens[end - n : end]
                if all(tokens[end - k * n - n : end - k * n] == gram for k in range(1, copies)):
                    return max(start, end - n)
        if end - 24 >= first:
            seen.setdefault(tuple(tokens[end - 24 : end - 12]), []).append(end - 24)
        copy = end - 12
        if end > start and copy >= first:
            earlier = [o for o in seen.get(tuple(tokens[copy:end]), ()) if copy - o <= 100]
            if len(earlier) >= 2 and earlier[-1] - earlier[0] >= 12:
                return max(start, copy)
        if end - 12 >= first:
            recent[tuple(tokens[end - 12 : end - 6])] = end - 12
        again = end - 6
        if end > start and again >= first:
            before = recent.get(tuple(tokens[again:end]))
            if before is not None and again - before <= 60:
                return max(start, again)
    return len(tokens)


# pieces of 1-14 tokens from a small vocabulary, some said again: immediate repeats, copies near and far
PIECES = st.lists(st.lists(st.integers(0, 40), min_size=1, max_size=14), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(PIECES, st.lists(st.tuples(st.integers(0, 7), st.integers(1, 3)), max_size=12), st.integers(0, 200))
def test_loop_guard_equals_the_incremental_one(pieces: list[list[int]], order: list[tuple[int, int]],
                                               start: int) -> None:
    tokens = [t for i, times in order for _ in range(times) for t in pieces[i % len(pieces)]]
    tokens += [t for piece in pieces for t in piece]
    start = min(start, len(tokens))
    assert loop_free_length(tokens, start) == incremental_loop_free_length(tokens, start)
    assert loop_free_length(tuple(tokens), start) == loop_free_length(tokens, start)


def test_first_loop_says_where_the_copy_repeats_from() -> None:
    assert first_loop([5, 6] * 4, 0) == (6, 4)  # the 4th " 5 6" is cut; the copy before it starts at 4
    assert first_loop([1, 2, 3, 4] * 3, 0) == (8, 4)
    sentence = list(range(20, 34))
    assert first_loop([*sentence, 1, *sentence, 2, 3], 0) == (15, 0)  # a sentence said again: from its start
    spaced = [*sentence, *range(40, 87), *sentence, 2, *sentence]
    assert first_loop(spaced, 0) == (76, 61)  # said a third time: the copy before is the second
    assert first_loop([1, 2, 3, 4, 5], 0) is None
    assert first_loop([5, 6] * 5, 8) == (7, 5)  # " 6 5" a 4th time, begun in the committed tokens


def test_loop_cut_reads_the_end_only() -> None:
    assert loop_cut([7] * 4, 4) == 3 and loop_cut([7] * 4, 3) is None  # the 4th copy of a token
    assert loop_cut([7] * 4 + [1], 5) is None  # a loop before the end is not this end's
    sentence = list(range(20, 34))
    assert loop_cut([*sentence, 1, *sentence[:6]], 21) == 15  # 6 tokens said again: the copy starts at 15
    assert loop_cut([*sentence, 1, *sentence[:6]], 21, first=1) is None  # the first copy lies before ``first``


# ----------------------------------------------------------------------------------------- token timing (DTW)


def test_median_filter_hand_worked() -> None:
    x = np.array([0, 0, 5, 0, 0, 0, 7, 7, 0], dtype=float)
    assert median_filter(x, 3).tolist() == [0, 0, 0, 0, 0, 0, 7, 7, 7]  # the 5 is an outlier; edges reflected
    assert median_filter(x, 1).tolist() == x.tolist()
    with pytest.raises(ValueError):
        median_filter(x, 2)


def test_dtw_hand_worked() -> None:
    rows, cols = dtw(np.array([[0.0, 0.0, 9.0, 9.0], [9.0, 9.0, 0.0, 0.0]]))
    assert rows.tolist() == [0, 0, 1, 1] and cols.tolist() == [0, 1, 2, 3]
    rows, cols = dtw(np.array([[0.0, 9.0], [0.0, 9.0], [9.0, 0.0]]))  # two rows share frame 0
    assert rows.tolist() == [0, 1, 2] and cols.tolist() == [0, 0, 1]


def test_token_starts_follow_the_attention() -> None:
    # 2 heads, 3 rows (2 tokens + the end), 30 frames: row r attends frames 10r..10r+9 (a blip in head 1 at
    # frame 25 of row 0 is filtered out by the median over 7 frames)
    scores = np.full((2, 3, 30), -5.0)
    for r in range(3):
        scores[:, r, 10 * r : 10 * r + 10] = 5.0
    scores[1, 0, 25] = 9.0
    assert token_start_frames(scores) == [0, 10, 20]


class TimedToy(ToySpeechModel):
    """The toy speech model with token timing (word i of the buffer read at frame i * ms_per_word / 20) and a
    previous-text prompt: a long-form capable model."""

    frame_samples = 20

    def __init__(self, sentence: str = "the cat sat on the mat .") -> None:
        super().__init__(sentence, ms_per_word=700)
        self.prompts: list[tuple[int, ...]] = []

    def token_starts(self, enc: Encoded, prompt: Sequence[int], tokens: Sequence[int], costs: Costs) -> list[int]:
        self.prompts.append(tuple(prompt))
        frames = enc.frames.shape[1]
        return [min(frames, i * self.ms_per_word // self.frame_samples) for i in range(len(tokens) + 1)]

    def previous_text(self, tokens: Sequence[int], limit: int) -> list[int]:
        return list(tokens[-limit:])


class RecitingToy(TimedToy):
    """The timed toy with a vocabulary that encodes words: prompted with the initial prompt "good morning
    everyone", a decode of a buffer with nothing committed in it first writes " good morning" (Whisper reciting its
    prompt) unless the speaker says those words (``says``: the sentence starts with them)."""

    def __init__(self, says: bool = False) -> None:
        super().__init__(("good morning " if says else "") + "the cat sat on the mat .")
        self.tokenizer = WordToyTokenizer([*self.tokenizer.pieces, " everyone"]
                                          + ([] if says else [" good", " morning"]))
        self.vocab_size = len(self.tokenizer.pieces)
        self.lead = [] if says else self.tokenizer.encode("good morning")
        self.prompted = False

    def start(self, enc: Encoded, prefix: Sequence[int], costs: Costs,
              prompt: Sequence[int] | None = None) -> tuple[torch.Tensor, ToyState]:
        self.prompted = self.tokenizer.encode("everyone")[0] in (prompt or ())
        return super().start(enc, prefix, costs, prompt)

    def _next(self, tokens: tuple[int, ...], audio_samples: int) -> dict[int, float]:
        lead = self.lead if self.prompted else []
        if len(tokens) < len(lead) and list(tokens) == lead[: len(tokens)]:
            return {lead[len(tokens)]: 0.9, EOS: 0.1}
        if lead and list(tokens[: len(lead)]) == lead:
            tokens = tokens[len(lead) :]
        return super()._next(tokens, audio_samples)


class WordToyTokenizer(ToyTokenizer):
    """The toy tokenizer with one token a word: it encodes text too."""

    def encode(self, text: str) -> list[int]:
        return [self.pieces.index(" " + word) for word in text.split()]


def test_the_toys_are_what_they_claim() -> None:
    assert isinstance(TimedToy(), TokenTimer) and isinstance(TimedToy(), PreviousTextPrompter)
    assert not isinstance(ToySpeechModel(), TokenTimer)


def test_a_decode_that_recites_the_initial_prompt_is_searched_again_without_it() -> None:
    options = StreamOptions(chunk_ms=1000, segment_s=10, max_buffer_s=16, prompt="good morning everyone")
    reciting = RecitingToy()
    enc = reciting.encode(_speech(2), Costs())
    reciting.start(enc, (), Costs(), reciting.tokenizer.encode("good morning everyone"))
    assert reciting.table((), 2000) == {reciting.lead[0]: 0.9, EOS: 0.1}  # (the toy recites when so prompted)
    session = Session(reciting, options)
    _check_stream(session, _speech(6), [1000] * 6)
    assert session.text == "the cat sat on the mat ."
    assert session.costs.extra["prompt_recitals"] >= 1 and "prompt_recitals_said" not in session.costs.extra
    # words of the prompt the speaker says are kept: the decode without the prompt says them too
    session = Session(RecitingToy(says=True), options)
    _check_stream(session, _speech(7), [1000] * 7)
    assert session.text == "good morning the cat sat on the mat ."
    assert session.costs.extra["prompt_recitals_said"] >= 1 and "prompt_recitals" not in session.costs.extra


# ----------------------------------------------------------------------------------------- sessions over trims


def _speech(seconds: float) -> np.ndarray:
    rng = np.random.default_rng(0)
    return (0.1 * rng.standard_normal(int(seconds * 1000))).astype(np.float32)  # 1 kHz toy audio, never silent


def _check_stream(session: Session, audio: np.ndarray, pieces: Sequence[int]) -> None:
    shown = ""
    pos = 0
    for size in pieces:
        for e in session.push(audio[pos : pos + size]):
            shown += e.text
        pos += size
        assert session.buffer.samples <= session.buffer.capacity  # bounded, whatever the push size
        assert session.read == min(pos, audio.shape[0])
        assert session.text == shown  # nothing retracted: the output only grows
    for e in session.finish():
        shown += e.text
    assert shown == session.text
    times = [e.source_ms for e in session.emissions]
    assert times == sorted(times) and times[-1] <= audio.shape[0]
    tokens = [t for e in session.emissions for t in e.tokens]
    assert tokens == session.state.output.committed


def test_a_model_without_timing_commits_full_buffers_whole() -> None:
    session = Session(ToySpeechModel(), StreamOptions(chunk_ms=1000, segment_s=5, max_buffer_s=8))
    audio = _speech(30)
    _check_stream(session, audio, [1000] * 30)
    assert session.costs.extra["segment_commits"] == 3  # at 8, 16 and 24 s
    assert session.buffer.offset == 24_000


@pytest.mark.parametrize("threshold", [-0.5, -0.01])
def test_a_full_buffer_is_committed_whole_when_the_model_is_sure_and_counted_when_not(threshold: float) -> None:
    # a full buffer that nothing could be trimmed from is committed whole and its audio dropped; when the
    # low-confidence guard finds that hypothesis unsure (mostly a hallucination loop, which would also become the
    # next buffers' prompt) it is not committed, and the drop is counted
    options = StreamOptions(chunk_ms=1000, segment_s=5, max_buffer_s=8, logprob_threshold=threshold, loop_guard=False)
    session = Session(ToySpeechModel(), options)  # (every toy token has probability 0.9: log-prob -0.1)
    audio = _speech(20)
    shown = "".join(e.text for pos in range(0, 20_000, 1000) for e in session.push(audio[pos : pos + 1000]))
    assert session.costs.extra["segment_commits"] == 2 and session.buffer.offset == 16_000
    sure = threshold < -0.1
    assert shown.count("the cat sat on the mat") == (2 if sure else 0)
    assert session.costs.extra.get("unsure_buffer_drops", 0) == (0 if sure else 2)


class SkippingToy(TimedToy):
    """Reads a full 8 s buffer only from its 8th word on, skipping the speech before it (as Whisper does when a trim
    cut into a word), and times that first token from the buffer's start, as DTW does over skipped audio; a shorter
    buffer is read in full."""

    def __init__(self) -> None:
        super().__init__("one two three four five six seven eight nine ten eleven twelve")
        self.guess_p = 0.3  # (no guesses at unheard words: the texts below are exact)

    def _next(self, tokens: tuple[int, ...], audio_samples: int) -> dict[int, float]:
        if audio_samples < 8000:
            return super()._next(tokens, audio_samples)
        read = self.target[7 : min(len(self.target), audio_samples // self.ms_per_word)]
        i = len(tokens)
        return {read[i]: 0.9, EOS: 0.1} if list(tokens) == read[:i] and i < len(read) else {EOS: 0.9, 1: 0.1}

    def token_starts(self, enc: Encoded, prompt: Sequence[int], tokens: Sequence[int], costs: Costs) -> list[int]:
        frames = enc.frames.shape[1]
        words = [self.target.index(t) for t in tokens[1:]]
        return [0, *(min(frames, w * self.ms_per_word // self.frame_samples) for w in words), frames]


def test_the_speech_a_full_buffers_text_skipped_is_decoded_alone_and_committed_first() -> None:
    # the full buffer (8 s; hold-100 commits nothing before it) is read as "eight nine ten eleven", its first token
    # timed over 0-5.6 s: the skipped 5.6 s are decoded alone ("one" .. "eight") and committed; the rest of the buffer
    # stays to be decoded with the next chunks, not dropped with words in it never read
    session = Session(SkippingToy(), StreamOptions(chunk_ms=1000, segment_s=5, max_buffer_s=8, loop_guard=False,
                                                   policy=PolicyOptions("hold", 100)))
    audio = _speech(9)
    shown = "".join(e.text for pos in range(0, 9000, 1000) for e in session.push(audio[pos : pos + 1000]))
    assert shown == "one two three four five six seven eight"
    assert session.costs.extra["skipped_starts"] == 1 and session.costs.extra["segment_commits"] == 1
    assert session.buffer.offset == 5600 and session.buffer.samples == 3400
    assert session.emissions[0].source_ms == 8000  # (the source read when the full buffer was emptied)
    _check_stream(Session(SkippingToy(), session.options), audio, [1000] * 9)  # nothing retracted, all in order


def test_a_timed_model_trims_behind_committed_sentences_and_keeps_the_text_as_context() -> None:
    model = TimedToy()
    # (the toy says its sentence again in every buffer: no loop guard, which would rightly cut the repetition)
    session = Session(model, StreamOptions(chunk_ms=1000, segment_s=6, max_buffer_s=12, loop_guard=False,
                                           context_scope="all"))
    _check_stream(session, _speech(40), [1000] * 40)
    assert session.costs.extra["trims"] >= 3 and "segment_commits" not in session.costs.extra
    assert session.buffer.base > 0 and session.buffer.offset > 0
    assert any(p for p in model.prompts[1:])  # after the first trim the committed text is the prompt
    assert session.text.count("the cat sat on the mat .") >= 3


class SlippingToy(TimedToy):
    """The timed toy as a model that translates into English ("the cat sat on the mat ."), but which, prompted with
    previous text, writes the source language ("le petit chat noir est assis sur le tapis rouge .")."""

    task = "translate"

    def __init__(self, task: str = "translate") -> None:
        super().__init__()
        english = self.target
        self.task = task
        self.tokenizer = WordToyTokenizer([*self.tokenizer.pieces, " le", " petit", " chat", " noir", " est",
                                           " assis", " sur", " tapis", " rouge"])
        self.vocab_size = len(self.tokenizer.pieces)
        self.source = self.tokenizer.encode("le petit chat noir est assis sur le tapis rouge .")
        self.english, self.prompted = english, False

    def start(self, enc: Encoded, prefix: Sequence[int], costs: Costs,
              prompt: Sequence[int] | None = None) -> tuple[torch.Tensor, ToyState]:
        self.prompted = bool(prompt)
        return super().start(enc, prefix, costs, prompt)

    def _next(self, tokens: tuple[int, ...], audio_samples: int) -> dict[int, float]:
        self.target = self.source if self.prompted else self.english
        return super()._next(tokens, audio_samples)


def test_a_translation_that_slips_into_the_source_language_starts_its_context_afresh() -> None:
    options = StreamOptions(chunk_ms=1000, segment_s=6, max_buffer_s=12, loop_guard=False, context_scope="all")
    session = Session(SlippingToy(), options)
    _check_stream(session, _speech(40), [1000] * 40)
    assert session.costs.extra["foreign_context_restarts"] >= 2  # (after each trim the context holds the text)
    assert "petit" not in session.text and session.text.count("the cat sat on the mat .") >= 3
    # a model that transcribes writes its source language: no guard
    session = Session(SlippingToy(task="transcribe"), options)
    _check_stream(session, _speech(40), [1000] * 40)
    assert "foreign_context_restarts" not in session.costs.extra and "le petit chat noir" in session.text


def test_every_trim_hands_the_freed_heap_back(monkeypatch: pytest.MonkeyPatch) -> None:
    # a long stream's heap fragments as its windows change size: each trim asks glibc for the free pages back
    import simulst.streaming.session as session_module
    from simulst.streaming.memory import release_free_memory

    calls: list[bool] = []
    monkeypatch.setattr(session_module, "release_free_memory", lambda: calls.append(release_free_memory()) or True)
    session = Session(TimedToy(), StreamOptions(chunk_ms=1000, segment_s=6, max_buffer_s=12, loop_guard=False))
    _check_stream(session, _speech(40), [1000] * 40)
    assert len(calls) >= session.costs.extra["trims"] >= 3  # (every trim; an emptied buffer too)
    assert all(calls)  # (glibc: this project's Linux machines)


def test_the_sentence_context_carries_only_the_sentence_a_trim_cut_through() -> None:
    period = TimedToy().tokenizer.pieces.index(" .")
    # trims behind sentence ends (a 4.9 s sentence fits the 12 s buffer): the prompt holds whole sentences with
    # the scope "all", and nothing with "sentence" (the default for a model that transcribes, as the toy does)
    for scope, carried in (("all", True), ("sentence", False), ("auto", False)):
        model = TimedToy()
        session = Session(model, StreamOptions(chunk_ms=1000, segment_s=6, max_buffer_s=12, loop_guard=False,
                                               context_scope=scope))  # type: ignore[arg-type]
        _check_stream(session, _speech(40), [1000] * 40)
        assert session.costs.extra["trims"] >= 3
        assert any(period in p for p in model.prompts) is carried, scope
        assert any(p for p in model.prompts) is carried, scope
    # a 4 s buffer never holds a whole sentence: trims behind committed words, in mid-sentence; the prompt is
    # then the sentence's words committed before the cut, and never reaches back past its start
    model = TimedToy()
    session = Session(model, StreamOptions(chunk_ms=1000, segment_s=3, max_buffer_s=4, loop_guard=False,
                                           context_scope="sentence"))
    _check_stream(session, _speech(40), [1000] * 40)
    prompts = [p for p in model.prompts if p]
    assert prompts and all(period not in p for p in prompts)
    text = model.tokenizer.decode
    committed = session.state.output.committed
    for p in prompts:  # each is the tail of the committed output after its last sentence end
        assert any(tuple(committed[i : i + len(p)]) == p and (i == 0 or committed[i - 1] == period)
                   for i in range(len(committed) - len(p) + 1)), text(p)


class ScriptedVoice:
    """A stand-in for :class:`~simulst.audio.vad.VoiceActivity`: speech throughout, except pauses (start, end)
    in source samples; each pause's end of speech is reported once the pause has been heard, as Silero's is, at
    the end of the window of 512 samples that completes it."""

    window = 512

    def __init__(self, pauses: Sequence[tuple[int, int]]) -> None:
        self.read, self.speaking = 0, True
        self.script = sorted([(end, VoiceEvent("end", start)) for start, end in pauses]
                             + [(end, VoiceEvent("start", end)) for _, end in pauses], key=lambda e: e[0])

    def feed(self, audio: np.ndarray) -> list[VoiceEvent]:
        self.read += audio.shape[0]
        heard = self.read // self.window * self.window
        events = [event for at, event in self.script if at <= heard]
        self.script = [(at, event) for at, event in self.script if at > heard]
        if events:
            self.speaking = events[-1].kind == "start"
        return events


class PromptedToy(TimedToy):
    """The timed toy that records the previous-text prompt of every search."""

    def start(self, enc: Encoded, prefix: Sequence[int], costs: Costs,
              prompt: Sequence[int] | None = None) -> tuple[torch.Tensor, ToyState]:
        self.prompts.append(tuple(prompt or ()))
        return super().start(enc, prefix, costs, prompt)


def test_a_vad_pause_ends_the_sentence_of_the_prompt_full_stop_or_not() -> None:
    # Whisper often writes no full stop at a segment's end; the sentence scope used to keep every such segment in
    # the prompt (100 tokens of them), and tiny.en copied their words into the next ("them as foreigners")
    for scope, carried in (("sentence", False), ("all", True)):
        model = PromptedToy("the cat sat on the mat")
        session = Session(model, StreamOptions(chunk_ms=1000, segment_s=10, max_buffer_s=16, loop_guard=False,
                                               context_scope=scope))  # type: ignore[arg-type]
        session.segmenter = VadSegmenter(ScriptedVoice([(6000, 7000), (13000, 14000)]), 16000, 5 * 16000)
        session.segmenter.speech_in_buffer = True  # (speech from the first sample: no start event comes)
        _check_stream(session, _speech(20), [1000] * 20)
        assert session.costs.extra == {"vad_segments": 2, "trims": 2}  # (the segment ends: their audio dropped)
        assert session.text.count("the cat sat on the mat") == 3
        after_pause = model.prompts[-1]  # (the last search, in the third segment)
        assert bool(after_pause) is carried, scope
        if carried:
            assert model.tokenizer.decode(list(after_pause)).count("the cat sat on the mat") == 2


def test_the_offline_policy_decodes_each_vad_segment_once_when_it_ends() -> None:
    # offline commits nothing at a chunk; with a VAD, a pause ends a segment, whose audio is decoded once and
    # committed whole: two pauses, three segments, three decodes of the toy's sentence and no chunk decode
    model = PromptedToy("the cat sat on the mat")
    session = Session(model, StreamOptions(chunk_ms=1000, policy=PolicyOptions.parse("offline"), loop_guard=False))
    session.segmenter = VadSegmenter(ScriptedVoice([(6000, 7000), (13000, 14000)]), 16000, 5 * 16000)
    session.segmenter.speech_in_buffer = True
    _check_stream(session, _speech(20), [1000] * 20)
    assert session.costs.extra == {"vad_segments": 2, "trims": 2}
    assert session.text.count("the cat sat on the mat") == 3
    assert len(model.prompts) == 3  # (one search per segment)


@settings(max_examples=30, deadline=None)
@given(pieces=st.lists(st.integers(1, 3000), min_size=1, max_size=30),
       policy=st.sampled_from(["la-2", "hold-1", "ba-2", "offline"]),
       wait_ms=st.sampled_from([1000.0, 1333.0, 1700.0]))
def test_with_a_vad_the_output_does_not_depend_on_how_the_audio_is_pushed(
    pieces: list[int], policy: str, wait_ms: float
) -> None:
    # Two pauses (the toy's 1 kHz samples): one a segment end, one long enough to reset the context; after each
    # the silence is dropped. The output, times included, is the same pushed in any pieces as a chunk at a time
    # (as the benchmarks push); the VAD's windows (512 samples) and the decodes (at 1333, 2333, ... with that
    # wait) fall inside the pieces. Before: the silence was dropped after each push, so the buffer's start, and
    # what later decodes read, moved with the push sizes, and a pause heard after a chunk boundary in the same
    # push was taken before that boundary's decode
    audio = _speech(24)

    def stream(sizes: Sequence[int]) -> list[tuple[str, float]]:
        options = StreamOptions(chunk_ms=1000, segment_s=10, max_buffer_s=16, initial_wait_ms=wait_ms,
                                policy=PolicyOptions.parse(policy))
        session = Session(TimedToy(), options)
        session.segmenter = VadSegmenter(ScriptedVoice([(5200, 8100), (12300, 19400)]), 1000, 6 * 1000)
        session.segmenter.speech_in_buffer = True
        _check_stream(session, audio, sizes)
        assert session.costs.extra["vad_segments"] == 2 and session.costs.extra["context_resets"] == 1
        return [(e.text, e.source_ms) for e in session.emissions]

    sizes = [*pieces, audio.shape[0]]  # (the rest of the audio in one push)
    assert stream(sizes) == stream([1000] * 24)


def test_with_a_vad_catch_up_still_decodes_once_per_push() -> None:
    # (the stream reads a push VAD window by window, but a catch-up stream decodes only at its last boundary)
    model = ToySpeechModel()
    session = Session(model, StreamOptions(chunk_ms=500, policy=PolicyOptions.parse("la-1")), catch_up=True)
    session.segmenter = VadSegmenter(ScriptedVoice([]), 1000, 6 * 1000)
    session.segmenter.speech_in_buffer = True
    session.push(_speech(2.3))
    assert model.encodes == [2000]
    session.push(_speech(0.2))
    assert model.encodes == [2000, 2500]


@settings(max_examples=40, deadline=None)
@given(
    pieces=st.lists(st.integers(1, 9000), min_size=1, max_size=40),
    timed=st.booleans(),
    policy=st.sampled_from(["la-2", "hold-1", "offline", "alignatt"]),
    segment=st.floats(2.0, 10.0),
    catch_up=st.booleans(),
)
def test_streams_of_any_length_stay_bounded_and_never_retract(
    pieces: list[int], timed: bool, policy: str, segment: float, catch_up: bool
) -> None:
    if policy == "alignatt":
        policy = "la-1"  # the toy has no attention; la-1 commits the most, the hardest case for trimming
    model = TimedToy() if timed else ToySpeechModel("the cat sat on the mat .")
    options = StreamOptions(chunk_ms=1000, policy=PolicyOptions.parse(policy), segment_s=segment,
                            max_buffer_s=segment + 3.0)
    session = Session(model, options, catch_up=catch_up)
    audio = _speech(sum(pieces) / 1000.0)
    _check_stream(session, audio, pieces)


# ----------------------------------------------------------------------------------------- MT by sentences


def test_the_mt_stage_translates_sentence_by_sentence() -> None:
    backend = ScriptedMT({"the cat sat.": "la gata se sentó .", "a dog": "un perro"})
    stage = MTStage(backend, MTOptions(policy=PolicyOptions.parse("la-1")))
    out = stage.push("the cat sat.", 1000.0, 1100.0)
    assert [e.text for e in out] == ["la gata se sentó ."]  # the sentence is complete: committed whole
    out = stage.push(" a dog", 2000.0, 2100.0)
    assert backend.calls[-1] == ("a dog", (), False)  # only the new sentence, continuing nothing
    out += stage.finish("", 3000.0, 3100.0)
    assert stage.text == "la gata se sentó . un perro"
    stage = MTStage(ScriptedMT(), MTOptions(policy=PolicyOptions.parse("la-1"), sentences=False))
    stage.push("the cat sat.", 1000.0, 1100.0)
    stage.push(" a dog", 2000.0, 2100.0)
    assert stage.backend.calls[-1][0] == "the cat sat. a dog"  # type: ignore[attr-defined]


def test_a_trimmed_cascade_stamps_its_last_emission_with_all_the_audio_read() -> None:
    options = StreamOptions(chunk_ms=1000, segment_s=5, max_buffer_s=8)
    cascade = CascadeSession(ToySpeechModel(), ScriptedMT(), options, MTOptions(policy=PolicyOptions.parse("la-1")))
    audio = _speech(20)
    out = [e for pos in range(0, 20_000, 1000) for e in cascade.push(audio[pos : pos + 1000])]
    last = cascade.finish()
    assert cascade.asr.buffer.offset == 16_000 and last  # trimmed twice; the rest translated at the end
    times = [e.source_ms for e in out + last]
    assert times == sorted(times) and times[-1] == 20_000.0  # the source's end, not the buffer's length (4 s)


# ----------------------------------------------------------------------------------------- real Whisper


# The streaming tests decode every chunk of their talk, so they take shorter ones: jfk and the three shortest
# fleurs-en-dev utterances (four sentences, about 34 s with the pauses) give three trims behind committed sentences
# in a 20 s buffer; jfk and the two shortest (about 24 s) two pauses between utterances for VAD.
SHORT_TALK = ("jfk", "fleurs-en-001", "fleurs-en-003", "fleurs-en-004")
VAD_TALK = ("jfk", "fleurs-en-003", "fleurs-en-004")


def _english_talk(only: Collection[str] | None = None) -> tuple[np.ndarray, str]:
    """jfk + the 5 fleurs-en-dev utterances (or those ``only`` names) with 1 s pauses (about 57 s), and the joined
    transcripts."""
    parts, texts = [], []
    for manifest in ("jfk.tsv", "fleurs-en-dev.tsv"):
        for line in (DATA / manifest).read_text(encoding="utf-8").splitlines()[1:]:
            uid, audio, _duration, transcript = line.split("\t")[:4]
            if only is None or uid in only:
                parts += [load_audio(DATA / audio), np.zeros(16000, dtype=np.float32)]
                texts.append(transcript)
    return np.concatenate(parts), " ".join(texts)


@pytest.mark.real
@needs_shared
def test_whisper_token_starts_on_jfk() -> None:
    from simulst.models.loading import load_model
    from simulst.models.whisper import WhisperModel

    model = load_model("whisper-tiny.en")
    assert isinstance(model, WhisperModel)
    audio = load_audio(JFK)
    costs = Costs()
    enc = model.encode(audio, costs)
    prompt = model.prompt(enc, costs)
    tokens = model.tokenizer.encode(" And so my fellow Americans, ask not what your country can do for you,"
                                    " ask what you can do for your country.")
    starts = token_starts = model.token_starts(enc, prompt, tokens, costs)
    assert len(starts) == len(tokens) + 1 and starts == sorted(starts)
    seconds = [f * 0.02 for f in token_starts]
    # jfk: "And so" begins about 0.3 s in, "ask not" about 3.0 s, the last "country" about 9.9 s; speech ends ~10.6 s
    ask = next(i for i, t in enumerate(tokens) if model.tokenizer.decode([t]).strip() == "ask")
    assert seconds[0] < 1.0 and 2.0 < seconds[ask] < 4.0 and 9.0 < seconds[-1] <= 11.0
    assert model.previous_text(tokens, 5) == [model.sot_prev_id, *tokens[-5:]]
    assert model.previous_text([], 5) == []


@pytest.mark.real
@needs_shared
def test_a_long_talk_streams_through_a_bounded_buffer() -> None:
    from simulst.models.loading import load_model

    audio, transcript = _english_talk(SHORT_TALK)
    session = Session(load_model("whisper-tiny.en"), StreamOptions(segment_s=10.0, max_buffer_s=20.0))
    assert audio.shape[0] > 1.5 * session.buffer.capacity  # (34 s: the buffer must be trimmed to stay bounded)
    shown = ""
    for pos in range(0, audio.shape[0], session.chunk_samples):
        for e in session.push(audio[pos : pos + session.chunk_samples]):
            shown += e.text
        assert session.buffer.samples <= session.buffer.capacity
    shown += "".join(e.text for e in session.finish())
    assert shown == session.text
    assert session.costs.extra.get("trims", 0) >= 3 and session.buffer.base > 0
    assert "segment_commits" not in session.costs.extra  # every trim was behind committed text
    error = wer([session.text], [transcript], normalize_for_wer)
    assert error < 20.0, (error, session.text)  # (11.0 seen; per utterance, offline: 8.8 % on all six)
    assert "ask not what your country" in normalize_for_wer(session.text)


@pytest.mark.real
@needs_shared
def test_a_minute_of_english_with_the_offline_policy_is_decoded_in_window_sized_segments() -> None:
    from simulst.models.loading import load_model

    audio, transcript = _english_talk()
    options = StreamOptions(policy=PolicyOptions.parse("offline"))
    session = Session(load_model("whisper-tiny.en", window="audio", precision="int8"), options)
    feed_fast(session, audio)
    # 58 s: the offline policy's buffer is the model's 30 s window; each full window is committed whole and trimmed
    # behind where its text ends (the rest stays), so a second full window (a first dropped whole would leave 28 s:
    # none), then the rest at the end. The int8 kernels round differently per CPU: on an AMD EPYC tiny.en ends the
    # first window's text after jfk's 11 s (3 windows, WER 8.0 %); 2 windows and 6.4 % on the CPU of earlier runs
    assert 2 <= session.costs.extra["segment_commits"] <= 3
    assert session.costs.extra["trims"] == session.costs.extra["segment_commits"]
    assert wer([session.text], [transcript], normalize_for_wer) < 12.0


# ----------------------------------------------------------------------------------------- voice activity


def test_loading_the_vad_keeps_the_torch_threads() -> None:
    # silero_vad's first import calls torch.set_num_threads(1) for the whole process (silero_vad/model.py): the
    # models after it ran on one thread (serve --vad, or every test after the VAD tests) until VoiceActivity put
    # the count back
    pytest.importorskip("silero_vad")
    import sys

    import torch

    from simulst.audio.vad import VoiceActivity

    threads = torch.get_num_threads()
    for name in [m for m in sys.modules if m == "silero_vad" or m.startswith("silero_vad.")]:
        del sys.modules[name]  # (so that the import runs its module code again)
    torch.set_num_threads(2)
    try:
        VoiceActivity(16000)
        assert "silero_vad.model" in sys.modules and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


@needs_shared
def test_silero_finds_the_six_utterances_of_the_talk() -> None:
    pytest.importorskip("silero_vad")
    from simulst.audio.vad import VoiceActivity

    audio, _ = _english_talk()
    vad = VoiceActivity(16000, pause_ms=500)
    events = []
    for pos in range(0, audio.shape[0], 1600):  # 100 ms pieces
        events += vad.feed(audio[pos : pos + 1600])
    kinds = [e.kind for e in events]
    assert kinds == ["start", "end"] * (len(kinds) // 2)  # alternating, every start closed
    assert 6 <= kinds.count("start") <= 14  # six utterances (inner pauses of 0.5 s split some: 11 seen)
    samples = [e.sample for e in events]
    assert samples == sorted(samples) and samples[-1] <= audio.shape[0]


@needs_shared
def test_streams_share_the_vad_model_and_keep_their_own_state() -> None:
    pytest.importorskip("silero_vad")
    from simulst.audio.vad import VoiceActivity

    first, second = load_audio(JFK), load_audio(DATA / "audio" / "fleurs-multi" / "fleurs-de-000.wav")

    def alone(audio: np.ndarray) -> list[object]:
        vad = VoiceActivity(16000)
        return [e for pos in range(0, audio.shape[0], 1600) for e in vad.feed(audio[pos : pos + 1600])]

    a, b = VoiceActivity(16000), VoiceActivity(16000)
    assert a._iterator.model._model is b._iterator.model._model  # one model in the process
    together_a: list[object] = []
    together_b: list[object] = []
    for pos in range(0, max(first.shape[0], second.shape[0]), 1600):  # interleaved, 100 ms each
        together_a += a.feed(first[pos : pos + 1600])
        together_b += b.feed(second[pos : pos + 1600])
    assert together_a == alone(first) and together_b == alone(second)
    assert together_a and together_b


@needs_shared
def test_holds_speech_on_real_pauses_and_speech() -> None:
    pytest.importorskip("silero_vad")
    from simulst.audio.vad import holds_speech

    german = load_audio(DATA / "audio" / "fleurs-multi" / "fleurs-de-000.wav")
    assert not holds_speech(german[-int(3.4 * 16000) :])  # the pause after its last sentence (-43 dBFS)
    assert holds_speech(german[-int(6.0 * 16000) :])  # ... and the sentence's end before it
    assert holds_speech(load_audio(JFK)[-3 * 16000 :])  # "... for your country." (with the gain: any level)
    assert holds_speech(0.003 * load_audio(JFK)[-3 * 16000 :])
    assert not holds_speech(np.zeros(16000, dtype=np.float32))


@pytest.mark.real
@needs_shared
def test_the_final_decode_of_a_trimmed_stream_skips_a_silent_tail() -> None:
    from simulst.models.loading import load_model

    model = load_model("whisper-tiny.en")
    german = load_audio(DATA / "audio" / "fleurs-multi" / "fleurs-de-000.wav")
    jfk = load_audio(JFK)
    # (the whole previous text as prompt: tiny.en then ends jfk with "country." and the buffer is trimmed behind
    # it, leaving only the pause; with the sentence's context alone it writes no period, nothing is trimmed, and
    # the last buffer, speech and pause, goes to the no-speech judge instead)
    with_pause = Session(model, StreamOptions(context_scope="all"))
    with_pause.push(np.concatenate([jfk, german[-int(3.4 * 16000) :]]))  # jfk, then 3.4 s of room noise
    assert with_pause.buffer.offset > 0 and with_pause.finish() == []
    assert with_pause.costs.extra.get("silent_tail_skips") == 1
    plain = Session(model, StreamOptions())
    feed_fast(plain, jfk)  # its last buffer ends in speech: decoded as before
    assert plain.buffer.offset > 0 and "silent_tail_skips" not in plain.costs.extra
    assert JFK_PHRASE.search(normalize_for_wer(plain.text))


@pytest.mark.parametrize("vad", ["silent", "speech", "missing"])
def test_the_end_of_a_trimmed_stream_asks_the_vad(monkeypatch: pytest.MonkeyPatch, vad: str) -> None:
    from simulst.errors import ModelLoadError
    from simulst.streaming import guards as guards_module

    def holds_speech(audio: np.ndarray, sample_rate: int, threshold: float) -> bool:
        if vad == "missing":
            raise ModelLoadError("no onnxruntime")
        return vad == "speech"

    monkeypatch.setattr(guards_module, "holds_speech", holds_speech)
    monkeypatch.setattr(guards_module, "VAD_RATES", {1000: 0})  # (the toy's rate)
    session = Session(TimedToy(), StreamOptions(chunk_ms=1000, segment_s=6, max_buffer_s=12, loop_guard=False))
    session.push(_speech(20.0))
    assert session.buffer.offset > 0  # trimmed
    shown = session.text
    final = session.finish()
    extra = session.costs.extra
    if vad == "silent":  # nothing more committed
        assert final == [] and session.text == shown and extra["silent_tail_skips"] == 1
    else:  # decoded as before: the toy's words in the last buffer are committed
        assert final and session.text.startswith(shown) and "silent_tail_skips" not in extra
        assert extra.get("silent_tail_unchecked", 0) == (vad == "missing")


def test_vad_options_are_checked() -> None:
    from simulst.audio.vad import VoiceActivity
    from simulst.errors import OptionError

    with pytest.raises(OptionError):
        VoiceActivity(44100)
    with pytest.raises(OptionError):
        StreamOptions(vad_threshold=1.5)


@pytest.mark.real
@needs_shared
def test_vad_skips_silence_and_commits_at_pauses() -> None:
    pytest.importorskip("silero_vad")
    from simulst.models.loading import load_model

    model = load_model("whisper-tiny.en")  # (with the audio window tiny.en loops on some short segments)
    talk, transcript = _english_talk(VAD_TALK)
    audio = np.concatenate([np.zeros(8 * 16000, dtype=np.float32), talk])  # 8 s of silence first
    session = Session(model, StreamOptions(vad=True))
    emissions = feed_fast(session, audio)
    assert emissions[0].source_ms > 8000  # nothing from the silence
    times = [e.source_ms for e in emissions]
    assert times == sorted(times)
    assert session.costs.extra["vad_segments"] >= 2  # committed at the pauses between the 3 utterances (3 seen)
    assert wer([session.text], [transcript], normalize_for_wer) < 20.0  # (3.8 seen; on all six 12.8, without VAD 14.4)
    chunks = audio.shape[0] // session.chunk_samples
    chunk_decodes = session.costs.encoder_calls - session.costs.extra["vad_segments"] - 1  # - segment ends, final
    assert chunk_decodes <= chunks - 8  # the silence (8 s first, 1 s pauses) is not decoded (21 of 32 seen)


@pytest.mark.real
@needs_shared
def test_a_vad_stream_writes_the_same_pushed_as_a_live_client_pushes() -> None:
    pytest.importorskip("silero_vad")
    from simulst.models.loading import load_model

    # 3 s of silence, then jfk: pushed a chunk at a time (as the benchmarks and `simulst transcribe` push) and in
    # 100 ms pieces (as the live clients do), the emissions are the same, times included. The VAD's silence used
    # to be dropped after each push, so the two read the speech from buffers that began 0.1-0.5 s apart; with
    # --reencode-s 2 (the transcribe balanced preset's) that changed a word of a server's soak test
    model = load_model("whisper-tiny.en")
    audio = np.concatenate([np.zeros(3 * 16000, dtype=np.float32), load_audio(JFK)])
    options = StreamOptions(vad=True, chunk_ms=500, reencode_s=2.0)
    pushed = Session(model, options)
    _check_stream(pushed, audio, [1600] * (audio.shape[0] // 1600 + 1))
    alone = Session(model, options)
    feed_fast(alone, audio)
    assert [(e.text, e.source_ms) for e in pushed.emissions] == [(e.text, e.source_ms) for e in alone.emissions]
    assert JFK_PHRASE.search(normalize_for_wer(alone.text))


@pytest.mark.real
@needs_shared
def test_a_short_vad_segment_is_committed_however_unsure_the_model_is() -> None:
    pytest.importorskip("silero_vad")
    from simulst.models.loading import load_model

    # jfk's "ask not" is a segment of its own at 0.5 s pauses; tiny.en reads it with a mean log-probability under
    # the early guard's -0.7, and the segment end used to drop it with the audio ("fellow Americans. What your")
    session = Session(load_model("whisper-tiny.en"), StreamOptions(vad=True, vad_pause_ms=500))
    feed_fast(session, load_audio(JFK))
    assert session.costs.extra["vad_segments"] >= 3
    assert "americans ask not what your country" in normalize_for_wer(session.text)


def test_a_segment_or_buffer_longer_than_the_models_window_is_refused() -> None:
    # the toy model's window is 60 s (60 000 samples at 1 kHz); Whisper's is 30 s, which the translate presets use
    from simulst.errors import OptionError
    from simulst.server.service import ServerConfig, Service

    model = ToySpeechModel()
    assert Session(model, StreamOptions(segment_s=10, max_buffer_s=60)).buffer.capacity == 60_000
    with pytest.raises(OptionError, match=r"maximum buffer \(--max-buffer-s 61\) is longer than the model's window: "
                                          r"at most 60 s"):
        Session(model, StreamOptions(max_buffer_s=61))
    with pytest.raises(OptionError, match=r"segment \(--segment-s 70\) .* at most 60 s"):
        Session(model, StreamOptions(segment_s=70, max_buffer_s=70, policy=PolicyOptions("offline", 0)))
    with pytest.raises(OptionError, match="at most 60 s"):  # a server refuses at its start, not at every stream
        Service(model, ServerConfig(options=StreamOptions(max_buffer_s=61), batched=False))
    with pytest.raises(OptionError, match="at most 60 s"):
        Service(model, ServerConfig(translate_options=StreamOptions(max_buffer_s=90), batched=False))


class PromptRecitingToy(PromptedToy):
    """Prompted with previous text, it says " uh" again and again (a loop from its first token, as Whisper recites
    a prompt that holds a loop's text); unprompted, it reads its sentence."""

    def _next(self, tokens: tuple[int, ...], audio_samples: int) -> dict[int, float]:
        if self.prompts and self.prompts[-1]:
            return {1: 0.9, EOS: 0.1}
        return super()._next(tokens, audio_samples)


@pytest.mark.parametrize("context_tokens", [100, 0])
def test_a_decode_committed_whole_that_loops_on_its_prompt_is_decoded_again_without_the_context(
        context_tokens: int) -> None:
    # hold-100 commits nothing at a chunk: each full 8 s buffer is committed whole (its text ends 2.8 s in: the
    # whole buffer is dropped). Prompted with the sentence committed at 8 s, the toy says only " uh uh uh ..." at
    # 16 s - a loop from its first token: the context starts afresh after the committed text and the buffer is
    # decoded again, unprompted, so its sentence is committed (not the three " uh"s the loop guard lets through).
    # The source's end (24 s), prompted with that sentence, loops too and is decoded again: the toy's sentence a
    # third time in a row, which the loop guard cuts. Without a context nothing is restarted; the same text.
    model = PromptRecitingToy("the cat sat down")
    session = Session(model, StreamOptions(chunk_ms=1000, segment_s=5, max_buffer_s=8, context_scope="all",
                                           context_tokens=context_tokens, policy=PolicyOptions("hold", 100)))
    _check_stream(session, _speech(24), [1000] * 24)
    assert session.costs.extra["segment_commits"] == 2
    assert session.text == "the cat sat down the cat sat down"
    assert session.costs.extra.get("loop_context_restarts", 0) == (2 if context_tokens else 0)


class LoopingToy(TimedToy):
    """Once it has said its sentence's third word, it says that word again and again (p .85) rather than the fourth
    (.1): a repetition loop that its best hypothesis runs into; the rest of the sentence comes where the loop is
    barred."""

    def _next(self, tokens: tuple[int, ...], audio_samples: int) -> dict[int, float]:
        target = self.target
        if len(tokens) < 3 or list(tokens[:3]) != target[:3]:
            return super()._next(tokens, audio_samples)
        rest = list(tokens[3:])
        again = next((i for i, token in enumerate(rest) if token != target[2]), len(rest))
        tail = rest[again:]
        if not tail:
            return {target[2]: 0.85, target[3]: 0.1, EOS: 0.05}
        if tail != target[3 : 3 + len(tail)]:
            return super()._next(tokens, audio_samples)
        return {target[3 + len(tail)]: 0.9, EOS: 0.1} if 3 + len(tail) < len(target) else {EOS: 0.9, 1: 0.1}


@pytest.mark.parametrize("threshold", [-1.5, -0.3])
def test_a_decode_committed_whole_that_runs_into_a_loop_is_searched_again_with_the_loop_barred(
        threshold: float) -> None:
    # offline: one decode, at the source's end, committed whole. Its greedy search runs into " sat sat sat ..."
    # to the token budget; the loop guard cuts it at the fourth " sat", and the words after the loop would be lost
    # with the audio. Searched again with the loop barred: " on the mat" after the third " sat" (its new tokens'
    # mean log-prob -0.33) - committed, unless the low-confidence threshold finds that unsure (-0.3): then the cut.
    model = LoopingToy("the cat sat on the mat")
    session = Session(model, StreamOptions(chunk_ms=1000, policy=PolicyOptions.parse("offline"),
                                           logprob_threshold=threshold))
    _check_stream(session, _speech(6), [1000] * 6)
    sure = threshold < -0.33
    assert session.text == ("the cat sat sat sat on the mat" if sure else "the cat sat sat sat")
    assert session.costs.extra.get("loop_fallbacks", 0) == int(sure)
    assert session.costs.extra.get("loop_fallbacks_dropped", 0) == int(not sure)


def test_repeated_share_hand_worked() -> None:
    # the pairs of the new words (the one across the end of what came before included) said before
    assert repeated_share([], []) == 0.0 and repeated_share(["a"], []) == 0.0
    assert repeated_share(["x", "a", "b"], ["c", "a", "b", "c"]) == 0.5  # (b c) (c a) (a b)* (b c)*: 2 of 4
    assert repeated_share(["a", "b", "c"], ["a", "b", "c"]) == 2 / 3  # (c a) (a b)* (b c)*
    assert repeated_share([], ["a", "b", "a", "b"]) == 1 / 3  # (a b) (b a) (a b)*
    paraphrase = "the accident took place in montagne and it seemed that it was caused by an unnamed maleviant"
    said = "the accident took place in a mountainous area and it seemed that this one was caused by a wild boar"
    assert repeated_share(said.split(), paraphrase.split()) == 9 / 17  # (said: the accident, ..., caused by)
    guards = Guards(StreamOptions(), translates=True, segment=1)
    tokenizer = TimedToy("a b c d e f g h").tokenizer  # (tokens 2..9: " a" .. " h", each a word)
    assert guards.says_again([2, 3, 4, 5, 2, 3, 4], 4, tokenizer)  # (d a) (a b)* (b c)*: 2 of 3
    assert not guards.says_again([2, 3, 4, 5, 6, 7, 8], 4, tokenizer)  # nothing again


def test_loop_only_hand_worked() -> None:
    # a hypothesis's new text (past the committed tokens) that is nothing but a repetition loop
    guards = Guards(StreamOptions(), translates=False, segment=1)
    tokenizer = TimedToy("a b c d e f g h").tokenizer  # (tokens 2..9: " a" .. " h", each a word)
    a, b, c, d, e = 2, 3, 4, 5, 6
    assert guards.loop_only([a, b, c, d, d, d, d, d], 4, tokenizer)  # " d" after " d": two kept, all the loop
    assert not guards.loop_only([a, b, c, e, d, d, d, d], 3, tokenizer)  # " e" said before the loop
    assert not guards.loop_only([a, b, c, d], 3, tokenizer)  # no loop
    sentence = [a, b, c, d, e, 7]
    assert guards.loop_only([*sentence, *sentence], 6, tokenizer)  # the committed sentence again: nothing kept
    assert guards.loop_only([*sentence, *[8, 9] * 4], 6, tokenizer)  # " g h" three times kept, all the loop
    assert guards.loop_only([*sentence, 9, *[8, 9] * 4], 6, tokenizer)  # (its first copy cut short: " h g h ...")
    assert not guards.loop_only([*sentence, 9, 9, *[8, 9] * 4], 6, tokenizer)  # " h h" before the loop " g h"
    assert not Guards(StreamOptions(loop_guard=False), translates=False, segment=1).loop_only(
        [a, b, c, d, d, d, d, d], 4, tokenizer)


class StuckToy(TimedToy):
    """The timed toy as a model that, forced to continue 3 or more committed words, can only say the last of them
    again and again (a loop that every decode of the buffer returns to). With nothing committed in its buffer it
    writes the sentence as it hears it - after it was stuck, the rest of the speech ("dog ran far away ."), or
    with ``again`` the sentence said before."""

    def __init__(self, again: bool = False) -> None:
        super().__init__()
        self.tokenizer = WordToyTokenizer([*self.tokenizer.pieces, " dog", " ran", " far", " away"])
        self.vocab_size = len(self.tokenizer.pieces)
        self.rest = self.target if again else self.tokenizer.encode("dog ran far away .")
        self.forced, self.stuck = 0, False

    def start(self, enc: Encoded, prefix: Sequence[int], costs: Costs,
              prompt: Sequence[int] | None = None) -> tuple[torch.Tensor, ToyState]:
        self.forced = len(prefix)
        self.stuck = self.stuck or self.forced >= 3
        return super().start(enc, prefix, costs, prompt)

    def _next(self, tokens: tuple[int, ...], audio_samples: int) -> dict[int, float]:
        if self.forced >= 3 and len(tokens) >= self.forced:
            return {tokens[-1]: 0.9, EOS: 0.1}
        if self.stuck and not self.forced:
            self.target = self.rest
        return super()._next(tokens, audio_samples)


def _pushed_in_seconds(session: Session, audio: np.ndarray) -> Session:
    """``session`` after ``audio`` (1 kHz toy audio) pushed 1 s at a time, not finished."""
    for start in range(0, audio.shape[0], 1000):
        session.push(audio[start : start + 1000])
    return session


def test_a_final_decode_stuck_in_a_loop_reads_the_audio_after_the_committed_text_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import simulst.streaming.session as session_module

    options = StreamOptions(chunk_ms=1000, segment_s=20, max_buffer_s=30)
    texts, default = {}, session_module.ESCAPE_S
    for escape_s in (default, 100.0):
        monkeypatch.setattr(session_module, "ESCAPE_S", escape_s)
        session = _pushed_in_seconds(Session(StuckToy(), options), _speech(8))
        before = session.text
        assert 3 <= len(before.split()) < 7  # the chunks' commits stopped at the loop
        final = "".join(e.text for e in session.finish())
        assert session.text == before + final  # (nothing retracted)
        texts[escape_s] = final
        escaped = session.costs.extra.get("loop_escapes", 0)
        assert session.costs.extra["loop_fallbacks_dropped"] == 1 and escaped == (escape_s < 100.0)
    # the escape: the buffer is cut where the committed words end, and the rest of the audio says its words
    assert texts[default].startswith(" dog ran far") and texts[100.0] == ""
    # an escape that says the committed words again (the cut came too early) commits nothing
    monkeypatch.setattr(session_module, "ESCAPE_S", default)
    session = _pushed_in_seconds(Session(StuckToy(again=True), options), _speech(8))
    before = session.text
    assert session.finish() == [] and session.text == before
    assert session.costs.extra["loop_escapes_dropped"] == 1 and "loop_escapes" not in session.costs.extra
