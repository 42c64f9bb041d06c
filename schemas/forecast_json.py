"""perf.forecast records in JSON, many at once: the bytes of ``orjson.dumps(forecast_on_wire(r))``
for each record, with whole columns instead of a dict and eight roundings per record.

The forecast bank's records (:func:`~perfsift.operators.forecast.records.forecast_records`: the
fields in the order of its ``FIELDS``, numbers as floats or None) are taken apart into columns; the
bounds a reader derives (:func:`~perfsift.schemas.forecast_wire.complete_forecast`) are computed
for all of them at once with :func:`~perfsift.operators.rounding.round_sig` (the vectorised twin of
the reader's ``round_sig_one``, the same operations), and a field is left out where
:func:`~perfsift.schemas.forecast_wire.forecast_on_wire` leaves it out. Records of any other shape
go through ``forecast_on_wire`` one by one.

>>> from perfsift.schemas.forecast_wire import complete_forecast, forecast_on_wire
>>> rec = complete_forecast({"ts": 1.0, "node": "n", "job": "j", "metric": "cpu", "forecast": 10.0,
...                          "sigma": 0.5, "method": "ses", "mae_forecast": 10.5, "mae": 0.25})
>>> forecasts_json([rec]) == [orjson.dumps(forecast_on_wire(rec))]
True
>>> forecasts_json([rec])[0]
b'{"ts":1.0,"node":"n","job":"j","metric":"cpu","forecast":10.0,"sigma":0.5,"method":"ses","mae_forecast":10.5,"mae":0.25}'
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import orjson
from perfsift.operators.forecast.records import FIELDS as BANK_FIELDS
from perfsift.operators.rounding import MAE_SIGMA, round_sig
from perfsift.schemas.encode import json_cells
from perfsift.schemas.forecast_wire import forecast_on_wire

_TEXT = ("node", "job", "metric", "method")
_TEMPLATE = b'{"ts":%s,"node":%s,"job":%s,"metric":%s,"forecast":%s,"sigma":%s%s%s,"method":%s%s,"mae":%s%s%s}'


def forecasts_json(records: Iterable[dict[str, Any]]) -> list[bytes]:
    """``orjson.dumps(forecast_on_wire(r))`` for each record, the same bytes. (The forecast bank's
    batches a stage hands over are encoded from their columns with their keys by the stage itself:
    ``Kind.columnar_json``, :func:`~perfsift.schemas.encode.encode_forecasts`.)"""
    records = list(records)
    if not records or not all(tuple(r) == BANK_FIELDS for r in records):
        return _one_by_one(records)
    cols = {k: [r[k] for r in records] for k in BANK_FIELDS}
    if not all(type(v) is float for k in ("ts", "forecast", "mae_forecast") for v in cols[k]) or not all(
        type(v) is str for k in _TEXT for v in cols[k]
    ):
        return _one_by_one(records)
    nums: dict[str, np.ndarray] = {}
    none: dict[str, np.ndarray] = {}
    for k in ("sigma", "lower", "upper", "mae", "lower_mae", "upper_mae"):
        col = cols[k]
        if not all(v is None or type(v) is float for v in col):
            return _one_by_one(records)
        none[k] = np.fromiter((v is None for v in col), dtype=bool, count=len(col))
        nums[k] = np.fromiter((np.nan if v is None else v for v in col), dtype=np.float64, count=len(col))
    f = np.array(cols["forecast"], dtype=np.float64)
    f_mae = np.array(cols["mae_forecast"], dtype=np.float64)

    def keep_bound(name: str, derived: np.ndarray, unknown: np.ndarray) -> list[bytes]:
        """The ``,"name":value`` piece of each record, or b"" where forecast_on_wire drops it: the
        value equals the derived bound, or both are null."""
        drop = (none[name] & unknown) | (~none[name] & ~unknown & (nums[name] == derived))
        cells = json_cells(nums[name])
        head = b',"' + name.encode() + b'":'
        return [b"" if d else head + c for d, c in zip(drop.tolist(), cells, strict=True)]

    pieces = []
    for lo, hi, centre, error, scale in (
        ("lower", "upper", f, "sigma", 1.0),
        ("lower_mae", "upper_mae", f_mae, "mae", MAE_SIGMA),
    ):
        with np.errstate(invalid="ignore", over="ignore"):
            c, half = round_sig(centre), 2 * scale * round_sig(nums[error])
            pieces += [
                keep_bound(lo, round_sig(c - half), none[error]),
                keep_bound(hi, round_sig(c + half), none[error]),
            ]
    same = (f_mae == f).tolist()
    mae_forecast = [b"" if s else b',"mae_forecast":' + c for s, c in zip(same, json_cells(f_mae), strict=True)]
    text = {k: _texts(cols[k]) for k in _TEXT}
    columns = [
        json_cells(np.array(cols["ts"], dtype=np.float64)),
        text["node"],
        text["job"],
        text["metric"],
        json_cells(f),
        json_cells(nums["sigma"]),
        pieces[0],
        pieces[1],
        text["method"],
        mae_forecast,
        json_cells(nums["mae"]),
        pieces[2],
        pieces[3],
    ]
    return [_TEMPLATE % r for r in zip(*columns, strict=True)]


def _one_by_one(records: list[dict[str, Any]]) -> list[bytes]:
    """Records of another shape: ``forecast_on_wire`` and orjson, record by record."""
    return [orjson.dumps(forecast_on_wire(r)) for r in records]


def _texts(values: list[str]) -> list[bytes]:
    """orjson's text of each string, once per distinct string."""
    seen: dict[str, bytes] = {}
    return [seen[v] if v in seen else seen.setdefault(v, orjson.dumps(v)) for v in values]
