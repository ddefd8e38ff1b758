"""Read CTranslate2 (faster-whisper) model directories without the ``ctranslate2`` package.

A CTranslate2 model directory holds ``model.bin`` (the weights), ``config.json`` (generation settings such
as ``suppress_ids``) and a vocabulary (``vocabulary.txt``, one token per line, or ``vocabulary.json``, a JSON
list).

``model.bin`` layout (all integers little-endian; a *string* is a ``uint16`` byte count that includes a
terminating NUL, followed by that many UTF-8 bytes)::

    uint32  binary_version                  # 1..6 are understood here (6 is current)
    string  spec_name                       # version >= 2 only, e.g. "WhisperSpec"
    uint32  spec_revision                   # version >= 2 only (version 1 means revision 1)
    uint32  num_variables
    num_variables times:
        string  name                        # scope path, e.g. "encoder/layer_0/ffn/linear_0/weight"
        uint8   rank
        uint32  dims[rank]                  # rank 0 = a scalar (used for spec attributes)
        version >= 4:  uint8 dtype_id       # 0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16
                       uint32 num_bytes
        version <= 3:  uint8 item_size      # 4 -> float32, 2 -> int16, 1 -> int8
                       uint32 num_items
        raw data, row-major
    version >= 3:
        uint32  num_aliases
        num_aliases times: string alias, string target_variable_name

Nothing follows the aliases (the vocabulary and configuration live in separate files); trailing bytes are
ignored, as the C++ loader does.

Quantised weights ``X`` (int8 or int16) come with a variable ``X_scale``: int8 scales are per output row
(``X_float = X / X_scale[:, None]``), int16 scales are one scalar. An alias ``A -> X`` also makes
``A_scale`` an alias of ``X_scale``. Non-tensor spec attributes (``num_heads``, ``activation``, flags) are
stored as rank-0 variables; strings as int8 byte arrays.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from simulst.errors import ModelLoadError, OptionError

__all__ = [
    "CURRENT_BINARY_VERSION",
    "Ct2Model",
    "dequantize_variables",
    "read_model_bin",
    "whisper_config_from_ct2",
    "whisper_state_dict_from_ct2",
]

CURRENT_BINARY_VERSION = 6
"""The newest ``model.bin`` binary version this reader understands."""

# Type ids of the DataType enum in CTranslate2's include/ctranslate2/types.h (binary version >= 4).
_DTYPE_BY_ID: dict[int, str] = {0: "float32", 1: "int8", 2: "int16", 3: "int32", 4: "float16", 5: "bfloat16"}
_NUMPY_DTYPE: dict[str, str] = {
    "float32": "<f4",
    "int8": "i1",
    "int16": "<i2",
    "int32": "<i4",
    "float16": "<f2",
    "bfloat16": "<u2",  # decoded to float32 below; numpy has no bfloat16
}
_ITEM_SIZE: dict[str, int] = {"float32": 4, "int8": 1, "int16": 2, "int32": 4, "float16": 2, "bfloat16": 2}
# Binary versions <= 3 stored the item width instead of a type id.
_DTYPE_BY_ITEM_SIZE: dict[int, str] = {4: "float32", 2: "int16", 1: "int8"}

WHISPER_SPEC_NAME = "WhisperSpec"
WHISPER_MAX_REVISION = 3

# CTranslate2's Activation enum (python/ctranslate2/specs/common_spec.py) -> transformers activation name.
_ACTIVATIONS: dict[int, str] = {0: "relu", 1: "gelu_new", 2: "silu", 3: "gelu", 4: "quick_gelu", 5: "tanh"}


@dataclass(frozen=True)
class Ct2Model:
    """The parsed content of a CTranslate2 ``model.bin``.

    Attributes:
        spec: the model specification name, e.g. ``"WhisperSpec"`` (``""`` for binary version 1 files).
        revision: the specification revision (WhisperSpec is at revision 3).
        variables: every variable by name, aliases resolved (an alias maps to the very same array as its
            target). Arrays are stored as in the file (float32/float16/int8/int16/int32; rank 0 for scalar
            attributes), except bfloat16, which numpy lacks and which is decoded to float32 exactly.
        aliases: alias name -> target variable name, as listed in the file (scale aliases not included).
        binary_version: the file's binary version.
        dtypes: the dtype name each variable had in the file (``"bfloat16"`` for decoded bfloat16).
    """

    spec: str
    revision: int
    variables: dict[str, np.ndarray]
    aliases: dict[str, str]
    binary_version: int = CURRENT_BINARY_VERSION
    dtypes: dict[str, str] = field(default_factory=dict)

    def attribute(self, name: str, default: int | None = None) -> int | None:
        """Return the integer value of rank-0 spec attribute ``name`` (e.g. ``"decoder/num_heads"``).

        Returns ``default`` when the attribute is absent or not a scalar.
        """
        value = self.variables.get(name)
        if value is None or value.ndim != 0:
            return default
        return int(value)

    def dequantized(self) -> dict[str, np.ndarray]:
        """Return :attr:`variables` with quantised weights dequantised (see :func:`dequantize_variables`)."""
        return dequantize_variables(self.variables)


class _Reader:
    """Bounds-checked little-endian cursor over the bytes of a ``model.bin``."""

    def __init__(self, data: bytes, path: Path) -> None:
        self.data = data
        self.pos = 0
        self.path = path

    def _need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > len(self.data):
            raise ModelLoadError(
                f"{self.path} is truncated or corrupt: needed {n} bytes for {what} at offset {self.pos}, "
                f"but the file has {len(self.data)} bytes"
            )

    def unpack(self, fmt: str, what: str) -> int:
        size = struct.calcsize("<" + fmt)
        self._need(size, what)
        (value,) = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += size
        return int(value)

    def string(self, what: str) -> str:
        length = self.unpack("H", f"the length of {what}")
        self._need(length, what)
        raw = self.data[self.pos : self.pos + length]
        self.pos += length
        if length == 0 or raw[-1] != 0:
            raise ModelLoadError(
                f"{self.path} is corrupt: {what} at offset {self.pos - length} is not NUL-terminated"
            )
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ModelLoadError(f"{self.path} is corrupt: {what} is not valid UTF-8") from exc

    def array(self, dtype: str, shape: tuple[int, ...], num_bytes: int, name: str) -> np.ndarray:
        count = math.prod(shape)
        if num_bytes != count * _ITEM_SIZE[dtype]:
            raise ModelLoadError(
                f"{self.path} is corrupt: variable {name!r} of shape {list(shape)} and dtype {dtype} "
                f"declares {num_bytes} bytes, expected {count * _ITEM_SIZE[dtype]}"
            )
        self._need(num_bytes, f"the data of variable {name!r}")
        stored = np.dtype(_NUMPY_DTYPE[dtype])
        # astype() copies into an owned, aligned, writable, native-order array (torch.from_numpy-friendly).
        arr = np.frombuffer(self.data, dtype=stored, count=count, offset=self.pos).astype(
            stored.newbyteorder("=")
        )
        self.pos += num_bytes
        if dtype == "bfloat16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        return arr.reshape(shape)


def read_model_bin(path: str | Path) -> Ct2Model:
    """Parse a CTranslate2 ``model.bin`` (binary versions 1 to 6) into numpy arrays.

    Args:
        path: the ``model.bin`` file, or a CTranslate2 model directory containing one.

    Returns:
        The parsed :class:`Ct2Model`. Quantised weights stay quantised (use :meth:`Ct2Model.dequantized`).

    Raises:
        ModelLoadError: the file is missing or unreadable, has an unsupported binary version (0, or newer
            than :data:`CURRENT_BINARY_VERSION`), is truncated, or is otherwise inconsistent (unknown dtype
            id, size mismatch, duplicate variable, alias to an unknown variable, bad string).
    """
    path = Path(path)
    if path.is_dir():
        path = path / "model.bin"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ModelLoadError(f"cannot read CTranslate2 model file {path}: {exc.strerror or exc}") from exc

    reader = _Reader(data, path)
    version, spec, revision = _read_header(reader)
    variables, dtypes = _read_variables(reader, version)
    aliases = _read_aliases(reader) if version >= 3 else {}
    _resolve_aliases(aliases, variables, dtypes, path)
    return Ct2Model(
        spec=spec,
        revision=revision,
        variables=variables,
        aliases=aliases,
        binary_version=version,
        dtypes=dtypes,
    )


def _read_header(reader: _Reader) -> tuple[int, str, int]:
    """``(binary_version, spec_name, spec_revision)``; version 1 files have no spec (``""``, revision 1)."""
    version = reader.unpack("I", "the binary version")
    if not 1 <= version <= CURRENT_BINARY_VERSION:
        raise ModelLoadError(
            f"{reader.path} is not a supported CTranslate2 model.bin: binary version {version} "
            f"(supported: 1 to {CURRENT_BINARY_VERSION})"
        )
    if version >= 2:
        spec = reader.string("the spec name")
        revision = reader.unpack("I", "the spec revision")
    else:
        spec, revision = "", 1
    return version, spec, revision


def _read_variables(reader: _Reader, version: int) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The variables of the file by name, and the dtype name each had in the file."""
    num_variables = reader.unpack("I", "the number of variables")
    variables: dict[str, np.ndarray] = {}
    dtypes: dict[str, str] = {}
    for index in range(num_variables):
        name = reader.string(f"the name of variable #{index}")
        rank = reader.unpack("B", f"the rank of {name!r}")
        shape = tuple(reader.unpack("I", f"a dimension of {name!r}") for _ in range(rank))
        dtype, num_bytes = _read_dtype_and_size(reader, version, name)
        if name in variables:
            raise ModelLoadError(f"{reader.path} is corrupt: variable {name!r} appears twice")
        variables[name] = reader.array(dtype, shape, num_bytes, name)
        dtypes[name] = dtype
    return variables, dtypes


