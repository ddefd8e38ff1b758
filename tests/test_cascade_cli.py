"""``simulst translate AUDIO --to LANG``: the cascade behind the CLI contract, with speech output."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from simulst.cli.main import build_parser, main
from simulst.tts.espeak import EspeakSynthesizer
from tests.shared_assets import JFK, WHISPER_TINY_EN, needs_shared

needs_tools = pytest.mark.skipif(shutil.which("apertium") is None or shutil.which("espeak-ng") is None,
                                 reason="apertium / espeak-ng not installed")


def test_parser_routes_translate_to_the_cascade() -> None:
    parser = build_parser()
    args = parser.parse_args(["translate", "a.wav", "--to", "es", "--mt-policy", "wait-3", "--speak", "o.wav"])
    assert args.to == "es" and args.mt == "apertium" and args.mt_policy == "wait-3" and args.speak == "o.wav"
    args = parser.parse_args(["translate", "a.wav"])
    assert args.to is None  # Whisper's own X -> English task
    with pytest.raises(SystemExit):
        parser.parse_args(["transcribe", "a.wav", "--to", "es"])


def test_bad_options_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    audio = tmp_path / "a.wav"
    sf.write(str(audio), np.zeros(1600, dtype=np.float32), 16000)
    assert main(["translate", str(audio), "--to", "es", "--mt-policy", "ctc"]) == 2
    assert "no CTC head" in capsys.readouterr().err
    assert main(["translate", str(audio), "--to", "es", "--mt-policy", "soon"]) == 2
    err = capsys.readouterr().err  # (only the policies the MT stage takes are offered)
    assert "unknown MT policy 'soon'; choose one of ba-N | hold-N | la-N | offline | sp-N | wait-N" in err
    assert "ctc" not in err and "alignatt" not in err and err.count("\n") == 1
    assert main(["translate", str(audio), "--to", "es", "--mt", str(tmp_path / "nope")]) == 2
    assert "MT model" in capsys.readouterr().err
    assert main(["translate", str(audio), "--to", "es", "--language", "auto"]) == 2
    assert "needs the source language" in capsys.readouterr().err


def test_the_speech_model_transcribes_the_language_the_mt_stage_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    # without --language a multilingual model would detect a language of its own and hand the MT stage text in it
    import simulst.cli.cascade as cascade
    import simulst.mt.loading
    import simulst.streaming.cascade

    seen: dict[str, object] = {}
    monkeypatch.setattr(simulst.mt.loading, "load_mt", lambda name, source, *_: seen.setdefault("mt", source))
    monkeypatch.setattr(cascade, "model_from_args", lambda args, task: seen.setdefault("asr", args.language))
    monkeypatch.setattr(simulst.streaming.cascade, "CascadeEngine", lambda asr, mt, options: None)
    parser = build_parser()
    for flags, language in (([], "en"), (["--language", "DE"], "de")):
        seen.clear()
        cascade.cascade_from_args(parser.parse_args(["translate", "a.wav", "--to", "es", *flags]))
        assert seen == {"mt": language, "asr": language}


def test_search_flags_are_refused_for_an_mt_backend_without_a_search(monkeypatch: pytest.MonkeyPatch) -> None:
    # Apertium translates each source prefix in one call: --mt-search / --mt-beam given would be ignored
    import simulst.cli.cascade as cascade
    import simulst.mt.loading
    import simulst.streaming.cascade
    from simulst.errors import OptionError
    from simulst.mt.apertium import ApertiumMT

    class Backend:
        name, searches = "apertium:eng-spa", ApertiumMT.searches

    assert ApertiumMT.searches is False
    monkeypatch.setattr(simulst.mt.loading, "load_mt", lambda name, source, target, device: Backend())
    monkeypatch.setattr(cascade, "model_from_args", lambda args, task: None)
    monkeypatch.setattr(simulst.streaming.cascade, "CascadeEngine", lambda asr, mt, options: (mt, options))
    parser = build_parser()
    translate = ["translate", "a.wav", "--to", "es"]
    for flags, named in ((["--mt-beam", "4"], "--mt-beam"), (["--mt-beam", "5"], "--mt-beam"),  # (5: the default)
                         (["--mt-search", "beam", "--mt-beam", "3"], "--mt-search and --mt-beam")):
        with pytest.raises(OptionError, match=f"^{named}: the apertium:eng-spa MT backend has no search"):
            cascade.cascade_from_args(parser.parse_args([*translate, *flags]))
    assert cascade.cascade_from_args(parser.parse_args(translate))[1].search.beam == 5  # (not given: no error)
    Backend.searches = True  # a neural backend searches
    assert cascade.cascade_from_args(parser.parse_args([*translate, "--mt-beam", "4"]))[1].search.beam == 4


@needs_tools
def test_mt_beam_with_apertium_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    audio = tmp_path / "a.wav"
    sf.write(str(audio), np.zeros(1600, dtype=np.float32), 16000)
    assert main(["translate", str(audio), "--to", "es", "--mt-beam", "4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("simulst: error: --mt-beam: the apertium:eng-spa MT backend has no search") and (
        err.count("\n") == 1)


@pytest.mark.real
@needs_shared
@needs_tools
def test_jfk_to_spanish_json_and_speech(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wav = tmp_path / "jfk.es.wav"
    code = main(["translate", str(JFK), "--to", "es", "--model", str(WHISPER_TINY_EN), "--json", "--speak", str(wav)])
    out = capsys.readouterr().out
    assert code == 0
    records = [json.loads(line) for line in out.splitlines()]
    emissions, final = records[:-1], records[-1]
    assert final["event"] == "final" and emissions and all(r["event"] == "emission" for r in emissions)
    assert set(emissions[0]) == {"event", "text", "source_ms", "elapsed_ms", "start_ms", "end_ms", "words"}
    assert "".join(e["text"] for e in emissions) == final["text"]
    assert "país" in final["text"] and "country" in final["source_text"]
    assert final["source_ms"] == pytest.approx(11000.0)
    assert all(e["elapsed_ms"] >= e["source_ms"] for e in emissions)
    assert [e["source_ms"] for e in emissions] == sorted(e["source_ms"] for e in emissions)
    assert emissions[0]["source_ms"] < 11000.0  # simultaneous: translation starts before the speech ends
    speech = final["speech"]
    audio, rate = sf.read(str(wav), dtype="float32")
    assert rate == EspeakSynthesizer.sample_rate
    assert audio.shape[0] / rate == pytest.approx(speech["duration_s"], abs=0.01)
    assert float(np.sqrt(np.mean(audio**2))) > 0.01
    assert speech["start_offset_ms"] == pytest.approx(emissions[0]["source_ms"], abs=1.0)
    assert speech["end_offset_ms"] > 0
