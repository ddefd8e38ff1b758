"""OpenAI's audio API for whole files: ``POST /v1/audio/transcriptions`` and ``/v1/audio/translations``, and
``GET /v1/models[/{id}]``.

**The form** is OpenAI's multipart form: ``file`` (any audio libsndfile or FFmpeg decodes: wav, flac, mp3, m4a,
mp4, webm, ogg / opus, ...), ``model`` (any name, e.g. ``whisper-1``: the server's model answers), ``language``,
``prompt``, ``response_format`` (``json`` | ``text`` | ``srt`` | ``vtt`` | ``verbose_json``),
``timestamp_granularities[]`` (``segment`` and / or ``word``, with ``verbose_json``), ``temperature`` (accepted
from 0 to 1; the decoding is deterministic, so it changes nothing) and ``stream``.

**Decoding.** The file is decoded as a stream of the server (long-form streaming), one chunk per job, so files
and live streams share the batched model calls; its committed text is never retracted. ``translations`` renders
the speech in English: Whisper's translate task on a multilingual model; an English-only model serves it as a
transcription (its speech is English already).

**prompt** is the text said before the file's audio (openai-whisper's initial prompt): the stream is opened with it
(``StartRequest.prompt``, :class:`~simulst.streaming.prompt.PromptBuilder`'s initial prompt) and it conditions every
decode as previous text, carried before the stream's own previous text.

**stream=true** answers server-sent events as the file is decoded: a ``transcript.text.delta`` per committed
emission (the increments concatenate to the text), then one ``transcript.text.done`` with the whole text; a
failure mid-stream is one ``{"error": ...}`` event. A client that disconnects cancels the decoding: its stream
leaves the scheduler, no further chunk of it is decoded.

**verbose_json** gives ``task``, ``language``, ``duration`` (s), ``text``, ``segments`` (the emissions grouped into
sentences: a segment ends with an emission whose text ends a sentence, where the next starts a new word;
``start`` / ``end`` are the spoken times of its words, ``tokens`` its committed tokens, ``temperature`` 0,
``compression_ratio`` as openai-whisper computes it), and with ``timestamp_granularities[]=word`` the ``words``
with their spoken times. ``avg_logprob`` and ``no_speech_prob`` are null: the committed emissions carry no
probabilities. A search keeps a hypothesis's log-probability only as one sum over the tokens it searched
(``Hypothesis.score``), and a policy commits a prefix of them (the tail is searched again in the next chunk, where
the committed tokens are forced and not scored), so the committed tokens' own log-probabilities are never kept;
Whisper's ``no_speech_prob`` is computed by the no-speech guard (only when it is on) for a decode's whole buffer,
not for a segment, and is not kept either. Filling them needs the search and the commit to record them (the
engine: ``Hypothesis``, ``Emission``), or a decoder pass per segment over its committed tokens; neither is done.
``include[]=logprobs`` is refused (as OpenAI refuses it for ``whisper-1``): the commits keep no log-probabilities.

**Limits.** The body is bounded by ``--max-upload-mb`` before it is read (:class:`~simulst.server.limits.Guard`);
the file's audio by ``--max-audio-s``: it is decoded only up to the limit - the decoder stops as soon as the audio
passes it (:func:`~simulst.audio.io.read_audio_bytes`) - and answered 413 ``audio_too_long``.

**Errors** are OpenAI's ``{"error": {"message", "type", "param", "code"}}`` on every path of the app, FastAPI's
own 404 / 405 / 422 and unhandled failures included (:func:`~simulst.server.access.json_error`). The token, when
the server has one, is the client's API key (``Authorization: Bearer``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import time
import zlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException

from simulst.audio.io import AudioTooLong, read_audio_bytes
from simulst.config.stream import MAX_PREVIOUS_TOKENS
from simulst.errors import OptionError, SimulstError
from simulst.server.access import authorized, bearer, error_body, json_error
from simulst.server.protocol import ProtocolError, StartRequest
from simulst.server.scheduler import Slot
from simulst.streaming.commit import SENTENCE_ENDS
from simulst.streaming.subtitles import render_subtitles
from simulst.types import Emission, spoken_words

if TYPE_CHECKING:
    from simulst.server.scheduler import Scheduler
    from simulst.server.service import Service

log = logging.getLogger("simulst.server")

FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
STREAMED_FORMATS = ("json", "text")  # stream=true answers events, whose text is the same in either
GRANULARITIES = ("segment", "word")
MAX_PROMPT_TOKENS = MAX_PREVIOUS_TOKENS  # openai-whisper's limit on previous text (the prompt's last tokens)
_CLOSING = "\"')]}»”’"


class RequestError(SimulstError):
    """A request the API refuses: its HTTP status, message and the form field at fault."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.param, self.code = status, param, code

    def response(self) -> JSONResponse:
        """The OpenAI-shaped error response."""
        return json_error(self.status, str(self), self.param, self.code)


