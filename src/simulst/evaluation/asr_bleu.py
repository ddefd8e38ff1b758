"""ASR-BLEU of speech output (CMU IWSLT 2023 §4): transcribe the translated speech with an ASR model of the
target language and score the transcripts with BLEU against references that are lower-cased and unpunctuated
(the paper uses Whisper-small; any :class:`~simulst.models.base.SpeechModel` of the target language works).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

import numpy as np
import sacrebleu
import soxr

from simulst.config import PolicyOptions, StreamOptions
from simulst.errors import OptionError
from simulst.models.base import SpeechModel
from simulst.streaming.session import Session


def normalize_for_asr_bleu(text: str) -> str:
    """Lower-case, punctuation removed (Unicode categories P*), whitespace collapsed."""
    kept = "".join(" " if unicodedata.category(ch).startswith("P") else ch for ch in text.lower())
    return " ".join(kept.split())


def transcribe_offline(asr: SpeechModel, audio: np.ndarray, sample_rate: int) -> str:
    """Offline transcript of mono audio at ``sample_rate``; audio longer than the model's window is cut into
    window-sized pieces whose transcripts are joined."""
    if sample_rate != asr.sample_rate:
        audio = soxr.resample(audio, sample_rate, asr.sample_rate).astype(np.float32)
    window = max(1, asr.max_source_samples - asr.sample_rate)  # 1 s of margin
    texts: list[str] = []
    for pos in range(0, audio.shape[0], window):
        piece = audio[pos : pos + window]
        if piece.shape[0] < asr.sample_rate // 10:
            continue
        session = Session(asr, StreamOptions(chunk_ms=1000.0, policy=PolicyOptions("offline", 0)))
        session.push(piece)
        session.finish()
        texts.append(session.text.strip())
    return " ".join(t for t in texts if t)


def asr_bleu(
    speech: Sequence[np.ndarray],
    references: Sequence[str],
    asr: SpeechModel,
    sample_rate: int,
) -> tuple[float, list[str]]:
    """Corpus ASR-BLEU of translated speech (one array per utterance) and the transcripts.

    Both transcripts and references are normalised with :func:`normalize_for_asr_bleu`.
    """
    if len(speech) != len(references):
        raise OptionError(f"{len(speech)} speech outputs for {len(references)} references")
    transcripts = [transcribe_offline(asr, audio, sample_rate) for audio in speech]
    hyps = [normalize_for_asr_bleu(t) for t in transcripts]
    refs = [normalize_for_asr_bleu(r) for r in references]
    score = sacrebleu.corpus_bleu(hyps, [refs]).score if hyps else 0.0
    return float(score), transcripts
