"""A compact Whisper network in plain PyTorch, with the parameter names of transformers' Whisper.

Why our own forward instead of ``transformers.WhisperForConditionalGeneration``: the streaming loop needs
(1) an encoder window shorter than 30 s (Whisper.cpp's ``audio_ctx``), which transformers refuses, (2) a
decoder whose KV cache can be forced with a prefix in one pass, shared across beams and re-indexed cheaply,
and (3) little per-step overhead on CPU. The parameter names match transformers', so a Hugging Face
checkpoint loads with ``load_state_dict`` and tests compare the two implementations directly.

The decoder also runs one step over the hypotheses of several streams at once (``WhisperModel.step_many``):
per-row positions, additive attention masks over padded self- and cross-attention keys (the usual padding
scheme of batched transformer inference, e.g. transformers' ``attention_mask``), and a regrouping of the
one-token queries by stream so the cross-attention keys are not copied once per hypothesis. Without these
arguments the code path, and so its numerics, are exactly the single-stream ones.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

KV = tuple[torch.Tensor, torch.Tensor]
SCREEN_TOP = 64  # tokens per row scored exactly after the int8 screen of the vocabulary (Decoder.project)
STEM_MIN_POSITIONS = 128  # a re-encoding convolves at least this many positions (shorter: another kernel, other sums)


@dataclass(frozen=True)
class Groups:
    """How B one-token query rows share G <= B rows of keys/values (several streams' hypotheses in one step).

    The queries are regrouped into a (G, W) grid, W the most rows of one group, so that each group's queries
    attend its keys/values together instead of the keys being copied once per row.

    Attributes:
        grid: (G, W) long, the query row in each grid cell (cells beyond a group's rows repeat a valid row;
            their outputs are dropped).
        rows: (B,) long, the flat grid cell (g * W + j) of each query row.
    """

    grid: torch.Tensor
    rows: torch.Tensor


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
        self.qkv_proj: Bf16Linear | None = None  # q, k and v in one product (set by _fuse_bf16; None: three)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, D) -> (B, H, L, D/H)."""
        b, length, d = x.shape
        return x.view(b, length, self.heads, d // self.heads).transpose(1, 2)

    def project_kv(self, x: torch.Tensor) -> KV:
        """Keys and values of ``x`` (B, L, D), each (B, H, L, D/H)."""
        return self.split(self.k_proj(x)), self.split(self.v_proj(x))

    def project_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, KV]:
        """Queries, keys and values of ``x`` (B, L, D) for self-attention, each (B, H, L, D/H)."""
        if self.qkv_proj is None:
            return self.split(self.q_proj(x)), self.project_kv(x)
        q, k, v = self.qkv_proj(x).chunk(3, dim=-1)
        return self.split(q), (self.split(k), self.split(v))

    def attend(
        self, x: torch.Tensor, kv: KV, causal: bool, mask: torch.Tensor | None = None,
        groups: Groups | None = None, queries: list[torch.Tensor] | None = None, query_from: int = 0,
        q: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Queries from ``x`` (B, L, D) over ``kv``; causal masks the last L keys triangularly.

        Args:
            x: (B, L, D) inputs of the queries.
            kv: keys and values, each (B, H, S, D/H) (or (G, H, S, D/H) with ``groups``).
            causal: mask the last L keys triangularly (ignored when ``mask`` is given).
            mask: additive float mask (0 keep, -inf drop) broadcast to (B, H, L, S) (or (G, H, W, S) with
                ``groups``); it replaces the causal mask, so a masked causal call must fold causality into it.
            groups: one-token queries (L = 1) of B rows over keys/values of G <= B rows: row b attends
                ``kv[g]`` where its slot in the (G, W) query grid lies in row g (:class:`Groups`).
            queries: the queries (B, H, L - query_from, D/H) of the positions from ``query_from`` on are appended to
                it (a view: the attention computes them anyway; :func:`head_scores_of` scores them later).
            q: the queries of ``x`` (B, H, L, D/H), if already projected (:meth:`project_qkv`).
        """
        if q is None:
            q = self.split(self.q_proj(x))
        k, v = kv
        if queries is not None:
            queries.append(q[:, :, query_from:])
        if groups is not None:
            return self._attend_grouped(q, kv, mask, groups)
        if k.shape[0] == 1 < q.shape[0] and mask is None and not causal:
            return self._attend_shared(q, kv)
        if mask is None and causal and x.shape[1] > 1:
            length, total = x.shape[1], k.shape[2]
            mask = torch.ones(length, total, dtype=torch.bool, device=x.device).tril(total - length)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        b, h, length, dh = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, length, h * dh))

    def head_scores(self, x: torch.Tensor, kv: KV, heads: Sequence[int]) -> torch.Tensor:
        """Scaled attention scores q·kᵀ/√d (before the softmax) of the queries of ``x`` (B, L, D) over the keys
        of ``kv`` for ``heads``: (B, h, L, S). (Explicit for a few heads: the fused attention does not return
        its weights.)"""
        q = self.split(self.q_proj(x))[:, list(heads)]  # (B, h, L, D/H)
        k = kv[0][:, list(heads)]  # (B or 1, h, S, D/H)
        return ((q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)).float()

    def last_row_weights(self, x: torch.Tensor, kv: KV, heads: Sequence[int]) -> torch.Tensor:
        """Attention weights of the last query of ``x`` (B, L, D) over the keys of ``kv`` for ``heads``, summed
        over those heads: (B, S)."""
        return torch.softmax(self.head_scores(x[:, -1:], kv, heads), dim=-1).sum(dim=1)[:, 0]

    def _attend_shared(self, q: torch.Tensor, kv: KV) -> torch.Tensor:
        """:meth:`attend` of B rows of queries ``q`` (B, H, L, D/H) over one row of keys/values (1, H, S, D/H) that
        they all share (the beams of a search over one encoding): the rows' queries side by side as the L positions
        of one row. Why: the fused attention kernel broadcasts the shared keys to every row, which reads them B
        times over (or copies them); one row of B·L queries reads them once. Same sums per query."""
        b, h, length, dh = q.shape
        side_by_side = q.transpose(0, 1).reshape(1, h, b * length, dh)
        out = F.scaled_dot_product_attention(side_by_side, kv[0], kv[1])  # (1, H, B·L, D/H)
        return self.out_proj(out.view(h, b, length, dh).permute(1, 2, 0, 3).reshape(b, length, h * dh))

    def _attend_grouped(self, q: torch.Tensor, kv: KV, mask: torch.Tensor | None, groups: Groups) -> torch.Tensor:
        """:meth:`attend` of one-token queries ``q`` (B, H, 1, D/H) regrouped into a (G, W) grid (see Groups)."""
        b, h, _, dh = q.shape
        g, w = groups.grid.shape
        grid = q.reshape(b, h * dh).index_select(0, groups.grid.reshape(-1))  # (G*W, D)
        grid = grid.view(g, w, h, dh).transpose(1, 2)  # (G, H, W, D/H)
        out = F.scaled_dot_product_attention(grid, kv[0], kv[1], attn_mask=mask)  # (G, H, W, D/H)
        out = out.transpose(1, 2).reshape(g * w, h * dh).index_select(0, groups.rows)  # (B, D)
        return self.out_proj(out.view(b, 1, h * dh))


def head_scores_of(queries: torch.Tensor, keys: torch.Tensor, heads: Sequence[int]) -> torch.Tensor:
    """Scaled attention scores q·kᵀ/√d (h, N, S) of recorded ``queries`` (H, N, D/H) over the ``keys`` (H, S, D/H)
    of one layer, for its ``heads`` (what :meth:`Attention.head_scores` computes of the same queries, up to float
    rounding)."""
    picked = list(heads)
    return ((queries[picked] @ keys[picked].transpose(-1, -2)) * (queries.shape[-1] ** -0.5)).float()


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
        return self.forward_kv(x)[0]

    def forward_kv(self, x: torch.Tensor, past: KV | None = None, at: torch.Tensor | None = None,
                   total: int = 0) -> tuple[torch.Tensor, KV]:
        """The layer over ``x`` (B, L, D) and its self-attention keys/values. With ``past`` (each (1, H, T', D/H)),
        ``x`` holds only the positions ``at`` of ``total`` (ascending; every position from T' on among them): they
        attend to all ``total`` keys/values, those of the other positions taken from ``past``."""
        h = self.self_attn_layer_norm(x)
        q, kv = self.self_attn.project_qkv(h)
        if past is not None and at is not None:
            kv = (placed(past[0], kv[0], at, total), placed(past[1], kv[1], at, total))
        x = x + self.self_attn.attend(h, kv, causal=False, q=q)
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x)))), kv


def placed(past: torch.Tensor, new: torch.Tensor, at: torch.Tensor, total: int, dim: int = 2) -> torch.Tensor:
    """``past`` (its size ``T'`` along ``dim``) extended to ``total`` positions along ``dim``, with the rows of ``new``
    written at the positions ``at``; a new tensor (``past`` is not changed). The positions from T' on that ``at``
    does not name are zeros."""
    shape = list(past.shape)
    shape[dim] = total
    out = past.new_zeros(shape)
    out.narrow(dim, 0, past.shape[dim]).copy_(past)
    out.index_copy_(dim, at, new)
    return out


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

    def forward(
        self, x: torch.Tensor, past: KV | None, cross: KV, self_mask: torch.Tensor | None = None,
        cross_mask: torch.Tensor | None = None, cross_groups: Groups | None = None,
        align_heads: Sequence[int] = (), alignment: list[torch.Tensor] | None = None,
        scores: list[torch.Tensor] | None = None, queries: list[torch.Tensor] | None = None, query_from: int = 0,
    ) -> tuple[torch.Tensor, KV]:
        """One layer over ``x`` (B, L, D); masks and groups as in :meth:`Decoder.forward`. With ``align_heads``,
        the last position's cross-attention weights of those heads, summed, are appended to ``alignment``,
        every position's raw cross-attention scores of those heads, (B, h, L, S), to ``scores``, and the
        cross-attention queries (B, H, L - query_from, D/H) of the positions from ``query_from`` on to ``queries``."""
        h = self.self_attn_layer_norm(x)
        q, (k, v) = self.self_attn.project_qkv(h)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        x = x + self.self_attn.attend(h, (k, v), causal=True, mask=self_mask, q=q)
        h = self.encoder_attn_layer_norm(x)
        recorded = queries if align_heads else None
        x = x + self.encoder_attn.attend(h, cross, causal=False, mask=cross_mask, groups=cross_groups,
                                         queries=recorded, query_from=query_from)
        if align_heads and alignment is not None:
            alignment.append(self.encoder_attn.last_row_weights(h, cross, align_heads))
        if align_heads and scores is not None:
            scores.append(self.encoder_attn.head_scores(h, cross, align_heads))
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
        return self.forward_at(mel)[0]

    def stem(self, mel: torch.Tensor, first: int = 0) -> torch.Tensor:
        """The convolutions' (B, T - ``first``, D) output positions from ``first`` on of the (B, n_mels, 2T)
        log-mel ``mel``, computed from the mel frames they read only (from 2·first - 2 on): the same products as
        those positions of the whole window's, and the same values where the CPU's convolution kernel sums them
        alike (on oneDNN, for at least ``STEM_MIN_POSITIONS`` positions: :meth:`forward_at` computes no fewer)."""
        if first <= 0:
            return F.gelu(self.conv2(F.gelu(self.conv1(mel)))).transpose(1, 2)
        # conv2's output t reads conv1's outputs 2t-1 .. 2t+1 (no padding needed from position 1 on), and those
        # read mel frames 2t-2 .. 2t+2: conv1 over the frames from 2·first-2, its first output (padded) left out
        h = F.gelu(self.conv1(mel[..., 2 * first - 2 :]))[..., 1:]
        return F.gelu(F.conv1d(h, self.conv2.weight, self.conv2.bias, stride=2)).transpose(1, 2)

    def forward_at(self, mel: torch.Tensor, at: torch.Tensor | None = None,
                   past: Sequence[KV] | None = None) -> tuple[torch.Tensor, list[KV]]:
        """The states of the positions ``at`` (ascending; None: all, of every row, as :meth:`forward`) of the (B,
        n_mels, 2T) log-mel ``mel`` (B = 1 with ``at``), and every layer's self-attention keys/values (each (B, H, T,
        D/H)): ``(B, len(at), D)``.

        Only those positions are computed (the convolutions too, from the first of them on, :meth:`stem`): at every
        layer they attend to the keys/values of the others as ``past`` (each layer's, (1, H, T', D/H), of an earlier
        call; every position from T' on must be in ``at``) holds them.
        Why: Whisper's encoder attends both ways, so new audio changes every position's state; a stream that
        re-encodes only its recent audio (:attr:`~simulst.config.StreamOptions.reencode_s`) keeps the older positions'
        keys/values as they were when last computed, an approximation, for a fraction of the encoder's work."""
        if at is None or past is None:
            at, past = None, None
            x = self.stem(mel)
            total = x.shape[1]
            x = x + self.embed_positions.weight[:total]
        else:
            total = mel.shape[-1] // 2
            first = max(0, min(int(at[0]), total - STEM_MIN_POSITIONS))
            x = self.stem(mel, first)[:, at - first] + self.embed_positions.weight[at]
        kvs = []
        for i, layer in enumerate(self.layers):
            x, kv = cast(EncoderLayer, layer).forward_kv(x, None if past is None else past[i], at, total)
            kvs.append(kv)
        return self.layer_norm(x), kvs


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
        self._embed_t: torch.Tensor | None = None  # a contiguous Eᵀ for one-row projections (made on first use)
        self.screen: object | None = None  # set by WhisperNet.screen_vocabulary: E packed in int8 (no parameter)
        self.cross_proj: Bf16Linear | None = None  # every layer's cross keys/values in one product (_fuse_bf16)

    def cross_kv(self, frames: torch.Tensor) -> list[KV]:
        """Cross-attention keys/values of every layer for encoder ``frames`` (B, T, D): computed once a chunk."""
        attentions = [cast(DecoderLayer, layer).encoder_attn for layer in self.layers]
        if self.cross_proj is None:
            return [attention.project_kv(frames) for attention in attentions]
        parts = self.cross_proj(frames).chunk(2 * len(attentions), dim=-1)
        return [(a.split(parts[2 * i]), a.split(parts[2 * i + 1])) for i, a in enumerate(attentions)]

    def forward(
        self, tokens: torch.Tensor, offset: int | torch.Tensor, past: list[KV] | None, cross: list[KV],
        last_only: bool = False, self_mask: torch.Tensor | None = None, cross_mask: torch.Tensor | None = None,
        cross_groups: Groups | None = None, alignment_heads: Mapping[int, Sequence[int]] | None = None,
        alignment: list[torch.Tensor] | None = None, scores: list[torch.Tensor] | None = None,
        pick: torch.Tensor | None = None, queries: list[torch.Tensor] | None = None, query_from: int = 0,
    ) -> tuple[torch.Tensor, list[KV]]:
        """Logits (B, L, V) of ``tokens`` (B, L) at positions offset.. and the extended self-attention cache.

        With ``last_only`` only the last position's logits are projected, (B, 1, V): a forced prefix needs the
        next-token distribution after its last token only, and the vocabulary projection dominates the cost
        of a short decoder. The keyword arguments serve rows of different lengths (several streams in one
        step, padded caches; ``WhisperModel.step_many``); left at their defaults, the single-stream path runs.

        Args:
            offset: an int (every row's first position), or a (B,) long tensor of per-row first positions.
            self_mask: additive float mask (0 keep, -inf drop), broadcast to (B, H, L, P + L) over the ``past``
                (P positions, padding included) + new keys; it replaces the causal mask (fold causality in).
            cross_mask: additive float mask over the cross-attention keys (padded to a common length).
            cross_groups: the ``cross`` keys/values have one row per group of query rows (:class:`Groups`;
                one-token steps only); ``cross_mask`` is then per group.
            alignment_heads: decoder layer -> cross-attention heads whose weights follow the word timing (the
                checkpoint's alignment heads); with ``alignment``, the last position's weights of those heads,
                summed over heads and layers, (B, S), are appended to that list (AlignAtt, Papi et al. 2023);
                with ``scores``, every position's raw scores of those heads, (B, h, L, S) per layer that has
                some (token timing by DTW, :mod:`simulst.models.timing`); with ``queries``, the cross-attention
                queries (B, H, L - query_from, D/H) of the positions from ``query_from`` on, per layer that has
                some (to be scored later: :func:`head_scores_of`).
            pick: (B,) per row, the one position whose logits are projected, (B, 1, V), or (B, P) per row P
                positions, (B, P, V) (rows of different lengths right-padded to one: each row's own positions;
                instead of ``last_only``).
        """
        if isinstance(offset, int):
            positions = self.embed_positions.weight[offset : offset + tokens.shape[1]]
        else:
            steps = torch.arange(tokens.shape[1], device=tokens.device)
            positions = self.embed_positions.weight[offset.view(-1, 1) + steps]  # (B, L, D)
        x = self.embed_tokens(tokens) + positions
        new_cache: list[KV] = []
        weights: list[torch.Tensor] = []
        for i, layer in enumerate(self.layers):
            heads = alignment_heads.get(i, ()) if alignment_heads is not None else ()
            x, kv = layer(x, None if past is None else past[i], cross[i], self_mask, cross_mask, cross_groups,
                          heads, None if alignment is None else weights, scores, queries, query_from)
            new_cache.append(kv)
        if alignment is not None and weights:
            alignment.append(torch.stack(weights).sum(dim=0))
        if pick is not None:
            rows = torch.arange(x.shape[0], device=x.device)
            x = x[rows, pick].unsqueeze(1) if pick.dim() == 1 else x[rows.unsqueeze(1), pick]
        elif last_only:
            x = x[:, -1:]
        x = self.layer_norm(x)
        logits = self.project(x) if self.lm_head is None else self.lm_head(x)
        return logits, new_cache

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits of ``x`` (..., D) through the tied token embedding E (V, D) (screened: see
        :meth:`WhisperNet.screen_vocabulary`).

        Why two layouts: decoding projects a handful of rows at a time, and the CPU GEMM kernels are poor for
        such skinny products with E transposed on the fly (``x @ E.T``: 7.4 ms for one row of tiny.en, 29 ms for
        three, on this project's 2-core CPU). One row multiplies a contiguous copy of Eᵀ (3.7 ms); several rows
        take E @ xᵀ (5-10 ms for 2-8 rows). Same sums, other kernels: equal up to float rounding."""
        rows = x.reshape(-1, x.shape[-1])
        weight = self.embed_tokens.weight
        if self.screen is not None:
            # int8 weights and activations; each row scaled to a peak of 1 and a last row spanning [-1, 1], so
            # every row is quantised alike, alone or batched (dynamic quantisation picks one scale per call)
            peak = rows.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12)
            span = torch.zeros(1, rows.shape[-1], dtype=rows.dtype, device=rows.device)
            span[0, 0], span[0, -1] = -1.0, 1.0
            scaled = torch.cat([rows / peak, span])
            approx = torch.ops.quantized.linear_dynamic(scaled, self.screen, reduce_range=True)[:-1] * peak  # (N, V)
            top = approx.topk(min(SCREEN_TOP, approx.shape[-1]), dim=-1).indices  # (N, k)
            exact = torch.bmm(weight[top], rows.unsqueeze(-1)).squeeze(-1)  # (N, k) in float32
            return approx.scatter(1, top, exact).reshape(*x.shape[:-1], weight.shape[0])
        if rows.shape[0] == 1:
            if self._embed_t is None or self._embed_t.device != weight.device or self._embed_t.dtype != weight.dtype:
                self._embed_t = weight.detach().t().contiguous()
            out = rows @ self._embed_t
        else:
            out = (weight @ rows.T).T
        return out.reshape(*x.shape[:-1], weight.shape[0])


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

    @classmethod
    def for_weights(cls, dims: WhisperDims, state: dict[str, torch.Tensor]) -> WhisperNet:
        """The network holding ``state`` (transformers-named weights, :meth:`load_hf_state_dict`), built without
        the random initialisation its layers would otherwise draw, since every parameter is then overwritten (a
        missing one is an error): a model loads sooner (``bench/results/model_load.md``)."""
        with _uninitialised_layers():
            net = cls(dims)
        net.load_hf_state_dict(state)
        return net

    def quantize_int8(self) -> None:
        """Int8 dynamic quantisation (per output channel) of the decoder's linear layers and output projection.

        Why: one decoder step on a CPU is memory-bound - it streams every weight once per token, and the tied
        output projection alone is 51864 x 384 floats (80 MB for tiny). Int8 weights cut that traffic by 4 and
        use VNNI kernels; activations stay float (quantised on the fly). The encoder, compute-bound on long
        windows, stays in float32.
        """
        decoder = self.model.decoder
        decoder.lm_head = self._embedding_head()
        _int8_linears(decoder, inplace=True)

    def quantize_encoder_int8(self) -> None:
        """Int8 dynamic quantisation (per output channel) of the encoder's linear layers: the attention
        projections and the feed-forward layers, which hold most of the encoder's compute on a long window. Its
        convolutions, layer norms and attention products stay in float32."""
        _int8_linears(self.model.encoder, inplace=True)

    def encoder_bf16(self) -> None:
        """The encoder's linear layers (attention projections, feed-forward) in bfloat16: weights stored in it,
        inputs rounded to it, outputs returned in float32, so the layer norms, attention products and the residual
        stream stay in float32. Why: the linear layers hold most of the encoder's compute on a long window, and a
        CPU with bfloat16 instructions (AVX512-BF16, AMX) multiplies in it faster than in float32. The products
        that share an input run as one (:func:`_fuse_bf16`)."""
        _replace_linears(self.model.encoder, Bf16Linear)
        _fuse_bf16(self.model.encoder)

    def decoder_bf16(self) -> None:
        """The decoder's linear layers (self- and cross-attention projections, the cross-attention keys and values
        of the encoder frames, feed-forward) in bfloat16 as :meth:`encoder_bf16` puts the encoder's; the token
        embedding and so the vocabulary projection stay in float32. Why: a decoder step multiplies a few rows by
        every weight, which streams the weights through the CPU; bfloat16 weights are half the bytes and run on
        the CPU's bfloat16 instructions. The products that share an input run as one (:func:`_fuse_bf16`)."""
        _replace_linears(self.model.decoder, Bf16Linear)
        _fuse_bf16(self.model.decoder)

    def decoder_steps_fp32(self) -> None:
        """The decoder's linear layers as :class:`StepLinear`: a step of a few beams multiplies each weight as
        W·xᵀ, the kernel that is faster for so few rows on the CPU; the forced passes (many rows) and one-row steps
        as before. The weights stay float32 and are not copied."""
        _replace_linears(self.model.decoder.layers, StepLinear)

    def screen_vocabulary(self) -> None:
        """Project decoder states onto the vocabulary in two stages: an int8 copy of the token embedding E scores
        every token, and the ``SCREEN_TOP`` best of each row are scored again exactly (float32 rows of E).

        Why: projecting one decoder state streams all of E (51864 x 384 floats, 80 MB for tiny) through the CPU,
        the largest part of a decoder step; the int8 copy is a quarter of that and runs on integer kernels (7 ms
        -> 1.5 ms a row on this project's 2-core CPU). The tokens a search reads (the best few of each row) and
        so every greedy choice are those of the float32 projection (the exact top tokens are among the int8 top
        ``SCREEN_TOP`` unless two logits ``SCREEN_TOP`` ranks apart differ by less than the int8 error, about 0.2
        (standard deviation) on tiny.en's decoder states); the other logits are the int8 estimates, which enter
        only the softmax normaliser: log-probabilities move by int8 rounding (most in the flattest distributions),
        so beams whose scores differ by about that much, or a mean log-probability at a guard's threshold, can be
        decided the other way than with the exact projection; each row is quantised alike alone or batched.
        """
        # only the packed weights are kept (a plain attribute: not a parameter of the state dict)
        self.model.decoder.screen = int8_packed(self.model.decoder.embed_tokens.weight.detach())

    def _embedding_head(self) -> nn.Linear:
        """A linear output projection whose weight is the tied token embedding (V, D), shared, to be quantised
        (which reads it and keeps only the int8 copy); no weight of its own is made or initialised."""
        head = nn.Linear(1, 1, bias=False)  # a shell: its (V, D) weight is the embedding, not a new random one
        head.weight = nn.Parameter(self.model.decoder.embed_tokens.weight.detach(), requires_grad=False)
        head.out_features, head.in_features = head.weight.shape
        return head

    def load_hf_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Load transformers-named weights (``proj_out.weight`` is tied to the token embedding and dropped)."""
        state = {k: v for k, v in state.items() if k != "proj_out.weight"}
        missing, unexpected = self.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise KeyError(f"Whisper weights do not fit: missing {missing[:5]}, unexpected {unexpected[:5]}")


STEP_ROWS = (2, 4)  # the row counts StepLinear multiplies as W·xᵀ (a beam search's steps)


class StepLinear(nn.Module):
    """A float32 linear layer (the weight and bias of ``linear``, shared) that multiplies a few rows, the beams of a
    decoder step, as W·xᵀ: ``STEP_ROWS`` rows; any other count as ``nn.Linear`` does (x·Wᵀ).

    Why: on the CPU, torch's x·Wᵀ kernel is slow for a handful of rows (a decoder step of a beam of 3 reads every
    weight of the decoder at a fraction of the memory's speed), and W·xᵀ is another kernel that reads W in its
    stored order. Same sums, up to float rounding (:meth:`WhisperNet.decoder_steps_fp32`)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight = linear.weight
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if not STEP_ROWS[0] <= rows <= STEP_ROWS[1]:
            return F.linear(x, self.weight, self.bias)
        flat = x.reshape(rows, x.shape[-1]).t()
        out = self.weight @ flat if self.bias is None else torch.addmm(self.bias.unsqueeze(1), self.weight, flat)
        return out.t().contiguous().view(*x.shape[:-1], self.weight.shape[0])


class Bf16Linear(nn.Module):
    """A linear layer whose weight and bias are kept in bfloat16 and whose input is rounded to bfloat16; its
    output is float32, or bfloat16 with ``keep_bf16`` (for a layer whose output only feeds another such layer
    through an elementwise function: the rounding is then the same, done once) (:meth:`WhisperNet.encoder_bf16`,
    :meth:`WhisperNet.decoder_bf16`)."""

    def __init__(self, linear: nn.Linear, keep_bf16: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(linear.weight.detach().to(torch.bfloat16), requires_grad=False)
        bias = linear.bias
        self.bias = None if bias is None else nn.Parameter(bias.detach().to(torch.bfloat16), requires_grad=False)
        self.keep_bf16 = keep_bf16

    @classmethod
    def stacked(cls, linears: Sequence[nn.Module]) -> Bf16Linear:
        """One layer computing the outputs of ``linears`` (of one input size) side by side, in their order; a
        layer without a bias adds zeros."""
        weights = [cast(torch.Tensor, linear.weight).detach() for linear in linears]
        given = [cast(torch.Tensor | None, linear.bias) for linear in linears]
        biases = [torch.zeros(w.shape[0], dtype=w.dtype, device=w.device) if b is None else b.detach()
                  for w, b in zip(weights, given, strict=True)]
        whole = nn.Linear(weights[0].shape[1], sum(w.shape[0] for w in weights))
        whole.weight, whole.bias = nn.Parameter(torch.cat(weights)), nn.Parameter(torch.cat(biases))
        return cls(whole)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x.to(torch.bfloat16), self.weight, self.bias)
        return out if self.keep_bf16 else out.float()


def _replace_linears(module: nn.Module, layer: Callable[[nn.Linear], nn.Module]) -> None:
    """Replace every ``nn.Linear`` inside ``module`` by ``layer`` of it (:class:`StepLinear`, :class:`Bf16Linear`)."""
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, layer(child))


def _fuse_bf16(module: nn.Module) -> None:
    """In ``module`` (made of :class:`Bf16Linear` layers), the products that share an input run as one: each
    self-attention's queries, keys and values; a decoder's cross-attention keys and values of every layer (from the
    same encoder frames); and each feed-forward layer's first product stays in bfloat16 through the GELU into the
    second (which rounds its input to bfloat16 anyway). Why: one wider product and fewer conversions do the same
    sums in less time on a CPU; the results are those of the separate layers (the same bfloat16 products)."""
    for sub in list(module.modules()):  # (a list: the loop adds modules to the tree it walks)
        if isinstance(sub, EncoderLayer | DecoderLayer):
            attention = sub.self_attn
            attention.qkv_proj = Bf16Linear.stacked([attention.q_proj, attention.k_proj, attention.v_proj])
            cast(Bf16Linear, sub.fc1).keep_bf16 = True
        if isinstance(sub, Decoder):
            layers = [cast(DecoderLayer, layer).encoder_attn for layer in sub.layers]
            sub.cross_proj = Bf16Linear.stacked([p for a in layers for p in (a.k_proj, a.v_proj)])


_INIT_LOCK = threading.Lock()


@contextlib.contextmanager
def _uninitialised_layers() -> Iterator[None]:
    """Within it, the layers torch builds (linear, convolution, embedding) skip their random initialisation: their
    weights hold whatever memory they were given, to be overwritten. It replaces ``torch.nn.init``'s draws for the
    whole process while it lasts (as transformers' ``no_init_weights`` does): two entries take turns, but a layer
    that another thread builds meanwhile, outside it, skips its draws too."""
    names = ("kaiming_uniform_", "uniform_", "normal_")
    with _INIT_LOCK:
        drawn = {name: getattr(nn.init, name) for name in names}
        for name in names:
            setattr(nn.init, name, lambda tensor, *args, **kwargs: tensor)
        try:
            yield
        finally:
            for name, draw in drawn.items():
                setattr(nn.init, name, draw)


def int8_packed(weight: torch.Tensor) -> Any:
    """The packed int8 weight (V, D) of a linear layer without bias, for ``torch.ops.quantized.linear_dynamic``: the
    weight quantised per output channel, symmetric, as :func:`_int8_linears` (torch.ao's ``quantize_dynamic``)
    quantises it - the same scales and integers - and packed once.

    Why: torch.ao builds its quantised layer by packing a zero matrix of the weight's size first, then the weight;
    packing once skips the first, a large part of a model's load for the screened projection's token embedding
    (``bench/results/model_load.md``)."""
    import warnings

    from torch.ao.quantization import per_channel_dynamic_qconfig

    observer = per_channel_dynamic_qconfig.weight()
    observer(weight)
    scales, zero_points = observer.calculate_qparams()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the quantised tensors' deprecation notice: they work in torch 2.13)
        quantized = torch.quantize_per_channel(weight.float(), scales.to(torch.double), zero_points.to(torch.int64),
                                               observer.ch_axis, torch.qint8)
    return torch.ops.quantized.linear_prepack(quantized, None)


def _int8_linears(module: nn.Module, inplace: bool = False) -> nn.Module:
    """``module`` with its linear layers quantised to int8, dynamic and per output channel (torch.ao)."""
    import warnings

    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's deprecation notices: the API works in torch 2.13
        return quantize_dynamic(module, {nn.Linear: per_channel_dynamic_qconfig}, inplace=inplace)
