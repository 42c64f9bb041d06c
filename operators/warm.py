"""Compile every kernel of the operators into numba's cache (``_numba`` says where), so that
workers start without the ~30 s first compilation. Container image builds run it once:

    python -m perfsift.operators.warm

Only the operators' own kernels: the runtime's (``perfsift.streams``) are warmed from there.
"""

from __future__ import annotations

import numpy as np
from perfsift.operators.batch import Batch
from perfsift.operators.clean import Clean
from perfsift.operators.forecast import ForecastBank
from perfsift.operators.projection import projection_pursuit


def warm() -> None:
    """Run each compiled kernel once on a small input (the cleaner's in both of its modes)."""
    rng = np.random.default_rng(0)
    projection_pursuit(rng.normal(size=(60, 5)), [f"m{i}" for i in range(5)], restarts=1)
    batch = Batch.from_columns(ts=np.arange(20.0), nodes=["n"] * 20, metrics=["x"], values=rng.normal(size=(20, 1)))
    ForecastBank().update(batch)
    gappy = batch.with_values(np.where(np.arange(20)[:, None] % 7 == 6, np.nan, batch.values))
    for mode in ("window", "hampel"):
        Clean(mode=mode).update(gappy)


if __name__ == "__main__":
    warm()
