"""The operators a pipeline file can name, by their ``type:``."""

from __future__ import annotations

from perfsift.operators.base import Operator
from perfsift.operators.clean.clean import Clean
from perfsift.operators.contract import ContractMonitor
from perfsift.operators.forecast.forecast import ForecastBank
from perfsift.operators.predict import ModelPredictor
from perfsift.operators.pursuit.pursuit import ProjectionPursuit
from perfsift.operators.reduce import Reduce
from perfsift.operators.reduction.reduction import DataReduction
from perfsift.operators.smooth import Ewma, SlidingMean

#: operator names usable in a pipeline file -> class
OPERATORS: dict[str, type[Operator]] = {
    "sliding_mean": SlidingMean,
    "ewma": Ewma,
    "forecast": ForecastBank,
    "contract": ContractMonitor,
    "data_reduction": DataReduction,
    "pursuit": ProjectionPursuit,
    "clean": Clean,
    "reduce": Reduce,
    "predict": ModelPredictor,
}
