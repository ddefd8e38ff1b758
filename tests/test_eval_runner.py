"""``simulst eval``: the runner on the scripted toy model (hand-worked logs, resume, modes, CLI) and, marked
``real``, on Whisper tiny.en with the log checked by ``simuleval --score-only``."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from simulst.cli import evaluation as commands
from simulst.config import ModelOptions, PolicyOptions, SearchOptions, StreamOptions
from simulst.errors import OptionError, SimulstError
from simulst.evaluation.cluster import ClusterRun, run_on_cluster
from simulst.evaluation.instances import read_log
from simulst.evaluation.manifest import TestItem, TestSetError, read_manifest, read_simuleval_lists
from simulst.evaluation.runner import EvalOptions, emission_units, run_eval
from simulst.evaluation.scoring import ScoreOptions, score_log
from simulst.evaluation.sweep import build_grid, run_sweep
from simulst.models.base import Encoded
from simulst.streaming.engine import SpeechEngine
from simulst.types import Costs, Emission
from tests.simuleval_cli import LATENCY, simuleval_cli
from tests.toy import ToySpeechModel, tone, toy_engine

SHARED = Path(__file__).resolve().parents[2] / "shared"
WHISPER = SHARED / "models" / "whisper-tiny.en"


def _e(text: str, source_ms: float, elapsed_ms: float, final: bool = False) -> Emission:
    return Emission(text, (), source_ms, elapsed_ms, final)


EMISSIONS = [
    _e("And so", 2000, 2500),
    _e(" my fellow", 5000, 6000),
    _e(" you", 9000, 10500),
    _e(", ask what.", 11000, 12900, True),
]


def test_emission_units_word() -> None:
    u = emission_units(EMISSIONS, "word")
    # Each emission is split on its own, as SimulEval splits an agent's writes: "," after "you" is a unit.
    assert u.units == ("And", "so", "my", "fellow", "you", ",", "ask", "what.")
    assert u.delays == (2000, 2000, 5000, 5000, 9000, 11000, 11000, 11000)
    assert u.elapsed == (2500, 2500, 6000, 6000, 10500, 12900, 12900, 12900)
    assert u.prediction == "And so my fellow you , ask what."


def test_emission_units_char_and_spm() -> None:
    u = emission_units([_e("你好 世", 1000, 1100), _e("界", 2000, 2300, True)], "char")
    assert u.units == ("你", "好", "世", "界") and u.delays == (1000, 1000, 1000, 2000)
    assert u.prediction == "你好世界"

    class Pieces:
        def encode(self, text: str, out_type: object = str) -> list[str]:
            return ["▁" + text[:2], text[2:]] if len(text) > 2 else ["▁" + text]

    s = emission_units([_e("hello a", 1000, 1000), _e(" world", 2000, 2000)], "spm", Pieces())
    assert s.units == ("▁he", "llo", "▁a", "▁wo", "rld") and s.delays == (1000, 1000, 1000, 2000, 2000)
    assert s.prediction == "hello a world"
    with pytest.raises(OptionError):
        emission_units(EMISSIONS, "spm")
    with pytest.raises(OptionError):
        emission_units(EMISSIONS, "phoneme")
    assert emission_units([], "word").prediction == ""


def _la2(chunk_ms: float = 1000.0) -> StreamOptions:
    return StreamOptions(chunk_ms=chunk_ms, policy=PolicyOptions.parse("la-2"), search=SearchOptions("greedy"))


DURATIONS = {"u0": 5000, "u1": 3500, "silent": 2000}


def _loader(calls: list[str] | None = None):  # type: ignore[no-untyped-def]
    def load(path: Path, rate: int) -> np.ndarray:
        assert rate == ToySpeechModel.sample_rate
        if calls is not None:
            calls.append(path.stem)
        ms = DURATIONS[path.stem]
        return np.zeros(ms, dtype=np.float32) if path.stem == "silent" else tone(ms)

    return load


ITEMS = [
    TestItem("u0", Path("u0.wav"), "the cat sat on the mat"),
    TestItem("u1", Path("u1.wav"), "the cat sat on"),
]


def test_run_eval_writes_a_simuleval_folder(tmp_path: Path) -> None:
    report = run_eval(
        SpeechEngine(ToySpeechModel()), _la2(), ITEMS, tmp_path, EvalOptions(progress=False), load=_loader())
    for name in ("instances.log", "scores.tsv", "scores.json", "metrics.tsv", "config.json", "config.yaml"):
        assert (tmp_path / name).is_file(), name
    assert (tmp_path / "config.yaml").read_text() == "source_type: speech\ntarget_type: text\n"
    lines = (tmp_path / "instances.log").read_text().splitlines()
    first = json.loads(lines[0])
    assert list(first)[:8] == ["index", "prediction", "delays", "elapsed", "prediction_length", "reference",
                               "source", "source_length"]
    # the toy LA-2 schedule of test_session.py: the@2 s, cat@3 s, sat on@4 s, the@5 s, mat@5 s (final)
    assert first["prediction"] == "the cat sat on the mat"
    assert first["delays"] == [2000.0, 3000.0, 4000.0, 4000.0, 5000.0, 5000.0]
    assert first["source_length"] == DURATIONS["u0"] and first["prediction_length"] == len(ITEMS[0].reference.split())
    assert all(e >= d for e, d in zip(first["elapsed"], first["delays"], strict=True))
    info = first["simulst"]
    assert info["id"] == "u0" and info["n_words"] == 6 and info["decoder_calls"] > 0
    assert [e["text"] for e in info["emissions"]] == ["the", " cat", " sat on", " the", " mat"]
    assert report.scores["Instances"] == 2 and report.scores["EmptyOutputs"] == 0
    # u1 (3.5 s) ends with the toy model's guess: "the cat sat on the uh" vs "the cat sat on": 2 of 10 words
    assert report.scores["WER_norm"] == pytest.approx(20.0)
    assert report.scores["AL_CA"] is not None and report.scores["AL_CA"] >= report.scores["AL"]
    assert score_log(tmp_path).scores == report.scores  # re-scoring the folder gives the same numbers
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["run"]["stream"]["policy"] == "la-2"


def test_resume_skips_logged_instances_and_drops_a_truncated_line(tmp_path: Path) -> None:
    run_eval(SpeechEngine(ToySpeechModel()), _la2(), ITEMS, tmp_path, EvalOptions(progress=False), load=_loader())
    log = tmp_path / "instances.log"
    first, second = log.read_text().splitlines()
    log.write_text(first + "\n" + second[: len(second) // 2])  # killed while writing instance 1
    calls: list[str] = []
    run_eval(SpeechEngine(ToySpeechModel()), _la2(), ITEMS, tmp_path, EvalOptions(progress=False), load=_loader(calls))
    assert calls == ["u1"]
    assert [r.index for r in read_log(tmp_path)] == [0, 1]
    calls.clear()
    run_eval(SpeechEngine(ToySpeechModel()), _la2(), ITEMS, tmp_path, EvalOptions(progress=False), load=_loader(calls))
    assert calls == []  # all done


def test_resume_refuses_other_settings_and_overwrite_restarts(tmp_path: Path) -> None:
    run_eval(SpeechEngine(ToySpeechModel()), _la2(), ITEMS[:1], tmp_path, EvalOptions(progress=False), load=_loader())
    with pytest.raises(OptionError, match="stream"):
        run_eval(
            SpeechEngine(ToySpeechModel()), _la2(500), ITEMS[:1], tmp_path, EvalOptions(progress=False), load=_loader())
    calls: list[str] = []
    run_eval(SpeechEngine(ToySpeechModel()), _la2(500), ITEMS[:1], tmp_path, EvalOptions(progress=False, resume=False),
             load=_loader(calls))
    assert calls == ["u0"] and len(read_log(tmp_path)) == 1


def test_resume_accepts_options_added_since_with_their_defaults(tmp_path: Path) -> None:
    run_eval(SpeechEngine(ToySpeechModel()), _la2(), ITEMS, tmp_path, EvalOptions(progress=False), load=_loader())
    log = tmp_path / "instances.log"
    log.write_text(log.read_text().splitlines()[0] + "\n")
    config = json.loads((tmp_path / "config.json").read_text())
    del config["run"]["stream"]["search"]["max_tokens_per_s"]  # as written before that option existed
    (tmp_path / "config.json").write_text(json.dumps(config))
    calls: list[str] = []
    run_eval(SpeechEngine(ToySpeechModel()), _la2(), ITEMS, tmp_path, EvalOptions(progress=False), load=_loader(calls))
    assert calls == ["u1"]


def test_resume_after_the_audio_moved(tmp_path: Path) -> None:
    run_eval(SpeechEngine(ToySpeechModel()), _la2(), ITEMS, tmp_path, EvalOptions(progress=False), load=_loader())
    moved = [TestItem(it.id, Path("/elsewhere") / it.audio.name, it.reference) for it in ITEMS]
    calls: list[str] = []
    run_eval(SpeechEngine(ToySpeechModel()), _la2(), moved, tmp_path, EvalOptions(progress=False), load=_loader(calls))
    assert calls == []


def test_computation_unaware_mode_and_empty_outputs(tmp_path: Path) -> None:
    items = [*ITEMS, TestItem("silent", Path("silent.wav"), "nothing here")]
    report = run_eval(SpeechEngine(ToySpeechModel()), _la2(), items, tmp_path,
                      EvalOptions(progress=False, computation_aware=False), load=_loader())
    records = read_log(tmp_path)
    assert all(r.elapsed == [] for r in records)
    assert "AL_CA" not in report.scores
    assert records[2].is_empty and records[2].prediction == ""
    assert report.scores["EmptyOutputs"] == 1
    assert any("produced no output" in note for note in report.notes)
    # latency averages skip the empty instance, quality counts it
    per = [row["AL"] for row in report.per_instance]
    assert per[2] is None and report.scores["AL"] == pytest.approx((per[0] + per[1]) / 2)


def test_char_unit_run(tmp_path: Path) -> None:
    run_eval(
        SpeechEngine(ToySpeechModel()), _la2(), ITEMS[:1], tmp_path, EvalOptions(progress=False, latency_unit="char"),
             load=_loader())
    [rec] = read_log(tmp_path)
    assert rec.prediction == "thecatsatonthemat" and len(rec.delays) == len(rec.prediction)
    assert score_log(tmp_path, ScoreOptions(latency_unit="char")).scores["AL"] is not None


class SlowToy(ToySpeechModel):
    """The toy whose every encoding takes ``seconds`` of wall-clock time (a model slower than its chunks)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def encode(self, audio: np.ndarray, costs: Costs, previous: Encoded | None = None,
               reencode_s: float | None = None) -> Encoded:
        time.sleep(self.seconds)
        return super().encode(audio, costs, previous, reencode_s)


