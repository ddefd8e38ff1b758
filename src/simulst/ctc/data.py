"""Synthetic English training speech for the CTC head: espeak-ng (and flite, when installed) + augmentation.

Real English speech is scarce offline, so the head is trained on synthesised speech. Variety matters more than
naturalness because the frozen Whisper encoder already abstracts from the speaker: every utterance draws an
engine, a voice (espeak-ng's English accents x its ~60 voice variants; flite's kal/awb/rms/slt), a speaking rate
and a pitch, then augmentation draws a tempo change (soxr resampling), a level (the shared FLEURS files peak as
low as -49 dBFS), additive noise (white or brown, 12-45 dB SNR), an optional low-pass (band-limited or
codec-like audio) and leading/trailing silence.

Everything is seeded: utterance ``i`` of a corpus depends only on ``(seed, i)``, so a corpus is reproducible.
The manifest has the shared data's format: ``id  audio  duration_s  transcript`` (tab-separated, paths relative
to the manifest's folder).
"""

from __future__ import annotations

import io
import random
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from simulst.errors import SimulstError

SAMPLE_RATE = 16000

ESPEAK_LANGUAGES = ("en-us", "en-us", "en-us", "en", "en-gb-x-rp", "en-gb-scotland", "en-gb-x-gbclan",
                    "en-gb-x-gbcwmd", "en-029", "en-us-nyc")
# espeak-ng voice variants that sound like a person (robots, whispering and effects left out).
ESPEAK_VARIANTS = (
    "", "", "", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "f1", "f2", "f3", "f4", "f5", "klatt", "klatt2",
    "klatt3", "klatt4", "klatt5", "klatt6", "Alex", "Alicia", "Andrea", "Andy", "Annie", "Denis", "Gene", "Gene2",
    "Henrique", "Hugo", "Jacky", "Lee", "Marco", "Michael", "Mike", "adam", "anika", "antonio", "aunty", "belinda",
    "benjamin", "boris", "caleb", "david", "ed", "edward", "edward2", "grandma", "grandpa", "gustave", "iven",
    "iven2", "iven3", "iven4", "john", "linda", "marcelo", "max", "michel", "miguel", "norbert", "pablo", "paul",
    "pedro", "quincy", "rob", "robert", "sandro", "shelby", "steph", "steph2", "steph3", "travis", "victor", "zac",
)
FLITE_VOICES = ("kal16", "awb", "rms", "slt")


class SynthesisError(SimulstError):
    """A speech synthesiser is missing or failed."""


@dataclass(frozen=True)
class Voice:
    """One synthesis setting.

    Attributes:
        engine: ``espeak-ng`` or ``flite``.
        name: espeak-ng ``LANG[+VARIANT]`` or a flite voice.
        rate: espeak-ng words per minute, or flite's duration stretch x 100 (100 = normal).
        pitch: espeak-ng pitch 0-99, or flite's mean F0 in Hz.
    """

    engine: str
    name: str
    rate: int
    pitch: int


def engines() -> list[str]:
    """The synthesisers installed on this machine."""
    return [e for e in ("espeak-ng", "flite") if shutil.which(e)]


def random_voice(rng: random.Random, available: Sequence[str]) -> Voice:
    """Draw a voice: espeak-ng for two utterances in three when flite is also there."""
    if not available:
        raise SynthesisError("no speech synthesiser found: apt-get install espeak-ng (and optionally flite)")
    engine = "flite" if "flite" in available and (len(available) == 1 or rng.random() < 1 / 3) else "espeak-ng"
    if engine == "flite":
        name = rng.choice(FLITE_VOICES)
        mean_f0 = {"slt": 170, "kal16": 105, "awb": 110, "rms": 100}[name]
        return Voice(engine, name, rng.randint(80, 125), int(mean_f0 * rng.uniform(0.8, 1.25)))
    variant = rng.choice(ESPEAK_VARIANTS)
    name = rng.choice(ESPEAK_LANGUAGES) + (f"+{variant}" if variant else "")
    return Voice(engine, name, rng.randint(125, 215), rng.randint(20, 80))


def synthesize(text: str, voice: Voice) -> np.ndarray:
    """Speech of ``text`` as mono float32 at 16 kHz."""
    try:
        if voice.engine == "flite":
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "out.wav"
                subprocess.run(
                    ["flite", "-voice", voice.name, "--setf", f"duration_stretch={voice.rate / 100:.2f}",
                     "--setf", f"int_f0_target_mean={voice.pitch}", "-t", text, "-o", str(out)],
                    check=True, capture_output=True, timeout=120,
                )
                audio, rate = sf.read(str(out), dtype="float32", always_2d=True)
        else:
            done = subprocess.run(
                ["espeak-ng", "-v", voice.name, "-s", str(voice.rate), "-p", str(voice.pitch), "--stdout", text],
                check=True, capture_output=True, timeout=120,
            )
            audio, rate = sf.read(io.BytesIO(done.stdout), dtype="float32", always_2d=True)
    except (OSError, subprocess.SubprocessError, sf.LibsndfileError) as err:
        raise SynthesisError(f"{voice.engine} failed on {voice.name}: {err}") from err
    mono = audio.mean(axis=1)
    if rate != SAMPLE_RATE:
        mono = soxr.resample(mono, rate, SAMPLE_RATE, quality="HQ")
    return np.ascontiguousarray(mono, dtype=np.float32)


