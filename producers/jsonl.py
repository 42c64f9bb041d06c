"""JSONL sample files (one sample object per line; ``.gz`` files are read compressed).

Reading streams line by line in constant memory. A bad line raises :class:`RecordError` naming
``file:line``, or is reported to ``on_error`` and skipped when one is given.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, cast

import orjson
from perfsift.schemas import RecordError, validate_sample


def _open(path: Path) -> IO[bytes]:
    return cast(IO[bytes], gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb"))


def iter_jsonl_samples(
    path: str | Path, on_error: Callable[[RecordError], None] | None = None
) -> Iterator[dict[str, Any]]:
    """Yield the samples of a JSONL file, validated and normalised (see ``validate_sample``)."""
    p = Path(path)
    with _open(p) as fh:
        for lineno, line in enumerate(fh, 1):
            try:
                yield validate_sample(orjson.loads(line))
            except (orjson.JSONDecodeError, RecordError) as exc:  # the place is named only when needed
                if not line.strip():
                    continue
                where = f"{p}:{lineno}"
                if isinstance(exc, RecordError):
                    err = RecordError(exc.reason, where)
                else:
                    err = RecordError(f"not valid JSON: {exc}", where)
                if on_error is None:
                    raise err from None
                on_error(err)


def number_samples(samples: Iterable[dict[str, Any]], job: str | None = None) -> Iterator[dict[str, Any]]:
    """Set ``job`` (when given) and number ``seq`` per (job, node) from 0 where it is not tracked (-1)."""
    counters: dict[tuple[str, str], int] = {}
    for s in samples:
        if job is not None:
            s = {**s, "job": job}
        if s.get("seq", -1) < 0:
            key = (s.get("job", "default"), s["node"])
            n = counters.get(key, 0)
            counters[key] = n + 1
            s = {**s, "seq": n}
        yield s
