"""perfsift run --report and perfsift analyze + report, checked in a real headless Chromium: the
page is self-contained, has no console errors, and every section shows a figure when its data
exists and a one-line reason when it does not."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from perfsift.analysis.report import SECTIONS
from perfsift.producers.synth import spmd
from perfsift.producers.traces import write_samples

from tests.e2e.cli import perfsift, perfsift_here
from tests.e2e.conftest import DemoRun
from tests.planted import NODE, planted_trace

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


def render(chromium: str, page: Path, console: list[str] | None = None) -> tuple[str, Path]:
    """The DOM after load and a screenshot, from one Chromium; the page's console messages go to
    ``console``."""
    shot = page.with_suffix(".png")
    with tempfile.TemporaryDirectory() as profile:
        args = [chromium, *FLAGS, f"--user-data-dir={profile}", "--window-size=1200,2000"]
        dom = subprocess.run(
            [*args, "--enable-logging=stderr", "--v=0", "--dump-dom", f"--screenshot={shot}", page.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
    if console is not None:
        console += [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    return dom.stdout, shot


def sections(dom: str) -> dict[str, tuple[str, str]]:
    """Per section id: (its data-figure state, its HTML)."""
    found = re.findall(r'<section id="(\w+)"([^>]*)>(.*?)</section>', dom, flags=re.S)
    return {sid: (re.search(r'data-figure="(\w+)"', attrs).group(1), body) for sid, attrs, body in found}  # type: ignore[union-attr]


def self_contained(html: str) -> bool:
    """No resource outside the page: every src is a data: URI, no stylesheet or script is linked."""
    srcs = re.findall(r'src="([^"]*)"', html)
    return all(s.startswith("data:image/png;base64,") for s in srcs) and "<link" not in html


@pytest.fixture(scope="module")
def full_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An analysis with every kind of output: the planted-node trace with a contract and a
    performance metric (data reduction), and a structural model's predictions."""
    tmp = tmp_path_factory.mktemp("full")
    base, trace = tmp / "base.jsonl", tmp / "planted.jsonl"
    write_samples(spmd("cactus", nodes=12, duration=200, seed=7, burst_rate=0.0)[0], base)
    write_samples(planted_trace(duration=300), trace)  # the planted event: 180-270 s
    contract = tmp / "contract.json"
    # report as a subprocess, the rest through main() in this process (each is a subprocess in its
    # own test file; analyze in test_encodings_cli.py)
    r = perfsift_here("contract", "derive", str(base), "-s", "disk=disk_lwrite,disk_pwrite", "-s",
                      "cpu=cpu_user,cpu_kern", "-o", str(contract))  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    out = tmp / "out"
    r = perfsift_here(
        "analyze", str(trace), "--out", str(out), "--contract", str(contract), "--perf-metric", "cpu_idle"
    )
    assert r.returncode == 0, r.stderr[-2000:]
    sor = tmp / "sor.jsonl"
    assert (
        perfsift_here("synth", "--scenario", "sor", "--nodes", "4", "--duration", "60", "-o", str(sor)).returncode == 0
    )
    r = perfsift_here("predict", "sor", "--trace", str(sor), "--json", str(out / "prediction.jsonl"))
    assert r.returncode == 0, r.stderr[-2000:]
    r = perfsift("report", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    return out


def test_every_section_has_a_figure_when_its_data_exists(full_folder: Path, chromium: str) -> None:
    page = full_folder / "report.html"
    html = page.read_text()
    assert self_contained(html) and "http-equiv" not in html  # no refresh outside live mode
    console: list[str] = []
    dom, shot = render(chromium, page, console)
    assert console == []
    assert 'data-images="loaded"' in dom
    found = sections(dom)
    assert list(found) == [anchor for anchor, *_ in SECTIONS]
    for sid, (state, body) in found.items():
        assert state == "drawn", sid
        assert "<table>" in body and 'class="absent"' not in body, sid
        img = re.search(r'src="data:image/png;base64,([^"]+)"', body)
        assert img is not None and len(img.group(1)) > 10_000, sid  # a real figure, not an empty frame
    assert f'<td class="t">{NODE}</td>' in found["apart"][1]  # the planted node in the table under the scatter
    assert NODE in found["contract"][1]
    assert shot.stat().st_size > 50_000


def test_analyze_then_report_renders_every_plot_in_chromium(tmp_path: Path, chromium: str) -> None:
    samples, _ = spmd("sweep3d", nodes=8, duration=300, seed=1)
    trace = tmp_path / "t.sddfb"
    write_samples(samples, trace)
    out = tmp_path / "analysis"
    assert perfsift_here("analyze", str(trace), "--out", str(out)).returncode == 0  # a process: test_encodings_cli
    r = perfsift_here("report", str(out))  # as a process: full_folder
    assert r.returncode == 0, r.stderr[-2000:]
    console: list[str] = []
    dom, shot = render(chromium, out / "report.html", console)
    assert console == [] and self_contained((out / "report.html").read_text())
    assert 'data-images="loaded"' in dom  # every <img> decoded
    found = sections(dom)
    for sid in ("kept", "apart", "traces", "forecast", "bytes"):
        assert found[sid][0] == "drawn", sid
    for sid in ("contract", "predictions", "reduction"):  # no contract, model or performance metric given
        state, body = found[sid]
        reason = re.findall(r'<p class="absent">([^<]+)</p>', body)
        assert state == "absent" and len(reason) == 1 and "\n" not in reason[0] and "<img" not in body, sid
    assert shot.stat().st_size > 50_000 and shot.read_bytes()[:4] == b"\x89PNG"


def test_run_on_the_embedded_default_writes_a_report_with_no_empty_section(demo_run: DemoRun, chromium: str) -> None:
    """``perfsift run`` with no flags (the bundled demo, with its contract, model and application
    metric iter_time; the session's run, tests/e2e/conftest.py) fills every section of the report (#31)."""
    folder = demo_run.report  # the default folder, in the current folder
    assert demo_run.returncode == 0, demo_run.stderr[-3000:]
    for name in ("selection.jsonl", "reduced.jsonl", "contract.jsonl", "prediction.jsonl"):
        assert (folder / name).stat().st_size > 0, name
    console: list[str] = []
    dom, _ = render(chromium, folder / "report.html", console)
    assert console == [] and 'data-images="loaded"' in dom and "Which metrics were kept" in dom
    found = sections(dom)
    assert list(found) == [anchor for anchor, *_ in SECTIONS]
    for sid, (state, body) in found.items():
        assert state == "drawn" and 'class="absent"' not in body, sid
        # a table under every figure; the projection's may have none: no node need stand apart
        assert "<table>" in body or sid == "apart", sid
    assert "No contract ran" not in dom
    # the demo's slow node (n06 stalls from 400 s to 460 s) shows in the contract and the predictions
    contract, predictions = found["contract"][1], found["predictions"][1]
    violated = re.search(r"(\d+) of 16 nodes violated the contract", contract)
    assert violated is not None and int(violated.group(1)) > 0
    assert "IterTime" in predictions
