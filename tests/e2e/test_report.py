"""perfsift run --report and perfsift analyze + report, checked in a real headless Chromium."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from perfsift.producers.synth import spmd
from perfsift.producers.traces import write_samples

from tests.e2e.cli import perfsift

pytestmark = pytest.mark.e2e

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


@pytest.fixture(scope="module")
def chromium() -> str:
    """Debian's Chromium; installed here when missing and we may (CI runs as root on Debian)."""
    path = shutil.which("chromium")
    if path is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], check=False, capture_output=True, timeout=900,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})  # fmt: skip
        path = shutil.which("chromium")
    if path is None:
        pytest.fail("the report test needs Chromium (Debian: apt-get install chromium)")
    return path


def render(chromium: str, page: Path) -> tuple[str, Path]:
    shot = page.with_suffix(".png")
    with tempfile.TemporaryDirectory() as profile:
        args = [chromium, *FLAGS, f"--user-data-dir={profile}", "--window-size=1200,2000"]
        dom = subprocess.run([*args, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
        subprocess.run([*args, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120, check=True)
    return dom.stdout, shot


def test_analyze_then_report_renders_every_plot_in_chromium(tmp_path: Path, chromium: str) -> None:
    samples, _ = spmd("sweep3d", nodes=8, duration=300, seed=1)
    trace = tmp_path / "t.sddfb"
    write_samples(samples, trace)
    out = tmp_path / "analysis"
    assert perfsift("analyze", str(trace), "--out", str(out)).returncode == 0
    r = perfsift("report", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    dom, shot = render(chromium, out / "report.html")
    assert 'data-images="loaded"' in dom  # every <img> decoded
    for png in ("traces.png", "reduction.png", "selection-sweep3d.png"):
        assert f'src="{png}"' in dom and (out / png).stat().st_size > 5000
    assert shot.stat().st_size > 50_000 and shot.read_bytes()[:4] == b"\x89PNG"


def test_run_on_the_embedded_default_writes_a_report(tmp_path: Path, chromium: str) -> None:
    folder = tmp_path / "perfsift-report"  # the default folder, in the current folder
    r = perfsift("run", timeout=400, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (folder / "selection.jsonl").stat().st_size > 0 and (folder / "reduced.jsonl").stat().st_size > 0
    dom, _ = render(chromium, folder / "report.html")
    assert 'data-images="loaded"' in dom and "Projection pursuit selections" in dom
