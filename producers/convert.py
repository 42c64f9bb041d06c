"""Archived exports to a perfsift trace: the file's records through the same decoders and
assembler as the ingest stage, every sample emitted at the end, written as JSONL, CSV or SDDF
(by the output's extension, :class:`~perfsift.producers.traces.TraceWriter`).

How a file holds its records:

- ``otlp_json``: JSON lines, one ``ExportMetricsServiceRequest`` (or ``MetricsData``) per line, as
  the Collector's file exporter writes them (``format: json``);
- ``otlp_proto``: the file exporter's ``format: proto``: each request prefixed by its length (4
  bytes, big-endian);
- ``telegraf_json``, ``ldms_json``, ``perfsift``: JSON lines, one record per line;
- ``prometheus_text``: the whole file is one scrape; samples without a timestamp take the file's
  modification time, a node without an ``instance`` label the file's stem.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perfsift.formats import Assembler, IngestError, IngestSettings, decoder_for
from perfsift.producers.traces import write_samples
from perfsift.schemas.records import RecordError, validate_sample


def _records(path: Path, fmt: str) -> Iterator[tuple[str, bytes]]:
    """(place, record) of every record of the file."""
    if fmt == "prometheus_text":
        yield f"{path}", path.read_bytes()
    elif fmt == "otlp_proto":
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            if pos + 4 > len(data):
                raise IngestError(f"{path}: {len(data) - pos} bytes at offset {pos}: a truncated length prefix")
            (n,) = struct.unpack_from(">I", data, pos)
            yield f"{path}:@{pos}", data[pos + 4 : pos + 4 + n]
            pos += 4 + n
    else:
        with path.open("rb") as f:
            for i, line in enumerate(f, 1):
                if line.strip():
                    yield f"{path}:{i}", line


def convert(src: str | Path, out: str | Path, settings: IngestSettings) -> dict[str, Any]:
    """Convert ``src`` (records of ``settings.format``) to the trace ``out``; returns counts
    (records, points, samples, metrics) and the problems met (place: reason), first 20."""
    path = Path(src)
    problems: list[str] = []
    samples: list[dict[str, Any]] = []
    records = points = 0
    if settings.format == "perfsift":
        import orjson

        for where, raw in _records(path, "perfsift"):
            records += 1
            try:
                samples.append(validate_sample(orjson.loads(raw), where))
            except (RecordError, orjson.JSONDecodeError) as exc:
                problems.append(f"{where}: {exc}")
    else:
        asm = Assembler(settings)
        decode = decoder_for(asm)
        key = path.stem.encode()
        when = path.stat().st_mtime
        for where, raw in _records(path, settings.format):
            records += 1
            try:
                decode(raw, key, when)
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
    return {"records": records, "points": points, "samples": written, "metrics": len(names),
            "problems": len(problems), "first_problems": problems[:20]}  # fmt: skip
