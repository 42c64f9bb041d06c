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
    assert rec["metrics"]["temp_celsius.cpu0"] == 40.0