@dataclass(frozen=True)
class AudioRequest:
    """A validated transcription or translation form (the file not decoded yet)."""

    task: str
    data: bytes
    filename: str
    language: str | None = None
    prompt: str | None = None
    response_format: str = "json"
    words: bool = False
    segments: bool = True
    stream: bool = False


def register(app: FastAPI, service: Service, scheduler: Scheduler) -> None:
    """Add the endpoints to ``app``, and answer every error of the app in OpenAI's shape."""
    created = int(time.time())

    @app.post("/v1/audio/transcriptions")
    async def transcriptions(request: Request) -> Response:
        return await _handle(request, service, scheduler, "transcribe")

    @app.post("/v1/audio/translations")
    async def translations(request: Request) -> Response:
        return await _handle(request, service, scheduler, "translate")

    def model_object() -> dict[str, Any]:
        return {"id": service.config.model_name, "object": "model", "created": created, "owned_by": "simulst"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_object()]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> Response:
        if model_id != service.config.model_name:
            return json_error(404, f"the model {model_id!r} does not exist; this server serves "
                                   f"{service.config.model_name!r}", "model", "model_not_found")
        return JSONResponse(model_object())

    _openai_errors(app)


def _openai_errors(app: FastAPI) -> None:
    """FastAPI's own errors (an unknown path, a wrong method, invalid parameters, a failure) in OpenAI's shape."""

    async def http_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        return json_error(exc.status_code, str(exc.detail), headers=dict(exc.headers or {}))

    async def invalid(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {}
        where = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path", "header")]
        return json_error(400, f"invalid request: {first.get('msg', exc)}", ".".join(where) or None)

    async def failed(_: Request, exc: Exception) -> Response:
        log.error("unhandled %s: %s", type(exc).__name__, exc)
        return json_error(500, f"the server failed: {type(exc).__name__}")

    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(Exception, failed)


# ---------------------------------------------------------------------------------------------------- the form
async def _handle(request: Request, service: Service, scheduler: Scheduler, task: str) -> Response:
    if not authorized(service, bearer(request.headers.get("authorization"))):
        return json_error(401, "a valid token is needed (Authorization: Bearer TOKEN, the client's API key)")
    try:
        parsed = await _parse(request, task if service.multilingual else "transcribe")
        audio = await asyncio.to_thread(read_audio_bytes, parsed.data, service.sample_rate,
                                        f"the uploaded file {parsed.filename!r}", service.config.limits.max_audio_s)
    except RequestError as err:
        return err.response()
    except AudioTooLong as err:  # (its decoding stopped at the limit)
        return json_error(413, f"the audio is longer than this server's limit of {err.limit_s:g} s per stream or "
                               "file (its operator sets it with --max-audio-s)", "file", "audio_too_long")
    except SimulstError as err:  # the audio
        return json_error(400, str(err), "file")
    if not scheduler.reserve():
        return json_error(503, f"the server is full ({scheduler.max_streams} streams); try again later")
    release = _Release(scheduler)
    try:
        slot = await _open(service, scheduler, parsed, audio)
    except RequestError as err:
        release()
        return err.response()
    except BaseException:
        release()
        raise
    release.slot = slot
    if parsed.stream:
        return StreamingResponse(_events(slot, release), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
                                 background=BackgroundTask(release))
    try:
        final = await _final_unless_gone(slot, request)
    finally:
        release()
    if final is None:  # the client left: its stream was removed, nobody to answer
        log.info("file %s: the client left before the end", slot.id)
        return Response(status_code=499)
    if final.get("type") == "error":
        return json_error(500, str(final["message"]))
    duration = audio.shape[0] / service.sample_rate
    log.info("file %s (%s, %.1f s): %d characters", slot.id, parsed.task, duration, len(str(final["text"])))
    return _render(parsed, slot, service, str(final["text"]).strip(), duration)


async def _parse(request: Request, task: str) -> AudioRequest:
    try:
        form = await request.form()
    except Exception as err:  # a body that is not multipart form data
        raise RequestError(400, f"expected multipart/form-data with a file: {err}") from err
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise RequestError(400, "the form needs a 'file' field with the audio", "file")
    response_format = _text(form, "response_format") or "json"
    if response_format not in FORMATS:
        raise RequestError(400, f"response_format must be one of {', '.join(FORMATS)} (got {response_format!r})",
                           "response_format")
    _temperature(_text(form, "temperature"))
    granularities = [str(g) for key in ("timestamp_granularities[]", "timestamp_granularities")
                     for g in form.getlist(key)]
    unknown = sorted(set(granularities) - set(GRANULARITIES))
    if unknown:
        raise RequestError(400, f"timestamp_granularities[] takes {' and '.join(GRANULARITIES)}, not "
                                f"{', '.join(unknown)}", "timestamp_granularities[]")
    if granularities and response_format != "verbose_json":
        raise RequestError(400, "timestamp_granularities[] needs response_format verbose_json",
                           "timestamp_granularities[]")
    stream = _flag(_text(form, "stream"))
    if stream and response_format not in STREAMED_FORMATS:
        raise RequestError(400, f"stream=true answers text events: use response_format json or text (got "
                                f"{response_format!r})", "stream")
    if "logprobs" in [str(i) for i in form.getlist("include[]") + form.getlist("include")]:
        raise RequestError(400, "include[]=logprobs is not served: the streamed commits keep no log-probabilities",
                           "include[]")
    return AudioRequest(task, await upload.read(), upload.filename or "file", _text(form, "language"),
                        _text(form, "prompt"), response_format, words="word" in granularities,
                        segments="segment" in granularities or not granularities, stream=stream)


def _text(form: FormData, key: str) -> str | None:
    value = form.get(key)
    if value is None or isinstance(value, UploadFile):
        return None
    return value.strip() or None


def _temperature(value: str | None) -> None:
    """Accept a temperature from 0 to 1 (OpenAI's range); it changes nothing here."""
    if value is None:
        return
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not 0.0 <= number <= 1.0:
        raise RequestError(400, f"temperature must be a number from 0 to 1 (got {value!r})", "temperature")


def _flag(value: str | None) -> bool:
    if value is None or value.lower() in ("false", "0", "no"):
        return False
    if value.lower() in ("true", "1", "yes"):
        return True
    raise RequestError(400, f"stream must be true or false (got {value!r})", "stream")


# ---------------------------------------------------------------------------------------------------- decoding
class _Release:
    """Gives the request's scheduler place back once (its slot, if any, leaves the scheduler: no more chunks of
    it are decoded)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.slot: Slot | None = None
        self.done = False

    def __call__(self) -> None:
        if self.done:
            return
        self.done = True
        if self.slot is not None:
            self.scheduler.remove(self.slot)
        self.scheduler.release()


async def _open(service: Service, scheduler: Scheduler, parsed: AudioRequest, audio: np.ndarray) -> Slot:
    """The file's stream, added to the scheduler with all its audio."""
    start = StartRequest(service.sample_rate, parsed.task, parsed.language, prompt=parsed.prompt)
    try:
        opened = await asyncio.to_thread(service.open, start)
    except OptionError as err:
        raise RequestError(400, str(err), "language" if parsed.language else None) from err
    except SimulstError as err:
        raise RequestError(400, str(err)) from err
    slot = Slot(opened, start, service.sample_rate, service.config.limits, live=False,
                transcripts=service.config.transcripts)
    try:
        slot.add(audio)
    except ProtocolError as err:  # the server's limit on audio length
        slot.close()
        raise RequestError(413, str(err), "file", "audio_too_long") from err
    slot.end()
    scheduler.add(slot)
    return slot


async def _final_unless_gone(slot: Slot, request: Request) -> dict[str, Any] | None:
    """The slot's final (or error) message; None if the client disconnects first."""
    final = asyncio.ensure_future(_final(slot))
    gone = asyncio.ensure_future(_disconnect(request))
    try:
        await asyncio.wait({final, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not final.done():
            final.cancel()
    return final.result() if final.done() and not final.cancelled() else None


async def _disconnect(request: Request) -> None:
    """Return when the client disconnects (its body has been read: the next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _final(slot: Slot) -> dict[str, Any]:
    """Wait for the slot's final (or error) message."""
    while True:
        message = await slot.outbox.get()
        if message is None:
            return {"type": "error", "message": "the stream ended without a result"}
        if isinstance(message, dict) and message["type"] in ("final", "error"):
            return message


async def _events(slot: Slot, release: Callable[[], None]) -> AsyncIterator[str]:
    """Server-sent events: a delta per emission of the output channel as it is committed, then the whole text."""
    channel = slot.opened.channels[-1]
    started = False
    try:
        while True:
            message = await slot.outbox.get()
            if message is None:
                yield _sse(error_body(500, "the stream ended without a result"))
                return
            if not isinstance(message, dict):
                continue
            if message["type"] == "emission" and message["channel"] == channel:
                delta = str(message["text"]) if started else str(message["text"]).lstrip()
                if delta:
                    started = True
                    yield _sse({"type": "transcript.text.delta", "delta": delta})
            elif message["type"] == "final":
                yield _sse({"type": "transcript.text.done", "text": str(message["text"]).strip()})
                return
            elif message["type"] == "error":
                yield _sse(error_body(500, str(message["message"])))
                return
    finally:
        release()


def _sse(event: dict[str, Any]) -> str:
    return f"data: {json.dumps(event, ensure_ascii=False)}\n\n"


# ---------------------------------------------------------------------------------------------------- answers
def _render(parsed: AudioRequest, slot: Slot, service: Service, text: str, duration: float) -> Response:
    emissions = slot.stream.emissions
    if parsed.response_format == "text":
        return PlainTextResponse(text + "\n")
    if parsed.response_format in ("srt", "vtt"):
        content = render_subtitles(emissions, parsed.response_format, duration * 1000.0)
        return PlainTextResponse(content, media_type="text/vtt" if parsed.response_format == "vtt" else "text/plain")
    usage = {"type": "duration", "seconds": round(duration, 3)}
    if parsed.response_format == "json":
        return JSONResponse({"text": text, "usage": usage})
    body: dict[str, Any] = {"task": "translate" if parsed.task == "translate" else "transcribe",
                            "language": _language_name(_language(slot, service, parsed.language)),
                            "duration": round(duration, 3), "text": text}
    if parsed.segments:
        body["segments"] = segments(emissions)
    if parsed.words:
        body["words"] = words(emissions)
    body["usage"] = usage
    return JSONResponse(body)


def segments(emissions: Sequence[Emission]) -> list[dict[str, Any]]:
    """verbose_json's segments: consecutive emissions up to one whose text ends a sentence (and the next starts a
    word: ``"3."`` then ``"5 percent"`` is one sentence), or the last."""
    out: list[dict[str, Any]] = []
    group: list[Emission] = []
    previous_end = 0.0
    for i, emission in enumerate(emissions):
        group.append(emission)
        following = emissions[i + 1].text if i + 1 < len(emissions) else " "
        ends = emission.text.rstrip().rstrip(_CLOSING).endswith(SENTENCE_ENDS)
        if not (ends and following[:1].isspace()) and i + 1 < len(emissions):
            continue
        text = "".join(e.text for e in group)
        if text.strip():
            start, end = _span(group, previous_end)
            previous_end = end
            out.append({"id": len(out), "seek": round(start * 100), "start": start, "end": end, "text": text,
                        "tokens": [t for e in group for t in e.tokens], "temperature": 0.0,
                        "avg_logprob": None, "compression_ratio": compression_ratio(text),
                        "no_speech_prob": None})
        group = []
    return out


def words(emissions: Sequence[Emission]) -> list[dict[str, Any]]:
    """verbose_json's words: the stream's whole words (a word split across emissions is one) with their spoken
    times (a word without timing is left out)."""
    return [{"word": word.text, "start": round(word.start_ms / 1000.0, 3), "end": round(word.end_ms / 1000.0, 3)}
            for word in spoken_words(emissions) if word.start_ms is not None and word.end_ms is not None]


def _span(group: Sequence[Emission], previous_end: float) -> tuple[float, float]:
    """The seconds a group of emissions was spoken in: its first word's start to its last word's end; where no
    emission of it has spoken times, the previous segment's end and its commit time (``source_ms``) bound it."""
    starts = [e.start_ms for e in group if e.start_ms is not None]
    ends = [e.end_ms for e in group if e.end_ms is not None]
    start = min(starts) / 1000.0 if starts else previous_end
    end = max(ends) / 1000.0 if ends else max(e.source_ms for e in group) / 1000.0
    return round(start, 3), round(max(start, end), 3)


def compression_ratio(text: str) -> float:
    """openai-whisper's compression ratio: the text's UTF-8 bytes over their zlib-compressed bytes."""
    data = text.encode("utf-8")
    return round(len(data) / len(zlib.compress(data)), 3) if data else 0.0


def _language(slot: Slot, service: Service, requested: str | None) -> str:
    """The stream's language code: the client's, the server's default, the model's own, or detected."""
    language = requested or service.config.default_language
    if language and language != "auto":
        return language
    model = service.model
    codes = {token: code for code, token in getattr(model, "language_ids", {}).items()}
    fixed = getattr(getattr(slot.stream, "prompt", None), "fixed", None) or ()
    detected = next((codes[t] for t in fixed if t in codes), None)
    return detected or getattr(model, "language", None) or "en"


@functools.cache
def _language_names() -> dict[str, str]:
    from transformers.models.whisper.tokenization_whisper import LANGUAGES  # lazy: transformers loads slowly

    return dict(LANGUAGES)


def _language_name(code: str) -> str:
    """OpenAI's language value: Whisper's English name of the language (``english``), else the code."""
    try:
        return _language_names().get(code, code)
    except ImportError:  # pragma: no cover - transformers is a dependency
        return code
