"""Compile every kernel of the operators into numba's cache (``_numba`` says where), so that
workers start without the ~30 s first compilation. Container image builds run it once:

    python -m perfsift.operators.warm

It runs each operator's own :meth:`~perfsift.operators.base.Operator.warm_up` (the cleaner in
every mode), so the image compiles exactly what a worker's warm-up loads. Only the operators'
own kernels: the runtime's (``perfsift.streams``) are warmed from there. It also computes the
default rulebase's lookup table into the cache folder (:mod:`~perfsift.operators.cache_dir`),
which every stage with a contract or a model reads as it starts.
"""

from __future__ import annotations

from perfsift.operators.clean.clean import MODES, Clean
from perfsift.operators.forecast.forecast import ForecastBank
from perfsift.operators.pursuit.pursuit import ProjectionPursuit


def warm() -> None:
    """Warm up every operator with a compiled kernel (the cleaner in each of its modes), and the
    default rulebase's table."""
    from perfsift.operators.contract.rules import Rulebase

    Rulebase.default().table()
    ProjectionPursuit().warm_up()
    ForecastBank().warm_up()
    for mode in MODES:
        Clean(mode=mode).warm_up()


if __name__ == "__main__":
    warm()
