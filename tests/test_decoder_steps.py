"""A decoder step of a few beams on the CPU: float32 linear layers as W·xᵀ (``StepLinear``) and the beams' queries
over their one shared encoding side by side (``Attention._attend_shared``) compute what the plain layers compute."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import simulst.models.whisper_net as whisper_net
from simulst.models.loading import load_model
from simulst.models.whisper_net import Attention, StepLinear
from simulst.types import Costs
from tests.shared_assets import needs_shared
from tests.toy import ENGLISH_VOCAB, make_checkpoint


def test_a_step_linear_layer_multiplies_a_few_rows_by_hand() -> None:
    # hand-worked: W = [[1, 2], [3, 4], [5, 6]], b = [1, 0, -1]; rows x1 = [1, 1], x2 = [2, -1]
    linear = torch.nn.Linear(2, 3)
    with torch.no_grad():
        linear.weight.copy_(torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
        linear.bias.copy_(torch.tensor([1.0, 0.0, -1.0]))
    step = StepLinear(linear)
    out = step(torch.tensor([[1.0, 1.0], [2.0, -1.0]]))
    assert out.tolist() == [[4.0, 7.0, 10.0], [1.0, 2.0, 3.0]]
    assert out.is_contiguous()
    assert step.weight is linear.weight and step.bias is linear.bias  # shared, not copied
    assert set(step.state_dict()) == {"weight", "bias"}  # the checkpoint's names


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 9])
@pytest.mark.parametrize("bias", [True, False])
def test_a_step_linear_layer_equals_the_linear_layer_for_any_rows(rows: int, bias: bool) -> None:
    torch.manual_seed(rows)
    linear = torch.nn.Linear(48, 80, bias=bias)
    step = StepLinear(linear)
    for shape in ((rows, 48), (rows, 1, 48), (1, rows, 48)):
        x = torch.randn(shape)
        got, want = step(x), linear(x)
        assert got.shape == want.shape and got.is_contiguous()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_queries_of_several_beams_over_one_shared_encoding_equal_the_broadcast_attention() -> None:
    torch.manual_seed(0)
    attention = Attention(64, 4).eval()
    beams, positions, frames = 3, 2, 50
    x = torch.randn(beams, positions, 64)
    kv = (torch.randn(1, 4, frames, 16), torch.randn(1, 4, frames, 16))
    with torch.inference_mode():
        got = attention.attend(x, kv, causal=False)
        expanded = (kv[0].expand(beams, -1, -1, -1), kv[1].expand(beams, -1, -1, -1))
        q = attention.split(attention.q_proj(x))
        out = F.scaled_dot_product_attention(q, *expanded)
        want = attention.out_proj(out.transpose(1, 2).reshape(beams, positions, 64))
    assert got.shape == (beams, positions, 64)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(300, 64), (1031, 48)])
def test_the_screen_is_the_embedding_packed_as_torch_ao_quantises_it(shape: tuple[int, int]) -> None:
    # the screened projection's int8 copy of E, packed once, against torch.ao's quantize_dynamic of a linear layer
    torch.manual_seed(shape[0])
    weight = torch.randn(*shape) * torch.rand(shape[0], 1)  # rows of different ranges: a scale each
    head = torch.nn.Linear(shape[1], shape[0], bias=False)
    head.weight = torch.nn.Parameter(weight, requires_grad=False)
    reference = whisper_net._int8_linears(torch.nn.Sequential(head))[0]._packed_params._packed_params
    packed = whisper_net.int8_packed(weight)
    (q, bias), (q_ref, bias_ref) = (torch.ops.quantized.linear_unpack(p) for p in (packed, reference))
    assert bias is None and bias_ref is None and q.q_per_channel_axis() == q_ref.q_per_channel_axis() == 0
    assert torch.equal(q.int_repr(), q_ref.int_repr())
    assert torch.equal(q.q_per_channel_scales(), q_ref.q_per_channel_scales())
    assert torch.equal(q.q_per_channel_zero_points(), q_ref.q_per_channel_zero_points())
    x = torch.randn(5, shape[1])
    assert torch.equal(torch.ops.quantized.linear_dynamic(x, packed, reduce_range=True),
                       torch.ops.quantized.linear_dynamic(x, reference, reduce_range=True))


@needs_shared
def test_a_float32_model_on_the_cpu_steps_its_beams_as_the_plain_layers_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = make_checkpoint(tmp_path / "en", ENGLISH_VOCAB)
    model = load_model(str(directory), precision="fp32", encoder_precision="fp32")
    decoder = model.net.model.decoder
    steps = [m for m in decoder.modules() if isinstance(m, StepLinear)]
    assert steps and not any(type(m) is torch.nn.Linear for m in decoder.layers.modules())
    assert not any(isinstance(m, StepLinear) for m in model.net.model.encoder.modules())
    assert not any(isinstance(m, StepLinear) for m in load_model(str(directory), precision="bf16").net.modules())
    audio = (0.1 * np.sin(np.arange(32000) / 7.0)).astype(np.float32)
    enc = model.encode(audio, Costs())
    _, state = model.start(enc, [], Costs())
    beams = model.select(state, torch.tensor([0, 0, 0]))
    tokens = torch.tensor([300, 301, 302])
    got, _ = model.step(beams, tokens, Costs())
    monkeypatch.setattr(whisper_net, "STEP_ROWS", (0, -1))  # every row count the plain way
    want, _ = model.step(beams, tokens, Costs())
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
