"""Reading and writing SimulEval's instances.log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulst.evaluation.instances import (
    InstanceRecord,
    LogFormatError,
    append_record,
    iter_log,
    log_path,
    read_log,
    repair_log,
    write_log,
)

SIMULEVAL_LINE = (
    '{"index": 0, "prediction": "And so my", "delays": [1000.0, 1000.0, 2000.0], '
    '"elapsed": [1050.5, 1050.5, 2120.0], "prediction_length": 3, "reference": "And so my fellow", '
    '"source": ["jfk.wav", "samplerate: 16000 Hz"], "source_length": 11000.0}'
)


def test_round_trip_keeps_simuleval_order_and_extra_keys(tmp_path: Path) -> None:
    rec = InstanceRecord.from_json(SIMULEVAL_LINE)
    assert rec.index == 0 and rec.delays == [1000.0, 1000.0, 2000.0] and rec.prediction_length == 3
    assert rec.reference == "And so my fellow" and not rec.reference_missing
    assert list(json.loads(rec.to_json())) == [
        "index", "prediction", "delays", "elapsed", "prediction_length", "reference", "source", "source_length",
    ]
    assert json.loads(rec.to_json()) == json.loads(SIMULEVAL_LINE)

    ours = InstanceRecord(1, "Hi", [500.0], [600.0], reference=None, source="a.wav", source_length=900.0,
                          extra={"simulst": {"id": "u1", "compute_ms": 100.0}})
    write_log(tmp_path / "instances.log", [rec])
    append_record(tmp_path / "instances.log", ours)
    back = read_log(tmp_path)
    assert [r.index for r in back] == [0, 1]
    assert back[1].simulst == {"id": "u1", "compute_ms": 100.0}
    assert back[1].reference is None and json.loads(back[1].to_json())["reference"] is None
    assert back[0].simulst == {}


def test_missing_reference_key_is_remembered() -> None:
    rec = InstanceRecord.from_json('{"index": 3, "prediction": "", "delays": [], "source_length": 10}')
    assert rec.reference is None and rec.reference_missing and rec.is_empty
    assert "reference" not in json.loads(rec.to_json())
    assert rec.prediction_length == 0 and rec.elapsed == []


@pytest.mark.parametrize(
    "line",
    [
        "not json",
        "[1, 2]",
        '{"prediction": "a", "delays": [1], "source_length": 10}',
        '{"index": 0, "prediction": "a", "delays": ["x"], "source_length": 10}',
        '{"index": 0, "prediction": "a", "delays": [1], "source_length": 0}',
        '{"index": 0, "prediction": "a b", "delays": [1, 2], "elapsed": [3], "source_length": 10}',
        '{"index": 0, "prediction": "a", "delays": [1], "reference": 5, "source_length": 10}',
    ],
)
def test_malformed_lines_raise_typed_error(line: str) -> None:
    with pytest.raises(LogFormatError):
        InstanceRecord.from_json(line)


def test_read_log_errors(tmp_path: Path) -> None:
    with pytest.raises(LogFormatError, match=r"no instances\.log"):
        read_log(tmp_path)
    (tmp_path / "instances.log").write_text("")
    with pytest.raises(LogFormatError, match="no instances"):
        read_log(tmp_path)
    (tmp_path / "instances.log").write_text(SIMULEVAL_LINE + "\n" + SIMULEVAL_LINE + "\n")
    with pytest.raises(LogFormatError, match="twice"):
        read_log(tmp_path)
    (tmp_path / "instances.log").write_text(SIMULEVAL_LINE + "\n{bad\n" + SIMULEVAL_LINE + "\n")
    with pytest.raises(LogFormatError, match=":2:"):
        read_log(tmp_path)


def test_repair_drops_only_a_truncated_last_line(tmp_path: Path) -> None:
    path = tmp_path / "instances.log"
    assert repair_log(path) == []
    second = SIMULEVAL_LINE.replace('"index": 0', '"index": 1')
    path.write_text(SIMULEVAL_LINE + "\n" + second[:40])
    kept = repair_log(path)
    assert [r.index for r in kept] == [0]
    assert path.read_text() == InstanceRecord.from_json(SIMULEVAL_LINE).to_json() + "\n"
    assert [r.index for r in iter_log(path)] == [0]


def test_log_path(tmp_path: Path) -> None:
    assert log_path(tmp_path) == tmp_path / "instances.log"
    assert log_path(tmp_path / "x.log") == tmp_path / "x.log"
