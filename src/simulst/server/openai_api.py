"""OpenAI-compatible endpoints for whole files: ``POST /v1/audio/transcriptions`` and ``/v1/audio/translations``.

Multipart form fields as OpenAI's: ``file`` (wav, flac, ogg, mp3: what libsndfile reads), ``model`` (the loaded
model's name - or any other, e.g. ``whisper-1``: the server's model), ``language``, ``response_format``
(``json`` | ``text`` | ``srt`` | ``vtt``; ``prompt`` and ``temperature`` are accepted and ignored). The file is
decoded as a stream of the server (with long-form streaming), one chunk per job, so files and live streams
share the batched calls. ``translations`` renders the speech in English: Whisper's translate task on a
multilingual model; an English-only model serves it as a transcription (its speech is English already).
The token, when the server has one, is the client's API key (``Authorization: Bearer``).
"""

from __future__ import annotations

import asyncio
import io
import logging
from typing import TYPE_CHECKING, Any

import numpy as np
import soundfile as sf
import soxr
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.datastructures import UploadFile

from simulst.audio.io import check_audio
from simulst.errors import AudioError, SimulstError
from simulst.server.access import authorized, bearer, json_error
from simulst.server.protocol import StartRequest
from simulst.server.scheduler import Slot
from simulst.streaming.subtitles import render_subtitles

if TYPE_CHECKING:
    from simulst.server.scheduler import Scheduler
    from simulst.server.service import Service

log = logging.getLogger("simulst.server")

FORMATS = ("json", "text", "srt", "vtt")
MAX_FILE_BYTES = 200 * 1024 * 1024


def register(app: FastAPI, service: Service, scheduler: Scheduler) -> None:
    """Add the two endpoints to ``app``."""

    @app.post("/v1/audio/transcriptions")
    async def transcriptions(request: Request) -> Response:
        return await _handle(request, service, scheduler, "transcribe")

    @app.post("/v1/audio/translations")
    async def translations(request: Request) -> Response:
        return await _handle(request, service, scheduler, "translate")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": service.config.model_name, "object": "model",
                                            "owned_by": "simulst"}]}


async def _handle(request: Request, service: Service, scheduler: Scheduler, task: str) -> Response:
    if not authorized(service, bearer(request.headers.get("authorization"))):
        return json_error(401, "a valid token is needed (Authorization: Bearer TOKEN, the client's API key)")
    try:
        form = await request.form(max_part_size=MAX_FILE_BYTES)
    except Exception as err:  # a body that is not multipart form data
        return json_error(400, f"expected multipart/form-data with a file: {err}")
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        return json_error(400, "the form needs a 'file' field with the audio")
    response_format = str(form.get("response_format") or "json")
    if response_format not in FORMATS:
        return json_error(400, f"response_format must be one of {', '.join(FORMATS)} (got {response_format!r})")
    language = str(form.get("language") or "") or None
    if task == "translate" and not service.multilingual:
        task = "transcribe"  # an English-only model: its speech is English already
    data = await upload.read()
    try:
        audio = _decode(data, service.sample_rate)
    except SimulstError as err:
        return json_error(400, str(err))
    if not scheduler.reserve():
        return json_error(503, f"the server is full ({scheduler.max_streams} streams); try again later")
    slot: Slot | None = None
    try:
        start = StartRequest(service.sample_rate, task, language)
        opened = await asyncio.to_thread(service.open, start)
        slot = Slot(opened, start, service.sample_rate, service.config.limits, live=False,
                    transcripts=service.config.transcripts)
        slot.add(audio)
        slot.end()
        scheduler.add(slot)
        final = await _final(slot)
    except SimulstError as err:
        return json_error(400, str(err))
    finally:
        if slot is not None:
            scheduler.remove(slot)
        scheduler.release()
    if final.get("type") == "error":
        return json_error(500, str(final["message"]))
    text = str(final["text"]).strip()
    log.info("file %s (%s, %.1f s): %d characters", slot.id, task, audio.shape[0] / service.sample_rate, len(text))
    if response_format == "text":
        return PlainTextResponse(text + "\n")
    if response_format in ("srt", "vtt"):
        end_ms = audio.shape[0] * 1000.0 / service.sample_rate
        content = render_subtitles(slot.stream.emissions, response_format, end_ms)
        return PlainTextResponse(content, media_type="text/vtt" if response_format == "vtt" else "text/plain")
    return JSONResponse({"text": text})


async def _final(slot: Slot) -> dict[str, Any]:
    """Wait for the slot's final (or error) message."""
    while True:
        message = await slot.outbox.get()
        if message is None:
            return {"type": "error", "message": "the stream ended without a result"}
        if isinstance(message, dict) and message["type"] in ("final", "error"):
            return message


def _decode(data: bytes, rate: int) -> np.ndarray:
    """Mono float32 audio at ``rate`` from an uploaded file's bytes."""
    if not data:
        raise AudioError("the uploaded file is empty")
    try:
        audio, file_rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except Exception as err:  # libsndfile's errors are plain RuntimeErrors / LibsndfileErrors
        raise AudioError(f"the uploaded file is not audio that libsndfile reads (wav, flac, ogg, mp3): {err}") from err
    mono = audio.mean(axis=1)
    if file_rate != rate:
        mono = soxr.resample(mono, file_rate, rate).astype(np.float32)
    check_audio(mono, "the uploaded audio")
    return np.ascontiguousarray(mono, dtype=np.float32)
