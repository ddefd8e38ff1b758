"""The onlinized MT stage on a scripted word-level backend: hand-worked schedules, invariants, latency stamps."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulst.config import PolicyOptions, SearchOptions, StreamOptions
from simulst.errors import OptionError, SimulstError
from simulst.mt.apertium import align_prefix
from simulst.mt.backend import MTRequest
from simulst.mt.options import MTOptions
from simulst.streaming.cascade import CascadeSession
from simulst.streaming.mt_stage import MTStage
from simulst.types import Costs, Emission, Hypothesis
from tests.toy import ScriptedMT, ToySpeechModel, push_in_pieces, tone


def feed(stage: MTStage, increments: Sequence[str]) -> list[Emission]:
    out: list[Emission] = []
    for i, text in enumerate(increments):
        out += stage.push(text, 1000.0 * (i + 1), 1000.0 * (i + 1) + 100.0)
    return out + stage.finish("", 1000.0 * len(increments), 1000.0 * len(increments) + 100.0)


WORDS = ["the", " cat", " sat", " on", " the", " mat"]


def mt(policy: str) -> MTOptions:
    return MTOptions(policy=PolicyOptions.parse(policy))


def test_la2_schedule_hand_worked() -> None:
    # 1: el                        (first chunk: nothing)
    # 2: el gato                   LCP(el, el gato) = el                   -> "el"
    # 3: la gata se sentó          aligned to "el": el + gata se sentó; LCP with "el gato" = el -> nothing
    # 4: ... en                    el gata se sentó en; LCP = el gata se sentó -> " gata se sentó"
    # 5: ... en la                 LCP = ... en                            -> " en"
    # 6: ... la estera .           LCP = ... en la                         -> " la"
    # end: the whole final translation, aligned                           -> " estera ."
    stage = MTStage(ScriptedMT(), mt("la-2"))
    emissions = feed(stage, WORDS)
    assert [(e.text, e.source_ms, e.final) for e in emissions] == [
        ("el", 2000.0, False),
        (" gata se sentó", 4000.0, False),
        (" en", 5000.0, False),
        (" la", 6000.0, False),
        (" estera .", 6000.0, True),
    ]
    assert stage.text == "el gata se sentó en la estera ."


def test_hold_and_wait_k() -> None:
    hold = MTStage(ScriptedMT(), mt("hold-1"))
    assert [e.text for e in feed(hold, WORDS)] == ["el", " gata se", " sentó", " en", " la estera", " ."]
    # wait-2 on source words: after reading s source words, at most s - 1 target words.
    wait = MTStage(ScriptedMT(), mt("wait-2"))
    out = feed(wait, WORDS)
    assert [(e.text, e.source_ms) for e in out] == [
        ("el", 2000.0), (" gata", 3000.0), (" se", 4000.0), (" sentó", 5000.0), (" en", 6000.0),
        (" la estera .", 6000.0),
    ]


def test_whole_source_at_once_equals_offline() -> None:
    backend = ScriptedMT()
    source = "the cat sat on the mat"
    offline = backend.translate_text(source)
    assert offline == "la gata se sentó en la estera ."
    for policy in ("la-2", "hold-2", "wait-3", "offline", "sp-1"):
        stage = MTStage(backend, mt(policy))
        assert stage.finish(source, 5000.0, 5100.0)[0].text == offline
        # One non-final increment with the whole source, then the end: the same.
        stage = MTStage(backend, mt(policy))
        out = stage.push(source, 5000.0, 5100.0) + stage.finish("", 5000.0, 5100.0)
        if policy in ("la-2", "offline"):
            assert len(out) == 1
        assert stage.text == offline


def test_forced_prefix_and_no_retranslation_of_the_same_source() -> None:
    backend = ScriptedMT()
    stage = MTStage(backend, mt("la-2"))
    feed(stage, ["the", " cat", "", " sat"])
    sources = [c[0] for c in backend.calls]
    assert sources == ["the", "the cat", "the cat sat", "the cat sat"]  # the empty increment did not translate
    assert backend.calls[-1][2] is True  # the last call is the final one
    # Every call got the committed target as its forced prefix, and it only grew.
    prefixes = [c[1] for c in backend.calls]
    assert all(b[: len(a)] == a for a, b in itertools.pairwise(prefixes))


def test_elapsed_adds_mt_compute() -> None:
    stage = MTStage(ScriptedMT(), mt("hold-0"))
    source_ms, elapsed_ms = 1500.0, 1800.0  # the ASR emission's audio time and its compute-aware time
    out = stage.push("the cat", source_ms, elapsed_ms)
    assert out[0].source_ms == source_ms
    assert out[0].elapsed_ms == pytest.approx(elapsed_ms + stage.costs.compute_s * 1000.0)
    assert out[0].elapsed_ms >= elapsed_ms


def test_errors() -> None:
    with pytest.raises(OptionError):
        MTOptions(policy=PolicyOptions.parse("ctc"))
    with pytest.raises(OptionError):
        MTOptions(max_len_b=0)
    stage = MTStage(ScriptedMT(), mt("la-2"))
    stage.finish("the", 1000.0, 1000.0)
    with pytest.raises(SimulstError):
        stage.push(" cat", 2000.0, 2000.0)
    assert stage.finish("", 2000.0, 2000.0) == []


@settings(max_examples=60, deadline=None)
@given(
    words=st.lists(st.sampled_from(["a", "b", "c", "d", "e,", "f."]), min_size=1, max_size=12),
    cuts=st.lists(st.integers(1, 4), min_size=1, max_size=12),
    policy=st.sampled_from(["la-1", "la-2", "la-3", "hold-0", "hold-2", "wait-1", "wait-3", "sp-2", "ba-2", "offline"]),
    revise=st.booleans(),
)
def test_never_retracts(words: list[str], cuts: list[int], policy: str, revise: bool) -> None:
    # A backend that rewrites its translation as the source grows (reverses the words of odd-length prefixes).
    class Flaky(ScriptedMT):
        def translate(self, request: MTRequest, costs: Costs) -> list[Hypothesis]:
            source = request.source
            table_words = source.split()
            out = list(reversed(table_words)) if revise and len(table_words) % 2 else table_words
            self.table = {source: " ".join(w.upper() for w in out)}
            return super().translate(request, costs)

    increments: list[str] = []
    pos = 0
    for c in cuts:
        if pos >= len(words):
            break
        increments.append("".join((" " if pos + i else "") + w for i, w in enumerate(words[pos : pos + c])))
        pos += c
    if pos < len(words):
        increments.append(" " + " ".join(words[pos:]))
    stage = MTStage(Flaky(), mt(policy))
    shown = ""
    for i, inc in enumerate(increments[:-1]):
        for e in stage.push(inc, 1000.0 * i, 1000.0 * i):
            shown += e.text
        assert stage.text == shown  # the output only grows
    for e in stage.finish(increments[-1], 1e4, 1e4):
        shown += e.text
    assert shown == stage.text
    assert len(stage.text.split()) >= 1
    tokens = [t for e in stage.emissions for t in e.tokens]
    assert stage.tokenizer.decode(tokens).strip() == stage.text.strip()


def test_align_prefix() -> None:
    assert align_prefix([], ["a", "b"]) == 0
    assert align_prefix("Y así que mi".split(), "Y así que mis americanos amigos,".split()) == 4
    assert align_prefix(["el", "gato"], ["la", "gata", "se", "sentó"]) == 2
    assert align_prefix(["a", "b", "c"], ["a", "b"]) == 2  # the new translation is shorter: nothing after it
    assert align_prefix(["hola,"], ["Hola", "mundo"]) == 1  # case and punctuation do not matter


def test_cascade_latency_on_the_audio_timeline() -> None:
    # Toy ASR hears word i at (i+1)*700 ms; MT is the scripted table. Every target emission carries the audio
    # time of the ASR emission that triggered it, and elapsed >= that ASR emission's elapsed.
    cascade = CascadeSession(
        ToySpeechModel(), ScriptedMT(), StreamOptions(chunk_ms=1000, policy=PolicyOptions.parse("la-2")), mt("hold-0")
    )
    out = push_in_pieces(cascade, tone(5000), 1000)
    asr: dict[float, Emission] = {}  # (the first ASR emission at each audio time: a chunk's, not a final after it)
    for e in cascade.source_emissions:
        asr.setdefault(e.source_ms, e)
    assert cascade.source_text == "the cat sat on the mat"
    assert cascade.text == "el gato se sentó en la estera ."  # hold-0 showed "el gato" before "sat" was heard
    assert [e.source_ms for e in out] == [2000.0, 3000.0, 4000.0, 5000.0, 5000.0]
    for e in out:
        assert e.source_ms in asr
        assert e.elapsed_ms >= asr[e.source_ms].elapsed_ms
    assert out[-1].final
    assert cascade.costs.compute_s == pytest.approx(cascade.asr.costs.compute_s + cascade.mt.costs.compute_s)
    assert cascade.finish() == []


def test_cascade_offline_asr_equals_offline_cascade() -> None:
    options = StreamOptions(chunk_ms=1000, policy=PolicyOptions("offline", 0), search=SearchOptions("greedy"))
    cascade = CascadeSession(ToySpeechModel(), ScriptedMT(), options, mt("la-2"))
    audio_ms = 5000
    assert cascade.push(tone(audio_ms)) == []
    out = cascade.finish()
    assert len(out) == 1 and out[0].final and out[0].source_ms == audio_ms
    assert cascade.text == ScriptedMT().translate_text("the cat sat on the mat")


def test_align_prefix_anchors_on_the_last_committed_word() -> None:
    committed = "debido a los canales lentos, modas".split()
    fresh = "debido a los canales lentos, las modas en el oeste".split()
    assert align_prefix(committed, fresh) == 7  # continue with "en el oeste", not "modas en el oeste"
