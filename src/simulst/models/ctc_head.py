"""A small CTC head on a frozen speech encoder, and its file format.

The head maps encoder frames (T, D) to CTC log-posteriors (T, V) over a small label set (characters, see
:mod:`simulst.ctc.text`)::

    LayerNorm(D) -> Linear(D, H) -> L x [Conv1d(H, H, k) -> GELU -> dropout, residual] -> LayerNorm(H) -> Linear(H, V)

The convolutions give each frame a few frames of context on both sides (receptive field 1 + L·(k−1) frames);
the encoder itself stays frozen, so one encoder pass serves the decoder and the head.

File format: one ``.safetensors`` file. Tensors are the module's state dict stored as float16 (the head is
small; float16 halves the file), and the safetensors metadata key ``simulst_ctc_head`` holds a JSON
:class:`HeadConfig` (architecture, label symbols, the encoder it was trained on, a training summary).

Which encoder: :class:`EncoderSignature` records the Whisper dimensions and the sum of |conv1.weight|, a
checksum that tells checkpoints apart yet agrees between an HF checkpoint and its CTranslate2 conversion.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from simulst.errors import ModelLoadError
from simulst.models.ctc_vocabulary import CharVocabulary

METADATA_KEY = "simulst_ctc_head"
FORMAT_VERSION = 1
SAMPLES_PER_FRAME = 320  # Whisper: hop 160 samples, then a stride-2 convolution -> 20 ms per encoder frame


@dataclass(frozen=True)
class EncoderSignature:
    """Identifies the encoder a head was trained on.

    Attributes:
        model_type: ``whisper``.
        d_model, encoder_layers, num_mel_bins, vocab_size: the checkpoint's dimensions.
        conv1_abs_sum: Σ|conv1.weight| of the encoder (float32).
        name: a human-readable name (e.g. ``whisper-tiny.en``); informative only.
    """

    model_type: str
    d_model: int
    encoder_layers: int
    num_mel_bins: int
    vocab_size: int
    conv1_abs_sum: float
    name: str = ""

    @classmethod
    def of(cls, model: Any, name: str = "") -> EncoderSignature:
        """The signature of a loaded :class:`~simulst.models.whisper.WhisperModel`."""
        dims = model.dims
        conv = model.net.model.encoder.conv1.weight
        return cls("whisper", dims.d_model, dims.encoder_layers, dims.num_mel_bins, dims.vocab_size,
                   float(conv.detach().float().abs().sum()), name)

    def matches(self, other: EncoderSignature) -> bool:
        """Same architecture and weights (checksum within 0.1 %, robust to float16 storage)."""
        same_dims = (self.model_type, self.d_model, self.encoder_layers, self.num_mel_bins, self.vocab_size) == (
            other.model_type, other.d_model, other.encoder_layers, other.num_mel_bins, other.vocab_size)
        return same_dims and math.isclose(self.conv1_abs_sum, other.conv1_abs_sum, rel_tol=1e-3)


@dataclass(frozen=True)
class HeadConfig:
    """Everything needed to rebuild a head, and where it came from.

    Attributes:
        d_model: encoder width D.
        hidden: head width H.
        kernel: convolution width k (odd).
        layers: number of residual convolution blocks L.
        symbols: the CTC labels in id order (``symbols[0]`` is the blank).
        encoder: the encoder the head was trained on.
        window: the encoder windows of its training frames (``full``: Whisper's 30 s padded window; ``audio``).
        training: free-form summary (data, steps, losses, commands).
        version: file format version.
    """

    d_model: int
    symbols: tuple[str, ...]
    encoder: EncoderSignature
    hidden: int = 192
    kernel: int = 5
    layers: int = 2
    window: tuple[str, ...] = ("full",)
    training: dict[str, Any] = field(default_factory=dict)
    version: int = FORMAT_VERSION

    def to_json(self) -> str:
        """The config as JSON."""
        return json.dumps(asdict(self), ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> HeadConfig:
        """Parse :meth:`to_json` output."""
        data = json.loads(text)
        if int(data.get("version", 0)) > FORMAT_VERSION:
            raise ModelLoadError(f"CTC head format version {data['version']} is newer than this simulst")
        data["symbols"] = tuple(data["symbols"])
        data["window"] = tuple(data.get("window", ("full",)))
        data["encoder"] = EncoderSignature(**data["encoder"])
        return cls(**data)


class CtcHead(nn.Module):
    """The head module (see the module notes); ``forward`` gives log-posteriors.

    Args:
        config: architecture and labels.
        dropout: dropout rate while training.
    """

    def __init__(self, config: HeadConfig, dropout: float = 0.1) -> None:
        super().__init__()
        if config.kernel % 2 != 1:
            raise ValueError(f"kernel must be odd, got {config.kernel}")
        self.config = config
        self.vocabulary = CharVocabulary(config.symbols)
        self.norm_in = nn.LayerNorm(config.d_model)
        self.proj = nn.Linear(config.d_model, config.hidden)
        self.convs = nn.ModuleList(
            nn.Conv1d(config.hidden, config.hidden, config.kernel, padding=config.kernel // 2)
            for _ in range(config.layers)
        )
        self.dropout = nn.Dropout(dropout)
        self.norm_out = nn.LayerNorm(config.hidden)
        self.out = nn.Linear(config.hidden, len(config.symbols))

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        """(B, T, D) encoder frames -> (B, T, V) log-posteriors (float32)."""
        x = self.proj(self.norm_in(frames.float()))
        for conv in self.convs:
            y = conv(x.transpose(1, 2)).transpose(1, 2)
            x = x + self.dropout(nn.functional.gelu(y))
        return torch.log_softmax(self.out(self.norm_out(x)), dim=-1)

    def log_probs(self, frames: torch.Tensor, samples: int | None = None) -> torch.Tensor:
        """(T', V) log-posteriors of the frames of one encoding that cover ``samples`` audio samples.

        Args:
            frames: (1, T, D) or (T, D) encoder output (T may include the padding of a 30 s window).
            samples: source samples encoded; frames past ``ceil(samples / 320)`` (padding) are dropped
                before the head runs (as in training). None: use all frames.
        """
        if frames.dim() == 2:
            frames = frames.unsqueeze(0)
        if samples is not None:
            frames = frames[:, : min(frames.shape[1], max(1, math.ceil(samples / SAMPLES_PER_FRAME)))]
        with torch.inference_mode():
            return self.forward(frames)[0]

    def save(self, path: str | Path, config: HeadConfig | None = None) -> Path:
        """Write the head (float16 tensors + JSON config metadata) to ``path``."""
        config = config or self.config
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().to(torch.float16).contiguous() for k, v in self.state_dict().items()}
        save_file(tensors, str(path), metadata={METADATA_KEY: config.to_json()})
        return path


def load_head(path: str | Path, device: str | torch.device = "cpu") -> CtcHead:
    """Read a head written by :meth:`CtcHead.save` (in eval mode, float32 weights)."""
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"CTC head file not found: {path}")
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
        if METADATA_KEY not in metadata:
            raise ModelLoadError(f"{path} is not a simulst CTC head (no {METADATA_KEY!r} metadata)")
        config = HeadConfig.from_json(metadata[METADATA_KEY])
        head = CtcHead(config)
        head.load_state_dict({k: v.float() for k, v in load_file(str(path)).items()})
    except ModelLoadError:
        raise
    except Exception as err:
        raise ModelLoadError(f"cannot read CTC head {path}: {err}") from err
    return head.to(device).eval()


def shipped_heads() -> list[Path]:
    """The heads shipped in ``simulst/assets/ctc``."""
    root = resources.files("simulst") / "assets" / "ctc"
    if not root.is_dir():
        return []
    return sorted(Path(str(p)) for p in root.iterdir() if p.name.endswith(".safetensors"))


def default_head_for(model: Any) -> Path | None:
    """The shipped head trained on ``model``'s encoder, or None."""
    signature = EncoderSignature.of(model)
    for path in shipped_heads():
        try:
            config = read_config(path)
        except ModelLoadError:
            continue
        if config.encoder.matches(signature):
            return path
    return None


def read_config(path: str | Path) -> HeadConfig:
    """The :class:`HeadConfig` of a head file, without loading its weights."""
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
        return HeadConfig.from_json(metadata[METADATA_KEY])
    except Exception as err:
        raise ModelLoadError(f"cannot read CTC head config of {path}: {err}") from err


def attach_head(model: Any, head: str | Path | CtcHead | None) -> CtcHead | None:
    """Resolve ``head`` for ``model`` and check it fits the model's encoder.

    Args:
        model: a WhisperModel.
        head: a head, a file path, ``"default"`` (the shipped head for this encoder; error when none), or None.

    Raises:
        ModelLoadError: missing/corrupt file, no shipped head for this encoder, or a head trained on another
            encoder.
    """
    if head is None:
        return None
    if isinstance(head, str) and head == "default":
        path = default_head_for(model)
        if path is None:
            raise ModelLoadError(
                "no CTC head is shipped for this model's encoder (only Whisper tiny.en has one); train one with "
                "'simulst train-ctc' and pass --ctc-head PATH"
            )
        head = path
    loaded = head if isinstance(head, CtcHead) else load_head(head, device=model.device)
    signature = EncoderSignature.of(model)
    if not loaded.config.encoder.matches(signature):
        raise ModelLoadError(
            f"the CTC head was trained on another encoder ({loaded.config.encoder.name or 'unknown'}: "
            f"d_model {loaded.config.encoder.d_model}, {loaded.config.encoder.encoder_layers} layers) than this "
            f"model's (d_model {signature.d_model}, {signature.encoder_layers} layers)"
        )
    return loaded
