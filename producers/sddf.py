"""Pablo SDDF (Self-Defining Data Format) reader and writer, ASCII ("SDDFA") and binary ("SDDFB").

Follows ``spec/SDDF.md``. A stream is a header and packets: stream attributes, record descriptors
(tag, name, attributes, typed fields) and data records (one value per field). Reading streams in
constant memory: packets are parsed one at a time from a file opened in binary mode, so a 10 GB
trace replays without being loaded.

Values of a data record, per field:

- scalar ``int``/``long`` → ``int``; ``float``/``double`` → ``float``;
- numeric array → a numpy array whose shape is the record's dimension sizes;
- ``char[]`` / ``char[][]`` → :class:`Chars` (the declared sizes, and the string or strings).

Malformed input raises :class:`SddfError` (a :class:`~perfsift.schemas.RecordError`) whose
``where`` is ``file:line:column`` (ASCII) or ``file@byte`` (binary); no other exception escapes
the readers.
"""

from __future__ import annotations

import codecs
import math
import re
import struct
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO

import numpy as np
from perfsift.schemas import RecordError

ASCII_MAGIC = b"SDDFA"
BINARY_MAGIC = b"SDDFB"
HEADER_SIZE = 19

#: type keyword -> binary code (DataTraits.h); ``long`` is read from ASCII but has no known code
TYPE_CODES = {"char": 0, "int": 1, "float": 2, "double": 3}
CODE_TYPES = {v: k for k, v in TYPE_CODES.items()}
NUMERIC = ("int", "long", "float", "double")

PKT_ATTRIBUTE, PKT_DESCRIPTOR, PKT_DATA, PKT_COMMAND = 1, 2, 3, 4

Pairs = tuple[tuple[str, str], ...]


class SddfError(RecordError):
    """Malformed SDDF input; ``where`` names ``file:line:column`` or ``file@byte``."""


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # char | int | long | float | double
    dim: int = 0
    attrs: Pairs = ()


@dataclass(frozen=True)
class Descriptor:
    tag: int
    name: str
    fields: tuple[Field, ...]
    attrs: Pairs = ()

    def index(self, name: str) -> int:
        return next(i for i, f in enumerate(self.fields) if f.name == name)


@dataclass(frozen=True)
class Chars:
    """A ``char`` array: its declared sizes (outermost first) and its text, one string per
    innermost row (trailing NULs removed)."""

    dims: tuple[int, ...]
    strings: tuple[str, ...]

    @property
    def text(self) -> str:
        return self.strings[0] if self.strings else ""

    @classmethod
    def of(cls, text: str) -> Chars:
        return cls((len(text.encode()),), (text,))

    @classmethod
    def rows(cls, items: Iterable[str], width: int | None = None) -> Chars:
        items = tuple(items)
        w = width if width is not None else max((len(s.encode()) for s in items), default=0)
        return cls((len(items), w), items)


@dataclass(frozen=True)
class Attributes:
    pairs: Pairs


@dataclass(frozen=True)
class Command:
    tag: int


