"""Performance of the default configuration and its ablations on this CPU, against the engine-speed anchor.

Three parts, written to ``bench/results/performance.md`` (+ ``.csv``; ``--out`` elsewhere):

1. **Streaming runs** on the 6 shared English utterances (jfk + fleurs-en-dev, 51.9 s), each fed at the pace of a
   live speaker (``feed_realtime``, exactly ``simulst transcribe AUDIO --realtime``: audio arrives at wall-clock
   speed; a decode reads what has arrived). WER (normalised), AL (source clock), AL_CA (each word's delay = the
   wall-clock time of the emission that wrote it, the ``--realtime`` JSON's ``elapsed_ms``), RTF = compute /
   audio, decoder passes and encoder calls. SimulEval conventions, word unit, |Y*| = reference words.
2. **WER over chunk phases**: where the chunk boundaries fall in the speech decides which early guesses two
   consecutive hypotheses agree on, so one run's WER is one draw. Each utterance is streamed again with the chunk
   grid shifted by k/K of a chunk (``initial_wait_ms`` = chunk x (1 + k/K), k = 0 .. K-1, ``--phases K``) on the
   computation-unaware clock (every chunk decoded, compute measured, not waited for): the mean, best and worst
   corpus WER of the K grids. A live stream meets a random phase, so the mean is the figure to compare.
3. **Engine speed against CTranslate2** (PyPI ``ctranslate2``, the engine of faster-whisper and whisper_streaming)
   running the same tiny.en weights: one encoder call on a full 30 s window and one decoder step (batch 1, a
   40-token cache), ours against CTranslate2's, as medians over repeats. CTranslate2 has no single-step API: its
   step time is (greedy ``generate`` time - its encoder time) / generated tokens, on jfk.

    OMP_NUM_THREADS=2 .venv/bin/python bench/performance.py [--configs default,chunk-1000,...] [--phases 6]

The configurations (``--list`` prints them) are ablations of one thing each against the default.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    Item,
    ct2_whisper,
    english_set,
    load_average,
    machine_note,
    markdown_table,
    median_s,
    speed_anchor_ms,
    stream,
    write_csv,
    write_report,
)
from simulst.config import ModelOptions, PolicyOptions, SearchOptions, StreamOptions
from simulst.evaluation.latency import average_lagging
from simulst.evaluation.quality import normalize_for_wer, wer
from simulst.models.loading import load_model
from simulst.models.whisper import WhisperModel
from simulst.streaming.engine import SpeechEngine
from simulst.streaming.feed import feed_realtime
from simulst.types import Costs

RESULTS = Path(__file__).resolve().parent / "results"
MODEL = "whisper-tiny.en"


@dataclasses.dataclass(frozen=True)
class Config:
    """One row: the model's and the stream's options (everything not named is the default)."""

    name: str
    note: str
    model: ModelOptions
    stream: StreamOptions


def _configs() -> list[Config]:
    default_model, default_stream = ModelOptions(MODEL), StreamOptions()

    def model(**kw: Any) -> ModelOptions:
        return dataclasses.replace(default_model, **kw)

    def stream(**kw: Any) -> StreamOptions:
        return dataclasses.replace(default_stream, **kw)

    return [
        Config("default", "no flags", default_model, default_stream),
        Config("previous-default", "--window full --chunk-ms 1000 --segment-s 8 --max-buffer-s 16 --normalize-peak "
               "none --no-draft --early-logprob-threshold none (the default until 2026-11-23)", model(window="full"),
               stream(chunk_ms=1000.0, segment_s=8.0, max_buffer_s=16.0, normalize_peak=None,
                      search=SearchOptions(draft=False), early_logprob_threshold=None)),
        Config("no-early-guard", "--early-logprob-threshold none (the low-confidence guard at -1.5 throughout; "
               "the default until 2026-11-24)", default_model, stream(early_logprob_threshold=None)),
        Config("no-normalize", "--normalize-peak none", default_model, stream(normalize_peak=None)),
        Config("no-draft", "--no-draft", default_model, stream(search=SearchOptions(draft=False))),
        Config("window-full", "--window full (Whisper's 30 s)", model(window="full"), default_stream),
        Config("window-min-0", "--window-min-ms 0 (the audio read + 2 s)", model(window_min_ms=0.0), default_stream),
        Config("chunk-500", "--chunk-ms 500", default_model, stream(chunk_ms=500.0)),
        Config("chunk-1000", "--chunk-ms 1000", default_model, stream(chunk_ms=1000.0)),
        Config("la-3", "--policy la-3 (three chunks must agree)", default_model,
               stream(policy=PolicyOptions.parse("la-3"))),
        Config("logprob-0.7", "--logprob-threshold -0.7 (the low-confidence guard at -0.7 throughout; default: "
               "-0.7 within a segment, -1.5 past it)", default_model, stream(logprob_threshold=-0.7)),
        Config("ctc", "--policy ctc", model(ctc_head="default"), stream(policy=PolicyOptions.parse("ctc"))),
        Config("alignatt", "--policy alignatt", default_model, stream(policy=PolicyOptions.parse("alignatt"))),
        Config("beam5", "--search beam --beam 5", default_model, stream(search=SearchOptions("beam", 5))),
        Config("whisper-base", "--model whisper-base --language en (multilingual base, 74 M parameters)",
               ModelOptions("whisper-base", language="en"), default_stream),
    ]


def run_realtime(engine: SpeechEngine, options: StreamOptions, item: Item) -> dict[str, Any]:
    """One utterance at real-time pace: text, per-word (source ms, wall ms) delays and the costs."""
    session = engine.open(options, catch_up=True)
    walls: list[tuple[str, float, float]] = []
    feed_realtime(session, item.audio, lambda e, wall: walls.append((e.text, e.source_ms, wall)))
    source = [s for text, s, _ in walls for _ in text.split()]
    wall = [w for text, _, w in walls for _ in text.split()]
    return {"text": session.text, "source": source, "wall": wall, "costs": session.costs}


def score(items: list[Item], runs: list[dict[str, Any]]) -> dict[str, float]:
    al, al_ca = [], []
    for item, run in zip(items, runs, strict=True):
        if run["source"]:
            ref_words = len(item.transcript.split())
            al.append(average_lagging(run["source"], item.source_ms, ref_words))
            al_ca.append(average_lagging(run["wall"], item.source_ms, ref_words))
    costs: list[Costs] = [r["costs"] for r in runs]
    audio_s = sum(i.source_ms for i in items) / 1000.0
    return {
        "WER": wer([r["text"] for r in runs], [i.transcript for i in items], normalize_for_wer),
        "AL": statistics.fmean(al) / 1000.0 if al else float("nan"),
        "AL_CA": statistics.fmean(al_ca) / 1000.0 if al_ca else float("nan"),
        "RTF": sum(c.compute_s for c in costs) / audio_s,
        "decoder_passes": sum(c.decoder_calls for c in costs),
        "encoder_calls": sum(c.encoder_calls for c in costs),
    }


def phase_wers(engine: SpeechEngine, options: StreamOptions, items: list[Item], phases: int) -> dict[str, float]:
    """Corpus WER with the chunk grid shifted by k/``phases`` of a chunk, k = 0 .. phases-1 (computation-unaware
    feeding): their mean, best and worst."""
    first = options.initial_wait_ms or options.chunk_ms
    wers = []
    for k in range(phases):
        shifted = dataclasses.replace(options, initial_wait_ms=first + k * options.chunk_ms / phases)
        texts = [stream(engine.model, shifted, item.audio).text for item in items]
        wers.append(wer(texts, [i.transcript for i in items], normalize_for_wer))
    return {"WER_phases_mean": statistics.fmean(wers), "WER_phases_best": min(wers), "WER_phases_worst": max(wers)}


def engine_speed(audio: np.ndarray, repeats: int = 7) -> list[dict[str, Any]]:
    """Our encoder call and decoder step against CTranslate2's on the same weights (full 30 s window)."""
    return [_speed_row(audio, compute_type, precision, repeats)
            for compute_type, precision in (("float32", "fp32"), ("int8", "int8"))]


