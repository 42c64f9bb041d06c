"""A numba reader of the OTLP metrics protobuf wire format: the gauges and sums of many
``ExportMetricsServiceRequest`` messages at once into flat arrays, without a Python object per
data point (the generated classes cost about a microsecond per field read; this reads a poll's
messages in one call).

Only what the fast path needs is read: per resource the byte range of its ``Resource`` message
(the caller parses that with the generated class, once per distinct resource), per metric its
name, kind (gauge, sum, other), monotonicity and temporality, and per gauge or sum data point its
time, start time, value and a hash of its attributes' bytes (the caller names the series once
per distinct hash). Histograms, summaries and exponential histograms are reported by byte range
and read by the generated classes. A message that does not parse is flagged; the caller then
reads it with the generated classes too (which report why it is not a request).
"""

from __future__ import annotations

import numpy as np
import perfsift.operators._numba  # noqa: F401  (the numba cache location, before any njit)
from numba import njit

FNV_OFFSET = np.uint64(14695981039346656037)
FNV_PRIME = np.uint64(1099511628211)

# metric kinds
GAUGE, SUM, OTHER = 1, 2, 3


@njit(cache=True)
def _varint(buf, pos, end):  # type: ignore[no-untyped-def]
    result = 0
    shift = 0
    while pos < end:
        b = np.int64(buf[pos])
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            return -1, -1
    return -1, -1


@njit(cache=True)
def _fixed64(buf, pos):  # type: ignore[no-untyped-def]
    v = np.uint64(0)
    for i in range(8):
        v |= np.uint64(buf[pos + i]) << np.uint64(8 * i)
    return v


@njit(cache=True)
def _hash(buf, start, end):  # type: ignore[no-untyped-def]
    h = FNV_OFFSET
    for i in range(start, end):
        h = (h ^ np.uint64(buf[i])) * FNV_PRIME
    return h


@njit(cache=True)
def _skip(buf, pos, end, wt):  # type: ignore[no-untyped-def]
    """Position after a field's value of wire type ``wt`` (-1 when it does not fit)."""
    if wt == 0:
        _, pos = _varint(buf, pos, end)
        return pos
    if wt == 1:
        return pos + 8 if pos + 8 <= end else -1
    if wt == 2:
        n, pos = _varint(buf, pos, end)
        if n < 0 or pos + n > end:
            return -1
        return pos + n
    if wt == 5:
        return pos + 4 if pos + 4 <= end else -1
    return -1


@njit(cache=True)
def _point(buf, pos, end, met, cnt, pt_met, pt_time, pt_start, pt_val, pt_attr, pt_arange, fbuf):  # type: ignore[no-untyped-def]
    """One NumberDataPoint in [pos, end); False when it does not parse."""
    i = cnt[0]
    if i >= len(pt_met):
        return False
    t = np.uint64(0)
    st = np.uint64(0)
    val = 0.0
    h = FNV_OFFSET
    has_attr = False
    a0 = -1
    a1 = -1
    while pos < end:
        here = pos
        tag, pos = _varint(buf, pos, end)
        if tag < 0:
            return False
        field = tag >> 3
        wt = tag & 7
        if wt == 1 and pos + 8 <= end and (field == 2 or field == 3 or field == 4 or field == 6):
            v = _fixed64(buf, pos)
            if field == 2:
                st = v
            elif field == 3:
                t = v
            elif field == 4:
                fbuf[0] = v
                val = fbuf.view(np.float64)[0]
            else:
                val = float(np.int64(v))
            pos += 8
        elif field == 7 and wt == 2:
            n, p2 = _varint(buf, pos, end)
            if n < 0 or p2 + n > end:
                return False
            for j in range(pos, p2 + n):  # the KeyValue with its length: the series' identity
                h = (h ^ np.uint64(buf[j])) * FNV_PRIME
            has_attr = True
            if a0 < 0:
                a0 = here
            a1 = p2 + n
            pos = p2 + n
        else:
            pos = _skip(buf, pos, end, wt)
            if pos < 0:
                return False
    pt_met[i] = met
    pt_time[i] = np.int64(t)
    pt_start[i] = np.int64(st)
    pt_val[i] = val
    pt_attr[i] = h if has_attr else np.uint64(0)
    pt_arange[i, 0] = a0
    pt_arange[i, 1] = a1
    cnt[0] = i + 1
    return True


