"""Many streams through one model (:mod:`simulst.streaming.batching`): batched rounds give every stream the output
it gets alone, the calls really are batched, and a failure stays in its own stream."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from simulst.audio.io import load_audio
from simulst.config import PolicyOptions, SearchOptions, StreamOptions
from simulst.evaluation.quality import normalize_for_wer
from simulst.models.loading import load_model
from simulst.models.whisper import WhisperModel
from simulst.streaming.batching import Batcher, SerialRunner, ThreadRunner
from simulst.types import Costs
from tests.shared_assets import english_items, needs_shared
from tests.toy import decode_in_rounds

pytestmark = [needs_shared, pytest.mark.real]


@pytest.fixture(scope="module")
def model() -> WhisperModel:
    return load_model()


@pytest.fixture(scope="module")
def audios() -> list[np.ndarray]:
    items = english_items()[:3]  # jfk + two FLEURS utterances, ~5 s each: different speech, different lengths
    return [load_audio(path)[: 16000 * 5 - 1000 * i] for i, (_, path, _) in enumerate(items)]


def test_batched_streams_equal_streams_alone(model: WhisperModel, audios: list[np.ndarray]) -> None:
    # different policies and searches side by side: LA-2 greedy, hold-2 with a 3-beam search, AlignAtt
    options = [
        StreamOptions(),
        StreamOptions(policy=PolicyOptions.parse("hold-2"), search=SearchOptions(name="beam", beam=3)),
        StreamOptions(policy=PolicyOptions.parse("alignatt")),
    ]
    alone = decode_in_rounds(SerialRunner(), model, audios, options)
    batcher = Batcher(model, max_streams=4)
    together = decode_in_rounds(batcher, model, audios, options)
    assert together == alone
    assert "my fellow americans ask not" in normalize_for_wer(alone[0])  # the first 5 s of jfk
    stats = batcher.stats
    assert stats.largest["encode"] == 3 and stats.calls["encode"] > stats.batches["encode"]  # one encoder call
    for kind in ("judge", "start", "step"):  # the decoder passes of streams together
        assert stats.largest[kind] >= 2 and stats.calls[kind] > stats.batches[kind], kind
    batcher.close()


def test_batched_bf16_streams_equal_streams_alone(audios: list[np.ndarray]) -> None:
    # the bfloat16 model's fused products (every layer's cross keys/values in one) over a batch of windows
    model = load_model(precision="bf16", encoder_precision="bf16")
    options = [StreamOptions(search=SearchOptions(name="beam", beam=3))] * len(audios)
    alone = decode_in_rounds(SerialRunner(), model, audios, options)
    batcher = Batcher(model, max_streams=4)
    assert decode_in_rounds(batcher, model, audios, options) == alone
    assert batcher.stats.largest["encode"] == 3
    batcher.close()


def test_a_failing_call_fails_only_its_stream(model: WhisperModel, audios: list[np.ndarray]) -> None:
    batcher = Batcher(model, max_streams=4)
    view = batcher.view(model)
    good = [Costs(), Costs()]

    def encode(i: int) -> Callable[[], Any]:
        return lambda: view.encode(audios[i][:16000], good[i])

    def bad() -> Any:
        return view.encode(np.zeros((2, 2, 2), dtype=np.float32), Costs())  # not mono audio: the encoder fails

    def raises() -> Any:
        raise ValueError("a stream's own bug")

    results = batcher.run([encode(0), bad, encode(1), raises])
    assert isinstance(results[1], Exception) and isinstance(results[3], ValueError)
    direct = [model.encode(audios[i][:16000], Costs()) for i in (0, 1)]
    for got, want in zip((results[0], results[2]), direct, strict=True):
        assert not isinstance(got, Exception)
        assert got.audio_samples == want.audio_samples
        assert np.allclose(got.frames.numpy(), want.frames.numpy(), atol=1e-4)
    assert good[0].encoder_calls == 1 and good[1].encoder_calls == 1  # each alone after the batch failed
    # the batcher goes on: a later round runs normally
    assert all(not isinstance(r, Exception) for r in batcher.run([encode(0), encode(1)]))
    batcher.close()


def test_views_of_other_models_pass_through(model: WhisperModel) -> None:
    batcher = Batcher(model)
    variant = model.variant("en", "transcribe")
    assert isinstance(batcher.view(variant), WhisperModel) and batcher.view(variant) is not variant
    other = load_model()  # other weights: not batched with these
    assert batcher.view(other) is other
    with pytest.raises(ValueError, match="max_streams"):
        batcher.run([lambda: 0] * 65)
    batcher.close()


def test_prefix_and_no_speech_passes_of_streams_together_equal_each_alone(audios: list[np.ndarray]) -> None:
    model = load_model(window="audio")  # windows of different lengths: the cross keys/values are padded
    encs = [model.encode(audio[: 16000 * (2 + i)], Costs()) for i, audio in enumerate(audios)]
    prompt = model.prompt(encs[0], Costs())
    prefixes = [model.tokenizer.encode(text) for text in (" And so my fellow", "", " However, due to the slow")]
    costs = [Costs() for _ in encs]
    together = model.start_many(encs, prefixes, costs, [prompt] * 3)
    assert costs[0].decoder_calls == 1 and [c.decoder_positions for c in costs] == [len(prompt) + len(p)
                                                                                   for p in prefixes]
    for enc, prefix, (logp, state) in zip(encs, prefixes, together, strict=True):
        want, alone = model.start(enc, prefix, Costs(), prompt)
        assert torch.allclose(logp, want, atol=1e-4) and int(logp.argmax()) == int(want.argmax())
        assert state.length == alone.length
        for (k, v), (k1, v1) in zip(state.cache, alone.cache, strict=True):
            assert k.shape == k1.shape and torch.allclose(k, k1, atol=1e-4) and torch.allclose(v, v1, atol=1e-4)
        # the state goes on like the one started alone
        step, _ = model.step(state, logp.argmax().view(1), Costs())
        step1, _ = model.step(alone, want.argmax().view(1), Costs())
        assert torch.allclose(step, step1, atol=1e-4)
    judged = model.no_speech_many(encs, [Costs() for _ in encs])
    assert judged == pytest.approx([model.no_speech_prob(enc, Costs()) for enc in encs], abs=1e-5)


def test_streams_side_by_side_equal_streams_alone(model: WhisperModel, audios: list[np.ndarray]) -> None:
    # ThreadRunner(2): two jobs at once, each on one torch thread: every stream's output is its output alone
    options = [StreamOptions(), StreamOptions(policy=PolicyOptions.parse("alignatt")), StreamOptions()]
    alone = decode_in_rounds(SerialRunner(), model, audios, options)
    runner = ThreadRunner(workers=2)
    assert decode_in_rounds(runner, model, audios, options) == alone
    runner.close()


def test_thread_runner_runs_jobs_at_once_on_one_torch_thread_each() -> None:
    runner = ThreadRunner(workers=2)
    both = threading.Barrier(2, timeout=10)  # each job waits for the other: only side by side do both end

    def job() -> int:
        both.wait()
        return torch.get_num_threads()

    caller = torch.get_num_threads()
    assert runner.run([job, job]) == [1, 1]
    assert torch.get_num_threads() == caller  # the workers' setting is their own
    runner.close()
    serial = SerialRunner()
    assert serial.workers == 1 and serial.run([torch.get_num_threads]) == [caller]  # one worker: all threads
    serial.close()
    with pytest.raises(ValueError, match="workers"):
        ThreadRunner(workers=0)


def test_serve_runs_workers_jobs_at_once_on_a_cpu(model: WhisperModel, capsys: pytest.CaptureFixture[str]) -> None:
    from simulst.cli.main import build_parser, main
    from simulst.cli.serve import server_config
    from simulst.server.service import Service

    for flags, workers in (([], torch.get_num_threads()), (["--workers", "1"], 1), (["--workers", "3"], 3)):
        service = Service(model, server_config(build_parser().parse_args(["serve", *flags])))
        assert isinstance(service.runner, ThreadRunner) and service.runner.workers == workers, flags
        service.runner.close()
    batched = Service(model, server_config(build_parser().parse_args(["serve", "--batching", "on"])))
    assert isinstance(batched.runner, Batcher)
    batched.runner.close()
    assert main(["serve", "--workers", "-1"]) == 2
    assert "--workers must be >= 0" in capsys.readouterr().err
