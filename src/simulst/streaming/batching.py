"""Many streams, one model: the due work of several streams runs in threads whose model calls are gathered into
batched calls.

A stream's code (:class:`~simulst.streaming.session.Session`: policy, search, commit) stays exactly as it is for
one stream; only the model it holds is a *view* (:meth:`Batcher.view`) whose hot calls - ``encode`` and the
no-speech check (once per chunk), ``start`` (the forced prefix, once per chunk) and ``step`` (once per decoded
token) - are handed to the :class:`Batcher` instead of run. The batcher runs one *round* at a time
(:meth:`Batcher.run`: one job per stream, e.g. "push this stream's new audio"), each job in its own thread;
whenever every job of the round is either waiting for a model call or done, it runs all waiting calls at once,
one batched call per kind: the encodes (``encode_many``: windows of equal length), the no-speech passes
(``no_speech_many``), the forced prefix passes (``start_many``: right-padded under the causal mask) and the
decoder steps (``step_many``: padded, masked), then wakes the jobs with their results. This is continuous
batching (Orca, Yu et al., OSDI 2022) at the granularity of model calls: streams join and leave between calls,
and each stream's output is what it gets alone, up to float rounding of the batched kernels (tests check the
texts equal).

The rest of a stream's model calls (AlignAtt's passes that track the cross-attention, language detection, token
timing) run unbatched in the stream's thread. :class:`SerialRunner` is the same interface without batching: the
jobs of a round run one after another (one stream at a time through the model, as the peers serve streams behind
a lock).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, cast

import numpy as np
import torch

from simulst.models.base import Encoded, SpeechModel
from simulst.models.whisper import CrossBatch, WhisperModel, WhisperState
from simulst.types import Costs

T = TypeVar("T")


class Runner(Protocol):
    """Runs rounds of per-stream jobs over one model."""

    def view(self, model: SpeechModel) -> SpeechModel:
        """The model as a stream run by this runner must hold it."""
        ...

    def run(self, jobs: Sequence[Callable[[], T]]) -> list[T | Exception]:
        """Run one round: every job once; per job its result, or the exception it raised."""
        ...


class SerialRunner:
    """Rounds without batching: the jobs run one after another in the caller's thread."""

    batched = False

    def view(self, model: SpeechModel) -> SpeechModel:
        """The model itself."""
        return model

    def run(self, jobs: Sequence[Callable[[], T]]) -> list[T | Exception]:
        """Each job in turn."""
        results: list[T | Exception] = []
        for job in jobs:
            try:
                results.append(job())
            except Exception as err:  # one stream's failure is its own
                results.append(err)
        return results


@dataclass
class _Call:
    """A model call a job waits on."""

    job: int
    kind: str  # "encode" | "step"
    args: tuple[Any, ...]
    done: bool = False
    result: Any = None
    error: Exception | None = None


@dataclass
class BatchStats:
    """What the batcher ran, per kind of call (``encode``, ``judge``: the no-speech pass, ``start``: the forced
    prefix pass, ``step``): batched calls, the stream calls they stood for (``calls / batches`` is the mean batch)
    and the largest batch."""

    rounds: int = 0
    batches: dict[str, int] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    largest: dict[str, int] = field(default_factory=dict)

    def count(self, kind: str, n: int) -> None:
        """One batched call of ``n`` stream calls."""
        self.batches[kind] = self.batches.get(kind, 0) + 1
        self.calls[kind] = self.calls.get(kind, 0) + n
        self.largest[kind] = max(self.largest.get(kind, 0), n)


