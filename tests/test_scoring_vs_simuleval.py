"""Our scores of an instances.log equal SimulEval's on the same log (to 1e-6).

Three layers: (1) hand-worked logs scored by :func:`score_records` against values worked out by hand (no
SimulEval needed); (2) the same logs plus generated ones scored by SimulEval 1.1.4's own scorer classes;
(3) ``simuleval --score-only`` run on a log folder we wrote.

SimulEval quirk (1.1.4): with ``--computation-aware`` its *unsuffixed* scorers are built computation-aware too
(``from_args`` passes the flag), so its ``AL`` then equals its ``AL_CA``. simulst's ``AL`` is always the
computation-unaware one; the CLI comparison therefore reads the plain names from a run without the flag and the
``_CA`` names from a run with it.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulst.evaluation.instances import InstanceRecord, write_log
from simulst.evaluation.scoring import ScoreOptions, format_table, score_log, score_records, write_scores
from tests.simuleval_cli import LATENCY, simuleval_cli

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # SimulEval calls logger.warn
needs_simuleval = pytest.mark.skipif(importlib.util.find_spec("simuleval") is None, reason="simuleval not installed")


def _line(index: int, delays: list[float], x: float, ref: str | None, elapsed: list[float] | None = None,
          prediction: str | None = None, **extra: Any) -> str:
    info: dict[str, Any] = {
        "index": index,
        "prediction": prediction if prediction is not None else " ".join(f"w{i}" for i in range(len(delays))),
        "delays": delays,
        "elapsed": elapsed if elapsed is not None else [],
        "prediction_length": len(delays),
        "reference": ref,
        "source": f"{index}.wav",
        "source_length": x,
    }
    info.update(extra)
    return json.dumps(info)


# The hand-worked instances of test_latency.py, as one log (references of the right word length).
HAND_LOG = [
    _line(0, [1000.0, 2000.0, 3000.0, 3000.0], 2500.0, "a b c d", [1100.0, 2300.0, 3500.0, 3500.0]),
    _line(1, [3500.0, 3500.0], 3000.0, "a b", [3600.0, 3700.0]),
    _line(2, [3000.0, 3000.0, 3000.0], 3000.0, "a b c", [3010.0, 3010.0, 3010.0]),
    _line(3, [500.0, 1000.0, 1500.0, 2000.0, 3000.0, 3000.0], 3000.0, "a b c",
          [520.0, 1040.0, 1560.0, 2080.0, 3100.0, 3100.0]),
    _line(4, [1200.0], 3000.0, "a", [1500.0]),
    _line(5, [], 1500.0, "a b", []),  # empty output: skipped by latency averages, counted
    _line(6, [0.0, 0.0, 100.0], 1000.0, "a b c", [5.0, 5.0, 130.0]),
]
HAND_AL = [1375.0, 3500.0, 3000.0, -400.0, 1200.0, None, -300.0]
HAND_LAAL = [1375.0, 3500.0, 3000.0, 600.0, 1200.0, None, -300.0]
HAND_ATD = [1550.0, 3050.0, 2400.0, 5600.0 / 6.0, 900.0, None, 0.0]


def _records(lines: list[str]) -> list[InstanceRecord]:
    return [InstanceRecord.from_json(line) for line in lines]


def test_hand_worked_log_scores() -> None:
    report = score_records(_records(HAND_LOG), ScoreOptions(quality_metrics=()))
    values = [v for v in HAND_AL if v is not None]
    assert report.scores["AL"] == pytest.approx(sum(values) / len(values))
    assert [row["AL"] for row in report.per_instance] == pytest.approx(HAND_AL)
    assert [row["LAAL"] for row in report.per_instance] == pytest.approx(HAND_LAAL)
    assert [row["ATD"] for row in report.per_instance] == pytest.approx(HAND_ATD)
    assert report.per_instance[0]["AL_CA"] == pytest.approx(1675.0)
    assert report.per_instance[0]["ATD_CA"] == pytest.approx(1725.0)
    assert report.scores["EmptyOutputs"] == 1 and report.scores["Instances"] == 7
    assert any("1 of 7 instances produced no output" in n for n in report.notes)
    assert "EmptyOutputs" in format_table(report)
    cu_only = score_records(_records(HAND_LOG), ScoreOptions(quality_metrics=(), computation_aware=False))
    assert "AL_CA" not in cu_only.scores


def test_written_scores_files(tmp_path: Path) -> None:
    write_log(tmp_path / "instances.log", _records(HAND_LOG))
    report = score_log(tmp_path)
    write_scores(tmp_path, report)
    header, values = (tmp_path / "scores.tsv").read_text().splitlines()
    assert header.split("\t")[:2] == ["BLEU", "chrF"]
    assert float(values.split("\t")[header.split("\t").index("AL")]) == pytest.approx(report.scores["AL"])
    rows = (tmp_path / "metrics.tsv").read_text().splitlines()
    assert len(rows) == 1 + len(HAND_LOG)
    assert json.loads((tmp_path / "scores.json").read_text())["scores"]["EmptyOutputs"] == 1


# ---------------------------------------------------------------------------------------------------------------
# Against SimulEval's own scorers


def _simuleval_scores(lines: list[str], unit: str = "word", use_ref_len: bool = True,
                      quality: bool = True) -> dict[str, float]:
    latency_scorer = pytest.importorskip("simuleval.evaluator.scorers.latency_scorer")
    from simuleval.evaluator.instance import LogInstance
    from simuleval.evaluator.scorers.quality_scorer import SacreBLEUScorer

    logging.getLogger("simuleval").setLevel(logging.ERROR)
    out: dict[str, float] = {}
    for name in LATENCY:
        for ca in (False, True):
            instances = {i: LogInstance(line, unit) for i, line in enumerate(lines)}
            has = [ins for ins in instances.values() if (ins.elapsed if ca else ins.delays)]
            if not has:
                continue
            scorer = latency_scorer.LATENCY_SCORERS_DICT[name](computation_aware=ca, use_ref_len=use_ref_len)
            out[name + ("_CA" if ca else "")] = scorer(instances)
    if quality:
        instances = {i: LogInstance(line, unit) for i, line in enumerate(lines)}
        out["BLEU"] = SacreBLEUScorer("13a")(instances)
    return out


def _assert_equal_to_simuleval(lines: list[str], unit: str = "word", use_ref_len: bool = True) -> float:
    theirs = _simuleval_scores(lines, unit, use_ref_len)
    opts = ScoreOptions(latency_unit=unit, use_ref_len=use_ref_len, quality_metrics=("BLEU",),
                        computation_aware=True)
    ours = score_records(_records(lines), opts).scores
    worst = 0.0
    for name, value in theirs.items():
        assert ours[name] is not None, name
        diff = abs(float(ours[name] or 0.0) - value)
        assert diff <= 1e-6, (name, ours[name], value)
        worst = max(worst, diff)
    return worst


@pytest.mark.parametrize("unit", ["word", "char"])
@pytest.mark.parametrize("use_ref_len", [True, False])
def test_hand_worked_log_equals_simuleval(unit: str, use_ref_len: bool) -> None:
    _assert_equal_to_simuleval(HAND_LOG, unit, use_ref_len)


def test_reference_edge_cases_equal_simuleval() -> None:
    lines = [
        _line(0, [1000.0, 2000.0], 3000.0, None, [1100.0, 2100.0]),  # null reference: |Y*| := |Y|
        _line(1, [500.0, 2500.0, 2600.0], 3000.0, "two  spaces"),  # split(" ") counts 3 words
    ]
    missing = json.loads(_line(2, [1000.0, 1500.0], 2000.0, "x", [1200.0, 1700.0]))
    del missing["reference"]  # a missing key reads as "" (word length 1)
    theirs = _simuleval_scores([*lines, json.dumps(missing)], quality=False)
    ours = score_records(_records([*lines, json.dumps(missing)]), ScoreOptions(quality_metrics=())).scores
    for name, value in theirs.items():
        assert ours[name] == pytest.approx(value, abs=1e-6), name


def test_simuleval_written_log_equals_simuleval() -> None:
    # A log as SimulEval itself writes it (source as soundfile info lines, elapsed from wall-clock time).
    lines = [
        '{"index": 0, "prediction": "And so , my fellow", "delays": [1000.0, 1000.0, 2000.0, 2000.0, 3000.0], '
        '"elapsed": [1231.7, 1231.7, 2598.0, 2598.0, 3870.1], "prediction_length": 5, '
        '"reference": "And so, my fellow Americans", "source": ["a.wav", "samplerate: 16000 Hz", "channels: 1"], '
        '"source_length": 2740.0625}',
        '{"index": 1, "prediction": "ask not", "delays": [1500.0, 1812.5], "elapsed": [1716.0, 2100.9], '
        '"prediction_length": 2, "reference": "ask not what", "source": ["b.wav"], "source_length": 1812.5}',
    ]
    _assert_equal_to_simuleval(lines)


@st.composite
def _logs(draw: st.DrawFn) -> list[str]:
    n = draw(st.integers(1, 4))
    lines = []
    for index in range(n):
        x = draw(st.sampled_from([1000.0, 2500.0, 3333.3125, 11000.0]))
        delays = sorted(draw(st.lists(
            st.one_of(st.sampled_from([0.0, 250.0, 1000.0, x, x + 300.0]), st.floats(0, x * 1.3)),
            min_size=0 if index else 1, max_size=14)))
        spent, elapsed = 0.0, []
        for d in delays:
            spent += draw(st.sampled_from([0.0, 17.5, 250.0, 1200.0]))
            elapsed.append(d + spent)
        ref = " ".join(["w"] * draw(st.integers(1, 16)))
        lines.append(_line(index, delays, x, ref, elapsed))
    return lines


@needs_simuleval
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=_logs())
def test_generated_logs_equal_simuleval(lines: list[str]) -> None:
    _assert_equal_to_simuleval(lines)


@needs_simuleval
def test_simuleval_score_only_cli_agrees(tmp_path: Path) -> None:
    write_log(tmp_path / "instances.log", _records(HAND_LOG))
    (tmp_path / "config.yaml").write_text("source_type: speech\ntarget_type: text\n")
    ours = score_log(tmp_path, ScoreOptions(quality_metrics=("BLEU",))).scores
    plain = simuleval_cli(tmp_path, computation_aware=False)
    aware = simuleval_cli(tmp_path, computation_aware=True)
    for name in ("BLEU", *LATENCY):
        assert math.isclose(float(ours[name] or 0.0), plain[name], abs_tol=6e-4), name  # SimulEval rounds to 3
    for name in LATENCY:
        assert math.isclose(float(ours[name + "_CA"] or 0.0), aware[name + "_CA"], abs_tol=6e-4), name


BENCH_LOGS = sorted((Path(__file__).resolve().parents[1] / "bench" / "results").glob("*/runs/*/instances.log"))


@needs_simuleval
@pytest.mark.skipif(not BENCH_LOGS, reason="no committed bench logs")
def test_committed_bench_logs_equal_simuleval() -> None:
    """Real Whisper logs (the committed policy sweep: every policy and chunk size, with measured elapsed times)."""
    for log in BENCH_LOGS:
        lines = [line for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
        _assert_equal_to_simuleval(lines)
