"""``otlp_proto`` for a whole poll at once: the wire reader (:mod:`._otlp_wire`) gives the gauges'
and sums' points as arrays; series names, nodes and jobs are resolved once per distinct
metric/attribute/resource bytes (cached), and each sample's values go into its row in one
``dict.update``. Cumulative counters take the same rate path as :class:`~.otlp.OtlpWalker`;
histograms, summaries, resources without a node attribute and messages the reader does not take
go through the generated classes (:class:`~.otlp.OtlpWalker`), so both paths give the same samples
(one difference: within one poll, a counter series' points are taken in time order here, in
arrival order by the walker).
"""

from __future__ import annotations

import itertools

import numpy as np
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric, NumberDataPoint
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from perfsift.formats.assemble import Assembler
from perfsift.formats.otlp._otlp_wire import GAUGE, SUM, WireArrays
from perfsift.formats.otlp.otlp_in import CUMULATIVE, NS, OtlpWalker, anyvalue
from perfsift.formats.settings import IngestSettings

Problem = tuple[int, str, str]  # message index, dead-letter kind, reason


class OtlpProtoBatch:
    """Decodes the ``otlp_proto`` messages of one poll into an assembler."""

    def __init__(self, asm: Assembler, walker: OtlpWalker) -> None:
        self.asm = asm
        self.walker = walker
        self._resources: dict[bytes, tuple[str | None, str]] = {}
        self._names: dict[tuple[int, int], str] = {}
        self._metric_names: dict[int, str] = {}

    def _resource(self, raw: bytes) -> tuple[str | None, str]:
        got = self._resources.get(raw)
        if got is None:
            w = self.walker
            res = {kv.key: kv.value for kv in Resource.FromString(raw).attributes}
            node = next((anyvalue(res[k]) for k in w.node_keys if k in res), None)
            job = anyvalue(res[w.job_key]) if w.job_key and w.job_key in res else w.job_default
            got = (node, job)
            if len(self._resources) < 100_000:
                self._resources[raw] = got
        return got

    def _slow(self, k: int, value: bytes, problems: list[Problem]) -> None:
        req = ExportMetricsServiceRequest()
        try:
            req.ParseFromString(value)
        except DecodeError as exc:
            problems.append((k, "malformed", f"not an OTLP ExportMetricsServiceRequest (protobuf): {exc}"))
            return
        self.walker.walk(req)
        problems += [(k, kind, reason) for kind, reason in self.asm.take_problems()]

    def __call__(self, values: list[bytes]) -> list[Problem]:
        """Decode ``values`` (one request each); the problems per message index. Each message is
        first parsed by the generated class (a few microseconds, in C): what it refuses is
        malformed, with its reason, and the wire reader only ever sees valid requests."""
        problems: list[Problem] = []
        index: list[int] = []
        for k, value in enumerate(values):
            try:
                ExportMetricsServiceRequest.FromString(value)
            except DecodeError as exc:
                problems.append((k, "malformed", f"not an OTLP ExportMetricsServiceRequest (protobuf): {exc}"))
            else:
                index.append(k)
        if len(index) < len(values):
            values = [values[k] for k in index]
        problems += [(index[k], kind, reason) for k, kind, reason in self._read(values)]
        return problems

    def _read(self, values: list[bytes]) -> list[Problem]:
        asm, walker = self.asm, self.walker
        problems: list[Problem] = []
        if not values:
            return problems
        lens = np.fromiter((len(v) for v in values), np.int64, len(values))
        ends = np.cumsum(lens)
        starts = ends - lens
        raw = b"".join(values)
        buf = np.frombuffer(raw, dtype=np.uint8)
        w = WireArrays(len(raw))
        bad = w.read(buf, starts, ends)
        n_pt, n_met, n_res = (int(x) for x in w.cnt)
        # resources: node and job (None: the points name their node: the walker's path)
        res_nj = [
            self._resource(raw[s:e]) if s >= 0 else (None, walker.job_default)
            for s, e in zip(w.res_start[:n_res].tolist(), w.res_end[:n_res].tolist(), strict=True)
        ]
        res_msg = w.res_msg[:n_res].tolist()
        met_res = w.met_res[:n_met]
        kind = w.met_kind[:n_met]
        has_node = np.fromiter((nj[0] is not None for nj in res_nj), np.bool_, n_res)
        fast = np.isin(kind, (GAUGE, SUM)) & (has_node[met_res] if n_res else np.zeros(n_met, np.bool_))
        # the metrics the fast path does not take: through the generated classes, one by one
        current = -1
        for m in np.flatnonzero(~fast).tolist():
            r = int(met_res[m])
            if res_msg[r] != current:  # problems are counted per message
                problems += [(current, kind_, reason) for kind_, reason in asm.take_problems()]
                current = res_msg[r]
            node, job = res_nj[r]
            walker._metric(Metric.FromString(raw[w.met_start[m] : w.met_end[m]]), job, node, asm)
        problems += [(current, kind_, reason) for kind_, reason in asm.take_problems()]
        for k in np.flatnonzero(bad).tolist():
            self._slow(k, values[k], problems)
        if n_pt:
            self._points(w, n_pt, fast, raw, res_nj, res_msg, problems)
        return problems

    def _name(self, w: WireArrays, m: int, p: int, raw: bytes) -> str:
        mh = int(w.met_name[m])
        base = self._metric_names.get(mh)
        if base is None:
            base = Metric.FromString(raw[w.met_start[m] : w.met_end[m]]).name
            self._metric_names[mh] = base
        a0, a1 = (int(x) for x in w.pt_arange[p])
        if a0 < 0:
            return base
        return self.walker._name(base, NumberDataPoint.FromString(raw[a0:a1]).attributes)

    def _points(
        self,
        w: WireArrays,
        n: int,
        fast: np.ndarray,
        raw: bytes,
        res_nj: list[tuple[str | None, str]],
        res_msg: list[int],
        problems: list[Problem],
    ) -> None:
        asm = self.asm
        pm = w.pt_met[:n]
        keep = fast[pm] & np.isfinite(w.pt_val[:n])
        idx = np.flatnonzero(keep)
        if not len(idx):
            return
        pm = pm[idx]
        attr = w.pt_attr[:n][idx]
        # series names: one per distinct (metric name, attributes)
        series = w.met_name[pm] ^ (attr * np.uint64(0x9E3779B97F4A7C15))
        uniq, first, inverse = np.unique(series, return_index=True, return_inverse=True)
        names_u = []
        for u, f in zip(uniq.tolist(), first.tolist(), strict=True):
            key = (u, 0)
            name = self._names.get(key)
            if name is None:
                name = self._name(w, int(pm[f]), int(idx[f]), raw)
                if len(self._names) < 100_000:
                    self._names[key] = name
            names_u.append(name)
        res = w.met_res[pm]
        times = w.pt_time[:n][idx]
        vals = w.pt_val[:n][idx]
        counter = (w.met_kind[pm] == SUM) & w.met_mono[pm] & asm.map.rates
        if counter.any():
            self._rates(w, np.flatnonzero(counter), pm, res, times, vals, inverse, names_u, res_nj, idx, n)
        # one sample per (resource, time): contiguous runs after a stable sort
        order = np.lexsort((times, res))
        rs, ts = res[order], times[order]
        cut = np.flatnonzero((rs[1:] != rs[:-1]) | (ts[1:] != ts[:-1])) + 1
        bounds = [0, *cut.tolist(), len(order)]
        names_s = np.array(names_u, dtype=object)[inverse[order]].tolist()
        sorted_vals = vals[order]
        vals_s: list[float | None] = sorted_vals.tolist()
        for i in np.flatnonzero(np.isnan(sorted_vals)).tolist():  # a counter's first point or reset: missing
            vals_s[i] = None
        ts_l, rs_l = ts.tolist(), rs.tolist()
        asm.points += len(idx)
        current = -1
        for a, b in itertools.pairwise(bounds):
            r = rs_l[a]
            node, job = res_nj[r]
            assert node is not None
            if res_msg[r] != current:  # late points are counted per message
                problems += [(current, kind, reason) for kind, reason in asm.take_problems()]
                current = res_msg[r]
            row = asm.row(job, node, ts_l[a] * NS)
            if row is not None:
                row.update(zip(names_s[a:b], vals_s[a:b], strict=True))
        problems += [(current, kind, reason) for kind, reason in asm.take_problems()]

    def _rates(
        self,
        w: WireArrays,
        ci: np.ndarray,
        pm: np.ndarray,
        res: np.ndarray,
        times: np.ndarray,
        vals: np.ndarray,
        inverse: np.ndarray,
        names_u: list[str],
        res_nj: list[tuple[str | None, str]],
        idx: np.ndarray,
        n: int,
    ) -> None:
        """Monotonic sums at ``ci`` (positions among the kept points) to per-second rates in
        ``vals``, as :meth:`Assembler.rate` does point by point: from the previous point of the
        series (in this poll, else the assembler's counter state), NaN at the first point, after a
        reset or without time passing; the state of each series' last point goes back to the
        assembler. Delta sums: value / interval."""
        asm = self.asm
        nj_ids: dict[tuple[str | None, str], int] = {}
        nj = np.fromiter((nj_ids.setdefault(x, len(nj_ids)) for x in res_nj), np.int64, len(res_nj))
        key = nj[res[ci]] * (len(names_u) + 1) + inverse[ci]
        o = np.lexsort((times[ci], key))
        pos = ci[o]
        k_s = key[o]
        t_s = times[pos] * NS
        v_s = vals[pos]
        st_s = w.pt_start[:n][idx][pos] * NS
        cum = w.met_temp[pm[pos]] == CUMULATIVE
        first = np.ones(len(o), dtype=np.bool_)
        first[1:] = k_s[1:] != k_s[:-1]
        prev_t, prev_v, prev_st = np.empty(len(o)), np.empty(len(o)), np.empty(len(o))
        prev_t[1:], prev_v[1:], prev_st[1:] = t_s[:-1], v_s[:-1], st_s[:-1]
        starts = np.flatnonzero(first)
        lasts = np.append(starts[1:] - 1, len(o) - 1)
        series = []
        for f in starts.tolist():
            p = int(pos[f])
            node, job = res_nj[int(res[p])]
            assert node is not None  # the fast path takes resources that name their node
            skey = (job, node, names_u[int(inverse[p])])
            series.append(skey)
            prev = asm.counters.get(skey) if cum[f] else None
            prev_t[f], prev_v[f], prev_st[f] = prev if prev is not None else (np.nan, np.nan, np.nan)
        for skey, last in zip(series, lasts.tolist(), strict=True):
            if cum[last]:
                asm.counters[skey] = (float(t_s[last]), float(v_s[last]), float(st_s[last]))
        with np.errstate(invalid="ignore", divide="ignore"):
            dt = t_s - prev_t
            ok = (v_s >= prev_v) & (st_s == prev_st) & (dt > 0)
            rate = np.where(ok, (v_s - prev_v) / dt, np.nan)
            span = t_s - st_s
            delta = np.where((st_s > 0) & (span > 0), v_s / span, np.nan)
        vals[pos] = np.where(cum, rate, delta)


def warm_up(settings: IngestSettings) -> None:
    """Compile (or load from numba's cache) the wire reader on a one-point request."""
    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    kv = rm.resource.attributes.add(key="host.name")
    kv.value.string_value = "warm-up"
    rm.scope_metrics.add().metrics.add(name="m").gauge.data_points.add(time_unix_nano=1, as_double=1.0)
    OtlpProtoBatch(Assembler(settings), OtlpWalker(Assembler(settings)))([req.SerializeToString()])
