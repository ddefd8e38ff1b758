"""The character CTC head: text normalisation, vocabulary, file format, encoder checks, data helpers."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from simulst.ctc.data import Voice, augment, engines, random_voice, synthesize
from simulst.ctc.text import speakable
from simulst.ctc.train import pack_windows
from simulst.errors import ModelLoadError
from simulst.models.ctc_head import (
    CtcHead,
    EncoderSignature,
    HeadConfig,
    attach_head,
    load_head,
    read_config,
    shipped_heads,
)
from simulst.models.ctc_vocabulary import CharVocabulary, normalize, number_words
from simulst.sequences import edit_distance


def test_normalize() -> None:
    assert normalize("And so, my fellow Americans: ask not!") == "and so my fellow americans ask not"
    assert normalize("25 to 30 years in 1961") == "twenty five to thirty years in nineteen sixty one"
    assert normalize("3.5% of 1,000 café’s — x-ray") == "three point five percent of one thousand cafe's x ray"
    assert normalize("'quoted' don't") == "quoted don't"
    assert normalize("") == ""


@pytest.mark.parametrize(("n", "words"), [(0, "zero"), (13, "thirteen"), (40, "forty"), (101, "one hundred one"),
                                           (2000, "two thousand"), (2005, "two thousand five"),
                                           (1905, "nineteen oh five"), (123456, "one hundred twenty three thousand "
                                                                               "four hundred fifty six")])
def test_number_words(n: int, words: str) -> None:
    assert number_words(n) == words


def test_char_vocabulary() -> None:
    vocab = CharVocabulary()
    assert len(vocab) == 1 + 2 + 26 and vocab.blank == 0 and not vocab.token_level  # the blank, space, ', a-z
    ids = vocab.encode("Ab c'")
    assert vocab.decode(ids) == "ab c"  # a trailing apostrophe is not inside a word
    # greedy collapse: repeats merge, blanks separate, spaces are normalised
    a, b, space = vocab.encode("a")[0], vocab.encode("b")[0], vocab.encode("a b")[1]
    assert vocab.greedy([0, a, a, 0, a, space, space, b, 0, space]) == "aa b"
    with pytest.raises(ValueError):
        CharVocabulary(("a", "b"))


def test_word_errors_and_speakable() -> None:
    assert edit_distance("a b c".split(), "a x c d".split()) == 2
    assert edit_distance("abc", "abc") == 0
    words = {"the", "cat", "sat", "on", "mat"}
    assert speakable("The cat sat on the mat.", words) == "the cat sat on the mat"
    assert speakable("The cat sat on x_mat.", words) is None  # code-like
    assert speakable("Cat sat.", words) is None  # too short


def small_config(**kw: object) -> HeadConfig:
    signature = EncoderSignature("whisper", 8, 2, 80, 51864, 12.5, "toy")
    return HeadConfig(d_model=8, symbols=CharVocabulary().symbols, encoder=signature, hidden=6, kernel=3,
                      layers=1, **kw)  # type: ignore[arg-type]


def test_head_save_load_round_trip(tmp_path: Path) -> None:
    torch.manual_seed(0)
    head = CtcHead(small_config(training={"steps": 3})).eval()
    frames = torch.randn(1, 20, 8)
    path = head.save(tmp_path / "h.safetensors")
    loaded = load_head(path)
    assert loaded.config == head.config
    assert read_config(path).training == {"steps": 3}
    # float16 storage: outputs agree to about 1e-2 in log-probability
    assert torch.allclose(loaded.log_probs(frames), head.log_probs(frames), atol=2e-2)
    out = loaded.log_probs(frames, samples=320 * 7 + 1)  # frames past the audio (padding) are dropped
    assert out.shape == (8, 29)
    assert torch.allclose(out.exp().sum(-1), torch.ones(8), atol=1e-5)


def test_bad_head_files(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="not found"):
        load_head(tmp_path / "missing.safetensors")
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ModelLoadError, match="not a simulst CTC head"):
        load_head(tmp_path / "other.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"junk")
    with pytest.raises(ModelLoadError):
        load_head(tmp_path / "junk.safetensors")
    newer = json.loads(small_config().to_json())
    newer["version"] = 99
    with pytest.raises(ModelLoadError, match="newer"):
        HeadConfig.from_json(json.dumps(newer))


def fake_model(d_model: int, conv_sum: float) -> SimpleNamespace:
    conv = SimpleNamespace(weight=torch.full((1,), conv_sum))
    dims = SimpleNamespace(d_model=d_model, encoder_layers=2, num_mel_bins=80, vocab_size=51864)
    return SimpleNamespace(dims=dims, device=torch.device("cpu"),
                           net=SimpleNamespace(model=SimpleNamespace(encoder=SimpleNamespace(conv1=conv))))


def test_encoder_signature_and_attach(tmp_path: Path) -> None:
    head = CtcHead(small_config())
    path = head.save(tmp_path / "h.safetensors")
    assert attach_head(fake_model(8, 12.5), path) is not None
    assert attach_head(fake_model(8, 12.5 * (1 + 1e-5)), str(path)) is not None  # float16-close weights
    assert attach_head(fake_model(8, 12.5), None) is None
    with pytest.raises(ModelLoadError, match="another encoder"):
        attach_head(fake_model(8, 13.0), path)
    with pytest.raises(ModelLoadError, match="no CTC head is shipped"):
        attach_head(fake_model(16, 1.0), "default")


def test_a_head_is_shipped() -> None:
    heads = shipped_heads()
    assert heads, "simulst/assets/ctc should ship the Whisper tiny.en head"
    for path in heads:
        config = read_config(path)
        assert config.encoder.name == "whisper-tiny.en" and config.symbols == CharVocabulary().symbols
        assert path.stat().st_size < 4_000_000


def test_pack_windows() -> None:
    durations = [random.Random(i).uniform(1.0, 9.0) for i in range(200)]
    windows = pack_windows(durations, random.Random(0), max_window_s=28.0)
    flat = sorted(i for w in windows for i in w)
    assert flat == list(range(200))  # every utterance once
    assert all(sum(durations[i] + 0.6 for i in w) <= 28.0 + 9.6 for w in windows)


def test_augment_and_voices() -> None:
    rng = random.Random(3)
    audio = np.sin(np.arange(16000) / 10.0).astype(np.float32) * 0.5
    out = augment(audio, rng)
    assert out.dtype == np.float32 and np.isfinite(out).all() and np.abs(out).max() <= 1.0
    assert 0.8 * 16000 < out.shape[0] < 2.4 * 16000
    voice = random_voice(random.Random(1), ["espeak-ng", "flite"])
    assert voice == random_voice(random.Random(1), ["espeak-ng", "flite"])  # seeded


def test_the_docs_say_which_synthesisers_the_set_up_installs() -> None:
    # training synthesises with espeak-ng (the set-up installs it) and, where installed, flite (it does not)
    import re

    root = Path(__file__).resolve().parents[1]
    listed = re.search(r"debian_packages=\(([^)]*)\)", (root / "scripts" / "setup.sh").read_text(encoding="utf-8"))
    assert listed is not None and "espeak-ng" in listed[1].split() and "flite" not in listed[1].split()
    doc = " ".join((root / "docs" / "ctc.md").read_text(encoding="utf-8").split())
    assert "Synthesis needs espeak-ng, which `scripts/setup.sh` installs" in doc
    assert "flite is optional and the set-up does not install it" in doc and "(`apt-get install flite`)" in doc
    assert random_voice(random.Random(0), ["espeak-ng"]).engine == "espeak-ng"  # (no flite: espeak-ng alone)


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_espeak_synthesis() -> None:
    assert "espeak-ng" in engines()
    audio = synthesize("hello world", Voice("espeak-ng", "en-us+f3", 170, 50))
    assert audio.dtype == np.float32 and 0.3 * 16000 < audio.shape[0] < 3 * 16000
    assert np.abs(audio).max() > 0.01
