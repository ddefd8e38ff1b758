"""The ASGI app of ``simulst serve``: the web page, ``/api/config``, the streaming websocket ``/ws``
(:mod:`simulst.server.protocol`) and the OpenAI-compatible file endpoints (:mod:`simulst.server.openai_api`).

Every client fault is answered to that client alone - an ``error`` message and a close (websocket) or an error
status with a JSON body (HTTP) - and logged; the other streams go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from simulst.errors import SimulstError
from simulst.server import openai_api
from simulst.server.access import authorized, bearer
from simulst.server.protocol import ProtocolError, error, parse_message, parse_start
from simulst.server.scheduler import Scheduler, Slot
from simulst.server.service import Service

log = logging.getLogger("simulst.server")

STATIC = Path(__file__).parent / "static"

# websocket close codes (RFC 6455 / IANA)
NORMAL, POLICY, SERVER_ERROR, TRY_LATER = 1000, 1008, 1011, 1013


def create_app(service: Service) -> FastAPI:
    """The app serving ``service``'s model (one scheduler, started with the app)."""
    scheduler = Scheduler(service.runner, service.config.max_streams)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        scheduler.start()
        yield
        await scheduler.stop()

    app = FastAPI(title="simulst", lifespan=lifespan)
    app.state.service = service
    app.state.scheduler = scheduler

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/api/config")
    async def config() -> dict[str, Any]:
        return service.describe()

    @app.get("/health")
    async def health() -> dict[str, Any]:
        stats = getattr(service.runner, "stats", None)
        return {"status": "ok", "streams": len(scheduler.slots), "jobs": scheduler.jobs,
                "batching": dataclasses.asdict(stats) if stats is not None else None}

    @app.websocket("/ws")
    async def stream(websocket: WebSocket) -> None:
        await websocket.accept()
        await _serve_stream(websocket, service, scheduler)

    openai_api.register(app, service, scheduler)
    if STATIC.is_dir():
        app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


async def _serve_stream(websocket: WebSocket, service: Service, scheduler: Scheduler) -> None:
    client = f"{websocket.client.host}:{websocket.client.port}" if websocket.client else "?"
    limits = service.config.limits
    presented = websocket.query_params.get("token") or bearer(websocket.headers.get("authorization"))
    if not scheduler.reserve():
        log.warning("refused %s: the server is full (%d streams)", client, scheduler.max_streams)
        await _refuse(websocket, f"the server is full ({scheduler.max_streams} streams); try again later",
                      TRY_LATER)
        return
    slot: Slot | None = None
    tasks: list[asyncio.Task[None]] = []
    try:
        try:
            message = await asyncio.wait_for(_receive_start(websocket), limits.start_timeout_s)
        except TimeoutError:
            raise ProtocolError(f"no start message within {limits.start_timeout_s:g} s") from None
        if not authorized(service, presented or message.get("token")):
            raise PermissionError("a valid token is needed (?token=... or \"token\" in the start message)")
        start = parse_start(message, limits)
        opened = await asyncio.to_thread(service.open, start)
        slot = Slot(opened, start, service.sample_rate, limits, transcripts=service.config.transcripts)
        scheduler.add(slot)
        log.info("stream %s from %s: %s", slot.id, client, start)
        await websocket.send_json({"type": "ready", "stream": slot.id, "sample_rate": service.sample_rate,
                                   "channels": list(opened.channels)})
        sender = asyncio.create_task(_send(websocket, slot))
        receiving = asyncio.create_task(_receive(websocket, slot, scheduler))
        tasks += [sender, receiving]
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        if receiving in done and receiving.exception() is not None:
            sender.cancel()
            raise receiving.exception()  # type: ignore[misc]
        if receiving in done and not slot.ended:  # the client left mid-stream
            sender.cancel()
            log.info("stream %s: the client left before the end", slot.id)
            return
        await sender
        if not receiving.done():
            receiving.cancel()
        await _close(websocket, NORMAL)
    except WebSocketDisconnect:
        log.info("%s disconnected", slot.id if slot else client)
    except PermissionError as err:
        log.warning("refused %s: %s", client, err)
        await _refuse(websocket, str(err), POLICY)
    except (ProtocolError, SimulstError) as err:
        log.warning("%s: %s: %s", slot.id if slot else client, type(err).__name__, err)
        await _refuse(websocket, str(err), POLICY)
    except Exception as err:  # e.g. the connection broke while the final message was sent
        log.warning("%s: the connection failed: %s: %s", slot.id if slot else client, type(err).__name__, err)
        await _close(websocket, SERVER_ERROR)
    finally:
        for task in tasks:
            task.cancel()
        if slot is not None:
            scheduler.remove(slot)
        scheduler.release()


async def _receive_start(websocket: WebSocket) -> dict[str, Any]:
    limits = websocket.app.state.service.config.limits
    message = await websocket.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000))
    if message.get("bytes") is not None:
        raise ProtocolError('audio before the start message: send {"type": "start", ...} first')
    parsed = parse_message(message.get("text") or "", limits)
    if parsed["type"] != "start":
        raise ProtocolError(f'the first message must be {{"type": "start", ...}}, got type {parsed["type"]!r}')
    return parsed


async def _receive(websocket: WebSocket, slot: Slot, scheduler: Scheduler) -> None:
    """The client's audio and its end; returns at the end message or when the client leaves."""
    limits = slot.limits
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        data = message.get("bytes")
        if data is not None:
            slot.feed(data)
            scheduler.poke()
            continue
        parsed = parse_message(message.get("text") or "", limits)
        if parsed["type"] == "end":
            slot.end()
            scheduler.poke()
            return
        if parsed["type"] == "start":
            raise ProtocolError("this stream has started already (one stream per connection)")
        raise ProtocolError(f'unknown message type {parsed["type"]!r}: after start, send audio frames, then '
                            '{"type": "end"}')


async def _send(websocket: WebSocket, slot: Slot) -> None:
    """Send the slot's messages until it closes."""
    while True:
        message = await slot.outbox.get()
        if message is None:
            return
        if isinstance(message, bytes):
            await websocket.send_bytes(message)
        else:
            await websocket.send_json(message)
            if message["type"] == "error":
                await _close(websocket, SERVER_ERROR)
                return


async def _refuse(websocket: WebSocket, message: str, code: int) -> None:
    with contextlib.suppress(Exception):
        await websocket.send_json(error(message))
    await _close(websocket, code)


async def _close(websocket: WebSocket, code: int) -> None:
    with contextlib.suppress(Exception):
        await websocket.close(code)
