"""``simulst serve`` over real sockets with the real Whisper tiny.en: the websocket protocol, every bad input of
the robustness list answered to its client alone, the stream limit, the token, the transcripts, the cascade with
speech, and the OpenAI endpoints through the official ``openai`` client."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
import soxr
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from simulst.models.loading import load_model
from simulst.models.whisper import WhisperModel
from simulst.server.app import create_app
from simulst.server.client import ClientResult, pcm16, stream_audio
from simulst.server.protocol import Limits, StartRequest
from simulst.server.service import OpenedStream, ServerConfig, Service
from tests.server_fixtures import Running, messages, serving
from tests.shared_assets import JFK, needs_shared, phrase
from tests.shared_assets import JFK_PHRASE as PHRASE

pytestmark = [needs_shared, pytest.mark.real]

FAST = Limits(max_speed=1000.0, burst_s=1000.0)  # clients may send as fast as they like
# The websocket close codes a client sees (RFC 6455, section 7.4.1): the protocol's contract, so spelled out here.
NORMAL_CLOSURE, POLICY_VIOLATION, INTERNAL_ERROR, TRY_AGAIN_LATER = 1000, 1008, 1011, 1013
WHISPER_RATE = 16000  # Hz: the rate the server asks its clients for (Whisper's), and jfk.wav's own


class FaultyService(Service):
    """A service whose ``hold-9`` streams fail inside the model, at their first encode (an injected fault)."""

    def open(self, start: StartRequest) -> OpenedStream:
        if start.policy != "hold-9":
            return super().open(start)
        opened = super().open(dataclasses.replace(start, policy="hold-2"))
        session = opened.stream
        model = session.model  # type: ignore[attr-defined]

        def encode(audio: np.ndarray, costs: Any, *rest: Any) -> Any:
            raise RuntimeError("injected model failure")

        failing = _FailingView(model, encode)
        session.model = session.decoder.model = failing  # type: ignore[attr-defined]  # (the decoder encodes)
        return opened


class _FailingView:
    """The stream's model with a failing ``encode`` (everything else passes through)."""

    def __init__(self, model: Any, encode: Any) -> None:
        self._model = model
        self.encode = encode

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


@pytest.fixture(scope="module")
def model() -> WhisperModel:
    return load_model()


@pytest.fixture(scope="module")
def transcripts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("transcripts")


@pytest.fixture(scope="module")
def server(model: WhisperModel, transcripts: Path) -> Iterator[Running]:
    service = FaultyService(model, ServerConfig(limits=FAST, transcripts=transcripts, max_streams=8))
    with serving(create_app(service)) as running:
        yield running


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def exchange(url: str, sends: list[str | bytes], wait_s: float = 20.0, headers: dict[str, str] | None = None,
                   subprotocols: list[str] | None = None) -> tuple[list[dict[str, Any]], int | None]:
    """Send messages, then collect the server's messages until it closes; returns them and the close code."""
    async with connect(url, additional_headers=headers, subprotocols=subprotocols) as ws:  # type: ignore[arg-type]
        try:
            for message in sends:
                await ws.send(message)
        except ConnectionClosed:
            pass  # (the server may refuse before reading everything; its messages are still read below)
        return await messages(ws, wait_s)  # until it closes, or still open after wait_s


# ------------------------------------------------------------------------------------------- a good stream
def test_live_stream_transcribes_and_keeps_a_transcript(server: Running, jfk: np.ndarray, transcripts: Path) -> None:
    before = set(transcripts.iterdir())
    result: ClientResult = run(stream_audio(server.ws, jfk, 16000, {"policy": "la-2", "chunk_ms": 1000}))
    assert result.error is None and result.close_code == NORMAL_CLOSURE
    assert result.ready is not None and result.ready["channels"] == ["source"]
    assert PHRASE.search(phrase(result.text))
    assert "".join(m["text"] for m in result.emissions) == result.final["text"]  # type: ignore[index]
    sources = [m["source_ms"] for m in result.emissions]
    assert sources == sorted(sources) and len(sources) >= 2  # committed while streaming, in order
    assert all(m["elapsed_ms"] >= 0 and m["channel"] == "source" for m in result.emissions)
    [log] = set(transcripts.iterdir()) - before  # flushed per emission: one JSON line each, then the final
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [m["text"] for m in lines if m["type"] == "emission"] == [m["text"] for m in result.emissions]
    assert lines[-1]["type"] == "final" and lines[-1]["text"] == result.text


def test_any_client_rate_is_resampled(server: Running, jfk: np.ndarray) -> None:
    audio = soxr.resample(jfk, 16000, 44100).astype(np.float32)
    result = run(stream_audio(server.ws, audio, 44100, {"chunk_ms": 2000}, frame_ms=250, realtime=False))
    assert result.error is None
    assert PHRASE.search(phrase(result.text))
    assert abs(result.final["source_ms"] - 1000 * len(jfk) / 16000) < 20  # type: ignore[index]


