"""The Prometheus exposition text (format 0.0.4, and OpenMetrics 1.0) into an :class:`Assembler`.

One message is one scrape. A series keeps its Prometheus identity in its metric name: the sample
name as exposed (``_total``, ``_count``, units and all), then its labels other than the node and
job labels, sorted by key, as ``name{key=value,...}`` (:func:`series_name`;
:func:`parse_series_name` reads it back)::

    node_cpu_seconds_total{cpu="0",mode="idle"}  ->  node_cpu_seconds_total{cpu=0,mode=idle}

A value is quoted (with Prometheus' escapes) only when it holds one of ``, = { } " \\`` or white
space; an empty value is an absent label, as in Prometheus. Counters (``_total`` of a counter
family, ``_count`` and ``_sum`` of histograms and summaries) become per-second rates; a
histogram's buckets become the chosen quantiles of the observations since the previous scrape,
named as a summary's are (``name{quantile=0.5}``); gauges, untyped series and summary quantiles
are taken as they are; ``_created`` series are skipped.

Two series of one scrape that map onto one name (the same series twice, or labels dropped by
``attributes:``) are never merged silently: the first is kept, and the message goes to the
dead-letter topic as ``collision`` naming both. Info metrics (``*_info``, OpenMetrics ``info``
families) and exporters' self-metrics (``go_*``, ``process_*``, ``promhttp_*``,
``node_scrape_collector_*``) are in the format's default ``exclude`` (:data:`DEFAULT_EXCLUDE`); a
map's own ``exclude:`` (``[]`` for none) replaces it.

Why not ``prometheus_client.parser``: it parses every label of every line on every scrape, 26 ms
for node-exporter's 507 series (about 20,000 series/s on this machine); this reader splits a line
at its last ``}`` and resolves the text before it (``name{labels}``) once per distinct series,
so a scrape costs a dictionary look-up and a ``float()`` per line (bench/bench_ingest.py
measures both). The test suite keeps ``prometheus_client``'s parser as its oracle.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

from perfsift.formats.assemble import Assembler, IngestError
from perfsift.formats.otlp.otlp_in import bucket_quantile
from perfsift.formats.text import Decoder

#: exporters' metrics about themselves
SELF_METRICS = ("go_*", "process_*", "promhttp_*", "node_scrape_collector_*")
#: info metrics: constant 1 with the information in their labels
INFO_METRICS = ("*_info", "*_info{*")
DEFAULT_EXCLUDE = (*INFO_METRICS, *SELF_METRICS)

_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_PLAIN = re.compile(r'[^,={}"\\\s]+')
_NAME_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)=(?:"((?:[^"\\]|\\.)*)"|([^,={}"\\\s]+))(,|$)')
_SUFFIXES = ("_total", "_count", "_sum", "_bucket", "_created", "_gcount", "_gsum", "_info")

# what a series is, resolved once per distinct ``name{labels}`` text
SKIP, GAUGE, COUNTER, BUCKET, GAUGE_BUCKET = range(5)


def _unescape(v: str) -> str:
    if "\\" not in v:
        return v
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "\\": "\\", '"': '"'}.get(m.group(1), "\\" + m.group(1)), v)


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def series_name(metric: str, labels: Iterable[tuple[str, str]]) -> str:
    """``metric{key=value,...}`` with the labels sorted by key (no braces without labels).

    >>> series_name("node_cpu_seconds_total", {"mode": "idle", "cpu": "0"}.items())
    'node_cpu_seconds_total{cpu=0,mode=idle}'
    >>> series_name("node_filesystem_avail_bytes", [("mountpoint", "/srv/a b"), ("fstype", "ext4")])
    'node_filesystem_avail_bytes{fstype=ext4,mountpoint="/srv/a b"}'
    """
    parts = [f"{k}={v}" if _PLAIN.fullmatch(v) else f'{k}="{_escape(v)}"' for k, v in sorted(labels) if v != ""]
    return f"{metric}{{{','.join(parts)}}}" if parts else metric


def parse_series_name(name: str) -> tuple[str, dict[str, str]]:
    """The metric and labels of a :func:`series_name` (ValueError if it is not one).

    >>> parse_series_name('node_filesystem_avail_bytes{fstype=ext4,mountpoint="/srv/a b"}')
    ('node_filesystem_avail_bytes', {'fstype': 'ext4', 'mountpoint': '/srv/a b'})
    """
    brace = name.find("{")
    if brace < 0:
        return name, {}
    if not name.endswith("}"):
        raise ValueError(f"not a series name: {name!r}")
    body, labels, pos = name[brace + 1 : -1], {}, 0
    while pos < len(body):
        m = _NAME_LABEL.match(body, pos)
        if m is None:
            raise ValueError(f"not a series name: {name!r} (at {body[pos:]!r})")
        labels[m.group(1)] = _unescape(m.group(2)) if m.group(2) is not None else m.group(3)
        pos = m.end()
    return name[:brace], labels


def parse_labels(text: str) -> dict[str, str]:
    """The labels between the braces of an exposition line (ValueError if malformed)."""
    out: dict[str, str] = {}
    pos, n = 0, len(text)
    while pos < n and not text[pos:].isspace():
        m = _LABEL.match(text, pos)
        if m is None:
            raise ValueError(f"malformed labels {text[pos:][:80]!r}")
        out[m.group(1)] = _unescape(m.group(2))
        pos = m.end()
    return out


def _label_end(line: str) -> int:
    """Index just past the label set's closing brace (0 without labels), quotes respected."""
    start = line.find("{")
    if start < 0 or " " in line[:start]:
        return 0
    quoted = escaped = False
    for i in range(start + 1, len(line)):
        c = line[i]
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif c == '"':
            quoted = not quoted
        elif c == "}" and not quoted:
            return i + 1
    return len(line)


