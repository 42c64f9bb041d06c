"""The ``perfsift`` entry point (perfsift/__main__.py): what it sets before the CLI loads."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

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


def test_sigusr1_writes_every_threads_stack_and_the_process_goes_on(tmp_path: Path) -> None:
    """What ``perfsift`` turns on as it starts (streams/logs.py: enable_stack_dumps): a worker that
    stopped answering shows where each thread is, in its log, without being stopped."""
    code = (
        "import os, signal, threading, time\n"
        "from perfsift.streams.logs import enable_stack_dumps\n"
        "enable_stack_dumps()\n"
        "def parked_in_a_helper_thread(): time.sleep(30)\n"
        "threading.Thread(target=parked_in_a_helper_thread, daemon=True).start()\n"
        "time.sleep(0.2)\n"
        "os.kill(os.getpid(), signal.SIGUSR1)\n"
        "time.sleep(0.2)\n"
        "print('still running')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "still running"
    assert "parked_in_a_helper_thread" in r.stderr  # the other thread's frame
    assert "Current thread" in r.stderr  # and the main thread's
