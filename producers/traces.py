"""Trace files of samples: SDDF (ASCII or binary), wide CSV and JSONL, read and written in constant
memory, the format detected from the content.

- **SDDF** (``producers/sddf.py``): by default every record type with a timestamp field becomes
  samples. The node comes from a node/processor field (``node``, ``processor``, ``proc``, ``pe``,
  ``rank``, ``host``; an int ``5`` becomes node ``"5"``), or is ``app`` when the record has none;
  the metrics are its other numeric fields, scalars by field name, vectors by the names of the
  latest ``"metric names"`` record (a record whose one field is a ``char[][]`` list) when the
  lengths match, else ``field[i]``. :class:`SddfMapping` names the fields otherwise. Writing uses
  that "metric names" + "node sample" layout, so archived reduced streams read back unchanged.
- **CSV**: a header ``ts,node[,job][,seq],<metric>...`` and one sample per row; an empty cell is a
  missing value.
- **JSONL**: one sample object per line (``producers/jsonl.py``).

``.gz`` files are read and written compressed (CSV, JSONL).
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import numpy as np
import orjson
from perfsift.producers.jsonl import iter_jsonl_samples
from perfsift.producers.sddf import (
    ASCII_MAGIC,
    BINARY_MAGIC,
    Attributes,
    Chars,
    Descriptor,
    Field,
    Record,
    SddfWriter,
    read_sddf,
)
from perfsift.schemas import RecordError, validate_sample

FORMATS = ("sddf", "csv", "jsonl")
TIME_FIELDS = ("timestamp", "ts", "time", "seconds", "clock")
NODE_FIELDS = ("node", "processor", "proc", "pe", "rank", "host", "hostname")

OnError = Callable[[RecordError], None] | None


def _open_read(path: Path) -> IO[bytes]:
    fh = open(path, "rb")  # noqa: SIM115  (returned to the caller, who closes it)
    if fh.read(2) == b"\x1f\x8b":
        fh.close()
        return cast(IO[bytes], gzip.open(path, "rb"))
    fh.seek(0)
    return fh


def detect_format(path: str | Path) -> str:
    """``sddf``, ``csv`` or ``jsonl`` from the first bytes (gzip is looked through)."""
    p = Path(path)
    with _open_read(p) as fh:
        head = fh.read(4096)
    if head.startswith((ASCII_MAGIC, BINARY_MAGIC)):
        return "sddf"
    text = head.lstrip()
    if text.startswith(b"{"):
        return "jsonl"
    first = text.split(b"\n", 1)[0].decode("utf-8", "replace").strip().lower()
    cols = [c.strip() for c in first.split(",")]
    if len(cols) >= 2 and cols[0] == "ts" and cols[1] == "node":
        return "csv"
    if text.startswith((b"/*", b"#")) or (text.startswith(b'"') and b";;" in text):
        return "sddf"  # pre-2.0 SDDF has no header
    raise RecordError(
        "unknown trace format (expected SDDF, a CSV with a 'ts,node,...' header, or JSONL samples); "
        "name it with --format",
        str(p),
    )


def iter_samples(
    path: str | Path,
    fmt: str | None = None,
    on_error: OnError = None,
    mapping: SddfMapping | None = None,
) -> Iterator[dict[str, Any]]:
    """The samples of a trace file, validated; ``fmt`` None = detect. Bad records raise
    :class:`RecordError` naming the place, or go to ``on_error`` and are skipped."""
    p = Path(path)
    fmt = fmt or detect_format(p)
    if fmt == "jsonl":
        yield from iter_jsonl_samples(p, on_error)
    elif fmt == "csv":
        yield from iter_csv_samples(p, on_error)
    elif fmt == "sddf":
        yield from iter_sddf_samples(p, mapping or SddfMapping(), on_error)
    else:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")


# -- CSV ----------------------------------------------------------------------------------------


def iter_csv_samples(path: Path, on_error: OnError = None) -> Iterator[dict[str, Any]]:
    with _open_read(path) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8", newline="")
        reader = csv.reader(text)
        header = next(reader, None)
        if header is None:
            return
        header = [h.strip() for h in header]
        if header[:2] != ["ts", "node"]:
            raise RecordError(f"CSV header must start with ts,node; got {','.join(header[:3])}", f"{path}:1")
        has_job = len(header) > 2 and header[2] == "job"
        has_seq = len(header) > 2 + has_job and header[2 + has_job] == "seq"
        first_metric = 2 + has_job + has_seq
        metrics = header[first_metric:]
        if len(set(metrics)) != len(metrics):
            raise RecordError("CSV header repeats a metric name", f"{path}:1")
        for lineno, row in enumerate(reader, 2):
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            where = f"{path}:{lineno}"
            try:
                if len(row) != len(header):
                    raise RecordError(f"{len(row)} cells, the header has {len(header)}", where)
                vals: dict[str, float | None] = {}
                for m, cell in zip(metrics, row[first_metric:], strict=True):
                    cell = cell.strip()
                    vals[m] = None if cell == "" else _csv_number(cell, f"{where} column {m!r}")
                obj: dict[str, Any] = {"ts": _csv_number(row[0], f"{where} column 'ts'"), "node": row[1].strip()}
                if has_job:
                    obj["job"] = row[2].strip() or "default"
                if has_seq:
                    seq = row[2 + has_job].strip()
                    try:
                        obj["seq"] = int(seq) if seq else -1
                    except ValueError:
                        raise RecordError(f"bad seq {seq!r}", f"{where} column 'seq'") from None
                obj["metrics"] = vals
                yield validate_sample(obj, where)
            except RecordError as exc:
                if on_error is None:
                    raise
                on_error(exc)


def _csv_number(cell: str, where: str) -> float:
    try:
        v = float(cell)
    except ValueError:
        raise RecordError(f"bad number {cell[:40]!r}", where) from None
    if not math.isfinite(v):
        raise RecordError(f"{cell!r} is not a finite number", where)
    return v


# -- SDDF -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SddfMapping:
    """Which SDDF fields make a sample. Empty = the defaults of the module docstring.

    ``record``: only this record type; ``ts``/``node``/``job``/``seq``: field names; ``metrics``:
    the fields that are metrics (default: every other numeric field); ``default_node``: node of
    records without a node field; ``job_default``: job when there is no job field (else the
    stream attribute ``job``, else ``default``).
    """

    record: str | None = None
    ts: str | None = None
    node: str | None = None
    job: str | None = None
    seq: str | None = None
    metrics: tuple[str, ...] | None = None
    default_node: str = "app"
    job_default: str | None = None

    @classmethod
    def parse(cls, text: str) -> SddfMapping:
        """``record=node sample,ts=timestamp,node=node,metrics=values|load`` (the CLI's --map)."""
        kw: dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, val = part.partition("=")
            key = key.strip().replace("-", "_")
            if not sep or key not in cls.__dataclass_fields__:
                known = ", ".join(cls.__dataclass_fields__)
                raise ValueError(f"--map: expected KEY=VALUE with KEY one of {known}; got {part!r}")
            kw[key] = tuple(v.strip() for v in val.split("|")) if key == "metrics" else val.strip()
        return cls(**kw)


@dataclass
class _Plan:
    ts: int
    node: int | None
    job: int | None
    seq: int | None
    metrics: list[int] = field(default_factory=list)


def _plan(desc: Descriptor, m: SddfMapping) -> _Plan | None:
    """Where the sample parts are in records of this descriptor (None: not a sample record)."""
    fields = desc.fields
    names = [f.name for f in fields]
    lower = [n.lower() for n in names]

    def find(explicit: str | None, candidates: tuple[str, ...], ok: Callable[[Field], bool]) -> int | None:
        if explicit is not None:
            if explicit not in names:
                raise RecordError(f"record {desc.name!r} has no field {explicit!r} (fields: {', '.join(names)})")
            return names.index(explicit)
        for c in candidates:
            if c in lower and ok(fields[lower.index(c)]):
                return lower.index(c)
        return None

    if m.record is not None and desc.name != m.record:
        return None
    ts = find(m.ts, TIME_FIELDS, lambda f: f.type != "char" and f.dim == 0)
    if ts is None:
        return None
    node = find(m.node, NODE_FIELDS, lambda f: (f.type in ("int", "long") and f.dim == 0) or f.type == "char")
    job = find(m.job, ("job",), lambda f: f.type == "char")
    seq = find(m.seq, ("seq",), lambda f: f.type in ("int", "long") and f.dim == 0)
    taken = {i for i in (ts, node, job, seq) if i is not None}
    if m.metrics is not None:
        missing = [x for x in m.metrics if x not in names]
        if missing:
            raise RecordError(f"record {desc.name!r} has no field(s) {', '.join(missing)}")
        metrics = [names.index(x) for x in m.metrics]
    else:
        metrics = [i for i, f in enumerate(fields) if i not in taken and f.type != "char" and f.dim <= 1]
    return _Plan(ts, node, job, seq, metrics)


def _names_record(desc: Descriptor) -> bool:
    return len(desc.fields) == 1 and desc.fields[0].type == "char" and desc.fields[0].dim == 2


def sddf_samples(
    packets: Iterable[Any], mapping: SddfMapping | None = None, on_error: OnError = None
) -> Iterator[dict[str, Any]]:
    """Samples (not yet validated) from SDDF packets; see the module docstring."""
    m = mapping or SddfMapping()
    plans: dict[int, _Plan | None] = {}
    names: list[str] | None = None
    job_attr = m.job_default
    for packet in packets:
        if isinstance(packet, Attributes):
            if m.job_default is None:
                job_attr = dict(packet.pairs).get("job", job_attr)
            continue
        if isinstance(packet, Descriptor):
            plans[packet.tag] = _plan(packet, m)
            continue
        if not isinstance(packet, Record):
            continue
        desc = packet.descriptor
        if _names_record(desc):
            names = list(packet.values[0].strings)
            continue
        plan = plans.get(desc.tag)
        if plan is None:
            continue
        try:
            yield _sample(packet, plan, names, m, job_attr)
        except RecordError as exc:
            if on_error is None:
                raise
            on_error(exc)


def _sample(rec: Record, plan: _Plan, names: list[str] | None, m: SddfMapping, job: str | None) -> dict[str, Any]:
    v = rec.values
    fields = rec.descriptor.fields
    node: Any = m.default_node if plan.node is None else v[plan.node]
    node = node.text if isinstance(node, Chars) else str(node)
    metrics: dict[str, float | None] = {}
    for i in plan.metrics:
        f = fields[i]
        x = v[i]
        if f.dim == 0:
            metrics[f.name] = _num(x)
            continue
        arr = np.asarray(x, dtype=np.float64).ravel()
        labels = names if names is not None and len(names) == len(arr) else [f"{f.name}[{k}]" for k in range(len(arr))]
        for label, val in zip(labels, arr.tolist(), strict=True):
            metrics[label] = _num(val)
    sample: dict[str, Any] = {"ts": float(v[plan.ts]), "node": node, "metrics": metrics}
    if plan.job is not None:
        sample["job"] = v[plan.job].text if isinstance(v[plan.job], Chars) else str(v[plan.job])
    elif job is not None:
        sample["job"] = job
    if plan.seq is not None:
        sample["seq"] = int(v[plan.seq])
    return validate_sample(sample, rec.where)


def _num(x: Any) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None  # SDDF has no missing marker: NaN (and inf) mean missing


def iter_sddf_samples(path: Path, mapping: SddfMapping, on_error: OnError = None) -> Iterator[dict[str, Any]]:
    yield from sddf_samples(read_sddf(path), mapping, on_error)


# -- writing ------------------------------------------------------------------------------------

NAMES_FIELD = Field("names", "char", 2, (("description", "metric names, one per row"),))
SAMPLE_FIELDS = (
    Field("timestamp", "double", 0, (("units", "sec"),)),
    Field("node", "char", 1),
    Field("job", "char", 1),
    Field("seq", "int", 0),
    Field("values", "double", 1, (("description", "metric values in the order of the latest metric names"),)),
)


class TraceWriter:
    """Writes samples to a trace file: ``.sddf``/``.sddfa`` (ASCII SDDF), ``.sddfb`` (binary SDDF),
    ``.csv`` or ``.jsonl`` (``.gz`` compresses CSV and JSONL); ``fmt`` overrides the extension
    (``sddf``, ``sddf-binary``, ``csv``, ``jsonl``). Use as a context manager.

    CSV needs a fixed metric list (``metrics``, or the first sample's); SDDF writes a new
    "metric names" record whenever a sample brings a metric not seen yet.
    """

    def __init__(
        self,
        path: str | Path,
        fmt: str | None = None,
        metrics: list[str] | None = None,
        attributes: dict[str, str] | None = None,
    ) -> None:
        self.path = Path(path)
        self.fmt = fmt or self.format_of(self.path)
        gz = self.path.suffix == ".gz"
        # the writer owns the file until close()
        raw = gzip.open(self.path, "wb") if gz else open(self.path, "wb")  # noqa: SIM115
        self.fh = cast(IO[bytes], raw)
        self.metrics: list[str] = list(metrics or [])
        self.count = 0
        self._csv: Any = None
        if self.fmt in ("sddf", "sddf-binary"):
            self.sddf = SddfWriter(self.fh, binary=self.fmt == "sddf-binary")
            self.sddf.attributes((attributes or {"written by": "perfsift"}).items())
            self.names_desc = self.sddf.descriptor(1, "metric names", [NAMES_FIELD])
            self.sample_desc = self.sddf.descriptor(2, "node sample", SAMPLE_FIELDS)
            self.names_written: list[str] = []
        elif self.fmt not in ("csv", "jsonl"):
            raise ValueError(f"format must be sddf, sddf-binary, csv or jsonl; got {self.fmt!r}")

    @staticmethod
    def format_of(path: Path) -> str:
        suffixes = [s.lower() for s in path.suffixes if s.lower() != ".gz"]
        ext = suffixes[-1] if suffixes else ""
        known = {".sddf": "sddf", ".sddfa": "sddf", ".sddfb": "sddf-binary", ".csv": "csv", ".jsonl": "jsonl"}
        if ext not in known:
            raise ValueError(f"cannot tell the format of {path.name}; use .sddf, .sddfb, .csv or .jsonl")
        return known[ext]

    def write(self, sample: dict[str, Any]) -> None:
        self.count += 1
        if self.fmt == "jsonl":
            self.fh.write(orjson.dumps(sample) + b"\n")
            return
        metrics = sample["metrics"]
        new = [k for k in metrics if k not in self.metrics]
        if self.fmt == "csv":
            if self._csv is None:
                self.metrics += new
                self._text = io.TextIOWrapper(self.fh, encoding="utf-8", newline="")
                self._csv = csv.writer(self._text, lineterminator="\n")
                self._csv.writerow(["ts", "node", "job", "seq", *self.metrics])
            elif new:
                raise ValueError(f"CSV needs a fixed set of metrics; sample {self.count} adds {new[:3]}")
            cells = ["" if metrics.get(m) is None else repr(float(metrics[m])) for m in self.metrics]
            self._csv.writerow(
                [repr(float(sample["ts"])), sample["node"], sample.get("job", "default"), sample.get("seq", -1), *cells]
            )
            return
        self.metrics += new
        if self.metrics != self.names_written:
            self.sddf.record(self.names_desc, [Chars.rows(self.metrics)])
            self.names_written = list(self.metrics)
        vals = np.array([np.nan if metrics.get(m) is None else metrics[m] for m in self.metrics], dtype=np.float64)
        self.sddf.record(
            self.sample_desc,
            [
                float(sample["ts"]),
                Chars.of(sample["node"]),
                Chars.of(sample.get("job", "default")),
                int(sample.get("seq", -1)),
                vals,
            ],
        )

    def close(self) -> None:
        if self._csv is not None:
            self._text.flush()
            self._text.detach()
        self.fh.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_samples(samples: Iterable[dict[str, Any]], path: str | Path, fmt: str | None = None, **kw: Any) -> int:
    """Write samples to a trace file (see :class:`TraceWriter`); returns how many."""
    with TraceWriter(path, fmt, **kw) as w:
        for s in samples:
            w.write(s)
        return w.count
