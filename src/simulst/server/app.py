"""The ASGI app of ``simulst serve``: the web page, ``/api/config``, ``/health``, ``/metrics``, the streaming
websocket ``/ws`` (:mod:`simulst.server.protocol`) and the OpenAI-compatible file endpoints
(:mod:`simulst.server.openai_api`).

Every client fault is answered to that client alone - an ``error`` message and a close (websocket) or an error
status with a JSON body (HTTP) - and logged; the other streams go on.

A websocket is admitted in this order, and takes a stream slot (``--max-streams``) only at the end: its
``Origin`` (:func:`~simulst.server.access.origin_allowed`), the per-client connection cap, the token
(``Authorization: Bearer`` or the subprotocol ``bearer.TOKEN``; never the URL), then its ``start`` message
within ``start_timeout_s``. Idle or unauthorised sockets therefore never hold a slot. The Realtime endpoint
(:mod:`simulst.server.realtime`) shares the same counter, metrics, access log and shutdown. HTTP requests pass
:class:`~simulst.server.limits.Guard` (URL token, origin, per-client cap, body size) and
:class:`~simulst.server.accesslog.AccessLog`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles

from simulst.errors import SimulstError
from simulst.server import accesslog, openai_api, realtime
from simulst.server.access import (
    SUBPROTOCOL,
    authorized,
    bearer,
    json_error,
    origin_allowed,
    subprotocol_token,
)
from simulst.server.limits import URL_TOKEN_MESSAGE, ClientCounter, Guard, url_has_token
from simulst.server.metrics import CONTENT_TYPE, Metrics
from simulst.server.protocol import Limits, ProtocolError, StartRequest, error, parse_message, parse_start
from simulst.server.scheduler import Scheduler, Slot
from simulst.server.service import Service
from simulst.server.shutdown import OpenStreams

log = logging.getLogger("simulst.server")

STATIC = Path(__file__).parent / "static"

# websocket close codes (RFC 6455 / IANA)
NORMAL, GOING_AWAY, POLICY, SERVER_ERROR, TRY_LATER = 1000, 1001, 1008, 1011, 1013
TOKEN_HELP = ("send it as an 'Authorization: Bearer TOKEN' header or, from a browser, as the websocket subprotocol "
              "'bearer.TOKEN' beside 'simulst'")


class Peers(Protocol):
    """The other replicas of a cluster deployment, as one replica sees them (:mod:`simulst.server.cluster`):
    ``/health`` and ``/metrics`` answer for all of them."""

    async def health(self, own: dict[str, Any]) -> dict[str, Any]:
        """The whole deployment's health, given this replica's own (:meth:`Hub.health`)."""
        ...

    async def metrics(self, own: bytes) -> bytes:
        """The whole deployment's metrics, given this replica's own exposition text."""
        ...


def process_name() -> str:
    """The name of a one-process server in ``ready`` messages and ``/health``: ``<hostname>:<pid>``."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class Hub:
    """What the routes share: the model's service, the scheduler, the counters and the open streams; the name of
    the process (a cluster's replica) that serves them, and that cluster's other replicas (None: one process)."""

    service: Service
    scheduler: Scheduler
    clients: ClientCounter
    streams: OpenStreams
    metrics: Metrics
    replica: str
    peers: Peers | None = None

    async def drain(self, grace_s: float) -> None:
        """End every open stream (each gets its final) and wait for the uploads, at most ``grace_s``."""
        await self.streams.drain(grace_s, lambda: bool(self.scheduler.slots))

    def health(self) -> dict[str, Any]:
        """This process's health: its open streams (websockets and uploads), jobs run, batching statistics."""
        stats = getattr(self.service.runner, "stats", None)
        return {"status": "ok", "replica": self.replica, "streams": len(self.scheduler.slots),
                "capacity": self.scheduler.max_streams, "jobs": self.scheduler.jobs,
                "batching": dataclasses.asdict(stats) if stats is not None else None}