@dataclass(frozen=True, eq=False)
class Record:
    descriptor: Descriptor
    values: tuple[Any, ...]
    where: str = field(default="", compare=False)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record) or other.descriptor != self.descriptor:
            return False
        return all(_value_equal(a, b) for a, b in zip(self.values, other.values, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __getitem__(self, name: str) -> Any:
        return self.values[self.descriptor.index(name)]


Packet = Attributes | Descriptor | Record | Command


def _value_equal(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


# =================================================================================================
# Reading
# =================================================================================================


def read_sddf(source: str | Path | BinaryIO, name: str | None = None) -> Iterator[Packet]:
    """Yield the packets of an SDDF stream (ASCII or binary, sniffed from the first bytes; a file
    with no header is read as pre-2.0 ASCII). ``source``: a path or a binary file object."""
    if isinstance(source, (str, Path)):
        with open(source, "rb") as fh:
            yield from read_sddf(fh, str(source) if name is None else name)
        return
    label = name or getattr(source, "name", "<stream>")
    head = source.read(5)
    if head == BINARY_MAGIC:
        yield from _BinaryReader(source, str(label)).packets()
    else:
        yield from _AsciiReader(source, str(label), head).packets()


# -- ASCII ----------------------------------------------------------------------------------------

_SPLIT = re.compile(r'"[^"\n]*"|;;|"')  # strings (no escapes, one line), packet ends, a stray quote
_TOKEN = re.compile(r'"[^"\n]*"|//|/\*|\*/|[{}\[\],;:#*]|[^\s{}\[\],;:#*"/]+|\S')
_INT = re.compile(r"[-+]?\d+\Z")
_FLOAT = re.compile(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf|infinity)\Z", re.IGNORECASE)
_CHUNK = 1 << 20


class _AsciiReader:
    def __init__(self, fh: BinaryIO, name: str, head: bytes) -> None:
        self.fh = fh
        self.name = name
        self.by_name: dict[str, Descriptor] = {}
        self.tags: set[int] = set()
        self.fast: dict[int, tuple[re.Pattern[str] | None, list[str]]] = {}
        data = head
        if head == ASCII_MAGIC:
            rest = fh.readline()
            if rest.strip():
                raise SddfError("text after the SDDFA header on its line", f"{name}:1:6")
            data = b""
            self.line = 2
        else:
            self.line = 1
        self.decoder = codecs.getincrementaldecoder("utf-8")()  # chunks may split a UTF-8 sequence
        self.buf = ""
        self.pos = 0  # start of the packet being parsed; self.line is its line
        self.eof = False
        self.buf = self._decode(data, final=False)

    def _decode(self, raw: bytes, final: bool) -> str:
        try:
            return str(self.decoder.decode(raw, final))
        except UnicodeDecodeError as exc:
            line, _ = self._position(len(self.buf))
            raise SddfError(f"not UTF-8/ASCII text ({exc.reason})", f"{self.name}:{line}") from None

    def _more(self) -> bool:
        if self.eof:
            return False
        raw = self.fh.read(_CHUNK)
        if not raw:
            self.eof = True
            self.buf += self._decode(b"", final=True)
            return False
        self.buf += self._decode(raw, final=False)
        return True

    def packets(self) -> Iterator[Packet]:
        pos = 0
        while True:
            self.pos = pos
            end = self._packet_end(pos)
            if end is None:
                rest = self.buf[pos:]
                if rest.strip():
                    lead = len(rest) - len(rest.lstrip())
                    line, col = self._position(pos + lead)
                    raise SddfError("truncated packet: no ';;' before the end of the file", self._at(line, col))
                return
            text = self.buf[pos:end]
            start_line = self.line
            start_col = pos - self.buf.rfind("\n", 0, pos)
            packet = self._parse(text, start_line, start_col)
            self.line += self.buf.count("\n", pos, end + 2)
            pos = end + 2
            if pos > _CHUNK:  # drop consumed text: memory stays bounded by the longest packet
                self.buf = self.buf[pos:]
                pos = 0
            if packet is not None:
                yield packet

    def _packet_end(self, pos: int) -> int | None:
        """Index of the ';;' that ends the packet starting at pos (outside strings)."""
        scan = pos
        while True:
            for m in _SPLIT.finditer(self.buf, scan):
                tok = m.group()
                if tok == ";;":
                    return m.start()
                if tok == '"':  # an unterminated string on this line: need the rest of the line
                    nl = self.buf.find("\n", m.start())
                    if nl >= 0 or self.eof:
                        line, col = self._position(m.start())
                        raise SddfError("unterminated string", self._at(line, col))
                    break
                scan = m.end()
            else:
                scan = max(scan, len(self.buf) - 1)
            if not self._more():
                return None

    def _position(self, index: int) -> tuple[int, int]:
        """Line and column of buffer index (at or after the current packet's start)."""
        line = self.line + self.buf.count("\n", self.pos, index)
        return line, index - self.buf.rfind("\n", 0, index)

    def _at(self, line: int, col: int) -> str:
        return f"{self.name}:{line}:{col}"

    # -- one packet ------------------------------------------------------------------------
    def _parse(self, text: str, line: int, col: int) -> Packet | None:
        toks = _Tokens(text, line, col, self)
        first = toks.peek()
        if first is None:
            return None  # an empty packet (';;' alone)
        if first == "/*":
            return self._attributes(text, toks)
        if first == "#":
            return self._descriptor(toks)
        if first.startswith('"'):
            return self._data(toks)
        raise toks.error(f"unexpected {first!r} at the start of a packet")

    def _attributes(self, text: str, toks: _Tokens) -> Attributes:
        start = text.index("/*") + 2
        stop = text.rfind("*/")
        if stop < start:
            raise toks.error("stream attributes: '/*' without '*/'")
        pairs: list[tuple[str, str]] = []
        seen: set[str] = set()
        for k, raw in enumerate(text[start:stop].split("\n")):
            body = raw.strip()
            if not body:
                continue
            body = body[1:].strip() if body.startswith("*") else body
            strings = re.findall(r'"([^"\n]*)"', body)
            if not strings:
                continue
            key = strings[0]
            value = strings[1] if len(strings) > 1 else body[body.index(key) + len(key) + 1 :].strip()
            if key in seen:
                raise SddfError(f"duplicate stream attribute {key!r}", self._at(toks.line0 + k, 1))
            seen.add(key)
            pairs.append((key, value))
        rest = text[stop + 2 :].strip()
        if rest:
            raise toks.error(f"unexpected {rest[:20]!r} after the stream attributes")
        return Attributes(tuple(pairs))

    def _descriptor(self, toks: _Tokens) -> Descriptor:
        toks.expect("#")
        tag_tok = toks.next("a tag number")
        if not _INT.match(tag_tok):
            raise toks.error(f"bad tag {tag_tok!r} (an integer is needed)", back=1)
        tag = int(tag_tok)
        toks.expect(":")
        attrs = toks.attributes()
        name = toks.string("the record name")
        toks.expect("{")
        fields: list[Field] = []
        names: set[str] = set()
        while toks.peek() != "}":
            fattrs = toks.attributes()
            if toks.peek() == "}":
                break
            typ = toks.next("a field type")
            if typ not in (*TYPE_CODES, "long"):
                raise toks.error(f"unknown field type {typ!r} (char, int, long, float or double)", back=1)
            fname = toks.string("a field name")
            if fname in names:
                raise toks.error(f"duplicate field {fname!r} in record {name!r}", back=1)
            names.add(fname)
            dim = 0
            while toks.peek() == "[":
                toks.next()
                toks.expect("]")
                dim += 1
            toks.expect(";")
            fields.append(Field(fname, typ, dim, fattrs))
        toks.expect("}")
        toks.end()
        if tag in self.tags or name in self.by_name:
            raise toks.error(f"duplicate descriptor (tag {tag} or name {name!r} already declared)", at=0)
        desc = Descriptor(tag, name, tuple(fields), attrs)
        self.tags.add(tag)
        self.by_name[name] = desc
        return desc

    def _data(self, toks: _Tokens) -> Record:
        where = toks.where(0)
        name = toks.string("a record name")
        desc = self.by_name.get(name)
        if desc is None:
            raise toks.error(f"data for unknown descriptor {name!r}", at=0)
        fast = self._fast_record(desc, toks.text, toks.toks[0][1] + len(name) + 2)
        if fast is not None:
            return Record(desc, fast, where)
        toks.expect("{")
        values: list[Any] = []
        for i, f in enumerate(desc.fields):
            if i:
                toks.expect(",", f"',' before field {f.name!r}")
            values.append(toks.value(f, desc.name))
        if toks.peek() == ",":
            raise toks.error(f"more values than the {len(desc.fields)} fields of {desc.name!r}")
        toks.expect("}", f"'}}' after the {len(desc.fields)} fields of {desc.name!r}")
        toks.end()
        return Record(desc, tuple(values), where)

    def _fast_record(self, desc: Descriptor, text: str, start: int) -> tuple[Any, ...] | None:
        """All values of a well-formed data record by one regex match (built per descriptor);
        None when it does not match, and the token parser then says exactly what is wrong."""
        plan = self.fast.get(desc.tag)
        if plan is None:
            plan = self.fast[desc.tag] = _record_pattern(desc)
        rx, kinds = plan
        if rx is None:
            return None
        m = rx.match(text, start)
        if m is None:
            return None
        out: list[Any] = []
        groups = m.groups()
        g = 0
        try:
            for f, kind in zip(desc.fields, kinds, strict=True):
                if kind == "int":
                    tok = groups[g]
                    if not _INT.match(tok):
                        return None
                    v = int(tok)
                    if f.type == "int" and not -(2**31) <= v < 2**31:
                        return None
                    out.append(v)
                    g += 1
                elif kind == "float":
                    tok = groups[g]
                    if not _FLOAT.match(tok):
                        return None
                    out.append(float(tok))
                    g += 1
                elif kind == "chars":
                    size, text_a, text_b = groups[g : g + 3]
                    g += 3
                    if size is None:
                        out.append(Chars.of(text_b))
                    else:
                        if len(text_a.encode()) > int(size):
                            return None
                        out.append(Chars((int(size),), (text_a,)))
                else:  # numeric array
                    dims = [int(d) for d in re.findall(r"\d+", groups[g])]
                    seg = groups[g + 1]
                    g += 2
                    if "_" in seg or "x" in seg.lower():
                        return None
                    dtype = np.int64 if f.type in ("int", "long") else np.float64
                    cells = np.array(seg.split(","), dtype=dtype) if seg.strip() else np.empty(0, dtype=dtype)
                    if len(cells) != math.prod(dims):
                        return None
                    out.append(cells.reshape(dims))
        except ValueError:
            return None
        return tuple(out)


_NUM = r'\s*([^\s,{}\[\]";]+)'


def _record_pattern(desc: Descriptor) -> tuple[re.Pattern[str] | None, list[str]]:
    """A regex for the body of a well-formed data record of desc (after its name)."""
    parts: list[str] = []
    kinds: list[str] = []
    for f in desc.fields:
        if f.type == "char" and f.dim == 1:
            parts.append(r'\s*(?:\[(\d+)\]\s*\{\s*"([^"\n]*)"\s*\}|"([^"\n]*)")')
            kinds.append("chars")
        elif f.type == "char":
            return None, []  # scalar chars and string lists: the token parser
        elif f.dim == 0:
            parts.append(_NUM)
            kinds.append("int" if f.type in ("int", "long") else "float")
        else:
            parts.append(r"\s*((?:\[\s*\d+\s*\]\s*){" + str(f.dim) + r"})\{([^{}\"]*)\}")
            kinds.append("array")
    body = r"\s*,".join(parts)
    return re.compile(r"\s*\{" + body + r"\s*\}\s*\Z", re.DOTALL), kinds


class _Tokens:
    """Tokens of one ASCII packet with their line and column."""

    def __init__(self, text: str, line: int, col: int, reader: _AsciiReader) -> None:
        self.text = text
        self.line0 = line
        self.col0 = col
        self.reader = reader
        self.toks: list[tuple[str, int]] = []  # scanned lazily: the fast array path skips cells
        self.scan = 0
        self.i = 0

    def _fill(self, k: int) -> bool:
        """Scan until token k exists; False at the end of the packet."""
        while len(self.toks) <= k:
            m = _TOKEN.search(self.text, self.scan)
            if m is None:
                return False
            self.toks.append((m.group(), m.start()))
            self.scan = m.end()
        return True

    def where(self, i: int | None = None) -> str:
        k = self.i if i is None else i
        pos = self.toks[k][1] if self._fill(k) else len(self.text)
        nl = self.text.count("\n", 0, pos)
        col = pos - self.text.rfind("\n", 0, pos) if nl else self.col0 + pos
        return self.reader._at(self.line0 + nl, col)

    def error(self, reason: str, back: int = 0, at: int | None = None) -> SddfError:
        return SddfError(reason, self.where(self.i - back if at is None else at))

    def peek(self) -> str | None:
        return self.toks[self.i][0] if self._fill(self.i) else None

    def next(self, what: str = "a token") -> str:
        if not self._fill(self.i):
            raise self.error(f"packet ends where {what} was expected")
        tok = self.toks[self.i][0]
        self.i += 1
        return tok

    def expect(self, tok: str, what: str | None = None) -> None:
        got = self.peek()
        if got != tok:
            raise self.error(f"expected {what or repr(tok)}, found {got!r}" if got else f"expected {what or repr(tok)}")
        self.i += 1

    def string(self, what: str) -> str:
        tok = self.peek()
        if tok is None or not tok.startswith('"'):
            raise self.error(f"expected {what} (a quoted string), found {tok!r}")
        self.i += 1
        return tok[1:-1]

    def end(self) -> None:
        if self._fill(self.i):
            raise self.error(f"unexpected {self.peek()!r} before ';;'")

    def attributes(self) -> Pairs:
        pairs: list[tuple[str, str]] = []
        while self.peek() == "//":
            self.i += 1
            key = self.string("an attribute key")
            value = self.string("an attribute value")
            pairs.append((key, value))
        return tuple(pairs)

    def number(self, typ: str, fname: str) -> int | float:
        tok = self.next(f"a value for {fname!r}")
        if typ in ("int", "long"):
            if not _INT.match(tok):
                raise self.error(f"bad number {tok!r} for {typ} field {fname!r}", back=1)
            v = int(tok)
            if typ == "int" and not -(2**31) <= v < 2**31:
                raise self.error(f"{v} does not fit the 32-bit int field {fname!r}", back=1)
            return v
        if not _FLOAT.match(tok):
            raise self.error(f"bad number {tok!r} for {typ} field {fname!r}", back=1)
        return float(tok)

    def value(self, f: Field, record: str) -> Any:
        if f.dim == 0:
            if f.type == "char":
                tok = self.next(f"a value for {f.name!r}")
                if tok.startswith('"') and len(tok) == 3:
                    return tok[1]
                raise self.error(f"bad char value {tok!r} for field {f.name!r}", back=1)
            if self.peek() == "[":
                raise self.error(f"field {f.name!r} of {record!r} is a scalar, found an array")
            return self.number(f.type, f.name)
        if f.type == "char" and f.dim == 1 and self.peek() is not None and self.peek().startswith('"'):  # type: ignore[union-attr]
            return Chars.of(self.string(f.name))  # Dimemas's bare "text" form
        dims: list[int] = []
        while self.peek() == "[":
            self.i += 1
            tok = self.next("an array size")
            if not _INT.match(tok) or int(tok) < 0:
                raise self.error(f"bad array size {tok!r} for field {f.name!r}", back=1)
            dims.append(int(tok))
            self.expect("]")
        if len(dims) != f.dim:
            raise self.error(f"field {f.name!r} of {record!r} has {f.dim} dimension(s), the value gives {len(dims)}")
        self.expect("{", f"'{{' opening the cells of {f.name!r}")
        if f.type == "char":
            strings: list[str] = []
            while self.peek() != "}":
                if strings:
                    self.expect(",")
                strings.append(self.string(f"a string in {f.name!r}"))
            self.expect("}")
            rows = math.prod(dims[:-1]) if f.dim > 1 else 1
            if len(strings) != rows:
                raise self.error(f"wrong array length: {f.name!r} declares {rows} string(s), found {len(strings)}")
            width = dims[-1]
            for s in strings:
                if len(s.encode()) > width:
                    raise self.error(f"string {s[:20]!r} is longer than the declared size {width} of {f.name!r}")
            return Chars(tuple(dims), tuple(strings))
        fast = self._fast_cells(f, dims)
        if fast is not None:
            return fast
        cells: list[int | float] = []
        while self.peek() != "}":
            if cells:
                self.expect(",", f"',' between cells of {f.name!r}")
            if self.peek() == "}":
                break
            cells.append(self.number(f.type, f.name))
        self.expect("}")
        if len(cells) != math.prod(dims):
            raise self.error(
                f"wrong array length: {f.name!r} declares {'x'.join(map(str, dims))} = {math.prod(dims)} "
                f"cells, found {len(cells)}"
            )
        dtype = np.int64 if f.type in ("int", "long") else np.float64
        return np.array(cells, dtype=dtype).reshape(dims)

    def _fast_cells(self, f: Field, dims: list[int]) -> np.ndarray | None:
        """Parse the cells of a numeric array in one numpy call (the '{' was just consumed); None
        means "use the token loop", which also finds the exact place of any error."""
        open_pos = self.toks[self.i - 1][1]
        close = self.text.find("}", open_pos)
        if close < 0:
            return None
        seg = self.text[open_pos + 1 : close]
        if '"' in seg or "_" in seg or "{" in seg or "x" in seg.lower():
            return None
        dtype = np.int64 if f.type in ("int", "long") else np.float64
        try:
            cells = np.array(seg.split(","), dtype=dtype) if seg.strip() else np.empty(0, dtype=dtype)
        except ValueError:
            return None
        if len(cells) != math.prod(dims):
            return None
        if f.type == "int" and len(cells) and (cells.min() < -(2**31) or cells.max() >= 2**31):
            return None
        del self.toks[self.i :]
        self.toks.append(("}", close))
        self.scan = close + 1
        self.i += 1
        return cells.reshape(dims)


# -- binary ---------------------------------------------------------------------------------------


class _BinaryReader:
    def __init__(self, fh: BinaryIO, name: str) -> None:
        self.fh = fh
        self.name = name
        self.offset = 5
        rest = self._read(HEADER_SIZE - 5, "the 19-byte header")
        hdr = BINARY_MAGIC + rest
        if hdr[5] != HEADER_SIZE:
            raise SddfError(f"header size byte is {hdr[5]}, expected 19", f"{name}@5")
        if hdr[6] not in (0, 1):
            raise SddfError(f"byte order {hdr[6]} is neither 0 (big) nor 1 (little endian)", f"{name}@6")
        for off in range(7, 12):
            if hdr[off] != 0:
                raise SddfError(f"unsupported number representation {hdr[off]} (only 0 is defined)", f"{name}@{off}")
        self.order = ">" if hdr[6] == 0 else "<"
        sizes = dict(zip(("char", "short", "int", "long", "float", "double", "ldouble"), hdr[12:19], strict=True))
        expected = {"char": (1,), "short": (2,), "int": (4,), "long": (4, 8), "float": (4,), "double": (8,)}
        for t, ok in expected.items():
            if sizes[t] not in ok:
                raise SddfError(f"{t} of {sizes[t]} bytes is not supported", f"{name}@{12 + list(sizes).index(t)}")
        self.int32 = struct.Struct(self.order + "i")
        self.header3 = struct.Struct(self.order + "iii")
        self.scalar = {"int": self.order + "i", "float": self.order + "f", "double": self.order + "d"}
        self.descs: dict[int, Descriptor] = {}
        self.names: set[str] = set()

    def _read(self, n: int, what: str) -> bytes:
        data = self.fh.read(n)
        if len(data) != n:
            raise SddfError(
                f"file ends inside {what}: {n} bytes needed, {len(data)} left", f"{self.name}@{self.offset}"
            )
        self.offset += n
        return data

    def packets(self) -> Iterator[Packet]:
        while True:
            start = self.offset
            head = self.fh.read(12)
            if not head:
                return
            if len(head) < 12:
                raise SddfError(f"truncated packet header ({len(head)} of 12 bytes)", f"{self.name}@{start}")
            self.offset += 12
            length, ptype, tag = self.header3.unpack(head)
            if length < 12:
                raise SddfError(f"packet length {length} is shorter than its 12-byte header", f"{self.name}@{start}")
            body = self.fh.read(length - 12)
            if len(body) != length - 12:
                raise SddfError(
                    f"packet length field ({length} bytes) runs past the end of the file ({len(body) + 12} bytes left)",
                    f"{self.name}@{start}",
                )
            self.offset += length - 12
            cur = _Cursor(body, start + 12, self)
            if ptype == PKT_ATTRIBUTE:
                yield Attributes(cur.pairs())
            elif ptype == PKT_DESCRIPTOR:
                yield self._descriptor(tag, cur, start)
            elif ptype == PKT_DATA:
                desc = self.descs.get(tag)
                if desc is None:
                    raise SddfError(f"data packet with unknown descriptor tag {tag}", f"{self.name}@{start}")
                yield Record(desc, tuple(cur.value(f) for f in desc.fields), f"{self.name}@{start}")
            elif ptype == PKT_COMMAND:
                yield Command(tag)
            else:
                raise SddfError(f"unknown packet type {ptype}", f"{self.name}@{start + 4}")

    def _descriptor(self, tag: int, cur: _Cursor, start: int) -> Descriptor:
        name = cur.string()
        attrs = cur.pairs()
        n = cur.count("fields")
        fields = []
        for _ in range(n):
            fname = cur.string()
            fattrs = cur.pairs()
            at = cur.where()
            code = cur.int32()
            if code not in CODE_TYPES:
                raise SddfError(f"unknown field type code {code} for field {fname!r}", at)
            dim = cur.int32()
            if not 0 <= dim <= 16:
                raise SddfError(f"bad dimension {dim} for field {fname!r}", cur.where(-4))
            fields.append(Field(fname, CODE_TYPES[code], dim, fattrs))
        if tag in self.descs or name in self.names:
            raise SddfError(f"duplicate descriptor (tag {tag} or name {name!r})", f"{self.name}@{start}")
        desc = Descriptor(tag, name, tuple(fields), attrs)
        self.descs[tag] = desc
        self.names.add(name)
        return desc


class _Cursor:
    """Reads fields out of one packet body; errors name the absolute byte offset."""

    def __init__(self, body: bytes, base: int, reader: _BinaryReader) -> None:
        self.body = body
        self.pos = 0
        self.base = base
        self.r = reader

    def where(self, delta: int = 0) -> str:
        return f"{self.r.name}@{self.base + self.pos + delta}"

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.body):
            raise SddfError(f"{what} needs {n} bytes, the packet has {len(self.body) - self.pos} left", self.where())
        b = self.body[self.pos : self.pos + n]
        self.pos += n
        return b

    def int32(self) -> int:
        return int(self.r.int32.unpack(self.take(4, "an int"))[0])

    def count(self, what: str) -> int:
        n = self.int32()
        if n < 0 or n > len(self.body):
            raise SddfError(f"bad {what} count {n}", self.where(-4))
        return n

    def string(self) -> str:
        n = self.count("string length")
        raw = self.take(n, "a string")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SddfError("string is not UTF-8/ASCII text", self.where(-n)) from None

    def pairs(self) -> Pairs:
        n = self.count("attribute")
        return tuple((self.string(), self.string()) for _ in range(n))

    def value(self, f: Field) -> Any:
        if f.dim == 0:
            if f.type == "char":
                return self.take(1, "a char").decode("latin-1")
            fmt = self.r.scalar[f.type]
            return struct.unpack(fmt, self.take(struct.calcsize(fmt), f"field {f.name!r}"))[0]
        dims = tuple(self.count(f"array size of {f.name!r}") for _ in range(f.dim))
        cells = math.prod(dims)
        if f.type == "char":
            width = dims[-1]
            rows = math.prod(dims[:-1]) if f.dim > 1 else 1
            raw = self.take(cells, f"the chars of {f.name!r}")
            try:
                strings = tuple(raw[i * width : (i + 1) * width].rstrip(b"\0").decode("utf-8") for i in range(rows))
            except UnicodeDecodeError:
                raise SddfError(f"chars of {f.name!r} are not UTF-8/ASCII text", self.where(-cells)) from None
            return Chars(dims, strings)
        dt = np.dtype(self.r.scalar[f.type])
        raw = self.take(cells * dt.itemsize, f"the {cells} cells of {f.name!r}")
        arr = np.frombuffer(raw, dtype=dt).astype(np.int64 if f.type == "int" else np.float64)
        return arr.reshape(dims)


# =================================================================================================
# Writing
# =================================================================================================


def format_number(v: int | float, typ: str) -> str:
    """ASCII spelling of a number: ``%d`` for ints, the shortest round-trip form for floats."""
    if typ in ("int", "long"):
        return str(int(v))
    return repr(float(v))


class SddfWriter:
    """Writes an SDDF stream, ASCII (default) or binary (little endian, native sizes of the
    example files). Descriptors must be written before their data.

    >>> import io
    >>> buf = io.BytesIO()
    >>> w = SddfWriter(buf)
    >>> d = w.descriptor(1, "sample", [Field("t", "double"), Field("v", "double", 1)])
    >>> w.record(d, [1.5, np.array([2.0, 3.0])])
    >>> print(buf.getvalue().decode().splitlines()[-1])
    "sample" { 1.5, [2] { 2.0, 3.0 } };;
    """

    def __init__(self, fh: IO[bytes], binary: bool = False, byteorder: str = "little") -> None:
        self.fh = fh
        self.binary = binary
        self.o = "<" if byteorder == "little" else ">"
        self.declared: dict[int, Descriptor] = {}
        self.names: set[str] = set()
        if binary:
            fh.write(
                BINARY_MAGIC + bytes([HEADER_SIZE, 1 if self.o == "<" else 0, 0, 0, 0, 0, 0, 1, 2, 4, 8, 4, 8, 16])
            )
        else:
            fh.write(ASCII_MAGIC + b"\n")

    # -- packets -------------------------------------------------------------------------
    def attributes(self, pairs: Iterable[tuple[str, str]]) -> None:
        pairs = tuple(pairs)
        if self.binary:
            self._packet(PKT_ATTRIBUTE, 0, self._pairs(pairs))
        else:
            lines = ["/*", *(f' * "{_q(k)}" "{_q(v)}"' for k, v in pairs), " */ ;;", "", ""]
            self.fh.write("\n".join(lines).encode())

    def descriptor(
        self, tag: int, name: str, fields: Iterable[Field], attrs: Iterable[tuple[str, str]] = ()
    ) -> Descriptor:
        desc = Descriptor(tag, name, tuple(fields), tuple(attrs))
        self.put_descriptor(desc)
        return desc

    def put_descriptor(self, desc: Descriptor) -> None:
        if desc.tag in self.declared or desc.name in self.names:
            raise ValueError(f"descriptor tag {desc.tag} or name {desc.name!r} already written")
        self.declared[desc.tag] = desc
        self.names.add(desc.name)
        if self.binary:
            body = self._string(desc.name) + self._pairs(desc.attrs) + self._int(len(desc.fields))
            for f in desc.fields:
                if f.type not in TYPE_CODES:
                    raise ValueError(f"field {f.name!r}: type {f.type!r} has no binary code; use int or double")
                body += self._string(f.name) + self._pairs(f.attrs) + self._int(TYPE_CODES[f.type]) + self._int(f.dim)
            self._packet(PKT_DESCRIPTOR, desc.tag, body)
            return
        out = [f"#{desc.tag}:"]
        out += [f'// "{_q(k)}" "{_q(v)}"' for k, v in desc.attrs]
        out.append(f'"{_q(desc.name)}" {{')
        for f in desc.fields:
            out += [f'\t// "{_q(k)}" "{_q(v)}"' for k, v in f.attrs]
            out.append(f'\t{f.type}\t"{_q(f.name)}"{"[]" * f.dim};')
        out += ["};;", "", ""]
        self.fh.write("\n".join(out).encode())

    def record(self, desc: Descriptor, values: Iterable[Any]) -> None:
        if self.declared.get(desc.tag) != desc:
            raise ValueError(f"descriptor {desc.name!r} (tag {desc.tag}) was not written before its data")
        values = tuple(values)
        if len(values) != len(desc.fields):
            raise ValueError(f"{desc.name!r} has {len(desc.fields)} fields, got {len(values)} values")
        if self.binary:
            self._packet(
                PKT_DATA, desc.tag, b"".join(self._bin_value(f, v) for f, v in zip(desc.fields, values, strict=True))
            )
        else:
            body = ", ".join(self._ascii_value(f, v) for f, v in zip(desc.fields, values, strict=True))
            self.fh.write(f'"{_q(desc.name)}" {{ {body} }};;\n'.encode())

    def command(self, tag: int) -> None:
        if not self.binary:
            raise ValueError("the ASCII form of command packets is not established (SDDF.md §3.2)")
        self._packet(PKT_COMMAND, tag, b"")

    def write(self, packet: Packet) -> None:
        """Write a packet as read by :func:`read_sddf` (for conversions)."""
        if isinstance(packet, Attributes):
            self.attributes(packet.pairs)
        elif isinstance(packet, Descriptor):
            self.put_descriptor(packet)
        elif isinstance(packet, Record):
            self.record(packet.descriptor, packet.values)
        else:
            self.command(packet.tag)

    # -- encoding ------------------------------------------------------------------------
    def _ascii_value(self, f: Field, v: Any) -> str:
        if f.dim == 0:
            if f.type == "char":
                return f'"{v}"'
            return format_number(v, f.type)
        if f.type == "char":
            c = v if isinstance(v, Chars) else Chars.of(str(v))
            dims = "".join(f"[{d}]" for d in c.dims)
            return f"{dims} {{ {', '.join(chr(34) + _q(s) + chr(34) for s in c.strings)} }}"
        a = np.asarray(v)
        if a.ndim != f.dim:
            raise ValueError(f"field {f.name!r} has {f.dim} dimension(s), value has {a.ndim}")
        dims = "".join(f"[{d}]" for d in a.shape)
        cells = ", ".join(format_number(x, f.type) for x in a.ravel().tolist())
        return f"{dims} {{ {cells} }}"

    def _bin_value(self, f: Field, v: Any) -> bytes:
        o = self.o
        if f.dim == 0:
            if f.type == "char":
                return str(v).encode("latin-1")[:1]
            return struct.pack(o + {"int": "i", "float": "f", "double": "d"}[f.type], v)
        if f.type == "char":
            c = v if isinstance(v, Chars) else Chars.of(str(v))
            width = c.dims[-1]
            return b"".join(struct.pack(o + "i", d) for d in c.dims) + b"".join(
                s.encode().ljust(width, b"\0") for s in c.strings
            )
        a = np.asarray(v)
        if a.ndim != f.dim:
            raise ValueError(f"field {f.name!r} has {f.dim} dimension(s), value has {a.ndim}")
        dt = {"int": o + "i4", "float": o + "f4", "double": o + "f8"}[f.type]
        return b"".join(struct.pack(o + "i", d) for d in a.shape) + a.astype(dt).tobytes()

    def _int(self, v: int) -> bytes:
        return struct.pack(self.o + "i", v)

    def _string(self, s: str) -> bytes:
        b = s.encode()
        return self._int(len(b)) + b

    def _pairs(self, pairs: Pairs) -> bytes:
        return self._int(len(pairs)) + b"".join(self._string(k) + self._string(v) for k, v in pairs)

    def _packet(self, ptype: int, tag: int, body: bytes) -> None:
        self.fh.write(struct.pack(self.o + "iii", 12 + len(body), ptype, tag) + body)


def _q(s: str) -> str:
    if '"' in s or "\n" in s:
        raise ValueError(f"SDDF strings cannot hold '\"' or newlines: {s[:40]!r}")
    return s


def convert(src: str | Path, dst: str | Path, binary: bool) -> int:
    """Rewrite an SDDF file in the other variant; returns the number of packets."""
    n = 0
    with open(dst, "wb") as out:
        w = SddfWriter(out, binary=binary)
        for packet in read_sddf(src):
            w.write(packet)
            n += 1
    return n


if __name__ == "__main__":  # python -m perfsift.producers.sddf IN OUT (binary when OUT ends in .sddfb)
    print(convert(sys.argv[1], sys.argv[2], sys.argv[2].endswith("b")), "packets")