def _read_dtype_and_size(reader: _Reader, version: int, name: str) -> tuple[str, int]:
    """``(dtype name, byte count)`` of variable ``name``: a type id and a byte count from version 4 on, an item
    width and an item count before."""
    if version >= 4:
        type_id = reader.unpack("B", f"the dtype of {name!r}")
        if type_id not in _DTYPE_BY_ID:
            raise ModelLoadError(f"{reader.path}: variable {name!r} has unknown dtype id {type_id}")
        return _DTYPE_BY_ID[type_id], reader.unpack("I", f"the byte size of {name!r}")
    item_size = reader.unpack("B", f"the item size of {name!r}")
    if item_size not in _DTYPE_BY_ITEM_SIZE:
        raise ModelLoadError(f"{reader.path}: variable {name!r} has unknown item size {item_size}")
    return _DTYPE_BY_ITEM_SIZE[item_size], reader.unpack("I", f"the item count of {name!r}") * item_size


def _read_aliases(reader: _Reader) -> dict[str, str]:
    """Alias name -> target variable name, as listed in the file (binary version >= 3)."""
    aliases: dict[str, str] = {}
    num_aliases = reader.unpack("I", "the number of aliases")
    for index in range(num_aliases):
        alias = reader.string(f"the name of alias #{index}")
        target = reader.string(f"the target of alias {alias!r}")
        aliases[alias] = target
    return aliases


