"""Latency presets: each resolves to its documented options on the command line and in the API; a flag given
wins over the preset; each task has its own."""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path

import pytest

from simulst.cli.main import build_parser
from simulst.cli.options import model_options_from_args, stream_options_from_args
from simulst.config import ModelOptions, PolicyOptions, SearchOptions, StreamOptions
from simulst.config.presets import DEFAULT_LATENCIES, LATENCIES, PRESETS, Preset, preset, preset_options
from simulst.errors import OptionError

DOC = Path(__file__).resolve().parents[1] / "docs" / "presets.md"


def documented() -> dict[tuple[str, str], str]:
    """docs/presets.md's table: (task, latency) -> the flags column."""
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0] in ("transcribe", "translate") and cells[1].strip("`") in LATENCIES:
            rows[(cells[0], cells[1].strip("`"))] = cells[2].strip("`").replace("(the option defaults)", "").strip()
    return rows


def test_every_task_has_every_latency_and_the_docs_state_each() -> None:
    assert set(PRESETS) == {(task, latency) for task in ("transcribe", "translate") for latency in LATENCIES}
    docs = documented()
    assert set(docs) == set(PRESETS)
    for key, chosen in PRESETS.items():
        assert docs[key] == chosen.flags(), key


@pytest.mark.parametrize("key", sorted(PRESETS))
def test_the_command_line_resolves_a_preset_to_its_flags(key: tuple[str, str]) -> None:
    task, latency = key
    chosen = PRESETS[key]
    parser = build_parser()
    audio = ["a.wav"] + (["--model", "whisper-base"] if task == "translate" else [])
    by_preset = parser.parse_args([task, *audio, "--latency", latency])
    by_flags = parser.parse_args([task, *audio, *shlex.split(chosen.flags())])
    assert stream_options_from_args(by_preset) == stream_options_from_args(by_flags)
    assert model_options_from_args(by_preset, task) == model_options_from_args(by_flags, task)
    model, stream = preset_options(task, latency, ModelOptions(*(["whisper-base"] if task == "translate" else [])))
    assert stream == stream_options_from_args(by_preset)
    assert model == model_options_from_args(by_preset, task)


def test_each_task_has_its_default_and_a_given_flag_wins() -> None:
    assert DEFAULT_LATENCIES == {"transcribe": "balanced", "translate": "accurate"}
    assert preset("translate") == PRESETS[("translate", "accurate")]
    assert preset("transcribe") == PRESETS[("transcribe", "balanced")]
    parser = build_parser()
    plain = parser.parse_args(["translate", "a.wav", "--model", "whisper-base"])
    assert stream_options_from_args(plain) == preset_options("translate", "accurate")[1]
    assert preset_options("translate")[1] == preset_options("translate", "accurate")[1]
    plain = parser.parse_args(["transcribe", "a.wav"])
    assert stream_options_from_args(plain) == preset_options("transcribe", "balanced")[1]
    # a cascade's ASR stage (--to) runs the transcribe default
    cascade = parser.parse_args(["translate", "a.wav", "--to", "es"])
    assert stream_options_from_args(cascade, task="transcribe") == preset_options("transcribe", "balanced")[1]
    for task in ("transcribe", "translate"):
        low = PRESETS[(task, "low")]
        args = parser.parse_args([task, "a.wav", "--latency", "low", "--chunk-ms", "777", "--policy", "hold-2"])
        options = stream_options_from_args(args)
        assert options.chunk_ms == 777.0 and options.policy == PolicyOptions("hold", 2)
        rest = {k: v for k, v in low.stream_settings().items() if k not in ("chunk_ms", "policy")}
        assert all(getattr(options, k) == v for k, v in rest.items())


