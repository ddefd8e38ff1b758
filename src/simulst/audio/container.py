"""Audio in any container FFmpeg reads (PyAV): whole files, and a container stream decoded as its bytes arrive.

:func:`decode_audio` reads the first audio stream of a file (m4a / mp4 / aac, webm, ogg / opus, mp3, wav, flac,
...) as mono float32 at the model's rate. :class:`StreamDecoder` decodes a container that is still being
written - a browser's MediaRecorder sends a WebM header, then a cluster at a time - and returns the audio of the
bytes fed so far at each :meth:`~StreamDecoder.feed`.

**Mono and rate.** Channels are averaged and the audio is resampled with soxr (high quality), as
:func:`simulst.audio.io.load_audio` does for the files libsndfile reads.

**A stream.** FFmpeg's demuxers pull their input; a stream's bytes are pushed. So a :class:`StreamDecoder`
demuxes and decodes in a thread of its own that reads from the bytes fed: :meth:`~StreamDecoder.feed` hands the
thread the new bytes and returns once it has decoded all it can and waits for more, so each call returns every
sample its bytes complete, with no lag of one call. Undecodable input raises :class:`~simulst.errors.AudioError` at
the call that reveals it; so does a stream whose first ``max_silent_bytes`` bytes hold no decodable audio (a
demuxer that resynchronises on garbage would otherwise read forever).
"""

from __future__ import annotations

import io
import threading
from collections import deque
from collections.abc import Generator, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import soxr

from simulst.audio.io import too_long
from simulst.errors import AudioError

# The containers a stream may come in, by the name a client uses, and FFmpeg's demuxer for each.
STREAM_FORMATS = {"webm": "matroska", "ogg": "ogg"}


def decode_audio(source: str | Path | bytes, sample_rate: int, what: str = "the audio",
                 max_s: float | None = None) -> np.ndarray:
    """The first audio stream of a file (a path, or its bytes) as mono float32 at ``sample_rate``, decoded a frame
    at a time up to ``max_s`` seconds.

    Raises:
        AudioTooLong: more than ``max_s`` seconds decoded (no frame is decoded past the one that passes it).
        AudioError: FFmpeg cannot open or decode it, it holds no audio stream, or no samples.
    """
    chunks: list[np.ndarray] = []
    limit = None if max_s is None else max_s * sample_rate
    decoded = 0
    with closing(decode_blocks(source, sample_rate, what)) as blocks:
        for block in blocks:
            chunks.append(block)
            decoded += block.shape[0]
            if limit is not None and decoded > limit:
                assert max_s is not None
                raise too_long(what, max_s)
    audio = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
    if audio.shape[0] == 0:
        raise AudioError(f"{what} holds no audio samples")
    return audio


def decode_blocks(source: str | Path | bytes, sample_rate: int,
                  what: str = "the audio") -> Generator[np.ndarray, None, None]:
    """The first audio stream of a file (a path, or its bytes) as mono float32 at ``sample_rate``, a decoded frame
    at a time (the memory held is one frame's, whatever the file's length); blocks may be empty.

    Raises:
        AudioError: FFmpeg cannot open or decode it (when the block that reveals it is reached), or it holds no
            audio stream.
    """
    av = _av()
    opened = io.BytesIO(source) if isinstance(source, bytes) else str(source)
    try:
        with av.open(opened, mode="r") as container:
            if not container.streams.audio:
                raise AudioError(f"{what} holds no audio stream")
            mono = _MonoResampler(sample_rate)
            for frame in _frames(container):
                yield mono.frame(frame)
            yield mono.flush()
    except AudioError:
        raise
    except Exception as err:  # PyAV raises av.error.FFmpegError subclasses (and OSError, ValueError) on bad input
        raise AudioError(f"FFmpeg cannot decode {what}: {_reason(err)}") from err


