"""``simulst sweep``: the grid, the runs (one process and parallel workers), the table and the plots."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from simulst.cli import evaluation as commands
from simulst.config import StreamOptions
from simulst.errors import OptionError
from simulst.evaluation.manifest import read_manifest
from simulst.evaluation.plots import plot_sweep
from simulst.evaluation.runner import EvalOptions
from simulst.evaluation.sweep import (
    apply_override,
    build_grid,
    parse_grid,
    quality_metric_for,
    read_table,
    run_sweep,
    write_table,
)
from simulst.streaming.engine import SpeechEngine
from tests.shared_assets import DATA, WHISPER_TINY_EN, needs_shared
from tests.toy import tone, toy_engine


def test_grid_policies_chunks_and_offline_once() -> None:
    points = build_grid(StreamOptions(), ["la-2", "hold-3", "offline"], [500, 1000])
    assert [p.label for p in points] == ["la-2 500ms", "la-2 1000ms", "hold-3 500ms", "hold-3 1000ms", "offline"]
    assert points[1].options.chunk_ms == 1000.0 and str(points[2].options.policy) == "hold-3"
    assert points[-1].dirname == "offline" and points[0].dirname == "la-2_500ms"


def test_grid_searches_and_other_axes() -> None:
    points = build_grid(StreamOptions(), ["sp-2"], [1000], ["greedy", "beam"], parse_grid(["search.beam=4,8"]))
    labels = [p.label for p in points]
    assert labels == ["sp-2 1000ms greedy search.beam=4", "sp-2 1000ms greedy search.beam=8",
                      "sp-2 1000ms beam4 search.beam=4", "sp-2 1000ms beam8 search.beam=8"]
    assert points[3].options.search.name == "beam" and points[3].options.search.beam == 8
    assert points[3].overrides == {"search.beam": "8"}


def test_apply_override_types_and_errors() -> None:
    base = StreamOptions()
    assert apply_override(base, "initial_wait_ms", "2000").initial_wait_ms == 2000.0
    assert apply_override(base, "search.max_new_tokens", "12").search.max_new_tokens == 12
    assert apply_override(base, "policy", "hold-6").policy.n == 6
    assert apply_override(base, "early_logprob_threshold", "-0.9").early_logprob_threshold == -0.9
    assert apply_override(base, "early_logprob_threshold", "none").early_logprob_threshold is None
    off = dataclasses.replace(base, early_logprob_threshold=None)
    assert apply_override(off, "early_logprob_threshold", "-0.7").early_logprob_threshold == -0.7
    assert apply_override(base, "context_scope", "all").context_scope == "all"
    assert apply_override(base, "context_tokens", "0").context_tokens == 0
    for key, value in [("nope", "1"), ("search.nope", "1"), ("search.beam", "x"), ("search", "beam"),
                       ("chunk_ms.x", "1"), ("search.beam", "0"), ("early_logprob_threshold", "often"),
                       ("context_scope", "paragraph"), ("context_tokens", "none")]:
        with pytest.raises(OptionError):
            apply_override(base, key, value)
    with pytest.raises(OptionError):
        parse_grid(["search.beam"])
    with pytest.raises(OptionError):
        build_grid(base, [])


DURATIONS = {"u0": 5000, "u1": 3500}


def _items(tmp_path: Path) -> Path:
    (tmp_path / "wav").mkdir(exist_ok=True)
    for name, ms in DURATIONS.items():
        sf.write(tmp_path / "wav" / f"{name}.wav", tone(ms), 1000, subtype="FLOAT")
    manifest = tmp_path / "set.tsv"
    manifest.write_text("id\taudio\tduration_s\ttranscript\n"
                        "u0\twav/u0.wav\t5\tthe cat sat on the mat\nu1\twav/u1.wav\t3.5\tthe cat sat on the\n")
    return manifest


def test_run_sweep_table_and_plots(tmp_path: Path) -> None:
    items = read_manifest(_items(tmp_path))
    points = build_grid(StreamOptions(), ["la-2", "hold-1", "offline"], [1000, 2000])
    seen: list[str] = []
    rows = run_sweep(toy_engine, points, items, tmp_path / "sweep", EvalOptions(progress=False),
                     progress=lambda p, s: seen.append(p.label))
    assert seen == [p.label for p in points] and len(rows) == 5
    offline = rows[-1]
    assert offline["policy"] == "offline" and offline["chunk_ms"] == ""
    # offline waits for the whole source: every word's delay is |X|, so AL = |X| on average... (5000+3500)/2
    assert offline["AL"] == pytest.approx(4250.0) and offline["StartOffset"] == pytest.approx(4250.0)
    la2 = {r["chunk_ms"]: r for r in rows if r["policy"] == "la-2"}
    assert la2[1000.0]["AL"] < la2[2000.0]["AL"] < offline["AL"]  # smaller chunks, lower latency
    for name in ("la-2_1000ms", "hold-1_2000ms", "offline"):
        assert (tmp_path / "sweep" / "runs" / name / "instances.log").is_file()
    csv_path, md_path = write_table(rows, tmp_path / "sweep", quality=["WER_norm"])
    back = read_table(csv_path)
    assert [r["label"] for r in back] == [r["label"] for r in rows]
    assert back[0]["AL"] == pytest.approx(rows[0]["AL"])
    md = md_path.read_text().splitlines()
    assert md[0].startswith("| policy | chunk_ms | WER_norm | AL | LAAL | AL_CA")
    assert len(md) == 2 + len(rows)
    assert quality_metric_for(rows) == "BLEU" and quality_metric_for(rows, "WER_norm") == "WER_norm"
    paths = plot_sweep(rows, tmp_path / "sweep", "WER_norm")
    assert sorted(p.name for p in paths) == ["quality_vs_AL.png", "quality_vs_AL_CA.png", "quality_vs_LAAL.png",
                                             "sweep.png"]
    assert all(p.stat().st_size > 5000 and p.read_bytes()[:4] == b"\x89PNG" for p in paths)
    # resumable: a second run loads nothing new and gives the same numbers
    again = run_sweep(toy_engine, points, items, tmp_path / "sweep", EvalOptions(progress=False))
    assert [r["AL"] for r in again] == [r["AL"] for r in rows]


def test_parallel_jobs_give_the_same_table(tmp_path: Path) -> None:
    items = read_manifest(_items(tmp_path))
    points = build_grid(StreamOptions(), ["la-2", "hold-1"], [1000])
    options = EvalOptions(progress=False, computation_aware=False)
    serial = run_sweep(toy_engine, points, items, tmp_path / "a", options)
    parallel = run_sweep(toy_engine, points, items, tmp_path / "b", options, jobs=2, mp_context="fork")
    keys = ("label", "AL", "LAAL", "WER_norm", "BLEU", "DecoderCallsPerWord")
    assert [{k: r[k] for k in keys} for r in parallel] == [{k: r[k] for k in keys} for r in serial]
    with pytest.raises(OptionError):
        run_sweep(toy_engine, points, items, tmp_path / "c", options, jobs=0)


def test_sweep_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(SpeechEngine, "load", classmethod(lambda cls, options: toy_engine()))
    manifest = _items(tmp_path)
    parser = argparse.ArgumentParser(prog="simulst")
    commands.register(parser.add_subparsers(dest="command", required=True))
    out = tmp_path / "sw"
    args = parser.parse_args(["sweep", str(manifest), "--output", str(out), "--policies", "la-2", "offline",
                              "--chunks", "1000", "2000", "--no-progress-bar", "--no-vad"])  # (toy: 1000 Hz)
    assert args.func(args) == 0
    printed = capsys.readouterr()
    assert printed.out.startswith("| policy | chunk_ms |") and "[sweep] la-2 1000ms" in printed.err
    assert (out / "sweep.csv").is_file() and (out / "quality_vs_AL.png").is_file()
    config = json.loads((out / "runs" / "la-2_2000ms" / "config.json").read_text())
    assert config["run"]["stream"]["chunk_ms"] == 2000.0 and config["info"]["sweep_label"] == "la-2 2000ms"
    assert np.isfinite(read_table(out / "sweep.csv")[0]["WER_norm"])


@pytest.mark.real
@needs_shared
def test_parallel_sweep_workers_load_the_model_the_options_name(tmp_path: Path) -> None:
    # Each worker process loads the model from the ModelOptions built once by the command; the run's config.json
    # records the options the worker's model was loaded with (a worker that dropped --precision or --window-pad-ms,
    # as an earlier version did, fails here).
    out = tmp_path / "sw"
    args = _cli_parser().parse_args([
        "sweep", str(DATA / "jfk.tsv"), "--output", str(out), "--model", str(WHISPER_TINY_EN), "--policies", "la-2",
        "--chunks", "1000", "2000", "--window", "audio", "--window-pad-ms", "1000", "--precision", "int8",
        "--jobs", "2", "--no-progress-bar",
    ])
    assert args.func(args) == 0
    for label in ("la-2_1000ms", "la-2_2000ms"):
        model = json.loads((out / "runs" / label / "config.json").read_text())["run"]["model"]
        assert (model["window"], model["window_pad_ms"], model["precision"]) == ("audio", 1000.0, "int8")
        assert model["name"] == str(WHISPER_TINY_EN)
    rows = read_table(out / "sweep.csv")
    assert all(row["WER_norm"] < 30 for row in rows)


def _cli_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="simulst")
    commands.register(parser.add_subparsers(dest="command", required=True))
    return parser
