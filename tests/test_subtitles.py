"""Live subtitles: captions cut and timed by hand-worked rules, exact text for any stream, and the CLI end to end."""

from __future__ import annotations

import io
import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from hypothesis import given, settings
from hypothesis import strategies as st

from simulst.cli.main import build_parser, main
from simulst.cli.printing import StreamOutput
from simulst.streaming.subtitles import (
    CaptionLimits,
    SubtitleWriter,
    format_timestamp,
    parse_captions,
    render_subtitles,
)
from simulst.types import Emission
from tests.shared_assets import JFK, WHISPER_TINY_EN, needs_shared

MODEL = ["--model", str(WHISPER_TINY_EN)]


def em(text: str, ms: float, final: bool = False) -> Emission:
    return Emission(text, (), ms, ms, final)


# A stream that exercises every rule: a full caption (42-character lines), a pause (3 s without commits), a
# sentence end that arrives as its own emission, a sentence end followed quickly by the next words, and the end.
STREAM = [
    em(" And so, my", 1000.0),
    em(" fellow Americans,", 2000.0),
    em(" ask not what your country can do for you,", 4000.0),
    em(" ask what you can do", 6000.0),  # "can" does not fit: caption 1 ends when "can" was committed
    em(" for your country.", 9000.0),  # 3 s after "do": the pause closes caption 2 at 6 + 1.5 s
    em(" Thank you", 9500.0),  # "country." closed caption 3; "Thank" (9.5 s) comes before 9 + 1.5 s
    em(".", 13000.0),  # the sentence end continues the word "you"
    em(" Bye now.", 16000.0, final=True),
]

EXPECTED_SRT = """\
1
00:00:01,000 --> 00:00:06,000
And so, my fellow Americans, ask not what
your country can do for you, ask what you

2
00:00:06,000 --> 00:00:07,500
can do

3
00:00:09,000 --> 00:00:09,500
for your country.

4
00:00:09,500 --> 00:00:14,500
Thank you.

5
00:00:16,000 --> 00:00:17,000
Bye now.

"""

EXPECTED_VTT = """\
WEBVTT

00:00:01.000 --> 00:00:06.000
And so, my fellow Americans, ask not what
your country can do for you, ask what you

00:00:06.000 --> 00:00:07.500
can do

00:00:09.000 --> 00:00:09.500
for your country.

00:00:09.500 --> 00:00:14.500
Thank you.

00:00:16.000 --> 00:00:17.000
Bye now.

"""


def test_hand_worked_srt_and_vtt() -> None:
    assert render_subtitles(STREAM, "srt", end_ms=17000.0) == EXPECTED_SRT
    assert render_subtitles(STREAM, "vtt", end_ms=17000.0) == EXPECTED_VTT
    assert [c.text for c in parse_captions(EXPECTED_VTT)] == [c.text for c in parse_captions(EXPECTED_SRT)]


def test_each_caption_is_written_and_flushed_as_it_closes() -> None:
    sink = io.StringIO()
    writer = SubtitleWriter(sink, "srt")
    written = [[c.index for c in writer.add(e)] for e in STREAM]
    # Caption 1 closes when "can" (6 s) does not fit; 2 (pause) and 3 (sentence) when the next words arrive;
    # "you." is complete when " Bye" arrives; the final emission's "now." waits for close().
    assert written == [[], [], [], [1], [2], [3], [], [4]]
    assert sink.getvalue() == EXPECTED_SRT[: EXPECTED_SRT.index("5\n00:00:16,000")]
    assert [c.index for c in writer.close(17000.0)] == [5]
    assert sink.getvalue() == EXPECTED_SRT
    assert writer.close(20000.0) == []  # idempotent


def test_burst_of_text_and_long_words() -> None:
    long_word = "Pneumonoultramicroscopicsilicovolcanoconiosis-like"  # 50 characters: a line of its own
    text = f" one two {long_word} three four five six seven eight nine ten eleven twelve thirteen fourteen"
    srt = render_subtitles([em(text, 11000.0, final=True)], "srt", end_ms=11000.0)
    captions = parse_captions(srt)
    assert captions[0].lines == ("one two", long_word)  # the long word is not split, nor put after "two"
    assert " ".join(c.text for c in captions) == " ".join(text.split())
    # All committed at once (as the offline policy does): each shown for min_ms, one after the other.
    assert [(c.start_ms, c.end_ms) for c in captions] == [(11000.0, 11500.0), (11500.0, 12000.0)]


