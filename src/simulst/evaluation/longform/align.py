"""Alignment of a talk's output units to its reference sentences: a registry of resegmenters.

* ``soft`` — OmniSTEval's SoftSegmenter (``method="soft"``). The reference words (each sentence
  ``strip().lower().split()``) and the hypothesis words are NFKC-normalised and lower cased and, with ``lang``
  set, split by the Moses tokenizer (``tokenizer.perl -l LANG -no-escape -b -a`` through the ``mosestokenizer``
  package, as OmniSTEval). A Needleman-Wunsch-like alignment without gap penalties maximises Σ sim(ref, hyp)
  over matched pairs, sim = Jaccard similarity of the two tokens' character *sets*, −∞ when exactly one of them
  is punctuation (``. ! ? , ; : - ( )`` and their CJK forms); ties prefer match, then deletion, then insertion.
  A hypothesis token left unaligned joins the sentence of the previous or the next aligned reference token,
  whichever is more similar to it (the previous one on a tie). A word goes to the sentence of its first token.
  At character level tokens match only when equal.
* ``mwer`` — cuts the hypothesis where the minimum-WER alignment (mwerSegmenter, Matusov et al. 2005, via
  ``mweralign``) puts the sentence boundaries: the resegmentation of the IWSLT 2025 StreamLAAL scripts;
  OmniSTEval does not offer it. Words only.

A resegmenter is registered with :func:`register_resegmenter`; the CLI's ``--resegmenter`` choices and help
read :data:`RESEGMENTERS`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulst.config.registry import Registry
from simulst.errors import OptionError
from simulst.evaluation.longform.inputs import LONGFORM_UNITS, check_unit, output_units

# tokens that must not align with a non-punctuation token (OmniSTEval's PUNCT, CHINESE_PUNCT, JAPAN_PUNCT)
PUNCTUATION = frozenset(".!?,;:-()") | frozenset("。！？，；：—（）") | frozenset("。！？，；：ー（）")
_MATCH, _DELETE, _INSERT = 0, 1, 2
_NO_TOKENIZATION = (None, "", "none", "zh", "ja")

logger = logging.getLogger(__name__)

#: (hypothesis units, reference sentences, Moses language, unit) -> per unit its sentence index (None: dropped)
Assign = Callable[[Sequence[str], Sequence[str], str | None, str], list[int | None]]


@dataclass(frozen=True)
class Resegmenter:
    """A way to give each output unit of a talk to one of its reference sentences.

    Attributes:
        assign: the alignment (see :data:`Assign`).
        units: the units it aligns (of :data:`~simulst.evaluation.longform.inputs.LONGFORM_UNITS`).
        summary: what it is, in a few words (the CLI's help).
    """

    assign: Assign
    units: tuple[str, ...]
    summary: str


#: The resegmenters by name, in registration order (the CLI's choices; ``soft`` is the default).
RESEGMENTERS: Registry[Resegmenter] = Registry("resegmenter")


def register_resegmenter(name: str, units: tuple[str, ...], summary: str) -> Callable[[Assign], Assign]:
    """Decorator registering an :data:`Assign` function as resegmenter ``name`` for ``units``."""

    def add(assign: Assign) -> Assign:
        RESEGMENTERS.register(name)(Resegmenter(assign, units, summary))
        return assign

    return add


def check_resegmenter(method: str, unit: str) -> Resegmenter:
    """The resegmenter ``method``; an :class:`~simulst.errors.OptionError` for an unknown unit or method, or a
    unit the method does not align."""
    check_unit(unit)
    resegmenter = RESEGMENTERS.lookup(method)
    if unit not in resegmenter.units:
        aligns = " and ".join(LONGFORM_UNITS[u] for u in resegmenter.units)
        others = " or ".join(name for name, r in RESEGMENTERS.items() if unit in r.units)
        raise OptionError(f"the {method} resegmenter aligns {aligns}; use the {others} resegmenter for the {unit} unit")
    return resegmenter


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
        method: a registered resegmenter: ``soft`` (OmniSTEval's SoftSegmenter) or ``mwer`` (mwerSegmenter's
            minimum-WER cut; words only).
        lang: Moses tokenizer language for the soft alignment (None, ``zh``, ``ja``: no tokenization).
        unit: ``word`` or ``char``.

    Only the soft method drops words: one whose first token stays unaligned with no aligned reference token
    before it and a next one of the other kind (punctuation against a word), one the Moses tokenizer turns into
    no token, and every word of a talk whose references hold no word (where OmniSTEval fails).
    """
    return check_resegmenter(method, unit).assign(hyp_units, references, lang, unit)


@register_resegmenter("soft", ("word", "char"), "OmniSTEval's SoftSegmenter (default)")
def soft_segmenter(
    hyp_units: Sequence[str], references: Sequence[str], lang: str | None, unit: str
) -> list[int | None]:
    """SoftSegmenter's sentence of every unit (see the module docstring)."""
    char_level = unit == "char"
    with _moses(lang) as tokenize:
        ref_tokens: list[str] = []
        ref_sentence: list[int] = []
        for s, sentence in enumerate(references):
            text = sentence.strip().lower()
            for word in output_units(text, unit):
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


@register_resegmenter("mwer", ("word",), "minimum-WER cut (mwerSegmenter)")
def mwer_segmenter(
    hyp_units: Sequence[str], references: Sequence[str], lang: str | None, unit: str
) -> list[int | None]:
    """mwerSegmenter's sentence of every word (``lang`` unused: the words are whitespace tokens)."""
    return _mwer_assign(hyp_units, references)


# --------------------------------------------------------------------------------------------------------------
# SoftSegmenter


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


# --------------------------------------------------------------------------------------------------------------
# mwerSegmenter


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
