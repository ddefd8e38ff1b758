"""Who may use the server: the optional shared-secret token, and OpenAI-shaped error bodies."""

from __future__ import annotations

import hmac
import ipaddress
from urllib.parse import urlsplit

from fastapi.responses import JSONResponse

from simulst.server.service import Service


def authorized(service: Service, presented: str | None) -> bool:
    """True when no token is needed or ``presented`` is it (compared in constant time)."""
    token = service.config.token
    return token is None or (presented is not None and hmac.compare_digest(presented.encode(), token.encode()))


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header."""
    if header and header.lower().startswith("bearer "):
        return header[7:].strip()
    return None


SUBPROTOCOL = "simulst"  # the websocket subprotocol the server accepts
TOKEN_SUBPROTOCOL = "bearer."  # a browser's websocket offers its token as the subprotocol "bearer.TOKEN"


def subprotocol_token(offered: list[str]) -> str | None:
    """The token a websocket client offered as the subprotocol ``bearer.TOKEN`` (never accepted back)."""
    for protocol in offered:
        if protocol.startswith(TOKEN_SUBPROTOCOL):
            return protocol[len(TOKEN_SUBPROTOCOL):]
    return None


def origin_allowed(origin: str | None, host: str | None, allowed: tuple[str, ...]) -> bool:
    """True when a request with this ``Origin`` header may use the server.

    Allowed: no ``Origin`` (not a browser: other clients can claim any origin, so the header only protects
    browsers' users), the server's own origin (the ``Host`` header), a loopback origin (``localhost``,
    ``127.0.0.0/8``, ``::1``), an origin listed in ``allowed`` (``scheme://host[:port]``), or any when ``allowed``
    holds ``*``. Default ports are ignored in the comparison (``https://a.org`` is ``https://a.org:443``).
    """
    if origin is None or "*" in allowed:
        return True
    parts = _origin_parts(origin)
    if parts is None:  # "null" (a file, a sandboxed frame) or garbage
        return origin in allowed
    _, hostname, port = parts
    if hostname == "localhost" or _loopback_ip(hostname):
        return True
    if host is not None and _same_host(hostname, port, host):
        return True
    return any(_origin_parts(entry) == parts for entry in allowed)


_DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}


def _origin_parts(origin: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port or None for the scheme's default) of ``scheme://host[:port]``; None if not one."""
    try:
        parsed = urlsplit(origin.strip().lower())
        port = parsed.port
    except ValueError:
        return None
    if not parsed.scheme or not parsed.hostname:
        return None
    if port == _DEFAULT_PORTS.get(parsed.scheme):
        port = None
    return parsed.scheme, parsed.hostname, port


def _loopback_ip(hostname: str) -> bool:
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False


def _same_host(hostname: str, port: int | None, host_header: str) -> bool:
    """The origin's host and port are the ``Host`` header's (a missing port: either side's default)."""
    try:
        parsed = urlsplit("//" + host_header.strip().lower())
        host_port = parsed.port
    except ValueError:
        return False
    if parsed.hostname != hostname:
        return False
    return port == host_port or (port is None and host_port in (80, 443))


# OpenAI's error ``type`` and default ``code`` by HTTP status (what its API answers: a client's fault is an
# ``invalid_request_error``, a rate limit is typed ``requests``, the server's own fault a ``server_error``).
ERROR_TYPES = {401: "invalid_request_error", 429: "requests", 500: "server_error", 502: "server_error",
               503: "server_error"}
ERROR_CODES = {401: "invalid_api_key", 404: "not_found", 405: "method_not_allowed", 413: "request_too_large",
               415: "unsupported_media_type", 422: "invalid_value", 429: "rate_limit_exceeded", 500: "server_error",
               503: "server_overloaded"}


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict[str, object]:
    """OpenAI's error object for an HTTP status: ``{"error": {"message", "type", "param", "code"}}`` (``code``
    defaults to the status's, e.g. ``invalid_api_key`` for 401; a 4xx not listed is an ``invalid_request_error``)."""
    kind = ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code or ERROR_CODES.get(status)}}


def json_error(status: int, message: str, param: str | None = None, code: str | None = None,
               headers: dict[str, str] | None = None) -> JSONResponse:
    """An OpenAI-shaped error response (:func:`error_body`)."""
    return JSONResponse(error_body(status, message, param, code), status_code=status, headers=headers)
