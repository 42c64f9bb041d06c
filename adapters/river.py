"""perfsift's operators as river estimators (``pip install 'perfsift[river]'``; docs/river.md).

river updates a model with one dict per sample; these wrappers turn each dict into a one-row
:class:`~perfsift.operators.batch.Batch` and call the operator, so the numbers are the batch
operator's (the operators are causal per series: splitting a stream into other batches changes
nothing, tests/unit/test_adapters_river.py holds them to it). That is also why they are slower
than the native stage (docs/benchmarks.md): the work per sample is one operator call.

- :class:`CleanDetector` — ``clean`` as an anomaly detector: ``score_one`` is the share of the
  sample's metrics that ``clean`` flags as outliers, ``learn_one`` feeds the sample.
- :class:`SlidingMeanForecaster`, :class:`NWSForecaster` — ``sliding_mean`` and the NWS bank
  (``forecast``) as river forecasters of one series: ``learn_one(y)``, ``forecast(horizon)``.
- :class:`SelectionTransformer` — ``pursuit`` or ``data_reduction`` as a transformer on dicts of
  node → metrics (one time step of a job): ``learn_one`` feeds the step, ``transform_one`` keeps the
  metrics of the newest selection.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
from perfsift.operators.base import Decider, Operator
from perfsift.operators.batch import Batch
from perfsift.operators.clean.clean import Clean
from perfsift.operators.forecast.forecast import ForecastBank
from perfsift.operators.registry import OPERATORS
from perfsift.operators.smooth import SlidingMean
from river import base
from river.time_series.base import Forecaster

__all__ = ["CleanDetector", "NWSForecaster", "SelectionTransformer", "SlidingMeanForecaster", "row_batch"]

#: clean's flag rules that are not outliers (a missing value imputed, a counter reset, ...)
_NOT_OUTLIERS = {"knn_impute", "last_value", "mean", "no_reference", "counter_reset", "counter_wrap", "low_coverage"}


def row_batch(x: dict[str, Any], ts: float, node: str = "river", job: str = "default") -> Batch:
    """One sample (metric → value, None or a non-number for missing) as a one-row batch."""
    names = tuple(x)
    vals = np.array([[_number(x[m]) for m in names]], dtype=np.float64)
    return Batch(
        ts=np.array([ts]),
        node_idx=np.zeros(1, dtype=np.int64),
        values=vals,
        metrics=names,
        nodes=(node,),
        job_idx=np.zeros(1, dtype=np.int64),
        jobs=(job,),
    )


def _number(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else float("nan")


class CleanDetector(base.AnomalyDetector):
    """perfsift's ``clean`` operator as a river anomaly detector.

    ``score_one(x)`` is the share of ``x``'s metrics that ``clean`` would flag as outliers if ``x``
    came next (0 to 1; the operator is not changed: it runs on a copy, which ``learn_one(x)`` of
    the same sample then keeps). ``learn_one(x)`` feeds the sample; :attr:`cleaned` holds the
    cleaned values of the last one.

    Parameters
    ----------
    params
        Parameters of :class:`~perfsift.operators.clean.clean.Clean` (default: its defaults).
    node
        The series' node name (clean keeps state per node).

    Examples
    --------
    >>> det = CleanDetector()
    >>> for t in range(30):
    ...     det.learn_one({"cpu": 10.0 + (t % 3)})
    >>> det.score_one({"cpu": 500.0}), det.score_one({"cpu": 11.0})
    (1.0, 0.0)
    """

    def __init__(self, params: dict[str, Any] | None = None, node: str = "river") -> None:
        self.params = params
        self.node = node
        self._op: Operator = Clean(**(params or {}))
        self._t = 0
        self._pending: tuple[dict[str, Any], Operator, Batch] | None = None
        self.cleaned: dict[str, float | None] = {}

    def _run(self, x: dict[str, Any]) -> tuple[Operator, Batch]:
        if self._pending is not None and self._pending[0] == x:
            return self._pending[1], self._pending[2]
        op = copy.deepcopy(self._op)
        out = op.update(row_batch(x, float(self._t), self.node))
        assert isinstance(out, Batch)  # clean is a transformer
        self._pending = (dict(x), op, out)
        return op, out

    def score_one(self, x: dict[Any, Any]) -> float:
        if not x:
            return 0.0
        _, out = self._run(x)
        flags = out.extra["flags"][0] or []
        outliers = {f["metric"] for f in flags if f["rule"] not in _NOT_OUTLIERS}
        return len(outliers) / len(x)

    def learn_one(self, x: dict[Any, Any]) -> None:
        if not x:
            return
        self._op, out = self._run(x)
        self._pending = None
        self._t += 1
        self.cleaned = {m: (None if v != v else v) for m, v in zip(out.metrics, out.values[0].tolist(), strict=True)}


class _SeriesForecaster(Forecaster):
    """A perfsift transformer or forecaster of one series behind river's forecaster interface."""

    _metric = "y"

    def _make(self) -> Operator:
        raise NotImplementedError

    def _value(self, out: Batch) -> float:
        return float(out.values[0, 0])

    def _setup(self) -> None:
        self._op = self._make()
        self._t = 0
        self._last = float("nan")

    def learn_one(self, y: float, x: dict | None = None) -> None:
        out = self._op.update(row_batch({self._metric: y}, float(self._t)))
        self._t += 1
        value = self._value(out)  # type: ignore[arg-type]
        if value == value:
            self._last = value

    def forecast(self, horizon: int, xs: list[dict] | None = None) -> list[float]:
        """The operator's forecast of the next value, for each of the ``horizon`` steps (both
        operators forecast one step; a flat forecast is what they say of later steps). Before any
        value: 0.0."""
        last = self._last if self._last == self._last else 0.0
        return [last] * horizon


