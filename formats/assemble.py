"""Long records to wide samples: points of one (job, node) gathered per timestamp, emitted after a
bounded wall-clock delay, and cumulative counters turned into rates.

A decoder asks :meth:`Assembler.row` for the metrics of ``(job, node, ts)`` and sets values in it.
A row is emitted by :meth:`Assembler.due` at the latest ``max_delay`` seconds (wall clock) after
its first point arrived, together with every older row of the same (job, node), so each node's
samples leave in time order. A point for a timestamp at or before one already emitted for its
(job, node) is *late*: it is not used, and the decoder's caller dead-letters its message.

Counters follow the clean operator (``operators/clean/clean.py``): a per-second rate from consecutive
points of the same series, missing (null) at the first point and after a reset (the value goes
down, or the series' start time changes).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np
import orjson
from perfsift.formats.settings import IngestMap, IngestSettings
from perfsift.operators.batch import Batch

Row = dict[str, float | None]
#: (job, node, ts, metrics) of one assembled sample
Sample = tuple[str, str, float, Row]


class IngestError(ValueError):
    """A message that cannot be used; ``kind`` is its dead-letter reason label (malformed, unmapped)."""

    def __init__(self, reason: str, kind: str = "malformed") -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind


class Assembler:
    """The pending samples, counter state and per-(job, node) watermarks of one input partition."""

    def __init__(self, settings: IngestSettings) -> None:
        self.settings = settings
        self.map: IngestMap = settings.map
        self.max_delay = settings.max_delay
        self._align = settings.map.align
        #: pending rows: (job, node) -> ts -> metrics
        self.rows: dict[tuple[str, str], dict[float, Row]] = {}
        #: (arrival time, job, node, ts) in arrival order
        self._arrivals: deque[tuple[float, str, str, float]] = deque()
        #: latest timestamp emitted per (job, node)
        self.emitted: dict[tuple[str, str], float] = {}
        #: counter series -> (ts, value, start time or buckets)
        self.counters: dict[tuple[str, str, str], tuple[float, Any, float]] = {}
        #: wall-clock (monotonic) time the current message arrived
        self.now = 0.0
        #: late and unmapped points of the current message (reset by :meth:`take_problems`)
        self.late = 0
        self.late_at: tuple[str, str, float] | None = None
        self.unmapped = 0
        self.unmapped_why = ""
        self.points = 0
        #: series of the current message that mapped onto a name another series had (dead-lettered)
        self.collided: list[str] = []
        #: most metrics a sample keeps (the stage's ``max_metrics_per_sample``; None: no cap)
        self.max_metrics: int | None = None
        #: metric values left out by the cap since the last :meth:`take_dropped`
        self.dropped = 0
        #: the names each (job, node) keeps once it went over the cap: the same ones every time
        self.admitted: dict[tuple[str, str], dict[str, None]] = {}

    # -- decoding side ---------------------------------------------------------------------------------
    def row(self, job: str, node: str, ts: float) -> Row | None:
        """The metrics of the sample (job, node, ts), created if new; None when it is late."""
        if self._align > 0:
            ts = math.floor(ts / self._align) * self._align
        sk = (job, node)
        rows = self.rows.get(sk)
        if rows is None:
            rows = self.rows[sk] = {}
        r = rows.get(ts)
        if r is None:
            last = self.emitted.get(sk)
            if last is not None and ts <= last:
                self.late += 1
                self.late_at = (job, node, ts)
                return None
            r = rows[ts] = {}
            self._arrivals.append((self.now, job, node, ts))
        return r

    def rate(
        self, job: str, node: str, name: str, ts: float, value: float, start: float, signed: bool = False
    ) -> float | None:
        """Per-second rate of a cumulative counter from its previous point (None at the first point,
        after a reset or when time does not advance). ``signed``: the value may go down (collectd's
        ``derive``), which is a negative rate, not a reset."""
        key = (job, node, name)
        prev = self.counters.get(key)
        self.counters[key] = (ts, value, start)
        if prev is None:
            return None
        pts, pv, pstart = prev
        dt = ts - pts
        if (value < pv and not signed) or start != pstart or dt <= 0:
            return None
        return (value - pv) / dt

    def window(self, job: str, node: str, name: str, ts: float, counts: list[int], start: float) -> list[int] | None:
        """Bucket counts of a cumulative histogram since its previous point (None at the first point
        or after a reset), for quantiles of the recent interval."""
        key = (job, node, name)
        prev = self.counters.get(key)
        self.counters[key] = (ts, counts, start)
        if prev is None:
            return None
        _, pc, pstart = prev
        if start != pstart or len(pc) != len(counts):
            return None
        d = [a - b for a, b in zip(counts, pc, strict=True)]
        return None if min(d, default=0) < 0 else d

    def unmapped_point(self, n: int, why: str) -> None:
        self.unmapped += n
        self.unmapped_why = why

    def collision(self, names: list[str]) -> None:
        """Series of the current message whose names another series of it already had."""
        self.collided += names

    def take_problems(self) -> list[tuple[str, str]]:
        """(dead-letter kind, reason) for the late, unmapped and colliding points since the last call."""
        out = []
        if self.collided:
            names = sorted(set(self.collided))
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            why = (
                f"{len(self.collided)} series map onto a name another series of the message had ({shown}): "
                "the first kept, the others dropped; check the map's attributes and rename"
            )
            out.append(("collision", why))
            self.collided = []
        if self.late:
            job, node, ts = self.late_at or ("", "", 0.0)
            out.append(
                (
                    "late",
                    f"{self.late} points arrived after their sample was emitted (max-delay "
                    f"{self.max_delay:g} s), e.g. job {job!r} node {node!r} ts {ts!r}",
                )
            )
        if self.unmapped:
            out.append(("unmapped", f"{self.unmapped} points not mapped to a sample: {self.unmapped_why}"))
        self.late = self.unmapped = 0
        return out

    # -- emitting side ---------------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        return sum(len(r) for r in self.rows.values())

    def due(self, now: float, everything: bool = False) -> list[Sample]:
        """Rows whose first point arrived ``max_delay`` or more before ``now`` (all with
        ``everything``), each with the older rows of its (job, node); in time order per node."""
        cutoff = now - self.max_delay
        top: dict[tuple[str, str], float] = {}
        arrivals, rows = self._arrivals, self.rows
        while arrivals and (everything or arrivals[0][0] <= cutoff):
            _, job, node, ts = arrivals.popleft()
            sk = (job, node)
            if ts in rows.get(sk, ()) and top.get(sk, -math.inf) < ts:
                top[sk] = ts
        out: list[Sample] = []
        for sk, last in top.items():
            series = rows[sk]
            if len(series) == 1:  # the common case: one pending row, the one that is due
                out.append((sk[0], sk[1], last, series.pop(last)))
            else:
                for ts in sorted(t for t in series if t <= last):
                    out.append((sk[0], sk[1], ts, series.pop(ts)))
            if not series:
                del rows[sk]
            self.emitted[sk] = max(last, self.emitted.get(sk, -math.inf))
        if out and len(arrivals) > 4 * self.pending + 64:  # entries of rows emitted with a newer one
            self._arrivals = deque(a for a in arrivals if a[3] in rows.get((a[1], a[2]), ()))
        return out

    def take_dropped(self) -> int:
        """Metric values the cap left out since the last call."""
        n, self.dropped = self.dropped, 0
        return n

    def _cap(self, sample: Sample) -> Sample:
        """``sample`` with at most ``max_metrics`` of its kept metrics: those its (job, node) kept
        before, then the others in name order while there is room; the rest counted as dropped."""
        job, node, ts, metrics = sample
        m, cap = self.map, self.max_metrics
        assert cap is not None
        names = [k for k in metrics if not m.filters or m.keep(m.rename.get(k, k))]
        if len(names) <= cap:
            return sample
        admitted = self.admitted.setdefault((job, node), {})
        chosen = [k for k in names if k in admitted]
        if len(chosen) < cap:
            fresh = sorted(k for k in names if k not in admitted)[: cap - len(chosen)]
            admitted.update(dict.fromkeys(fresh))
            chosen += fresh
        chosen = sorted(chosen)[:cap]
        self.dropped += len(names) - len(chosen)
        return (job, node, ts, {k: metrics[k] for k in chosen})

    def to_batch(self, samples: list[Sample]) -> Batch:
        """The samples as a column batch (renames, include and exclude applied to the columns;
        at most ``max_metrics`` metrics a sample)."""
        m = self.map
        if self.max_metrics is not None:
            cap = self.max_metrics
            samples = [s if len(s[3]) <= cap else self._cap(s) for s in samples]
        names: dict[str, int] = {}
        final: dict[str, int] = {}
        groups: dict[tuple[str, ...], list[int]] = {}
        for i, (_, _, _, metrics) in enumerate(samples):
            groups.setdefault(tuple(metrics), []).append(i)
        for keys in groups:
            for k in keys:
                if k not in names:
                    new = m.rename.get(k, k) if m.rename else k
                    names[k] = final.setdefault(new, len(final)) if not m.filters or m.keep(new) else -1
        values = np.full((len(samples), len(final)), np.nan)
        for keys, idx in groups.items():
            cols = [names[k] for k in keys]
            block = np.array([list(samples[i][3].values()) for i in idx], dtype=np.float64).reshape(len(idx), len(keys))
            if min(cols, default=0) < 0:
                keep = [j for j, c in enumerate(cols) if c >= 0]
                block, cols = block[:, keep], [cols[j] for j in keep]
            values[np.ix_(idx, cols)] = block
        nodes: dict[str, int] = {}
        jobs: dict[str, int] = {}
        node_idx = np.fromiter((nodes.setdefault(s[1], len(nodes)) for s in samples), np.int64, len(samples))
        job_idx = np.fromiter((jobs.setdefault(s[0], len(jobs)) for s in samples), np.int64, len(samples))
        ts = np.fromiter((s[2] for s in samples), np.float64, len(samples))
        return Batch(
            ts=ts,
            node_idx=node_idx,
            values=values,
            metrics=tuple(final),
            nodes=tuple(nodes),
            job_idx=job_idx,
            jobs=tuple(jobs) or ("default",),
            seq=np.full(len(samples), -1, dtype=np.int64),
        )

    # -- state -----------------------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        return orjson.dumps(
            {
                "rows": [[j, n, ts, r] for (j, n), series in self.rows.items() for ts, r in series.items()],
                "emitted": [[j, n, ts] for (j, n), ts in self.emitted.items()],
                "counters": [[j, n, name, *v] for (j, n, name), v in self.counters.items()],
                "admitted": [[j, n, list(names)] for (j, n), names in self.admitted.items()],
            }
        )

    def restore(self, blob: bytes, now: float) -> None:
        """Load a snapshot; its pending rows count as arrived at ``now``."""
        doc = orjson.loads(blob)
        self.rows, self._arrivals = {}, deque()
        for j, n, ts, r in doc["rows"]:
            self.rows.setdefault((j, n), {})[ts] = r
            self._arrivals.append((now, j, n, ts))
        self.emitted = {(j, n): ts for j, n, ts in doc["emitted"]}
        self.counters = {(j, n, name): (ts, v, start) for j, n, name, ts, v, start in doc["counters"]}
        self.admitted = {(j, n): dict.fromkeys(names) for j, n, names in doc.get("admitted", [])}
