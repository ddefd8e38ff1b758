"""Long-form streaming: a 10-minute English talk, the 5 LibriSpeech readings (and the German and French talks,
X→English), each talk through one stream, at the task's preset (the config ``default`` is the ``balanced`` preset
of either task: transcription's default, and translation's until 2026-12-07, whose default is ``accurate`` since)
or options changed over it.

Needs the talks of ``bench/longform_sets.py`` (run it first). Writes ``bench/results/longform.md`` (+ ``.csv``, and
``longform.png``; ``--out`` writes them elsewhere): per configuration, the stream's WER (or BLEU) after resegmenting
its output onto the reference sentences (``simulst.evaluation.longform``, equal to OmniSTEval), StreamLAAL /
StreamLAAL_CA, and for every minute of the talk: the mean StreamLAAL and StreamLAAL_CA of the sentences that start
in it, the p50 / p95 compute of a chunk decode, and the process's resident memory (RSS) at the end of the minute.
The per-utterance offline score of the same model on the same sentences is the reference point. English quality is
WER after Whisper's EnglishTextNormalizer (``WER_whisper``), with the project's own normalisation (``WER_norm``,
the quality column before) beside it; ``vs_default``: the paired bootstrap interval (95 %, over the reference
sentences) of the run's quality minus that of the same talk's ``default`` run on the same clock, when the runs
include it; a config run on more than one talk of a task is also compared with ``default`` over all their sentences
(the pooled table). The bootstrap draws distinct reference sentences (``clusters``): the English talk repeats its 6
utterances 11 times, and the copies of one sentence are drawn together (:func:`sentence_clusters`).

A run's talk may be a set of several talks (``ls``: the 5 LibriSpeech readings of about 77 s, one wav each): each
talk is streamed on its own (a fresh stream, its own clock from 0), and the set is scored as one
(:func:`~simulst.evaluation.longform.score_longform` with one record per talk: quality is the corpus score over all
its sentences, StreamLAAL the mean over all its sentences). Its per-minute series are pooled over the talks: minute
m holds the sentences that start in minute m of their own talk and the decodes of that minute of any talk, and the
RSS at the end of minute m is the highest any talk read there; the RTF and the decode counters are summed over the
talks; ``RSS_min2_MB`` / ``RSS_last_MB`` take the talks' readings in streaming order (for ``ls``, the end of the
first talk and the end of the last).

Computation-aware time comes from one of two clocks (the run's ``@clock``):

* ``simulated`` (the default): the chunks are pushed as fast as the model goes and a real-time clock is simulated
  with this machine's compute: the chunk ending at source time t is decoded when the audio has arrived and the
  previous decode is done, i.e. at max(t, end of the previous decode), and its emission is stamped with the end of
  its own decode. (SimulEval's per-instance elapsed = source + *cumulative* compute grows without bound over a long
  stream, which is not what a live listener sees.)
* ``realtime``: exactly ``simulst transcribe TALK --realtime``: the audio arrives at wall-clock speed
  (``feed_realtime``'s pacing, a catch-up stream that decodes once over whatever has arrived), and each emission is
  stamped with the wall clock. A 10-minute talk takes 10 minutes.

    OMP_NUM_THREADS=2 .venv/bin/python bench/longform.py [--runs en:default,en:vad,de:default,en:default@realtime,...]

``--phases K`` instead streams each run's talk on K chunk grids shifted by k/K of a chunk (source clock) and writes
``bench/results/longform_phases.md``: one grid's WER is one draw of where the chunk boundaries fall. Each config run
beside ``default`` is compared with it over all the grids and all the talks of one metric (a paired bootstrap over
the distinct reference sentences, each with its copies and its outputs on every grid), on quality and on
StreamLAAL, and the per-grid sentence outputs and their StreamLAAL are written to ``longform_phases_hypotheses.tsv``.

``--phases-rescore`` runs nothing: it reads the ``longform_phases.csv`` and ``longform_phases_hypotheses.tsv`` kept
in ``--out`` and writes that folder's page again, comparing its configs with the ``default`` kept there or, with
``--default-from DIR``, with the ``default`` runs kept in DIR (the same grids of the same talks: a run of another
config alone is compared with a default run before it, as the runs are deterministic)::

    .venv/bin/python bench/longform.py --phases-rescore --out bench/results/longform_phases_ctc \
        --default-from bench/results/longform_phases_vad

With ``--from SOURCE`` (repeated) it instead merges the outputs kept in several folders into ``--out`` (its csv and
tsv written anew, then its page): a SOURCE is ``DIR`` (all its runs), ``DIR:CONFIG`` (that config's runs) or
``DIR:CONFIG=NAME`` (those, named NAME here). A talk and config kept by two sources must have the same outputs (it is
then read once). ``--baseline CONFIG`` compares the other configs with CONFIG instead of ``default``::

    .venv/bin/python bench/longform.py --phases-rescore --out bench/results/longform_phases_hold_mark_mix/low \
        --from bench/results/longform_phases_hold_mark_mix/low --baseline low
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    csv_number,
    grid_delay_statistics,
    grid_statistics,
    load_average,
    machine_note,
    markdown_table,
    seconds,
    speed_anchor_ms,
    word_units,
    write_csv,
    write_report,
)
from simulst.audio.io import load_audio
from simulst.config import ModelOptions, PolicyOptions, SearchOptions, StreamOptions
from simulst.config.presets import preset_options
from simulst.evaluation.bootstrap import bootstrap_from_stats, paired_bootstrap
from simulst.evaluation.instances import InstanceRecord
from simulst.evaluation.longform import (
    LongformOptions,
    LongformReport,
    Segment,
    group_talks,
    read_reference_sentences,
    read_segmentation,
    score_longform,
    sentence_stream_laal,
)
from simulst.evaluation.quality import normalize_for_wer, wer, whisper_normalize
from simulst.streaming.engine import SpeechEngine, Stream
from simulst.streaming.feed import feed_realtime
from simulst.types import Costs, Emission

ROOT = Path(__file__).resolve().parents[1]
SETS = ROOT / "out" / "longform"
RESULTS = ROOT / "bench" / "results"
TALKS = {"en": ("en-talk", ModelOptions("whisper-tiny.en")),
         "ls": ("ls-readings", ModelOptions("whisper-tiny.en")),
         "mix": ("en-mix", ModelOptions("whisper-tiny.en")),
         "de": ("de-talk", ModelOptions("whisper-base", language="de", task="translate")),
         "fr": ("fr-talk", ModelOptions("whisper-base", language="fr", task="translate")),
         # (agreement with offline translation, not BLEU: bench/longform_sets.py)
         "es": ("es-talk", ModelOptions("whisper-base", language="es", task="translate")),
         "pt": ("pt-talk", ModelOptions("whisper-base", language="pt", task="translate"))}
# config -> (the talk's task's preset, stream options changed over it, model options changed over it): `default` is
# the task's `balanced` preset, what `simulst transcribe TALK` runs with no flags (and `simulst translate TALK` did
# until 2026-12-07: it runs `accurate` since)
CONFIGS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "default": ("balanced", {}, {}), "low": ("low", {}, {}), "accurate": ("accurate", {}, {}),
    "vad": ("balanced", {"vad": True}, {}),  # (transcription: the default since 2026-11-26 16:42 UTC)
    "no-vad": ("balanced", {"vad": False}, {}),  # (transcription: the default before)
    "vad-2s": ("balanced", {"vad": True, "chunk_ms": 2000.0, "segment_s": 10.0, "max_buffer_s": 16.0}, {}),
    "segment-10": ("balanced", {"segment_s": 10.0, "max_buffer_s": 16.0}, {}),  # (transcription: cuts to 12-02)
    "buffer-8": ("balanced", {"segment_s": 5.0, "max_buffer_s": 8.0}, {}),  # the option defaults' cuts
    "segment-5": ("balanced", {"segment_s": 5.0}, {}),  # translation: trimmed at each sentence end past 5 s
    "buffer-15": ("balanced", {"max_buffer_s": 15.0}, {}),  # translation: a shorter bound on the sentence's audio
    "buffer-20": ("balanced", {"max_buffer_s": 20.0}, {}),
    "buffer-24": ("balanced", {"max_buffer_s": 24.0, "punctuate_held_end": False}, {}),  # transcription: a sentence
    "buffer-30": ("balanced", {"max_buffer_s": 30.0, "punctuate_held_end": False}, {}),  # cut behind its last
    # committed word at 24 / 30 s, not 16 s (as measured on 2026-12-01, without --punctuate-held-end)
    "accurate-buffer-24": ("accurate", {"max_buffer_s": 24.0}, {}),
    "low-buffer-24": ("low", {"max_buffer_s": 24.0}, {}),
    "window-full": ("balanced", {}, {"window": "full"}),
    "context-all": ("balanced", {"context_scope": "all"}, {}),
    "context-0": ("balanced", {"context_tokens": 0}, {}),
    "context-sentence": ("balanced", {"context_scope": "sentence"}, {}),  # (translation: its auto scope is all)
    "context-30": ("balanced", {"context_tokens": 30}, {}),
    "vad-context-0": ("balanced", {"vad": True, "context_tokens": 0}, {}),
    "vad-beam5": ("balanced", {"vad": True, "search": SearchOptions("beam", beam=5)}, {}),
    "ctc": ("balanced", {"policy": PolicyOptions.parse("ctc")}, {"ctc_head": "default"}),
    "ctc-30": ("balanced", {"policy": PolicyOptions.parse("ctc:-30")}, {"ctc_head": "default"}),
    "ctc-40": ("balanced", {"policy": PolicyOptions.parse("ctc:-40")}, {"ctc_head": "default"}),
    **{f"ctc-w{-floor:g}": ("balanced", {"policy": PolicyOptions.parse("ctc"), "word_logprob_threshold": floor},
                            {"ctc_head": "default"}) for floor in (-1.0, -1.5, -2.0)},
    # long-form variants of the transcribe accurate preset
    "accurate-segment-10": ("balanced", {"chunk_ms": 1000.0, "segment_s": 10.0, "max_buffer_s": 16.0}, {}),
    "vad-1s": ("balanced", {"vad": True, "chunk_ms": 1000.0, "segment_s": 10.0, "max_buffer_s": 16.0}, {}),
    "vad-0.6s": ("balanced", {"vad": True, "segment_s": 10.0, "max_buffer_s": 16.0}, {}),
    "vad-0.8s": ("balanced", {"vad": True, "chunk_ms": 800.0, "segment_s": 10.0, "max_buffer_s": 16.0}, {}),
    "encoder-int8": ("balanced", {}, {"encoder_precision": "int8"}),
    "encoder-bf16": ("balanced", {}, {"encoder_precision": "bf16"}),
    "decoder-bf16": ("balanced", {}, {"precision": "bf16"}),
    "final-beam5": ("balanced", {"search": SearchOptions(final_beam=5)}, {}),
    "low-final-beam5": ("low", {"search": SearchOptions(final_beam=5)}, {}),
    "low-beam3": ("low", {"search": SearchOptions("beam", beam=3)}, {}),
    "accurate-beam-3-la-2": ("accurate", {"search": SearchOptions("beam", beam=3),
                                          "policy": PolicyOptions.parse("la-2")}, {}),
    "c1000-la-2": ("balanced", {"chunk_ms": 1000.0, "policy": PolicyOptions.parse("la-2"),
                                "hold_sentence_end": False, "punctuate_held_end": False, "max_buffer_s": 16.0},
                   {}),  # balanced's beam, as measured (before the hold)
    "c500": ("balanced", {"chunk_ms": 500.0}, {}),  # (the transcribe balanced preset since 2026-11-27 17:38 UTC)
    "c450": ("balanced", {"chunk_ms": 450.0}, {}),
    "c800-la-2": ("balanced", {"chunk_ms": 800.0, "policy": PolicyOptions.parse("la-2")}, {}),
    "early-0.5": ("balanced", {"early_logprob_threshold": -0.5}, {}),  # (a stricter early low-confidence guard)
    "early-0.6": ("balanced", {"early_logprob_threshold": -0.6}, {}),
    "early-1.25": ("balanced", {"early_logprob_threshold": -1.25}, {}),  # (translation: whose auto is off)
    # translation: a beam search in every chunk, under beam agreement (BA-2) or LA-2
    "beam-3-ba-2": ("balanced", {"search": SearchOptions("beam", beam=3), "policy": PolicyOptions.parse("ba-2")}, {}),
    "beam-3-ba-3": ("balanced", {"search": SearchOptions("beam", beam=3), "policy": PolicyOptions.parse("ba-3")}, {}),
    "beam-3-ba-2-1500": ("balanced", {"search": SearchOptions("beam", beam=3), "policy": PolicyOptions.parse("ba-2"),
                                      "chunk_ms": 1500.0}, {}),
    "beam-5-ba-2": ("balanced", {"search": SearchOptions("beam", beam=5), "policy": PolicyOptions.parse("ba-2")}, {}),
    "beam-2": ("balanced", {"search": SearchOptions("beam", beam=2), "policy": PolicyOptions.parse("la-2")}, {}),
    "greedy-la-2": ("balanced", {"search": SearchOptions(), "policy": PolicyOptions.parse("la-2")}, {}),
    "hold-end": ("balanced", {"hold_sentence_end": True}, {}),  # (the transcribe balanced preset since 2026-11-29)
    "no-hold-end": ("balanced", {"hold_sentence_end": False}, {}),  # (it before): a sentence end committed at once
    "low-hold-end": ("low", {"hold_sentence_end": True}, {}),
    "accurate-hold-end": ("accurate", {"hold_sentence_end": True}, {}),
    "segment-6": ("balanced", {"segment_s": 6.0}, {}),  # (transcription: trimmed behind a sentence end past 6 s)
    "segment-8": ("balanced", {"segment_s": 8.0}, {}),
    "wmin-8": ("balanced", {}, {"window_min_ms": 8000.0}),  # (a shorter shortest encoder window: less compute)
    "beam-2-ba-2": ("balanced", {"search": SearchOptions("beam", beam=2)}, {}),  # (transcription: BA-2 over 2 beams)
    # translation: voice activity detection, a segment committed whole at a pause of 1 s (the option's default) or
    # longer
    "vad-pause-1.5": ("balanced", {"vad": True, "vad_pause_ms": 1500.0}, {}),
    "vad-pause-2": ("balanced", {"vad": True, "vad_pause_ms": 2000.0}, {}),
    "accurate-vad": ("accurate", {"vad": True}, {}),  # (translation: accurate's pause is 1.5 s too)
    "low-vad": ("low", {"vad": True}, {}),
    "c1200": ("balanced", {"chunk_ms": 1200.0}, {}),  # (translation: balanced over 1.2 s chunks)
    "c600": ("balanced", {"chunk_ms": 600.0}, {}),  # (translation: balanced over 600 ms chunks, for low)
    # translation: low before 2026-12-07 (greedy LA-2 over 600 ms chunks, no VAD, no held sentence end)
    "low-before": ("balanced", {"chunk_ms": 600.0, "search": SearchOptions("greedy", beam=1),
                                "policy": PolicyOptions("la", 2), "vad": False, "hold_sentence_end": False}, {}),
    # transcription: a held sentence end stays a punctuation mark in the next decodes (which one stays open)
    "punct-held": ("balanced", {"punctuate_held_end": True, "max_buffer_s": 16.0}, {}),  # (over balanced to 12-02)
    "punct-held-24": ("balanced", {"punctuate_held_end": True, "max_buffer_s": 24.0, "reencode_s": None},
                      {}),  # (the balanced preset 2026-12-02 03:00-13:00)
    # translation: a held sentence end (--hold-sentence-end) kept a punctuation mark in the next decodes
    "hold-punct": ("balanced", {"hold_sentence_end": True, "punctuate_held_end": True}, {}),
    # each chunk re-encodes only its last 2 s of audio (and the window's new silence): --reencode-s 2
    "reencode-2": ("balanced", {"reencode_s": 2.0}, {}),
    "reencode-5": ("balanced", {"reencode_s": 5.0}, {}),  # (translation: its last 5 s)
    # a word holding a token scored below -2 is committed only when two decodes' best hypotheses agree on it
    "word-2": ("balanced", {"word_logprob_threshold": -2.0}, {}),
    "prompt-greeting": ("balanced", {"prompt": "Good morning, everyone."}, {}),  # (an initial prompt)
}
CLOCKS = ("simulated", "realtime")
DEFAULT_RUNS = ("en:default,en:default@realtime,en:vad,en:vad-2s,en:context-all,en:context-0,en:vad-context-0,"
                "ls:default,ls:vad,ls:vad-2s,de:default,fr:default,de:vad-2s,fr:vad-2s")
COLUMNS = ["talk", "config", "clock", "minutes", "quality", "offline_per_utterance", "offline_same_search",
           "WER_norm", "offline_WER_norm", "vs_default", "StreamLAAL", "StreamLAAL_CA", "first_min_AL", "last_min_AL",
           "first_min_AL_CA", "last_min_AL_CA", "chunk_p50_ms", "chunk_p95_ms",
           "RSS_min2_MB", "RSS_last_MB", "RTF", "trims", "vad_segments", "segment_commits"]


def _rss_mb() -> float:
    """Resident memory of this process now (Linux /proc), MB."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 1e6


