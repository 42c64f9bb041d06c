"""Telegraf JSON and LDMS JSON rows into an :class:`Assembler`.

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

The Prometheus formats are in :mod:`.prometheus` and :mod:`.remote_write`, InfluxDB line protocol
in :mod:`.influx`, collectd's in :mod:`.collectd`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import orjson
from perfsift.formats.assemble import Assembler, IngestError

#: identity columns of an LDMS row (never metrics)
LDMS_META = frozenset(
    {
        "timestamp",
        "ProducerName",
        "producer",
        "instance",
        "component_id",
        "job_id",
        "app_id",
        "uid",
        "gid",
        "perm",
        "schema",
    }
)
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
