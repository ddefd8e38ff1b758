"""The blockwise searches on the real Whisper tiny.en and the jfk recording (../shared assets)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from simulst.config import PolicyOptions, SearchOptions, StreamOptions
from simulst.evaluation.quality import whisper_normalize
from simulst.models.loading import load_model
from simulst.models.whisper import WhisperModel
from simulst.search import BeamSearch
from simulst.sequences import edit_distance
from simulst.streaming.session import Session
from simulst.types import Costs, Emission, Hypothesis
from tests.shared_assets import WHISPER_TINY_EN, needs_shared
from tests.toy import push_in_pieces, stream_search

pytestmark = [pytest.mark.real, needs_shared]

BLOCKWISE = ("bwbs", "ibwbs", "ibwbs2", "rewind")


@pytest.fixture(scope="module")
def model() -> WhisperModel:
    torch.manual_seed(0)
    return load_model(str(WHISPER_TINY_EN))


def stream(model: WhisperModel, audio: np.ndarray, search: str, chunk_ms: float, policy: str = "la-2", beam: int = 5,
           **options_: float) -> tuple[Session, list[Emission]]:
    options = StreamOptions(chunk_ms=chunk_ms, policy=PolicyOptions.parse(policy), search=SearchOptions(search, beam),
                            **options_)
    session = Session(model, options)
    return session, push_in_pieces(session, audio, session.chunk_samples)


@pytest.fixture(scope="module")
def offline(model: WhisperModel, jfk: np.ndarray) -> tuple[Hypothesis, Costs]:
    """Offline beam search (5 beams) on the whole of jfk: its best hypothesis and its work (searched once)."""
    costs = Costs()
    best = stream_search(BeamSearch(5)).search(model, model.encode(jfk, costs), [], 224, costs, final=True)[0]
    return best, costs


@pytest.mark.parametrize("search", BLOCKWISE)
def test_one_final_chunk_equals_offline_beam_search(model: WhisperModel, jfk: np.ndarray,
                                                    offline: tuple[Hypothesis, Costs], search: str) -> None:
    # (the whole source in the audio buffer: no segment cut at 5 s)
    session, emissions = stream(model, jfk, search, 60_000.0, segment_s=30.0, max_buffer_s=30.0)
    [emission] = emissions
    best, costs = offline
    assert emission.tokens == best.tokens
    assert session.costs.decoder_calls == costs.decoder_calls


def test_beam_agreement_commits_no_later_than_local_agreement(model: WhisperModel, jfk: np.ndarray) -> None:
    # Over the same beam search of 3, BA-2 and LA-2 see the same hypotheses until one of them first commits; there
    # BA-2 commits at least LA-2's prefix (one of the previous beams is the previous best), so its first words come
    # no later. Both transcribe jfk nearly as offline decoding does.
    reference = whisper_normalize("And so my fellow Americans, ask not what your country can do for you, "
                                  "ask what you can do for your country.").split()
    ba = stream(model, jfk, "beam", 1000.0, policy="ba-2", beam=3)[1]
    la = stream(model, jfk, "beam", 1000.0, policy="la-2", beam=3)[1]
    assert ba[0].source_ms <= la[0].source_ms
    for emissions in (ba, la):
        assert edit_distance(whisper_normalize("".join(e.text for e in emissions)).split(), reference) <= 3
