"""Small value types shared by the whole pipeline."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Emission:
    """Text appended to a stream's output; never changed afterwards.

    Attributes:
        text: the increment (emission texts of a stream concatenate to its final text).
        tokens: the token ids this increment commits (model vocabulary).
        source_ms: milliseconds of source audio read when the emission was made.
        elapsed_ms: source_ms plus the compute time this stream has spent so far (computation-aware time,
            SimulEval >= 1.1 semantics: cumulative within one stream, not across streams).
        final: True for the emission made after the source ended.
    """

    text: str
    tokens: tuple[int, ...]
    source_ms: float
    elapsed_ms: float
    final: bool = False


@dataclass(frozen=True)
class Hypothesis:
    """One decoded hypothesis.

    Attributes:
        tokens: output token ids after the model's prompt, forced prefix included, ``<eos>`` excluded.
        score: sum of token log-probabilities of the searched (non-forced) part.
        finished: True when the search ended it with ``<eos>``.
    """

    tokens: tuple[int, ...]
    score: float
    finished: bool = False

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
