"""A compact Whisper network in plain PyTorch, with the parameter names of transformers' Whisper.

Why our own forward instead of ``transformers.WhisperForConditionalGeneration``: the streaming loop needs
(1) an encoder window shorter than 30 s (Whisper.cpp's ``audio_ctx``), which transformers refuses, (2) a
decoder whose KV cache can be forced with a prefix in one pass, shared across beams and re-indexed cheaply,
and (3) little per-step overhead on CPU. The parameter names match transformers', so a Hugging Face
checkpoint loads with ``load_state_dict`` and tests compare the two implementations directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

KV = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class WhisperDims:
    """Sizes of a Whisper checkpoint (names follow transformers' ``WhisperConfig``)."""

    num_mel_bins: int
    d_model: int
    encoder_layers: int
    encoder_attention_heads: int
    encoder_ffn_dim: int
    decoder_layers: int
    decoder_attention_heads: int
    decoder_ffn_dim: int
    vocab_size: int
    max_source_positions: int
    max_target_positions: int

    @classmethod
    def from_config(cls, config: dict[str, object]) -> WhisperDims:
        """Take the sizes from a transformers-style Whisper ``config.json`` dict."""
        return cls(**{name: int(config[name]) for name in cls.__dataclass_fields__})  # type: ignore[call-overload]


class Attention(nn.Module):
    """Multi-head attention with Whisper's projections (k_proj has no bias)."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, D) -> (B, H, L, D/H)."""
        b, length, d = x.shape
        return x.view(b, length, self.heads, d // self.heads).transpose(1, 2)

    def project_kv(self, x: torch.Tensor) -> KV:
        """Keys and values of ``x`` (B, L, D), each (B, H, L, D/H)."""
        return self.split(self.k_proj(x)), self.split(self.v_proj(x))

    def attend(self, x: torch.Tensor, kv: KV, causal: bool) -> torch.Tensor:
        """Queries from ``x`` (B, L, D) over ``kv``; causal masks the last L keys triangularly."""
        q = self.split(self.q_proj(x))
        k, v = kv
        mask = None
        if causal and x.shape[1] > 1:
            length, total = x.shape[1], k.shape[2]
            mask = torch.ones(length, total, dtype=torch.bool, device=x.device).tril(total - length)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        b, h, length, dh = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, length, h * dh))


class EncoderLayer(nn.Module):
    """Pre-norm self-attention + GELU MLP."""

    def __init__(self, d_model: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.self_attn = Attention(d_model, heads)
        self.self_attn_layer_norm = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, ffn)
        self.fc2 = nn.Linear(ffn, d_model)
        self.final_layer_norm = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.self_attn_layer_norm(x)
        x = x + self.self_attn.attend(h, self.self_attn.project_kv(h), causal=False)
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


class DecoderLayer(nn.Module):
    """Pre-norm causal self-attention, cross-attention and GELU MLP."""

    def __init__(self, d_model: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.self_attn = Attention(d_model, heads)
        self.self_attn_layer_norm = nn.LayerNorm(d_model)
        self.encoder_attn = Attention(d_model, heads)
        self.encoder_attn_layer_norm = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, ffn)
        self.fc2 = nn.Linear(ffn, d_model)
        self.final_layer_norm = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, past: KV | None, cross: KV) -> tuple[torch.Tensor, KV]:
        h = self.self_attn_layer_norm(x)
        k, v = self.self_attn.project_kv(h)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        x = x + self.self_attn.attend(h, (k, v), causal=True)
        x = x + self.encoder_attn.attend(self.encoder_attn_layer_norm(x), cross, causal=False)
        x = x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))
        return x, (k, v)


