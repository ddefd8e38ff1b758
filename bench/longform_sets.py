"""Long-form test sets made from ``../shared/data`` (written to ``out/longform/``, never committed).

* ``en-talk``: jfk + the 5 fleurs-en-dev utterances joined with pauses of 0.3-2 s (seeded), repeated until the talk
  lasts about ``--minutes`` (10 by default); reference sentences = the transcripts.
* ``en-mix``: every English dev utterance once - jfk, fleurs-en-dev, then librispeech-other-dev in id order - joined
  the same way: a talk of 56 distinct sentences (the ``en-talk`` repeats 6), so that a comparison over it resamples
  56 sentences, not 6.
* ``de-talk`` / ``fr-talk``: each language's fleurs-multi utterances joined the same way (once); reference
  sentences = their English references (``references.en.tsv``), for X→English translation.
* ``es-talk`` / ``pt-talk``: the Spanish / Portuguese fleurs-multi utterances joined the same way (once). They have no
  English reference: their sentences are Whisper base's own offline beam-3 translation of each utterance (kept by
  ``bench/quality_latency.py`` in ``bench/results/quality_latency/translate_es_pt/offline-b3``), so a BLEU over them
  measures **agreement with offline decoding**, not translation quality; and offline decoding of one utterance has
  no previous-text prompt, which favours a configuration without one. Speech the translate presets were not
  chosen on, for a stall or a loop to show.
* ``ls-readings``: 5 talks, one per speaker of ``librispeech-other-dev`` (LibriSpeech test-other): the speaker's 10
  consecutive utterances of one chapter joined in id order as they are, nothing inserted between them or after
  them (the LibriSpeech-Long method), about 77 s each: 5 real continuous readings. The set is scored as one:
  ``ls-readings.sentences.txt`` holds the 50 transcripts and ``ls-readings.yaml`` the 50 segments (each names its
  talk's wav, ``ls-readings-CHAPTER.wav``), in the same order, talk after talk.

Each talk is written in SimulEval's long-form convention, as ``simulst eval`` and ``simulst score --long-form`` read
it: ``TALK.wav`` (16 kHz mono), ``TALK.sentences.txt`` (one reference sentence per line), ``TALK.yaml`` (per
sentence, its ``offset`` and ``duration`` in seconds in the talk and the ``wav``), ``TALK.tsv`` (a one-row
manifest: id, audio, duration_s) and ``TALK.source.txt`` (a SimulEval source list); a set of several talks
(``ls-readings``) has one wav per talk, and one row / line per talk in the other files.

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
from simulst.evaluation.instances import read_log

SHARED = Path(__file__).resolve().parents[2] / "shared"
DATA = SHARED / "data"
ROOT = Path(__file__).resolve().parents[1]
RATE = 16000
OFFLINE_ES_PT = ROOT / "bench" / "results" / "quality_latency" / "translate_es_pt" / "offline-b3" / "instances.log"


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


def librispeech_readings() -> dict[str, list[Utterance]]:
    """librispeech-other-dev by chapter (speaker-chapter, e.g. ``1688-142285``), each chapter's utterances in id
    order, scored against their transcripts."""
    readings: dict[str, list[Utterance]] = {}
    for r in sorted(_rows("librispeech-other-dev.tsv"), key=lambda r: r[0]):
        readings.setdefault(r[0].rsplit("-", 1)[0], []).append(Utterance(r[0], DATA / r[1], r[3]))
    return readings


def write_set(name: str, talks: dict[str, list[Utterance]], out: Path) -> list[Path]:
    """One set of several talks: each talk's utterances joined as they are (no pause, nothing after), written as
    ``NAME-TALK.wav``; one sentences file, one segmentation (every segment naming its talk's wav), one manifest
    and one source list for all of them, in the order of ``talks``; the wavs' paths."""
    out.mkdir(parents=True, exist_ok=True)
    wavs: list[Path] = []
    sentences: list[str] = []
    entries: list[str] = []
    rows: list[str] = []
    for talk, utterances in talks.items():
        pieces: list[np.ndarray] = []
        position = 0
        wav = out / f"{name}-{talk}.wav"
        for utterance in utterances:
            audio = load_audio(utterance.audio)
            pieces.append(audio)
            entries.append(f"- {{duration: {audio.shape[0] / RATE:.4f}, offset: {position / RATE:.4f}, "
                           f"speaker_id: '{talk.split('-')[0]}', wav: {wav.name}}}\n")
            sentences.append(utterance.sentence)
            position += audio.shape[0]
        sf.write(str(wav), np.concatenate(pieces), RATE, subtype="PCM_16")
        rows.append(f"{wav.stem}\t{wav.name}\t{position / RATE:.4f}\n")
        wavs.append(wav)
        print(f"{wav}: {position / RATE:.1f} s, {len(utterances)} sentences")
    (out / f"{name}.sentences.txt").write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
    (out / f"{name}.yaml").write_text("".join(entries), encoding="utf-8")
    (out / f"{name}.tsv").write_text("id\taudio\tduration_s\n" + "".join(rows), encoding="utf-8")
    (out / f"{name}.source.txt").write_text("".join(f"{wav.resolve()}\n" for wav in wavs), encoding="utf-8")
    return wavs


def x_to_english_agreement(lang: str, log: Path = OFFLINE_ES_PT) -> list[Utterance]:
    """The fleurs-multi utterances of ``lang``, each with the offline translation kept for it in ``log`` as its
    sentence (an agreement reference); SystemExit when the log lacks one."""
    offline = {r.extra["simulst"]["id"]: r.prediction.strip() for r in read_log(log)}
    rows = [r for r in _rows("fleurs-multi.tsv") if r[4] == lang]
    missing = [r[0] for r in rows if r[0] not in offline]
    if not rows or missing:
        raise SystemExit(f"{log} keeps no offline translation of {missing or lang}")
    return [Utterance(r[0], DATA / r[1], offline[r[0]]) for r in rows]


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
    utterances, readings = english(), librispeech_readings()
    write_talk("en-talk", utterances, args.out, args.minutes, args.seed)
    write_talk("en-mix", utterances + [u for chapter in readings.values() for u in chapter], args.out, 0.0, args.seed)
    for lang in ("de", "fr"):
        write_talk(f"{lang}-talk", x_to_english(lang), args.out, 0.0, args.seed)
    for lang in ("es", "pt"):
        write_talk(f"{lang}-talk", x_to_english_agreement(lang), args.out, 0.0, args.seed)
    write_set("ls-readings", readings, args.out)


if __name__ == "__main__":
    main()