class StreamDecoder:
    """Decodes a container stream (WebM / Matroska or Ogg, any codec FFmpeg has: Opus, Vorbis, ...) fed in pieces.

    Args:
        container: a key of :data:`STREAM_FORMATS` (``webm`` or ``ogg``).
        sample_rate: the rate of the audio returned (mono float32).
        timeout_s: how long one call may wait for the decoding thread before the stream is judged stalled.
        max_silent_bytes: the most bytes read before the first decoded sample.

    Raises:
        AudioError: an unknown container name.
    """

    def __init__(self, container: str, sample_rate: int, timeout_s: float = 10.0,
                 max_silent_bytes: int = 1 << 20) -> None:
        if container not in STREAM_FORMATS:
            raise AudioError(f"unknown stream container {container!r}; known: {', '.join(STREAM_FORMATS)}")
        self.container = container
        self.sample_rate = sample_rate
        self.timeout_s = timeout_s
        self.max_silent_bytes = max_silent_bytes
        self.bytes_in = 0  # bytes fed
        self._cond = threading.Condition()
        self._pending: deque[bytes] = deque()  # fed, not read yet by the demuxer
        self._eof = False  # no more bytes will come
        self._hungry = False  # the demuxer waits for bytes, all fed bytes read
        self._out: list[np.ndarray] = []
        self._error: BaseException | None = None
        self._ended = False  # the thread has ended
        self._decoded_any = False
        self._thread: threading.Thread | None = None

    def feed(self, data: bytes) -> np.ndarray:
        """More bytes of the container: the audio they complete (possibly none yet).

        Raises:
            AudioError: the stream cannot be decoded, or has ended (:meth:`finish`, :meth:`close`).
        """
        if self._eof:
            raise AudioError("the audio stream has ended: no more bytes are read")
        if not data:
            return np.zeros(0, dtype=np.float32)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"decode-{self.container}", daemon=True)
            self._thread.start()
        with self._cond:
            self._pending.append(bytes(data))
            self.bytes_in += len(data)
            self._hungry = False
            self._cond.notify_all()
            settled = self._cond.wait_for(lambda: (self._hungry and not self._pending) or self._ended,
                                          self.timeout_s)
        if not settled:
            self.close()
            raise AudioError(f"decoding the {self.container} stream stalled for {self.timeout_s:g} s")
        return self._take()

    def finish(self) -> np.ndarray:
        """The stream has ended: the rest of its audio (the decoder's last frames).

        Raises:
            AudioError: the stream cannot be decoded.
        """
        with self._cond:
            self._eof = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(self.timeout_s)
            if self._thread.is_alive():
                raise AudioError(f"decoding the {self.container} stream stalled for {self.timeout_s:g} s")
        return self._take()

    def close(self) -> None:
        """Stop decoding (the client left): the thread ends without waiting for more bytes. Idempotent."""
        with self._cond:
            self._eof = True
            self._pending.clear()
            self._cond.notify_all()

    # ------------------------------------------------------------------------------------ the decoding thread
    def _take(self) -> np.ndarray:
        with self._cond:
            error, out = self._error, self._out
            self._out = []
        if error is not None:
            raise AudioError(f"the {self.container} audio stream cannot be decoded: {_reason(error)}") from error
        return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)

    def _read(self, size: int) -> bytes:
        """The demuxer's read: up to ``size`` bytes, waiting for them; empty at the end of the stream."""
        with self._cond:
            while not self._pending and not self._eof:
                self._hungry = True
                self._cond.notify_all()
                self._cond.wait()
            self._hungry = False
            if not self._pending:
                return b""
            if not self._decoded_any and self.bytes_in - sum(map(len, self._pending)) > self.max_silent_bytes:
                raise AudioError(f"no audio decoded from the first {self.max_silent_bytes} bytes")
            piece = self._pending.popleft()
            if len(piece) > size:
                piece, rest = piece[:size], piece[size:]
                self._pending.appendleft(rest)
            return piece

    def _run(self) -> None:
        av = _av()
        try:
            with av.open(_Reader(self._read), mode="r", format=STREAM_FORMATS[self.container],
                         options={"probesize": "32", "analyzeduration": "0"}) as container:
                if not container.streams.audio:
                    raise AudioError("the stream holds no audio track")
                mono = _MonoResampler(self.sample_rate)
                for frame in _frames(container):
                    self._put(mono.frame(frame))
                self._put(mono.flush())
        except Exception as err:  # handed to the feeding side (AudioError, FFmpeg's errors)
            with self._cond:
                self._error = err
        finally:
            with self._cond:
                self._ended = True
                self._cond.notify_all()

    def _put(self, audio: np.ndarray) -> None:
        if audio.shape[0]:
            with self._cond:
                self._out.append(audio)
                self._decoded_any = True


class _Reader:
    """The file-like object a demuxer reads (read only: not seekable)."""

    def __init__(self, read: Any) -> None:
        self.read = read


class _MonoResampler:
    """Decoded frames as mono float32 at one rate (channels averaged; soxr, restarted if the input rate changes)."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._planar = _av().AudioResampler(format="fltp")
        self._in_rate: int | None = None
        self._soxr: Any = None

    def frame(self, frame: Any) -> np.ndarray:
        pieces = []
        for planar in self._planar.resample(frame):
            samples = planar.to_ndarray().astype(np.float32, copy=False)
            mono = samples.mean(axis=0) if samples.shape[0] > 1 else samples[0]
            pieces.append(self._resample(np.ascontiguousarray(mono, dtype=np.float32), int(planar.sample_rate)))
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)

    def flush(self) -> np.ndarray:
        if self._soxr is None:
            return np.zeros(0, dtype=np.float32)
        return np.asarray(self._soxr.resample_chunk(np.zeros(0, dtype=np.float32), last=True), dtype=np.float32)

    def _resample(self, mono: np.ndarray, rate: int) -> np.ndarray:
        tail = np.zeros(0, dtype=np.float32)
        if rate != self._in_rate:
            tail = self.flush()
            self._in_rate = rate
            self._soxr = None if rate == self.rate else soxr.ResampleStream(rate, self.rate, 1, dtype="float32",
                                                                            quality="HQ")
        out = mono if self._soxr is None else self._soxr.resample_chunk(mono, last=False)
        return np.concatenate([tail, np.asarray(out, dtype=np.float32)])


def _frames(container: Any) -> Iterator[Any]:
    """The decoded frames of the container's first audio stream (the decoder flushed at the end)."""
    stream = container.streams.audio[0]
    for packet in container.demux(stream):
        yield from packet.decode()


def _reason(err: BaseException) -> str:
    """An error's message without PyAV's errno and file name decoration."""
    return str(getattr(err, "strerror", None) or err)


def _av() -> Any:
    """PyAV, imported when first needed (it loads FFmpeg's libraries)."""
    try:
        import av
    except ImportError as err:  # pragma: no cover - a dependency of simulst
        raise AudioError("decoding this audio needs PyAV (pip install av)") from err
    return av
