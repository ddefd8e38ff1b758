"""The label set of the character CTC head (:mod:`simulst.models.ctc_head`) and its text normalisation.

The head's labels are the 26 lowercase letters, the apostrophe and the space (plus the CTC blank, id 0).
:func:`normalize` maps any English text onto them (numbers spelled out, accents stripped, punctuation and
hyphens turned into spaces), so the same function prepares training transcripts, evaluation references and the
word prefixes the CTC policy re-tokenises (:meth:`CharVocabulary.encode`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

BLANK = "<blank>"
CHARACTERS = (" ", "'", *"abcdefghijklmnopqrstuvwxyz")

_ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen " \
        "seventeen eighteen nineteen".split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((10**9, "billion"), (10**6, "million"), (1000, "thousand"))


@dataclass(frozen=True)
class CharVocabulary:
    """A CTC label set: ``symbols[0]`` is the blank, the others single characters.

    Attributes:
        symbols: the labels in id order.
    """

    symbols: tuple[str, ...] = (BLANK, *CHARACTERS)

    def __post_init__(self) -> None:
        if not self.symbols or self.symbols[0] != BLANK:
            raise ValueError("a CTC vocabulary starts with the blank symbol")
        if len(set(self.symbols)) != len(self.symbols):
            raise ValueError("CTC vocabulary symbols must be distinct")

    @property
    def blank(self) -> int:
        """Id of the blank (always 0)."""
        return 0

    @property
    def token_level(self) -> bool:
        """Characters are not a decoder vocabulary: the CTC policy runs word by word."""
        return False

    def __len__(self) -> int:
        return len(self.symbols)

    def encode(self, text: str) -> list[int]:
        """Label ids of ``text`` after :func:`normalize`; characters outside the vocabulary are dropped."""
        index = self._index()
        return [index[ch] for ch in normalize(text) if ch in index]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of label ids (the blank and unknown ids are skipped)."""
        return "".join(self.symbols[i] for i in ids if 0 < i < len(self.symbols))

    def greedy(self, best_path: Iterable[int]) -> str:
        """Collapse a frame-wise best path (merge repeats, drop blanks) to text with single spaces."""
        out: list[int] = []
        previous = -1
        for i in best_path:
            if i != previous and i != self.blank:
                out.append(i)
            previous = i
        return " ".join(self.decode(out).split())

    def _index(self) -> dict[str, int]:
        return {s: i for i, s in enumerate(self.symbols) if i > 0}


def number_words(n: int) -> str:
    """English words of a non-negative integer (``1961`` -> ``nineteen sixty one``: years read as pairs)."""
    if n < 0:
        return "minus " + number_words(-n)
    if 1100 <= n <= 2099 and n % 100 != 0 and n // 100 != 20:
        return f"{number_words(n // 100)} {_two_digits(n % 100, pair=True)}"
    return _cardinal(n)


def _two_digits(n: int, pair: bool = False) -> str:
    if n < 10 and pair:
        return "oh " + _ONES[n]
    if n < 20:
        return _ONES[n]
    tens, ones = divmod(n, 10)
    return _TENS[tens] + ("" if ones == 0 else " " + _ONES[ones])


def _cardinal(n: int) -> str:
    if n < 100:
        return _two_digits(n)
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return f"{_ONES[hundreds]} hundred" + ("" if rest == 0 else " " + _two_digits(rest))
    for scale, name in _SCALES:
        if n >= scale:
            head, rest = divmod(n, scale)
            return f"{_cardinal(head)} {name}" + ("" if rest == 0 else " " + _cardinal(rest))
    return _two_digits(n)  # unreachable


def normalize(text: str) -> str:
    """Lowercase ``a-z``, apostrophes and single spaces: the head's transcription convention.

    Numbers become words (``25`` -> ``twenty five``, ``1961`` -> ``nineteen sixty one``, ``3.5`` -> ``three
    point five``), ``%`` and ``&`` become ``percent`` / ``and``, accents are stripped, curly apostrophes
    straightened, every other character becomes a space; apostrophes not inside a word are removed.
    """
    text = unicodedata.normalize("NFKD", text)
    text = "".join(ch for ch in text if not unicodedata.combining(ch)).lower()
    text = text.replace("’", "'").replace("‘", "'").replace("`", "'")
    text = text.replace("%", " percent ").replace("&", " and ")
    text = re.sub(r"(\d),(\d{3})", r"\1\2", text)
    text = re.sub(r"(\d+)\.(\d+)", lambda m: f"{m.group(1)} point {' '.join(_ONES[int(d)] for d in m.group(2))}",
                  text)
    text = re.sub(r"\d+", lambda m: f" {number_words(int(m.group()))} " if len(m.group()) <= 12 else " ", text)
    text = re.sub(r"[^a-z' ]+", " ", text)
    text = re.sub(r"(?<![a-z])'|'(?![a-z])", " ", text)
    return " ".join(text.split())