def test_switches_given_off_win_over_a_preset_that_turns_them_on() -> None:
    on = Preset("transcribe", "low", "test", {"vad": True, "chunk_ms": 900.0})
    assert on.flags() == "--vad --chunk-ms 900"
    assert Preset("transcribe", "low", "test", {"vad": False}).flags() == "--no-vad"
    model, stream = preset_options("transcribe", "balanced", stream=StreamOptions(vad=True))
    assert stream.vad is (PRESETS[("transcribe", "balanced")].settings.get("vad", True))
    assert model.task == "transcribe"
    parser = build_parser()  # transcription listens with the VAD by default; --no-vad turns it off
    assert stream_options_from_args(parser.parse_args(["transcribe", "a.wav"])).vad is True
    assert stream_options_from_args(parser.parse_args(["transcribe", "a.wav", "--no-vad"])).vad is False
    assert stream_options_from_args(parser.parse_args(["transcribe", "a.wav", "--latency", "accurate"])).vad is True
    no_head = ["transcribe", "a.wav", "--model", "whisper-base", "--latency", "low"]  # (low without a CTC head)
    assert stream_options_from_args(parser.parse_args(no_head)).vad is False


def test_the_transcribe_and_translate_presets_differ() -> None:
    # the tasks were tuned apart: at least one operating point of translation is not transcription's
    assert any(PRESETS[("translate", lat)].settings != PRESETS[("transcribe", lat)].settings for lat in LATENCIES)


def test_unknown_names_are_refused() -> None:
    with pytest.raises(OptionError, match="unknown latency preset 'fast'; choose one of low, balanced, accurate"):
        preset("transcribe", "fast")
    with pytest.raises(OptionError, match="unknown task 'summarise'"):
        preset("summarise", "low")
    with pytest.raises(ValueError, match="unknown options"):
        Preset("transcribe", "low", "x", {"language": "de"})
    with pytest.raises(SystemExit):
        build_parser().parse_args(["transcribe", "a.wav", "--latency", "fast"])


def test_presets_are_plain_option_values() -> None:
    for chosen in PRESETS.values():
        model, stream = preset_options(chosen.task, chosen.latency)
        assert dataclasses.replace(model) == model and isinstance(stream, StreamOptions)
        assert re.fullmatch(r"(--[a-z0-9-]+( \S+)? ?)*", chosen.flags())


def test_the_server_gives_translate_streams_the_translate_preset() -> None:
    from simulst.cli.serve import server_config
    from simulst.server.protocol import StartRequest
    from simulst.server.service import Service
    from tests.toy import toy_engine

    args = build_parser().parse_args(["serve", "--latency", "accurate", "--chunk-ms", "800"])
    config = server_config(args)
    transcribe = preset_options("transcribe", "accurate", stream=StreamOptions(chunk_ms=800.0))[1]
    translate = preset_options("translate", "accurate", stream=StreamOptions(chunk_ms=800.0))[1]
    assert config.options == dataclasses.replace(transcribe, chunk_ms=800.0)
    assert config.translate_options == dataclasses.replace(translate, chunk_ms=800.0)  # the given flag wins
    service = Service(toy_engine().model, dataclasses.replace(config, batched=False))
    assert service.stream_options(StartRequest(16000, "translate")) == config.translate_options
    assert service.stream_options(StartRequest(16000, "transcribe")) == config.options
    assert service.stream_options(StartRequest(16000, "translate", chunk_ms=500.0)).chunk_ms == 500.0
    plain = server_config(build_parser().parse_args(["serve"]))  # no --latency: each task's default
    assert plain.options == preset_options("transcribe", "balanced")[1]
    assert plain.translate_options == preset_options("translate", "accurate")[1]


def test_a_given_buffer_or_segment_bounds_the_presets_other() -> None:
    # a user's shorter buffer or longer segment is honoured, and the preset's other value yields to it instead of
    # an error: transcribe balanced keeps 10 s segments in a 24 s buffer, the translate presets 10 s in 30 s
    parser = build_parser()
    short = stream_options_from_args(parser.parse_args(["transcribe", "a.wav", "--max-buffer-s", "4"]))
    assert (short.segment_s, short.max_buffer_s) == (4.0, 4.0)
    long = stream_options_from_args(parser.parse_args(["transcribe", "a.wav", "--segment-s", "20"]))
    assert (long.segment_s, long.max_buffer_s) == (20.0, 24.0)
    longer = stream_options_from_args(parser.parse_args(["transcribe", "a.wav", "--segment-s", "28"]))
    assert (longer.segment_s, longer.max_buffer_s) == (28.0, 28.0)
    translate = stream_options_from_args(parser.parse_args(["translate", "a.wav", "--model", "whisper-base",
                                                            "--max-buffer-s", "8"]))
    assert (translate.segment_s, translate.max_buffer_s) == (8.0, 8.0)
    both = stream_options_from_args(parser.parse_args(["transcribe", "a.wav", "--segment-s", "4",
                                                       "--max-buffer-s", "6"]))
    assert (both.segment_s, both.max_buffer_s) == (4.0, 6.0)
    with pytest.raises(OptionError, match="need 0 < segment"):
        stream_options_from_args(parser.parse_args(["transcribe", "a.wav", "--segment-s", "9", "--max-buffer-s", "6"]))


