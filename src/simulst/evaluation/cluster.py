"""Evaluation on a Ray cluster: ``simulst eval`` and ``simulst sweep`` with ``--cluster ray``.

The unit of work is one (configuration, utterance or talk) pair, a Ray task. The driver (the process that runs
the command) reads each utterance's audio once and puts it in Ray's object store, so the audio travels with the
task and workers need no shared file system; only the model options travel besides, and each worker process
loads the model once and keeps it for every later task it runs (:func:`cached_engine`). The instance records
come back to the driver, which writes every configuration's folder exactly as a local run does
(:func:`~simulst.evaluation.runner.open_run` / :func:`~simulst.evaluation.runner.close_run`): the same
``instances.log`` (in index order), scores and config files, plus ``cluster.jsonl``, one line per instance with
the node and worker process that ran it.

Rules:

* Resume: instances already in a folder's log are not submitted again (a log is appended as tasks finish, so an
  interrupted run loses only the tasks in flight).
* Failures: a task whose worker dies (killed, out of memory, node lost) is retried by Ray up to
  ``ClusterOptions.retries`` times; a task that still fails, or raises (unreadable audio), is reported by
  :class:`ClusterRunError` after every other task has finished and been written - never dropped silently. Its
  configuration's folder then keeps its partial log and is not scored; a rerun resumes it.
* Determinism: an instance's record is computed by the same code on the same inputs as locally, so everything but
  the measured compute times (``elapsed``, ``compute_ms``, the emissions' ``elapsed_ms``) equals a local run's,
  byte for byte; a worker runs with ``cpus_per_task`` torch threads.
* Without an address, :func:`connect` joins the cluster named by ``RAY_ADDRESS``, else starts a local one (never
  an unnamed cluster that happens to run on this machine).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from simulst.audio.io import load_audio
from simulst.config import ModelOptions, StreamOptions
from simulst.errors import OptionError, SimulstError
from simulst.evaluation.instances import LOG_NAME, append_record
from simulst.evaluation.latency import PieceEncoder
from simulst.evaluation.manifest import TestItem
from simulst.evaluation.runner import EvalOptions, RunConfig, close_run, make_run_config, open_run, run_instance
from simulst.evaluation.scoring import ScoreReport
from simulst.streaming.engine import SpeechEngine

logger = logging.getLogger(__name__)

NODES_LOG = "cluster.jsonl"


class ClusterRunError(SimulstError):
    """Some instances could not be evaluated on the cluster, even after their retries.

    Attributes:
        failures: one line per instance: the run folder, the utterance id and the error.
    """

    def __init__(self, failures: Sequence[str]) -> None:
        self.failures = list(failures)
        shown = "\n  ".join(self.failures[:10])
        more = f"\n  ... and {len(self.failures) - 10} more" if len(self.failures) > 10 else ""
        super().__init__(f"{len(self.failures)} instance(s) failed on the cluster (rerun the command to retry "
                         f"them; the others are kept):\n  {shown}{more}")


@dataclass(frozen=True)
class ClusterOptions:
    """Where and how the tasks run.

    Attributes:
        address: the Ray cluster (``host:port``, ``ray://host:10001`` or ``auto``); None: ``RAY_ADDRESS`` if set,
            else a local cluster started for this run.
        cpus_per_task: CPUs a task reserves (its worker's torch threads).
        retries: how often Ray reruns a task whose worker died.
        local_cpus: CPUs of a local cluster (None: all of this machine's).
        in_flight: tasks submitted ahead of the results (0: two per CPU of the cluster).
    """

    address: str | None = None
    cpus_per_task: float = 1.0
    retries: int = 3
    local_cpus: int | None = None
    in_flight: int = 0

    def __post_init__(self) -> None:
        if not self.cpus_per_task > 0:
            raise OptionError(f"CPUs per task must be > 0, got {self.cpus_per_task}")
        if self.retries < 0 or self.in_flight < 0:
            raise OptionError("retries and in-flight tasks must be >= 0")
        if self.local_cpus is not None and self.local_cpus < 1:
            raise OptionError(f"a local cluster needs at least one CPU, got {self.local_cpus}")


@dataclass(frozen=True)
class ClusterRun:
    """One configuration to evaluate: its stream options, its output folder and what ``config.json`` notes."""

    options: StreamOptions
    out_dir: Path
    info: dict[str, Any] = field(default_factory=dict)


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise OptionError("--cluster ray needs Ray: pip install 'simulst[ray]'") from exc
    return ray


def connect(options: ClusterOptions) -> Any:
    """Join (or start) the cluster unless this process is connected already; returns the ``ray`` module."""
    ray = _ray()
    if not ray.is_initialized():
        # (not None: Ray would then join the last cluster `ray start` made on this machine, if one runs)
        address = options.address or os.environ.get("RAY_ADDRESS") or "local"
        kwargs: dict[str, Any] = {"address": address, "logging_level": logging.WARNING}
        offline = os.environ.get("HF_HUB_OFFLINE")
        if offline is not None:  # the workers load models as the driver would
            kwargs["runtime_env"] = {"env_vars": {"HF_HUB_OFFLINE": offline}}
        if address == "local":
            kwargs.update(num_cpus=options.local_cpus, include_dashboard=False)
        try:
            ray.init(**kwargs)
        except ConnectionError as exc:
            raise OptionError(f"cannot reach the Ray cluster at {address}: {exc}") from exc
    return ray


# ------------------------------------------------------------------------------------------------ the workers

_ENGINES: dict[ModelOptions, SpeechEngine] = {}


def cached_engine(model: ModelOptions, threads: int) -> SpeechEngine:
    """This worker process's engine for ``model``: loaded by the first task that needs it, kept for the others."""
    engine = _ENGINES.get(model)
    if engine is None:
        import torch

        torch.set_num_threads(max(1, threads))
        engine = _ENGINES[model] = SpeechEngine.load(model)
    return engine


def describe_model(model: ModelOptions, threads: int) -> tuple[dict[str, Any], int]:
    """A worker's description of the model (what ``config.json`` records) and its sample rate."""
    engine = cached_engine(model, threads)
    return engine.describe(), engine.sample_rate


def evaluate_unit(model: ModelOptions, threads: int, options: StreamOptions, item: TestItem, index: int,
                  audio: np.ndarray, eval_options: EvalOptions, spm_proto: bytes | None) -> dict[str, Any]:
    """One (configuration, utterance) task: the instance's record and where it ran."""
    ray = _ray()
    started = time.perf_counter()
    engine = cached_engine(model, threads)
    spm = _spm_from_proto(spm_proto) if spm_proto is not None else None
    record = run_instance(engine, options, item, index, eval_options, lambda _path, _rate: audio, spm)
    return {"record": record, "node": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
            "seconds": round(time.perf_counter() - started, 3)}


def _spm_from_proto(proto: bytes) -> PieceEncoder:
    import sentencepiece

    processor: Any = sentencepiece.SentencePieceProcessor(model_proto=proto)
    return processor


# ------------------------------------------------------------------------------------------------ the driver


def run_on_cluster(
    model: ModelOptions,
    runs: Sequence[ClusterRun],
    items: Sequence[TestItem],
    eval_options: EvalOptions | None = None,
    cluster: ClusterOptions | None = None,
    progress: Callable[[int, ScoreReport], None] | None = None,
) -> list[ScoreReport]:
    """Evaluate every run over ``items`` on a Ray cluster; returns the runs' scores, in order.

    Args:
        model: the speech model every worker loads (a name or a path every node can read, or a hub id).
        runs: the configurations and their folders (resumed as local runs are).
        items: the test set.
        eval_options: shared by all runs (their progress bars are replaced by one over all tasks).
        cluster: where and how the tasks run.
        progress: called with each run's index and scores as it completes.

    Raises:
        ClusterRunError: instances that failed after their retries, or whose audio could not be read (every
            other instance is written, and every complete run scored).
        OptionError: no Ray, an unreachable cluster, an empty test set, a folder holding another run.
    """
    eval_options = eval_options or EvalOptions()
    if not items:
        raise OptionError("the test set is empty")
    if not runs:
        raise OptionError("nothing to run")
    if eval_options.realtime:
        raise OptionError("a real-time run feeds one utterance at a time at a speaker's pace: run it locally, "
                          "not on a cluster")
    return _Driver(model, runs, items, eval_options, cluster or ClusterOptions(), progress).run()


class _Driver:
    """Submits the (run, utterance) tasks a window at a time and writes each result as it comes back."""

    def __init__(self, model: ModelOptions, runs: Sequence[ClusterRun], items: Sequence[TestItem],
                 eval_options: EvalOptions, cluster: ClusterOptions,
                 progress: Callable[[int, ScoreReport], None] | None) -> None:
        self.ray = connect(cluster)
        self.model, self.runs, self.items, self.eval_options, self.progress = model, runs, items, eval_options, progress
        self.threads = max(1, int(cluster.cpus_per_task))
        remote = self.ray.remote(num_cpus=cluster.cpus_per_task, max_retries=cluster.retries)
        self.evaluate = remote(evaluate_unit)
        description, self.sample_rate = self.ray.get(remote(describe_model).remote(model, self.threads))
        self.quiet = replace(eval_options, progress=False)
        spm = eval_options.spm_model if eval_options.latency_unit == "spm" else None
        self.spm_proto = Path(spm).read_bytes() if spm else None
        self.todo: list[tuple[int, int]] = []
        for r, run in enumerate(runs):
            config: RunConfig = make_run_config(description, run.options, items, eval_options, run.info)
            done = open_run(run.out_dir, config, len(items), eval_options)
            if not eval_options.resume:  # (a run started afresh: its node records too)
                (run.out_dir / NODES_LOG).unlink(missing_ok=True)
            self.todo += [(r, i) for i in range(len(items)) if i not in done]
        self.todo.sort(key=lambda task: (task[1], task[0]))  # utterance by utterance: its audio is freed early
        cpus = self.ray.cluster_resources().get("CPU", 1.0)
        self.window = cluster.in_flight or max(2, int(2 * cpus / cluster.cpus_per_task))
        self.remaining = Counter(r for r, _ in self.todo)  # tasks left per run
        self.needed = Counter(i for _, i in self.todo)  # tasks left per utterance
        self.audio: dict[int, Any] = {}  # object references, while an utterance has tasks left
        self.pending: dict[Any, tuple[int, int]] = {}
        self.failures: dict[int, list[str]] = {}
        self.reports: dict[int, ScoreReport] = {}

    def run(self) -> list[ScoreReport]:
        for r in range(len(self.runs)):
            if self.remaining[r] == 0:
                self._close(r)
        queue = iter(self.todo)
        with tqdm(total=len(self.todo), disable=not self.eval_options.progress, unit="task", desc="cluster") as bar:
            self.bar = bar
            self._fill(queue)
            while self.pending:
                ready, _ = self.ray.wait(list(self.pending), num_returns=1)
                r, i = self.pending.pop(ready[0])
                try:
                    result = self.ray.get(ready[0])
                except Exception as exc:  # the task's own exception, or its worker lost after the retries
                    self._settle(r, i, error=_describe_error(exc))
                else:
                    self._settle(r, i, result=result)
                self._fill(queue)
        if self.failures:
            raise ClusterRunError([line for r in sorted(self.failures) for line in self.failures[r]])
        return [self.reports[r] for r in range(len(self.runs))]

    def _fill(self, queue: Iterator[tuple[int, int]]) -> None:
        while len(self.pending) < self.window and (task := next(queue, None)) is not None:
            r, i = task
            if i not in self.audio:
                try:
                    self.audio[i] = self.ray.put(load_audio(self.items[i].audio, self.sample_rate))
                except SimulstError as exc:  # (its other runs' tasks fail alike, each reported)
                    self._settle(r, i, error=f"{type(exc).__name__}: {exc}")
                    continue
            ref = self.evaluate.remote(self.model, self.threads, self.runs[r].options, self.items[i], i,
                                       self.audio[i], self.quiet, self.spm_proto)
            self.pending[ref] = task

    def _settle(self, r: int, i: int, result: dict[str, Any] | None = None, error: str | None = None) -> None:
        run = self.runs[r]
        if result is not None:
            append_record(run.out_dir / LOG_NAME, result["record"])
            with (run.out_dir / NODES_LOG).open("a", encoding="utf-8") as f:
                f.write(json.dumps({"index": i, "id": self.items[i].id, "node": result["node"], "pid": result["pid"],
                                    "seconds": result["seconds"]}) + "\n")
        else:
            self.failures.setdefault(r, []).append(f"{run.out_dir}: {self.items[i].id}: {error}")
        self.bar.update(1)
        self.needed[i] -= 1
        if self.needed[i] == 0:
            self.audio.pop(i, None)  # (the object store frees it)
        self.remaining[r] -= 1
        if self.remaining[r] == 0:
            self._close(r)

    def _close(self, r: int) -> None:
        """Score a run whose tasks have all come back (one with failures keeps its partial log, unscored)."""
        if r in self.failures:
            return
        self.reports[r] = close_run(self.runs[r].out_dir, self.eval_options)
        if self.progress:
            self.progress(r, self.reports[r])


def _describe_error(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):  # a task's own exception, wrapped by Ray
        return f"{type(cause).__name__}: {cause}"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"