def test_vtt_escapes_and_empty_streams() -> None:
    vtt = render_subtitles([em(" a < b && c --> d", 500.0)], "vtt", end_ms=2000.0)
    assert "a &lt; b &amp;&amp; c --&gt; d" in vtt
    assert parse_captions(vtt)[0].text == "a < b && c --> d"
    assert render_subtitles([], "vtt") == "WEBVTT\n\n"
    assert render_subtitles([em("   ", 100.0)], "srt", end_ms=1000.0) == ""


def test_timestamps() -> None:
    assert format_timestamp(3_723_004.4, "srt") == "01:02:03,004"
    assert format_timestamp(3_723_004.6, "vtt") == "01:02:03.005"
    assert format_timestamp(-5.0, "srt") == "00:00:00,000"
    assert format_timestamp(100 * 3_600_000.0, "vtt") == "100:00:00.000"


def test_bad_arguments() -> None:
    from simulst.errors import OptionError

    with pytest.raises(OptionError):
        SubtitleWriter(io.StringIO(), "ass")
    with pytest.raises(OptionError):
        CaptionLimits(max_chars=0)
    writer = SubtitleWriter(io.StringIO(), "srt")
    writer.close(0.0)
    with pytest.raises(RuntimeError):
        writer.add(em(" late", 1.0))


# ---------------------------------------------------------------------------------------------- any stream
WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz.,?!'é-", min_size=1, max_size=12) | st.sampled_from(
    ["x" * 50, "3.", "5", "U.S.", "well-", "known", "…", "”"]
)
SPACE = st.sampled_from(["", " ", " ", "  ", "\n", "\t "])


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[Emission], float, CaptionLimits]:
    n = draw(st.integers(0, 25))
    ms = draw(st.floats(0.0, 2000.0))
    emissions = []
    for i in range(n):
        pieces = draw(st.lists(st.tuples(SPACE, WORDS), min_size=0, max_size=6))
        text = "".join(space + word for space, word in pieces) + draw(SPACE)
        ms += draw(st.sampled_from([0.0, 1.0, 120.0, 1000.0]) | st.floats(0.0, 5000.0))
        emissions.append(Emission(text, (), ms, ms, final=i == n - 1))
    end_ms = ms + draw(st.floats(0.0, 3000.0))
    limits = CaptionLimits(max_chars=draw(st.sampled_from([42, 42, 10, 1])), max_lines=draw(st.integers(1, 3)),
                           merge_short=draw(st.booleans()))
    return emissions, end_ms, limits


@settings(max_examples=200, deadline=None)
@given(streams(), st.sampled_from(["srt", "vtt"]))
def test_any_stream_captions_are_exact_and_ordered(
    stream: tuple[list[Emission], float, CaptionLimits], fmt: str
) -> None:
    emissions, end_ms, limits = stream
    sink = io.StringIO()
    writer = SubtitleWriter(sink, fmt, limits)
    for e in emissions:
        writer.add(e)
    writer.close(end_ms)
    captions = parse_captions(sink.getvalue())
    assert captions == writer.captions  # what is written is what the writer reports
    text = "".join(e.text for e in emissions)
    assert " ".join(c.text for c in captions) == " ".join(text.split())
    previous_end = 0.0
    for c in captions:
        assert 0.0 <= previous_end <= c.start_ms < c.end_ms  # monotone, no overlap
        previous_end = c.end_ms
        assert 1 <= len(c.lines) <= limits.max_lines
        for line in c.lines:
            assert line and line == line.strip() and "  " not in line
            assert len(line) <= limits.max_chars or " " not in line  # only a single word may be longer
    if captions:
        first_commit = min(e.source_ms for e in emissions if e.text.strip())
        assert captions[0].start_ms == pytest.approx(first_commit, abs=0.5)
        assert captions[-1].end_ms >= min(end_ms, captions[-1].start_ms + limits.min_ms) - 0.5


