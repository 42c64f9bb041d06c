"""Run the perfsift command line the way a user does: a subprocess, output captured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def perfsift(*args: str, timeout: float = 180, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "perfsift", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )
