"""OpenAI's audio API with the official ``openai`` client against a real server (Whisper tiny.en): ``stream=True``
yields a delta per committed emission then the whole text, ``verbose_json`` gives segments and word times, every
response format, the prompt, cancelling on disconnect, ``/v1/models/{id}``, and OpenAI-shaped errors on every path."""

from __future__ import annotations

import dataclasses
import io
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf

from simulst.audio.io import load_audio
from simulst.models.loading import load_model
from simulst.models.whisper import WhisperModel
from simulst.server.access import error_body
from simulst.server.app import create_app
from simulst.server.openai_api import MAX_PROMPT_TOKENS, compression_ratio, segments
from simulst.server.openai_api import words as words_of
from simulst.server.protocol import Limits, StartRequest
from simulst.server.service import ServerConfig, Service
from simulst.streaming.engine import SpeechEngine
from simulst.streaming.prompt import initial_prompt
from simulst.streaming.session import Session
from simulst.types import Emission, Word
from tests.server_fixtures import Running, serving
from tests.shared_assets import JFK, JFK_PHRASE, needs_shared, words

pytestmark = [needs_shared, pytest.mark.real]

FAST = Limits(max_speed=1000.0, burst_s=1000.0)
RATE = 16000


def wav(audio: np.ndarray) -> bytes:
    out = io.BytesIO()
    sf.write(out, audio, RATE, format="WAV")
    return out.getvalue()


@pytest.fixture(scope="module")
def model() -> WhisperModel:
    return load_model()


@pytest.fixture(scope="module")
def server(model: WhisperModel) -> Iterator[Running]:
    with serving(create_app(Service(model, ServerConfig(limits=FAST, max_streams=4)))) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: Running) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.http}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def jfk_wav() -> bytes:
    return JFK.read_bytes()


@pytest.fixture(scope="module")
def plain(client: openai.OpenAI, jfk_wav: bytes) -> str:
    """The json response's text of the whole jfk.wav."""
    return client.audio.transcriptions.create(model="whisper-1", file=("jfk.wav", jfk_wav)).text


# ------------------------------------------------------------------------------------------------ streaming
def test_stream_yields_a_delta_per_emission_then_the_text(client: openai.OpenAI, jfk_wav: bytes, plain: str) -> None:
    events = list(client.audio.transcriptions.create(model="whisper-1", file=("jfk.wav", jfk_wav), stream=True))
    kinds = [event.type for event in events]
    assert kinds[-1] == "transcript.text.done" and set(kinds[:-1]) == {"transcript.text.delta"}
    deltas = [event.delta for event in events[:-1]]  # type: ignore[union-attr]
    assert len(deltas) >= 4  # the file is decoded as a stream: one delta per commit, not one at the end
    done = events[-1].text  # type: ignore[union-attr]
    assert "".join(deltas) == done == plain  # the deltas add up to the text; the same text as without streaming
    assert JFK_PHRASE.search(" ".join(words(done)))


