"""A soak test of ``simulst serve``: the real command on a loopback port, many clients at once for a while.

Well-behaved clients stream the shared jfk and FLEURS recordings at the pace of speech, joining and leaving at
random (at most :data:`GOOD_AT_ONCE` at a time, which a 2-core CPU decodes in time with Whisper tiny.en); others
misbehave: idle sockets, garbage frames, a wrong token, uploads of 100 MB (declared or chunked), floods, abrupt
disconnects, clients that leave mid-stream, too many connections from one address. Afterwards:

* every well-behaved stream's output is complete (a final, a normal close) and equal to its output alone,
  computed here with the same options by the same engine (:class:`~simulst.server.service.Service`), and every
  misbehaving client got its own clear refusal;
* the server's memory is flat: its RSS after the soak is at most 1.1 times its RSS after a warm-up that did
  every kind of request once;
* it still serves a new client at once, and holds no stream or connection of the soak.

The soak phase lasts ``$SIMULST_SOAK_S`` seconds (default 25; the whole test about a minute on a quiet 2-core CPU): set
it higher for a longer run, e.g. ``SIMULST_SOAK_S=600 pytest tests/test_soak.py``; ``$SIMULST_SOAK_SEED`` picks
another sequence of clients.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from simulst.audio.io import load_audio
from simulst.cli.main import build_parser
from simulst.cli.options import model_from_args
from simulst.cli.serve import server_config
from simulst.server.client import ClientResult, pcm16, stream_audio
from simulst.server.protocol import StartRequest
from simulst.server.service import Service
from tests.server_fixtures import free_port
from tests.shared_assets import DATA, english_items, needs_shared

pytestmark = [needs_shared, pytest.mark.real]

SOAK_S = float(os.environ.get("SIMULST_SOAK_S", "25"))
TOKEN = "soak-token-1"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CHUNK_MS = 3000  # the clients' chunk: a stream's output is its output alone unless a decode starts a chunk late
GOOD_AT_ONCE = 3
RATE = 16000
# (the server's preset, re-encoding the last 2 s included: a clip's text is its text alone whatever the server's lag
# does to how its audio is cut into pushes, as long as no decode starts a chunk late; until 2026-12-02 the VAD
# dropped silence per push, and with the re-encoding one clip read "nows" for "nouns" under load)
SERVE_FLAGS = ["--max-upload-mb", "4", "--max-per-client", "4", "--start-timeout-s", "3", "--max-speed", "2"]
NORMAL_CLOSURE, POLICY_VIOLATION, TRY_AGAIN_LATER = 1000, 1008, 1013
MB = 1 << 20


@dataclass(frozen=True)
class Clip:
    """A recording (float, as the clients have it: they send it as 16-bit PCM) and its output alone."""

    name: str
    audio: np.ndarray
    reference: str


def quantised(audio: np.ndarray) -> np.ndarray:
    """What the server reads of ``audio`` sent as 16-bit PCM."""
    return np.frombuffer(pcm16(audio), dtype="<i2").astype(np.float32) / 32768.0


def references(paths: dict[str, Path]) -> list[Clip]:
    """Each recording's output alone: a stream opened by the server's own service with the server's options (the
    command line's) and the clients' start message, fed in 100 ms frames."""
    args = build_parser().parse_args(["serve", *SERVE_FLAGS])
    service = Service(model_from_args(args), server_config(args))
    clips = []
    for name, path in paths.items():
        audio = load_audio(path)
        heard = quantised(audio)
        stream = service.open(StartRequest(sample_rate=RATE, chunk_ms=CHUNK_MS)).stream
        for pos in range(0, heard.shape[0], RATE // 10):
            stream.push(heard[pos : pos + RATE // 10])
        stream.finish()
        clips.append(Clip(name, audio, stream.text))
    return clips


def server_rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024  # type: ignore[union-attr]


@dataclass
class Outcome:
    """What one client saw: its kind, whether that was what it should see, and what it was."""

    kind: str
    ok: bool
    detail: str


class Soak:
    """The clients of a soak against the server at ``port``."""

    def __init__(self, port: int, clips: list[Clip], seed: int) -> None:
        self.ws = f"ws://127.0.0.1:{port}/ws"
        self.http = f"http://127.0.0.1:{port}"
        self.clips = clips
        self.random = random.Random(seed)
        self.hosts = (f"127.0.{a}.{b}" for a, b in itertools.product(range(1, 250), range(1, 255)))
        self.good: list[tuple[Clip, ClientResult]] = []
        self.outcomes: list[Outcome] = []
        self.most_lag_s = 0.0  # the scheduler's largest lag seen during the soak (from /metrics)

    # ------------------------------------------------------------------------------------ well-behaved
    async def good_stream(self, clip: Clip) -> None:
        """A client streaming a recording at the pace of speech, from an address of its own."""
        result = await stream_audio(self.ws, clip.audio, RATE, {"chunk_ms": CHUNK_MS}, token=TOKEN,
                                    connect_options={"local_addr": (next(self.hosts), 0)})
        self.good.append((clip, result))

    # ------------------------------------------------------------------------------------ misbehaving
    async def leaver(self, abrupt: bool) -> None:
        """A client that streams a while, then leaves without "end" (closing, or dropping the TCP connection)."""
        clip = self.random.choice(self.clips)
        async with connect(self.ws, additional_headers=AUTH, local_addr=(next(self.hosts), 0)) as ws:
            await ws.send(json.dumps({"type": "start", "chunk_ms": CHUNK_MS}))
            ready = json.loads(await ws.recv())
            frames = self.random.randint(5, 40)
            for pos in range(0, min(frames * 1600, clip.audio.shape[0]), 1600):
                await ws.send(pcm16(clip.audio[pos : pos + 1600]))
                await asyncio.sleep(0.1)
            if abrupt:
                ws.transport.abort()
        self.outcomes.append(Outcome("abrupt" if abrupt else "leaver", ready["type"] == "ready", str(ready)))

    async def refused(self, kind: str, sends: list[str | bytes], expect: str, code: int,
                      headers: dict[str, str] | None = AUTH) -> None:
        """A client from the abusers' address that sends ``sends`` and must be refused with ``expect``
        (or, when that address holds its 4 connections already, refused by the per-client cap)."""
        received: list[dict[str, Any]] = []
        async with connect(self.ws, additional_headers=headers, local_addr=("127.0.0.1", 0)) as ws:
            try:
                for message in sends:
                    await ws.send(message)
            except ConnectionClosed:
                pass
            try:
                async with asyncio.timeout(15):
                    async for raw in ws:
                        if isinstance(raw, str):
                            received.append(json.loads(raw))
            except (ConnectionClosed, TimeoutError):
                pass
            closed = ws.close_code
        errors = [m.get("message", "") for m in received if m.get("type") == "error"]
        capped = closed == TRY_AGAIN_LATER and bool(errors) and "too many connections" in errors[0]
        ok = capped or (closed == code and bool(errors) and expect in errors[0])
        self.outcomes.append(Outcome(kind, ok, f"{closed} {errors}"))

    async def oversize(self, declared: bool) -> None:
        """A 100 MB upload (generated as it is sent), answered 413 at once. (A blocking client, in a thread: it
        reads the answer when the server closes under its upload; asyncio clients lose it.)"""
        preamble = b'--b\r\nContent-Disposition: form-data; name="file"; filename="x.wav"\r\n\r\n'

        def body() -> Iterator[bytes]:
            yield preamble
            block = bytes(1 << 16)
            for _ in range(100 * MB // len(block)):
                yield block

        headers = {**AUTH, "Content-Type": "multipart/form-data; boundary=b"}
        if declared:
            headers["Content-Length"] = str(100 * MB + len(preamble))
        began = time.monotonic()
        response = await asyncio.to_thread(httpx.post, f"{self.http}/v1/audio/transcriptions", headers=headers,
                                           content=body(), timeout=30)
        took = time.monotonic() - began
        self.outcomes.append(Outcome("oversize", response.status_code == 413 and took < 5, f"{response} {took:.2f}s"))

    async def flood(self) -> None:
        """A client sending audio as fast as it can: cut off once past the allowance."""
        audio = np.concatenate([self.clips[0].audio] * 3)
        result = await stream_audio(self.ws, audio, RATE, realtime=False, frame_ms=1000, token=TOKEN,
                                    connect_options={"local_addr": (next(self.hosts), 0)})
        ok = result.close_code == POLICY_VIOLATION and "faster than" in (result.error or "")
        self.outcomes.append(Outcome("flood", ok, f"{result.close_code} {result.error}"))

    async def misbehave(self) -> None:
        """One misbehaving client, picked at random."""
        start = json.dumps({"type": "start"})
        kinds = [
            lambda: self.refused("idle", [], "no start message within 3 s", POLICY_VIOLATION),
            lambda: self.refused("garbage", [os.urandom(self.random.randint(1, 3000))], "audio before the start",
                                 POLICY_VIOLATION),
            lambda: self.refused("garbage", ["{not json"], "malformed JSON", POLICY_VIOLATION),
            lambda: self.refused("garbage", [start, os.urandom(1001)], "whole 16-bit samples", POLICY_VIOLATION),
            lambda: self.refused("garbage", [start, json.dumps({"type": "pause"})], "unknown message type",
                                 POLICY_VIOLATION),
            lambda: self.refused("auth", [start], "valid token", POLICY_VIOLATION, {"Authorization": "Bearer no"}),
            lambda: self.oversize(declared=True),
            lambda: self.oversize(declared=False),
            self.flood,
            lambda: self.leaver(abrupt=False),
            lambda: self.leaver(abrupt=True),
        ]
        await self.random.choice(kinds)()

    async def every_kind_once(self) -> None:
        """The warm-up: two good streams and every kind of misbehaviour, at once."""
        misbehaving = [self.refused("idle", [], "no start message", POLICY_VIOLATION), self.oversize(True),
                       self.oversize(False), self.flood(), self.leaver(False), self.leaver(True),
                       self.refused("garbage", ["{x"], "malformed JSON", POLICY_VIOLATION)]
        await asyncio.gather(self.good_stream(self.clips[0]), self.good_stream(self.clips[-1]), *misbehaving)

    async def run(self, duration_s: float) -> None:
        """Clients joining and leaving at random for ``duration_s``: at most :data:`GOOD_AT_ONCE` good streams,
        a misbehaving client every 0.2 to 2 s."""
        deadline = time.monotonic() + duration_s
        good: set[asyncio.Task[None]] = set()
        bad: set[asyncio.Task[None]] = set()
        watching = asyncio.create_task(self.watch_lag())
        while time.monotonic() < deadline:
            good = {task for task in good if not task.done()}
            if len(good) < GOOD_AT_ONCE:
                good.add(asyncio.create_task(self.good_stream(self.random.choice(self.clips))))
            bad.add(asyncio.create_task(self.misbehave()))
            await asyncio.sleep(self.random.uniform(0.2, 2.0))
        await asyncio.gather(*good, *bad)
        watching.cancel()

    async def watch_lag(self) -> None:
        """Keep the scheduler's largest lag (what a failure's message reports: a server that fell a chunk behind
        decodes bigger chunks, and its output then differs)."""
        async with httpx.AsyncClient(headers=AUTH) as client:
            while True:
                text = (await client.get(f"{self.http}/metrics")).text
                lag = re.search(r"^simulst_scheduler_lag_seconds (\S+)$", text, re.MULTILINE)
                if lag:
                    self.most_lag_s = max(self.most_lag_s, float(lag.group(1)))
                await asyncio.sleep(0.25)


@pytest.fixture(scope="module")
def clips() -> list[Clip]:
    paths = {"jfk": DATA / "audio" / "jfk" / "jfk.wav"}
    paths.update({uid: path for uid, path, _ in english_items() if uid.startswith("fleurs")})
    return references(paths)


def test_soak(clips: list[Clip], tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as sink:
        process = subprocess.Popen([sys.executable, "-m", "simulst.cli", "serve", "--port", str(port),
                                    "--log-level", "warning", *SERVE_FLAGS],
                                   stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, "SIMULST_TOKEN": TOKEN})
    seed = int(os.environ.get("SIMULST_SOAK_SEED", "35"))
    soak = Soak(port, clips, seed)
    try:
        _wait_until_up(soak.http, process, log)
        asyncio.run(soak.every_kind_once())
        time.sleep(1.0)
        warm_rss = server_rss_mb(process.pid)
        asyncio.run(soak.run(SOAK_S))
        time.sleep(1.0)
        after_rss = server_rss_mb(process.pid)
        began = time.monotonic()
        shortest = min(clips, key=lambda clip: clip.audio.shape[0])
        fresh = asyncio.run(_fresh_client(soak.ws, shortest))
        fresh_ready_s = fresh[0] - began
        metrics = httpx.get(f"{soak.http}/metrics", headers=AUTH).text
        health = httpx.get(f"{soak.http}/health").json()
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
    context = f"seed {seed}; the server's log:\n{log.read_text()[-4000:]}"
    print(f"soak: {SOAK_S:g} s, {len(soak.good)} good streams, {len(soak.outcomes)} others "
          f"({', '.join(sorted({o.kind for o in soak.outcomes}))}); server RSS {warm_rss:.0f} MB after the warm-up, "
          f"{after_rss:.0f} MB after; largest scheduler lag {soak.most_lag_s:.2f} s; a new client ready in "
          f"{fresh_ready_s * 1000:.0f} ms")
    wrong = [o for o in soak.outcomes if not o.ok]
    assert not wrong, f"{wrong[:5]} ({context})"
    kinds = {o.kind for o in soak.outcomes}
    assert {"idle", "garbage", "oversize", "flood", "leaver", "abrupt"} <= kinds, kinds
    assert len(soak.good) >= 2 + GOOD_AT_ONCE * SOAK_S / 15, context
    assert after_rss <= 1.1 * warm_rss, f"RSS {warm_rss:.0f} MB after the warm-up, {after_rss:.0f} MB after the soak"
    assert fresh_ready_s < 1.0 and fresh[1].final is not None and fresh[1].final["text"] == shortest.reference
    assert health["streams"] == 0
    assert 'simulst_streams_open{kind="live"} 0.0' in metrics and "simulst_connections_waiting 0.0" in metrics
    for clip, result in soak.good:
        assert result.final is not None and result.close_code == NORMAL_CLOSURE, (clip.name, result.error, context)
        assert "".join(m["text"] for m in result.emissions) == result.final["text"]
        assert result.final["text"] == clip.reference, (
            f"{clip.name}: {result.final['text']!r} streamed among the others, {clip.reference!r} alone; the "
            f"scheduler lagged up to {soak.most_lag_s:.2f} s behind (a lag over {CHUNK_MS / 1000:g} s means a "
            "machine too busy for this load)")


def _wait_until_up(base: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            httpx.get(f"{base}/health", timeout=2).raise_for_status()
            return
        except httpx.TransportError:
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail(f"simulst serve did not start:\n{log.read_text()}")
            time.sleep(0.5)


async def _fresh_client(url: str, clip: Clip) -> tuple[float, ClientResult]:
    """A new client after the soak: when its stream was ready (monotonic time), and its result."""
    async with connect(url, additional_headers=AUTH) as ws:
        await ws.send(json.dumps({"type": "start", "chunk_ms": CHUNK_MS}))
        assert json.loads(await ws.recv())["type"] == "ready"
        ready = time.monotonic()
    return ready, await stream_audio(url, clip.audio, RATE, {"chunk_ms": CHUNK_MS}, token=TOKEN)
