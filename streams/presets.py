"""What the command line adds to a pipeline file: statistical data reduction and a contract stage
(``perfsift run``/``analyze`` options), and the demo's reduction stage (``--demo``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from perfsift.streams.config import OperatorSpec, PipelineConfig, StageConfig


def with_options(cfg: PipelineConfig, perf_metric: str | None = None, contract: Path | None = None) -> PipelineConfig:
    """The pipeline with statistical data reduction on ``perf_metric`` joined to every reduce
    operator, and a contract stage (perf.smoothed, or perf.smoothed.byjob when no stage writes
    perf.smoothed -> perf.contract) for ``contract``."""
    stages = dict(cfg.stages)
    if perf_metric:
        # Statistical data reduction fits a regression on rows of `interval` seconds (METHODS.md
        # §2): it needs the smoothed stream at the sampling rate, not one mean per window (with
        # 10x fewer rows it did not recluster once in 400 s). The sliding means then go out at
        # full rate, and the pursuit takes its snapshots `emit_every` rows apart, as before, so
        # its selections are the ones of the thinned stream.
        thin = max(
            (
                int(op.params.get("emit_every", 1))
                for st in stages.values()
                for op in st.operators
                if op.type == "sliding_mean"
            ),
            default=1,
        )

        def joined(op: OperatorSpec) -> OperatorSpec:
            if op.type == "sliding_mean" and thin > 1:
                return replace(op, params={**op.params, "emit_every": 1})
            if op.type != "reduce":
                return op
            params = {**op.params, "reduction": {**(op.params.get("reduction") or {}), "perf_metric": perf_metric}}
            if thin > 1 and isinstance(op.params.get("pursuit"), Mapping):
                pp = dict(op.params["pursuit"])
                pp.update({k: int(pp[k]) * thin for k in ("window", "slack") if k in pp})  # rows -> samples
                params["pursuit"] = pp
            return replace(op, params=params)

        stages = {name: replace(st, operators=tuple(map(joined, st.operators))) for name, st in stages.items()}
    if contract is not None:
        # the node-keyed smoothed stream when a stage writes it; else the job-keyed one (the lean
        # default's only smoothed topic: a job's nodes then share a partition)
        written = {t for st in stages.values() for t in st.written}
        source = "perf.smoothed" if "perf.smoothed" in written or not written else "perf.smoothed.byjob"
        stages["contract"] = StageConfig(
            "contract", source, ("perf.contract",), (OperatorSpec("contract", {"contract": str(contract)}),)
        )
    return replace(cfg, stages=stages)


#: the bundled demo's application metric (producers/demo.py), its contract and its model
#: (models/demo.contract.json, models/demo.yaml)
DEMO_APP_METRIC = "iter_time"
#: the demo's data reduction: rows of one second (the raw samples), a sliding window of 200 rows
#: (more than the 16 nodes x 13 metrics leave cluster representatives), refitted every 60 rows
DEMO_REDUCTION = {"perf_metric": DEMO_APP_METRIC, "interval": 1.0, "window": 200, "recluster_every": 60}


def with_demo(cfg: PipelineConfig) -> PipelineConfig:
    """The pipeline with the three stages that show the rest of the system on the bundled demo
    (``perfsift run`` with no trace, pipeline, contract or performance metric given): ``contract``
    (the bundled contract ``demo`` on iter_time) and ``predict`` (the bundled model ``demo``), both
    on the job-keyed smoothed stream, and ``reduction``, statistical data reduction on iter_time.

    [design choice] The data reduction reads perf.raw, not the smoothed stream the select stage's
    reduce operator sees: its regression needs more rows in its window than cluster
    representatives, and the smoothed stream carries one mean per 10 samples (60 rows in the demo's
    600 s). Joining it to the select stage (``--perf-metric``) sets the smoothing to full rate,
    which multiplies the smoothed, reduced and forecast records tenfold. perf.raw is node-keyed, so
    each partition fits the nodes it holds (every node of the demo reports the job's iter_time);
    its selection does not steer the reduced stream (the pursuit's does)."""
    stages = dict(cfg.stages)
    stages.setdefault(
        "contract",
        StageConfig(
            "contract", "perf.smoothed.byjob", ("perf.contract",), (OperatorSpec("contract", {"contract": "demo"}),)
        ),
    )
    stages.setdefault(
        "predict",
        StageConfig(
            "predict", "perf.smoothed.byjob", ("perf.prediction",), (OperatorSpec("predict", {"model": "demo"}),)
        ),
    )
    stages.setdefault(
        "reduction",
        StageConfig(
            "reduction", "perf.raw", ("perf.selection",), (OperatorSpec("data_reduction", dict(DEMO_REDUCTION)),)
        ),
    )
    return replace(cfg, stages=stages)
