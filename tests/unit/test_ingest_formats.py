"""collectd (value-list JSON and Graphite), InfluxDB line protocol and Prometheus remote_write,
decoded without a broker from what the real programs wrote (tests/data/ingest: collectd 5.12's
write_http JSON and write_graphite lines of one run, Prometheus 2.42's remote_write requests of a
node-exporter scrape) and from requests encoded here by hand, value by value."""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from pathlib import Path

import orjson
import pytest
from perfsift.formats import Assembler, IngestError, IngestSettings, decoder_for
from perfsift.formats.settings import parse_map

from tests import ingest_sources as src
from tests.unit.test_ingest_decode import assert_samples

DATA = Path(__file__).parent.parent / "data" / "ingest"


def rows_of(fmt: str, msgs: Iterable[bytes], when: float = 0.0, key: bytes | None = None,
            **map_doc: object) -> tuple[dict, Assembler]:  # fmt: skip
    asm = Assembler(IngestSettings(fmt, parse_map(fmt, map_doc or None), 1.0))
    dec = decoder_for(asm)
    for v in msgs:
        dec(v, key, when)
    return {(j, n, ts): r for j, n, ts, r in asm.due(0.0, everything=True)}, asm


@pytest.mark.parametrize("run", ["write_http", "write_kafka"])
def test_collectd_json_values_and_rates_equal_collectds_own_graphite_rates(run: str) -> None:
    """One collectd run wrote both files (write_http JSON and write_graphite; write_kafka's two
    topics, Format JSON and Format Graphite): its Graphite lines carry the rates collectd computed
    itself (StoreRates), a real oracle for the JSON decoder's derive rates; gauges are checked
    against the JSON as written. write_kafka stores rates by default (StoreRates true) while its
    JSON still says "derive": ``rates: false`` takes them as they are."""
    posts = (DATA / f"collectd-{run}.jsonl").read_bytes().splitlines()
    graphite_file = "collectd-graphite.txt" if run == "write_http" else "collectd-write_kafka-graphite.txt"
    json_rows, asm = rows_of("collectd_json", posts, align=0, rates=run == "write_http")
    assert asm.take_problems() == []
    by_second: dict[float, dict] = {}  # write_graphite stamps the value list's time rounded to the second
    for (job, node, ts), row in json_rows.items():
        assert (job, node) == ("default", "node-a")
        by_second.setdefault(float(round(ts)), {}).update(row)
    graphite, gasm = rows_of("graphite", [(DATA / graphite_file).read_bytes()], prefix="collectd.")
    assert gasm.take_problems() == []
    compared = 0
    for (_, node, ts), row in graphite.items():
        assert node == "node-a"
        for name, v in row.items():  # cpu-0.cpu-user <-> cpu-0/cpu-user (collectd's defaults)
            mine = by_second[ts][name.replace(".", "/", 1)]
            assert mine == pytest.approx(v, rel=2e-3, abs=1e-5), (ts, name)  # ms-rounded JSON times
            compared += 1
    # every line (2 cpus x 8 states, 6 memory, 2 x 8 interface, 3 load a second) had its JSON value
    assert compared == sum(len(row) for row in graphite.values()) > 150
    # gauges as written; names as collectd's identifiers; multi-source types per data source
    gauges = {}
    for post in posts:
        for vl in orjson.loads(post):
            if vl["plugin"] in ("memory", "load"):
                for v, ds in zip(vl["values"], vl["dsnames"], strict=True):
                    name = "load/load." + ds if vl["plugin"] == "load" else f"memory/memory-{vl['type_instance']}"
                    gauges[(vl["time"], name)] = v
    assert len(gauges) > 50
    for (t, name), v in gauges.items():
        assert json_rows[("default", "node-a", t)][name] == v
    assert any("interface-eth0/if_octets.rx" in row for row in by_second.values())


