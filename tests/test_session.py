"""The onlinization loop on a scripted toy model: hand-worked schedules and invariants."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulst.config import PolicyOptions, SearchOptions, StreamOptions
from simulst.errors import AudioError, OptionError
from simulst.models.base import Encoded
from simulst.search import BeamSearch
from simulst.search.core import Beam
from simulst.streaming.commit import held_sentence_end, whole_words
from simulst.streaming.decoding import Decoded, DecodeReason
from simulst.streaming.session import Session
from simulst.types import Costs, Emission, Hypothesis
from tests.toy import EOS, ToySpeechModel, ToyTokenizer, UnsureToy, push_in_pieces, stream_search, tone


def options(policy: str = "la-2", chunk_ms: float = 1000, search: str = "greedy", **kw: float) -> StreamOptions:
    return StreamOptions(chunk_ms=chunk_ms, policy=PolicyOptions.parse(policy), search=SearchOptions(search), **kw)


def test_la2_schedule_hand_worked() -> None:
    # The toy model hears word i at (i+1)*700 ms and guesses " uh" for the next one:
    #  1 s: the uh            (LA-2: first chunk, nothing)
    #  2 s: the cat uh        LCP = "the"                 -> "the"
    #  3 s: the cat sat on uh LCP = "the cat"             -> " cat"
    #  4 s: ... on the uh     LCP = "the cat sat on"      -> " sat on"
    #  5 s: ... the mat<eos>  LCP = "... on the"          -> " the"
    #  end (5 s, no new audio: the 5 s search is reused)  -> " mat"
    model = ToySpeechModel()
    session = Session(model, options("la-2"))
    emissions = push_in_pieces(session, tone(5000), 1000)
    assert [(e.text, e.source_ms, e.final) for e in emissions] == [
        ("the", 2000, False),
        (" cat", 3000, False),
        (" sat on", 4000, False),
        (" the", 5000, False),
        (" mat", 5000, True),
    ]
    assert session.text == "the cat sat on the mat"
    assert model.encodes == [1000, 2000, 3000, 4000, 5000]  # the final decode reused the last one
    assert all(e.elapsed_ms >= e.source_ms for e in emissions)


def test_hold_n_and_initial_wait() -> None:
    # hold-1 with a 2 s initial wait, then 1 s chunks: 2 s: "the cat uh" -> "the cat"; 3 s: "... on uh" -> " sat on";
    # 4 s: "... the uh" -> " the"; 4.5 s end: "... the mat" -> " mat".
    session = Session(ToySpeechModel(), options("hold-1", initial_wait_ms=2000))
    emissions = push_in_pieces(session, tone(4500), 500)
    assert [(e.text, e.source_ms) for e in emissions] == [
        ("the cat", 2000), (" sat on", 3000), (" the", 4000), (" mat", 4500)
    ]


def test_offline_policy_decodes_once_at_the_end() -> None:
    model = ToySpeechModel()
    emissions = push_in_pieces(Session(model, options("offline")), tone(5000), 1000)
    assert [(e.text, e.source_ms, e.final) for e in emissions] == [("the cat sat on the mat", 5000, True)]
    assert model.encodes == [5000]


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_one_final_chunk_equals_offline_decoding(search: str) -> None:
    audio = tone(3100)
    model = ToySpeechModel()
    session = Session(model, options("la-2", chunk_ms=10_000, search=search))
    assert session.push(audio) == []
    [emission] = session.finish()
    searcher = stream_search(BeamSearch(1) if search == "greedy" else BeamSearch(5))
    offline = searcher.search(model, model.encode(audio, Costs()), [], 40, Costs(), final=True)[0]
    assert emission.tokens == offline.tokens
    assert emission.text == model.tokenizer.decode(offline.tokens).lstrip()


class GardenPath(ToySpeechModel):
    """Greedy search reads " uh" then <eos> (log .5 + log .7 = -1.05, -0.52 a token); a beam of 2 also keeps " the",
    and " the cat" <eos> scores log .45 + 2 log .95 = -0.90, -0.30 a token: the beam's choice. Audio is ignored."""

    def _next(self, tokens: tuple[int, ...], audio_samples: int) -> dict[int, float]:
        uh, the, cat = 1, 2, 3
        table = {(): {uh: 0.5, the: 0.45, 0: 0.05}, (uh,): {0: 0.7, uh: 0.15, cat: 0.15}, (the,): {cat: 0.95, 0: 0.05}}
        return table.get(tokens, {0: 0.95, uh: 0.05})


