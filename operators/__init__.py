"""Pure, broker-free streaming operators on numpy column batches.

Nothing in this package imports Kafka or any other perfsift package: every operator can be
used, tested and benchmarked on arrays alone.
"""

from perfsift.operators.base import Operator, Output, SnapshotError
from perfsift.operators.batch import Batch
from perfsift.operators.clean import Clean
from perfsift.operators.contract import ContractMonitor
from perfsift.operators.forecast import ForecastBank
from perfsift.operators.pursuit import ProjectionPursuit
from perfsift.operators.smooth import Ewma, SlidingMean

__all__ = [
    "Batch",
    "Clean",
    "ContractMonitor",
    "Ewma",
    "ForecastBank",
    "Operator",
    "Output",
    "ProjectionPursuit",
    "SlidingMean",
    "SnapshotError",
]
