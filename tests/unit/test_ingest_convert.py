"""``perfsift convert``: archived exports (the Collector file exporter's OTLP JSON lines and
length-prefixed protobuf, Telegraf lines, a Prometheus scrape) into perfsift traces."""

from __future__ import annotations

import struct
from pathlib import Path

import orjson
import pytest
from google.protobuf.json_format import MessageToJson
from perfsift.cli import app
from perfsift.producers.traces import iter_samples
from typer.testing import CliRunner

from tests import ingest_sources as src


def samples_of(path: Path) -> dict:
    return {(s["job"], s["node"], s["ts"]): s["metrics"] for s in iter_samples(path)}


def check(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for key, metrics in want.items():
        for name, v in metrics.items():
            g = got[key].get(name)
            assert (g is None) == (v is None), (key, name)
            if v is not None:
                assert g == pytest.approx(v, rel=1e-9), (key, name)


@pytest.mark.parametrize("fmt, suffix", [("otlp_json", "jsonl"), ("otlp_proto", "csv"), ("otlp_json", "sddf")])
def test_collector_file_exports_convert_to_traces(tmp_path: Path, fmt: str, suffix: str) -> None:
    reqs, want = src.otlp_requests({"h0": "jobA", "h1": "jobB"})
    export = tmp_path / f"metrics.{fmt}"
    if fmt == "otlp_json":  # one request per line
        export.write_text("".join(MessageToJson(r, indent=None) + "\n" for r in reqs))
    else:  # each request after its length, 4 bytes big-endian
        export.write_bytes(b"".join(struct.pack(">I", len(b)) + b for b in (r.SerializeToString() for r in reqs)))
    out = tmp_path / f"trace.{suffix}"
    res = CliRunner().invoke(app, ["convert", str(export), "--format", fmt, "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert f"{len(want)} samples" in res.output
    check(samples_of(out), want)


def test_telegraf_and_prometheus_files_convert(tmp_path: Path) -> None:
    msgs, want = src.telegraf_messages(["a", "b"])
    lines = tmp_path / "telegraf.out"
    lines.write_bytes(b"".join(v + b"\n" for v, _, _ in msgs) + b"not json\n")
    out = tmp_path / "t.jsonl"
    res = CliRunner().invoke(app, ["convert", str(lines), "-f", "telegraf_json", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "1 problems" in res.output and f"telegraf.out:{len(msgs) + 1}" in res.output
    check(samples_of(out), want)
    scrape, _ = src.prometheus_messages(["p1"])
    prom = tmp_path / "node7.prom"
    prom.write_bytes(scrape[0][0])
    out2 = tmp_path / "p.jsonl"
    res = CliRunner().invoke(app, ["convert", str(prom), "-f", "prometheus_text", "-o", str(out2)])
    assert res.exit_code == 0, res.output
    (rec,) = [orjson.loads(line) for line in out2.read_bytes().splitlines()]
    assert rec["node"] == "node7" and rec["ts"] == pytest.approx(prom.stat().st_mtime)
    assert rec["metrics"]["temp_celsius{sensor=cpu0}"] == 40.0


NODE_EXPORTER = [
    (Path(__file__).parent.parent / "data" / "ingest" / f"node-exporter-{i}.prom").read_bytes() for i in (1, 2)
]


def test_several_scrapes_become_a_time_series_of_one_node(tmp_path: Path) -> None:
    """Five node-exporter scrapes concatenated in one file (``curl >> file``), or as five files of one
    target: five samples of one node, 10 s apart, counters as rates between them."""
    import os

    line = next(
        ln for ln in NODE_EXPORTER[0].splitlines() if ln.startswith(b'node_cpu_seconds_total{cpu="0",mode="user"}')
    )
    vals = [float(line.split()[-1]) + 7.5 * k for k in range(5)]  # the CPU busy 0.75 s/s between scrapes
    five = [NODE_EXPORTER[0].replace(line, line.rsplit(b" ", 1)[0] + f" {v}".encode()) for v in vals]
    cat = tmp_path / "node-a.prom"
    cat.write_bytes(b"".join(five))
    os.utime(cat, (2000.0, 2000.0))
    out = tmp_path / "cat.jsonl"
    res = CliRunner().invoke(app, ["convert", str(cat), "-f", "prometheus_text", "-o", str(out)])
    assert res.exit_code == 2 and "5 scrapes without timestamps: give --interval" in res.output
    res = CliRunner().invoke(app, ["convert", str(cat), "-f", "prometheus_text", "-o", str(out), "--interval", "10"])
    assert res.exit_code == 0, res.output
    got = list(iter_samples(out))
    assert [(s["node"], s["ts"]) for s in got] == [("node-a", 1960.0 + 10 * k) for k in range(5)]
    name = "node_cpu_seconds_total{cpu=0,mode=user}"
    assert got[0]["metrics"][name] is None
    assert [s["metrics"][name] for s in got[1:]] == pytest.approx([0.75] * 4)
    files = []
    for k, text in enumerate(five):  # node-a.001.prom ... node-a.005.prom, one scrape each
        f = tmp_path / f"node-a.{k + 1:03d}.prom"
        f.write_bytes(text)
        os.utime(f, (2000.0 + 10 * k, 2000.0 + 10 * k))
        files.append(str(f))
    out2 = tmp_path / "files.jsonl"
    res = CliRunner().invoke(app, ["convert", *files, "-f", "prometheus_text", "-o", str(out2)])
    assert res.exit_code == 0, res.output
    got2 = list(iter_samples(out2))
    assert [(s["node"], s["ts"]) for s in got2] == [("node-a", 2000.0 + 10 * k) for k in range(5)]
    assert [s["metrics"][name] for s in got2[1:]] == pytest.approx([0.75] * 4)


def test_collectd_graphite_and_line_protocol_files_convert(tmp_path: Path) -> None:
    data = Path(__file__).parent.parent / "data" / "ingest"
    mapping = tmp_path / "m.yaml"
    mapping.write_text("prefix: collectd.\n")
    for fmt, path, extra in (("collectd_json", data / "collectd-write_http.jsonl", []),
                             ("graphite", data / "collectd-graphite.txt", ["--map", str(mapping)])):  # fmt: skip
        out = tmp_path / f"{fmt}.jsonl"
        res = CliRunner().invoke(app, ["convert", str(path), "-f", fmt, "-o", str(out), *extra])
        assert res.exit_code == 0 and "0 problems" in res.output, res.output
        got = list(iter_samples(out))
        assert {s["node"] for s in got} == {"node-a"} and len(got) >= 5
    lines = tmp_path / "metrics.out"
    lines.write_text(
        "cpu,host=n1,cpu=cpu-total usage_idle=97.5 1700000000000000000\nmem,host=n1 used=5i 1700000000000000000\n"
    )
    out = tmp_path / "influx.jsonl"
    res = CliRunner().invoke(app, ["convert", str(lines), "-f", "influx_line", "-o", str(out)])
    assert res.exit_code == 0, res.output
    (rec,) = list(iter_samples(out))
    assert (rec["node"], rec["ts"], rec["metrics"]) == (
        "n1",
        1.7e9,
        {"cpu.cpu-total.usage_idle": 97.5, "mem.used": 5.0},
    )
