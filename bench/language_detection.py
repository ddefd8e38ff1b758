"""Language detection in a stream: from how much audio Whisper base names the language right, and what a stream
run without ``--language`` loses against one told the language.

* **prefixes**: Whisper base's detected language (openai-whisper's ``detect_language``: the most probable language
  token after ``<|startoftranscript|>``, its probability among the language tokens) in the first T seconds of every
  fleurs-multi utterance (de, fr, es, pt: 40), T from 1 s to 30 s (Whisper's own window, as openai-whisper
  detects: the whole of every utterance but the 43 s fleurs-de-009); how many are right, and the highest
  probability any wrong one had.
* **streams**: each preset of the task run without ``--language`` under the pinning rule of
  :mod:`simulst.streaming.prompt` (``sure``) and under the rule before it (``first``: pinned at the first decode
  of audio judged to hold speech), against the same preset told the language (``given``): the languages pinned,
  the audio each was pinned from, the outputs identical to ``given``'s. ``translate`` (X→English): BLEU and chrF
  on the de + fr utterances (English references) with paired bootstrap intervals against ``given``; on es + pt
  (no English references here) the BLEU of each output against ``given``'s output (agreement). ``transcribe``
  (the transcribe presets over Whisper base): WER against the FLEURS transcripts of all 40, both lower-cased and
  without punctuation (``WER_norm``, as ``bench/fleurs_asr.py`` scores), with its interval against ``given``;
  with ``--english``, the 56 English dev utterances (jfk, fleurs-en-dev, librispeech-other-dev) instead, scored
  with WER after Whisper's ``EnglishTextNormalizer`` (``WER_whisper``): how often English speech is taken for
  another language.

Quality / source clock only (Whisper base runs in float32: the texts do not depend on the machine's load). Writes
``bench/results/language_detection.md`` (``language_detection_transcribe.md``, ``language_detection_english.md``)
and each run's log under ``bench/results/language_detection/`` (``language_detection_transcribe/``, ...).

    .venv/bin/python bench/language_detection.py [--task translate] [--presets low,balanced,accurate] [--limit N]
    .venv/bin/python bench/language_detection.py --task transcribe --presets balanced [--english]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import sacrebleu
import torch

from common import DATA, READING, X2EN_LANGUAGES, load_average, markdown_table, seconds, write_report, x2en_items
from simulst.audio.io import load_audio
from simulst.config import ModelOptions, StreamOptions
from simulst.config.presets import preset_options
from simulst.evaluation.bootstrap import paired_bootstrap
from simulst.evaluation.instances import InstanceRecord, write_log
from simulst.evaluation.manifest import TestItem, read_manifest
from simulst.evaluation.runner import EvalOptions, run_instance
from simulst.evaluation.scoring import ScoreOptions, score_records
from simulst.models.base import Encoded, SpeechModel
from simulst.models.loading import load_model
from simulst.models.whisper import WhisperModel
from simulst.streaming import prompt as prompt_module
from simulst.streaming.engine import SpeechEngine
from simulst.types import Costs

RESULTS = Path(__file__).resolve().parent / "results"
PREFIXES_S = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 30.0)
RULES = ("given", "first", "sure")
ENGLISH = ("jfk.tsv", "fleurs-en-dev.tsv", "librispeech-other-dev.tsv")


@dataclasses.dataclass
class Utterance:
    """A fleurs-multi utterance and its source language."""

    item: TestItem
    language: str


def utterances(task: str = "translate", english: bool = False) -> list[Utterance]:
    """The 40 fleurs-multi utterances with their transcripts; to ``translate``, de and fr with their English
    references instead (es and pt keep their transcripts, not scored); ``english``: the 56 English dev utterances
    with their transcripts."""
    if english:
        return [Utterance(item, "en") for manifest in ENGLISH for item in read_manifest(DATA / manifest)]
    manifest = DATA / "fleurs-multi.tsv"
    with manifest.open(encoding="utf-8", newline="") as rows:
        languages = {row["id"]: row["lang"] for row in csv.DictReader(rows, delimiter="\t")}
    scored = {item.id: item for language in X2EN_LANGUAGES for item in x2en_items(language)} \
        if task == "translate" else {}
    return [Utterance(scored.get(item.id, item), languages[item.id]) for item in read_manifest(manifest)]


def prefix_rows(model: WhisperModel, items: Sequence[Utterance]) -> tuple[list[dict[str, Any]], list[str]]:
    """Per prefix length: detections right, and the most probable wrong one; and one line per utterance."""
    codes = {token: code for code, token in model.language_ids.items()}
    right = {t: 0 for t in PREFIXES_S}
    worst = {t: 0.0 for t in PREFIXES_S}
    lines = []
    for utterance in items:
        item = utterance.item
        audio = load_audio(item.audio, model.sample_rate)
        found = []
        for t in PREFIXES_S:
            token, probability = model.detect_language(model.encode(audio[: round(t * model.sample_rate)], Costs()),
                                                       Costs())
            if codes[token] == utterance.language:
                right[t] += 1
            else:
                worst[t] = max(worst[t], probability)
            found.append(f"{codes[token]} {probability:.2f}")
        lines.append(f"| {item.id} | " + " | ".join(found) + " |")
    rows = [{"first_s": f"{t:g}", "right": f"{right[t]}/{len(items)}",
             "wrong_max_p": f"{worst[t]:.2f}" if right[t] < len(items) else "-"} for t in PREFIXES_S]
    return rows, lines


@dataclasses.dataclass
class Pin:
    """What one stream pinned: the language and the seconds of audio it was detected in (None: never sure)."""

    language: str
    audio_s: float | None


@contextlib.contextmanager
def rule(name: str, pins: list[Pin], codes: dict[int, str]) -> Iterator[None]:
    """Run streams under the pinning rule ``name`` (``first``: pinned at the first decode), recording each pin."""
    builder = prompt_module.PromptBuilder
    original_pin = builder.pin
    saved = prompt_module.LANGUAGE_MIN_S, prompt_module.LANGUAGE_CONFIDENCE

    def recording(self: prompt_module.PromptBuilder, model: SpeechModel, enc: Encoded, costs: Costs
                  ) -> tuple[int, ...]:
        was = self.pinned
        fixed = original_pin(self, model, enc, costs)
        if not was and self.pinned:
            pins.append(Pin(codes.get(fixed[1], "?"), enc.audio_samples / model.sample_rate))
        return fixed

    if name == "first":
        prompt_module.LANGUAGE_MIN_S, prompt_module.LANGUAGE_CONFIDENCE = 0.0, 0.0
    builder.pin = recording  # type: ignore[method-assign]
    try:
        yield
    finally:
        builder.pin = original_pin  # type: ignore[method-assign]
        prompt_module.LANGUAGE_MIN_S, prompt_module.LANGUAGE_CONFIDENCE = saved


def run_rule(model: WhisperModel, options: StreamOptions, items: Sequence[Utterance], name: str, task: str
             ) -> tuple[list[InstanceRecord], list[Pin]]:
    """Stream every item under rule ``name`` (``given``: told its language) and return the records and the pins."""
    codes = {token: code for code, token in model.language_ids.items()}
    records: list[InstanceRecord] = []
    pins: list[Pin] = []
    engines: dict[str | None, SpeechEngine] = {}
    with rule(name, pins, codes):
        for utterance in items:
            language = utterance.language if name == "given" else None
            if language not in engines:
                engines[language] = SpeechEngine(model.variant(language, task))
            before = len(pins)
            records.append(run_instance(engines[language], options, utterance.item, len(records),
                                        EvalOptions(progress=False)))
            if len(pins) == before:  # never sure: the last decode's language, unpinned
                pins.append(Pin("?", None))
    return records, pins


def stream_rows(metric: str, preset: str, runs: dict[str, tuple[list[InstanceRecord], list[Pin]]],
                items: Sequence[Utterance]) -> list[dict[str, Any]]:
    """One row per rule of a preset: pins, identical outputs, and the quality by ``metric`` (``BLEU``: translated,
    see the module)."""
    translating = metric == "BLEU"
    scored = [i for i, utterance in enumerate(items) if utterance.language in X2EN_LANGUAGES or not translating]
    other = [i for i in range(len(items)) if i not in scored]
    given = runs["given"][0]
    rows = []
    for name, (records, pins) in runs.items():
        subset = [records[i] for i in scored]
        scores = score_records(subset, ScoreOptions(quality_metrics=("BLEU", "chrF") if translating
                                                    else (metric,))).scores
        right = sum(pin.language == utterance.language for pin, utterance in zip(pins, items, strict=True))
        pinned_from = [pin.audio_s for pin in pins if pin.audio_s is not None]
        row = {"preset": preset, "rule": name, "pinned_right": f"{right}/{len(items)}",
               "never_sure": sum(pin.audio_s is None for pin in pins),
               "pinned_from_s": f"{np.mean(pinned_from):.2f}" if pinned_from else "-",
               "same_as_given": sum(a.prediction == b.prediction for a, b in zip(records, given, strict=True)),
               "LAAL": f"{seconds(scores['LAAL']):.2f}", "d_given": "-"}
        if translating:
            row |= {"BLEU_de_fr": f"{scores['BLEU']:.2f}", "chrF_de_fr": f"{scores['chrF']:.2f}",
                    "agreement_es_pt": _agreement([records[i].prediction for i in other],
                                                  [given[i].prediction for i in other])}
        else:
            row[metric] = f"{scores[metric]:.2f}"
        if name != "given":
            row["d_given"] = paired_bootstrap(metric, [given[i].prediction for i in scored],
                                              [r.prediction for r in subset],
                                              [str(r.reference) for r in subset]).describe()
        rows.append(row)
    return rows


def _wrong(prefix_table: Sequence[dict[str, Any]], shortest: float, longest: float) -> str:
    """The highest probability of a wrong detection in prefixes of ``shortest`` s up to (less than) ``longest`` s
    ("-": none wrong)."""
    found = [float(row["wrong_max_p"]) for row, t in zip(prefix_table, PREFIXES_S, strict=True)
             if shortest <= t < longest and row["wrong_max_p"] != "-"]
    return f"{max(found):.2f}" if found else "-"


def _wrong_reading(prefix_table: Sequence[dict[str, Any]]) -> str:
    """The prefix table's wrong detections against the rule, in words."""
    least, confidence = prompt_module.LANGUAGE_MIN_S, prompt_module.LANGUAGE_CONFIDENCE
    after, before = _wrong(prefix_table, least, math.inf), _wrong(prefix_table, 0.0, least)
    return (f"from {least:g} s of audio on, "
            + (f"no wrong detection reached a probability above {after}" if after != "-" else "none was wrong")
            + f" (the rule asks {confidence:g}); from less audio, "
            + (f"one reached {before}." if before != "-" else "none was wrong either."))


