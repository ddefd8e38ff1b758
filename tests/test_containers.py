"""Audio in any container (PyAV): m4a / aac, mp3, webm / opus and ogg / opus made in the test from the shared jfk.wav
give the wav's text through ``load_audio`` (the CLI), an upload to the OpenAI endpoint and a ``/ws`` stream of
container bytes (``"format": "webm"`` / ``"ogg"``); undecodable input is a clear AudioError on every path."""

from __future__ import annotations

import asyncio
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
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from simulst.audio.container import StreamDecoder, _MonoResampler, decode_audio
from simulst.audio.io import AudioTooLong, load_audio, read_audio_bytes
from simulst.config import PolicyOptions, StreamOptions
from simulst.errors import AudioError
from simulst.models.loading import load_model
from simulst.models.whisper import WhisperModel
from simulst.server.app import create_app
from simulst.server.protocol import Limits
from simulst.server.service import ServerConfig, Service
from simulst.streaming.engine import SpeechEngine
from simulst.streaming.feed import feed_fast
from tests.container_fixtures import CODECS, encode
from tests.server_fixtures import Running, serving
from tests.shared_assets import JFK, needs_shared, words

RATE = 16000
CLIP_S = 2.8  # "And so my fellow Americans", cut in the pause after it: enough words, little compute
FAST = Limits(max_speed=1000.0, burst_s=1000.0)
@pytest.fixture(scope="module")
def clip() -> np.ndarray:
    return load_audio(JFK)[: int(CLIP_S * RATE)]


