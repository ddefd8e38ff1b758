"""``--encoder-precision auto`` and ``--precision auto`` (the decoder's): bfloat16 for an English-only model where the
CPU multiplies in it natively, else float32; the presets that set them; and the bfloat16 linear layer's arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from simulst.config import ModelOptions
from simulst.config.presets import PRESETS, preset_options
from simulst.models.device import cpu_has_bfloat16, precision_on
from simulst.models.whisper_net import Bf16Linear

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
flags\t\t: fpu sse2 avx2 avx512f {extra} avx512_vnni
bogomips\t: 4792.79
"""


def _cpuinfo(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / f"cpuinfo-{extra or 'none'}"
    path.write_text(CPUINFO.format(extra=extra), encoding="utf-8")
    return path


@pytest.mark.parametrize(("extra", "native"), [("avx512_bf16", True), ("amx_bf16 amx_tile", True), ("", False),
                                               ("avx512bw", False)])
def test_bfloat16_is_native_where_the_cpu_lists_its_instructions(tmp_path: Path, extra: str, native: bool) -> None:
    assert cpu_has_bfloat16(_cpuinfo(tmp_path, extra)) is native


def test_an_unreadable_cpuinfo_or_one_without_flags_means_no_native_bfloat16(tmp_path: Path) -> None:
    assert cpu_has_bfloat16(tmp_path / "missing") is False  # (another OS)
    no_flags = tmp_path / "no-flags"
    no_flags.write_text("processor\t: 0\nmodel name\t: some CPU\n", encoding="utf-8")
    assert cpu_has_bfloat16(no_flags) is False


def test_auto_is_bf16_for_an_english_only_model_on_a_cpu_with_it_and_fp32_elsewhere(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import simulst.models.device as device

    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    for native in (True, False):
        monkeypatch.setattr(device, "cpu_has_bfloat16", lambda native=native: native)
        assert precision_on("auto", cpu, multilingual=False) == ("bf16" if native else "fp32")
        assert precision_on("auto", cpu, multilingual=True) == "fp32"  # it may translate: float32
        assert precision_on("auto", gpu, multilingual=False) == "fp32"  # a GPU: float32, as before
        for given in ("fp32", "int8", "bf16"):
            assert precision_on(given, cpu, multilingual=True) == given  # named: itself, anywhere


def test_the_transcribe_presets_set_auto_for_encoder_and_decoder_and_a_given_precision_wins() -> None:
    for (task, _), preset in PRESETS.items():
        expected = "auto" if task == "transcribe" else None
        assert preset.settings.get("encoder_precision") == expected and preset.settings.get("precision") == expected
    model, _ = preset_options("transcribe", "balanced")
    assert (model.encoder_precision, model.precision) == ("auto", "auto")
    model, _ = preset_options("translate", "balanced", ModelOptions("whisper-base"))
    assert (model.encoder_precision, model.precision) == ("fp32", "fp32")  # (a translation stays in float32)
    model, _ = preset_options("transcribe", "low", ModelOptions(encoder_precision="int8", precision="int8"))
    assert (model.encoder_precision, model.precision) == ("int8", "int8")
    model, _ = preset_options("transcribe", "low", ModelOptions(precision="bf16"))
    assert (model.encoder_precision, model.precision) == ("auto", "bf16")
    # the options' own defaults: no preset, float32
    assert (ModelOptions().encoder_precision, ModelOptions().precision) == ("fp32", "fp32")


def test_the_bf16_linear_layer_rounds_its_weights_and_input_and_returns_float32() -> None:
    # hand-worked: 1 + 2^-9 is not a bfloat16 (8 bits of mantissa) and rounds to 1; 3 and 0.5 are exact
    linear = torch.nn.Linear(2, 1)
    with torch.no_grad():
        linear.weight.copy_(torch.tensor([[1.0 + 2.0**-9, 3.0]]))
        linear.bias.copy_(torch.tensor([0.5]))
    halved = Bf16Linear(linear)
    assert halved.weight.dtype == torch.bfloat16 and halved.weight.requires_grad is False
    out = halved(torch.tensor([[2.0, 1.0 + 2.0**-9]]))
    assert out.dtype == torch.float32
    assert out.item() == 1.0 * 2.0 + 3.0 * 1.0 + 0.5  # every operand rounded to bfloat16: 5.5 exactly
    assert linear(torch.tensor([[2.0, 1.0 + 2.0**-9]])).item() != 5.5  # float32 keeps the 2^-9
