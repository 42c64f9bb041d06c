"""Where numba puts compiled kernels: the user's cache, never site-packages (files pip does not
know about would survive an uninstall and turn the package directory into a namespace package).
Import this module before any ``@njit(cache=True)`` definition."""

from __future__ import annotations

import os
from pathlib import Path

import numba

if not os.environ.get("NUMBA_CACHE_DIR"):
    _cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "perfsift" / "numba"
    numba.config.CACHE_DIR = str(_cache)  # type: ignore[attr-defined]
