"""The Whisper adapter on tiny random checkpoints built from configs: loading, multilingual prompts, errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from simulst.config import PolicyOptions, StreamOptions
from simulst.errors import ModelLoadError, OptionError
from simulst.models.loading import load_model
from simulst.streaming.session import Session
from simulst.types import Costs
from tests.shared_assets import needs_shared
from tests.toy import ENGLISH_VOCAB, MULTILINGUAL_VOCAB, make_checkpoint

pytestmark = needs_shared


def test_multilingual_prompt_language_detection_and_translate_task(tmp_path: Path) -> None:
    directory = make_checkpoint(tmp_path / "multi", MULTILINGUAL_VOCAB)
    model = load_model(str(directory), language="de", task="translate")
    assert model.multilingual
    enc = model.encode(np.zeros(16000, dtype=np.float32) + 0.01, Costs())
    de, translate = model.tokenizer.token_id("<|de|>"), model.tokenizer.token_id("<|translate|>")
    assert model.prompt(enc, Costs()) == [50257, de, translate, 50362]
    detecting = load_model(str(directory), task="transcribe")
    costs = Costs()
    prompt = detecting.prompt(enc, costs)
    assert prompt[1] in detecting.language_ids.values() and costs.decoder_calls == 1
    session = Session(model, StreamOptions(chunk_ms=500, policy=PolicyOptions.parse("la-2")))
    audio = (0.1 * np.sin(np.arange(24000) / 5.0)).astype(np.float32)
    emissions = session.push(audio) + session.finish()
    assert "".join(e.text for e in emissions) == session.text  # random weights: any text, but consistent
    with pytest.raises(OptionError, match="unknown language"):
        load_model(str(directory), language="xx")


def test_english_only_checkpoint_rejects_translation(tmp_path: Path) -> None:
    directory = make_checkpoint(tmp_path / "en", ENGLISH_VOCAB)
    with pytest.raises(OptionError, match="English-only"):
        load_model(str(directory), task="translate")
    with pytest.raises(OptionError, match="unknown task"):
        load_model(str(directory), task="summarize")
    with pytest.raises(OptionError, match="encoder window"):
        load_model(str(directory), window="half")


def test_a_shortest_window_longer_than_the_models_is_refused(tmp_path: Path) -> None:
    # the audio window is padded up to --window-min-ms, which the model's window (Whisper's 30 s) bounds
    directory = make_checkpoint(tmp_path / "en", ENGLISH_VOCAB)
    model = load_model(str(directory), window_min_ms=30000.0)
    assert model.window_frames(16000) == 2 * model.dims.max_source_positions
    with pytest.raises(OptionError, match=r"--window-min-ms 40000\) is longer than the model's window: at most "
                                          r"30000 ms"):
        load_model(str(directory), window_min_ms=40000.0)


def test_broken_checkpoints_give_model_load_errors(tmp_path: Path) -> None:
    directory = make_checkpoint(tmp_path / "broken", ENGLISH_VOCAB)
    config = json.loads((directory / "config.json").read_text())
    config["model_type"] = "bert"
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="not supported"):
        load_model(str(directory))
    config["model_type"] = "whisper"
    config["d_model"] = 32  # the weights no longer fit
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="do not form a Whisper model"):
        load_model(str(directory))
    (directory / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="unreadable"):
        load_model(str(directory))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelLoadError, match="neither"):
        load_model(str(empty))


def test_loaded_weights_are_the_checkpoints_and_a_missing_one_is_an_error(tmp_path: Path) -> None:
    # the network is built without random initialisation (WhisperNet.for_weights): every parameter must come from
    # the checkpoint, and torch's initialisation must be whole again afterwards
    draws = (torch.nn.init.uniform_, torch.nn.init.normal_, torch.nn.init.kaiming_uniform_)
    directory = make_checkpoint(tmp_path / "en", ENGLISH_VOCAB)
    weights = load_file(str(directory / "model.safetensors"))
    net = load_model(str(directory), precision="fp32", encoder_precision="fp32").net
    params = dict(net.state_dict())
    assert params and all(torch.equal(value, weights[name]) for name, value in params.items())
    assert (torch.nn.init.uniform_, torch.nn.init.normal_, torch.nn.init.kaiming_uniform_) == draws
    assert torch.nn.Linear(64, 64).weight.abs().max() > 0  # layers built later still draw their weights
    del weights["model.encoder.layers.0.fc1.weight"]
    save_file(weights, str(directory / "model.safetensors"))
    with pytest.raises(ModelLoadError, match=r"do not form a Whisper model.*fc1"):
        load_model(str(directory))


def _detecting_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, probability: float | None,
                      seconds: int, language: str | None = None) -> tuple[Session, list[tuple[int, float]]]:
    """A multilingual random model streamed ``seconds`` of noise in 500 ms chunks, its detections recorded (with
    ``probability``: each detection says German with that probability; None: the random model's own)."""
    directory = make_checkpoint(tmp_path / "multi", MULTILINGUAL_VOCAB)
    model = load_model(str(directory), task="transcribe", language=language)
    detected: list[tuple[int, float]] = []
    original = model.detect_language

    def counting(enc: object, costs: Costs) -> tuple[int, float]:
        found = original(enc, costs)  # type: ignore[arg-type]
        detected.append(found if probability is None else (model.language_ids["de"], probability))
        return detected[-1]

    monkeypatch.setattr(model, "detect_language", counting)
    rng = np.random.default_rng(0)
    guards_off = {"no_speech_threshold": None, "logprob_threshold": None, "early_logprob_threshold": None}
    session = Session(model, StreamOptions(chunk_ms=500, policy=PolicyOptions.parse("la-2"), **guards_off))
    for _ in range(2 * seconds):
        session.push((0.1 * rng.standard_normal(8000)).astype(np.float32))
    session.finish()
    assert session.state.policy.chunks == 2 * seconds  # every chunk decoded and seen by the policy
    return session, detected


def test_a_stream_pins_its_language_once_sure_from_3_s_of_audio(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    session, detected = _detecting_stream(tmp_path, monkeypatch, probability=0.95, seconds=5)
    # decodes at 0.5, 1.0, ... s: sure at each, but pinned only at 3.0 s (the sixth), then never detected again
    assert len(detected) == 6
    assert session.prompt.pinned and session.prompt.fixed is not None
    assert session.prompt.fixed[1] == session.model.language_ids["de"]  # type: ignore[attr-defined]


def test_a_stream_unsure_of_its_language_detects_it_at_every_decode(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    session, detected = _detecting_stream(tmp_path, monkeypatch, probability=0.85, seconds=4)
    assert len(detected) == 8  # at each of 8 chunks, never pinned (the final decode reads the last encoding again)
    assert not session.prompt.pinned and session.prompt.fixed is not None
    assert session.prompt.fixed[1] == session.model.language_ids["de"]  # type: ignore[attr-defined]
    # a random model is never sure: each decode is prompted with the language detected in its own audio
    session, detected = _detecting_stream(tmp_path, monkeypatch, probability=None, seconds=2)
    assert len(detected) == 4 and all(p < 0.9 for _, p in detected) and not session.prompt.pinned
    assert session.prompt.fixed is not None and session.prompt.fixed[1] == detected[-1][0]


def test_a_stream_told_its_language_pins_it_at_the_first_decode(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    session, detected = _detecting_stream(tmp_path, monkeypatch, probability=None, seconds=2, language="fr")
    assert detected == [] and session.prompt.pinned
    assert session.prompt.fixed is not None
    assert session.prompt.fixed[1] == session.model.language_ids["fr"]  # type: ignore[attr-defined]


def test_the_no_speech_judgement_and_the_language_of_one_encoding_share_one_decoder_pass(tmp_path: Path) -> None:
    model = load_model(str(make_checkpoint(tmp_path / "multi", MULTILINGUAL_VOCAB)), task="transcribe")
    rng = np.random.default_rng(0)
    first = model.encode((0.1 * rng.standard_normal(16000)).astype(np.float32), Costs())
    costs = Costs()
    judged = model.no_speech_prob(first, costs)
    language, _ = model.detect_language(first, costs)
    assert costs.decoder_calls == 1  # the same encoding: one pass read twice
    again = Costs()
    assert model.no_speech_prob(first, again) == judged and again.decoder_calls == 0
    second = model.encode((0.1 * rng.standard_normal(16000)).astype(np.float32), Costs())
    assert model.detect_language(second, again)[0] in model.language_ids.values() and again.decoder_calls == 1
    assert model.detect_language(first, again)[0] == language and again.decoder_calls == 2  # (one encoding kept)
