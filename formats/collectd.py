"""collectd's value lists (``write_kafka``/``write_http`` with ``Format "JSON"``) and the Graphite
plaintext protocol (collectd's ``write_graphite``, or ``write_kafka`` with ``Format "Graphite"``)
into an :class:`Assembler`.

``collectd_json``: a message is a JSON list of value lists, ``{"values", "dstypes", "dsnames",
"time", "interval", "host", "plugin", "plugin_instance", "type", "type_instance"}``. Node: the
``host``. A value's name is collectd's identifier without the host,
``plugin[-plugin_instance]/type[-type_instance]``, with ``.<dsname>`` when the type has more than
one data source (``load/load.shortterm``, ``interface-eth0/if_octets.rx``). ``gauge`` values are
taken as they are; ``derive`` and ``counter`` become per-second rates from the previous value
(a ``derive`` may go down: a negative rate; a ``counter`` that goes down was reset or wrapped:
missing), ``absolute`` (a count since the last read) is divided by the ``interval``.

``graphite``: a message holds lines ``path value timestamp``; collectd writes the path as
``<Prefix><host><Postfix>.<plugin>[-<instance>].<type>[-<instance>][.<dsname>]`` with dots in the
host replaced by its ``EscapeCharacter`` (``_``) and rates already computed (``StoreRates true``).
The map's ``prefix`` and ``postfix`` (default none) are stripped; the node is then the path's
first component, and the metric name the rest (``cpu-0.cpu-user``). Telegraf's Graphite
serializer (template ``host.tags.measurement.field``) puts the host first too.
"""

from __future__ import annotations

import math
from typing import Any

import orjson
from perfsift.formats.assemble import Assembler, IngestError
from perfsift.formats.text import Decoder, seconds


def collectd_name(vl: dict[str, Any], ds: str, many: bool) -> str:
    """collectd's identifier of one data source of a value list, without the host.

    >>> collectd_name({"plugin": "cpu", "plugin_instance": "0", "type": "cpu", "type_instance": "idle"},
    ...               "value", False)
    'cpu-0/cpu-idle'
    >>> collectd_name({"plugin": "load", "plugin_instance": "", "type": "load", "type_instance": ""},
    ...               "shortterm", True)
    'load/load.shortterm'
    """
    p, pi, t, ti = vl["plugin"], vl.get("plugin_instance") or "", vl["type"], vl.get("type_instance") or ""
    name = f"{p}-{pi}/" if pi else f"{p}/"
    name += f"{t}-{ti}" if ti else t
    return f"{name}.{ds}" if many else name


def collectd_decoder(asm: Assembler) -> Decoder:
    """The ``collectd_json`` decoder writing into ``asm`` (see the module docstring)."""
    m = asm.map

    def decode(value: bytes, key: bytes | None = None, when: float = 0.0) -> None:
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise IngestError(f"not JSON: {exc}") from None
        lists = doc if type(doc) is list else [doc]
        checked = []
        for vl in lists:
            try:
                vals, types, names = vl["values"], vl["dstypes"], vl["dsnames"]
                host, ts = next((vl[k] for k in m.node if vl.get(k)), None), float(vl["time"])
                ok = type(vals) is list and len(vals) == len(types) == len(names) and type(vl["plugin"]) is str
            except (KeyError, TypeError, ValueError):
                ok = False
            if not ok:
                raise IngestError(
                    "a collectd value list needs 'values', 'dstypes' and 'dsnames' (lists of one "
                    "length), 'time', 'host', 'plugin' and 'type'"
                )
            checked.append((vl, vals, types, names, host, ts))
        for vl, vals, types, names, host, ts in checked:
            if not host:
                asm.unmapped_point(len(vals), f"no host ({', '.join(m.node)}) in a value list of {vl['plugin']!r}")
                continue
            job = str(vl[m.job]) if m.job and vl.get(m.job) else m.job_default
            asm.points += len(vals)
            row = asm.row(job, str(host), ts)
            if row is None:
                continue
            many = len(vals) > 1
            for v, dstype, ds in zip(vals, types, names, strict=True):
                if type(v) is not float and type(v) is not int:
                    continue  # null: collectd's NaN
                name = collectd_name(vl, ds, many)
                if dstype == "gauge":
                    if math.isfinite(v):
                        row[name] = float(v)
                elif dstype in ("derive", "counter"):
                    if m.rates:
                        row[name] = asm.rate(job, str(host), name, ts, float(v), 0.0, signed=dstype == "derive")
                    else:
                        row[name] = float(v)
                elif dstype == "absolute":
                    interval = float(vl.get("interval") or 0)
                    row[name] = float(v) / interval if m.rates and interval > 0 else float(v)

    return decode


def graphite_decoder(asm: Assembler) -> Decoder:
    """The ``graphite`` decoder writing into ``asm`` (see the module docstring)."""
    m = asm.map
    prefix, postfix = m.prefix, m.postfix

    def split(path: str) -> tuple[str, str] | None:
        if prefix:
            if not path.startswith(prefix):
                return None
            path = path[len(prefix) :]
        if postfix:
            i = path.find(postfix + ".")
            if i <= 0:
                return None
            return path[:i], path[i + len(postfix) + 1 :]
        host, dot, rest = path.partition(".")
        return (host, rest) if dot and host and rest else None

    def decode(value: bytes, key: bytes | None = None, when: float = 0.0) -> None:
        points = []
        try:
            for line in value.decode().splitlines():
                parts = line.split()
                if not parts:
                    continue
                if len(parts) != 3:
                    raise ValueError(f"expected 'path value timestamp': {line[:120]!r}")
                points.append((parts[0], float(parts[1]), seconds(float(parts[2]))))
        except (ValueError, UnicodeDecodeError) as exc:
            raise IngestError(f"not the Graphite plaintext protocol: {str(exc)[:300]}") from None
        for path, v, ts in points:
            where = split(path)
            if where is None:
                asm.unmapped_point(1, f"{path[:80]!r} is not <prefix {prefix!r}><host><postfix {postfix!r}>.<metric>")
                continue
            asm.points += 1
            row = asm.row(m.job_default, where[0], ts)
            if row is not None and math.isfinite(v):
                row[where[1]] = v

    return decode
