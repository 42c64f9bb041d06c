"""The one table of record kinds (schemas/kinds.py) and what derives from it: topics, report files,
the OTLP and Prometheus mappings, the column-wise JSON of decisions, the Kubernetes topics; and the
wire encodings as objects (schemas/encodings.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
import yaml
from perfsift.analysis.analyze import FILES
from perfsift.formats.otlp.otlp_out import POINTS
from perfsift.formats.prom_out import LatestValues
from perfsift.operators.forecast.forecast import ForecastBank
from perfsift.schemas import KINDS, load_schema, samples_to_batch
from perfsift.schemas.encodings import ENCODINGS, encoding_for
from perfsift.schemas.records import SCHEMA_NAMES
from perfsift.streams.config import ENCODINGS as CONFIG_ENCODINGS
from perfsift.streams.stage import encode_decisions
from perfsift.streams.topics import DEFAULT_TOPIC, TOPICS, key_of

ROOT = Path(__file__).parents[2]


def test_every_kind_has_its_schema_file_and_every_schema_file_a_kind() -> None:
    shipped = sorted(p.stem for p in (ROOT / "schemas").glob("*.avsc"))
    assert sorted(KINDS) == shipped
    assert tuple(KINDS) == SCHEMA_NAMES
    for name in KINDS:
        assert load_schema(name)["type"] == "record", name


def test_the_topic_table_takes_each_kinds_default_topic_from_the_kinds_table() -> None:
    for kind in KINDS.values():
        spec = TOPICS[kind.topic]
        assert (spec.schema, spec.key, spec.compacted, spec.file) == (kind.name, kind.key, kind.compacted, kind.file)
        assert key_of(kind.topic) == kind.key
        assert key_of("some.other.topic", kind.name) == kind.key
    assert {k.name: k.topic for k in KINDS.values() if k.name != "sample"} == DEFAULT_TOPIC
    # the other topics carry samples only
    assert {t.schema for t in TOPICS.values() if t.name not in {k.topic for k in KINDS.values()}} == {"sample"}


def test_report_files_are_the_kinds_files() -> None:
    assert {k.topic: k.file for k in KINDS.values() if k.file} == FILES
    assert "perf.forecast" in FILES and "perf.raw" not in FILES


def test_the_otlp_and_prometheus_mappings_cover_exactly_the_kinds_that_say_so() -> None:
    assert set(POINTS) == {k.name for k in KINDS.values() if k.otlp}
    assert set(LatestValues.UPDATES) == {k.name for k in KINDS.values() if k.prometheus}


def test_the_kubernetes_topics_are_the_topic_table() -> None:
    docs = [d for d in yaml.safe_load_all((ROOT / "k8s/base/topics.yaml").read_text()) if d]
    by_name = {d["spec"]["topicName"]: d["spec"]["config"]["cleanup.policy"] for d in docs}
    assert by_name == {t.name: "compact" if t.compacted else "delete" for t in TOPICS.values()}


def _forecaster_output() -> tuple[ForecastBank, object]:
    rng = np.random.default_rng(3)
    rows = [
        {
            "ts": float(t),
            "node": f"n{n}",
            "job": f"j{n % 2}",
            "metrics": {"x": float(rng.normal()), "y": 1e9 * (t > 20)},
        }
        for t in range(40)
        for n in range(3)
    ]
    op = ForecastBank(metrics=["x", "y"])
    return op, op.update(samples_to_batch(rows))


def test_a_columnar_kind_gives_the_bytes_and_keys_of_its_records_encoded_one_by_one() -> None:
    columnar = [k for k in KINDS.values() if k.columnar_json is not None]
    assert [k.name for k in columnar] == ["forecast"]
    op, out = _forecaster_output()
    json = encoding_for("json")
    values, keys = encode_decisions(op, out, json)  # type: ignore[arg-type]
    records = op.records(out)  # type: ignore[arg-type]
    assert len(records) > 10
    assert values == [json.encoder("forecast")(r) for r in records]
    assert keys == [str(r[KINDS["forecast"].key]).encode() for r in records]


def test_avro_encodes_decisions_record_by_record() -> None:
    op, out = _forecaster_output()
    records = op.records(out)  # type: ignore[arg-type]
    avro = encoding_for("avro")
    assert not avro.columnar
    values, keys = encode_decisions(op, out, avro)  # type: ignore[arg-type]
    decoded = [avro.decode(v, "forecast") for v in values]
    want = [orjson.loads(encoding_for("json").encoder("forecast")(r)) for r in records]
    assert [(d["node"], d["metric"], d["forecast"]) for d in decoded] == [
        (w["node"], w["metric"], w["forecast"]) for w in want
    ]
    assert keys == [str(r["node"]).encode() for r in records]


def test_each_encoding_is_one_object_whose_name_is_the_pipeline_files() -> None:
    assert CONFIG_ENCODINGS == tuple(ENCODINGS) == ("json", "avro", "confluent-avro")
    json = encoding_for("json")
    assert encoding_for(json) is json
    assert [ENCODINGS[n].needs_registry for n in ENCODINGS] == [False, False, True]
    with pytest.raises(ValueError, match="unknown encoding"):
        encoding_for("xml")


@pytest.mark.parametrize("name", ["json", "avro"])
def test_an_encoding_decodes_what_it_encodes_and_reads_it_back_as_json_lines(name: str) -> None:
    samples = [
        {"ts": 1.0 + i, "node": f"n{i % 3}", "job": "j", "seq": i, "metrics": {"a": i / 7, "b": None}} for i in range(9)
    ]
    enc = encoding_for(name)
    wire = enc.encode_batch(samples_to_batch(samples))
    batch, kept, errors = enc.decode_samples([*wire, b"\x00junk"])
    assert kept == list(range(9)) and [e.index for e in errors] == [9]
    assert batch.ts.tolist() == [s["ts"] for s in samples]
    lines = [orjson.loads(line) for line in enc.json_lines(wire)]
    assert [(r["node"], r["seq"], r["metrics"]) for r in lines] == [
        (s["node"], s["seq"], s["metrics"]) for s in samples
    ]
