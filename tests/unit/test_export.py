"""Prometheus out, broker-free: the exposition of reduced values, forecasts and contract levels
(values exact after the text round trip, series capped and expired), and remote_write out (the
request read back by the decoder of remote_write in; pushes that fail are retried, refused ones
dropped)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from perfsift.formats.prom_out import LatestValues
from perfsift.formats.remote_write import encode_series, read_request
from perfsift.streams.export import RemoteWriter
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

#: values whose shortest decimal form is long: a lossy formatting would change them
AWKWARD = [0.1 + 0.2, 1e-300, 12345.678901234567, -2.5e17, 1 / 3]


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def scrape(lv: LatestValues) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The exposition text of ``lv`` parsed back: (name, sorted labels) -> value."""
    reg = CollectorRegistry()
    reg.register(lv)
    text = generate_latest(reg).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def reduced(node: str, metrics: dict[str, float | None], ts: float = 50.0, job: str = "j1", full: bool = False) -> dict:
    return {"ts": ts, "node": node, "job": job, "seq": 1, "metrics": metrics, "selection_version": 3, "full": full}


def test_reduced_values_come_out_exactly_with_job_node_metric_labels() -> None:
    lv = LatestValues()
    names = [f"m{i}" for i in range(len(AWKWARD))] + ["node_cpu_seconds_total{cpu=0,mode=idle}"]
    lv.add("reduced", [reduced("n1", dict(zip(names, [*AWKWARD, 0.93], strict=True)), ts=99.5)])
    got = scrape(lv)
    for name, v in zip(names, [*AWKWARD, 0.93], strict=True):
        assert got[("perfsift_reduced", (("job", "j1"), ("metric", name), ("node", "n1")))] == v
    assert got[("perfsift_reduced_timestamp_seconds", (("job", "j1"), ("node", "n1")))] == 99.5
    assert got[("perfsift_reduced_selection_version", (("job", "j1"), ("node", "n1")))] == 3
    assert sum(1 for name, _ in got if name == "perfsift_reduced") == len(names)


def test_the_latest_value_wins_and_a_null_keeps_the_last_one() -> None:
    lv = LatestValues()
    lv.add("reduced", [reduced("n1", {"a": 1.0, "b": 2.0}, ts=1), reduced("n1", {"a": 3.0, "b": None}, ts=2)])
    got = scrape(lv)
    assert got[("perfsift_reduced", (("job", "j1"), ("metric", "a"), ("node", "n1")))] == 3.0
    assert got[("perfsift_reduced", (("job", "j1"), ("metric", "b"), ("node", "n1")))] == 2.0


def test_full_samples_refresh_the_selected_series_and_add_none() -> None:
    lv = LatestValues()
    lv.add("reduced", [reduced("n1", {"kept": 1.0})])
    lv.add("reduced", [reduced("n1", {"kept": 5.0, "other": 7.0, "third": 8.0}, full=True)])
    got = scrape(lv)
    values = {k[1][1][1]: v for k, v in got.items() if k[0] == "perfsift_reduced"}
    assert values == {"kept": 5.0}


