"""perfsift run --follow --report DIR: the report folder is rewritten while the pipeline runs, and
the page served from it changes (issue #23, the live view)."""

from __future__ import annotations

import functools
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from perfsift.producers.traces import write_samples

from tests.planted import planted_trace

pytestmark = pytest.mark.e2e

REFRESH = '<meta http-equiv="refresh"'


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def test_the_served_page_changes_while_follow_runs(tmp_path: Path) -> None:
    trace, folder = tmp_path / "planted.jsonl", tmp_path / "live"
    write_samples(planted_trace(duration=240, nodes=6), trace)
    folder.mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/report.html"
    cmd = [sys.executable, "-m", "perfsift", "run", "--follow", "--threads", "--trace", str(trace), "--speed", "6",
           "--report", str(folder), "--live-every", "1"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pages: list[str] = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(url, timeout=10) as resp:
                    page = resp.read().decode()
                if not pages or page != pages[-1]:
                    pages.append(page)
            except OSError:  # not written yet
                pass
            if sum("Which metrics were kept" in p for p in pages) >= 2:  # the page changed while running
                break
            time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=180)
        server.shutdown()
    assert proc.returncode == 0, err[-3000:]
    full = [p for p in pages if "Which metrics were kept" in p]
    assert len(full) >= 2, f"{len(pages)} versions served, {len(full)} with sections"
    assert all(REFRESH in p for p in pages)  # every page served during the run reloads itself
    assert len({p for p in full}) == len(full)  # and each rewrite changed the page
    final = (folder / "report.html").read_text()
    assert REFRESH not in final and "Which metrics were kept" in final  # the page left at the end is static
    assert not list(folder.glob(".*.tmp"))  # no temporary file left behind
