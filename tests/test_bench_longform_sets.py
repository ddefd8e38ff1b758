"""bench/longform_sets.py: the Spanish / Portuguese talks take each utterance's kept offline translation as its
sentence (an agreement reference), and refuse a log that lacks one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from longform_sets import OFFLINE_ES_PT, x_to_english_agreement
from simulst.evaluation.instances import InstanceRecord, write_log


def offline_log(path: Path, ids: list[str]) -> Path:
    write_log(path, [InstanceRecord(index=i, prediction=f" translation {i} ", delays=[1000.0, 1000.0], elapsed=[],
                                    source_length=2000.0, extra={"simulst": {"id": uid}})
                     for i, uid in enumerate(ids)])
    return path


def test_each_utterance_gets_its_offline_translation(tmp_path: Path) -> None:
    ids = [f"fleurs-pt-{k:03d}" for k in range(10)] + ["fleurs-es-000"]
    utterances = x_to_english_agreement("pt", offline_log(tmp_path / "instances.log", ids))
    assert [u.id for u in utterances] == ids[:10]
    assert utterances[3].sentence == "translation 3" and utterances[3].audio.name == "fleurs-pt-003.wav"


def test_a_log_without_an_utterance_is_refused(tmp_path: Path) -> None:
    log = offline_log(tmp_path / "instances.log", [f"fleurs-es-{k:03d}" for k in range(9)])
    with pytest.raises(SystemExit, match="fleurs-es-009"):
        x_to_english_agreement("es", log)


def test_the_kept_log_covers_both_languages() -> None:
    assert [len(x_to_english_agreement(lang, OFFLINE_ES_PT)) for lang in ("es", "pt")] == [10, 10]
