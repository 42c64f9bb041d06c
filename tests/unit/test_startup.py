"""Every perfsift process (each CLI call, each stage of ``perfsift run``) pays for its imports: scipy
alone was ~0.9 of 2.3 CPU-s under load, and perfsift needs it only inside a few functions, which
import it where they use it. A module-level ``import scipy.stats`` anywhere on the way fails this."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("scipy.stats", "scipy.optimize", "scipy.special", "scipy.linalg", "matplotlib", "sklearn", "statsmodels")


def test_the_cli_and_the_stage_runner_import_no_heavy_library() -> None:
    code = (
        "import sys, perfsift.cli, perfsift.streams.runner, perfsift.operators; "
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"imported at start: {out}"