def test_realtime_run_keeping_up_writes_the_fast_runs_outputs_at_wall_clock_times(tmp_path: Path) -> None:
    fast = run_eval(SpeechEngine(ToySpeechModel()), _la2(500), ITEMS[1:], tmp_path / "fast",
                    EvalOptions(progress=False), load=_loader())
    started = time.perf_counter()
    live = run_eval(SpeechEngine(ToySpeechModel()), _la2(500), ITEMS[1:], tmp_path / "live",
                    EvalOptions(progress=False, realtime=True), load=_loader())
    assert time.perf_counter() - started >= DURATIONS["u1"] / 1000.0  # the audio arrived at a speaker's pace
    [a], [b] = read_log(tmp_path / "fast"), read_log(tmp_path / "live")
    # the toy keeps up: each 500 ms chunk is decoded as it arrives, as fed fast; only the elapsed clock differs
    assert (b.prediction, b.delays) == (a.prediction, a.delays)
    # elapsed is the wall clock: never before the audio a decode read had arrived, and here soon after it
    assert all(d <= e < d + 1000.0 for d, e in zip(b.delays, b.elapsed, strict=True))
    assert live.scores["AL"] == fast.scores["AL"] and live.scores["AL"] <= live.scores["AL_CA"]
    assert json.loads((tmp_path / "live" / "config.json").read_text())["run"]["realtime"] is True
    with pytest.raises(OptionError, match="realtime"):  # a real-time log is not resumed by a fast run
        run_eval(SpeechEngine(ToySpeechModel()), _la2(500), ITEMS[1:], tmp_path / "live",
                 EvalOptions(progress=False), load=_loader())


