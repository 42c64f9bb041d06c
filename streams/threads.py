"""A stage runner in a background thread (``perfsift run``'s in-process stages, the tests)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perfsift.streams.runner import StageRunner

log = logging.getLogger("perfsift.runner")


def run_in_thread(
    runner: StageRunner, idle_timeout_s: float | None = None, on_error: Callable[[BaseException], None] | None = None
) -> threading.Thread:
    """Start ``runner.run`` in a daemon thread; exceptions go to ``on_error`` (default: logged)."""

    def target() -> None:
        try:
            runner.run(idle_timeout_s)
        except BaseException as exc:
            (on_error or (lambda e: log.exception("stage %s failed", runner.stage.name, exc_info=e)))(exc)

    t = threading.Thread(target=target, name=f"stage-{runner.stage.name}", daemon=True)
    t.start()
    return t
