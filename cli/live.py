"""The live view of ``perfsift run --follow --report DIR``: a thread that rewrites the report folder
every few seconds while the pipeline runs (the outputs read back from their topics, the summary
and a page that reloads itself), so a browser tab on ``DIR/report.html`` is a dashboard of the
running pipeline. Every file is replaced atomically (:func:`~perfsift.analysis.report.write_atomic`):
a reader sees the old or the new version, never half of one."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger("perfsift.live")


class LiveReport:
    """Rewrites ``folder`` from ``local`` (a :class:`~perfsift.cli.local.LocalRun`) every
    ``every`` seconds until :meth:`stop`; counts the rewrites in ``written``."""

    def __init__(self, local: Any, folder: Path, every: float = 5.0) -> None:
        if not every > 0:
            raise ValueError(f"the live report needs an interval > 0 seconds, got {every}")
        self.local = local
        self.folder = folder
        self.every = every
        self.written = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="perfsift-live-report", daemon=True)

    def start(self) -> LiveReport:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.local.write_outputs(self.folder)
                self.local.write_report(self.folder, live=True)
                self.written += 1
            except Exception as exc:  # a failed rewrite leaves the previous page; the next one tries again
                log.warning("live report: %s", exc)
            self._stop.wait(self.every)

    def stop(self) -> None:
        """Stop rewriting (after the rewrite under way, if any)."""
        self._stop.set()
        self._thread.join(120)