def test_realtime_run_of_a_slow_model_catches_up_and_counts_the_wait(tmp_path: Path) -> None:
    model = SlowToy(0.8)  # 800 ms per decode over 500 ms chunks
    run_eval(SpeechEngine(model), _la2(500), ITEMS[1:], tmp_path, EvalOptions(progress=False, realtime=True),
             load=_loader())
    [record] = read_log(tmp_path)
    # a decode reads all that arrived while the one before computed: fewer decodes than the 7 chunks (+ the end)
    assert len(model.encodes) < DURATIONS["u1"] // 500
    assert record.prediction.startswith("the cat sat on")
    # each output came at least one decode's compute after the audio its decode read had arrived
    assert all(e >= d + 800.0 for d, e in zip(record.delays, record.elapsed, strict=True))
    # ... and the last about two decodes after the source's end: the compute that overlapped the speech is not
    # added up, as SimulEval's elapsed adds it (here the source's 3.5 s plus 800 ms for each of 5 or more decodes)
    assert record.elapsed[-1] < record.source_length + 4 * 800.0


def test_realtime_options_that_do_not_go_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(OptionError, match="computation-aware"):
        EvalOptions(realtime=True, computation_aware=False)
    realtime = EvalOptions(progress=False, realtime=True)
    point = build_grid(_la2(), ["la-2"], [], [], {}, {})
    with pytest.raises(OptionError, match="--jobs 1"):
        run_sweep(toy_engine, point, ITEMS, tmp_path / "sweep", realtime, jobs=2)
    with pytest.raises(OptionError, match="locally"):
        run_on_cluster(ModelOptions(), [ClusterRun(_la2(), tmp_path / "c")], ITEMS, realtime)
    monkeypatch.setattr(SpeechEngine, "load", classmethod(lambda cls, options: toy_engine()))
    manifest = _write_wavs(tmp_path)
    for extra in (["--cluster", "ray"], ["--no-computation-aware"]):
        args = _parser().parse_args(["eval", str(manifest), "--output", str(tmp_path / "run"), "--realtime",
                                     "--no-progress-bar", *extra])
        with pytest.raises(OptionError):
            args.func(args)
    assert not (tmp_path / "run").exists()  # refused before anything ran


