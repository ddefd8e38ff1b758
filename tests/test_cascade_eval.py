"""``simulst eval`` / ``sweep`` run cascades (Whisper tiny.en -> Apertium eng-spa) like speech models."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from simulst.cli.main import main
from simulst.evaluation.instances import read_log
from tests.shared_assets import DATA, WHISPER_TINY_EN, needs_shared

pytestmark = [
    pytest.mark.real,
    needs_shared,
    pytest.mark.skipif(shutil.which("apertium") is None, reason="apertium is not installed"),
]


def test_eval_runs_a_cascade_against_spanish_references(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "eval"
    code = main([
        "eval", str(DATA / "jfk.tsv"), "--references", str(DATA / "references.es.tsv"), "--model",
        str(WHISPER_TINY_EN), "--to", "es", "--mt-policy", "la-2", "-o", str(out), "--json",
        "--no-progress-bar",
    ])
    assert code == 0
    scores = json.loads(capsys.readouterr().out)
    [record] = read_log(out)
    assert "país" in record.prediction and record.reference is not None and "país" in record.reference
    assert len(record.delays) == len(record.prediction.split()) and record.delays == sorted(record.delays)
    assert record.delays[-1] <= record.source_length
    assert scores["BLEU"] > 0 and scores["Instances"] == 1


def test_cascade_sweeps_refuse_parallel_jobs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sweep", str(DATA / "jfk.tsv"), "--to", "es", "--jobs", "2", "-o", str(tmp_path / "s")])
    assert code == 2 and "--jobs 1" in capsys.readouterr().err
