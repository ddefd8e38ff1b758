"""The Realtime-API transcription endpoint (``/v1/realtime?intent=transcription``) with the real Whisper tiny.en:
the official ``openai`` SDK's realtime client pointed at the server, every server event validated against the
SDK's published schema (``openai.types.realtime.RealtimeServerEvent``); the event sequence of server-VAD items,
manual commits, G.711 input, and errors in the Realtime shape."""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import soxr
from openai.types.realtime import RealtimeServerEvent
from pydantic import TypeAdapter
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from simulst.audio.io import load_audio
from simulst.models.loading import load_model
from simulst.models.whisper import WhisperModel
from simulst.server.app import create_app
from simulst.server.protocol import Limits
from simulst.server.realtime import _ALAW, _ULAW, pcm16
from simulst.server.service import ServerConfig, Service
from simulst.streaming.prompt import initial_prompt
from tests.server_fixtures import Running, metric, serving
from tests.shared_assets import JFK, needs_shared, phrase

pytestmark = [needs_shared, pytest.mark.real]

FAST = Limits(max_speed=1000.0, burst_s=1000.0)
SCHEMA: TypeAdapter[Any] = TypeAdapter(RealtimeServerEvent)
OPENAI_RATE = 24000
DELTA, COMPLETED = ("conversation.item.input_audio_transcription.delta",
                    "conversation.item.input_audio_transcription.completed")


def pcm(audio: np.ndarray, rate: int = OPENAI_RATE) -> bytes:
    """16 kHz float audio as 16-bit PCM at ``rate``."""
    if rate != 16000:
        audio = soxr.resample(audio, 16000, rate)
    return (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(scope="module")
def model() -> WhisperModel:
    return load_model()


@pytest.fixture(scope="module")
def jfk() -> np.ndarray:
    return load_audio(JFK)


@pytest.fixture(scope="module")
def transcripts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("realtime-transcripts")


@pytest.fixture(scope="module")
def server(model: WhisperModel, transcripts: Path) -> Iterator[Running]:
    service = Service(model, ServerConfig(limits=FAST, transcripts=transcripts, max_streams=4))
    with serving(create_app(service)) as running:
        yield running


def validated(raw: str | bytes) -> dict[str, Any]:
    """A server event, checked against OpenAI's published schema; as a dict."""
    SCHEMA.validate_json(raw)
    return dict(json.loads(raw))


# ------------------------------------------------------------------------------------------------ the SDK client
@pytest.mark.filterwarnings("ignore:connect\\(\\) must be used:DeprecationWarning")  # (inside the SDK)
def test_server_vad_items_with_the_official_client(server: Running, jfk: np.ndarray, transcripts: Path) -> None:
    client = openai.OpenAI(base_url=f"{server.http}/v1", api_key="unused")
    audio = pcm(np.concatenate([jfk, np.zeros(24000, dtype=np.float32)]))  # jfk, then 1.5 s of silence
    events: list[dict[str, Any]] = []
    before = set(transcripts.iterdir())
    with client.realtime.connect(extra_query={"intent": "transcription"}) as connection:
        connection.session.update(session={"type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": OPENAI_RATE},
            "transcription": {"model": "whisper-1", "language": "en"},
            "turn_detection": {"type": "server_vad", "silence_duration_ms": 500, "threshold": 0.5}}}})
        step = OPENAI_RATE // 10 * 2  # 100 ms a message, at about twice the pace of speech
        for pos in range(0, len(audio), step):
            connection.input_audio_buffer.append(audio=b64(audio[pos : pos + step]))
            time.sleep(0.05)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            events.append(validated(connection.recv_bytes()))
            if events[-1]["type"] == COMPLETED and "for your country" in phrase(events[-1]["transcript"]):
                break
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["session.created", "session.updated"]
    session = events[1]["session"]["audio"]["input"]
    assert session["format"] == {"type": "audio/pcm", "rate": OPENAI_RATE}
    assert session["turn_detection"]["silence_duration_ms"] == 500

    items: dict[str, list[dict[str, Any]]] = {}
    for event in events[2:]:
        items.setdefault(event["item_id"], []).append(event)
    assert len(items) >= 3  # jfk's pauses: "And so my fellow Americans" | "ask not" | "what your country ..."
    previous = None
    last_end = 0
    for item_id, item in items.items():
        order = [e["type"] for e in item]
        # speech started, deltas while it is spoken, speech stopped, committed, the segment's last delta, completed
        assert order[0] == "input_audio_buffer.speech_started" and order[-1] == COMPLETED, order
        stopped, committed = order.index("input_audio_buffer.speech_stopped"), order.index(
            "input_audio_buffer.committed")
        assert committed == stopped + 1 and set(order[1:stopped] + order[committed + 1 : -1]) <= {DELTA}
        assert item[-1]["transcript"] == "".join(e["delta"] for e in item if e["type"] == DELTA)
        assert item[committed]["previous_item_id"] == previous
        previous = item_id
        start, end = item[0]["audio_start_ms"], item[stopped]["audio_end_ms"]
        assert last_end <= start < end <= len(audio) / 2 / OPENAI_RATE * 1000
        last_end = end
        assert abs(item[-1]["usage"]["seconds"] - (end - start) / 1000) < 0.01
    said = " ".join(item[-1]["transcript"] for item in items.values())
    assert "and so my fellow americans" in phrase(said) and "what you can do for your country" in phrase(said)
    starts = [item[0]["audio_start_ms"] for item in items.values()]
    assert 150 < starts[0] < 700 and any(2500 < s < 3300 for s in starts)  # jfk's first two phrases
    # one delta per emission of the stream (its transcript log holds the emissions)
    (log,) = set(transcripts.iterdir()) - before
    emissions = [json.loads(line) for line in log.read_text().splitlines()]
    emitted = [e for e in emissions if e["type"] == "emission" and e["text"]]
    assert sum(order == DELTA for order in kinds) == len(emitted)


