"""The server's scheduler: streams (slots) fed by their clients, decoded as their chunks come due.

Each client's audio lands in its :class:`Slot` (converted, resampled to the model's rate, checked against the
limits). The :class:`Scheduler` starts a job on the runner for every slot with a chunk due (or an ended source, or a
file to go on with) as soon as it is due; the runner decodes the running jobs together - batched model calls
with :class:`~simulst.streaming.batching.Batcher`. Audio that arrives while a stream's job runs waits for its
next job; a stream that fell behind then reads all of it as one larger chunk (the stream is opened with
``catch_up``), so its latency stays bounded instead of a queue growing. A failing stream fails alone:
its client gets an error, the others go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import soxr

from simulst.audio.container import StreamDecoder
from simulst.server.protocol import FloodError, Limits, ProtocolError, StartRequest, TooLongError
from simulst.server.service import OpenedStream
from simulst.streaming.batching import Runner
from simulst.types import Emission

log = logging.getLogger("simulst.server")

_ids = itertools.count(1)

Message = dict[str, Any]
Audio = bytes  # a binary frame of speech, sent right after its "speech" message


class Slot:
    """One stream as the server runs it.

    Args:
        opened: the stream and its channels.
        start: the client's validated ``start`` request.
        model_rate: the rate the stream reads.
        limits: the server's limits on what the client sends.
        live: True for a live client (each job reads all audio that arrived); False for a whole file (each job
            reads one chunk: the file is decoded as fast as the jobs go, interleaved with live streams).
        transcripts: a directory to append the stream's committed output to (None: not kept).
    """

    def __init__(self, opened: OpenedStream, start: StartRequest, model_rate: int, limits: Limits,
                 live: bool = True, transcripts: Path | None = None) -> None:
        self.id = f"s{next(_ids)}"
        self.opened = opened
        self.stream = opened.stream
        self.start = start
        self.limits = limits
        self.live = live
        self.model_rate = model_rate
        # a container stream (format webm / ogg) is decoded to the model's rate as its bytes arrive
        self._decoder = None if start.format == "pcm16" else StreamDecoder(start.format, model_rate)
        if self._decoder is not None:
            start = self.start = dataclasses.replace(start, sample_rate=model_rate)
        self._resampler = (None if start.sample_rate == model_rate
                           else soxr.ResampleStream(start.sample_rate, model_rate, 1, dtype="float32"))
        self._lock = threading.Lock()  # pending audio: added by the event loop, taken by the stream's job
        self.pending: list[np.ndarray] = []
        self.pending_samples = 0
        self.received_s = 0.0  # client audio received, seconds
        self.read = 0  # model-rate samples handed to the stream
        self.began: float | None = None  # monotonic time of the first audio
        self.ended = False  # the client sent "end"
        self.done = False  # the final message is out (or the stream failed)
        self.busy = False  # a job of this slot is running
        self.outbox: asyncio.Queue[Message | Audio | None] = asyncio.Queue()
        self._log: TextIO | None = None
        if transcripts is not None:
            transcripts.mkdir(parents=True, exist_ok=True)
            stamp = time.strftime("%Y%m%d-%H%M%S")
            self._log = (transcripts / f"{stamp}-{self.id}.jsonl").open("a", encoding="utf-8")

    # ------------------------------------------------------------------------------------ input
    def feed(self, frame: bytes) -> None:
        """A binary frame from the client: 16-bit little-endian PCM, or the next bytes of its container stream.

        Raises:
            AudioError: the container stream cannot be decoded.
        """
        if self.ended:
            raise ProtocolError("audio after the end message")
        if len(frame) % 2 and self._decoder is None:
            raise ProtocolError(f"a binary frame must hold whole 16-bit samples; got {len(frame)} bytes (odd)")
        if len(frame) > self.limits.frame_bytes(self.start.sample_rate):
            raise ProtocolError(f"a binary frame may carry at most {self.limits.max_frame_ms:g} ms of audio "
                                f"({self.limits.frame_bytes(self.start.sample_rate)} bytes at "
                                f"{self.start.sample_rate} Hz); got {len(frame)} bytes")
        now = time.monotonic()
        if self.began is None:
            self.began = now
        audio = self._decode(frame)
        self.received_s += audio.shape[0] / self.start.sample_rate
        allowed = self.limits.burst_s + self.limits.max_speed * (now - self.began)
        if self.live and self.received_s > allowed:
            raise FloodError(f"audio arrives faster than {self.limits.max_speed:g}x real time "
                                f"({self.received_s:.1f} s of audio in {now - self.began:.1f} s): send it at the "
                                "pace it is spoken, or POST whole files to /v1/audio/transcriptions")
        self.add(audio)

    def _decode(self, frame: bytes) -> np.ndarray:
        """A frame's audio as float samples (at the model's rate for a container stream)."""
        if self._decoder is not None:
            return self._decoder.feed(frame)
        return np.frombuffer(frame, dtype="<i2").astype(np.float32) / 32768.0

    def add(self, audio: np.ndarray) -> None:
        """Float audio at the client's rate (resampled here).

        Raises:
            TooLongError: the stream's audio would pass ``limits.max_audio_s``.
        """
        longest = self.limits.max_audio_s
        if longest is not None and (self.read + self.pending_samples) / self.model_rate + audio.shape[0] / (
                self.start.sample_rate) > longest:
            raise TooLongError(f"the audio is longer than this server's limit of {longest:g} s per stream or file "
                               "(its operator sets it with --max-audio-s)")
        if self._resampler is not None:
            audio = self._resampler.resample_chunk(audio, last=False)
        if audio.shape[0]:
            with self._lock:
                self.pending.append(audio)
                self.pending_samples += audio.shape[0]

    def end(self) -> None:
        """The client's source has ended.

        Raises:
            AudioError: the end of a container stream cannot be decoded.
        """
        if self._decoder is not None and not self.ended:
            self.add(self._decoder.finish())
        if self._resampler is not None and not self.ended:
            tail = self._resampler.resample_chunk(np.zeros(0, dtype=np.float32), last=True)
            if tail.shape[0]:
                with self._lock:
                    self.pending.append(tail)
                    self.pending_samples += tail.shape[0]
        with self._lock:
            self.ended = True

    # ------------------------------------------------------------------------------------ decoding
    def due(self) -> bool:
        """True when the stream has work: a chunk boundary reached, a file to go on with, or its end."""
        if self.busy or self.done:
            return False
        if self.ended and not self.pending_samples:
            return True
        return self.read + self.pending_samples >= self.stream.next_decode or self.ended

    def job(self) -> Callable[[], list[Message | Audio]]:
        """The job that decodes the pending audio (all of it, or one chunk of a file), taken when the job starts
        to run (a job waiting for the model reads the audio that arrived meanwhile too)."""

        def work() -> list[Message | Audio]:
            audio, finish = self._take()
            stream = self.stream
            cascade = self.opened.cascade
            seen = len(cascade.source_emissions) if cascade is not None else 0
            emissions = stream.push(audio) if audio.shape[0] else []
            if finish:
                emissions += stream.finish()
            out: list[Message | Audio] = []
            if cascade is not None:
                out += [_emission("source", e) for e in cascade.source_emissions[seen:]]
            for emission in emissions:
                out.append(_emission(self.opened.channels[-1], emission))
                out += self._speak(emission)
            if finish:
                out.append(self._final())
            return out

        return work

    def _take(self) -> tuple[np.ndarray, bool]:
        """The audio to decode now, and whether the stream then finishes."""
        with self._lock:
            audio = np.concatenate(self.pending) if self.pending else np.zeros(0, dtype=np.float32)
            if not self.live:
                take = self.stream.next_decode - self.read
                if take <= 0:  # (a policy that commits only at the end does not move next_decode)
                    take = self.stream.chunk_samples
                audio, rest = audio[:take], audio[take:]
                self.pending = [rest] if rest.shape[0] else []
            else:
                self.pending = []
            self.pending_samples -= audio.shape[0]
            self.read += audio.shape[0]
            return audio, self.ended and not self.pending_samples

    def _speak(self, emission: Emission) -> list[Message | Audio]:
        voice = self.opened.synthesizer
        if voice is None or not emission.text.strip():
            return []
        speech = voice.synthesize(emission.text)
        pcm = (np.clip(speech, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()
        return [{"type": "speech", "sample_rate": voice.sample_rate, "samples": int(speech.shape[0]),
                 "text": emission.text}, pcm]

    def _final(self) -> Message:
        stream = self.stream
        cascade = self.opened.cascade
        source_text = cascade.source_text if cascade is not None else stream.text
        return {"type": "final", "text": stream.text, "source_text": source_text,
                "source_ms": round(self.read * 1000.0 / self.model_rate, 1),
                "compute_s": round(stream.costs.compute_s, 3)}

    # ------------------------------------------------------------------------------------ output
    def deliver(self, result: list[Message | Audio] | Exception) -> None:
        """Queue a job's messages for the client (stamped with the wall-clock time since its first audio)."""
        if isinstance(result, Exception):
            log.error("stream %s failed: %s: %s", self.id, type(result).__name__, result)
            self.fail(f"the stream failed: {type(result).__name__}: {result}")
            return
        elapsed = round((time.monotonic() - (self.began or time.monotonic())) * 1000.0, 1)
        for message in result:
            if isinstance(message, dict) and message["type"] in ("emission", "final"):
                message["elapsed_ms"] = elapsed
                self._keep(message)
            self.outbox.put_nowait(message)
            if isinstance(message, dict) and message["type"] == "final":
                self.close()

    def fail(self, message: str) -> None:
        """Send an error and close the stream."""
        if not self.done:
            self.outbox.put_nowait({"type": "error", "message": message})
            self.close()

    def close(self) -> None:
        """No more output (the sender closes the connection after the queued messages)."""
        if self._decoder is not None:
            self._decoder.close()
        if not self.done:
            self.done = True
            self.outbox.put_nowait(None)
            if self._log is not None:
                self._log.close()
                self._log = None

    def _keep(self, message: Message) -> None:
        if self._log is not None:
            self._log.write(json.dumps(message, ensure_ascii=False) + "\n")
            self._log.flush()


