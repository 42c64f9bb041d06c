"""Archived exports to a perfsift trace: the file's records through the same decoders and
assembler as the ingest stage, every sample emitted at the end, written as JSONL, CSV or SDDF
(by the output's extension, :class:`~perfsift.producers.traces.TraceWriter`).

How a file holds its records:

- ``otlp_json``: JSON lines, one ``ExportMetricsServiceRequest`` (or ``MetricsData``) per line, as
  the Collector's file exporter writes them (``format: json``);
- ``otlp_proto``: the file exporter's ``format: proto``: each request prefixed by its length (4
  bytes, big-endian);
- ``telegraf_json``, ``ldms_json``, ``perfsift``: JSON lines, one record per line;
- ``prometheus_text``, ``influx_line``, ``graphite``: text; a Prometheus file holds one scrape or
  several concatenated (``curl ... >> file``: cut where a scrape begins again,
  :func:`~perfsift.formats.prometheus.split_scrapes`). Samples without a timestamp take the
  file's modification time, the last of several scrapes too and each earlier one ``interval``
  seconds before the next (several scrapes without timestamps need ``interval``). The node is the
  ``instance`` label, else ``node``, else the file's stem without a trailing counter or time
  (``node-1.003.prom`` and ``node-1.004.prom`` are both node ``node-1``): a node per target, not
  per file;
- ``remote_write``: each request after its length (4 bytes, big-endian), as ``otlp_proto``.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from perfsift.formats import Assembler, IngestError, IngestSettings, decoder_for
from perfsift.formats.settings import IngestConfigError
from perfsift.producers.traces import write_samples
from perfsift.schemas.records import RecordError, validate_sample


def node_of(path: Path) -> str:
    """The node a file's stem names: without a trailing counter or time after ``-``, ``_`` or ``.``.

    >>> [node_of(Path(p)) for p in ("node-1.003.prom", "node-1_20240101T120000.prom", "node1.prom")]
    ['node-1', 'node-1', 'node1']
    """
    stem = path.name.split(".prom")[0] if ".prom" in path.name else path.stem
    return re.sub(r"[-_.](\d{8}T\d{4,6}Z?|\d+)$", "", stem) or stem  # one counter or time: node-1.003 is node-1


def _has_timestamps(scrape: str) -> bool:
    for line in scrape.splitlines():
        if line and line[0] != "#":
            close = line.rfind("}")
            return len((line[close + 1 :] if close >= 0 else line).split()) == (2 if close >= 0 else 3)
    return True


def _records(path: Path, fmt: str, interval: float | None) -> Iterator[tuple[str, bytes, float]]:
    """(place, record, time for samples without one) of every record of the file."""
    mtime = path.stat().st_mtime
    if fmt == "prometheus_text":
        from perfsift.formats.prometheus import split_scrapes

        scrapes = split_scrapes(path.read_text(errors="replace"))
        if len(scrapes) > 1 and interval is None and not all(_has_timestamps(s) for s in scrapes):
            raise IngestConfigError(
                f"{path}: {len(scrapes)} scrapes without timestamps: give --interval (seconds "
                "between them; the last one is the file's modification time)"
            )
        for k, text in enumerate(scrapes):
            yield f"{path}#{k + 1}", text.encode(), mtime - (len(scrapes) - 1 - k) * (interval or 0.0)
    elif fmt in ("otlp_proto", "remote_write"):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            if pos + 4 > len(data):
                raise IngestError(f"{path}: {len(data) - pos} bytes at offset {pos}: a truncated length prefix")
            (n,) = struct.unpack_from(">I", data, pos)
            yield f"{path}:@{pos}", data[pos + 4 : pos + 4 + n], mtime
            pos += 4 + n
    else:
        with path.open("rb") as f:
            for i, line in enumerate(f, 1):
                if line.strip():
                    yield f"{path}:{i}", line, mtime


def convert(
    src: str | Path | Sequence[str | Path],
    out: str | Path,
    settings: IngestSettings,
    node: str | None = None,
    interval: float | None = None,
) -> dict[str, Any]:
    """Convert the files ``src`` (records of ``settings.format``) to the trace ``out``; returns
    counts (records, points, samples, metrics) and the problems met (place: reason), first 20.
    ``node``: the node of records that name none (else the file's, :func:`node_of`); ``interval``:
    seconds between concatenated scrapes without timestamps."""
    paths = [Path(src)] if isinstance(src, str | Path) else [Path(p) for p in src]
    problems: list[str] = []
    samples: list[dict[str, Any]] = []
    records = points = 0
    if settings.format == "perfsift":
        import orjson

        for path in paths:
            for where, raw, _ in _records(path, "perfsift", None):
                records += 1
                try:
                    samples.append(validate_sample(orjson.loads(raw), where))
                except (RecordError, orjson.JSONDecodeError) as exc:
                    problems.append(f"{where}: {exc}")
    else:
        asm = Assembler(settings)
        decode = decoder_for(asm)
        items = [
            (path, where, raw, when) for path in paths for where, raw, when in _records(path, settings.format, interval)
        ]
        items.sort(key=lambda it: it[3])  # files of one target in time order: counters' rates
        for path, where, raw, when in items:
            records += 1
            try:
                decode(raw, (node or node_of(path)).encode(), when)
            except IngestError as exc:
                problems.append(f"{where}: {exc.reason}")
            for _, reason in asm.take_problems():
                problems.append(f"{where}: {reason}")
        points = asm.points
        rows = sorted(asm.due(0.0, everything=True), key=lambda s: (s[2], s[0], s[1]))
        if rows:
            batch = asm.to_batch(rows)
            from perfsift.schemas.batches import batch_to_samples

            samples = batch_to_samples(batch)
    samples.sort(key=lambda s: s["ts"])
    names = sorted({m for s in samples for m in s["metrics"]})
    written = write_samples(samples, out, metrics=names) if samples else 0
    return {
        "records": records,
        "points": points,
        "samples": written,
        "metrics": len(names),
        "problems": len(problems),
        "first_problems": problems[:20],
    }
