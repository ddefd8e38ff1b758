"""``simulst``: stream an audio file through a simultaneous model and print the output as it is committed.

Exit codes: 0 success, 1 the audio is silent (empty output), 2 bad input or options, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from simulst.audio.io import is_silent, load_audio
from simulst.cli_options import add_stream_arguments, model_from_args, stream_options_from_args
from simulst.errors import SimulstError
from simulst.session import Session, Stream, ensure_fits
from simulst.types import Emission


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(prog="simulst", description="Simultaneous speech translation and transcription.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, task, text in (
        ("transcribe", "transcribe", "stream AUDIO through the model and print the transcript as it is committed"),
        ("translate", "translate", "stream AUDIO and print its translation: into English (multilingual Whisper), "
                                   "or with --to LANG through a cascade ASR -> MT (-> speech with --speak)"),
    ):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("audio", help="audio file (wav, flac, ogg; any sample rate and channel count)")
        add_stream_arguments(p)
        if name == "translate":
            from simulst.cascade.cli import add_cascade_arguments

            add_cascade_arguments(p)
        p.add_argument("--realtime", action="store_true",
                       help="computation-aware: feed audio at wall-clock speed while the model computes")
        p.add_argument("--json", action="store_true", help="print JSON lines only (one per emission, then a final one)")
        p.set_defaults(func=run_stream, task=task)
    _register_extra(sub)
    return parser


def _register_extra(sub: argparse._SubParsersAction) -> None:
    """Subcommands that live in other packages: eval, score, sweep (evaluation) and train-ctc (ctc)."""
    from simulst.ctc import commands as ctc_commands
    from simulst.evaluation import commands as evaluation_commands

    evaluation_commands.register(sub)
    ctc_commands.register(sub)


def run_stream(args: argparse.Namespace) -> int:
    """The transcribe / translate subcommands."""
    if getattr(args, "to", None):
        from simulst.cascade.cli import run_cascade

        return run_cascade(args)
    options = stream_options_from_args(args)
    audio = load_audio(args.audio)
    model = model_from_args(args, task=args.task)
    if model.sample_rate != 16000:
        audio = load_audio(args.audio, model.sample_rate)
    ensure_fits(model, audio.shape[0])  # refuse before streaming, not after 30 s of it
    session = Session(model, options, catch_up=args.realtime)
    printer = json_printer if args.json else text_printer
    wall_start = time.perf_counter()
    feed = feed_realtime if args.realtime else feed_fast
    feed(session, audio, lambda e, wall: printer(e, wall if args.realtime else None))
    wall_s = time.perf_counter() - wall_start
    source_s = audio.shape[0] / model.sample_rate
    costs = session.costs
    rtf = costs.compute_s / source_s if source_s else 0.0
    if args.json:
        final = {
            "event": "final",
            "text": session.text,
            "source_ms": round(source_s * 1000.0, 3),
            "compute_s": round(costs.compute_s, 4),
            "rtf": round(rtf, 4),
            "decoder_passes": costs.decoder_calls,
            "decoder_positions": costs.decoder_positions,
            "encoder_calls": costs.encoder_calls,
            "emissions": len(session.emissions),
            "wall_s": round(wall_s, 4),
        }
        print(json.dumps(final, ensure_ascii=False), flush=True)
    else:
        words = len(session.text.split())
        print(f"\n{session.text}")
        print(
            f"-- {words} words, {source_s:.2f} s of source, {costs.compute_s:.2f} s of compute, "
            f"real-time factor {rtf:.3f}, {len(session.emissions)} emissions, {costs.decoder_calls} decoder passes",
            flush=True,
        )
    if is_silent(audio):
        print("simulst: the audio is silent: nothing to transcribe", file=sys.stderr)
        return 1
    return 0


Emit = Callable[[Emission, float], None]


def feed_fast(stream: Stream, audio: np.ndarray, emit: Emit) -> None:
    """Computation-unaware: push the file chunk by chunk as fast as the model goes; ``emit(e, wall_ms)``."""
    start = time.perf_counter()
    step = stream.chunk_samples
    for pos in range(0, audio.shape[0], step):
        for emission in stream.push(audio[pos : pos + step]):
            emit(emission, (time.perf_counter() - start) * 1000.0)
    for emission in stream.finish():
        emit(emission, (time.perf_counter() - start) * 1000.0)


def feed_realtime(stream: Stream, audio: np.ndarray, emit: Emit) -> None:
    """Computation-aware: audio becomes available at wall-clock speed; the model reads whatever has arrived."""
    rate = stream.sample_rate
    start = time.perf_counter()
    pos = 0
    total = audio.shape[0]
    while pos < total:
        now = time.perf_counter() - start
        available = min(total, int(now * rate))
        if available > pos:
            for emission in stream.push(audio[pos:available]):
                emit(emission, (time.perf_counter() - start) * 1000.0)
            pos = available
        else:
            time.sleep(max(0.001, min(total, stream.next_decode) / rate - now))
    for emission in stream.finish():
        emit(emission, (time.perf_counter() - start) * 1000.0)


def text_printer(emission: Emission, wall_ms: float | None) -> None:
    """One live line: ``[source s (wall s)] text``."""
    clock = f" wall {wall_ms / 1000.0:6.2f} s" if wall_ms is not None else ""
    print(f"[{emission.source_ms / 1000.0:6.2f} s{clock}] {emission.text}", flush=True)


def json_printer(emission: Emission, wall_ms: float | None) -> None:
    """One JSON line of the CLI contract; ``elapsed_ms`` is the wall clock in real-time mode."""
    record = {
        "event": "emission",
        "text": emission.text,
        "source_ms": round(emission.source_ms, 3),
        "elapsed_ms": round(wall_ms if wall_ms is not None else emission.elapsed_ms, 3),
    }
    print(json.dumps(record, ensure_ascii=False), flush=True)


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
