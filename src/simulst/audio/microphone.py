"""Live audio from a microphone: mono float32 blocks at the model's rate, captured through PortAudio (``sounddevice``).

The device is read at its own rate (its default, or one asked for) and resampled on the fly with a streaming soxr
resampler. PortAudio's callback only queues the captured blocks; the reader drains the queue, so a reader that
falls behind (a slow model) gets the backlog as one bigger block. Input overflows (audio PortAudio had to drop) are
counted, not fatal.

``sounddevice`` is imported only when a device is listed or opened: importing simulst never needs PortAudio.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np
import soxr

from simulst.errors import DeviceError

NO_INPUT_DEVICE = (
    "no audio input device found (PortAudio sees none); connect a microphone or use "
    "`simulst transcribe FILE --realtime`"
)
STALL_S = 5.0  # a started device that delivers nothing for this long has stopped


def load_sounddevice() -> Any:
    """The ``sounddevice`` module (imported now).

    Raises:
        DeviceError: the package or the PortAudio library it needs is missing.
    """
    try:
        import sounddevice
    except OSError as err:  # sounddevice loads libportaudio when imported
        raise DeviceError(
            f"the PortAudio library is not available ({err}); install it (Debian: apt-get install libportaudio2) "
            "or use `simulst transcribe FILE --realtime`"
        ) from err
    except ImportError as err:
        raise DeviceError("the sounddevice package is not installed (pip install sounddevice)") from err
    return sounddevice


@dataclass(frozen=True)
class InputDevice:
    """A PortAudio device with input channels."""

    index: int
    name: str
    host_api: str
    channels: int
    default_rate: float
    default: bool = False

    def describe(self) -> str:
        """One line of ``simulst live --list-devices`` (``*`` marks the default input)."""
        mark = "*" if self.default else " "
        return (f"{mark} {self.index:3d}  {self.name} ({self.host_api}, {self.channels} in, "
                f"{self.default_rate:g} Hz)")


def list_input_devices(backend: Any = None) -> list[InputDevice]:
    """The input devices PortAudio sees (``backend``: the ``sounddevice`` module, or a stand-in for tests).

    Raises:
        DeviceError: PortAudio is missing or cannot list its devices.
    """
    sd = load_sounddevice() if backend is None else backend
    try:
        devices = list(sd.query_devices())
        host_apis = [str(api["name"]) for api in sd.query_hostapis()]
        default_index = int(sd.default.device[0])
    except sd.PortAudioError as err:
        raise DeviceError(f"PortAudio cannot list the audio devices: {err}") from err
    found = []
    for info in devices:
        if int(info["max_input_channels"]) < 1:
            continue
        api = int(info["hostapi"])
        found.append(InputDevice(
            index=int(info["index"]), name=str(info["name"]),
            host_api=host_apis[api] if 0 <= api < len(host_apis) else "?",
            channels=int(info["max_input_channels"]), default_rate=float(info["default_samplerate"]),
            default=int(info["index"]) == default_index,
        ))
    return found


def find_input_device(spec: int | str | None = None, backend: Any = None) -> InputDevice:
    """The input device ``spec`` names: an index, a (case-insensitive) part of its name, or ``None`` for the
    default input.

    Raises:
        DeviceError: there is no input device, none matches, or a name matches several.
    """
    devices = list_input_devices(backend)
    if not devices:
        raise DeviceError(NO_INPUT_DEVICE)
    choices = "; ".join(f"{d.index}: {d.name}" for d in devices)
    if spec is None or (isinstance(spec, str) and not spec.strip()):
        for device in devices:
            if device.default:
                return device
        return devices[0]
    text = str(spec).strip()
    if isinstance(spec, int) or text.isdigit():
        for device in devices:
            if device.index == int(text):
                return device
        raise DeviceError(f"no audio input device with index {text} (inputs: {choices})")
    exact = [d for d in devices if d.name.lower() == text.lower()]
    matches = exact or [d for d in devices if text.lower() in d.name.lower()]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise DeviceError(f"no audio input device matches {text!r} (inputs: {choices})")
    raise DeviceError(f"{text!r} matches several input devices ({'; '.join(f'{d.index}: {d.name}' for d in matches)}); "
                      "give its index")


class Resampler:
    """Streaming resampling of consecutive blocks (soxr ``ResampleStream``); a pass-through at equal rates."""

    def __init__(self, in_rate: float, out_rate: float, quality: str = "HQ") -> None:
        self.in_rate = float(in_rate)
        self.out_rate = float(out_rate)
        self._stream = None if self.in_rate == self.out_rate else soxr.ResampleStream(
            self.in_rate, self.out_rate, 1, dtype="float32", quality=quality)

    def __call__(self, block: np.ndarray, last: bool = False) -> np.ndarray:
        """The next resampled samples (fewer at first: soxr's delay; ``last``: flush it)."""
        block = np.ascontiguousarray(block, dtype=np.float32)
        if self._stream is None:
            return block
        return np.asarray(self._stream.resample_chunk(block, last=last), dtype=np.float32)

    def flush(self) -> np.ndarray:
        """The samples still held back by the resampler (the source has ended)."""
        return self(np.zeros(0, dtype=np.float32), last=True)


class Microphone:
    """Capture from a PortAudio input device as mono float32 at ``sample_rate``.

    Use as a context manager (``with Microphone(16000) as mic: for block in mic.blocks(): ...``) or call
    :meth:`start` / :meth:`stop`.

    Args:
        sample_rate: the rate of the blocks handed out (the model's).
        device: an :class:`InputDevice`, an index, part of a name, or ``None`` (the default input).
        capture_rate: the rate the device is opened at (default: the device's default rate).
        block_ms: how much audio PortAudio hands over per callback.
        backend: the ``sounddevice`` module, or a stand-in for tests.

    Raises:
        DeviceError: PortAudio is missing, there is no (such) input device, or it cannot be opened.
    """

    def __init__(self, sample_rate: int = 16000, device: InputDevice | int | str | None = None,
                 capture_rate: float | None = None, block_ms: float = 100.0, backend: Any = None) -> None:
        self._sd = load_sounddevice() if backend is None else backend
        self.device = device if isinstance(device, InputDevice) else find_input_device(device, self._sd)
        self.sample_rate = int(sample_rate)
        self.capture_rate = float(capture_rate or self.device.default_rate)
        if self.capture_rate <= 0 or self.sample_rate <= 0:
            raise DeviceError(f"bad sample rates: capture {self.capture_rate:g} Hz, output {self.sample_rate} Hz")
        self.block_frames = max(1, round(self.capture_rate * block_ms / 1000.0))
        self.overflows = 0  # callbacks that reported an input overflow (audio lost)
        self.captured = 0  # samples captured, at capture_rate
        self.started_at: float | None = None  # time.perf_counter() when the capture began
        self._resample = Resampler(self.capture_rate, self.sample_rate)
        self._queue: queue.SimpleQueue[np.ndarray | None] = queue.SimpleQueue()
        self._stream: Any = None
        self._ended = False

    # ------------------------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Open the device and start capturing (blocks queue up until read)."""
        if self._stream is not None:
            return
        if self.started_at is not None:  # started again after a stop: a fresh capture
            self._queue = queue.SimpleQueue()
            self._resample = Resampler(self.capture_rate, self.sample_rate)
        channels = 1
        try:
            try:
                stream = self._open(channels)
            except self._sd.PortAudioError:
                if self.device.channels < 2:
                    raise
                channels = min(2, self.device.channels)  # some devices refuse mono: mix down here instead
                stream = self._open(channels)
            stream.start()
        except (self._sd.PortAudioError, ValueError) as err:
            raise DeviceError(f"cannot open audio input device {self.device.index} ({self.device.name}) at "
                              f"{self.capture_rate:g} Hz: {err}") from err
        self._stream = stream
        self._ended = False
        self.started_at = time.perf_counter()

    def stop(self) -> None:
        """Stop capturing and close the device (what was captured can still be read)."""
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.stop()
                stream.close()
            except self._sd.PortAudioError:
                pass  # the device may be gone already
            self._queue.put(None)

    def __enter__(self) -> Microphone:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------ reading
    def read(self, timeout: float | None = None) -> np.ndarray | None:
        """All audio captured since the last read, resampled (possibly empty), waiting up to ``timeout`` seconds for
        some; ``None`` when nothing came in time or the capture has ended (see :attr:`ended`)."""
        if self._ended:
            return None
        try:
            first = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        pieces = [first]
        while pieces[-1] is not None:
            try:
                pieces.append(self._queue.get_nowait())
            except queue.Empty:
                break
        ended = pieces[-1] is None
        raw = [p for p in pieces if p is not None]
        block = self._resample(np.concatenate(raw)) if raw else np.zeros(0, dtype=np.float32)
        if ended:
            self._ended = True
            block = np.concatenate([block, self._resample.flush()])
        return block

    @property
    def ended(self) -> bool:
        """The capture has stopped and everything captured was read."""
        return self._ended

    def blocks(self, duration_s: float | None = None, stall_s: float = STALL_S) -> Iterator[np.ndarray]:
        """Non-empty blocks of resampled audio as they arrive, until ``duration_s`` seconds of it (default: until the
        capture stops). Starts the capture if needed.

        Raises:
            DeviceError: the device delivered nothing for ``stall_s`` seconds.
        """
        self.start()
        limit = None if duration_s is None else round(duration_s * self.sample_rate)
        delivered = 0
        while limit is None or delivered < limit:
            block = self.read(timeout=stall_s)
            if block is None:
                if self._ended:
                    return
                raise DeviceError(f"the audio input device {self.device.name!r} delivered no audio for {stall_s:g} s")
            if limit is not None:
                block = block[: limit - delivered]
            if block.size:
                delivered += block.shape[0]
                yield block

    def _open(self, channels: int) -> Any:
        return self._sd.InputStream(
            samplerate=self.capture_rate, blocksize=self.block_frames, device=self.device.index, channels=channels,
            dtype="float32", callback=self._callback, finished_callback=self._finished,
        )

    def _callback(self, indata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
        """PortAudio's thread: queue a mono copy of the block; count overflows."""
        if getattr(status, "input_overflow", False):
            self.overflows += 1
        mono = indata[:, 0].copy() if indata.shape[1] == 1 else indata.mean(axis=1, dtype=np.float32)
        self.captured += mono.shape[0]
        self._queue.put(mono)

    def _finished(self) -> None:
        """PortAudio's thread: the stream has stopped (closed, or the device went away)."""
        self._queue.put(None)