def test_cascade_stream_sends_both_channels_and_speech(server: Running, jfk: np.ndarray) -> None:
    result = run(stream_audio(server.ws, jfk, 16000, {"to": "es", "speech": True}, realtime=False))
    assert result.error is None, result.error
    assert result.ready is not None and result.ready["channels"] == ["source", "target"]
    assert PHRASE.search(phrase("".join(m["text"] for m in result.channel("source"))))
    target = "".join(m["text"] for m in result.channel("target"))
    assert target == result.text and "país" in target.lower()
    assert result.speech and all(len(frame) % 2 == 0 and len(frame) > 1000 for frame in result.speech)


# ------------------------------------------------------------------------------------------- bad clients
START = json.dumps({"type": "start"})


@pytest.mark.parametrize(("sends", "message"), [
    (["{not json"], "malformed JSON"),
    (["[1, 2]"], "JSON object"),
    ([b"\x00\x01" * 100], "audio before the start message"),
    ([json.dumps({"type": "end"})], "first message must be"),
    ([json.dumps({"type": "start", "sample_rate": 5})], "sample_rate must be"),
    ([json.dumps({"type": "start", "sample_rate": 10**9})], "sample_rate must be"),
    ([json.dumps({"type": "start", "sample_rate": "16000"})], "sample_rate must be"),
    ([json.dumps({"type": "start", "chunk_ms": 1})], "chunk_ms must be"),
    ([json.dumps({"type": "start", "policy": "la-x"})], "unknown policy"),
    ([json.dumps({"type": "start", "colour": "red"})], "unknown start field"),
    ([json.dumps({"type": "start", "prompt": ["Kennedy"]})], "prompt must be a string"),
    ([json.dumps({"type": "start", "task": "translate"})], "English-only"),
    ([json.dumps({"type": "start", "policy": "ctc"})], "CTC head"),
    ([json.dumps({"type": "start", "to": "es", "language": "auto"})], "needs the source language"),
    ([START, b"\x00\x00\x00"], "whole 16-bit samples"),
    ([START, b"\x00\x00" * 16000 * 3], "at most 2000 ms"),
    ([START, START], "started already"),
    ([START, json.dumps({"type": "pause"})], "unknown message type"),
    ([START, "x" * 5000], "longer than 4096 bytes"),
])
def test_bad_input_gets_a_clear_error_and_a_close(server: Running, sends: list[str | bytes], message: str) -> None:
    received, code = run(exchange(server.ws, sends))
    errors = [m["message"] for m in received if m["type"] == "error"]
    assert len(errors) == 1 and message in errors[0], received
    assert code == POLICY_VIOLATION


def test_a_flood_is_cut_off(model: WhisperModel, jfk: np.ndarray) -> None:
    service = Service(model, ServerConfig(limits=Limits(max_speed=2.0, burst_s=5.0)))
    with serving(create_app(service)) as running:
        result = run(stream_audio(running.ws, np.concatenate([jfk, jfk]), 16000, frame_ms=1000, realtime=False))
    assert result.error is not None and "faster than 2x real time" in result.error
    assert result.close_code == POLICY_VIOLATION


def test_faults_leave_other_streams_unchanged(server: Running, jfk: np.ndarray) -> None:
    """A file request decodes while clients misbehave, disconnect mid-stream and fail inside the model: its
    output equals its output alone, the failing stream gets its error, and the server stays up."""
    wav = io.BytesIO()
    sf.write(wav, jfk[: 16000 * 5], 16000, format="WAV")  # "And so my fellow Americans, ask not"

    async def file_request() -> str:
        async with httpx.AsyncClient(timeout=120) as client:
            response = await client.post(f"{server.http}/v1/audio/transcriptions",
                                         files={"file": ("jfk.wav", wav.getvalue(), "audio/wav")},
                                         data={"model": "whisper-1", "response_format": "text"})
            response.raise_for_status()
            return response.text

    async def abrupt_disconnect() -> None:
        async with connect(server.ws) as ws:
            await ws.send(START)
            await ws.recv()
            for pos in range(0, 3 * 16000, 1600):
                await ws.send(pcm16(jfk[pos : pos + 1600]))
            await asyncio.sleep(0.3)
            ws.transport.abort()  # the TCP connection drops, no close handshake

    async def model_failure() -> ClientResult:
        return await stream_audio(server.ws, jfk, 16000, {"policy": "hold-9"}, frame_ms=500, realtime=False)

    async def together() -> tuple[str, ClientResult, list[Any]]:
        bad = [exchange(server.ws, sends) for sends in (["{oops"], [b"\x01"], [START, b"\x00"])]
        text, failed, *rest = await asyncio.gather(file_request(), model_failure(), abrupt_disconnect(), *bad)
        return text, failed, rest

    alone = run(file_request())
    text, failed, rest = run(together())
    assert "fellow americans" in phrase(alone) and text == alone
    assert failed.error is not None and "injected model failure" in failed.error and failed.close_code == INTERNAL_ERROR
    assert all(received and received[-1]["type"] == "error" for received, _ in rest[1:])
    health = httpx.get(f"{server.http}/health").json()
    assert health["status"] == "ok"
    assert run(file_request()) == alone  # and it goes on serving


