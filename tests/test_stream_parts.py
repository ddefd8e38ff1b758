"""The parts of the stream loop, each on its own, with hand-worked answers: the audio buffer's cuts, why a decode
happens, the guards, the decoder prompt and the VAD segmenter (:mod:`simulst.streaming`)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulst.audio.vad import VoiceEvent
from simulst.config import StreamOptions
from simulst.models.base import Encoded
from simulst.sequences import first_loop, longest_shared_run
from simulst.streaming.buffer import MIN_TAIL_S, SKIPPED_START_S, AudioBuffer
from simulst.streaming.decoding import Decoded, DecodeReason
from simulst.streaming.guards import Guards, recital_words
from simulst.streaming.prompt import MAX_PREVIOUS_TOKENS, PromptBuilder
from simulst.streaming.segmenter import VadSegmenter
from simulst.types import Costs, Hypothesis
from tests.toy import ToyTokenizer

RATE = 1000  # samples per second: a buffer's seconds are thousands of samples
DOT = 3  # the toy token that ends a sentence
TOKENIZER = ToyTokenizer(["<eos>", " one", " two", ".", " three", " four"])


def ends_sentence(token: int) -> bool:
    return token == DOT


def buffer(samples: int, capacity: int = 8000, segment: int = 5000, chunk: int = 1000) -> AudioBuffer:
    buf = AudioBuffer(RATE, capacity, segment, chunk)
    buf.append(np.ones(samples, dtype=np.float32))
    return buf


# ------------------------------------------------------------------------------------------------ the buffer


def test_the_buffer_holds_what_was_read_and_drops_its_front() -> None:
    buf = buffer(6000)
    buf.audio[:6000] = np.arange(6000, dtype=np.float32)
    assert (buf.read, buf.room) == (6000, 2000)
    buf.drop(2500, base=4)
    assert (buf.samples, buf.offset, buf.base, buf.read) == (3500, 2500, 4, 6000)
    assert buf.head(2)[0] == 2500  # what was at sample 2500 is now first
    buf.append(np.zeros(4500, dtype=np.float32))
    assert buf.room == 0


def test_a_trim_cuts_behind_the_last_committed_sentence_end() -> None:
    buf = buffer(7000)
    committed = [1, 2, DOT, 4]  # " one two. three": the sentence ends at token 2
    starts = [0, 500, 1000, 1500, 3500]  # where each token starts (and, last, where the text ends)
    asked: list[int] = []

    def timing() -> Sequence[int]:
        asked.append(1)
        return starts

    # the cut comes where the token after the full stop starts; 5.5 s of audio stay, more than MIN_TAIL_S
    assert buf.trim_point([*committed, 5], committed, 7000, False, ends_sentence, timing) == (1500, 3)
    # a tail shorter than MIN_TAIL_S (often the pause after the sentence) waits ...
    short = round(1500 + MIN_TAIL_S * RATE) - 1
    assert buf.trim_point(committed, committed, short, False, ends_sentence, timing) is None
    # ... unless the trim is eager (after a loop cut)
    assert buf.trim_point(committed, committed, short, True, ends_sentence, timing) == (1500, 3)
    assert len(asked) == 3  # one forced pass each time the cut is looked for


def test_a_buffer_about_to_be_full_is_trimmed_behind_the_last_committed_word() -> None:
    committed = [1, 2, 4]  # no sentence end
    starts = [0, 500, 1000, 6500]
    not_full = buffer(6000)  # 6 s read, a chunk more still fits in 8 s: wait for a sentence end
    assert not_full.trim_point(committed, committed, 6000, False, ends_sentence, lambda: starts) is None
    full = buffer(7500)  # the next chunk would not fit: behind the last committed word, however short the tail
    assert full.trim_point(committed, committed, 7500, False, ends_sentence, lambda: starts) == (6500, 3)


def test_no_trim_without_committed_text_timing_or_a_decode_that_continues_it() -> None:
    buf = buffer(7000)

    def never() -> Sequence[int]:
        raise AssertionError("no forced pass needed")

    assert buf.trim_point([1, 2], [], 7000, False, ends_sentence, never) is None  # nothing committed
    assert buf.trim_point([1, 4, DOT], [1, 2, DOT], 7000, False, ends_sentence, never) is None  # ignored the prefix
    assert buf.trim_point([1, DOT], [1, DOT], 7000, False, ends_sentence, lambda: None) is None  # no token timing


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([1, 2, DOT, 4]), max_size=12), st.lists(st.sampled_from([1, DOT, 5]), max_size=4),
       st.integers(0, 12), st.integers(1, 8000), st.booleans(), st.data())
def test_a_trim_drops_only_audio_of_committed_text(committed: list[int], more: list[int], base: int, samples: int,
                                                   eager: bool, data: st.DataObject) -> None:
    # whatever is committed and however the tokens are timed: a trim cuts inside the decoded audio, behind a
    # committed token (a sentence end unless the buffer is about to be full), so the audio of every token not yet
    # committed stays; and a trim before the buffer is full leaves MIN_TAIL_S unless eager
    buf = buffer(samples)
    buf.base = base = min(base, len(committed))
    best = [*committed, *more]
    starts = sorted(data.draw(st.lists(st.integers(0, samples), min_size=len(best) - base + 1,
                                       max_size=len(best) - base + 1)))
    point = buf.trim_point(best, committed, samples, eager, ends_sentence, lambda: starts)
    if point is None:
        return
    cut, new_base = point
    full = samples + buf.chunk > buf.capacity
    assert 0 < cut <= samples and base < new_base <= len(committed)
    assert cut == starts[new_base - base] <= starts[len(committed) - base]
    assert ends_sentence(committed[new_base - 1]) or full
    assert full or eager or samples - cut >= MIN_TAIL_S * RATE


def test_a_full_buffers_skipped_start_and_text_end() -> None:
    buf = buffer(8000)
    late = round(SKIPPED_START_S * RATE) + 500  # the text's second token starts 3.5 s in: the first spans 3.5 s
    assert buf.skipped_start([0, late, late + 400], nothing_committed=True) == late
    assert buf.skipped_start([0, late, late + 400], nothing_committed=False) == 0  # some of it committed
    assert buf.skipped_start([0, 400, 800], nothing_committed=True) == 0  # read from the start
    assert buf.skipped_start([0, late], nothing_committed=True) == 0  # one token: no second start
    assert buf.skipped_start(None, nothing_committed=True) == 0
    # a full buffer committed whole is cut where its text ends, if enough was read and a chunk's worth is left
    assert buf.text_end_cut([0, 2000, 5000]) == 5000
    assert buf.text_end_cut([0, 1000, 2000]) == 8000  # too little read (under MIN_TAIL_S): all of it
    assert buf.text_end_cut([0, 2000, 7500]) == 8000  # too little left (under a chunk): all of it
    assert buf.text_end_cut(None) == 8000


# ------------------------------------------------------------------------------------------------ decodes


def test_the_reason_of_a_decode_says_what_it_commits_and_which_guards_apply() -> None:
    whole = {reason: reason.commits_whole for reason in DecodeReason}
    assert whole == {DecodeReason.CHUNK: False, DecodeReason.SEGMENT_END: True, DecodeReason.BUFFER_FULL: True,
                     DecodeReason.SOURCE_END: True}
    assert [r for r in DecodeReason if r.ends_source] == [DecodeReason.SOURCE_END]  # the final emission
    # the no-speech guard: on every decode but the end of a stream never trimmed (one final decode is offline)
    assert all(reason.judges_speech(trimmed=True) for reason in DecodeReason)
    assert [r for r in DecodeReason if not r.judges_speech(trimmed=False)] == [DecodeReason.SOURCE_END]
    decoded = Decoded(1000, [Hypothesis((1, 2), -0.5)], None, (7,))
    assert decoded.held() == Decoded(1000, [], None, (7,))


# ------------------------------------------------------------------------------------------------ the guards


def test_the_low_confidence_guard_is_stricter_while_a_segment_is_short() -> None:
    guards = Guards(StreamOptions(logprob_threshold=-1.5, early_logprob_threshold=-0.7), False, segment=5000)
    costs = Costs()
    best = Hypothesis((1, 2, 4, 5), score=-2.0, finished=False)  # 2 tokens after the 2 committed: mean -1.0
    assert guards.unsure(best, 2, samples=5000, costs=costs)  # -1.0 < -0.7 (early: at most a segment)
    assert not guards.unsure(best, 2, samples=5001, costs=costs)  # -1.0 >= -1.5
    ended = Hypothesis((1, 2, 4, 5), score=-2.0, finished=True)  # <eos> counts: 3 tokens, mean -0.67
    assert not guards.unsure(ended, 2, samples=5000, costs=costs)
    assert not guards.unsure(best, 4, samples=5000, costs=costs)  # nothing new
    assert costs.extra == {"unsure_skips": 1}
    translating = Guards(StreamOptions(), True, segment=5000)  # auto: no early threshold when translating
    assert translating.early_logprob_threshold is None and not translating.unsure(best, 2, 5000, Costs())


def test_the_loop_guard_cuts_back_to_a_whole_word() -> None:
    guards = Guards(StreamOptions(), False, segment=5000)
    costs = Costs()
    target = [1, 2] * 5  # " one two" four times in a row is a loop: the 4th copy is cut
    kept, cut = guards.loop_free(target, 0, TOKENIZER, costs)
    assert (list(kept), cut, costs.extra) == ([1, 2] * 3, True, {"loop_cuts": 1})
    kept, cut = Guards(StreamOptions(loop_guard=False), False, 5000).loop_free(target, 0, TOKENIZER, Costs())
    assert (list(kept), cut) == (target, False)


def test_the_loop_guard_cuts_where_the_loop_of_a_stopped_search_starts() -> None:
    # a search stopped at the 4th " one two" (its best hypothesis ends where the loop is complete); the policy's
    # target holds the start of that copy, " one", but not its end: cut where the copy starts
    guards, costs = Guards(StreamOptions(), False, segment=5000), Costs()
    best, target = [1, 2] * 4, [1, 2] * 3 + [1]
    assert list(guards.loop_free(target, 0, TOKENIZER, costs)[0]) == target  # (the target alone holds no loop)
    kept, cut = guards.loop_free(target, 0, TOKENIZER, costs, best=best)
    assert (list(kept), cut, costs.extra) == ([1, 2] * 3, True, {"loop_cuts": 1})
    assert guards.loop_free([1, 2], 0, TOKENIZER, Costs(), best=best) == ([1, 2], False)  # before the copy: kept


def test_the_loop_guard_cuts_a_copy_the_best_hypothesis_begins_and_the_words_that_lead_it() -> None:
    # "one two three four five six." then " One two three four five six." again: the target (what two decodes
    # agree on) holds " One two three" of the copy, the best hypothesis all of it. The 6-token copy starts at
    # " two"; " One" reads as " one" but for its case, so the cut moves back over it: nothing of the copy is kept
    pieces = ["<eos>", " one", " two", " three", " four", " five", " six", ".", " One", " seven"]
    tokenizer, guards = ToyTokenizer(pieces), Guards(StreamOptions(), False, segment=5000)
    said = [1, 2, 3, 4, 5, 6, 7]
    best, target = [*said, 8, 2, 3, 4, 5, 6, 7], [*said, 8, 2, 3]
    costs = Costs()
    assert guards.loop_free(target, 7, tokenizer, costs) == (target, False)  # (the target alone holds no loop)
    kept, cut = guards.loop_free(target, 7, tokenizer, costs, best=best)
    assert (list(kept), cut, costs.extra) == (said, True, {"loop_cuts": 1})
    assert guards.loop_free(target, 8, tokenizer, Costs(), best=best)[0] == [*said, 8]  # " One" committed: kept
    new = [*said, 9, 2, 3]  # " seven" leads the copy: a word of its own, kept
    assert guards.loop_free(new, 7, tokenizer, Costs(), best=[*said, 9, 2, 3, 4, 5, 6, 7])[0] == [*said, 9]
    other = [*said, 9, 1]  # a best hypothesis the target does not follow is not read
    assert guards.loop_free(other, 7, tokenizer, Costs(), best=best) == (other, False)


def test_the_loop_guard_keeps_the_word_whose_closing_punctuation_starts_the_copy() -> None:
    # " sentence. To the north and within" then, after the committed " by Lord", " Byron. To the north and within":
    # the 6-token copy starts at "." - the full stop that closes " Byron", which was said (dropping " Byron" with
    # it lost the word for good once the buffer was trimmed). The cut falls after the full stop
    pieces = ["<eos>", " by", " Lord", " Byron", ".", " To", " the", " north", " and", " within", " sentence"]
    tokenizer, guards = ToyTokenizer(pieces), Guards(StreamOptions(), False, segment=5000)
    committed = [10, 4, 5, 6, 7, 8, 9, 1, 2]
    target = [*committed, 3, 4, 5, 6, 7, 8, 9]
    costs = Costs()
    kept, cut = guards.loop_free(target, len(committed), tokenizer, costs)
    assert (list(kept), cut, costs.extra) == ([*committed, 3, 4], True, {"loop_cuts": 1})
    # the policy's target ends at the full stop, the best hypothesis runs on into the copy: all of it is kept
    kept, cut = guards.loop_free([*committed, 3, 4], len(committed), tokenizer, Costs(), best=target)
    assert (list(kept), cut) == ([*committed, 3, 4], True)
    # a loop of punctuation alone (a 4th "!"): cut where it starts, the word before it kept
    marks = ToyTokenizer(["<eos>", " so", "!"])
    assert list(guards.loop_free([1, *[2] * 6], 0, marks, Costs())[0]) == [1, 2, 2, 2]


def test_the_loop_guard_commits_nothing_new_when_the_copy_starts_in_the_committed_text() -> None:
    # the committed text ends in a second copy's first words (" one two. three four two one two."), the best
    # hypothesis runs on into it (" three four two") and the policy takes nothing new: the commit stays as it is,
    # a loop found (the case raised IndexError once, on a French talk at 107 s)
    tokenizer, guards = TOKENIZER, Guards(StreamOptions(), False, segment=5000)
    committed = [1, 2, DOT, 4, 5, 2, 1, 2, DOT]
    kept, cut = guards.loop_free(committed, len(committed), tokenizer, Costs(), best=[*committed, 4, 5, 2])
    assert (list(kept), cut) == (committed, True)


LOOP_PIECES = ToyTokenizer(["<eos>", " a", " b", " c", "d", "e", ".", ",", " F"])  # words, word pieces, punctuation
TOKENS = st.lists(st.integers(1, 8), max_size=20)  # (of LOOP_PIECES)


@settings(max_examples=300, deadline=None)
@given(TOKENS, st.lists(st.integers(1, 8), min_size=1, max_size=8), st.integers(0, 4), TOKENS, st.integers(0, 60))
def test_the_loop_guard_keeps_a_loop_free_prefix_cut_between_words(said: list[int], phrase: list[int], times: int,
                                                                    beyond: list[int], committed: int) -> None:
    # whatever the committed part and however far the best hypothesis runs on past the target (a phrase said again
    # and again, then anything): the commit is a prefix of the target, never shorter than the committed tokens,
    # holding no loop past them, cut before a word or before punctuation (a word's letters are never split)
    target = [*said, *phrase * times]
    committed = min(committed, len(target))
    beyond = [*phrase * 2, *beyond]
    guards, costs = Guards(StreamOptions(), False, segment=5000), Costs()
    for best in (None, [*target, *beyond]):
        kept, cut = guards.loop_free(target, committed, LOOP_PIECES, costs, best)
        assert list(kept) == target[: len(kept)] and committed <= len(kept) <= len(target)
        assert cut or len(kept) == len(target)
        assert first_loop(kept, committed) is None
        if committed < len(kept) < len(target):
            assert LOOP_PIECES.starts_word(target[len(kept)]) or LOOP_PIECES.is_punctuation(target[len(kept)])


# ------------------------------------------------------------------------------------------------ the prompt


class PromptedModel:
    """What the prompt builder reads of a model: its tokenizer and the previous-text prompt (marked with 99)."""

    tokenizer = TOKENIZER

    def previous_text(self, tokens: Sequence[int], max_tokens: int) -> list[int]:
        return [99, *tokens[-max_tokens:]]


def test_the_prompt_carries_the_previous_sentence_or_all_the_text() -> None:
    before = [1, 2, DOT, 4, 5]  # " one two. three four": the buffer starts in the second sentence
    sentence = PromptBuilder(context_tokens=100, scope="sentence")
    sentence.fixed = (50, 51)  # (pinned at the first decode)
    assert sentence.build(PromptedModel(), before) == (99, 4, 5, 50, 51)
    everything = PromptBuilder(context_tokens=4, scope="all")
    everything.fixed = (50, 51)
    assert everything.build(PromptedModel(), before) == (99, 2, DOT, 4, 5, 50, 51)  # the last 4 tokens
    sentence.end_sentence(len(before))  # a VAD pause ended the segment: the sentence ends, full stop or not
    assert sentence.build(PromptedModel(), before) == (50, 51)
    everything.end_sentence(len(before))  # (the scope ``all`` keeps it)
    everything.restart(3)  # a long pause: the context starts afresh after the first 3 tokens
    assert everything.build(PromptedModel(), before) == (99, 4, 5, 50, 51)
    assert PromptBuilder(context_tokens=0, scope="all").context_tokens == 0


def test_an_initial_prompt_goes_first_and_the_context_fills_what_is_left_of_the_limit() -> None:
    before = [1, 2, DOT, 4, 5]
    builder = PromptBuilder(context_tokens=4, scope="all", initial=(7, 8))
    builder.fixed = (50, 51)
    assert builder.build(PromptedModel(), []) == (99, 7, 8, 50, 51)  # the prompt alone before any text
    assert builder.build(PromptedModel(), before) == (99, 7, 8, 2, DOT, 4, 5, 50, 51)  # then the context
    long = PromptBuilder(context_tokens=4, scope="all", initial=tuple(range(1000, 1300)))
    long.fixed = (50, 51)
    assert long.initial == tuple(range(1300 - MAX_PREVIOUS_TOKENS, 1300))  # its last 223 tokens
    assert long.build(PromptedModel(), before) == (99, *long.initial, 50, 51)  # no room left for the context
    near = PromptBuilder(context_tokens=4, scope="all", initial=tuple(range(1000, 1000 + MAX_PREVIOUS_TOKENS - 2)))
    near.fixed = (50, 51)
    assert near.build(PromptedModel(), before) == (99, *near.initial, 4, 5, 50, 51)  # the context's last 2 fit


def test_an_initial_prompt_can_be_left_out_of_a_decode() -> None:
    builder = PromptBuilder(context_tokens=4, scope="all", initial=(7, 8))
    builder.fixed = (50, 51)
    assert builder.build(PromptedModel(), [1, 2], initial=False) == (99, 1, 2, 50, 51)  # the context alone
    assert builder.build(PromptedModel(), [], initial=False) == (50, 51)


# ------------------------------------------------------------------------------------------------ recital

SPOKEN = ToyTokenizer(["<eos>", " Good", " morning", ",", " everyone", ".", " After", " the", " war", " good"])


def test_the_longest_shared_run_hand_worked() -> None:
    assert longest_shared_run("xabcy", "abcab") == (1, 3)  # "abc"
    assert longest_shared_run("abxab", "ab") == (0, 2)  # the earliest of two as long
    assert longest_shared_run("xyz", "abc") == (0, 0)
    assert longest_shared_run("", "abc") == (0, 0)


@given(st.lists(st.integers(0, 3), max_size=8), st.lists(st.integers(0, 3), max_size=8))
def test_the_longest_shared_run_is_shared_and_longest(items: list[int], source: list[int]) -> None:
    start, length = longest_shared_run(items, source)
    run = items[start : start + length]
    assert any(source[j : j + length] == run for j in range(len(source) - length + 1))
    assert not any(items[i : i + length + 1] == source[j : j + length + 1]
                   for i in range(len(items) - length) for j in range(len(source) - length))


def test_a_recital_is_a_run_of_the_prompt_that_long() -> None:
    assert [recital_words(n) for n in (1, 2, 3, 4, 5, 6, 40)] == [2, 2, 2, 3, 4, 4, 4]
    prompt = [1, 2, 3, 4, 5]  # " Good morning, everyone." (3 words: a run of 2 is a recital)
    assert Guards.recital([1, 2, 5], prompt, SPOKEN) == ["good", "morning"]  # " Good morning."
    assert Guards.recital([6, 7, 8, 9, 2], prompt, SPOKEN) == ["good", "morning"]  # (case and marks aside)
    assert Guards.recital([6, 7, 8, 9], prompt, SPOKEN) == []  # one word of it: no recital
    assert Guards.recital([1, 2, 5], [], SPOKEN) == []  # no initial prompt
    assert Guards.recital([1, 2], [1, 2], SPOKEN) == ["good", "morning"]  # all of a 2-word prompt


def test_a_recital_is_echoed_when_the_decode_without_the_prompt_says_half_its_words() -> None:
    recital = ["good", "morning"]
    assert Guards.echoes(recital, [9, 3, 6], SPOKEN)  # " good, After": one of two
    assert Guards.echoes(recital, [1, 2, 5], SPOKEN)
    assert not Guards.echoes(recital, [6, 7, 8], SPOKEN)  # " After the war"
    assert not Guards.echoes(recital, [], SPOKEN)


class WordsTokenizer:
    """A tokenizer whose tokens are the distinct words of one text (what Guards.foreign reads of a tokenizer)."""

    def __init__(self, text: str) -> None:
        self.words = list(dict.fromkeys(" " + word for word in text.split()))
        self.tokens = [self.words.index(" " + word) for word in text.split()]

    def decode(self, tokens: Sequence[int]) -> str:
        return "".join(self.words[t] for t in tokens)

    def starts_word(self, token: int) -> bool:
        return True

    def is_punctuation(self, token: int) -> bool:
        return False


def test_a_translation_reads_as_no_english_with_few_english_function_words() -> None:
    translating = Guards(StreamOptions(), translates=True, segment=0)
    def foreign(text: str, guards: Guards = translating) -> bool:
        tokenizer = WordsTokenizer(text)
        return guards.foreign(tokenizer.tokens, 0, tokenizer)  # type: ignore[arg-type]
    assert foreign("Malheureusement, il est difficile d'étudier le flux de circulation, car les comportements")
    assert foreign("Leunet, davantage de des le potropes pendant le deuxième sept, a fallu passé par un taille")
    assert foreign("Nach dem Bau des Staudamms im Jahr 1963 kamen die Überschwemmungen zum Erliegen")
    assert not foreign("Unfortunately, it is difficult to study the flow of traffic, because the drivers")
    assert not foreign("Jean-Carlos Fittipaldi lost the contract of his car and finished the race")
    assert not foreign("Malheureusement, il est difficile d'étudier")  # (fewer than 8 words: not judged)
    assert not foreign("in their positions in schools, in schools, in schools, in schools, in")  # (a loop: cut)
    assert not foreign("Malheureusement, il est difficile d'étudier le flux de circulation, car les comportements",
                       Guards(StreamOptions(), translates=False, segment=0))  # (a transcription: not judged)


# ------------------------------------------------------------------------------------------------ VAD


class Detector:
    """Scripted voice activity: the events each call reports."""

    window = 512

    def __init__(self, script: list[list[VoiceEvent]]) -> None:
        self.script, self.speaking = script, False

    def feed(self, audio: np.ndarray) -> list[VoiceEvent]:
        events = self.script.pop(0)
        if events:
            self.speaking = events[-1].kind == "start"
        return events


def test_the_segmenter_reports_pauses_and_the_speech_after_a_long_pause() -> None:
    script = [[VoiceEvent("start", 0)], [VoiceEvent("end", 3000)], [VoiceEvent("start", 4000)],
              [VoiceEvent("end", 6000)], [VoiceEvent("start", 12000)], []]
    segmenter = VadSegmenter(Detector(script), RATE, reset_samples=5 * RATE)
    heard = [list(segmenter.hear(np.zeros(10), Costs())) for _ in range(6)]
    # the first start follows no pause (reported only with reset_samples 0); a 1 s pause is no reset, a 6 s one is
    assert heard == [[], [VoiceEvent("end", 3000)], [], [VoiceEvent("end", 6000)], [VoiceEvent("start", 12000)], []]
    assert segmenter.speech_in_buffer and segmenter.pause_from is None and not segmenter.silent
    segmenter.speech_in_buffer = False  # (the stream committed and dropped the segment)
    segmenter.detector.speaking = False  # type: ignore[attr-defined]
    assert segmenter.silent and segmenter.silence_to_drop(2000) == 1500  # all but the last 0.5 s
    assert segmenter.silence_to_drop(400) == 0


def test_the_segmenter_tells_its_listener_what_it_hears_and_when_an_end_is_taken() -> None:
    told: list[tuple[str, int]] = []
    script = [[VoiceEvent("start", 0)], [VoiceEvent("end", 3000), VoiceEvent("start", 4000)]]
    segmenter = VadSegmenter(Detector(script), RATE, reset_samples=5 * RATE,
                             listener=lambda kind, sample: told.append((kind, sample)))
    assert list(segmenter.hear(np.zeros(10), Costs())) == [] and told == [("start", 0)]  # (no reset: not yielded)
    told.clear()
    for event in segmenter.hear(np.zeros(10), Costs()):
        told.append(("stream takes", event.sample))  # (the stream commits the segment here)
    # every event as soon as it is heard (the start after the end too), then the end once the stream took it
    assert told == [("end", 3000), ("start", 4000), ("stream takes", 3000), ("taken", 3000)]


@pytest.mark.parametrize("kind", ["start", "end"])
def test_the_segmenter_passes_each_event_in_order(kind: str) -> None:
    segmenter = VadSegmenter(Detector([[VoiceEvent(kind, 100)]]), RATE, reset_samples=0)
    events = segmenter.hear(np.zeros(10), Costs())
    assert next(events) == VoiceEvent(kind, 100)  # (reset_samples 0: every start resets the context)
    assert segmenter.speech_in_buffer is (kind == "start")
    assert list(events) == []



class DetectingModel:
    """Detects the language tokens it is given, one per call, with the probabilities given."""

    sample_rate = 16000

    def __init__(self, found: Sequence[tuple[int, float | None]]) -> None:
        self.found = list(found)

    def language_prompt(self, enc: Encoded, costs: Costs) -> tuple[list[int], float | None]:
        language, probability = self.found.pop(0)
        return [50, language, 52], probability


def _encoded(seconds: float) -> Encoded:
    return Encoded(frames=None, audio_samples=round(seconds * 16000))  # type: ignore[arg-type]


def test_a_detected_language_is_pinned_from_3_s_of_audio_at_probability_0_9() -> None:
    builder = PromptBuilder(context_tokens=0, scope="all")
    # 2.9 s at 0.99, 3 s at 0.89: each decode prompted with its own detection, nothing pinned ...
    model = DetectingModel([(60, 0.99), (61, 0.89), (62, 0.9), (63, 0.99)])
    assert builder.pin(model, _encoded(2.9), Costs()) == (50, 60, 52) and not builder.pinned  # type: ignore[arg-type]
    assert builder.pin(model, _encoded(3.0), Costs()) == (50, 61, 52) and not builder.pinned  # type: ignore[arg-type]
    # ... 3 s at exactly 0.9: pinned, and no detection after it
    enc = _encoded(3.0)
    assert builder.pin(model, enc, Costs()) == (50, 62, 52) and builder.pinned  # type: ignore[arg-type]
    assert builder.pin(model, _encoded(9.0), Costs()) == (50, 62, 52) and model.found == [(63, 0.99)]  # type: ignore[arg-type]
    # a decode searched again on the same encoding reads its detection again (no second pass)
    again = PromptBuilder(context_tokens=0, scope="all")
    model = DetectingModel([(60, 0.5)])
    first = _encoded(1.0)
    assert again.pin(model, first, Costs()) == again.pin(model, first, Costs()) == (50, 60, 52)  # type: ignore[arg-type]
    probe = weakref.ref(first)
    del first
    gc.collect()
    assert probe() is None  # (the builder keeps no encoding alive)
    # a language told (nothing detected) is pinned at once, from any audio
    told = PromptBuilder(context_tokens=0, scope="all")
    assert told.pin(DetectingModel([(64, None)]), _encoded(0.5), Costs()) == (50, 64, 52) and told.pinned  # type: ignore[arg-type]
