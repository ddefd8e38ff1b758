"""espeak-ng as a speech synthesizer (Debian package ``espeak-ng``; about a hundred languages, offline).

Every call runs ``espeak-ng -v VOICE -s WPM --stdout`` on the text (read from stdin) and decodes the WAV it
writes (espeak-ng's streaming header declares an unknown length; soundfile reads such files).
"""

from __future__ import annotations

import io
import shutil
import subprocess
from functools import lru_cache

import numpy as np
import soundfile as sf
import soxr

from simulst.errors import OptionError, SimulstError
from simulst.external import program_listing
from simulst.tts.base import SpeechSynthesizer

TIMEOUT_S = 60.0


@lru_cache(maxsize=4)
def espeak_voices(executable: str = "espeak-ng") -> tuple[str, ...]:
    """Names and language codes of the installed espeak-ng voices; raises ``ModelLoadError`` when it is missing."""
    listing = program_listing(
        executable, "--voices", f"speech output needs the '{executable}' command (Debian: apt-get install espeak-ng)"
    )
    names: list[str] = []
    for line in listing.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 5:
            names += [fields[1], fields[3], fields[4]]  # language, voice name, file (e.g. es, Spanish_(Spain), roa/es)
            names.append(fields[4].rsplit("/", 1)[-1])
    return tuple(dict.fromkeys(names))


class EspeakSynthesizer(SpeechSynthesizer):
    """espeak-ng speaking with one voice.

    Args:
        voice: an espeak-ng voice or language code (``es``, ``es-419``, ``en-us``, ``ca``, ...).
        words_per_minute: speaking rate (espeak-ng's default 175).
        executable: the ``espeak-ng`` command.

    Raises:
        ModelLoadError: espeak-ng is not installed.
        OptionError: the voice is unknown, or the rate is out of range.
    """

    sample_rate = 22050

    def __init__(self, voice: str = "en", words_per_minute: int = 175, executable: str = "espeak-ng") -> None:
        voices = espeak_voices(executable)
        if voice not in voices:
            raise OptionError(f"espeak-ng has no voice {voice!r} (try a language code such as es, en-us, ca; "
                              "'espeak-ng --voices' lists them)")
        if not 80 <= words_per_minute <= 450:
            raise OptionError(f"speaking rate must be 80..450 words per minute, got {words_per_minute}")
        self.voice = voice
        self.words_per_minute = words_per_minute
        self._executable = shutil.which(executable) or executable

    def synthesize(self, text: str) -> np.ndarray:
        text = " ".join(text.split())
        if not text:
            return np.zeros(0, dtype=np.float32)
        try:
            done = subprocess.run(
                [self._executable, "-v", self.voice, "-s", str(self.words_per_minute), "--stdout"],
                input=text.encode("utf-8"),
                capture_output=True,
                timeout=TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as err:
            raise SimulstError(f"espeak-ng failed: {err}") from err
        if done.returncode != 0 or not done.stdout:
            raise SimulstError(f"espeak-ng failed: {done.stderr.decode(errors='replace').strip()[:300]}")
        audio, rate = sf.read(io.BytesIO(done.stdout), dtype="float32", always_2d=True)
        mono = np.ascontiguousarray(audio.mean(axis=1), dtype=np.float32)
        if rate != self.sample_rate:  # espeak-ng builds with another output rate exist
            mono = soxr.resample(mono, rate, self.sample_rate).astype(np.float32)
        return mono