def test_a_preset_that_reads_a_ctc_head_falls_back_where_the_model_ships_none() -> None:
    # transcribe low runs the CTC policy with the head shipped for the default model (Whisper tiny.en); another
    # model named (whisper-base, a directory) gets its without_ctc_head settings, unless a head is given
    low = PRESETS[("transcribe", "low")]
    assert low.without_ctc_head is not None and PolicyOptions.parse(low.settings["policy"]).needs_ctc_head
    assert low.for_model(None) is low and low.for_model("whisper-tiny.en") is low
    assert low.for_model("whisper-base", ctc_head_given=True) is low
    fallback = low.for_model("whisper-base")
    assert fallback.settings == low.without_ctc_head and fallback.without_ctc_head is None
    assert not PolicyOptions.parse(str(fallback.settings.get("policy", "la-2"))).needs_ctc_head
    assert all(p.without_ctc_head is None for p in PRESETS.values() if p is not low
               and not PolicyOptions.parse(str(p.settings.get("policy", "la-2"))).needs_ctc_head)
    parser = build_parser()
    tiny = parser.parse_args(["transcribe", "a.wav", "--latency", "low"])
    assert stream_options_from_args(tiny).policy.needs_ctc_head and model_options_from_args(tiny).ctc_head == "default"
    base = parser.parse_args(["transcribe", "a.wav", "--model", "whisper-base", "--latency", "low"])
    by_flags = parser.parse_args(["transcribe", "a.wav", "--model", "whisper-base", *shlex.split(fallback.flags())])
    assert stream_options_from_args(base) == stream_options_from_args(by_flags)
    assert model_options_from_args(base) == model_options_from_args(by_flags)
    assert model_options_from_args(base).ctc_head is None
    headed = parser.parse_args(["transcribe", "a.wav", "--model", "d/", "--ctc-head", "h.safetensors",
                                "--latency", "low"])
    assert stream_options_from_args(headed).policy == PolicyOptions.parse(low.settings["policy"])
    assert model_options_from_args(headed).ctc_head == "h.safetensors"  # (the given head wins over the shipped one)
    model, stream = preset_options("transcribe", "low", ModelOptions("whisper-base"))
    assert stream == stream_options_from_args(base) and model.ctc_head is None
    assert fallback.flags() in DOC.read_text(encoding="utf-8")  # (docs/presets.md states the fallback)


