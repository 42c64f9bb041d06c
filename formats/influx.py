"""The InfluxDB line protocol (Telegraf's default ``data_format = "influx"``) into an :class:`Assembler`.

One message holds one or more lines ``measurement[,tag=value...] field=value[,...] [timestamp]``.
Names are those of ``telegraf_json`` for the same metric (``<measurement>.<tag values>.<field>``,
tags other than the node and job tags, in key order), so the two Telegraf serializers give the
same samples. Escapes follow the protocol: ``\\,`` and ``\\ `` in a measurement, ``\\,``, ``\\=``
and ``\\ `` in tag keys, tag values and field keys; string fields in double quotes (skipped, as
are booleans: they are not metrics). Numbers: floats, integers ``12i`` and unsigned ``12u``. The
timestamp is in nanoseconds by default; a precision (s, ms, us) is told from its size, as for
Telegraf's JSON; a line without one takes the message's time.
"""

from __future__ import annotations

import math

from perfsift.formats.assemble import Assembler, IngestError
from perfsift.formats.text import Decoder, seconds

Line = tuple[str, dict[str, str], dict[str, float], float | None]


def _split(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` where it is neither escaped nor inside a double-quoted string."""
    out, cur, i, quoted = [], [], 0, False
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            cur.append(text[i : i + 2])
            i += 2
            continue
        if c == '"':
            quoted = not quoted
        elif c == sep and not quoted:
            out.append("".join(cur))
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    if quoted:
        raise ValueError("an unterminated string field")
    out.append("".join(cur))
    return out


def _unescape(s: str) -> str:
    return s.replace("\\,", ",").replace("\\=", "=").replace("\\ ", " ") if "\\" in s else s


def _value(text: str) -> float | None:
    """A field's number (None for strings and booleans, ValueError for a malformed value)."""
    last = text[-1:]
    if last == '"':
        return None
    if last in ("i", "u"):
        return float(int(text[:-1]))
    if text in ("t", "T", "true", "True", "TRUE", "f", "F", "false", "False", "FALSE"):
        return None
    v = float(text)
    return v if math.isfinite(v) else None


def parse_line(line: str) -> Line:
    """(measurement, tags, numeric fields, timestamp in seconds or None) of one line.

    >>> parse_line('cpu,cpu=cpu-total,host=n1 usage_idle=97.5,usage_user=1.25 1700000000000000000')
    ('cpu', {'cpu': 'cpu-total', 'host': 'n1'}, {'usage_idle': 97.5, 'usage_user': 1.25}, 1700000000.0)
    >>> parse_line(r'disk\\ io,path=/a\\ b,host=n1 reads=12i,model="x y",ok=true')
    ('disk io', {'path': '/a b', 'host': 'n1'}, {'reads': 12.0}, None)
    """
    parts = [p for p in _split(line, " ") if p != ""] if "\\" in line or '"' in line else line.split()
    if len(parts) not in (2, 3):
        raise ValueError(f"expected 'measurement[,tags] fields [timestamp]': {line[:120]!r}")
    head = _split(parts[0], ",") if "\\" in parts[0] else parts[0].split(",")
    tags: dict[str, str] = {}
    for t in head[1:]:
        k, eq, v = _kv(t)
        if not eq or not k:
            raise ValueError(f"a tag without '=': {t[:80]!r}")
        tags[_unescape(k)] = _unescape(v)
    fields: dict[str, float] = {}
    for f in _split(parts[1], ",") if ("\\" in parts[1] or '"' in parts[1]) else parts[1].split(","):
        k, eq, v = _kv(f)
        if not eq or not k or not v:
            raise ValueError(f"a field without a value: {f[:80]!r}")
        x = _value(v)
        if x is not None:
            fields[_unescape(k)] = x
    ts = seconds(int(parts[2])) if len(parts) == 3 else None
    measurement = head[0].replace("\\,", ",").replace("\\ ", " ") if "\\" in head[0] else head[0]
    if not measurement:
        raise ValueError(f"a line without a measurement: {line[:120]!r}")
    return measurement, tags, fields, ts


def _kv(text: str) -> tuple[str, str, str]:
    """``key=value`` split at the first unescaped ``=``."""
    i = 0
    while True:
        i = text.find("=", i)
        if i < 0:
            return text, "", ""
        if i == 0 or text[i - 1] != "\\":
            return text[:i], "=", text[i + 1 :]
        i += 1


def influx_decoder(asm: Assembler) -> Decoder:
    """The ``influx_line`` decoder writing into ``asm`` (see the module docstring)."""
    m = asm.map
    skip = {*m.node, *([m.job] if m.job else [])}

    def decode(value: bytes, key: bytes | None = None, when: float = 0.0) -> None:
        try:
            lines = [parse_line(ln) for ln in value.decode().splitlines() if ln.strip() and ln.lstrip()[0] != "#"]
        except (ValueError, UnicodeDecodeError) as exc:
            raise IngestError(f"not the InfluxDB line protocol: {str(exc)[:300]}") from None
        for name, tags, fields, ts in lines:
            node = next((tags[k] for k in m.node if tags.get(k)), None)
            if node is None:
                asm.unmapped_point(len(fields), f"no node tag ({', '.join(m.node)}) on {name!r}")
                continue
            job = tags[m.job] if m.job and m.job in tags else m.job_default
            asm.points += len(fields)
            row = asm.row(job, node, when if ts is None else ts)
            if row is None:
                continue
            keys = (
                sorted(k for k in tags if k not in skip)
                if m.attributes is None
                else [k for k in m.attributes if k in tags]
            )
            prefix = ".".join([name, *(tags[k] for k in keys)])
            for f, x in fields.items():
                row[f"{prefix}.{f}"] = x

    return decode
