"""bench/serve_load.py: a row pools the clients of several runs of N clients, worked by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from common import Item, translation_set
from serve_load import row
from simulst.server.client import ClientResult


def client(text: str, received_ms: float, source_ms: float) -> ClientResult:
    emission = {"text": text, "received_ms": received_ms, "source_ms": source_ms}
    return ClientResult(emissions=[emission], final={"text": text})


def test_a_row_pools_the_clients_of_its_runs_and_gives_the_range_of_their_means() -> None:
    # two one-word utterances of 1 s: a client's AL is its one word's delay (tau = 1); run 1 (a at 0.4 s, b at
    # 0.8 s) averages 0.6 s, run 2 (0.6 s, 1.2 s) 0.9 s; pooled: mean 0.75 s, median of 0.4, 0.6, 0.8, 1.2 = 0.7 s
    items = [Item("a", np.zeros(16000, np.float32), "yes"), Item("b", np.zeros(16000, np.float32), "no")]
    results = [client("yes", 400, 300), client("no", 800, 500), client("yes", 600, 300), client("nope", 1200, 900)]
    out = row("parallel", 2, items * 2, results, {"a": "yes", "b": "no"}, {"jobs": 10}, {"jobs": 30}, runs=2)
    assert out["AL_CA mean"] == pytest.approx(0.75)
    assert out["AL_CA p50"] == pytest.approx(0.7)
    assert out["AL_CA runs"] == "0.600-0.900"
    assert out["AL"] == pytest.approx((0.3 + 0.5 + 0.3 + 0.9) / 4)
    assert out["max lag s"] == pytest.approx(0.3)  # (1200 - 900) ms
    assert out["equal"] == "3/4"  # run 2's b wrote "nope"
    assert out["WER"] == pytest.approx(25.0)  # one word of four
    assert (out["jobs"], out["runs"]) == (10, 2)  # jobs per run


def test_one_run_is_its_own_range() -> None:
    items = [Item("a", np.zeros(16000, np.float32), "yes")]
    out = row("serial", 1, items, [client("yes", 500, 200)], {"a": "yes"}, {"jobs": 0}, {"jobs": 3})
    assert (out["AL_CA mean"], out["AL_CA runs"], out["jobs"], out["runs"]) == (pytest.approx(0.5), "0.500-0.500", 3, 1)


def test_a_translation_row_is_scored_in_bleu_against_the_english_references() -> None:
    items = [Item("de", np.zeros(16000, np.float32), "the cat sat on the mat", "de")]
    out = row("parallel", 1, items, [client("the cat sat on the mat", 900, 700)], {"de": "x"}, {"jobs": 0},
              {"jobs": 1}, task="translate")
    assert out["BLEU"] == pytest.approx(100.0) and "WER" not in out
    assert out["equal"] == "0/1"


def test_the_translation_set_is_german_and_french_with_english_references() -> None:
    items = translation_set(per_language=2)
    assert [i.language for i in items] == ["de", "de", "fr", "fr"]
    assert all(i.transcript and i.audio.ndim == 1 and i.audio.shape[0] > 16000 for i in items)
