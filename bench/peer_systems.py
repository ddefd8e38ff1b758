"""The peer streaming systems that ``bench/peers.py`` runs, each behind whisper_streaming's online-processor
interface (insert audio, ``process_iter``, ``finish``). Their sources are not part of simulst: each is imported at
run time from a folder the user fetched (see ``bench/peers.py``).

* :class:`WhisperStreaming`: ufal/whisper_streaming's ``OnlineASRProcessor`` (LocalAgreement-2, buffer trimming
  "segment" at 15 s) over its ``FasterWhisperASR`` (faster-whisper, beam 5, word timestamps, the previous text as
  prompt). Only the model load is replaced: the back-end loads on CUDA in float16, here it is the CPU in int8.
* :class:`SimulStreaming`: ufal/SimulStreaming's ``SimulWhisperOnline`` over ``PaddedAlignAttWhisper`` (AlignAtt on
  Whisper's alignment heads, greedy, frame threshold 25, a 30 s audio buffer, no CIF end-of-word model, no voice
  activity controller: its defaults; its ``--vac`` loads Silero VAD through ``torch.hub``, a download). It loads
  OpenAI ``.pt`` checkpoints through its bundled openai-whisper, which accepts a model name of OpenAI's table only
  with the released file's SHA-256 (else it downloads it) and gives any other file no alignment heads. Its loader
  is therefore replaced by one that reads the checkpoint simulst converts from the offline weights
  (:mod:`openai_checkpoint`) and sets the alignment heads of the same OpenAI table.

Each peer warms its model up once with the first second of the first utterance it is given, before the clock
starts, as both tools' simulations do.
"""

from __future__ import annotations

import hashlib
import importlib
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from simulst.errors import ModelLoadError, OptionError

SAMPLE_RATE = 16000

Commit = tuple[float | None, float | None, str]
"""What an online processor returns per call: (begin s, end s, text) of the words it committed, or
(None, None, "") when it committed nothing."""


class OnlineProcessor(Protocol):
    """whisper_streaming's online processor interface (one utterance)."""

    def insert_audio_chunk(self, audio: np.ndarray) -> None: ...

    def process_iter(self) -> Commit: ...

    def finish(self) -> Commit: ...


class Peer(Protocol):
    """A peer system: what ``config.json`` records of it, and fresh processors for one utterance each."""

    name: str

    def describe(self) -> dict[str, Any]: ...

    def open(self, language: str, audio: np.ndarray) -> OnlineProcessor: ...