def test_max_streams_refuses_clearly(model: WhisperModel) -> None:
    service = Service(model, ServerConfig(max_streams=1, limits=FAST))

    async def scenario(url: str) -> tuple[list[dict[str, Any]], int | None, str | None]:
        async with connect(url) as first:
            await first.send(START)
            assert json.loads(await first.recv())["type"] == "ready"
            refused, code = await exchange(url, [START])
        again = await exchange(url, [START, json.dumps({"type": "end"})])
        return refused, code, again[0][0]["type"]

    with serving(create_app(service)) as running:
        refused, code, later = run(scenario(running.ws))
    assert code == TRY_AGAIN_LATER and "server is full (1 streams)" in refused[0]["message"]
    assert later == "ready"  # the place is free again once the first client left


def test_token_is_required_when_set(model: WhisperModel, jfk: np.ndarray) -> None:
    service = Service(model, ServerConfig(token="s3cret", limits=FAST))
    wav = io.BytesIO()
    sf.write(wav, jfk[: 16000 * 4], 16000, format="WAV")
    end = json.dumps({"type": "end"})
    with serving(create_app(service)) as running:
        refused, code = run(exchange(running.ws, [START]))
        assert code == POLICY_VIOLATION and "valid token" in refused[0]["message"]
        wrong, _ = run(exchange(running.ws, [START], headers={"Authorization": "Bearer nope"}))
        assert "valid token" in wrong[0]["message"]
        ok, code = run(exchange(running.ws, [START, end], headers={"Authorization": "Bearer s3cret"}))
        assert [m["type"] for m in ok] == ["ready", "final"] and code == NORMAL_CLOSURE
        # a browser's websocket: the token as a subprotocol beside "simulst", which the server accepts
        ok, code = run(exchange(running.ws, [START, end], subprotocols=["simulst", "bearer.s3cret"]))
        assert [m["type"] for m in ok] == ["ready", "final"] and code == NORMAL_CLOSURE
        # never in the URL (it would land in logs), nor in the start message
        in_url, code = run(exchange(running.ws + "?token=s3cret", [START]))
        assert code == POLICY_VIOLATION and "not accepted in the URL" in in_url[0]["message"]
        in_start, code = run(exchange(running.ws, [json.dumps({"type": "start", "token": "s3cret"})]))
        assert code == POLICY_VIOLATION and "valid token" in in_start[0]["message"]
        in_start, code = run(exchange(running.ws, [json.dumps({"type": "start", "token": "s3cret"})],
                                      headers={"Authorization": "Bearer s3cret"}))
        assert code == POLICY_VIOLATION and "not accepted in the start message" in in_start[0]["message"]
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{running.http}/v1", api_key="nope").audio.transcriptions.create(
                model="whisper-1", file=("a.wav", wav.getvalue()))
        text = openai.OpenAI(base_url=f"{running.http}/v1", api_key="s3cret").audio.transcriptions.create(
            model="whisper-1", file=("a.wav", wav.getvalue()), response_format="text")
        assert "fellow americans" in phrase(str(text))


# ------------------------------------------------------------------------------------------- OpenAI endpoints
def test_openai_client_transcribes_and_translates_files(server: Running, jfk: np.ndarray) -> None:
    client = openai.OpenAI(base_url=f"{server.http}/v1", api_key="unused")
    with JFK.open("rb") as f:
        result = client.audio.transcriptions.create(model="whisper-tiny.en", file=f)
    assert PHRASE.search(phrase(result.text))
    short = io.BytesIO()  # the first 4 s ("And so my fellow Americans"), as FLAC
    sf.write(short, jfk[: 16000 * 4], 16000, format="FLAC")
    upload = ("short.flac", short.getvalue())
    text = client.audio.transcriptions.create(model="whisper-1", file=upload, response_format="text", language="en")
    assert "fellow americans" in phrase(str(text))
    srt = str(client.audio.transcriptions.create(model="whisper-1", file=upload, response_format="srt"))
    assert srt.startswith("1\n00:00:") and "-->" in srt and "Americans" in srt
    vtt = str(client.audio.transcriptions.create(model="whisper-1", file=upload, response_format="vtt"))
    assert vtt.startswith("WEBVTT") and "Americans" in vtt
    # an English-only model: the English speech is its own translation
    assert phrase(client.audio.translations.create(model="whisper-1", file=upload).text) == phrase(str(text))
    with pytest.raises(openai.BadRequestError, match="not audio"):
        client.audio.transcriptions.create(model="whisper-1", file=("notes.wav", b"this is not audio"))
    with pytest.raises(openai.BadRequestError, match="response_format"), JFK.open("rb") as f:
        client.audio.transcriptions.create(model="whisper-1", file=f, response_format="xml")  # type: ignore[arg-type]
    assert client.models.list().data[0].id == "whisper-tiny.en"


def test_page_and_config_are_served(server: Running) -> None:
    config = httpx.get(f"{server.http}/api/config").json()
    assert config["sample_rate"] == WHISPER_RATE and config["tasks"] == ["transcribe"] and config["batched"] is True
    page = httpx.get(f"{server.http}/")
    assert page.status_code == httpx.codes.OK and "<html" in page.text.lower()