def _speed_row(audio: np.ndarray, compute_type: str, precision: str, repeats: int) -> dict[str, Any]:
    ct2, features = ct2_whisper(audio, compute_type)
    ours = load_model(MODEL, window="full", precision=precision)
    assert isinstance(ours, WhisperModel)
    costs = Costs()
    ct2_encode = median_s(lambda: ct2.encode(features), repeats)
    our_encode = median_s(lambda: ours.encode(audio, costs), repeats)
    prompt = [ours.sot_id, ours.no_timestamps_id]
    result = ct2.generate(features, [prompt], beam_size=1, max_length=448)
    n_tokens = len(result[0].sequences_ids[0]) + 1  # + <|endoftext|>
    ct2_generate = median_s(lambda: ct2.generate(features, [prompt], beam_size=1, max_length=448), repeats)
    ct2_step = (ct2_generate - ct2_encode) / n_tokens
    _, state = ours.start(ours.encode(audio, costs), list(range(300, 340)), costs)
    token = torch.tensor([400])
    our_step = median_s(lambda: ours.step(state, token, costs), repeats * 5)
    row = {"precision": f"ours {precision} / CT2 {compute_type}", "our_encoder_ms": our_encode * 1000,
           "ct2_encoder_ms": ct2_encode * 1000, "encoder_ratio": our_encode / ct2_encode,
           "our_step_ms": our_step * 1000, "ct2_step_ms": ct2_step * 1000, "step_ratio": our_step / ct2_step}
    print(row, flush=True)
    return row