def test_forecasts_with_bounds_and_contract_levels() -> None:
    lv = LatestValues()
    lv.add(
        "forecast",
        [
            {
                "ts": 5.0,
                "node": "n1",
                "job": "j1",
                "metric": "cpu",
                "forecast": 0.5,
                "sigma": 0.1,
                "lower": 0.3,
                "upper": 0.7,
                "method": "mean",
            },
            {
                "ts": 5.0,
                "node": "n2",
                "job": "j1",
                "metric": "cpu",
                "forecast": 0.4,
                "sigma": None,
                "lower": None,
                "upper": None,
                "method": "last",
            },
        ],
    )
    lv.add(
        "contract",
        [
            {
                "ts": 5.0,
                "node": "n1",
                "job": "j1",
                "violation": 0.8,
                "smoothed": 0.6,
                "state": "violated",
                "driver": "cpu",
                "spaces": {"app": {"violation": 0.8, "distance": 1.0, "dims": {}}},
            },
            {"ts": 5.0, "node": "n2", "job": "j1", "violation": None, "state": "unknown"},
        ],
    )
    got = scrape(lv)
    n1 = (("job", "j1"), ("metric", "cpu"), ("node", "n1"))
    assert [
        got[(f, n1)]
        for f in ("perfsift_forecast", "perfsift_forecast_lower", "perfsift_forecast_upper", "perfsift_forecast_sigma")
    ] == [0.5, 0.3, 0.7, 0.1]
    n2 = (("job", "j1"), ("metric", "cpu"), ("node", "n2"))
    assert got[("perfsift_forecast", n2)] == 0.4
    assert ("perfsift_forecast_lower", n2) not in got and ("perfsift_forecast_upper", n2) not in got
    assert got[("perfsift_contract_violation", (("job", "j1"), ("node", "n1")))] == 0.8
    assert got[("perfsift_contract_violation_smoothed", (("job", "j1"), ("node", "n1")))] == 0.6
    assert got[("perfsift_contract_space_violation", (("job", "j1"), ("node", "n1"), ("space", "app")))] == 0.8
    assert ("perfsift_contract_violation", (("job", "j1"), ("node", "n2"))) not in got
    states = {(k[1][1][1], k[1][2][1]): v for k, v in got.items() if k[0] == "perfsift_contract_state"}
    assert states == {
        ("n1", "ok"): 0,
        ("n1", "violated"): 1,
        ("n1", "unknown"): 0,
        ("n2", "ok"): 0,
        ("n2", "violated"): 0,
        ("n2", "unknown"): 1,
    }


def test_a_forecast_as_written_exposes_its_derived_bounds_and_the_mae_bound() -> None:
    """perf.forecast carries neither bounds nor a mae_forecast equal to the forecast
    (schemas/forecast_wire.py): the exporter derives them, so every forecast family is there, with
    the operator's values."""
    import numpy as np
    import orjson
    from perfsift.operators.batch import Batch
    from perfsift.operators.forecast.forecast import PRIMARIES, ForecastBank
    from perfsift.schemas.encode import encode_forecasts

    x = np.random.default_rng(3).normal(100.0, 5.0, (40, 1))
    batch = Batch.from_columns(ts=np.arange(40.0), nodes=["n1"] * 40, metrics=["cpu"], values=x)
    out, bank = ForecastBank().update(batch), ForecastBank()
    made = bank.records(bank.update(batch))[-1]
    wire = orjson.loads(encode_forecasts(out, PRIMARIES)[0][-1])
    assert "lower" not in wire and "lower_mae" not in wire and made["lower_mae"] is not None
    lv = LatestValues()
    lv.add("forecast", [wire])
    got = scrape(lv)
    key = (("job", "default"), ("metric", "cpu"), ("node", "n1"))
    fields = ("forecast", "lower", "upper", "sigma", "mae_forecast", "lower_mae", "upper_mae", "mae")
    assert {f: got[(f"perfsift_forecast{'' if f == 'forecast' else '_' + f}", key)] for f in fields} == {
        f: made[f] for f in fields
    }


def test_records_without_their_fields_are_refused_and_counted() -> None:
    lv = LatestValues()
    lv.add("contract", [{"ts": 1.0, "node": "n1", "state": "bogus"}, {"node": "n1", "state": "ok"}])
    lv.add("reduced", [reduced("n1", {"a": 1.0}), {"ts": 1.0, "metrics": {}}])
    assert (lv.refused["contract"], lv.records["contract"]) == (2, 0)
    assert (lv.refused["reduced"], lv.records["reduced"]) == (1, 1)
    got = scrape(lv)
    assert got[("perfsift_export_refused_total", (("kind", "contract"),))] == 2


def test_the_series_count_is_capped_and_the_rest_counted() -> None:
    lv = LatestValues(max_series=50)
    # 30 nodes x (3 metrics + version + timestamp) = 150 wanted; the first 10 nodes fit
    lv.add("reduced", [reduced(f"n{i:02d}", {"a": i, "b": i, "c": i}) for i in range(30)])
    assert (lv.count, lv.dropped) == (50, 100)
    lv.add("reduced", [reduced("n03", {"a": -1.0})])  # a series that is there goes on updating
    got = scrape(lv)
    assert sum(1 for k in got if k[0].startswith("perfsift_reduced")) == 50
    assert {k[1][2][1] for k in got if k[0] == "perfsift_reduced"} == {f"n{i:02d}" for i in range(10)}
    assert got[("perfsift_reduced", (("job", "j1"), ("metric", "a"), ("node", "n03")))] == -1.0
    assert got[("perfsift_export_series_dropped_total", ())] == 100
    assert got[("perfsift_export_series", ())] == 50


