"""The guards against hallucination: what keeps a stream from committing text the audio does not hold.

* no-speech: an encoding the model judges to hold no speech (Whisper's ``no_speech_prob``) commits nothing;
* low-confidence: a chunk whose new tokens have a low mean log-probability commits nothing - a stricter
  threshold (*early*) while the audio decoded is at most a segment long;
* silent tail: at the end of a trimmed stream, what is left of the buffer is decoded only when Silero VAD hears
  speech in it;
* unsure word: a chunk commits no word holding a token scored below a threshold (nor anything after it) until two
  consecutive decodes agree on it;
* loop: no repetition loop is committed (:func:`~simulst.sequences.first_loop`);
* source language: translating into English, a decode prompted with the stream's previous text whose new text
  reads as no English (:meth:`Guards.foreign`) starts the context afresh: a chunk that would commit from it commits
  nothing, a decode committed whole is decoded again;
* recital: a decode whose new text copies the initial prompt (:meth:`Guards.recital`) is searched again without
  it, and that search is taken unless it says the copied words too (:meth:`Guards.echoes`).

Which guard applies to which decode is the :class:`~simulst.streaming.decoding.DecodeReason`'s business.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from simulst.audio.vad import WINDOW as VAD_RATES
from simulst.audio.vad import holds_speech
from simulst.config import StreamOptions
from simulst.errors import ModelLoadError
from simulst.models.base import Encoded, SpeechJudge, SpeechModel, Tokenizer
from simulst.sequences import LOOP_LOOKBACK, first_loop, longest_shared_run, repeated_share
from simulst.types import Costs, Hypothesis

SAID_AGAIN = 0.5  # the share of a text's word pairs said before from which it counts as said again
COPY_LEAD = 2  # tokens: how far a loop's cut moves back over words its copy repeats but for case and punctuation
RECITAL_WORDS = 4  # words: a run of the initial prompt this long in a decode's new text is suspected of recital
RECITAL_ECHO = 0.5  # the share of a suspected recital's words a decode without the prompt says when they were said
# English's common function words, leaving out common words of the languages Whisper translates most (German's
# "was", "will", "also", "die", "in", "an"; French, Spanish and Portuguese "a", "as", "do", "on")
ENGLISH_WORDS = frozenset(
    "the of and to is that it for with be this are have not they we you he she his their which from by at or but "
    "would there been has had were can what when who if about more its than into these our one all other many after "
    "because should could those only how then them some very".split())
FOREIGN_WORDS = 8  # a text of at least this many words ...
FOREIGN_SHARE = 0.1  # ... with fewer than this share of them ENGLISH_WORDS reads as no English


class Guards:
    """The thresholds of one stream's guards (resolved for a model that translates or transcribes).

    Args:
        options: the stream's options.
        translates: the model translates (``auto`` thresholds resolve by task).
        segment: samples of audio up to which the early low-confidence threshold applies.
    """

    def __init__(self, options: StreamOptions, translates: bool, segment: int) -> None:
        self.no_speech_threshold = options.no_speech_threshold
        self.logprob_threshold = options.logprob_threshold
        self.early_logprob_threshold = options.early_threshold(translates)
        self.word_logprob_threshold = options.word_logprob_threshold
        self.loop_guard = options.loop_guard
        self.vad_threshold = options.vad_threshold
        self.segment = segment
        self.translates = translates

    def judged_silent(self, model: SpeechModel, enc: Encoded, costs: Costs) -> bool:
        """The no-speech guard: True when the model judges the encoding to hold no speech (nothing committed)."""
        threshold = self.no_speech_threshold
        if threshold is None or not isinstance(model, SpeechJudge):
            return False
        if model.no_speech_prob(enc, costs) <= threshold:
            return False
        costs.count("no_speech_skips")
        return True

    def unsure(self, best: Hypothesis, committed: int, samples: int, costs: Costs) -> bool:
        """The low-confidence guard: True when the best hypothesis's tokens after the ``committed`` ones (searched
        over ``samples`` of audio) have a mean log-probability below the threshold - the stricter early one while
        ``samples`` is at most a segment."""
        threshold = self.logprob_threshold
        early = self.early_logprob_threshold
        if early is not None and samples <= self.segment:
            threshold = early if threshold is None else max(threshold, early)
        if _sure(best, committed, threshold):
            return False
        costs.count("unsure_skips")
        return True

    def sure_words(self, target: Sequence[int], best: Hypothesis, previous: Sequence[int], committed: int,
                   tokenizer: Tokenizer, costs: Costs) -> Sequence[int]:
        """The unsure-word guard: ``target`` (a chunk's commitment) cut before the first word after the ``committed``
        tokens that holds a token the search scored below the threshold - unless the ``previous`` chunk's best
        hypothesis agreed on the output up to that token (a rare word heard the same twice is not a guess) - back
        to that word's start. Only tokens where ``target`` follows ``best`` (whose scores they are) are judged."""
        threshold = self.word_logprob_threshold
        if threshold is None:
            return target
        for i in range(committed, min(len(target), len(best.tokens))):
            if target[i] != best.tokens[i]:
                break
            score = best.token_score(i)
            if score is not None and score < threshold and tuple(previous[: i + 1]) != tuple(target[: i + 1]):
                costs.count("unsure_word_holds")
                return target[: _word_start(target, i, committed, tokenizer)]
        return target

    def silent_tail(self, audio: np.ndarray, rate: int, costs: Costs) -> bool:
        """True when Silero VAD finds no speech in ``audio``, what is left of a trimmed stream's buffer at its end
        (nothing more is committed; the no-speech guard must be on).

        Why: the last buffer often holds only the pause after the last committed sentence; lifted by the level
        normalisation and read with the previous text as prompt, it makes Whisper invent a sentence that its own
        no-speech judge lets through."""
        if self.no_speech_threshold is None or rate not in VAD_RATES:
            return False
        start = time.perf_counter()
        try:
            speech = holds_speech(audio, rate, self.vad_threshold)
        except ModelLoadError:  # (the VAD's packages are missing: the end is decoded, as without the check)
            costs.count("silent_tail_unchecked")
            speech = True
        costs.compute_s += time.perf_counter() - start
        if speech:
            return False
        costs.count("silent_tail_skips")
        return True

    def loop_free(self, target: Sequence[int], committed: int, tokenizer: Tokenizer, costs: Costs,
                  best: Sequence[int] | None = None) -> tuple[Sequence[int], bool]:
        """``target`` cut before a repetition loop, at a whole word (never into the ``committed`` tokens:
        :func:`_copy_start`), and whether a loop was found (a copy that starts with the punctuation ending
        ``target`` leaves it whole). ``best``: the hypothesis ``target`` is a prefix of (the search's best, which
        may run on into the loop): a loop whose extra copy starts inside ``target`` is cut there too, before the copy is
        complete enough to show in ``target`` itself (" ... of Kowloon. The island of" committed from " ... of
        Kowloon. The island of Kowloon.", which the next decodes, forced to continue it, repeat for good). The cut
        moves back over up to :data:`COPY_LEAD` words that the copy repeats but for case and punctuation ("The"
        for "the")."""
        if not self.loop_guard:
            return target, False
        tokens = best if best is not None and tuple(best[: len(target)]) == tuple(target) else target
        found = first_loop(tokens, committed)
        if found is None or found[0] >= len(target):
            return target, False
        costs.count("loop_cuts")
        return target[: _loop_cut(target, tokens, found, committed, tokenizer)], True

    def kept_before_loop(self, best: Sequence[int], committed: int, tokenizer: Tokenizer) -> int | None:
        """Where :meth:`loop_free` cuts ``best`` (its tokens kept) when it runs into a repetition loop past its
        ``committed`` tokens; None: no loop (or the loop guard is off)."""
        found = first_loop(best, committed) if self.loop_guard else None
        return None if found is None else _loop_cut(best, best, found, committed, tokenizer)

    def confident(self, best: Hypothesis, committed: int) -> bool:
        """True when the best hypothesis's tokens after the ``committed`` ones have a mean log-probability of at
        least the low-confidence threshold (no threshold, or no such tokens: True); uncounted."""
        return _sure(best, committed, self.logprob_threshold)

    def says_again(self, best: Sequence[int], start: int, tokenizer: Tokenizer) -> bool:
        """True when at least :data:`SAID_AGAIN` of the word pairs of ``best``'s text past its first ``start``
        tokens were said before (:func:`~simulst.sequences.repeated_share`; the text before looked back on as far
        as the loop guard looks): a paraphrase of what came before, which Whisper writes where it reads audio it
        has transcribed already and may not loop."""
        before = _words(best[max(0, start - LOOP_LOOKBACK) : start], tokenizer)
        return repeated_share(before, _words(best[start:], tokenizer)) >= SAID_AGAIN

    def foreign(self, best: Sequence[int], committed: int, tokenizer: Tokenizer) -> bool:
        """True when the stream translates into English and ``best``'s text past its ``committed`` tokens, at least
        :data:`FOREIGN_WORDS` words, holds fewer than :data:`FOREIGN_SHARE` of them common English function words
        (:data:`ENGLISH_WORDS`): the source language written where Whisper was to translate it.

        Why: once a translating Whisper has written a sentence (or a word) of the source language, the previous-text
        context that holds it keeps the next sentences in that language (a French dev talk went on in French to its
        end after "Malgré" ended a sentence). Only the text before a repetition loop is read ("in schools, in
        schools, in schools, ..." is no source language)."""
        if not self.translates:
            return False
        end = self.kept_before_loop(best, committed, tokenizer)  # (a repetition loop is the loop guard's)
        words = _words(best[committed:end], tokenizer)
        return len(words) >= FOREIGN_WORDS and sum(word in ENGLISH_WORDS for word in words) < FOREIGN_SHARE * len(words)

    @staticmethod
    def recital(new: Sequence[int], prompt: Sequence[int], tokenizer: Tokenizer) -> list[str]:
        """The words of the text ``new`` (a decode's tokens after its committed ones) that copy the initial
        ``prompt``: its longest run of consecutive words that the prompt also holds (compared without case and
        punctuation), when that run is at least :func:`recital_words` long; empty: none.

        Why: Whisper recites its previous-text prompt where the audio does not continue it (an initial prompt
        "Good morning, everyone." read back as the text of German speech it was to translate)."""
        if not prompt:
            return []
        said, source = _words(new, tokenizer), _words(prompt, tokenizer)
        start, length = longest_shared_run(said, source)
        return said[start : start + length] if length >= recital_words(len(source)) else []

    @staticmethod
    def echoes(recital: Sequence[str], new: Sequence[int], tokenizer: Tokenizer) -> bool:
        """True when the text ``new`` (a decode without the initial prompt) says at least :data:`RECITAL_ECHO` of
        the ``recital``'s words (:meth:`recital`): the speaker said them, however the prompt spells them."""
        said = set(_words(new, tokenizer))
        return sum(word in said for word in recital) >= RECITAL_ECHO * len(recital)

    def loop_only(self, best: Sequence[int], committed: int, tokenizer: Tokenizer) -> bool:
        """True when all of ``best``'s text past its ``committed`` tokens is a repetition loop: the loop guard
        finds one (:func:`~simulst.sequences.first_loop`), and every new token it would keep (:meth:`loop_free`'s cut)
        after the loop's first period repeats the token one period before it: nothing new is said before the loop's
        copies (or a copy of the committed text starts at once: nothing kept)."""
        if not self.loop_guard:
            return False
        found = first_loop(best, committed)
        if found is None:
            return False
        kept = _loop_cut(best, best, found, committed, tokenizer)
        period = found[0] - found[1]
        return all(best[i] == best[i - period] for i in range(committed + period, kept))


def _loop_cut(target: Sequence[int], tokens: Sequence[int], found: tuple[int, int], committed: int,
              tokenizer: Tokenizer) -> int:
    """Where :meth:`Guards.loop_free` cuts ``target`` for the loop ``found`` in ``tokens`` (``target`` or the
    hypothesis it is a prefix of; :func:`~simulst.sequences.first_loop`'s pair): at the extra copy's start, moved
    back over up to :data:`COPY_LEAD` words the copy repeats but for case and punctuation, then to a whole word
    (:func:`_copy_start`)."""
    keep, earlier = max(committed, found[0]), found[1]
    for _ in range(COPY_LEAD):
        if keep <= committed or earlier <= 0 or not _same_word(tokens[keep - 1], tokens[earlier - 1], tokenizer):
            break
        keep, earlier = keep - 1, earlier - 1
    return _copy_start(target, keep, committed, tokenizer)


def _sure(best: Hypothesis, committed: int, threshold: float | None) -> bool:
    """The best hypothesis's tokens after the ``committed`` ones (its ``<eos>`` counted) have a mean log-probability
    of at least ``threshold`` (None, or no such tokens: True)."""
    searched = len(best.tokens) - committed + int(best.finished)
    return threshold is None or searched <= 0 or best.score / searched >= threshold


def recital_words(prompt_words: int) -> int:
    """How many consecutive words of an initial prompt of ``prompt_words`` words a decode must copy to be suspected
    of reciting it: :data:`RECITAL_WORDS`, all but one word of a shorter prompt, and never fewer than 2 (a word of
    the prompt said, a name whose spelling it gives, is no recital)."""
    return max(2, min(RECITAL_WORDS, prompt_words - 1))


def _words(tokens: Sequence[int], tokenizer: Tokenizer) -> list[str]:
    """The words of ``tokens``' text, lower-cased, their letters and digits alone (:func:`_bare`)."""
    return [word for word in map(_bare, tokenizer.decode(list(tokens)).split()) if word]


def _bare(text: str) -> str:
    """``text`` lower-cased, its letters and digits alone: words that differ only in case and punctuation match."""
    return "".join(c for c in text.lower() if c.isalnum())


def _same_word(a: int, b: int, tokenizer: Tokenizer) -> bool:
    """Two tokens that differ only in case and punctuation (" The" and " the"; the same token: a copy that the
    loop's rules would have found already)."""
    if a == b:
        return False
    word = _bare(tokenizer.decode([a]))
    return word != "" and word == _bare(tokenizer.decode([b]))


def _copy_start(target: Sequence[int], keep: int, committed: int, tokenizer: Tokenizer) -> int:
    """Where a loop's cut falls in ``target``, its extra copy starting at ``keep``; a cut never splits a word's
    letters. A copy starting inside a word is cut back to that word's start. A copy starting with punctuation
    attached to the word before it keeps that word: cut at the next word when the punctuation closes it and the
    text up to there holds no loop (". To the north ..." after " Byron", the copy of "sentence. To the north ...":
    " Byron." is kept, new spoken text), else before the punctuation (a loop of punctuation itself)."""
    end = keep
    while end < len(target) and tokenizer.is_punctuation(target[end]) and not tokenizer.starts_word(target[end]):
        end += 1
    if end == keep:  # (no punctuation leads the copy, or it starts in the committed text: nothing new to cut)
        return _word_start(target, keep, committed, tokenizer)
    closes = end == len(target) or tokenizer.starts_word(target[end])
    return end if closes and first_loop(target[:end], committed) is None else keep


def _word_start(tokens: Sequence[int], index: int, floor: int, tokenizer: Tokenizer) -> int:
    """Where the word that holds ``tokens[index]`` starts (a cut there keeps whole words), never before ``floor``
    (the committed tokens)."""
    while index > floor and not tokenizer.starts_word(tokens[index]):
        index -= 1
    return index
