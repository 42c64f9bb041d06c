"""The ingest decoders and the assembler without a broker: records from the real clients become
the samples they describe, value by value; what cannot be used is reported with a reason."""

from __future__ import annotations

import math

import orjson
import pytest
from perfsift.formats import Assembler, IngestError, IngestSettings, decoder_for
from perfsift.formats.otlp.otlp_in import bucket_quantile
from perfsift.formats.settings import DEFAULT_MAPS, IngestConfigError, parse_map

from tests import ingest_sources as src


def assemble(fmt: str, msgs: list, **map_changes: object) -> tuple[dict, Assembler]:
    m = parse_map(fmt, map_changes or None)
    asm = Assembler(IngestSettings(fmt, m, 1.0))
    decode = decoder_for(asm)
    for value, key, ts_ms in msgs:
        decode(value, key, (ts_ms or 0) / 1000)
    rows = asm.due(0.0, everything=True)
    return {(j, n, ts): metrics for j, n, ts, metrics in rows}, asm


def assert_samples(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for key, metrics in want.items():
        assert set(got[key]) == set(metrics), key
        for name, v in metrics.items():
            g = got[key][name]
            assert (g is None) == (v is None), (key, name, g, v)
            if v is not None:
                assert g == pytest.approx(v, rel=1e-9), (key, name)


@pytest.mark.parametrize("fmt", ["otlp_proto", "otlp_json"])
def test_otlp_sdk_metrics_become_samples_per_host_and_collection(fmt: str) -> None:
    msgs, want = src.otlp_messages({"h0": "jobA", "h1": "jobA", "h2": "jobB"}, fmt)
    got, asm = assemble(fmt, msgs)
    assert_samples(got, want)
    assert asm.take_problems() == []


def test_telegraf_ldms_and_prometheus_lines_become_samples() -> None:
    for fmt, (msgs, want) in {
        "telegraf_json": src.telegraf_messages(["a", "b"]),
        "ldms_json": src.ldms_messages(["n1", "n2", "n3"]),
        "prometheus_text": src.prometheus_messages(["p1", "p2"]),
    }.items():
        got, _ = assemble(fmt, msgs)
        assert_samples(got, want)


def test_mapping_chooses_attributes_job_and_renames() -> None:
    msgs, _ = src.otlp_messages({"h0": "jobA"}, "otlp_proto")
    got, _ = assemble("otlp_proto", msgs, job=None, job_default="batch", attributes=[], rates=False,
                      rename={"mem.used": "mem"}, exclude=["lat.*"])  # fmt: skip
    (k1, m1), (k2, m2) = sorted(got.items(), key=lambda kv: kv[0][2])
    assert k1[:2] == k2[:2] == ("batch", "h0")
    assert m2["lat.count"] == 9 and m2["lat.sum"] == 27 + 39.5  # rates: false -> cumulative as sent
    # attributes: [] -> the series of both directions share one name (the last point wins); no rates
    assert set(m1) == {"net.bytes", "cpu.util", "mem.used", "lat.count", "lat.sum", "lat.p50", "lat.p90", "lat.p99"}
    asm = Assembler(IngestSettings("otlp_proto", parse_map("otlp_proto", {"rename": {"mem.used": "mem"},
                                                                          "exclude": ["lat.*"]}), 1.0))  # fmt: skip
    batch = asm.to_batch([("j", "n", 1.0, {"mem.used": 3.0, "lat.p50": 1.0, "x": None})])
    assert batch.metrics == ("mem", "x") and batch.values[0, 0] == 3.0 and math.isnan(batch.values[0, 1])


def test_unmapped_late_and_malformed_records_are_reported() -> None:
    asm = Assembler(IngestSettings("telegraf_json", DEFAULT_MAPS["telegraf_json"], 0.0))
    decode = decoder_for(asm)
    decode(b'{"fields":{"x":1},"name":"m","tags":{"host":"a"},"timestamp":10}', None, 0)
    assert [s[:3] for s in asm.due(1.0)] == [("default", "a", 10.0)]
    decode(b'{"fields":{"x":2},"name":"m","tags":{"host":"a"},"timestamp":10}', None, 0)  # after its sample left
    decode(b'{"fields":{"x":2},"name":"m","tags":{"rack":"r1"},"timestamp":11}', None, 0)  # no host tag
    problems = dict(asm.take_problems())
    assert "1 points arrived after their sample was emitted" in problems["late"]
    assert "no node tag (host)" in problems["unmapped"]
    with pytest.raises(IngestError, match="not JSON"):
        decode(b"cpu usage_idle=1", None, 0)
    otlp = decoder_for(Assembler(IngestSettings("otlp_proto", DEFAULT_MAPS["otlp_proto"], 0.0)))
    with pytest.raises(IngestError, match="ExportMetricsServiceRequest"):
        otlp(b"\xff\xff\xff not protobuf", None, 0)


def test_rows_leave_after_max_delay_with_older_rows_of_their_node_first() -> None:
    asm = Assembler(IngestSettings("ldms_json", DEFAULT_MAPS["ldms_json"], 5.0))
    decode = decoder_for(asm)
    asm.now = 100.0
    decode(b'{"timestamp": 20, "ProducerName": "a", "x": 2}', None, 0)
    asm.now = 102.0
    decode(b'{"timestamp": 10, "ProducerName": "a", "x": 1}', None, 0)  # older, arrives later
    assert asm.due(104.9) == []
    out = asm.due(105.0)  # the first row's delay ran out: the older one goes first
    assert [(s[2], s[3]["x"]) for s in out] == [(10.0, 1.0), (20.0, 2.0)]
    assert asm.pending == 0


def test_counters_become_rates_as_the_clean_operator_does() -> None:
    asm = Assembler(IngestSettings("otlp_proto", DEFAULT_MAPS["otlp_proto"], 0.0))
    assert asm.rate("j", "n", "c", 10.0, 100.0, 1.0) is None  # first point
    assert asm.rate("j", "n", "c", 12.0, 130.0, 1.0) == 15.0
    assert asm.rate("j", "n", "c", 14.0, 5.0, 1.0) is None  # went down: a reset
    assert asm.rate("j", "n", "c", 16.0, 25.0, 1.0) == 10.0
    assert asm.rate("j", "n", "c", 18.0, 45.0, 17.0) is None  # a new start time: a reset


def test_snapshot_restores_pending_rows_counters_and_watermarks() -> None:
    s = IngestSettings("ldms_json", DEFAULT_MAPS["ldms_json"], 1.0)
    asm = Assembler(s)
    decode = decoder_for(asm)
    decode(b'{"timestamp": 1, "ProducerName": "a", "x": 1}', None, 0)
    asm.due(0.0, everything=True)
    decode(b'{"timestamp": 2, "ProducerName": "a", "x": 2}', None, 0)
    asm.rate("j", "a", "c", 2.0, 7.0, 0.0)
    other = Assembler(s)
    other.restore(asm.snapshot(), now=50.0)
    assert other.due(50.5) == []
    assert [(r[2], r[3]) for r in other.due(51.0)] == [(2.0, {"x": 2.0})]
    assert other.rate("j", "a", "c", 4.0, 11.0, 0.0) == 2.0
    assert other.row("default", "a", 1.0) is None  # still late


def test_bucket_quantile_interpolates_within_the_bucket() -> None:
    assert bucket_quantile(0.5, [1.0, 5.0, 10.0], [0, 0, 4, 0]) == 7.5
    assert bucket_quantile(0.5, [1.0, 5.0], [2, 0, 0]) == 0.5  # first bucket from 0
    assert bucket_quantile(0.99, [1.0, 5.0], [0, 1, 9]) == 5.0  # overflow bucket: its lower bound
    assert bucket_quantile(0.5, [1.0], [0, 0]) is None


def test_a_bad_map_names_the_key() -> None:
    with pytest.raises(IngestConfigError, match="unknown keys"):
        parse_map("otlp_proto", {"nodes": ["x"]})
    with pytest.raises(IngestConfigError, match="quantiles"):
        parse_map("otlp_proto", {"quantiles": [1.5]})


def test_the_poll_at_once_otlp_reader_gives_the_walkers_samples() -> None:
    """otlp_proto's numba wire reader (gauges and sums as arrays) against the generated classes,
    on SDK output with a multi-resource request, histograms (read by the classes), a resource
    without a node and a message that is not protobuf."""
    msgs, want = src.otlp_messages({"h0": "jobA", "h1": "jobA", "h2": "jobB"}, "otlp_proto")
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    nameless = ExportMetricsServiceRequest.FromString(msgs[1][0])
    del nameless.resource_metrics[0].resource.attributes[:]  # no host.name: unmapped
    values = [v for v, _, _ in msgs] + [nameless.SerializeToString(), b"\xff\xff\xff not protobuf"]
    fast = Assembler(IngestSettings("otlp_proto", DEFAULT_MAPS["otlp_proto"], 1.0))
    problems = decoder_for(fast).many(values)  # type: ignore[attr-defined]
    got = {(j, n, ts): m for j, n, ts, m in fast.due(0.0, everything=True)}
    assert_samples(got, want)
    assert sorted((i, kind) for i, kind, _ in problems) == [(len(msgs), "unmapped"), (len(msgs) + 1, "malformed")]
    # the same rows, in the same order of keys, as one message at a time through the classes
    slow = Assembler(IngestSettings("otlp_proto", DEFAULT_MAPS["otlp_proto"], 1.0))
    one = decoder_for(slow)
    for v in values[:-1]:
        one(v, None, 0.0)
    assert {(j, n, ts): m for j, n, ts, m in slow.due(0.0, everything=True)} == got


def test_the_wire_reader_survives_damaged_messages() -> None:
    """Truncated, bit-flipped and random messages: each is a sample source or a dead letter, never
    a crash, and what the reader takes equals what the generated classes take of it."""
    import random

    msgs, _ = src.otlp_messages({"h0": "jobA", "h1": "jobB"}, "otlp_proto")
    rng = random.Random(7)
    damaged = []
    for _ in range(300):
        v = bytearray(rng.choice(msgs)[0])
        kind = rng.randrange(3)
        if kind == 0:
            v = v[: rng.randrange(len(v))]
        elif kind == 1:
            for _ in range(rng.randrange(1, 4)):
                v[rng.randrange(len(v))] = rng.randrange(256)
        else:
            v = bytearray(rng.randbytes(rng.randrange(1, 200)))
        damaged.append(bytes(v))
    for chunk in range(0, len(damaged), 50):
        part = damaged[chunk : chunk + 50]
        fast = Assembler(IngestSettings("otlp_proto", DEFAULT_MAPS["otlp_proto"], 1.0))
        problems = decoder_for(fast).many(part)  # type: ignore[attr-defined]
        assert all(0 <= i < len(part) for i, _, _ in problems)
        slow = Assembler(IngestSettings("otlp_proto", DEFAULT_MAPS["otlp_proto"], 1.0))
        one = decoder_for(slow)
        refused = set()
        for i, raw in enumerate(part):
            try:
                one(raw, None, 0.0)
            except IngestError:
                refused.add(i)
        assert refused == {i for i, kind, _ in problems if kind == "malformed"}
        want = {(j, n, ts): m for j, n, ts, m in slow.due(0.0, everything=True)}
        got = {(j, n, ts): m for j, n, ts, m in fast.due(0.0, everything=True)}
        assert got.keys() == want.keys()
        for key in want:  # NaN (a flipped double) compares unequal to itself: compare as text
            assert sorted(got[key]) == sorted(want[key]), key
            # gauges alike; rates may differ where a flipped bit moved a point in time: the reader
            # takes a series' points of one poll in time order, the classes in arrival order
            gauges = sorted((k, v) for k, v in want[key].items() if k.startswith(("cpu.", "mem.")))
            assert repr(gauges) == repr(sorted((k, got[key][k]) for k, _ in gauges)), key


def test_the_otlp_json_dict_reader_equals_json_format_and_refuses_whole_messages() -> None:
    from perfsift.formats.otlp.otlp_in import otlp_json_reference

    msgs, want = src.otlp_messages({"h0": "jobA", "h1": "jobB"}, "otlp_json")
    fast = Assembler(IngestSettings("otlp_json", DEFAULT_MAPS["otlp_json"], 1.0))
    ref = Assembler(IngestSettings("otlp_json", DEFAULT_MAPS["otlp_json"], 1.0))
    read, reference = decoder_for(fast), otlp_json_reference(ref)
    for v, _, _ in msgs:
        read(v, None, 0.0)
        reference(v, None, 0.0)
    got = {(j, n, ts): m for j, n, ts, m in fast.due(0.0, everything=True)}
    assert got == {(j, n, ts): m for j, n, ts, m in ref.due(0.0, everything=True)}
    assert_samples(got, want)
    host = {"key": "host.name", "value": {"stringValue": "h9"}}
    good = {"name": "g", "gauge": {"dataPoints": [{"timeUnixNano": "5000000000", "asDouble": 1.0}]}}
    bad = {"name": "x", "gauge": {"dataPoints": [{"timeUnixNano": "5000000000", "asDouble": "abc"}]}}
    doc = {"resourceMetrics": [{"resource": {"attributes": [host]}, "scopeMetrics": [{"metrics": [good, bad]}]}]}
    for broken in (b"[1, 2]", b"{", orjson.dumps(doc)):
        with pytest.raises(IngestError, match="not an OTLP ExportMetricsServiceRequest"):
            read(broken, None, 0.0)
    assert fast.pending == 0  # the good gauge of the refused message was not used
