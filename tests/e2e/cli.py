"""Run the perfsift command line the way a user does: a subprocess, output captured; or, where a
test is about what a command prints and not about the process, :func:`perfsift_here`: the same
``main()`` in this process (no interpreter start and no imports, ~1.5 CPU-s a call under load)."""

from __future__ import annotations

import contextlib
import io
import logging
import subprocess
import sys
from pathlib import Path

import pytest


def perfsift(*args: str, timeout: float = 180, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "perfsift", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )


def perfsift_here(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``perfsift ARGS`` through the console script's ``main()`` in this process, stdout and stderr
    captured (neither a terminal, as with :func:`perfsift`); the exit code is ``main``'s."""
    from perfsift.cli import main
    from perfsift.streams import logs

    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    # main() sets up logging for the whole process (root's handlers and level, the Kafka logger's
    # level): put them back afterwards, so that later tests in this worker log as before
    known = logging.Logger.manager.loggerDict.values()
    loggers = [logging.getLogger(), *(lg for lg in known if isinstance(lg, logging.Logger))]
    saved = [(lg, lg.level, lg.handlers[:]) for lg in loggers]
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        mp.setattr(sys, "argv", ["perfsift", *args])
        mp.setattr(logs, "_current", logs._current)
        if cwd is not None:
            mp.chdir(cwd)
        try:
            main()
        except SystemExit as exc:
            code = exc.code
        finally:
            for lg, level, handlers in saved:
                lg.setLevel(level)
                lg.handlers[:] = handlers
    rc = code if isinstance(code, int) else (0 if code is None else 1)
    return subprocess.CompletedProcess(["perfsift", *args], rc, out.getvalue(), err.getvalue())