def augment(audio: np.ndarray, rng: random.Random) -> np.ndarray:
    """Tempo, level, noise, band limit and silence padding (see the module notes)."""
    if rng.random() < 0.5:  # tempo/pitch change by resampling, as speed perturbation does
        factor = rng.uniform(0.88, 1.12)
        audio = soxr.resample(audio, SAMPLE_RATE, int(SAMPLE_RATE / factor), quality="HQ").astype(np.float32)
    if rng.random() < 0.3:  # low-pass: cumulative moving average of a few samples (cheap, rolls off highs)
        width = rng.choice((2, 3, 4, 6))
        audio = np.convolve(audio, np.ones(width, dtype=np.float32) / width, mode="same").astype(np.float32)
    pad = [np.zeros(int(rng.uniform(0.0, 0.6) * SAMPLE_RATE), dtype=np.float32) for _ in range(2)]
    audio = np.concatenate([pad[0], audio, pad[1]])
    peak = float(np.max(np.abs(audio))) or 1.0
    audio = audio / peak * 10 ** (rng.uniform(-45.0, -1.0) / 20)
    if rng.random() < 0.7:
        nprng = np.random.default_rng(rng.randrange(2**32))
        noise = np.asarray(nprng.standard_normal(int(audio.shape[0])), dtype=np.float32)
        if rng.random() < 0.5:  # brown-ish noise: integrated white noise, high-passed by the mean removal
            noise = np.cumsum(noise) * 0.02
            noise -= np.convolve(noise, np.ones(801) / 801, mode="same")
        speech_power = float(np.mean(audio**2)) or 1e-12
        noise *= np.sqrt(speech_power / (float(np.mean(noise**2)) or 1e-12) / 10 ** (rng.uniform(12, 45) / 10))
        audio = audio + noise
    return np.clip(audio, -1.0, 1.0).astype(np.float32)


def _make_one(job: tuple[int, int, str, str, tuple[str, ...]]) -> tuple[str, str, float, str] | None:
    index, seed, text, folder, available = job
    rng = random.Random(seed * 1_000_003 + index)
    voice = random_voice(rng, available)
    try:
        audio = augment(synthesize(text, voice), rng)
    except SynthesisError:
        return None
    name = f"syn-{index:06d}"
    sf.write(str(Path(folder) / f"{name}.wav"), audio, SAMPLE_RATE, subtype="PCM_16")
    return name, f"audio/{name}.wav", audio.shape[0] / SAMPLE_RATE, text


def _make_or_reuse(job: tuple[int, int, str, str, tuple[str, ...]]) -> tuple[str, str, float, str] | None:
    index, _, text, folder, _ = job
    name = f"syn-{index:06d}"
    path = Path(folder) / f"{name}.wav"
    if path.is_file():  # utterance i depends only on (seed, i, text): an existing file is the same utterance
        return name, f"audio/{name}.wav", sf.info(str(path)).frames / SAMPLE_RATE, text
    return _make_one(job)


def synthesize_corpus(sentences: Sequence[str], out_dir: Path, seed: int = 0, workers: int = 2) -> Path:
    """Synthesise one utterance per sentence into ``out_dir/audio`` and write ``out_dir/manifest.tsv``.

    Returns the manifest path. Utterances whose synthesis fails are left out. Audio files already in
    ``out_dir/audio`` are reused (a corpus grows or shrinks reproducibly with the number of sentences).
    """
    audio_dir = out_dir / "audio"
    audio_dir.mkdir(parents=True, exist_ok=True)
    available = tuple(engines())
    jobs = [(i, seed, text, str(audio_dir), available) for i, text in enumerate(sentences)]
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            rows = list(pool.map(_make_or_reuse, jobs, chunksize=16))
    else:
        rows = [_make_or_reuse(job) for job in jobs]
    manifest = out_dir / "manifest.tsv"
    with manifest.open("w", encoding="utf-8") as f:
        f.write("id\taudio\tduration_s\ttranscript\n")
        for row in rows:
            if row is not None:
                f.write(f"{row[0]}\t{row[1]}\t{row[2]:.4f}\t{row[3]}\n")
    return manifest