def _resolve_aliases(
    aliases: Mapping[str, str], variables: dict[str, np.ndarray], dtypes: dict[str, str], path: Path
) -> None:
    """Add each alias to ``variables`` (and ``dtypes``) as the very array of its target, in place."""
    for alias, target in aliases.items():
        if target not in variables:
            raise ModelLoadError(f"{path} is corrupt: alias {alias!r} points to unknown variable {target!r}")
        if alias in variables:
            raise ModelLoadError(f"{path} is corrupt: alias {alias!r} is also a variable")
        variables[alias] = variables[target]
        dtypes[alias] = dtypes[target]
        # As in the C++ loader, an alias also shares its target's quantisation scale.
        scale = target + "_scale"
        if scale in variables and alias + "_scale" not in variables:
            variables[alias + "_scale"] = variables[scale]
            dtypes[alias + "_scale"] = dtypes[scale]


def dequantize_variables(variables: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Dequantise int8/int16 weights that have a ``<name>_scale`` companion to float32.

    CTranslate2 quantises as ``q = round(w * scale)``: int8 with one scale per output row (shape ``(rows,)``),
    int16 with one scalar scale. This returns ``q / scale`` as float32 and drops the consumed ``_scale``
    entries; every other variable is passed through unchanged (aliased arrays stay shared).

    Raises:
        ModelLoadError: a scale's shape fits neither scheme.
    """
    out: dict[str, np.ndarray] = {}
    consumed: set[str] = set()
    cache: dict[tuple[int, int], np.ndarray] = {}
    for name, value in variables.items():
        scale = variables.get(name + "_scale")
        if scale is None or value.ndim == 0 or value.dtype.kind not in "iu":
            continue
        key = (id(value), id(scale))
        if key not in cache:
            s = scale.astype(np.float32)
            if s.ndim == 0 or s.size == 1:
                cache[key] = value.astype(np.float32) / s.reshape(())
            elif s.ndim == 1 and s.shape[0] == value.shape[0]:
                cache[key] = value.astype(np.float32) / s.reshape((-1,) + (1,) * (value.ndim - 1))
            else:
                raise ModelLoadError(
                    f"quantisation scale {name}_scale has shape {list(scale.shape)}, which does not fit "
                    f"weight {name!r} of shape {list(value.shape)}"
                )
        out[name] = cache[key]
        consumed.add(name + "_scale")
    for name, value in variables.items():
        if name not in out and name not in consumed:
            out[name] = value
    return out


def _read_vocabulary(model_dir: Path) -> list[str] | None:
    txt = model_dir / "vocabulary.txt"
    if txt.is_file():
        lines = txt.read_text(encoding="utf-8").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return lines
    js = model_dir / "vocabulary.json"
    if js.is_file():
        tokens = json.loads(js.read_text(encoding="utf-8"))
        if isinstance(tokens, list):
            return [str(t) for t in tokens]
    return None


def _read_config_json(model_dir: Path) -> dict[str, object]:
    path = model_dir / "config.json"
    if not path.is_file():
        return {}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read {path}: {exc}") from exc
    if not isinstance(config, dict):
        raise ModelLoadError(f"{path} does not hold a JSON object")
    return config


def _count_layers(variables: Mapping[str, np.ndarray], prefix: str) -> int:
    n = 0
    while any(k.startswith(f"{prefix}/layer_{n}/") for k in variables):
        n += 1
    return n


def _resolve_model_dir(model_dir: str | Path) -> Path:
    path = Path(model_dir)
    if path.is_file() and path.name == "model.bin":
        path = path.parent
    if not path.is_dir():
        raise ModelLoadError(f"CTranslate2 model directory {path} does not exist")
    if not (path / "model.bin").is_file():
        raise ModelLoadError(f"{path} is not a CTranslate2 model directory: model.bin is missing")
    return path


# Pure data tables for whisper_config_from_ct2: the weights whose shapes give the sizes, and the flags of the
# CT2 decoder spec that HF Whisper has no equivalent for, with the only value it can represent.
_WHISPER_REQUIRED_VARIABLES = (
    "encoder/conv1/weight",
    "encoder/position_encodings/encodings",
    "decoder/embeddings/weight",
    "decoder/position_encodings/encodings",
    "encoder/layer_0/ffn/linear_0/weight",
    "decoder/layer_0/ffn/linear_0/weight",
)
_WHISPER_FIXED_FLAGS = (
    ("decoder/pre_norm", 1),
    ("decoder/scale_embeddings", 0),
    ("decoder/alibi", 0),
    ("decoder/start_from_zero_embedding", 0),
)


def whisper_config_from_ct2(model: Ct2Model, model_dir: str | Path | None = None) -> dict[str, object]:
    """Build a ``transformers.WhisperConfig`` keyword dict for a parsed CTranslate2 Whisper model.

    Sizes come from the weight shapes (d_model, layer counts, FFN width, mel bins, vocabulary, position
    tables). The number of attention heads is not in any shape: it is read from the spec attributes
    ``encoder/num_heads`` / ``decoder/num_heads`` (rank-0 int16 in every WhisperSpec file), and only if those
    are absent inferred with Whisper's rule of 64 dimensions per head. Token ids come from the vocabulary
    file (``<|endoftext|>`` is eos/bos/pad, ``<|startoftranscript|>`` is the decoder start) and
    ``suppress_tokens`` / ``begin_suppress_tokens`` from config.json's ``suppress_ids`` /
    ``suppress_ids_begin``.

    Raises:
        ModelLoadError: the spec is not a WhisperSpec this code understands, a required weight is missing, or
            a spec attribute asks for something Hugging Face Whisper cannot represent.
    """
    activation_id = _check_whisper_spec(model)
    v = model.variables
    d_model = int(v["decoder/embeddings/weight"].shape[1])
    enc_heads, dec_heads = _attention_heads(model, d_model)
    cfg: dict[str, object] = {
        "d_model": d_model,
        "encoder_layers": _count_layers(v, "encoder"),
        "decoder_layers": _count_layers(v, "decoder"),
        "encoder_attention_heads": enc_heads,
        "decoder_attention_heads": dec_heads,
        "encoder_ffn_dim": int(v["encoder/layer_0/ffn/linear_0/weight"].shape[0]),
        "decoder_ffn_dim": int(v["decoder/layer_0/ffn/linear_0/weight"].shape[0]),
        "num_mel_bins": int(v["encoder/conv1/weight"].shape[1]),
        "vocab_size": int(v["decoder/embeddings/weight"].shape[0]),
        "max_source_positions": int(v["encoder/position_encodings/encodings"].shape[0]),
        "max_target_positions": int(v["decoder/position_encodings/encodings"].shape[0]),
        "activation_function": _ACTIVATIONS[activation_id],
        "scale_embedding": False,
        "tie_word_embeddings": _projection_is_tied(model),
    }
    if model_dir is not None:
        cfg.update(_whisper_token_settings(Path(model_dir)))
    return cfg


def _check_whisper_spec(model: Ct2Model) -> int:
    """Refuse what HF Whisper cannot hold (another spec, a newer revision, missing weights, unsupported flags);
    return the activation id."""
    if model.spec != WHISPER_SPEC_NAME:
        raise ModelLoadError(f"expected a CTranslate2 {WHISPER_SPEC_NAME} model, got spec {model.spec!r}")
    if model.revision > WHISPER_MAX_REVISION:
        raise ModelLoadError(
            f"{WHISPER_SPEC_NAME} revision {model.revision} is newer than supported ({WHISPER_MAX_REVISION})"
        )
    missing = [name for name in _WHISPER_REQUIRED_VARIABLES if name not in model.variables]
    if missing:
        raise ModelLoadError(f"CTranslate2 Whisper model lacks variables: {', '.join(missing)}")
    for flag, expected in _WHISPER_FIXED_FLAGS:
        value = model.attribute(flag)
        if value is not None and value != expected:
            raise ModelLoadError(
                f"unsupported CTranslate2 Whisper variant: {flag} = {value} (expected {expected})"
            )
    activation_id = model.attribute("decoder/activation", 3)
    if activation_id is None or activation_id not in _ACTIVATIONS:
        raise ModelLoadError(f"unknown CTranslate2 activation id {activation_id}")
    return activation_id


def _attention_heads(model: Ct2Model, d_model: int) -> tuple[int, int]:
    """``(encoder heads, decoder heads)`` from the spec attributes, else Whisper's 64 dimensions per head."""
    default_heads = max(1, d_model // 64)
    enc_heads = model.attribute("encoder/num_heads", default_heads)
    dec_heads = model.attribute("decoder/num_heads", default_heads)
    assert enc_heads is not None and dec_heads is not None
    for heads in (enc_heads, dec_heads):
        if heads <= 0 or d_model % heads:
            raise ModelLoadError(f"d_model {d_model} is not divisible by {heads} attention heads")
    return enc_heads, dec_heads


def _whisper_token_settings(directory: Path) -> dict[str, object]:
    """Special token ids from the vocabulary file and suppressed tokens from config.json (absent ones omitted)."""
    cfg: dict[str, object] = {}
    tokens = _read_vocabulary(directory)
    if tokens is not None:
        index = {tok: i for i, tok in enumerate(tokens)}
        eot = index.get("<|endoftext|>")
        sot = index.get("<|startoftranscript|>")
        if eot is not None:
            cfg.update(eos_token_id=eot, bos_token_id=eot, pad_token_id=eot)
        if sot is not None:
            cfg["decoder_start_token_id"] = sot
    ct2_config = _read_config_json(directory)
    if "suppress_ids" in ct2_config:
        cfg["suppress_tokens"] = [int(i) for i in ct2_config["suppress_ids"]]  # type: ignore[attr-defined]
    if "suppress_ids_begin" in ct2_config:
        cfg["begin_suppress_tokens"] = [
            int(i)
            for i in ct2_config["suppress_ids_begin"]  # type: ignore[attr-defined]
        ]
    return cfg


def _projection_is_tied(model: Ct2Model) -> bool:
    proj = model.variables.get("decoder/projection/weight")
    emb = model.variables["decoder/embeddings/weight"]
    return proj is None or proj is emb or (proj.shape == emb.shape and bool(np.array_equal(proj, emb)))


def _split_rows(weight: np.ndarray, parts: int, name: str) -> list[np.ndarray]:
    if weight.shape[0] % parts:
        raise ModelLoadError(
            f"fused projection {name!r} has {weight.shape[0]} rows, not divisible by {parts}"
        )
    return list(np.split(weight, parts, axis=0))


def whisper_state_dict_from_ct2(
    model_dir: str | Path, dtype: torch.dtype = torch.float32
) -> tuple[dict[str, torch.Tensor], dict[str, object]]:
    """Load a CTranslate2 Whisper directory as a Hugging Face ``WhisperForConditionalGeneration`` state dict.

    CT2 names are mapped back to HF parameter names (the inverse of CTranslate2's Transformers converter):
    the fused self-attention ``linear_0`` (q|k|v rows) and cross-attention ``linear_1`` (k|v rows) are split,
    and the key bias is dropped because HF Whisper's ``k_proj`` has none (the converter writes zeros there; a
    key bias only adds a per-query constant to the attention scores, which softmax cancels). Quantised weights
    are dequantised. ``proj_out.weight`` is the same tensor as ``model.decoder.embed_tokens.weight`` when the
    CT2 projection is an alias of (or equal to) the embedding.

    Args:
        model_dir: the CTranslate2 model directory (or its ``model.bin``).
        dtype: ``torch.float32`` (default) or ``torch.float16`` / ``torch.bfloat16`` for all tensors.

    Returns:
        ``(state_dict, config)``: the tensors, and keyword arguments for ``transformers.WhisperConfig``
        (see :func:`whisper_config_from_ct2`).

    Raises:
        ModelLoadError: missing/corrupt/unsupported files, a non-Whisper spec, or missing weights.
        OptionError: ``dtype`` is not a floating-point dtype.
    """
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise OptionError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    directory = _resolve_model_dir(model_dir)
    model = read_model_bin(directory / "model.bin")
    cfg = whisper_config_from_ct2(model, directory)
    build = _WhisperStateDict(model.dequantized(), dtype, int(cfg["d_model"]))  # type: ignore[call-overload]
    build.embeddings()
    for i in range(int(cfg["encoder_layers"])):  # type: ignore[call-overload]
        build.encoder_layer(f"model.encoder.layers.{i}", f"encoder/layer_{i}")
    for i in range(int(cfg["decoder_layers"])):  # type: ignore[call-overload]
        build.decoder_layer(f"model.decoder.layers.{i}", f"decoder/layer_{i}")
    build.output_projection(tied=bool(cfg["tie_word_embeddings"]))
    build.check_all_used()
    return build.sd, cfg


class _WhisperStateDict:
    """Builds an HF Whisper state dict from dequantised CT2 variables ``v``, one block at a time.

    ``sd`` fills in HF parameter order; ``used`` records the CT2 names read, so that :meth:`check_all_used`
    can refuse weights this mapping does not know. Arrays shared in ``v`` (aliases) become one shared tensor.
    """

    def __init__(self, v: Mapping[str, np.ndarray], dtype: torch.dtype, d_model: int) -> None:
        self.v = v
        self.dtype = dtype
        self.d_model = d_model
        self.used: set[str] = set()
        # id(array) -> (array, tensor), so shared arrays stay shared; holding the array keeps its id from being
        # reused by a later (split) array once a dtype conversion has dropped the tensor's link to it.
        self.tensors: dict[int, tuple[np.ndarray, torch.Tensor]] = {}
        self.sd: dict[str, torch.Tensor] = {}

    def get(self, name: str) -> np.ndarray:
        if name not in self.v:
            raise ModelLoadError(f"CTranslate2 Whisper model lacks variable {name!r}")
        self.used.add(name)
        return self.v[name]

    def put(self, hf: str, arr: np.ndarray) -> None:
        key = id(arr)
        if key not in self.tensors:
            self.tensors[key] = (arr, torch.from_numpy(np.asarray(arr, order="C")).to(self.dtype))
        self.sd[hf] = self.tensors[key][1]

    def linear(self, hf: str, ct: str) -> None:
        self.put(f"{hf}.weight", self.get(f"{ct}/weight"))
        self.put(f"{hf}.bias", self.get(f"{ct}/bias"))

    def layer_norm(self, hf: str, ct: str) -> None:
        self.put(f"{hf}.weight", self.get(f"{ct}/gamma"))
        self.put(f"{hf}.bias", self.get(f"{ct}/beta"))

    def fused(self, ct: str, hf_names: list[str]) -> None:
        """Split the fused projection ``ct`` row-wise into ``hf_names`` (each d_model x d_model; no key bias)."""
        weights = _split_rows(self.get(f"{ct}/weight"), len(hf_names), f"{ct}/weight")
        biases = _split_rows(self.get(f"{ct}/bias"), len(hf_names), f"{ct}/bias")
        for hf, w, b in zip(hf_names, weights, biases, strict=True):
            if w.shape != (self.d_model, self.d_model):
                raise ModelLoadError(
                    f"fused projection {ct!r} does not split into {self.d_model}x{self.d_model} blocks"
                )
            self.put(f"{hf}.weight", w)
            if not hf.endswith("k_proj"):
                self.put(f"{hf}.bias", b)

    def embeddings(self) -> None:
        """Position tables, final layer norms, the two encoder convolutions and the token embedding."""
        for side in ("encoder", "decoder"):
            self.put(f"model.{side}.embed_positions.weight", self.get(f"{side}/position_encodings/encodings"))
            self.layer_norm(f"model.{side}.layer_norm", f"{side}/layer_norm")
        for conv in ("conv1", "conv2"):
            self.linear(f"model.encoder.{conv}", f"encoder/{conv}")
        self.put("model.decoder.embed_tokens.weight", self.get("decoder/embeddings/weight"))

    def self_attention(self, hf: str, ct: str) -> None:
        attn = f"{hf}.self_attn"
        self.fused(f"{ct}/self_attention/linear_0", [f"{attn}.q_proj", f"{attn}.k_proj", f"{attn}.v_proj"])
        self.linear(f"{attn}.out_proj", f"{ct}/self_attention/linear_1")
        self.layer_norm(f"{hf}.self_attn_layer_norm", f"{ct}/self_attention/layer_norm")

    def cross_attention(self, hf: str, ct: str) -> None:
        xattn = f"{hf}.encoder_attn"
        self.linear(f"{xattn}.q_proj", f"{ct}/attention/linear_0")
        self.fused(f"{ct}/attention/linear_1", [f"{xattn}.k_proj", f"{xattn}.v_proj"])
        self.linear(f"{xattn}.out_proj", f"{ct}/attention/linear_2")
        self.layer_norm(f"{hf}.encoder_attn_layer_norm", f"{ct}/attention/layer_norm")

    def ffn(self, hf: str, ct: str) -> None:
        self.linear(f"{hf}.fc1", f"{ct}/ffn/linear_0")
        self.linear(f"{hf}.fc2", f"{ct}/ffn/linear_1")
        self.layer_norm(f"{hf}.final_layer_norm", f"{ct}/ffn/layer_norm")

    def encoder_layer(self, hf: str, ct: str) -> None:
        self.self_attention(hf, ct)
        self.ffn(hf, ct)

    def decoder_layer(self, hf: str, ct: str) -> None:
        self.self_attention(hf, ct)
        self.cross_attention(hf, ct)
        self.ffn(hf, ct)

    def output_projection(self, tied: bool) -> None:
        """HF Whisper's ``proj_out`` has no bias: a CT2 projection bias must be zero."""
        proj = self.v.get("decoder/projection/weight")
        self.used.add("decoder/projection/weight")
        if tied or proj is None:
            self.sd["proj_out.weight"] = self.sd["model.decoder.embed_tokens.weight"]
        else:
            self.put("proj_out.weight", proj)
        proj_bias = self.v.get("decoder/projection/bias")
        if proj_bias is not None:
            self.used.add("decoder/projection/bias")
            if np.any(proj_bias.astype(np.float32) != 0):
                raise ModelLoadError("the CTranslate2 output projection has a bias, which HF Whisper cannot hold")

    def check_all_used(self) -> None:
        """Refuse to silently drop weights of a variant this mapping does not know (e.g. low-rank "lite" Whisper)."""
        leftovers = sorted(name for name, arr in self.v.items() if arr.ndim > 0 and name not in self.used)
        if leftovers:
            shown = ", ".join(leftovers[:5]) + (" ..." if len(leftovers) > 5 else "")
            raise ModelLoadError(f"unsupported CTranslate2 Whisper variables: {shown}")
