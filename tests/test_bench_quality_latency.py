"""bench/quality_latency.py's variants: command-line flags resolve as the CLI resolves them, over the task's
``balanced`` preset, and the variants' table keeps each task's section; bench/pooled_grids.py pools chunk grids
per utterance."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from quality_latency import configs, explored, read_peers, variant, write, write_variants
from simulst.config import PolicyOptions
from simulst.evaluation.instances import InstanceRecord, write_log


@pytest.mark.parametrize("task", ["transcribe", "translate"])
def test_a_variant_without_flags_is_the_balanced_preset(task: str) -> None:
    balanced, plain = configs(task)["balanced"], variant(task, "plain", "")
    assert (plain.model, plain.stream) == (balanced.model, balanced.stream)


def test_a_variant_changes_only_what_its_flags_name() -> None:
    balanced = configs("translate")["balanced"]
    chunk = variant("translate", "chunk-800", "--chunk-ms 800 --search beam --beam 3")
    assert chunk.model == balanced.model and chunk.model.name == "whisper-base"
    assert chunk.stream == dataclasses.replace(balanced.stream, chunk_ms=800.0,
                                               search=dataclasses.replace(balanced.stream.search, name="beam",
                                                                          beam=3))
    assert variant("translate", "la3", "--policy la-3").stream.policy == PolicyOptions.parse("la-3")
    low = variant("transcribe", "low", "--latency low")
    assert (low.model, low.stream) == (configs("transcribe")["low"].model, configs("transcribe")["low"].stream)


def test_a_flag_the_command_line_does_not_take_is_refused() -> None:
    with pytest.raises(SystemExit):
        variant("transcribe", "bad", "--no-such-flag 3")


@pytest.mark.parametrize("task", ["transcribe", "translate"])
def test_offline_is_greedy_and_offline_beam_searches_as_balanced(task: str) -> None:
    table = configs(task)
    balanced, greedy, beam = table["balanced"], table["offline"], table["offline-beam"]
    assert balanced.stream.search.name == "beam" and balanced.stream.search.beam == 3  # (what the presets search)
    assert greedy.stream.search.name == "greedy"  # (the reference every d_offline is computed against)
    assert beam.stream.search == balanced.stream.search
    for offline in (greedy, beam):
        assert offline.stream.policy == PolicyOptions("offline") and not offline.stream.vad
        assert (offline.model.precision, offline.model.encoder_precision) == ("fp32", "fp32")
        assert dataclasses.replace(offline.stream, search=balanced.stream.search) == beam.stream


def test_the_variants_table_replaces_only_its_tasks_section(tmp_path: Path) -> None:
    row = {"task": "translate", "config": "chunk-800", "options": "--chunk-ms 800", "n": 2, "Q1": 16.2}
    write_variants(tmp_path, "translate", [row])
    write_variants(tmp_path, "transcribe", [{**row, "task": "transcribe", "config": "int8"}])
    write_variants(tmp_path, "translate", [{**row, "config": "beam-3"}])
    text = (tmp_path / "quality_latency_variants.md").read_text(encoding="utf-8")
    assert text.count("## translate") == 1 and text.count("## transcribe") == 1
    assert "| beam-3 |" in text and "| chunk-800 |" not in text and "| int8 |" in text


def test_logged_variants_are_found_with_their_flags(tmp_path: Path) -> None:
    folder = tmp_path / "translate_explore" / "chunk-800"
    folder.mkdir(parents=True)
    write_log(folder / "instances.log", [InstanceRecord(index=0, prediction="a b", delays=[1000.0, 1000.0],
                                                        elapsed=[1000.0, 1000.0], source_length=2000.0)])
    (folder / "flags.txt").write_text("--chunk-ms 800\n", encoding="utf-8")
    (tmp_path / "translate_explore" / "unflagged").mkdir()  # (a log without its flags is not a variant)
    found = explored(tmp_path, "translate")
    assert list(found) == ["chunk-800"]
    flags, records = found["chunk-800"]
    assert flags == "--chunk-ms 800" and records[0].prediction == "a b"


def test_the_peers_logs_of_a_task_are_read_by_peer_and_chunk(tmp_path: Path) -> None:
    record = InstanceRecord(index=0, prediction="a", delays=[500.0], elapsed=[900.0], source_length=1000.0)
    for name in ("whisper-streaming_transcribe_500ms", "simulstreaming_translate_1000ms"):
        (tmp_path / name).mkdir()
        write_log(tmp_path / name / "instances.log", [record])
    assert list(read_peers(tmp_path, "transcribe")) == ["whisper-streaming 500ms"]
    assert list(read_peers(tmp_path / "missing", "transcribe")) == []  # (no folder: no peer rows)


def test_the_table_keeps_the_other_tasks_rows_and_each_task_together(tmp_path: Path) -> None:
    def row(task: str, config: str) -> dict[str, object]:
        return {"task": task, "config": config, "options": config, "n": 1, "Q1": 10.0, "AL": 1.0}

    write(tmp_path, "translate", [row("translate", "balanced")], "note", ["balanced"], False)
    write(tmp_path, "transcribe", [row("transcribe", "balanced"), row("transcribe", "peer: x 500ms")], "note",
          [], False)
    lines = [line for line in (tmp_path / "quality_latency.md").read_text(encoding="utf-8").splitlines()
             if line.startswith("| trans")]
    assert [line.split(" | ")[:2] for line in lines] == [
        ["| transcribe", "balanced"], ["| transcribe", "peer: x 500ms"], ["| translate", "balanced"]]


def _log(predictions: list[str], references: list[str]) -> list[InstanceRecord]:
    pairs = enumerate(zip(predictions, references, strict=True))
    return [InstanceRecord(index=i, prediction=p, delays=[1000.0] * len(p.split()), elapsed=[], reference=r,
                           source_length=2000.0) for i, (p, r) in pairs]


def test_grids_are_pooled_per_utterance() -> None:
    from pooled_grids import pooled_interval

    references = ["a b c d", "e f"]
    # A: grid 1 one error in utterance 0, grid 2 none; B: one error in utterance 1 on both grids.
    a = [_log(["a b c x", "e f"], references), _log(["a b c d", "e f"], references)]
    b = [_log(["a b c d", "e x"], references), _log(["a b c d", "e x"], references)]
    interval = pooled_interval("WER_whisper", a, b)
    # over both grids: A 1 error in 12 reference words, B 2 in 12
    assert interval.n == 2
    assert interval.a == pytest.approx(100 / 12) and interval.b == pytest.approx(200 / 12)
    # a resample draws utterances with both their grids: all-0 gives A 1/8, B 0; all-1 gives A 0, B 2/4
    assert interval.low == pytest.approx(-100 / 8) and interval.high == pytest.approx(50.0)
    with pytest.raises(SystemExit):
        pooled_interval("WER_whisper", a, b[:1])


def test_a_comparison_per_dev_set_keeps_each_sets_utterances_on_every_grid() -> None:
    from pooled_grids import compared, dev_set, split_by_set

    def placed(log: list[InstanceRecord], places: list[tuple[str, str]]) -> list[InstanceRecord]:
        return [dataclasses.replace(r, source=f"/data/audio/{folder}/{uid}.wav", extra={"simulst": {"id": uid}})
                for r, (folder, uid) in zip(log, places, strict=True)]

    places = [("jfk", "jfk"), ("librispeech-other-dev", "1-2-0000"), ("librispeech-other-dev", "1-2-0001"),
              ("fleurs-multi", "fleurs-de-003")]
    references = ["a b", "c d", "e f", "g h"]
    a = [placed(_log(["a b", "c x", "e f", "g h"], references), places),
         placed(_log(["a b", "c d", "e f", "g h"], references), places)]
    b = [placed(_log(["a x", "c d", "e f", "g h"], references), places),
         placed(_log(["a x", "c d", "e x", "g h"], references), places)]
    assert [dev_set(r) for r in a[0]] == ["jfk", "librispeech-other-dev", "librispeech-other-dev", "fleurs-de"]
    by_set_a, by_set_b = split_by_set(a, a[0]), split_by_set(b, a[0])
    assert list(by_set_a) == ["jfk", "librispeech-other-dev", "fleurs-de"]
    assert [[r.prediction for r in grid] for grid in by_set_b["librispeech-other-dev"]] == [["c d", "e f"],
                                                                                              ["c d", "e x"]]
    # LibriSpeech over both grids: A one error in 8 reference words, B one in 8; jfk: A none, B both grids wrong
    ls = compared("transcribe", by_set_a["librispeech-other-dev"], by_set_b["librispeech-other-dev"])
    assert (ls["n"], ls["WER_whisper_A"], ls["WER_whisper_B"]) == (2, pytest.approx(12.5), pytest.approx(12.5))
    jfk = compared("transcribe", by_set_a["jfk"], by_set_b["jfk"])
    assert (jfk["n"], jfk["WER_whisper_A"], jfk["WER_whisper_B"]) == (1, 0.0, pytest.approx(50.0))
    with pytest.raises(SystemExit):
        split_by_set([a[0][:3]], a[0])


def test_words_only_drops_punctuation_units_with_their_delays() -> None:
    from pooled_grids import mean_al, words_only

    record = InstanceRecord(index=0, prediction="ask not . what your ,", delays=[500.0, 1000.0, 1500.0, 2000.0,
                            2500.0, 3000.0], elapsed=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], reference="ask not what your",
                            source_length=4000.0)
    words = words_only(record)
    assert words.prediction == "ask not what your" and words.prediction_length == 4
    assert words.delays == [500.0, 1000.0, 2000.0, 2500.0] and words.elapsed == [1.0, 2.0, 4.0, 5.0]
    # AL, |X| = 4000 ms over |Y*| = 4 reference words (1000 ms a step), no delay reaches |X|: over the words
    # (500 - 0) + (1000 - 1000) + (2000 - 2000) + (2500 - 3000) = 0 in 4; with the marks as units the words after
    # them sit further along the ideal line: 500 + 0 + (1500 - 2000) + (2000 - 3000) + (2500 - 4000) + (3000 - 5000)
    assert mean_al("transcribe", [words]) == pytest.approx(0.0)
    assert mean_al("transcribe", [record]) == pytest.approx((500 + 0 - 500 - 1000 - 1500 - 2000) / 6 / 1000.0)
    with pytest.raises(SystemExit):
        words_only(dataclasses.replace(record, delays=[1.0]))


def test_agreement_with_offline_is_pooled_over_grids_and_grid_variants_are_not_paired() -> None:
    from translate_agreement import GRID, parse_pool, pooled_rows

    offline = ["a b c d", "e f"]
    logs = {"offline": _log(offline, ["", ""]),
            "x": _log(["a b c d", "e f"], ["", ""]), "x-grid-1": _log(["a b c d", "e f"], ["", ""]),
            "y": _log(["a b c d", "e f"], ["", ""]), "y-grid-1": _log(["q r s t", "e f"], ["", ""])}
    [row] = pooled_rows(logs, "toy", [parse_pool("x,x-grid-1:y,y-grid-1")])
    assert row["config"] == "y,y-grid-1 − x,x-grid-1" and row["n"] == 2
    assert str(row["BLEU_vs_offline"]).startswith("-")  # y's second grid misses utterance 0 of offline's output
    assert pooled_rows(logs, "toy", [parse_pool("x:z")]) == []  # (a log not kept: no row)
    with pytest.raises(SystemExit):
        parse_pool("x,x-grid-1:y")
    assert GRID.search("chunk-800-grid-2") and not GRID.search("chunk-800")


def test_translate_agreement_scores_against_the_named_reference() -> None:
    from translate_agreement import agreement_rows

    logs = {"offline": _log(["a b c d", "e f g h"], ["", ""]), "offline-b3": _log(["a b c d", "q r s t"], ["", ""]),
            "x": _log(["a b c d", "q r s t"], ["", ""])}
    by_greedy = {r["config"]: r["BLEU_vs_offline"] for r in agreement_rows(logs, "toy", [])}
    by_beam = {r["config"]: r["BLEU_vs_offline"] for r in agreement_rows(logs, "toy", [], "offline-b3")}
    assert set(by_beam) == {"offline", "x"}  # (the reference is not scored against itself)
    assert by_beam["x"] == pytest.approx(100.0) and by_greedy["x"] < 99.0


def test_translate_agreement_per_language_splits_by_the_utterance_ids_language() -> None:
    from translate_agreement import de_fr_name, per_language_rows

    def log(ids: list[str], predictions: list[str]) -> list[InstanceRecord]:
        records = _log(predictions, ["a b c d e f g h"] * len(ids))
        for record, uid in zip(records, ids, strict=True):
            record.extra["simulst"] = {"id": uid}
        return records

    de, pt = ["fleurs-de-000", "fleurs-de-001"], ["fleurs-pt-000", "fleurs-pt-001"]
    reference = ["a b c d e f g h", "i j k l m n o p"]
    logs = {"offline-b3": (log(pt, reference), log(de, reference)),
            "x": (log(pt, ["q r s t u v w y", "q r s t u v w y"]), log(de, reference))}
    language_of = {uid: uid.split("-")[1] for uid in de + pt}
    rows = {(r["language"], r["config"]): r for r in per_language_rows(logs, "offline-b3", language_of)}
    assert set(rows) == {("de", "x"), ("pt", "x")}  # (no row for a language with no utterance)
    assert rows["de", "x"]["BLEU_vs_offline"] == pytest.approx(100.0)  # x writes offline-b3's German outputs
    assert rows["pt", "x"]["BLEU_vs_offline"] == pytest.approx(0.0)  # and none of its Portuguese words
    assert rows["de", "x"]["n"] == rows["pt", "x"]["n"] == 2
    assert "BLEU_vs_reference" in rows["de", "x"] and "BLEU_vs_reference" not in rows["pt", "x"]
    assert de_fr_name("tbal=balanced") == "balanced" and de_fr_name("offline") == "offline"
