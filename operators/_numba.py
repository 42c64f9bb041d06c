"""Where numba puts compiled kernels: the user's cache, never site-packages (files pip does not
know about would survive an uninstall and turn the package directory into a namespace package).
Import this module before any ``@njit(cache=True)`` definition; :mod:`perfsift.operators.warm`
fills the cache.

numba checks a cached function against its own source file only, so a kernel that calls
functions of another module (``_nws_kernel`` calls ``_nws_windows``) would keep running stale
machine code after that module changed. The cache folder is therefore named after the content
of every kernel module, in this folder and in the operator families' sub-packages (``clean/``,
``forecast/``, ``pursuit/``: hence ``rglob``): any change to one of them compiles everything afresh.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numba

if not os.environ.get("NUMBA_CACHE_DIR"):
    _here = Path(__file__).parent
    _sources = hashlib.sha256()
    for _kernel in sorted(_here.rglob("_*.py")):
        _sources.update(_kernel.read_bytes())
    _cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "perfsift" / "numba"
    numba.config.CACHE_DIR = str(_cache / _sources.hexdigest()[:12])  # type: ignore[attr-defined]
