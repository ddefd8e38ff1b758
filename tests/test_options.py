"""Options as one source of truth: every command-line flag of the stream commands is a dataclass field's, with the
field's default and help; the parsed arguments build the options by field name, with no fallbacks."""

from __future__ import annotations

import argparse
import ast
import dataclasses
from pathlib import Path

import pytest

from simulst.cli.cascade import mt_options_from_args
from simulst.cli.main import build_parser
from simulst.cli.options import (
    add_stream_arguments,
    cli_options,
    ctc_head_from_args,
    model_options_from_args,
    options_from_args,
    stream_options_from_args,
)
from simulst.config import (
    POLICIES,
    SEARCHES,
    AlignAttPolicyOptions,
    CtcPolicyOptions,
    ModelOptions,
    PolicyOptions,
    SearchOptions,
    StreamOptions,
)
from simulst.config.presets import preset_options
from simulst.errors import OptionError
from simulst.mt.options import MTOptions

CLI = Path(__file__).resolve().parents[1] / "src" / "simulst" / "cli"

# The stream commands' flags before the options were derived from the fields (the CLI surface to keep).
FLAGS = """--model --language --window --window-pad-ms --window-min-ms --precision --encoder-precision
--screen-vocabulary --no-screen-vocabulary --device --policy --chunk-ms --initial-wait-ms --search
--repetition-detection --no-repetition-detection --carry-over --no-carry-over --draft --no-draft --beam
--length-penalty --max-new-tokens --normalize-peak --no-speech-threshold --logprob-threshold
--early-logprob-threshold --word-logprob-threshold --loop-guard --no-loop-guard --hold-sentence-end
--no-hold-sentence-end --punctuate-held-end --no-punctuate-held-end --segment-s --max-buffer-s
--context-tokens --context-scope --vad --vad-threshold --vad-pause-ms --context-reset-s --ctc-threshold --ctc-head
--ctc-weight --ctc-odds --final-beam --reencode-s --prompt""".split()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add_stream_arguments(p)
    return p


def flags_of(p: argparse.ArgumentParser) -> set[str]:
    return {s for action in p._actions for s in action.option_strings} - {"-h", "--help"}


def test_the_flags_are_the_fields_and_the_surface_is_kept() -> None:
    flags = flags_of(parser())
    assert set(FLAGS) <= flags and flags - set(FLAGS) == {"--no-vad", "--latency"}
    fields = [o.flag.name for cls in (ModelOptions, StreamOptions, CtcPolicyOptions) for o in cli_options(cls)]
    # every flag is a field's, but --latency, which names a preset of several fields (test_presets.py)
    assert len(fields) == len(set(fields)) and set(fields) | {f"--no-{f[2:]}" for f in fields} >= flags - {"--latency"}


def test_the_defaults_are_the_fields_defaults() -> None:
    args = parser().parse_args([])
    assert options_from_args(StreamOptions, args) == StreamOptions()  # the flags' own defaults
    # with no flag, a command runs at the default --latency preset: the fields' defaults and that preset's settings
    assert stream_options_from_args(args) == preset_options("transcribe")[1]
    assert model_options_from_args(args) == preset_options("transcribe")[0]
    assert model_options_from_args(args) == ModelOptions(encoder_precision="auto", precision="auto")  # the preset's
    translate = build_parser().parse_args(["translate", "a.wav", "--to", "es"])
    assert mt_options_from_args(translate) == MTOptions()


def test_every_flag_builds_its_field() -> None:
    args = parser().parse_args([
        "--chunk-ms", "1000", "--initial-wait-ms", "500", "--search", "beam", "--beam", "3", "--length-penalty", "0.5",
        "--max-new-tokens", "20", "--no-draft", "--repetition-detection", "--carry-over", "--policy", "hold-3",
        "--no-speech-threshold", "none", "--logprob-threshold", "-2", "--early-logprob-threshold", "none",
        "--no-loop-guard", "--no-hold-sentence-end", "--no-punctuate-held-end",
        "--segment-s", "6", "--max-buffer-s", "9", "--context-tokens", "0",
        "--context-scope", "all", "--prompt", "Kennedy's inaugural address.",
        "--vad", "--vad-threshold", "0.4", "--vad-pause-ms", "800", "--context-reset-s", "3", "--normalize-peak", "off",
        "--reencode-s", "1.5",
        "--window", "full", "--window-pad-ms", "0", "--window-min-ms", "0", "--precision", "int8",
        "--encoder-precision", "int8", "--no-screen-vocabulary", "--language", "de", "--model", "m", "--device", "cpu",
        "--ctc-weight", "0.2", "--final-beam", "4",
    ])
    assert stream_options_from_args(args) == StreamOptions(
        chunk_ms=1000.0, initial_wait_ms=500.0, policy=PolicyOptions("hold", 3),
        search=SearchOptions("beam", beam=3, length_penalty=0.5, max_new_tokens=20, repetition_detection=True,
                             carry_over=True, ctc_weight=0.2, draft=False, final_beam=4),
        no_speech_threshold=None, logprob_threshold=-2.0, early_logprob_threshold=None, loop_guard=False,
        segment_s=6.0, max_buffer_s=9.0, context_tokens=0, context_scope="all", prompt="Kennedy's inaugural address.",
        vad=True, vad_threshold=0.4,
        vad_pause_ms=800.0, context_reset_s=3.0, normalize_peak=None, reencode_s=1.5,
    )
    assert model_options_from_args(args, task="translate") == ModelOptions(
        "m", language="de", task="translate", window="full", window_pad_ms=0.0, window_min_ms=0.0,
        precision="int8", encoder_precision="int8", ctc_head="default",
        screen_vocabulary=False)  # (--ctc-weight needs the shipped head)


