"""Scripted toy models for hand-worked tests of searches, policies and the session.

``ScriptedDecoder`` returns next-token distributions from a table keyed by the tokens decoded so far (after
the prompt), so every search result can be worked out by hand. ``ToySpeechModel`` knows a fixed sentence and
"hears" one more word of it every ``ms_per_word`` of audio: before it has heard a word, it continues with a
wrong guess ("uh") and then ``<eos>`` - a model that hallucinates at chunk ends, as real ones do.
``ScriptedMT`` translates that sentence's prefixes by table lookup, and ``make_checkpoint`` writes a tiny random
Whisper for tests that need the real adapter without the real weights. ``push_in_pieces`` streams one audio,
``stream_in_rounds`` many at once through a runner (any model; ``decode_in_rounds``: their texts).
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simulst.config import StreamOptions
from simulst.models.base import DecoderModel, Encoded, SpeechModel
from simulst.models.whisper import MULTILINGUAL_VOCAB as MULTILINGUAL_VOCAB  # (re-exported for the tests)
from simulst.mt.apertium import WordTokenizer, align_prefix
from simulst.mt.backend import MTBackend, MTRequest
from simulst.policies import Policy, PolicyContext, PolicyState
from simulst.search import Query, Searcher, SearchState
from simulst.streaming.engine import SpeechEngine, Stream
from simulst.streaming.session import Session
from simulst.types import Costs, Emission, Hypothesis
from tests.shared_assets import WHISPER_TINY_EN

EOS = 0


class ToyTokenizer:
    """Vocabulary: 0 = <eos>; tokens are strings; a leading space starts a word."""

    eos_id = EOS

    def __init__(self, pieces: Sequence[str]) -> None:
        self.pieces = list(pieces)

    def decode(self, tokens: Sequence[int]) -> str:
        return "".join(self.pieces[t] for t in tokens if t != EOS)

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError("toy tokenizer cannot encode")

    def starts_word(self, token: int) -> bool:
        return token == EOS or self.pieces[token].startswith(" ")

    def is_punctuation(self, token: int) -> bool:
        piece = self.pieces[token]
        return bool(piece) and all(ch in ".,!?;:" for ch in piece)


@dataclass(frozen=True)
class ToyState:
    rows: tuple[tuple[int, ...], ...]  # the tokens of each hypothesis in the batch
    audio_samples: int


class ScriptedDecoder:
    """A decoder whose distribution is ``table(tokens, audio_samples) -> {token: prob}`` (rest gets ~0).

    Counts decoder calls exactly as a real adapter: ``start`` is one call, each ``step`` one call.
    """

    def __init__(
        self,
        pieces: Sequence[str],
        table: Callable[[tuple[int, ...], int], Mapping[int, float]],
        max_length: int = 50,
    ) -> None:
        self.tokenizer = ToyTokenizer(pieces)
        self.eos_id = EOS
        self.vocab_size = len(pieces)
        self.max_length = max_length
        self.table = table
        self.calls: list[tuple[tuple[int, ...], ...]] = []

    def _log_probs(self, tokens: tuple[int, ...], audio_samples: int) -> torch.Tensor:
        probs = torch.full((self.vocab_size,), 1e-12, dtype=torch.float64)
        for token, p in self.table(tokens, audio_samples).items():
            probs[token] = p
        return torch.log(probs / probs.sum())

    def prompt(self, enc: Encoded, costs: Costs) -> tuple[int, ...]:
        return ()

    def start(self, enc: Encoded, prefix: Sequence[int], costs: Costs,
              prompt: Sequence[int] | None = None) -> tuple[torch.Tensor, ToyState]:
        costs.decoder_calls += 1
        costs.decoder_positions += len(prefix) + 1
        rows = (tuple(prefix),)
        self.calls.append(rows)
        return self._log_probs(rows[0], enc.audio_samples), ToyState(rows, enc.audio_samples)

    def expand(self, state: ToyState, batch: int) -> ToyState:
        return ToyState(state.rows * batch, state.audio_samples)

    def step(self, state: ToyState, tokens: torch.Tensor, costs: Costs) -> tuple[torch.Tensor, ToyState]:
        costs.decoder_calls += 1
        costs.decoder_positions += len(state.rows)
        rows = tuple((*row, int(t)) for row, t in zip(state.rows, tokens.tolist(), strict=True))
        self.calls.append(rows)
        return torch.stack([self._log_probs(r, state.audio_samples) for r in rows]), ToyState(rows, state.audio_samples)

    def select(self, state: ToyState, indices: torch.Tensor) -> ToyState:
        return ToyState(tuple(state.rows[i] for i in indices.tolist()), state.audio_samples)


class ToySpeechModel(ScriptedDecoder):
    """Hears word i of ``sentence`` once (i + 1) * ms_per_word of audio is read; guesses "uh" past that."""

    sample_rate = 1000  # one sample per millisecond keeps the arithmetic readable
    max_source_samples = 60_000

    def __init__(self, sentence: str = "the cat sat on the mat", ms_per_word: int = 700, guess_p: float = 0.6) -> None:
        words = [" " + w for w in sentence.split()]
        pieces = ["<eos>", " uh", *dict.fromkeys(words)]
        self.target = [pieces.index(w) for w in words]
        self.ms_per_word = ms_per_word
        self.guess_p = guess_p
        super().__init__(pieces, self._next, max_length=40)
        self.encodes: list[int] = []

    def _next(self, tokens: tuple[int, ...], audio_samples: int) -> dict[int, float]:
        heard = min(len(self.target), audio_samples // self.ms_per_word)
        i = len(tokens)
        if list(tokens) == self.target[:i]:
            if i < heard:
                return {self.target[i]: 0.9, 1: 0.05, EOS: 0.05}
            if i < len(self.target):
                return {1: self.guess_p, EOS: 1.0 - self.guess_p}  # a guess at the next, unheard word
        return {EOS: 0.9, 1: 0.1}

    def encode(self, audio: np.ndarray, costs: Costs, previous: Encoded | None = None,
               reencode_s: float | None = None) -> Encoded:
        costs.encoder_calls += 1
        costs.encoder_frames += audio.shape[0]
        self.encodes.append(int(audio.shape[0]))
        return Encoded(frames=torch.zeros(1, max(1, math.ceil(audio.shape[0] / 20)), 1), audio_samples=audio.shape[0])


class UnsureToy(ToySpeechModel):
    """Before it hears anything it babbles " uh" at p .2 (every other token .16): log-prob -1.6 a token."""

    babble_p, other_p = 0.2, 0.16

    def _next(self, tokens: tuple[int, ...], audio_samples: int) -> dict[int, float]:
        if audio_samples < self.ms_per_word and set(tokens) <= {1}:
            return {1: self.babble_p, **{t: self.other_p for t in (0, 2, 3, 4, 5)}}
        return super()._next(tokens, audio_samples)


def tone(ms: int, rate: int = 1000) -> np.ndarray:
    """Non-silent toy audio of ``ms`` milliseconds."""
    return (0.1 * np.sin(np.arange(ms * rate // 1000) / 3.0)).astype(np.float32)


def push_in_pieces(stream: Stream, audio: np.ndarray, piece: int) -> list[Emission]:
    """Push ``audio`` into ``stream`` ``piece`` samples at a time, then finish it: every emission, in order."""
    out: list[Emission] = []
    for pos in range(0, audio.shape[0], piece):
        out += stream.push(audio[pos : pos + piece])
    return out + stream.finish()


def stream_in_rounds(runner: Any, model: SpeechModel, audios: Sequence[np.ndarray],
                     options: Sequence[StreamOptions]) -> list[Session]:
    """Stream every audio chunk by chunk through ``runner`` (a :class:`~simulst.streaming.batching.Runner`), a
    session each; each round pushes one chunk of every stream still going, then all finish: the finished
    sessions. A job's error fails the test."""
    sessions = [Session(runner.view(model), opts) for opts in options]
    step = sessions[0].chunk_samples
    for pos in range(0, max(len(a) for a in audios), step):
        jobs: list[Callable[[], Any]] = [partial(s.push, a[pos : pos + step])
                                         for s, a in zip(sessions, audios, strict=True) if pos < len(a)]
        for result in runner.run(jobs):
            assert not isinstance(result, Exception), result
    for result in runner.run([s.finish for s in sessions]):
        assert not isinstance(result, Exception), result
    return sessions