def test_a_preset_sets_the_search_under_the_given_search_flags() -> None:
    # translate accurate: a beam search of 3 under beam agreement; a given --beam / --search wins, and the API keeps
    # the search's other fields
    parser = build_parser()
    accurate = ["translate", "a.wav", "--model", "whisper-base", "--latency", "accurate"]
    options = stream_options_from_args(parser.parse_args(accurate))
    assert options.search == SearchOptions("beam", beam=3) and options.policy == PolicyOptions("ba", 2)
    wider = stream_options_from_args(parser.parse_args([*accurate, "--beam", "8", "--final-beam", "4"])).search
    assert wider == SearchOptions("beam", beam=8, final_beam=4)
    greedy = stream_options_from_args(parser.parse_args([*accurate, "--search", "greedy"]))
    assert greedy.search.name == "greedy" and greedy.policy == PolicyOptions("ba", 2)
    kept = preset_options("translate", "accurate", stream=StreamOptions(search=SearchOptions(final_beam=4)))[1]
    assert kept.search == SearchOptions("beam", beam=3, final_beam=4)
    # translate balanced and low: a beam of 3 under beam agreement (low over 600 ms chunks); named, so that their
    # flags give them under any --latency
    balanced = stream_options_from_args(parser.parse_args([*accurate, "--latency", "balanced"]))
    assert balanced.search == SearchOptions("beam", beam=3) and balanced.policy == PolicyOptions("ba", 2)
    assert stream_options_from_args(parser.parse_args(accurate[:4])) == options  # (the default is accurate)
    assert dataclasses.replace(balanced, early_logprob_threshold=-1.25) == options
    low = stream_options_from_args(parser.parse_args([*accurate, "--latency", "low"]))
    assert low.search == SearchOptions("beam", beam=3) and low.policy == PolicyOptions("ba", 2)
    assert dataclasses.replace(low, chunk_ms=balanced.chunk_ms) == balanced and low.chunk_ms == 600.0
    greedy_flags = ["--search", "greedy", "--beam", "1", "--policy", "la-2"]
    chosen = stream_options_from_args(parser.parse_args([*accurate, "--latency", "balanced", *greedy_flags]))
    assert chosen.search == SearchOptions("greedy", beam=1) and chosen.policy == PolicyOptions("la", 2)
    # a preset's beam goes with its search: transcribe low's beam of 1 (greedy) is not a beam search's width
    default_beam = SearchOptions().beam
    low_beam = ["transcribe", "a.wav", "--latency", "low", "--search", "beam"]
    widened = stream_options_from_args(parser.parse_args(low_beam))
    assert widened.search == SearchOptions("beam", beam=default_beam) and default_beam > 1
    narrow = stream_options_from_args(parser.parse_args([*low_beam, "--beam", "2"]))
    assert narrow.search == SearchOptions("beam", beam=2)
    same = stream_options_from_args(parser.parse_args([*accurate, "--latency", "balanced", "--search", "beam"]))
    assert same.search == SearchOptions("beam", beam=3)  # (the preset's own search: its beam)


def test_the_python_api_keeps_the_options_the_caller_set() -> None:
    # preset_options resolves as the command line does: a field whose value differs from its default counts as
    # given and wins over the preset (a value equal to the default cannot be told from none: the preset's)
    parser = build_parser()
    _, stream = preset_options("transcribe", stream=StreamOptions(chunk_ms=1000.0))
    assert stream.chunk_ms == 1000.0
    assert stream == stream_options_from_args(parser.parse_args(["transcribe", "a.wav", "--chunk-ms", "1000"]))
    balanced = PRESETS[("transcribe", "balanced")]
    assert preset_options("transcribe", stream=StreamOptions(chunk_ms=600.0))[1].chunk_ms == balanced.settings[
        "chunk_ms"]
    # a preset's beam goes with its search; a given buffer bounds the preset's segment; a given head is kept
    _, searched = preset_options("transcribe", "low", stream=StreamOptions(search=SearchOptions("beam")))
    low_beam = ["transcribe", "a.wav", "--latency", "low", "--search", "beam"]
    assert searched == stream_options_from_args(parser.parse_args(low_beam))
    assert searched.search == SearchOptions("beam", beam=SearchOptions().beam)
    _, short = preset_options("translate", model=ModelOptions("whisper-base"), stream=StreamOptions(max_buffer_s=7.0))
    assert (short.segment_s, short.max_buffer_s) == (7.0, 7.0)
    model, stream = preset_options("transcribe", "low", ModelOptions(ctc_head="my-head.safetensors"),
                                   StreamOptions(policy=PolicyOptions("hold", 2), vad=True))
    assert model.ctc_head == "my-head.safetensors" and stream.policy == PolicyOptions("hold", 2)
    flags = ["transcribe", "a.wav", "--latency", "low", "--ctc-head", "my-head.safetensors", "--policy", "hold-2"]
    assert stream == stream_options_from_args(parser.parse_args(flags))
    assert model == model_options_from_args(parser.parse_args(flags))