def config_options(talk: str, config: str) -> tuple[ModelOptions, StreamOptions]:
    """The model and stream options of ``config`` on ``talk``: its task's preset (``preset_options``, as the command
    line resolves it), then the config's changes over it."""
    _, model_options = TALKS[talk]
    latency, stream_changes, model_changes = CONFIGS[config]
    model_options, stream_options = preset_options(model_options.task, latency, model_options)
    return (dataclasses.replace(model_options, **model_changes),
            dataclasses.replace(stream_options, **stream_changes))


def stream_talk(engine: SpeechEngine, options: StreamOptions, audio: np.ndarray) -> dict[str, Any]:
    """One stream over the talk, chunk by chunk: per-word delays (source, simulated real-time clock), per-decode
    compute, RSS per minute."""
    session = engine.open(options)
    rate = session.sample_rate
    step = session.chunk_samples
    clock = 0.0
    words: list[str] = []  # SimulEval's word units: every emission split on its own (runner.emission_units)
    delays: list[float] = []
    elapsed: list[float] = []
    chunks: list[tuple[float, float]] = []  # (source ms, compute ms) of every push that decoded
    rss: list[float] = []
    positions = list(range(0, audio.shape[0], step))
    for pos in [*positions, None]:  # None: the end of the source (finish), timed like a chunk
        piece = audio[pos : pos + step] if pos is not None else audio[:0]
        started = time.perf_counter()
        emissions = session.push(piece) if pos is not None else session.finish()
        spent = (time.perf_counter() - started) * 1000.0
        arrived = (audio.shape[0] if pos is None else pos + piece.shape[0]) * 1000.0 / rate
        clock = max(clock, arrived) + spent
        chunks.append((arrived, spent))
        for e in emissions:
            for word in e.text.split():
                words.append(word)
                delays.append(e.source_ms)
                elapsed.append(clock)
        if pos is not None and ((pos + step) // (60 * rate) > pos // (60 * rate) or pos + step >= audio.shape[0]):
            rss.append(_rss_mb())
    return {"text": " ".join(words), "delays": delays, "elapsed": elapsed, "chunks": chunks, "rss": rss,
            "costs": session.costs}


class _TimedStream:
    """A stream whose decodes are timed - (source ms read, compute ms) per push that decoded, and the finish - and
    whose process RSS is read at every minute of source pushed and before the finish."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.pushed = 0
        self.chunks: list[tuple[float, float]] = []
        self.rss: list[float] = []
        self._rss_read_at = -1

    @property
    def sample_rate(self) -> int:
        return self.stream.sample_rate

    @property
    def chunk_samples(self) -> int:
        return self.stream.chunk_samples

    @property
    def next_decode(self) -> int:
        return self.stream.next_decode

    @property
    def text(self) -> str:
        return self.stream.text

    @property
    def emissions(self) -> list[Emission]:
        return self.stream.emissions

    @property
    def costs(self) -> Costs:
        return self.stream.costs

    def push(self, audio: np.ndarray) -> list[Emission]:
        minute = 60 * self.sample_rate
        decodes = self.costs.encoder_calls
        emissions, spent = self._timed(lambda: self.stream.push(audio))
        before, self.pushed = self.pushed, self.pushed + audio.shape[0]
        if self.costs.encoder_calls > decodes:
            self.chunks.append((self.pushed * 1000.0 / self.sample_rate, spent))
        if self.pushed // minute > before // minute:
            self._read_rss()
        return emissions

    def finish(self) -> list[Emission]:
        self._read_rss()
        emissions, spent = self._timed(self.stream.finish)
        self.chunks.append((self.pushed * 1000.0 / self.sample_rate, spent))
        return emissions

    @staticmethod
    def _timed(call: Callable[[], list[Emission]]) -> tuple[list[Emission], float]:
        started = time.perf_counter()
        emissions = call()
        return emissions, (time.perf_counter() - started) * 1000.0

    def _read_rss(self) -> None:
        if self._rss_read_at != self.pushed:
            self.rss.append(_rss_mb())
            self._rss_read_at = self.pushed


def stream_talk_realtime(engine: SpeechEngine, options: StreamOptions, audio: np.ndarray) -> dict[str, Any]:
    """One stream over the talk fed by :func:`~simulst.streaming.feed.feed_realtime` (exactly ``--realtime``): the
    same record as :func:`stream_talk`, each emission stamped with the wall clock since the feeding began."""
    timed = _TimedStream(engine.open(options, catch_up=True))
    words: list[str] = []
    delays: list[float] = []
    elapsed: list[float] = []

    def emit(emission: Emission, wall_ms: float) -> None:
        for word in emission.text.split():
            words.append(word)
            delays.append(emission.source_ms)
            elapsed.append(wall_ms)

    feed_realtime(timed, audio, emit)
    return {"text": " ".join(words), "delays": delays, "elapsed": elapsed, "chunks": timed.chunks, "rss": timed.rss,
            "costs": timed.costs}


def offline_per_utterance(engine: SpeechEngine, audios: dict[str, np.ndarray], segments: list[Any],
                          search: SearchOptions | None = None) -> list[str]:
    """Each reference sentence's audio (``audios``: by the segmentation's wav name) decoded offline on its own (the
    per-utterance reference point), with the default search or ``search``."""
    options = StreamOptions(policy=PolicyOptions.parse("offline"), search=search or SearchOptions())
    texts = []
    for seg in segments:
        start = int(seg.offset * 16000)
        session = engine.open(options)
        session.push(audios[seg.wav][start : start + int(seg.duration * 16000)])
        session.finish()
        texts.append(session.text)
    return texts


@dataclasses.dataclass(frozen=True)
class Talk:
    """A run's talk, loaded: its model and stream options, engine, reference sentences and segmentation, and the
    wav and audio of every talk the segmentation names (one for ``en`` / ``de``, five for ``ls``), in its order."""

    name: str
    wavs: list[Path]
    model_options: ModelOptions
    stream_options: StreamOptions
    engine: SpeechEngine
    audios: list[np.ndarray]
    references: list[str]
    segments: list[Segment]

    @classmethod
    def load(cls, talk: str, config: str, sets: Path) -> Talk:
        name, _ = TALKS[talk]
        model_options, stream_options = config_options(talk, config)
        segments = read_segmentation(sets / f"{name}.yaml")
        wavs = [sets / t.wav for t in group_talks(segments)]
        return cls(name, wavs, model_options, stream_options, SpeechEngine.load(model_options),
                   [load_audio(wav) for wav in wavs], read_reference_sentences(sets / f"{name}.sentences.txt"),
                   segments)

    @property
    def duration_s(self) -> float:
        """The audio of all its talks, seconds."""
        return sum(audio.shape[0] for audio in self.audios) / 16000

    def offline(self, search: SearchOptions | None = None) -> list[str]:
        """:func:`offline_per_utterance` of every reference sentence."""
        audios = {wav.name: audio for wav, audio in zip(self.wavs, self.audios, strict=True)}
        return offline_per_utterance(self.engine, audios, self.segments, search)

    def score(self, outs: list[dict[str, Any]], computation_aware: bool) -> LongformReport:
        """The long-form report of one stream's output per talk (``stream_talk``'s dicts, in the order of
        ``wavs``) against the reference sentences."""
        records = [InstanceRecord(k, out["text"], out["delays"], out["elapsed"], source=str(wav),
                                  source_length=audio.shape[0] / 16.0,
                                  reference=" ".join(self.references[i] for i in talk.sentences))
                   for k, (out, wav, audio, talk) in enumerate(zip(outs, self.wavs, self.audios,
                                                                   group_talks(self.segments), strict=True))]
        return score_longform(records, self.references, self.segments,
                              LongformOptions(computation_aware=computation_aware))


def words_only(out: dict[str, Any]) -> dict[str, Any]:
    """``stream_talk``'s output without its punctuation-only word units (:func:`common.word_units`)."""
    text, delays, elapsed = word_units(out["text"].split(), out["delays"], out["elapsed"])
    return out | {"text": " ".join(text), "delays": delays, "elapsed": elapsed}