@njit(cache=True)
def _data(buf, pos, end, met, cnt, met_mono, met_temp, pt_met, pt_time, pt_start, pt_val, pt_attr, pt_arange, fbuf):  # type: ignore[no-untyped-def]
    """A Gauge or Sum message: its points, and a sum's temporality and monotonicity."""
    while pos < end:
        tag, pos = _varint(buf, pos, end)
        if tag < 0:
            return False
        field = tag >> 3
        wt = tag & 7
        if field == 1 and wt == 2:
            n, pos = _varint(buf, pos, end)
            if n < 0 or pos + n > end:
                return False
            if not _point(buf, pos, pos + n, met, cnt, pt_met, pt_time, pt_start, pt_val, pt_attr, pt_arange, fbuf):
                return False
            pos += n
        elif (field == 2 or field == 3) and wt == 0:
            v, pos = _varint(buf, pos, end)
            if pos < 0:
                return False
            if field == 2:
                met_temp[met] = v
            else:
                met_mono[met] = v != 0
        else:
            pos = _skip(buf, pos, end, wt)
            if pos < 0:
                return False
    return True


@njit(cache=True)
def read_requests(  # type: ignore[no-untyped-def]
    buf,
    starts,
    ends,
    cnt,
    res_msg,
    res_start,
    res_end,
    met_res,
    met_name,
    met_kind,
    met_mono,
    met_temp,
    met_start,
    met_end,
    pt_met,
    pt_time,
    pt_start,
    pt_val,
    pt_attr,
    pt_arange,
    bad,
):
    """Read messages ``buf[starts[k]:ends[k]]``; ``cnt`` = [points, metrics, resources]. A message
    that does not parse (or overflows the arrays) has ``bad[k]`` set and leaves nothing behind."""
    fbuf = np.zeros(1, dtype=np.uint64)
    for k in range(len(starts)):
        saved0, saved1, saved2 = cnt[0], cnt[1], cnt[2]
        ok = True
        pos, end = starts[k], ends[k]
        while ok and pos < end:  # ExportMetricsServiceRequest
            tag, pos = _varint(buf, pos, end)
            if tag < 0:
                ok = False
                break
            if tag != 10:  # field 1, resource_metrics
                pos = _skip(buf, pos, end, tag & 7)
                ok = pos >= 0
                continue
            n, pos = _varint(buf, pos, end)
            if n < 0 or pos + n > end or cnt[2] >= len(res_msg):
                ok = False
                break
            r = cnt[2]
            cnt[2] = r + 1
            res_msg[r] = k
            res_start[r] = -1
            res_end[r] = -1
            p, rend = pos, pos + n
            pos = rend
            while ok and p < rend:  # ResourceMetrics
                tag, p = _varint(buf, p, rend)
                if tag < 0:
                    ok = False
                    break
                if tag == 10:  # resource
                    n2, p = _varint(buf, p, rend)
                    if n2 < 0 or p + n2 > rend:
                        ok = False
                        break
                    res_start[r] = p
                    res_end[r] = p + n2
                    p += n2
                elif tag == 18:  # scope_metrics
                    n2, p = _varint(buf, p, rend)
                    if n2 < 0 or p + n2 > rend:
                        ok = False
                        break
                    q, send = p, p + n2
                    p = send
                    while ok and q < send:  # ScopeMetrics
                        tag, q = _varint(buf, q, send)
                        if tag < 0:
                            ok = False
                            break
                        if tag != 18:  # metrics
                            q = _skip(buf, q, send, tag & 7)
                            ok = q >= 0
                            continue
                        n3, q = _varint(buf, q, send)
                        if n3 < 0 or q + n3 > send or cnt[1] >= len(met_res):
                            ok = False
                            break
                        m = cnt[1]
                        cnt[1] = m + 1
                        met_res[m] = r
                        met_kind[m] = 0
                        met_mono[m] = False
                        met_temp[m] = 0
                        met_name[m] = 0
                        met_start[m] = q
                        met_end[m] = q + n3
                        x, mend = q, q + n3
                        q = mend
                        while ok and x < mend:  # Metric
                            tag, x = _varint(buf, x, mend)
                            if tag < 0:
                                ok = False
                                break
                            field, wt = tag >> 3, tag & 7
                            if wt == 2 and (field == 1 or field == 5 or field == 7 or field >= 9):
                                n4, x = _varint(buf, x, mend)
                                if n4 < 0 or x + n4 > mend:
                                    ok = False
                                    break
                                if field == 1:
                                    met_name[m] = _hash(buf, x, x + n4)
                                elif field == 5 or field == 7:
                                    met_kind[m] = GAUGE if field == 5 else SUM
                                    ok = _data(
                                        buf,
                                        x,
                                        x + n4,
                                        m,
                                        cnt,
                                        met_mono,
                                        met_temp,
                                        pt_met,
                                        pt_time,
                                        pt_start,
                                        pt_val,
                                        pt_attr,
                                        pt_arange,
                                        fbuf,
                                    )
                                elif field <= 11:
                                    met_kind[m] = OTHER
                                x += n4
                            else:
                                x = _skip(buf, x, mend, wt)
                                ok = x >= 0
                else:
                    p = _skip(buf, p, rend, tag & 7)
                    ok = p >= 0
        if not ok:
            bad[k] = True
            cnt[0], cnt[1], cnt[2] = saved0, saved1, saved2


