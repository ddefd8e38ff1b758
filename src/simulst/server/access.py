"""Who may use the server: the optional shared-secret token, and OpenAI-style error bodies."""

from __future__ import annotations

import hmac

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


def json_error(status: int, message: str) -> JSONResponse:
    """An OpenAI-style error body."""
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error"}}, status_code=status)
