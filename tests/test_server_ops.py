"""``simulst serve`` as an exposed service, over real sockets with the real Whisper tiny.en: idle sockets hold no
stream slot, the per-client cap, the start timeout, the upload byte limit (a 100 MB upload refused at once without
memory), the audio duration limit, the Origin allow-list, the token in a header or subprotocol and never in the
URL, ``/metrics``, a graceful shutdown that sends every open stream its final, TLS, and access logs without the
token (the real ``simulst serve`` in a subprocess, stopped with SIGTERM)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from simulst.models.loading import load_model
from simulst.models.whisper import WhisperModel
from simulst.server.access import origin_allowed
from simulst.server.app import create_app
from simulst.server.client import ClientResult, stream_audio
from simulst.server.limits import ClientCounter
from simulst.server.metrics import stream_average_lagging
from simulst.server.protocol import Limits
from simulst.server.service import ServerConfig, Service
from simulst.types import Emission
from tests.server_fixtures import Running, free_port, messages, metric, serving
from tests.shared_assets import JFK_PHRASE, needs_shared, phrase

TOKEN = "ops-s3cret-7f3a"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ALLOWED = "https://captions.example"
FAST = Limits(max_speed=1000.0, burst_s=1000.0, start_timeout_s=1.0)
# The websocket close codes a client sees (RFC 6455, section 7.4.1): the protocol's contract, so spelled out here.
NORMAL_CLOSURE, GOING_AWAY, POLICY_VIOLATION, TRY_AGAIN_LATER = 1000, 1001, 1008, 1013
START = json.dumps({"type": "start"})
END = json.dumps({"type": "end"})
MB = 1 << 20


def rss_mb() -> float:
    """This process's resident memory now (not its peak)."""
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024  # type: ignore[union-attr]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def exchange(url: str, sends: list[str | bytes], **options: Any) -> tuple[list[dict[str, Any]], int | None]:
    """Connect (``options``: websockets' connect arguments), send, and collect until the server closes."""
    async with connect(url, **options) as ws:
        try:
            for message in sends:
                await ws.send(message)
        except ConnectionClosed:
            pass
        return await messages(ws)


