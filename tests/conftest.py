"""Fixtures shared by the test modules (the toy models themselves live in :mod:`tests.toy`)."""

from __future__ import annotations

import fcntl
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from simulst.audio.io import load_audio
from tests.shared_assets import JFK


@pytest.fixture(scope="module")
def jfk() -> np.ndarray:
    """The shared jfk.wav (11 s, 16 kHz), loaded once per test module (a module may not see another's edits)."""
    return load_audio(JFK)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One intra-op thread for a test (as the golden tests): fast on a shared machine, and a fixed reduction order."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def one_ray_at_a_time() -> Iterator[None]:
    """Held by a module that starts Ray, for all of its tests: two Ray instances on one machine contend for its
    default ports, and the suite's modules may run at once in several pytest workers (pytest-xdist)."""
    with (Path(tempfile.gettempdir()) / "simulst-tests-ray.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
