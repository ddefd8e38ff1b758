"""The shared report builder and the metric registries that scoring and the CLI read.

Short-form (:func:`score_records`) and long-form (:func:`score_longform`) scores are built by one
:class:`ReportBuilder`; a metric registered in a registry is scored, offered by the CLI and named by its errors
without another edit. A one-sentence talk whose segment is the whole audio is a short-form instance: its
long-form StreamLAAL is the instance's LAAL and its BLEU the instance's BLEU.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulst.cli.main import main
from simulst.config.registry import Registry
from simulst.errors import OptionError
from simulst.evaluation.instances import InstanceRecord, write_log
from simulst.evaluation.latency import LATENCY_METRICS, DelayMetric, register_formula
from simulst.evaluation.longform import (
    LONGFORM_METRICS,
    OMNISTEVAL_KEYS,
    RESEGMENTERS,
    LongformMetric,
    LongformOptions,
    Segment,
    SentenceOutput,
    align_to_sentences,
    get_longform_metric,
    register_longform_metric,
    score_longform,
)
from simulst.evaluation.quality import QUALITY_METRICS, QUALITY_REGISTRY, quality_scores
from simulst.evaluation.report import ReportBuilder, format_table, instances_to_score, latency_names, tsv_text
from simulst.evaluation.scoring import ScoreOptions, score_records

# ------------------------------------------------------------------------------------------------ the builder


def test_builder_rows_scores_and_latency_means() -> None:
    builder = ReportBuilder([{"index": 0}, {"index": 1}, {"index": 2}])
    builder.add_scores({"BLEU": 12.5})
    builder.add_latency(["AL", "AL_CA"], lambda name: [1000.0, None, 2000.0] if name == "AL" else [None] * 3)
    builder.add_metric("Emissions", 2.0, [1, 2, 3])
    builder.note("one skipped")
    report = builder.report()
    # the corpus latency is the mean of the items scored (1000 + 2000) / 2; None when none is
    assert report.scores == {"BLEU": 12.5, "AL": 1500.0, "AL_CA": None, "Emissions": 2.0}
    assert report.per_instance[1] == {"index": 1, "AL": None, "AL_CA": None, "Emissions": 2}
    assert report.notes == ["one skipped"]
    # TSV columns: every key, first-seen order; None is an empty field, floats are repr'd
    assert tsv_text(report.per_instance).splitlines()[:2] == ["index\tAL\tAL_CA\tEmissions", "0\t1000.0\t\t1"]
    assert format_table(report).splitlines()[-1] == "note: one skipped"


def test_builder_columns_must_cover_every_row() -> None:
    builder = ReportBuilder([{"index": 0}, {"index": 1}])
    with pytest.raises(ValueError):
        builder.add_column("x", [1.0])


def test_latency_names_put_every_ca_form_last() -> None:
    assert latency_names(["AL", "LAAL"], False) == ["AL", "LAAL"]
    assert latency_names(["AL", "LAAL"], True) == ["AL", "LAAL", "AL_CA", "LAAL_CA"]


def test_instances_to_score_sorts_and_refuses_an_empty_log() -> None:
    records = [InstanceRecord(index=i, prediction="", delays=[]) for i in (2, 0, 1)]
    assert [r.index for r in instances_to_score(records)] == [0, 1, 2]
    with pytest.raises(OptionError, match="nothing to score"):
        instances_to_score([])


# ------------------------------------------------------------------------------------------------ registries


def test_registry_refuses_a_second_entry_and_names_the_choices() -> None:
    things: Registry[int] = Registry("thing")
    things.register("one")(1)
    with pytest.raises(ValueError, match="a thing named 'one' is already registered"):
        things.register("one")(2)
    with pytest.raises(OptionError, match=r"unknown thing 'two'; choose one of one"):
        things.lookup("two")


def test_registries_hold_the_named_parts_in_order() -> None:
    assert list(LATENCY_METRICS) == ["AL", "LAAL", "AP", "DAL", "ATD", "StartOffset", "EndOffset", "NumChunks", "RTF"]
    assert QUALITY_METRICS == tuple(QUALITY_REGISTRY) == ("BLEU", "chrF", "WER", "WER_norm", "WER_whisper")
    assert list(LONGFORM_METRICS) == ["StreamLAAL", "LongYAAL"]
    assert list(RESEGMENTERS) == ["soft", "mwer"]
    assert OMNISTEVAL_KEYS == {"BLEU": "bleu", "chrF": "chrf", "StreamLAAL": "long_laal",
                               "StreamLAAL_CA": "ca_long_laal", "LongYAAL": "long_yaal", "LongYAAL_CA": "ca_long_yaal"}
    for name, cls in LONGFORM_METRICS.items():
        assert cls.name == name and cls.__doc__
    with pytest.raises(OptionError, match="unknown long-form latency metric 'AL'; choose one of StreamLAAL, LongYAAL"):
        get_longform_metric("AL")
    with pytest.raises(OptionError,
                       match="unknown quality metric 'METEOR'; choose one of BLEU, chrF, WER, WER_norm, WER_whisper"):
        quality_scores(["METEOR"], ["a"], ["a"])


def test_resegmenters_say_which_units_they_align() -> None:
    with pytest.raises(OptionError, match="the mwer resegmenter aligns words; use the soft resegmenter for the char"):
        align_to_sentences(list("ab"), ["ab"], method="mwer", unit="char")
    with pytest.raises(OptionError, match="unknown resegmenter 'dtw'; choose one of soft, mwer"):
        align_to_sentences(["a"], ["a"], method="dtw")


@pytest.fixture
def last_word_metric() -> Iterator[str]:
    """A short-form metric registered for one test: the delay of the last output unit."""

    @register_formula("LastDelay", DelayMetric)
    def last_delay(d: Sequence[float]) -> float:
        """LastDelay = d_|Y| (a test metric)."""
        return d[-1]

    yield "LastDelay"
    LATENCY_METRICS.unregister("LastDelay")


@pytest.fixture
def first_delay_metric() -> Iterator[str]:
    """A long-form metric registered for one test: a sentence's first delay."""

    @register_longform_metric("FirstDelay", "first_delay")
    class FirstDelay(LongformMetric):
        """FirstDelay = d_1 of the sentence (a test metric)."""

        def formula(self, d: Sequence[float], s: SentenceOutput, y_ref: int) -> float | None:
            return d[0]

    yield "FirstDelay"
    LONGFORM_METRICS.unregister("FirstDelay")


