"""The decoder prompt of a stream: the fixed task prompt and the previous-text context.

The fixed part (for Whisper: start of transcript, language, task) is pinned at the stream's first decode - a
multilingual model detects the language there - and kept. Before it, the committed text of audio already
trimmed away conditions the decoder (:class:`~simulst.models.base.PreviousTextPrompter`, openai/whisper's
previous-text prompt): at most ``context_tokens`` tokens, from where the context last started afresh, and with
the ``sentence`` scope only the sentence the buffer starts in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from simulst.models.base import Encoded, PreviousTextPrompter, SpeechModel
from simulst.streaming.commit import sentence_start
from simulst.types import Costs


class PromptBuilder:
    """The decoder prompt of one stream.

    Args:
        context_tokens: the most committed tokens carried as previous text (0: none).
        scope: ``all`` or ``sentence`` (resolved from ``auto``): which committed text the context holds.

    Attributes:
        fixed: the fixed prompt, pinned at the first decode (None before).
        context_from: the context holds committed tokens from here on (moved by :meth:`restart`).
    """

    def __init__(self, context_tokens: int, scope: Literal["sentence", "all"]) -> None:
        self.context_tokens = context_tokens
        self.scope = scope
        self.fixed: tuple[int, ...] | None = None
        self.context_from = 0

    def pin(self, model: SpeechModel, enc: Encoded, costs: Costs) -> tuple[int, ...]:
        """The fixed prompt: pinned now from ``enc`` if not yet (the language detected there), then kept."""
        if self.fixed is None:
            self.fixed = tuple(model.prompt(enc, costs))
        return self.fixed

    def build(self, model: SpeechModel, before: Sequence[int]) -> tuple[int, ...]:
        """The whole prompt of a decode whose buffer follows the committed tokens ``before`` (pinned first)."""
        assert self.fixed is not None, "pin the fixed prompt first"
        earlier = tuple(before[self.context_from :][-self.context_tokens :]) if self.context_tokens else ()
        if self.scope == "sentence":
            earlier = earlier[sentence_start(earlier, model.tokenizer) :]
        if earlier and isinstance(model, PreviousTextPrompter):
            return (*model.previous_text(earlier, self.context_tokens), *self.fixed)
        return self.fixed

    def restart(self, committed: int) -> None:
        """The context starts afresh after the first ``committed`` tokens (after a long pause)."""
        self.context_from = committed

    def end_sentence(self, committed: int) -> None:
        """A pause ended a segment after ``committed`` tokens: with the sentence scope, it ends the sentence, full
        stop written or not (else an unpunctuated segment keeps every sentence before it in the context, and
        Whisper copies their words into the next)."""
        if self.scope == "sentence":
            self.context_from = committed
