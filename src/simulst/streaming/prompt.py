"""The decoder prompt of a stream: the fixed task prompt and the previous-text context.

The fixed part (for Whisper: start of transcript, language, task) is pinned at the stream's first decode and kept.
Where a multilingual model detects the language, it is pinned only once sure - detected in at least
:data:`LANGUAGE_MIN_S` seconds of audio with a probability of at least :data:`LANGUAGE_CONFIDENCE` - as a second
or two of speech is too little to tell languages apart (openai-whisper detects from its first 30 s window); until
then every decode detects it afresh in its own audio and is prompted with what it found. Before the fixed part,
the committed text of audio already trimmed away conditions the decoder
(:class:`~simulst.models.base.PreviousTextPrompter`, openai/whisper's previous-text prompt): at most
``context_tokens`` tokens, from where the context last started afresh, and with the ``sentence`` scope only the
sentence the buffer starts in.

An initial prompt - text said before the stream's audio (openai-whisper's ``initial_prompt``, e.g. an OpenAI
request's ``prompt``) - is carried into every decode as openai-whisper's ``carry_initial_prompt`` does: its last
:data:`MAX_PREVIOUS_TOKENS` tokens first, then as much of the stream's own previous text (its last tokens) as fits
in that many.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Literal

from simulst.config.stream import MAX_PREVIOUS_TOKENS
from simulst.errors import OptionError
from simulst.models.base import DecoderModel, Encoded, LanguageDetector, PreviousTextPrompter, SpeechModel
from simulst.streaming.commit import sentence_start
from simulst.types import Costs

LANGUAGE_MIN_S = 3.0
"""The least audio (seconds) a detected language is pinned from."""
LANGUAGE_CONFIDENCE = 0.9
"""The least probability (among the language tokens) a detected language is pinned with."""


def initial_prompt(model: DecoderModel, text: str) -> tuple[int, ...]:
    """The tokens of ``text`` as an initial prompt for ``model`` (its last :data:`MAX_PREVIOUS_TOKENS`; the text
    is read as following a space, as openai-whisper encodes its prompt).

    Raises:
        OptionError: the model takes no previous text.
    """
    if not isinstance(model, PreviousTextPrompter):
        raise OptionError("this model takes no prompt (no previous-text conditioning)")
    return tuple(model.tokenizer.encode(" " + text.strip()))[-MAX_PREVIOUS_TOKENS:]


class PromptBuilder:
    """The decoder prompt of one stream.

    Args:
        context_tokens: the most committed tokens carried as previous text (0: none).
        scope: ``all`` or ``sentence`` (resolved from ``auto``): which committed text the context holds.
        initial: the tokens of an initial prompt (:func:`initial_prompt`), carried before the context in every
            decode (empty: none).

    Attributes:
        fixed: the fixed prompt of the latest decode (None before the first).
        pinned: whether :attr:`fixed` is kept from now on (False while the language is still being detected).
        context_from: the context holds committed tokens from here on (moved by :meth:`restart`).
        initial: the initial prompt's last :data:`MAX_PREVIOUS_TOKENS` tokens.
    """

    def __init__(self, context_tokens: int, scope: Literal["sentence", "all"], initial: Sequence[int] = ()) -> None:
        self.context_tokens = context_tokens
        self.scope = scope
        self.fixed: tuple[int, ...] | None = None
        self.pinned = False
        self._detected_in: weakref.ref[Encoded] | None = None  # (weak: a stream's encodings are large)
        self.context_from = 0
        self.initial = tuple(initial)[-MAX_PREVIOUS_TOKENS:]

    def pin(self, model: SpeechModel, enc: Encoded, costs: Costs) -> tuple[int, ...]:
        """The fixed prompt of a decode of ``enc``: the pinned one, else the model's for ``enc`` (the language
        detected there), pinned where the language is set or detected surely enough (see the module)."""
        if self.pinned or (self._detected_in is not None and self._detected_in() is enc):
            assert self.fixed is not None  # (a decode searched again detects nothing new)
            return self.fixed
        if isinstance(model, LanguageDetector):
            self._detected_in = weakref.ref(enc)
            prompt, probability = model.language_prompt(enc, costs)
            self.pinned = probability is None or (
                probability >= LANGUAGE_CONFIDENCE and enc.audio_samples >= LANGUAGE_MIN_S * model.sample_rate)
        else:
            prompt, self.pinned = list(model.prompt(enc, costs)), True
        self.fixed = tuple(prompt)
        return self.fixed

    def build(self, model: SpeechModel, before: Sequence[int], initial: bool = True) -> tuple[int, ...]:
        """The whole prompt of a decode whose buffer follows the committed tokens ``before`` (pinned first);
        ``initial``: with the initial prompt (False: as if there were none)."""
        assert self.fixed is not None, "pin the fixed prompt first"
        earlier = self._context(model, before)
        if not isinstance(model, PreviousTextPrompter):
            return self.fixed
        if self.initial and initial:
            return (*self._carried(model, earlier), *self.fixed)
        if earlier:
            return (*model.previous_text(earlier, self.context_tokens), *self.fixed)
        return self.fixed

    def carries_context(self, model: SpeechModel, before: Sequence[int]) -> bool:
        """True when a decode whose buffer follows the committed tokens ``before`` is prompted with some of them
        (the stream's own previous text; an initial prompt does not count)."""
        return isinstance(model, PreviousTextPrompter) and bool(self._context(model, before))

    def _context(self, model: SpeechModel, before: Sequence[int]) -> tuple[int, ...]:
        """The committed tokens (of ``before``) that the context holds."""
        earlier = tuple(before[self.context_from :][-self.context_tokens :]) if self.context_tokens else ()
        if self.scope == "sentence":
            earlier = earlier[sentence_start(earlier, model.tokenizer) :]
        return earlier

    def _carried(self, model: PreviousTextPrompter, earlier: tuple[int, ...]) -> list[int]:
        """The previous text with the initial prompt: the prompt, then the last tokens of the stream's own previous
        text (as :meth:`build` would carry it alone) that fit in :data:`MAX_PREVIOUS_TOKENS` with it."""
        own = model.previous_text(earlier, self.context_tokens)[1:] if earlier else []  # (less <|startofprev|>)
        room = MAX_PREVIOUS_TOKENS - len(self.initial)
        kept = own[-room:] if room > 0 and own else []
        return model.previous_text((*self.initial, *kept), MAX_PREVIOUS_TOKENS)

    def restart(self, committed: int) -> None:
        """The context starts afresh after the first ``committed`` tokens (after a long pause)."""
        self.context_from = committed

    def end_sentence(self, committed: int) -> None:
        """A pause ended a segment after ``committed`` tokens: with the sentence scope, it ends the sentence, full
        stop written or not (else an unpunctuated segment keeps every sentence before it in the context, and
        Whisper copies their words into the next)."""
        if self.scope == "sentence":
            self.context_from = committed
