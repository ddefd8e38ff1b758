"""Paths to the shared real assets (``../shared`` beside the repository) and a skip marker for their absence."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SHARED = Path(__file__).resolve().parents[2] / "shared"
WHISPER_TINY_EN = SHARED / "models" / "whisper-tiny.en"
DATA = SHARED / "data"
JFK = DATA / "audio" / "jfk" / "jfk.wav"
# jfk's words, normalised (Whisper tiny.en sometimes hears "asked not": the words matter, not its grammar)
JFK_PHRASE = re.compile(r"\bask(ed)? not what your country can do for you\b")

needs_shared = pytest.mark.skipif(not WHISPER_TINY_EN.is_dir(), reason=f"shared assets not found at {SHARED}")


def english_items() -> list[tuple[str, Path, str]]:
    """(id, audio path, transcript) of the shared English sets: jfk + fleurs-en-dev."""
    items = []
    for manifest in ("jfk.tsv", "fleurs-en-dev.tsv"):
        lines = (DATA / manifest).read_text(encoding="utf-8").splitlines()[1:]
        for line in lines:
            uid, audio, _duration, transcript = line.split("\t")[:4]
            items.append((uid, DATA / audio, transcript))
    return items


def words(text: str) -> list[str]:
    """The words of ``text``, lower-cased, punctuation left out (apostrophes kept): outputs compared as words."""
    return "".join(c if c.isalnum() or c == "'" else " " for c in text.lower()).split()


def phrase(text: str) -> str:
    """``text``'s words (as :func:`words`) joined by single spaces: a phrase looked for in an output."""
    return " ".join(words(text))
