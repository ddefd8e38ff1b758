"""Whisper's log-mel spectrogram in torch (25 ms Hann window, 10 ms hop, Slaney mel filters).

Same recipe as openai/whisper ``log_mel_spectrogram`` and transformers' ``WhisperFeatureExtractor``: power
spectrum without the last STFT frame, mel projection, log10 clamped at 1e-10, dynamic range limited to 8
(log10 units) below the maximum, then (x + 4) / 4.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

N_FFT = 400
HOP_LENGTH = 160
SAMPLE_RATE = 16000


def _hz_to_mel(freq: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above."""
    f_sp = 200.0 / 3
    mels = freq / f_sp
    min_log_hz, min_log_mel, logstep = 1000.0, 1000.0 / f_sp, np.log(6.4) / 27.0
    log_region = freq >= min_log_hz
    mels[log_region] = min_log_mel + np.log(freq[log_region] / min_log_hz) / logstep
    return mels


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    f_sp = 200.0 / 3
    freqs = f_sp * mels
    min_log_hz, min_log_mel, logstep = 1000.0, 1000.0 / f_sp, np.log(6.4) / 27.0
    log_region = mels >= min_log_mel
    freqs[log_region] = min_log_hz * np.exp(logstep * (mels[log_region] - min_log_mel))
    return freqs


@functools.lru_cache(maxsize=4)
def mel_filters(n_mels: int) -> torch.Tensor:
    """(n_mels, N_FFT/2 + 1) Slaney-normalised triangular filters from 0 Hz to 8 kHz."""
    fft_freqs = np.linspace(0, SAMPLE_RATE / 2, N_FFT // 2 + 1)
    mel_points = _mel_to_hz(np.linspace(_hz_to_mel(np.array([0.0]))[0], _hz_to_mel(np.array([8000.0]))[0], n_mels + 2))
    fdiff = np.diff(mel_points)
    ramps = mel_points[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_points[2 : n_mels + 2] - mel_points[:n_mels]))[:, None]
    return torch.from_numpy(weights.astype(np.float32))


def log_mel_spectrogram(audio: torch.Tensor, n_mels: int, n_frames: int) -> torch.Tensor:
    """(n_mels, n_frames) log-mel features of mono 16 kHz ``audio``, zero-padded (or cut) to ``n_frames``.

    The audio is zero-padded to ``n_frames * HOP_LENGTH`` samples before the STFT, as Whisper pads to 30 s.
    """
    samples = n_frames * HOP_LENGTH
    audio = audio[:samples]
    if audio.shape[0] < samples:
        audio = torch.nn.functional.pad(audio, (0, samples - audio.shape[0]))
    window = torch.hann_window(N_FFT)
    stft = torch.stft(audio, N_FFT, HOP_LENGTH, window=window, return_complex=True)
    power = stft[:, :-1].abs() ** 2
    mel = mel_filters(n_mels) @ power
    log_spec = torch.clamp(mel, min=1e-10).log10()
    log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0
