"""The e2e tests' shared run: ``perfsift run`` with no flags (the bundled demo on the embedded
broker, its report in the default folder) is run once per session and read by the tests that check
its summary (test_cli.py), its report (test_report.py) and what it says about the demo
(test_demo_run.py). The run takes 30-60 s; the files may
sit on different xdist workers, so the first to ask runs it under a file lock in the session's
shared temporary folder and the other reads what it left."""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.cli import perfsift


@dataclass(frozen=True)
class DemoRun:
    """``perfsift run --summary-json summary.json`` in ``cwd``: its exit code, output and summary."""

    cwd: Path
    returncode: int
    stdout: str
    stderr: str

    @property
    def summary(self) -> dict:
        return json.loads((self.cwd / "summary.json").read_text())

    @property
    def report(self) -> Path:
        """The default report folder, in the folder the run started in."""
        return self.cwd / "perfsift-report"


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    base = tmp_path_factory.getbasetemp()
    # under xdist every worker's base is a sub-folder of the session's own; with -n 0 it is its own
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    cwd = shared / "demo-run"
    with open(shared / "demo-run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = cwd / "result.json"
        if not done.exists():
            cwd.mkdir(exist_ok=True)
            r = perfsift("run", "--summary-json", "summary.json", timeout=400, cwd=cwd)
            done.write_text(json.dumps({"returncode": r.returncode, "stdout": r.stdout, "stderr": r.stderr}))
        result = json.loads(done.read_text())
    return DemoRun(cwd, result["returncode"], result["stdout"], result["stderr"])