def pooled(outs: list[dict[str, Any]]) -> dict[str, Any]:
    """The streams of a set's talks as one record for the per-run figures: the decodes pooled (source ms within
    their own talk), the RSS readings in streaming order (``rss``) and per minute of the talk the highest of any
    talk (``rss_per_minute``), the costs summed."""
    costs = Costs()
    for out in outs:
        costs.add(out["costs"])
    longest = max(len(out["rss"]) for out in outs)
    return {"chunks": [c for out in outs for c in out["chunks"]], "rss": [r for out in outs for r in out["rss"]],
            "rss_per_minute": [max(out["rss"][min(m, len(out["rss"]) - 1)] for out in outs) for m in range(longest)],
            "costs": costs}


def sentence_hypotheses(report: LongformReport) -> list[str]:
    """The resegmented hypothesis of every reference sentence, in reference order."""
    return [s.prediction for s in sorted(report.sentences, key=lambda s: s.index)]


def sentence_delays(report: LongformReport) -> list[float | None]:
    """The StreamLAAL (source clock, ms) of every reference sentence, in reference order; None: no output."""
    return [sentence_stream_laal(s) for s in sorted(report.sentences, key=lambda s: s.index)]


def talk_metric(model_options: ModelOptions) -> str:
    """The quality column's metric: BLEU for a talk translated, else WER_whisper."""
    return "BLEU" if model_options.task == "translate" else "WER_whisper"


