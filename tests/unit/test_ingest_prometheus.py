"""The Prometheus exposition text as an operator expects it, checked against ``prometheus_client``'s
parser on real node-exporter 1.5 scrapes (tests/data/ingest, host names made neutral): names keep
``_total`` and units and their labels, round-trip, never collapse silently; info and exporter
self-metrics are left out unless the map says otherwise; a node over the metric limit keeps the
same first metrics every scrape."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from perfsift.formats import Assembler, IngestSettings, decoder_for
from perfsift.formats.prometheus import parse_series_name, series_name, split_scrapes
from perfsift.formats.settings import PROMETHEUS_EXCLUDE, parse_map
from prometheus_client.parser import text_string_to_metric_families

DATA = Path(__file__).parent.parent / "data" / "ingest"
SCRAPES = [(DATA / f"node-exporter-{i}.prom").read_bytes() for i in (1, 2)]
T = (1000.0, 1005.0)  # the two scrapes' times (the messages' timestamps)
SELF = ("go_", "process_", "promhttp_", "node_scrape_collector_")


def decode(scrapes: list[bytes], times: tuple[float, ...] = T, **map_doc: object) -> tuple[dict, Assembler]:
    asm = Assembler(IngestSettings("prometheus_text", parse_map("prometheus_text", map_doc or None), 1.0))
    dec = decoder_for(asm)
    for text, t in zip(scrapes, times, strict=True):
        dec(text, b"node-a", t)
    return {ts: row for _, _, ts, row in asm.due(0.0, everything=True)}, asm


def oracle(text: bytes) -> dict[str, tuple[str, str, float]]:
    """series name -> (family type, sample name, value), by prometheus_client's parser."""
    out = {}
    for fam in text_string_to_metric_families(text.decode()):
        for s in fam.samples:
            out[series_name(s.name, [(k, v) for k, v in s.labels.items()])] = (fam.type, s.name, s.value)
    return out


def test_a_node_exporter_scrape_keeps_every_series_value_name_and_label() -> None:
    rows, asm = decode(SCRAPES)
    assert asm.take_problems() == []
    first, second = oracle(SCRAPES[0]), oracle(SCRAPES[1])
    want: dict[str, float | None] = {}
    for name, (typ, sample, v) in second.items():
        if typ in ("histogram", "summary", "info") or sample.endswith(("_info", "_created")):
            continue
        if sample.startswith(SELF):
            continue
        counter = typ == "counter"
        want[name] = (v - first[name][2]) / (T[1] - T[0]) if counter else float(v)
    got = rows[T[1]]
    assert sorted(got) == sorted(want)  # nothing more, nothing less: info and self-metrics left out
    for name, w in want.items():
        assert got[name] == pytest.approx(w, rel=1e-12, abs=1e-12), name
    # the examples: names keep _total and units, labels are kept and round-trip
    assert "node_cpu_seconds_total{cpu=0,mode=idle}" in got and "node_memory_MemAvailable_bytes" in got
    for name in got:
        metric, labels = parse_series_name(name)
        assert series_name(metric, labels.items()) == name
        assert name in second and second[name][1] == metric
    # the counters' rates are plausible: each CPU spends the same time in all its modes together
    per_cpu = [sum(v for k, v in got.items() if k.startswith(f"node_cpu_seconds_total{{cpu={c},")) for c in (0, 1)]
    assert per_cpu[0] > 0.3 and per_cpu[0] == pytest.approx(per_cpu[1], rel=0.05)


def test_the_map_overrides_the_default_exclusions() -> None:
    rows, _ = decode(SCRAPES[:1], T[:1], include=["node_cpu_seconds_total*"], exclude=[])
    assert rows[T[0]] and all(k.startswith("node_cpu_seconds_total{cpu=") for k in rows[T[0]])
    rows, _ = decode(SCRAPES[:1], T[:1], exclude=[])
    names = set(rows[T[0]])
    assert {"go_goroutines", "process_open_fds", "node_scrape_collector_success{collector=cpu}"} <= names
    assert any(n.startswith("node_os_info{") for n in names)  # info metrics too, labels and all
    assert set(PROMETHEUS_EXCLUDE) == {"*_info", "*_info{*", *(p + "*" for p in SELF)}