def files_sha256(*paths: Path) -> str:
    """One SHA-256 (hex) over the bytes of ``paths`` in order: which version of a peer's source ran."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()


@contextmanager
def _on_path(folder: Path) -> Iterator[None]:
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        sys.path.remove(str(folder))


def _require(module: str, hint: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError as err:
        raise ModelLoadError(f"{hint} needs the {module} package: pip install -e '.[bench]'") from err


# --------------------------------------------------------------------------------------------- whisper_streaming
def import_whisper_online(folder: Path) -> types.ModuleType:
    """Import ``whisper_online.py`` from ``folder``. It imports ``librosa`` for its own file loader, unused here
    (simulst loads the audio); where ``librosa`` is not installed, that import gets a module whose ``load`` raises.

    Raises:
        OptionError: no ``whisper_online.py`` in ``folder``.
        ModelLoadError: ``faster-whisper`` is not installed.
    """
    if not (folder / "whisper_online.py").is_file():
        raise OptionError(f"no whisper_online.py in {folder} (git clone https://github.com/ufal/whisper_streaming)")
    _require("faster_whisper", "whisper_streaming's back-end")
    try:
        importlib.import_module("librosa")
    except ImportError:
        sys.modules["librosa"] = _no_librosa()
    with _on_path(folder):
        return importlib.import_module("whisper_online")


def _no_librosa() -> types.ModuleType:
    module = types.ModuleType("librosa")

    def load(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("librosa is not installed: bench/peers.py loads audio with simulst.audio.io.load_audio")

    module.load = load  # type: ignore[attr-defined]
    return module


@dataclass
class WhisperStreaming:
    """whisper_streaming over faster-whisper on the CPU (see the module docstring).

    Attributes:
        folder: the folder holding ``whisper_online.py``.
        model_dir: the CTranslate2 model directory.
        task: ``transcribe`` or ``translate``.
        compute_type: CTranslate2's compute type.
        threads: CTranslate2's intra-op threads.
        trimming: the buffer trimming (way, seconds).
    """

    folder: Path
    model_dir: Path
    task: str
    compute_type: str = "int8"
    threads: int = 1
    trimming: tuple[str, float] = ("segment", 15.0)
    name: str = "whisper-streaming"
    _model: Any = field(default=None, repr=False)
    _module: Any = field(default=None, repr=False)

    def describe(self) -> dict[str, Any]:
        """What ``config.json`` records of the peer."""
        return {"peer": self.name, "source_sha256": files_sha256(self.folder / "whisper_online.py"),
                "backend": "faster-whisper", "model": self.model_dir.name, "compute_type": self.compute_type,
                "task": self.task, "policy": "LocalAgreement-2", "buffer_trimming": list(self.trimming), "beam": 5}

    def open(self, language: str, audio: np.ndarray) -> OnlineProcessor:
        """A fresh ``OnlineASRProcessor`` for one utterance (the model loaded and warmed up on first use)."""
        if self._model is None:
            self._module = import_whisper_online(self.folder)
            from faster_whisper import WhisperModel

            self._model = WhisperModel(str(self.model_dir), device="cpu", compute_type=self.compute_type,
                                       cpu_threads=self.threads, local_files_only=True)
            self._asr(language).transcribe(audio[:SAMPLE_RATE])  # as whisper_online.py: the first call is slow
        processor: OnlineProcessor = self._module.OnlineASRProcessor(self._asr(language), None,
                                                                     buffer_trimming=self.trimming,
                                                                     logfile=sys.stderr)
        return processor

    def _asr(self, language: str) -> Any:
        model = self._model

        class CpuFasterWhisperASR(self._module.FasterWhisperASR):  # type: ignore[name-defined]
            """whisper_streaming's FasterWhisperASR over the model loaded on the CPU."""

            def load_model(self, modelsize: Any = None, cache_dir: Any = None, model_dir: Any = None) -> Any:
                return model

        asr = CpuFasterWhisperASR(lan=language, model_dir=str(self.model_dir))
        if self.task == "translate":
            asr.set_translate_task()
        return asr


# ------------------------------------------------------------------------------------------------- SimulStreaming
def import_simulstreaming(folder: Path, checkpoint: Path) -> types.ModuleType:
    """Import SimulStreaming's ``simulstreaming_whisper`` from ``folder`` with its model loader replaced by one that
    reads ``checkpoint`` (an OpenAI ``.pt`` named after its model) with the alignment heads of OpenAI's table.

    Raises:
        OptionError: no ``simulstreaming_whisper.py`` in ``folder``.
        ModelLoadError: ``tiktoken`` or ``numba`` (needed by its bundled openai-whisper) is not installed.
    """
    if not (folder / "simulstreaming_whisper.py").is_file():
        raise OptionError(f"no simulstreaming_whisper.py in {folder} (git clone https://github.com/ufal/SimulStreaming)")
    for module in ("tiktoken", "numba"):
        _require(module, "SimulStreaming's openai-whisper")
    with _on_path(folder):
        frontend = importlib.import_module("simulstreaming_whisper")
        aligned = importlib.import_module("simulstreaming.whisper.simul_whisper.simul_whisper")
        whisper = importlib.import_module("simulstreaming.whisper.simul_whisper.whisper")
        model_module = importlib.import_module("simulstreaming.whisper.simul_whisper.whisper.model")
    import torch

    def load_model(name: str, device: Any = None, download_root: str | None = None, in_memory: bool = False) -> Any:
        if name not in whisper._ALIGNMENT_HEADS:
            raise ModelLoadError(f"OpenAI's table has no alignment heads for {name!r}")
        path = checkpoint.parent / f"{name}.pt"
        content = torch.load(path, map_location="cpu", weights_only=True)
        model = model_module.Whisper(model_module.ModelDimensions(**content["dims"]))
        model.load_state_dict(content["model_state_dict"])
        model.set_alignment_heads(whisper._ALIGNMENT_HEADS[name])
        return model.to("cpu")

    aligned.load_model = load_model  # type: ignore[attr-defined]
    return frontend