def test_the_final_beam_searches_only_the_decodes_committed_whole() -> None:
    model = GardenPath("the cat")

    def run(policy: str, final_beam: int | None) -> list[str]:
        model.encodes.clear()
        search = SearchOptions("greedy", final_beam=final_beam)
        session = Session(model, StreamOptions(chunk_ms=1000, policy=PolicyOptions.parse(policy), search=search,
                                               early_logprob_threshold=None, logprob_threshold=None))
        return [e.text for e in push_in_pieces(session, tone(3000), 1000)]

    assert run("offline", None) == ["uh"]
    assert run("offline", 2) == ["the cat"]  # the one decode, committed whole: the beam's
    # LA-2's chunks stay greedy ("uh" twice: committed at 2 s); the final decode continues the committed " uh",
    # searching again on the 3 s chunk's encoding (the source did not grow)
    assert run("la-2", None) == ["uh"]
    assert run("la-2", 2) == ["uh"] and model.encodes == [1000, 2000, 3000]
    with pytest.raises(OptionError):
        SearchOptions(final_beam=0)


class Stutter(ToySpeechModel):
    """Reads " the", then " uh" four times (the 4th a loop to the loop guard), then " cat" <eos>; audio is
    ignored."""

    def _next(self, tokens: tuple[int, ...], audio_samples: int) -> dict[int, float]:
        uh, the, cat = 1, 2, 3
        if tokens == (the, uh, uh, uh, uh):
            return {cat: 0.9, 0: 0.1}
        if tokens and tokens[0] == the and set(tokens[1:]) <= {uh}:
            return {uh: 0.9, 0: 0.1}
        return {the: 0.9, 0: 0.1} if not tokens else {0: 1.0}


def test_a_decode_committed_whole_searches_again_after_a_chunk_stopped_at_a_loop() -> None:
    the, uh, cat = 2, 1, 3
    model = Stutter("the cat")
    session = Session(model, StreamOptions(chunk_ms=1000, policy=PolicyOptions.parse("la-2"), search=SearchOptions(),
                                           early_logprob_threshold=None, logprob_threshold=None))
    # 1 s and 2 s: each chunk's search stops at the 4th " uh" (LA-2 commits "the uh uh uh" at 2 s: the last " uh"
    # may still grow); at the end, the same 2 s of audio: the decode committed whole searches on to " cat" <eos>,
    # whose 4th " uh" the loop guard then cuts. Searched once more with the loop barred, it ends (<eos>) after the
    # third " uh": nothing added to what the guard keeps, so nothing committed from it
    searched: list[tuple[int, ...]] = []
    decode = session.decoder.decode
    def recorded(reason: DecodeReason, samples: int, block_loops: bool = False,
                 next_tokens: tuple[int, ...] | None = None) -> Decoded:
        decoded = decode(reason, samples, block_loops, next_tokens)
        searched.append(decoded.hyps[0].tokens)
        return decoded
    setattr(session.decoder, "decode", recorded)  # noqa: B010
    emissions = push_in_pieces(session, tone(2000), 1000)
    assert [e.text for e in emissions] == ["the uh uh uh"]
    assert session.state.costs.extra["loop_stops"] == 2
    assert searched[-2:] == [(the, uh, uh, uh, uh, cat), (the, uh, uh, uh)]
    assert session.state.costs.extra["loop_fallbacks_dropped"] == 1
    assert model.encodes == [1000, 2000]  # (searched again on the same encoding, twice)


def test_eos_before_the_source_ends_does_not_end_the_stream() -> None:
    # With guess_p = 0.3 the toy model ends every chunk's hypothesis with <eos> after the words it has heard:
    # 1 s: "the"<eos> -> hold-0 commits "the" (the <eos> shows the word is complete) and the stream goes on.
    session = Session(ToySpeechModel(guess_p=0.3), options("hold-0", chunk_ms=1000))
    emissions = push_in_pieces(session, tone(4200), 700)
    assert [(e.text, e.source_ms) for e in emissions] == [
        ("the", 1000), (" cat", 2000), (" sat on", 3000), (" the", 4000), (" mat", 4200)
    ]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 900), min_size=1, max_size=40),
       st.sampled_from(["la-2", "hold-1", "sp-2", "ba-2", "wait-2"]))
