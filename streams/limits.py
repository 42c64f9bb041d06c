"""Limits on what one input partition of a stage accepts, so a misbehaving producer cannot exhaust a
worker's memory: the length of node, job and metric names, metrics per sample, distinct nodes per
job and distinct jobs, and the size of a record. A record over a limit goes to the dead-letter
topic with the limit's reason (``perfsift_dead_letters_by_reason_total{reason=...}``); the
others go on. Set in the pipeline file's ``limits:`` section.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

import numpy as np
from perfsift.operators import Batch

log = logging.getLogger("perfsift.runner")
#: the dead-letter reasons of the limits (a bounded label set)
LIMIT_REASONS = ("record_too_large", "name_too_long", "too_many_metrics", "too_many_nodes", "too_many_jobs")


@dataclass(frozen=True)
class Limits:
    """Bounds per input partition; every one configurable (``limits:`` in the pipeline file)."""

    #: longest node, job or metric name, in characters
    max_name_length: int = 256
    #: most metric values (non-null) in one sample
    max_metrics_per_sample: int = 1024
    #: most distinct nodes of one job
    max_nodes_per_job: int = 10_000
    #: most distinct jobs
    max_jobs: int = 1_000
    #: largest record, in bytes
    max_record_bytes: int = 1_000_000

    @classmethod
    def parse(cls, section: object, source: str) -> Limits:
        """The ``limits:`` mapping of a pipeline file (ValueError naming ``source`` when wrong)."""
        if section is None:
            return cls()
        names = [f.name for f in fields(cls)]
        if not isinstance(section, Mapping) or set(section) - set(names):
            raise ValueError(f"{source}: limits: a mapping with keys among {', '.join(names)}")
        bad = {k: v for k, v in section.items() if type(v) is not int or v < 1}
        if bad:
            raise ValueError(f"{source}: limits: positive integers expected, got {bad}")
        return cls(**section)


@dataclass
class Guard:
    """Applies :class:`Limits` to one input partition's records and remembers its nodes and jobs."""

    limits: Limits
    #: node names seen per job (bounded by the limits themselves)
    nodes: dict[str, set[str]] = field(default_factory=dict)
    #: (job, reason) pairs already announced in a log line
    told: set[tuple[str, str]] = field(default_factory=set)

    def oversized(self, values: list[bytes | None]) -> list[int]:
        """Positions of the records larger than ``max_record_bytes``."""
        top = self.limits.max_record_bytes
        try:  # the common case in C: nothing too large, no tombstone
            if max(map(len, values), default=0) <= top:  # type: ignore[arg-type]
                return []
        except TypeError:  # a tombstone (None) among them
            pass
        return [i for i, v in enumerate(values) if v is not None and len(v) > top]

    def check(self, batch: Batch) -> tuple[Batch, list[tuple[int, str, str]]]:
        """The rows of ``batch`` within the limits, and (row, reason, detail) for the others. A
        metric whose name is too long is dropped from the batch (rows with a value for it are
        refused); new nodes and jobs are admitted in row order while there is room."""
        lim = self.limits
        refused: dict[int, tuple[str, str]] = {}
        long_nodes = np.array([len(n) > lim.max_name_length for n in batch.nodes], dtype=bool)
        long_jobs = np.array([len(j) > lim.max_name_length for j in batch.jobs], dtype=bool)
        long_metrics = np.array([len(m) > lim.max_name_length for m in batch.metrics], dtype=bool)
        present = ~np.isnan(batch.values)
        rows = np.arange(len(batch))
        too_long = np.zeros(len(batch), dtype=bool)
        if long_nodes.any():
            too_long |= long_nodes[batch.node_idx]
        if long_jobs.any():
            too_long |= long_jobs[batch.job_idx]
        if long_metrics.any():
            too_long |= present[:, long_metrics].any(axis=1)
        for r in rows[too_long]:
            refused[int(r)] = ("name_too_long", f"a node, job or metric name longer than {lim.max_name_length}")
        counts = present[:, ~long_metrics].sum(axis=1)
        for r in rows[(counts > lim.max_metrics_per_sample) & ~too_long]:
            refused[int(r)] = ("too_many_metrics", f"{counts[r]} metrics, more than {lim.max_metrics_per_sample}")
        # new nodes and jobs, admitted in order of first appearance while there is room
        ok = np.ones(len(batch), dtype=bool)
        ok[list(refused)] = False
        pair = batch.job_idx * max(len(batch.nodes), 1) + batch.node_idx
        order = np.unique(pair[ok], return_index=True)[1]
        refused_pairs: dict[int, tuple[str, str]] = {}
        for i in sorted(order.tolist()):
            r = int(rows[ok][i])
            job, node = batch.jobs[batch.job_idx[r]], batch.nodes[batch.node_idx[r]]
            known = self.nodes.get(job)
            if known is None:
                if len(self.nodes) >= lim.max_jobs:
                    refused_pairs[int(pair[r])] = ("too_many_jobs", f"job {job[:64]!r} beyond {lim.max_jobs} jobs")
                    continue
                known = self.nodes[job] = set()
            if node not in known:
                if len(known) >= lim.max_nodes_per_job:
                    refused_pairs[int(pair[r])] = (
                        "too_many_nodes",
                        f"node beyond {lim.max_nodes_per_job} nodes of job {job[:64]!r}",
                    )
                    continue
                known.add(node)
        if refused_pairs:
            for r in rows[ok & np.isin(pair, list(refused_pairs))]:
                refused[int(r)] = refused_pairs[int(pair[r])]
        if not refused and not long_metrics.any():
            return batch, []
        self._tell(batch, refused)
        keep = np.ones(len(batch), dtype=bool)
        keep[list(refused)] = False
        kept = batch.take(np.flatnonzero(keep))
        # columns only refused rows had a value in go with them (as if those records never came)
        drop = long_metrics | (present.any(axis=0) & ~present[keep].any(axis=0))
        if drop.any():
            cols = np.flatnonzero(~drop)
            kept = kept.with_values(kept.values[:, cols], [batch.metrics[c] for c in cols])
        return _compact(kept), [(r, reason, detail) for r, (reason, detail) in sorted(refused.items())]

    def _tell(self, batch: Batch, refused: dict[int, tuple[str, str]]) -> None:
        """Say once per job and reason, in one line naming the limit, that it refuses the job's
        records: a job over a limit is told at its first refused record, not only counted."""
        for r, (reason, detail) in refused.items():
            job = batch.jobs[batch.job_idx[r]][:64]
            if (job, reason) in self.told or len(self.told) >= 4 * self.limits.max_jobs:
                continue
            self.told.add((job, reason))
            name = _LIMIT_OF[reason]
            log.warning(
                "limits.%s = %d refuses records of job %r (%s): dead-lettered as %s; raise it under limits:",
                name,
                getattr(self.limits, name),
                job,
                detail,
                reason,
                extra={"job": job, "reason": reason, "limit": name},
            )


#: the limit behind each reason of the guard
_LIMIT_OF = {
    "name_too_long": "max_name_length",
    "too_many_metrics": "max_metrics_per_sample",
    "too_many_nodes": "max_nodes_per_job",
    "too_many_jobs": "max_jobs",
}


def _compact(batch: Batch) -> Batch:
    """``batch`` with only the node and job names its rows use in its name tables (a refused
    row's name must not reach an operator that keys state by the table)."""
    nodes, node_idx = np.unique(batch.node_idx, return_inverse=True)
    jobs, job_idx = np.unique(batch.job_idx, return_inverse=True)
    return Batch(
        ts=batch.ts,
        node_idx=node_idx.astype(np.int64),
        values=batch.values,
        metrics=batch.metrics,
        nodes=tuple(batch.nodes[i] for i in nodes.tolist()),
        job_idx=job_idx.astype(np.int64),
        jobs=tuple(batch.jobs[i] for i in jobs.tolist()) or ("default",),
        seq=batch.seq,
        extra=batch.extra,
    )
