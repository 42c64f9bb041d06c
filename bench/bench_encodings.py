"""Encoding and decoding cost per record format, on one core, no broker: samples of 12 metrics as a
stage writes them (``encode_batch``: batch -> records -> bytes) and reads them (``decode_samples``) in JSON, Avro
single-object and Schema Registry Avro (``confluent-avro``), next to confluent-kafka's own
``AvroSerializer`` / ``AvroDeserializer`` on the same records (the baseline for confluent-avro:
perfsift must be no slower), and the OTLP form of perf.reduced (``otlp_out``).

    python -m bench.bench_encodings      (from the repository root)
"""

from __future__ import annotations

import functools
import statistics
import time
import uuid
from collections.abc import Callable
from importlib import resources
from typing import Any

import numpy as np
import orjson
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from perfsift.formats.otlp.otlp_out import to_requests
from perfsift.schemas import decode_samples, encode_batch, encode_records, samples_to_batch
from perfsift.schemas.registry import use_registry

from bench.common import write_result

N, METRICS, NODES, REPEATS = 20_000, 12, 500, 5


def samples() -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    values = rng.normal(100, 10, size=(N, METRICS)).round(3)
    return [
        {"ts": 1.7e9 + i // NODES, "node": f"n{i % NODES}", "job": "j", "seq": i // NODES,
         "metrics": {f"m{j}": float(values[i, j]) for j in range(METRICS)}}
        for i in range(N)
    ]  # fmt: skip


def rate(work: Callable[[], object]) -> float:
    """Records per second, the median of REPEATS runs."""
    times = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        work()
        times.append(time.perf_counter() - t)
    return N / statistics.median(times)


def main() -> None:
    recs = samples()
    batch = samples_to_batch(recs)
    registry = use_registry({"url": f"mock://{uuid.uuid4().hex}"})
    registry.register("perf.raw-value", "sample")
    ctx = SerializationContext("perf.raw", MessageField.VALUE)
    ser = AvroSerializer(registry.client, resources.files("perfsift.schemas").joinpath("sample.avsc").read_text())
    deser = AvroDeserializer(registry.client)
    encoded = {enc: encode_batch(batch, enc) for enc in ("json", "avro", "confluent-avro")}
    assert encoded["confluent-avro"] == [ser(r, ctx) for r in recs]  # the same bytes as the baseline
    reduced = [{**r, "selection_version": 1, "full": False} for r in recs]
    reduced_json = [orjson.dumps(r) for r in reduced]

    r: dict[str, float] = {}
    for enc in ("json", "avro", "confluent-avro"):
        r[f"encode {enc}"] = rate(functools.partial(encode_batch, batch, enc))
        r[f"decode {enc}"] = rate(functools.partial(decode_samples, encoded[enc], codec=enc))
    r["encode confluent-avro, records (encode_records)"] = rate(lambda: encode_records(recs, "confluent-avro"))
    r["encode AvroSerializer, records"] = rate(lambda: [ser(x, ctx) for x in recs])
    r["decode AvroDeserializer"] = rate(lambda: [deser(v, ctx) for v in encoded["confluent-avro"]])
    r["otlp_out (decode + build)"] = rate(lambda: to_requests("reduced", (orjson.loads(v) for v in reduced_json)))
    otlp_bytes = sum(map(len, to_requests("reduced", reduced)[0])) / N

    rows = [{"measure": f"{k}, samples/s", "value": f"{v:,.0f}", "target": "-"} for k, v in r.items()]
    ours, theirs = r["encode confluent-avro, records (encode_records)"], r["encode AvroSerializer, records"]
    rows[6]["target"] = f"≥ AvroSerializer ({ours / theirs:.2f}×)"
    rows[5]["target"] = f"≥ AvroDeserializer ({r['decode confluent-avro'] / r['decode AvroDeserializer']:.2f}×)"
    sizes = {enc: sum(map(len, v)) / N for enc, v in encoded.items()}
    size_text = " / ".join(f"{b:.0f}" for b in (*sizes.values(), otlp_bytes))
    rows.append({"measure": "bytes per sample: json / avro / confluent-avro / OTLP (reduced)", "value": size_text,
                 "target": "-"})  # fmt: skip
    notes = (
        f"{N:,} samples of {METRICS} metrics from {NODES} nodes, one core, median of {REPEATS} runs. "
        "confluent-avro writes byte for byte what AvroSerializer writes (checked); both use fastavro's "
        "schemaless writer, perfsift without the serializer's per-record work. encode/decode rows are a "
        "stage's path (column batch to bytes and back: the batch-to-records step included); the records "
        "rows compare like with like (dicts to bytes). OTLP: one ExportMetricsServiceRequest per node "
        "and batch, JSON decoding of the perf.reduced records included."
    )
    path = write_result("encodings", {"benchmark": "Encodings: JSON, Avro, Schema Registry Avro, OTLP out",
                                      "script": "bench_encodings", "rows": rows, "notes": notes})  # fmt: skip
    for row in rows:
        print(f"{row['measure']:70s} {row['value']:>14s}  {row['target']}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