def _emission(channel: str, emission: Emission) -> Message:
    return {"type": "emission", "channel": channel, "text": emission.text,
            "source_ms": round(emission.source_ms, 1), "final": emission.final,
            "start_ms": None if emission.start_ms is None else round(emission.start_ms, 1),
            "end_ms": None if emission.end_ms is None else round(emission.end_ms, 1)}


class Scheduler:
    """Starts each slot's due work on the runner as soon as it is due (one job per slot at a time) and delivers
    the job's messages when it ends.

    With :class:`~simulst.streaming.batching.Batcher` the running jobs' model calls are batched (a stream due
    while others decode joins their next batch); with ``SerialRunner`` the jobs run one at a time in the order
    they came due.

    Args:
        runner: the service's runner.
        max_streams: the most slots at once.
    """

    def __init__(self, runner: Runner, max_streams: int) -> None:
        self.runner = runner
        self.max_streams = max_streams
        self.slots: dict[str, Slot] = {}
        self.reserved = 0
        self.jobs = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def reserve(self) -> bool:
        """Hold a place for a new stream (False: the server is full)."""
        if self.reserved >= self.max_streams:
            return False
        self.reserved += 1
        return True

    def release(self) -> None:
        """Give back a reserved place."""
        self.reserved = max(0, self.reserved - 1)

    def open_streams(self, live: bool) -> int:
        """The slots being decoded: live streams (True) or files (False)."""
        return sum(1 for slot in self.slots.values() if slot.live == live)

    def busy_streams(self) -> int:
        """The slots with a job queued or running."""
        return sum(1 for slot in self.slots.values() if slot.busy)

    def lag_s(self) -> float:
        """The most audio a live slot has received and not yet had decoded, in seconds."""
        return max((slot.pending_samples / slot.model_rate for slot in self.slots.values() if slot.live),
                   default=0.0)

    def add(self, slot: Slot) -> None:
        """Start decoding a slot (its place reserved)."""
        self.slots[slot.id] = slot
        self.poke()

    def remove(self, slot: Slot) -> None:
        """Stop decoding a slot (its client left); its place is released by the caller."""
        self.slots.pop(slot.id, None)
        slot.close()

    def poke(self) -> None:
        """Something changed (audio arrived, a stream ended): look for due work."""
        self._wake.set()

    def start(self) -> None:
        """Run the loop as a task of the running event loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        """Stop the loop."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            for slot in list(self.slots.values()):
                if not slot.due():
                    continue
                slot.busy = True
                self.jobs += 1
                try:
                    future = self.runner.submit(slot.job())
                except Exception as err:  # the runner refused the job
                    self._finish(slot, err)
                    continue
                future.add_done_callback(functools.partial(self._finished, loop, slot))

    def _finished(self, loop: asyncio.AbstractEventLoop, slot: Slot, future: Future[list[Message | Audio]]) -> None:
        """(In the job's thread) hand the outcome to the event loop."""
        error = future.exception()
        result: list[Message | Audio] | Exception
        if error is None:
            result = future.result()
        else:
            result = error if isinstance(error, Exception) else RuntimeError(f"{type(error).__name__}: {error}")
        with contextlib.suppress(RuntimeError):  # the event loop has closed (a job that outlived the server)
            loop.call_soon_threadsafe(self._finish, slot, result)

    def _finish(self, slot: Slot, result: list[Message | Audio] | Exception) -> None:
        slot.busy = False
        if slot.id in self.slots:  # (a client that left meanwhile gets nothing)
            slot.deliver(result)
            if slot.done:
                self.slots.pop(slot.id, None)
        self.poke()  # audio that arrived while it decoded
