"""The benchmarks' machine note: the load average and the speed anchor that make timings from different days
comparable (bench/common.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.shared_assets import needs_shared

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from common import machine_note, speed_anchor_ms


def test_the_machine_note_records_the_load_and_the_speed_anchor() -> None:
    note = machine_note(0.25, 321.4)
    assert "load average 0.25 before the start" in note
    assert "speed anchor 321 ms (CTranslate2's tiny.en encoder on a 30 s window" in note
    assert "speed anchor" not in machine_note(0.25)


@pytest.mark.real
@needs_shared
def test_the_speed_anchor_times_ctranslate2s_encoder() -> None:
    pytest.importorskip("ctranslate2")
    anchor = speed_anchor_ms(repeats=1)
    assert anchor is not None and anchor > 0.0  # (a duration: its size is the machine's, never asserted)


@pytest.mark.real
@needs_shared
def test_the_model_load_benchmark_times_a_load_in_a_fresh_process() -> None:
    from model_load import ROOT, load_seconds

    assert load_seconds("whisper-tiny.en", ROOT / "src") > 0.0  # (its size is the machine's, never asserted)


def test_the_code_versions_table_pairs_two_logs_of_one_run(tmp_path: Path) -> None:
    import dataclasses

    from code_versions import compare
    from simulst.evaluation.instances import read_log, write_log

    kept = Path(__file__).resolve().parents[1] / "bench" / "results" / "decoder_steps"
    run = "quality_latency/translate/balanced"
    before, after = compare("translate", "balanced", kept / "before" / run, kept / "after" / run)
    assert (before["code"], after["code"]) == ("before", "after")
    assert after["equal_texts"] == "20/20" and after["d_before"] == "+0.00 [+0.00, +0.00]"
    assert after["d_RTF"] == "-0.168 [-0.213, -0.130]"  # (bench/paired_compute.py's interval of these two logs)
    assert before["Q1"] == after["Q1"] and before["RTF"] > 0.0 and after["RTF_live"] > 0.0
    records = read_log(kept / "after" / run / "instances.log")
    records[0] = dataclasses.replace(records[0], prediction="")  # one text lost: fewer equal, less BLEU
    write_log(tmp_path / "instances.log", records)
    _, changed = compare("translate", "balanced", kept / "before" / run, tmp_path)
    assert changed["equal_texts"] == "19/20" and changed["Q1"] < before["Q1"]
    assert changed["d_before"].startswith("-")
    (tmp_path / "other").mkdir()
    write_log(tmp_path / "other" / "instances.log", records[1:])
    with pytest.raises(SystemExit, match="not of the same utterances"):
        compare("translate", "balanced", kept / "before" / run, tmp_path / "other")
