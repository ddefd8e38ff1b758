"""bench/peers.py: a peer's commits become the evaluation runner's records and score as simulst's do; the simulated
stream feeds the chunks and times the calls as whisper_streaming's ``--comp_unaware`` mode; the OpenAI checkpoint
names. No peer is installed or imported here (a scripted processor stands in for one)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from simulst.errors import ModelLoadError, OptionError
from simulst.evaluation.manifest import TestItem
from simulst.evaluation.scoring import ScoreOptions, score_records
from tests.shared_assets import DATA, needs_shared

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from openai_checkpoint import openai_checkpoint, openai_model_name, openai_name
from peer_systems import Commit
from peers import (
    PeerEmission,
    PeerRun,
    Utterance,
    chunk_ends,
    parse_chunks,
    peer_record,
    simulate,
    task_set,
    word_units,
)


class Scripted:
    """An online processor that commits what it is told, and records the audio it is given."""

    def __init__(self, commits: list[Commit | AssertionError], final: Commit) -> None:
        self.commits = commits
        self.final = final
        self.chunks: list[int] = []

    def insert_audio_chunk(self, audio: np.ndarray) -> None:
        self.chunks.append(audio.shape[0])

    def process_iter(self) -> Commit:
        commit = self.commits.pop(0)
        if isinstance(commit, AssertionError):
            raise commit
        return commit

    def finish(self) -> Commit:
        return self.final


def ticking(step_s: float) -> Iterator[float]:
    """A clock that advances ``step_s`` between consecutive readings."""
    t = 0.0
    while True:
        yield t
        t += step_s


def test_the_stream_is_fed_chunk_by_chunk_and_each_commit_timed_on_both_clocks() -> None:
    audio = np.zeros(36800, dtype=np.float32)  # 2.3 s
    processor = Scripted([(0.0, 0.8, " And so"), (None, None, ""), (0.9, 2.0, " my fellow")], (2.0, 2.3, " Americans"))
    clock = ticking(0.25)
    run = simulate(processor, audio, 1.0, clock=lambda: next(clock))
    assert processor.chunks == [16000, 16000, 4800]  # 1 s, 1 s, then the 0.3 s left
    assert [(e.text, e.source_ms, e.compute_ms, e.final) for e in run.emissions] == [
        (" And so", 1000.0, 250.0, False),  # each call (insert + process_iter) reads the clock twice: 0.25 s
        (" my fellow", 2300.0, 750.0, False),  # the third call read to the end of the source
        (" Americans", 2300.0, 1000.0, True),  # finish
    ]
    assert (run.emissions[0].start_ms, run.emissions[0].end_ms) == (0.0, 800.0)
    assert (run.compute_ms, run.calls, run.failed_calls) == (1000.0, 4, 0)


def test_a_call_that_asserts_commits_nothing_and_the_stream_goes_on() -> None:
    processor = Scripted([AssertionError("peer"), (0.0, 1.0, " ok")], (None, None, ""))
    run = simulate(processor, np.zeros(32000, dtype=np.float32), 1.0, clock=lambda: 0.0)
    assert [(e.text, e.source_ms) for e in run.emissions] == [(" ok", 2000.0)]
    assert run.failed_calls == 1


def test_the_records_score_as_the_runners_hand_worked() -> None:
    item = TestItem("u1", Path("u1.wav"), "and so my fellow")
    run = PeerRun((PeerEmission(" And so", 1000.0, 400.0), PeerEmission(" my", 2000.0, 900.0),
                   PeerEmission(" fellow.", 3000.0, 1500.0, final=True)), 1500.0, 4, 0)
    record = peer_record(run, Utterance(item, "en"), 0, 3000.0)
    assert record.prediction == "And so my fellow."
    assert record.delays == [1000.0, 1000.0, 2000.0, 3000.0]
    assert record.elapsed == [1400.0, 1400.0, 2900.0, 4500.0]  # source time + compute so far
    assert record.simulst["text"] == " And so my fellow." and record.simulst["n_words"] == 4
    report = score_records([record], ScoreOptions(quality_metrics=("WER_whisper",), computation_aware=True))
    # AL: |X| = 3000 ms, |Y*| = 4 words, so word i (from 0) is due at 750 i ms; tau = 4 (the word at 3000 ms):
    # (1000 + (1000 - 750) + (2000 - 1500) + (3000 - 2250)) / 4 = 625 ms
    assert report.scores["AL"] == pytest.approx(625.0)
    # AL_CA on the elapsed times, tau = 4 again (4500 is the first >= 3000; SimulEval counts that word in):
    # (1400 + (1400 - 750) + (2900 - 1500) + (4500 - 2250)) / 4 = 1425 ms
    assert report.scores["AL_CA"] == pytest.approx(1425.0)
    assert report.scores["WER_whisper"] == 0.0
    assert report.scores["ComputeRTF"] == pytest.approx(0.5)


def test_a_word_committed_in_parts_counts_once_when_it_is_complete() -> None:
    emissions = [PeerEmission(" And so Amer", 1000.0, 100.0), PeerEmission("icans, ask", 2000.0, 300.0),
                 PeerEmission(" not", 2500.0, 400.0, final=True)]
    assert word_units(emissions) == (["And", "so", "Americans,", "ask", "not"],
                                     [1000.0, 1000.0, 2000.0, 2000.0, 2500.0],
                                     [1100.0, 1100.0, 2300.0, 2300.0, 2900.0])
    assert word_units([]) == ([], [], [])


def test_chunk_and_argument_errors_are_typed() -> None:
    assert chunk_ends(5, 2) == [2, 4, 5]
    assert chunk_ends(4, 2) == [2, 4]
    assert parse_chunks("0.5,1,2") == [0.5, 1.0, 2.0]
    for bad in ("", "1,x", "0", "-1", "nan"):
        with pytest.raises(OptionError):
            parse_chunks(bad)
    with pytest.raises(OptionError):
        chunk_ends(0, 2)


def test_hugging_face_names_map_to_openais() -> None:
    pairs = {
        "model.encoder.conv1.weight": "encoder.conv1.weight",
        "model.encoder.embed_positions.weight": "encoder.positional_embedding",
        "model.encoder.layers.3.self_attn.k_proj.weight": "encoder.blocks.3.attn.key.weight",
        "model.encoder.layers.0.fc2.bias": "encoder.blocks.0.mlp.2.bias",
        "model.encoder.layers.0.final_layer_norm.weight": "encoder.blocks.0.mlp_ln.weight",
        "model.encoder.layer_norm.bias": "encoder.ln_post.bias",
        "model.decoder.embed_tokens.weight": "decoder.token_embedding.weight",
        "model.decoder.embed_positions.weight": "decoder.positional_embedding",
        "model.decoder.layers.11.encoder_attn.out_proj.weight": "decoder.blocks.11.cross_attn.out.weight",
        "model.decoder.layers.1.encoder_attn_layer_norm.bias": "decoder.blocks.1.cross_attn_ln.bias",
        "model.decoder.layers.1.self_attn_layer_norm.weight": "decoder.blocks.1.attn_ln.weight",
        "model.decoder.layers.2.fc1.weight": "decoder.blocks.2.mlp.0.weight",
        "model.decoder.layer_norm.weight": "decoder.ln.weight",
    }
    assert {hf: openai_name(hf) for hf in pairs} == pairs
    assert openai_name("proj_out.weight") is None
    with pytest.raises(ModelLoadError):
        openai_name("model.encoder.something_else.weight")


def test_the_checkpoint_holds_openais_dimensions_and_name() -> None:
    config = {"num_mel_bins": 80, "vocab_size": 51864, "max_source_positions": 1500, "d_model": 384,
              "encoder_attention_heads": 6, "encoder_layers": 4, "max_target_positions": 448,
              "decoder_attention_heads": 6, "decoder_layers": 4}
    checkpoint = openai_checkpoint({"model.decoder.layer_norm.weight": torch.ones(384),
                                    "proj_out.weight": torch.ones(2, 2)}, config)
    assert checkpoint["dims"]["n_text_layer"] == 4 and checkpoint["dims"]["n_vocab"] == 51864
    assert list(checkpoint["model_state_dict"]) == ["decoder.ln.weight"]
    assert checkpoint["model_state_dict"]["decoder.ln.weight"].dtype == torch.float16
    assert openai_model_name(checkpoint["dims"]) == "tiny.en"
    assert openai_model_name({**checkpoint["dims"], "n_text_state": 512, "n_text_layer": 6, "n_vocab": 51865}) == "base"
    with pytest.raises(ModelLoadError):
        openai_model_name({**checkpoint["dims"], "n_text_state": 100})


@needs_shared
def test_the_test_sets_are_the_quality_benchmarks() -> None:
    english = task_set("transcribe", DATA)
    assert len(english) == 56 and english[0].item.id == "jfk" and {u.language for u in english} == {"en"}
    assert english[0].item.reference is not None and english[0].item.reference.startswith("And so my fellow")
    x2en = task_set("translate", DATA)
    assert [u.language for u in x2en] == ["de"] * 10 + ["fr"] * 10
    assert x2en[0].item.reference is not None and x2en[0].item.reference.startswith("For the best views of Hong Kong")
    with pytest.raises(OptionError):
        task_set("summarise", DATA)
