"""The Whisper adapter: any Whisper checkpoint (HF or CTranslate2 weights) behind the :class:`SpeechModel` API.

Decoding follows openai/whisper without timestamps: the prompt is ``<|startoftranscript|>`` (+ language and
task tokens for multilingual checkpoints) ``<|notimestamps|>``; every special token except ``<|endoftext|>`` is
suppressed, plus the checkpoint's ``suppress_tokens``, plus ``begin_suppress_tokens`` at the first output
position.

Besides the :class:`~simulst.models.base.DecoderModel` protocol, :meth:`WhisperModel.step_many` advances the
hypotheses of several streams (different prompt + prefix lengths L, different encoder windows T) with ONE
decoder forward call: the self-attention caches are left-padded to the longest L and the cross-attention
keys/values right-padded to the longest T, with additive -inf attention masks on the padding and per-row
positions (the padding scheme of batched transformer inference, e.g. transformers' ``attention_mask``; serving
many streams with one batched forward is the continuous batching of Orca, Yu et al., OSDI 2022). It returns,
per stream, what :meth:`WhisperModel.step` returns; the single-stream path has no masks and is unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from simulst.config import TASKS, ModelOptions
from simulst.errors import ModelLoadError, OptionError
from simulst.models.base import Ahead, Encoded
from simulst.models.ctc_head import CtcHead
from simulst.models.device import precision_on, torch_device
from simulst.models.mel import HOP_LENGTH, SAMPLE_RATE, log_mel_spectrogram
from simulst.models.timing import RowTrace, Traced, token_start_frames
from simulst.models.tokenizer import BpeTokenizer
from simulst.models.whisper_net import KV, Groups, WhisperDims, WhisperNet, head_scores_of, placed
from simulst.types import Costs

MULTILINGUAL_VOCAB = 51865  # a multilingual Whisper's vocabulary size (English-only checkpoints have 51864)
REUSE_MIN_FRAMES = 50  # under this many (1 s) of audio positions to keep, a re-encoding also computes its near silence


@dataclass(frozen=True)
class CrossBatch:
    """The cross-attention keys/values of several streams stacked for :meth:`WhisperModel.step_many`.

    Attributes:
        sources: the streams' ``WhisperState.cross`` lists it was stacked from (identity decides reuse).
        stacked: per layer, (S, H, max T, D/H) keys and values, right-padded with zeros.
        mask: additive (S, 1, 1, max T) mask of the padding (None: all T equal).
    """

    sources: tuple[list[KV], ...]
    stacked: list[KV]
    mask: torch.Tensor | None

    def slots(self, states: Sequence[WhisperState]) -> list[int] | None:
        """The stack row of each state's encoding, when every one is in the stack (so it can be reused, also by
        a subset of the streams it was stacked for); None otherwise."""
        where = {id(cross): i for i, cross in enumerate(self.sources)}
        found = [where.get(id(state.cross)) for state in states]
        return None if any(i is None for i in found) else [i for i in found if i is not None]


@dataclass(frozen=True)
class WhisperState:
    """Decoder state of B hypotheses.

    Attributes:
        cache: per layer, self-attention keys/values (B, H, L, D/H) of the L tokens decoded so far.
        cross: per layer, cross-attention keys/values (1, H, T, D/H), shared by all hypotheses.
        length: L, the number of positions decoded (prompt included).
        alignment: (B, T) cross-attention of the alignment heads (summed) of each hypothesis's last position,
            the one that predicts its next token; None when the state does not track it (``start(alignment=...)``).
        trace: the cross-attention queries of the alignment heads' layers at the positions from the prompt's last
            one on, per hypothesis (token timing without a pass of its own: :meth:`WhisperModel.traced_starts`);
            None: not recorded (``WhisperModel.tracing`` off, or a state made otherwise).
    """

    cache: list[KV]
    cross: list[KV]
    length: int
    alignment: torch.Tensor | None = None
    trace: RowTrace | None = None


@dataclass(frozen=True)
class _EncoderMemory:
    """What an encoding keeps for the stream's next one to reuse (:meth:`WhisperModel._encode_reusing`): the audio
    encoded, the (1, T, D) states, every encoder layer's self-attention keys/values and the decoder's cross-attention
    keys/values, each (1, H, T, D/H)."""

    audio: np.ndarray
    frames: torch.Tensor
    layers: list[KV]
    cross: list[KV]


class WhisperModel:
    """A Whisper checkpoint as a streaming :class:`~simulst.models.base.SpeechModel`.

    Args:
        net: the network with weights loaded.
        tokenizer: its tokenizer.
        config: transformers-style config dict (token ids, suppress lists, ``alignment_heads``).
        options: how it runs (:class:`~simulst.config.ModelOptions`, validated when built): the language
            (None: detected from the encoding, pinned by a stream once sure: :mod:`simulst.streaming.prompt`),
            the task, the window (``full`` pads every encoding to Whisper's 30 s window; ``audio`` encodes only the
            audio read plus ``window_pad_ms`` of silence, at least ``window_min_ms`` - Whisper.cpp's
            ``audio_ctx``: less work per chunk; without the padding Whisper, trained on padded 30 s windows, often
            misses the end of short audio and loops), the decoder's precision (``int8``: its weights quantised,
            dynamic and per channel, which makes a CPU decoder step markedly faster - it is memory-bound; ``bf16``:
            its linear layers in bfloat16), the encoder's precision (fp32, int8, bf16; for either, auto: the
            attributes ``precision`` and ``encoder_precision`` are what auto resolved to), the vocabulary
            screening (fp32 or bf16 on the CPU:
            :meth:`WhisperNet.screen_vocabulary`) and the torch device. A ``window_min_ms`` or ``window_pad_ms``
            longer than the model's window (Whisper's 30 s) raises ``OptionError``.

    Attribute ``ctc_head``: an optional CTC head on the frozen encoder (:mod:`simulst.ctc`, set by
    ``load_model(..., ctc_head=...)``); ``encode`` then fills ``Encoded.ctc_log_probs`` for the frames of the audio.

    Attribute ``tracing`` (default True): every decoder state records the cross-attention queries of the alignment
    heads' layers at the positions it reads after the prompt (:class:`~simulst.models.timing.RowTrace`: queries the
    pass computes anyway, kept, not copied), so that a hypothesis is timed (:meth:`traced_starts`) without another
    decoder pass.

    Several streams in one decoder call: :meth:`step_many` (``states``, ``tokens``, ``costs``: one of each per
    stream) is :meth:`step` for every stream, computed by one batched, masked decoder forward; it returns per
    stream the (B_i, V) log-probs and an unpadded :class:`WhisperState` that continues with :meth:`step`,
    :meth:`select` or :meth:`step_many` again. The one call counts as ONE decoder call, on the first stream's
    ``costs``; every stream's ``costs`` counts its own B_i decoder positions. In fp32 the results equal separate
    :meth:`step` calls up to float rounding (padding and batching change the order of a few reductions);
    with int8 weights the activations of the whole batch share one dynamic quantisation scale, so they differ
    by int8 rounding.
    """

    sample_rate = SAMPLE_RATE

    def __init__(self, net: WhisperNet, tokenizer: BpeTokenizer, config: dict[str, Any], options: ModelOptions) -> None:
        self.options = options  # (validated when built)
        self.device = torch_device(options.device)
        self.dims = net.dims
        self.vocab_size = self.dims.vocab_size
        self.multilingual = self.vocab_size >= MULTILINGUAL_VOCAB
        self.precision = precision_on(options.precision, self.device, self.multilingual)
        self.encoder_precision = precision_on(options.encoder_precision, self.device, self.multilingual)
        self.net = _prepared(net, options.screen_vocabulary, self.device, self.precision, self.encoder_precision)
        self.tokenizer = tokenizer
        self.window = options.window
        self.window_pad_samples = round(options.window_pad_ms * SAMPLE_RATE / 1000)
        self.window_min_samples = round(options.window_min_ms * SAMPLE_RATE / 1000)
        self.eos_id = int(config.get("eos_token_id", tokenizer.eos_id))
        self.sot_id = tokenizer.token_id("<|startoftranscript|>")
        self.no_timestamps_id = tokenizer.token_id("<|notimestamps|>")
        self.sot_prev_id = tokenizer.token_id("<|startofprev|>")
        try:  # English-only checkpoints name the token <|nocaptions|>
            self.no_speech_id = tokenizer.token_id("<|nospeech|>")
        except ModelLoadError:
            self.no_speech_id = tokenizer.token_id("<|nocaptions|>")
        self.language_ids = self._language_ids() if self.multilingual else {}
        self._check_task(options.language, options.task)
        self.language = options.language
        self.task = options.task
        self.ctc_head: CtcHead | None = None
        self.alignment_heads = alignment_heads(config, self.dims)
        self.tracing = True
        self._start_logits: tuple[weakref.ref[Encoded], torch.Tensor] | None = None  # (:meth:`_after_start_token`)
        self._alignment_by_layer: dict[int, list[int]] = {}
        for layer, head in self.alignment_heads:
            self._alignment_by_layer.setdefault(layer, []).append(head)
        self.frame_samples = 2 * HOP_LENGTH  # audio samples per encoder frame (20 ms)
        self.max_source_samples = self.dims.max_source_positions * self.frame_samples
        most_ms = self.max_source_samples * 1000 // SAMPLE_RATE
        if self.window_min_samples > self.max_source_samples:
            raise OptionError(f"the shortest audio window (--window-min-ms {options.window_min_ms:g}) is longer than "
                              f"the model's window: at most {most_ms} ms")
        if self.window_pad_samples > self.max_source_samples:
            raise OptionError(f"the silence appended to the audio window (--window-pad-ms {options.window_pad_ms:g}) "
                              f"is longer than the model's window: at most {most_ms} ms")
        self.max_length = self.dims.max_target_positions // 2
        self._suppress, self._begin_suppress = self._suppressed(config)

    def _suppressed(self, config: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """The tokens never decoded (every special and timestamp token but ``<|endoftext|>``, and the checkpoint's
        ``suppress_tokens``) and those not decoded first (``begin_suppress_tokens``)."""
        suppress = set(int(t) for t in config.get("suppress_tokens") or [])
        suppress.update(range(self.sot_id, self.vocab_size))  # all special and timestamp tokens
        suppress.discard(self.eos_id)
        begin = [int(t) for t in config.get("begin_suppress_tokens") or []]
        return (torch.tensor(sorted(suppress), dtype=torch.long, device=self.device),
                torch.tensor(begin, dtype=torch.long, device=self.device))

    def variant(self, language: str | None, task: str) -> WhisperModel:
        """The same model (weights, tokenizer, window, precision: shared, not copied) for another source
        ``language`` and ``task`` - what a server gives a stream that asks for them.

        Raises:
            OptionError: the checkpoint cannot do that task or does not know that language.
        """
        if task not in TASKS:
            raise OptionError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
        self._check_task(language, task)
        other = copy.copy(self)
        other.language, other.task = language, task
        other.options = dataclasses.replace(self.options, language=language, task=task)
        return other

    def _check_task(self, language: str | None, task: str) -> None:
        if not self.multilingual and (task != "transcribe" or language not in (None, "en")):
            raise OptionError(
                "this Whisper checkpoint is English-only: it can only transcribe English "
                "(for other languages or for translating into English use a multilingual checkpoint, e.g. "
                "--model whisper-base; for English into another language, a cascade: --to LANG)"
            )
        if language is not None and self.multilingual and language not in self.language_ids:
            raise OptionError(f"unknown language {language!r} for this Whisper checkpoint (a code such as de, fr, "
                              f"es; it knows {len(self.language_ids)}: {', '.join(sorted(self.language_ids))})")

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
        return self.language_prompt(enc, costs)[0]

    def language_prompt(self, enc: Encoded, costs: Costs) -> tuple[list[int], float | None]:
        """The decoder prompt for this encoding and the probability of the language detected in it (None: the
        language is set, or the checkpoint is English-only)."""
        if not self.multilingual:
            return [self.sot_id, self.no_timestamps_id], None
        language_id, probability = (self.language_ids[self.language], None) if self.language \
            else self.detect_language(enc, costs)
        task_id = self.tokenizer.token_id(f"<|{self.task}|>")
        return [self.sot_id, language_id, task_id, self.no_timestamps_id], probability

    def detect_language(self, enc: Encoded, costs: Costs) -> tuple[int, float]:
        """The most probable language token after ``<|startoftranscript|>`` and its probability among the language
        tokens (openai/whisper's ``detect_language``: one decoder pass)."""
        logits = self._after_start_token(enc, costs)
        ids = torch.tensor(list(self.language_ids.values()), device=self.device)
        probabilities = torch.softmax(logits[ids].float(), dim=-1)
        best = int(torch.argmax(probabilities))
        return int(ids[best]), float(probabilities[best])

    def no_speech_prob(self, enc: Encoded, costs: Costs) -> float:
        """P(``<|nospeech|>``) right after ``<|startoftranscript|>``: openai/whisper's ``no_speech_prob``, the
        model's own judgement that the window holds no speech (one one-token decoder pass)."""
        return self._no_speech(self._after_start_token(enc, costs))

    def no_speech_many(self, encs: Sequence[Encoded], costs: Sequence[Costs]) -> list[float]:
        """:meth:`no_speech_prob` of several streams' encodings in ONE decoder call."""
        passes = self.prefill_many([enc.extra for enc in encs], [[self.sot_id]] * len(encs), costs)
        return [self._no_speech(logits[-1]) for logits, _, _ in passes]

    def _no_speech(self, logits: torch.Tensor) -> float:
        """P(``<|nospeech|>``) from the (V,) raw logits after the start token."""
        return float(torch.softmax(logits.float(), dim=-1)[self.no_speech_id])

    def _after_start_token(self, enc: Encoded, costs: Costs) -> torch.Tensor:
        """(V,) raw logits of the token after ``<|startoftranscript|>`` (one one-token decoder pass; asked again
        for the same encoding - the no-speech judgement, then the language, of a decode - the pass is not made
        again: the last one's logits are kept with a weak reference to its encoding)."""
        last = self._start_logits
        if last is not None and last[0]() is enc:
            return last[1]
        logits, _, _ = self._forward(torch.tensor([[self.sot_id]], device=self.device), 0, None, enc.extra, costs)
        self._start_logits = (weakref.ref(enc), logits[0, -1])
        return logits[0, -1]

    # ----------------------------------------------------------------------------------- encoder
    def encode(self, audio: np.ndarray, costs: Costs, previous: Encoded | None = None,
               reencode_s: float | None = None) -> Encoded:
        """Encode mono 16 kHz float32 ``audio`` (the whole source read so far). With ``reencode_s`` (seconds) and
        ``previous`` (the stream's last encoding), only the recent audio is computed where it can be
        (:meth:`_encode_reusing`); the encoding then keeps what the next one reuses."""
        return self.encode_many([audio], [costs], [previous], [reencode_s])[0]

    def encode_many(self, audios: Sequence[np.ndarray], costs: Sequence[Costs],
                    previous: Sequence[Encoded | None] | None = None,
                    reencode_s: Sequence[float | None] | None = None) -> list[Encoded]:
        """:meth:`encode` of several streams' audio (``previous``, ``reencode_s``: each stream's, or None); the
        audios whose windows have the same number of frames (every one with the ``full`` window) go through ONE
        batched encoder call, counted on the first of their ``costs`` (each stream counts its own frames). Equal to
        separate calls up to float rounding. A stream with ``reencode_s`` is encoded alone."""
        n = len(audios)
        previous = list(previous) if previous is not None else [None] * n
        reencode_s = list(reencode_s) if reencode_s is not None else [None] * n
        if not len(costs) == len(previous) == len(reencode_s) == n:
            raise ValueError(f"encode_many needs one Costs (previous encoding, reencode_s) per audio, got {n} audios, "
                             f"{len(costs)} costs, {len(previous)} previous, {len(reencode_s)} reencode_s")
        out: list[Encoded | None] = [None] * n
        for i, seconds in enumerate(reencode_s):
            if seconds is not None:
                out[i] = self._encode_reusing(audios[i], costs[i], previous[i], round(seconds * SAMPLE_RATE))
        windows = [self.window_frames(int(audio.shape[0])) if out[i] is None else -1 for i, audio in enumerate(audios)]
        for n_frames in dict.fromkeys(w for w in windows if w >= 0):
            members = [i for i, w in enumerate(windows) if w == n_frames]
            with torch.inference_mode():
                mels = torch.stack([self._log_mel(audios[i], n_frames) for i in members])
                frames = self.net.model.encoder(mels.to(self.device))
                cross = self.net.model.decoder.cross_kv(frames)
            costs[members[0]].encoder_calls += 1
            for row, i in enumerate(members):
                costs[i].encoder_frames += n_frames
                own = [(k[row : row + 1], v[row : row + 1]) for k, v in cross]
                out[i] = self._encoded(frames[row : row + 1], int(audios[i].shape[0]), own)
        return [enc for enc in out if enc is not None]

    def _encode_reusing(self, audio: np.ndarray, costs: Costs, previous: Encoded | None, recent: int) -> Encoded:
        """:meth:`encode` that re-encodes only the ``recent`` samples (``reencode_s``) where it can.

        Where ``previous`` (the stream's last encoding) encoded a beginning of ``audio`` (the same samples: no trim,
        no new level), the positions of its audio older than ``recent`` samples before its end, and those of its
        trailing silence still silence now, keep their keys and values at every encoder layer, and their states,
        as ``previous`` holds them (:meth:`Encoder.forward_at`); only the rest, the recent and the new audio and the
        window's new silence, are computed, attending to them. While fewer than ``REUSE_MIN_FRAMES`` positions of
        audio would be kept (the stream's first seconds), every position of audio and those of the ``recent``
        seconds of silence after it are computed, and only the farther silence is kept. Elsewhere (a first
        encoding, a trimmed buffer) the whole window is encoded. The encoding keeps what the next one reuses
        (:attr:`Encoded.memory`); ``costs`` counts the frames computed.

        Why: the window is at least ``window_min_ms`` (10 s) long, so a stream's first encodings are mostly
        silence, and encoding it whole each time was most of their work; the silence nearest the audio is computed
        again while the audio is short because, kept as the first encoding (a fraction of a second of audio) left
        it, it changed more of the text (``bench/results/longform_phases_nearsil/``)."""
        n_frames = self.window_frames(int(audio.shape[0]))
        total = n_frames // 2
        last = previous.memory if previous is not None and isinstance(previous.memory, _EncoderMemory) else None
        at = None if last is None else self._reencoded(audio, total, last, recent)
        encoder, decoder = self.net.model.encoder, self.net.model.decoder
        with torch.inference_mode():
            mel = self._log_mel(audio, n_frames)[None].to(self.device)
            states, layers = encoder.forward_at(mel, at, None if last is None else last.layers)
            cross = decoder.cross_kv(states)
            if at is not None and last is not None:
                states = placed(last.frames, states, at, total, dim=1)
                cross = [(placed(k0, k, at, total), placed(v0, v, at, total))
                         for (k0, v0), (k, v) in zip(last.cross, cross, strict=True)]
        costs.encoder_calls += 1
        costs.encoder_frames += n_frames if at is None else 2 * int(at.numel())
        enc = self._encoded(states, int(audio.shape[0]), cross)
        return dataclasses.replace(enc, memory=_EncoderMemory(audio.copy(), states, layers, cross))

    def _reencoded(self, audio: np.ndarray, total: int, last: _EncoderMemory, recent: int) -> torch.Tensor | None:
        """The positions of a window of ``total`` over ``audio`` to compute after the encoding ``last``, the
        ``recent`` samples re-encoded (:meth:`_encode_reusing`); None: all of them."""
        before = last.audio.shape[0]
        if before > audio.shape[0] or last.frames.shape[1] > total or not np.array_equal(last.audio, audio[:before]):
            return None
        keep = (before - recent) // self.frame_samples
        reach = -(-int(audio.shape[0]) // self.frame_samples) + 2  # (+2: the mel's and convolutions' edge)
        if keep < REUSE_MIN_FRAMES:
            keep, reach = 0, reach + recent // self.frame_samples  # all the audio, and the silence near it
        reach = min(total, reach)
        positions = torch.cat([torch.arange(keep, reach), torch.arange(max(reach, last.frames.shape[1]), total)])
        return positions.to(self.device)

    def _log_mel(self, audio: np.ndarray, n_frames: int) -> torch.Tensor:
        """The (n_mels, ``n_frames``) log-mel of mono float32 ``audio`` (the encoder window's)."""
        return log_mel_spectrogram(torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32)),
                                   self.dims.num_mel_bins, n_frames)

    def window_frames(self, samples: int, window: str | None = None) -> int:
        """Mel frames of the encoder window (``window``: ``full`` or ``audio``; None: the model's) for ``samples``
        of audio."""
        window = window or self.window
        full = 2 * self.dims.max_source_positions
        # "audio": the frames of the audio read plus the padding (at least the shortest window), rounded up to
        # even (conv2 has stride 2)
        padded = max(samples + self.window_pad_samples, self.window_min_samples)
        return full if window == "full" else min(full, max(2, 2 * math.ceil(padded / HOP_LENGTH / 2)))

    def _encoded(self, frames: torch.Tensor, samples: int, cross: list[KV]) -> Encoded:
        if self.ctc_head is None:
            return Encoded(frames=frames, audio_samples=samples, extra=cross)
        ctc = self.ctc_head.log_probs(frames, samples)  # (T', V_ctc), the frames of the audio read
        return Encoded(frames=frames, audio_samples=samples, extra=cross, ctc_log_probs=ctc,
                       ctc_labels=self.ctc_head.vocabulary)

    # ----------------------------------------------------------------------------------- decoder
    def _forward(
        self, tokens: torch.Tensor, offset: int, cache: list[KV] | None, cross: list[KV], costs: Costs,
        alignment: list[torch.Tensor] | None = None, trace_from: int | None = None,
    ) -> tuple[torch.Tensor, list[KV], list[torch.Tensor] | None]:
        """One decoder pass: the last position's raw logits, the extended cache and, with ``trace_from``, the
        alignment heads' layers' cross-attention queries (per layer (B, H, L - trace_from, D/H)) of the positions
        from ``trace_from`` on."""
        queries: list[torch.Tensor] | None = [] if trace_from is not None else None
        tracked = alignment is not None or queries is not None
        heads = self._alignment_by_layer if tracked else None  # grouped once, in __init__
        with torch.inference_mode():
            logits, new_cache = self.net.model.decoder(tokens, offset, cache, cross, last_only=True,
                                                       alignment_heads=heads, alignment=alignment, queries=queries,
                                                       query_from=trace_from or 0)
        costs.decoder_calls += 1
        costs.decoder_positions += tokens.numel()
        return logits, new_cache, queries

    def alignment(self, state: WhisperState) -> torch.Tensor:
        """(B, T) cross-attention of the alignment heads from each hypothesis's last position (AlignAtt)."""
        if state.alignment is None:
            raise ValueError("this decoder state does not track the alignment: start(..., alignment=True)")
        return state.alignment

    def token_starts(self, enc: Encoded, prompt: Sequence[int], tokens: Sequence[int], costs: Costs) -> list[int]:
        """Where each of ``tokens`` starts in the audio, in encoder frames (20 ms), by DTW over the alignment
        heads' cross-attention (:mod:`simulst.models.timing`); one more entry: where the text ends (the
        ``<|endoftext|>`` position). One forced decoder pass over ``prompt + tokens + <|endoftext|>``."""
        full = torch.tensor([[*prompt, *tokens, self.eos_id]], dtype=torch.long, device=self.device)
        scores: list[torch.Tensor] = []
        with torch.inference_mode():
            self.net.model.decoder(full, 0, None, enc.extra, last_only=True,
                                   alignment_heads=self._alignment_by_layer, scores=scores)
        costs.decoder_calls += 1
        costs.decoder_positions += full.shape[1]
        # the positions that predict tokens[0], ..., tokens[-1] and <|endoftext|>, over the frames of the audio
        rows = torch.cat([s[0] for s in scores])[:, len(prompt) - 1 : len(prompt) + len(tokens)]
        return token_start_frames(rows[..., : self.audio_frames(enc)].cpu().numpy())

    def trace(self, state: WhisperState, row: int) -> Traced | None:
        """The recorded rows of hypothesis ``row`` of ``state`` (None: the state records none)."""
        return None if state.trace is None else Traced(state.trace, row)

    def traced_starts(self, enc: Encoded, traced: object, tokens: int) -> list[int] | None:
        """Where each of the first ``tokens`` tokens a search decoded after the prompt starts in the audio, in
        encoder frames, and (one more entry) where the text ends: :meth:`token_starts` computed on the queries the
        search recorded (``traced``, from :meth:`trace`), scored here against the encoding's keys for the alignment
        heads (no decoder pass). When the rows stop at the last token (it was decided but never read, so no row
        follows it) the list has no end entry; None when there are fewer rows, or none."""
        if not isinstance(traced, Traced) or tokens < 1:
            return None
        queries = traced.rows()
        if queries[0].shape[1] < tokens:
            return None
        frames = self.audio_frames(enc)
        layers = sorted(self._alignment_by_layer)
        with torch.inference_mode():
            scores = torch.cat([head_scores_of(q[:, : tokens + 1], enc.extra[layer][0][0, :, :frames],
                                               self._alignment_by_layer[layer])
                                for layer, q in zip(layers, queries, strict=True)])
        return token_start_frames(scores.cpu().numpy())

    def previous_text(self, tokens: Sequence[int], limit: int) -> list[int]:
        """Whisper's previous-text prompt: ``<|startofprev|>`` + the last ``limit`` of ``tokens`` (text already
        committed before the audio window), to go before the ``<|startoftranscript|>`` prompt."""
        kept = [t for t in tokens if t < self.eos_id][-limit:] if limit > 0 else []
        return [self.sot_prev_id, *kept] if kept else []

    def audio_frames(self, enc: Encoded) -> int:
        """Encoder frames that cover the audio read (20 ms each; the rest of the window is padding)."""
        return math.ceil(enc.audio_samples / (2 * HOP_LENGTH))

    def _log_probs(self, logits: torch.Tensor, first: bool) -> torch.Tensor:
        logits = logits.float().clone()
        logits[..., self._suppress] = -math.inf
        if first and self._begin_suppress.numel():
            logits[..., self._begin_suppress] = -math.inf
        return torch.log_softmax(logits, dim=-1)

    def start(
        self, enc: Encoded, prefix: Sequence[int], costs: Costs, prompt: Sequence[int] | None = None,
        alignment: bool = False,
    ) -> tuple[torch.Tensor, WhisperState]:
        """Force-decode prompt + ``prefix`` in one parallel pass; (V,) log-probs of the next token. With
        ``alignment`` the state (and every state stepped from it) tracks the alignment heads' cross-attention."""
        prompt = self.prompt(enc, costs) if prompt is None else prompt
        tokens = torch.tensor([[*prompt, *prefix]], dtype=torch.long, device=self.device)
        weights: list[torch.Tensor] | None = [] if alignment else None
        trace_from = len(prompt) - 1 if self.tracing and prompt else None
        logits, cache, queries = self._forward(tokens, 0, None, enc.extra, costs, weights, trace_from)
        trace = None if queries is None else RowTrace.first(queries)
        state = WhisperState(cache, enc.extra, tokens.shape[1], weights[0] if weights else None, trace)
        return self._log_probs(logits[0, -1], first=len(prefix) == 0), state

    def start_many(
        self, encs: Sequence[Encoded], prefixes: Sequence[Sequence[int]], costs: Sequence[Costs],
        prompts: Sequence[Sequence[int]],
    ) -> list[tuple[torch.Tensor, WhisperState]]:
        """:meth:`start` of several streams (each its own encoding, prompt and prefix; no alignment tracking) in
        ONE decoder call (:meth:`prefill_many`)."""
        return [(ahead.logp[0], ahead.state) for ahead in self.start_ahead_many(encs, prefixes, [()] * len(encs),
                                                                                costs, prompts)]

    def start_ahead(
        self, enc: Encoded, prefix: Sequence[int], draft: Sequence[int], costs: Costs, prompt: Sequence[int],
        judge: bool = False,
    ) -> Ahead:
        """Force-decode prompt + ``prefix`` + ``draft`` in one parallel pass: the (k + 1, V) next-token log-probs
        after the prefix and after each draft token, the state after the whole draft, and with ``judge`` P(no
        speech) at the prompt's start token (openai/whisper reads ``no_speech_prob`` there, in the pass that
        decodes). The draft costs no extra pass: a decoder pass streams the same weights for one position or
        thirty (:class:`~simulst.models.base.AheadDecoder`)."""
        return self.start_ahead_many([enc], [prefix], [draft], [costs], [prompt], [judge])[0]

    def start_ahead_many(
        self, encs: Sequence[Encoded], prefixes: Sequence[Sequence[int]], drafts: Sequence[Sequence[int]],
        costs: Sequence[Costs], prompts: Sequence[Sequence[int]], judges: Sequence[bool] | None = None,
    ) -> list[Ahead]:
        """:meth:`start_ahead` of several streams in ONE decoder call (:meth:`prefill_many`)."""
        judges = judges or [False] * len(encs)
        sequences, picks = [], []
        for prompt, prefix, draft, judge in zip(prompts, prefixes, drafts, judges, strict=True):
            sequence = [*prompt, *prefix, *draft]
            after_prefix = len(prompt) + len(prefix) - 1  # the position that predicts the token after the prefix
            start = [len(prompt) - 1 - list(reversed(prompt)).index(self.sot_id)] if judge else []
            sequences.append(sequence)
            picks.append([*start, *range(after_prefix, len(sequence))])
        trace_from = [len(prompt) - 1 for prompt in prompts] if self.tracing and all(prompts) else None
        passes = self.prefill_many([enc.extra for enc in encs], sequences, costs, picks, trace_from)
        out = []
        for (logits, cache, traced), enc, prefix, sequence, judge in zip(passes, encs, prefixes, sequences, judges,
                                                                         strict=True):
            no_speech = self._no_speech(logits[0]) if judge else None
            rows = logits[1:] if judge else logits
            logp = self._log_probs(rows, first=False)
            if not prefix:  # (the first output position suppresses more)
                logp[0] = self._log_probs(rows[0], first=True)
            trace = None if traced is None else RowTrace.first(traced)
            out.append(Ahead(logp, WhisperState(cache, enc.extra, len(sequence), trace=trace), no_speech))
        return out

    def rewind(self, state: WhisperState, n: int) -> WhisperState:
        """The state without its last ``n`` positions (a draft's rejected tokens)."""
        if n == 0:
            return state
        if not 0 < n < state.length or state.alignment is not None:
            raise ValueError(f"cannot rewind {n} of {state.length} positions of this state")
        keep = state.length - n
        trace = None if state.trace is None else state.trace.rewound(n)
        return WhisperState([(k[:, :, :keep], v[:, :, :keep]) for k, v in state.cache], state.cross, keep, trace=trace)

    def prefill_many(
        self, crosses: Sequence[list[KV]], sequences: Sequence[Sequence[int]], costs: Sequence[Costs],
        picks: Sequence[Sequence[int]] | None = None, trace_from: Sequence[int] | None = None,
    ) -> list[tuple[torch.Tensor, list[KV], list[torch.Tensor] | None]]:
        """Force-decode one token sequence per stream (over that stream's cross keys/values) in ONE decoder
        forward; per stream the raw (P, V) logits at its ``picks`` positions (default: after its last token,
        P = 1), its self-attention cache and, with ``trace_from`` (a position per stream), the alignment heads'
        layers' cross-attention queries (per layer (1, H, n, D/H)) of its positions from that one on (else None).

        The sequences are right-padded to the longest: under the causal mask a position never attends to the
        ones after it, so each stream's real positions compute what they compute alone; the cross keys/values
        are right-padded to the longest window under an additive -inf mask. The call counts once, on
        ``costs[0]``; each stream counts its own positions.
        """
        if not len(crosses) == len(sequences) == len(costs) or not sequences or not all(sequences):
            raise ValueError("prefill_many needs one cross, non-empty token sequence and Costs per stream")
        lengths = [len(sequence) for sequence in sequences]
        picks = picks or [[length - 1] for length in lengths]
        if len(picks) != len(sequences) or not all(picks) or any(
                not 0 <= p < length for row, length in zip(picks, lengths, strict=True) for p in row):
            raise ValueError("prefill_many needs, per stream, positions within its sequence to project")
        lmax, pmax = max(lengths), max(len(row) for row in picks)
        rows = [[*sequence, *[self.eos_id] * (lmax - len(sequence))] for sequence in sequences]
        tokens = torch.tensor(rows, dtype=torch.long, device=self.device)
        pick = torch.tensor([[*row, *[row[-1]] * (pmax - len(row))] for row in picks], dtype=torch.long,
                            device=self.device)
        stacked, mask = self._stack_cross(crosses)
        lowest = min(trace_from) if trace_from is not None else 0
        queries: list[torch.Tensor] | None = [] if trace_from is not None else None
        heads = self._alignment_by_layer if queries is not None else None
        with torch.inference_mode():
            logits, cache = self.net.model.decoder(tokens, 0, None, stacked, cross_mask=mask, pick=pick,
                                                   alignment_heads=heads, queries=queries, query_from=lowest)
        costs[0].decoder_calls += 1
        for stream_costs, length in zip(costs, lengths, strict=True):
            stream_costs.decoder_positions += length
        out: list[tuple[torch.Tensor, list[KV], list[torch.Tensor] | None]] = []
        for i, (length, row) in enumerate(zip(lengths, picks, strict=True)):
            traced = None
            if queries is not None and trace_from is not None:  # (S, H, lmax - lowest, D/H) per layer
                traced = [q[i : i + 1, :, trace_from[i] - lowest : length - lowest] for q in queries]
            out.append((logits[i, : len(row)], [(k[i : i + 1, :, :length], v[i : i + 1, :, :length])
                                                for k, v in cache], traced))
        return out

    def expand(self, state: WhisperState, batch: int) -> WhisperState:
        """``batch`` copies of a one-hypothesis state (views, no copy)."""
        cache = [(k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1)) for k, v in state.cache]
        alignment = None if state.alignment is None else state.alignment.expand(batch, -1)
        trace = None if state.trace is None else state.trace.reordered([0] * batch)
        return WhisperState(cache=cache, cross=state.cross, length=state.length, alignment=alignment, trace=trace)

    def step(self, state: WhisperState, tokens: torch.Tensor, costs: Costs) -> tuple[torch.Tensor, WhisperState]:
        """Append ``tokens`` (B,) to the B hypotheses; (B, V) log-probs of the next token."""
        tokens = tokens.to(self.device).view(-1, 1)
        weights: list[torch.Tensor] | None = None if state.alignment is None else []
        trace_from = None if state.trace is None else 0
        logits, cache, queries = self._forward(tokens, state.length, state.cache, state.cross, costs, weights,
                                               trace_from)
        trace = None if state.trace is None or queries is None else state.trace.extended(queries)
        new = WhisperState(cache, state.cross, state.length + 1, weights[0] if weights else None, trace)
        return self._log_probs(logits[:, -1], first=False), new

    def step_many(
        self, states: Sequence[WhisperState], tokens: Sequence[torch.Tensor], costs: Sequence[Costs],
        cross: CrossBatch | None = None,
    ) -> list[tuple[torch.Tensor, WhisperState]]:
        """:meth:`step` of several streams in ONE decoder forward call over all their hypotheses.

        Args:
            states: per stream, a decoder state of B_i hypotheses (lengths L_i and encoder windows T_i may differ).
            tokens: per stream, the (B_i,) tokens to append.
            costs: per stream, its counters: the batched call counts as one decoder call on ``costs[0]``, and
                each stream counts its own B_i decoder positions.
            cross: stacked cross-attention keys/values (:meth:`stack_cross`) of these streams' encodings (or of
                more: a stack of a superset serves any subset), which a caller that steps the same streams for
                many tokens keeps to save a copy per step (the model keeps nothing);
                None, or a stack of other encodings: stacked here.

        Returns:
            Per stream, what ``step(states[i], tokens[i], costs[i])`` returns: (B_i, V) log-probs of the next
            token (same logit filters) and the stream's new state (unpadded, length L_i + 1).

        The N = sum B_i rows share one forward: self-attention caches left-padded to max L (the new token's key
        lands in the same last column for every row), cross-attention keys/values right-padded to max T and
        kept once per stream (each stream's one-token queries are regrouped to attend them together), additive
        -inf masks on the padding, and row positions L_i. One stream takes the plain :meth:`step` path.
        """
        if len(states) <= 1 and len(states) == len(tokens) == len(costs):
            return [self.step(states[0], tokens[0], costs[0])] if states else []
        rows = _stepped_rows(states, tokens, costs)  # B_i, checked
        lengths = [state.length for state in states]
        lmax = max(lengths)
        ids = torch.cat([t.to(self.device).view(-1) for t in tokens]).view(-1, 1)
        row_lengths = [length for length, b in zip(lengths, rows, strict=True) for _ in range(b)]
        positions = torch.tensor(row_lengths, dtype=torch.long, device=self.device)
        starts = [sum(rows[:s]) for s in range(len(rows))]  # first row of each stream
        slots = cross.slots(states) if cross is not None else None
        if cross is None or slots is None:
            cross, slots = self.stack_cross(states), list(range(len(states)))
        groups = self._query_groups(len(cross.sources), slots, starts, rows)
        queries: list[torch.Tensor] | None = [] if any(state.trace is not None for state in states) else None
        heads = self._alignment_by_layer if queries is not None else None
        with torch.inference_mode():
            cache, self_mask = self._left_padded(states, rows, positions)
            logits, new_cache = self.net.model.decoder(ids, positions, cache, cross.stacked, last_only=True,
                                                       self_mask=self_mask, cross_mask=cross.mask,
                                                       cross_groups=groups, alignment_heads=heads, queries=queries)
        costs[0].decoder_calls += 1
        for stream_costs, b in zip(costs, rows, strict=True):
            stream_costs.decoder_positions += b
        logp = self._log_probs(logits[:, -1], first=False)
        results = []
        for state, start, b in zip(states, starts, rows, strict=True):
            first = lmax - state.length  # the stream's first valid column
            own = [(k[start : start + b, :, first:], v[start : start + b, :, first:]) for k, v in new_cache]
            trace = None
            if state.trace is not None and queries is not None:  # (sum B_i, H, 1, D/H) per layer
                trace = state.trace.extended([q[start : start + b] for q in queries])
            results.append((logp[start : start + b], WhisperState(own, state.cross, state.length + 1, trace=trace)))
        return results

    def _query_groups(self, sources: int, slots: Sequence[int], starts: Sequence[int], rows: Sequence[int]) -> Groups:
        """Which query rows attend which stacked encoding: the query grid has one row of ``max B_i`` cells per
        stacked encoding (``slots``: the stream's); a stacked stream not stepping now fills its row with copies of
        query 0 (computed, never read)."""
        width = max(rows)
        cells_of = [[0] * width for _ in range(sources)]
        for slot, start, b in zip(slots, starts, rows, strict=True):
            cells_of[slot] = [start + min(j, b - 1) for j in range(width)]
        grid = torch.tensor(cells_of, dtype=torch.long, device=self.device)
        cells = [slot * width + j for slot, b in zip(slots, rows, strict=True) for j in range(b)]
        return Groups(grid=grid, rows=torch.tensor(cells, dtype=torch.long, device=self.device))

    def _left_padded(self, states: Sequence[WhisperState], rows: Sequence[int],
                     positions: torch.Tensor) -> tuple[list[KV], torch.Tensor | None]:
        """The streams' self-attention caches stacked, (sum B_i, H, max L, D/H) left-padded with zeros, and the
        additive (N, 1, 1, max L + 1) mask of the padding (None: all L equal); the new token's column is always
        kept."""
        lengths = [state.length for state in states]
        lmax = max(lengths)
        cache = [(_pad_left([k for k, _ in layer], lengths, rows, lmax),
                  _pad_left([v for _, v in layer], lengths, rows, lmax))
                 for layer in zip(*(state.cache for state in states), strict=True)]
        self_mask = None
        if min(lengths) < lmax:  # -inf on each row's left padding
            columns = torch.arange(lmax + 1, device=self.device)
            pad = (lmax - positions).view(-1, 1, 1, 1)
            self_mask = torch.zeros(sum(rows), 1, 1, lmax + 1, dtype=cache[0][0].dtype, device=self.device)
            self_mask.masked_fill_(columns < pad, -math.inf)
        return cache, self_mask

    def stack_cross(self, states: Sequence[WhisperState]) -> CrossBatch:
        """The streams' cross keys/values per layer, (S, H, max T, D/H) right-padded with zeros, with the
        additive (S, 1, 1, max T) mask of the padding (None: equal T), for :meth:`step_many`."""
        sources = tuple(state.cross for state in states)
        stacked, mask = self._stack_cross(sources)
        return CrossBatch(sources, stacked, mask)

    def _stack_cross(self, sources: Sequence[list[KV]]) -> tuple[list[KV], torch.Tensor | None]:
        frames = [cross[0][0].shape[2] for cross in sources]
        tmax = max(frames)
        stacked: list[KV] = []
        with torch.inference_mode():
            for layer in zip(*sources, strict=True):
                k0 = layer[0][0]
                k = k0.new_zeros(len(sources), k0.shape[1], tmax, k0.shape[3])
                v = torch.zeros_like(k)
                for s, (ks, vs) in enumerate(layer):
                    k[s, :, : ks.shape[2]] = ks[0]
                    v[s, :, : vs.shape[2]] = vs[0]
                stacked.append((k, v))
            mask = None
            if min(frames) < tmax:
                valid = torch.tensor(frames, device=self.device).view(-1, 1, 1, 1)
                mask = torch.zeros(len(sources), 1, 1, tmax, dtype=stacked[0][0].dtype, device=self.device)
                mask.masked_fill_(torch.arange(tmax, device=self.device) >= valid, -math.inf)
        return stacked, mask

    def select(self, state: WhisperState, indices: torch.Tensor) -> WhisperState:
        """Keep hypotheses ``indices`` (B',) of the state, in that order."""
        indices = indices.to(self.device)
        batch = state.cache[0][0].shape[0]
        if batch == 1:
            return self.expand(state, int(indices.numel()))
        cache = [(k.index_select(0, indices), v.index_select(0, indices)) for k, v in state.cache]
        alignment = None if state.alignment is None else state.alignment.index_select(0, indices)
        trace = None if state.trace is None else state.trace.reordered(indices.tolist())
        return WhisperState(cache=cache, cross=state.cross, length=state.length, alignment=alignment, trace=trace)


