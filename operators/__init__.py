"""Pure, broker-free streaming operators on numpy column batches.

Nothing in this package imports Kafka or the runtime: every operator can be used, tested and
benchmarked on arrays alone. Every operator has one of three roles (``base.py``): a
:class:`Transformer` turns samples into samples, a :class:`Decider` samples into records of one
kind, a :class:`Router` samples into several kinds. :data:`OPERATORS` names those a pipeline file
can use; :func:`~perfsift.operators.checks.check_operator` is the conformance suite every one of
them passes.

The names below are imported on first use (PEP 562), not with the package: most operators load
numba and their compiled kernels (about 0.7 CPU-s), which a process that only needs
:class:`Batch` (the column batches of :mod:`perfsift.schemas`) or one operator should not pay.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from perfsift.operators.base import Decider, Operator, Output, Router, SnapshotError, Transformer
from perfsift.operators.batch import Batch

if TYPE_CHECKING:
    from perfsift.operators.clean.clean import Clean
    from perfsift.operators.contract import ContractMonitor
    from perfsift.operators.forecast.forecast import ForecastBank
    from perfsift.operators.pursuit.pursuit import ProjectionPursuit
    from perfsift.operators.registry import OPERATORS
    from perfsift.operators.smooth import Ewma, SlidingMean

#: name -> the module that defines it, imported by :func:`__getattr__` on first use
_LAZY = {
    "Clean": "perfsift.operators.clean.clean",
    "ContractMonitor": "perfsift.operators.contract",
    "ForecastBank": "perfsift.operators.forecast.forecast",
    "ProjectionPursuit": "perfsift.operators.pursuit.pursuit",
    "OPERATORS": "perfsift.operators.registry",
    "Ewma": "perfsift.operators.smooth",
    "SlidingMean": "perfsift.operators.smooth",
}


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "OPERATORS",
    "Batch",
    "Clean",
    "ContractMonitor",
    "Decider",
    "Ewma",
    "ForecastBank",
    "Operator",
    "Output",
    "ProjectionPursuit",
    "Router",
    "SlidingMean",
    "SnapshotError",
    "Transformer",
]
