"""The websocket protocol of ``simulst serve`` (``/ws``): messages, their validation, and the server's limits.

Client → server::

    {"type": "start", "sample_rate": 16000, "task": "transcribe" | "translate", "language": "en",
     "to": "es" | null, "policy": "la-2", "chunk_ms": 1000, "vad": false, "speech": false}   (all but type optional)
    binary frames: 16-bit little-endian mono PCM at ``sample_rate`` (``"format": "pcm16"``, the default), or the
        successive bytes of a WebM or Ogg container (``"format": "webm"`` / ``"ogg"``: a MediaRecorder's output,
        Opus or any codec FFmpeg decodes; ``sample_rate`` is then the container's)
    {"type": "end"}

Server → client::

    {"type": "ready", "stream": ID, "sample_rate": 16000, "channels": ["source"] | ["target"] | ["source", "target"],
     "replica": NAME}  (the process, or the Ray Serve replica, serving the stream for its whole life)
    {"type": "emission", "channel": "source" | "target", "text", "source_ms", "elapsed_ms", "start_ms", "end_ms",
     "final"}
    {"type": "speech", "sample_rate", "samples", "text"} followed by one binary frame (16-bit PCM) of that speech
    {"type": "final", "text", "source_text", "source_ms", "elapsed_ms", "compute_s"}      then a normal close
    {"type": "error", "message"}                                                          then a close

``source`` is the transcript of the speech, ``target`` the translation (Whisper's X → English, or the cascade's
``to`` language). ``source_ms``: source audio read when the text was committed; ``elapsed_ms``: wall-clock time
since the stream's first audio reached the server when the text was sent; ``start_ms``, ``end_ms``: where the
text was spoken in the stream's audio (ms from its first sample; a translation: the source speech it was made
from; null: untimed).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from simulst.config import TASKS, PolicyOptions
from simulst.errors import OptionError, SimulstError


class ProtocolError(SimulstError):
    """A client broke the protocol (malformed message, audio before ``start``, a bad frame, a flood...)."""

    reason = "protocol"  # the refusal's name in the server's metrics


class FloodError(ProtocolError):
    """A client sent audio faster than real time allows."""

    reason = "flood"


class TooLongError(ProtocolError):
    """A stream's or an upload's audio passed the server's duration limit."""

    reason = "oversize"


@dataclass(frozen=True)
class Limits:
    """What the server accepts from a client.

    Attributes:
        min_rate, max_rate: accepted ``sample_rate`` (audio at another rate than the model's is resampled).
        min_chunk_ms, max_chunk_ms: accepted ``chunk_ms``.
        max_frame_ms: the longest audio one binary frame may carry.
        max_speed: audio may arrive at most this many times faster than real time (after ``burst_s`` seconds of
            allowance): a client that sends faster floods the server and is cut off.
        burst_s: audio a client may send ahead of real time (a buffered start, a network hiccup).
        max_text_bytes: the longest JSON message.
        start_timeout_s: how long a connection may wait before its ``start`` message.
        max_audio_s: the longest audio one stream or one uploaded file may have (None: no limit).
    """

    min_rate: int = 8000
    max_rate: int = 96000
    min_chunk_ms: float = 200.0
    max_chunk_ms: float = 5000.0
    max_frame_ms: float = 2000.0
    max_speed: float = 2.0
    burst_s: float = 10.0
    max_text_bytes: int = 4096
    start_timeout_s: float = 5.0
    max_audio_s: float | None = 7200.0

    def frame_bytes(self, sample_rate: int) -> int:
        """The largest binary frame accepted at this rate (16-bit samples)."""
        return 2 * math.ceil(sample_rate * self.max_frame_ms / 1000.0)


