"""Fixtures shared by the test modules (the toy models themselves live in :mod:`tests.toy`)."""

from __future__ import annotations

import numpy as np
import pytest

from simulst.audio.io import load_audio
from tests.shared_assets import JFK


@pytest.fixture(scope="module")
def jfk() -> np.ndarray:
    """The shared jfk.wav (11 s, 16 kHz), loaded once per test module (a module may not see another's edits)."""
    return load_audio(JFK)
