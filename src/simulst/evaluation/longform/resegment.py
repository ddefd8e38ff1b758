"""Resegmentation: one talk's output, with its delays, cut into the outputs of its reference sentences.

Every output unit goes to the sentence the alignment (:mod:`~simulst.evaluation.longform.align`) gives it; the
prediction of a sentence is its words (original spelling) joined by spaces (characters: joined without), and
their delays become relative to the sentence's offset o_s (ms) in the talk's audio, so that a sentence is scored
as a short-form instance of |X| = its duration. ``elapsed`` times are shifted alike, after (optionally)
:func:`fix_elapsed_times`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simulst.evaluation.longform.align import align_to_sentences
from simulst.evaluation.longform.inputs import LongformInputError, Segment, check_unit


@dataclass(frozen=True)
class SentenceOutput:
    """The output of one reference sentence after resegmentation.

    Attributes:
        index: the sentence's line in the reference file (0-based).
        talk: the talk's audio name.
        reference: the reference sentence (char unit: without spaces).
        prediction: the hypothesis words given to this sentence, joined by one space (char unit: no space).
        delays: their delays relative to the sentence's offset, ms (may be negative).
        elapsed: their computation-aware times relative to the offset; None when the talk has none.
        source_length: the sentence's duration, ms.
        time_to_talk_end: end of the talk's last segment minus this sentence's offset, ms.
        offset: the sentence's offset in ms as the delays were taken relative to.
    """

    index: int
    talk: str
    reference: str
    prediction: str
    delays: tuple[float, ...]
    elapsed: tuple[float, ...] | None
    source_length: float
    time_to_talk_end: float
    offset: float = 0.0

    @property
    def is_empty(self) -> bool:
        """True when no hypothesis unit was given to this sentence."""
        return len(self.delays) == 0


def fix_elapsed_times(delays: Sequence[float], elapsed: Sequence[float]) -> list[float]:
    """OmniSTEval's ``--fix_simuleval_emission_ca``: e'_1 = e_1, e'_i = max(e_i − e_{i−1} + d_{i−1}, e'_{i−1}).

    SimulEval's ``elapsed`` adds the compute time accumulated since the start of the instance; over a whole talk
    that sum keeps growing. The fix keeps only the compute spent since the previous unit, on top of that unit's
    delay.
    """
    fixed: list[float] = []
    for i, e in enumerate(elapsed):
        if i == 0:
            fixed.append(e)
        else:
            fixed.append(max(e - elapsed[i - 1] + delays[i - 1], fixed[-1]))
    return fixed


def resegment(
    hyp_units: Sequence[str],
    delays: Sequence[float],
    elapsed: Sequence[float] | None,
    reference_sentences: Sequence[str],
    segments: Sequence[Segment],
    *,
    method: str = "soft",
    lang: str | None = None,
    unit: str = "word",
    fix_elapsed: bool = False,
    offset_delays: bool = False,
    first_index: int = 0,
) -> list[SentenceOutput]:
    """Resegment one talk's output onto its reference sentences.

    Args:
        hyp_units: the talk's output units (``prediction.split()``; char unit: ``list(prediction)``).
        delays: one per unit, ms of the talk's audio read.
        elapsed: one per unit (computation-aware), or None / empty when not recorded.
        reference_sentences: the talk's sentences, stripped (char unit: their spaces are removed here).
        segments: one per sentence, all of this talk.
        method, lang, unit: see :func:`align_to_sentences`.
        fix_elapsed: apply :func:`fix_elapsed_times` first.
        offset_delays: the talk's delays count from its first segment's offset, not from the start of the audio
            (OmniSTEval's ``--offset_delays``).
        first_index: the global index of the talk's first sentence (for :attr:`SentenceOutput.index`).
    """
    talk = _check_talk(hyp_units, delays, elapsed, reference_sentences, segments, unit)
    references = [s.strip() for s in reference_sentences]
    if unit == "char":
        references = [s.replace(" ", "") for s in references]
    ca: list[float] | None = None
    if elapsed:
        ca = fix_elapsed_times(delays, elapsed) if fix_elapsed else list(elapsed)

    # ms offsets as OmniSTEval derives them: time to the talk's end from the unshifted offsets
    talk_end = max(seg.offset_ms + seg.duration_ms for seg in segments)
    shift = segments[0].offset_ms if offset_delays else 0
    assignment = align_to_sentences(hyp_units, references, method=method, lang=lang, unit=unit)
    joiner = "" if unit == "char" else " "
    out = []
    for s, (seg, reference, ks) in enumerate(zip(segments, references, _members(assignment, len(references)),
                                                  strict=True)):
        offset = seg.offset_ms - shift if offset_delays else seg.offset_ms
        out.append(
            SentenceOutput(
                index=first_index + s,
                talk=talk,
                reference=reference,
                prediction=joiner.join(hyp_units[k] for k in ks),
                delays=tuple(delays[k] - offset for k in ks),
                elapsed=tuple(ca[k] - offset for k in ks) if ca is not None else None,
                source_length=seg.duration_ms,
                time_to_talk_end=talk_end - seg.offset_ms,
                offset=offset,
            )
        )
    return out


def _check_talk(hyp_units: Sequence[str], delays: Sequence[float], elapsed: Sequence[float] | None,
                reference_sentences: Sequence[str], segments: Sequence[Segment], unit: str) -> str:
    """The talk's audio name, after checking that its sentences, segments, units and times pair up."""
    check_unit(unit)
    if len(reference_sentences) != len(segments):
        raise LongformInputError(
            f"{len(reference_sentences)} reference sentences for {len(segments)} segments (they must pair up)"
        )
    if not segments:
        raise LongformInputError("a talk needs at least one segment")
    talk = segments[0].wav
    if len(delays) != len(hyp_units):
        raise LongformInputError(f"talk {talk}: {len(hyp_units)} output {unit}s but {len(delays)} delays")
    if elapsed and len(elapsed) != len(hyp_units):
        raise LongformInputError(f"talk {talk}: {len(hyp_units)} output {unit}s but {len(elapsed)} elapsed times")
    return talk


def _members(assignment: Sequence[int | None], sentences: int) -> list[list[int]]:
    """Per sentence, the positions of the units assigned to it, in order."""
    members: list[list[int]] = [[] for _ in range(sentences)]
    for k, s in enumerate(assignment):
        if s is not None:
            members[s].append(k)
    return members
