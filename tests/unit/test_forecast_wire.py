"""perf.forecast on the wire (schemas/forecast_wire.py): the bounds, and mae_forecast where it
equals the forecast, are not written; every reader gets back, bit for bit, the record the
operator made, in every encoding, on a series with a 1e9 level jump and gaps."""

from __future__ import annotations

import io

import fastavro
import numpy as np
import orjson
import pytest
from perfsift.operators.batch import Batch
from perfsift.operators.forecast.forecast import PRIMARIES, ForecastBank
from perfsift.operators.forecast.records import ForecastRecords
from perfsift.operators.rounding import round_sig, round_sig_one
from perfsift.schemas import KINDS, codec_for, encode_records
from perfsift.schemas.detect import decode_any
from perfsift.schemas.encode import encode_forecasts
from perfsift.schemas.forecast_wire import DERIVED_FIELDS, complete_forecast, forecast_on_wire
from perfsift.schemas.records import load_schema


def series() -> Batch:
    rng = np.random.default_rng(11)
    k = 240
    x = np.cumsum(rng.normal(0.0, 1.0, (k, 2)), axis=0) * 37.1 + 500.0
    x[120:, 0] += 1e9  # a level jump
    x[rng.random((k, 2)) < 0.05] = np.nan
    return Batch(
        ts=1.7e9 + np.arange(k) / 2,
        node_idx=np.arange(k) % 2,
        values=x,
        metrics=("cpu", "io"),
        nodes=("n0", "n1"),
        job_idx=np.zeros(k, dtype=np.int64),
    )


@pytest.fixture(scope="module")
def made() -> tuple[Batch, list[dict]]:
    bank = ForecastBank()
    out = bank.update(series())
    return out, bank.records(out)


def test_the_json_on_the_wire_lacks_what_readers_derive(made: tuple[Batch, list[dict]]) -> None:
    out, records = made
    encoded, _ = encode_forecasts(out, PRIMARIES)
    assert encoded == [orjson.dumps(forecast_on_wire(r)) for r in records]
    assert encoded == encode_records(records, "json", "forecast")
    wire = [orjson.loads(e) for e in encoded]
    assert not any(f in w for w in wire for f in DERIVED_FIELDS)
    differs = [r["mae_forecast"] != r["forecast"] for r in records]
    assert [("mae_forecast" in w) for w in wire] == differs
    assert 0 < sum(differs) < len(records)  # both cases occur


def test_records_held_as_batches_encode_to_the_bytes_of_their_dicts() -> None:
    """The reduce operator hands perf.forecast over as bank batches (ForecastRecords); the JSON and
    keys the stage makes from their columns (``Kind.columnar_json``) are those of the dicts, record
    by record, in order, over several batches with missing values and the level jump, and the
    records read back are the bank's."""
    bank = ForecastBank()
    b = series()
    outs = [bank.update(b.take(np.arange(i, min(i + 50, len(b))))) for i in range(0, len(b), 50)]
    held = ForecastRecords(outs)
    dicts = [r for o in outs for r in bank.records(o)]
    assert len(held) == len(dicts) == sum(int((~np.isnan(o.values)).sum()) for o in outs)
    assert list(held) == dicts and held == dicts
    values, keys = KINDS["forecast"].columnar_json(held.batches)  # type: ignore[misc]  # the stage's path
    assert values == [orjson.dumps(forecast_on_wire(r)) for r in dicts]
    assert keys == [r["node"].encode() for r in dicts]
    assert encode_records(held, "json", "forecast") == values
    assert encode_records(held, "avro", "forecast") == encode_records(dicts, "avro", "forecast")


