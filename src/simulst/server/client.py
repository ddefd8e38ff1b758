"""A websocket client of ``simulst serve`` (:mod:`simulst.server.protocol`): stream audio, collect the output.

    result = asyncio.run(stream_audio("ws://127.0.0.1:8000/ws", audio, 16000, {"policy": "la-2"}))
    print(result.text, [m["elapsed_ms"] for m in result.emissions])

The load benchmark and the tests use it; it is also the reference for writing a client in another language.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

ABNORMAL_CLOSURE = 1006  # the connection dropped without a close frame (RFC 6455, section 7.4.1)


@dataclass
class ClientResult:
    """What a client received.

    Attributes:
        ready: the server's ``ready`` message (None: refused before it).
        emissions: the ``emission`` messages, each with ``received_ms``: the client's clock since its first audio
            frame was sent.
        final: the ``final`` message (None: none came).
        error: the ``error`` message's text; or, for a stream that ended without its final and without an error
            message (the server, or the cluster replica serving the stream, went away), what happened (None: the
            stream ended normally).
        speech: the speech frames received (16-bit PCM bytes).
        close_code: the websocket close code.
    """

    ready: dict[str, Any] | None = None
    emissions: list[dict[str, Any]] = field(default_factory=list)
    final: dict[str, Any] | None = None
    error: str | None = None
    speech: list[bytes] = field(default_factory=list)
    close_code: int | None = None

    @property
    def text(self) -> str:
        """The final text (the target channel's, for a cascade)."""
        return str(self.final["text"]) if self.final else ""

    def channel(self, name: str) -> list[dict[str, Any]]:
        """The emissions of one channel (``source`` or ``target``)."""
        return [m for m in self.emissions if m.get("channel") == name]


def pcm16(audio: np.ndarray) -> bytes:
    """Float audio in [-1, 1] as 16-bit little-endian PCM."""
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


async def stream_audio(
    url: str, audio: np.ndarray, sample_rate: int = 16000, start: dict[str, Any] | None = None,
    frame_ms: float = 100.0, realtime: bool = True, token: str | None = None,
    connect_options: dict[str, Any] | None = None,
) -> ClientResult:
    """Stream ``audio`` (mono float) to the server at ``url`` and collect its messages.

    Args:
        url: ``ws://HOST:PORT/ws`` (``wss://`` for a server with TLS).
        audio: the audio, at ``sample_rate``.
        start: more fields of the start message (task, language, to, policy, chunk_ms, vad, speech).
        frame_ms: audio per binary frame.
        realtime: send each frame when it would have been spoken (a live speaker); False: as fast as possible.
        token: the server's token, sent as an ``Authorization: Bearer`` header (never in the URL).
        connect_options: more keyword arguments of ``websockets.asyncio.client.connect`` (``ssl``, ``origin``,
            ``local_addr``, ...).
    """
    result = ClientResult()
    options: dict[str, Any] = {"max_size": None, **(connect_options or {})}
    if token is not None:
        options["additional_headers"] = {**options.get("additional_headers", {}), "Authorization": f"Bearer {token}"}
    async with connect(url, **options) as ws:
        await ws.send(json.dumps({"type": "start", "sample_rate": sample_rate, **(start or {})}))
        first = json.loads(await ws.recv())
        if first.get("type") != "ready":
            result.error = first.get("message")
            await _drain(ws, result)
            return result
        result.ready = first
        began = time.perf_counter()
        receiver = asyncio.create_task(_receive(ws, result, began))
        step = max(1, round(sample_rate * frame_ms / 1000.0))
        try:
            for pos in range(0, audio.shape[0], step):
                if realtime:
                    await asyncio.sleep(max(0.0, pos / sample_rate - (time.perf_counter() - began)))
                await ws.send(pcm16(audio[pos : pos + step]))
            await ws.send(json.dumps({"type": "end"}))
        except ConnectionClosed:
            pass  # the server closed the stream (its error message is read by the receiver)
        await receiver
    if result.final is None and result.error is None:
        result.error = ended_early(result.ready or {}, result.close_code, ws.close_reason)
    return result


def ended_early(ready: dict[str, Any], code: int | None, reason: str | None) -> str:
    """What to tell the user of a stream that ended without its final and without an error message."""
    replica = ready.get("replica")
    why = f"code {code}" + (f": {reason}" if reason else "") + (", no close frame" if code == ABNORMAL_CLOSURE else "")
    return (f"the stream ended without its final: the connection closed ({why}); the server, or the replica "
            f"serving this stream{f' ({replica})' if replica else ''}, went away")


async def _receive(ws: Any, result: ClientResult, began: float) -> None:
    try:
        async for raw in ws:
            if isinstance(raw, bytes):
                result.speech.append(raw)
                continue
            message = json.loads(raw)
            kind = message.get("type")
            if kind == "emission":
                message["received_ms"] = (time.perf_counter() - began) * 1000.0
                result.emissions.append(message)
            elif kind == "final":
                result.final = message
            elif kind == "error":
                result.error = message.get("message")
    except ConnectionClosed:
        pass
    result.close_code = ws.close_code


async def _drain(ws: Any, result: ClientResult) -> None:
    try:
        async for _ in ws:
            pass
    except ConnectionClosed:
        pass
    result.close_code = ws.close_code