class SlidingMeanForecaster(_SeriesForecaster):
    """perfsift's ``sliding_mean`` as a river forecaster: the mean of the last ``window`` values.

    Parameters
    ----------
    window
        The number of values averaged.

    Examples
    --------
    >>> f = SlidingMeanForecaster(window=2)
    >>> for y in (1.0, 3.0, 8.0):
    ...     f.learn_one(y)
    >>> f.forecast(2)
    [5.5, 5.5]
    """

    def __init__(self, window: int = 10) -> None:
        self.window = window
        self._setup()

    def _make(self) -> Operator:
        return SlidingMean(window=self.window)


class NWSForecaster(_SeriesForecaster):
    """perfsift's NWS forecaster bank (``forecast``) as a river forecaster: 18 primaries, dynamic
    selection; :attr:`sigma` and :attr:`method` tell the bounds' σ and the winning primary.

    Parameters
    ----------
    mode
        ``"nws"`` (the hierarchy of forc.c) or ``"flat"``.

    Examples
    --------
    >>> f = NWSForecaster()
    >>> for y in range(1, 21):
    ...     f.learn_one(float(y))
    >>> f.forecast(1)
    [20.0]
    """

    def __init__(self, mode: str = "nws") -> None:
        self.mode = mode
        self._setup()
        self.sigma = float("nan")
        self.method = -1

    def _make(self) -> Operator:
        return ForecastBank(mode=self.mode)

    def _value(self, out: Batch) -> float:
        self.sigma = float(out.extra["sigma"][0, 0])
        self.method = int(out.extra["method"][0, 0])
        return float(out.values[0, 0])


class SelectionTransformer(base.Transformer):
    """perfsift's ``pursuit`` or ``data_reduction`` as a river transformer on one time step of a job:
    ``x = {node: {metric: value}}``.

    ``learn_one(x)`` feeds the step (event time: one ``step`` after the previous one) and keeps the
    selection records the operator emits (:attr:`selections`); ``transform_one(x)`` returns ``x``
    with only the metrics of the newest selection (all of them before the first).

    Parameters
    ----------
    operator
        ``"pursuit"`` or ``"data_reduction"``.
    params
        The operator's parameters.
    step
        Seconds between two steps.
    job
        The job's name in the selection records.

    Examples
    --------
    >>> t = SelectionTransformer(params={"period": 5.0})
    >>> t.transform_one({"n1": {"cpu": 1.0, "io": 2.0}})
    {'n1': {'cpu': 1.0, 'io': 2.0}}
    """

    def __init__(
        self, operator: str = "pursuit", params: dict[str, Any] | None = None, step: float = 1.0, job: str = "default"
    ) -> None:
        self.operator = operator
        self.params = params
        self.step = step
        self.job = job
        op = OPERATORS[operator](**(params or {}))
        if not isinstance(op, Decider) or op.output != "selection":
            raise ValueError(f"{operator!r} does not select metrics; use 'pursuit' or 'data_reduction'")
        self._op = op
        self._t = 0
        self.selections: list[dict[str, Any]] = []

    @property
    def selected(self) -> list[str] | None:
        """The metrics of the newest selection that chose any (None before)."""
        for rec in reversed(self.selections):
            if rec["selected"]:
                return list(rec["selected"])
        return None

    def learn_one(self, x: dict[Any, Any]) -> None:
        if not x:
            return
        metrics = sorted({m for row in x.values() for m in row})
        nodes = list(x)
        values = [[_number(x[n].get(m)) for m in metrics] for n in nodes]
        ts = [self._t * self.step] * len(nodes)
        batch = Batch.from_columns(ts=ts, nodes=nodes, metrics=metrics, values=values, jobs=[self.job] * len(nodes))
        self.selections.extend(self._op.update(batch))  # type: ignore[arg-type]
        self._t += 1

    def transform_one(self, x: dict[Any, Any]) -> dict[Any, Any]:
        keep = self.selected
        if keep is None:
            return {n: dict(row) for n, row in x.items()}
        return {n: {m: v for m, v in row.items() if m in keep} for n, row in x.items()}
