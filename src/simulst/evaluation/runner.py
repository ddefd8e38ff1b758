"""Run a test set through an engine's streams and write a SimulEval-compatible output folder.

Output folder::

    instances.log   one JSON line per utterance, SimulEval's format (see instances.py)
    scores.tsv      corpus scores, one header row and one value row (as SimulEval's scores.tsv)
    scores.json     the same scores plus notes (empty outputs, missing references)
    metrics.tsv     per-instance metrics
    config.json     the settings of the run (model, stream options, evaluation options, test set)
    config.yaml     ``source_type`` / ``target_type``, which ``simuleval --score-only`` reads

Simulation (SimulEval's sentence-level loop): each utterance's audio is pushed into a fresh stream
(``engine.open``) one chunk at a time as fast as the model goes, then ``finish()`` is called.
Every output unit (see :func:`emission_units`) gets as delay the source ms read when its emission was made
(computation-unaware), and as elapsed time that plus the compute the stream had spent by then
(computation-aware, SimulEval >= 1.1.4: the clock restarts for every utterance; ``Emission.elapsed_ms``).
With ``computation_aware=False`` the log's ``elapsed`` lists are left empty (so no ``_CA`` metric is scored).

Real time (``EvalOptions.realtime``): each utterance's audio arrives at the pace of a live speaker instead
(:func:`~simulst.streaming.feed.feed_realtime`), into a stream that decodes once per push at the last chunk boundary
it reached (``catch_up``, as ``transcribe --realtime`` and the server run); a unit's delay is still the source ms
read by the decode that emitted it, and its elapsed time is the wall-clock ms since the utterance's audio began to
arrive. The ``_CA`` metrics are then the delay a listener meets, compute that overlaps the speech costing nothing,
where SimulEval's elapsed adds all the compute spent so far to the source time. Such a run takes as long as its
audio, and its times are only worth keeping from a machine doing nothing else.

A run is resumable: utterances already in ``instances.log`` are skipped (a truncated last line from an
interrupted run is dropped), provided the folder's ``config.json`` describes the same run.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from simulst.audio.io import load_audio
from simulst.config import StreamOptions
from simulst.errors import OptionError
from simulst.evaluation.instances import (
    LOG_NAME,
    SIMULST_KEY,
    InstanceRecord,
    append_record,
    repair_log,
    write_log,
)
from simulst.evaluation.latency import LATENCY_UNITS, PieceEncoder
from simulst.evaluation.manifest import TestItem
from simulst.evaluation.scoring import ScoreOptions, ScoreReport, load_spm, score_records, write_scores
from simulst.streaming.engine import Engine
from simulst.streaming.feed import feed_fast, feed_realtime
from simulst.types import Costs, Emission

logger = logging.getLogger(__name__)

CONFIG_JSON = "config.json"
CONFIG_YAML = "config.yaml"


@dataclass(frozen=True)
class EvalOptions(ScoreOptions):
    """How a test set is evaluated: how its log is scored (every field of :class:`ScoreOptions`), and how it runs.

    Attributes:
        computation_aware: record ``elapsed`` (and score the ``_CA`` metrics); on by default.
        resume: skip utterances already in the folder's ``instances.log`` (False: start the log afresh).
        progress: show a progress bar on stderr.
        realtime: feed each utterance at the pace of a live speaker, elapsed the wall clock (see the module
            docstring); needs ``computation_aware``.
    """

    computation_aware: bool = True
    resume: bool = True
    progress: bool = True
    realtime: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.realtime and not self.computation_aware:
            raise OptionError("a real-time run records each output's wall-clock time as its elapsed time: "
                              "it is computation-aware")

    def score_options(self) -> ScoreOptions:
        """The scoring options alone."""
        return ScoreOptions(**{f.name: getattr(self, f.name) for f in fields(ScoreOptions)})


@dataclass(frozen=True)
class Units:
    """An output split into latency units.

    Attributes:
        units: the units (words, characters without spaces, or SentencePiece pieces).
        delays: per unit, source ms of the emission that completed it.
        elapsed: per unit, that emission's computation-aware time.
        prediction: the output text as SimulEval's log writes it for this unit.
    """

    units: tuple[str, ...]
    delays: tuple[float, ...]
    elapsed: tuple[float, ...]
    prediction: str


def emission_units(emissions: Sequence[Emission], unit: str = "word", spm: PieceEncoder | None = None) -> Units:
    """Split a stream's emissions into latency units with their delays, as SimulEval splits an agent's writes.

    Each emission is split on its own and every unit gets that emission's times: word unit,
    ``text.split()``; char unit, the characters other than ``" "``; spm unit, the SentencePiece pieces of each
    word. ``prediction`` is what SimulEval writes: the words joined by one space, the characters concatenated
    (SimulEval drops spaces in char unit, which is meant for zh/ja), or the pieces detokenised.

    Emissions end at word boundaries, so a word is almost always one unit. The exception: when a stable
    hypothesis ended with ``<eos>`` right after a word ("... for you"), a later emission may begin with
    punctuation (", ask ..."); the mark is then a unit of its own ("you , ask"), exactly as the SimulEval agent
    wrapping a Session produces it. sacreBLEU's 13a tokenizer, chrF and the normalised WER are unaffected; the
    untouched text is kept in the log under ``simulst.text``.
    """
    units: list[str] = []
    delays: list[float] = []
    elapsed: list[float] = []
    for e in emissions:
        if unit == "char":
            pieces = list(e.text.replace(" ", ""))  # SimulEval: list(content.replace(" ", ""))
        elif unit == "word":
            pieces = e.text.split()
        elif unit == "spm":
            if spm is None:
                raise OptionError("the spm latency unit needs a SentencePiece model")
            pieces = [p for word in e.text.split() for p in spm.encode(word, out_type=str)]
        else:
            raise OptionError(f"unknown latency unit {unit!r}; choose one of {', '.join(LATENCY_UNITS)}")
        units += pieces
        delays += [e.source_ms] * len(pieces)
        elapsed += [e.elapsed_ms] * len(pieces)
    if unit == "word":
        prediction = " ".join(units)
    elif unit == "char":
        prediction = "".join(units)
    else:
        prediction = "".join(units).replace("▁", " ").strip()
    return Units(tuple(units), tuple(delays), tuple(elapsed), prediction)


AudioLoader = Callable[[Path, int], np.ndarray]


def stream_through(engine: Engine, options: StreamOptions, audio: np.ndarray,
                   realtime: bool = False) -> tuple[list[Emission], Costs]:
    """Push ``audio`` through a fresh stream one chunk at a time, then finish it; with ``realtime`` at the pace
    of a live speaker into a catch-up stream, each emission's ``elapsed_ms`` replaced by the wall-clock ms since
    the audio began to arrive."""
    if not realtime:
        stream = engine.open(options)
        return feed_fast(stream, audio), stream.costs
    stream = engine.open(options, catch_up=True)
    walls: list[float] = []
    emissions = feed_realtime(stream, audio, lambda _emission, wall_ms: walls.append(wall_ms))
    return [replace(e, elapsed_ms=wall) for e, wall in zip(emissions, walls, strict=True)], stream.costs


def run_instance(
    engine: Engine,
    options: StreamOptions,
    item: TestItem,
    index: int,
    eval_options: EvalOptions | None = None,
    load: AudioLoader = load_audio,
    spm: PieceEncoder | None = None,
) -> InstanceRecord:
    """Evaluate one utterance: stream it, split the output into latency units, build its log record."""
    eval_options = eval_options or EvalOptions()
    audio = load(item.audio, engine.sample_rate)
    emissions, costs = stream_through(engine, options, audio, eval_options.realtime)
    units = emission_units(emissions, eval_options.latency_unit, spm)
    source_ms = audio.shape[0] * 1000.0 / engine.sample_rate
    text = "".join(e.text for e in emissions)
    info: dict[str, Any] = {
        "id": item.id,
        "latency_unit": eval_options.latency_unit,
        "text": text,
        "n_words": len(text.split()),
        "emissions": [
            {"text": e.text, "source_ms": e.source_ms, "elapsed_ms": e.elapsed_ms, "final": e.final}
            for e in emissions
        ],
        "compute_ms": costs.compute_s * 1000.0,
        "decoder_calls": costs.decoder_calls,
        "decoder_positions": costs.decoder_positions,
        "encoder_calls": costs.encoder_calls,
        "encoder_frames": costs.encoder_frames,
        "extra": dict(costs.extra),
    }
    if item.tgt_lang:
        info["tgt_lang"] = item.tgt_lang
    extra: dict[str, Any] = {}
    if eval_options.latency_unit == "spm":
        extra["prediction_spm"] = list(units.units)  # as SimulEval writes it
    extra[SIMULST_KEY] = info
    return InstanceRecord(
        index=index,
        prediction=units.prediction,
        delays=list(units.delays),
        elapsed=list(units.elapsed) if eval_options.computation_aware else [],
        prediction_length=len(units.delays),
        reference=item.reference,
        source=str(item.audio),
        source_length=source_ms,
        extra=extra,
    )


def stream_options_dict(options: StreamOptions) -> dict[str, Any]:
    """A JSON-able description of stream options (the policy as the papers write it, e.g. ``la-2``)."""
    out = asdict(options)
    out["policy"] = str(options.policy)
    return out


@dataclass
class RunConfig:
    """What ``config.json`` records; a resumed run must match it (``run`` part)."""

    run: dict[str, Any]
    info: dict[str, Any] = field(default_factory=dict)


def make_run_config(
    model: Any,
    options: StreamOptions,
    items: Sequence[TestItem],
    eval_options: EvalOptions,
    info: dict[str, Any] | None = None,
) -> RunConfig:
    """Describe a run: the parts that must match to resume (model, options, test set) and free ``info``.

    ``model``: a JSON-able description of the model (an engine's :meth:`describe`, or a name)."""
    run = {
        "model": model,
        "stream": stream_options_dict(options),
        "latency_unit": eval_options.latency_unit,
        "spm_model": eval_options.spm_model,
        "computation_aware": eval_options.computation_aware,
        "realtime": eval_options.realtime,
        "test_set": [[it.id, str(it.audio)] for it in items],
    }
    return RunConfig(run=run, info=dict(info or {}))


def _with_defaults(recorded: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    out = dict(recorded)
    for key, value in defaults.items():
        if key not in out:
            out[key] = value
        elif isinstance(value, dict) and isinstance(out[key], dict):
            out[key] = _with_defaults(out[key], value)
    return out


def _check_resumable(out: Path, config: RunConfig) -> None:
    path = out / CONFIG_JSON
    if not path.is_file():
        return
    try:
        previous = json.loads(path.read_text(encoding="utf-8")).get("run")
    except (json.JSONDecodeError, AttributeError) as exc:
        raise OptionError(f"{path} is not a simulst config: {exc}") from exc
    previous = previous if isinstance(previous, dict) else {}
    previous.setdefault("realtime", False)  # (a run written before real-time runs were recorded: not one)
    if isinstance(previous.get("stream"), dict):
        # options added to simulst after that run was written take their defaults, which it ran with
        previous["stream"] = _with_defaults(previous["stream"], stream_options_dict(StreamOptions()))
    current = json.loads(json.dumps(config.run))
    # the same utterances may sit elsewhere on another machine: compare ids and file names, not full paths
    for run in (previous, current):
        if isinstance(run.get("test_set"), list):
            run["test_set"] = [
                [str(e[0]), Path(str(e[1])).name] if isinstance(e, list) and len(e) == 2 else e for e in run["test_set"]
            ]
    if previous != current:
        changed = sorted(k for k in set(previous) | set(current) if previous.get(k) != current.get(k))
        raise OptionError(
            f"{out} holds a run with other settings ({', '.join(changed)} differ): use another --output folder, "
            "or --overwrite to start it afresh"
        )


def open_run(
    out_dir: str | Path, config: RunConfig, n_items: int, eval_options: EvalOptions
) -> set[int]:
    """Prepare an output folder for a run (created if needed): check that a resumed log belongs to this run,
    repair it, write ``config.json`` / ``config.yaml``; returns the indices already in the log.

    Raises:
        OptionError: the folder holds a run with other settings, or a log with more instances than ``n_items``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    log = out / LOG_NAME
    if eval_options.resume:
        _check_resumable(out, config)
        done = {rec.index for rec in repair_log(log)}
    else:
        log.write_text("", encoding="utf-8")
        done = set()
    unknown = sorted(i for i in done if i >= n_items)
    if unknown:
        raise OptionError(f"{log} has instances {unknown[:5]} beyond the {n_items} of this test set")
    (out / CONFIG_JSON).write_text(
        json.dumps({"run": config.run, "info": config.info}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (out / CONFIG_YAML).write_text("source_type: speech\ntarget_type: text\n", encoding="utf-8")
    return done


def close_run(out_dir: str | Path, eval_options: EvalOptions) -> ScoreReport:
    """Score a folder's log (written in any order: it is rewritten in index order first) and write the scores."""
    out = Path(out_dir)
    log = out / LOG_NAME
    records = repair_log(log)
    ordered = sorted(records, key=lambda r: r.index)
    if [r.index for r in ordered] != [r.index for r in records]:
        partial = log.with_name(LOG_NAME + ".sorting")
        write_log(partial, ordered)
        partial.replace(log)  # (atomic: an interruption leaves the log as it was)
    report = score_records(ordered, eval_options.score_options())
    write_scores(out, report)
    return report


def run_eval(
    engine: Engine,
    options: StreamOptions,
    items: Sequence[TestItem],
    out_dir: str | Path,
    eval_options: EvalOptions | None = None,
    config: RunConfig | None = None,
    load: AudioLoader = load_audio,
) -> ScoreReport:
    """Evaluate a test set into ``out_dir`` (created if needed) and return its scores.

    Args:
        engine: the loaded models (shared by all utterances).
        options: the stream options of every utterance.
        items: the test set; the log index of ``items[i]`` is ``i``.
        out_dir: the output folder (see the module docstring).
        eval_options: units, metrics, resume and progress options.
        config: what to record in ``config.json`` (default: built from the arguments, model name unknown).
        load: reads an utterance's audio at the model's sample rate.
    """
    eval_options = eval_options or EvalOptions()
    if not items:
        raise OptionError("the test set is empty")
    config = config or make_run_config(None, options, items, eval_options)
    out = Path(out_dir)
    done = open_run(out, config, len(items), eval_options)
    log = out / LOG_NAME
    spm = load_spm(eval_options.spm_model) if eval_options.latency_unit == "spm" and eval_options.spm_model else None

    todo = [i for i in range(len(items)) if i not in done]
    with tqdm(total=len(items), initial=len(done), disable=not eval_options.progress, unit="utt",
              desc=out.name or "eval", leave=False) as bar:
        for index in todo:
            record = run_instance(engine, options, items[index], index, eval_options, load, spm)
            append_record(log, record)
            bar.update(1)
    return close_run(out, eval_options)
