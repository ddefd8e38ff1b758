"""Long-form evaluation: one instance per talk, scored per reference sentence after resegmentation.

SimulEval's long-form convention (IWSLT simultaneous track since 2025): an instance is a whole talk, its output
one prediction with one delay per output unit (``delays``: ms of the talk's audio read; ``elapsed``: the
computation-aware time). The reference is a list of sentences (one per line) with the talk's segmentation
(per sentence its ``wav``, ``offset`` and ``duration`` in seconds, a YAML list as MuST-C's
``- {duration: 3.1, offset: 12.4, speaker_id: .., wav: talk.wav}``).

Scoring (:func:`score_longform`) reproduces OmniSTEval 0.1.10 (``omnisteval longform --speech_segmentation``;
Polák et al. 2025, "Better Late Than Never", arXiv:2509.17349) to floating-point precision:

1. **Resegmentation** (SoftSegmenter, ``method="soft"``). Per talk, the reference words (each sentence
   ``strip().lower().split()``) and the hypothesis words (``prediction.split()``) are NFKC-normalised and lower
   cased and, with ``lang`` set, split by the Moses tokenizer (``tokenizer.perl -l LANG -no-escape -b -a``
   through the ``mosestokenizer`` package, as OmniSTEval). A Needleman-Wunsch-like alignment without gap
   penalties maximises Σ sim(ref, hyp) over matched pairs, sim = Jaccard similarity of the two tokens'
   character *sets*, −∞ when exactly one of them is punctuation (``. ! ? , ; : - ( )`` and their CJK forms);
   ties prefer match, then deletion, then insertion. A hypothesis token left unaligned joins the sentence of
   the previous or the next aligned reference token, whichever is more similar to it (the previous one on a
   tie). A word goes to the sentence of its first token; the prediction of a sentence is its words (original
   spelling) joined by spaces. ``method="mwer"`` instead cuts the hypothesis where the minimum-WER alignment
   (mwerSegmenter, Matusov et al. 2005, via ``mweralign``) puts the sentence boundaries — the resegmentation
   of the IWSLT 2025 StreamLAAL scripts; OmniSTEval does not offer it.
2. **Latency** per sentence s with output: its words' delays minus the sentence offset o_s (ms), |X| = the
   sentence duration, |Y*| = ``len(reference.split(" "))``:

   * ``StreamLAAL`` = LAAL (:func:`~simulst.evaluation.latency.length_adaptive_average_lagging`): the sum
     stops at the first delay ≥ |X| (included); a first delay > |X| is the score. OmniSTEval: ``long_laal``.
   * ``LongYAAL`` (OmniSTEval's ``long_yaal``): (1/τ) Σ_{i ≤ τ} (d_i − (i−1)·|X|/max(|Y|, |Y*|)) over the
     delays before the *end of the talk* (E_s = end of the talk's last segment − o_s, ms): words delayed past
     the sentence end still count, words after the talk's end do not; a sentence whose first delay is ≥ E_s
     is skipped.
   * ``_CA``: the same on ``elapsed`` (``fix_elapsed``: OmniSTEval's ``--fix_simuleval_emission_ca``,
     e'_1 = e_1, e'_i = max(e_i − e_{i−1} + d_{i−1}, e'_{i−1}), undoing SimulEval's compute time accumulated
     over a whole talk).

   A corpus score is the mean over the sentences it applies to (sentences with no output are skipped).
3. **Quality**: sacreBLEU BLEU and chrF of the resegmented predictions against the reference sentences (as
   OmniSTEval), plus simulst's ``WER`` / ``WER_norm`` (:mod:`simulst.evaluation.quality`; OmniSTEval has none).

``unit="char"`` is OmniSTEval's ``--char_level`` (zh/ja): units are characters, the references lose their
spaces, tokens match only when equal.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

import numpy as np

from simulst.errors import OptionError
from simulst.evaluation.instances import InstanceRecord, read_log
from simulst.evaluation.latency import length_adaptive_average_lagging, reference_length
from simulst.evaluation.manifest import TestSetError
from simulst.evaluation.quality import DEFAULT_SACREBLEU_TOKENIZER, quality_scores, sacrebleu_tokenizers
from simulst.evaluation.scoring import ScoreReport, _tsv

RESEGMENTERS = ("soft", "mwer")
LONGFORM_UNITS = ("word", "char")
LONGFORM_LATENCY = ("StreamLAAL", "LongYAAL")
LONGFORM_SCORES_TSV = "scores.longform.tsv"
LONGFORM_SCORES_JSON = "scores.longform.json"
LONGFORM_SENTENCES_TSV = "metrics.longform.tsv"
RESEGMENTED_JSONL = "instances.resegmented.jsonl"  # OmniSTEval's name and keys

#: our metric name -> OmniSTEval 0.1.10's key in ``evaluate_instances(..., is_longform=True)``
OMNISTEVAL_KEYS = {
    "BLEU": "bleu",
    "chrF": "chrf",
    "StreamLAAL": "long_laal",
    "StreamLAAL_CA": "ca_long_laal",
    "LongYAAL": "long_yaal",
    "LongYAAL_CA": "ca_long_yaal",
}

# tokens that must not align with a non-punctuation token (OmniSTEval's PUNCT, CHINESE_PUNCT, JAPAN_PUNCT)
PUNCTUATION = frozenset(".!?,;:-()") | frozenset("。！？，；：—（）") | frozenset("。！？，；：ー（）")
_MATCH, _DELETE, _INSERT = 0, 1, 2
_NO_TOKENIZATION = (None, "", "none", "zh", "ja")

logger = logging.getLogger(__name__)


class LongformInputError(TestSetError):
    """Long-form inputs that do not fit together: a malformed segmentation, a reference file with another
    number of sentences than the segmentation has segments, a log whose talks do not match it, or a talk whose
    delays are not one per output unit."""

    __test__ = False  # not a pytest test class


# --------------------------------------------------------------------------------------------------------------
# Inputs


@dataclass(frozen=True)
class Segment:
    """One reference sentence's place in its talk's audio.

    Attributes:
        wav: the talk's audio file, as the segmentation names it.
        offset: start of the sentence in the talk, seconds.
        duration: length of the sentence's audio, seconds (> 0).
        extra: the entry's other keys (``speaker_id``, ...), kept verbatim.
    """

    wav: str
    offset: float
    duration: float
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def offset_ms(self) -> float:
        """The offset in ms (``offset * 1000``, as OmniSTEval converts it)."""
        return self.offset * 1000

    @property
    def duration_ms(self) -> float:
        """The duration in ms (|X| of the sentence)."""
        return self.duration * 1000


def _number(entry: Mapping[str, Any], key: str, where: str) -> float:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise LongformInputError(f"{where}: {key!r} must be a number (seconds), got {value!r}")
    if not math.isfinite(value):
        raise LongformInputError(f"{where}: {key!r} must be finite, got {value}")
    return value


def segments_from_entries(entries: Any, source: str = "segmentation") -> list[Segment]:
    """Validate a parsed segmentation (a list of mappings with ``wav``, ``offset``, ``duration``)."""
    if not isinstance(entries, list) or not entries:
        raise LongformInputError(f"{source}: expected a non-empty list of segments, got {type(entries).__name__}")
    segments = []
    for n, entry in enumerate(entries):
        where = f"{source}: segment {n}"
        if not isinstance(entry, Mapping):
            raise LongformInputError(f"{where}: expected a mapping with wav, offset, duration; got {entry!r}")
        wav = entry.get("wav")
        if not isinstance(wav, str) or not wav:
            raise LongformInputError(f"{where}: 'wav' must name the talk's audio file, got {wav!r}")
        offset = _number(entry, "offset", where)
        duration = _number(entry, "duration", where)
        if offset < 0:
            raise LongformInputError(f"{where}: offset must be >= 0 s, got {offset}")
        if duration <= 0:
            raise LongformInputError(f"{where}: duration must be > 0 s, got {duration}")
        extra = {k: v for k, v in entry.items() if k not in ("wav", "offset", "duration")}
        segments.append(Segment(wav, offset, duration, extra))
    return segments


def read_segmentation(path: str | Path) -> list[Segment]:
    """Read a segmentation file: YAML (MuST-C's ``- {duration: .., offset: .., wav: ..}`` list) or JSON
    (``.json``), one entry per reference sentence, in the order of the reference file."""
    file = Path(path)
    if not file.is_file():
        raise LongformInputError(f"no such segmentation file: {file}")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise LongformInputError(f"{file} is not UTF-8 text: {exc}") from exc
    if file.suffix.lower() == ".json":
        try:
            entries = json.loads(text)
        except json.JSONDecodeError as exc:
            raise LongformInputError(f"{file}: not valid JSON: {exc}") from exc
    else:
        import yaml  # lazy: only long-form scoring reads YAML

        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        try:
            entries = yaml.load(text, Loader=loader)  # a safe loader
        except yaml.YAMLError as exc:
            raise LongformInputError(f"{file}: not valid YAML: {exc}") from exc
    return segments_from_entries(entries, str(file))


def read_reference_sentences(path: str | Path) -> list[str]:
    """The reference sentences, one per line, stripped (an empty line is an empty sentence; a final newline
    does not add one)."""
    file = Path(path)
    if not file.is_file():
        raise LongformInputError(f"no such reference file: {file}")
    try:
        with open(file, encoding="utf-8") as f:  # universal newlines, as OmniSTEval reads it
            return [line.strip() for line in f]
    except UnicodeDecodeError as exc:
        raise LongformInputError(f"{file} is not UTF-8 text: {exc}") from exc


@dataclass(frozen=True)
class Talk:
    """A talk of the segmentation: its audio name and the (global) indices of its sentences."""

    wav: str
    sentences: range


def group_talks(segments: Sequence[Segment]) -> list[Talk]:
    """The talks in segmentation order; every talk's segments must be consecutive."""
    talks: list[Talk] = []
    start = 0
    for i in range(1, len(segments) + 1):
        if i == len(segments) or segments[i].wav != segments[start].wav:
            talks.append(Talk(segments[start].wav, range(start, i)))
            start = i
    seen: set[str] = set()
    for talk in talks:
        if talk.wav in seen:
            raise LongformInputError(
                f"the segments of {talk.wav} are not consecutive in the segmentation (a talk's sentences must "
                "follow each other)"
            )
        seen.add(talk.wav)
    return talks


# --------------------------------------------------------------------------------------------------------------
# Resegmentation


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


def _units(text: str, unit: str) -> list[str]:
    return list(text) if unit == "char" else text.split()


def _check_unit(unit: str) -> None:
    if unit not in LONGFORM_UNITS:
        raise OptionError(f"long-form scoring counts words or characters, not {unit!r}; choose word or char")


def _check_method(method: str) -> None:
    if method not in RESEGMENTERS:
        raise OptionError(f"unknown resegmenter {method!r}; choose one of {', '.join(RESEGMENTERS)}")


@contextlib.contextmanager
def _moses(lang: str | None) -> Iterator[Callable[[str], list[str]]]:
    """A word -> tokens function: Moses ``tokenizer.perl`` for ``lang`` (cached per word), else the word."""
    if lang in _NO_TOKENIZATION:
        yield lambda text: [text]
        return
    try:
        from mosestokenizer import MosesTokenizer  # lazy: perl behind a pipe
    except ImportError as exc:
        raise OptionError(
            f"tokenizing {lang!r} for the alignment needs the mosestokenizer package (and perl); "
            "install it or leave the language unset"
        ) from exc
    cache: dict[str, list[str]] = {}
    try:
        tokenizer = MosesTokenizer(lang=lang, no_escape=True)
    except OSError as exc:  # pragma: no cover - perl missing
        raise OptionError(f"cannot start the Moses tokenizer (perl): {exc}") from exc
    try:

        def tokenize(text: str) -> list[str]:
            if text not in cache:
                cache[text] = list(tokenizer(text))
            return cache[text]

        yield tokenize
    finally:
        tokenizer.close()


def _normalize(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower()


def _similarity(a: str, b: str, char_level: bool) -> float:
    """SoftSegmenter's token similarity: −∞ when exactly one is punctuation; else equality (char level) or the
    Jaccard similarity of the two character sets."""
    if (a in PUNCTUATION) != (b in PUNCTUATION):
        return -math.inf
    if char_level:
        return float(a == b)
    sa, sb = set(a), set(b)
    inter = len(sa & sb)
    union = len(sa) + len(sb) - inter
    return inter / union if union else 0.0


def _similarity_table(ref_types: Sequence[str], hyp_types: Sequence[str], char_level: bool) -> np.ndarray:
    """``_similarity`` for every (reference type, hypothesis type) pair, computed as the same IEEE divisions."""
    ref_punct = np.array([t in PUNCTUATION for t in ref_types], dtype=bool)
    hyp_punct = np.array([t in PUNCTUATION for t in hyp_types], dtype=bool)
    if char_level:
        table = (np.array(ref_types, dtype=object)[:, None] == np.array(hyp_types, dtype=object)[None, :])
        sim = table.astype(np.float64)
    else:
        alphabet = {c: k for k, c in enumerate(sorted({c for t in (*ref_types, *hyp_types) for c in t}))}
        ref_sets = np.zeros((len(ref_types), len(alphabet)), dtype=np.float64)
        hyp_sets = np.zeros((len(hyp_types), len(alphabet)), dtype=np.float64)
        for row, t in enumerate(ref_types):
            ref_sets[row, [alphabet[c] for c in set(t)]] = 1.0
        for row, t in enumerate(hyp_types):
            hyp_sets[row, [alphabet[c] for c in set(t)]] = 1.0
        inter = ref_sets @ hyp_sets.T  # small integers: exact in float64
        union = ref_sets.sum(axis=1)[:, None] + hyp_sets.sum(axis=1)[None, :] - inter
        sim = np.zeros_like(inter)
        np.divide(inter, union, out=sim, where=union > 0)
    sim[ref_punct[:, None] != hyp_punct[None, :]] = -np.inf
    return sim


def _align(ref: Sequence[str], hyp: Sequence[str], char_level: bool) -> list[tuple[int | None, int | None]]:
    """SoftSegmenter's alignment: pairs (ref position, hyp position), None for a gap, in order.

    dp[i][j] = max(dp[i−1][j−1] + sim(r_i, h_j), dp[i−1][j], dp[i][j−1]), dp[i][0] = dp[0][j] = 0; ties prefer
    match, then deletion (a reference token alone), then insertion. A row is computed at once: with
    a_j = max(match_j, delete_j), dp[i][j] = max(a_j, dp[i][j−1]) is a running maximum.
    """
    n, m = len(ref), len(hyp)
    back = np.empty((n + 1, m + 1), dtype=np.int8)
    back[0, :] = _INSERT
    back[:, 0] = _DELETE
    back[0, 0] = _MATCH
    if n and m:
        ref_types = list(dict.fromkeys(ref))
        hyp_types = list(dict.fromkeys(hyp))
        table = _similarity_table(ref_types, hyp_types, char_level)
        ref_ids = {t: k for k, t in enumerate(ref_types)}
        hyp_ids = {t: k for k, t in enumerate(hyp_types)}
        hyp_index = np.array([hyp_ids[t] for t in hyp], dtype=np.intp)
        prev = np.zeros(m + 1, dtype=np.float64)
        cur = np.empty(m + 1, dtype=np.float64)
        for i in range(1, n + 1):
            match = prev[:-1] + table[ref_ids[ref[i - 1]], hyp_index]
            delete = prev[1:]
            cur[0] = 0.0
            np.maximum(match, delete, out=cur[1:])
            np.maximum.accumulate(cur, out=cur)
            insert = cur[:-1]
            back[i, 1:] = np.where(
                (match >= delete) & (match >= insert), _MATCH, np.where(delete >= insert, _DELETE, _INSERT)
            )
            prev, cur = cur, prev
    pairs: list[tuple[int | None, int | None]] = []
    i, j = n, m
    while i > 0 or j > 0:
        op = back[i, j]
        if op == _MATCH:
            i, j = i - 1, j - 1
            pairs.append((i, j))
        elif op == _DELETE:
            i -= 1
            pairs.append((i, None))
        else:
            j -= 1
            pairs.append((None, j))
    pairs.reverse()
    return pairs


def _soft_assign(
    ref: Sequence[str], ref_sentence: Sequence[int], hyp: Sequence[str], char_level: bool
) -> list[int | None]:
    """Sentence of every hypothesis token (None: dropped), after SoftSegmenter's alignment.

    An unaligned hypothesis token is compared with the last reference token aligned before it and the next one
    after it; it takes the next one's sentence when strictly more similar (and so do the unaligned tokens up to
    that reference token), else the previous one's (dropped when there is none).
    """
    pairs = _align(ref, hyp, char_level)
    next_aligned = [len(pairs)] * (len(pairs) + 1)  # first pair at or after q with a reference token
    for q in range(len(pairs) - 1, -1, -1):
        next_aligned[q] = q if pairs[q][0] is not None else next_aligned[q + 1]
    out: list[int | None] = [None] * len(hyp)
    last_ref: int | None = None  # reference position the running tokens attach to
    lookahead: int | None = None
    zone_end = 0  # pairs before this index belong to the look-ahead zone
    for k, (r, h) in enumerate(pairs):
        target = r
        if r is None and k >= zone_end:
            assert h is not None
            nxt = next_aligned[k]
            next_ref = pairs[nxt][0] if nxt < len(pairs) else None
            zone_end = nxt
            next_score = _similarity(hyp[h], ref[next_ref], char_level) if next_ref is not None else -math.inf
            prev_score = _similarity(hyp[h], ref[last_ref], char_level) if last_ref is not None else -math.inf
            if next_score > prev_score:
                target = lookahead = next_ref
            else:
                target = last_ref
                zone_end = k
                lookahead = None
        elif r is None:
            target = lookahead
        if target is not None and k >= zone_end:
            last_ref = target
        if h is not None and target is not None:
            out[h] = ref_sentence[target]
    return out


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2 (mweralign's C++ core prints its progress there)."""
    try:
        saved = os.dup(2)
    except OSError:  # pragma: no cover - no stderr to silence
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _mweralign() -> Any:
    """Import mweralign without letting its import-time ``logging.basicConfig`` reconfigure the host's logging."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        import mweralign
    except ImportError as exc:
        raise OptionError("the mwer resegmenter needs the mweralign package") from exc
    finally:
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
    return mweralign


def _mwer_assign(hyp_words: Sequence[str], references: Sequence[str]) -> list[int | None]:
    """Sentence of every hypothesis word under the minimum-WER segmentation (mwerSegmenter via mweralign;
    whitespace tokens, case-insensitive)."""
    if not hyp_words:
        return []
    if len(references) == 1:
        return [0] * len(hyp_words)
    mweralign = _mweralign()
    # the aligner reads one reference per line; a line break inside a sentence cannot occur (lines are stripped)
    with _quiet_stderr():
        result = mweralign.align_texts("\n".join(references), " ".join(hyp_words))
    lines = result.split("\n")
    if len(lines) > len(references) and all(not line.strip() for line in lines[len(references):]):
        lines = lines[: len(references)]
    tokens = [line.split() for line in lines]
    flat = [t for line in tokens for t in line]
    if len(lines) != len(references) or flat != list(hyp_words):
        raise OptionError(
            f"mweralign returned {len(lines)} segments with {len(flat)} words for {len(references)} references and "
            f"{len(hyp_words)} words: cannot map the delays back"
        )
    return [s for s, line in enumerate(tokens) for _ in line]


def align_to_sentences(
    hyp_units: Sequence[str],
    references: Sequence[str],
    *,
    method: str = "soft",
    lang: str | None = None,
    unit: str = "word",
) -> list[int | None]:
    """Which reference sentence each hypothesis unit goes to (an index into ``references``; None: dropped).

    Args:
        hyp_units: the talk's output units (words, or characters for ``unit="char"``), in order.
        references: the talk's reference sentences (stripped; char unit: without spaces).
        method: ``soft`` (OmniSTEval's SoftSegmenter) or ``mwer`` (mwerSegmenter's minimum-WER cut; words only).
        lang: Moses tokenizer language for the soft alignment (None, ``zh``, ``ja``: no tokenization).
        unit: ``word`` or ``char``.

    Only the soft method drops words: one whose first token stays unaligned with no aligned reference token
    before it and a next one of the other kind (punctuation against a word), one the Moses tokenizer turns into
    no token, and every word of a talk whose references hold no word (where OmniSTEval fails).
    """
    _check_method(method)
    _check_unit(unit)
    if method == "mwer":
        if unit != "word":
            raise OptionError("the mwer resegmenter aligns words; use --resegmenter soft for the char unit")
        return _mwer_assign(hyp_units, references)
    char_level = unit == "char"
    with _moses(lang) as tokenize:
        ref_tokens: list[str] = []
        ref_sentence: list[int] = []
        for s, sentence in enumerate(references):
            text = sentence.strip().lower()
            for word in _units(text, unit):
                for token in tokenize(_normalize(word)):
                    ref_tokens.append(token)
                    ref_sentence.append(s)
        hyp_tokens: list[str] = []
        first_token: list[int | None] = []  # per unit, the position of its first token
        for word in hyp_units:
            tokens = tokenize(_normalize(word))
            first_token.append(len(hyp_tokens) if tokens else None)
            hyp_tokens.extend(tokens)
    if not hyp_tokens:
        return [None] * len(hyp_units)
    if not ref_tokens:
        logger.warning("the references of a talk hold no word: its %d output units are dropped", len(hyp_units))
        return [None] * len(hyp_units)
    token_sentence = _soft_assign(ref_tokens, ref_sentence, hyp_tokens, char_level)
    return [None if t is None else token_sentence[t] for t in first_token]


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
    _check_unit(unit)
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
    members: list[list[int]] = [[] for _ in references]
    for k, s in enumerate(assignment):
        if s is not None:
            members[s].append(k)
    joiner = "" if unit == "char" else " "
    out = []
    for s, (seg, reference, ks) in enumerate(zip(segments, references, members, strict=True)):
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


# --------------------------------------------------------------------------------------------------------------
# Latency


def long_yaal_of(d: Sequence[float], x: float, y_ref: float, time_to_end: float) -> float | None:
    r"""LongYAAL of one sentence (OmniSTEval's ``YAALScorer(is_longform=True)``).

    YAAL = (1/τ) Σ_{i=1..τ} (d_i − (i−1)·|X|/max(|Y|, |Y*|)), τ = the number of delays before the first
    d_i ≥ ``time_to_end`` (the end of the talk, relative to the sentence's offset). Delays past the sentence's
    own end still count. None (skipped) when there is no delay or d_1 ≥ ``time_to_end``.
    """
    if not d or d[0] >= time_to_end:
        return None
    gamma = max(len(d), y_ref) / x
    total = 0.0
    tau = 0
    for i_minus_1, di in enumerate(d):
        if di >= time_to_end:
            break
        total += di - i_minus_1 / gamma
        tau = i_minus_1 + 1
    return total / tau


def _lagging_inputs(s: SentenceOutput, computation_aware: bool, unit: str) -> tuple[tuple[float, ...], int] | None:
    """A sentence's delays (or elapsed times) and |Y*|; None when it has no output."""
    d = s.elapsed if computation_aware else s.delays
    if not d:
        return None
    y_ref = reference_length(s.reference, unit)
    assert y_ref is not None
    return d, y_ref


def sentence_stream_laal(s: SentenceOutput, computation_aware: bool = False, unit: str = "word") -> float | None:
    """LAAL of one resegmented sentence (None when it has no output)."""
    inputs = _lagging_inputs(s, computation_aware, unit)
    return None if inputs is None else length_adaptive_average_lagging(inputs[0], s.source_length, inputs[1])


def sentence_long_yaal(s: SentenceOutput, computation_aware: bool = False, unit: str = "word") -> float | None:
    """LongYAAL of one resegmented sentence (None when skipped)."""
    inputs = _lagging_inputs(s, computation_aware, unit)
    return None if inputs is None else long_yaal_of(inputs[0], s.source_length, inputs[1], s.time_to_talk_end)


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return math.fsum(kept) / len(kept) if kept else None


def stream_laal(
    sentences: Sequence[SentenceOutput], computation_aware: bool = False, unit: str = "word"
) -> float | None:
    """StreamLAAL: the mean LAAL over the resegmented sentences with output (None when none has any)."""
    return _mean([sentence_stream_laal(s, computation_aware, unit) for s in sentences])


def long_yaal(
    sentences: Sequence[SentenceOutput], computation_aware: bool = False, unit: str = "word"
) -> float | None:
    """LongYAAL: the mean of :func:`long_yaal_of` over the sentences it does not skip."""
    return _mean([sentence_long_yaal(s, computation_aware, unit) for s in sentences])


# --------------------------------------------------------------------------------------------------------------
# Whole test sets


@dataclass(frozen=True)
class LongformOptions:
    """How a long-form log is scored.

    Attributes:
        method: resegmenter, ``soft`` (OmniSTEval) or ``mwer``.
        lang: Moses tokenizer language for the soft alignment (OmniSTEval's ``--lang``); None: none.
        unit: ``word`` or ``char`` (OmniSTEval's ``--word_level`` / ``--char_level``).
        sacrebleu_tokenizer: sacreBLEU tokenizer for BLEU.
        computation_aware: score the ``_CA`` metrics (None: when every talk has ``elapsed`` times).
        fix_elapsed: OmniSTEval's ``--fix_simuleval_emission_ca`` (see :func:`fix_elapsed_times`).
        offset_delays: OmniSTEval's ``--offset_delays`` (delays count from the talk's first segment).
    """

    method: str = "soft"
    lang: str | None = None
    unit: str = "word"
    sacrebleu_tokenizer: str = DEFAULT_SACREBLEU_TOKENIZER
    computation_aware: bool | None = None
    fix_elapsed: bool = False
    offset_delays: bool = False

    def __post_init__(self) -> None:
        _check_method(self.method)
        _check_unit(self.unit)
        if self.method == "mwer" and self.unit != "word":
            raise OptionError("the mwer resegmenter aligns words; use the soft resegmenter for the char unit")
        if self.sacrebleu_tokenizer not in sacrebleu_tokenizers():
            known = ", ".join(sacrebleu_tokenizers())
            raise OptionError(f"unknown sacrebleu tokenizer {self.sacrebleu_tokenizer!r}; choose from {known}")


@dataclass
class LongformReport(ScoreReport):
    """The scores of a long-form log (``scores``, one ``per_instance`` row per reference sentence, ``notes``)
    and the resegmented sentences themselves."""

    sentences: list[SentenceOutput] = field(default_factory=list)


def _record_names(record: InstanceRecord) -> list[str]:
    names = []
    source = record.source
    if isinstance(source, list | tuple) and source:
        source = source[0]
    if isinstance(source, str) and source:
        names.append(source)
    utterance = record.simulst.get("id")
    if isinstance(utterance, str) and utterance:
        names.append(utterance)
    return names


def _same_audio(name: str, wav: str) -> bool:
    a, b = PurePath(name), PurePath(wav)
    return name == wav or a.name == b.name or a.stem == b.stem


def match_talks(records: Sequence[InstanceRecord], talks: Sequence[Talk]) -> list[InstanceRecord]:
    """The log record of every talk, matched by audio name (the record's ``source`` path or simulst id against
    the segmentation's ``wav``: equal, same file name, or same stem); a single record and a single talk always
    match."""
    if len(records) != len(talks):
        raise LongformInputError(
            f"the log holds {len(records)} instances but the segmentation {len(talks)} talks "
            f"({', '.join(t.wav for t in talks[:5])}{', ...' if len(talks) > 5 else ''}); long-form scoring needs "
            "one instance per talk"
        )
    if len(talks) == 1:
        return [records[0]]
    out = []
    used: set[int] = set()
    for talk in talks:
        found = [
            k for k, rec in enumerate(records) if any(_same_audio(name, talk.wav) for name in _record_names(rec))
        ]
        if len(found) != 1:
            what = "no instance" if not found else f"{len(found)} instances ({', '.join(str(k) for k in found)})"
            raise LongformInputError(f"talk {talk.wav}: {what} of the log match its audio name")
        if found[0] in used:
            raise LongformInputError(f"instance {records[found[0]].index} matches two talks")
        used.add(found[0])
        out.append(records[found[0]])
    return out


def score_longform(
    records: Sequence[InstanceRecord],
    references: Sequence[str],
    segments: Sequence[Segment],
    options: LongformOptions | None = None,
) -> LongformReport:
    """Resegment every talk of a long-form log and score it (see the module docstring).

    Args:
        records: the log's instances, one per talk.
        references: the reference sentences, one per segment, in segmentation order.
        segments: the segmentation.
        options: how to resegment and score.

    Returns:
        A report with ``BLEU``, ``chrF``, ``WER``, ``WER_norm`` (word unit), ``StreamLAAL``, ``LongYAAL``, their
        ``_CA`` forms when computation-aware, ``Talks``, ``Sentences``, ``EmptySentences``, ``DroppedUnits``.
    """
    options = options or LongformOptions()
    if not records:
        raise OptionError("nothing to score: the log holds no instances")
    if len(references) != len(segments):
        raise LongformInputError(
            f"{len(references)} reference sentences but {len(segments)} segments: the reference file needs one "
            "line per segment of the segmentation"
        )
    talks = group_talks(segments)
    matched = match_talks(sorted(records, key=lambda r: r.index), talks)
    unit = options.unit
    all_elapsed = all(len(r.elapsed) > 0 for r in matched)
    ca = all_elapsed if options.computation_aware is None else options.computation_aware
    notes: list[str] = []
    if ca and not all_elapsed:
        notes.append("computation-aware metrics asked for, but not every talk has elapsed times: not computed")
        ca = False

    sentences: list[SentenceOutput] = []
    dropped = 0
    for talk, rec in zip(talks, matched, strict=True):
        units = _units(rec.prediction, unit)
        outputs = resegment(
            units,
            rec.delays,
            rec.elapsed if ca else None,
            [references[i] for i in talk.sentences],
            [segments[i] for i in talk.sentences],
            method=options.method,
            lang=options.lang,
            unit=unit,
            fix_elapsed=options.fix_elapsed,
            offset_delays=options.offset_delays,
            first_index=talk.sentences.start,
        )
        dropped += len(units) - sum(len(s.delays) for s in outputs)
        sentences += outputs

    hyps = [s.prediction for s in sentences]
    refs = [s.reference for s in sentences]
    quality = ("BLEU", "chrF") + (("WER", "WER_norm") if unit == "word" else ())
    scores: dict[str, float | int | None] = dict(quality_scores(quality, hyps, refs, options.sacrebleu_tokenizer))
    rows: list[dict[str, Any]] = [
        {
            "index": s.index,
            "talk": s.talk,
            "offset_ms": s.offset,
            "source_length": s.source_length,
            "prediction_length": len(s.delays),
            "reference_length": reference_length(s.reference, unit),
        }
        for s in sentences
    ]
    for suffix, aware in (("", False), ("_CA", True)) if ca else (("", False),):
        for name, metric in (("StreamLAAL", sentence_stream_laal), ("LongYAAL", sentence_long_yaal)):
            per = [metric(s, aware, unit) for s in sentences]
            scores[name + suffix] = _mean(per)
            for row, value in zip(rows, per, strict=True):
                row[name + suffix] = value

    empty = sum(1 for s in sentences if s.is_empty)
    scores["Talks"] = len(talks)
    scores["Sentences"] = len(sentences)
    scores["EmptySentences"] = empty
    scores["DroppedUnits"] = dropped
    if empty:
        notes.append(
            f"{empty} of {len(sentences)} sentences received no output after resegmentation: latency metrics skip "
            "them, quality metrics score them as empty"
        )
    if dropped:
        notes.append(f"{dropped} output {unit}s could not be placed in any sentence and are not scored")
    return LongformReport(scores, rows, notes, sentences)


def score_longform_log(
    log: str | Path,
    references: str | Path,
    segmentation: str | Path,
    options: LongformOptions | None = None,
) -> LongformReport:
    """Score the ``instances.log`` in ``log`` (or the log file) against a reference file and a segmentation."""
    return score_longform(read_log(log), read_reference_sentences(references), read_segmentation(segmentation),
                          options)


def resegmented_records(report: LongformReport) -> list[dict[str, Any]]:
    """The resegmented sentences as OmniSTEval's ``instances.resegmented.jsonl`` objects (``emission_cu`` /
    ``emission_ca`` relative to the sentence offset; ``omnisteval longform --resegmented_hypothesis`` reads them)."""
    talk_ids = {t: k for k, t in enumerate(dict.fromkeys(s.talk for s in report.sentences))}
    out = []
    segid: dict[str, int] = {}
    for s in report.sentences:
        seg = segid.get(s.talk, 0)
        segid[s.talk] = seg + 1
        info: dict[str, Any] = {
            "index": s.index,
            "docid": talk_ids[s.talk],
            "segid": seg,
            "prediction": s.prediction,
            "reference": s.reference,
            "source_length": s.source_length,
        }
        if s.delays:
            info["emission_cu"] = list(s.delays)
            if s.elapsed is not None:
                info["emission_ca"] = list(s.elapsed)
            info["time_to_recording_end"] = s.time_to_talk_end
        out.append(info)
    return out


def write_longform_scores(out_dir: str | Path, report: LongformReport) -> list[Path]:
    """Write ``scores.longform.tsv`` (header row, value row), ``scores.longform.json``, ``metrics.longform.tsv``
    (one row per sentence) and ``instances.resegmented.jsonl`` into ``out_dir``; returns the paths."""
    out = Path(out_dir)
    paths = [out / LONGFORM_SCORES_TSV, out / LONGFORM_SCORES_JSON, out / LONGFORM_SENTENCES_TSV,
             out / RESEGMENTED_JSONL]
    paths[0].write_text(_tsv([report.scores]), encoding="utf-8")
    payload = {"scores": json.loads(report.to_json()), "notes": report.notes}
    paths[1].write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    paths[2].write_text(_tsv(report.per_instance), encoding="utf-8")
    lines = [json.dumps(r, ensure_ascii=False) for r in resegmented_records(report)]
    paths[3].write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return paths