def test_collectd_counter_derive_and_absolute() -> None:
    def vl(t: float, values: list, types: list[str]) -> bytes:
        return orjson.dumps([{"values": values, "dstypes": types, "dsnames": [f"d{i}" for i in range(len(values))],
                              "time": t, "interval": 10.0, "host": "h", "plugin": "p", "plugin_instance": "",
                              "type": "t", "type_instance": "x"}])  # fmt: skip

    types = ["counter", "derive", "absolute", "gauge"]
    msgs = [vl(10.0, [100, 100, 50, None], types), vl(20.0, [160, 40, 30, 1.5], types), vl(30.0, [10, 50, 0, 2], types)]
    rows, asm = rows_of("collectd_json", msgs)
    r = {ts: row for (_, _, ts), row in rows.items()}
    assert r[10.0] == {"p/t-x.d0": None, "p/t-x.d1": None, "p/t-x.d2": 5.0}  # gauge null: collectd's NaN
    assert r[20.0] == {"p/t-x.d0": 6.0, "p/t-x.d1": -6.0, "p/t-x.d2": 3.0, "p/t-x.d3": 1.5}  # derive may go down
    assert r[30.0]["p/t-x.d0"] is None and r[30.0]["p/t-x.d1"] == 1.0  # a counter that went down: reset
    with pytest.raises(IngestError, match="collectd value list"):
        decoder_for(asm)(b'[{"values": [1], "dstypes": [], "dsnames": ["v"], "time": 1}]', None, 0.0)


def test_graphite_prefix_postfix_and_unmapped_paths() -> None:
    text = b"pre.n1_example_com.post.cpu-0.cpu-user 12.5 1700000000\npre.n2.post.load.load.shortterm nan 1700000000\n"
    rows, asm = rows_of("graphite", [text + b"other.x 1 1700000000\n"], prefix="pre.", postfix=".post")
    assert rows == {("default", "n1_example_com", 1.7e9): {"cpu-0.cpu-user": 12.5}, ("default", "n2", 1.7e9): {}}
    ((kind, reason),) = asm.take_problems()
    assert kind == "unmapped" and "'other.x'" in reason
    with pytest.raises(IngestError, match="Graphite"):
        rows_of("graphite", [b"a.b 1\n"])


def to_line_protocol(obj: dict) -> bytes:
    """A Telegraf JSON metric as Telegraf's influx serializer writes it (ns timestamps, integers
    with ``i``), written here from the protocol's rules, not with perfsift's code."""
    esc = lambda s: str(s).replace(",", "\\,").replace("=", "\\=").replace(" ", "\\ ")  # noqa: E731
    tags = "".join(f",{esc(k)}={esc(v)}" for k, v in sorted(obj["tags"].items()))
    fields = ",".join(f"{esc(k)}={v}i" if isinstance(v, int) else f"{esc(k)}={v!r}" for k, v in obj["fields"].items())
    return f"{obj['name']}{tags} {fields} {obj['timestamp'] * 10**9}".encode()


def test_line_protocol_gives_the_samples_of_telegrafs_json() -> None:
    msgs, want = src.telegraf_messages(["a", "b"])
    lines = []
    for value, _, _ in msgs:
        obj = orjson.loads(value)
        lines += [to_line_protocol(o) for o in obj.get("metrics", [obj])]
    rows, asm = rows_of("influx_line", [b"\n".join(lines[:3]), *lines[3:]])  # several lines a message, too
    assert_samples(rows, want)
    assert asm.take_problems() == []
    text = (b'# a comment\nnet\\ io,host=n1,path=/a\\ b\\,c,x\\=y=1 rx=12i,tx=7u,up=true,note="a b, \\"c\\"",'
            b"f=-1.5e3 1700000000123456789\ncpu,host=n1 idle=90")  # fmt: skip
    rows, _ = rows_of("influx_line", [text], when=1.7e9 + 5)
    assert [k[2] for k in rows] == [pytest.approx(1700000000.123456789, abs=1e-6), 1.7e9 + 5]
    rows = {(j, n, round(t, 3)): r for (j, n, t), r in rows.items()}
    assert rows == {("default", "n1", 1700000000.123): {"net io./a b,c.1.rx": 12.0, "net io./a b,c.1.tx": 7.0,
                                                            "net io./a b,c.1.f": -1500.0},
                    ("default", "n1", 1.7e9 + 5): {"cpu.idle": 90.0}}  # fmt: skip
    for bad in (b"cpu,host=n1", b"cpu,host=n1 idle=", b'cpu,host=n1 s="open', b"cpu,host idle=1"):
        with pytest.raises(IngestError, match="line protocol"):
            rows_of("influx_line", [bad])


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def hand_encoded_request(series: list[tuple[dict[str, str], list[tuple[float, int]]]]) -> bytes:
    """A snappy-compressed remote_write ``WriteRequest`` written from prompb's definitions
    (WriteRequest.timeseries = 1; TimeSeries.labels = 1, samples = 2; Label.name = 1, value = 2;
    Sample.value = 1 (double), timestamp = 2 (int64 ms)) with the protobuf wire format by hand."""
    import cramjam

    body = b""
    for labels, samples in series:
        ts = b"".join(_field(1, _field(1, k.encode()) + _field(2, v.encode())) for k, v in labels.items())
        for value, ms in samples:
            ts += _field(2, b"\x09" + struct.pack("<d", value) + b"\x10" + _varint(ms))
        body += _field(1, ts)
    return bytes(cramjam.snappy.compress_raw(body))


