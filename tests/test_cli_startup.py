"""What a command that runs no model does - the help, the registries' listings, an option's or a file's error - comes
without loading torch or a scorer (the parser reads the registries; the machinery is imported by the command that
runs it)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Each command runs in one fresh interpreter, in turn; after each, its exit code and which of torch and sacreBLEU
# were imported.
_PROBE = textwrap.dedent("""
    import contextlib, io, json, sys
    from simulst.cli.main import main
    results = []
    for argv in json.loads(sys.argv[1]):
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
            try:
                code = main(argv)
            except SystemExit as exit:
                code = exit.code
        results.append({"argv": argv, "code": code, "err": err.getvalue(),
                        "loaded": [name for name in ("torch", "sacrebleu") if name in sys.modules]})
    print(json.dumps(results))
""")


def _probe(commands: list[list[str]]) -> list[dict[str, object]]:
    result = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(commands)], capture_output=True, text=True,
                            timeout=120, check=True)
    return list(json.loads(result.stdout))


def test_help_listings_and_early_errors_do_not_load_torch_or_sacrebleu(tmp_path: Path) -> None:
    audio = tmp_path / "a.wav"
    audio.write_bytes(b"not audio")
    commands = [
        ["--help"], ["--list-policies"], ["--list-searches"],
        *([name, "--help"] for name in ("transcribe", "translate", "eval", "score", "sweep", "serve", "live",
                                        "train-ctc")),
        ["transcribe", "a.wav", "--policy", "soon"],  # an unknown policy: the registry's error
        ["translate", "a.wav", "--search", "wide"],  # an unknown search
        ["transcribe", "a.wav", "--chunk-ms", "fast"],  # argparse's own error
        ["transcribe", str(tmp_path / "missing.wav")],  # a missing file, before any model
        ["transcribe", str(audio)],  # not audio
    ]
    results = _probe(commands)
    assert [r["code"] for r in results] == [0] * 11 + [2] * 5
    assert not any(r["loaded"] for r in results), [(r["argv"], r["loaded"]) for r in results if r["loaded"]]
    errors = [str(r["err"]) for r in results[11:]]
    assert "unknown policy 'soon'" in errors[0] and "unknown search 'wide'" in errors[1]
    assert "--chunk-ms" in errors[2] and "missing.wav" in errors[3]


def test_the_lazy_searcher_names_are_the_classes() -> None:
    import simulst.search as search
    from simulst.search.beam import BeamSearch
    from simulst.search.blockwise import IncrementalBlockwiseBeamSearch
    from simulst.search.rewind import RewindingBeamSearch

    assert search.BeamSearch is BeamSearch and search.RewindingBeamSearch is RewindingBeamSearch
    assert search.IncrementalBlockwiseBeamSearch is IncrementalBlockwiseBeamSearch
    assert all(getattr(search, name) is not None for name in search.__all__)
    with pytest.raises(AttributeError, match="no attribute 'WideSearch'"):
        _ = search.WideSearch