def _agreement(outputs: Sequence[str], given: Sequence[str]) -> str:
    """BLEU of ``outputs`` against ``given`` as references ("-" where there are none)."""
    return f"{sacrebleu.corpus_bleu(list(outputs), [list(given)]).score:.2f}" if outputs else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=("translate", "transcribe"), default="translate")
    parser.add_argument("--presets", default="low,balanced,accurate")
    parser.add_argument("--english", action="store_true",
                        help="transcribe: the English dev utterances instead of fleurs-multi")
    parser.add_argument("--limit", type=int, default=None, help="the first N utterances only (a smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.english and args.task != "transcribe":
        parser.error("--english goes with --task transcribe (the English dev sets have no translation references)")
    torch.set_num_threads(2)
    load_before = load_average()
    task, english = args.task, args.english
    suffix = "_english" if english else "" if task == "translate" else f"_{task}"
    metric = "BLEU" if task == "translate" else "WER_whisper" if english else "WER_norm"
    columns = ("BLEU_de_fr", "chrF_de_fr", "agreement_es_pt") if task == "translate" else (metric,)
    described = "the English dev utterances" if english else "fleurs-multi de/fr/es/pt dev utterances"
    items = utterances(task, english)[: args.limit]
    presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    rows: list[dict[str, Any]] = []
    prefix_table: list[dict[str, Any]] = []
    lines: list[str] = []
    models: dict[ModelOptions, WhisperModel] = {}  # (the presets of a task mostly share their model options)
    for preset in presets:
        model_options, stream_options = preset_options(task, preset, ModelOptions("whisper-base", task=task))
        if model_options not in models:
            models[model_options] = load_model(model_options)
        model = models[model_options]
        if not prefix_table:
            prefix_table, lines = prefix_rows(model, items)
        runs = {}
        for name in RULES:
            runs[name] = run_rule(model, stream_options, items, name, task)
            log = args.out / f"language_detection{suffix}" / f"{preset}_{name}" / "instances.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            write_log(log, runs[name][0])
            print(preset, name, flush=True)
        rows += stream_rows(metric, preset, runs, items)
    header = " | ".join(f"{t:g} s" for t in PREFIXES_S)
    report = "\n".join([
        f"# Language detection in a stream (Whisper base, {task}, {described})", "",
        f"Written by `bench/language_detection.py` (quality / source clock only; load average before: "
        f"{load_before:.2f}).", "",
        "## The language detected in the first T seconds of each utterance", "",
        markdown_table(prefix_table, ["first_s", "right", "wrong_max_p"]), "",
        f"## Streams without `--language` ({task} presets)", "",
        markdown_table(rows, ["preset", "rule", "pinned_right", "never_sure", "pinned_from_s", "same_as_given",
                              *columns, "LAAL", "d_given"]), "",
        READING, "",
        "- `given`: told the language (`--language`); `first`: the language detected at the stream's first decode "
        "of audio judged to hold speech and kept (the rule before 2026-12-07); `sure`: the rule of "
        f"`simulst.streaming.prompt` (detected afresh at each decode until it is detected in at least "
        f"{prompt_module.LANGUAGE_MIN_S:g} s of audio with a probability of at least "
        f"{prompt_module.LANGUAGE_CONFIDENCE:g}, then pinned).",
        "- `pinned_right`: streams whose pinned language is the utterance's; `never_sure`: streams that never pinned "
        "(each decode kept its own detection); `pinned_from_s`: the mean seconds of audio the language was pinned "
        "from; `same_as_given`: outputs identical to `given`'s, word for word.",
        ("- `d_given`: BLEU minus `given`'s on de + fr, paired bootstrap 95 % interval over utterances; "
         "`agreement_es_pt`: BLEU of the es + pt outputs against `given`'s outputs (100: the same); `LAAL` on "
         "de + fr." if task == "translate" else
         f"- `d_given`: {metric} minus `given`'s over the {len(items)} utterances, paired bootstrap 95 % interval."),
        ("- The rule's two numbers were set on the fleurs-multi utterances (`language_detection.md`); here, "
         if english else "- The rule's two numbers were set from the first table, on these dev utterances: ")
        + _wrong_reading(prefix_table), "",
        "## Each utterance's detection by prefix", "",
        f"| utterance | {header} |", "|" + "---|" * (len(PREFIXES_S) + 1), *lines, ""])
    write_report(args.out / f"language_detection{suffix}.md", report)


if __name__ == "__main__":
    main()
