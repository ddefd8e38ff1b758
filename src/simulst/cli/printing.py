"""How the stream commands print emissions: one live line of text, or one JSON line (the CLI contract)."""

from __future__ import annotations

import json
from typing import Any

from simulst.streaming.engine import Stream
from simulst.types import Emission


def final_record(stream: Stream, source_s: float, wall_s: float) -> dict[str, Any]:
    """The ``{"event": "final", ...}`` JSON line of a finished stream (the CLI contract)."""
    costs = stream.costs
    return {
        "event": "final",
        "text": stream.text,
        "source_ms": round(source_s * 1000.0, 3),
        "compute_s": round(costs.compute_s, 4),
        "rtf": round(costs.compute_s / source_s if source_s else 0.0, 4),
        "decoder_passes": costs.decoder_calls,
        "decoder_positions": costs.decoder_positions,
        "encoder_calls": costs.encoder_calls,
        "emissions": len(stream.emissions),
        "wall_s": round(wall_s, 4),
    }


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