@pytest.fixture(scope="module")
def files(clip: np.ndarray, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("containers")
    out = {"wav": folder / "jfk.wav"}
    sf.write(out["wav"], clip, RATE)
    for name in CODECS:
        out[name] = folder / f"jfk.{name}"
        out[name].write_bytes(b"".join(encode(clip, name)))
    return out


# ----------------------------------------------------------------------------------------------- decoding (no model)
@pytest.mark.parametrize("name", list(CODECS))
def test_every_container_decodes_to_the_clip(files: dict[str, Path], clip: np.ndarray, name: str) -> None:
    audio = load_audio(files[name])
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert abs(audio.shape[0] - clip.shape[0]) <= 0.05 * RATE  # the codecs' padding: a few ms
    n = min(audio.shape[0], clip.shape[0])
    lag = _lag(clip[:n], audio[:n])  # an encoder's priming the container does not undo (AAC's 1024 samples)
    assert abs(lag) <= 0.03 * RATE
    a, b = (clip[: n - lag], audio[lag:n]) if lag >= 0 else (clip[-lag:n], audio[: n + lag])
    assert np.corrcoef(a, b)[0, 1] > 0.95  # the same waveform, through a lossy codec


def _lag(reference: np.ndarray, audio: np.ndarray, most: int = 400) -> int:
    """The shift of ``audio`` against ``reference`` (samples) that correlates best, within ``most``."""
    window = reference[8000:24000]
    scores = [float(np.dot(window, audio[8000 + k : 24000 + k])) for k in range(-most, most + 1)]
    return int(np.argmax(scores)) - most


def test_bytes_and_paths_decode_alike(files: dict[str, Path]) -> None:
    data = files["m4a"].read_bytes()
    assert np.array_equal(read_audio_bytes(data, RATE), load_audio(files["m4a"]))
    assert np.array_equal(decode_audio(data, RATE), decode_audio(files["m4a"], RATE))


def test_wav_is_still_read_by_libsndfile(files: dict[str, Path], clip: np.ndarray) -> None:
    assert np.array_equal(load_audio(files["wav"]), clip)  # 16-bit PCM: exact, as before


def test_a_file_under_the_duration_limit_decodes_as_without_one(files: dict[str, Path]) -> None:
    for name in ("wav", "ogg", "m4a", "mp3"):
        data = files[name].read_bytes()
        assert np.array_equal(read_audio_bytes(data, RATE, max_s=CLIP_S + 0.5), read_audio_bytes(data, RATE)), name


@pytest.mark.parametrize("name", ["wav", "flac", "m4a", "webm"])
def test_decoding_stops_as_soon_as_the_audio_passes_the_limit(clip: np.ndarray, name: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A 56 s file and a 3 s limit: AudioTooLong, with one sample (libsndfile: wav, flac) or one codec frame
    (FFmpeg: m4a, webm) decoded past the limit."""
    long = np.tile(clip, 20)
    if name in ("wav", "flac"):
        out = io.BytesIO()
        sf.write(out, long, RATE, format=name.upper())
        data = out.getvalue()
    else:
        data = b"".join(encode(long, name))
    decoded: list[int] = []
    if name in ("wav", "flac"):
        read = sf.SoundFile.read

        def counting_read(self: sf.SoundFile, *args: Any, **kwargs: Any) -> Any:
            block = read(self, *args, **kwargs)
            decoded.append(len(block) * RATE // self.samplerate)
            return block

        monkeypatch.setattr(sf.SoundFile, "read", counting_read)
        most = 3 * RATE + 1  # (one read of the limit and one frame more)
    else:
        frame = _MonoResampler.frame

        def counting_frame(self: _MonoResampler, piece: Any) -> np.ndarray:
            audio = frame(self, piece)
            decoded.append(audio.shape[0])
            return audio

        monkeypatch.setattr(_MonoResampler, "frame", counting_frame)
        most = 3 * RATE + RATE // 10  # (an AAC or Opus frame is at most a few tens of ms)
    with pytest.raises(AudioTooLong, match=r"'long' is longer than the limit of 3 s") as refused:
        read_audio_bytes(data, RATE, "'long'", max_s=3.0)
    assert refused.value.limit_s == 3.0
    assert 3 * RATE < sum(decoded) <= most, (sum(decoded) / RATE, name)  # not the file's 56 s


@pytest.mark.parametrize("name", ["webm", "ogg"])
def test_a_stream_decodes_as_its_bytes_arrive(clip: np.ndarray, name: str) -> None:
    parts = encode(clip, name, live=True)  # a header, then clusters / pages
    whole = decode_audio(b"".join(parts), RATE)
    decoder = StreamDecoder(name, RATE)
    pieces = [decoder.feed(part[i : i + 700]) for part in parts for i in range(0, len(part), 700)]
    pieces.append(decoder.finish())
    streamed = np.concatenate(pieces)
    assert np.array_equal(streamed, whole)  # the same samples, in pieces
    sizes = [p.shape[0] for p in pieces]
    # each piece returns what its bytes complete (a WebM cluster, an Ogg page: about a second each), not all at the end
    assert sum(1 for s in sizes[:-1] if s) >= 3 and sum(sizes[:-1]) >= 0.9 * whole.shape[0]


def test_undecodable_input_is_an_audio_error(tmp_path: Path) -> None:
    notes = tmp_path / "notes.m4a"
    notes.write_text("hello, not audio")
    with pytest.raises(AudioError, match=r"cannot read .*notes\.m4a.*not audio"):
        load_audio(notes)
    with pytest.raises(AudioError, match="not audio"):
        read_audio_bytes(b"\x00\x01garbage" * 50)
    with pytest.raises(AudioError, match="empty"):
        read_audio_bytes(b"")
    decoder = StreamDecoder("webm", RATE)
    with pytest.raises(AudioError, match="webm audio stream cannot be decoded"):  # (at a feed, or at the end)
        decoder.feed(b"not a webm stream" * 100)
        decoder.finish()
    decoder = StreamDecoder("ogg", RATE, max_silent_bytes=50_000)  # (Ogg's demuxer resynchronises on garbage)
    with pytest.raises(AudioError, match="ogg audio stream"):
        for _ in range(100):
            decoder.feed(np.random.default_rng(0).bytes(4096))
        decoder.finish()
    with pytest.raises(AudioError, match="unknown stream container"):
        StreamDecoder("mkv3", RATE)


def test_a_closed_stream_decoder_ends_its_thread(clip: np.ndarray) -> None:
    parts = encode(clip, "webm", live=True)
    decoder = StreamDecoder("webm", RATE)
    decoder.feed(parts[0])
    decoder.close()  # the client left mid-stream
    assert decoder._thread is not None
    decoder._thread.join(5)
    assert not decoder._thread.is_alive()
    with pytest.raises(AudioError, match="ended"):
        decoder.feed(parts[1])


def test_a_slot_decodes_its_container_stream_to_the_model_rate(clip: np.ndarray) -> None:
    """The server's side of a ``"format": "webm"`` stream: the slot's audio is the file's decoded samples."""
    from simulst.server.protocol import StartRequest
    from simulst.server.scheduler import Slot
    from simulst.server.service import OpenedStream

    parts = encode(clip, "webm", live=True)
    opened = OpenedStream(stream=_NoStream(), channels=("source",))  # type: ignore[arg-type]
    slot = Slot(opened, StartRequest(sample_rate=48000, format="webm"), RATE, FAST)
    for part in parts:
        slot.feed(part)
    slot.end()
    assert slot.start.sample_rate == RATE  # (the container's audio is decoded to the model's rate)
    assert np.array_equal(np.concatenate(slot.pending), decode_audio(b"".join(parts), RATE))
    assert abs(slot.received_s - CLIP_S) < 0.05
    slot.close()


class _NoStream:
    """A stream that is never decoded (the slot is only fed)."""

    next_decode = 1 << 30


# ----------------------------------------------------------------------------------------------- with the model
@pytest.fixture(scope="module")
def model() -> WhisperModel:
    return load_model()


@pytest.fixture(scope="module")
def wav_text(model: WhisperModel, clip: np.ndarray) -> str:
    stream = SpeechEngine(model).open(StreamOptions())
    feed_fast(stream, clip)
    return stream.text


@pytest.fixture(scope="module")
def server(model: WhisperModel) -> Iterator[Running]:
    with serving(create_app(Service(model, ServerConfig(limits=FAST)))) as running:
        yield running


@needs_shared
@pytest.mark.real
def test_the_cli_reader_gives_the_wav_text(model: WhisperModel, files: dict[str, Path]) -> None:
    offline = StreamOptions(policy=PolicyOptions.parse("offline"))  # one decode of each file: the reader is tested

    def text(path: Path) -> str:
        stream = SpeechEngine(model).open(offline)
        feed_fast(stream, load_audio(path))
        return stream.text

    reference = text(files["wav"])
    assert "fellow Americans" in reference
    assert {name: text(files[name]) for name in CODECS} == dict.fromkeys(CODECS, reference)


@needs_shared
@pytest.mark.real
def test_uploads_in_any_container_give_the_wav_text(server: Running, files: dict[str, Path], wav_text: str) -> None:
    client = openai.OpenAI(base_url=f"{server.http}/v1", api_key="unused")
    for name in ("m4a", "mp3", "webm"):
        text = client.audio.transcriptions.create(model="whisper-1", file=(f"jfk.{name}", files[name].read_bytes()),
                                                  response_format="text")
        assert str(text).strip() == wav_text.strip(), name
    response = httpx.post(f"{server.http}/v1/audio/transcriptions",
                          files={"file": ("talk.m4a", b"\x00\x00\x00\x18ftypM4A garbage" * 20)})
    error = response.json()["error"]
    assert response.status_code == httpx.codes.BAD_REQUEST and error["param"] == "file"
    assert "not audio" in error["message"] and error["type"] == "invalid_request_error"


async def _stream_container(url: str, parts: list[bytes], fmt: str) -> tuple[list[dict[str, Any]], int | None]:
    """Send a start with ``format``, the container's bytes (a piece at a time), then end; collect the messages."""
    received: list[dict[str, Any]] = []
    async with connect(url) as ws:
        await ws.send(json.dumps({"type": "start", "format": fmt}))
        try:
            for part in parts:
                await ws.send(part)
                await asyncio.sleep(0.02)
            await ws.send(json.dumps({"type": "end"}))
        except ConnectionClosed:
            pass
        try:
            async for raw in ws:
                if isinstance(raw, str):
                    received.append(json.loads(raw))
        except ConnectionClosed:
            pass
        return received, ws.close_code


@needs_shared
@pytest.mark.real
@pytest.mark.parametrize("name", ["webm", "ogg"])
def test_ws_streams_a_container_like_a_mediarecorder(server: Running, clip: np.ndarray, wav_text: str,
                                                     name: str) -> None:
    parts = encode(clip, name, live=True)
    messages, code = asyncio.run(_stream_container(server.ws, parts, name))
    kinds = [m["type"] for m in messages]
    assert kinds[0] == "ready" and kinds[-1] == "final" and code == 1000, messages
    final = messages[-1]
    # the decoded stream is the file (test_a_slot_decodes_...); a live stream's chunks follow its arrival, so
    # the words are compared (its commits may cut the text elsewhere than the file's)
    assert words(final["text"]) == words(wav_text)
    assert abs(final["source_ms"] - CLIP_S * 1000) < 100
    assert "".join(m["text"] for m in messages if m["type"] == "emission") == final["text"]


@needs_shared
@pytest.mark.real
def test_ws_garbage_in_a_container_is_refused_clearly(server: Running) -> None:
    messages, code = asyncio.run(_stream_container(server.ws, [b"this is not a webm stream" * 40], "webm"))
    assert code == 1008 and messages[-1]["type"] == "error"
    assert "webm audio stream cannot be decoded" in messages[-1]["message"]
    messages, code = asyncio.run(_stream_container(server.ws, [], "flac"))
    assert code == 1008 and "format must be one of pcm16, webm, ogg" in messages[-1]["message"]


# ----------------------------------------------------------------------------------------------- the page's fallback
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


@needs_shared
@pytest.mark.real
@pytest.mark.skipif(not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()), reason="needs Debian's chromium and driver")
def test_the_page_records_webm_where_audioworklet_is_missing(server: Running) -> None:
    """Real Chromium without AudioWorkletNode: the page falls back to MediaRecorder and streams WebM / Opus."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service as ChromeService
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                 f"--use-file-for-fake-audio-capture={JFK}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=ChromeService(executable_path=str(CHROMEDRIVER)), options=options)
    try:
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument",
                               {"source": "delete window.AudioWorkletNode;"})  # a browser without AudioWorklet
        driver.get(server.http + "/")
        WebDriverWait(driver, 15).until(lambda d: d.find_element(By.ID, "start").is_enabled())
        assert driver.execute_script("return typeof AudioWorkletNode") == "undefined"
        driver.find_element(By.ID, "source-mic").click()
        driver.find_element(By.ID, "start").click()
        scheduler = server.app.state.scheduler
        WebDriverWait(driver, 15).until(lambda _: scheduler.slots)
        assert [slot.start.format for slot in scheduler.slots.values()] == ["webm"]

        def caption(d: Any) -> bool:
            status = d.find_element(By.ID, "status").get_attribute("data-state")
            assert status != "error", d.find_element(By.ID, "error").text
            return "fellow americans" in " ".join(words(d.find_element(By.ID, "captions").text))

        WebDriverWait(driver, 60, poll_frequency=0.25).until(caption)
        driver.find_element(By.ID, "stop").click()
        WebDriverWait(driver, 30).until(
            lambda d: d.find_element(By.ID, "status").get_attribute("data-state") in ("finished", "error"))
        assert driver.find_element(By.ID, "status").get_attribute("data-state") == "finished"
    finally:
        driver.quit()