def decode_in_rounds(runner: Any, model: SpeechModel, audios: Sequence[np.ndarray],
                     options: Sequence[StreamOptions]) -> list[str]:
    """:func:`stream_in_rounds`' texts."""
    return [s.text for s in stream_in_rounds(runner, model, audios, options)]


class StreamSearch:
    """A searcher together with one stream's :class:`SearchState`: ``search(model, enc, prefix, max_new, costs,
    final)`` as a stream calls it, chunk after chunk; ``kept`` / ``seen`` / ``beams`` read the stream's state."""

    def __init__(self, searcher: Searcher) -> None:
        self.searcher = searcher
        self.state = SearchState()

    def search(self, model: DecoderModel, enc: Encoded, prefix: Sequence[int], max_new_tokens: int, costs: Costs,
               final: bool = False) -> list[Hypothesis]:
        return self.searcher.search(model, Query(enc, tuple(prefix), max_new_tokens, final), self.state, costs)

    @property
    def kept(self) -> tuple[int, ...]:
        return self.state.kept

    @kept.setter
    def kept(self, value: tuple[int, ...]) -> None:
        self.state.kept = value

    @property
    def seen(self) -> set[tuple[int, ...]]:
        return self.state.seen

    @property
    def beams(self) -> list[tuple[int, ...]]:
        return self.state.beams


