"""``simulst``: stream an audio file through a simultaneous model and print the output as it is committed.

Exit codes: 0 success, 1 the audio is silent (empty output), 2 bad input or options, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable, Sequence

from simulst.cli import ctc as ctc_commands
from simulst.cli import evaluation as evaluation_commands
from simulst.cli import live as live_commands
from simulst.cli import serve as serve_commands
from simulst.cli.cascade import add_cascade_arguments, run_cascade
from simulst.cli.options import (
    add_stream_arguments,
    model_from_args,
    show_preset_values,
    stream_options_from_args,
)
from simulst.cli.printing import StreamOutput, add_output_arguments, final_record
from simulst.cli.reading import at_rate, open_audio, stream_file
from simulst.config import POLICIES, SEARCHES
from simulst.errors import SimulstError


class _ListRegistry(argparse.Action):
    """``--list-policies`` / ``--list-searches``: print what a registry holds, one entry a line, and exit 0."""

    def __init__(self, option_strings: Sequence[str], dest: str, listing: Callable[[], str], help: str) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)
        self.listing = listing

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        print(self.listing())
        parser.exit(0)


def describe_policies() -> str:
    """Every registered policy: how it is written, what it does, and where it cannot run."""
    return "\n".join(_entry(spec.syntax, spec.help + ("" if spec.text_source else " [speech only: not for a "
                                                                                   "cascade's MT stage]"))
                     for spec in POLICIES.entries())


def describe_searches() -> str:
    """Every registered search: its name and what it does."""
    return "\n".join(_entry(spec.name, spec.help + ("" if spec.steerable else " [takes no policy stop rule and no "
                                                                              "--ctc-weight]"))
                     for spec in SEARCHES.entries())


def _entry(name: str, text: str) -> str:
    return textwrap.fill(text, width=100, initial_indent=f"{name:<16} ", subsequent_indent=" " * 17)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(prog="simulst", description="Simultaneous speech translation and transcription.")
    parser.add_argument("--list-policies", action=_ListRegistry, listing=describe_policies,
                        help="list the policies --policy takes (and what each does) and exit")
    parser.add_argument("--list-searches", action=_ListRegistry, listing=describe_searches,
                        help="list the searches --search takes (and what each does) and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, task, text in (
        ("transcribe", "transcribe", "stream AUDIO through the model and print the transcript as it is committed"),
        ("translate", "translate", "stream AUDIO and print its translation: into English (multilingual Whisper), "
                                   "or with --to LANG through a cascade ASR -> MT (-> speech with --speak)"),
    ):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("audio", help="audio file in any format libsndfile or FFmpeg reads (wav, flac, ogg, mp3, m4a, "
                                      "webm, ...; any sample rate and channel count), read a block at a time")
        add_stream_arguments(p)
        show_preset_values(p, task)
        if name == "translate":
            add_cascade_arguments(p)
        p.add_argument("--realtime", action="store_true",
                       help="computation-aware: feed audio at wall-clock speed while the model computes")
        add_output_arguments(p)
        p.set_defaults(func=run_stream if name == "transcribe" else run_translate, task=task)
    evaluation_commands.register(sub)  # eval, score, sweep
    ctc_commands.register(sub)  # train-ctc
    serve_commands.register(sub)  # serve
    live_commands.register(sub)  # live
    return parser


def run_translate(args: argparse.Namespace) -> int:
    """The translate subcommand: a cascade with ``--to LANG``, else the model's own translation into English."""
    return run_cascade(args) if args.to else run_stream(args)


def run_stream(args: argparse.Namespace) -> int:
    """The transcribe subcommand (and translate without ``--to``)."""
    options = stream_options_from_args(args)
    reader = open_audio(args.audio)
    output = StreamOutput(args.format, args.output, args.realtime, args.cue_times, args.merge_short_cues)
    model = model_from_args(args, task=args.task)
    from simulst.streaming.engine import SpeechEngine  # (torch: loaded with the model, not with the parser)

    reader = at_rate(reader, args.audio, model.sample_rate)
    session = SpeechEngine(model).open(options, catch_up=args.realtime)
    wall_s = stream_file(session, reader, output, output.emit, args.realtime)
    source_s = reader.duration_s
    costs = session.costs
    rtf = costs.compute_s / source_s if source_s else 0.0
    if output.json:
        print(json.dumps(final_record(session, source_s, wall_s), ensure_ascii=False), flush=True)
    else:
        words = len(session.text.split())
        print(f"\n{session.text}", file=output.summary)
        print(
            f"-- {words} words, {source_s:.2f} s of source, {costs.compute_s:.2f} s of compute, "
            f"real-time factor {rtf:.3f}, {len(session.emissions)} emissions, {costs.decoder_calls} decoder passes",
            file=output.summary, flush=True,
        )
    if reader.silent():
        print("simulst: the audio is silent: nothing to transcribe", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``simulst`` command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except SimulstError as err:
        print(f"simulst: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("simulst: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
