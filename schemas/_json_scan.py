"""The raw sample shape decoded at C speed: a numba scanner over many concatenated JSON messages.

It accepts only the exact shape perfsift's producers write,

    {"ts":NUM,"node":"STR","job":"STR","seq":INT,"metrics":{"NAME":NUM,...}}

(these keys in this order, JSON whitespace anywhere between tokens, every message with the
metric names of the first in the same order, strings of printable ASCII without escapes, numbers
of at most 19 significant digits with a normal double value). Anything else - an escape, a null,
another key order, a big or non-finite number, a byte it does not expect - makes it give up on
the whole micro-batch, and the caller decodes it with orjson as before; so a batch it accepts
gives exactly the batch the orjson path gives, and the error messages come from that path.

Numbers are converted with the Eisel-Lemire algorithm (D. Lemire, "Number Parsing at a Gigabyte
per Second", Softw. Pract. Exp. 51(8), 2021; the form of Rust's ``core::num::dec2flt``), which
rounds correctly, as orjson does; the rare cases it cannot decide give up too. An integer's
negative zero is +0.0 (orjson makes ``-0`` the int 0), a fraction's is -0.0.
"""

from __future__ import annotations

import numpy as np
import perfsift.operators._numba  # noqa: F401  (numba's cache folder, before any @njit(cache=True))
from numba import njit


def _pow5_table() -> tuple[np.ndarray, np.ndarray]:
    """High and low 64-bit words of 5**q for q in [-342, 308], normalised to 128 bits (truncated;
    for q < 0 the reciprocal, rounded up as in the reference tables)."""
    hi, lo = [], []
    for q in range(-342, 309):
        if q < 0:
            p = 5**-q
            z = p.bit_length()  # smallest z with 2**z >= p (p is never a power of two)
            c = (1 << (z + 127)) // p + 1 if q >= -27 else (1 << (2 * z + 128)) // p + 1
            while c >= 1 << 128:
                c >>= 1
        else:
            c = 5**q
            while c < 1 << 127:
                c <<= 1
            while c >= 1 << 128:
                c >>= 1
        hi.append(c >> 64)
        lo.append(c & ((1 << 64) - 1))
    return np.array(hi, dtype=np.uint64), np.array(lo, dtype=np.uint64)


POW5_HI, POW5_LO = _pow5_table()

_U0 = np.uint64(0)
_U1 = np.uint64(1)
_U32 = np.uint64(32)
_M32 = np.uint64(0xFFFFFFFF)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_TOP = np.uint64(1 << 63)
_MASK55 = np.uint64(0xFFFFFFFFFFFFFFFF >> 55)  # precision = 52 explicit bits + 3
_HIDDEN = np.uint64(1 << 52)
_OVERFLOW = np.uint64(2 << 52)
_TEN = np.uint64(10)
_D0 = np.uint64(48)
_NINE = np.uint64(9)


@njit(cache=True, inline="always")
def _mul128(a: np.uint64, b: np.uint64) -> tuple[np.uint64, np.uint64]:  # pragma: no cover - numba
    """(low, high) 64-bit words of the 128-bit product a * b."""
    a_lo, a_hi = a & _M32, a >> _U32
    b_lo, b_hi = b & _M32, b >> _U32
    p0, p1, p2, p3 = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi
    mid = (p0 >> _U32) + (p1 & _M32) + (p2 & _M32)
    return (p0 & _M32) | (mid << _U32), p3 + (p1 >> _U32) + (p2 >> _U32) + (mid >> _U32)


