"""Issue-4 benchmark: beam search vs the blockwise searches (BWBS, IBWBS, improved IBWBS, CMU's rewinding step).

Whisper tiny.en (../shared/models), the 6 shared English utterances (jfk + fleurs-en-dev, 51.9 s), beam 5,
LA-2 and hold-6 (n as in the IBWBS paper for offline models), chunks 500/1000/2000 ms; every blockwise search
restarted from the committed output every chunk (the default) and with its kept beam carried over to the next
chunk (``carry_over=True``). Scored by simulst's evaluation package (SimulEval semantics, word latency unit).
Writes bench/results/blockwise_searches.{md,csv} and the per-utterance outputs (blockwise_searches_outputs.tsv).

    OMP_NUM_THREADS=1 .venv/bin/python bench/blockwise_searches.py [--quick]

Cost: every configuration sees the same chunk boundaries of an utterance, so the encoder output of each
(utterance, audio prefix) is computed once and shared. A run that reuses it is charged the encoder call, its
frames and its measured compute time, exactly as if it had encoded itself: decoder/encoder counts are exact,
RTF and AL_CA include the (once-measured) encoder time.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DATA, WHISPER_TINY_EN, machine_note, markdown_table, seconds
from simulst.audio.io import load_audio
from simulst.config import PolicyOptions, SearchOptions, StreamOptions
from simulst.evaluation.instances import InstanceRecord
from simulst.evaluation.manifest import TestItem, read_manifest
from simulst.evaluation.quality import normalize_for_wer, wer
from simulst.evaluation.runner import AudioLoader, EvalOptions, run_instance
from simulst.evaluation.scoring import ScoreOptions, score_records
from simulst.models.base import Encoded, SpeechModel
from simulst.models.loading import load_model
from simulst.streaming.engine import SpeechEngine
from simulst.types import Costs

RESULTS = Path(__file__).resolve().parent / "results"
DISCUSSION = "## Discussion"
BEAM = 5
COLUMNS = ["search", "carry", "policy", "chunk_ms", "WER", "AL", "LAAL", "AL_CA", "RTF", "dec_passes",
           "dec_positions", "enc_calls", "passes_vs_BS", "positions_vs_BS", "emissions", "empty"]


class SharedEncodings:
    """A model whose ``encode`` is computed once per audio prefix of the current utterance and replayed after.

    Everything else is delegated to the wrapped model. A replay charges ``costs`` as the real call did
    (``encoder_calls``, ``encoder_frames``, and the measured seconds into ``compute_s``).
    """

    def __init__(self, model: SpeechModel) -> None:
        self._model = model
        self._cache: dict[int, tuple[Encoded, int, float]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def new_utterance(self) -> None:
        self._cache.clear()

    def encode(self, audio: np.ndarray, costs: Costs, previous: Encoded | None = None,
               reencode_s: float | None = None) -> Encoded:
        if reencode_s is not None:  # (an encoding that reuses the stream's last one is not shared)
            return self._model.encode(audio, costs, previous, reencode_s)
        key = int(audio.shape[0])
        if key in self._cache:
            enc, frames, seconds = self._cache[key]
            costs.encoder_calls += 1
            costs.encoder_frames += frames
            costs.compute_s += seconds
            return enc
        probe = Costs()
        start = time.perf_counter()
        enc = self._model.encode(audio, probe)
        seconds = time.perf_counter() - start
        self._cache[key] = (enc, probe.encoder_frames, seconds)
        costs.add(probe)  # compute_s of this call is measured by the session itself
        return enc


@dataclass(frozen=True)
class Config:
    search: str
    carry: bool
    policy: str
    chunk_ms: float

    def options(self) -> StreamOptions:
        return StreamOptions(
            chunk_ms=self.chunk_ms,
            policy=PolicyOptions.parse(self.policy),
            search=SearchOptions(self.search, beam=BEAM, carry_over=self.carry),
        )


def configs(quick: bool) -> list[Config]:
    """The grid; carry-over only matters to the blockwise searches, and offline decoding enters once."""
    chunks = [1000.0] if quick else [500.0, 1000.0, 2000.0]
    out = [Config("beam", False, "offline", 1000.0)]
    for chunk in chunks:
        for policy in ("la-2", "hold-6"):
            out.append(Config("beam", False, policy, chunk))
            for search in ("bwbs", "ibwbs", "ibwbs2", "rewind"):
                for carry in (True, False):
                    out.append(Config(search, carry, policy, chunk))
    return out


def english_items() -> list[TestItem]:
    return [item for name in ("jfk.tsv", "fleurs-en-dev.tsv") for item in read_manifest(DATA / name)]


def _preloaded(audio: np.ndarray) -> AudioLoader:
    """An audio loader that returns ``audio``, loaded once per utterance for every configuration."""

    def load(_path: Path, _rate: int) -> np.ndarray:
        return audio

    return load


def run_all(
    model: SpeechModel, items: Sequence[TestItem], grid: Sequence[Config]
) -> dict[Config, list[InstanceRecord]]:
    """Stream every utterance through every configuration (utterance-major, so encodings are shared)."""
    shared = SharedEncodings(model)
    records: dict[Config, list[InstanceRecord]] = {c: [] for c in grid}
    eval_options = EvalOptions(progress=False)
    for index, item in enumerate(items):
        shared.new_utterance()
        audio = load_audio(item.audio, model.sample_rate)
        started = time.perf_counter()
        for config in grid:
            record = run_instance(SpeechEngine(shared), config.options(), item, index, eval_options,
                                  load=_preloaded(audio))
            records[config].append(record)
        print(f"{item.id}: {len(grid)} configurations in {time.perf_counter() - started:.0f} s", flush=True)
    return records


def summarize(config: Config, records: Sequence[InstanceRecord]) -> dict[str, Any]:
    scores = score_records(records, ScoreOptions()).scores
    total = {k: sum(int(r.simulst.get(k) or 0) for r in records)
             for k in ("decoder_calls", "decoder_positions", "encoder_calls")}
    return {
        "search": config.search,
        "carry": ("yes" if config.carry else "no") if config.search not in ("beam", "greedy") else "-",
        "policy": config.policy,
        "chunk_ms": int(config.chunk_ms) if config.policy != "offline" else "-",
        "WER": scores.get("WER_norm"),
        "AL": seconds(scores.get("AL")),
        "LAAL": seconds(scores.get("LAAL")),
        "AL_CA": seconds(scores.get("AL_CA")),
        "RTF": scores.get("ComputeRTF"),
        "dec_passes": total["decoder_calls"],
        "dec_positions": total["decoder_positions"],
        "enc_calls": total["encoder_calls"],
        "emissions": scores.get("Emissions"),
        "empty": scores.get("EmptyOutputs"),
    }


def add_relative(rows: list[dict[str, Any]]) -> None:
    """Decoder passes / positions relative to beam search with the same policy and chunk size (in %)."""
    base = {(r["policy"], r["chunk_ms"]): r for r in rows if r["search"] == "beam"}
    for r in rows:
        b = base.get((r["policy"], r["chunk_ms"]))
        if b is None or r is b:
            r["passes_vs_BS"] = r["positions_vs_BS"] = "-"
            continue
        r["passes_vs_BS"] = f"{100.0 * (r['dec_passes'] / b['dec_passes'] - 1):+.0f}%"
        r["positions_vs_BS"] = f"{100.0 * (r['dec_positions'] / b['dec_positions'] - 1):+.0f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1000 ms chunks only")
    parser.add_argument("--items", type=int, default=None, help="only the first N utterances (smoke test)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    model = load_model(str(WHISPER_TINY_EN))
    items = english_items()[: args.items]
    grid = configs(args.quick)
    started = time.perf_counter()
    records = run_all(model, items, grid)
    rows = [summarize(c, records[c]) for c in grid]
    add_relative(rows)
    RESULTS.mkdir(exist_ok=True)
    stem = "blockwise_searches" + ("_quick" if args.quick or args.items else "")
    with (RESULTS / f"{stem}.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    with (RESULTS / f"{stem}_outputs.tsv").open("w", newline="", encoding="utf-8") as f:
        tsv = csv.writer(f, delimiter="\t", lineterminator="\n")
        tsv.writerow(["search", "carry", "policy", "chunk_ms", "id", "WER", "decoder_calls", "text"])
        for c in grid:
            for r in records[c]:
                text = str(r.simulst.get("text", ""))
                tsv.writerow([c.search, c.carry, c.policy, int(c.chunk_ms), r.simulst.get("id"),
                                 f"{wer([text], [r.reference or ''], normalize_for_wer):.1f}",
                                 r.simulst.get("decoder_calls"), text])
    header = (
        f"# Blockwise searches vs beam search (Whisper tiny.en, {len(items)} English utterances, beam {BEAM})\n\n"
        f"Ran {machine_note()}, {time.perf_counter() - started:.0f} s in all. The machine is shared with other "
        "jobs: RTF and AL_CA are noisy and only roughly comparable between rows; decoder passes / positions and "
        "encoder calls are exact. WER: normalised, %. AL, LAAL, AL_CA: s (SimulEval, word unit). dec_passes: "
        "decoder forward calls (one batched step over all beams = 1; the papers' \"# fw. passes\"), "
        "dec_positions: token positions computed (batch x new tokens, prompt and forced prefix included), both "
        "summed over the utterances; *_vs_BS: relative to beam search with the same policy and chunk. carry: the "
        "blockwise search continues its kept beam in the next chunk (yes, the papers' algorithms) or restarts "
        "from the committed output (no). Encoder outputs are computed once per audio prefix and replayed "
        "(counted and timed as if recomputed).\n\n"
    )
    md = RESULTS / f"{stem}.md"
    discussion = ""  # a hand-written "## Discussion" section survives a re-run
    if md.is_file() and DISCUSSION in md.read_text(encoding="utf-8"):
        discussion = "\n" + DISCUSSION + md.read_text(encoding="utf-8").split(DISCUSSION, 1)[1]
    md.write_text(header + markdown_table(rows, COLUMNS) + "\n" + discussion, encoding="utf-8")
    print(markdown_table(rows, COLUMNS))


if __name__ == "__main__":
    main()