# ------------------------------------------------------------------------------------------------ test sets


def test_manifest_and_reference_files(tmp_path: Path) -> None:
    (tmp_path / "m.tsv").write_text("id\taudio\tduration_s\ttranscript\ttranslation\n"
                                    "a\twav/a.wav\t1.5\thello there\thola\n")
    [item] = read_manifest(tmp_path / "m.tsv")
    assert item.reference == "hola" and item.audio == tmp_path / "wav/a.wav" and item.duration_s == 1.5
    assert read_manifest(tmp_path / "m.tsv", "transcript")[0].reference == "hello there"
    (tmp_path / "r.tsv").write_text("id\ttranslation_es\na\tHola allí.\n")
    assert read_manifest(tmp_path / "m.tsv", references=tmp_path / "r.tsv")[0].reference == "Hola allí."
    (tmp_path / "r2.tsv").write_text("id\ttranslation_es\nb\tx\n")
    with pytest.raises(TestSetError, match="no reference for id"):
        read_manifest(tmp_path / "m.tsv", references=tmp_path / "r2.tsv")
    (tmp_path / "bad.tsv").write_text("id\taudio\na\n")
    with pytest.raises(TestSetError, match="fields"):
        read_manifest(tmp_path / "bad.tsv")
    with pytest.raises(TestSetError, match="no such file"):
        read_manifest(tmp_path / "missing.tsv")
    with pytest.raises(TestSetError, match="column"):
        read_manifest(tmp_path / "m.tsv", "nope")


def test_shared_manifests_read() -> None:
    if not (SHARED / "data" / "fleurs-en-dev.tsv").is_file():
        pytest.skip("../shared/data not available")
    items = read_manifest(SHARED / "data" / "fleurs-en-dev.tsv")
    assert len(items) == 5 and all(it.audio.is_file() and it.reference for it in items)
    es = read_manifest(SHARED / "data" / "jfk.tsv", references=SHARED / "data" / "references.es.tsv")
    assert es[0].reference and es[0].reference.startswith("Así que")


