"""The memory a ``simulst transcribe FILE`` process peaks at, against the file's length.

The CLI reads a file a block at a time (:class:`simulst.audio.io.AudioReader`) and the stream holds a bounded audio
buffer, so the peak should not grow with the file. Each run writes a 44.1 kHz stereo 16-bit wav of faint noise
(about -60 dBFS: not digital silence, no speech for the VAD, so the model decodes nothing and the run measures the
reading) of each length into a temporary folder, runs the README's transcribe command on it under the default
preset and reads the child's peak resident set size (``getrusage``). Writes ``bench/results/file_memory.md``.

    .venv/bin/python bench/file_memory.py [--minutes 0.5 5 30]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import load_average, machine_note, markdown_table, write_report

RESULTS = Path(__file__).resolve().parent / "results"
RATE = 44100


def write_noise(path: Path, minutes: float) -> None:
    """``minutes`` of faint stereo noise at 44.1 kHz, 16-bit, written ten seconds at a time."""
    rng = np.random.default_rng(0)
    left = int(minutes * 60 * RATE)
    with sf.SoundFile(str(path), "w", RATE, 2, "PCM_16") as out:
        while left > 0:
            n = min(left, 10 * RATE)
            out.write((rng.standard_normal((n, 2)) * 1e-3).astype(np.float32))
            left -= n


# Run in a fresh process per file: getrusage(RUSAGE_CHILDREN) gives the largest peak of all the children so far.
_MEASURE = """
import resource, subprocess, sys
done = subprocess.run([sys.executable, "-m", "simulst.cli", "transcribe", sys.argv[1], "--json"],
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, done.returncode)
"""


def peak_rss_mb(path: Path) -> tuple[float, int]:
    """The peak resident set size (MB) of one ``simulst transcribe`` process on ``path``, and its exit code."""
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(path)], capture_output=True, text=True, check=True)
    peak_kb, code = out.stdout.split()
    return int(peak_kb) / 1024.0, int(code)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, nargs="+", default=[0.5, 5.0, 30.0])
    args = parser.parse_args()
    load_before = load_average()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for minutes in sorted(args.minutes):
            path = Path(folder) / f"noise-{minutes:g}min.wav"
            write_noise(path, minutes)
            peak, code = peak_rss_mb(path)
            rows.append({"minutes": minutes, "file MB": path.stat().st_size / 1e6,
                         "decoded MB (float32, 44.1 kHz stereo)": minutes * 60 * RATE * 2 * 4 / 1e6,
                         "peak RSS MB": peak, "exit code": code})
            path.unlink()
            print(rows[-1], flush=True)
    text = (
        "# Peak memory of `simulst transcribe FILE` against the file's length\n\n"
        f"{machine_note(load_before)}\n\n"
        "`bench/file_memory.py`: faint stereo noise at 44.1 kHz (no speech: nothing is decoded, the run measures the "
        "reading and the stream's buffers), the default preset; the peak resident set size of each child process. "
        "Exit code 0: the noise is not digital silence.\n\n"
        + markdown_table(rows, list(rows[0]))
    )
    write_report(RESULTS / "file_memory.md", text)


if __name__ == "__main__":
    main()
