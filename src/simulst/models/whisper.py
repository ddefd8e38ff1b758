"""The Whisper adapter: any Whisper checkpoint (HF or CTranslate2 weights) behind the :class:`SpeechModel` API.

Decoding follows openai/whisper without timestamps: the prompt is ``<|startoftranscript|>`` (+ language and
task tokens for multilingual checkpoints) ``<|notimestamps|>``; every special token except ``<|endoftext|>`` is
suppressed, plus the checkpoint's ``suppress_tokens``, plus ``begin_suppress_tokens`` at the first output
position.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from simulst.errors import ModelLoadError, OptionError
from simulst.models.base import Encoded
from simulst.models.mel import HOP_LENGTH, SAMPLE_RATE, log_mel_spectrogram
from simulst.models.tokenizer import BpeTokenizer
from simulst.models.whisper_net import KV, WhisperNet
from simulst.types import Costs

if TYPE_CHECKING:
    from simulst.ctc.head import CtcHead

WINDOWS = ("full", "audio")
TASKS = ("transcribe", "translate")
PRECISIONS = ("fp32", "int8")


@dataclass(frozen=True)
class WhisperState:
    """Decoder state of B hypotheses.

    Attributes:
        cache: per layer, self-attention keys/values (B, H, L, D/H) of the L tokens decoded so far.
        cross: per layer, cross-attention keys/values (1, H, T, D/H), shared by all hypotheses.
        length: L, the number of positions decoded (prompt included).
    """

    cache: list[KV]
    cross: list[KV]
    length: int


class WhisperModel:
    """A Whisper checkpoint as a streaming :class:`~simulst.models.base.SpeechModel`.

    Args:
        net: the network with weights loaded.
        tokenizer: its tokenizer.
        config: transformers-style config dict (token ids, suppress lists).
        language: language code for multilingual checkpoints (None: detected per chunk).
        task: ``transcribe`` or ``translate`` (X -> English; multilingual checkpoints only).
        window: ``full`` pads every encoding to Whisper's 30 s window; ``audio`` encodes only the audio read
            plus ``window_pad_ms`` of silence (Whisper.cpp's ``audio_ctx``): less work per chunk. Without the
            padding Whisper, trained on padded 30 s windows, often misses the end of short audio and loops
            ("and so and so ..."); a few seconds of padding restore the end-of-speech cue (bench/ measures it).
        window_pad_ms: silence appended to the audio window.
        precision: ``fp32``, or ``int8``: the decoder's weights quantised to int8 (dynamic, per channel), which
            makes a CPU decoder step markedly faster (it is memory-bound); the encoder stays fp32.
        device: torch device.

    Attribute ``ctc_head``: an optional CTC head on the frozen encoder (:mod:`simulst.ctc`, set by
    ``load_model(..., ctc_head=...)``); ``encode`` then fills ``Encoded.ctc_log_probs`` for the frames of the audio.
    """

    sample_rate = SAMPLE_RATE

    def __init__(
        self,
        net: WhisperNet,
        tokenizer: BpeTokenizer,
        config: dict[str, Any],
        language: str | None = None,
        task: str = "transcribe",
        window: str = "full",
        window_pad_ms: float = 4000.0,
        precision: str = "fp32",
        device: str = "cpu",
    ) -> None:
        if window not in WINDOWS:
            raise OptionError(f"unknown encoder window {window!r}; choose one of {', '.join(WINDOWS)}")
        if task not in TASKS:
            raise OptionError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
        if precision not in PRECISIONS:
            raise OptionError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
        self.device = torch.device(device)
        if precision == "int8":
            if self.device.type != "cpu":
                raise OptionError("int8 precision runs on the CPU only (use --device cpu)")
            net.quantize_int8()
        self.precision = precision
        self.net = net.to(self.device).eval()
        self.dims = net.dims
        self.tokenizer = tokenizer
        self.window = window
        if window_pad_ms < 0:
            raise OptionError(f"window padding must be >= 0 ms, got {window_pad_ms}")
        self.window_pad_samples = round(window_pad_ms * SAMPLE_RATE / 1000)
        self.eos_id = int(config.get("eos_token_id", tokenizer.eos_id))
        self.vocab_size = self.dims.vocab_size
        self.multilingual = self.vocab_size >= 51865
        self.sot_id = tokenizer.token_id("<|startoftranscript|>")
        self.no_timestamps_id = tokenizer.token_id("<|notimestamps|>")
        self.language_ids = self._language_ids() if self.multilingual else {}
        if not self.multilingual and (task != "transcribe" or language not in (None, "en")):
            raise OptionError(
                "this Whisper checkpoint is English-only: it can only transcribe English "
                "(use a multilingual checkpoint for other languages or --task translate)"
            )
        if language is not None and self.multilingual and language not in self.language_ids:
            raise OptionError(f"unknown language {language!r} for this Whisper checkpoint")
        self.language = language
        self.task = task
        self.ctc_head: CtcHead | None = None
        self.max_source_samples = self.dims.max_source_positions * 2 * HOP_LENGTH
        self.max_length = self.dims.max_target_positions // 2
        suppress = set(int(t) for t in config.get("suppress_tokens") or [])
        suppress.update(range(self.sot_id, self.vocab_size))  # all special and timestamp tokens
        suppress.discard(self.eos_id)
        self._suppress = torch.tensor(sorted(suppress), dtype=torch.long, device=self.device)
        begin = [int(t) for t in config.get("begin_suppress_tokens") or []]
        self._begin_suppress = torch.tensor(begin, dtype=torch.long, device=self.device)

    # ----------------------------------------------------------------------------------- prompt
    def _language_ids(self) -> dict[str, int]:
        ids: dict[str, int] = {}
        for code in _WHISPER_LANGUAGES:
            try:
                ids[code] = self.tokenizer.token_id(f"<|{code}|>")
            except ModelLoadError:  # older checkpoints lack the newest language tokens (e.g. <|yue|>)
                continue
        return ids

    def prompt(self, enc: Encoded, costs: Costs) -> list[int]:
        """The decoder prompt for this encoding (detects the language when it is not set)."""
        if not self.multilingual:
            return [self.sot_id, self.no_timestamps_id]
        language_id = self.language_ids[self.language] if self.language else self.detect_language(enc, costs)
        task_id = self.tokenizer.token_id(f"<|{self.task}|>")
        return [self.sot_id, language_id, task_id, self.no_timestamps_id]

    def detect_language(self, enc: Encoded, costs: Costs) -> int:
        """The most probable language token after ``<|startoftranscript|>`` (one decoder pass)."""
        logits, _ = self._forward(torch.tensor([[self.sot_id]], device=self.device), 0, None, enc.extra, costs)
        ids = torch.tensor(list(self.language_ids.values()), device=self.device)
        return int(ids[torch.argmax(logits[0, -1, ids])])

    # ----------------------------------------------------------------------------------- encoder
    def encode(self, audio: np.ndarray, costs: Costs) -> Encoded:
        """Encode mono 16 kHz float32 ``audio`` (the whole source read so far)."""
        samples = int(audio.shape[0])
        full = 2 * self.dims.max_source_positions
        # "audio": the frames of the audio read plus the padding, rounded up to even (conv2 has stride 2).
        padded = samples + self.window_pad_samples
        n_frames = full if self.window == "full" else min(full, max(2, 2 * math.ceil(padded / HOP_LENGTH / 2)))
        with torch.inference_mode():
            mel = log_mel_spectrogram(torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32)),
                                      self.dims.num_mel_bins, n_frames)
            frames = self.net.model.encoder(mel.unsqueeze(0).to(self.device))
            cross = self.net.model.decoder.cross_kv(frames)
        costs.encoder_calls += 1
        costs.encoder_frames += n_frames
        if self.ctc_head is None:
            return Encoded(frames=frames, audio_samples=samples, extra=cross)
        ctc = self.ctc_head.log_probs(frames, samples)  # (T', V_ctc), the frames of the audio read
        return Encoded(frames=frames, audio_samples=samples, extra=cross, ctc_log_probs=ctc,
                       ctc_labels=self.ctc_head.vocabulary)

    # ----------------------------------------------------------------------------------- decoder
    def _forward(
        self, tokens: torch.Tensor, offset: int, cache: list[KV] | None, cross: list[KV], costs: Costs
    ) -> tuple[torch.Tensor, list[KV]]:
        batch = tokens.shape[0]
        if batch > 1:
            cross = [(k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1)) for k, v in cross]
        with torch.inference_mode():
            logits, new_cache = self.net.model.decoder(tokens, offset, cache, cross, last_only=True)
        costs.decoder_calls += 1
        costs.decoder_positions += tokens.numel()
        return logits, new_cache

    def _log_probs(self, logits: torch.Tensor, first: bool) -> torch.Tensor:
        logits = logits.float().clone()
        logits[..., self._suppress] = -math.inf
        if first and self._begin_suppress.numel():
            logits[..., self._begin_suppress] = -math.inf
        return torch.log_softmax(logits, dim=-1)

    def start(self, enc: Encoded, prefix: Sequence[int], costs: Costs) -> tuple[torch.Tensor, WhisperState]:
        """Force-decode prompt + ``prefix`` in one parallel pass; (V,) log-probs of the next token."""
        prompt = self.prompt(enc, costs)
        tokens = torch.tensor([[*prompt, *prefix]], dtype=torch.long, device=self.device)
        logits, cache = self._forward(tokens, 0, None, enc.extra, costs)
        state = WhisperState(cache=cache, cross=enc.extra, length=tokens.shape[1])
        return self._log_probs(logits[0, -1], first=len(prefix) == 0), state

    def expand(self, state: WhisperState, batch: int) -> WhisperState:
        """``batch`` copies of a one-hypothesis state (views, no copy)."""
        cache = [(k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1)) for k, v in state.cache]
        return WhisperState(cache=cache, cross=state.cross, length=state.length)

    def step(self, state: WhisperState, tokens: torch.Tensor, costs: Costs) -> tuple[torch.Tensor, WhisperState]:
        """Append ``tokens`` (B,) to the B hypotheses; (B, V) log-probs of the next token."""
        tokens = tokens.to(self.device).view(-1, 1)
        logits, cache = self._forward(tokens, state.length, state.cache, state.cross, costs)
        return self._log_probs(logits[:, -1], first=False), WhisperState(cache, state.cross, state.length + 1)

    def select(self, state: WhisperState, indices: torch.Tensor) -> WhisperState:
        """Keep hypotheses ``indices`` (B',) of the state, in that order."""
        indices = indices.to(self.device)
        batch = state.cache[0][0].shape[0]
        if batch == 1:
            return self.expand(state, int(indices.numel()))
        cache = [(k.index_select(0, indices), v.index_select(0, indices)) for k, v in state.cache]
        return WhisperState(cache=cache, cross=state.cross, length=state.length)


# Whisper's language codes in vocabulary order (openai/whisper tokenizer.LANGUAGES).
_WHISPER_LANGUAGES = (
    "en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no th ur hr bg lt la mi "
    "ml cy sk te fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw gl mr pa si km sn yo so af oc ka be tg sd "
    "gu am yi lo uz fo ht ps tk nn mt sa lb my bo tl mg as tt haw ln ha ba jw su yue"
).split()