def test_push_granularity_does_not_change_the_output(pieces: list[int], policy: str) -> None:
    audio = tone(4700)
    reference = push_in_pieces(Session(ToySpeechModel(), options(policy)), audio, 1000)
    session = Session(ToySpeechModel(), options(policy))
    out: list[Emission] = []
    pos = 0
    for size in pieces:
        out += session.push(audio[pos : pos + size])
        pos += size
        if pos >= audio.shape[0]:
            break
    out += session.push(audio[pos:])
    out += session.finish()
    assert [(e.text, e.source_ms) for e in out] == [(e.text, e.source_ms) for e in reference]


@settings(max_examples=40, deadline=None)
@given(
    st.integers(300, 6000),
    st.sampled_from([250, 500, 700, 1000, 2000]),
    st.sampled_from(["la-1", "la-2", "la-3", "hold-0", "hold-2", "sp-1", "sp-2", "ba-2", "ba-3", "wait-1", "offline"]),
    st.sampled_from(["greedy", "beam"]),
)
def test_emissions_never_retract_and_end_on_words(ms: int, chunk: int, policy: str, search: str) -> None:
    model = ToySpeechModel()
    session = Session(model, options(policy, chunk_ms=chunk, search=search))
    emissions = push_in_pieces(session, tone(ms), 333)
    text = ""
    committed: list[int] = []
    for e in emissions:
        text += e.text
        committed += e.tokens
        assert e.text or e.final
        assert model.tokenizer.decode(committed).lstrip() == text  # the shown text only grows
        if not e.final:
            assert e.source_ms < ms or ms % chunk == 0
    assert text == session.text
    times = [e.source_ms for e in emissions]
    assert times == sorted(times)


def test_whole_words_holds_back_a_partial_word() -> None:
    tok = ToyTokenizer(["<eos>", " un", "believ", "able", " yes", ","])
    best = Hypothesis((4, 1, 2, 3, 4), 0.0)
    assert whole_words((4, 1, 2), best, tok) == 1  # " un" "believ" may continue: keep " yes"
    assert whole_words((4, 1, 2, 3), best, tok) == 4  # followed by " yes": complete
    assert whole_words((4, 5), Hypothesis((4, 5, 1), 0.0), tok) == 2  # punctuation completes a word
    assert whole_words((4, 1), Hypothesis((4, 1), 0.0, finished=True), tok) == 2  # <eos> follows
    assert whole_words((4, 1), Hypothesis((4, 1), 0.0, finished=False), tok) == 1  # unknown continuation
    assert whole_words((1, 2), Hypothesis((1, 2, 3), 0.0), tok) == 0
    assert whole_words((), best, tok) == 0


def test_a_sentence_end_that_ends_the_hypothesis_is_held() -> None:
    tok = ToyTokenizer(["<eos>", " not", ".", " what", "?", ","])
    assert held_sentence_end((1, 2), Hypothesis((1, 2), 0.0, finished=True), tok) == 1  # "not." then <eos>: hold "."
    assert held_sentence_end((1, 4), Hypothesis((1, 4), 0.0, finished=True), tok) == 1  # a question mark too
    assert held_sentence_end((1, 2), Hypothesis((1, 2, 3), 0.0), tok) == 2  # the text goes on past it: commit
    assert held_sentence_end((1, 5), Hypothesis((1, 5), 0.0, finished=True), tok) == 2  # a comma ends no sentence
    assert held_sentence_end((1,), Hypothesis((1, 2), 0.0, finished=True), tok) == 1  # (nothing to hold)
    assert held_sentence_end((), Hypothesis((), 0.0, finished=True), tok) == 0


def test_a_mark_where_the_previous_hypothesis_ended_in_a_sentence_end_waits_for_a_word() -> None:
    tok = ToyTokenizer(["<eos>", " not", ".", " what", "?", ","])
    went_on = Hypothesis((1, 5, 3), 0.0)  # "not, what": the held "." became a comma
    assert held_sentence_end((1, 5), went_on, tok, previous=(1, 2)) == 1  # after "not.": the comma waits
    assert held_sentence_end((1, 5, 3), went_on, tok, previous=(1, 2)) == 3  # with the word after it: commit
    assert held_sentence_end((1, 2), Hypothesis((1, 2, 3), 0.0), tok, previous=(1, 2)) == 1  # "." kept: waits too
    assert held_sentence_end((1, 5), went_on, tok, previous=(1, 5)) == 2  # after "not,": no sentence end was held
    assert held_sentence_end((1, 5), went_on, tok, previous=(1, 2, 3)) == 2  # the previous text went on
    assert held_sentence_end((3, 5), went_on, tok, previous=(1, 2)) == 2  # another text before it
    assert held_sentence_end((1, 5), went_on, tok) == 2  # (no previous decode)


