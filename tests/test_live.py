"""``simulst live``: the microphone (a stand-in for PortAudio, and the real one, which sees no device here), the
resampling of a device's rate to the model's, and the live loop on the real Whisper tiny.en fed by a fake microphone."""

from __future__ import annotations

import argparse
import builtins
import json
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simulst.audio.io import load_audio
from simulst.audio.microphone import (
    NO_INPUT_DEVICE,
    InputDevice,
    Microphone,
    Resampler,
    find_input_device,
    list_input_devices,
    load_sounddevice,
)
from simulst.cli import live
from simulst.cli.main import main
from simulst.cli.printing import StreamOutput
from simulst.config import StreamOptions
from simulst.errors import DeviceError
from simulst.models.base import SpeechModel
from simulst.streaming.engine import SpeechEngine
from tests.shared_assets import JFK, needs_shared, phrase
from tests.toy import ToySpeechModel, tone

PHRASE = "ask not what your country can do for you"


# ---------------------------------------------------------------------------------------------- helpers
def run_live_cli(argv: list[str]) -> int:
    """``simulst live ARGS`` through the command's entry point (its exit codes)."""
    return main(["live", *argv])


def real_portaudio_has_inputs() -> bool:
    try:
        return bool(list_input_devices())
    except DeviceError:
        return False


class FakeFlags:
    def __init__(self, overflow: bool) -> None:
        self.input_overflow = overflow


class FakeInputStream:
    """Delivers ``backend.signal`` (at the opened rate) in ``blocksize`` blocks from a thread, then finishes."""

    def __init__(self, backend: FakeSoundDevice, samplerate: float, blocksize: int, device: int, channels: int,
                 dtype: str, callback: Any, finished_callback: Any) -> None:
        if channels == 1 and backend.refuse_mono:
            raise backend.PortAudioError("Invalid number of channels")
        backend.opened.append({"rate": samplerate, "device": device, "channels": channels})
        self.backend, self.blocksize, self.channels = backend, blocksize, channels
        self.callback, self.finished_callback = callback, finished_callback
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        signal = self.backend.signal
        for i, pos in enumerate(range(0, signal.shape[0], self.blocksize)):
            block = signal[pos : pos + self.blocksize]
            frames = np.repeat(block[:, None], self.channels, axis=1).astype(np.float32)
            self.callback(frames, frames.shape[0], None, FakeFlags(i in self.backend.overflow_blocks))
        self.finished_callback()

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.thread.join()

    def close(self) -> None:
        pass


class FakeSoundDevice:
    """What :mod:`simulst.audio.microphone` uses of ``sounddevice``: two input devices and one output."""

    class PortAudioError(Exception):
        pass

    def __init__(self, signal: np.ndarray | None = None, devices: list[dict[str, Any]] | None = None) -> None:
        self.signal = np.zeros(0, dtype=np.float32) if signal is None else signal
        self.overflow_blocks: set[int] = set()
        self.refuse_mono = False
        self.opened: list[dict[str, Any]] = []
        self.devices = devices if devices is not None else [
            {"index": 0, "name": "HDA Intel PCH: ALC3246 Analog (hw:0,0)", "hostapi": 0, "max_input_channels": 2,
             "default_samplerate": 48000.0},
            {"index": 1, "name": "HDMI 0 (hw:0,3)", "hostapi": 0, "max_input_channels": 0,
             "default_samplerate": 48000.0},
            {"index": 2, "name": "USB Microphone: Audio (hw:1,0)", "hostapi": 0, "max_input_channels": 1,
             "default_samplerate": 44100.0},
        ]
        self.default = argparse.Namespace(device=[2 if self.devices else -1, -1])

    def query_devices(self) -> list[dict[str, Any]]:
        return self.devices

    def query_hostapis(self) -> tuple[dict[str, Any], ...]:
        return ({"name": "ALSA"},)

    def InputStream(self, **kwargs: Any) -> FakeInputStream:  # sounddevice's name
        return FakeInputStream(self, **kwargs)


