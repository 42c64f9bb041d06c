"""Pure, broker-free streaming operators on numpy column batches.

Nothing in this package imports Kafka or the runtime: every operator can be used, tested and
benchmarked on arrays alone. Every operator has one of three roles (``base.py``): a
:class:`Transformer` turns samples into samples, a :class:`Decider` samples into records of one
kind, a :class:`Router` samples into several kinds. :data:`OPERATORS` names those a pipeline file
can use; :func:`~perfsift.operators.checks.check_operator` is the conformance suite every one of
them passes.
"""

from perfsift.operators.base import Decider, Operator, Output, Router, SnapshotError, Transformer
from perfsift.operators.batch import Batch
from perfsift.operators.clean.clean import Clean
from perfsift.operators.contract import ContractMonitor
from perfsift.operators.forecast.forecast import ForecastBank
from perfsift.operators.pursuit.pursuit import ProjectionPursuit
from perfsift.operators.registry import OPERATORS
from perfsift.operators.smooth import Ewma, SlidingMean

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
