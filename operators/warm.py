"""Compile every kernel of the operators into numba's cache (``_numba`` says where), so that
workers start without the ~30 s first compilation. Container image builds run it once:

    python -m perfsift.operators.warm

It runs each operator's own :meth:`~perfsift.operators.base.Operator.warm_up` (the cleaner in
every mode), so the image compiles exactly what a worker's warm-up loads. Only the operators'
own kernels: the runtime's (``perfsift.streams``) are warmed from there.
"""

from __future__ import annotations

from perfsift.operators.clean.clean import MODES, Clean
from perfsift.operators.forecast.forecast import ForecastBank
from perfsift.operators.pursuit.pursuit import ProjectionPursuit


def warm() -> None:
    """Warm up every operator with a compiled kernel (the cleaner in each of its modes)."""
    ProjectionPursuit().warm_up()
    ForecastBank().warm_up()
    for mode in MODES:
        Clean(mode=mode).warm_up()


if __name__ == "__main__":
    warm()