@njit(cache=True, inline="always")
def _to_bits(q: int, w: np.uint64, hi5: np.ndarray, lo5: np.ndarray) -> tuple[np.uint64, bool]:  # pragma: no cover
    """IEEE bits (sign clear) of w * 10**q, correctly rounded, for w > 0; False where Eisel-Lemire
    cannot decide or the value is subnormal, zero or infinite (the caller gives up)."""
    if q < -342 or q > 308:
        return _U0, False
    lz = 0
    for s in (32, 16, 8, 4, 2, 1):
        if w < (_U1 << np.uint64(64 - s)):
            w = w << np.uint64(s)
            lz += s
    i = q + 342
    lo, hi = _mul128(w, hi5[i])
    if hi & _MASK55 == _MASK55:
        _, hi2 = _mul128(w, lo5[i])
        lo = lo + hi2
        if hi2 > lo:
            hi = hi + _U1
    if lo == _ALL and not (-27 <= q <= 55):
        return _U0, False
    upper = 1 if hi & _TOP else 0
    mantissa = hi >> np.uint64(upper + 9)
    power2 = ((q * (152170 + 65536)) >> 16) + 63 + upper - lz + 1023
    if power2 <= 0:
        return _U0, False  # subnormal or zero
    if lo <= _U1 and -4 <= q <= 23 and mantissa & np.uint64(3) == _U1 and (mantissa << np.uint64(upper + 9)) == hi:
        mantissa = mantissa & ~_U1
    mantissa = (mantissa + (mantissa & _U1)) >> _U1
    if mantissa >= _OVERFLOW:
        mantissa = _HIDDEN
        power2 += 1
    if power2 >= 0x7FF:
        return _U0, False
    return (mantissa & ~_HIDDEN) | (np.uint64(power2) << np.uint64(52)), True


@njit(cache=True, inline="always")
def _skip_ws(buf: np.ndarray, i: int, end: int) -> int:  # pragma: no cover - numba
    while i < end and (buf[i] == 32 or buf[i] == 10 or buf[i] == 13 or buf[i] == 9):
        i += 1
    return i


@njit(cache=True, inline="always")
def _literal(buf: np.ndarray, i: int, end: int, text: np.ndarray) -> int:  # pragma: no cover - numba
    """Position after ``text`` (whitespace skipped before it), or -1 if it is not there."""
    i = _skip_ws(buf, i, end)
    if i + len(text) > end:
        return -1
    for j in range(len(text)):
        if buf[i + j] != text[j]:
            return -1
    return i + len(text)


@njit(cache=True, inline="always")
def _key(
    buf: np.ndarray, i: int, end: int, before: np.ndarray, key: np.ndarray, colon: np.ndarray
) -> int:  # pragma: no cover
    """Position after ``before key :`` (whitespace allowed around each), or -1."""
    i = _literal(buf, i, end, before)
    if i >= 0:
        i = _literal(buf, i, end, key)
    if i >= 0:
        i = _literal(buf, i, end, colon)
    return i


@njit(cache=True, inline="always")
def _string(buf: np.ndarray, i: int, end: int) -> tuple[int, int]:  # pragma: no cover - numba
    """(start, end) of a string's contents at i (whitespace skipped): printable ASCII without
    escapes only; (-1, -1) otherwise."""
    i = _skip_ws(buf, i, end)
    if i >= end or buf[i] != 34:
        return -1, -1
    start = i + 1
    i = start
    while i < end:
        c = buf[i]
        if c == 34:
            return start, i
        if c < 32 or c > 126 or c == 92:
            return -1, -1
        i += 1
    return -1, -1


@njit(cache=True, inline="always")
def _number(
    buf: np.ndarray, i: int, end: int, hi5: np.ndarray, lo5: np.ndarray
) -> tuple[int, np.uint64, bool, np.int64 | int]:  # pragma: no cover - numba
    """A JSON number at i (whitespace skipped): (position after it or -1, float64 bits, whether
    it is an integer literal of at most 18 digits, that integer)."""
    i = _skip_ws(buf, i, end)
    neg = False
    if i < end and buf[i] == 45:
        neg = True
        i += 1
    if i >= end or buf[i] < 48 or buf[i] > 57:
        return -1, _U0, False, 0
    # the digits accumulate without a check each: the significant ones (from the first non-zero
    # digit on) are counted after the loops, and more than 19 give up (w may have wrapped then)
    w = _U0
    lead = buf[i] == 48  # a leading 0 is the whole integer part
    start = i
    if lead:
        i += 1
    else:
        while i < end:
            d = np.uint64(buf[i]) - _D0
            if d > _NINE:
                break
            w = w * _TEN + d
            i += 1
    nd = 0 if lead else i - start
    is_int = True
    q = 0
    if i < end and buf[i] == 46:
        is_int = False
        i += 1
        frac = i
        while i < end:
            d = np.uint64(buf[i]) - _D0
            if d > _NINE:
                break
            w = w * _TEN + d
            i += 1
        if i == frac:
            return -1, _U0, False, 0
        q = frac - i
        if lead:  # 0.000123: the zeros before the first non-zero digit are not significant
            z = frac
            while z < i and buf[z] == 48:
                z += 1
            nd = i - z
        else:
            nd += i - frac
    if nd > 19:
        return -1, _U0, False, 0
    if i < end and (buf[i] == 101 or buf[i] == 69):
        is_int = False
        i += 1
        eneg = False
        if i < end and (buf[i] == 43 or buf[i] == 45):
            eneg = buf[i] == 45
            i += 1
        if i >= end or buf[i] < 48 or buf[i] > 57:
            return -1, _U0, False, 0
        e = 0
        while i < end and 48 <= buf[i] <= 57:
            if e < 100000:
                e = e * 10 + (buf[i] - 48)
            i += 1
        q += -e if eneg else e
    sign = _TOP if neg and not is_int else _U0  # -0 is the int 0, -0.0 a negative float
    if w == _U0:
        return i, sign, is_int, 0
    bits, ok = _to_bits(q, w, hi5, lo5)
    if not ok:
        return -1, _U0, False, 0
    if is_int and nd <= 18:
        return i, bits | (_TOP if neg else _U0), True, -np.int64(w) if neg else np.int64(w)
    return i, bits | (_TOP if neg else _U0), False, 0  # (a 19-digit integer is no seq)


