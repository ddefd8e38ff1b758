"""Whisper weights as an OpenAI ``openai-whisper`` checkpoint (``{"dims": ..., "model_state_dict": ...}``, a ``.pt``
file), written from the models simulst has offline: a catalog name or a CTranslate2 directory (read by
:func:`simulst.models.ctranslate2.whisper_state_dict_from_ct2`), or a Hugging Face Whisper directory
(``config.json`` + ``model.safetensors``).

Hugging Face names map to OpenAI's one for one (``model.encoder.layers.{i}.self_attn.q_proj`` ->
``encoder.blocks.{i}.attn.query``, ``fc1`` -> ``mlp.0``, ...); ``proj_out.weight`` is dropped (OpenAI's decoder
reads its output projection from the token embedding). Tensors are stored in float16, as OpenAI's released
checkpoints are. The OpenAI model name (``tiny.en``, ``base``, ...) follows from the dimensions: it selects the
alignment heads of OpenAI's table in a program that loads the checkpoint.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from simulst.errors import ModelLoadError

_RENAMES = (
    (r"^model\.encoder\.embed_positions\.weight$", "encoder.positional_embedding"),
    (r"^model\.decoder\.embed_positions\.weight$", "decoder.positional_embedding"),
    (r"^model\.decoder\.embed_tokens\.", "decoder.token_embedding."),
    (r"^model\.encoder\.layer_norm\.", "encoder.ln_post."),
    (r"^model\.decoder\.layer_norm\.", "decoder.ln."),
    (r"^model\.encoder\.conv", "encoder.conv"),
    (r"^model\.(encoder|decoder)\.layers\.(\d+)\.", r"\1.blocks.\2."),
    (r"\.self_attn\.q_proj\.", ".attn.query."),
    (r"\.self_attn\.k_proj\.", ".attn.key."),
    (r"\.self_attn\.v_proj\.", ".attn.value."),
    (r"\.self_attn\.out_proj\.", ".attn.out."),
    (r"\.encoder_attn\.q_proj\.", ".cross_attn.query."),
    (r"\.encoder_attn\.k_proj\.", ".cross_attn.key."),
    (r"\.encoder_attn\.v_proj\.", ".cross_attn.value."),
    (r"\.encoder_attn\.out_proj\.", ".cross_attn.out."),
    (r"\.self_attn_layer_norm\.", ".attn_ln."),
    (r"\.encoder_attn_layer_norm\.", ".cross_attn_ln."),
    (r"\.final_layer_norm\.", ".mlp_ln."),
    (r"\.fc1\.", ".mlp.0."),
    (r"\.fc2\.", ".mlp.2."),
)
_DROPPED = ("proj_out.weight",)
_SIZES = {(384, 4): "tiny", (512, 6): "base", (768, 12): "small", (1024, 24): "medium"}
"""(width, decoder layers) -> OpenAI's size name."""
ENGLISH_VOCAB = 51864
"""The vocabulary size of OpenAI's English-only models (``.en``)."""


def openai_name(hf_name: str) -> str | None:
    """The OpenAI parameter name of a Hugging Face Whisper parameter (None: not stored in OpenAI's checkpoint).

    Raises:
        ModelLoadError: a name outside Hugging Face's Whisper model.
    """
    if hf_name in _DROPPED:
        return None
    name = hf_name
    for pattern, replacement in _RENAMES:
        name = re.sub(pattern, replacement, name)
    if name.startswith("model."):
        raise ModelLoadError(f"{hf_name!r} is not a Hugging Face Whisper parameter")
    return name


def openai_dims(config: Mapping[str, Any]) -> dict[str, int]:
    """OpenAI's ``ModelDimensions`` from a Hugging Face Whisper config (or simulst's CTranslate2 reading of one)."""
    try:
        return {"n_mels": int(config["num_mel_bins"]), "n_vocab": int(config["vocab_size"]),
                "n_audio_ctx": int(config["max_source_positions"]), "n_audio_state": int(config["d_model"]),
                "n_audio_head": int(config["encoder_attention_heads"]),
                "n_audio_layer": int(config["encoder_layers"]), "n_text_ctx": int(config["max_target_positions"]),
                "n_text_state": int(config["d_model"]), "n_text_head": int(config["decoder_attention_heads"]),
                "n_text_layer": int(config["decoder_layers"])}
    except (KeyError, TypeError, ValueError) as err:
        raise ModelLoadError(f"not a Whisper config: {err!r}") from err


def openai_model_name(dims: Mapping[str, int]) -> str:
    """OpenAI's name of a model of these dimensions (``tiny.en``, ``base``, ...).

    Raises:
        ModelLoadError: dimensions of no tiny / base / small / medium model.
    """
    size = _SIZES.get((dims["n_text_state"], dims["n_text_layer"]))
    if size is None:
        raise ModelLoadError(f"no OpenAI Whisper model has width {dims['n_text_state']} and "
                             f"{dims['n_text_layer']} decoder layers (tiny, base, small, medium are known)")
    return size + (".en" if dims["n_vocab"] == ENGLISH_VOCAB else "")


def openai_checkpoint(state: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> dict[str, Any]:
    """OpenAI's checkpoint dictionary of a Hugging Face-named Whisper state dict (tensors in float16)."""
    renamed = {}
    for key, tensor in state.items():
        name = openai_name(key)
        if name is not None:
            renamed[name] = tensor.detach().to(torch.float16).contiguous()
    return {"dims": openai_dims(config), "model_state_dict": renamed}


def read_hf_named(model: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """A Whisper directory's weights under Hugging Face names, and its config.

    Raises:
        ModelLoadError: neither a CTranslate2 (``model.bin``) nor a Hugging Face (``model.safetensors``) directory.
    """
    if (model / "model.bin").is_file():
        from simulst.models.ctranslate2 import whisper_state_dict_from_ct2

        state, config = whisper_state_dict_from_ct2(model)
        return state, dict(config)
    if (model / "model.safetensors").is_file() and (model / "config.json").is_file():
        from safetensors.torch import load_file

        return load_file(str(model / "model.safetensors")), json.loads((model / "config.json").read_text())
    raise ModelLoadError(f"{model} holds neither a CTranslate2 model.bin nor a Hugging Face model.safetensors")


def write_openai_checkpoint(model: Path, folder: Path) -> Path:
    """Write ``model``'s weights as ``folder/<OpenAI name>.pt`` (the name from its dimensions) and return the path."""
    state, config = read_hf_named(model)
    checkpoint = openai_checkpoint(state, config)
    path = folder / f"{openai_model_name(checkpoint['dims'])}.pt"
    folder.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    torch.save(checkpoint, partial)
    os.replace(partial, path)  # a concurrent reader never sees half a file
    return path
