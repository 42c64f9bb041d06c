"""What a ``perfsift`` process pays before it works (issue #29): the command line's help screens and
the commands that do not run an operator import neither numba (the operators' compiled kernels,
about 0.7 CPU-s), nor scipy, nor matplotlib, nor the offline analysis: each command imports its
heavy modules when it runs (docs/architecture.md, "Process start")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

#: packages (and modules) a help screen or a light command must not load
HEAVY = ("numba", "scipy", "matplotlib", "sklearn", "perfsift.analysis.quality", "perfsift.operators.clean.clean")

_CHILD = """
import contextlib, io, json, sys
from perfsift.cli import app
from perfsift.cli.shell import cli_command, run_cli

command = cli_command(app)
codes = []
for args in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        codes.append(run_cli(command, args))
heavy = json.loads(sys.argv[2])
print(json.dumps({"codes": codes, "loaded": sorted(m for m in sys.modules if m in heavy or m.split(".")[0] in heavy)}))
"""


def _loaded_after(commands: list[list[str]], cwd: Path) -> tuple[list[int], list[str]]:
    """Run ``commands`` in one fresh interpreter as ``perfsift`` does; their exit codes and the
    heavy modules loaded by then."""
    r = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(commands), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    return result["codes"], result["loaded"]


def test_help_screens_load_no_operator_kernels_scipy_or_matplotlib(tmp_path: Path) -> None:
    commands = [[], ["--help"], ["synth", "--help"], ["pursuit", "--help"], ["contract", "derive", "--help"]]
    commands += [["clean", "--help"], ["quality", "--help"], ["run", "--help"], ["worker", "--help"]]
    codes, loaded = _loaded_after(commands, tmp_path)
    assert codes == [2] + [0] * (len(commands) - 1)  # a bare perfsift prints the help with exit code 2
    assert loaded == []


def test_synth_loads_no_operator_kernels(tmp_path: Path) -> None:
    """A synthetic trace: no operator runs, so no kernel."""
    out = tmp_path / "t.csv"
    commands = [["synth", "--scenario", "sweep3d", "--nodes", "3", "--duration", "5", "--out", str(out)]]
    codes, loaded = _loaded_after(commands, tmp_path)
    assert codes == [0] and out.stat().st_size > 0
    assert loaded == []
