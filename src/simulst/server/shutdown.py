"""Graceful shutdown: every open stream ends as if its client had sent ``end`` and gets its ``final``.

uvicorn's own shutdown closes every websocket at once (code 1012) and only then ends the app's lifespan, so the
streams' finals would be lost. :class:`GracefulServer` therefore first stops listening and drains the app
(:meth:`OpenStreams.drain`): each websocket stream is told to stop (its handler ends the stream, waits for the
final decode, sends ``final`` and closes with 1001), connections still waiting for their ``start`` are refused,
uploads being decoded are waited for; all within the grace period. Then uvicorn's shutdown closes whatever is left.

**Exit status.** uvicorn re-raises the signal it caught once it has shut down, so that the process ends as the
signal's default would (killed by SIGTERM: status -15 / 143; SIGINT: ``KeyboardInterrupt``). A shutdown that
drained is the server's normal end, so :class:`GracefulServer` forgets the signals that asked for it and the
process exits 0; only a forced exit (a second Ctrl-C while draining) still ends by the signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Generator, Iterator

import uvicorn

log = logging.getLogger("simulst.server")


class OpenStreams:
    """The app's open websocket connections, each with an event set when the server shuts down."""

    def __init__(self) -> None:
        self._open: set[asyncio.Event] = set()
        self.closing = False
        self.waiting = 0  # connections accepted that have not sent their start yet

    def __len__(self) -> int:
        return len(self._open)

    @contextlib.contextmanager
    def track(self) -> Iterator[asyncio.Event]:
        """Register a connection for the block; the event is set when the server shuts down (at once if it
        is shutting down already)."""
        stopping = asyncio.Event()
        if self.closing:
            stopping.set()
        self._open.add(stopping)
        try:
            yield stopping
        finally:
            self._open.discard(stopping)

    async def drain(self, grace_s: float, busy: Callable[[], bool]) -> None:
        """Tell every open connection to stop, then wait until they have all closed and ``busy()`` is False
        (uploads being decoded), at most ``grace_s`` seconds."""
        self.closing = True
        for stopping in list(self._open):
            stopping.set()
        deadline = time.monotonic() + grace_s
        while (self._open or busy()) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)


class GracefulServer(uvicorn.Server):
    """uvicorn's server that drains the app before its own shutdown.

    Args:
        config: uvicorn's configuration (its ``timeout_graceful_shutdown`` is set to what is left of the grace
            period once the app is drained).
        drain: the app's drain (stop listening first is done here), given the grace period in seconds.
        grace_s: the longest the whole shutdown may wait for streams and requests to finish.
    """

    def __init__(self, config: uvicorn.Config, drain: Callable[[float], Awaitable[None]], grace_s: float) -> None:
        super().__init__(config)
        self._drain = drain
        self._grace_s = grace_s

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """uvicorn's signal capture (SIGTERM, SIGINT: a shutdown), less its re-raising of the signals once a
        drained shutdown is over: the process then exits normally (status 0). A forced exit keeps it."""
        with super().capture_signals():
            yield
            captured = getattr(self, "_captured_signals", None)  # (uvicorn's list of the signals to raise again)
            if captured and not self.force_exit:
                names = ", ".join(signal.Signals(sig).name for sig in captured)
                log.info("shut down on %s: exiting normally", names)
                captured.clear()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Stop listening, drain the app, then shut down as uvicorn does."""
        began = time.monotonic()
        for server in self.servers:
            server.close()
        draining = asyncio.ensure_future(self._drain(self._grace_s))
        while not draining.done() and not self.force_exit:  # (a second Ctrl-C forces the exit)
            await asyncio.wait({draining}, timeout=0.1)
        if not draining.done():
            draining.cancel()
        elif draining.exception() is not None:
            log.error("draining the app failed: %r", draining.exception())
        self.config.timeout_graceful_shutdown = max(1, math.ceil(self._grace_s - (time.monotonic() - began)))
        await super().shutdown(sockets)