STREAM_COLUMNS = ["config", "flags", "WER", "AL", "AL_CA", "RTF", "decoder_passes", "encoder_calls", "WER_phases_mean",
                  "WER_phases_best", "WER_phases_worst"]
SPEED_COLUMNS = ["precision", "our_encoder_ms", "ct2_encoder_ms", "encoder_ratio", "our_step_ms", "ct2_step_ms",
                 "step_ratio"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default=None, help="comma-separated names (default: all)")
    parser.add_argument("--list", action="store_true", help="print the configurations and exit")
    parser.add_argument("--no-anchor", action="store_true", help="skip the CTranslate2 comparison")
    parser.add_argument("--out", type=Path, default=RESULTS / "performance.md",
                        help="the table (a .csv beside it; default bench/results/performance.md)")
    parser.add_argument("--phases", type=int, default=6,
                        help="chunk-grid shifts per configuration for the WER over phases (0: skip; default 6)")
    args = parser.parse_args()
    load_before = load_average()
    anchor_ms = None if args.no_anchor or args.list else speed_anchor_ms()
    configs = _configs()
    if args.list:
        for c in configs:
            print(f"{c.name:24s} {c.note}\n{'':24s} {c.model}\n{'':24s} {c.stream}")
        return
    if args.configs:
        wanted = args.configs.split(",")
        configs = [c for c in configs if c.name in wanted]
    items = english_set()
    rows = []
    engines: dict[ModelOptions, SpeechEngine] = {}
    for config in configs:
        engine = engines.get(config.model) or engines.setdefault(config.model, SpeechEngine.load(config.model))
        runs = [run_realtime(engine, config.stream, item) for item in items]
        row = {"config": config.name, "flags": config.note, **score(items, runs)}
        if args.phases > 0:
            row.update(phase_wers(engine, config.stream, items, args.phases))
        rows.append(row)
        print(markdown_table([rows[-1]], STREAM_COLUMNS).splitlines()[-1], flush=True)
    speed = [] if args.no_anchor else engine_speed(items[0].audio)
    write(rows, speed, args.phases, args.out, load_before, anchor_ms)


def write(
    rows: list[dict[str, Any]], speed: list[dict[str, Any]], phases: int, out: Path, load_before: float,
    anchor_ms: float | None = None,
) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(out.with_suffix(".csv"), rows, STREAM_COLUMNS)
    lines = [
        "# Performance on this CPU: the default and its ablations (Whisper tiny.en)",
        "",
        "Written by `bench/performance.py` on the 6 shared English utterances (jfk + fleurs-en-dev, 51.9 s), each "
        "fed at real-time pace (`--realtime`). WER normalised (%); AL (source clock) and AL_CA (wall clock of each "
        "word's emission) in seconds, word unit, mean over utterances; RTF = compute / audio; passes and calls "
        f"are totals. `WER_phases_*`: the mean, best and worst corpus WER over {phases} chunk grids shifted by "
        f"k/{phases} of a chunk (computation-unaware clock; see the script): a live stream meets a random phase. "
        "The bar (whisper_streaming, LocalAgreement-2 over faster-whisper int8, tiny.en, 1 s chunks, "
        "16 utterances incl. these 6): WER 7.2 %, AL_CA 2.70 s, RTF 0.5-0.6. Target: WER <= 6 %, AL_CA <= 1.4 s, "
        "RTF <= 0.25 with no flags.",
        "",
        f"Run: {machine_note(load_before, anchor_ms)}.",
        "",
        markdown_table(rows, STREAM_COLUMNS),
        "",
    ]
    if speed:
        lines += [
            "## Engine speed against CTranslate2 (same tiny.en weights, full 30 s window, jfk)",
            "",
            "Medians; `*_ratio` = ours / CTranslate2's (below 1: we are faster).",
            "",
            markdown_table(speed, SPEED_COLUMNS),
            "",
        ]
    write_report(out, "\n".join(lines))


if __name__ == "__main__":
    main()
