"""The one table of record kinds: for each kind of record perfsift writes, its schema, the field that
keys its messages, the topic that carries it by default, the file of a report folder it is kept in,
whether it has an OTLP and a Prometheus form, and its column-wise JSON encoder.

Operators name the *kind* of what they emit (:attr:`~perfsift.operators.base.Decider.output`,
:attr:`~perfsift.operators.base.Router.outputs`); everything else that depends on the kind derives
from :data:`KINDS`: the topic table (``streams/topics.py``), the files of a report folder
(``analysis/analyze.py``), the kinds ``otlp_out`` maps (``formats/otlp/otlp_out.py``) and
``perfsift export`` exposes (``formats/prom_out.py``), the schemas :func:`load_schema` knows.

A new kind of record is one entry here and its ``schemas/<name>.avsc``; with ``otlp=True`` or
``prometheus=True`` also its mapping in ``formats/otlp/otlp_out.py`` (``POINTS``) or
``formats/prom_out.py`` (``LatestValues``), which ``tests/unit/test_kinds.py`` checks are there.

>>> KINDS["forecast"].topic, KINDS["forecast"].key, KINDS["forecast"].file
('perf.forecast', 'node', 'forecast.jsonl')
>>> [k.name for k in KINDS.values() if k.otlp]
['reduced', 'contract', 'forecast', 'prediction']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from perfsift.operators.batch import Batch
from perfsift.operators.forecast.forecast import PRIMARIES
from perfsift.schemas.encode import encode_forecasts

#: encoded records and their message keys
Encoded = tuple[list[bytes], list[bytes]]


@dataclass(frozen=True)
class Kind:
    """One kind of record (see the module docstring)."""

    #: the kind's name, which is its schema's (``schemas/<name>.avsc``)
    name: str
    #: the record field whose value keys a message (``node`` or ``job``; ``-`` for none)
    key: str
    #: the topic that carries this kind by default (before the pipeline's prefix)
    topic: str
    #: what the default topic holds, in a few words
    what: str
    #: its default topic keeps the latest record per key (``cleanup.policy: compact``)
    compacted: bool = False
    #: the file a report folder (``perfsift analyze``, ``perfsift run``) keeps its records in; "" for none
    file: str = ""
    #: ``otlp_out`` copies its records as OTLP gauges (``formats/otlp/otlp_out.py``)
    otlp: bool = False
    #: ``perfsift export`` exposes its records as Prometheus series (``formats/prom_out.py``)
    prometheus: bool = False
    #: the records a decider returns as a batch, in JSON, built column-wise (the bytes that encoding
    #: its ``records()`` one by one gives, without a dict per record); None: one record at a time
    columnar_json: Callable[[Batch | Sequence[Batch]], Encoded] | None = None


def _forecasts_json(out: Batch | Sequence[Batch]) -> Encoded:
    return encode_forecasts(out, PRIMARIES)


#: every kind of record, by name
KINDS: dict[str, Kind] = {
    k.name: k
    for k in [
        Kind("sample", "node", "perf.raw", "samples as published"),
        Kind(
            "selection", "job", "perf.selection", "decisions: metrics chosen, scores, version", True, "selection.jsonl"
        ),
        Kind(
            "reduced",
            "node",
            "perf.reduced",
            "smoothed samples with only the selected metrics",
            file="reduced.jsonl",
            otlp=True,
            prometheus=True,
        ),
        Kind(
            "contract",
            "node",
            "perf.contract",
            "contract evaluation per node",
            file="contract.jsonl",
            otlp=True,
            prometheus=True,
        ),
        Kind(
            "forecast",
            "node",
            "perf.forecast",
            "forecasts with +-2 sigma bounds",
            file="forecast.jsonl",
            otlp=True,
            prometheus=True,
            columnar_json=_forecasts_json,
        ),
        Kind(
            "prediction",
            "job",
            "perf.prediction",
            "structural-model predictions, observed values, verdicts",
            file="prediction.jsonl",
            otlp=True,
        ),
        Kind("control", "job", "perf.control", "feedback to producers: which metrics to keep", True, "control.jsonl"),
        Kind("deadletter", "-", "perf.deadletter", "records that could not be decoded or processed"),
        Kind("state", "stage/topic/partition", "perf.state", "operator snapshots with their offsets", True),
    ]
}

#: the kinds of record, in the table's order (each has ``schemas/<name>.avsc``)
SCHEMA_NAMES: tuple[str, ...] = tuple(KINDS)
