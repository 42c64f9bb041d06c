"""Trace files: SDDF / CSV / JSONL round trips, format detection, mapping and errors."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from perfsift.producers.sddf import Chars, Field, SddfWriter
from perfsift.producers.synth import spmd
from perfsift.producers.traces import SddfMapping, TraceWriter, detect_format, iter_samples, write_samples
from perfsift.schemas import RecordError, validate_sample


def samples() -> list[dict]:
    s, _ = spmd("cactus", nodes=4, duration=30, seed=3, missing=0.05)
    return [validate_sample(x) for x in s]


def present(s: dict) -> dict:
    return {**s, "metrics": {k: v for k, v in s["metrics"].items() if v is not None}}


@pytest.mark.parametrize("name", ["t.sddf", "t.sddfb", "t.csv", "t.jsonl", "t.csv.gz", "t.jsonl.gz", "t.sddfa"])
def test_every_format_reads_back_what_was_written(tmp_path: Path, name: str) -> None:
    src = samples()
    path = tmp_path / name
    assert write_samples(src, path) == len(src)
    assert detect_format(path) == {"sddfb": "sddf", "sddfa": "sddf"}.get(name.split(".")[1], name.split(".")[1])
    back = list(iter_samples(path))
    assert [present(b) for b in back] == [present(s) for s in src]


def test_sddf_writes_a_new_names_record_when_metrics_appear(tmp_path: Path) -> None:
    path = tmp_path / "grow.sddf"
    rows = [
        {"ts": 1.0, "node": "a", "job": "j", "seq": 0, "metrics": {"x": 1.0}},
        {"ts": 2.0, "node": "a", "job": "j", "seq": 1, "metrics": {"x": 2.0, "y": 3.0}},
    ]
    write_samples(rows, path)
    assert path.read_text().count('"metric names" { [') == 2
    assert [s["metrics"] for s in iter_samples(path)] == [{"x": 1.0}, {"x": 2.0, "y": 3.0}]


def test_sddf_mapping_names_fields_and_int_nodes(tmp_path: Path) -> None:
    path = tmp_path / "custom.sddf"
    with path.open("wb") as fh:
        w = SddfWriter(fh)
        d = w.descriptor(7, "cpu", [Field("clock", "double"), Field("pe", "int"), Field("user", "double"),
                                    Field("sys", "double"), Field("label", "char", 1)])  # fmt: skip
        w.record(d, [10.0, 3, 55.5, 4.5, Chars.of("x")])
        w.record(d, [11.0, 4, float("nan"), 5.0, Chars.of("y")])
    default = list(iter_samples(path))
    assert [(s["node"], s["ts"]) for s in default] == [("3", 10.0), ("4", 11.0)]
    assert default[0]["metrics"] == {"user": 55.5, "sys": 4.5} and default[1]["metrics"] == {"user": None, "sys": 5.0}
    explicit = list(
        iter_samples(path, mapping=SddfMapping.parse("record=cpu,ts=clock,node=pe,metrics=sys,job_default=J"))
    )
    assert explicit[0]["metrics"] == {"sys": 4.5} and explicit[0]["job"] == "J"
    with pytest.raises(RecordError, match="no field 'nope'"):
        list(iter_samples(path, mapping=SddfMapping(ts="nope")))
    with pytest.raises(ValueError, match="--map"):
        SddfMapping.parse("colour=red")


def test_csv_rows_and_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text("ts,node,cpu,mem\n1,a,5,\n2,b,x,3\n3,c,1\n")
    errors: list[RecordError] = []
    rows = list(iter_samples(path, on_error=errors.append))
    assert rows[0]["metrics"] == {"cpu": 5.0, "mem": None} and rows[0]["job"] == "default"
    assert [str(e) for e in errors] == [
        f"{path}:3 column 'cpu': bad number 'x'",
        f"{path}:4: 3 cells, the header has 4",
    ]
    bad = tmp_path / "h.csv"
    bad.write_text("node,ts,cpu\n")
    with pytest.raises(RecordError, match="unknown trace format"):
        detect_format(bad)
    with pytest.raises(ValueError, match="fixed set of metrics"):
        rows = [{"ts": 1.0, "node": "a", "metrics": {"x": 1.0}}, {"ts": 2.0, "node": "a", "metrics": {"y": 1.0}}]
        write_samples(rows, tmp_path / "v.csv")


def test_writer_refuses_unknown_extensions(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot tell the format"):
        TraceWriter(tmp_path / "x.parquet")


def test_values_that_are_not_finite_are_missing_not_errors(tmp_path: Path) -> None:
    path = tmp_path / "nan.sddfb"
    write_samples([{"ts": 1.0, "node": "a", "metrics": {"x": None, "y": 2.0}}], path)
    (s,) = iter_samples(path)
    assert s["metrics"]["x"] is None and not math.isnan(s["metrics"]["y"])