def stream_search(searcher: Searcher) -> StreamSearch:
    """``searcher`` with a fresh stream state."""
    return StreamSearch(searcher)


def toy_engine() -> SpeechEngine:
    """An engine over a fresh :class:`ToySpeechModel` (picklable factory for parallel sweeps)."""
    return SpeechEngine(ToySpeechModel())


class StreamPolicy:
    """A policy together with one stream's :class:`PolicyState`: ``stable_prefix(hyps)`` chunk after chunk."""

    def __init__(self, policy: Policy, tokenizer: ToyTokenizer | None = None, source_words: int = 0) -> None:
        self.policy = policy
        self.state = PolicyState()
        self.context = PolicyContext(tokenizer or ToyTokenizer(["<eos>"]), source_words)

    def stable_prefix(self, hyps: Sequence[Hypothesis]) -> tuple[int, ...]:
        return self.policy.stable_prefix(hyps, self.state, self.context)


def stream_policy(policy: Policy) -> StreamPolicy:
    """``policy`` with a fresh stream state."""
    return StreamPolicy(policy)


# A "translation" table by source prefix: what the scripted MT outputs for the source read so far. It revises
# its translation of the last source word ("gato" -> "gata" once it hears "sat") - as MT of prefixes does.
MT_SCRIPT = {
    "the": "el",
    "the cat": "el gato",
    "the cat sat": "la gata se sentó",
    "the cat sat on": "la gata se sentó en",
    "the cat sat on the": "la gata se sentó en la",
    "the cat sat on the mat": "la gata se sentó en la estera .",
}


class ScriptedMT(MTBackend):
    """Black-box MT by table lookup (unknown sources: uppercased words), aligned like Apertium."""

    name = "scripted"

    def __init__(self, table: dict[str, str] | None = None) -> None:
        self.table = MT_SCRIPT if table is None else table
        self._tokenizer = WordTokenizer()
        self.calls: list[tuple[str, tuple[int, ...], bool]] = []

    @property
    def tokenizer(self) -> WordTokenizer:
        return self._tokenizer

    def translate(
        self, request: MTRequest, costs: Costs
    ) -> list[Hypothesis]:
        source, prefix = request.source, request.prefix
        self.calls.append((source, tuple(prefix), request.final))
        words = self.table.get(source, source.upper()).split()
        committed = [self._tokenizer.word(t) for t in prefix]
        cut = align_prefix(committed, words)
        return [Hypothesis((*prefix, *(self._tokenizer.id(w) for w in words[cut:])), 0.0, True)]


# Whisper's vocabulary sizes: the English-only *.en models (tiny.en) have 51864 tokens, the multilingual ones one
# more; the adapter reads a vocabulary of MULTILINGUAL_VOCAB or more as multilingual (simulst.models.whisper).
ENGLISH_VOCAB = 51864


def make_checkpoint(directory: Path, vocab_size: int) -> Path:
    """A random 1-layer Whisper in Hugging Face format, with the shared tokenizer (its ids cover ENGLISH_VOCAB tokens).

    ``vocab_size``: :data:`ENGLISH_VOCAB` for an English-only model, :data:`MULTILINGUAL_VOCAB` for a multilingual one.
    """
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    torch.manual_seed(0)
    config = WhisperConfig(
        vocab_size=vocab_size, num_mel_bins=80, d_model=16, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
        max_source_positions=1500, max_target_positions=64, decoder_start_token_id=50257, eos_token_id=50256,
        pad_token_id=50256, bos_token_id=50256, begin_suppress_tokens=[220, 50256], suppress_tokens=[1, 2],
    )
    WhisperForConditionalGeneration(config).save_pretrained(directory)
    shutil.copy(WHISPER_TINY_EN / "tokenizer.json", directory / "tokenizer.json")
    return directory