# the fixed parts of the shape, as bytes (whitespace may precede each)
_TS = np.frombuffer(b'"ts"', dtype=np.uint8)
_COLON = np.frombuffer(b":", dtype=np.uint8)
_NODE = np.frombuffer(b'"node"', dtype=np.uint8)
_JOB = np.frombuffer(b'"job"', dtype=np.uint8)
_SEQ = np.frombuffer(b'"seq"', dtype=np.uint8)
_METRICS = np.frombuffer(b'"metrics"', dtype=np.uint8)
_OPEN = np.frombuffer(b"{", dtype=np.uint8)
_COMMA = np.frombuffer(b",", dtype=np.uint8)
_CLOSE = np.frombuffer(b"}", dtype=np.uint8)


@njit(cache=True)
def _scan(
    buf: np.ndarray,
    offsets: np.ndarray,
    max_metrics: int,
    seq_min: int,
    seq_max: int,
    hi5: np.ndarray,
    lo5: np.ndarray,
    lits: tuple[np.ndarray, ...],
) -> tuple[bool, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - numba
    k = len(offsets) - 1
    ts_, colon, node_, job_, seq_, metrics_, open_, comma, close = lits
    ts = np.empty(k, dtype=np.uint64)
    spans = np.empty((k, 4), dtype=np.int64)  # node start/end, job start/end
    seq = np.empty(k, dtype=np.int64)
    names = np.empty((max_metrics, 2), dtype=np.int64)
    first = np.empty(max_metrics, dtype=np.uint64)  # the first message's values
    n = -1
    values = np.empty(0, dtype=np.uint64)
    fail = (False, ts, spans, seq, names[:0], values)
    for r in range(k):
        i, end = offsets[r], offsets[r + 1]
        i = _key(buf, i, end, open_, ts_, colon)
        if i < 0:
            return fail
        i, bits, _, _ = _number(buf, i, end, hi5, lo5)
        if i < 0:
            return fail
        ts[r] = bits
        for col in (0, 2):
            i = _key(buf, i, end, comma, node_ if col == 0 else job_, colon)
            if i < 0:
                return fail
            s, e = _string(buf, i, end)
            if s < 0:
                return fail
            spans[r, col] = s
            spans[r, col + 1] = e
            i = e + 1
        if spans[r, 0] == spans[r, 1]:
            return fail  # an empty node name: the general path says so
        i = _key(buf, i, end, comma, seq_, colon)
        if i < 0:
            return fail
        i, _, is_int, ival = _number(buf, i, end, hi5, lo5)
        if i < 0 or not is_int or ival < seq_min or ival > seq_max:
            return fail
        seq[r] = ival
        i = _key(buf, i, end, comma, metrics_, colon)
        if i < 0:
            return fail
        i = _literal(buf, i, end, open_)
        if i < 0:
            return fail
        j = 0
        while True:
            if j > 0:
                after = _literal(buf, i, end, comma)
                if after < 0:
                    break
                i = after
            if n < 0:  # the first message: its names are the batch's
                s, e = _string(buf, i, end)
                if s < 0 or j == max_metrics:
                    return fail
                names[j, 0] = s
                names[j, 1] = e
            else:  # the same name as the first message's j-th, in quotes (it holds no quote)
                if j >= n:
                    return fail
                i = _skip_ws(buf, i, end)
                s = i + 1
                e = s + names[j, 1] - names[j, 0]
                if e >= end or buf[i] != 34 or buf[e] != 34:
                    return fail
                for c in range(e - s):
                    if buf[s + c] != buf[names[j, 0] + c]:
                        return fail
            i = _literal(buf, e + 1, end, colon)
            if i < 0:
                return fail
            i, bits, _, _ = _number(buf, i, end, hi5, lo5)
            if i < 0:
                return fail
            if n < 0:
                first[j] = bits
            else:
                values[r * n + j] = bits
            j += 1
        if n < 0:
            if j == 0:
                return fail
            n = j
            values = np.empty(k * n, dtype=np.uint64)
            values[:n] = first[:n]
        elif j != n:
            return fail
        i = _literal(buf, i, end, close)
        if i < 0:
            return fail
        i = _literal(buf, i, end, close)
        if i < 0 or _skip_ws(buf, i, end) != end:
            return fail
    if n < 0:
        return fail
    return True, ts, spans, seq, names[:n], values


@njit(cache=True)
def _intern(buf: np.ndarray, spans: np.ndarray, col: int) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """Index of each row's string ``spans[:, col:col + 2]`` among the distinct strings in order of
    first appearance, and the first row of each (an FNV-1a hash table, the bytes compared)."""
    k = len(spans)
    size = 16
    while size < 2 * k:
        size *= 2
    table = np.full(size, -1, dtype=np.int64)  # slot -> distinct string number
    firsts = np.empty(k, dtype=np.int64)
    idx = np.empty(k, dtype=np.int64)
    distinct = 0
    for r in range(k):
        s, e = spans[r, col], spans[r, col + 1]
        h = np.uint64(14695981039346656037)
        for c in range(s, e):
            h = (h ^ np.uint64(buf[c])) * np.uint64(1099511628211)
        slot = np.int64(h & np.uint64(size - 1))
        while True:
            u = table[slot]
            if u < 0:
                table[slot] = distinct
                firsts[distinct] = r
                idx[r] = distinct
                distinct += 1
                break
            f = firsts[u]
            fs, fe = spans[f, col], spans[f, col + 1]
            if fe - fs == e - s:
                same = True
                for c in range(e - s):
                    if buf[fs + c] != buf[s + c]:
                        same = False
                        break
                if same:
                    idx[r] = u
                    break
            slot = (slot + 1) & (size - 1)
    return idx, firsts[:distinct]


LITERALS = (_TS, _COLON, _NODE, _JOB, _SEQ, _METRICS, _OPEN, _COMMA, _CLOSE)


Scanned = tuple[
    np.ndarray, tuple[np.ndarray, list[str]], tuple[np.ndarray, list[str]], np.ndarray, list[str], np.ndarray
]


def scan_samples(blob: bytes, offsets: np.ndarray, max_metrics: int, seq_min: int, seq_max: int) -> Scanned | None:
    """The messages ``blob[offsets[r]:offsets[r + 1]]`` as (ts, (node index per row, nodes),
    (job index per row, jobs), seq, metric names, values (k, n)), nodes and jobs in order of first
    appearance. None unless every message has the shape in the module docstring."""
    buf = np.frombuffer(blob, dtype=np.uint8)
    ok, ts, spans, seq, names, values = _scan(buf, offsets, max_metrics, seq_min, seq_max, POW5_HI, POW5_LO, LITERALS)
    if not ok:
        return None
    strings = []
    for col in (0, 2):
        idx, firsts = _intern(buf, spans, col)
        strings.append((idx, [blob[a:b].decode() for a, b in spans[firsts, col : col + 2].tolist()]))
    metrics = [blob[a:b].decode() for a, b in names.tolist()]
    return ts.view(np.float64), strings[0], strings[1], seq, metrics, values.view(np.float64).reshape(len(seq), -1)