def test_stream_over_raw_http_is_server_sent_events(server: Running, jfk_wav: bytes) -> None:
    with httpx.stream("POST", f"{server.http}/v1/audio/transcriptions", timeout=120,
                      files={"file": ("jfk.wav", jfk_wav[: 44 + RATE * 2 * 3])}, data={"stream": "true"}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: {") for line in lines) and '"transcript.text.done"' in lines[-1]


def test_a_client_that_disconnects_stops_the_decoding(server: Running, jfk_wav: bytes) -> None:
    long = wav(np.tile(load_audio(JFK), 6))  # 66 s: far more than is decoded before the client leaves
    jobs_before = httpx.get(f"{server.http}/health").json()["jobs"]
    with httpx.stream("POST", f"{server.http}/v1/audio/transcriptions", timeout=120,
                      files={"file": ("long.wav", long)}, data={"stream": "true"}) as response:
        first = next(line for line in response.iter_lines() if line)
        assert "transcript.text.delta" in first
    # the client has gone: the stream leaves the scheduler and its jobs stop
    deadline = time.monotonic() + 20
    while httpx.get(f"{server.http}/health").json()["streams"] and time.monotonic() < deadline:
        time.sleep(0.1)
    health = httpx.get(f"{server.http}/health").json()
    assert health["streams"] == 0
    time.sleep(1.0)
    jobs = httpx.get(f"{server.http}/health").json()["jobs"]
    assert jobs == health["jobs"]  # no job ran after the stream was removed
    assert jobs - jobs_before < 66  # (66 chunks of 1 s: the whole file was not decoded)


# ------------------------------------------------------------------------------------------------ formats
def test_verbose_json_segments_and_words(client: openai.OpenAI, jfk_wav: bytes, plain: str) -> None:
    result = client.audio.transcriptions.create(model="whisper-1", file=("jfk.wav", jfk_wav),
                                                response_format="verbose_json",
                                                timestamp_granularities=["word", "segment"])
    assert result.language == "english" and abs(result.duration - 11.0) < 0.01 and result.text == plain
    assert result.usage is not None and result.usage.seconds == result.duration
    assert result.segments and "".join(s.text for s in result.segments).strip() == plain
    assert [s.id for s in result.segments] == list(range(len(result.segments)))
    for segment in result.segments:
        assert 0.0 <= segment.start <= segment.end <= result.duration + 0.01 and segment.tokens
        assert segment.temperature == 0.0 and segment.compression_ratio > 0
        assert segment.avg_logprob is None and segment.no_speech_prob is None  # (not known for a streamed segment)
    assert all(a.start <= b.start for a, b in zip(result.segments, result.segments[1:], strict=False))
    assert result.words and words(" ".join(w.word for w in result.words)) == words(plain)
    for word in result.words:
        assert 0.0 <= word.start <= word.end <= result.duration + 0.01
    assert all(a.start <= b.start for a, b in zip(result.words, result.words[1:], strict=False))
    fellow = next(w for w in result.words if w.word.strip(",.").lower() == "fellow")
    assert 1.0 < fellow.start < 2.2  # "fellow" is said at about 1.5 s (its commit comes a second or so later)
    first = result.segments[0]  # "And so my fellow Americans.": spoken from about 0.3 s to 2.3 s
    assert first.start < 0.8 and 1.8 < first.end < 2.8 and first.end < first.seek / 100 + 3


def test_verbose_json_gives_what_is_asked_for(client: openai.OpenAI, jfk: np.ndarray) -> None:
    upload = ("short.wav", wav(jfk[: int(RATE * 2.8)]))
    default = client.audio.transcriptions.create(model="whisper-1", file=upload, response_format="verbose_json")
    assert default.segments and default.words is None  # segments by default
    only_words = client.audio.transcriptions.create(model="whisper-1", file=upload, response_format="verbose_json",
                                                    timestamp_granularities=["word"])
    assert only_words.words and only_words.segments is None
    assert [w.word for w in only_words.words] == default.text.split()


@pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")  # (the SDK's translations)
def test_every_response_format(client: openai.OpenAI, jfk: np.ndarray) -> None:
    upload = ("short.flac", _flac(jfk[: RATE * 3]))
    text = str(client.audio.transcriptions.create(model="whisper-1", file=upload, response_format="text"))
    assert text.endswith("\n") and "fellow americans" in " ".join(words(text))
    srt = str(client.audio.transcriptions.create(model="whisper-1", file=upload, response_format="srt"))
    assert srt.startswith("1\n00:00:0") and " --> " in srt
    vtt = str(client.audio.transcriptions.create(model="whisper-1", file=upload, response_format="vtt"))
    assert vtt.startswith("WEBVTT") and "Americans" in vtt
    raw = httpx.post(f"{client.base_url}audio/transcriptions", files={"file": upload}, timeout=120).json()
    assert raw == {"text": text.strip(), "usage": {"type": "duration", "seconds": 3.0}}
    translated = client.audio.translations.create(model="whisper-1", file=upload, response_format="verbose_json")
    assert translated.text == text.strip()  # an English-only model: the speech is its own translation


def _flac(audio: np.ndarray) -> bytes:
    out = io.BytesIO()
    sf.write(out, audio, RATE, format="FLAC")
    return out.getvalue()


@pytest.fixture(scope="module")
def jfk() -> np.ndarray:
    return load_audio(JFK)


# ------------------------------------------------------------------------------------------------ prompt
def test_the_prompt_is_the_previous_text_of_every_decode(model: WhisperModel, jfk: np.ndarray) -> None:
    service = Service(model, ServerConfig())
    stream = service.open(StartRequest(task="transcribe", prompt="President Kennedy's inaugural address.")).stream
    assert isinstance(stream, Session)
    carried = tuple(model.tokenizer.encode(" President Kennedy's inaugural address."))
    prompts = []
    for pos in range(0, RATE * 6, RATE):
        stream.push(jfk[pos : pos + RATE])
        prompts.append(stream.decoder.last.prompt)
    stream.finish()
    for prompt in [p for p in prompts if p]:
        # <|startofprev|>, the prompt's tokens, then the pinned task prompt (<|startoftranscript|> ...)
        assert prompt[0] == model.sot_prev_id and prompt[1 : 1 + len(carried)] == carried
    assert JFK_PHRASE.search(" ".join(words(stream.text))) or "fellow americans" in " ".join(words(stream.text))


def test_a_long_prompt_keeps_its_end(model: WhisperModel, jfk: np.ndarray) -> None:
    stream = Service(model, ServerConfig()).open(StartRequest(prompt=" ".join(["word"] * 400))).stream
    stream.push(jfk[: RATE * 2])
    prompt = stream.decoder.last.prompt  # type: ignore[attr-defined]
    assert prompt.index(model.sot_id) - 1 <= MAX_PROMPT_TOKENS  # (openai-whisper's limit on previous text)


def test_a_stream_opened_with_a_prompt_decodes_as_one_seeded_with_it(model: WhisperModel, jfk: np.ndarray) -> None:
    """The endpoints open their stream with the prompt (``StartRequest.prompt``, into ``StreamOptions.prompt``):
    the same decoder prompts and text as the stream given it once open, as a stream opened with options holding
    it (the command line's ``--prompt``) and as a server whose options hold it (a client's empty prompt keeps
    it); without one, the stream's own previous text alone."""
    text = "President Kennedy's inaugural address."
    service = Service(model, ServerConfig())
    seeded = service.open(StartRequest()).stream
    assert isinstance(seeded, Session)
    seeded.prompt.initial = initial_prompt(model, text)  # (given once open, before any decode)
    with_prompt = dataclasses.replace(ServerConfig().options, prompt=text)
    streams = {"seeded": seeded, "opened": service.open(StartRequest(prompt=text)).stream,
               "plain": service.open(StartRequest()).stream,
               "options": SpeechEngine(model).open(with_prompt, catch_up=True),  # (simulst transcribe --prompt)
               "server's": Service(model, ServerConfig(options=with_prompt)).open(StartRequest(prompt="")).stream}
    prompts: dict[str, list[tuple[int, ...]]] = {name: [] for name in streams}
    for pos in range(0, RATE * 6, RATE):
        for name, stream in streams.items():
            stream.push(jfk[pos : pos + RATE])
            prompts[name].append(tuple(stream.decoder.last.prompt))  # type: ignore[attr-defined]
    for stream in streams.values():
        stream.finish()
    for name in ("opened", "options", "server's"):
        assert prompts[name] == prompts["seeded"] and streams[name].text == streams["seeded"].text, name
    carried = tuple(model.tokenizer.encode(" " + text))
    assert all(p[1 : 1 + len(carried)] == carried for p in prompts["opened"])
    assert not any(p[1 : 1 + len(carried)] == carried for p in prompts["plain"])


def test_the_prompt_goes_through_the_form(client: openai.OpenAI, jfk: np.ndarray) -> None:
    upload = ("short.wav", wav(jfk[: RATE * 3]))
    text = client.audio.transcriptions.create(model="whisper-1", file=upload, prompt="Kennedy said:",
                                              language="en", temperature=0.2).text
    assert "fellow americans" in " ".join(words(text))


# ------------------------------------------------------------------------------------------------ helpers
def test_segments_end_at_sentence_ends_and_time_by_spoken_words() -> None:
    def emission(text: str, source_ms: float, start: float | None, end: float | None,
                 pieces: tuple[Word, ...] = ()) -> Emission:
        return Emission(text, (1, 2), source_ms, source_ms, start_ms=start, end_ms=end, words=pieces)

    timed = [emission("And so", 2000, 100, 800, (Word("And", 100, 300), Word("so", 400, 800))),
             emission(" my friends.", 3000, 900, 2100, (Word("my", 900, 1100), Word("friends.", 1200, 2100))),
             emission(" Ask 3.", 4000, 2500, 2800, (Word("Ask", 2500, 2600), Word("3.", 2700, 2800))),
             emission("5 percent.", 5000, 2900, 3300, (Word("5", 2900, 3000, joins_previous=True),
                                                       Word("percent.", 3100, 3300)))]
    out = segments(timed)
    assert [s["text"] for s in out] == ["And so my friends.", " Ask 3.5 percent."]  # (" 3." does not end one)
    assert [s["tokens"] for s in out] == [[1, 2, 1, 2], [1, 2, 1, 2]] and [s["id"] for s in out] == [0, 1]
    assert [(s["start"], s["end"]) for s in out] == [(0.1, 2.1), (2.5, 3.3)]  # the spoken times of the words
    assert [(w["word"], w["start"], w["end"]) for w in words_of(timed)] == [
        ("And", 0.1, 0.3), ("so", 0.4, 0.8), ("my", 0.9, 1.1), ("friends.", 1.2, 2.1), ("Ask", 2.5, 2.6),
        ("3.5", 2.7, 3.0), ("percent.", 3.1, 3.3)]  # a word split across emissions is one word
    untimed = segments([emission("And so.", 2000, None, None), emission(" Ask not.", 4000, None, None)])
    assert [(s["start"], s["end"]) for s in untimed] == [(0.0, 2.0), (2.0, 4.0)]  # commit times bound them
    assert compression_ratio("") == 0.0 and compression_ratio("ab" * 100) > 5  # repetitive text compresses well


def test_error_bodies_have_openai_types() -> None:
    expected = {400: ("invalid_request_error", None), 401: ("invalid_request_error", "invalid_api_key"),
                404: ("invalid_request_error", "not_found"), 413: ("invalid_request_error", "request_too_large"),
                429: ("requests", "rate_limit_exceeded"), 500: ("server_error", "server_error"),
                503: ("server_error", "server_overloaded")}
    for status, (kind, code) in expected.items():
        body = error_body(status, "why")["error"]
        assert body == {"message": "why", "type": kind, "param": None, "code": code}, status
    assert error_body(400, "bad", "language", "x")["error"]["param"] == "language"


# ------------------------------------------------------------------------------------------------ errors
def _error(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    return dict(body["error"])


def test_every_path_answers_errors_in_openai_shape(server: Running, client: openai.OpenAI, jfk: np.ndarray) -> None:
    url = f"{server.http}/v1/audio/transcriptions"
    upload = {"file": ("a.wav", wav(jfk[: RATE]))}
    cases: list[tuple[httpx.Response, int, str | None]] = [
        (httpx.post(url, data={"model": "whisper-1"}), 400, "file"),
        (httpx.post(url, content=b"not a form", headers={"content-type": "text/plain"}), 400, "file"),
        (httpx.post(url, files=upload, data={"response_format": "xml"}), 400, "response_format"),
        (httpx.post(url, files=upload, data={"temperature": "2"}), 400, "temperature"),
        (httpx.post(url, files=upload, data={"timestamp_granularities[]": "word"}), 400, "timestamp_granularities[]"),
        (httpx.post(url, files=upload, data={"response_format": "verbose_json", "timestamp_granularities[]": "line"}),
         400, "timestamp_granularities[]"),
        (httpx.post(url, files=upload, data={"stream": "true", "response_format": "srt"}), 400, "stream"),
        (httpx.post(url, files=upload, data={"language": "de"}), 400, "language"),  # an English-only model
        (httpx.post(url, files={"file": ("a.wav", b"RIFF....WAVEnot really")}), 400, "file"),
        (httpx.get(f"{server.http}/no/such/path"), 404, None),
        (httpx.get(f"{server.http}/v1/models/gpt-9"), 404, "model"),
        (httpx.delete(f"{server.http}/v1/models"), 405, None),
    ]
    for response, status, param in cases:
        assert response.status_code == status, (response.request.url, response.text)
        error = _error(response)
        assert error["param"] == param and error["message"], error
        assert error["type"] == "invalid_request_error"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-9")
    assert client.models.retrieve("whisper-tiny.en").id == "whisper-tiny.en"
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.audio.transcriptions.create(model="whisper-1", file=upload["file"], temperature=1.5)


def test_auth_full_too_long_and_failure_errors(model: WhisperModel, jfk: np.ndarray) -> None:
    upload = {"file": ("a.wav", wav(jfk[: RATE * 3]))}

    class Failing(Service):
        def open(self, start: StartRequest) -> Any:
            raise RuntimeError("injected")

    with serving(create_app(Service(model, ServerConfig(token="s3cret", max_streams=1,
                                                        limits=Limits(max_audio_s=2.0))))) as running:
        url = f"{running.http}/v1/audio/transcriptions"
        unauthorized = httpx.post(url, files=upload)
        assert unauthorized.status_code == 401 and _error(unauthorized)["code"] == "invalid_api_key"
        headers = {"authorization": "Bearer s3cret"}
        too_long = httpx.post(url, files=upload, headers=headers)  # 3 s of audio, 2 s allowed
        assert too_long.status_code == 413 and _error(too_long)["code"] == "audio_too_long"
        scheduler = running.app.state.scheduler
        assert scheduler.reserve()  # the only place is taken
        try:
            full = httpx.post(url, files={"file": ("a.wav", wav(jfk[:RATE]))}, headers=headers)
        finally:
            scheduler.release()
        assert full.status_code == 503 and _error(full)["type"] == "server_error"
        with pytest.raises(openai.APIStatusError) as refused:
            openai.OpenAI(base_url=f"{running.http}/v1", api_key="s3cret", max_retries=0).audio.transcriptions.create(
                model="whisper-1", file=("a.wav", wav(jfk[: RATE * 3])))
        assert refused.value.status_code == 413
    with serving(create_app(Failing(model, ServerConfig()))) as running:
        failed = httpx.post(f"{running.http}/v1/audio/transcriptions", files=upload)
        assert failed.status_code == 500 and _error(failed)["type"] == "server_error"
