"""Installed command-line programs that back some stages (Apertium for MT, espeak-ng for speech output).

One place finds such a program and asks it what it offers, so that its absence or failure is one clear
:class:`~simulst.errors.ModelLoadError` at the boundary rather than a bare ``FileNotFoundError`` deep inside.
"""

from __future__ import annotations

import shutil
import subprocess

from simulst.errors import ModelLoadError

LISTING_TIMEOUT_S = 60.0
"""How long a program may take to list what it offers (``apertium -l``, ``espeak-ng --voices``)."""


def program_listing(executable: str, option: str, install_hint: str) -> str:
    """The standard output of ``executable option`` (e.g. ``apertium -l``), whatever its exit status.

    Args:
        executable: the command, looked up on ``PATH``.
        option: the one argument that makes it list what it offers.
        install_hint: what the error says when the command is missing, e.g.
            ``"speech output needs the 'espeak-ng' command (Debian: apt-get install espeak-ng)"``.

    Raises:
        ModelLoadError: the command is not on ``PATH`` (the message is ``install_hint``), or it could not be run
            or did not finish within :data:`LISTING_TIMEOUT_S`.
    """
    path = shutil.which(executable)
    if path is None:
        raise ModelLoadError(install_hint)
    try:
        listing = subprocess.run([path, option], capture_output=True, text=True, timeout=LISTING_TIMEOUT_S,
                                 check=False)
    except (OSError, subprocess.SubprocessError) as err:
        raise ModelLoadError(f"'{executable} {option}' failed: {err}") from err
    return listing.stdout