def _log(folder: Path) -> None:
    write_log(folder / "instances.log", [
        InstanceRecord(index=0, prediction="a b c", delays=[1000.0, 1500.0, 2500.0], reference="a b c",
                       source="talk.wav", source_length=3000.0),
    ])
    (folder / "refs.txt").write_text("a b c\n", encoding="utf-8")
    (folder / "segments.json").write_text(json.dumps([{"wav": "talk.wav", "offset": 0.0, "duration": 3.0}]),
                                          encoding="utf-8")


def test_a_registered_metric_is_scored_and_offered_by_the_cli(
    last_word_metric: str, first_delay_metric: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _log(tmp_path)
    assert main(["score", str(tmp_path), "--json", "--latency-metrics", "AL", last_word_metric]) == 0
    assert json.loads(capsys.readouterr().out)["LastDelay"] == 2500.0
    long_form = ["score", str(tmp_path), "--long-form", "--references", str(tmp_path / "refs.txt"),
                 "--segmentation", str(tmp_path / "segments.json"), "--json"]
    assert main([*long_form, "--latency-metrics", first_delay_metric, "--quality-metrics", "WER"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["FirstDelay"] == 1000.0 and scores["WER"] == 0.0
    assert "StreamLAAL" not in scores and "BLEU" not in scores
    # every registered long-form metric is scored by default
    assert main(long_form) == 0
    assert {"StreamLAAL", "LongYAAL", "FirstDelay"} <= set(json.loads(capsys.readouterr().out))


def test_the_cli_keeps_short_and_long_form_metrics_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _log(tmp_path)
    assert main(["score", str(tmp_path), "--latency-metrics", "StreamLAAL"]) == 2
    assert "StreamLAAL: long-form latency metrics, scored with --long-form" in capsys.readouterr().err
    long_form = ["score", str(tmp_path), "--long-form", "--references", str(tmp_path / "refs.txt"),
                 "--segmentation", str(tmp_path / "segments.json")]
    assert main([*long_form, "--latency-metrics", "AL"]) == 2
    assert "unknown long-form latency metric 'AL'" in capsys.readouterr().err
    assert main([*long_form, "--eval-latency-unit", "char", "--quality-metrics", "BLEU", "WER"]) == 2
    assert "WER count words: not scored at the char unit" in capsys.readouterr().err


def test_longform_options_choose_the_metrics() -> None:
    rec = InstanceRecord(index=0, prediction="a b c d e", delays=[2000, 2500, 3500, 5000, 8000],
                         elapsed=[2100, 2700, 3800, 5400, 8500], source="talk.wav")
    segments = [Segment("talk.wav", 1.0, 2.0), Segment("talk.wav", 4.0, 3.0)]
    options = LongformOptions(latency_metrics=("LongYAAL",), quality_metrics=("chrF",))
    report = score_longform([rec], ["a b c", "d e"], segments, options)
    assert list(report.scores)[:3] == ["chrF", "LongYAAL", "LongYAAL_CA"]
    assert report.scores["LongYAAL"] == pytest.approx(1000.0)
    assert "LongYAAL" in report.per_instance[0] and "StreamLAAL" not in report.per_instance[0]
    assert LongformOptions(unit="char").quality == ("BLEU", "chrF")
    assert LongformOptions().latency == ("StreamLAAL", "LongYAAL")


# ------------------------------------------------------------------------------------------------ short = long


WORDS = st.sampled_from("the a of to and in is it that for you was on are with as".split())


@settings(max_examples=40, deadline=None)
@given(
    hyp=st.lists(WORDS, min_size=1, max_size=8),
    ref=st.lists(WORDS, min_size=1, max_size=8),
    steps=st.lists(st.integers(0, 900), min_size=8, max_size=8),
    source_s=st.integers(1, 6),
)
def test_one_sentence_talk_scores_as_its_short_form_instance(
    hyp: list[str], ref: list[str], steps: list[int], source_s: int
) -> None:
    delays = [float(sum(steps[: k + 1])) for k in range(len(hyp))]  # monotone, possibly past |X|
    rec = InstanceRecord(index=0, prediction=" ".join(hyp), delays=delays, reference=" ".join(ref),
                         source="talk.wav", source_length=source_s * 1000.0)
    short = score_records([rec], ScoreOptions(latency_metrics=("LAAL",), quality_metrics=("BLEU", "WER")))
    long = score_longform([rec], [" ".join(ref)], [Segment("talk.wav", 0.0, float(source_s))])
    assert long.scores["DroppedUnits"] == 0
    assert long.scores["BLEU"] == short.scores["BLEU"] and long.scores["WER"] == short.scores["WER"]
    laal, stream_laal = short.scores["LAAL"], long.scores["StreamLAAL"]
    assert isinstance(laal, float) and isinstance(stream_laal, float)
    assert math.isclose(stream_laal, laal, rel_tol=0, abs_tol=1e-9)