def upload_body(total: int, chunk: int = 64 * 1024) -> Iterator[bytes]:
    """A multipart form with one file of ``total`` bytes, generated as it is sent (never held in memory)."""
    yield (b'--bnd\r\nContent-Disposition: form-data; name="file"; filename="big.wav"\r\n'
           b"Content-Type: audio/wav\r\n\r\n")
    block = bytes(chunk)
    for _ in range(total // chunk):
        yield block
    yield b"\r\n--bnd--\r\n"


# ------------------------------------------------------------------------------------------- rules, no server
def test_origin_rules() -> None:
    host = "captions.example:8000"
    assert origin_allowed(None, host, ())  # not a browser
    assert origin_allowed("http://captions.example:8000", host, ())  # the same origin
    assert origin_allowed("https://example.org", "example.org", ())  # default ports on both sides
    assert origin_allowed("http://localhost:5173", host, ()) and origin_allowed("http://127.0.0.7", host, ())
    assert origin_allowed("http://[::1]:3000", host, ())
    assert not origin_allowed("https://evil.example", host, ())
    assert not origin_allowed("http://captions.example:8001", host, ())  # another port is another origin
    assert not origin_allowed("null", host, ()) and not origin_allowed("garbage", host, ())
    assert origin_allowed("https://app.example", host, ("https://app.example:443",))
    assert not origin_allowed("http://app.example", host, ("https://app.example",))  # another scheme
    assert origin_allowed("https://evil.example", host, ("*",))


def test_client_counter_caps_each_address() -> None:
    counter = ClientCounter(2)
    assert counter.acquire("a") and counter.acquire("a") and not counter.acquire("a")
    assert counter.acquire("b")
    counter.release("a")
    assert counter.held("a") == 1 and counter.acquire("a")
    for _ in range(3):
        counter.release("a")
    assert counter.held("a") == 0


def test_stream_average_lagging_on_emissions() -> None:
    # words delayed by their emission's source_ms: d = [1000, 1000, 2000], |X| = 3000, |Y*| = |Y| = 3:
    # AL = ((1000 - 0) + (1000 - 1000) + (2000 - 2000)) / 3
    emissions = [Emission(" a b", (), 1000.0, 1100.0), Emission("", (), 1500.0, 1600.0),
                 Emission(" c", (), 2000.0, 2100.0)]
    assert stream_average_lagging(emissions, 3000.0) == pytest.approx(1000.0 / 3)
    assert stream_average_lagging([Emission("", (), 500.0, 500.0)], 3000.0) is None


# ------------------------------------------------------------------------------------------- a guarded server
@pytest.fixture(scope="module")
def model() -> WhisperModel:
    return load_model()


@pytest.fixture(scope="module")
def server(model: WhisperModel) -> Iterator[Running]:
    config = ServerConfig(limits=FAST, max_streams=2, max_per_client=8, token=TOKEN, allow_origins=(ALLOWED,))
    with serving(create_app(Service(model, config))) as running:
        yield running


@pytest.mark.real
@needs_shared
def test_idle_sockets_do_not_keep_a_real_client_out(server: Running, jfk: np.ndarray) -> None:
    """20 idle sockets (authorised, never sending start) and a server of 2 stream slots: a real client from
    another address is ready at once. 12 of the idle sockets come from one address: the per-client cap (8)
    refuses 4 of them at once; the others are closed when the start timeout (1 s here) passes."""

    async def scenario() -> tuple[float, ClientResult, list[tuple[list[dict[str, Any]], int | None]]]:
        idle = []
        for i in range(20):
            host = "127.0.0.1" if i < 12 else f"127.0.0.{10 + i}"
            idle.append(await connect(server.ws, additional_headers=AUTH, local_addr=(host, 0)))
        began = time.monotonic()
        async with connect(server.ws, additional_headers=AUTH, local_addr=("127.0.0.2", 0)) as ws:
            await ws.send(START)
            ready = json.loads(await ws.recv())
            ready_s = time.monotonic() - began
            assert ready["type"] == "ready", ready
        result = await stream_audio(server.ws, jfk, 16000, realtime=False, frame_ms=500, token=TOKEN,
                                    connect_options={"local_addr": ("127.0.0.3", 0)})
        fates = await asyncio.gather(*(messages(ws, wait_s=10) for ws in idle))
        return ready_s, result, fates

    ready_s, result, fates = run(scenario())
    assert ready_s < 1.0, f"the real client waited {ready_s:.2f} s for its slot"
    assert result.error is None and JFK_PHRASE.search(phrase(result.text))
    capped = [m for m, code in fates if code == TRY_AGAIN_LATER]
    timed_out = [m for m, code in fates if code == POLICY_VIOLATION]
    assert len(capped) == 4 and all("too many connections from 127.0.0.1" in m[0]["message"] for m in capped)
    assert len(timed_out) == 16 and all("no start message within 1 s" in m[0]["message"] for m in timed_out)


@pytest.mark.real
@needs_shared
def test_a_100_mb_upload_is_refused_at_once_with_flat_memory(server: Running) -> None:
    """Declared (Content-Length) or not (chunked), a 100 MB body is answered 413 in under a second; the server
    reads at most the limit (25 MB) of it and this process's memory (server and client) stays flat."""
    url = f"{server.http}/v1/audio/transcriptions"
    before = rss_mb()
    for declared in (True, False):
        headers = {**AUTH, "Content-Type": "multipart/form-data; boundary=bnd"}
        if declared:
            headers["Content-Length"] = str(100 * MB + 112)
        began = time.monotonic()
        response = httpx.post(url, content=upload_body(100 * MB), headers=headers, timeout=30)
        took = time.monotonic() - began
        assert response.status_code == httpx.codes.REQUEST_ENTITY_TOO_LARGE, response.text
        assert took < 1.0, f"refused after {took:.2f} s (declared length: {declared})"
        body = response.json()["error"]
        assert "larger than this server's limit of 25 MB" in body["message"] and body["code"] == "request_too_large"
        assert response.headers["connection"] == "close"
    assert rss_mb() - before < 20
    # and a small upload still goes through
    small = io.BytesIO()
    sf.write(small, np.zeros(16000, dtype=np.float32), 16000, format="WAV")
    ok = httpx.post(url, headers=AUTH, files={"file": ("a.wav", small.getvalue())}, timeout=60)
    assert ok.status_code == httpx.codes.OK, ok.text


@pytest.mark.real
@needs_shared
def test_a_foreign_origin_is_refused(server: Running) -> None:
    same = f"http://127.0.0.1:{server.port}"
    received, code = run(exchange(server.ws, [START], origin="https://evil.example", additional_headers=AUTH))
    assert code == POLICY_VIOLATION and "https://evil.example may not use this server" in received[0]["message"]
    for origin in (same, "http://localhost:5173", ALLOWED):
        received, code = run(exchange(server.ws, [START, END], origin=origin, additional_headers=AUTH))
        assert [m["type"] for m in received] == ["ready", "final"] and code == NORMAL_CLOSURE, origin
    url = f"{server.http}/v1/audio/transcriptions"
    post = httpx.post(url, headers={**AUTH, "Origin": "https://evil.example"}, files={"file": ("a.wav", b"x")})
    assert post.status_code == httpx.codes.FORBIDDEN and post.json()["error"]["code"] == "origin_not_allowed"
    # reading the page's configuration is harmless (no CORS headers: a foreign page cannot read the answer)
    assert httpx.get(f"{server.http}/api/config", headers={"Origin": "https://evil.example"}).status_code == 200


@pytest.mark.real
@needs_shared
def test_the_token_goes_in_a_header_or_subprotocol_never_the_url(server: Running) -> None:
    async def subprotocol() -> tuple[str | None, list[dict[str, Any]]]:
        async with connect(server.ws, subprotocols=["simulst", f"bearer.{TOKEN}"]) as ws:  # type: ignore[list-item]
            await ws.send(START)
            await ws.send(END)
            received, _ = await messages(ws)
            return ws.subprotocol, received

    accepted, received = run(subprotocol())
    assert accepted == "simulst" and [m["type"] for m in received] == ["ready", "final"]
    received, _ = run(exchange(server.ws, [START, END], additional_headers=AUTH))
    assert [m["type"] for m in received] == ["ready", "final"]
    received, code = run(exchange(f"{server.ws}?token={TOKEN}", [START]))
    assert code == POLICY_VIOLATION and "not accepted in the URL" in received[0]["message"]
    received, code = run(exchange(server.ws, [START], subprotocols=["simulst", "bearer.wrong"]))
    assert code == POLICY_VIOLATION and "valid token" in received[0]["message"]
    in_url = httpx.post(f"{server.http}/v1/audio/transcriptions?token={TOKEN}", files={"file": ("a.wav", b"x")})
    assert in_url.status_code == httpx.codes.BAD_REQUEST and "not accepted in the URL" in in_url.json()["error"][
        "message"]
    assert httpx.get(f"{server.http}/metrics").status_code == httpx.codes.UNAUTHORIZED
    assert httpx.get(f"{server.http}/metrics", headers=AUTH).status_code == httpx.codes.OK


@pytest.mark.real
@needs_shared
def test_metrics_count_streams_refusals_and_requests(server: Running, jfk: np.ndarray) -> None:
    def scrape() -> str:
        response = httpx.get(f"{server.http}/metrics", headers=AUTH)
        assert response.headers["content-type"].startswith("text/plain")
        return response.text

    before = scrape()
    result = run(stream_audio(server.ws, jfk, 16000, realtime=False, frame_ms=500, token=TOKEN))
    assert result.final is not None
    run(exchange(server.ws, [START], origin="https://evil.example"))
    run(exchange(server.ws, [b"\x00\x01"], additional_headers=AUTH))
    huge = {**AUTH, "Content-Type": "multipart/form-data; boundary=bnd", "Content-Length": str(100 * MB + 112)}
    httpx.post(f"{server.http}/v1/audio/transcriptions", content=upload_body(100 * MB), headers=huge)
    after = scrape()

    def grew(name: str, **labels: str) -> float:
        return metric(after, name, **labels) - metric(before, name, **labels)

    assert grew("simulst_streams_total", outcome="final") == 1
    assert grew("simulst_refusals_total", reason="origin") == 1
    assert grew("simulst_refusals_total", reason="protocol") == 1
    assert grew("simulst_refusals_total", reason="oversize") == 1
    assert grew("simulst_stream_average_lagging_seconds_count") == 1
    assert grew("simulst_stream_real_time_factor_count") == 1
    al = grew("simulst_stream_average_lagging_seconds_sum")
    assert 0.0 < al < 11.0  # jfk is 11 s long
    assert grew("simulst_http_requests_total", method="POST", route="/v1/audio/transcriptions", status="413") == 1
    assert grew("simulst_http_requests_total", method="GET", route="/metrics", status="200") == 1
    assert metric(after, "simulst_streams_open", kind="live") == 0
    assert metric(after, "simulst_scheduler_lag_seconds") == 0


@pytest.mark.real
@needs_shared
def test_audio_longer_than_the_limit_is_refused(model: WhisperModel, jfk: np.ndarray,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream is cut at the limit; an upload is refused 413 with its decoding stopped there: of a 10-minute
    file, libsndfile reads the limit's 3 s and one sample, never the rest."""
    read = sf.SoundFile.read
    frames_read: list[int] = []

    def counting_read(self: sf.SoundFile, *args: Any, **kwargs: Any) -> Any:
        block = read(self, *args, **kwargs)
        frames_read.append(len(block))
        return block

    monkeypatch.setattr(sf.SoundFile, "read", counting_read)
    config = ServerConfig(limits=Limits(max_speed=1000.0, burst_s=1000.0, max_audio_s=3.0))
    with serving(create_app(Service(model, config))) as running:
        result = run(stream_audio(running.ws, jfk, 16000, realtime=False, frame_ms=500))
        uploads = []
        for audio in (jfk[: 16000 * 5], np.tile(jfk, 55)):  # 5 s, then 10 minutes (19 MB)
            wav = io.BytesIO()
            sf.write(wav, audio, 16000, format="WAV")
            frames_read.clear()
            uploads.append(httpx.post(f"{running.http}/v1/audio/transcriptions", timeout=60,
                                      files={"file": ("a.wav", wav.getvalue())}))
            assert sum(frames_read) == 3 * 16000 + 1, sum(frames_read) / 16000
    assert result.close_code == POLICY_VIOLATION and result.error is not None
    assert "longer than this server's limit of 3 s" in result.error
    for upload in uploads:
        assert upload.status_code == httpx.codes.REQUEST_ENTITY_TOO_LARGE, upload.text
        error = upload.json()["error"]
        assert "limit of 3 s" in error["message"] and error["code"] == "audio_too_long" and error["param"] == "file"


@pytest.mark.real
@needs_shared
def test_shutdown_sends_every_open_stream_its_final(model: WhisperModel, jfk: np.ndarray) -> None:
    """Two clients mid-stream and one that has not started when the server is told to exit (what SIGTERM does):
    each stream is ended as if its client had sent "end", its final decode runs, the client gets its final and
    a 1001 close; the waiting one is refused; no new connection is taken."""
    config = ServerConfig(limits=Limits(start_timeout_s=60.0), shutdown_grace_s=30.0)
    with serving(create_app(Service(model, config))) as running:

        async def scenario() -> tuple[list[ClientResult], tuple[list[dict[str, Any]], int | None], bool]:
            clients = [asyncio.create_task(stream_audio(running.ws, jfk, 16000, {"chunk_ms": 1000}))
                       for _ in range(2)]
            waiting = await connect(running.ws)
            await asyncio.sleep(4.5)
            assert running.server is not None
            running.server.should_exit = True
            results = await asyncio.gather(*clients)
            refused = await messages(waiting)
            try:
                await connect(running.ws, open_timeout=2)
                listening = True
            except OSError:
                listening = False
            return results, refused, listening

        results, (waiting, waiting_code), listening = run(scenario())
    for result in results:
        assert result.final is not None and result.close_code == GOING_AWAY, (result.error, result.close_code)
        assert 3500 < result.final["source_ms"] < 7000  # what had been sent when the server stopped
        assert phrase(result.final["text"]).startswith("and so my fellow americans")
        assert "".join(m["text"] for m in result.emissions) == result.final["text"]
    assert waiting_code == GOING_AWAY and "shutting down" in waiting[0]["message"]
    assert not listening


# ------------------------------------------------------------------------------------------- the real command
@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost, made with the openssl command."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"], check=True, capture_output=True)
    return cert, key


