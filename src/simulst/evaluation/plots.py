"""Quality-vs-latency plots of a sweep, one curve per policy (as the papers' figures: BLEU or WER against AL).

Points of a policy are joined in order of chunk size and labelled with it; the offline policy is one star
(its latency is that of waiting for the whole source).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

LOWER_IS_BETTER = ("WER", "WER_norm", "WER_whisper")
DEFAULT_LATENCIES = ("AL", "LAAL", "AL_CA")


def _num(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(float(value)):
        return float(value)
    return None


def _series(rows: Sequence[Mapping[str, Any]], quality: str, latency: str) -> dict[str, list[tuple[float, float, str]]]:
    curves: dict[str, list[tuple[float, float, str]]] = {}
    for row in rows:
        x, y = _num(row.get(latency)), _num(row.get(quality))
        if x is None or y is None:
            continue
        key = str(row.get("policy", row.get("label", "?")))
        extra = [f"{k}={row[k]}" for k in row if "." in str(k)]
        if extra:
            key += " " + " ".join(extra)
        if str(row.get("search", "")) not in ("", "greedy") and len({str(r.get("search")) for r in rows}) > 1:
            key += f" {row.get('search')}"
        chunk = _num(row.get("chunk_ms"))
        curves.setdefault(key, []).append((x, y, "" if chunk is None else f"{chunk:g}"))
    return curves


def _draw(ax: Any, rows: Sequence[Mapping[str, Any]], quality: str, latency: str) -> None:
    """One quality-vs-latency panel: a curve per policy, points labelled with their chunk ms; offline a star."""
    curves = _series(rows, quality, latency)
    for name, points in sorted(curves.items()):
        points.sort(key=lambda p: (float(p[2]) if p[2] else math.inf, p[0]))
        xs = [p[0] / 1000.0 for p in points]
        ys = [p[1] for p in points]
        if name.startswith("offline"):
            ax.plot(xs, ys, marker="*", markersize=13, linestyle="none", label=name)
            continue
        ax.plot(xs, ys, marker="o", label=name)
        for x, y, chunk in zip(xs, ys, [p[2] for p in points], strict=True):
            if chunk:
                ax.annotate(chunk, (x, y), textcoords="offset points", xytext=(3, 3), fontsize=7)
    ax.set_xlabel(f"{latency} (s)")
    ax.set_ylabel(f"{quality} ({'lower' if quality in LOWER_IS_BETTER else 'higher'} is better)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)


def plot_sweep(
    rows: Sequence[Mapping[str, Any]],
    out_dir: str | Path,
    quality: str,
    latencies: Sequence[str] = DEFAULT_LATENCIES,
    title: str | None = None,
) -> list[Path]:
    """Write ``quality_vs_<LATENCY>.png`` per latency metric and ``sweep.png`` with all of them side by side.

    Returns the written paths; a latency metric no row has is skipped.
    """
    import matplotlib  # lazy: matplotlib is heavy, and only the sweep's plots need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    present = [m for m in latencies if any(_num(r.get(m)) is not None for r in rows)]
    paths: list[Path] = []
    if not present:
        return paths

    for latency in present:
        fig, ax = plt.subplots(figsize=(6.4, 4.8))
        _draw(ax, rows, quality, latency)
        ax.set_title(title or f"{quality} vs {latency} (labels: chunk ms)")
        fig.tight_layout()
        path = out / f"quality_vs_{latency}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    fig, axes = plt.subplots(1, len(present), figsize=(5.2 * len(present), 4.4), squeeze=False)
    for ax, latency in zip(axes[0], present, strict=True):
        _draw(ax, rows, quality, latency)
        ax.set_title(f"{quality} vs {latency}")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = out / "sweep.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)
    return paths