def test_a_hand_encoded_remote_write_request_becomes_samples() -> None:
    node = {"instance": "n1:9100", "job": "node"}
    t0, t1 = 1_700_000_000_000, 1_700_000_015_000
    series = [
        ({"__name__": "temp_celsius", **node, "sensor": "cpu0"}, [(40.5, t0), (41.0, t1)]),
        ({"__name__": "jobs_total", **node}, [(100.0, t0), (160.0, t1)]),
        ({"__name__": "up", "instance": "n2:9100", "job": "node"}, [(1.0, t0)]),
        ({"__name__": "temp_celsius", **node, "sensor": "nan"}, [(math.nan, t0)]),  # a stale marker
    ]
    for le, counts in (("1", (1, 1)), ("5", (2, 6)), ("+Inf", (2, 6))):
        series.append(({"__name__": "wait_seconds_bucket", **node, "le": le}, [(counts[0], t0), (counts[1], t1)]))
    rows, asm = rows_of("remote_write", [hand_encoded_request(series)])
    assert asm.take_problems() == []
    q = {f"wait_seconds{{quantile={p}}}": None for p in ("0.5", "0.9", "0.99")}
    assert rows[("node", "n1", 1.7e9)] == {"temp_celsius{sensor=cpu0}": 40.5, "jobs_total": None, **q}
    assert rows[("node", "n2", 1.7e9)] == {"up": 1.0}
    # 4 observations since, all in (1, 5]: linear within the bucket
    assert rows[("node", "n1", 1.7e9 + 15)] == {"temp_celsius{sensor=cpu0}": 41.0, "jobs_total": 60 / 15,
                                                "wait_seconds{quantile=0.5}": 3.0, "wait_seconds{quantile=0.9}": 4.6,
                                                "wait_seconds{quantile=0.99}": 1 + 4 * 0.99}  # fmt: skip
    with pytest.raises(IngestError, match="snappy"):
        rows_of("remote_write", [b"\x00\x01 not snappy"])


def test_prometheus_remote_write_requests_from_a_real_server() -> None:
    """Four requests Prometheus 2.42 sent of node-exporter 1.5 scraped every second: each gauge
    as the request says, each counter the rate between two scrapes, every series' name the one
    the text format gives (the exposition of the same exporter)."""
    from perfsift.formats.prometheus import parse_series_name, series_name
    from perfsift.formats.remote_write import read_request

    bodies = [(DATA / f"prometheus-remote-write-{i}.bin").read_bytes() for i in range(1, 5)]
    rows, asm = rows_of("remote_write", bodies)
    assert asm.take_problems() == []
    points: dict[str, list[tuple[float, float]]] = {}
    for body in bodies:
        for ts in read_request(body).timeseries:
            labels = {lb.name: lb.value for lb in ts.labels}
            assert labels["instance"] == "127.0.0.1:39100" and labels["job"] == "node"
            own = [(k, v) for k, v in labels.items() if k not in ("instance", "job", "__name__")]
            name = series_name(labels["__name__"], own)
            points.setdefault(name, []).extend((s.timestamp / 1000, s.value) for s in ts.samples)
    checked = 0
    for (job, node, t), row in rows.items():
        assert (job, node) == ("node", "127.0.0.1")
        for name, v in row.items():
            if "{quantile=" in name:
                continue
            series = sorted(points[name])
            i = [p[0] for p in series].index(t)
            if parse_series_name(name)[0].endswith(("_total", "_count", "_sum")):
                want = None if i == 0 else (series[i][1] - series[i - 1][1]) / (t - series[i - 1][0])
                assert (v is None) == (want is None) and (want is None or v == pytest.approx(want, rel=1e-12)), name
            else:
                assert v == series[i][1], name
            checked += 1
    assert checked > 1000
    text = [(DATA / "node-exporter-1.prom").read_bytes()]
    text_names = set(rows_of("prometheus_text", text, 1.0, b"n")[0].popitem()[1])
    last = rows[max(rows, key=lambda k: len(rows[k]))]
    shared = text_names & set(last)
    assert len(shared) > 0.9 * len(text_names)  # the same exporter, named alike by both formats
    assert not any(n.startswith(("go_", "scrape_", "node_scrape_collector_")) or "_info" in n for n in last)
