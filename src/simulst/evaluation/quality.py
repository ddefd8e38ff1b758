"""Quality metrics over a test set: BLEU and chrF (sacreBLEU) for translation, WER for transcription.

* ``BLEU`` — sacreBLEU corpus BLEU on detokenised, case-sensitive text with the ``13a`` tokenizer by default
  (``--sacrebleu-tokenizer zh`` / ``ja-mecab`` for Chinese / Japanese output). Equal to SimulEval's ``BLEU``
  scorer on the same log (SimulEval also scores 0 when sacreBLEU raises).
* ``chrF`` — sacreBLEU corpus chrF (character 6-grams, β = 2), case-sensitive.
* ``WER`` — SimulEval's definition: word-level Levenshtein distance on the raw whitespace-split text,
  100 · Σ distance / Σ |reference words| (case and punctuation count as errors).
* ``WER_norm`` — the usual Whisper-style English WER: both sides pass :func:`normalize_for_wer` first
  (Unicode NFKC, lower case, dashes and slashes become spaces, all other punctuation is deleted, whitespace
  collapsed). Read this one for ASR: the FLEURS transcripts in ``../shared/data`` are lower case without most
  punctuation, while Whisper writes cased, punctuated text.
* ``WER_whisper`` — English WER after Whisper's own ``EnglishTextNormalizer`` (the ``whisper-normalizer``
  package; Radford et al. 2022, appendix C): besides case and punctuation it spells numbers as digits, expands
  contractions and titles ("it's" → "it is", "Mr." → "mister") and unifies British and American spelling, so
  the figures compare with published Whisper WERs. The figure to quote for English transcription.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Callable, Sequence
from functools import cache

from simulst.config.registry import Registry
from simulst.errors import OptionError
from simulst.sequences import edit_distance

logger = logging.getLogger(__name__)

DEFAULT_SACREBLEU_TOKENIZER = "13a"

#: A corpus quality metric: (hypotheses, references, sacreBLEU tokenizer) -> score.
QualityMetric = Callable[[Sequence[str], Sequence[str], str], float]

#: The quality metrics by SimulEval name, in registration order (the CLI's choices); see :data:`QUALITY_METRICS`.
QUALITY_REGISTRY: Registry[QualityMetric] = Registry("quality metric")


def register_quality_metric(name: str) -> Callable[[QualityMetric], QualityMetric]:
    """Decorator adding a corpus quality metric to :data:`QUALITY_REGISTRY` under a SimulEval name."""
    return QUALITY_REGISTRY.register(name)

_TO_SPACE = re.compile(r"[\-/–—‐‑‒―·•]")  # joiners: "well-known" → "well known", as in Whisper's normaliser
_SPACES = re.compile(r"\s+")


def sacrebleu_tokenizers() -> tuple[str, ...]:
    """The tokenizer names sacreBLEU's BLEU accepts (``13a``, ``zh``, ``ja-mecab``, ``char``, ...)."""
    from sacrebleu.metrics import BLEU  # (sacreBLEU is imported where it scores: the CLI's parser reads this module)

    return tuple(BLEU.TOKENIZERS)


def check_sacrebleu_tokenizer(name: str) -> None:
    """Raise :class:`~simulst.errors.OptionError` for a tokenizer sacreBLEU's BLEU does not know."""
    if name not in sacrebleu_tokenizers():
        raise OptionError(f"unknown sacrebleu tokenizer {name!r}; choose from {', '.join(sacrebleu_tokenizers())}")


def bleu(hypotheses: Sequence[str], references: Sequence[str], tokenizer: str = DEFAULT_SACREBLEU_TOKENIZER) -> float:
    """Corpus BLEU (sacreBLEU; Post 2018) on detokenised, case-sensitive text; 0 when sacreBLEU fails, as in
    SimulEval."""
    from sacrebleu.metrics import BLEU

    check_sacrebleu_tokenizer(tokenizer)
    try:
        return float(BLEU(tokenize=tokenizer).corpus_score(list(hypotheses), [list(references)]).score)
    except Exception as exc:  # SimulEval's SacreBLEUScorer logs and returns 0 on any sacreBLEU error
        logger.error("sacrebleu failed: %s", exc)
        return 0.0