class WireArrays:
    """The arrays :func:`read_requests` fills for ``size`` bytes of messages (capacities are
    generous for OTLP; a message that would overflow them is read by the generated classes)."""

    def __init__(self, size: int) -> None:
        pts, mets, res = size // 12 + 16, size // 24 + 16, size // 64 + 16
        self.cnt = np.zeros(3, dtype=np.int64)
        self.res_msg = np.empty(res, dtype=np.int64)
        self.res_start = np.empty(res, dtype=np.int64)
        self.res_end = np.empty(res, dtype=np.int64)
        self.met_res = np.empty(mets, dtype=np.int64)
        self.met_name = np.empty(mets, dtype=np.uint64)
        self.met_kind = np.empty(mets, dtype=np.int64)
        self.met_mono = np.empty(mets, dtype=np.bool_)
        self.met_temp = np.empty(mets, dtype=np.int64)
        self.met_start = np.empty(mets, dtype=np.int64)
        self.met_end = np.empty(mets, dtype=np.int64)
        self.pt_met = np.empty(pts, dtype=np.int64)
        self.pt_time = np.empty(pts, dtype=np.int64)
        self.pt_start = np.empty(pts, dtype=np.int64)
        self.pt_val = np.empty(pts, dtype=np.float64)
        self.pt_attr = np.empty(pts, dtype=np.uint64)
        self.pt_arange = np.empty((pts, 2), dtype=np.int64)

    def read(self, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Read the messages; returns which did not parse."""
        bad = np.zeros(len(starts), dtype=np.bool_)
        read_requests(
            buf,
            starts,
            ends,
            self.cnt,
            self.res_msg,
            self.res_start,
            self.res_end,
            self.met_res,
            self.met_name,
            self.met_kind,
            self.met_mono,
            self.met_temp,
            self.met_start,
            self.met_end,
            self.pt_met,
            self.pt_time,
            self.pt_start,
            self.pt_val,
            self.pt_attr,
            self.pt_arange,
            bad,
        )
        return bad