def test_sentence_end_never_splits_a_word() -> None:
    # A commit can stop after punctuation ("3." then "5"): the caption waits for whitespace before closing.
    captions = parse_captions(render_subtitles([em(" It grew 3.", 1000.0), em("5 percent.", 2000.0)], "srt", 4000.0))
    assert [c.text for c in captions] == ["It grew 3.5 percent."]


# ---------------------------------------------------------------------------------------------- short captions
MERGE = CaptionLimits(merge_short=True)


def texts_and_times(emissions: list[Emission], end_ms: float, limits: CaptionLimits = MERGE) -> list[tuple]:
    return [(c.text, c.start_ms, c.end_ms, len(c.lines))
            for c in parse_captions(render_subtitles(emissions, "srt", end_ms, limits))]


def test_a_short_caption_is_merged_into_the_next_where_it_fits() -> None:
    stream = [em(" Ask not.", 1000.0), em(" What your country can do for you.", 2000.0),
              em(" Ask what you can do.", 5000.0, final=True)]
    # live: "Ask not." (two words) is a caption of its own
    assert texts_and_times(stream, 8000.0, CaptionLimits()) == [
        ("Ask not.", 1000.0, 2000.0, 1), ("What your country can do for you.", 2000.0, 3500.0, 1),
        ("Ask what you can do.", 5000.0, 8000.0, 1)]
    # a file: merged into the next (42 characters: one line), from its start to the next one's end
    assert texts_and_times(stream, 8000.0) == [
        ("Ask not. What your country can do for you.", 1000.0, 3500.0, 1), ("Ask what you can do.", 5000.0, 8000.0, 1)]


def test_short_captions_merge_one_after_another_and_wrap_into_two_lines() -> None:
    stream = [em(" Yes.", 1000.0), em(" No.", 1500.0), em(" What your country can do for you, friends.", 3000.0),
              em(" Bye now, friends.", 6000.0)]
    # "Yes. No." (1000 to 3000 ms) is still short: held again, then merged into the next, on two lines
    assert texts_and_times(stream, 9000.0) == [
        ("Yes. No. What your country can do for you, friends.", 1000.0, 4500.0, 2),
        ("Bye now, friends.", 6000.0, 9000.0, 1)]


def test_a_short_caption_stays_alone_across_a_pause_where_nothing_fits_and_at_the_end() -> None:
    pause = [em(" Ask not.", 1000.0), em(" What your country can do for you.", 6000.0, final=True)]
    assert [t for t, *_ in texts_and_times(pause, 9000.0)] == ["Ask not.", "What your country can do for you."]
    full = [em(" Ask not.", 1000.0), em(" And so, my fellow Americans, ask not what your country can do for you,"
                                        " ask what you can do", 2000.0)]
    assert next(t for t, *_ in texts_and_times(full, 9000.0)) == "Ask not."  # two full lines follow
    assert texts_and_times([em(" Hi there.", 1000.0, final=True)], 5000.0) == [("Hi there.", 1000.0, 5000.0, 1)]
    assert texts_and_times([em(" Hi there.", 1000.0), em(" Bye.", 2000.0, final=True)], 3000.0) == [
        ("Hi there. Bye.", 1000.0, 3000.0, 1)]  # (the last caption merged into nothing: written as it is)


