"""The torch device a model runs on, checked where the user names it (``--device``), and what its CPU computes
fast."""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from simulst.errors import OptionError


def torch_device(name: str) -> torch.device:
    """The torch device ``name`` (``cpu``, ``cuda``, ``cuda:1``, ...).

    Raises:
        OptionError: a name torch does not know, or a CUDA device this PyTorch build or machine does not have.
    """
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise OptionError(f"unknown torch device {name!r} (cpu, cuda, cuda:1, ...)") from err
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise OptionError(f"device {name!r}: this PyTorch sees no CUDA GPU (use --device cpu)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise OptionError(f"device {name!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s)")
    return device


BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})  # /proc/cpuinfo's names of bfloat16 multiply instructions


@functools.cache
def cpu_has_bfloat16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU multiplies in bfloat16 natively (AVX512-BF16 or AMX-BF16, as Linux lists its flags): there
    a bfloat16 matrix product runs faster than a float32 one; elsewhere PyTorch emulates it, slower than float32.
    False where ``cpuinfo`` cannot be read (another OS) or lists no flags."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("flags"):
            return not BF16_CPU_FLAGS.isdisjoint(line.partition(":")[2].split())
    return False


def precision_on(precision: str, device: torch.device, multilingual: bool) -> str:
    """The precision ``precision`` (of the encoder or of the decoder) runs as on ``device`` for a model that is
    ``multilingual`` or not: ``auto`` is ``bf16`` for an English-only model on a CPU that multiplies in bfloat16
    natively (:func:`cpu_has_bfloat16`), else ``fp32`` (a multilingual model may translate, and Whisper base's
    translation of long talks lost BLEU with a bfloat16 encoder, and with a bfloat16 decoder); any other value is
    itself."""
    if precision != "auto":
        return precision
    return "bf16" if device.type == "cpu" and not multilingual and cpu_has_bfloat16() else "fp32"