@dataclass(frozen=True)
class StartRequest:
    """A validated ``start`` message."""

    sample_rate: int = 16000
    task: str = "transcribe"
    language: str | None = None
    to: str | None = None
    policy: str | None = None
    chunk_ms: float | None = None
    vad: bool | None = None
    speech: bool = False
    format: str = "pcm16"
    prompt: str | None = None  # text said before the audio (StreamOptions.prompt; the OpenAI endpoints' prompt)


_START_FIELDS = {"type", "sample_rate", "task", "language", "to", "policy", "chunk_ms", "vad", "speech", "token",
                 "format", "prompt"}
MAX_PROMPT_CHARS = 4096  # (a prompt's last MAX_PREVIOUS_TOKENS tokens condition the decoder: a longer text is refused)
FORMATS = ("pcm16", "webm", "ogg")  # the audio a client sends: raw 16-bit PCM, or a container stream


def parse_message(text: str, limits: Limits) -> dict[str, Any]:
    """A client's JSON text message as a dict with a string ``type``."""
    if len(text.encode("utf-8")) > limits.max_text_bytes:
        raise ProtocolError(f"text message longer than {limits.max_text_bytes} bytes")
    try:
        message = json.loads(text)
    except json.JSONDecodeError as err:
        raise ProtocolError(f"malformed JSON: {err.msg} (line {err.lineno} column {err.colno})") from err
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ProtocolError('a text message must be a JSON object with a "type", e.g. {"type": "start"}')
    return message


def parse_start(message: dict[str, Any], limits: Limits) -> StartRequest:
    """Validate a ``start`` message against the server's limits."""
    unknown = sorted(set(message) - _START_FIELDS)
    if unknown:
        raise ProtocolError(f"unknown start field(s): {', '.join(unknown)}; known: {', '.join(sorted(_START_FIELDS))}")
    rate = message.get("sample_rate", 16000)
    if isinstance(rate, bool) or not isinstance(rate, int) or not limits.min_rate <= rate <= limits.max_rate:
        raise ProtocolError(f"sample_rate must be an integer from {limits.min_rate} to {limits.max_rate} Hz, "
                            f"got {rate!r}")
    task = message.get("task", "transcribe")
    if task not in TASKS:
        raise ProtocolError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    language, to, policy = (_optional_text(message, key) for key in ("language", "to", "policy"))
    if policy is not None:
        try:
            PolicyOptions.parse(policy)
        except OptionError as err:
            raise ProtocolError(str(err)) from err
    chunk = message.get("chunk_ms")
    if chunk is not None:
        if isinstance(chunk, bool) or not isinstance(chunk, int | float) or not math.isfinite(chunk) \
                or not limits.min_chunk_ms <= chunk <= limits.max_chunk_ms:
            raise ProtocolError(f"chunk_ms must be a number from {limits.min_chunk_ms:g} to {limits.max_chunk_ms:g}, "
                                f"got {chunk!r}")
        chunk = float(chunk)
    vad, speech = message.get("vad"), message.get("speech", False)
    if vad is not None and not isinstance(vad, bool):
        raise ProtocolError(f"vad must be true or false, got {vad!r}")
    if not isinstance(speech, bool):
        raise ProtocolError(f"speech must be true or false, got {speech!r}")
    audio_format = message.get("format", "pcm16")
    if audio_format not in FORMATS:
        raise ProtocolError(f"format must be one of {', '.join(FORMATS)}, got {audio_format!r}")
    prompt = message.get("prompt")
    if prompt is not None and (not isinstance(prompt, str) or len(prompt) > MAX_PROMPT_CHARS):
        raise ProtocolError(f"prompt must be a string of at most {MAX_PROMPT_CHARS} characters")
    return StartRequest(rate, task, language, to, policy, chunk, vad, speech, audio_format, prompt or None)


def _optional_text(message: dict[str, Any], key: str) -> str | None:
    value = message.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > 64:
        raise ProtocolError(f"{key} must be a short string, got {value!r}")
    return value


def error(message: str) -> dict[str, Any]:
    """An ``error`` message."""
    return {"type": "error", "message": message}