# ------------------------------------------------------------------------------------------------ raw websocket
def realtime(url: str, headers: dict[str, str] | None = None, query: str = "?intent=transcription",
             subprotocols: list[str] | None = None) -> ClientConnection:
    return connect(url.replace("/ws", "/v1/realtime") + query, additional_headers=headers,
                   subprotocols=subprotocols, open_timeout=30)  # type: ignore[arg-type]


def until(ws: ClientConnection, kind: str, wait_s: float = 60.0) -> list[dict[str, Any]]:
    """The events up to the first of this type (included)."""
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        out.append(validated(ws.recv(timeout=deadline - time.monotonic())))
        if out[-1]["type"] == kind:
            return out
    raise AssertionError(f"no {kind} in {[e['type'] for e in out]}")


def send(ws: ClientConnection, event: dict[str, Any]) -> None:
    ws.send(json.dumps(event))


MANUAL = {"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
    "turn_detection": None, "transcription": {"language": "en"}}}}}


def test_manual_commits_make_one_item_each(server: Running, jfk: np.ndarray) -> None:
    with realtime(server.ws) as ws:
        assert until(ws, "session.created")[0]["session"]["audio"]["input"]["format"]["rate"] == OPENAI_RATE
        send(ws, MANUAL)
        updated = until(ws, "session.updated")[-1]["session"]["audio"]["input"]
        assert updated["turn_detection"] is None
        first, second = jfk[: int(2.8 * 16000)], jfk[int(2.8 * 16000) : int(5.4 * 16000)]
        send(ws, {"type": "input_audio_buffer.append", "audio": b64(pcm(first))})
        send(ws, {"type": "input_audio_buffer.commit", "event_id": "mine"})
        one = until(ws, COMPLETED)
        send(ws, {"type": "input_audio_buffer.append", "audio": b64(pcm(second))})
        send(ws, {"type": "input_audio_buffer.commit"})
        two = until(ws, COMPLETED)
    for item in (one, two):
        kinds = [e["type"] for e in item]
        assert kinds[-2:] == ["input_audio_buffer.committed", COMPLETED] or (
            kinds[-1] == COMPLETED and "input_audio_buffer.committed" in kinds)
        assert not any(k.startswith("input_audio_buffer.speech") for k in kinds)  # no turn detection
    assert phrase(one[-1]["transcript"]) == "and so my fellow americans"
    assert "ask not" in phrase(two[-1]["transcript"])
    assert one[-1]["item_id"] != two[-1]["item_id"]
    committed = next(e for e in two if e["type"] == "input_audio_buffer.committed")
    assert committed["previous_item_id"] == one[-1]["item_id"]
    assert abs(two[-1]["usage"]["seconds"] - 2.6) < 0.05


