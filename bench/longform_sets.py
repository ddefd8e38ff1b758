"""Long-form test sets made from ``../shared/data`` (written to ``out/longform/``, never committed).

* ``en-talk``: jfk + the 5 fleurs-en-dev utterances joined with pauses of 0.3-2 s (seeded), repeated until the talk
  lasts about ``--minutes`` (10 by default); reference sentences = the transcripts.
* ``de-talk`` / ``fr-talk``: each language's fleurs-multi utterances joined the same way (once); reference
  sentences = their English references (``references.en.tsv``), for X→English translation.

Each talk is written in SimulEval's long-form convention, as ``simulst eval`` and ``simulst score --long-form`` read
it: ``TALK.wav`` (16 kHz mono), ``TALK.sentences.txt`` (one reference sentence per line), ``TALK.yaml`` (per
sentence, its ``offset`` and ``duration`` in seconds in the talk and the ``wav``), ``TALK.tsv`` (a one-row
manifest: id, audio, duration_s) and ``TALK.source.txt`` (a SimulEval source list).

    .venv/bin/python bench/longform_sets.py [--minutes 10] [--out out/longform]
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from simulst.audio.io import load_audio

SHARED = Path(__file__).resolve().parents[2] / "shared"
DATA = SHARED / "data"
ROOT = Path(__file__).resolve().parents[1]
RATE = 16000


@dataclass(frozen=True)
class Utterance:
    """One shared utterance and the sentence it is scored against."""

    id: str
    audio: Path
    sentence: str


def _rows(manifest: str) -> list[list[str]]:
    return [line.split("\t") for line in (DATA / manifest).read_text(encoding="utf-8").splitlines()[1:] if line]


def english() -> list[Utterance]:
    """jfk + fleurs-en-dev, scored against their transcripts."""
    return [Utterance(r[0], DATA / r[1], r[3]) for m in ("jfk.tsv", "fleurs-en-dev.tsv") for r in _rows(m)]


def x_to_english(lang: str) -> list[Utterance]:
    """The fleurs-multi utterances of ``lang`` that have an English reference."""
    references = dict(line.split("\t", 1) for line in
                      (DATA / "references.en.tsv").read_text(encoding="utf-8").splitlines()[1:] if line)
    return [Utterance(r[0], DATA / r[1], references[r[0]].strip()) for r in _rows("fleurs-multi.tsv")
            if r[4] == lang and r[0] in references]


def write_talk(name: str, utterances: list[Utterance], out: Path, minutes: float, seed: int) -> Path:
    """Join ``utterances`` (repeated until ``minutes`` if longer than one pass) with random pauses; write the
    talk's files; the wav's path."""
    rng = random.Random(seed)
    pieces: list[np.ndarray] = []
    sentences: list[str] = []
    segments: list[tuple[float, float]] = []
    position = 0
    while True:
        for utterance in utterances:
            pause = np.zeros(int(rng.uniform(0.3, 2.0) * RATE), dtype=np.float32)
            audio = load_audio(utterance.audio)
            pieces += [pause, audio]
            position += pause.shape[0]
            segments.append((position / RATE, audio.shape[0] / RATE))
            sentences.append(utterance.sentence)
            position += audio.shape[0]
        if position / RATE >= minutes * 60.0:
            break
    pieces.append(np.zeros(RATE, dtype=np.float32))
    talk = np.concatenate(pieces)
    out.mkdir(parents=True, exist_ok=True)
    wav = out / f"{name}.wav"
    sf.write(str(wav), talk, RATE, subtype="PCM_16")
    (out / f"{name}.sentences.txt").write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
    (out / f"{name}.yaml").write_text(
        "".join(f"- {{duration: {d:.4f}, offset: {o:.4f}, speaker_id: spk, wav: {wav.name}}}\n" for o, d in segments),
        encoding="utf-8")
    (out / f"{name}.tsv").write_text(f"id\taudio\tduration_s\n{name}\t{wav.name}\t{talk.shape[0] / RATE:.4f}\n",
                                     encoding="utf-8")
    (out / f"{name}.source.txt").write_text(f"{wav.resolve()}\n", encoding="utf-8")
    print(f"{wav}: {talk.shape[0] / RATE / 60:.1f} min, {len(sentences)} sentences")
    return wav


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the English talk (default 10)")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "longform")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write_talk("en-talk", english(), args.out, args.minutes, args.seed)
    for lang in ("de", "fr"):
        write_talk(f"{lang}-talk", x_to_english(lang), args.out, 0.0, args.seed)


if __name__ == "__main__":
    main()