def sine(freq: float, rate: int, seconds: float) -> np.ndarray:
    t = np.arange(round(rate * seconds)) / rate
    return (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def peak_hz(audio: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(audio * np.hanning(audio.shape[0])))
    return float(np.fft.rfftfreq(audio.shape[0], 1.0 / rate)[int(np.argmax(spectrum))])


# ---------------------------------------------------------------------------------------------- no device here
def test_no_input_device_is_a_clear_error() -> None:
    with pytest.raises(DeviceError, match=re.escape(NO_INPUT_DEVICE)):
        Microphone(16000, backend=FakeSoundDevice(devices=[]))
    assert "no audio input device found" in NO_INPUT_DEVICE and "transcribe FILE --realtime" in NO_INPUT_DEVICE


def test_real_portaudio_without_a_device_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    if real_portaudio_has_inputs():
        pytest.skip("this machine has an audio input device")
    with pytest.raises(DeviceError, match="no audio input device found"):
        Microphone(16000)
    assert run_live_cli(["--duration", "1"]) == 2  # before any model is loaded
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip() == f"simulst: error: {NO_INPUT_DEVICE}"


def test_list_devices(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_live_cli(["--list-devices"]) == 0
    out, _ = capsys.readouterr()
    if real_portaudio_has_inputs():
        assert out.strip()
    else:
        assert out.strip() == "no audio input devices found (PortAudio sees none)"


def test_missing_portaudio_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_portaudio(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "sounddevice":
            raise OSError("PortAudio library not found")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "sounddevice", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_portaudio)
    with pytest.raises(DeviceError, match=r"PortAudio library is not available.*libportaudio2"):
        load_sounddevice()
    with pytest.raises(DeviceError, match="PortAudio"):
        Microphone(16000)


# ---------------------------------------------------------------------------------------------- devices
def test_device_listing_and_choice() -> None:
    sd = FakeSoundDevice()
    devices = list_input_devices(sd)
    assert [d.index for d in devices] == [0, 2]  # the output-only HDMI device is left out
    assert devices[1] == InputDevice(2, "USB Microphone: Audio (hw:1,0)", "ALSA", 1, 44100.0, default=True)
    assert devices[1].describe().startswith("*   2  USB Microphone")
    assert find_input_device(None, sd).index == 2  # the default input
    assert find_input_device("0", sd).index == 0
    assert find_input_device(0, sd).index == 0
    assert find_input_device("usb mic", sd).index == 2
    for spec, message in (("1", "no audio input device with index 1"), ("webcam", "no audio input device matches"),
                          ("hw:", "matches several input devices")):
        with pytest.raises(DeviceError, match=message):
            find_input_device(spec, sd)


# ---------------------------------------------------------------------------------------------- resampling
def test_microphone_resamples_48k_to_16k_and_counts_overflows() -> None:
    seconds = 2.0
    sd = FakeSoundDevice(signal=sine(440.0, 48000, seconds))
    sd.overflow_blocks = {3, 7}
    mic = Microphone(16000, device=0, backend=sd)  # device 0 defaults to 48 kHz
    with mic:
        blocks = list(mic.blocks())
    assert sd.opened == [{"rate": 48000.0, "device": 0, "channels": 1}]
    audio = np.concatenate(blocks)
    assert all(b.dtype == np.float32 and b.ndim == 1 and b.size for b in blocks)
    assert abs(audio.shape[0] - 16000 * seconds) <= 4
    assert peak_hz(audio, 16000) == pytest.approx(440.0, abs=1.0)
    middle = audio[4000:28000]
    assert np.max(np.abs(middle)) == pytest.approx(0.5, abs=0.01)  # the amplitude survives too
    assert mic.overflows == len(sd.overflow_blocks) and mic.captured == 48000 * seconds and mic.ended


def test_microphone_duration_and_stereo_fallback() -> None:
    sd = FakeSoundDevice(signal=sine(1000.0, 44100, 3.0))
    sd.refuse_mono = True
    sd.devices[0]["default_samplerate"] = 44100.0
    with Microphone(16000, device="alc3246", backend=sd) as mic:
        audio = np.concatenate(list(mic.blocks(duration_s=1.25)))
    assert sd.opened[-1]["channels"] == 2  # the device refused mono: mixed down here
    assert audio.shape[0] == 16000 * 1.25
    assert peak_hz(audio[2000:], 16000) == pytest.approx(1000.0, abs=2.0)


def test_resampler_streams_like_one_shot() -> None:
    signal = sine(300.0, 48000, 1.0)
    resample = Resampler(48000, 16000)
    pieces = [resample(signal[pos : pos + 1234]) for pos in range(0, signal.shape[0], 1234)]
    streamed = np.concatenate([*pieces, resample.flush()])
    assert abs(streamed.shape[0] - 16000) <= 2
    assert peak_hz(streamed, 16000) == pytest.approx(300.0, abs=1.0)
    same = Resampler(16000, 16000)
    assert np.array_equal(same(signal[:100]), signal[:100]) and same.flush().size == 0


# ---------------------------------------------------------------------------------------------- the live loop
@pytest.fixture(scope="module")
def model() -> SpeechModel:
    from simulst.models.loading import load_model

    return load_model()


def jfk_blocks(block_ms: float = 100.0) -> Iterator[np.ndarray]:
    audio = load_audio(JFK)
    step = round(16000 * block_ms / 1000.0)
    for pos in range(0, audio.shape[0], step):
        yield audio[pos : pos + step]


@pytest.mark.real
@needs_shared
def test_live_loop_prints_jfk_as_it_comes(model: SpeechModel, capsys: pytest.CaptureFixture[str]) -> None:
    stream = SpeechEngine(model).open(StreamOptions(), catch_up=True)
    printed_before: list[str] = []  # stdout so far, as each block is read from the "microphone"

    def microphone() -> Iterator[np.ndarray]:
        for block in jfk_blocks(3000.0):  # a model slower than the speaker (this shared machine) reads big blocks
            printed_before.append(capsys.readouterr().out)
            yield block

    result = live.run_live_loop(stream, microphone(), StreamOutput("text", realtime=True))
    printed = "".join(printed_before) + capsys.readouterr().out
    assert PHRASE in phrase(stream.text)
    assert not result.interrupted and not result.silent and result.source_s == pytest.approx(11.0)
    lines = printed.splitlines()
    assert len(lines) == len(stream.emissions) >= 3
    assert all(re.match(r"\[ *\d+\.\d\d s wall +\d+\.\d\d s\] ", line) for line in lines)
    assert sum(bool(chunk) for chunk in printed_before) >= 2  # emissions appeared while the audio still came
    assert "".join(e.text for e in stream.emissions) == stream.text


class FakeMicrophone:
    """Stands in for :class:`~simulst.audio.microphone.Microphone` in ``simulst live``: toy audio (the toy model's
    rate), then Ctrl-C."""

    overflows = 2
    started_at = None
    seconds = 5

    def __init__(self, sample_rate: int, device: InputDevice, capture_rate: float | None = None) -> None:
        assert device.name == "fake"
        self.sample_rate = sample_rate
        self.capture_rate = capture_rate or 48000.0

    def start(self) -> None:
        pass

    def __enter__(self) -> FakeMicrophone:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def blocks(self, duration_s: float | None = None) -> Iterator[np.ndarray]:
        seconds = self.seconds if duration_s is None else duration_s
        audio = tone(int(seconds * 1000), self.sample_rate)
        step = self.sample_rate // 4
        for pos in range(0, audio.shape[0], step):
            yield audio[pos : pos + step]
        if duration_s is None:
            raise KeyboardInterrupt  # Ctrl-C: the stream is finished, the summary printed, exit 0


@pytest.fixture
def fake_live(monkeypatch: pytest.MonkeyPatch) -> ToySpeechModel:
    """``simulst live`` on a fake microphone and the toy model (hears a word every 700 ms)."""
    toy = ToySpeechModel()
    monkeypatch.setattr(live, "find_input_device", lambda spec: InputDevice(7, "fake", "ALSA", 1, 48000.0))
    monkeypatch.setattr(live, "Microphone", FakeMicrophone)
    monkeypatch.setattr(live, "model_from_args", lambda args, task="transcribe": toy)
    return toy


def test_live_command_json_until_ctrl_c(fake_live: ToySpeechModel, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_live_cli(["--json", "--chunk-ms", "1000", "--no-vad", "--search", "greedy"]) == 0
    # (the toy hears 1000 Hz: no Silero; its scores are made for greedy search, not the preset's beam)
    out, err = capsys.readouterr()
    records = [json.loads(line) for line in out.splitlines()]
    final = records[-1]
    assert final["event"] == "final" and final["interrupted"] is True and final["input_overflows"] == 2
    assert final["text"].strip() == "the cat sat on the mat" and final["source_ms"] == pytest.approx(5000.0)
    emissions = records[:-1]
    assert len(emissions) >= 2 and all(r["event"] == "emission" for r in emissions)
    assert "".join(r["text"] for r in emissions).strip() == final["text"]
    assert "listening to fake (48000 Hz)" in err and "2 input overflows" in err


def test_live_command_subtitles_for_a_duration(fake_live: ToySpeechModel, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    srt = tmp_path / "live.srt"
    assert run_live_cli(["--duration", "4.5", "--format", "srt", "-o", str(srt), "--capture-rate", "44100",
                         "--no-vad", "--search", "greedy", "--chunk-ms", "600"]) == 0  # (the toy's chunk: see eval)
    out, err = capsys.readouterr()
    assert re.match(r"\[ *\d+\.\d\d s wall +\d+\.\d\d s\] ", out)  # the live lines on stdout
    assert "-- 6 words, 4.50 s of source" in out and "listening to fake (44100 Hz)" in err
    captions = srt.read_text(encoding="utf-8")
    assert captions.startswith("1\n00:00:") and "mat" in captions
    assert run_live_cli(["--duration", "0"]) == 2
    assert "--duration must be positive" in capsys.readouterr().err
