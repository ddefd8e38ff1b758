"""Golden equality: every policy × search family gives, on the real Whisper tiny.en and the shared English speech,
exactly the emissions (text and source time), final text and work counters recorded before the core redesign
(``tests/golden/record.py`` wrote ``tests/golden/outputs.json`` with the code of that time)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import soundfile as sf
import torch

from simulst.evaluation.quality import normalize_for_wer, wer
from tests.golden.record import CONFIGS, OUTPUTS, Config, run
from tests.shared_assets import english_items, needs_shared

pytestmark = [pytest.mark.real, needs_shared]

RECORDED: dict[str, Any] = json.loads(OUTPUTS.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def models() -> Iterator[dict[tuple[str, str, bool], Any]]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as recorded: the same reduction order, bit for bit
    yield {}
    torch.set_num_threads(threads)


def test_every_configuration_was_recorded() -> None:
    assert sorted(RECORDED) == sorted(c.name for c in CONFIGS)
    assert all(len(RECORDED[c.name]) == 6 for c in CONFIGS)  # jfk + the 5 fleurs-en-dev utterances


@pytest.mark.parametrize("config", CONFIGS, ids=[c.name for c in CONFIGS])
def test_outputs_equal_the_recorded_ones(config: Config, models: dict[tuple[str, str, bool], Any]) -> None:
    torch.set_num_threads(1)
    got = run(config, models)
    for uid, want in RECORDED[config.name].items():
        assert got[uid] == want, f"{config.name} / {uid}"


def test_the_recorded_outputs_stream_and_keep_quality() -> None:
    # What the outputs above are (the equality test makes the current code produce exactly these): every online
    # configuration writes before the source ends on every utterance, emissions only extend the text in source
    # order, and restarting searches stay near offline beam search in WER.
    items = english_items()
    references = [transcript for _, _, transcript in items]
    durations = {uid: sf.info(str(path)).frames / 16.0 for uid, path, _ in items}
    rates: dict[str, float] = {}
    for config in CONFIGS:
        runs = RECORDED[config.name]
        for uid, outputs in runs.items():
            times = [ms for _, ms in outputs["emissions"]]
            before_end = [ms for ms in times if ms < durations[uid]]
            assert times == sorted(times) and "".join(text for text, _ in outputs["emissions"]) == outputs["text"]
            if config.policy == "offline":
                assert not before_end, (config.name, uid)
            else:
                assert before_end, (config.name, uid)
        if not config.cascade:
            rates[config.name] = wer([runs[uid]["text"] for uid, _, _ in items], references, normalize_for_wer)
    assert rates["offline-beam-full"] < 8.0
    assert all(len([ms for _, ms in RECORDED["la2-greedy-full"][uid]["emissions"] if ms < durations[uid]]) >= 2
               for uid, _, _ in items)
    restarting = [c.name for c in CONFIGS if not c.carry_over and not c.cascade]
    assert all(rates[name] <= 13.0 for name in restarting), rates
    assert rates["la2-greedy-full"] <= rates["offline-beam-full"] + 4.0
