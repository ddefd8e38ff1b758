"""``simulst live``: live captions (transcript, or translation with ``--to LANG``) of the microphone in the terminal.

::

    simulst live                                  # default input device, until Ctrl-C
    simulst live --input-device 2 --duration 30   # device 2, stop after 30 s of audio
    simulst live --to es --format srt -o live.srt # Spanish captions into live.srt, live lines on stdout
    simulst live --list-devices

The stream runs in real time (``catch_up``: a model slower than the speaker reads bigger chunks); each emission is
printed as it is committed with the wall-clock time since the capture began. Ctrl-C (or the end of ``--duration``)
finishes the stream, prints the last words and the summary, and exits with 0. No input device: exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from simulst.audio.io import SILENCE_PEAK
from simulst.audio.microphone import Microphone, find_input_device, list_input_devices
from simulst.cli.cascade import add_cascade_arguments, cascade_from_args
from simulst.cli.options import add_stream_arguments, model_from_args, stream_options_from_args
from simulst.cli.printing import StreamOutput, add_output_arguments, final_record
from simulst.errors import OptionError
from simulst.types import Emission

if TYPE_CHECKING:
    from simulst.streaming.engine import Engine, Stream


def register(subparsers: Any) -> None:
    """Add ``live`` to the ``simulst`` argument parser's subparsers."""
    text = "live captions of the microphone: transcribe (or translate with --to LANG) what it hears, as it is said"
    p = subparsers.add_parser("live", help=text, description=text)
    group = p.add_argument_group("microphone")
    group.add_argument("--input-device", metavar="ID_OR_NAME", default=None,
                       help="input device: its index or part of its name (default: the system's default input; "
                            "see --list-devices)")
    group.add_argument("--list-devices", action="store_true", help="list the input devices and exit")
    group.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                       help="stop after SECONDS of audio (default: until Ctrl-C)")
    group.add_argument("--capture-rate", type=float, default=None, metavar="HZ",
                       help="open the device at HZ (default: its default rate; resampled to the model's)")
    add_stream_arguments(p)
    p.add_argument("--task", choices=("transcribe", "translate"), default="transcribe",
                   help="Whisper task (translate: into English, multilingual models); default transcribe")
    add_cascade_arguments(p, speech=False)
    add_output_arguments(p)
    p.set_defaults(func=live_command)


@dataclass(frozen=True)
class LiveResult:
    """What a live loop read: ``source_s`` of audio in ``wall_s``; ``interrupted``: stopped by Ctrl-C; ``silent``: the
    audio was digital silence (a muted microphone)."""

    source_s: float
    wall_s: float
    interrupted: bool
    silent: bool


def run_live_loop(stream: Stream, blocks: Iterable[np.ndarray], output: StreamOutput,
                  start: float | None = None) -> LiveResult:
    """Push each block of audio (mono, the stream's rate) into ``stream`` as it comes and print each emission through
    ``output`` with the wall-clock ms since ``start`` (a ``time.perf_counter()`` value; default: now). Ctrl-C or the
    end of ``blocks`` finishes the stream; then the captions are closed at the end of the audio read."""
    start = time.perf_counter() if start is None else start
    samples = 0
    peak = 0.0
    interrupted = False

    def emit_all(emissions: Iterable[Emission]) -> None:
        for emission in emissions:
            output.emit(emission, (time.perf_counter() - start) * 1000.0)

    try:
        try:
            for block in blocks:
                samples += block.shape[0]
                if block.size:
                    peak = max(peak, float(np.max(np.abs(block))))
                emit_all(stream.push(block))
        except KeyboardInterrupt:
            interrupted = True
        emit_all(stream.finish())
    except BaseException:
        output.close(None)  # what was committed is still written
        raise
    source_s = samples / stream.sample_rate
    output.close(source_s * 1000.0)
    return LiveResult(source_s, time.perf_counter() - start, interrupted, silent=peak < SILENCE_PEAK)


def print_summary(stream: Stream, result: LiveResult, output: StreamOutput, overflows: int = 0) -> None:
    """The final summary, as ``simulst transcribe`` prints it (``--json``: the ``{"event": "final"}`` line)."""
    costs = stream.costs
    source_text = getattr(stream, "source_text", None)
    if output.json:
        record = final_record(stream, result.source_s, result.wall_s)
        if source_text is not None:
            record["source_text"] = source_text
        record.update({"interrupted": result.interrupted, "input_overflows": overflows})
        print(json.dumps(record, ensure_ascii=False), flush=True)
        return
    rtf = costs.compute_s / result.source_s if result.source_s else 0.0
    print(f"\n{stream.text}", file=output.summary)
    if source_text is not None:
        print(f"(source: {source_text})", file=output.summary)
    print(
        f"-- {len(stream.text.split())} words, {result.source_s:.2f} s of source, {costs.compute_s:.2f} s of compute, "
        f"real-time factor {rtf:.3f}, {len(stream.emissions)} emissions, {costs.decoder_calls} decoder passes",
        file=output.summary, flush=True,
    )


def live_command(args: argparse.Namespace) -> int:
    """``simulst live``: exit code 0 (also on Ctrl-C); a missing device raises ``DeviceError`` (exit code 2)."""
    if args.list_devices:
        devices = list_input_devices()
        if not devices:
            print("no audio input devices found (PortAudio sees none)")
        for device in devices:
            print(device.describe())
        return 0
    if args.duration is not None and args.duration <= 0:
        raise OptionError(f"--duration must be positive, got {args.duration:g}")
    if args.capture_rate is not None and args.capture_rate <= 0:
        raise OptionError(f"--capture-rate must be positive, got {args.capture_rate:g}")
    options = stream_options_from_args(args)
    device = find_input_device(args.input_device)  # fails before the model loads
    output = StreamOutput(args.format, args.output, realtime=True, cue_times=args.cue_times,
                          merge_short=args.merge_short_cues)
    from simulst.streaming.engine import SpeechEngine  # (torch: loaded with the model, not with the parser)

    try:
        engine: Engine = cascade_from_args(args) if args.to else SpeechEngine(model_from_args(args, task=args.task))
        stream = engine.open(options, catch_up=True)
        mic = Microphone(engine.sample_rate, device, capture_rate=args.capture_rate)
        mic.start()
    except BaseException:
        output.close(None)
        raise
    with mic:
        print(f"simulst: listening to {device.name} ({mic.capture_rate:g} Hz); Ctrl-C to stop", file=sys.stderr,
              flush=True)
        result = run_live_loop(stream, mic.blocks(args.duration), output, start=mic.started_at)
    print_summary(stream, result, output, mic.overflows)
    if mic.overflows:
        print(f"simulst: {mic.overflows} input overflows: some audio was lost", file=sys.stderr)
    if result.silent:
        print("simulst: the microphone heard only silence (muted?)", file=sys.stderr)
    return 0
