"""docs/cli.md is generated from the argument parser (scripts/cli_reference.py) and must match it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "cli_reference.py"
REGENERATE = ".venv/bin/python scripts/cli_reference.py"


def _generator() -> ModuleType:
    """scripts/cli_reference.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("cli_reference", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_cli_reference_is_current() -> None:
    committed = ROOT / "docs" / "cli.md"
    assert committed.exists(), f"docs/cli.md is missing: run {REGENERATE}"
    generated = _generator().render()
    assert committed.read_text(encoding="utf-8") == generated, (
        f"docs/cli.md is out of date with the argument parser: run {REGENERATE} and commit the result"
    )


def test_reference_does_not_depend_on_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    generator = _generator()
    monkeypatch.setenv("COLUMNS", "40")
    narrow = generator.render()
    monkeypatch.setenv("COLUMNS", "250")
    assert generator.render() == narrow


def test_check_mode_reports_a_stale_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    generator = _generator()
    stale = tmp_path / "cli.md"
    stale.write_text("# Command-line reference\n", encoding="utf-8")
    assert generator.main(["--check", "--output", str(stale)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert generator.main(["--output", str(stale)]) == 0
    assert generator.main(["--check", "--output", str(stale)]) == 0


def test_every_subcommand_is_documented() -> None:
    text = _generator().render()
    for name in ("transcribe", "translate", "eval", "score", "sweep", "train-ctc", "serve", "live"):
        assert f"\n## {name}\n" in text, name
