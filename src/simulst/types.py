"""Small value types shared by the whole pipeline."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Word:
    """A whitespace-separated piece of an emission's text and where it was spoken.

    Attributes:
        text: the piece (no whitespace).
        start_ms, end_ms: where its tokens were spoken, on the stream's audio timeline (None: untimed).
        joins_previous: the piece continues the last word of the emission before (no whitespace between them: a
            word split across two emissions, e.g. ``"3."`` then ``"5 percent"``); :func:`spoken_words` joins them.
    """

    text: str
    start_ms: float | None
    end_ms: float | None
    joins_previous: bool = False


@dataclass(frozen=True)
class Emission:
    """Text appended to a stream's output; never changed afterwards.

    Attributes:
        text: the increment (emission texts of a stream concatenate to its final text).
        tokens: the token ids this increment commits (model vocabulary).
        source_ms: milliseconds of source audio read when the emission was made (its commit time).
        elapsed_ms: source_ms plus the compute time this stream has spent so far (computation-aware time,
            SimulEval >= 1.1 semantics: cumulative within one stream, not across streams).
        final: True for the emission made after the source ended.
        start_ms, end_ms: where its words were spoken, in milliseconds on the stream's audio timeline (from the
            stream's first sample, audio trimmed off the model's buffer included): from its first word's start to
            its last word's end; None where there is no timing (a model that records none, text without words).
            Within the audio read, ``start_ms <= end_ms``, and the starts of a stream's emissions never decrease.
        words: its text's whitespace-separated pieces (``text.split()``, in order), each timed by the tokens that
            carry its characters; a piece continuing the previous emission's last word says so
            (:attr:`Word.joins_previous`).
    """

    text: str
    tokens: tuple[int, ...]
    source_ms: float
    elapsed_ms: float
    final: bool = False
    start_ms: float | None = None
    end_ms: float | None = None
    words: tuple[Word, ...] = ()


def spoken_words(emissions: Iterable[Emission]) -> list[Word]:
    """The whole words of a stream's emissions, in order: a word split across emissions is one word, from its
    first piece's start to its last piece's end (the words of ``"".join(e.text for e in emissions).split()``)."""
    words: list[Word] = []
    for emission in emissions:
        for word in emission.words:
            if word.joins_previous and words:
                first = words[-1]
                start = first.start_ms if first.start_ms is not None else word.start_ms
                end = word.end_ms if word.end_ms is not None else first.end_ms
                words[-1] = Word(first.text + word.text, start, end)
            else:
                words.append(Word(word.text, word.start_ms, word.end_ms))
    return words


@dataclass(frozen=True)
class Hypothesis:
    """One decoded hypothesis.

    Attributes:
        tokens: output token ids after the model's prompt, forced prefix included, ``<eos>`` excluded.
        score: sum of token log-probabilities of the searched (non-forced) part.
        finished: True when the search ended it with ``<eos>``.
        alignment: the decoder's record of where the hypothesis attended - the cross-attention rows of its
            positions after the prompt, which time its tokens without another decoder pass (an opaque handle of the
            model, ``TokenTimer.traced_starts``); None: not recorded. Not part of equality.
        token_scores: the search's score of each searched token (its log-probability, weighted as the search
            scores), in order: they belong to the *last* ``len(token_scores)`` tokens (``<eos>`` excluded); empty:
            not recorded. Not part of equality.
    """

    tokens: tuple[int, ...]
    score: float
    finished: bool = False
    alignment: object | None = field(default=None, compare=False, repr=False)
    token_scores: tuple[float, ...] = field(default=(), compare=False, repr=False)

    def token_score(self, index: int) -> float | None:
        """The searched score of ``tokens[index]``; None where it was not searched (a forced or given token)."""
        at = index - (len(self.tokens) - len(self.token_scores))
        return self.token_scores[at] if 0 <= at < len(self.token_scores) and index < len(self.tokens) else None

    def normalized_score(self, n_forced: int, length_penalty: float = 1.0) -> float:
        """Length-normalised score: score / (number of searched tokens, +1 for ``<eos>``)^length_penalty."""
        length = max(1, len(self.tokens) - n_forced + (1 if self.finished else 0))
        return self.score / (length**length_penalty)


@dataclass
class Costs:
    """Work counters of one stream (hardware-free cost measures of the papers).

    Attributes:
        decoder_calls: decoder forward calls; one batched step over all beams counts once.
        decoder_positions: token positions the decoder computed (sum over calls of batch x new tokens).
        encoder_calls: encoder forward calls.
        encoder_frames: encoder input frames processed (sum over calls).
        compute_s: seconds of compute spent in this stream.
    """

    decoder_calls: int = 0
    decoder_positions: int = 0
    encoder_calls: int = 0
    encoder_frames: int = 0
    compute_s: float = 0.0
    extra: dict[str, int] = field(default_factory=dict)

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to the named counter of ``extra`` (e.g. ``ctc_stops``, ``no_speech_skips``)."""
        self.extra[name] = self.extra.get(name, 0) + n

    def add(self, other: Costs) -> None:
        """Accumulate another counter into this one."""
        self.decoder_calls += other.decoder_calls
        self.decoder_positions += other.decoder_positions
        self.encoder_calls += other.encoder_calls
        self.encoder_frames += other.encoder_frames
        self.compute_s += other.compute_s
        for k, v in other.extra.items():
            self.count(k, v)
