"""``simulst translate AUDIO --to LANG``: the cascade (streaming ASR → simultaneous MT → optional speech).

Same output contract as :func:`simulst.cli.main.run_stream`: one line per translated emission as it is committed
(``--json``: ``{"event": "emission", "text", "source_ms", "elapsed_ms"}``, times on the *audio* timeline), then a
summary (``--json``: ``{"event": "final", "text", "source_text", "source_ms", "compute_s", "rtf",
"decoder_passes", ...}``). ``--speak OUT.wav`` also writes the translated speech and reports its StartOffset /
EndOffset. ``--format srt|vtt [-o FILE]`` writes live subtitles of the translated text. Offline by default:
Whisper tiny.en + Apertium + espeak-ng.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from simulst.cli.options import (
    ArgumentGroups,
    cli_options,
    given_options,
    model_from_args,
    options_from_args,
    stream_options_from_args,
)
from simulst.cli.printing import StreamOutput, final_record
from simulst.cli.reading import at_rate, open_audio, stream_file
from simulst.config.fields import CASCADE
from simulst.errors import OptionError
from simulst.mt.options import MTOptions
from simulst.tts.espeak import EspeakSynthesizer
from simulst.tts.timeline import SpeechOutput
from simulst.types import Emission

if TYPE_CHECKING:  # (the engines load torch: imported where a cascade is built, not with the parser)
    from simulst.streaming.cascade import CascadeEngine, CascadeSession


def add_cascade_arguments(parser: argparse.ArgumentParser, speech: bool = True) -> None:
    """Add the cascade options (``--to`` turns the cascade on; the MT stage's from :class:`MTOptions`' fields);
    ``speech=False`` leaves out the speech output."""
    groups = ArgumentGroups(parser)
    group = groups[CASCADE]
    group.add_argument("--to", metavar="LANG", default=None,
                       help="translate into LANG with a cascade: the ASR transcript (source language: --language, "
                            "default en) goes through a simultaneous MT stage, e.g. --to es")
    group.add_argument("--mt", default="apertium", metavar="apertium|DIR_OR_HUB_ID",
                       help="MT backend: apertium (default, offline: Debian apertium + apertium-eng-spa), "
                            "apertium:PAIR, or a Hugging Face MarianMT / M2M100 / NLLB directory or hub id")
    for option in cli_options(MTOptions):
        groups.add(option)
    if speech:
        group.add_argument("--speak", metavar="OUT.wav", default=None,
                           help="also synthesise each translated increment (espeak-ng) and write the speech as a "
                                "wav, each piece at max(end of the previous, its emission time)")
        group.add_argument("--voice", default=None, help="espeak-ng voice (default: the --to language)")
        group.add_argument("--speech-rate", type=int, default=175, help="speaking rate, words per minute (175)")
        group.add_argument("--speak-clock", choices=("source", "elapsed", "wall"), default=None,
                           help="when a piece may start: its emission's source time, its computation-aware "
                                "elapsed time, or (with --realtime) the wall-clock time it was emitted; each "
                                "after its synthesis (default: wall with --realtime, else source)")


def mt_options_from_args(args: argparse.Namespace) -> MTOptions:
    """Build (and validate) :class:`MTOptions`; raises ``OptionError``."""
    return options_from_args(MTOptions, args)


def cascade_from_args(args: argparse.Namespace, mt_options: MTOptions | None = None) -> CascadeEngine:
    """The cascade the arguments name (``mt_options``: built from them already).

    Raises:
        ModelLoadError, OptionError: as the loaders do; ``--mt-search`` / ``--mt-beam`` given for a backend that
            takes no search (Apertium), which would ignore them.
    """
    from simulst.mt.loading import load_mt
    from simulst.streaming.cascade import CascadeEngine, cascade_source

    mt_options = mt_options or mt_options_from_args(args)
    source = cascade_source(args.language).strip().lower()
    mt = load_mt(args.mt, source, args.to, args.device)
    search_flags = [f"--{dest.replace('_', '-')}" for dest in ("mt_search", "mt_beam") if dest in given_options(args)]
    if search_flags and not mt.searches:
        raise OptionError(f"{' and '.join(search_flags)}: the {mt.name} MT backend has no search to set (it "
                          "translates each source prefix in one call); drop the flag, or use a neural --mt model")
    asr = model_from_args(argparse.Namespace(**{**vars(args), "language": source}), task="transcribe")
    return CascadeEngine(asr, mt, mt_options)


def run_cascade(args: argparse.Namespace) -> int:
    """``simulst translate AUDIO --to LANG [...]``: exit code 0 (1 when the audio is silent)."""
    if not args.to:
        raise OptionError("the cascade needs a target language (--to LANG)")
    options = stream_options_from_args(args, task="transcribe")  # the speech model transcribes
    mt_options = mt_options_from_args(args)
    speech = _speech_output(args)
    reader = open_audio(args.audio)
    output = StreamOutput(args.format, args.output, args.realtime, args.cue_times, args.merge_short_cues)
    engine = cascade_from_args(args, mt_options)
    reader = at_rate(reader, args.audio, engine.sample_rate)
    cascade = engine.open(options, catch_up=args.realtime)

    def emit(emission: Emission, wall_ms: float) -> None:
        output.emit(emission, wall_ms)
        if speech is not None:
            speech.add(emission, wall_ms)

    wall_s = stream_file(cascade, reader, output, emit, args.realtime)  # captions of the translated text
    source_s = reader.duration_s
    report = _write_speech(speech, args.speak, source_s) if speech is not None else None
    _print_summary(cascade, engine, output, source_s, wall_s, report)
    if reader.silent():
        print("simulst: the audio is silent: nothing to translate", file=sys.stderr)
        return 1
    return 0


def _speech_output(args: argparse.Namespace) -> SpeechOutput | None:
    """The speech output ``--speak`` asks for (None: none)."""
    if not args.speak:
        return None
    clock = args.speak_clock or ("wall" if args.realtime else "source")
    if clock == "wall" and not args.realtime:
        raise OptionError("--speak-clock wall needs --realtime")
    return SpeechOutput(EspeakSynthesizer(args.voice or args.to, args.speech_rate), clock=clock)


def _write_speech(speech: SpeechOutput, path: str, source_s: float) -> tuple[str, dict[str, Any]]:
    """Write the translated speech to ``path``; what the summary reports of it: a line, and the JSON record."""
    written = speech.write(path, min_ms=source_s * 1000.0)
    m = speech.metrics(source_s * 1000.0)
    offsets = "no speech" if m.start_offset_ms is None or m.end_offset_ms is None else (
        f"StartOffset {m.start_offset_ms / 1000.0:.2f} s, EndOffset {m.end_offset_ms / 1000.0:.2f} s")
    line = (f"-- speech: {written}, {m.duration_ms / 1000.0:.2f} s, {m.segments} segments, {offsets} "
            f"({speech.clock} clock)")
    return line, {
        "path": str(written),
        "duration_s": round(m.duration_ms / 1000.0, 3),
        "speech_s": round(m.speech_ms / 1000.0, 3),
        "segments": m.segments,
        "start_offset_ms": None if m.start_offset_ms is None else round(m.start_offset_ms, 1),
        "end_offset_ms": None if m.end_offset_ms is None else round(m.end_offset_ms, 1),
        "clock": speech.clock,
        "synthesis_s": round(m.synthesis_s, 4),
    }


def _print_summary(cascade: CascadeSession, engine: CascadeEngine, output: StreamOutput, source_s: float,
                   wall_s: float, speech: tuple[str, dict[str, Any]] | None) -> None:
    """The final summary: the ``{"event": "final"}`` JSON line, or the text, its source and the counters."""
    mt_name, mt_policy, mt_compute_s = engine.mt.name, engine.mt_options.policy, cascade.mt.costs.compute_s
    if output.json:
        final = final_record(cascade, source_s, wall_s)
        final.update({"source_text": cascade.source_text, "mt": mt_name, "mt_policy": str(mt_policy),
                      "mt_compute_s": round(mt_compute_s, 4)})
        if speech is not None:
            final["speech"] = speech[1]
        print(json.dumps(final, ensure_ascii=False), flush=True)
        return
    costs = cascade.costs
    rtf = costs.compute_s / source_s if source_s else 0.0
    print(f"\n{cascade.text}", file=output.summary)
    print(f"(source: {cascade.source_text})", file=output.summary)
    print(
        f"-- {len(cascade.text.split())} words, {source_s:.2f} s of source, {costs.compute_s:.2f} s of compute "
        f"({mt_compute_s:.2f} s MT), real-time factor {rtf:.3f}, {len(cascade.emissions)} "
        f"emissions, {costs.decoder_calls} decoder passes, MT {mt_name} {mt_policy}",
        file=output.summary, flush=True,
    )
    if speech is not None:
        print(speech[0], file=output.summary, flush=True)