def create_app(service: Service, replica: str | None = None, peers: Peers | None = None) -> FastAPI:
    """The app serving ``service``'s model (one scheduler, started with the app). ``app.state.hub.drain`` ends its
    streams gracefully (:class:`~simulst.server.shutdown.GracefulServer` calls it before uvicorn's shutdown; the
    lifespan's end calls it too).

    Args:
        service: the loaded model.
        replica: the name of this process in ``ready`` messages and ``/health`` (None: :func:`process_name`).
        peers: a cluster's other replicas, for ``/health`` and ``/metrics`` (None: this process alone).
    """
    config = service.config
    scheduler = Scheduler(service.runner, config.max_streams)
    streams = OpenStreams()
    hub = Hub(service, scheduler, ClientCounter(config.max_per_client), streams,
              Metrics(scheduler, lambda: streams.waiting), replica or process_name(), peers)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        scheduler.start()
        yield
        await hub.drain(config.shutdown_grace_s)
        await scheduler.stop()

    app = FastAPI(title="simulst", lifespan=lifespan)
    app.state.service = service
    app.state.scheduler = scheduler
    app.state.hub = hub

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/api/config")
    async def api_config() -> dict[str, Any]:
        return service.describe()

    @app.get("/health")
    async def health() -> dict[str, Any]:
        own = hub.health()
        return own if hub.peers is None else await hub.peers.health(own)

    @app.get("/metrics", include_in_schema=False)
    async def metrics(request: Request) -> Response:
        if not authorized(service, bearer(request.headers.get("authorization"))):
            return json_error(401, "a valid token is needed for /metrics: send it as an 'Authorization: Bearer "
                                   "TOKEN' header")
        own = hub.metrics.render()
        return Response(own if hub.peers is None else await hub.peers.metrics(own), media_type=CONTENT_TYPE)

    @app.websocket("/ws")
    async def stream(websocket: WebSocket) -> None:
        await StreamConnection(websocket, hub).serve()

    openai_api.register(app, service, scheduler)
    realtime.register(app, hub)  # /v1/realtime?intent=transcription
    if STATIC.is_dir():
        app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_middleware(Guard, max_body_bytes=config.max_body_bytes, allow_origins=config.allow_origins,
                       clients=hub.clients)
    # (the outermost: it sees the guard's answers too)
    app.add_middleware(accesslog.AccessLog, metrics=hub.metrics, routes=app.router.routes)
    return app


class _Refused(Exception):
    """The connection was refused (its client has the error message and the close)."""


