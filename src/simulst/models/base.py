"""The model-adapter interface every searcher and policy works against.

An adapter is *stateless* with respect to streams: everything that changes while decoding lives in the
objects it returns (:class:`Encoded`, decoder states), so one loaded model serves many streams.

Decoding protocol (one chunk)::

    enc = model.encode(audio)                          # full-context: the whole audio read so far
    prompt = model.prompt(enc, costs)                  # pinned per stream (language detection)
    logp, state = model.start(enc, committed, costs, prompt)  # ONE parallel pass over prompt + forced prefix
    # logp: (V,) log-probabilities of the token after the forced prefix
    state = model.expand(state, beam)                  # share the prefix KV cache across beams (no copy)
    logp, state = model.step(state, tokens, costs)     # one batched step: tokens (B,) -> logp (B, V)
    state = model.select(state, beam_indices)          # reorder/prune beams after a beam-search step
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from simulst.types import Costs

if TYPE_CHECKING:  # (torch for the annotations only: importing the interface does not load it)
    import torch


class CtcLabels(Protocol):
    """What the columns of :attr:`Encoded.ctc_log_probs` mean (the CTC head's label set)."""

    @property
    def blank(self) -> int:
        """Id of the CTC blank."""
        ...

    @property
    def token_level(self) -> bool:
        """True when the labels are the decoder's own token ids (joint scoring and a per-token CTC policy
        apply); False for another vocabulary (e.g. characters: the CTC policy runs word by word)."""
        ...

    def encode(self, text: str) -> list[int]:
        """CTC label ids of a text."""
        ...


@dataclass(frozen=True)
class Encoded:
    """Encoder output for the audio read so far.

    Attributes:
        frames: (1, T, D) encoder states.
        audio_samples: number of source samples that were encoded.
        ctc_log_probs: optional (T', V_ctc) CTC log-posteriors of a CTC head on this encoding.
        extra: adapter-specific data (e.g. precomputed cross-attention keys/values).
        ctc_labels: the label set of ``ctc_log_probs`` (set together with it).
        memory: adapter-specific data the stream's next encoding may reuse (:meth:`SpeechModel.encode`'s
            ``previous``; None: nothing).
    """

    frames: torch.Tensor
    audio_samples: int
    ctc_log_probs: torch.Tensor | None = None
    extra: Any = None
    ctc_labels: CtcLabels | None = None
    memory: Any = field(default=None, repr=False, compare=False)


class Tokenizer(Protocol):
    """What the pipeline needs from a tokenizer."""

    eos_id: int

    def decode(self, tokens: Sequence[int]) -> str:
        """Text of a token sequence (special tokens dropped)."""
        ...

    def encode(self, text: str) -> list[int]:
        """Token ids of a text (no special tokens)."""
        ...

    def starts_word(self, token: int) -> bool:
        """True when the token begins a new word (its text starts with whitespace) or is ``<eos>``."""
        ...

    def is_punctuation(self, token: int) -> bool:
        """True when the token's text is punctuation only (it completes the word before it)."""
        ...


@runtime_checkable
class DecoderModel(Protocol):
    """An autoregressive decoder conditioned on an encoding (speech or text)."""

    eos_id: int
    vocab_size: int
    max_length: int  # the most output tokens (after the prompt) the decoder accepts

    @property
    def tokenizer(self) -> Tokenizer:
        """The output vocabulary's tokenizer."""
        ...

    def prompt(self, enc: Encoded, costs: Costs) -> Sequence[int]:
        """The decoder prompt for this encoding (e.g. Whisper's start, language and task tokens; detecting the
        language costs one decoder pass). A stream pins it (:class:`~simulst.streaming.prompt.PromptBuilder`)."""
        ...

    def start(
        self, enc: Encoded, prefix: Sequence[int], costs: Costs, prompt: Sequence[int] | None = None
    ) -> tuple[torch.Tensor, Any]:
        """Force-decode prompt + ``prefix`` in one parallel pass (``prompt`` None: :meth:`prompt` of ``enc``).

        Returns the (V,) log-probabilities (after logit filters) of the next token and a decoder state for
        a batch of one hypothesis.
        """
        ...

    def expand(self, state: Any, batch: int) -> Any:
        """A state for ``batch`` copies of a batch-of-one state (shares memory where possible)."""
        ...

    def step(self, state: Any, tokens: torch.Tensor, costs: Costs) -> tuple[torch.Tensor, Any]:
        """Append ``tokens`` (B,) to the B hypotheses of ``state``; returns (B, V) log-probs and the new state."""
        ...

    def select(self, state: Any, indices: torch.Tensor) -> Any:
        """Keep (and reorder) the hypotheses ``indices`` (B',) of a state."""
        ...


@runtime_checkable
class AlignedDecoder(DecoderModel, Protocol):
    """A decoder that reports where it attends: the cross-attention of its alignment heads (AlignAtt)."""

    def start(
        self, enc: Encoded, prefix: Sequence[int], costs: Costs, prompt: Sequence[int] | None = None,
        alignment: bool = False,
    ) -> tuple[torch.Tensor, Any]:
        """As :meth:`DecoderModel.start`; with ``alignment`` the states track :meth:`alignment`."""
        ...

    def alignment(self, state: Any) -> torch.Tensor:
        """(B, T) summed cross-attention of the alignment heads from each hypothesis's last position."""
        ...

    def audio_frames(self, enc: Encoded) -> int:
        """Encoder frames that cover the audio read (the rest of the window is padding)."""
        ...


@dataclass(frozen=True)
class Ahead:
    """One forced pass over prompt + prefix + a draft of what follows (:meth:`AheadDecoder.start_ahead`).

    Attributes:
        logp: (k + 1, V) log-probabilities (after logit filters) of the token after the prefix, after the prefix and
            the draft's first token, ..., after the whole draft of k tokens.
        state: the decoder state (a batch of one) after prompt + prefix + draft.
        no_speech: P(no speech) read at the start token of the prompt (None: not asked for).
    """

    logp: torch.Tensor
    state: Any
    no_speech: float | None = None


@runtime_checkable
class AheadDecoder(DecoderModel, Protocol):
    """A decoder whose forced pass also scores a draft of the continuation and can judge the speech, so a chunk's
    greedy search checks the previous chunk's hypothesis in the pass it makes anyway (speculative decoding with
    the previous hypothesis as the draft: Leviathan et al., ICML 2023, with a free draft) and needs no separate
    no-speech pass."""

    def start_ahead(
        self, enc: Encoded, prefix: Sequence[int], draft: Sequence[int], costs: Costs, prompt: Sequence[int],
        judge: bool = False,
    ) -> Ahead:
        """Force-decode prompt + ``prefix`` + ``draft`` in one parallel pass; with ``judge`` also read
        P(no speech) at the prompt's start token."""
        ...

    def rewind(self, state: Any, n: int) -> Any:
        """The state without its last ``n`` positions."""
        ...


@runtime_checkable
class TokenTimer(Protocol):
    """A decoder that tells where in the audio each token of a hypothesis was read (long-form trimming)."""

    frame_samples: int  # audio samples per encoder frame

    def token_starts(self, enc: Encoded, prompt: Sequence[int], tokens: Sequence[int], costs: Costs) -> list[int]:
        """Start frame of each of ``tokens`` in the encoded audio, then the frame where the text ends."""
        ...


@runtime_checkable
class TracingDecoder(Protocol):
    """A decoder whose states record where each hypothesis attended (its alignment heads' cross-attention rows),
    so that a decoded hypothesis is timed without another decoder pass (spoken times of the emissions, long-form
    trimming)."""

    def trace(self, state: Any, row: int) -> object | None:
        """The record of hypothesis ``row`` of a decoder ``state`` (None: the state records none); a search hands
        it on as :attr:`~simulst.types.Hypothesis.alignment`."""
        ...

    def traced_starts(self, enc: Encoded, traced: object, tokens: int) -> list[int] | None:
        """Start frame of each of the first ``tokens`` tokens decoded after the prompt and, when the record reaches
        past them, one more entry: where the text ends (:meth:`TokenTimer.token_starts` on the record); None when
        the record does not cover the ``tokens``."""
        ...


@runtime_checkable
class PreviousTextPrompter(Protocol):
    """A decoder that can be conditioned on text committed before its audio window (Whisper's prompt)."""

    def previous_text(self, tokens: Sequence[int], limit: int) -> list[int]:
        """Prompt tokens carrying the last ``limit`` of ``tokens``, to go before the decoder prompt."""
        ...


@runtime_checkable
class LanguageDetector(Protocol):
    """A decoder whose prompt may name the source language (Whisper's), detected from the audio where not set."""

    def language_prompt(self, enc: Encoded, costs: Costs) -> tuple[list[int], float | None]:
        """The decoder prompt for this encoding and the probability of the language it names: of the language
        detected in ``enc`` (one decoder pass), or None where nothing was detected (the language is set)."""
        ...


@runtime_checkable
class SpeechJudge(Protocol):
    """A speech model that says how likely its window holds no speech (Whisper's ``no_speech_prob``)."""

    def no_speech_prob(self, enc: Encoded, costs: Costs) -> float:
        """P(no speech) of the encoding (its decoder passes counted in ``costs``)."""
        ...


@runtime_checkable
class TaskedModel(Protocol):
    """A model that says what its decoder writes: ``transcribe`` (the source language) or ``translate`` (Whisper's
    task token)."""

    task: str


@runtime_checkable
class SpeechModel(DecoderModel, Protocol):
    """A speech-to-text model: an encoder over audio plus a :class:`DecoderModel`."""

    sample_rate: int
    max_source_samples: int  # longest source the encoder accepts

    def encode(self, audio: np.ndarray, costs: Costs, previous: Encoded | None = None,
               reencode_s: float | None = None) -> Encoded:
        """Encode mono float32 audio at ``sample_rate`` (the whole source read so far). ``previous``: the stream's
        last encoding; ``reencode_s``: compute only that many seconds of recent audio where ``previous`` allows,
        reusing the rest of it (its ``memory``; :attr:`~simulst.config.StreamOptions.reencode_s`; a model that
        cannot ignores both)."""
        ...
