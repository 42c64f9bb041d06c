"""The code stays ruff- and mypy-clean (run as part of the suite so CI enforces it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import typecheck

ROOT = Path(__file__).resolve().parents[2]


def tool(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed; it is in the [test] extra")
    return path


def test_ruff() -> None:
    r = subprocess.run([tool("ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy() -> None:
    """On the installed layout (perfsift.*), so imports across the sub-packages are checked."""
    tool("mypy")
    r = typecheck.run()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success: no issues found" in r.stdout and " 0 source files" not in r.stdout


def test_mypy_sees_the_installed_names(tmp_path: Path) -> None:
    """A wrong name in a perfsift.* import is an error (it was Any when mypy could not follow the
    editable install's import hook)."""
    (tmp_path / "typecheck_probe.py").write_text("from perfsift.schemas import NoSuchName as NoSuchName\n")
    r = typecheck.run(["-m", "typecheck_probe"], path=(tmp_path,))
    assert r.returncode == 1 and 'Module "perfsift.schemas" has no attribute "NoSuchName"' in r.stdout, r.stdout