def test_series_expire_after_their_window_and_free_room() -> None:
    clock = Clock()
    lv = LatestValues(max_series=10, expire_s=60.0, clock=clock)
    lv.add("reduced", [reduced("old", {"a": 1.0, "b": 1.0})])  # 4 series
    clock.t += 40
    lv.add("reduced", [reduced("new", {"a": 2.0})])  # 3 series
    clock.t += 30  # 'old' is 70 s old, 'new' 30 s
    got = scrape(lv)
    assert {k[1][2][1] for k in got if k[0] == "perfsift_reduced"} == {"new"}
    assert (lv.count, lv.expired) == (3, 4)
    lv.add("reduced", [reduced(f"more{i}", {"a": 1.0}) for i in range(3)])  # 9 more wanted, room for 7
    assert (lv.count, lv.dropped) == (10, 2)


def test_timestamps_are_the_records_when_asked() -> None:
    lv = LatestValues(timestamps=True)
    lv.add("reduced", [reduced("n1", {"a": 1.0}, ts=1700000000.25)])
    reg = CollectorRegistry()
    reg.register(lv)
    line = next(ln for ln in generate_latest(reg).decode().splitlines() if ln.startswith("perfsift_reduced{"))
    assert line.split()[-1] == "1700000000250"  # milliseconds, as the text format has them


def test_encode_series_is_read_back_by_the_remote_write_reader() -> None:
    body = encode_series([([("node", "n1"), ("__name__", "perfsift_reduced"), ("metric", "a")], [(1500, 0.1 + 0.2)])])
    (ts,) = read_request(body).timeseries
    assert [(lb.name, lb.value) for lb in ts.labels] == [
        ("__name__", "perfsift_reduced"),
        ("metric", "a"),
        ("node", "n1"),
    ]
    assert [(s.timestamp, s.value) for s in ts.samples] == [(1500, 0.1 + 0.2)]


@pytest.fixture()
def receiver() -> Iterator[tuple[str, list[bytes], list[int]]]:
    """A remote_write receiver on 127.0.0.1 answering with the statuses in ``codes`` (204 when
    empty) and keeping the bodies it was posted."""
    bodies: list[bytes] = []
    codes: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            assert self.headers["Content-Encoding"] == "snappy"
            bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(codes.pop(0) if codes else 204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/api/v1/write", bodies, codes
    srv.shutdown()
    srv.server_close()


def pushed(body: bytes) -> dict[tuple[tuple[str, str], ...], list[tuple[int, float]]]:
    return {
        tuple((lb.name, lb.value) for lb in ts.labels): [(s.timestamp, s.value) for s in ts.samples]
        for ts in read_request(body).timeseries
    }


def test_remote_write_pushes_what_changed_retries_failures_and_drops_refusals(receiver: tuple) -> None:
    url, bodies, codes = receiver
    clock = Clock()
    lv = LatestValues(clock=clock)
    w = RemoteWriter(url, lv, interval_s=1.0)
    assert w.push() == 0 and bodies == []  # nothing yet: no request
    lv.add("reduced", [reduced("n1", {"a": 1.5}, ts=10.0)])
    assert w.push() == 204
    first = pushed(bodies[-1])
    key = (("__name__", "perfsift_reduced"), ("job", "j1"), ("metric", "a"), ("node", "n1"))
    assert first[key] == [(10000, 1.5)] and len(first) == 3  # the value, its version and its time
    clock.t += 1
    lv.add("reduced", [reduced("n1", {"a": 2.5}, ts=11.0)])
    codes.append(503)
    assert w.push() == 503 and w.failed == 1
    clock.t += 1
    assert w.push() == 204  # the failed push's values go again
    assert pushed(bodies[-1])[key] == [(11000, 2.5)]
    clock.t += 1
    lv.add("reduced", [reduced("n1", {"a": 3.5}, ts=12.0)])
    codes.append(400)
    assert w.push() == 400 and w.refused == 1
    clock.t += 1
    assert w.push() == 0  # refused values are not sent again
    assert (w.requests, w.samples) == (2, 6)