@pytest.mark.parametrize("encoding", ["json", "avro"])
def test_every_reader_gets_the_operators_record_back(made: tuple[Batch, list[dict]], encoding: str) -> None:
    out, records = made
    codec = codec_for(encoding, "forecast")
    scored = [r for r in records if r["sigma"] is not None and r["mae"] is not None]
    assert scored and any(r["sigma"] is None for r in records)  # both the null and the derived bounds
    encoded = encode_forecasts(out, PRIMARIES)[0] if encoding == "json" else [codec.encode(r) for r in records]
    assert [codec.decode(e) for e in encoded] == records
    assert [decode_any(e).record for e in encoded] == records  # perfsift tail and export


def test_avro_writes_null_bounds_and_is_smaller(made: tuple[Batch, list[dict]]) -> None:
    _, records = made
    avro = codec_for("avro", "forecast")
    r = next(r for r in records if r["sigma"] is not None and r["mae_forecast"] != r["forecast"])
    lean = avro.encode(r)
    # the same record with its four bounds as doubles: 4 x 8 bytes more than four nulls
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, load_schema("forecast"), r)
    assert len(buf.getvalue()) - (len(lean) - 10) == 4 * 8


def test_a_record_written_with_its_bounds_keeps_them() -> None:
    """Records written before (bounds on the wire) read as they were written."""
    old = dict(ts=1.0, node="n", metric="m", forecast=2.0, sigma=0.5, lower=0.9, upper=3.1, method="holt")
    got = complete_forecast(dict(old))
    assert (got["lower"], got["upper"], got["mae_forecast"], got["mae"]) == (0.9, 3.1, 2.0, None)
    assert got["lower_mae"] is None and got["upper_mae"] is None


def test_the_scalar_rounding_readers_use_gives_the_writers_bits() -> None:
    """round_sig_one (record by record, in readers) against round_sig (column-wise, in writers):
    normal values over 27 decades, values one ulp around powers of ten, and the extremes."""
    rng = np.random.default_rng(2)
    n = 20_000
    near_tens = 10.0 ** rng.integers(-10, 12, n) * (1 + rng.choice([-1, 1], n) * rng.integers(0, 4, n) * 2.2e-16)
    edges = [5e-324, -1.7976931348623157e308, 0.5, 0.05, 2.5, 1e9 + 0.5, np.inf, -np.inf, np.nan, 0.0]
    xs = np.concatenate([rng.normal(0, 1, n) * 10.0 ** rng.integers(-12, 15, n), near_tens, edges])
    got = np.array([round_sig_one(float(x)) for x in xs])
    np.testing.assert_array_equal(got, round_sig(xs))


def test_forecasts_in_columns_are_the_bytes_of_the_records_one_by_one(made: tuple[Batch, list[dict]]) -> None:
    """schemas/forecast_json.py: the bank's records (a 1e9 level jump, gaps, unknown σ at the
    start) and records made elsewhere - a bound that is not the derived one, a null bound beside a
    known σ, a NaN σ, an int time - give the bytes forecast_on_wire and orjson give record by record."""
    from perfsift.schemas.forecast_json import forecasts_json

    _, records = made
    one_by_one = [orjson.dumps(forecast_on_wire(r)) for r in records]
    assert forecasts_json(records) == one_by_one
    assert any(r["sigma"] is None for r in records) and any(r["sigma"] is not None for r in records)
    odd = [dict(r) for r in records[:40]]
    odd[30]["lower"] = odd[30]["forecast"] - 1.0  # kept: not what a reader derives
    odd[31]["upper_mae"] = None  # kept as null beside a known MAE
    odd[32]["sigma"] = float("nan")  # written null; the bounds kept (a NaN is derived)
    odd[33]["mae_forecast"] = odd[33]["forecast"]  # left out
    expect = [orjson.dumps(forecast_on_wire(r)) for r in odd]
    got = forecasts_json(odd)
    assert got == expect
    assert b'"lower":' in got[30] and b'"upper_mae":null' in got[31] and b'"mae_forecast"' not in got[33]
    assert b'"sigma":null,"lower":' in got[32]
    odd[0]["ts"] = 17  # an int: the records go one by one, the same bytes
    assert forecasts_json(odd) == [orjson.dumps(forecast_on_wire(r)) for r in odd]