def _prepared(net: WhisperNet, screen_vocabulary: bool, device: torch.device, precision: str,
              encoder_precision: str) -> WhisperNet:
    """The network as the options run it (``auto`` precisions resolved): the decoder's linear layers in bfloat16
    (in float32 on the CPU: as :class:`~simulst.models.whisper_net.StepLinear`, for the steps of a few beams) or
    its weights in int8, and (fp32 or bf16 on the CPU, with ``screen_vocabulary``) the screened vocabulary
    projection; the encoder's linear layers in int8 or bfloat16; on the device, in eval mode."""
    if precision == "bf16":
        net.decoder_bf16()
    elif precision == "fp32" and device.type == "cpu":
        net.decoder_steps_fp32()
    if precision == "int8":
        net.quantize_int8()
    elif screen_vocabulary and device.type == "cpu" and net.model.decoder.screen is None:
        net.screen_vocabulary()  # the exact top tokens at a fifth of the projection's cost
    if encoder_precision == "int8":
        net.quantize_encoder_int8()
    elif encoder_precision == "bf16":
        net.encoder_bf16()
    return net.to(device).eval()


def alignment_heads(config: dict[str, Any], dims: WhisperDims) -> list[tuple[int, int]]:
    """The (decoder layer, head) pairs whose cross-attention follows the word timing: the checkpoint's
    ``alignment_heads`` (generation_config.json of a Hugging Face checkpoint, config.json of a CTranslate2 one), or
    openai/whisper's fallback for a checkpoint without them: every head of the upper half of the decoder layers.

    Raises:
        ModelLoadError: the listed heads are not (layer, head) pairs of this model.
    """
    layers, heads = dims.decoder_layers, dims.decoder_attention_heads
    listed = config.get("alignment_heads")
    if not listed:  # (none listed, or an empty list)
        return [(layer, head) for layer in range(layers // 2, layers) for head in range(heads)]
    try:
        pairs = [(int(layer), int(head)) for layer, head in listed]
    except (TypeError, ValueError) as err:
        raise ModelLoadError(f"alignment_heads must be a list of [layer, head] pairs, got {listed!r}") from err
    for layer, head in pairs:
        if not (0 <= layer < layers and 0 <= head < heads):
            raise ModelLoadError(f"alignment head ({layer}, {head}) is outside the decoder's {layers} x {heads} heads")
    return pairs


def _stepped_rows(states: Sequence[WhisperState], tokens: Sequence[torch.Tensor], costs: Sequence[Costs]) -> list[int]:
    """B_i, the hypotheses each stream steps (checked against its state) for :meth:`WhisperModel.step_many`."""
    if not len(states) == len(tokens) == len(costs):
        raise ValueError(f"step_many needs one state, token tensor and Costs per stream, got "
                         f"{len(states)}, {len(tokens)} and {len(costs)}")
    rows = [int(t.numel()) for t in tokens]
    for i, (state, b) in enumerate(zip(states, rows, strict=True)):
        if state.cache[0][0].shape[0] != b:
            raise ValueError(f"stream {i}: {b} tokens for a state of {state.cache[0][0].shape[0]} hypotheses")
    return rows


def _pad_left(parts: Sequence[torch.Tensor], lengths: Sequence[int], rows: Sequence[int], lmax: int) -> torch.Tensor:
    """Stack per-stream cache tensors (B_i, H, L_i, D/H) into (sum B_i, H, lmax, D/H), zeros on the left."""
    first = parts[0]
    out = first.new_zeros(sum(rows), first.shape[1], lmax, first.shape[3])
    start = 0
    for part, length, b in zip(parts, lengths, rows, strict=True):
        out[start : start + b, :, lmax - length :] = part
        start += b
    return out


# Whisper's language codes in vocabulary order (openai/whisper tokenizer.LANGUAGES).
_WHISPER_LANGUAGES = (
    "en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no th ur hr bg lt la mi "
    "ml cy sk te fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw gl mr pa si km sn yo so af oc ka be tg sd "
    "gu am yi lo uz fo ht ps tk nn mt sa lb my bo tl mg as tt haw ln ha ba jw su yue"
).split()