class StreamConnection:
    """One ``/ws`` connection: admitted, then one stream from ``start`` to ``final``, then logged.

    Args:
        websocket: the connection (not accepted yet).
        hub: the app's shared parts.
    """

    def __init__(self, websocket: WebSocket, hub: Hub) -> None:
        self.ws = websocket
        self.hub = hub
        self.host = websocket.client.host if websocket.client else "unknown"
        self.peer = f"{self.host}:{websocket.client.port}" if websocket.client else "unknown"
        self.offered: list[str] = list(websocket.scope.get("subprotocols") or [])
        self.accepted = False
        self.began = time.monotonic()
        self.slot: Slot | None = None
        self.status: int | None = None  # the close code sent
        self.reason: str | None = None
        self.bytes_in = 0

    @property
    def name(self) -> str:
        """The stream's id once it has one, else the client."""
        return self.slot.id if self.slot is not None else self.peer

    async def serve(self) -> None:
        """Admit the connection, run its stream, log it."""
        hub = self.hub
        try:
            origin = self.ws.headers.get("origin")
            if not origin_allowed(origin, self.ws.headers.get("host"), hub.service.config.allow_origins):
                await self.refuse("origin", f"web pages at {origin} may not use this server (its operator can "
                                            "allow that origin with --allow-origin)", POLICY)
            elif hub.streams.closing:
                await self.refuse("shutdown", "the server is shutting down; try again later", GOING_AWAY)
            elif not hub.clients.acquire(self.host):
                await self.refuse("per_client", f"too many connections from {self.host} at once (at most "
                                                f"{hub.clients.limit}); close one first", TRY_LATER)
            else:
                try:
                    await self._admitted()
                finally:
                    hub.clients.release(self.host)
        except _Refused:
            pass
        finally:
            accesslog.write("stream", client=self.peer, path=self.ws.url.path, stream=self.slot and self.slot.id,
                            status=self.status, duration_ms=round((time.monotonic() - self.began) * 1000.0, 1),
                            bytes_in=self.bytes_in,
                            audio_s=round(self.slot.received_s, 2) if self.slot is not None else 0.0,
                            reason=self.reason)

    async def _admitted(self) -> None:
        """Check the token, wait for the start message, then take a slot and stream."""
        service, scheduler = self.hub.service, self.hub.scheduler
        if url_has_token(self.ws.scope):
            await self.refuse("auth", URL_TOKEN_MESSAGE, POLICY)
        presented = bearer(self.ws.headers.get("authorization")) or subprotocol_token(self.offered)
        if not authorized(service, presented):
            await self.refuse("auth", f"a valid token is needed: {TOKEN_HELP}", POLICY)
        await self._accept()
        try:
            with self.hub.streams.track() as stopping:
                start = await self._start(stopping)
                if not scheduler.reserve():
                    log.warning("refused %s: the server is full (%d streams)", self.peer, scheduler.max_streams)
                    await self.refuse("full", f"the server is full ({scheduler.max_streams} streams); try again "
                                              "later", TRY_LATER)
                try:
                    await self._stream(start, stopping)
                finally:
                    if self.slot is not None:
                        scheduler.remove(self.slot)
                    scheduler.release()
        except WebSocketDisconnect:
            self.reason = self.reason or "left"
            log.info("%s disconnected", self.name)
        except (ProtocolError, SimulstError) as err:
            log.warning("%s: %s: %s", self.name, type(err).__name__, err)
            await self.refuse(getattr(err, "reason", "protocol"), str(err), POLICY)
        except _Refused:
            raise
        except Exception as err:  # e.g. the connection broke while the final message was sent
            log.warning("%s: the connection failed: %s: %s", self.name, type(err).__name__, err)
            self.reason = self.reason or "error"
            await self._close(SERVER_ERROR)

    async def _start(self, stopping: asyncio.Event) -> StartRequest:
        """The client's validated start message, within the start timeout (refused at shutdown)."""
        limits = self.hub.service.config.limits
        self.hub.streams.waiting += 1
        receiving = asyncio.ensure_future(_receive_start(self.ws, limits))
        stop = asyncio.ensure_future(stopping.wait())
        try:
            # (asyncio.wait reports a timeout by its result: no TimeoutError, which differs on Python 3.10)
            done, _ = await asyncio.wait({receiving, stop}, timeout=limits.start_timeout_s,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.hub.streams.waiting -= 1
            stop.cancel()
            if not receiving.done():
                receiving.cancel()
        if receiving not in done:
            if stopping.is_set():
                await self.refuse("shutdown", "the server is shutting down; try again later", GOING_AWAY)
            log.warning("refused %s: no start message within %g s", self.peer, limits.start_timeout_s)
            await self.refuse("start_timeout", f"no start message within {limits.start_timeout_s:g} s", POLICY)
        message = receiving.result()
        if "token" in message:
            raise ProtocolError(f"the token is not accepted in the start message: {TOKEN_HELP}")
        return parse_start(message, limits)

    async def _stream(self, start: StartRequest, stopping: asyncio.Event) -> None:
        """Open the stream and run it: audio in, emissions out, until its final (or the client leaves)."""
        hub, scheduler, service = self.hub, self.hub.scheduler, self.hub.service
        opened = await asyncio.to_thread(service.open, start)
        slot = self.slot = Slot(opened, start, service.sample_rate, service.config.limits,
                                transcripts=service.config.transcripts)
        scheduler.add(slot)
        log.info("stream %s from %s: %s", slot.id, self.peer, start)
        await self.ws.send_json({"type": "ready", "stream": slot.id, "sample_rate": service.sample_rate,
                                 "channels": list(opened.channels), "replica": hub.replica})
        sender = asyncio.create_task(_send(self.ws, slot))
        receiving = asyncio.create_task(self._receive(slot))
        stop = asyncio.create_task(stopping.wait())
        code = NORMAL
        try:
            done, _ = await asyncio.wait({sender, receiving, stop}, return_when=asyncio.FIRST_COMPLETED)
            if receiving in done:
                failure = receiving.exception()
                if failure is not None:
                    raise failure
                if not slot.ended:  # the client left mid-stream
                    log.info("stream %s: the client left before the end", slot.id)
                    self.reason = "left"
                    hub.metrics.ended("left")
                    return
            elif stop in done and not slot.ended:  # shutdown: the stream ends as if the client had sent "end"
                receiving.cancel()
                slot.end()
                scheduler.poke()
                code = GOING_AWAY
                log.info("stream %s: ended by the server's shutdown", slot.id)
            last = await sender
        finally:
            for task in (sender, receiving, stop):
                if not task.done():
                    task.cancel()
                elif not task.cancelled():
                    task.exception()  # (retrieved: a failure already handled, or one that no longer matters)
        if last is not None and last["type"] == "final":
            hub.metrics.finished(slot.stream.emissions, float(last["source_ms"]), float(last["compute_s"]))
            hub.metrics.ended("final")
            self.reason = "final"
            await self._close(code)
        else:  # the stream failed (its client has the error and a close)
            hub.metrics.ended("error")
            self.reason = "error"
            self.status = SERVER_ERROR

    async def _receive(self, slot: Slot) -> None:
        """The client's audio and its end; returns at the end message or when the client leaves."""
        limits = slot.limits
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes")
            if data is not None:
                self.bytes_in += len(data)
                slot.feed(data)
                self.hub.scheduler.poke()
                continue
            parsed = parse_message(message.get("text") or "", limits)
            if parsed["type"] == "end":
                slot.end()
                self.hub.scheduler.poke()
                return
            if parsed["type"] == "start":
                raise ProtocolError("this stream has started already (one stream per connection)")
            raise ProtocolError(f'unknown message type {parsed["type"]!r}: after start, send audio frames, then '
                                '{"type": "end"}')

    async def _accept(self) -> None:
        if not self.accepted:
            self.accepted = True
            await self.ws.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in self.offered else None)

    async def refuse(self, reason: str, message: str, code: int) -> None:
        """Send the client an error and close, count the refusal; raises :class:`_Refused` to end the handler."""
        self.reason = reason
        self.hub.metrics.refused(reason)
        with contextlib.suppress(Exception):
            await self._accept()
            await self.ws.send_json(error(message))
        await self._close(code, message)
        raise _Refused(reason)

    async def _close(self, code: int, reason: str = "") -> None:
        self.status = code
        with contextlib.suppress(Exception):
            await self.ws.close(code, _close_reason(reason))


async def _receive_start(websocket: WebSocket, limits: Limits) -> dict[str, Any]:
    message = await websocket.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000))
    if message.get("bytes") is not None:
        raise ProtocolError('audio before the start message: send {"type": "start", ...} first')
    parsed = parse_message(message.get("text") or "", limits)
    if parsed["type"] != "start":
        raise ProtocolError(f'the first message must be {{"type": "start", ...}}, got type {parsed["type"]!r}')
    return parsed


async def _send(websocket: WebSocket, slot: Slot) -> dict[str, Any] | None:
    """Send the slot's messages until it closes; returns the last message (the final, or an error)."""
    last: dict[str, Any] | None = None
    while True:
        message = await slot.outbox.get()
        if message is None:
            return last
        if isinstance(message, bytes):
            await websocket.send_bytes(message)
        else:
            last = message
            await websocket.send_json(message)
            if message["type"] == "error":
                with contextlib.suppress(Exception):
                    await websocket.close(SERVER_ERROR)
                return last


def _close_reason(message: str) -> str:
    """A close frame's reason: at most 123 bytes of UTF-8."""
    encoded = message.encode("utf-8")
    if len(encoded) <= 123:
        return message
    return encoded[:120].decode("utf-8", errors="ignore") + "..."