class _SimulStreamingOnline:
    """SimulStreaming's online processor, its dictionary results as whisper_streaming's (begin, end, text)."""

    def __init__(self, online: Any) -> None:
        self.online = online

    def insert_audio_chunk(self, audio: np.ndarray) -> None:
        self.online.insert_audio_chunk(np.ascontiguousarray(audio, dtype=np.float32))

    def process_iter(self) -> Commit:
        return _commit(self.online.process_iter())

    def finish(self) -> Commit:
        return _commit(self.online.finish())


def _commit(result: Any) -> Commit:
    if not result or not result.get("text"):
        return None, None, ""
    return float(result["start"]), float(result["end"]), str(result["text"])


@dataclass
class SimulStreaming:
    """SimulStreaming (AlignAtt over Whisper in PyTorch, float32) on the CPU (see the module docstring).

    Attributes:
        folder: the SimulStreaming repository (holding ``simulstreaming_whisper.py``).
        checkpoint: the OpenAI checkpoint, ``<OpenAI name>.pt`` (:func:`openai_checkpoint.write_openai_checkpoint`).
        task: ``transcribe`` or ``translate``.
        threads: torch's intra-op threads.
        frame_threshold: AlignAtt's frame threshold (its default 25).
        audio_max_len: its audio buffer in seconds (default 30).
    """

    folder: Path
    checkpoint: Path
    task: str
    threads: int = 1
    frame_threshold: int = 25
    audio_max_len: float = 30.0
    name: str = "simulstreaming"
    _models: dict[str, Any] = field(default_factory=dict, repr=False)
    _frontend: Any = field(default=None, repr=False)

    def describe(self) -> dict[str, Any]:
        """What ``config.json`` records of the peer."""
        sources = [self.folder / "simulstreaming_whisper.py",
                   self.folder / "simulstreaming" / "whisper" / "simul_whisper" / "simul_whisper.py"]
        return {"peer": self.name, "source_sha256": files_sha256(*sources), "backend": "PyTorch float32",
                "model": self.checkpoint.stem, "task": self.task, "policy": "AlignAtt",
                "frame_threshold": self.frame_threshold, "audio_max_len": self.audio_max_len, "beam": 1,
                "cif": None}

    def open(self, language: str, audio: np.ndarray) -> OnlineProcessor:
        """A fresh online processor for one utterance; one model per language, loaded and warmed up on first use."""
        if self._frontend is None:
            import torch

            torch.set_num_threads(self.threads)
            self._frontend = import_simulstreaming(self.folder, self.checkpoint)
        asr = self._models.get(language)
        if asr is None:
            asr = self._frontend.SimulWhisperASR(
                language=language, model_path=str(self.checkpoint), cif_ckpt_path=None,
                frame_threshold=self.frame_threshold, audio_max_len=self.audio_max_len, audio_min_len=0.0,
                segment_length=1.0, beams=1, task=self.task, decoder_type="greedy", never_fire=False,
                init_prompt=None, static_init_prompt=None, max_context_tokens=None, logdir=None)
            import torch

            asr.warmup(torch.from_numpy(np.ascontiguousarray(audio[:SAMPLE_RATE], dtype=np.float32)))
            self._models[language] = asr
        return _SimulStreamingOnline(self._frontend.SimulWhisperOnline(asr))