@pytest.mark.real
@needs_shared
def test_serve_over_tls_logs_no_token_and_stops_gracefully_on_sigterm(certificate: tuple[Path, Path],
                                                                       jfk: np.ndarray, tmp_path: Path) -> None:
    """``simulst serve --ssl-certfile --ssl-keyfile --token``: https and a wss stream work; on SIGTERM the open
    stream gets its final and a 1001 close and the process ends; its log (at debug level, request headers
    included) has one JSON access line per request and stream and never the token, though the token was sent in
    a header, a subprotocol and (refused) a URL."""
    cert, key = certificate
    port = free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, "SIMULST_TOKEN": TOKEN}
    with log.open("w") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "simulst.cli", "serve", "--port", str(port), "--ssl-certfile", str(cert),
             "--ssl-keyfile", str(key), "--log-level", "debug", "--shutdown-grace-s", "30"],
            stdout=sink, stderr=subprocess.STDOUT, env=env)
    try:
        context = ssl.create_default_context(cafile=str(cert))
        base = f"https://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                health = httpx.get(f"{base}/health", verify=context, timeout=2)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.fail(f"simulst serve did not start:\n{log.read_text()}")
                time.sleep(0.5)
        assert health.json()["status"] == "ok"
        assert httpx.get(f"{base}/metrics", headers=AUTH, verify=context).status_code == 200
        refused = httpx.post(f"{base}/v1/audio/transcriptions?token={TOKEN}", verify=context,
                             files={"file": ("a.wav", b"x")})
        assert refused.status_code == 400
        url = f"wss://127.0.0.1:{port}/ws"
        _, code = run(exchange(f"{url}?token={TOKEN}", [START], ssl=context))
        assert code == POLICY_VIOLATION
        done, _ = run(exchange(url, [START, END], ssl=context, subprotocols=["simulst", f"bearer.{TOKEN}"]))
        assert [m["type"] for m in done] == ["ready", "final"]

        async def stopped_mid_stream() -> ClientResult:
            streaming = asyncio.create_task(stream_audio(url, jfk, 16000, token=TOKEN,
                                                         connect_options={"ssl": context}))
            await asyncio.sleep(4.0)
            process.send_signal(signal.SIGTERM)
            return await streaming

        result = run(stopped_mid_stream())
        assert process.wait(timeout=60) == 0  # a drained shutdown is the server's normal end
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = log.read_text()
    assert result.final is not None and result.close_code == GOING_AWAY, (result.error, text[-3000:])
    assert phrase(result.final["text"]).startswith("and so my fellow americans")
    assert TOKEN not in text
    access = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    streams = [line for line in access if line["kind"] == "stream"]
    assert [line["reason"] for line in streams] == ["auth", "final", "final"]
    assert [line["status"] for line in streams] == [POLICY_VIOLATION, NORMAL_CLOSURE, GOING_AWAY]
    assert streams[-1]["audio_s"] > 3 and streams[-1]["stream"]
    http = {(line["method"], line["path"], line["status"]) for line in access if line["kind"] == "http"}
    assert {("GET", "/health", 200), ("GET", "/metrics", 200), ("POST", "/v1/audio/transcriptions", 400)} <= http
    assert "[redacted]" in text  # (uvicorn's own lines named the token; they were scrubbed)
