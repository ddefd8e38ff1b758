"""Apertium, a rule-based MT system, as a black-box backend of the MT stage.

Apertium cannot force-decode a prefix, so each call re-translates the committed source prefix with the
``apertium`` command-line tool (Debian packages ``apertium`` + a pair such as ``apertium-eng-spa``) and the
fresh translation is *aligned* to the committed target words: the hypothesis is the committed words followed by
the part of the new translation after the point that best matches them (word-level edit distance). Its tokens
are words (ids of a vocabulary that grows as words are seen), so the policies run on target words.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import string
import subprocess
import threading
import time
import weakref
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from simulst.errors import ModelLoadError, SimulstError
from simulst.external import program_listing
from simulst.mt.backend import MTBackend, MTRequest
from simulst.types import Costs, Hypothesis

# ISO 639-1 -> the ISO 639-3 codes Apertium names its pairs with (the common ones; 3-letter codes pass through).
ISO3 = {
    "en": "eng", "es": "spa", "ca": "cat", "fr": "fra", "pt": "por", "it": "ita", "de": "deu", "gl": "glg",
    "eu": "eus", "oc": "oci", "ro": "ron", "nl": "nld", "sv": "swe", "da": "dan", "nb": "nob", "nn": "nno",
    "is": "isl", "eo": "epo", "ar": "ara", "mt": "mlt", "cy": "cym", "br": "bre", "ga": "gle", "sc": "srd",
    "an": "arg", "ast": "ast", "ru": "rus", "uk": "ukr", "pl": "pol", "cs": "ces", "sk": "slk", "hi": "hin",
    "ur": "urd", "kk": "kaz", "tt": "tat", "id": "ind", "ms": "zlm",
}
_PUNCTUATION = set(string.punctuation) | {"¿", "¡", "«", "»", "…", "–", "—"}
EOS_WORD = "</s>"
TIMEOUT_S = 60.0


class WordTokenizer:
    """A word vocabulary that grows as words are seen: id 0 is ``</s>``; every other token is one word.

    ``decode`` joins words with single spaces (with a leading space, as sub-word tokenizers decode a word start);
    every word starts a word; a word made of punctuation only is punctuation.
    """

    eos_id = 0

    def __init__(self) -> None:
        self._words: list[str] = [EOS_WORD]
        self._ids: dict[str, int] = {EOS_WORD: 0}

    def id(self, word: str) -> int:
        """The id of ``word`` (added to the vocabulary if new)."""
        token = self._ids.get(word)
        if token is None:
            token = self._ids[word] = len(self._words)
            self._words.append(word)
        return token

    def word(self, token: int) -> str:
        """The word of a token id."""
        return self._words[token]

    def encode(self, text: str) -> list[int]:
        """Ids of the whitespace-separated words of ``text``."""
        return [self.id(w) for w in text.split()]

    def decode(self, tokens: Sequence[int]) -> str:
        """The words of ``tokens`` (``</s>`` dropped), each preceded by a space."""
        return "".join(" " + self._words[t] for t in tokens if t != self.eos_id)

    def starts_word(self, token: int) -> bool:
        """Every token is a whole word."""
        return True

    def is_punctuation(self, token: int) -> bool:
        """True when the word is punctuation only."""
        word = self._words[token] if 0 < token < len(self._words) else ""
        return bool(word) and all(ch in _PUNCTUATION for ch in word)


def pair_name(source_lang: str, target_lang: str) -> str:
    """The Apertium mode of a language pair, e.g. ``en``, ``es`` -> ``eng-spa`` (3-letter codes pass through)."""
    src = ISO3.get(source_lang.lower(), source_lang.lower())
    tgt = ISO3.get(target_lang.lower(), target_lang.lower())
    return f"{src}-{tgt}"


@lru_cache(maxsize=8)
def installed_pairs(executable: str = "apertium") -> tuple[str, ...]:
    """The translation modes ``apertium -l`` lists; raises ``ModelLoadError`` when Apertium is missing."""
    listing = program_listing(
        executable, "-l",
        f"the Apertium MT backend needs the '{executable}' command (Debian: apt-get install apertium "
        "apertium-eng-spa), or pass --mt with a Hugging Face MT model",
    )
    return tuple(line.strip() for line in listing.splitlines() if line.strip())


class ApertiumMT(MTBackend):
    """Apertium as a black box: translate the committed source prefix, align to the committed target words.

    By default the pair's pipeline runs as one persistent process in Apertium's null-flush mode (each input
    ends in ``\\0``, and so does its translation), which takes milliseconds per call instead of the ~0.2 s it
    takes ``apertium`` to start its eleven programs for every call; its output equals ``apertium -u PAIR`` on
    plain text (the same deformatting: escapes, and the sentence-end mark ``.[]``). Without
    ``apertium-wblank-mode`` or the pair's mode file it falls back to one ``apertium`` call per translation.

    Args:
        pair: an Apertium mode such as ``eng-spa`` (see :func:`pair_name`).
        executable: the ``apertium`` command.
        persistent: keep one null-flush pipeline running (False: one ``apertium`` process per call).

    Raises:
        ModelLoadError: when ``apertium`` is not installed or the pair is not.
    """

    searches = False  # (one translation per call: no beam, no search to choose)

    def __init__(self, pair: str = "eng-spa", executable: str = "apertium", persistent: bool = True) -> None:
        pairs = installed_pairs(executable)
        if pair not in pairs:
            src, _, tgt = pair.partition("-")
            raise ModelLoadError(
                f"the Apertium language pair {pair!r} is not installed (installed: {', '.join(pairs) or 'none'}); "
                f"install its Debian package, e.g. apt-get install apertium-{src}-{tgt}"
            )
        self.pair = pair
        self.name = f"apertium:{pair}"
        self._executable = shutil.which(executable) or executable
        self._tokenizer = WordTokenizer()
        self._pipe: _NullFlushPipe | None = None
        self._lock = threading.Lock()
        self._persistent = persistent and _pipeline_command(self._executable, pair) is not None
        if self._persistent:
            # Start the pipeline now (its programs load their data, ~0.3 s), not during the first stream.
            try:
                self.translate_raw("Hello.")
            except SimulstError:
                self._persistent = False  # fall back to one apertium call per translation

    @property
    def tokenizer(self) -> WordTokenizer:
        return self._tokenizer

    def close(self) -> None:
        """Stop the persistent pipeline (a later call starts a new one)."""
        with self._lock:
            if self._pipe is not None:
                self._pipe.close()
                self._pipe = None

    def translate_raw(self, source: str) -> str:
        """Apertium's translation of ``source`` (unknown words unmarked), whitespace normalised."""
        source = " ".join(source.replace("\0", " ").split())
        if not source:
            return ""
        if self._persistent:
            with self._lock:
                if self._pipe is None:
                    command = _pipeline_command(self._executable, self.pair)
                    assert command is not None
                    self._pipe = _NullFlushPipe(command)
                try:
                    raw = self._pipe.send(_deformat(source))
                except SimulstError:
                    self._pipe.close()
                    self._pipe = None
                    raise
            return " ".join(_reformat(raw).split())
        return self._translate_once(source)

    def _translate_once(self, source: str) -> str:
        try:
            done = subprocess.run(
                [self._executable, "-u", self.pair],
                input=source,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as err:
            raise SimulstError(f"apertium {self.pair} failed: {err}") from err
        if done.returncode != 0:
            raise SimulstError(f"apertium {self.pair} failed: {done.stderr.strip()[:300]}")
        return " ".join(done.stdout.split())

    def translate(self, request: MTRequest, costs: Costs) -> list[Hypothesis]:
        costs.count("apertium_calls")
        prefix = request.prefix
        words = self.translate_raw(request.source).split()
        committed = [self._tokenizer.word(t) for t in prefix]
        cut = align_prefix(committed, words)
        tokens = (*prefix, *(self._tokenizer.id(w) for w in words[cut:]))
        # A complete translation of the source read so far: its last word is whole.
        return [Hypothesis(tokens, 0.0, finished=True)]


# Characters ``apertium-destxt`` escapes with a backslash; it puts "~" in a format block instead.
_RESERVED = set("[]^$/\\@<>{}")


def _deformat(text: str) -> str:
    """``apertium-destxt`` on one line of single-spaced text: escapes, then the sentence-end mark ``.[]``."""
    out = ["\\" + ch if ch in _RESERVED else "[~]" if ch == "~" else ch for ch in text]
    return "".join(out) + ".[]"


def _reformat(stream: str) -> str:
    """``apertium-retxt``: drop the sentence-end mark, keep the text of format blocks ``[...]``, unescape."""
    if stream.endswith(".[]"):
        stream = stream[:-3]
    out: list[str] = []
    i = 0
    while i < len(stream):
        ch = stream[i]
        if ch == "\\" and i + 1 < len(stream):
            out.append(stream[i + 1])
            i += 2
        else:
            if ch not in "[]":
                out.append(ch)
            i += 1
    return "".join(out)


def _pipeline_command(executable: str, pair: str) -> str | None:
    """The shell pipeline of ``pair`` in null-flush mode (``apertium-wblank-mode -z MODE``), or None."""
    wblank = shutil.which("apertium-wblank-mode")
    if wblank is None:
        return None
    roots = [Path(os.environ["APERTIUM_DATADIR"])] if os.environ.get("APERTIUM_DATADIR") else []
    roots += [Path(executable).resolve().parent.parent / "share" / "apertium", Path("/usr/share/apertium"),
              Path("/usr/local/share/apertium")]
    for root in roots:
        mode = root / "modes" / f"{pair}.mode"
        if mode.is_file():
            try:
                done = subprocess.run([wblank, "-z", str(mode)], capture_output=True, text=True, timeout=TIMEOUT_S,
                                      check=False)
            except (OSError, subprocess.SubprocessError):
                return None
            return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None
    return None


class _NullFlushPipe:
    """A running null-flush pipeline: write ``text\\0``, read up to the next ``\\0``."""

    def __init__(self, command: str) -> None:
        # $1: generator option (-n: do not mark unknown words, as ``apertium -u``); $2: tagger option (none).
        try:
            self._proc = subprocess.Popen(
                ["bash", "-c", command, "apertium-pipeline", "-n", ""],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        except OSError as err:
            raise ModelLoadError(f"could not start the Apertium pipeline: {err}") from err
        self._finalizer = weakref.finalize(self, _stop, self._proc)

    def send(self, text: str) -> str:
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(text.encode("utf-8") + b"\0")
            proc.stdin.flush()
        except OSError as err:
            raise SimulstError(f"the Apertium pipeline stopped: {err}") from err
        fd = proc.stdout.fileno()
        buffer = bytearray()
        deadline = time.monotonic() + TIMEOUT_S
        while not buffer.endswith(b"\0"):
            remaining = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(0.0, remaining))
            if not ready:
                raise SimulstError(f"the Apertium pipeline did not answer within {TIMEOUT_S:.0f} s")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise SimulstError(f"the Apertium pipeline stopped (exit code {proc.poll()})")
            buffer += chunk
        return buffer[:-1].decode("utf-8", errors="replace")

    def close(self) -> None:
        self._finalizer()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def _key(word: str) -> str:
    return word.strip("".join(_PUNCTUATION)).casefold() or word


def align_prefix(committed: Sequence[str], words: Sequence[str]) -> int:
    """How many leading ``words`` of a fresh translation the ``committed`` words stand for.

    The k minimising the word edit distance between ``committed`` and ``words[:k]`` (words compared case- and
    punctuation-insensitively); ties go to a k whose last word equals the last committed word (the alignment is
    anchored where the committed output ends: "… lentos, modas" against "… lentos, las modas en" gives the k
    after "modas", not the equally distant k before "las"), then to the k closest to ``len(committed)``, then
    to the larger k. The MT stage continues the committed words with ``words[k:]``, so when the fresh
    translation agrees with what was shown nothing is repeated or skipped, and when it changed an earlier word
    the change is not shown twice.
    """
    m = len(committed)
    if m == 0:
        return 0
    a = [_key(w) for w in committed]
    b = [_key(w) for w in words]
    # dist[j] = edit distance between committed[:i] and words[:j], row by row over i.
    dist = list(range(len(b) + 1))
    for i in range(1, m + 1):
        prev_diag, dist[0] = dist[0], i
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            prev_diag, dist[j] = dist[j], min(dist[j] + 1, dist[j - 1] + 1, prev_diag + cost)
    return min(range(len(b) + 1), key=lambda j: (dist[j], j == 0 or b[j - 1] != a[-1], abs(j - m), -j))
