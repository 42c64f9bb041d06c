"""Prometheus out: the latest reduced values, forecasts (with their ±2σ and MAE bounds) and contract levels
of the pipeline's output records, as Prometheus series, broker-free.

:class:`LatestValues` keeps, per series, the last value seen, the time the record describes (its
``ts``) and when it arrived; it is a ``prometheus_client`` collector (its :meth:`collect` yields
the families below) and the source of ``remote_write`` out (:meth:`LatestValues.updated_since`,
encoded by :func:`perfsift.formats.remote_write.encode_series`).

=======================================  =====================  ===============================
family                                   labels                 from
=======================================  =====================  ===============================
``perfsift_reduced``                     job, node, metric      perf.reduced: each metric value
``perfsift_reduced_selection_version``   job, node              perf.reduced: version applied
``perfsift_reduced_timestamp_seconds``   job, node              perf.reduced: the sample's ts
``perfsift_forecast``                    job, node, metric      perf.forecast: forecast
``perfsift_forecast_lower``/``_upper``   job, node, metric      perf.forecast: forecast ∓ 2σ
``perfsift_forecast_sigma``              job, node, metric      perf.forecast: σ
``perfsift_forecast_mae_forecast``       job, node, metric      perf.forecast: mae_forecast
``perfsift_forecast_lower_mae``          job, node, metric      perf.forecast: mae_forecast - 2·sqrt(π/2)·mae
``perfsift_forecast_upper_mae``          job, node, metric      perf.forecast: mae_forecast + 2·sqrt(π/2)·mae
``perfsift_forecast_mae``                job, node, metric      perf.forecast: mae (realised MAE)
``perfsift_contract_violation``          job, node              perf.contract: level in [0, 1]
``perfsift_contract_violation_smoothed`` job, node              perf.contract: its EWMA
``perfsift_contract_space_violation``    job, node, space       perf.contract: per space
``perfsift_contract_state``              job, node, state       perf.contract: 1 for the state
                                                                in force, 0 for the two others
=======================================  =====================  ===============================

The series count is bounded: a series that would be the ``max_series``-th + 1 is not created and
counted in ``perfsift_export_series_dropped_total`` (series already there keep updating), and a
series no record has updated for ``expire_s`` seconds (wall clock of arrival, not the record's
``ts``: a replayed trace's old times do not expire it) is removed at the next scrape or push and
counted in ``perfsift_export_series_expired_total``. A ``null`` value (a missing metric, an unknown
level, a bound before the first forecast was scored) updates nothing: the series keeps its last
value until it expires. A *full* reduced sample (``full: true``, the periodic one that carries every
metric so the selection can be re-evaluated) refreshes the series that exist and creates none, so
the exposition holds the selected metrics, not every metric once per full period.

By default the exposition carries no timestamps (Prometheus stamps each value with the scrape
time, and stale series end as Prometheus expects); ``timestamps=True`` writes each record's ``ts``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ClassVar

from perfsift.schemas.forecast_wire import complete_forecast
from perfsift.schemas.kinds import KINDS as RECORD_KINDS
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

#: family -> (help, label names)
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "perfsift_reduced": ("latest value of a selected metric on perf.reduced", ("job", "node", "metric")),
    "perfsift_reduced_selection_version": (
        "version of the selection applied to the node's latest reduced sample (-1: none yet)",
        ("job", "node"),
    ),
    "perfsift_reduced_timestamp_seconds": ("time (ts) of the node's latest reduced sample", ("job", "node")),
    "perfsift_forecast": ("latest next-value forecast on perf.forecast", ("job", "node", "metric")),
    "perfsift_forecast_lower": ("forecast - 2 sigma", ("job", "node", "metric")),
    "perfsift_forecast_upper": ("forecast + 2 sigma", ("job", "node", "metric")),
    "perfsift_forecast_sigma": ("sqrt of the realised MSE of the forecasts so far", ("job", "node", "metric")),
    "perfsift_forecast_mae_forecast": (
        "latest forecast of the selector with the lowest cumulative absolute error",
        ("job", "node", "metric"),
    ),
    "perfsift_forecast_lower_mae": ("mae_forecast - 2 sqrt(pi/2) mae", ("job", "node", "metric")),
    "perfsift_forecast_upper_mae": ("mae_forecast + 2 sqrt(pi/2) mae", ("job", "node", "metric")),
    "perfsift_forecast_mae": ("realised mean absolute error of the MAE forecasts so far", ("job", "node", "metric")),
    "perfsift_contract_violation": ("overall contract violation level in [0, 1] on perf.contract", ("job", "node")),
    "perfsift_contract_violation_smoothed": ("EWMA of the contract violation level", ("job", "node")),
    "perfsift_contract_space_violation": ("violation level of one contract space", ("job", "node", "space")),
    "perfsift_contract_state": (
        "1 for the contract state in force (ok, violated, unknown), else 0",
        ("job", "node", "state"),
    ),
}
#: the kinds of record :meth:`LatestValues.add` reads: ``prometheus=True`` in the kinds' table
#: (schemas/kinds.py), each with its method in :attr:`LatestValues.UPDATES`
KINDS = tuple(k.name for k in RECORD_KINDS.values() if k.prometheus)
CONTRACT_STATES = ("ok", "violated", "unknown")
_FORECAST_FIELDS = (
    ("forecast", "perfsift_forecast"),
    ("lower", "perfsift_forecast_lower"),
    ("upper", "perfsift_forecast_upper"),
    ("sigma", "perfsift_forecast_sigma"),
    ("mae_forecast", "perfsift_forecast_mae_forecast"),
    ("lower_mae", "perfsift_forecast_lower_mae"),
    ("upper_mae", "perfsift_forecast_upper_mae"),
    ("mae", "perfsift_forecast_mae"),
)

#: one series: [value, the record's ts, monotonic time of arrival]
Cell = list[float]


class LatestValues(Collector):
    """The latest value of every exported series (see the module docstring).

    >>> lv = LatestValues(max_series=3)
    >>> lv.add("reduced", [{"ts": 10.0, "node": "n1", "job": "j", "metrics": {"cpu": 0.5, "mem": None},
    ...                     "selection_version": 2, "full": False}])
    >>> sorted((f, labels, v) for f, labels, v, _ in lv.series())
    [('perfsift_reduced', ('j', 'n1', 'cpu'), 0.5), ('perfsift_reduced_selection_version', ('j', 'n1'), 2.0), \
('perfsift_reduced_timestamp_seconds', ('j', 'n1'), 10.0)]
    >>> lv.add("reduced", [{"ts": 11.0, "node": "n2", "job": "j", "metrics": {"cpu": 0.7}}])
    >>> lv.count, lv.dropped
    (3, 3)
    """

    def __init__(
        self,
        max_series: int = 10_000,
        expire_s: float = 300.0,
        timestamps: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_series = max_series
        self.expire_s = expire_s
        self.timestamps = timestamps
        self.clock = clock
        self.series_: dict[str, dict[tuple[str, ...], Cell]] = {f: {} for f in FAMILIES}
        self.count = 0
        self.dropped = 0
        self.expired = 0
        self.records: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        #: held while records go in and while a scrape or a push reads (they run in other threads)
        self.lock = threading.Lock()

    # -- in ---------------------------------------------------------------------------------------
    def add(self, kind: str, records: Iterable[dict[str, Any]]) -> None:
        """Update the series from ``records`` of one ``kind`` (``reduced``, ``forecast``,
        ``contract``); a record without the fields of its kind is counted in ``refused``."""
        update = self.UPDATES[kind]
        now = self.clock()
        n = bad = 0
        with self.lock:
            for rec in records:
                n += 1
                try:
                    update(self, rec, now)
                except (KeyError, TypeError, AttributeError, ValueError):
                    bad += 1
        self.records[kind] += n - bad
        if bad:
            self.refused[kind] += bad

    def _set(self, family: str, key: tuple[str, ...], value: float, ts: float, now: float, create: bool = True) -> None:
        cell = self.series_[family].get(key)
        if cell is not None:
            cell[0], cell[1], cell[2] = value, ts, now
        elif not create:
            return
        elif self.count >= self.max_series:
            self.dropped += 1
        else:
            self.series_[family][key] = [value, ts, now]
            self.count += 1

    def _reduced(self, rec: dict[str, Any], now: float) -> None:
        job, node, ts = rec.get("job") or "default", rec["node"], float(rec["ts"])
        create = not rec.get("full", False)
        values = self.series_["perfsift_reduced"]
        for metric, v in rec["metrics"].items():
            if v is None:
                continue
            cell = values.get((job, node, metric))
            if cell is not None:  # the common case, inline: a value of a series that exists
                cell[0], cell[1], cell[2] = float(v), ts, now
            else:
                self._set("perfsift_reduced", (job, node, metric), float(v), ts, now, create)
        self._set("perfsift_reduced_selection_version", (job, node), float(rec.get("selection_version", -1)), ts, now)
        self._set("perfsift_reduced_timestamp_seconds", (job, node), ts, ts, now)

    def _forecast(self, rec: dict[str, Any], now: float) -> None:
        key, ts = (rec.get("job") or "default", rec["node"], rec["metric"]), float(rec["ts"])
        rec = complete_forecast(dict(rec))  # a record as written lacks its bounds (schemas/forecast_wire.py)
        for field, family in _FORECAST_FIELDS:
            v = rec.get(field)
            if v is not None:
                self._set(family, key, float(v), ts, now)

    def _contract(self, rec: dict[str, Any], now: float) -> None:
        job, node, ts = rec.get("job") or "default", rec["node"], float(rec["ts"])
        state = rec["state"]
        if state not in CONTRACT_STATES:
            raise ValueError(f"contract state {state!r}")
        for field, family in (
            ("violation", "perfsift_contract_violation"),
            ("smoothed", "perfsift_contract_violation_smoothed"),
        ):
            if rec.get(field) is not None:
                self._set(family, (job, node), float(rec[field]), ts, now)
        for space, ev in (rec.get("spaces") or {}).items():
            if ev.get("violation") is not None:
                self._set("perfsift_contract_space_violation", (job, node, space), float(ev["violation"]), ts, now)
        for s in CONTRACT_STATES:
            self._set("perfsift_contract_state", (job, node, s), 1.0 if s == state else 0.0, ts, now)

    #: how the records of each kind (:data:`KINDS`) update the series
    UPDATES: ClassVar[dict[str, Callable[[LatestValues, dict[str, Any], float], None]]] = {
        "reduced": _reduced,
        "forecast": _forecast,
        "contract": _contract,
    }

    # -- out --------------------------------------------------------------------------------------
    def expire(self) -> int:
        """Remove the series not updated for ``expire_s`` seconds; how many were removed."""
        limit = self.clock() - self.expire_s
        gone = 0
        with self.lock:
            for table in self.series_.values():
                stale = [k for k, cell in table.items() if cell[2] < limit]
                for k in stale:
                    del table[k]
                gone += len(stale)
            self.count -= gone
            self.expired += gone
        return gone

    def series(self) -> list[tuple[str, tuple[str, ...], float, float]]:
        """Every series: (family, label values, value, the record's ts), as they are now."""
        return self.updated_since(-math.inf)

    def updated_since(self, since: float) -> list[tuple[str, tuple[str, ...], float, float]]:
        """The series updated after ``since`` (a time of :attr:`clock`), as they are now: what a
        push sends."""
        with self.lock:
            return [
                (family, key, value, ts)
                for family, table in self.series_.items()
                for key, (value, ts, seen) in table.items()
                if seen > since
            ]

    def labelled(self, family: str, key: tuple[str, ...]) -> list[tuple[str, str]]:
        """The labels of one series, ``__name__`` included, in name order (remote_write's)."""
        return sorted([("__name__", family), *zip(FAMILIES[family][1], key, strict=True)])

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        self.expire()
        with self.lock:  # built whole under the lock, yielded after
            families = []
            for family, table in self.series_.items():
                doc, labels = FAMILIES[family]
                g = GaugeMetricFamily(family, doc, labels=list(labels))
                for key, (value, ts, _) in table.items():
                    g.add_metric(list(key), value, timestamp=ts if self.timestamps else None)
                families.append(g)
        yield from families
        yield from self.own_metrics()

    def own_metrics(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """The exporter's own counters: series held, dropped at the cap, expired; records read and
        refused per kind."""
        held = GaugeMetricFamily("perfsift_export_series", "series exported now (at most max_series)")
        held.add_metric([], self.count)
        yield held
        cap = GaugeMetricFamily("perfsift_export_max_series", "the cap on exported series")
        cap.add_metric([], self.max_series)
        yield cap
        for name, doc, value in (
            ("perfsift_export_series_dropped", "series not created because max_series were exported", self.dropped),
            ("perfsift_export_series_expired", "series removed after expire_s seconds without a record", self.expired),
        ):
            c = CounterMetricFamily(name, doc)
            c.add_metric([], value)
            yield c
        for name, doc, table in (
            ("perfsift_export_records", "records read into the exposition, per kind", self.records),
            ("perfsift_export_refused", "records without the fields of their kind, per kind", self.refused),
        ):
            c = CounterMetricFamily(name, doc, labels=["kind"])
            for kind in KINDS:
                c.add_metric([kind], table[kind])
            yield c
