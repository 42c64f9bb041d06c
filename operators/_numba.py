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


def warm() -> None:
    """Compile every kernel into the cache now (container image builds run this once, so workers
    start without the ~30 s first compilation)."""
    import numpy as np
    from perfsift.operators.batch import Batch
    from perfsift.operators.clean import Clean
    from perfsift.operators.forecast import ForecastBank
    from perfsift.operators.pursuit import projection_pursuit
    from perfsift.operators.quality import dtw

    rng = np.random.default_rng(0)
    projection_pursuit(rng.normal(size=(60, 5)), [f"m{i}" for i in range(5)], restarts=1)
    batch = Batch.from_columns(ts=np.arange(20.0), nodes=["n"] * 20, metrics=["x"], values=rng.normal(size=(20, 1)))
    ForecastBank().update(batch)
    gappy = batch.with_values(np.where(np.arange(20)[:, None] % 7 == 6, np.nan, batch.values))
    for mode in ("window", "hampel"):
        Clean(mode=mode).update(gappy)
    dtw([1.0, 2.0], [1.0, 3.0])


if __name__ == "__main__":
    warm()