class Batcher:
    """Runs rounds of per-stream jobs in threads, gathering their ``encode`` and ``step`` calls into batched calls.

    Args:
        model: the shared Whisper model (its ``encode_many`` and ``step_many`` run the batches).
        max_streams: the most jobs in one round (threads kept ready).
    """

    batched = True

    def __init__(self, model: WhisperModel, max_streams: int = 64) -> None:
        self.model = model
        self.max_streams = max_streams
        self.stats = BatchStats()
        self._pool = ThreadPoolExecutor(max_workers=max_streams, thread_name_prefix="simulst-stream")
        self._cond = threading.Condition()
        self._round = threading.Lock()
        self._local = threading.local()
        self._running = 0  # jobs of the round neither waiting for a call nor done
        self._calls: list[_Call] = []
        self._cross: CrossBatch | None = None

    def view(self, model: SpeechModel) -> SpeechModel:
        """``model`` (the shared model or a variant of it sharing its weights) with ``encode`` and ``step`` sent
        through this batcher; other models are returned as they are (their calls run unbatched)."""
        if not isinstance(model, WhisperModel) or model.net is not self.model.net:
            return model
        view = _BatchedWhisper.__new__(_BatchedWhisper)
        view.__dict__.update(model.__dict__)
        view.batcher = self
        return view

    def run(self, jobs: Sequence[Callable[[], T]]) -> list[T | Exception]:
        """Run one round: each job in its own thread, their model calls batched; per job its result or error."""
        if len(jobs) > self.max_streams:
            raise ValueError(f"a round of {len(jobs)} jobs exceeds max_streams={self.max_streams}")
        results: list[T | Exception | None] = [None] * len(jobs)

        def work(index: int, job: Callable[[], T]) -> None:
            self._local.job = index
            try:
                results[index] = job()
            except Exception as err:  # one stream's failure is its own
                results[index] = err
            finally:
                with self._cond:
                    self._running -= 1
                    self._dispatch_if_idle()

        with self._round:
            self.stats.rounds += 1
            with self._cond:
                self._running = len(jobs)
            wait([self._pool.submit(work, i, job) for i, job in enumerate(jobs)])
        return cast("list[T | Exception]", results)

    def close(self) -> None:
        """Stop the worker threads."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------------------------ calls
    def call(self, kind: str, *args: Any) -> Any:
        """Hand a model call to the batcher and wait for its result (from a job's thread)."""
        call = _Call(getattr(self._local, "job", 0), kind, args)
        with self._cond:
            self._calls.append(call)
            self._running -= 1
            self._dispatch_if_idle()
            while not call.done:
                self._cond.wait()
        if call.error is not None:
            raise call.error
        return call.result

    def _dispatch_if_idle(self) -> None:
        """With the condition held: when no job is running, run every waiting call and wake their jobs."""
        if self._running > 0 or not self._calls:
            return
        calls = sorted(self._calls, key=lambda c: c.job)  # a deterministic batch order
        self._calls = []
        for kind, batch in (("encode", self._encode_batch), ("judge", self._judge_batch),
                            ("start", self._start_batch), ("step", self._step_batch)):
            self._execute([c for c in calls if c.kind == kind], batch)
        self._running += len(calls)
        self._cond.notify_all()

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
                call.done = True
            return
        for call, result in zip(calls, results, strict=True):
            call.result, call.done = result, True

    def _encode_batch(self, calls: list[_Call]) -> list[Encoded]:
        self.stats.count("encode", len(calls))
        return self.model.encode_many([c.args[0] for c in calls], [c.args[1] for c in calls])

    def _judge_batch(self, calls: list[_Call]) -> list[float]:
        self.stats.count("judge", len(calls))
        if len(calls) == 1:
            return [self.model.no_speech_prob(*calls[0].args)]
        return self.model.no_speech_many([c.args[0] for c in calls], [c.args[1] for c in calls])

    def _start_batch(self, calls: list[_Call]) -> list[tuple[torch.Tensor, WhisperState]]:
        self.stats.count("start", len(calls))
        if len(calls) == 1:
            enc, prefix, costs, prompt = calls[0].args
            return [self.model.start(enc, prefix, costs, prompt)]
        encs, prefixes, costs, prompts = (list(column) for column in zip(*(c.args for c in calls), strict=True))
        return self.model.start_many(encs, prefixes, costs, prompts)

    def _step_batch(self, calls: list[_Call]) -> list[tuple[torch.Tensor, WhisperState]]:
        plain = [c for c in calls if c.args[0].alignment is None]  # AlignAtt's states step alone
        results: dict[int, tuple[torch.Tensor, WhisperState]] = {}
        if plain:
            self.stats.count("step", len(plain))
            states = [c.args[0] for c in plain]
            if len(plain) > 1 and (self._cross is None or not self._cross.serves(states)):
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

    def encode(self, audio: np.ndarray, costs: Costs) -> Encoded:
        """Encoded in the batcher's next encoder batch."""
        result: Encoded = self.batcher.call("encode", audio, costs)
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
        result: tuple[torch.Tensor, WhisperState] = self.batcher.call("start", enc, tuple(prefix), costs,
                                                                      tuple(prompt))
        return result

    def step(self, state: WhisperState, tokens: torch.Tensor, costs: Costs) -> tuple[torch.Tensor, WhisperState]:
        """Stepped in the batcher's next decoder batch."""
        result: tuple[torch.Tensor, WhisperState] = self.batcher.call("step", state, tokens, costs)
        return result
