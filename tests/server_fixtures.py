"""Run a ``simulst serve`` app in-process on a free loopback port (uvicorn in a background thread)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from simulst.server.shutdown import GracefulServer


@dataclass
class Running:
    """A running server: its base URLs, and uvicorn's server (``server.should_exit = True`` shuts it down as a
    SIGTERM does)."""

    port: int
    app: FastAPI
    server: uvicorn.Server | None = None
    tls: bool = False

    @property
    def http(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"{'wss' if self.tls else 'ws'}://127.0.0.1:{self.port}/ws"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serving(app: FastAPI, **config: Any) -> Iterator[Running]:
    """Serve ``app`` until the block ends, with more of uvicorn's ``config`` (ssl files, ...). The server shuts
    down as ``simulst serve`` does: open streams are drained first (their finals sent)."""
    port = free_port()
    hub = app.state.hub
    server = GracefulServer(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           ws_max_size=1 << 20, **config),
                            hub.drain, hub.service.config.shutdown_grace_s)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.05)
    try:
        yield Running(port, app, server, tls="ssl_certfile" in config)
    finally:
        server.should_exit = True
        thread.join(timeout=30)


async def messages(ws: ClientConnection, wait_s: float = 20.0) -> tuple[list[dict[str, Any]], int | None]:
    """The server's JSON messages until it closes (or ``wait_s`` passes), and the close code."""
    received: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(wait_s):
            async for raw in ws:
                if isinstance(raw, str):
                    received.append(json.loads(raw))
    except (ConnectionClosed, TimeoutError):
        pass
    return received, ws.close_code


def metric(text: str, name: str, **labels: str) -> float:
    """A sample's value in Prometheus exposition text (0 when absent)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0