class PauseToy(ToySpeechModel):
    """Hears " ask" at 0.7 s, " not" at 1.4 s, then a pause, " what" at 3.5 s and " your" at 4.2 s; its text
    ends with "." wherever the audio read stops, and once a "." it did not hear as a sentence end is in its
    prefix it has nothing to add (a committed full stop derails it, as it derails Whisper)."""

    times = (700, 1400, 3500, 4200)

    def __init__(self) -> None:
        super().__init__("ask not what your")
        self.dot = self.add_piece(".")

    def add_piece(self, text: str) -> int:
        """Add ``text`` to the vocabulary; its token id."""
        self.tokenizer.pieces.append(text)
        self.vocab_size += 1
        return len(self.tokenizer.pieces) - 1

    def heard(self, audio_samples: int) -> int:
        """The words spoken within the first ``audio_samples``."""
        return sum(t <= audio_samples for t in self.times)

    def _next(self, tokens: tuple[int, ...], audio_samples: int) -> dict[int, float]:
        heard = self.heard(audio_samples)
        i = len(tokens)
        if list(tokens) == self.target[:i]:
            return {self.target[i]: 0.95, EOS: 0.05} if i < heard else {self.dot: 0.9, EOS: 0.1}
        return {EOS: 0.95, 1: 0.05}


def with_and_without_hold(toy: type[PauseToy], policy: str) -> tuple[list[tuple[str, float]], ...]:
    """(text, source_ms) of each emission of ``toy`` streamed 5 s in 1 s chunks under ``policy``, with
    --hold-sentence-end and without it."""
    runs = []
    for hold in (True, False):
        session = Session(toy(), dataclasses.replace(options(policy), hold_sentence_end=hold))
        runs.append([(e.text, e.source_ms) for e in push_in_pieces(session, tone(5000), 1000)])
    return tuple(runs)


def test_hold_sentence_end_commits_no_full_stop_in_a_pause() -> None:
    # --hold-sentence-end, LA-2, 1 s chunks: 1 s "ask.", 2 s "ask not." -> "ask"; 3 s "ask not." again (the pause)
    # -> " not", its full stop held; 4 s "ask not what." -> nothing new; 5 s "ask not what your." -> " what"; the
    # end commits " your.".
    held, plain = with_and_without_hold(PauseToy, "la-2")
    assert held == [("ask", 2000), (" not", 3000), (" what", 5000), (" your.", 5000)]
    # without the option (the default) 3 s commits " not." and the toy has nothing to add after it
    assert plain == [("ask", 2000), (" not.", 3000)]


class CommaToy(PauseToy):
    """:class:`PauseToy` that, once it hears " what", writes a comma where it wrote the full stop: "ask not." in the
    pause, then "ask not, what."."""

    def __init__(self) -> None:
        super().__init__()
        self.comma = self.add_piece(",")
        self.spoken = [*self.target[:2], self.comma, *self.target[2:]]  # ask not , what your

    def _next(self, tokens: tuple[int, ...], audio_samples: int) -> dict[int, float]:
        heard = self.heard(audio_samples)
        i = len(tokens)
        if list(tokens) != self.spoken[:i]:
            return {EOS: 0.95, 1: 0.05}
        if i == 2:  # after "not": a comma once the speaker went on, else the end of the audio read
            return {self.comma: 0.9, EOS: 0.1} if heard > 2 else {self.dot: 0.9, EOS: 0.1}
        words = i - (i > 2)
        return {self.spoken[i]: 0.95, EOS: 0.05} if words < heard else {self.dot: 0.9, EOS: 0.1}


