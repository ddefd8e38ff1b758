"""bench/longform.py's intervals pooled over talks and over chunk grids, and its per-sentence outputs, on
hand-worked toy runs."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import pytest

from longform import (
    PhaseRun,
    config_options,
    merge_phase_outputs,
    phase_intervals,
    pooled_intervals,
    read_phase_outputs,
    rescore_phases,
    words_only,
    write_hypotheses,
    write_phase_outputs,
    write_sentences,
)
from simulst.config import PolicyOptions, StreamOptions


def run(talk: str, config: str) -> dict[str, Any]:
    return {"talk": talk, "config": config, "clock": "simulated", "WER_norm": 0.0}  # (a transcription row)


ROWS = [run("en-talk", "segment-10"), run("en-talk", "default"), run("ls-readings", "segment-10"),
        run("ls-readings", "default"), run("en-talk", "vad")]
REFERENCES = [["a b c", "d e"], ["a b c", "d e"], ["f g", "h"], ["f g", "h"], ["a b c", "d e"]]
HYPOTHESES = [["a b c", "d e"], ["a b x", "d e"], ["f g", "h"], ["f", "h i"], ["a b c", "d"]]


def test_the_pooled_interval_scores_every_talks_sentences_together() -> None:
    # the default: 1 substitution (x), 1 deletion (g), 1 insertion (i) over 3 + 2 + 2 + 1 = 8 words = 37.5 %;
    # segment-10 reads every sentence right; vad ran on one talk only, so it has no pooled row
    (row,) = pooled_intervals(ROWS, HYPOTHESES, REFERENCES)
    assert (row["config"], row["talks"], row["sentences"]) == ("segment-10", "en-talk + ls-readings", 4)
    assert (row["quality"], row["default_quality"]) == (0.0, 37.5)
    assert row["vs_default"].startswith("-37.50 [")


def test_translation_talks_are_pooled_apart_from_the_english_ones() -> None:
    # the same runs as BLEU rows (no WER_norm) of two translated talks: pooled by BLEU, never with a WER row
    rows = [{k: v for k, v in r.items() if k != "WER_norm"} | {"talk": r["talk"].replace("en-", "de-")
                                                                 .replace("ls-readings", "fr-talk")} for r in ROWS]
    (row,) = pooled_intervals(rows, HYPOTHESES, REFERENCES)
    assert (row["metric"], row["config"], row["talks"], row["sentences"]) == ("BLEU", "segment-10",
                                                                               "de-talk + fr-talk", 4)
    mixed = [rows[0], rows[1], ROWS[2], ROWS[3]]  # a translated talk and an English one: one talk of each task
    assert pooled_intervals(mixed, HYPOTHESES[:4], REFERENCES[:4]) == []


def test_default_is_the_tasks_balanced_preset_and_a_config_changes_only_what_it_names() -> None:
    _, en = config_options("en", "default")
    _, de = config_options("de", "default")
    assert (en.chunk_ms, en.segment_s, en.max_buffer_s, en.punctuate_held_end) == (500.0, 10.0, 24.0, True)
    assert config_options("en", "c500") == config_options("en", "default")  # (the preset, as measured)
    _, buffer_24 = config_options("en", "buffer-24")  # (measured alone on 2026-12-01)
    assert buffer_24 == dataclasses.replace(en, punctuate_held_end=False)
    assert config_options("en", "reencode-2") == config_options("en", "default")  # (the preset since 2026-12-02 13:00)
    _, punct_held_24 = config_options("en", "punct-held-24")  # (the preset 2026-12-02 03:00-13:00)
    assert punct_held_24 == dataclasses.replace(en, reencode_s=None)
    _, sixteen = config_options("en", "segment-10")  # (the balanced preset's cuts before 2026-12-02)
    assert sixteen == dataclasses.replace(en, max_buffer_s=16.0)
    _, cuts = config_options("en", "buffer-8")  # (the bare option defaults' cuts: the default before)
    bare = StreamOptions()
    assert cuts == dataclasses.replace(en, segment_s=bare.segment_s, max_buffer_s=bare.max_buffer_s)
    assert (de.chunk_ms, de.segment_s, de.max_buffer_s) == (1000.0, 10.0, 30.0)
    model, vad = config_options("de", "vad")
    assert (model.task, model.language) == ("translate", "de")
    assert vad == dataclasses.replace(de, vad=True)
    _, accurate = config_options("en", "accurate")
    assert (accurate.chunk_ms, accurate.max_buffer_s, accurate.policy) == (1000.0, 16.0, PolicyOptions("la", 2))
    # (the preset, as measured: over the balanced preset of then, before it re-encoded 2 s)
    model, c1000 = config_options("en", "c1000-la-2")
    assert (model, dataclasses.replace(c1000, reencode_s=None)) == config_options("en", "accurate")


def test_every_sentence_output_is_written_on_one_line(tmp_path: Path) -> None:
    path = tmp_path / "hypotheses.tsv"
    write_hypotheses(path, ROWS[:1], [["a\tb", "c\n d"]], [["a b", "c d"]])
    assert path.read_text(encoding="utf-8").splitlines() == [
        "talk\tconfig\tclock\tsentence\treference\thypothesis",
        "en-talk\tsegment-10\tsimulated\t0\ta b\ta b", "en-talk\tsegment-10\tsimulated\t1\tc d\tc d"]


def test_the_interval_over_grids_sums_each_sentences_errors_over_its_grids() -> None:
    # en default, grid 0: 1 substitution (x); grid 1: 1 deletion (e): 2 errors in 2 x 5 words = 20 %; ls default:
    # 1 error (g) in 2 x 3 words; segment-10 reads en right on both grids and ls with 1 insertion (i) on grid 1:
    # pooled, the default 3 errors in 16 words (18.75 %), segment-10 1 (6.25 %); vad ran on en only: 2 errors in
    # 10 words (c deleted, x inserted), as many as the default, one in each sentence as the default's. Each talk has
    # its own rows too: segment-10 on en 0 % against 20 %, on ls 1 error in 6 words as the default.
    # Delays (ms; None: no output): the default's 7 delays with output sum to 8000 ms (1.143 s), segment-10's 8 to
    # 7800 ms (0.975 s); on en alone the default's 3 sum to 4000 ms, vad's 4 to 6000 ms (1.5 s)
    en_refs, ls_refs = ["a b c", "d e"], ["f g", "h"]
    runs = [PhaseRun("en-talk", "default", "WER_whisper", [["a b x", "d e"], ["a b c", "d"]],
                     [[1000, 2000], [1000, None]], en_refs),
            PhaseRun("ls-readings", "default", "WER_whisper", [["f g", "h"], ["f", "h"]],
                     [[500, 1500], [500, 1500]], ls_refs),
            PhaseRun("en-talk", "segment-10", "WER_whisper", [["a b c", "d e"], ["a b c", "d e"]],
                     [[800, 1600], [800, 1600]], en_refs),
            PhaseRun("ls-readings", "segment-10", "WER_whisper", [["f g", "h"], ["f g", "h i"]],
                     [[500, 1000], [500, 1000]], ls_refs),
            PhaseRun("en-talk", "vad", "WER_whisper", [["a b c", "d e"], ["a b", "d e x"]],
                     [[1000, 2000], [1000, 2000]], en_refs)]
    segment_en, segment_ls, segment, vad = phase_intervals(runs)  # (each talk, then the talks pooled)
    assert (segment_en["talks"], segment_en["sentences"], segment_en["quality"], segment_en["default_quality"]) \
        == ("en-talk", 2, 0.0, 20.0)
    assert (segment_ls["talks"], segment_ls["quality"]) == ("ls-readings", pytest.approx(100 / 6))
    assert (segment_en["StreamLAAL"], segment_en["default_StreamLAAL"]) == pytest.approx((1.2, 4.0 / 3))
    assert (segment_ls["StreamLAAL"], segment_ls["default_StreamLAAL"]) == pytest.approx((0.75, 1.0))
    assert (segment["config"], segment["talks"], segment["phases"], segment["sentences"]) == \
        ("segment-10", "en-talk + ls-readings", 2, 4)
    assert (segment["quality"], segment["default_quality"]) == (6.25, 18.75)
    assert segment["vs_default"].startswith("-12.50 [")
    assert (vad["talks"], vad["sentences"], vad["quality"], vad["default_quality"]) == ("en-talk", 2, 20.0, 20.0)
    assert vad["vs_default"] == "+0.00 [+0.00, +0.00]"
    assert (segment["StreamLAAL"], segment["default_StreamLAAL"]) == pytest.approx((0.975, 8.0 / 7))
    assert segment["AL_vs_default"].startswith(f"{0.975 - 8.0 / 7:+.2f} [")
    assert (vad["StreamLAAL"], vad["default_StreamLAAL"]) == pytest.approx((1.5, 4.0 / 3))
    # a resample of sentence 0 alone reads 1.0 s on both; of sentence 1 alone 2.0 s on both: the interval holds 0
    low, high = (float(x) for x in vad["AL_vs_default"].split("[")[1].rstrip("]").split(","))
    assert low <= 0.0 <= high


def test_grid_delays_are_written_beside_their_sentences(tmp_path: Path) -> None:
    path = tmp_path / "phases.tsv"
    write_sentences(path, ["talk", "config", "phase"], [(["en-talk", "default", "0"], ["a b", "c"], ["a b", ""])],
                    [[1234.4, None]])
    assert path.read_text(encoding="utf-8").splitlines() == [
        "talk\tconfig\tphase\tsentence\treference\thypothesis\tStreamLAAL",
        "en-talk\tdefault\t0\t0\ta b\ta b\t1.234", "en-talk\tdefault\t0\t1\tc\t\t"]


def test_kept_phase_outputs_are_rescored_against_a_default_kept_elsewhere(tmp_path: Path) -> None:
    # two folders as two --phases runs leave them: the default alone, then vad alone; the rescore of the second
    # against the first reads the same runs back (delays to the millisecond) and compares them as one run would
    refs = ["a b c", "d e"]
    default = PhaseRun("en-talk", "default", "WER_whisper", [["a b x", "d e"], ["a b c", "d"]],
                       [[1000.0, 2000.0], [1000.0, None]], refs)
    vad = PhaseRun("en-talk", "vad", "WER_whisper", [["a b c", "d e"], ["a b", "d e x"]],
                   [[1000.0, 2000.0], [1000.4, 2000.0]], refs)
    row = {"talk": "en-talk", "config": "vad", "phase": "mean", "quality": 20.0, "StreamLAAL": 1.5}
    for name, run in (("base", default), ("vad", vad)):
        (tmp_path / name).mkdir()
        write_phase_outputs([row], [run], tmp_path / name)
    (tmp_path / "vad" / "longform_phases.md").write_text("# old\n\nRun: 2026-11-26 19:00 UTC, quiet.\n\n## Reading\n\n"
                                                         "kept\n", encoding="utf-8")
    rows, runs = read_phase_outputs(tmp_path / "vad")
    assert rows == [row]
    assert runs == [dataclasses.replace(vad, delays=[[1000.0, 2000.0], [1000.0, 2000.0]])]
    rescore_phases(tmp_path / "vad", tmp_path / "base")
    page = (tmp_path / "vad" / "longform_phases.md").read_text(encoding="utf-8")
    assert "Run: 2026-11-26 19:00 UTC, quiet; rescored from the kept outputs " in page
    assert "kept in [`base/`](../base/longform_phases.md)" in page
    assert page.endswith("## Reading\n\nkept\n")
    (expected,) = phase_intervals([default, vad])
    assert f"| {expected['vs_default']} |" in page and f"| {expected['AL_vs_default']} |" in page
    rescore_phases(tmp_path / "vad", tmp_path / "base")  # a second rescore notes one rescore
    assert (tmp_path / "vad" / "longform_phases.md").read_text(encoding="utf-8").count("rescored") == 1


def test_outputs_kept_in_several_folders_are_merged_and_compared_with_a_named_baseline(tmp_path: Path) -> None:
    refs = ["a b c", "d e"]
    low = PhaseRun("en-mix", "default", "WER_whisper", [["a b x", "d e"]], [[1000.0, 2000.0]], refs)
    hold = PhaseRun("en-mix", "low-hold-end", "WER_whisper", [["a b c", "d e"]], [[1000.0, 2500.0]], refs)
    talk = PhaseRun("en-talk", "low-hold-end", "WER_whisper", [["a b c", "d"]], [[900.0, None]], refs)

    def row(run: PhaseRun) -> dict[str, Any]:
        return {"talk": run.talk, "config": run.config, "phase": "0", "quality": 1.0}

    for name, runs in (("one", [low, hold]), ("two", [hold, talk])):
        (tmp_path / name).mkdir()
        write_phase_outputs([row(run) for run in runs], runs, tmp_path / name)
    # the preset's rows kept under `default` take their own name again; `hold` is kept by both folders alike
    rows, runs = merge_phase_outputs([f"{tmp_path / 'one'}:default=low", f"{tmp_path / 'one'}:low-hold-end",
                                      str(tmp_path / "two")])
    named = dataclasses.replace(low, config="low")
    assert runs == [named, hold, talk]
    assert [(r["talk"], r["config"]) for r in rows] == [("en-mix", "low"), ("en-mix", "low-hold-end"),
                                                         ("en-talk", "low-hold-end")]
    assert merge_phase_outputs([f"{tmp_path / 'two'}:low-hold-end"])[1] == [hold, talk]
    with pytest.raises(SystemExit, match="other outputs"):
        merge_phase_outputs([f"{tmp_path / 'one'}:default=low-hold-end", str(tmp_path / "two")])
    with pytest.raises(SystemExit, match="keeps no runs of vad"):
        merge_phase_outputs([f"{tmp_path / 'one'}:vad"])

    out = tmp_path / "merged"
    rescore_phases(out, None, [f"{tmp_path / 'one'}:default=low", str(tmp_path / "two")], baseline="low")
    assert read_phase_outputs(out)[1] == [named, hold, talk]  # (the merged outputs are kept)
    page = (out / "longform_phases.md").read_text(encoding="utf-8")
    assert "## Against `low` over all grids" in page and "Run: not recorded; outputs merged from `" in page
    (expected,) = phase_intervals([named, hold, talk], baseline="low")  # (en-talk has no `low` run)
    assert expected["config"] == "low-hold-end" and f"| {expected['vs_default']} |" in page
    with pytest.raises(SystemExit, match="--baseline low"):
        rescore_phases(out, None, [str(tmp_path / "two")], baseline="low")
    rescore_phases(out, None, [str(tmp_path / "two")])  # (no `default` and none asked for: the table alone)
    assert "## Against" not in (out / "longform_phases.md").read_text(encoding="utf-8")
    with pytest.raises(SystemExit, match="one or the other"):
        rescore_phases(out, tmp_path / "one", [str(tmp_path / "two")])


def test_words_only_leaves_out_the_marks_emitted_on_their_own() -> None:
    out = {"text": "Ask not , what your .", "delays": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "elapsed": [], "rss": [7.0]}
    words = words_only(out)
    assert words == {"text": "Ask not what your", "delays": [1.0, 2.0, 4.0, 5.0], "elapsed": [], "rss": [7.0]}
    with pytest.raises(SystemExit):
        words_only(out | {"elapsed": [1.0]})