def test_manifest_rows_selected_by_source_language_and_duration(tmp_path: Path) -> None:
    (tmp_path / "m.tsv").write_text("id\taudio\tduration_s\ttranscript\tlang\n"
                                    "a\ta.wav\t3.0\thallo\tde\nb\tb.wav\t40.0\tlang\tde\n"
                                    "c\tc.wav\t2.0\tbonjour\tfr\nd\td.wav\t2.0\thola\tes\n")
    assert [i.id for i in read_manifest(tmp_path / "m.tsv", src_langs=["de", "fr"])] == ["a", "b", "c"]
    assert [i.id for i in read_manifest(tmp_path / "m.tsv", max_duration_s=30.0)] == ["a", "c", "d"]
    assert [i.id for i in read_manifest(tmp_path / "m.tsv", src_langs=["de"], max_duration_s=30.0)] == ["a"]
    # references for the selected rows only: the rest is not evaluated, so it needs none
    (tmp_path / "r.tsv").write_text("id\ttext\na\tHello.\nc\tGood day.\n")
    chosen = read_manifest(tmp_path / "m.tsv", references=tmp_path / "r.tsv", src_langs=["de", "fr"],
                           max_duration_s=30.0)
    assert [(i.id, i.reference) for i in chosen] == [("a", "Hello."), ("c", "Good day.")]
    with pytest.raises(TestSetError, match=r"no reference for id 'b'.*--src-lang"):
        read_manifest(tmp_path / "m.tsv", references=tmp_path / "r.tsv")
    with pytest.raises(TestSetError, match="no utterances in that selection"):
        read_manifest(tmp_path / "m.tsv", src_langs=["pt"])
    (tmp_path / "nolang.tsv").write_text("id\taudio\na\ta.wav\n")
    with pytest.raises(TestSetError, match="'lang' column"):
        read_manifest(tmp_path / "nolang.tsv", src_langs=["de"])
    with pytest.raises(TestSetError, match="'duration_s' column"):
        read_manifest(tmp_path / "nolang.tsv", max_duration_s=1.0)


def test_shared_fleurs_multi_german_and_french_have_english_references() -> None:
    data = SHARED / "data"
    if not (data / "fleurs-multi.tsv").is_file():
        pytest.skip("../shared/data not available")
    # the shared fleurs-multi set: ten utterances each of de, es, fr and pt; one (fleurs-de-009, 43 s) is over 30 s
    items = read_manifest(data / "fleurs-multi.tsv", references=data / "references.en.tsv", src_langs=["de", "fr"])
    assert len(items) == 2 * 10 and all(it.reference and it.audio.is_file() for it in items)
    assert len(read_manifest(data / "fleurs-multi.tsv", src_langs=["de", "fr"], max_duration_s=30.0)) == 2 * 10 - 1


def test_simuleval_lists(tmp_path: Path) -> None:
    (tmp_path / "src.txt").write_text("a/x.wav\nb/y.wav\n")
    (tmp_path / "tgt.txt").write_text("ref x\nref y\n")
    items = read_simuleval_lists(tmp_path / "src.txt", tmp_path / "tgt.txt", "de")
    assert [(i.id, i.reference, i.tgt_lang) for i in items] == [("x", "ref x", "de"), ("y", "ref y", "de")]
    (tmp_path / "langs.txt").write_text("de\nfr\n")
    assert [i.tgt_lang for i in read_simuleval_lists(tmp_path / "src.txt", None, str(tmp_path / "langs.txt"))] == [
        "de", "fr"]
    (tmp_path / "short.txt").write_text("only one\n")
    with pytest.raises(TestSetError, match="2 sources"):
        read_simuleval_lists(tmp_path / "src.txt", tmp_path / "short.txt")


# ------------------------------------------------------------------------------------------------ CLI


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="simulst")
    commands.register(parser.add_subparsers(dest="command", required=True))
    return parser


def _write_wavs(tmp_path: Path) -> Path:
    (tmp_path / "wav").mkdir()
    for name, ms in (("u0", 5000), ("u1", 3500)):
        sf.write(tmp_path / "wav" / f"{name}.wav", tone(ms, 16000), 16000, subtype="PCM_16")
    manifest = tmp_path / "set.tsv"
    manifest.write_text("id\taudio\tduration_s\ttranscript\n"
                        "u0\twav/u0.wav\t5.0\tthe cat sat on the mat\nu1\twav/u1.wav\t3.5\tthe cat sat on\n")
    return manifest


