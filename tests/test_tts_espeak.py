"""espeak-ng speech synthesis, and ASR-BLEU with the shared Whisper tiny.en on English synthetic speech."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from simulst.errors import ModelLoadError, OptionError
from simulst.evaluation.asr_bleu import asr_bleu
from simulst.tts.espeak import EspeakSynthesizer
from tests.shared_assets import WHISPER_TINY_EN, needs_shared

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")


@needs_espeak
def test_spanish_speech_is_audible() -> None:
    tts = EspeakSynthesizer("es")
    audio = tts.synthesize("Así que, mis compatriotas")
    assert audio.dtype == np.float32 and audio.ndim == 1
    seconds = audio.shape[0] / tts.sample_rate
    assert 0.8 < seconds < 5.0
    assert float(np.sqrt(np.mean(audio**2))) > 0.01 and np.abs(audio).max() <= 1.0
    assert tts.synthesize("   ").shape == (0,)
    slow = EspeakSynthesizer("es", words_per_minute=100).synthesize("Así que, mis compatriotas")
    assert slow.shape[0] > audio.shape[0]


def test_bad_voice_or_missing_engine() -> None:
    with pytest.raises(ModelLoadError):
        EspeakSynthesizer("es", executable="/nonexistent/espeak-ng")
    if shutil.which("espeak-ng") is not None:
        with pytest.raises(OptionError):
            EspeakSynthesizer("klingon")
        with pytest.raises(OptionError):
            EspeakSynthesizer("es", words_per_minute=10)


@pytest.mark.real
@needs_shared
@needs_espeak
def test_asr_bleu_of_english_synthetic_speech() -> None:
    from simulst.models.loading import load_model

    text = "Ask not what your country can do for you, ask what you can do for your country."
    tts = EspeakSynthesizer("en-us", words_per_minute=150)
    score, transcripts = asr_bleu([tts.synthesize(text)], [text], load_model(str(WHISPER_TINY_EN)), tts.sample_rate)
    assert "country" in transcripts[0].lower()
    assert score > 40.0
