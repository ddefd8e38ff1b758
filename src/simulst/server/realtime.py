"""OpenAI's Realtime API for transcription: the websocket ``/v1/realtime?intent=transcription``.

The events are OpenAI's published transcription-session events (the ``openai`` SDK's ``types.realtime``); a client
written for OpenAI's endpoint works here with its URL changed.

**Client events.** ``session.update`` with a ``transcription`` session: ``audio.input.format`` (``audio/pcm`` at
``rate`` 24000 by default - any rate from 8000 to 96000 Hz is accepted -, ``audio/pcmu`` or ``audio/pcma`` at
8000 Hz), ``audio.input.transcription`` (``language``, ``prompt``: the text said before, as the HTTP API's; ``model``
is echoed), ``audio.input.turn_detection`` (``server_vad``, the default, with ``threshold`` and
``silence_duration_ms``; ``semantic_vad`` is served as ``server_vad``; ``null``: the client commits). The audio
settings are fixed once audio of an item has been appended (until the next commit). ``input_audio_buffer.append``
(base64 audio in the session's format, at the pace it is spoken), ``input_audio_buffer.commit``,
``input_audio_buffer.clear``. Noise reduction and logprobs are not served (their settings are ignored).

**Server events.** ``session.created`` at once, ``session.updated`` per update. With turn detection each speech
segment that Silero VAD finds (the stream's own VAD segmentation, :mod:`simulst.streaming.segmenter`) is an item:
``input_audio_buffer.speech_started``, a ``conversation.item.input_audio_transcription.delta`` per emission
committed while it is spoken (simultaneous: the deltas come before the speech stops), ``speech_stopped`` when the
pause is long enough, ``input_audio_buffer.committed``, the segment's last delta (the segment is committed whole at
its end) and ``conversation.item.input_audio_transcription.completed`` with the item's transcript (its deltas
concatenated). Without turn detection the audio between two commits is one item. ``audio_start_ms`` /
``audio_end_ms`` count the audio appended since the connection opened. A commit ends the item at once (its final
decode) and the next audio starts a new stream; ``clear`` drops the audio not yet transcribed and the open item
(its deltas sent stay sent: committed text is never retracted).

**Errors** are ``error`` events in OpenAI's shape (``{"type", "code", "message", "param", "event_id"}``); a
malformed or unsupported client event is answered and the session goes on. A missing token (``Authorization:
Bearer``, or the browser subprotocol ``openai-insecure-api-key.TOKEN``), a foreign ``Origin``, a full server, audio
faster than real time, no event within the start timeout or none for :data:`IDLE_S` end the session (close 1008 or
1013). A stream that fails sends ``conversation.item.input_audio_transcription.failed`` and closes (1011). A session
takes one of the server's stream places while it has audio to transcribe, not while it idles.

**Operation**, as ``/ws`` (:mod:`simulst.server.app`): a session is admitted in the same order - its ``Origin``, the
server not shutting down (else 1001), the per-client cap (``--max-per-client``, counted with the address's ``/ws``
streams and uploads; code ``too_many_connections``, close 1013), then the key. Its streams are live streams in the
metrics, in the same series as ``/ws``: ``simulst_streams_open{kind="live"}`` while it has audio, one
``simulst_streams_total{outcome}`` per stream (``final`` at a commit's or a shutdown's final decode, with an AL and
an RTF observation; ``error``; ``left`` for an item cleared or dropped when the client leaves), its refusals in
``simulst_refusals_total{reason}`` (``idle`` for the :data:`IDLE_S` cut). Each connection is one access line
(``kind`` ``stream``, ``path`` ``/v1/realtime``, ``stream`` the session id, ``status`` the close code, ``bytes_in``
and ``audio_s`` the audio appended, ``reason``: the refusal, ``closed`` or ``left`` when the client closed it
(``left``: with an item not committed), ``error``, ``shutdown``). At a shutdown (SIGTERM / SIGINT) each session's
item that has audio is ended as if the client had committed it - its final decode, ``committed`` and ``completed``
with the text of all its audio - and the connection is closed with 1001, within ``--shutdown-grace-s``; a session
without such an item (with turn detection: no speech going on) is closed with 1001 at once.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
from fastapi import FastAPI, WebSocket

from simulst.audio.vad import VoiceActivity
from simulst.errors import SimulstError
from simulst.server import accesslog
from simulst.server.access import authorized, bearer, origin_allowed, subprotocol_token
from simulst.server.protocol import MAX_PROMPT_CHARS, ProtocolError, StartRequest
from simulst.server.scheduler import Audio, Message, Slot
from simulst.streaming.segmenter import VadSegmenter
from simulst.streaming.session import Session

if TYPE_CHECKING:
    from simulst.server.app import Hub

log = logging.getLogger("simulst.server")

DEFAULT_RATE = 24000  # OpenAI's pcm16 rate
G711_RATE = 8000
ENCODINGS = ("audio/pcm", "audio/pcmu", "audio/pcma")
KEY_SUBPROTOCOL = "openai-insecure-api-key."  # a browser's API key, offered as a subprotocol (OpenAI's way)
MIN_COMMIT_MS = 100.0  # OpenAI refuses to commit less audio
IDLE_S = 60.0  # a session that sends nothing for this long is closed
NORMAL, GOING_AWAY, POLICY, SERVER_ERROR, TRY_LATER = 1000, 1001, 1008, 1011, 1013
_sessions = itertools.count(1)


class RealtimeError(SimulstError):
    """A client event the session refuses: the ``error`` event's code and param; ``fatal`` closes the session,
    with the close code ``close``, and counts a refusal for ``reason`` (:data:`~simulst.server.metrics.REFUSALS`)."""

    def __init__(self, message: str, code: str = "invalid_value", param: str | None = None,
                 fatal: bool = False, reason: str = "protocol", close: int = POLICY) -> None:
        super().__init__(message)
        self.code, self.param, self.fatal = code, param, fatal
        self.reason, self.close = reason, close
        self.event_id: str | None = None  # the client event at fault


def register(app: FastAPI, hub: Hub) -> None:
    """Add ``/v1/realtime`` to ``app`` (its connections share ``hub``'s limits, metrics and shutdown with ``/ws``)."""

    @app.websocket("/v1/realtime")
    async def realtime(websocket: WebSocket) -> None:
        await RealtimeConnection(websocket, hub).serve()


# ---------------------------------------------------------------------------------------------------- the session
@dataclass
class SessionConfig:
    """A transcription session's settings (what ``session.update`` changes)."""

    encoding: str = "audio/pcm"
    rate: int = DEFAULT_RATE
    language: str | None = None
    prompt: str | None = None
    model: str | None = None
    vad: bool = True
    threshold: float = 0.5
    silence_ms: float = 1000.0

    def describe(self, session_id: str) -> dict[str, Any]:
        """The session object of ``session.created`` / ``session.updated``."""
        audio_format: dict[str, Any] = {"type": self.encoding}
        if self.encoding == "audio/pcm":
            audio_format["rate"] = self.rate
        detection = ({"type": "server_vad", "threshold": self.threshold,
                      "silence_duration_ms": round(self.silence_ms), "prefix_padding_ms": PAD_MS}
                     if self.vad else None)
        return {"type": "transcription", "id": session_id, "object": "realtime.transcription_session",
                "audio": {"input": {"format": audio_format, "noise_reduction": None, "turn_detection": detection,
                                    "transcription": {"model": self.model, "language": self.language,
                                                      "prompt": self.prompt}}},
                "include": None}

    def updated(self, session: Any, limits_rate: tuple[int, int]) -> SessionConfig:
        """These settings changed by a ``session.update``'s ``session`` object.

        Raises:
            RealtimeError: a field of the wrong type or out of range.
        """
        if not isinstance(session, dict):
            raise RealtimeError("session.update needs a session object", param="session")
        if session.get("type", "transcription") != "transcription":
            raise RealtimeError("this endpoint serves transcription sessions only: use session type "
                                "'transcription' (connect with ?intent=transcription)", param="session.type")
        config = replace(self)
        audio = _object(session, "audio", "session")
        source = _object(audio, "input", "session.audio")
        if "format" in source:
            config.encoding, config.rate = _format(source["format"], limits_rate)
        if "transcription" in source:
            transcription = _object(source, "transcription", "session.audio.input") or {}
            config.language = _short_text(transcription, "language", 64, config.language)
            config.prompt = _short_text(transcription, "prompt", MAX_PROMPT_CHARS, config.prompt)
            config.model = _short_text(transcription, "model", 64, config.model)
        if "turn_detection" in source:
            config.vad, config.threshold, config.silence_ms = _turn_detection(source["turn_detection"], config)
        return config


PAD_MS = 30  # the speech padding of the stream's VAD (Silero's speech_pad_ms in VoiceActivity)


def _object(parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RealtimeError(f"{where}.{key} must be an object", param=f"{where}.{key}")
    return value


def _short_text(parent: dict[str, Any], key: str, longest: int, default: str | None) -> str | None:
    if key not in parent:
        return default
    value = parent[key]
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > longest:
        raise RealtimeError(f"session.audio.input.transcription.{key} must be a string of at most {longest} "
                            "characters", param=f"session.audio.input.transcription.{key}")
    return value


def _format(value: Any, rates: tuple[int, int]) -> tuple[str, int]:
    param = "session.audio.input.format"
    if not isinstance(value, dict) or value.get("type") not in ENCODINGS:
        raise RealtimeError(f"{param} must be an object with type {', '.join(ENCODINGS)}", param=param)
    encoding = str(value["type"])
    if encoding != "audio/pcm":
        if value.get("rate", G711_RATE) != G711_RATE:
            raise RealtimeError(f"{encoding} is 8000 Hz audio", param=f"{param}.rate")
        return encoding, G711_RATE
    rate = value.get("rate", DEFAULT_RATE)
    if isinstance(rate, bool) or not isinstance(rate, int) or not rates[0] <= rate <= rates[1]:
        raise RealtimeError(f"{param}.rate must be an integer from {rates[0]} to {rates[1]} Hz, got {rate!r}",
                            param=f"{param}.rate")
    return encoding, rate


def _turn_detection(value: Any, config: SessionConfig) -> tuple[bool, float, float]:
    param = "session.audio.input.turn_detection"
    if value is None:
        return False, config.threshold, config.silence_ms
    if not isinstance(value, dict) or value.get("type") not in ("server_vad", "semantic_vad"):
        raise RealtimeError(f"{param} must be null or an object with type server_vad or semantic_vad", param=param)
    threshold = value.get("threshold", config.threshold)
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0.0 < threshold < 1.0:
        raise RealtimeError(f"{param}.threshold must be a number between 0 and 1", param=f"{param}.threshold")
    silence = value.get("silence_duration_ms", config.silence_ms)
    if isinstance(silence, bool) or not isinstance(silence, int | float) or not 0 <= silence <= 10000:
        raise RealtimeError(f"{param}.silence_duration_ms must be a number from 0 to 10000",
                            param=f"{param}.silence_duration_ms")
    return True, float(threshold), float(silence)


# ---------------------------------------------------------------------------------------------------- audio
def pcm16(encoding: str, data: bytes) -> bytes:
    """The appended audio as 16-bit little-endian PCM (G.711 expanded).

    Raises:
        RealtimeError: PCM audio of an odd number of bytes.
    """
    if encoding == "audio/pcm":
        if len(data) % 2:
            raise RealtimeError(f"audio/pcm audio is 16-bit samples: got {len(data)} bytes (odd)", param="audio")
        return data
    table = _ULAW if encoding == "audio/pcmu" else _ALAW
    return table[np.frombuffer(data, dtype=np.uint8)].astype("<i2").tobytes()


def _ulaw_table() -> np.ndarray:
    """G.711 mu-law: the byte's bits are inverted; sign, 3-bit segment, 4-bit step; bias 132 (ITU-T G.711)."""
    code = ~np.arange(256, dtype=np.int32) & 0xFF
    segment, step = (code >> 4) & 0x07, code & 0x0F
    magnitude = (((step << 3) + 0x84) << segment) - 0x84
    return np.where(code & 0x80, -magnitude, magnitude).astype(np.int16)


def _alaw_table() -> np.ndarray:
    """G.711 A-law: even bits inverted (xor 0x55); sign set means positive; segment 0 is linear (ITU-T G.711)."""
    code = np.arange(256, dtype=np.int32) ^ 0x55
    segment, step = (code >> 4) & 0x07, code & 0x0F
    magnitude = np.where(segment == 0, (step << 4) + 8, ((step << 4) + 0x108) << np.maximum(segment - 1, 0))
    return np.where(code & 0x80, magnitude, -magnitude).astype(np.int16)


_ULAW, _ALAW = _ulaw_table(), _alaw_table()


# ---------------------------------------------------------------------------------------------------- items
@dataclass
class _Mark:
    """What the stream's VAD heard (:data:`~simulst.streaming.segmenter.VoiceListener`), and how many emissions the
    stream had then: ``start`` / ``end`` (speech found; before the stream committed anything of that audio),
    ``taken`` (a segment end committed)."""

    kind: str
    emissions: int
    sample: int = 0


@dataclass
class _Item:
    """A conversation item being transcribed."""

    id: str
    start_ms: float
    text: str = ""
    spoken: bool = False  # it began with speech_started


@dataclass
class Items:
    """The items of one connection, across its streams (a commit starts a new stream)."""

    ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    previous: str | None = None
    base_ms: float = 0.0  # audio of the connection's earlier streams

    def new(self, start_ms: float, spoken: bool) -> _Item:
        return _Item(f"item_{next(self.ids):04d}", start_ms, spoken=spoken)


class ItemTracker:
    """Turns one stream's emissions and VAD marks into Realtime events (run in the stream's job, after it).

    An emission belongs to the item open when it was committed. The marks say how many emissions the stream had
    at each speech start and end its VAD heard and, for each speech end, once the segment's own commit was made
    (the stream commits a segment whole as soon as its end is heard): the emissions up to that mark complete the
    item, later ones go to the next. Without turn detection the stream's emissions form one item, completed when
    the stream ends (a commit).

    Args:
        session: the stream (with ``vad``, its VAD segmenter is replaced by one with the session's threshold and
            silence, which tells this tracker what it hears).
        items: the connection's items.
        config: the session's settings.
    """

    def __init__(self, session: Session, items: Items, config: SessionConfig) -> None:
        self.session, self.items = session, items
        self.rate = session.sample_rate
        self.marks: list[_Mark] = []
        self.seen_marks = 0
        self.seen = 0  # emissions turned into deltas
        self.item: _Item | None = None
        self.vad = config.vad
        self.drained = False  # the stream was ended by the server's shutdown, not by a commit
        self.lock = threading.Lock()
        if config.vad:
            detector = VoiceActivity(self.rate, config.threshold, config.silence_ms, PAD_MS)
            session.segmenter = VadSegmenter(detector, self.rate, session.options.context_reset_s * self.rate,
                                             listener=self._mark)

    def _mark(self, kind: str, sample: int) -> None:
        """(The segmenter's listener, in the stream's job) mark what the VAD heard."""
        self.marks.append(_Mark(kind, self._count(), sample))

    def _count(self) -> int:
        return len(self.session.emissions)

    def _ms(self, sample: int) -> float:
        return self.items.base_ms + sample * 1000.0 / self.rate

    def events(self, finished: bool) -> list[Message]:
        """The events of what the stream did since the last call (``finished``: it has decoded its end)."""
        with self.lock:
            out: list[Message] = []
            marks = self.marks[self.seen_marks :]
            self.seen_marks = len(self.marks)
            used: set[int] = set()
            for i, mark in enumerate(marks):
                if mark.kind in ("start", "end"):
                    out += self._deltas(mark.emissions)
                if mark.kind == "start" and (self.item is None or not self.item.spoken):
                    if self.item is None:
                        self.item = self.items.new(self._ms(mark.sample), spoken=True)
                    self.item.spoken = True
                    out.append({"type": "input_audio_buffer.speech_started", "item_id": self.item.id,
                                "audio_start_ms": round(self._ms(mark.sample))})
                elif mark.kind == "end" and self.item is not None:
                    end_ms = self._ms(mark.sample)
                    out.append({"type": "input_audio_buffer.speech_stopped", "item_id": self.item.id,
                                "audio_end_ms": round(end_ms)})
                    out.append(self._committed())
                    ended = next((j for j in range(i + 1, len(marks)) if j not in used
                                  and marks[j].kind == "taken" and marks[j].sample == mark.sample), None)
                    if ended is not None:
                        used.add(ended)
                        out += self._deltas(marks[ended].emissions)
                    out += self._complete(end_ms)
            out += self._deltas(self._count())
            if finished and not (self.drained and self.vad and self.item is None):
                # (at a shutdown with turn detection and no speech going on, there is no item to complete)
                end_ms = self._ms(self.session.read)
                if self.item is None:
                    self.item = self.items.new(end_ms, spoken=False)
                out.append(self._committed())
                out += self._complete(end_ms)
            return out

    def _deltas(self, upto: int) -> list[Message]:
        out: list[Message] = []
        for emission in self.session.emissions[self.seen : upto]:
            if self.item is None:  # (text before any speech start: without turn detection, or a late commit)
                self.item = self.items.new(self._ms(0), spoken=False)
            delta = emission.text if self.item.text else emission.text.lstrip()
            if delta:
                self.item.text += delta
                out.append({"type": "conversation.item.input_audio_transcription.delta", "item_id": self.item.id,
                            "content_index": 0, "delta": delta})
        self.seen = max(self.seen, upto)
        return out

    def _committed(self) -> Message:
        assert self.item is not None
        return {"type": "input_audio_buffer.committed", "item_id": self.item.id,
                "previous_item_id": self.items.previous}

    def _complete(self, end_ms: float) -> list[Message]:
        item = self.item
        if item is None:
            return []
        self.item = None
        self.items.previous = item.id
        return [{"type": "conversation.item.input_audio_transcription.completed", "item_id": item.id,
                 "content_index": 0, "transcript": item.text,
                 "usage": {"type": "duration", "seconds": round(max(0.0, end_ms - item.start_ms) / 1000.0, 3)}}]

    def failed(self, message: str) -> list[Message]:
        """The event of the open item's failure (none open: none)."""
        if self.item is None:
            return []
        return [{"type": "conversation.item.input_audio_transcription.failed", "item_id": self.item.id,
                 "content_index": 0, "error": {"type": "server_error", "code": "transcription_failed",
                                               "message": message, "param": None}}]


class RealtimeSlot(Slot):
    """A stream of a Realtime session: its jobs' output is the Realtime events of its items (the emission
    messages stay in the job's output, for the transcripts log; the sender skips them). ``counted``: its end is
    in the metrics already."""

    tracker: ItemTracker
    counted: bool = False

    def job(self) -> Callable[[], list[Message | Audio]]:
        work = super().job()

        def tracked() -> list[Message | Audio]:
            out = work()
            finished = any(isinstance(m, dict) and m.get("type") == "final" for m in out)
            events: list[Message | Audio] = list(self.tracker.events(finished))
            return [m for m in out if not _is_final(m)] + events + [m for m in out if _is_final(m)]

        return tracked


def _is_final(message: Message | Audio) -> bool:
    return isinstance(message, dict) and message.get("type") == "final"


# ---------------------------------------------------------------------------------------------------- connection
@dataclass(frozen=True)
class _Close:
    """The sender's last duty: close the connection with this code."""

    code: int


class _Stopping(Exception):
    """The server is shutting down: the session's pending item is finished and the connection closed (1001)."""


class RealtimeConnection:
    """One ``/v1/realtime`` websocket: admitted, then client events until it closes; logged as one access line.

    Args:
        websocket: the connection (not accepted yet).
        hub: the app's shared parts (service, scheduler, per-client counter, open streams, metrics).
    """

    def __init__(self, websocket: WebSocket, hub: Hub) -> None:
        self.ws, self.hub = websocket, hub
        self.service, self.scheduler = hub.service, hub.scheduler
        self.id = f"sess_{next(_sessions):04d}"
        self.limits = self.service.config.limits
        self.config = SessionConfig(silence_ms=self.service.config.options.vad_pause_ms)
        self.items = Items()
        self.slot: RealtimeSlot | None = None
        self.pump: asyncio.Task[None] | None = None
        self.reserved = False
        self.appended_ms = 0.0  # audio appended since the last commit
        self.outgoing: asyncio.Queue[Message | _Close] = asyncio.Queue()
        self.event_ids = itertools.count(1)
        self.offered = list(websocket.scope.get("subprotocols") or [])
        self.host = websocket.client.host if websocket.client else "unknown"
        self.peer = f"{self.host}:{websocket.client.port}" if websocket.client else "unknown"
        self.stopping = asyncio.Event()  # set when the server shuts down
        # the access line: the close code sent, why the session ended, the audio bytes and seconds received
        self.began = time.monotonic()
        self.status: int | None = None
        self.reason: str | None = None
        self.bytes_in = 0
        self.audio_s = 0.0

    async def serve(self) -> None:
        """Admit the connection, answer its events until it closes, then write its access line."""
        counted = False
        try:
            refusal = self._admission()
            if refusal is None:
                counted = self.hub.clients.acquire(self.host)
                refusal = None if counted else RealtimeError(
                    f"too many connections from {self.host} at once (at most {self.hub.clients.limit}); close one "
                    "first", code="too_many_connections", fatal=True, reason="per_client", close=TRY_LATER)
            refusal = refusal or self._token_refusal()
            await self._session(refusal)
        finally:
            if counted:
                self.hub.clients.release(self.host)
            accesslog.write("stream", client=self.peer, path=self.ws.url.path, stream=self.id, status=self.status,
                            duration_ms=round((time.monotonic() - self.began) * 1000.0, 1), bytes_in=self.bytes_in,
                            audio_s=round(self.audio_s, 2), reason=self.reason)

    async def _session(self, refusal: RealtimeError | None) -> None:
        """Accept, then run the session (or send the refusal) and close; the connection is one of the server's
        open streams until its close is sent (a shutdown waits for it)."""
        await self.ws.accept(subprotocol="realtime" if "realtime" in self.offered else None)
        sender = asyncio.create_task(self._send())
        code, left = NORMAL, None
        with self.hub.streams.track() as stopping:
            self.stopping = stopping
            try:
                if refusal is not None:
                    raise refusal
                self._emit({"type": "session.created", "session": self.config.describe(self.id)})
                await self._receive()
                left = "left"  # the client closed the connection (an item not committed is dropped)
            except _Stopping:
                code = await self._finish_at_shutdown()
            except RealtimeError as err:
                log.warning("realtime %s refused: %s", self.id, err)
                self.reason = err.reason
                self.hub.metrics.refused(err.reason)
                self._emit(_error(err))
                code = err.close
            except Exception as err:  # the connection broke
                log.info("realtime %s: %s: %s", self.id, type(err).__name__, err)
                code, self.reason = SERVER_ERROR, self.reason or "error"
            finally:
                if left is not None and self.slot is not None:
                    self.reason = self.reason or "left"
                self._drop_stream(left)
                self.reason = self.reason or "closed"
                self.outgoing.put_nowait(_Close(code))
                await asyncio.wait({sender}, timeout=5.0)
                sender.cancel()

    def _admission(self) -> RealtimeError | None:
        """Why the connection is refused before the per-client cap is counted (None: not for these reasons)."""
        ws, config = self.ws, self.service.config
        if ws.query_params.get("intent", "transcription") != "transcription":
            return RealtimeError("this endpoint serves transcription sessions only: connect with "
                                 "?intent=transcription", param="intent", fatal=True)
        origin = ws.headers.get("origin")
        if not origin_allowed(origin, ws.headers.get("host"), tuple(config.allow_origins)):
            return RealtimeError(f"web pages at {origin} may not use this server (its operator can allow them "
                                 "with --allow-origin)", code="origin_not_allowed", fatal=True, reason="origin")
        if self.hub.streams.closing:
            return RealtimeError("the server is shutting down; try again later", code="server_shutting_down",
                                 fatal=True, reason="shutdown", close=GOING_AWAY)
        return None

    def _token_refusal(self) -> RealtimeError | None:
        """Why the connection's key is refused (None: it is not)."""
        ws = self.ws
        if "token" in ws.query_params or "api_key" in ws.query_params:
            return RealtimeError("the key is not accepted in the URL (URLs land in logs): send it as an "
                                 f"'Authorization: Bearer KEY' header or the subprotocol '{KEY_SUBPROTOCOL}KEY'",
                                 code="invalid_api_key", fatal=True, reason="auth")
        key = (bearer(ws.headers.get("authorization")) or subprotocol_token(self.offered)
               or next((p[len(KEY_SUBPROTOCOL):] for p in self.offered if p.startswith(KEY_SUBPROTOCOL)), None))
        if not authorized(self.service, key):
            return RealtimeError("a valid API key is needed: 'Authorization: Bearer KEY' (or, from a browser, the "
                                 f"subprotocol '{KEY_SUBPROTOCOL}KEY')", code="invalid_api_key", fatal=True,
                                 reason="auth")
        return None

    async def _finish_at_shutdown(self) -> int:
        """The server is shutting down: the open item ends as if the client had committed it (its final decode,
        its ``completed``); returns the close code, 1001."""
        slot, pump = self.slot, self.pump
        if slot is not None and pump is not None:
            slot.tracker.drained = True
            slot.end()
            self.scheduler.poke()
            await pump
            log.info("realtime %s: stream %s ended by the server's shutdown", self.id, slot.id)
        self.reason = self.reason or "shutdown"
        return GOING_AWAY

    # ------------------------------------------------------------------------------------ client events
    async def _receive(self) -> None:
        """Answer the client's events until it leaves (a fatal error raises; the server's shutdown raises
        :class:`_Stopping`)."""
        first = True
        while True:
            if first:
                self.hub.streams.waiting += 1
            try:
                text = await self._next(self.limits.start_timeout_s if first else IDLE_S, first)
            finally:
                if first:
                    self.hub.streams.waiting -= 1
            if text is None:
                return
            first = False
            try:
                await self._handle(text)
            except RealtimeError as err:
                if err.fatal:
                    raise
                self._emit(_error(err))

    async def _next(self, timeout: float, first: bool) -> str | None:
        """The next text message (None: the client left)."""
        receiving = asyncio.ensure_future(self.ws.receive())
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            # (asyncio.wait reports a timeout by its result: no TimeoutError, which differs on Python 3.10)
            done, _ = await asyncio.wait({receiving, stop}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not receiving.done():
                receiving.cancel()
        if receiving not in done:
            if self.stopping.is_set():
                raise _Stopping
            what = "no event within" if first else "no event for"
            raise RealtimeError(f"{what} {timeout:g} s: the session is closed", code="session_timeout", fatal=True,
                                reason="start_timeout" if first else "idle")
        message = receiving.result()
        if message["type"] == "websocket.disconnect":
            return None
        if message.get("text") is None:
            raise RealtimeError("events are JSON text messages (audio goes base64 in input_audio_buffer.append)",
                                code="invalid_event")
        return str(message["text"])

    async def _handle(self, text: str) -> None:
        try:
            event = json.loads(text)
        except json.JSONDecodeError as err:
            raise RealtimeError(f"malformed JSON: {err.msg}", code="invalid_json") from err
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise RealtimeError('an event is a JSON object with a "type"', code="invalid_event")
        kind, event_id = event["type"], event.get("event_id")
        try:
            if kind == "session.update":
                self._update(event.get("session"))
            elif kind == "input_audio_buffer.append":
                await self._append(event.get("audio"))
            elif kind == "input_audio_buffer.commit":
                await self._commit()
            elif kind == "input_audio_buffer.clear":
                self._clear()
            else:
                raise RealtimeError(f"a transcription session does not serve {kind!r} (it takes session.update, "
                                    "input_audio_buffer.append, .commit and .clear)", code="unsupported_event",
                                    param="type")
        except RealtimeError as err:
            err.event_id = event_id if isinstance(event_id, str) else None
            raise

    def _update(self, session: Any) -> None:
        if self.slot is not None and isinstance(session, dict) and session.get("audio") is not None:
            raise RealtimeError("the audio settings are fixed while an item has audio: update them before "
                                "appending, or after input_audio_buffer.commit", code="session_locked",
                                param="session.audio")
        self.config = self.config.updated(session, (self.limits.min_rate, self.limits.max_rate))
        self._emit({"type": "session.updated", "session": self.config.describe(self.id)})

    async def _append(self, audio: Any) -> None:
        if not isinstance(audio, str):
            raise RealtimeError("input_audio_buffer.append needs 'audio': base64 audio", param="audio")
        try:
            data = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError) as err:
            raise RealtimeError(f"audio is not base64: {err}", param="audio") from err
        frames = pcm16(self.config.encoding, data)
        if not frames:
            return
        slot = self.slot or await self._open()
        step = self.limits.frame_bytes(self.config.rate)
        try:
            for pos in range(0, len(frames), step):
                slot.feed(frames[pos : pos + step])
        except ProtocolError as err:  # too fast, too long
            raise RealtimeError(str(err), code=err.reason, fatal=True, reason=err.reason) from err
        self.bytes_in += len(data)
        self.audio_s += len(frames) / 2 / self.config.rate
        self.appended_ms += len(frames) / 2 * 1000.0 / self.config.rate
        self.scheduler.poke()

    async def _open(self) -> RealtimeSlot:
        """A new stream for the audio to come (the session takes a place of the server now)."""
        if not self.reserved:
            if not self.scheduler.reserve():
                raise RealtimeError(f"the server is full ({self.scheduler.max_streams} streams); try again later",
                                    code="server_full", fatal=True, reason="full", close=TRY_LATER)
            self.reserved = True
        config = self.config
        start = StartRequest(config.rate, "transcribe", config.language, vad=config.vad, prompt=config.prompt)
        try:
            opened = await asyncio.to_thread(self.service.open, start)
        except SimulstError as err:  # (e.g. a language the model does not know): the place is given back
            self._drop_stream()
            raise RealtimeError(str(err), param="session.audio.input.transcription") from err
        if not isinstance(opened.stream, Session):
            self._drop_stream()
            raise RealtimeError("this server's model cannot serve a transcription session", fatal=True)
        slot = RealtimeSlot(opened, start, self.service.sample_rate, self.limits,
                            transcripts=self.service.config.transcripts)
        slot.tracker = ItemTracker(opened.stream, self.items, config)
        self.slot = slot
        self.scheduler.add(slot)
        self.pump = asyncio.create_task(self._pump(slot))
        log.info("realtime %s: stream %s (%s)", self.id, slot.id, start)
        return slot

    async def _commit(self) -> None:
        if self.slot is None or self.appended_ms < MIN_COMMIT_MS:
            raise RealtimeError(f"the buffer holds {self.appended_ms:.0f} ms of audio: a commit needs at least "
                                f"{MIN_COMMIT_MS:g} ms", code="input_audio_buffer_commit_empty")
        slot, pump = self.slot, self.pump
        slot.end()
        self.scheduler.poke()
        if pump is not None:
            await pump  # the item's final decode and its events (the client's next events wait meanwhile)
        self._drop_stream()
        self._next_stream(slot)

    def _clear(self) -> None:
        slot = self.slot
        if slot is not None:
            self._drop_stream("left")  # (a stream dropped before its end, as a /ws stream whose client left)
            self._next_stream(slot)
        self.appended_ms = 0.0
        self._emit({"type": "input_audio_buffer.cleared"})

    def _next_stream(self, slot: Slot) -> None:
        """The stream is over: the next audio opens another, later on the connection's timeline."""
        self.items.base_ms += slot.received_s * 1000.0
        self.appended_ms = 0.0

    def _drop_stream(self, outcome: str | None = None) -> None:
        """Stop the stream (no more of it is decoded) and give the session's place back. A stream that had not
        reached its end is counted in the metrics with ``outcome`` (None: not counted; a refusal was)."""
        if self.pump is not None:
            self.pump.cancel()
        if self.slot is not None:
            if outcome is not None and not self.slot.counted:
                self.hub.metrics.ended(outcome)
            self.scheduler.remove(self.slot)
        self.slot, self.pump = None, None
        if self.reserved:
            self.scheduler.release()
            self.reserved = False

    # ------------------------------------------------------------------------------------ server events
    async def _pump(self, slot: RealtimeSlot) -> None:
        """Forward the stream's events until it closes; a failure fails the item and closes the session. The
        stream's end is counted in the metrics as a ``/ws`` stream's: its AL and RTF at its final."""
        while True:
            message = await slot.outbox.get()
            if message is None:
                return
            if isinstance(message, dict) and message.get("type") == "final":
                slot.counted = True
                self.hub.metrics.finished(slot.stream.emissions, float(message["source_ms"]),
                                          float(message["compute_s"]))
                self.hub.metrics.ended("final")
            if not isinstance(message, dict) or message.get("type") in ("emission", "final"):
                continue
            if message.get("type") == "error":
                slot.counted = True
                self.hub.metrics.ended("error")
                self.reason = "error"
                text = str(message.get("message"))
                for event in slot.tracker.failed(text):
                    self._emit(event)
                self._emit(_error(RealtimeError(text, code="server_error"), "server_error"))
                self.outgoing.put_nowait(_Close(SERVER_ERROR))
                return
            self._emit(message)

    def _emit(self, event: Message) -> None:
        self.outgoing.put_nowait({"event_id": f"event_{next(self.event_ids):05d}", **event})

    async def _send(self) -> None:
        """Send the events in order; close at a :class:`_Close`."""
        while True:
            event = await self.outgoing.get()
            if isinstance(event, _Close):
                self.status = event.code
                with contextlib.suppress(Exception):
                    await self.ws.close(event.code)
                return
            await self.ws.send_text(json.dumps(event, ensure_ascii=False))


def _error(err: RealtimeError, kind: str = "invalid_request_error") -> Message:
    """An ``error`` event."""
    return {"type": "error", "error": {"type": kind, "code": err.code, "message": str(err), "param": err.param,
                                       "event_id": err.event_id}}