def test_eval_and_score_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(SpeechEngine, "load", classmethod(lambda cls, options: toy_engine()))
    manifest = _write_wavs(tmp_path)
    out = tmp_path / "run"
    # the toy's stream options, the same for both runs compared below (the toy model's 1000 Hz: no Silero VAD; its
    # scores are made for greedy search, not the preset's beam; it hears a word every 700 ms, so over the preset's
    # 500 ms chunks two hypotheses in a row hold the same guessed " uh", which LA-2 then commits)
    toy = ["--policy", "la-2", "--no-vad", "--search", "greedy", "--chunk-ms", "600"]
    args = _parser().parse_args(["eval", str(manifest), "--output", str(out), "--json", "--no-progress-bar", *toy])
    assert args.func(args) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["WER_norm"] == pytest.approx(20.0) and scores["Instances"] == 2
    args = _parser().parse_args(["score", str(out), "--json"])
    assert args.func(args) == 0
    assert json.loads(capsys.readouterr().out) == scores
    args = _parser().parse_args(["score", str(out), "--computation-aware"])
    assert args.func(args) == 0
    table = capsys.readouterr().out
    assert "AL_CA" in table and "EmptyOutputs" in table
    # SimulEval's list files give the same log
    (tmp_path / "src.txt").write_text(f"{tmp_path}/wav/u0.wav\n{tmp_path}/wav/u1.wav\n")
    (tmp_path / "tgt.txt").write_text("the cat sat on the mat\nthe cat sat on\n")
    args = _parser().parse_args(["eval", "--source", str(tmp_path / "src.txt"), "--target", str(tmp_path / "tgt.txt"),
                                 "--output", str(tmp_path / "run2"), "--no-computation-aware", "--json", *toy])
    assert args.func(args) == 0
    a, b = read_log(out), read_log(tmp_path / "run2")
    assert [(r.prediction, r.delays) for r in a] == [(r.prediction, r.delays) for r in b]
    assert all(r.elapsed == [] for r in b)


@pytest.mark.parametrize(
    "argv",
    [
        ["eval", "--output", "x"],  # no test set
        ["eval", "m.tsv", "--source", "s.txt", "--output", "x"],
        ["score", "does-not-exist"],
        ["eval", "m.tsv", "--output", "x", "--limit", "0"],
    ],
)
def test_bad_inputs_raise_typed_errors(argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.tsv").write_text("id\taudio\ta\ta.wav\n")
    args = _parser().parse_args(argv)
    with pytest.raises(SimulstError):
        args.func(args)


# ------------------------------------------------------------------------------------------------ real model


@pytest.mark.real
def test_real_eval_fleurs_en_dev_is_accepted_by_simuleval(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """simulst eval on fleurs-en-dev with Whisper tiny.en; simuleval --score-only scores the log the same."""
    if not WHISPER.is_dir() or not (SHARED / "data" / "fleurs-en-dev.tsv").is_file():
        pytest.skip("../shared/models/whisper-tiny.en or ../shared/data missing")
    out = tmp_path / "run"
    # (the two utterances of at most 6 s, fleurs-en-003 and -004: the scores are over more than one instance)
    args = _parser().parse_args(["eval", str(SHARED / "data" / "fleurs-en-dev.tsv"), "--output", str(out),
                                 "--model", str(WHISPER), "--policy", "la-2", "--chunk-ms", "1000", "--json",
                                 "--no-progress-bar", "--max-duration", "6"])
    assert args.func(args) == 0
    ours = json.loads(capsys.readouterr().out)
    assert ours["Instances"] == 2 and ours["EmptyOutputs"] == 0
    assert ours["WER_norm"] < 25.0  # Whisper tiny.en on clean read speech
    assert 0.0 < ours["AL"] < 5000.0 and ours["AL_CA"] > ours["AL"] and ours["ComputeRTF"] > 0.0
    records = read_log(out)
    for rec in records:
        assert rec.delays == sorted(rec.delays) and rec.delays[-1] <= rec.source_length
        assert len(rec.elapsed) == len(rec.delays) == rec.prediction_length
    if importlib.util.find_spec("simuleval") is None:
        pytest.skip("simuleval not installed: the log was not checked by simuleval --score-only")
    plain = simuleval_cli(out, computation_aware=False)
    aware = simuleval_cli(out, computation_aware=True)
    for name in ("BLEU", *LATENCY):
        assert math.isclose(ours[name], plain[name], abs_tol=6e-4), name
    for name in LATENCY:
        assert math.isclose(ours[name + "_CA"], aware[name + "_CA"], abs_tol=6e-4), name
