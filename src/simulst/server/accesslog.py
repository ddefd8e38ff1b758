"""Structured access logs of ``simulst serve``: one JSON line per HTTP request and per websocket stream.

The lines go to the ``simulst.access`` logger. Fields: ``time`` (UTC, ISO 8601), ``kind`` (``http`` or
``stream``), ``client`` (``host:port``), ``method`` (HTTP), ``path`` (never the query string), ``status`` (the HTTP
status, or the websocket close code), ``duration_ms``, ``bytes_in``, ``bytes_out`` (HTTP), ``stream`` (the stream's
id; a Realtime connection, one line for the session: its session id), ``audio_s`` (audio received), ``reason`` (why
it was refused, or how a stream ended). Nothing from headers or
the query string is written, so no token reaches these lines; :class:`RedactTokens` scrubs tokens from the lines of
other loggers too (uvicorn logs a websocket's path with its query, and at debug level its request headers).

:class:`AccessLog`, an ASGI middleware, writes the HTTP lines and counts the requests and refusals in the metrics.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from simulst.server.limits import REASON_KEY
from simulst.server.metrics import Metrics

log = logging.getLogger("simulst.access")

# an HTTP answer that refuses a request, by status (when the guard did not name the reason itself)
REFUSAL_BY_STATUS = {401: "auth", 403: "origin", 413: "oversize", 429: "per_client", 503: "full"}
_SECRET = re.compile(r"(?i)(token=|bearer[ .])[^\s&\"',;]+")


def write(kind: str, **fields: Any) -> None:
    """Write one access line."""
    line = {"time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"), "kind": kind, **fields}
    log.info("%s", json.dumps(line, ensure_ascii=False))


def peer(scope: Scope) -> str:
    """The client as ``host:port``."""
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "unknown"


class AccessLog:
    """Log every HTTP request as one JSON line and count it (and a refusal) in ``metrics``.

    Args:
        app: the app behind it.
        metrics: the app's metrics.
        routes: the app's routes (a live list): a request refused before routing is counted under its route's
            path when it names one (else ``other``).
    """

    def __init__(self, app: ASGIApp, metrics: Metrics, routes: Sequence[BaseRoute] = ()) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.monotonic()
        status = 500  # (an app that fails before it answers)
        bytes_in = bytes_out = 0

        async def counting_receive() -> Message:
            nonlocal bytes_in
            message = await receive()
            if message["type"] == "http.request":
                bytes_in += len(message.get("body", b""))
            return message

        async def counting_send(message: Message) -> None:
            nonlocal status, bytes_out
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                bytes_out += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, counting_receive, counting_send)
        finally:
            reason = scope.get(REASON_KEY) or REFUSAL_BY_STATUS.get(status)
            route = getattr(scope.get("route"), "path", None) or self._route_path(scope["path"])
            self.metrics.request(scope["method"], route, status)
            if reason is not None:
                self.metrics.refused(reason)
            write("http", client=peer(scope), method=scope["method"], path=scope["path"], status=status,
                  duration_ms=round((time.monotonic() - began) * 1000.0, 1), bytes_in=bytes_in,
                  bytes_out=bytes_out, reason=reason)

    def _route_path(self, path: str) -> str:
        for route in self.routes:
            if getattr(route, "path", None) == path:
                return path
        return "other"


class RedactTokens(logging.Filter):
    """Replace what follows ``token=``, ``Bearer `` and ``bearer.`` in a log line by ``[redacted]``."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = _SECRET.sub(r"\1[redacted]", message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def configure(stream: Any = None) -> None:
    """Write the access lines bare (one JSON object per line) to ``stream`` (default stderr), and redact tokens
    in every handler of the root, ``uvicorn`` and ``simulst`` loggers (call it after uvicorn configured its
    logging)."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.handlers = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False
    redact = RedactTokens()
    for name in ("", "uvicorn", "uvicorn.error", "uvicorn.access", "simulst", "simulst.access"):
        for target in logging.getLogger(name).handlers:
            if not any(isinstance(f, RedactTokens) for f in target.filters):
                target.addFilter(redact)
