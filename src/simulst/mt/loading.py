"""Find and load an MT backend by name: ``apertium`` (offline default) or a Hugging Face seq2seq model."""

from __future__ import annotations

from simulst.errors import OptionError
from simulst.mt.apertium import ApertiumMT, pair_name
from simulst.mt.backend import MTBackend
from simulst.mt.hf_seq2seq import load_hf_mt

APERTIUM = "apertium"


def load_mt(
    name: str | None = None,
    source_lang: str = "en",
    target_lang: str = "es",
    device: str = "cpu",
) -> MTBackend:
    """Load an MT backend.

    Args:
        name: ``apertium`` (None: the same) for the installed Apertium pair of the languages, ``apertium:PAIR``
            for an explicit Apertium mode (``apertium:eng-cat``), else a Hugging Face MT checkpoint directory
            or hub id (MarianMT / OPUS-MT, M2M100, NLLB, mBART-50).
        source_lang, target_lang: language codes (ISO 639-1, or the model's own codes).
        device: torch device of neural backends.

    Raises:
        ModelLoadError: the backend cannot be found or loaded (Apertium or its pair missing, unknown model).
        OptionError: the languages are missing or unsupported by the model.
    """
    if not target_lang:
        raise OptionError("the cascade needs a target language (--to LANG)")
    if name is None or name == APERTIUM or name.startswith(APERTIUM + ":"):
        pair = name.split(":", 1)[1] if name and ":" in name else pair_name(source_lang, target_lang)
        return ApertiumMT(pair)
    return load_hf_mt(name, source_lang, target_lang, device)
