"""The ``simulst`` command: transcribe / translate (live streams), eval / score / sweep, train-ctc."""

from simulst.cli.main import main

__all__ = ["main"]