def _family(sample: str, types: Mapping[str, str]) -> tuple[str, str]:
    """(family name, family type) of a sample name; ``untyped`` when no ``# TYPE`` names it."""
    typ = types.get(sample)
    if typ is not None:
        return sample, typ
    for suffix in _SUFFIXES:
        if sample.endswith(suffix):
            base = sample[: -len(suffix)]
            typ = types.get(base)
            if typ is not None:
                return base, typ
    return sample, "untyped"


def _created_of(sample: str, types: Mapping[str, str]) -> bool:
    """Whether ``sample`` is the ``_created`` time of a counter, histogram or summary written as
    a gauge family of its own (the 0.0.4 text of ``prometheus_client``)."""
    if not sample.endswith("_created"):
        return False
    base = sample[: -len("_created")]
    return types.get(f"{base}_total") == "counter" or types.get(base) in ("counter", "histogram", "summary")


class _Series:
    """What one distinct ``name{labels}`` of the exposition becomes (resolved once)."""

    __slots__ = ("group", "job", "kind", "le", "name", "node")

    def __init__(
        self, kind: int, name: str, node: str | None, job: str | None, le: float = 0.0, group: str = ""
    ) -> None:
        self.kind, self.name, self.node, self.job, self.le, self.group = kind, name, node, job, le, group


def prometheus_decoder(asm: Assembler) -> Decoder:
    """The ``prometheus_text`` decoder writing into ``asm`` (see the module docstring)."""
    m = asm.map
    drop = {*m.node, *([m.job] if m.job else [])}
    series: dict[str, _Series] = {}

    def kept(name: str) -> bool:
        return m.keep(m.rename.get(name, name)) if m.rename else m.keep(name)

    def resolve(key: str, types: Mapping[str, str]) -> _Series:
        brace = key.find("{")
        sample = key if brace < 0 else key[:brace].strip()
        labels = {} if brace < 0 else parse_labels(key[brace + 1 : -1])
        if not sample:
            raise ValueError(f"a sample line without a metric name: {key[:80]!r}")
        node = next((labels[k] for k in m.node if labels.get(k)), None)
        job = labels.get(m.job) if m.job else None
        own = [
            (k, v)
            for k, v in labels.items()
            if k not in drop and (m.attributes is None or k in m.attributes or k in ("quantile", "le"))
        ]
        base, typ = _family(sample, types)
        tail = sample[len(base) :]
        if tail == "_created" or typ == "info" or _created_of(sample, types):
            return _Series(SKIP, "", node, job)
        if typ in ("histogram", "gaugehistogram") and tail == "_bucket":
            le = dict(own).get("le")
            if le is None:
                raise ValueError(f"a histogram bucket without 'le': {key[:80]!r}")
            group = series_name(base, [(k, v) for k, v in own if k != "le"])
            return _Series(BUCKET if typ == "histogram" else GAUGE_BUCKET, "", node, job, float(le), group)
        name = series_name(sample, own)
        if not kept(name):
            return _Series(SKIP, name, node, job)
        counter = (typ == "counter" and tail in ("_total", "")) or (
            typ in ("histogram", "summary") and tail in ("_count", "_sum")
        )
        return _Series(COUNTER if counter and m.rates else GAUGE, name, node, job)

    def parse(text: str) -> list[tuple[_Series, float, float | None]]:
        openmetrics = text.rstrip().endswith("# EOF")
        types: dict[str, str] = {}
        out: list[tuple[_Series, float, float | None]] = []
        for line in text.splitlines():
            if not line or line[0] == "#":
                if line.startswith("# TYPE "):
                    parts = line.split()
                    if len(parts) >= 4:
                        types[parts[2]] = parts[3]
                continue
            if openmetrics and " # " in line:  # an exemplar after the value
                cut = line.find(" # ", _label_end(line))
                line = line if cut < 0 else line[:cut]
            close = line.rfind("}")
            if close >= 0:
                key, rest = line[: close + 1], line[close + 1 :].split()
            else:
                rest = line.split()
                if not rest:
                    continue
                key = rest.pop(0)
            s = series.get(key)
            if s is None:
                s = resolve(key, types)
                if len(series) > 200_000:  # a bound: series churn (pod names) must not grow it forever
                    series.clear()
                series[key] = s
            if not rest or len(rest) > 2:
                raise ValueError(f"expected a value and an optional timestamp: {line[:120]!r}")
            ts = None
            if len(rest) == 2:
                ts = float(rest[1]) if openmetrics else int(rest[1]) / 1000.0
            out.append((s, float(rest[0]), ts))
        return out

    def decode(value: bytes, key: bytes | None = None, when: float = 0.0) -> None:
        try:
            points = parse(value.decode())
        except (ValueError, UnicodeDecodeError) as exc:
            raise IngestError(f"not the Prometheus text format: {str(exc)[:300]}") from None
        fallback = key.decode(errors="replace") if key else None
        buckets: dict[tuple[str, str, float, str], tuple[int, list[float], list[float]]] = {}
        written: dict[tuple[int, str], None] = {}
        collisions: list[str] = []
        for s, v, ts in points:
            if s.kind == SKIP:
                continue
            node = s.node or fallback
            if node is None:
                asm.unmapped_point(1, f"no node label ({', '.join(m.node)}) and no message key")
                continue
            job = s.job or m.job_default
            t = when if ts is None else ts
            asm.points += 1
            row = asm.row(job, node, t)
            if row is None:
                continue
            if s.kind >= BUCKET:
                b = buckets.setdefault((job, node, t, s.group), (s.kind, [], []))
                b[1].append(s.le)
                b[2].append(v)
                continue
            seen = (id(row), s.name)
            if seen in written:
                collisions.append(s.name)
                continue
            written[seen] = None
            if s.kind == COUNTER:
                row[s.name] = asm.rate(job, node, s.name, t, v, 0.0)
            elif math.isfinite(v):
                row[s.name] = v
        for (job, node, t, group), (kind, bounds, cum) in buckets.items():
            row = asm.row(job, node, t)
            if row is None or not m.quantiles:
                continue
            _quantiles(asm, row, job, node, t, group, kind, bounds, cum)
        if collisions:
            asm.collision(collisions)

    return decode


