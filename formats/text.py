"""Telegraf JSON, LDMS JSON rows and the Prometheus exposition format into an :class:`Assembler`.

- ``telegraf_json``: Telegraf's JSON serializer, ``{"fields", "name", "tags", "timestamp"}`` per
  message, or its batch format ``{"metrics": [...]}``. Node: the ``host`` tag; metric name
  ``<name>.<tag values>.<field>`` (tags other than node and job, in key order, or those listed);
  numeric fields only (booleans and strings are skipped). The timestamp's unit (s, ms, us, ns:
  ``json_timestamp_units``) is told from its size.
- ``ldms_json``: one row of an LDMS decomposition per message, as ``store_kafka`` and
  ``store_avro_kafka`` (``encoding=JSON``) write it: ``{"timestamp": "sec.usec" or a number,
  "ProducerName": ..., "component_id": ..., "job_id": ..., <metric>: value, ...}``. Node:
  ``ProducerName``; array metrics become ``<name>.<index>``; the row's identity columns are not
  metrics.
- ``prometheus_text``: one scrape per message, read by ``prometheus_client``'s parser. Node: the
  ``instance`` (or ``host``) label, else the message key; time: the sample's own timestamp, else
  the message's. Counters (``_total``) become rates, histograms count/sum rates and quantiles of
  the buckets since the previous scrape, summaries count/sum rates and their quantiles.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import orjson
from perfsift.formats.assemble import Assembler, IngestError
from perfsift.formats.otlp.otlp_in import bucket_quantile, quantile_label

#: identity columns of an LDMS row (never metrics)
LDMS_META = frozenset({"timestamp", "ProducerName", "producer", "instance", "component_id", "job_id", "app_id",
                       "uid", "gid", "perm", "schema"})  # fmt: skip
Decoder = Callable[[bytes, "bytes | None", float], None]


def seconds(ts: float) -> float:
    """A Unix time in s, ms, us or ns, in seconds (told apart by size)."""
    a = abs(ts)
    if a >= 1e17:
        return ts * 1e-9
    if a >= 1e14:
        return ts * 1e-6
    if a >= 1e11:
        return ts * 1e-3
    return ts


def _number(v: object) -> float | None:
    t = type(v)
    if t is float or t is int:
        f = float(v)  # type: ignore[arg-type]
        return f if math.isfinite(f) else None
    return None


def _suffix(tags: dict[str, Any], skip: set[str], select: tuple[str, ...] | None) -> list[str]:
    keys = sorted(k for k in tags if k not in skip) if select is None else [k for k in select if k in tags]
    return [str(tags[k]) for k in keys]


def telegraf_decoder(asm: Assembler) -> Decoder:
    m = asm.map
    skip = {*m.node, *([m.job] if m.job else [])}

    def one(obj: Any) -> None:
        if type(obj) is not dict:
            raise IngestError(f"a Telegraf metric is a JSON object, got {type(obj).__name__}")
        name, tags, fields, ts = obj.get("name"), obj.get("tags") or {}, obj.get("fields"), obj.get("timestamp")
        if type(name) is not str or type(fields) is not dict or type(tags) is not dict or _number(ts) is None:
            raise IngestError("a Telegraf metric needs 'name', 'fields' (object), 'tags' (object) and 'timestamp'")
        node = next((str(tags[k]) for k in m.node if k in tags), None)
        if node is None:
            asm.unmapped_point(len(fields), f"no node tag ({', '.join(m.node)}) on {name!r}")
            return
        job = str(tags[m.job]) if m.job and m.job in tags else m.job_default
        row = asm.row(job, node, seconds(ts))  # type: ignore[arg-type]
        asm.points += len(fields)
        if row is None:
            return
        prefix = ".".join([name, *_suffix(tags, skip, m.attributes)])
        for f, v in fields.items():
            x = _number(v)
            if x is not None:
                row[f"{prefix}.{f}"] = x

    def decode(value: bytes, key: bytes | None = None, when: float = 0.0) -> None:
        try:
            obj = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise IngestError(f"not JSON: {exc}") from None
        if type(obj) is dict and "metrics" in obj and "name" not in obj:
            for item in obj["metrics"] if type(obj["metrics"]) is list else [None]:
                one(item)
        else:
            one(obj)

    return decode


def ldms_decoder(asm: Assembler) -> Decoder:
    m = asm.map
    skip = LDMS_META | set(m.node) | ({m.job} if m.job else set())

    def decode(value: bytes, key: bytes | None = None, when: float = 0.0) -> None:
        try:
            row_in = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise IngestError(f"not JSON: {exc}") from None
        if type(row_in) is not dict:
            raise IngestError(f"an LDMS row is a JSON object, got {type(row_in).__name__}")
        try:
            ts = float(row_in["timestamp"])
        except (KeyError, TypeError, ValueError):
            raise IngestError("an LDMS row needs 'timestamp' (seconds, a number or \"sec.usec\")") from None
        node = next((str(row_in[k]) for k in m.node if row_in.get(k) not in (None, "")), None)
        if node is None:
            asm.unmapped_point(len(row_in), f"no node column ({', '.join(m.node)})")
            return
        job = str(row_in[m.job]) if m.job and row_in.get(m.job) is not None else m.job_default
        row = asm.row(job, node, ts)
        asm.points += len(row_in)
        if row is None:
            return
        for name, v in row_in.items():
            if name in skip:
                continue
            if type(v) is list:
                for i, item in enumerate(v):
                    x = _number(item)
                    if x is not None:
                        row[f"{name}.{i}"] = x
            else:
                x = _number(v)
                if x is not None:
                    row[name] = x

    return decode


def prometheus_decoder(asm: Assembler) -> Decoder:
    from prometheus_client.parser import text_string_to_metric_families

    m = asm.map
    skip = {*m.node, *([m.job] if m.job else []), "le", "quantile"}

    def decode(value: bytes, key: bytes | None = None, when: float = 0.0) -> None:
        try:
            families = list(text_string_to_metric_families(value.decode()))
        except (ValueError, UnicodeDecodeError, IndexError, TypeError) as exc:
            raise IngestError(f"not the Prometheus text format: {str(exc)[:300]}") from None
        fallback = key.decode(errors="replace") if key else None
        buckets: dict[tuple[str, str, str, float, str], tuple[list[float], list[float]]] = {}
        for fam in families:
            for s in fam.samples:
                labels = s.labels
                node = next((labels[k] for k in m.node if k in labels), fallback)
                if node is None:
                    asm.unmapped_point(1, f"no node label ({', '.join(m.node)}) and no message key")
                    continue
                job = labels[m.job] if m.job and m.job in labels else m.job_default
                ts = float(s.timestamp) if s.timestamp is not None else when
                asm.points += 1
                row = asm.row(job, node, ts)
                if row is None:
                    continue
                name = ".".join([fam.name, *_suffix(labels, skip, m.attributes)])
                sname, typ, v = s.name, fam.type, float(s.value)
                if sname.endswith("_created"):
                    continue
                if typ in ("histogram", "gaugehistogram") and sname.endswith("_bucket"):
                    bounds, counts = buckets.setdefault((job, node, name, ts, typ), ([], []))
                    bounds.append(float(labels["le"]))
                    counts.append(v)
                    continue
                if typ == "summary" and "quantile" in labels:
                    row[f"{name}.{quantile_label(float(labels['quantile']))}"] = v
                    continue
                tail = sname[len(fam.name) :]  # "", "_total", "_count", "_sum"
                metric = f"{name}.{tail[1:]}" if tail in ("_count", "_sum") else name
                counter = typ == "counter" or (typ in ("histogram", "summary") and tail in ("_count", "_sum"))
                if counter and m.rates:
                    row[metric] = asm.rate(job, node, metric, ts, v, 0.0)
                elif math.isfinite(v):
                    row[metric] = v
        for (job, node, name, ts, typ), (bounds, cum) in buckets.items():
            row = asm.row(job, node, ts)
            if row is None or not m.quantiles:
                continue
            order = sorted(range(len(bounds)), key=bounds.__getitem__)
            deltas = [int(cum[i]) - (int(cum[order[j - 1]]) if j else 0) for j, i in enumerate(order)]
            finite = [bounds[i] for i in order if math.isfinite(bounds[i])]
            window: list[int] | None = deltas
            if m.rates and typ == "histogram":
                window = asm.window(job, node, f"{name}#buckets", ts, deltas, 0.0)
            for q in m.quantiles:
                row[f"{name}.{quantile_label(q)}"] = None if window is None else bucket_quantile(q, finite, window)

    return decode