def chrf(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus chrF (Popović 2015; sacreBLEU's CHRF: character 6-grams, β = 2, case-sensitive)."""
    from sacrebleu.metrics import CHRF

    return float(CHRF().corpus_score(list(hypotheses), [list(references)]).score)


def normalize_for_wer(text: str) -> str:
    """Whisper-style English WER normalisation: NFKC, lower case, dashes/slashes → space, other punctuation
    (Unicode category P*) deleted, whitespace collapsed.

    >>> normalize_for_wer("And so, my fellow Americans—ask not!")
    'and so my fellow americans ask not'
    >>> normalize_for_wer("It's 25-30 years.")
    'its 25 30 years'
    """
    text = unicodedata.normalize("NFKC", text).lower()
    text = _TO_SPACE.sub(" ", text)
    text = "".join(ch for ch in text if not unicodedata.category(ch).startswith("P"))
    return _SPACES.sub(" ", text).strip()


@cache
def _english_normalizer() -> Callable[[str], str]:
    from whisper_normalizer.english import EnglishTextNormalizer  # builds its spelling tables once

    normalizer: Callable[[str], str] = EnglishTextNormalizer()
    return normalizer


def whisper_normalize(text: str) -> str:
    """Whisper's ``EnglishTextNormalizer`` (the ``whisper-normalizer`` package), whitespace collapsed.

    >>> whisper_normalize("It's 25-30 years, Mr. Smith.")
    'it is 25 30 years mister smith'
    """
    return _SPACES.sub(" ", _english_normalizer()(text)).strip()


def wer(
    hypotheses: Sequence[str], references: Sequence[str], normalize: Callable[[str], str] | None = None
) -> float:
    """Corpus word error rate in percent: 100 · Σ_i dist(hyp_i, ref_i) / Σ_i |ref_i| on whitespace-split words.

    With ``normalize=None`` this is SimulEval's ``WER`` scorer (raw text); pass :func:`normalize_for_wer` for
    the normalised WER. Returns 0 when the references hold no word (SimulEval's convention).
    """
    distance = 0
    ref_words = 0
    for hyp, ref in zip(hypotheses, references, strict=True):
        if normalize is not None:
            hyp, ref = normalize(hyp), normalize(ref)
        h, r = hyp.split(), ref.split()
        distance += edit_distance(h, r)
        ref_words += len(r)
    if ref_words == 0:
        return 0.0
    return 100.0 * distance / ref_words


register_quality_metric("BLEU")(bleu)


@register_quality_metric("chrF")
def _chrf(hypotheses: Sequence[str], references: Sequence[str], sacrebleu_tokenizer: str) -> float:
    """chrF; see :func:`chrf` (character n-grams: no tokenizer)."""
    return chrf(hypotheses, references)


@register_quality_metric("WER")
def _wer(hypotheses: Sequence[str], references: Sequence[str], sacrebleu_tokenizer: str) -> float:
    """SimulEval's WER on the raw text; see :func:`wer`."""
    return wer(hypotheses, references)


@register_quality_metric("WER_norm")
def _wer_norm(hypotheses: Sequence[str], references: Sequence[str], sacrebleu_tokenizer: str) -> float:
    """WER after :func:`normalize_for_wer`; see :func:`wer`."""
    return wer(hypotheses, references, normalize_for_wer)


@register_quality_metric("WER_whisper")
def _wer_whisper(hypotheses: Sequence[str], references: Sequence[str], sacrebleu_tokenizer: str) -> float:
    """WER after :func:`whisper_normalize`; see :func:`wer`."""
    return wer(hypotheses, references, whisper_normalize)


#: The registered quality metric names (the default of every scorer).
QUALITY_METRICS = tuple(QUALITY_REGISTRY)


def check_quality_metrics(names: Sequence[str]) -> None:
    """Raise :class:`~simulst.errors.OptionError` for a name that is not a registered quality metric."""
    for name in names:
        QUALITY_REGISTRY.lookup(name)


def quality_scores(
    metrics: Sequence[str],
    hypotheses: Sequence[str],
    references: Sequence[str],
    sacrebleu_tokenizer: str = DEFAULT_SACREBLEU_TOKENIZER,
) -> dict[str, float]:
    """The named corpus quality metrics (names from :data:`QUALITY_METRICS`), in the order asked."""
    check_quality_metrics(metrics)
    return {name: QUALITY_REGISTRY[name](hypotheses, references, sacrebleu_tokenizer) for name in metrics}