def _quantiles(
    asm: Assembler,
    row: dict[str, float | None],
    job: str,
    node: str,
    t: float,
    group: str,
    kind: int,
    bounds: list[float],
    cum: list[float],
) -> None:
    """The map's quantiles of one histogram's buckets (of the interval since the previous scrape
    for a histogram; of the current counts for a gauge histogram)."""
    m = asm.map
    order = sorted(range(len(bounds)), key=bounds.__getitem__)
    deltas = [int(cum[i]) - (int(cum[order[j - 1]]) if j else 0) for j, i in enumerate(order)]
    finite = [bounds[i] for i in order if math.isfinite(bounds[i])]
    window: list[int] | None = deltas
    if kind == BUCKET and m.rates:
        window = asm.window(job, node, f"{group}#buckets", t, deltas, 0.0)
    metric, labels = parse_series_name(group)
    for q in m.quantiles:
        name = series_name(metric, [*labels.items(), ("quantile", f"{q:g}")])
        if m.keep(m.rename.get(name, name)):
            row[name] = None if window is None else bucket_quantile(q, finite, window)


def split_scrapes(text: str) -> list[str]:
    """Concatenated scrapes (``curl ... >> file`` at each interval) cut where one begins again:
    after ``# EOF``, at the comment block holding a ``# HELP`` or ``# TYPE`` line the current
    scrape already had, or at a series (``name{labels}``) the current scrape already had.

    >>> split_scrapes("# TYPE a gauge\\na 1\\n# TYPE a gauge\\na 2\\n")
    ['# TYPE a gauge\\na 1\\n', '# TYPE a gauge\\na 2\\n']
    """
    out: list[str] = []
    current: list[str] = []
    headers: set[tuple[str, str]] = set()
    keys: set[str] = set()
    block = 0  # where the comment block the current line belongs to began

    def cut(at: int) -> None:
        nonlocal current, block
        out.append("".join(current[:at]))
        current = current[at:]
        headers.clear()
        keys.clear()
        block = 0

    for line in text.splitlines(keepends=True):
        s = line.rstrip("\n")
        if not s.strip():
            continue
        if s[0] == "#":
            if not current or current[-1][0] != "#":
                block = len(current)
            if s.startswith("# EOF"):
                current.append(line)
                cut(len(current))
                continue
            parts = s.split(None, 3)
            if len(parts) > 2 and parts[1] in ("HELP", "TYPE"):
                if (parts[1], parts[2]) in headers:
                    cut(block)
                headers.add((parts[1], parts[2]))
            current.append(line)
            continue
        close = s.rfind("}")
        k = s[: close + 1] if close >= 0 else s.split(None, 1)[0]
        if k in keys:
            cut(len(current))
        keys.add(k)
        current.append(line)
    if current:
        out.append("".join(current))
    return [c for c in out if c.strip()]
