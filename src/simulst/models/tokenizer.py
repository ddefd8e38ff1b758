"""A byte-level BPE tokenizer (``tokenizer.json``) with the word-boundary queries the session needs."""

from __future__ import annotations

import string
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer as HFTokenizer

from simulst.errors import ModelLoadError

_PUNCTUATION = set(string.punctuation) | {"¿", "¡", "«", "»", "…", "–", "—"}


class BpeTokenizer:
    """Wraps a ``tokenizers`` byte-level BPE; ids >= ``eos_id`` are special (Whisper's layout)."""

    def __init__(self, tokenizer: HFTokenizer, eos_id: int) -> None:
        self._tok = tokenizer
        self.eos_id = eos_id
        size = tokenizer.get_vocab_size(with_added_tokens=True)
        pieces = [tokenizer.id_to_token(i) or "" for i in range(size)]
        # Byte-level BPE writes a leading space as "Ġ".
        self._starts_word = np.array([p.startswith("Ġ") for p in pieces], dtype=bool)
        self._punctuation = np.array([bool(p) and all(ch in _PUNCTUATION for ch in p) for p in pieces], dtype=bool)
        if eos_id < size:
            self._starts_word[eos_id] = True

    @classmethod
    def from_file(cls, path: Path, eos_id: int) -> BpeTokenizer:
        """Load ``tokenizer.json``."""
        if not path.is_file():
            raise ModelLoadError(f"tokenizer file not found: {path}")
        return cls(HFTokenizer.from_file(str(path)), eos_id)

    def token_id(self, token: str) -> int:
        """The id of a (special) token such as ``<|startoftranscript|>``."""
        token_id = self._tok.token_to_id(token)
        if token_id is None:
            raise ModelLoadError(f"token {token!r} is not in the vocabulary")
        return int(token_id)

    def decode(self, tokens: Sequence[int]) -> str:
        """Text of ``tokens``; special tokens (ids >= eos) are dropped."""
        return str(self._tok.decode([t for t in tokens if t < self.eos_id], skip_special_tokens=True))

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` without special tokens."""
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def starts_word(self, token: int) -> bool:
        """True when the token's text begins with a space (a new word) or it is ``<eos>``."""
        return bool(self._starts_word[token]) if token < len(self._starts_word) else False

    def is_punctuation(self, token: int) -> bool:
        """True when the token is punctuation only."""
        return bool(self._punctuation[token]) if token < len(self._punctuation) else False
