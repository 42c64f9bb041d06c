"""What a running stage adds around its chain's outputs, kept out of the runner: the Schema
Registry subjects of the topics it writes (``encoding: confluent-avro``) and the OTLP copy of its
results (``otlp_out``: :mod:`perfsift.formats.otlp.otlp_out`).

:func:`written_kinds` says which kind of record (schema) each topic of a stage gets.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from perfsift.formats.otlp.otlp_out import to_requests
from perfsift.operators import Batch, Decider
from perfsift.schemas import KINDS, Encoding, batch_to_samples
from perfsift.streams.config import PipelineConfig, StageConfig
from perfsift.streams.stage import Emitted


def written_kinds(stage: StageConfig) -> dict[str, str]:
    """Every topic (logical name) the stage writes and the kind of record it carries."""
    kinds = dict.fromkeys(stage.tapped, "sample")
    last = stage.last
    if stage.role == "route":
        kinds |= {t: kind for kind, topics in stage.routes.items() for t in topics}
    elif last is not None and issubclass(last, Decider):
        kinds |= dict.fromkeys(stage.outputs, last.output)
    else:
        kinds |= dict.fromkeys(stage.outputs, "sample")
    return kinds


class StageOutputs:
    """Set up once per runner (registers the ``<topic>-value`` subjects of every topic the stage
    writes, when the encoding is ``confluent-avro``); :meth:`extend` sees every emitted batch."""

    def __init__(self, pipeline: PipelineConfig, stage: StageConfig, encoding: Encoding | None = None) -> None:
        self.pipeline = pipeline
        self.stage = stage
        #: the pipeline's wire encoding (the runner's, when it passes it)
        self.encoding = encoding if encoding is not None else pipeline.codec
        kinds = written_kinds(stage)
        self.encoding.prepare({f"{pipeline.topic(topic)}-value": kind for topic, kind in kinds.items()})
        #: topics whose records go out as OTLP too, with their kind (one topic per kind)
        self.otlp: dict[str, str] = {}
        if pipeline.otlp_out:
            for topic, kind in kinds.items():
                if KINDS[kind].otlp and kind not in self.otlp.values():
                    self.otlp[topic] = kind

    def extend(self, emitted: Emitted) -> Emitted:
        """The chain's outputs with what this stage adds to them: the OTLP copy of its results,
        one request per (job, node) of each batch, on the ``otlp_out`` topic."""
        if not self.otlp:
            return emitted
        values: list[bytes] = []
        keys: list[bytes] = []
        for topic, kind in self.otlp.items():
            encoded = emitted.topics.get(topic)
            if encoded and encoded[0]:
                v, k = to_requests(kind, self._records(kind, emitted))
                values += v
                keys += k
        if values:
            have = emitted.topics.setdefault(self.pipeline.otlp_out, ([], []))
            have[0].extend(values)
            have[1].extend(keys)
        return emitted

    def _records(self, kind: str, emitted: Emitted) -> Iterable[dict[str, Any]]:
        """The records of ``kind`` the chain emitted, from what the last operator returned (nothing
        read back from what was just encoded): a router's parts of that kind (batches of samples
        become sample dicts), a decider's records (``Decider.records``). Decoded wire records equal
        them bit for bit (forecasts: :mod:`~perfsift.schemas.forecast_wire`), so the OTLP copy is
        the same as from the topic."""
        output = emitted.output
        if emitted.decider is not None:
            return emitted.decider.records(output)  # type: ignore[arg-type]
        parts = output.get(kind, []) if isinstance(output, dict) else output
        if not isinstance(parts, Sequence) or isinstance(parts, str | bytes):
            raise TypeError(f"otlp_out: the chain's {kind} records are a {type(parts).__name__}, not a sequence")
        batches = [p for p in parts if isinstance(p, Batch)]
        if batches and len(batches) == len(parts):
            return (r for b in batches for r in batch_to_samples(b))
        return parts
