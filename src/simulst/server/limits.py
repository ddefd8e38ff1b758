"""What an HTTP request may do before the app reads it: the guard in front of every route of ``simulst serve``.

:class:`Guard` is an ASGI middleware. For every HTTP request, in this order:

1. a token in the URL (``?token=``) is refused (400): URLs land in logs and browser histories;
2. a browser's state-changing request (any method but GET, HEAD, OPTIONS) whose ``Origin`` is not allowed is
   refused (403; :func:`~simulst.server.access.origin_allowed`);
3. such a request from a client address that already has ``max_per_client`` connections open is refused (429);
4. the body is limited to ``max_body_bytes``: a declared ``Content-Length`` over the limit is refused (413)
   before a byte of the body is read; a body without one (chunked) is counted as it arrives and refused as soon
   as the count passes the limit. Nothing past the limit is read or buffered: the app's own answer is dropped
   and the connection is closed after the 413.

Websocket connections are passed through: the websocket route applies the same rules itself (it must answer in
the websocket protocol). :class:`ClientCounter` counts the open connections of each client address for both.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from simulst.errors import SimulstError
from simulst.server.access import json_error, origin_allowed

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
REASON_KEY = "simulst.refusal"  # the scope key where the guard names why it refused a request (for logs, metrics)
URL_TOKEN_MESSAGE = ("the token is not accepted in the URL (URLs land in logs): send it as an "
                     "'Authorization: Bearer TOKEN' header, or, from a browser's websocket, as the subprotocol "
                     "'bearer.TOKEN' beside 'simulst'")


class BodyTooLarge(SimulstError):
    """A request body passed the server's byte limit."""


class ClientCounter:
    """Open connections per client address, capped (used from the event loop only).

    Args:
        limit: the most connections one address may hold open at once.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"the per-client limit must be >= 1, got {limit}")
        self.limit = limit
        self._open: dict[str, int] = {}

    def acquire(self, client: str) -> bool:
        """Count one more connection of ``client`` (False, and nothing counted: it has ``limit`` open already)."""
        held = self._open.get(client, 0)
        if held >= self.limit:
            return False
        self._open[client] = held + 1
        return True

    def release(self, client: str) -> None:
        """One connection of ``client`` closed."""
        held = self._open.get(client, 0) - 1
        if held > 0:
            self._open[client] = held
        else:
            self._open.pop(client, None)

    def held(self, client: str) -> int:
        """The connections ``client`` has open."""
        return self._open.get(client, 0)


def client_address(scope: Scope) -> str:
    """The client's address (host only: one user's connections come from many ports)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def header(scope: Scope, name: bytes) -> str | None:
    """A request header's value (the first, decoded as latin-1), None when absent."""
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def url_has_token(scope: Scope) -> bool:
    """True when the query string carries a ``token`` parameter."""
    query = bytes(scope.get("query_string") or b"").decode("latin-1")
    return "token" in parse_qs(query, keep_blank_values=True)


class Guard:
    """The ASGI middleware described in the module's docstring.

    Args:
        app: the app behind it.
        max_body_bytes: the largest request body.
        allow_origins: origins allowed beside the same origin and loopback ones (``*``: any).
        clients: the per-client connection counter shared with the websocket route.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int, allow_origins: tuple[str, ...],
                 clients: ClientCounter) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.allow_origins = allow_origins
        self.clients = clients

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if url_has_token(scope):
            await _refuse(scope, receive, send, 400, URL_TOKEN_MESSAGE, "auth", "token_in_url")
            return
        unsafe = scope["method"] not in SAFE_METHODS
        origin = header(scope, b"origin")
        if unsafe and not origin_allowed(origin, header(scope, b"host"), self.allow_origins):
            await _refuse(scope, receive, send, 403,
                          f"requests from the web page at {origin} are not allowed by this server "
                          "(its operator can allow that origin with --allow-origin)", "origin", "origin_not_allowed")
            return
        address = client_address(scope)
        if unsafe and not self.clients.acquire(address):
            await _refuse(scope, receive, send, 429,
                          f"too many connections from {address} at once (at most {self.clients.limit}); "
                          "wait for one to finish", "per_client")
            return
        try:
            await self._limited(scope, receive, send)
        finally:
            if unsafe:
                self.clients.release(address)

    async def _limited(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app with the body limit."""
        limit = self.max_body_bytes
        too_large = (f"the request body is larger than this server's limit of {_mb(limit)} "
                     "(its operator sets it with --max-upload-mb)")
        declared = header(scope, b"content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > limit:
            await _refuse(scope, receive, send, 413, too_large, "oversize")
            return
        received = 0
        refused = False
        started = False

        async def limited_receive() -> Message:
            nonlocal received, refused
            if refused:  # nothing more is read once the client has its answer
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    if started:  # (an app that answers before reading the body: the connection is cut)
                        raise BodyTooLarge(too_large)
                    refused = True
                    await _refuse(scope, receive, send, 413, too_large, "oversize")
                    raise BodyTooLarge(too_large)
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused:
                return  # the client has its 413: the app's own answer is dropped
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if not refused:
                raise  # (once refused, whatever the app made of the cut body does not matter)


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, message: str, reason: str,
                  code: str | None = None) -> None:
    """Answer an OpenAI-shaped error and close the connection; the rest of the body, if any, is never read.

    A client that reads while it sends (browsers, curl, which waits for ``100 Continue`` before a large body and
    gets the answer instead) sees the answer at once; one that reads only after it has sent its whole body may
    see the connection reset instead (Python's asyncio clients do; httpx's and urllib3's blocking ones read it).
    """
    scope[REASON_KEY] = reason
    response = json_error(status, message, code=code)
    response.headers["connection"] = "close"
    await response(scope, receive, send)


def _mb(size: int) -> str:
    return f"{size / (1 << 20):g} MB"

