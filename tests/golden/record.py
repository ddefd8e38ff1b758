"""Record the golden outputs of every policy × search family on the shared English speech.

``python -m tests.golden.record`` writes ``tests/golden/outputs.json``: for each configuration and utterance (jfk +
fleurs-en-dev, Whisper tiny.en from ``../shared/models``), every emission's text and source time, the final text and
the work counters. ``tests/test_golden.py`` re-runs the configurations and asserts the outputs are identical, so a
redesign of the engine cannot change what a user sees (or how many decoder passes it takes to get there).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.shared_assets import WHISPER_TINY_EN, english_items

OUTPUTS = Path(__file__).resolve().parent / "outputs.json"


@dataclass(frozen=True)
class Config:
    """One golden configuration: model variant, policy, search, and whether it is the en→es cascade."""

    name: str
    policy: str
    search: str = "greedy"
    window: str = "audio"
    precision: str = "fp32"
    carry_over: bool = False
    ctc_head: bool = False
    cascade: bool = False


CONFIGS = (
    Config("la2-greedy-full", "la-2", window="full"),
    Config("hold6-greedy-full", "hold-6", window="full"),
    Config("offline-beam-full", "offline", "beam", window="full"),
    Config("la2-greedy-audio", "la-2"),
    Config("la2-greedy-audio-int8", "la-2", precision="int8"),
    Config("wait3-greedy-audio", "wait-3"),
    Config("sp2-beam-audio", "sp-2", "beam"),
    Config("la2-bwbs-audio", "la-2", "bwbs"),
    Config("la2-bwbs-carry-audio", "la-2", "bwbs", carry_over=True),
    Config("la2-ibwbs-audio", "la-2", "ibwbs"),
    Config("la2-ibwbs-carry-audio", "la-2", "ibwbs", carry_over=True),
    Config("la2-ibwbs2-audio", "la-2", "ibwbs2"),
    Config("la2-ibwbs2-carry-audio", "la-2", "ibwbs2", carry_over=True),
    Config("la2-rewind-audio", "la-2", "rewind"),
    Config("ctc-greedy-audio", "ctc", ctc_head=True),
    Config("ctc-beam-audio", "ctc", "beam", ctc_head=True),
    Config("cascade-en-es-la2-audio", "la-2", cascade=True),
)
CHUNK_MS = 1000.0
BEAM = 4


def load(config: Config, models: dict[tuple[str, str, bool], Any]) -> Any:
    """The model variant of ``config`` (loaded once per variant)."""
    from simulst.config import ModelOptions
    from simulst.models.loading import load_model

    options = ModelOptions(str(WHISPER_TINY_EN), window=config.window, precision=config.precision,
                           ctc_head="default" if config.ctc_head else None, window_pad_ms=4000.0, window_min_ms=0.0,
                           screen_vocabulary=False)
    key = (config.window, config.precision, config.ctc_head)
    if key not in models:
        models[key] = load_model(options)
    return models[key]


def engine(config: Config, model: Any) -> Any:
    """The engine of ``config``: the speech model, or the en→es cascade (Apertium, LA-2) over it."""
    from simulst.config import PolicyOptions
    from simulst.mt.apertium import ApertiumMT
    from simulst.mt.options import MTOptions
    from simulst.streaming.cascade import CascadeEngine
    from simulst.streaming.engine import SpeechEngine

    if config.cascade:
        # (sentence-by-sentence MT, added for long streams after the recording, is off)
        return CascadeEngine(model, ApertiumMT("eng-spa"), MTOptions(policy=PolicyOptions.parse("la-2"),
                                                                     sentences=False))
    return SpeechEngine(model)


def run(config: Config, models: dict[tuple[str, str, bool], Any], only: Collection[str] | None = None,
        speech_stage: dict[str, Any] | None = None) -> dict[str, Any]:
    """Stream every shared English utterance (or just those ``only`` names, in the same order through the same
    engine) through ``config``; the outputs per utterance. For the cascade, ``speech_stage`` (when given) receives
    the outputs of its speech-recognition stage per utterance, in the same form."""
    from simulst.audio.io import load_audio
    from simulst.config import PolicyOptions, SearchOptions, StreamOptions
    from simulst.streaming.feed import feed_fast

    # what was added after the redesign is off: the guards (no-speech and low-confidence chunks, the loop guard:
    # it rightly cuts "to the north of the north of ..." in la2-ibwbs-carry-audio), the input level normalisation
    # and greedy search's draft (it takes fewer decoder passes); long-form trimming never acts on 11 s
    options = StreamOptions(chunk_ms=CHUNK_MS, policy=PolicyOptions.parse(config.policy),
                            search=SearchOptions(config.search, beam=BEAM, carry_over=config.carry_over, draft=False),
                            no_speech_threshold=None, logprob_threshold=None, early_logprob_threshold=None,
                            loop_guard=False,
                            segment_s=30.0, max_buffer_s=30.0, normalize_peak=None)
    shared = engine(config, load(config, models))
    out: dict[str, Any] = {}
    for uid, path, _ in english_items():
        if only is not None and uid not in only:
            continue
        stream = shared.open(options)
        emissions = feed_fast(stream, load_audio(path))
        out[uid] = outputs(emissions, stream.text, stream.costs)
        if config.cascade:
            out[uid]["source_text"] = stream.source_text
            if speech_stage is not None:
                speech_stage[uid] = outputs(stream.source_emissions, stream.source_text, stream.asr.costs)
    return out


def outputs(emissions: Sequence[Any], text: str, costs: Any) -> dict[str, Any]:
    """What is recorded of one stream: every emission's text and source time, the final text, the work counters."""
    return {
        "emissions": [[e.text, round(e.source_ms, 3)] for e in emissions],
        "text": text,
        "decoder_calls": costs.decoder_calls,
        "decoder_positions": costs.decoder_positions,
        "encoder_calls": costs.encoder_calls,
    }


def main() -> None:
    """Record all configurations (or those named on the command line) into ``outputs.json``."""
    import torch

    torch.set_num_threads(1)
    recorded: dict[str, Any] = json.loads(OUTPUTS.read_text()) if OUTPUTS.is_file() else {}
    wanted = set(sys.argv[1:])
    models: dict[tuple[str, str, bool], Any] = {}
    for config in CONFIGS:
        if wanted and config.name not in wanted:
            continue
        recorded[config.name] = run(config, models)
        OUTPUTS.write_text(json.dumps(recorded, indent=1, ensure_ascii=False) + "\n")
        print(config.name, "recorded", flush=True)


if __name__ == "__main__":
    main()
