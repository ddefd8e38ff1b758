"""bench/language_detection.py: its rules pin as named (``first``: at the first decode; ``sure``: the module's
rule) and each records the pin, leaving the module's rule as it was."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from language_detection import Pin, _wrong, rule, utterances
from simulst.models.base import Encoded
from simulst.streaming import prompt as prompt_module
from simulst.streaming.prompt import PromptBuilder
from simulst.types import Costs
from tests.shared_assets import needs_shared


class SureGerman:
    """A model that detects German with probability 0.95 in any audio."""

    sample_rate = 16000

    def language_prompt(self, enc: Encoded, costs: Costs) -> tuple[list[int], float | None]:
        return [1, 7, 3], 0.95


def encoded(seconds: float) -> Encoded:
    return Encoded(frames=None, audio_samples=round(seconds * 16000))  # type: ignore[arg-type]


def test_first_pins_at_the_first_decode_and_sure_waits_for_3_s() -> None:
    saved = prompt_module.LANGUAGE_MIN_S, prompt_module.LANGUAGE_CONFIDENCE
    for name, pinned_from in (("first", 1.0), ("sure", 3.0)):
        pins: list[Pin] = []
        builder = PromptBuilder(0, "all")
        with rule(name, pins, {7: "de"}):
            for seconds in (1.0, 2.0, 3.0, 4.0):
                assert builder.pin(SureGerman(), encoded(seconds), Costs()) == (1, 7, 3)  # type: ignore[arg-type]
        assert pins == [Pin("de", pinned_from)], name
        assert saved == (prompt_module.LANGUAGE_MIN_S, prompt_module.LANGUAGE_CONFIDENCE)
        assert PromptBuilder.pin.__name__ == "pin"  # (the recording wrapper removed)


@needs_shared
def test_the_utterances_are_the_40_fleurs_multi_ones_de_fr_with_english_references() -> None:
    found = utterances()
    assert len(found) == 40 and {u.language for u in found} == {"de", "fr", "es", "pt"}
    german = next(u for u in found if u.item.id == "fleurs-de-000")
    assert german.language == "de" and str(german.item.reference).startswith("For the best views of Hong Kong")
    assert np.isclose(german.item.duration_s, 17.94)
    transcripts = {u.item.id: u.item.reference for u in utterances("transcribe")}  # (to transcribe: the FLEURS text)
    assert str(transcripts["fleurs-de-000"]).startswith("für die besten aussichten auf hongkong")
    english = utterances("transcribe", english=True)
    assert len(english) == 56 and {u.language for u in english} == {"en"} and english[0].item.id == "jfk"


def test_the_wrong_detections_are_read_by_prefix_length() -> None:
    # prefixes of 1, 1.5, 2, 3, 4, 6 s and the whole utterance
    table = [{"wrong_max_p": p} for p in ("0.74", "0.91", "0.86", "0.66", "0.64", "-", "-")]
    assert _wrong(table, 3.0, math.inf) == "0.66" and _wrong(table, 0.0, 3.0) == "0.91"
    assert _wrong(table, 6.0, math.inf) == "-"
