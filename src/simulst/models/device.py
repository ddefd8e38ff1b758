"""The torch device a model runs on, checked where the user names it (``--device``)."""

from __future__ import annotations

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