def test_x_and_x_total_stay_two_series_and_a_collision_is_reported() -> None:
    text = b"# TYPE x gauge\nx 1.5\n# TYPE x_total counter\nx_total 10\n"
    rows, asm = decode([text, text.replace(b"10", b"40")])
    assert rows[T[1]] == {"x": 1.5, "x_total": 30 / 5}
    assert asm.take_problems() == []
    twice = b'# TYPE y gauge\ny{a="1"} 1\ny{a="1"} 2\n'
    rows, asm = decode([twice], T[:1])
    assert rows[T[0]] == {"y{a=1}": 1.0}  # the first kept
    ((kind, reason),) = asm.take_problems()
    assert kind == "collision" and "y{a=1}" in reason
    # a map that drops the label telling series apart: every cpu's idle would be one name
    rows, asm = decode(SCRAPES[:1], T[:1], include=["node_cpu_seconds_total*"], attributes=["mode"])
    assert set(rows[T[0]]) == {f"node_cpu_seconds_total{{mode={m}}}" for m in
                               ("idle", "iowait", "irq", "nice", "softirq", "steal", "system", "user")}  # fmt: skip
    ((kind, reason),) = asm.take_problems()
    assert kind == "collision" and reason.startswith("8 series")  # the second CPU's 8 modes


def test_a_node_over_the_limit_keeps_the_same_first_metrics_and_counts_the_rest() -> None:
    lines = [f'node_cpu_seconds_total{{cpu="{c}",mode="{m}"}} {c * 10 + k}' for c in range(128)
             for k, m in enumerate(("idle", "user", "system"))]  # fmt: skip
    big = ("# TYPE node_cpu_seconds_total counter\n" + "\n".join(lines) + "\n").encode()
    asm = Assembler(IngestSettings("prometheus_text", parse_map("prometheus_text", {"rates": False}), 1.0))
    asm.max_metrics = 100
    dec = decoder_for(asm)
    kept = []
    for t, text in enumerate([big, big, big.replace(b'cpu="0",', b'cpu="0",x="new",')]):
        dec(text, b"big", float(t))
        batch = asm.to_batch(asm.due(0.0, everything=True))
        assert batch.values.shape == (1, 100) and not np.isnan(batch.values).any()
        kept.append(batch.metrics)
        assert asm.take_dropped() == 384 - 100
    assert kept[0] == kept[1] and list(kept[0]) == sorted(kept[0])
    assert kept[0][0] == "node_cpu_seconds_total{cpu=0,mode=idle}"
    # the third scrape renames cpu 0's series: the 97 others kept stay, the room goes to new ones
    gone = {f"node_cpu_seconds_total{{cpu=0,mode={m}}}" for m in ("idle", "user", "system")}
    assert set(kept[0]) - gone < set(kept[2]) and len(set(kept[2]) - set(kept[0])) == 3


def test_openmetrics_text_with_eof_created_info_and_exemplars() -> None:
    from prometheus_client import CollectorRegistry, Counter, Histogram, Info
    from prometheus_client.openmetrics.exposition import generate_latest

    reg = CollectorRegistry()
    c = Counter("jobs", "j", ["queue"], registry=reg)
    h = Histogram("wait_seconds", "w", buckets=(1.0, 2.0), registry=reg)
    Info("build", "b", registry=reg).info({"version": "1.2"})
    texts = []
    for k in range(2):
        c.labels("a b").inc(5 * (k + 1))
        h.observe(1.5, {"trace_id": "abc"})  # an exemplar after the bucket's value
        texts.append(generate_latest(reg))
    assert texts[0].rstrip().endswith(b"# EOF") and b"# {trace_id" in texts[1]
    rows, asm = decode(texts)
    assert asm.take_problems() == []
    assert rows[T[1]] == {'jobs_total{queue="a b"}': 10 / 5, "wait_seconds_count": 1 / 5, "wait_seconds_sum": 1.5 / 5,
                          "wait_seconds{quantile=0.5}": 1.5, "wait_seconds{quantile=0.9}": 1.0 + 0.9,
                          "wait_seconds{quantile=0.99}": 1.0 + 0.99}  # fmt: skip


def test_concatenated_scrapes_are_split_where_each_begins() -> None:
    five = [SCRAPES[i % 2] for i in range(5)]
    assert split_scrapes(b"".join(five).decode()) == [s.decode() for s in five]
    bare = 'a 1\nb{x="1"} 2\na 3\nb{x="1"} 4\n'  # no comments: a repeated series begins the next
    assert split_scrapes(bare) == ['a 1\nb{x="1"} 2\n', 'a 3\nb{x="1"} 4\n']


def test_malformed_text_is_refused_whole() -> None:
    from perfsift.formats import IngestError

    asm = Assembler(IngestSettings("prometheus_text", parse_map("prometheus_text", None), 1.0))
    dec = decoder_for(asm)
    for bad in (b"x 1\ny{a=1} 2\n", b"x 1\ny one\n", b"\xff\xfe"):
        with pytest.raises(IngestError, match="not the Prometheus text format"):
            dec(bad, b"n", 1.0)
    assert asm.pending == 0 and asm.points == 0
