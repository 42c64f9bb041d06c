"""The code stays ruff- and mypy-clean (run as part of the suite so CI enforces it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["perfsift", "schemas", "operators", "producers", "streams", "models", "tests", "bench"]


def tool(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed; it is in the [test] extra")
    return path


def test_ruff() -> None:
    r = subprocess.run([tool("ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy() -> None:
    r = subprocess.run([tool("mypy"), *SOURCES], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
