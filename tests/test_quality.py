"""Quality metrics: BLEU/chrF through sacreBLEU, WER raw and normalised."""

from __future__ import annotations

import pytest
from sacrebleu.metrics import BLEU, CHRF

from simulst.errors import OptionError
from simulst.evaluation.quality import (
    bleu,
    chrf,
    edit_distance,
    normalize_for_wer,
    quality_scores,
    sacrebleu_tokenizers,
    wer,
    whisper_normalize,
)

HYPS = ["And so my fellow Americans, ask not what your country can do for you.", "The cat sat on the mat."]
REFS = ["And so my fellow Americans, ask not what your country can do for you, ask what you can do.",
        "The cat is on the mat."]


def test_bleu_and_chrf_equal_sacrebleu() -> None:
    assert bleu(HYPS, REFS) == pytest.approx(BLEU(tokenize="13a").corpus_score(HYPS, [REFS]).score)
    assert chrf(HYPS, REFS) == pytest.approx(CHRF().corpus_score(HYPS, [REFS]).score)
    assert bleu(REFS, REFS) == pytest.approx(100.0)
    # case-sensitive
    assert bleu([h.lower() for h in HYPS], REFS) < bleu(HYPS, REFS)


def test_bleu_tokenizers() -> None:
    assert "zh" in sacrebleu_tokenizers() and "13a" in sacrebleu_tokenizers()
    assert bleu(["我 爱 北京 天安门"], ["我爱北京天安门"], "zh") == pytest.approx(100.0)
    assert bleu(["我 爱 北京 天安门"], ["我爱北京天安门"], "13a") < 100.0
    with pytest.raises(OptionError):
        bleu(HYPS, REFS, "nope")


def test_edit_distance() -> None:
    assert edit_distance([], []) == 0
    assert edit_distance(["a"], []) == 1
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance(["a", "b", "c"], ["a", "c"]) == 1


def test_wer_raw_and_normalised() -> None:
    # raw: "Hello, world." vs "hello world" -> 2 substitutions of 2 words; + "foo bar" vs "foo": 1 insertion.
    assert wer(["Hello, world.", "foo bar"], ["hello world", "foo"]) == pytest.approx(100.0 * 3 / 3)
    assert wer(["Hello, world.", "foo bar"], ["hello world", "foo"], normalize_for_wer) == pytest.approx(100 / 3)
    assert wer(["x"], [""]) == 0.0  # no reference words: 0, as SimulEval


def test_normaliser() -> None:
    assert normalize_for_wer("  And so, my fellow Americans—ask not!  ") == "and so my fellow americans ask not"
    assert normalize_for_wer("It’s a well-known «fact»; isn't it?") == "its a well known fact isnt it"
    assert normalize_for_wer("ＡＢＣ") == "abc"  # NFKC


def test_whisper_normaliser_is_whispers_own() -> None:
    # known pairs of openai/whisper's EnglishTextNormalizer (its README's examples and its spelling table)
    assert whisper_normalize("Mr. Smith's colour, twenty-five!") == "mister smith is color 25"
    assert whisper_normalize("It's 3.5 percent, isn't it?") == "it is 3.5% is not it"
    assert whisper_normalize("And so, my fellow Americans—ask not") == "and so my fellow americans ask not"
    assert whisper_normalize("one hundred and two dollars") == "$102"
    # the two normalisers differ where Whisper's is the one published figures use
    assert wer(["twenty five"], ["25"], whisper_normalize) == 0.0 and wer(["twenty five"], ["25"], normalize_for_wer)


def test_quality_scores_dispatch() -> None:
    out = quality_scores(["BLEU", "chrF", "WER", "WER_norm", "WER_whisper"], HYPS, REFS)
    assert set(out) == {"BLEU", "chrF", "WER", "WER_norm", "WER_whisper"}
    with pytest.raises(OptionError):
        quality_scores(["METEOR"], HYPS, REFS)


def test_unknown_tokenizer_is_refused_before_any_run() -> None:
    from simulst.evaluation.scoring import ScoreOptions

    with pytest.raises(OptionError, match="tokenizer"):
        ScoreOptions(sacrebleu_tokenizer="nope")
    with pytest.raises(OptionError, match="latency metric"):
        ScoreOptions(latency_metrics=("XX",))
    with pytest.raises(OptionError, match="spm"):
        ScoreOptions(latency_unit="spm")