def test_hold_sentence_end_commits_the_comma_that_replaces_a_held_full_stop_only_with_a_word() -> None:
    # hold-2 (the best hypothesis less its last two tokens), 1 s chunks: 2 s "ask not ." -> "ask"; 3 s the same;
    # 4 s "ask not , what ." -> "ask not ,", but the previous decode ended "not ." there: the comma waits -> " not";
    # 5 s "ask not , what your ." -> ", what"; the end commits " your.".
    held, plain = with_and_without_hold(CommaToy, "hold-2")
    assert held == [("ask", 2000), (" not", 4000), (", what", 5000), (" your.", 5000)]
    # without the option 4 s commits the comma alone
    assert plain == [("ask", 2000), (" not,", 4000), (" what", 5000), (" your.", 5000)]


class RunOnToy(CommaToy):
    """:class:`CommaToy` that, once it hears " what" after the pause, rather goes on without a mark (" what" .55)
    or ends (.25) than writes a comma (.2): "ask not." in the pause, then "ask not what." (or "ask not, what.")."""

    def _next(self, tokens: tuple[int, ...], audio_samples: int) -> dict[int, float]:
        heard = self.heard(audio_samples)
        i = len(tokens)
        path = self.spoken if i > 2 and tokens[2] == self.comma else self.target
        if list(tokens) != path[:i]:
            return {EOS: 0.95, 1: 0.05}
        if i == 2 and heard > 2:  # after "not", the speaker went on
            return {self.target[2]: 0.55, EOS: 0.25, self.comma: 0.2}
        words = i - (path is self.spoken and i > 2)
        return {path[i]: 0.95, EOS: 0.05} if words < heard else {self.dot: 0.9, EOS: 0.1}


def test_punctuate_held_end_writes_a_mark_where_a_sentence_end_is_held() -> None:
    # --hold-sentence-end, LA-2, 1 s chunks: 3 s "ask not." (agreed) -> " not", its full stop held; with
    # --punctuate-held-end the 4 s search must write a punctuation mark after "not": the comma (.2), not " what"
    # (.55) nor <eos> (.25): "ask not, what." -> nothing new ("," against the "." before); 5 s "ask not, what your."
    # -> ", what"; the end commits " your.".
    runs = {}
    for punctuate in (True, False):
        session = Session(RunOnToy(), dataclasses.replace(options("la-2"), hold_sentence_end=True,
                                                          punctuate_held_end=punctuate))
        runs[punctuate] = [(e.text, e.source_ms) for e in push_in_pieces(session, tone(5000), 1000)]
    assert runs[True] == [("ask", 2000), (" not", 3000), (", what", 5000), (" your.", 5000)]
    # without it the 4 s search runs on: "ask not what." - no mark where the sentence end was held
    assert runs[False] == [("ask", 2000), (" not", 3000), (" what", 5000), (" your.", 5000)]


def test_bad_audio_is_rejected() -> None:
    session = Session(ToySpeechModel(), options())
    with pytest.raises(AudioError):
        session.push(np.array([0.0, np.nan], dtype=np.float32))
    with pytest.raises(AudioError):
        session.push(np.zeros((10, 2), dtype=np.float32))
    session.finish()
    with pytest.raises(AudioError):
        session.push(tone(10))


def test_silence_gives_empty_output_without_decoding() -> None:
    model = ToySpeechModel()
    session = Session(model, options())
    assert push_in_pieces(session, np.zeros(3000, dtype=np.float32), 500) == []
    assert session.text == "" and model.encodes == []
    assert Session(model, options()).finish() == []  # no audio at all


def test_options_are_validated() -> None:
    with pytest.raises(OptionError):
        StreamOptions(chunk_ms=0)
    with pytest.raises(OptionError):
        StreamOptions(initial_wait_ms=-1)
    with pytest.raises(OptionError):
        StreamOptions(prompt="  ")  # (a prompt holds some text; none is None)
    with pytest.raises(OptionError, match="takes no prompt"):
        Session(ToySpeechModel(), StreamOptions(prompt="the cat"))  # (a model without previous text)
    with pytest.raises(OptionError):
        SearchOptions("viterbi")
    with pytest.raises(OptionError):
        SearchOptions("beam", beam=0)


def test_catch_up_decodes_once_for_several_pending_chunks() -> None:
    model = ToySpeechModel()
    session = Session(model, options("la-1", chunk_ms=500), catch_up=True)
    session.push(tone(2300))
    assert model.encodes == [2000]
    session.push(tone(200))
    assert model.encodes == [2000, 2500]


