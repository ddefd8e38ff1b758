"""Apertium as a black-box MT backend: equals the ``apertium`` command, never retracts, equals offline MT when the
source arrives at once, latency on the audio timeline; clear errors when Apertium or a pair is missing."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from simulst.config import PolicyOptions, StreamOptions
from simulst.errors import ModelLoadError
from simulst.mt.apertium import ApertiumMT, _deformat, _reformat, installed_pairs, pair_name
from simulst.mt.loading import load_mt
from simulst.mt.options import MTOptions
from simulst.streaming.cascade import CascadeSession
from simulst.streaming.mt_stage import MTStage
from tests.toy import ToySpeechModel, push_in_pieces, tone

needs_apertium = pytest.mark.skipif(
    shutil.which("apertium") is None or "eng-spa" not in installed_pairs(),
    reason="apertium with the eng-spa pair is not installed",
)
JFK = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."


@pytest.fixture(scope="module")
def apertium() -> ApertiumMT:
    return ApertiumMT("eng-spa")


def apertium_command(text: str) -> str:
    done = subprocess.run(["apertium", "-u", "eng-spa"], input=text, capture_output=True, text=True, check=True)
    return " ".join(done.stdout.split())


def test_stream_format_round_trip() -> None:
    text = "a [b] $5 / c \\ d @e <f> {g} ^h ~ i"
    deformatted = _deformat(text)
    assert deformatted.endswith(".[]") and "\\[b\\]" in deformatted and "[~]" in deformatted
    assert _reformat(deformatted) == text
    assert pair_name("en", "es") == "eng-spa" and pair_name("eng", "cat") == "eng-cat"


@needs_apertium
def test_persistent_pipeline_equals_the_apertium_command(apertium: ApertiumMT) -> None:
    words = (JFK + " It's 5 o'clock; the U.S. [sic] costs $5 / 3 @home <tag> {x} ~ + ^ done.").split()
    for n in (1, 3, 4, 9, 17, len(words) - 8, len(words)):
        prefix = " ".join(words[:n])
        assert apertium.translate_raw(prefix) == apertium_command(prefix), prefix
    per_call = ApertiumMT("eng-spa", persistent=False)
    assert per_call.translate_raw("ask not what") == apertium.translate_raw("ask not what")


@needs_apertium
@pytest.mark.parametrize("policy", ["la-2", "hold-1", "wait-2", "offline"])
def test_whole_source_at_once_equals_offline(apertium: ApertiumMT, policy: str) -> None:
    offline = apertium.translate_text(JFK)
    assert offline == apertium_command(JFK)
    stage = MTStage(apertium, MTOptions(policy=PolicyOptions.parse(policy)))
    out = stage.finish(JFK, 11000.0, 11500.0)
    assert len(out) == 1 and out[0].final and stage.text.strip() == offline


@needs_apertium
@pytest.mark.parametrize("policy", ["la-1", "la-2", "hold-2", "wait-3"])
def test_word_by_word_never_retracts(apertium: ApertiumMT, policy: str) -> None:
    stage = MTStage(apertium, MTOptions(policy=PolicyOptions.parse(policy)))
    shown = ""
    for i, word in enumerate(JFK.split()):
        for e in stage.push((" " if i else "") + word, 500.0 * i, 500.0 * i + 50.0):
            shown += e.text
            assert e.source_ms == 500.0 * i and e.elapsed_ms >= 500.0 * i + 50.0
        assert stage.text == shown  # (a push may emit twice: a completed sentence, then what follows it)
    shown += "".join(e.text for e in stage.finish("", 11000.0, 11050.0))
    assert shown == stage.text
    # one translation per word; the last word completes the sentence, which is then translated whole, so the end
    # of the source needs no further translation
    assert stage.costs.extra["apertium_calls"] == len(JFK.split())
    # The simultaneous output stays close to the offline translation (same words, mostly in order).
    offline = set(apertium.translate_text(JFK).lower().replace(",", "").split())
    online = stage.text.lower().replace(",", "").split()
    assert sum(w in offline for w in online) >= 0.7 * len(online)


@needs_apertium
def test_cascade_latency_on_the_audio_timeline(apertium: ApertiumMT) -> None:
    cascade = CascadeSession(ToySpeechModel(), apertium, StreamOptions(chunk_ms=1000), MTOptions())
    audio_ms = 5000
    out = push_in_pieces(cascade, tone(audio_ms), 500)
    assert cascade.source_text == "the cat sat on the mat"
    assert cascade.text.strip() == apertium.translate_text("the cat sat on the mat")
    assert cascade.text.split()[:2] == ["El", "gato"]
    asr = {e.source_ms: e.elapsed_ms for e in cascade.source_emissions}
    for e in out:
        assert e.source_ms in asr and e.elapsed_ms >= asr[e.source_ms]
    assert [e.source_ms for e in out] == sorted(e.source_ms for e in out)
    assert out[-1].final and out[-1].source_ms == audio_ms  # the final translation: when the audio ended


def test_missing_apertium_or_pair() -> None:
    with pytest.raises(ModelLoadError, match="apertium"):
        ApertiumMT("eng-spa", executable="/nonexistent/apertium")
    if shutil.which("apertium") is not None:
        with pytest.raises(ModelLoadError, match="not installed"):
            ApertiumMT("eng-xyz")
        with pytest.raises(ModelLoadError, match="eng-xyz"):
            load_mt("apertium", "en", "xyz")