def test_policy_flags_refine_the_policy() -> None:
    p = parser()
    policy = stream_options_from_args(p.parse_args(["--policy", "ctc:2:any"])).policy
    assert policy == CtcPolicyOptions(threshold=2.0, odds="any")
    refined = stream_options_from_args(p.parse_args(["--policy", "ctc:2", "--ctc-threshold", "-1"])).policy
    assert refined == CtcPolicyOptions(threshold=-1.0, odds="next")
    assert stream_options_from_args(p.parse_args(["--policy", "alignatt:9"])).policy == AlignAttPolicyOptions(frames=9)
    sweep = build_parser().parse_args(["sweep", "t.tsv", "-o", "out", "--policies", "la-2", "ctc"])
    assert ctc_head_from_args(sweep) == "default"  # any policy of a sweep that reads a CTC head loads one


def test_bad_values_are_refused_where_they_are_parsed_or_built(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(["--logprob-threshold", "low"])
    assert exited.value.code == 2 and "expected a number or 'none'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(["--final-beam", "wide"])
    assert exited.value.code == 2 and "expected a whole number or 'none'" in capsys.readouterr().err
    assert stream_options_from_args(parser().parse_args(["--final-beam", "none"])).search.final_beam is None
    with pytest.raises(OptionError, match="unknown search 'viterbi'; choose one of greedy, beam"):
        stream_options_from_args(parser().parse_args(["--search", "viterbi"]))
    with pytest.raises(OptionError, match="int8 precision runs on the CPU only"):
        model_options_from_args(parser().parse_args(["--precision", "int8", "--device", "cuda"]))
    with pytest.raises(OptionError, match="int8 precision runs on the CPU only"):
        model_options_from_args(parser().parse_args(["--encoder-precision", "int8", "--device", "cuda"]))
    assert model_options_from_args(parser().parse_args(["--encoder-precision", "bf16"])).encoder_precision == "bf16"
    with pytest.raises(OptionError, match="unknown encoder precision 'fp16'; choose one of fp32, int8, bf16, auto"):
        ModelOptions(encoder_precision="fp16")
    assert model_options_from_args(parser().parse_args(["--precision", "bf16"])).precision == "bf16"
    with pytest.raises(OptionError, match="unknown decoder precision 'fp16'; choose one of fp32, int8, bf16, auto"):
        ModelOptions(precision="fp16")
    with pytest.raises(OptionError, match="reads committed text"):
        mt_options_from_args(build_parser().parse_args(["translate", "a.wav", "--to", "es", "--mt-policy", "ctc"]))


def test_help_shows_the_defaults_and_the_registered_names() -> None:
    text = " ".join(parser().format_help().split())
    assert "decode after every MS of new audio (default: 600)" in text
    assert "(default: la-2)" in text and "(default: greedy)" in text and "(default: on)" in text
    for spec in POLICIES.entries():
        assert spec.syntax in text
    for name in SEARCHES.names():
        assert name in text
    translate = build_parser()._subparsers._group_actions[0].choices["translate"]  # type: ignore[union-attr]
    mt_help = " ".join(translate.format_help().split())
    assert "--mt-policy POLICY" in mt_help and "--mt-search SEARCH" in mt_help and "--mt-beam K" in mt_help
    assert "ctc[" not in mt_help.split("--mt-policy POLICY")[1].split("--mt-search")[0]  # the MT stage's policies


def test_no_argument_fallbacks_in_the_cli() -> None:
    for path in CLI.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
                target = node.args[0]
                assert not (isinstance(target, ast.Name) and target.id == "args"), f"{path.name}:{node.lineno}"


def test_every_option_field_is_a_flag_or_deliberately_not() -> None:
    # the fields left off the command line (the task is the subcommand's; the rest are for the library)
    hidden = {(cls.__name__, f.name) for cls in (ModelOptions, StreamOptions, SearchOptions, MTOptions)
              for f in dataclasses.fields(cls) if not f.metadata}
    assert hidden == {("ModelOptions", "task"), ("SearchOptions", "max_tokens_per_s"), ("MTOptions", "max_len_a"),
                      ("MTOptions", "max_len_b"), ("MTOptions", "sentences")}