@pytest.mark.parametrize("command", ["eval", "sweep"])
def test_eval_and_sweep_resolve_a_preset_as_transcribe_and_translate_do(command: str) -> None:
    # the given flags win; the preset's beam goes with its search only (--policy la-2 alone keeps the preset's
    # search and its beam, as transcribe does; another --search gets the option default beam)
    parser = build_parser()
    for task, model in (("transcribe", []), ("translate", ["--model", "whisper-base"])):
        for flags in (["--policy", "la-2"], ["--policy", "la-2", "--chunk-ms", "1000"],
                      ["--latency", "low", "--search", "beam"], ["--policy", "la-2", "--beam", "2"],
                      ["--latency", "accurate", "--search", "greedy", "--max-buffer-s", "12"]):
            run = parser.parse_args([command, "set.tsv", "-o", "out", "--task", task, *model, *flags])
            alone = parser.parse_args([task, "a.wav", *model, *flags])
            assert stream_options_from_args(run) == stream_options_from_args(alone), (command, task, flags)
    la2 = stream_options_from_args(parser.parse_args([command, "set.tsv", "-o", "out", "--policy", "la-2"]))
    balanced = PRESETS[("transcribe", "balanced")].settings
    assert la2.policy == PolicyOptions("la", 2)
    assert la2.search == SearchOptions(balanced["search"], beam=balanced["beam"])


def test_a_sweeps_searches_take_a_presets_beam_with_its_search_only() -> None:
    # each search of --searches runs as --search NAME would: --latency low's beam of 1 is not a beam search's width
    from simulst.cli.evaluation import search_beams
    from simulst.evaluation.sweep import build_grid

    parser = build_parser()
    default = SearchOptions().beam
    for flags, beams in ((["--latency", "low"], {"greedy": 1, "beam": default, "bwbs": default}),
                         ([], {"greedy": default, "beam": 3, "bwbs": default}),
                         (["--beam", "2"], {"greedy": 2, "beam": 2, "bwbs": 2})):
        args = parser.parse_args(["sweep", "set.tsv", "-o", "out", *flags, "--searches", "greedy", "beam", "bwbs"])
        base = stream_options_from_args(args)
        assert search_beams(args, args.searches) == beams
        for point in build_grid(base, ["la-2"], searches=args.searches, beams=search_beams(args, args.searches)):
            alone = parser.parse_args(["transcribe", "a.wav", *flags, "--search", point.options.search.name])
            assert point.options.search == stream_options_from_args(alone).search, point.label
    args = parser.parse_args(["sweep", "set.tsv", "-o", "out", "--latency", "low", "--searches", "beam",
                              "--grid", "search.beam=4"])
    grid = build_grid(stream_options_from_args(args), ["la-2"], searches=args.searches, grid={"search.beam": ["4"]},
                      beams=search_beams(args, args.searches))
    assert [p.options.search.beam for p in grid] == [4]  # (a beam axis wins)


@pytest.mark.parametrize("task", ["transcribe", "translate"])
def test_help_says_what_each_preset_sets_an_option_to(task: str) -> None:
    # --help shows an option's own default (--chunk-ms 600), which the preset in force replaces: each option a
    # preset of the task sets says each preset's value, from the presets themselves
    subcommand = build_parser()._subparsers._group_actions[0].choices[task]  # type: ignore[union-attr]
    helps = {a.dest: " ".join((a.help or "").split()) for a in subcommand._actions}
    chunks = ", ".join(f"{latency} {preset(task, latency).settings['chunk_ms']:g}" for latency in LATENCIES)
    assert helps["chunk_ms"].endswith(f"(default: 600); --latency sets it: {chunks}")
    assert helps["policy"].endswith("--latency sets it: " + ", ".join(
        f"{latency} {preset(task, latency).settings['policy']}" for latency in LATENCIES))
    set_by_some = {name for latency in LATENCIES for name in preset(task, latency).settings}
    assert {dest for dest, text in helps.items() if "--latency sets it" in text} == set_by_some
    assert "presets set it to" in helps["latency"]


def test_translate_accurate_is_balanced_waiting_where_the_model_is_unsure() -> None:
    # translate accurate = balanced + a stricter early low-confidence guard (-1.25, within the guard's own -1.5);
    # balanced translating leaves the early guard off ("auto"), transcribing it is -0.7
    _, balanced = preset_options("translate", "balanced", ModelOptions("whisper-base"))
    _, accurate = preset_options("translate", "accurate", ModelOptions("whisper-base"))
    assert dataclasses.replace(accurate, early_logprob_threshold="auto") == balanced
    assert balanced.early_threshold(translates=True) is None
    assert accurate.early_threshold(translates=True) == -1.25
    assert balanced.logprob_threshold is not None and accurate.early_threshold(True) > balanced.logprob_threshold
