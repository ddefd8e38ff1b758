"""Many streams, one model: the due work of several streams runs in threads whose model calls are gathered into
batched calls.

A stream's code (:class:`~simulst.streaming.session.Session`: policy, search, commit) stays exactly as it is for
one stream; only the model it holds is a *view* (:meth:`Batcher.view`) whose hot calls - ``encode`` and the
no-speech check (once per chunk), ``start`` (the forced prefix, once per chunk) and ``step`` (once per decoded
token) - are handed to the :class:`Batcher` instead of run. Each job (e.g. "push this stream's new audio",
:meth:`Batcher.submit`) runs in its own thread, the jobs taking turns; whenever every running job is waiting
for a model call (or done), the batcher runs all waiting calls at once, one batched call per kind: the encodes
(``encode_many``: windows of equal length), the no-speech passes (``no_speech_many``), the forced prefix passes
(``start_many``: right-padded under the causal mask) and the decoder steps (``step_many``: padded, masked), then
wakes the jobs with their results. This is continuous batching (Orca, Yu et al., OSDI 2022) at the granularity
of model calls: streams join and leave between calls, and each stream's output is what it gets alone, up to
float rounding of the batched kernels (tests check the texts equal).

The rest of a stream's model calls (AlignAtt's passes that track the cross-attention, language detection, a forced
timing pass where the search's recorded rows do not reach a hypothesis's end) run unbatched in the stream's turn.
The batched passes record the alignment heads' rows of each stream's hypotheses as the single-stream ones do
(:attr:`~simulst.models.whisper.WhisperState.trace`), so batched streams get the same spoken times.
:class:`ThreadRunner` is the same interface without batching: up to ``workers`` jobs at once, in the order
submitted. With one worker (:class:`SerialRunner`) streams take turns through the model on all of torch's threads,
as the peers serve streams behind a lock; with more, each job runs its torch ops on its own thread alone, so
several streams decode side by side, one per core, instead of splitting every op across the cores.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np
import torch

from simulst.models.base import Ahead, Encoded, SpeechModel
from simulst.models.whisper import CrossBatch, WhisperModel, WhisperState
from simulst.types import Costs

T = TypeVar("T")


class Runner(Protocol):
    """Runs per-stream jobs over one model."""

    def view(self, model: SpeechModel) -> SpeechModel:
        """The model as a stream run by this runner must hold it."""
        ...

    def submit(self, job: Callable[[], T]) -> Future[T]:
        """Start a job (e.g. "push this stream's new audio"); its future holds the result or the exception."""
        ...

    def run(self, jobs: Sequence[Callable[[], T]]) -> list[T | Exception]:
        """Run jobs to the end; per job its result, or the exception it raised."""
        ...


class ThreadRunner:
    """No batching: up to ``workers`` jobs at once, in the order submitted.

    With one worker a job's torch ops use as many threads as the constructing thread's torch setting. With more,
    each worker thread runs its ops on one thread, so ``workers`` streams decode at once, one per core. Torch's
    thread count is per thread under OpenMP and MKL (the constructing thread's own is untouched), but threads the
    process starts later begin with the last count set anywhere (PyTorch keeps that one default).

    Args:
        workers: the most jobs running at once (>= 1).
    """

    batched = False

    def __init__(self, workers: int = 1) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, not {workers}")
        self.workers = workers
        threads = 1 if workers > 1 else torch.get_num_threads()
        self._worker = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="simulst-job",
                                          initializer=functools.partial(torch.set_num_threads, threads))

    def view(self, model: SpeechModel) -> SpeechModel:
        """The model itself."""
        return model

    def submit(self, job: Callable[[], T]) -> Future[T]:
        """Queue a job."""
        return self._worker.submit(job)

    def run(self, jobs: Sequence[Callable[[], T]]) -> list[T | Exception]:
        """The jobs, ``workers`` at a time."""
        return _outcomes([self.submit(job) for job in jobs])

    def close(self) -> None:
        """Stop the worker threads."""
        self._worker.shutdown(wait=False, cancel_futures=True)


class SerialRunner(ThreadRunner):
    """One job at a time, in the order submitted (one worker thread), as the peers serve streams behind a lock."""

    def __init__(self) -> None:
        super().__init__(workers=1)


def _outcomes(futures: Sequence[Future[T]]) -> list[T | Exception]:
    """Per job (waiting for each), its result or the exception it raised (a BaseException such as
    KeyboardInterrupt is raised on)."""
    results: list[T | Exception] = []
    for future in futures:
        error = future.exception()
        if error is not None and not isinstance(error, Exception):
            raise error
        results.append(future.result() if error is None else error)
    return results


@dataclass(eq=False)
class _Call:
    """A model call a job waits on."""

    job: int
    kind: str  # "encode" | "judge" | "start" | "step"
    args: tuple[Any, ...]
    done: bool = False
    result: Any = None
    error: Exception | None = None


@dataclass
class BatchStats:
    """What the batcher ran, per kind of call (``encode``, ``judge``: the no-speech pass, ``start``: the forced
    prefix pass, ``step``): batched calls, the stream calls they stood for (``calls / batches`` is the mean batch)
    and the largest batch; and the jobs run."""

    jobs: int = 0
    batches: dict[str, int] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    largest: dict[str, int] = field(default_factory=dict)

    def count(self, kind: str, n: int) -> None:
        """One batched call of ``n`` stream calls."""
        self.batches[kind] = self.batches.get(kind, 0) + 1
        self.calls[kind] = self.calls.get(kind, 0) + n
        self.largest[kind] = max(self.largest.get(kind, 0), n)


class Batcher:
    """Runs per-stream jobs in threads, gathering their model calls into batched calls.

    Jobs take turns (one runs Python or an unbatched model call at a time: no two compete for the cores); a job
    that makes a batched call waits, and when every job is waiting (or done), the waiting calls run as batches.
    A job submitted meanwhile joins the next batch: there are no rounds to wait for.

    Decoder calls go first: while any job waits for a decoder pass, the encodes wait. So the jobs that are
    decoding finish their (cheap, memory-bound, batched) decoder passes without waiting for the encodes of jobs
    that came due meanwhile - an encode of a long window keeps a CPU busy as long as a dozen decoder steps, and a
    batch of encodes costs as much as encoding one after another - and those jobs' encodes then run together,
    their decoder passes batched in turn: cohorts form by themselves, without rounds to wait for.

    Args:
        model: the shared Whisper model (its ``*_many`` methods run the batches).
        max_streams: the most jobs at once (threads kept ready).
        max_encodes: the most encodes in one batch (None: all waiting).
    """

    batched = True

    def __init__(self, model: WhisperModel, max_streams: int = 64, max_encodes: int | None = None) -> None:
        if max_encodes is not None and max_encodes < 1:
            raise ValueError(f"max_encodes must be >= 1 or None, got {max_encodes}")
        self.model = model
        self.max_streams = max_streams
        self.max_encodes = max_encodes
        self.stats = BatchStats()
        self._pool = ThreadPoolExecutor(max_workers=max_streams + 1, thread_name_prefix="simulst-stream")
        self._cond = threading.Condition()
        self._turn = threading.Lock()  # held by the job that runs (or by a dispatch)
        self._local = threading.local()
        self._alive = 0  # jobs submitted and not done
        self._running = 0  # jobs submitted, neither waiting for a call nor done
        self._dispatching = False
        self._calls: list[_Call] = []
        self._order = itertools.count()
        self._cross: CrossBatch | None = None

    def view(self, model: SpeechModel) -> SpeechModel:
        """``model`` (the shared model or a variant of it sharing its weights) with its hot calls sent through
        this batcher; other models are returned as they are (their calls run unbatched)."""
        if not isinstance(model, WhisperModel) or model.net is not self.model.net:
            return model
        view = _BatchedWhisper.__new__(_BatchedWhisper)
        view.__dict__.update(model.__dict__)
        view.batcher = self
        return view

    def submit(self, job: Callable[[], T]) -> Future[T]:
        """Start a job in its own thread."""
        return self._start([job])[0]

    def run(self, jobs: Sequence[Callable[[], T]]) -> list[T | Exception]:
        """Run jobs together (all started before any batch runs) to the end; per job its result or error."""
        futures = self._start(jobs)
        wait(futures)
        return _outcomes(futures)

    def close(self) -> None:
        """Stop the worker threads."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _start(self, jobs: Sequence[Callable[[], T]]) -> list[Future[T]]:
        with self._cond:
            if self._alive + len(jobs) > self.max_streams:  # (each job holds a thread while it waits)
                raise ValueError(f"{self._alive + len(jobs)} jobs at once exceed max_streams={self.max_streams}")
            self._alive += len(jobs)
            self._running += len(jobs)
            self.stats.jobs += len(jobs)
        return [self._pool.submit(self._work, job, next(self._order)) for job in jobs]

    def _work(self, job: Callable[[], T], order: int) -> T:
        self._local.job = order
        self._turn.acquire()
        try:
            return job()
        finally:
            self._turn.release()
            with self._cond:
                self._alive -= 1
                self._running -= 1
                claimed = self._claim()
            if claimed:  # (in another thread: this job's result is out before the others' batch runs)
                self._pool.submit(self._dispatch, claimed)

    # ------------------------------------------------------------------------------------ calls
    def call(self, kind: str, *args: Any) -> Any:
        """Hand a model call to the batcher and wait for its result (from a job's thread; elsewhere it runs at
        once, alone)."""
        if not hasattr(self._local, "job"):
            return self._batch(kind)([_Call(0, kind, args)])[0]
        call = _Call(self._local.job, kind, args)
        self._turn.release()
        with self._cond:
            self._calls.append(call)
            self._running -= 1
            claimed = self._claim()
        self._dispatch(claimed)
        with self._cond:
            while not call.done:
                self._cond.wait()
        self._turn.acquire()
        if call.error is not None:
            raise call.error
        return call.result

    def _claim(self) -> list[_Call]:
        """With the condition held, when no job is running and no batch is: the waiting calls to run now - every
        waiting decoder call, or when there is none, the waiting encodes (oldest first, ``max_encodes``)."""
        if self._running > 0 or self._dispatching or not self._calls:
            return []
        calls = sorted(self._calls, key=lambda c: c.job)  # oldest job first: a deterministic batch order
        decoder = [c for c in calls if c.kind != "encode"]
        chosen = decoder or calls[: self.max_encodes]
        taken = {id(c) for c in chosen}
        self._calls = [c for c in calls if id(c) not in taken]
        self._dispatching = True
        return chosen

    def _dispatch(self, calls: list[_Call]) -> None:
        """Run claimed calls as batches (one per kind) and wake their jobs; then whatever was claimed since."""
        while calls:
            with self._turn:
                for kind in ("encode", "judge", "start", "step"):
                    self._execute([c for c in calls if c.kind == kind], self._batch(kind))
            with self._cond:
                for call in calls:
                    call.done = True
                self._running += len(calls)
                self._dispatching = False
                self._cond.notify_all()
                calls = self._claim()

    def _batch(self, kind: str) -> Callable[[list[_Call]], list[Any]]:
        table: dict[str, Callable[[list[_Call]], list[Any]]] = {
            "encode": self._encode_batch, "judge": self._judge_batch, "start": self._start_batch,
            "step": self._step_batch}
        return table[kind]

    def _execute(self, calls: list[_Call], batch: Callable[[list[_Call]], list[Any]]) -> None:
        if not calls:
            return
        try:
            results = batch(calls)
        except Exception:  # find the culprit: each call alone, each error to its own stream
            for call in calls:
                try:
                    call.result = batch([call])[0]
                except Exception as err:
                    call.error = err
            return
        for call, result in zip(calls, results, strict=True):
            call.result = result

    def _encode_batch(self, calls: list[_Call]) -> list[Encoded]:
        self.stats.count("encode", len(calls))
        return self.model.encode_many(*(list(column) for column in zip(*(c.args for c in calls), strict=True)))

    def _judge_batch(self, calls: list[_Call]) -> list[float]:
        self.stats.count("judge", len(calls))
        if len(calls) == 1:
            return [self.model.no_speech_prob(*calls[0].args)]
        return self.model.no_speech_many([c.args[0] for c in calls], [c.args[1] for c in calls])

    def _start_batch(self, calls: list[_Call]) -> list[Ahead]:
        self.stats.count("start", len(calls))
        if len(calls) == 1:
            return [self.model.start_ahead(*calls[0].args)]
        encs, prefixes, drafts, costs, prompts, judges = (list(column)
                                                          for column in zip(*(c.args for c in calls), strict=True))
        return self.model.start_ahead_many(encs, prefixes, drafts, costs, prompts, judges)

    def _step_batch(self, calls: list[_Call]) -> list[tuple[torch.Tensor, WhisperState]]:
        plain = [c for c in calls if c.args[0].alignment is None]  # AlignAtt's states step alone
        results: dict[int, tuple[torch.Tensor, WhisperState]] = {}
        if plain:
            self.stats.count("step", len(plain))
            states = [c.args[0] for c in plain]
            if len(plain) > 1 and (self._cross is None or self._cross.slots(states) is None):
                self._cross = self.model.stack_cross(states)
            stepped = self.model.step_many(states, [c.args[1] for c in plain], [c.args[2] for c in plain],
                                           cross=self._cross if len(plain) > 1 else None)
            results.update(zip((id(c) for c in plain), stepped, strict=True))
        for c in calls:
            if id(c) not in results:
                self.stats.count("step", 1)
                results[id(c)] = self.model.step(*c.args)
        return [results[id(c)] for c in calls]


class _BatchedWhisper(WhisperModel):
    """A Whisper model whose ``encode`` and ``step`` go through a :class:`Batcher` (built by :meth:`Batcher.view`,
    sharing the model's weights and settings)."""

    batcher: Batcher

    def encode(self, audio: np.ndarray, costs: Costs, previous: Encoded | None = None,
               reencode_s: float | None = None) -> Encoded:
        """Encoded in the batcher's next encoder batch."""
        result: Encoded = self.batcher.call("encode", audio, costs, previous, reencode_s)
        return result

    def no_speech_prob(self, enc: Encoded, costs: Costs) -> float:
        """Judged in the batcher's next no-speech batch."""
        result: float = self.batcher.call("judge", enc, costs)
        return result

    def start(
        self, enc: Encoded, prefix: Sequence[int], costs: Costs, prompt: Sequence[int] | None = None,
        alignment: bool = False,
    ) -> tuple[torch.Tensor, WhisperState]:
        """Force-decoded in the batcher's next prefix batch (with ``alignment``: alone, unbatched)."""
        if alignment:
            return super().start(enc, prefix, costs, prompt, alignment)
        prompt = self.prompt(enc, costs) if prompt is None else prompt  # (this variant's language and task)
        ahead = self.start_ahead(enc, prefix, (), costs, prompt)
        return ahead.logp[0], ahead.state

    def start_ahead(
        self, enc: Encoded, prefix: Sequence[int], draft: Sequence[int], costs: Costs, prompt: Sequence[int],
        judge: bool = False,
    ) -> Ahead:
        """Force-decoded (draft and judgement included) in the batcher's next prefix batch."""
        result: Ahead = self.batcher.call("start", enc, tuple(prefix), tuple(draft), costs, tuple(prompt), judge)
        return result

    def step(self, state: WhisperState, tokens: torch.Tensor, costs: Costs) -> tuple[torch.Tensor, WhisperState]:
        """Stepped in the batcher's next decoder batch."""
        result: tuple[torch.Tensor, WhisperState] = self.batcher.call("step", state, tokens, costs)
        return result
