"""An offline English sentence corpus for training the character CTC head (its labels and normalisation:
:mod:`simulst.models.ctc_vocabulary`).

:func:`harvest_sentences` gathers varied English sentences from what any Debian + Python machine has offline:
the Python language reference (``pydoc_data``), standard-library docstrings, manual pages and license texts,
filtered to speakable prose (mostly dictionary words, no code), plus a share of random word strings from
``/usr/share/dict/words`` (Debian package ``wamerican``) for vocabulary coverage.
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import inspect
import random
import re
import warnings
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path

from simulst.models.ctc_vocabulary import normalize

# ----------------------------------------------------------------------------------------------------- corpus
_CODE_CHARS = re.compile(r"[_=(){}\[\]<>*#|\\/@$^~+:;]|\.\w|\w\.\w|--|\s-\w")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")


def split_sentences(text: str) -> list[str]:
    """Rough sentence split of a prose block (whitespace collapsed)."""
    return [s.strip() for s in _SENTENCE_END.split(" ".join(text.split())) if s.strip()]


def speakable(sentence: str, dictionary: set[str], min_words: int = 4, max_words: int = 32,
              min_known: float = 0.9) -> str | None:
    """The normalised sentence when it looks like speakable prose, else None.

    Prose: no code-like characters, ``min_words``..``max_words`` words, and at least ``min_known`` of its words in
    ``dictionary`` (when the dictionary is not empty).
    """
    if _CODE_CHARS.search(sentence) or not sentence[:1].isupper():
        return None
    norm = normalize(sentence)
    words = norm.split()
    if not min_words <= len(words) <= max_words:
        return None
    if dictionary:
        known = sum(1 for w in words if w in dictionary or w.split("'")[0] in dictionary)
        if known < min_known * len(words):
            return None
    return norm


def load_dictionary(path: Path = Path("/usr/share/dict/words")) -> set[str]:
    """Lowercase words of a word list (empty when missing)."""
    if not path.is_file():
        return set()
    words = set()
    for line in path.read_text(encoding="utf-8", errors="ignore").splitlines():
        w = normalize(line)
        if w and " " not in w:
            words.add(w)
    return words


def _python_reference() -> Iterator[str]:
    try:
        from pydoc_data.topics import topics  # lazy: a large module, only for harvesting
    except ImportError:
        return
    yield from topics.values()


_STDLIB_MODULES = (
    "abc argparse array asyncio base64 bisect calendar cmd codecs collections concurrent configparser contextlib "
    "copy csv dataclasses datetime decimal difflib doctest email enum fileinput fractions functools gettext glob "
    "heapq hashlib hmac html http imaplib inspect io ipaddress itertools json locale logging mailbox math "
    "mimetypes multiprocessing numbers operator optparse os pathlib pickle platform poplib pprint queue random re "
    "sched secrets selectors shelve shlex shutil signal smtplib socket sqlite3 ssl statistics string struct "
    "subprocess tarfile tempfile textwrap threading time timeit tkinter token tokenize trace traceback turtle "
    "typing unittest urllib uuid warnings wave weakref xml zipfile zlib"
).split()


def _docstrings() -> Iterator[str]:
    for name in _STDLIB_MODULES:
        with warnings.catch_warnings():  # some members are deprecated aliases (typing.re, ...)
            warnings.simplefilter("ignore")
            try:
                module = importlib.import_module(name)
            except Exception:  # an optional source: skip modules this Python lacks
                continue
            docs = [inspect.getdoc(module) or ""]
            docs += [inspect.getdoc(obj) or "" for _, obj in inspect.getmembers(module)
                     if inspect.isclass(obj) or inspect.isfunction(obj)]
        yield from (doc for doc in docs if doc)


def _man_pages(limit: int = 400) -> Iterator[str]:
    root = Path("/usr/share/man/man1")
    if not root.is_dir():
        return
    for page in sorted(root.glob("*.1.gz"))[:limit]:
        try:
            raw = gzip.decompress(page.read_bytes()).decode("utf-8", errors="ignore")
        except (OSError, EOFError):
            continue
        lines = [ln for ln in raw.splitlines() if ln and not ln.startswith((".", "'\\\"", "\\\""))]
        yield re.sub(r"\\f[BIRP]|\\[-&(][a-z]*|\\", "", " ".join(lines))


def _licenses() -> Iterator[str]:
    root = Path("/usr/share/common-licenses")
    if root.is_dir():
        for path in sorted(root.iterdir()):
            if path.is_file():
                yield path.read_text(encoding="utf-8", errors="ignore")


def harvest_sentences(seed: int = 0, random_share: float = 0.1, dictionary: set[str] | None = None) -> list[str]:
    """Distinct normalised sentences from the offline sources, shuffled with ``seed``.

    ``random_share`` of the result are random 4–14-word strings from the dictionary (more word types than the
    prose has); none when the dictionary is missing.
    """
    dictionary = load_dictionary() if dictionary is None else dictionary
    seen: set[str] = set()
    sentences: list[str] = []
    for source in (_python_reference(), _docstrings(), _man_pages(), _licenses()):
        for block in source:
            for paragraph in re.split(r"\n\s*\n", block):
                for sentence in split_sentences(paragraph):
                    norm = speakable(sentence, dictionary)
                    if norm and norm not in seen:
                        seen.add(norm)
                        sentences.append(norm)
    rng = random.Random(seed)
    if dictionary and random_share > 0:
        words = sorted(w for w in dictionary if "'" not in w and len(w) > 1)
        extra = int(len(sentences) * random_share / (1 - random_share))
        sentences.extend(" ".join(rng.choices(words, k=rng.randint(4, 14))) for _ in range(extra))
    rng.shuffle(sentences)
    return sentences


def load_sentences(path: str | Path | None = None) -> list[str]:
    """Training sentences, one per line (``.gz`` read transparently); default: the shipped English list.

    The shipped list (``simulst/assets/ctc/sentences-en.txt.gz``, 5000 sentences) is the output of
    ``python -m simulst.ctc.text OUT --count 5000`` on the machine that trained the shipped head. It is shipped
    because harvesting is not bit-reproducible across machines: which docstrings and manual pages exist depends
    on the Python version, the installed packages and even on which modules are already imported.
    """
    if path is None:
        source = resources.files("simulst") / "assets" / "ctc" / "sentences-en.txt.gz"
        raw = source.read_bytes()
    else:
        raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return [line.strip() for line in raw.decode("utf-8").splitlines() if line.strip()]


def write_sentences(sentences: Sequence[str], path: str | Path) -> Path:
    """Write one sentence per line (gzip when the name ends in ``.gz``, with a fixed timestamp)."""
    path = Path(path)
    data = ("\n".join(sentences) + "\n").encode("utf-8")
    if path.suffix == ".gz":
        with gzip.GzipFile(str(path), "wb", mtime=0) as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m simulst.ctc.text OUT [--count N] [--seed S]``: harvest a sentence list (as the shipped one).

    To reproduce the shipped list exactly, run it in a fresh interpreter that has imported ``simulst.ctc.data``
    first (the state it was made in): ``python -c "import simulst.ctc.data, sys; from simulst.ctc.text import main;
    sys.exit(main(['OUT.txt.gz']))"``.
    """
    parser = argparse.ArgumentParser(prog="python -m simulst.ctc.text", description=main.__doc__)
    parser.add_argument("out")
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    sentences = harvest_sentences(seed=args.seed)[: args.count]
    print(f"{len(sentences)} sentences -> {write_sentences(sentences, args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
