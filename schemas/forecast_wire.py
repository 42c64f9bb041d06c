"""perf.forecast on the wire: the bounds are not written, readers derive them.

A forecast record's ``lower``/``upper`` (forecast ∓ 2σ) and ``lower_mae``/``upper_mae``
(mae_forecast ∓ 2·sqrt(π/2)·mae) follow from its other fields, and ``mae_forecast`` equals
``forecast`` in most records (two thirds on the demo: the MSE and the MAE selectors agree). So
writers leave the bounds out, and ``mae_forecast`` where it equals the forecast (JSON), or write
null (Avro, whose schema gives them the default null), and every reader (the codecs,
:func:`~perfsift.schemas.detect.decode_any` and so ``perfsift tail`` and ``perfsift export``, the
analysis of an output folder) fills them in with :func:`complete_forecast`. The writer rounds the
forecast and the error scale to :data:`~perfsift.operators.rounding.FORECAST_DIGITS` significant
digits before it writes them, and the reader computes the bounds from those written numbers as the
writer did (:func:`~perfsift.operators.rounding.forecast_bounds`): a decoded record equals, bit for
bit, the record the operator made. A bound that is not what a reader would derive (a record made
elsewhere) stays on the wire (:func:`forecast_on_wire`). Half of the numbers of a forecast record, and more than a third
of its compressed bytes, were bounds (docs/benchmarks.md).

>>> rec = {"ts": 1.0, "node": "n", "job": "j", "metric": "cpu", "forecast": 10.0, "sigma": 0.5,
...        "method": "ses", "mae_forecast": 10.5, "mae": 0.25}
>>> full = complete_forecast(dict(rec))
>>> [full[k] for k in DERIVED_FIELDS]
[9.0, 11.0, 9.87334293, 11.1266571]
>>> forecast_on_wire(full) == rec
True
>>> forecast_on_wire(dict(full, mae_forecast=10.0))["mae_forecast"]
Traceback (most recent call last):
KeyError: 'mae_forecast'
>>> complete_forecast(forecast_on_wire(dict(full, mae_forecast=10.0)))["mae_forecast"]
10.0
"""

from __future__ import annotations

from typing import Any

from perfsift.operators.rounding import MAE_SIGMA, round_sig_one

#: the fields a reader derives: (lower, upper) from (centre, error scale) times the scale's factor
_BOUNDS = (("lower", "upper", "forecast", "sigma", 1.0), ("lower_mae", "upper_mae", "mae_forecast", "mae", MAE_SIGMA))
#: fields of a forecast record that are not on the wire
DERIVED_FIELDS = ("lower", "upper", "lower_mae", "upper_mae")


def forecast_on_wire(record: dict[str, Any]) -> dict[str, Any]:
    """The fields of a forecast record that go on the wire: the record without the bounds equal to
    what a reader derives (all of them, in a record the forecast bank made), and without
    ``mae_forecast`` where it equals ``forecast``. A record made elsewhere keeps every field a
    reader would not get back, but for nulls a reader fills in: a null ``mae_forecast`` reads as
    the forecast, a null bound beside a known error scale as the derived bound (the bank makes
    neither; a record written before the MAE fields reads so)."""
    derived = complete_forecast({k: v for k, v in record.items() if k not in DERIVED_FIELDS})
    same_mae_forecast = record.get("mae_forecast") is not None and record["mae_forecast"] == record.get("forecast")
    return {
        k: v
        for k, v in record.items()
        if not (
            (k in DERIVED_FIELDS and k in derived and v == derived[k]) or (k == "mae_forecast" and same_mae_forecast)
        )
    }


def complete_forecast(record: dict[str, Any]) -> dict[str, Any]:
    """Fill in (in place) and return ``record`` as the operator made it: ``mae_forecast`` (the
    forecast where it is absent or null), the bounds (null where the error scale is unknown, i.e.
    null). Fields already present are kept."""
    if record.get("mae_forecast") is None and record.get("forecast") is not None:
        record["mae_forecast"] = record["forecast"]
    record.setdefault("mae", None)  # a record written before the MAE bound (as Avro's default gives it)
    for lo, hi, centre, error, scale in _BOUNDS:
        if record.get(lo) is not None and record.get(hi) is not None:
            continue
        c, e = record.get(centre), record.get(error)
        lower = upper = None
        if c is not None and e is not None:
            # forecast_bounds' operations on one record (round_sig_one is round_sig's scalar twin)
            c, half = round_sig_one(float(c)), 2 * scale * round_sig_one(float(e))
            lower, upper = round_sig_one(c - half), round_sig_one(c + half)
        if record.get(lo) is None:
            record[lo] = lower
        if record.get(hi) is None:
            record[hi] = upper
    return record


def is_forecast(record: Any) -> bool:
    """Whether a decoded record of unknown schema (JSON) is a forecast record."""
    return isinstance(record, dict) and all(k in record for k in ("forecast", "sigma", "method", "metric"))
