"""What a valid record is: the Avro schema of every record type (``*.avsc`` beside this module),
the rules for samples, and :class:`RecordError`.

Malformed input raises :class:`RecordError`, which says what is wrong and where; a decoder never
returns half a record.

Documented rules for samples (the dead-letter topic gets everything else):

- ``ts`` must be a finite number; ``node`` a non-empty string; ``job`` a string (default
  ``"default"``); ``seq`` an integer (default -1, meaning not tracked); ``metrics`` an object of
  at most ``MAX_METRICS`` names to numbers or null (missing).
- JSON booleans are not numbers here: a boolean ``ts``, ``seq`` or metric value is rejected.
- Unknown top-level fields are ignored (forward compatibility); they are not passed on.
"""

from __future__ import annotations

import json
import math
from functools import cache
from importlib import resources
from typing import Any, cast

import fastavro
from perfsift.schemas.kinds import SCHEMA_NAMES

MAX_METRICS = 4096
#: seq is a signed 64-bit counter (JSON parsers give integers up to 2**64 - 1)
SEQ_MIN, SEQ_MAX = -(2**63), 2**63 - 1


class RecordError(ValueError):
    """A record that cannot be decoded or is not valid. ``where`` names the place it came from."""

    def __init__(self, reason: str, where: str = "", index: int = -1) -> None:
        self.reason = reason
        self.where = where
        #: position of the record in the input of :func:`decode_samples` (-1 elsewhere)
        self.index = index
        super().__init__(f"{where}: {reason}" if where else reason)


# -- schemas ------------------------------------------------------------------------------------
@cache
def load_schema(name: str) -> dict[str, Any]:
    """The parsed Avro schema ``schemas/<name>.avsc``."""
    if name not in SCHEMA_NAMES:
        raise KeyError(f"no schema {name!r}; known: {', '.join(SCHEMA_NAMES)}")
    text = resources.files("perfsift.schemas").joinpath(f"{name}.avsc").read_text()
    return cast(dict[str, Any], fastavro.parse_schema(json.loads(text)))


# -- validation of one sample ---------------------------------------------------------------------
def _is_number(v: object) -> bool:
    t = type(v)
    return t is float or t is int


_FLOAT_ONLY = {float}


def validate_sample(obj: object, where: str = "") -> dict[str, Any]:
    """Check a decoded sample and return it normalised (defaults filled, unknown fields dropped)."""
    if type(obj) is not dict:
        raise RecordError(f"a sample must be a JSON object, got {type(obj).__name__}", where)
    ts = obj.get("ts")
    if not _is_number(ts) or not math.isfinite(ts):  # type: ignore[arg-type]
        raise RecordError(f"'ts' must be a finite number, got {ts!r:.80}", where)
    node = obj.get("node")
    if type(node) is not str or not node:
        raise RecordError(f"'node' must be a non-empty string, got {node!r:.80}", where)
    job = obj.get("job", "default")
    if type(job) is not str:
        raise RecordError(f"'job' must be a string, got {job!r:.80}", where)
    seq = obj.get("seq", -1)
    if type(seq) is not int or not SEQ_MIN <= seq <= SEQ_MAX:
        raise RecordError(f"'seq' must be a 64-bit signed integer, got {seq!r:.80}", where)
    metrics = obj.get("metrics")
    if type(metrics) is not dict:
        raise RecordError(f"'metrics' must be an object of name -> number, got {metrics!r:.80}", where)
    if len(metrics) > MAX_METRICS:
        raise RecordError(f"{len(metrics)} metrics in one sample, more than the limit {MAX_METRICS}", where)
    vals = metrics.values()
    if set(map(type, vals)) <= _FLOAT_ONLY and math.isfinite(sum(vals)):  # the common case, at C speed
        return {"ts": float(ts), "node": node, "job": job, "seq": seq, "metrics": dict(metrics)}  # type: ignore[arg-type]
    clean: dict[str, float | None] = {}
    for name, v in metrics.items():
        if v is None:
            clean[name] = None
        elif _is_number(v) and math.isfinite(v):
            clean[name] = float(v)
        else:
            raise RecordError(f"metric {name!r:.80} must be a finite number or null, got {v!r:.80}", where)
    return {"ts": float(ts), "node": node, "job": job, "seq": seq, "metrics": clean}  # type: ignore[arg-type]
