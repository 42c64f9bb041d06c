"""The ``perfsift`` entry point (perfsift/__main__.py): what it sets before the CLI loads."""

from __future__ import annotations

import os
import sys
import types

import pytest


def test_the_entry_point_starts_with_one_blas_thread_unless_the_environment_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``main()`` sets OPENBLAS_NUM_THREADS and MKL_NUM_THREADS to 1 before it imports the CLI (and
    with it numpy, whose OpenBLAS reads them once); a value the user set stays."""
    import perfsift.__main__ as entry

    seen: list[tuple[str | None, str | None]] = []
    fake = types.ModuleType("perfsift.cli")
    fake.main = lambda: seen.append((os.environ.get("OPENBLAS_NUM_THREADS"), os.environ.get("MKL_NUM_THREADS")))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "perfsift.cli", fake)
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "6")
    entry.main()
    assert seen == [("1", "6")]