# ------------------------------------------------------------------------------------------ hallucination guards
class SilenceAwareToy(ToySpeechModel):
    """The toy that also judges its window: no speech before it has heard its first word."""

    def no_speech_prob(self, enc: Encoded, costs: Costs) -> float:
        costs.decoder_calls += 1
        return 0.9 if enc.audio_samples < self.ms_per_word else 0.1


def test_the_low_confidence_guard_skips_a_chunk_of_guesses() -> None:
    # At 500 ms nothing is heard: the hypothesis " uh uh ..." has mean log-prob -1.6 < -1.5: nothing committed.
    # Without the guard hold-0 commits the babble, and every later hypothesis has to continue it.
    guarded = Session(UnsureToy(), options("hold-0", chunk_ms=500))
    assert guarded.push(tone(500)) == [] and guarded.costs.extra["unsure_skips"] == 1
    unguarded = Session(UnsureToy(), options("hold-0", chunk_ms=500, logprob_threshold=None,
                                             early_logprob_threshold=None))
    assert unguarded.push(tone(500))[0].text.startswith("uh uh")
    guarded.push(tone(4300))
    guarded.finish()
    assert guarded.text.startswith("the")  # once words are heard, the output starts with them


class HesitantToy(UnsureToy):
    """Before it hears anything it babbles " uh" at p .3 (every other token .14): log-prob -1.2 a token."""

    babble_p, other_p = 0.3, 0.14


def test_the_early_low_confidence_guard_is_stricter_only_within_a_segment() -> None:
    # At 500 ms nothing is heard: " uh uh ..." has mean log-prob -1.2 - above the guard's -1.5 (committed), below
    # the early threshold -0.7 while the 0.5 s decoded is within the 5 s segment (nothing committed); with a
    # 0.4 s segment the 0.5 s decoded is past it, and the guard is -1.5 again.
    base = options("hold-0", chunk_ms=500, early_logprob_threshold=None)
    plain = Session(HesitantToy(), base)
    assert plain.push(tone(500))[0].text.startswith("uh uh")
    early = Session(HesitantToy(), dataclasses.replace(base, early_logprob_threshold=-0.7))
    assert early.push(tone(500)) == [] and early.costs.extra["unsure_skips"] == 1
    past = Session(HesitantToy(), dataclasses.replace(base, early_logprob_threshold=-0.7, segment_s=0.4))
    assert past.push(tone(500))[0].text.startswith("uh uh")
    only_early = Session(HesitantToy(), dataclasses.replace(base, logprob_threshold=None, early_logprob_threshold=-0.7))
    assert only_early.push(tone(500)) == []  # (the early guard works without the other)
    early.push(tone(4300))
    early.finish()
    assert early.text.startswith("the")
    for wrong in (float("nan"), "sometimes"):
        with pytest.raises(OptionError):
            StreamOptions(early_logprob_threshold=wrong)  # type: ignore[arg-type]


def test_the_unsure_word_guard_holds_a_guess_back_until_two_decodes_agree_on_it() -> None:
    # hold-0 commits each chunk's whole best hypothesis. The toy hears word i at (i+1)*700 ms and guesses " uh" (p .6,
    # log-prob -0.51) for the word it has not heard; a heard word scores log .9 = -0.11. With the guard at -0.4:
    #  1 s chunks: 1 s "the uh" -> "the" (uh held: no decode before); 2 s "the cat uh" -> " cat" (the 1 s decode
    #  had uh after "the", not after "the cat"); 3 s -> " sat on"; 4 s -> " the"; 5 s "... the mat" -> " mat".
    #  Without it, 1 s commits "the uh" and every later hypothesis must continue the guess.
    #  500 ms chunks: 0.5 s "uh" -> nothing; 1 s "the uh" -> "the"; 1.5 s "the cat uh" -> " cat"; 2 s (still two
    #  words heard) "the cat uh" again: the 1.5 s decode agreed up to the guess -> " uh" committed (the guard holds a
    #  word back until two decodes agree on it, as LA-2 would, not for ever).
    def run(chunk_ms: int, threshold: float | None) -> list[tuple[str, float]]:
        session = Session(ToySpeechModel(), options("hold-0", chunk_ms=chunk_ms, word_logprob_threshold=threshold,
                                                    early_logprob_threshold=None))
        return [(e.text, e.source_ms) for e in push_in_pieces(session, tone(5000), 500)]

    assert run(1000, None) == [("the uh", 1000)]
    assert run(1000, -0.4) == [("the", 1000), (" cat", 2000), (" sat on", 3000), (" the", 4000), (" mat", 5000)]
    assert run(500, -0.4) == [("the", 1000), (" cat", 1500), (" uh", 2000)]
    session = Session(ToySpeechModel(), options("hold-0", word_logprob_threshold=-0.4, early_logprob_threshold=None))
    session.push(tone(1000))
    assert session.costs.extra["unsure_word_holds"] == 1
    with pytest.raises(OptionError):
        StreamOptions(word_logprob_threshold=float("nan"))