def test_the_sessions_prompt_opens_its_stream(server: Running, model: WhisperModel, jfk: np.ndarray) -> None:
    """The session's transcription prompt is the initial prompt of each stream it opens (set when it is built)."""
    text = "President Kennedy's inaugural address."
    with realtime(server.ws) as ws:
        send(ws, {"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "turn_detection": None, "transcription": {"language": "en", "prompt": text}}}}})
        assert until(ws, "session.updated")[-1]["session"]["audio"]["input"]["transcription"]["prompt"] == text
        send(ws, {"type": "input_audio_buffer.append", "audio": b64(pcm(jfk[:8000]))})
        send(ws, {"type": "session.update", "session": {}})
        until(ws, "session.updated")  # (the audio is in: the stream is open)
        (slot,) = server.app.state.scheduler.slots.values()
        assert slot.stream.prompt.initial == initial_prompt(model, text)
        send(ws, {"type": "input_audio_buffer.clear"})
        until(ws, "input_audio_buffer.cleared")


@pytest.mark.parametrize("encoding, table", [("audio/pcmu", _ULAW), ("audio/pcma", _ALAW)])
def test_g711_input_at_8khz(server: Running, jfk: np.ndarray, encoding: str, table: np.ndarray) -> None:
    clip = soxr.resample(jfk[: int(2.8 * 16000)], 16000, 8000)
    coded = _g711(clip, table)
    decoded = np.frombuffer(pcm16(encoding, coded), dtype="<i2") / 32768.0
    assert decoded.shape == clip.shape and np.corrcoef(decoded, clip)[0, 1] > 0.999  # G.711's 8-bit levels
    with realtime(server.ws) as ws:
        send(ws, {"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "format": {"type": encoding}, "turn_detection": None}}}})
        format_ = until(ws, "session.updated")[-1]["session"]["audio"]["input"]["format"]
        assert format_ == {"type": encoding}
        send(ws, {"type": "input_audio_buffer.append", "audio": b64(coded)})
        send(ws, {"type": "input_audio_buffer.commit"})
        done = until(ws, COMPLETED)[-1]
    assert "fellow" in phrase(done["transcript"])  # (telephone audio: tiny.en hears "fellow America")


def _g711(audio: np.ndarray, table: np.ndarray) -> bytes:
    """Encode by the nearest level of the decoding table (G.711's levels)."""
    order = np.argsort(table, kind="stable")
    levels = table[order].astype(np.float64)
    x = np.clip(audio, -1, 1) * 32767
    i = np.clip(np.searchsorted(levels, x), 1, len(levels) - 1)
    nearer = np.where(np.abs(levels[i - 1] - x) <= np.abs(levels[i] - x), i - 1, i)
    return order[nearer].astype(np.uint8).tobytes()


def test_g711_tables_are_itu_levels() -> None:
    # the extremes and zeros of G.711 (ITU-T G.711 tables 1a/2a): mu-law 0x00/0x80 = -/+32124, 0xFF = 0;
    # A-law 0x55 = -8, 0xD5 = +8, 0x2A = -32256, 0xAA = +32256
    assert _ULAW[[0x00, 0x80, 0xFF, 0x7F]].tolist() == [-32124, 32124, 0, 0]
    assert _ALAW[[0x55, 0xD5, 0x2A, 0xAA]].tolist() == [-8, 8, -32256, 32256]
    assert len(set(_ULAW.tolist())) == 255 and len(set(_ALAW.tolist())) == 256  # (mu-law has two zeros)


def _error_of(events: list[dict[str, Any]]) -> dict[str, Any]:
    assert events[-1]["type"] == "error", events
    return dict(events[-1]["error"])


def test_bad_events_are_answered_and_the_session_goes_on(server: Running, jfk: np.ndarray) -> None:
    with realtime(server.ws) as ws:
        until(ws, "session.created")
        send(ws, {"type": "response.create", "event_id": "e1"})
        error = _error_of(until(ws, "error"))
        assert error["code"] == "unsupported_event" and error["event_id"] == "e1"
        assert error["type"] == "invalid_request_error"
        ws.send("{not json")
        assert _error_of(until(ws, "error"))["code"] == "invalid_json"
        send(ws, {"type": "input_audio_buffer.append", "audio": "!!not base64!!"})
        assert _error_of(until(ws, "error"))["param"] == "audio"
        send(ws, {"type": "input_audio_buffer.commit"})
        assert _error_of(until(ws, "error"))["code"] == "input_audio_buffer_commit_empty"
        send(ws, {"type": "session.update", "session": {"type": "realtime"}})
        assert _error_of(until(ws, "error"))["param"] == "session.type"
        send(ws, {"type": "session.update", "session": {"audio": {"input": {"format": {"type": "audio/pcm",
                                                                                       "rate": 1000}}}}})
        assert _error_of(until(ws, "error"))["param"] == "session.audio.input.format.rate"
        send(ws, {"type": "session.update", "session": {"audio": {"input": {"turn_detection": {
            "type": "server_vad", "threshold": 3}}}}})
        assert _error_of(until(ws, "error"))["param"] == "session.audio.input.turn_detection.threshold"
        send(ws, MANUAL)
        until(ws, "session.updated")
        send(ws, {"type": "input_audio_buffer.append", "audio": b64(pcm(jfk[:8000]))})
        send(ws, {"type": "session.update", "session": {"audio": {"input": {"format": {"type": "audio/pcmu"}}}}})
        assert _error_of(until(ws, "error"))["code"] == "session_locked"
        send(ws, {"type": "input_audio_buffer.clear"})
        until(ws, "input_audio_buffer.cleared")
        send(ws, {"type": "input_audio_buffer.append", "audio": b64(pcm(jfk[: int(2.8 * 16000)]))})
        send(ws, {"type": "input_audio_buffer.commit"})
        assert "fellow americans" in phrase(until(ws, COMPLETED)[-1]["transcript"])  # it still transcribes


def _closed(ws: ClientConnection) -> tuple[list[dict[str, Any]], int | None]:
    """The events until the server closes the connection, and its close code."""
    events = []
    try:
        while True:
            events.append(validated(ws.recv(timeout=30)))
    except ConnectionClosed:
        pass
    return events, ws.close_code


def _refused(ws: ClientConnection) -> tuple[dict[str, Any], int | None]:
    """The error event the server sent before closing, and its close code."""
    events, code = _closed(ws)
    return _error_of(events), code


def test_refusals_close_the_session(model: WhisperModel, jfk: np.ndarray) -> None:
    service = Service(model, ServerConfig(token="s3cret", max_streams=1,
                                          limits=Limits(start_timeout_s=0.5, max_speed=1000.0, burst_s=1000.0)))
    with serving(create_app(service)) as running:
        with realtime(running.ws) as ws:
            error, code = _refused(ws)
        assert error["code"] == "invalid_api_key" and code == 1008
        with realtime(running.ws, query="?intent=transcription&token=s3cret") as ws:
            error, code = _refused(ws)
        assert "not accepted in the URL" in error["message"] and code == 1008
        with realtime(running.ws, query="?intent=conversation", headers={"Authorization": "Bearer s3cret"}) as ws:
            error, code = _refused(ws)
        assert error["param"] == "intent" and code == 1008
        with realtime(running.ws, headers={"Origin": "https://evil.example"}) as ws:
            error, code = _refused(ws)
        assert error["code"] == "origin_not_allowed" and code == 1008
        with realtime(running.ws, subprotocols=["realtime", "openai-insecure-api-key.s3cret"]) as ws:
            assert ws.subprotocol == "realtime"  # a browser's key, as OpenAI's clients send it
            error, code = _refused(ws)  # ... then no event within the start timeout
        assert error["code"] == "session_timeout" and code == 1008
        scheduler = running.app.state.scheduler
        assert scheduler.reserve()  # the only place is taken
        try:
            with realtime(running.ws, headers={"Authorization": "Bearer s3cret"}) as ws:
                send(ws, {"type": "input_audio_buffer.append", "audio": b64(pcm(jfk[:1600]))})
                error, code = _refused(ws)
        finally:
            scheduler.release()
        assert error["code"] == "server_full" and code == 1013
        with realtime(running.ws, headers={"Authorization": "Bearer s3cret"}) as ws:  # a place again: it serves
            send(ws, MANUAL)
            send(ws, {"type": "input_audio_buffer.append", "audio": b64(pcm(jfk[: int(2.8 * 16000)]))})
            send(ws, {"type": "input_audio_buffer.commit"})
            assert "fellow americans" in phrase(until(ws, COMPLETED)[-1]["transcript"])
        assert scheduler.reserved == 0 and not scheduler.slots  # (the session gave its place back)


# ------------------------------------------------------------------------------------------------ operation
TOKEN = "rt-s3cret-91c"


def access_lines(caplog: pytest.LogCaptureFixture, path: str, count: int, wait_s: float = 20.0) -> list[dict[str, Any]]:
    """The access lines of connections to ``path`` (waiting until ``count`` are written)."""
    deadline = time.monotonic() + wait_s
    while True:
        lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "simulst.access"]
        lines = [line for line in lines if line.get("path") == path]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def test_realtime_sessions_are_capped_counted_and_logged_as_ws_streams(model: WhisperModel, jfk: np.ndarray,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    """The per-client cap counts Realtime sessions and /ws streams together (the third connection of an address
    allowed two is refused, 1013, on either endpoint); the metrics count a Realtime stream as a live /ws stream
    (open while it has audio, its final, its AL and RTF) and its refusals by reason; each session is one access
    line, without the key, though it came in a subprotocol."""
    caplog.set_level(logging.INFO, logger="simulst.access")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    service = Service(model, ServerConfig(token=TOKEN, max_per_client=2, limits=FAST))
    with serving(create_app(service)) as running:
        def scrape() -> str:
            return httpx.get(f"{running.http}/metrics", headers=auth).text

        before = scrape()
        with realtime(running.ws, subprotocols=["realtime", f"openai-insecure-api-key.{TOKEN}"]) as first, \
                realtime(running.ws, headers=auth) as second:
            until(first, "session.created")
            until(second, "session.created")
            with realtime(running.ws, headers=auth) as third:
                error, code = _refused(third)
            assert error["code"] == "too_many_connections" and code == 1013
            with connect(running.ws, additional_headers=auth, open_timeout=30) as ws:  # /ws: the same cap
                assert "too many connections" in json.loads(ws.recv(timeout=30))["message"]
                with pytest.raises(ConnectionClosed):
                    ws.recv(timeout=30)
                assert ws.close_code == 1013
            send(first, MANUAL)
            until(first, "session.updated")
            send(first, {"type": "input_audio_buffer.append", "audio": b64(pcm(jfk[: int(2.8 * 16000)]))})
            send(first, {"type": "session.update", "session": {}})  # (answered once the audio is in)
            until(first, "session.updated")
            during = scrape()
            send(first, {"type": "input_audio_buffer.commit"})
            assert "fellow americans" in phrase(until(first, COMPLETED)[-1]["transcript"])
        after = scrape()
        lines = access_lines(caplog, "/v1/realtime", 3)

    def grew(name: str, **labels: str) -> float:
        return metric(after, name, **labels) - metric(before, name, **labels)

    assert metric(during, "simulst_streams_open", kind="live") == 1
    assert grew("simulst_refusals_total", reason="per_client") == 2
    assert grew("simulst_streams_total", outcome="final") == 1
    assert grew("simulst_stream_average_lagging_seconds_count") == 1
    assert grew("simulst_stream_real_time_factor_count") == 1
    assert 0.0 < grew("simulst_stream_average_lagging_seconds_sum") <= 2.8
    assert metric(after, "simulst_streams_open", kind="live") == 0
    assert sorted((line["reason"], line["status"]) for line in lines) == [
        ("closed", 1000), ("closed", 1000), ("per_client", 1013)]
    assert all(line["kind"] == "stream" and line["stream"].startswith("sess_") for line in lines)
    assert max(line["audio_s"] for line in lines) == pytest.approx(2.8, abs=0.01)
    assert TOKEN not in caplog.text


def test_shutdown_completes_each_sessions_pending_item_then_closes_1001(model: WhisperModel,
                                                                         jfk: np.ndarray) -> None:
    """When the server is told to exit (what SIGTERM does), a session with audio not committed gets that item's
    committed and completed events (its final decode: the text of all its audio) and a 1001 close; an idle one
    is closed with 1001 and no item; both within the grace period."""
    service = Service(model, ServerConfig(limits=FAST, shutdown_grace_s=30.0))
    with serving(create_app(service)) as running, realtime(running.ws) as manual, realtime(running.ws) as idle:
        until(manual, "session.created")
        until(idle, "session.created")
        send(manual, MANUAL)
        until(manual, "session.updated")
        send(manual, {"type": "input_audio_buffer.append", "audio": b64(pcm(jfk[: int(2.8 * 16000)]))})
        send(manual, {"type": "session.update", "session": {}})
        until(manual, "session.updated")
        began = time.monotonic()
        assert running.server is not None
        running.server.should_exit = True
        pending = until(manual, COMPLETED)
        rest, code = _closed(manual)
        idle_events, idle_code = _closed(idle)
        took = time.monotonic() - began
    kinds = [e["type"] for e in pending]
    assert kinds[-1] == COMPLETED and "input_audio_buffer.committed" in kinds
    assert phrase(pending[-1]["transcript"]) == "and so my fellow americans"
    assert rest == [] and code == 1001
    assert idle_events == [] and idle_code == 1001
    assert took < 30.0
