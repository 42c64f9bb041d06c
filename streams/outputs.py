"""What a running stage adds around its chain's outputs, kept out of the runner: the Schema
Registry subjects of the topics it writes (``encoding: confluent-avro``).

:func:`written_kinds` says which kind of record (schema) each topic of a stage gets.
"""

from __future__ import annotations

from perfsift.operators import Decider
from perfsift.schemas.registry import ENCODING as CONFLUENT_AVRO
from perfsift.schemas.registry import use_registry
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

    def __init__(self, pipeline: PipelineConfig, stage: StageConfig) -> None:
        self.pipeline = pipeline
        self.stage = stage
        if pipeline.encoding == CONFLUENT_AVRO:
            registry = use_registry(pipeline.schema_registry)
            for topic, kind in written_kinds(stage).items():
                registry.register(f"{pipeline.topic(topic)}-value", kind)

    def extend(self, emitted: Emitted) -> Emitted:
        """The chain's outputs with what this stage adds to them."""
        return emitted
