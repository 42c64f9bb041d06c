"""perfsift's cache folder (``$PERFSIFT_CACHE_DIR``, else ``$XDG_CACHE_HOME/perfsift``, else
``~/.cache/perfsift``),
where numba's compiled kernels go (:mod:`~perfsift.operators._numba`; ``NUMBA_CACHE_DIR`` puts them
elsewhere), and arrays that are slow to
compute but depend only on their inputs (:func:`cached_array`), so each is computed once per
machine, not once per process."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np


def cache_root() -> Path:
    """``$PERFSIFT_CACHE_DIR`` (the container image's, filled as it is built), else
    ``$XDG_CACHE_HOME/perfsift``, else ``~/.cache/perfsift`` (not created here)."""
    if os.environ.get("PERFSIFT_CACHE_DIR"):
        return Path(os.environ["PERFSIFT_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "perfsift"


def cached_array(kind: str, key: bytes, compute: Callable[[], np.ndarray]) -> np.ndarray:
    """``compute()``, kept in ``cache_root()/kind/`` under the SHA-256 of ``key`` (which must name
    everything the result depends on, the code's version included). A file that is missing or
    unreadable is computed again and written atomically (a temporary file renamed), so processes
    that start at once at worst compute it twice; a cache folder that cannot be written is only
    skipped. The array comes back read-only.

    >>> import tempfile
    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"XDG_CACHE_HOME": tempfile.mkdtemp()}):
    ...     first = cached_array("demo", b"k", lambda: np.arange(3.0))
    ...     again = cached_array("demo", b"k", lambda: np.zeros(3))  # read back, not computed
    >>> first.tolist(), again.tolist()
    ([0.0, 1.0, 2.0], [0.0, 1.0, 2.0])
    """
    path = cache_root() / kind / f"{hashlib.sha256(key).hexdigest()[:32]}.npy"
    try:
        out = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        out = np.asarray(compute())
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as fh:
                np.save(fh, out, allow_pickle=False)
            os.replace(fh.name, path)
        except OSError:
            pass
    out.flags.writeable = False
    return out
