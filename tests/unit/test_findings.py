"""Reading an output folder back (analysis/findings.py) and writing the report page atomically."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from perfsift.analysis.findings import Folder, forecast_bands, read_jsonl
from perfsift.analysis.report import LIVE_REFRESH, build_report, write_atomic


def sample(t: float, v: float | None) -> dict:
    return {"ts": t, "node": "a", "job": "j", "seq": int(t), "metrics": {} if v is None else {"x": v}}


def forecast(t: float, f: float, sigma: float | None) -> dict:
    lo, hi = (None, None) if sigma is None else (f - 2 * sigma, f + 2 * sigma)
    return {"ts": t, "node": "a", "job": "j", "metric": "x", "forecast": f, "sigma": sigma, "lower": lo, "upper": hi}


def test_the_band_in_force_is_the_newest_forecast_before_each_value_whatever_the_cadence() -> None:
    """Forecasts one per 10 s period (not one per sample): each measured value is scored against the
    newest forecast made before it; values before the first scored forecast are not scored."""
    reduced = [sample(t, v) for t, v in zip(range(30), [10.0] * 12 + [50.0] * 3 + [10.0] * 15, strict=True)]
    forecasts = [forecast(0.0, 10.0, None), forecast(5.0, 10.0, 1.0), forecast(15.0, 10.0, 1.0)]
    (band,) = forecast_bands(Folder(Path("."), reduced=reduced, forecasts=forecasts))
    assert band.scored == 30 - 6  # t = 0..5: the band of t = 0 (no sigma yet) or none
    assert band.outside == 3  # the three values of 50
    np.testing.assert_array_equal(band.forecast[1:], 10.0)
    assert np.isnan(band.forecast[0])  # nothing forecast before t = 0


def test_missing_values_are_not_measured() -> None:
    reduced = [sample(t, None if 10 <= t < 20 else 1.0) for t in range(30)]
    (band,) = forecast_bands(Folder(Path("."), reduced=reduced, forecasts=[forecast(-1.0, 1.0, 0.1)]))
    assert len(band.ts) == 20 and band.outside == 0


def test_a_torn_last_line_is_left_out(tmp_path: Path) -> None:
    path = tmp_path / "selection.jsonl"
    path.write_bytes(orjson.dumps({"a": 1}) + b"\n" + b'{"a": ')
    assert read_jsonl(path) == [{"a": 1}]


def test_pages_are_written_atomically_and_refresh_only_when_live(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        build_report(tmp_path)  # nothing to report on
    live = build_report(tmp_path, live=True).read_text()  # the live page before the first outputs
    assert LIVE_REFRESH.strip() in live and "waiting" in live
    target = tmp_path / "x.bin"
    write_atomic(target, b"one")
    write_atomic(target, b"two")
    assert target.read_bytes() == b"two" and sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "x.bin"]