def run(talk: str, config: str, clock: str,
        sets: Path) -> tuple[dict[str, Any], list[dict[str, Any]], list[str], list[str]]:
    """One run: its table row, its per-minute series, its sentence hypotheses and the reference sentences."""
    loaded = Talk.load(talk, config, sets)
    name, model_options, stream_options = loaded.name, loaded.model_options, loaded.stream_options
    engine, references = loaded.engine, loaded.references
    streamer = stream_talk_realtime if clock == "realtime" else stream_talk
    outs = [streamer(engine, stream_options, audio) for audio in loaded.audios]
    out = pooled(outs)
    translate = model_options.task == "translate"
    report = loaded.score(outs, computation_aware=True)
    offline = loaded.offline()
    same_search = offline if stream_options.search == SearchOptions() else loaded.offline(stream_options.search)
    extra: dict[str, Any] = {}
    if translate:
        import sacrebleu

        quality = report.scores["BLEU"]
        reference_point = sacrebleu.corpus_bleu(offline, [references]).score
        same_search_point = sacrebleu.corpus_bleu(same_search, [references]).score
    else:
        quality = report.scores["WER_whisper"]
        reference_point = wer(offline, references, whisper_normalize)
        same_search_point = wer(same_search, references, whisper_normalize)
        extra = {"WER_norm": report.scores["WER_norm"], "offline_WER_norm": wer(offline, references, normalize_for_wer)}
    per_minute: dict[int, list[float]] = {}  # StreamLAAL_CA of the sentences starting in each minute
    per_minute_al: dict[int, list[float]] = {}  # their StreamLAAL (source clock: no timing noise)
    for sentence in report.sentences:
        for aware, table in ((True, per_minute), (False, per_minute_al)):
            value = sentence_stream_laal(sentence, computation_aware=aware)
            if value is not None:
                table.setdefault(int(sentence.offset // 60000), []).append(value / 1000.0)
    minutes = sorted(per_minute)

    def mean_al(minute: int) -> float:
        return statistics.fmean(per_minute_al[minute]) if minute in per_minute_al else float("nan")

    compute = [c for _, c in out["chunks"]]
    costs = out["costs"]
    row = {
        "talk": name, "config": config, "clock": clock, "minutes": loaded.duration_s / 60,
        "quality": quality, "offline_per_utterance": reference_point,
        "offline_same_search": same_search_point, **extra,
        "StreamLAAL": seconds(report.scores["StreamLAAL"]), "StreamLAAL_CA": seconds(report.scores["StreamLAAL_CA"]),
        "first_min_AL": mean_al(minutes[0]), "last_min_AL": mean_al(minutes[-1]),
        "first_min_AL_CA": statistics.fmean(per_minute[minutes[0]]),
        "last_min_AL_CA": statistics.fmean(per_minute[minutes[-1]]),
        "chunk_p50_ms": float(np.percentile(compute, 50)), "chunk_p95_ms": float(np.percentile(compute, 95)),
        "RSS_min2_MB": out["rss"][1] if len(out["rss"]) > 1 else out["rss"][0], "RSS_last_MB": out["rss"][-1],
        "RTF": costs.compute_s / loaded.duration_s, "trims": costs.extra.get("trims", 0),
        "vad_segments": costs.extra.get("vad_segments", 0), "segment_commits": costs.extra.get("segment_commits", 0),
    }
    series = [{"minute": m, "AL": mean_al(m), "AL_CA": statistics.fmean(per_minute[m]),
               "chunk_p50_ms": float(np.percentile([c for t, c in out["chunks"] if t // 60000 == m] or [0.0], 50)),
               "chunk_p95_ms": float(np.percentile([c for t, c in out["chunks"] if t // 60000 == m] or [0.0], 95)),
               "RSS_MB": out["rss_per_minute"][min(m, len(out["rss_per_minute"]) - 1)]} for m in minutes]
    print(markdown_table([row], COLUMNS).splitlines()[-1], flush=True)
    return row, series, sentence_hypotheses(report), references


def _default_run(rows: list[dict[str, Any]], row: dict[str, Any]) -> int | None:
    """The index of the ``default`` run of ``row``'s talk on ``row``'s clock; None: there is none."""
    return next((k for k, r in enumerate(rows) if r["talk"] == row["talk"] and r["clock"] == row["clock"]
                 and r["config"] == "default"), None)


def _metric(row: dict[str, Any]) -> str:
    """The quality metric of a row: WER_whisper for a transcription (only those rows have WER_norm), else BLEU."""
    return "WER_whisper" if "WER_norm" in row else "BLEU"


def add_intervals(rows: list[dict[str, Any]], hypotheses: list[list[str]], references: list[list[str]]) -> None:
    """Fill ``vs_default`` of every row whose talk has a ``default`` run on the same clock: the paired bootstrap
    interval (95 %, 1000 resamples over the reference sentences) of its quality minus the default's."""
    for row, hyps, refs in zip(rows, hypotheses, references, strict=True):
        base = _default_run(rows, row)
        if base is None or rows[base] is row:
            continue
        row["vs_default"] = paired_bootstrap(_metric(row), hypotheses[base], hyps, refs, clusters=refs).describe()


def pooled_intervals(rows: list[dict[str, Any]], hypotheses: list[list[str]],
                     references: list[list[str]]) -> list[dict[str, Any]]:
    """Per config run beside ``default`` on more than one talk of one task (same clock): its quality and the
    default's over all those talks' reference sentences together (WER_whisper for the transcription talks, BLEU for
    the translation talks), and the paired bootstrap interval (95 %, 1000 resamples over the pooled sentences) of
    the difference."""
    pairs: dict[tuple[str, str, str], list[tuple[int, int]]] = {}  # (metric, config, clock) -> (run, default)s
    for k, row in enumerate(rows):
        base = _default_run(rows, row)
        if base is not None and base != k:
            pairs.setdefault((_metric(row), row["config"], row["clock"]), []).append((k, base))
    pooled_rows = []
    for (metric, config, clock), runs in pairs.items():
        if len(runs) < 2:
            continue
        interval = paired_bootstrap(metric, [h for _, b in runs for h in hypotheses[b]],
                                    [h for k, _ in runs for h in hypotheses[k]],
                                    [r for k, _ in runs for r in references[k]],
                                    clusters=[(rows[k]["talk"], r) for k, _ in runs for r in references[k]])
        pooled_rows.append({"metric": metric, "config": config, "clock": clock,
                            "talks": " + ".join(rows[k]["talk"] for k, _ in runs),
                            "sentences": sum(len(references[k]) for k, _ in runs), "clusters": interval.n,
                            "quality": interval.b, "default_quality": interval.a, "vs_default": interval.describe()})
    return pooled_rows


def write_hypotheses(path: Path, rows: list[dict[str, Any]], hypotheses: list[list[str]],
                     references: list[list[str]]) -> None:
    """Every run's resegmented hypothesis per reference sentence, so that its scores can be recomputed."""
    write_sentences(path, ["talk", "config", "clock"],
                    [([row["talk"], row["config"], row["clock"]], refs, hyps)
                     for row, hyps, refs in zip(rows, hypotheses, references, strict=True)])


def write_sentences(path: Path, keys: list[str], outputs: list[tuple[list[str], list[str], list[str]]],
                    delays: list[list[float | None]] | None = None) -> None:
    """A TSV of sentence outputs: per output (its ``keys`` cells, reference sentences, hypotheses) one line per
    sentence - the key cells, the sentence's index, its reference and its hypothesis, each on one line; with
    ``delays`` (per output, each sentence's StreamLAAL in ms or None) a last column of the StreamLAAL in seconds
    (empty: no output)."""
    lines = ["\t".join([*keys, "sentence", "reference", "hypothesis", *([] if delays is None else ["StreamLAAL"])])]
    for k, (cells, refs, hyps) in enumerate(outputs):
        lines += ["\t".join([*cells, str(i), " ".join(ref.split()), " ".join(hyp.split()),
                             *([] if delays is None else
                               ["" if delays[k][i] is None else f"{seconds(delays[k][i]):.3f}"])])
                  for i, (ref, hyp) in enumerate(zip(refs, hyps, strict=True))]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def plot(all_series: dict[str, list[dict[str, Any]]], results: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for index, (label, series) in enumerate(all_series.items()):
        xs = [s["minute"] for s in series]
        color = f"C{index}"  # one colour per run on all three plots (p95 solid, p50 dashed)
        axes[0].plot(xs, [s["AL_CA"] for s in series], marker="o", color=color, label=f"{label} AL_CA")
        axes[0].plot(xs, [s["AL"] for s in series], linestyle=":", color=color, label=f"{label} AL")
        axes[1].plot(xs, [s["chunk_p95_ms"] for s in series], marker="o", color=color, label=f"{label} p95")
        axes[1].plot(xs, [s["chunk_p50_ms"] for s in series], linestyle="--", color=color, label=f"{label} p50")
        axes[2].plot(xs, [s["RSS_MB"] for s in series], marker="o", color=color, label=label)
    titles = ("StreamLAAL_CA (AL dotted) per minute (s)", "compute per chunk (ms)", "RSS (MB)")
    for ax, title in zip(axes, titles, strict=True):
        ax.set_title(title)
        ax.set_xlabel("minute of the talk")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = results / "longform.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


PHASE_COLUMNS = ["talk", "config", "phase", "initial_wait_ms", "quality", "WER_norm", "StreamLAAL", "StreamLAAL_words",
                 "trims", "enc_frames_s", "dec_positions_s"]


@dataclasses.dataclass(frozen=True)
class PhaseRun:
    """One talk and config streamed on several chunk grids: its quality metric, each grid's sentence hypotheses
    and StreamLAAL (ms, None: no output; in reference order) and the reference sentences."""

    talk: str
    config: str
    metric: str
    hypotheses: list[list[str]]
    delays: list[list[float | None]]
    references: list[str]


def phase_rows(talk: str, config: str, sets: Path, phases: int) -> tuple[list[dict[str, Any]], PhaseRun]:
    """The talk streamed on ``phases`` chunk grids, shifted by k/``phases`` of a chunk (``initial_wait_ms`` = chunk
    x (1 + k/phases), k = 0 .. phases-1; k = 0 is the main table's grid), source clock: its quality and StreamLAAL
    on each grid, then their mean, best and worst; and the run's sentence hypotheses per grid.

    Why: which early guesses two consecutive hypotheses agree on, and so where the buffer is trimmed, depends on
    where the chunk boundaries fall in the speech; one grid's WER is one draw of that (``bench/performance.py``
    measures the same over the 6 utterances)."""
    loaded = Talk.load(talk, config, sets)
    name, stream_options = loaded.name, loaded.stream_options
    quality_key = talk_metric(loaded.model_options)
    first = stream_options.initial_wait_ms or stream_options.chunk_ms
    rows: list[dict[str, Any]] = []
    hypotheses: list[list[str]] = []
    delays: list[list[float | None]] = []
    for k in range(phases):
        options = dataclasses.replace(stream_options, initial_wait_ms=first + k * stream_options.chunk_ms / phases)
        outs = [stream_talk(loaded.engine, options, audio) for audio in loaded.audios]
        report = loaded.score(outs, computation_aware=False)
        words = loaded.score([words_only(out) for out in outs], computation_aware=False)
        hypotheses.append(sentence_hypotheses(report))
        delays.append(sentence_delays(report))
        costs = pooled(outs)["costs"]
        rows.append({"talk": name, "config": config, "phase": str(k), "initial_wait_ms": options.initial_wait_ms,
                     "quality": report.scores[quality_key]}
                    | ({"WER_norm": report.scores["WER_norm"]} if quality_key != "BLEU" else {})
                    | {"StreamLAAL": seconds(report.scores["StreamLAAL"]),
                       "StreamLAAL_words": seconds(words.scores["StreamLAAL"]),
                       "trims": costs.extra.get("trims", 0),
                       "enc_frames_s": costs.encoder_frames / loaded.duration_s,
                       "dec_positions_s": costs.decoder_positions / loaded.duration_s})
        print(markdown_table([rows[-1]], PHASE_COLUMNS).splitlines()[-1], flush=True)
    lower_better = quality_key != "BLEU"
    for label, pick in (("mean", statistics.fmean), ("best", min if lower_better else max),
                        ("worst", max if lower_better else min)):
        rows.append({"talk": name, "config": config, "phase": label,
                     "quality": pick([r["quality"] for r in rows[:phases]])}
                    | ({key: statistics.fmean(r[key] for r in rows[:phases])
                        for key in ("StreamLAAL", "StreamLAAL_words", "enc_frames_s", "dec_positions_s")}
                       if label == "mean" else {}))
    return rows, PhaseRun(name, config, quality_key, hypotheses, delays, loaded.references)


def phase_intervals(runs: list[PhaseRun], baseline: str = "default") -> list[dict[str, Any]]:
    """Per config run beside the ``baseline`` config on the same grids: its quality and the baseline's over all the
    grids of each talk, and over all the talks of one metric both ran on where there are several, with the paired
    bootstrap interval (95 %, 1000 resamples) of the difference; the same for StreamLAAL (the mean over every
    sentence and grid with output). A resample draws reference sentences, each with its outputs on every grid (the
    statistics of a sentence are summed over the grids): the grids of one sentence are not independent draws, the
    sentences are. (The columns name the baseline ``default``.)"""
    defaults = {run.talk: run for run in runs if run.config == baseline}
    groups: dict[tuple[str, str], list[PhaseRun]] = {}
    for run in runs:
        base = defaults.get(run.talk)
        if run.config != baseline and base is not None and len(base.hypotheses) == len(run.hypotheses):
            groups.setdefault((run.metric, run.config), []).append(run)

    stats = {(run.talk, run.config): grid_statistics(run.metric, run.hypotheses, run.references)
             for run in runs}  # (each run's scored once)
    delay_stats = {(run.talk, run.config): grid_delay_statistics(run.delays) for run in runs}

    def row(metric: str, config: str, group: list[PhaseRun]) -> dict[str, Any]:
        base_stats = np.concatenate([stats[(run.talk, baseline)][0] for run in group])
        run_stats = np.concatenate([stats[(run.talk, run.config)][0] for run in group])
        clusters = sentence_clusters(group)
        interval = bootstrap_from_stats(metric, base_stats, run_stats, stats[(group[0].talk, config)][1],
                                        clusters=clusters)
        base_delays = np.concatenate([delay_stats[(run.talk, baseline)][0] for run in group])
        run_delays = np.concatenate([delay_stats[(run.talk, run.config)][0] for run in group])
        delay = bootstrap_from_stats("StreamLAAL", base_delays, run_delays, delay_stats[(group[0].talk, config)][1],
                                     clusters=clusters)
        return {"metric": metric, "config": config, "talks": " + ".join(run.talk for run in group),
                "phases": len(group[0].hypotheses), "sentences": len(clusters), "clusters": interval.n,
                "quality": interval.b,
                "default_quality": interval.a, "vs_default": interval.describe(),
                "StreamLAAL": delay.b, "default_StreamLAAL": delay.a, "AL_vs_default": delay.describe()}

    return [row(metric, config, part) for (metric, config), group in groups.items()
            for part in ([[run] for run in group] + ([group] if len(group) > 1 else []))]


def sentence_clusters(runs: Sequence[PhaseRun]) -> list[str]:
    """The bootstrap's unit of each reference sentence of ``runs`` (in order): its text. The English talk says each
    of its 6 utterances 11 times, and an error the model makes on one sentence it mostly makes on every copy: the
    copies are one draw, not 11; the same holds across talks that share sentences (``en-mix`` says every sentence of
    the English talk and of the LibriSpeech readings once), so pooled talks resample each text once."""
    return [reference for run in runs for reference in run.references]


PHASE_POOLED_COLUMNS = ["metric", "config", "talks", "phases", "sentences", "clusters", "quality", "default_quality",
                        "vs_default", "StreamLAAL", "default_StreamLAAL", "AL_vs_default"]


def write_phase_outputs(rows: list[dict[str, Any]], runs: list[PhaseRun], results: Path) -> None:
    """The table as ``longform_phases.csv`` and the runs' sentence outputs as ``longform_phases_hypotheses.tsv``."""
    write_csv(results / "longform_phases.csv", rows, PHASE_COLUMNS)
    write_sentences(results / "longform_phases_hypotheses.tsv", ["talk", "config", "phase"],
                    [([run.talk, run.config, str(k)], run.references, hyps)
                     for run in runs for k, hyps in enumerate(run.hypotheses)],
                    [grid for run in runs for grid in run.delays])


def read_phase_outputs(results: Path) -> tuple[list[dict[str, Any]], list[PhaseRun]]:
    """What :func:`write_phase_outputs` kept in ``results``: the table rows and the runs (delays back in ms, to
    the millisecond the TSV keeps)."""
    with (results / "longform_phases.csv").open(newline="", encoding="utf-8") as f:
        rows = [{k: csv_number(v) for k, v in row.items() if v != ""} for row in csv.DictReader(f)]
    metrics = {name: talk_metric(options) for name, options in TALKS.values()}
    grids: dict[tuple[str, str], dict[int, list[tuple[str, str, float | None]]]] = {}
    lines = (results / "longform_phases_hypotheses.tsv").read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    if header != ["talk", "config", "phase", "sentence", "reference", "hypothesis", "StreamLAAL"]:
        raise SystemExit(f"{results}: a longform_phases_hypotheses.tsv without per-sentence StreamLAAL")
    for line in lines[1:]:
        talk, config, phase, sentence, reference, hypothesis, delay = line.split("\t")
        sentences = grids.setdefault((talk, config), {}).setdefault(int(phase), [])
        if int(sentence) != len(sentences):
            raise SystemExit(f"{results}: {talk} {config} phase {phase}: sentence {sentence} out of order")
        sentences.append((reference, hypothesis, float(delay) * 1000.0 if delay else None))
    runs = []
    for (talk, config), by_phase in grids.items():
        ordered = [by_phase[k] for k in sorted(by_phase)]
        runs.append(PhaseRun(talk, config, metrics[talk], [[h for _, h, _ in grid] for grid in ordered],
                             [[d for _, _, d in grid] for grid in ordered], [r for r, _, _ in ordered[0]]))
    return rows, runs


def write_phases(rows: list[dict[str, Any]], runs: list[PhaseRun], run_note: str, results: Path,
                 default_from: Path | None = None, baseline: str = "default") -> None:
    """``longform_phases.md`` in ``results``: the table, and each config against the ``baseline`` config among
    ``runs`` (the ``default`` kept in ``default_from`` when given: its folder is named)."""
    phases = max(len(run.hypotheses) for run in runs)
    pooled_rows = phase_intervals(runs, baseline)
    lines = [
        "# Long-form streaming over chunk phases",
        "",
        f"Written by `bench/longform.py --phases {phases}`: each run's talk streamed on {phases} chunk grids shifted "
        f"by k/{phases} of a chunk (`initial_wait_ms` = chunk x (1 + k/{phases}); phase 0 is the grid of "
        "`longform.md`), source clock. `quality`: WER after resegmentation (%, after Whisper's EnglishTextNormalizer; "
        "`WER_norm`: after the project's normalisation) for `en-talk`, `en-mix` and `ls-readings`, BLEU for `de-talk` "
        "and `fr-talk` (for `es-talk` / `pt-talk`: BLEU of agreement with offline translation); "
        "StreamLAAL in seconds (`StreamLAAL_words`: over the words alone, output units that are only punctuation "
        "left out: a mark emitted on its own counts as a word unit; not kept by runs before 2026-11-29); "
        "`enc_frames_s` / `dec_positions_s`: encoder input frames / decoder token positions computed per second of "
        "audio, the hardware-free compute (not kept by runs before 2026-11-29 08:40 UTC). Where the "
        "chunk boundaries fall decides which early guesses two consecutive "
        "hypotheses agree on and where the buffer is trimmed, so one grid's figure is one draw: compare means.",
        "",
        f"Run: {run_note}.",
        "",
        markdown_table(rows, PHASE_COLUMNS),
    ]
    if pooled_rows:
        lines += [
            "",
            "## Against " + ("the default" if baseline == "default" else f"`{baseline}`") + " over all grids",
            "",
            f"Each config's quality and the `{baseline}` run's"
            + ("" if baseline == "default" else " (the columns `default_*` and `*vs_default`)")
            + (f" (kept in [`{default_from.name}/`](../{default_from.name}/longform_phases.md): the same grids, the "
               "same default, deterministic)" if default_from is not None else "")
            + " over every grid of each talk, and of every talk of one metric both ran on, with the paired "
            "bootstrap interval of the difference (95 %, 1000 resamples of the distinct "
            "reference sentences, each with its copies and its outputs on all the grids: `clusters`, 6 for the "
            "English talk's 66 sentences); the same for the delay: `StreamLAAL` is "
            "the mean over every sentence and grid with output (s, source clock), `AL_vs_default` its difference "
            "from the default's with its interval. The per-grid sentence outputs and their StreamLAAL are in "
            "`longform_phases_hypotheses.tsv`.",
            "",
            markdown_table(pooled_rows, PHASE_POOLED_COLUMNS),
        ]
    write_report(results / "longform_phases.md", "\n".join(lines))


RESCORED = "; rescored from the kept outputs"


MERGED = "; outputs merged from "


def merge_phase_outputs(sources: Sequence[str]) -> tuple[list[dict[str, Any]], list[PhaseRun]]:
    """The outputs kept in several folders as one, in the order of ``sources`` (each ``DIR``, ``DIR:CONFIG`` or
    ``DIR:CONFIG=NAME``: see the module notes). A talk and config kept by two sources is read once where their
    outputs are equal, else SystemExit; so is a source naming a config its folder does not keep."""
    rows: list[dict[str, Any]] = []
    runs: dict[tuple[str, str], PhaseRun] = {}
    for source in sources:
        folder, _, pick = source.partition(":")
        config, _, name = pick.partition("=")
        kept_rows, kept_runs = read_phase_outputs(Path(folder))
        picked = [run for run in kept_runs if not config or run.config == config]
        if not picked:
            raise SystemExit(f"--from {source}: {folder} keeps no runs" + (f" of {config}" if config else ""))
        for run in picked:
            renamed = dataclasses.replace(run, config=name or run.config)
            key = (renamed.talk, renamed.config)
            if key in runs:
                if runs[key] != renamed:
                    raise SystemExit(f"--from {source}: {renamed.talk} {renamed.config} is kept by an earlier "
                                     "source with other outputs")
                continue
            runs[key] = renamed
            rows += [row | {"config": renamed.config} for row in kept_rows
                     if row["talk"] == run.talk and row["config"] == run.config]
    return rows, list(runs.values())


def rescore_phases(results: Path, default_from: Path | None, sources: Sequence[str] = (),
                   baseline: str = "default") -> None:
    """Write ``results``' phase page again from its kept outputs, or (``sources``) from those of several folders,
    which it then keeps (see the module notes); its run note is kept, the sources added to it."""
    if sources and default_from is not None:
        raise SystemExit("--from and --default-from: give one or the other")
    rows, runs = merge_phase_outputs(sources) if sources else read_phase_outputs(results)
    if default_from is not None:
        talks = {run.talk for run in runs}
        runs = [run for run in read_phase_outputs(default_from)[1]
                if run.config == "default" and run.talk in talks] + [run for run in runs if run.config != "default"]
    if baseline != "default" and baseline not in {run.config for run in runs}:  # (no default: the table alone)
        raise SystemExit(f"--baseline {baseline}: no such config among {sorted({run.config for run in runs})}")
    page = results / "longform_phases.md"
    old = page.read_text(encoding="utf-8").splitlines() if page.is_file() else []
    notes = [line.removeprefix("Run: ").removesuffix(".").partition(RESCORED)[0].partition(MERGED)[0]
             for line in old if line.startswith("Run: ")]
    note = (notes[0] if notes else "not recorded") + (MERGED + ", ".join(f"`{s}`" for s in sources) if sources else "")
    if sources:
        results.mkdir(parents=True, exist_ok=True)
        write_phase_outputs(rows, runs, results)
    write_phases(rows, runs, note + RESCORED + f" {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", results,
                 default_from, baseline)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default=DEFAULT_RUNS,
                        help="comma-separated TALK:CONFIG[@CLOCK] (talks: en, mix, ls, de, fr, es, pt; configs: "
                             f"{', '.join(CONFIGS)}; clocks: {', '.join(CLOCKS)}, default simulated)")
    parser.add_argument("--sets", type=Path, default=SETS, help="where bench/longform_sets.py wrote the talks")
    parser.add_argument("--phases", type=int, default=0,
                        help="instead: stream each run's talk on this many shifted chunk grids and write "
                             "bench/results/longform_phases.md (source clock; default 0: the main benchmark)")
    parser.add_argument("--phases-rescore", action="store_true",
                        help="run nothing: write the page of the phase outputs kept in --out again")
    parser.add_argument("--default-from", type=Path,
                        help="with --phases-rescore: compare with the default runs kept in this folder")
    parser.add_argument("--from", dest="sources", action="append", default=[], metavar="DIR[:CONFIG[=NAME]]",
                        help="with --phases-rescore: merge the outputs kept in these folders into --out (repeat it; "
                             "see the notes above)")
    parser.add_argument("--baseline", default="default",
                        help="with --phases or --phases-rescore: the config the others are compared with "
                             "(default: default)")
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="the folder the results are written to (default bench/results)")
    args = parser.parse_args()
    if args.phases_rescore:
        rescore_phases(args.out, args.default_from, args.sources, args.baseline)
        return
    load_before = load_average()
    runs = []
    for spec in args.runs.split(","):
        talk, _, rest = spec.partition(":")
        config, _, clock = rest.partition("@")
        clock = clock or "simulated"
        if talk not in TALKS or config not in CONFIGS or clock not in CLOCKS:
            raise SystemExit(f"bad run {spec!r}: TALK:CONFIG[@CLOCK] with TALK in {list(TALKS)}, CONFIG in "
                             f"{list(CONFIGS)}, CLOCK in {list(CLOCKS)}")
        if not (args.sets / f"{TALKS[talk][0]}.yaml").is_file():
            raise SystemExit(f"no {TALKS[talk][0]} in {args.sets}: run bench/longform_sets.py first")
        runs.append((talk, config, clock))
    args.out.mkdir(parents=True, exist_ok=True)
    if args.phases > 0:
        pairs = dict.fromkeys((talk, config) for talk, config, _ in runs)  # the clock plays no part on phases
        phase_tables, phase_runs = [], []
        for talk, config in pairs:
            table, phase_run = phase_rows(talk, config, args.sets, args.phases)
            phase_tables += table
            phase_runs.append(phase_run)
        write_phase_outputs(phase_tables, phase_runs, args.out)
        write_phases(phase_tables, phase_runs,
                     f"{machine_note(load_before)} (quality does not depend on the machine's speed)", args.out,
                     baseline=args.baseline)
        return
    anchor_ms = speed_anchor_ms()
    rows, all_series, hypotheses, references = [], {}, [], []
    for talk, config, clock in runs:
        row, series, hyps, refs = run(talk, config, clock, args.sets)
        rows.append(row)
        hypotheses.append(hyps)
        references.append(refs)
        all_series[f"{talk} {config}" + (" realtime" if clock == "realtime" else "")] = series
    add_intervals(rows, hypotheses, references)
    pooled_rows = pooled_intervals(rows, hypotheses, references)
    write_csv(args.out / "longform.csv", rows, COLUMNS)
    write_hypotheses(args.out / "longform_hypotheses.tsv", rows, hypotheses, references)
    png = plot(all_series, args.out)
    lines = [
        "# Long-form streaming: one stream over a whole talk",
        "",
        "Written by `bench/longform.py` on the talks of `bench/longform_sets.py`: `en-talk` (jfk + fleurs-en-dev "
        "joined with 0.3-2 s pauses and repeated, Whisper tiny.en, transcription: `quality` = WER after "
        "resegmentation and Whisper's EnglishTextNormalizer, `WER_whisper`, %), `ls-readings` (5 LibriSpeech "
        "test-other readings of about 77 s, each speaker's 10 consecutive utterances joined as they are, each "
        "streamed on its own and the 50 sentences scored together: corpus WER, StreamLAAL the mean over the "
        "sentences; Whisper tiny.en, `quality` as for `en-talk`), and `de-talk` / `fr-talk` (the 10 German / 10 "
        "French fleurs-multi utterances joined the same way, once: 2.8 / 2.1 minutes; Whisper base X→English: "
        "`quality` = BLEU after resegmentation). `offline_per_utterance`: the "
        "same model decoding each sentence's audio offline on its own (greedy, the default search); "
        "`offline_same_search`: the same with the run's search (beam 5 for `vad-beam5`); both in the `quality` "
        "metric. `WER_norm` / `offline_WER_norm`: the run's and the offline WER after the project's own "
        "normalisation (`normalize_for_wer`; the `quality` of English rows before 2026-11-26). `vs_default`: the "
        "run's `quality` minus that of the same talk's `default` run on the same clock, with its 95 % paired "
        "bootstrap interval over the distinct reference sentences (1000 resamples, the copies of a repeated "
        "sentence drawn together; an interval holding 0 is no difference). Latency in seconds: StreamLAAL "
        "(resegmented onto the reference sentences, "
        "equal to OmniSTEval) and its computation-aware form (`clock`: `simulated` = a real-time clock simulated from "
        "this machine's compute per chunk; `realtime` = the audio fed at wall-clock pace, exactly `--realtime`, "
        "emissions stamped with the wall clock; see the script); "
        "`first/last_min_AL(_CA)`: mean StreamLAAL (and _CA) of the sentences starting in the first / last minute. "
        "Compute per chunk decode p50 / p95 (ms), resident memory (MB) at the end of minute 2 and at the end. "
        "`default` is the task's `balanced` preset, what `simulst transcribe TALK` runs with no flags (and "
        "`simulst translate TALK` did until 2026-12-07; it runs `accurate` since) (transcription: LA-2, 600 ms "
        "chunks, the audio window, `--segment-s 10 --max-buffer-s "
        "16` since 2026-11-26 13:30 UTC and `--vad` since 16:42 UTC (before, the option defaults' `--segment-s 5 "
        "--max-buffer-s 8`, now the config `buffer-8`, and no VAD, now `no-vad`); translation: `--chunk-ms 1000 "
        "--search beam --beam 3 --policy ba-2 --segment-s 10 --max-buffer-s 30` from 2026-11-27 07:30 to 09:20 "
        "UTC and since 12:31 UTC (the config `beam-3-ba-2`), before and between `--search greedy --policy la-2` "
        "(the config `greedy-la-2`: rows named `default` of those times are that)); `low` / `accurate`: the "
        "task's other "
        "presets; every other config "
        "changes the options it names over `balanced`: `vad`: `--vad`; `no-vad`: `--no-vad`; `vad-2s`: `--vad "
        "--chunk-ms 2000 --segment-s 10 --max-buffer-s 16`, the accurate long-form configuration: fewer, later "
        "commits and fewer trims in mid-sentence; `segment-10`: "
        "`--segment-s 10 --max-buffer-s 16` (balanced's cuts); `buffer-8`: `--segment-s 5 --max-buffer-s "
        "8`; `segment-5` / `segment-6` / `segment-8`: `--segment-s 5` / `6` / `8` (the buffer trimmed behind each "
        "committed sentence end once it holds that many seconds); `wmin-8`: `--window-min-ms 8000` (an encoder window "
        "of the audio read + 2 s, at least 8 s, not 10); `beam-2-ba-2`: `--search beam --beam 2` (a beam of 2 under "
        "`balanced`'s BA-2); `context-sentence`: `--context-scope sentence`; `context-30`: `--context-tokens 30`; "
        "`buffer-15` / `buffer-20` / `buffer-24` / `buffer-30`: `--max-buffer-s "
        "15` / `20` / `24` / `30` (24 and 30 with `--no-punctuate-held-end`; `accurate-buffer-24`, "
        "`low-buffer-24`: 24 over those presets); "
        "`window-full`: `--window full`; `punct-held`: `--punctuate-held-end` "
        "(`punct-held-24`: with `--max-buffer-s 24`); `hold-punct`: `--hold-sentence-end --punctuate-held-end`; "
        "`context-all`: `--context-scope all`, the previous-text prompt holds the last 100 committed tokens "
        "before the buffer (the previous default; the default `auto` keeps only the sentence the buffer starts in "
        "when transcribing, all when translating); `context-0`: `--context-tokens 0`, no previous-text prompt; "
        "`vad-context-0`: `--vad --context-tokens 0`; `vad-beam5`: `--vad --search beam --beam 5`; `ctc`: "
        "`--policy ctc`, the CTC online policy with the CTC head shipped for tiny.en; `ctc-30` / `ctc-40`: `--policy "
        "ctc:-30` / `ctc:-40` (C_end -30 / -40: later stops, fewer guessed words); `ctc-w1` / `ctc-w1.5` / "
        "`ctc-w2`: `--policy ctc --word-logprob-threshold -1` / `-1.5` / `-2`; "
        "`encoder-int8` / `encoder-bf16`: `--encoder-precision int8` / `bf16`; `decoder-bf16`: `--precision bf16`; "
        "`final-beam5` / `low-final-beam5`: `--final-beam 5` over "
        "`balanced` / `low`; `low-beam3`: `--latency low --search beam --beam 3`; "
        "`accurate-beam-3-la-2`: `--latency accurate --search beam --beam 3 --policy la-2`; "
        "`c1000-la-2` / `c800-la-2` / `c500` / `c450`: `--chunk-ms 1000 --policy la-2` / `--chunk-ms 800 --policy "
        "la-2` / `--chunk-ms 500` / `--chunk-ms 450` (over `balanced`'s beam of 3, VAD and cuts); "
        "`accurate-segment-10`: "
        "`--chunk-ms 1000 --segment-s 10 --max-buffer-s 16`; `vad-1s` / `vad-0.8s` / `vad-0.6s`: `--vad --chunk-ms "
        "1000 / 800 / 600 --segment-s 10 --max-buffer-s 16`; `beam-3-ba-2` / `beam-5-ba-2` / `beam-2` / `greedy-la-2`: "
        "`--search beam --beam 3 --policy ba-2` / `--search beam --beam 5 --policy ba-2` / `--search beam --beam 2 "
        "--policy la-2` / `--search greedy --policy la-2`). "
        "For `ls-readings` the per-minute series pool the 5 "
        "talks (minute m of each talk) and the RSS columns read the talks in streaming order (see the script). The "
        "English "
        "talk repeats its 6 utterances: a prompt of whole earlier sentences then often holds the very sentence "
        "that comes next, which tiny.en tends to copy.",
        "",
        f"Run: {machine_note(load_before, anchor_ms)}.",
        "",
        markdown_table(rows, COLUMNS),
        "",
        *(["## Pooled over the talks of one task", "",
            "Each config's `quality` and the `default` run's over the reference sentences of all the talks of one "
            "task both ran on (same clock; WER_whisper over the English talks, BLEU over the translated ones), with "
            "the paired bootstrap interval of the difference over those sentences (95 %, 1000 resamples). The "
            "per-sentence outputs are in `longform_hypotheses.tsv`.", "",
            markdown_table(pooled_rows, ["metric", "config", "clock", "talks", "sentences", "clusters", "quality",
                                         "default_quality", "vs_default"]), ""] if pooled_rows else []),
        f"![per minute]({png.name})",
        "",
        "## Per minute",
        "",
    ]
    for label, series in all_series.items():
        lines += [f"### {label}", "", markdown_table(series, ["minute", "AL", "AL_CA", "chunk_p50_ms", "chunk_p95_ms",
                                                             "RSS_MB"]), ""]
    write_report(args.out / "longform.md", "\n".join(lines))


if __name__ == "__main__":
    main()