def test_a_hypothesis_keeps_each_searched_token_score_aligned_to_its_last_tokens() -> None:
    # a beam of 3 tokens, the first forced, finished: cumulative scores after "2", "3" and <eos>
    beam = Beam((1, 2, 3), (-0.5, -1.5, -1.7), finished=True)
    hyp = beam.hypothesis()
    assert hyp.token_scores == pytest.approx((-0.5, -1.0))
    assert hyp.token_score(0) is None and hyp.token_score(1) == pytest.approx(-0.5)
    assert hyp.token_score(2) == pytest.approx(-1.0) and hyp.token_score(3) is None
    longer = Hypothesis((9, 1, 2, 3), hyp.score, hyp.finished, token_scores=hyp.token_scores)  # committed before
    assert longer.token_score(3) == pytest.approx(-1.0) and longer.token_score(1) is None
    assert longer == Hypothesis((9, 1, 2, 3), hyp.score, True)  # (not part of equality)


class TranslatingHesitantToy(HesitantToy):
    """The same toy, saying that it translates (as Whisper with task ``translate``)."""

    task = "translate"


def test_the_early_guard_is_on_by_default_when_transcribing_and_off_when_translating() -> None:
    # "auto" (the default) is -0.7 for a model that transcribes (or says nothing of its task), None for one that
    # translates; a number or None given is used as it is, whatever the task.
    base = options("hold-0", chunk_ms=500)
    assert base.early_logprob_threshold == "auto"
    assert Session(HesitantToy(), base).guards.early_logprob_threshold == -0.7
    assert Session(HesitantToy(), base).push(tone(500)) == []
    translating = Session(TranslatingHesitantToy(), base)
    assert translating.guards.early_logprob_threshold is None
    assert translating.push(tone(500))[0].text.startswith("uh uh")
    chosen = dataclasses.replace(base, early_logprob_threshold=-0.9)
    assert Session(TranslatingHesitantToy(), chosen).guards.early_logprob_threshold == -0.9
    assert Session(TranslatingHesitantToy(), chosen).push(tone(500)) == []


def test_the_context_scope_is_the_sentence_when_transcribing_and_all_when_translating() -> None:
    base = options("hold-0")
    assert base.context_scope == "auto"
    assert Session(HesitantToy(), base).prompt.scope == "sentence"
    assert Session(TranslatingHesitantToy(), base).prompt.scope == "all"
    for scope in ("sentence", "all"):
        chosen = dataclasses.replace(base, context_scope=scope)
        assert Session(HesitantToy(), chosen).prompt.scope == scope
        assert Session(TranslatingHesitantToy(), chosen).prompt.scope == scope
    for field, wrong in (("context_scope", "paragraph"), ("context_tokens", -1), ("context_tokens", None)):
        with pytest.raises(OptionError):
            StreamOptions(**{field: wrong})  # type: ignore[arg-type]


def test_the_no_speech_guard_skips_chunks_before_speech_and_never_the_final_one() -> None:
    model = SilenceAwareToy(guess_p=0.9)
    session = Session(model, options("hold-0", chunk_ms=500))
    assert session.push(tone(500)) == []  # judged silent: not searched (one judging pass, no search)
    assert session.costs.extra == {"no_speech_skips": 1} and session.costs.decoder_calls == 1
    short = Session(SilenceAwareToy(), options("hold-0", chunk_ms=500))
    short.push(tone(400))
    assert [(e.text, e.final) for e in short.finish()] == [("uh", True)]  # decoded whatever the judge says
    assert short.costs.extra.get("no_speech_skips", 0) == 0
    off = Session(SilenceAwareToy(guess_p=0.9), dataclasses.replace(options("hold-0", chunk_ms=500),
                                                                    no_speech_threshold=None))
    assert [e.text for e in off.push(tone(500))] == ["uh"]
