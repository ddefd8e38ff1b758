"""The speech-synthesis interface of speech output (CMU IWSLT 2023 §3.3): text increment in, audio out."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np


class SpeechSynthesizer(ABC):
    """A text-to-speech engine. It holds no per-stream state, so one engine serves many streams.

    Attributes:
        sample_rate: the rate of the audio ``synthesize`` returns.
    """

    sample_rate: int

    @abstractmethod
    def synthesize(self, text: str) -> np.ndarray:
        """Mono float32 audio in [-1, 1] at ``sample_rate`` speaking ``text`` (empty for blank text)."""