def test_file_outputs_merge_short_captions_live_ones_do_not(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stream = [em(" Ask not.", 1000.0), em(" What your country can do for you.", 2000.0, final=True)]

    def written(path: Path | None, **options: Any) -> list[str]:
        output = StreamOutput("srt", None if path is None else str(path), **options)
        with output.streaming(end_ms=lambda: 4000.0):
            for emission in stream:
                output.emit(emission, 0.0)
        content = capsys.readouterr().out if path is None else path.read_text(encoding="utf-8")
        return [c.text for c in parse_captions(content)]

    merged, apart = ["Ask not. What your country can do for you."], ["Ask not.", "What your country can do for you."]
    assert written(tmp_path / "a.srt") == merged  # a file of a run that is not real time: merged
    assert written(tmp_path / "b.srt", realtime=True) == apart  # followed live as it is written
    assert written(tmp_path / "c.srt", merge_short=False) == apart  # --no-merge-short-cues
    assert written(tmp_path / "d.srt", realtime=True, merge_short=True) == merged  # --merge-short-cues
    assert written(None, merge_short=True) == apart  # stdout is live
    parser = build_parser()
    assert parser.parse_args(["transcribe", "a.wav"]).merge_short_cues is None
    assert parser.parse_args(["transcribe", "a.wav", "--no-merge-short-cues"]).merge_short_cues is False
    assert parser.parse_args(["live", "--merge-short-cues"]).merge_short_cues is True


# ---------------------------------------------------------------------------------------------------- CLI
def test_cli_format_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    assert parser.parse_args(["transcribe", "a.wav"]).format == "text"
    assert parser.parse_args(["transcribe", "a.wav", "--json"]).format == "json"
    args = parser.parse_args(["translate", "a.wav", "--to", "es", "--format", "vtt", "-o", "x.vtt"])
    assert args.format == "vtt" and args.output == "x.vtt"
    assert parser.parse_args(["transcribe", "a.wav", "--format", "srt"]).cue_times == "spoken"
    assert parser.parse_args(["transcribe", "a.wav", "--cue-times", "commit"]).cue_times == "commit"
    assert parser.parse_args(["transcribe", "a.wav", "--format", "whisper-streaming"]).format == "whisper-streaming"
    for bad in (["--format", "ass"], ["--json", "--format", "srt"], ["--cue-times", "later"]):
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args(["transcribe", "a.wav", *bad])
        assert exit_info.value.code == 2
    audio = tmp_path / "a.wav"
    sf.write(str(audio), np.zeros(1600, dtype=np.float32), 16000)
    capsys.readouterr()
    assert main(["transcribe", str(audio), "--format", "srt", "-o", str(tmp_path / "no" / "such" / "x.srt")]) == 2
    assert "cannot write srt to" in capsys.readouterr().err
    assert main(["transcribe", str(audio), "--format", "srt", "-o", str(tmp_path)]) == 2  # a directory
    assert main(["transcribe", str(audio), "-o", str(tmp_path / "x.txt")]) == 2
    assert "--output FILE is for --format srt" in capsys.readouterr().err


@pytest.mark.real
@needs_shared
def test_cli_live_subtitles_of_jfk(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["transcribe", str(JFK), *MODEL, "--chunk-ms", "2000"]
    assert main([*args, "--json"]) == 0
    transcript = json.loads(capsys.readouterr().out.splitlines()[-1])["text"]
    assert "ask not what your country can do for you" in transcript

    srt = tmp_path / "jfk.srt"
    assert main([*args, "--format", "srt", "-o", str(srt)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("[") and "real-time factor" in out  # stdout keeps the live lines and the summary
    captions = parse_captions(srt.read_text(encoding="utf-8"))
    assert captions and [c.index for c in captions] == list(range(1, len(captions) + 1))
    assert " ".join(c.text for c in captions) == " ".join(transcript.split())
    assert all(0.0 <= c.start_ms < c.end_ms <= 11000.0 + CaptionLimits().min_ms for c in captions)
    assert all(a.end_ms <= b.start_ms for a, b in pairwise(captions))

    # WebVTT on stdout (the first 3 s, to be quick): the captions alone; the summary goes to stderr.
    audio, rate = sf.read(str(JFK), dtype="float32")
    short = tmp_path / "jfk-3s.wav"
    sf.write(str(short), audio[: 3 * rate], rate)
    assert main(["transcribe", str(short), *MODEL, "--format", "vtt"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("WEBVTT\n\n") and "real-time factor" in err and "real-time factor" not in out
    vtt = parse_captions(out)
    assert vtt and vtt[0].text.startswith("And so") and vtt[-1].end_ms <= 3000.0 + CaptionLimits().min_ms