class Encoder(nn.Module):
    """Two convolutions (stride 2 in the second) + sinusoidal positions + transformer layers."""

    def __init__(self, dims: WhisperDims) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(dims.num_mel_bins, dims.d_model, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(dims.d_model, dims.d_model, kernel_size=3, stride=2, padding=1)
        self.embed_positions = nn.Embedding(dims.max_source_positions, dims.d_model)
        self.layers = nn.ModuleList(
            EncoderLayer(dims.d_model, dims.encoder_attention_heads, dims.encoder_ffn_dim)
            for _ in range(dims.encoder_layers)
        )
        self.layer_norm = nn.LayerNorm(dims.d_model)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """(B, n_mels, 2T) log-mel -> (B, T, D); T may be shorter than max_source_positions."""
        x = F.gelu(self.conv2(F.gelu(self.conv1(mel)))).transpose(1, 2)
        x = x + self.embed_positions.weight[: x.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.layer_norm(x)


class Decoder(nn.Module):
    """Token + learned position embeddings, transformer layers, tied output projection."""

    def __init__(self, dims: WhisperDims) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(dims.vocab_size, dims.d_model)
        self.embed_positions = nn.Embedding(dims.max_target_positions, dims.d_model)
        self.layers = nn.ModuleList(
            DecoderLayer(dims.d_model, dims.decoder_attention_heads, dims.decoder_ffn_dim)
            for _ in range(dims.decoder_layers)
        )
        self.layer_norm = nn.LayerNorm(dims.d_model)
        self.lm_head: nn.Module | None = None  # set by WhisperNet.quantize_int8; None: tied embedding matmul

    def cross_kv(self, frames: torch.Tensor) -> list[KV]:
        """Cross-attention keys/values of every layer for encoder ``frames`` (1, T, D): computed once a chunk."""
        return [cast(DecoderLayer, layer).encoder_attn.project_kv(frames) for layer in self.layers]

    def forward(
        self, tokens: torch.Tensor, offset: int, past: list[KV] | None, cross: list[KV], last_only: bool = False
    ) -> tuple[torch.Tensor, list[KV]]:
        """Logits (B, L, V) of ``tokens`` (B, L) at positions offset.. and the extended self-attention cache.

        With ``last_only`` only the last position's logits are projected, (B, 1, V): a forced prefix needs the
        next-token distribution after its last token only, and the vocabulary projection dominates the cost
        of a short decoder.
        """
        x = self.embed_tokens(tokens) + self.embed_positions.weight[offset : offset + tokens.shape[1]]
        new_cache: list[KV] = []
        for i, layer in enumerate(self.layers):
            x, kv = layer(x, None if past is None else past[i], cross[i])
            new_cache.append(kv)
        if last_only:
            x = x[:, -1:]
        x = self.layer_norm(x)
        logits = x @ self.embed_tokens.weight.T if self.lm_head is None else self.lm_head(x)
        return logits, new_cache


class WhisperModelNet(nn.Module):
    """Holds ``encoder`` and ``decoder`` (transformers' ``model.`` prefix)."""

    def __init__(self, dims: WhisperDims) -> None:
        super().__init__()
        self.encoder = Encoder(dims)
        self.decoder = Decoder(dims)


class WhisperNet(nn.Module):
    """The whole network; ``load_state_dict`` accepts transformers' ``WhisperForConditionalGeneration`` weights."""

    def __init__(self, dims: WhisperDims) -> None:
        super().__init__()
        self.dims = dims
        self.model = WhisperModelNet(dims)

    def quantize_int8(self) -> None:
        """Int8 dynamic quantisation (per output channel) of the decoder's linear layers and output projection.

        Why: one decoder step on a CPU is memory-bound - it streams every weight once per token, and the tied
        output projection alone is 51864 x 384 floats (80 MB for tiny). Int8 weights cut that traffic by 4 and
        use VNNI kernels; activations stay float (quantised on the fly). The encoder, compute-bound on long
        windows, stays in float32.
        """
        import warnings

        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        decoder = self.model.decoder
        head = nn.Linear(self.dims.d_model, self.dims.vocab_size, bias=False)
        head.weight = nn.Parameter(decoder.embed_tokens.weight.detach().clone(), requires_grad=False)
        decoder.lm_head = head
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao's deprecation notices: the API works in torch 2.13
            quantize_dynamic(decoder, {nn.Linear: per_channel_dynamic_qconfig}, inplace=True)

    def load_hf_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Load transformers-named weights (``proj_out.weight`` is tied to the token embedding and dropped)."""
        state = {k: v for k, v in state.items() if k != "proj_out.weight"}
        missing, unexpected = self.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise KeyError(f"Whisper weights do not fit: missing {missing[:5]}, unexpected {unexpected[:5]}")
