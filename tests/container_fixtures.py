"""Audio encoded into the containers browsers and phones record (PyAV), for the tests of reading them."""

from __future__ import annotations

import io

import av
import numpy as np

RATE = 16000  # the rate of the audio encoded
# (container, codec, the codec's rate): what browsers and phones record
CODECS = {"webm": ("webm", "libopus", 48000), "ogg": ("ogg", "libopus", 48000), "m4a": ("ipod", "aac", 44100),
          "mp3": ("mp3", "libmp3lame", 44100)}


class _Sink:
    """A write-only (not seekable) output: the muxer writes a live stream, as a MediaRecorder does."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.parts.append(bytes(data))
        return len(data)


def encode(audio: np.ndarray, name: str, live: bool = False) -> list[bytes]:
    """``audio`` (16 kHz mono float) encoded into a container with PyAV; the bytes as the muxer wrote them."""
    fmt, codec, rate = CODECS[name]
    sink: _Sink | io.BytesIO = _Sink() if live else io.BytesIO()
    with av.open(sink, "w", format=fmt, container_options={"live": "1"} if live else {}) as container:
        stream = container.add_stream(codec, rate=rate)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray((np.clip(audio, -1, 1)[None, :] * 32767).astype(np.int16), format="s16",
                                           layout="mono")
        frame.sample_rate = RATE
        resampler = av.AudioResampler(format=stream.codec_context.format, layout="mono", rate=rate)
        for piece in [*resampler.resample(frame), *resampler.resample(None)]:
            for packet in stream.encode(piece):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return sink.parts if isinstance(sink, _Sink) else [sink.getvalue()]
