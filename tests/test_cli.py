"""The command line: the JSON contract, live text output, and clear errors with non-zero exits on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from simulst.cli.main import main
from simulst.evaluation.quality import normalize_for_wer
from tests.shared_assets import DATA, JFK, JFK_PHRASE, WHISPER_TINY_EN, needs_shared

MODEL = ["--model", str(WHISPER_TINY_EN)]


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.real
@needs_shared
def test_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["transcribe", str(JFK), *MODEL, "--policy", "la-2", "--chunk-ms", "1000", "--json"], capsys)
    assert code == 0
    records = [json.loads(line) for line in out.splitlines()]
    emissions = [r for r in records if r["event"] == "emission"]
    final = records[-1]
    assert final["event"] == "final" and len(emissions) == len(records) - 1 >= 3
    assert set(emissions[0]) == {"event", "text", "source_ms", "elapsed_ms", "start_ms", "end_ms", "words"}
    assert {"text", "source_ms", "compute_s", "rtf", "decoder_passes"} <= set(final)
    assert "".join(e["text"] for e in emissions) == final["text"]
    assert JFK_PHRASE.search(normalize_for_wer(final["text"]))
    assert final["source_ms"] == pytest.approx(11000.0)
    assert final["decoder_passes"] > 0 and final["rtf"] > 0
    assert all(e["elapsed_ms"] >= e["source_ms"] for e in emissions)


@pytest.mark.real
@needs_shared
def test_text_output_any_rate_and_channels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    audio, rate = sf.read(str(JFK), dtype="float32")
    stereo = tmp_path / "jfk-stereo-44k.flac"
    import soxr

    resampled = soxr.resample(audio, rate, 44100)
    sf.write(str(stereo), np.stack([resampled, 0.5 * resampled], axis=1), 44100)
    code, out, _ = run_cli(["transcribe", str(stereo), *MODEL, "--policy", "hold-3", "--chunk-ms", "2000"], capsys)
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0].startswith("[") and " s] " in lines[0]
    assert "ask not what your country" in out.lower()
    assert lines[-1].startswith("-- ") and "real-time factor" in lines[-1]


@pytest.mark.real
@needs_shared
def test_offline_policy_and_beam(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        ["transcribe", str(JFK), *MODEL, "--policy", "offline", "--search", "beam", "--beam", "3", "--json"], capsys
    )
    assert code == 0
    records = [json.loads(line) for line in out.splitlines()]
    assert len(records) == 2 and records[0]["source_ms"] == pytest.approx(11000.0)


@pytest.mark.real
@needs_shared
def test_realtime_mode(capsys: pytest.CaptureFixture[str]) -> None:
    short = str(DATA / "audio" / "fleurs-en-dev" / "fleurs-en-004.wav")
    code, out, _ = run_cli(["transcribe", short, *MODEL, "--realtime", "--json"], capsys)
    assert code == 0
    records = [json.loads(line) for line in out.splitlines()]
    final = records[-1]
    assert final["wall_s"] >= 4.3  # paced at wall-clock speed: not faster than the audio
    assert "dinosaurs" in final["text"]


def write(tmp_path: Path, name: str, data: np.ndarray, rate: int = 16000, subtype: str | None = None) -> Path:
    path = tmp_path / name
    sf.write(str(path), data, rate, subtype=subtype)
    return path


@pytest.mark.real
@needs_shared
def test_silence_gives_empty_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    silent = write(tmp_path, "silence.wav", np.zeros(32000, dtype=np.float32))
    code, out, err = run_cli(["transcribe", str(silent), *MODEL, "--json"], capsys)
    assert code == 1 and "silent" in err
    records = [json.loads(line) for line in out.splitlines()]
    assert records == [records[-1]] and records[-1]["text"] == ""


@pytest.mark.real
@needs_shared
def test_a_truncated_file_is_transcribed_as_far_as_it_goes_with_a_warning(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    cut = tmp_path / "jfk-cut.wav"
    cut.write_bytes(JFK.read_bytes()[: 44 + 2 * 16000 * 5])  # the header and 5 s of the 11 s it announces
    code, out, err = run_cli(["transcribe", str(cut), *MODEL, "--policy", "offline", "--json"], capsys)
    assert code == 0
    assert f"simulst: warning: {cut} is truncated: it holds 5.00 s of the 11.00 s its header announces" in err
    final = json.loads(out.splitlines()[-1])
    assert final["source_ms"] == pytest.approx(5000.0) and "fellow Americans" in final["text"]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: d / "missing.wav", "not found"),
        (lambda d: (d / "notes.wav").write_text("hello, not audio") and d / "notes.wav", "cannot read"),
        (lambda d: (d / "corrupt.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEfmt garbage") and d / "corrupt.wav",
         "cannot read"),
        (lambda d: write(d, "empty.wav", np.zeros(0, dtype=np.float32)), "no audio"),
        (lambda d: write(d, "nan.wav", np.array([0.1, np.nan, 0.2] * 1000, dtype=np.float32), subtype="FLOAT"), "NaN"),
        (lambda d: d, "not a file"),
    ],
)
def test_bad_audio_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], make, message: str) -> None:  # type: ignore[no-untyped-def]
    path = make(tmp_path)
    code, out, err = run_cli(["transcribe", str(path), "--model", "unused"], capsys)
    assert code == 2
    assert message in err and "Traceback" not in err
    assert out == ""


@pytest.mark.parametrize(
    "args, message",
    [
        (["--policy", "maybe-3"], "unknown policy"),
        (["--search", "viterbi"], "unknown search"),
        (["--chunk-ms", "0"], "chunk size"),
        (["--model", "/no/such/model/dir"], "neither a local directory nor a hub id"),
        (["--model", "nobody/no-such-model"], "could not load model"),
        (["--window", "audio", "--model", str(DATA)], "neither a Hugging Face config.json nor a CTranslate2"),
        (["--device", "tpu"], "unknown torch device 'tpu'"),
        (["--max-buffer-s", "60"], "(--max-buffer-s 60) is longer than the model's window: at most 30 s"),
        (["--segment-s", "31"], "(--segment-s 31) is longer than the model's window: at most 30 s"),
        (["--window-min-ms", "40000"], "(--window-min-ms 40000) is longer than the model's window: at most 30000 ms"),
        (["--window-pad-ms", "30001"], "(--window-pad-ms 30001) is longer than the model's window: at most 30000 ms"),
    ],
)
def test_bad_options_exit_2(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    if not JFK.is_file():
        pytest.skip("shared data missing")
    code, _, err = run_cli(["transcribe", str(JFK), *args], capsys)
    assert code == 2
    assert message in err and "Traceback" not in err
    assert err.count("\n") == 1  # (one line)


def test_a_cuda_device_this_machine_lacks_is_an_option_error() -> None:
    import torch

    from simulst.errors import OptionError
    from simulst.models.device import torch_device

    assert torch_device("cpu") == torch.device("cpu")
    absent = "cuda" if not torch.cuda.is_available() else f"cuda:{torch.cuda.device_count()}"
    with pytest.raises(OptionError, match="CUDA GPU"):
        torch_device(absent)


@pytest.mark.real
@needs_shared
def test_a_talk_longer_than_the_window_is_evaluated_as_one_long_form_instance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # jfk + the three shortest fleurs-en-dev utterances joined with 1 s pauses (34 s, longer than the 30 s window):
    # one long-form instance, scored per reference sentence
    talk = ("jfk", "fleurs-en-001", "fleurs-en-003", "fleurs-en-004")
    parts, sentences, segments, position = [], [], [], 1.0
    for manifest in ("jfk.tsv", "fleurs-en-dev.tsv"):
        for line in (DATA / manifest).read_text(encoding="utf-8").splitlines()[1:]:
            uid, audio_path, _duration, transcript = line.split("\t")[:4]
            if uid not in talk:
                continue
            audio, _ = sf.read(str(DATA / audio_path), dtype="float32")
            parts += [np.zeros(16000, dtype=np.float32), audio]
            segments.append(f"- {{duration: {audio.shape[0] / 16000:.4f}, offset: {position:.4f}, wav: talk.wav}}\n")
            sentences.append(transcript + "\n")
            position += audio.shape[0] / 16000 + 1.0
    joined = np.concatenate(parts)
    assert len(sentences) == len(talk) and joined.shape[0] > 30 * 16000
    sf.write(str(tmp_path / "talk.wav"), joined, 16000)
    (tmp_path / "talk.tsv").write_text(f"id\taudio\tduration_s\ntalk\ttalk.wav\t{joined.shape[0] / 16000:.2f}\n",
                                       encoding="utf-8")
    (tmp_path / "talk.sentences.txt").write_text("".join(sentences), encoding="utf-8")
    (tmp_path / "talk.yaml").write_text("".join(segments), encoding="utf-8")
    fast = ["--search", "greedy", "--policy", "la-2", "--chunk-ms", "1000"]  # (what is tested is not the preset)
    code, _, err = run_cli(["eval", str(tmp_path / "talk.tsv"), *MODEL, *fast, "-o", str(tmp_path / "run"),
                            "--no-progress-bar"], capsys)
    assert code == 0, err
    code, out, err = run_cli(["score", str(tmp_path / "run"), "--long-form", "--json",
                              "--references", str(tmp_path / "talk.sentences.txt"),
                              "--segmentation", str(tmp_path / "talk.yaml")], capsys)
    assert code == 0, err
    scores = json.loads(out)
    assert scores["WER_norm"] < 20.0 and 0.0 < scores["StreamLAAL"] < 8000.0, scores  # (ms; 8.2 / 2235 seen)
    code, out, err = run_cli(["transcribe", str(tmp_path / "talk.wav"), *MODEL, *fast, "--json"], capsys)
    assert code == 0, err  # (no "longer than the model's 30 s window" refusal)
    final = json.loads(out.splitlines()[-1])
    assert final["event"] == "final" and "not what your country can do" in normalize_for_wer(final["text"]), final


@pytest.mark.real
@needs_shared
def test_english_only_model_refuses_translate_task(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["translate", str(JFK), *MODEL], capsys)
    assert code == 2 and "English-only" in err


def test_entry_point_runs_as_a_program(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "simulst.cli", "transcribe", str(tmp_path / "nothing.wav")],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert "audio file not found" in result.stderr and "Traceback" not in result.stderr


def test_every_option_of_every_subcommand_has_a_help() -> None:
    from simulst.cli.main import build_parser

    subcommands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    missing = {name: [a.option_strings[0] for a in sub._actions if a.option_strings and not a.help]
               for name, sub in subcommands.items()}
    assert missing == {name: [] for name in subcommands}  # (serve --log-level, train-ctc --epochs/--seed/--device)


def test_serve_describes_the_batching_in_force() -> None:
    # concurrent streams are decoded in batches on a GPU only (--batching auto); on a CPU, one stream per core
    from simulst.cli.main import build_parser
    from simulst.cli.serve import server_config

    parser = build_parser()
    serve = parser._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    assert "decoded in batches on a GPU, one stream per core on a CPU" in " ".join(serve.description.split())
    assert server_config(parser.parse_args(["serve"])).batched is False
    assert server_config(parser.parse_args(["serve", "--device", "cuda"])).batched is True
