"""Autopilot-style fuzzy rulebases (METHODS.md §4.5): parser, membership functions, Mamdani
max-min inference and exact centroid defuzzification.

The language (Vraalsen et al., Figure 4)::

    var distance(0, 2)   { set trapez LOW ( 0, .5, 0, .5 );  set trapez HIGH ( 1, 2, .5, 0 ); }
    var violation(-1, 2) { set triangle NONE ( 0, 1, 1 );    set triangle TOTAL ( 1, 1, 1 ); }
    if ( distance == LOW )  { violation = NONE; }
    if ( distance == HIGH ) { violation = TOTAL; }

``triangle S (c, l, r)``: centre c, left and right half-widths; ``trapez S (a, b, l, r)``: plateau
[a, b] with left and right ramp widths (a zero width is a vertical edge). Conditions combine
``v == S`` with ``&&`` (min), ``||`` (max) and ``!`` (1 - x); ``/* */`` and ``//`` are comments.
Errors name the line and column.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import numpy.typing as npt

#: the default rulebase (the Figure 4 example with the NONE/TOTAL parameters in the order that
#: matches their names; the figure's literal text swaps them, see METHODS.md §4.5)
DEFAULT_RULEBASE = """\
var distance(0, 2)   { set trapez LOW ( 0, .5, 0, .5 );  set trapez HIGH ( 1, 2, .5, 0 ); }
var violation(-1, 2) { set triangle NONE ( 0, 1, 1 );    set triangle TOTAL ( 1, 1, 1 ); }
if ( distance == LOW )  { violation = NONE; }
if ( distance == HIGH ) { violation = TOTAL; }
"""


class RulebaseError(ValueError):
    """A rulebase that does not parse or is inconsistent; the message names line and column."""

    def __init__(self, msg: str, line: int = 0, col: int = 0, source: str = "<rulebase>") -> None:
        self.line, self.col = line, col
        super().__init__(f"{source}:{line}:{col}: {msg}" if line else f"{source}: {msg}")


# -- membership functions ---------------------------------------------------------------------------
@dataclass(frozen=True)
class FuzzySet:
    """A triangle ``(c, l, r)`` or trapezoid ``(a, b, l, r)`` membership function.

    >>> FuzzySet("LOW", "trapez", (0, .5, 0, .5)).mu(np.array([0.25, 0.75, 1.0])).tolist()
    [1.0, 0.5, 0.0]
    """

    name: str
    kind: str
    params: tuple[float, ...]

    @property
    def plateau(self) -> tuple[float, float, float, float]:
        """(a, b, l, r): plateau [a, b] and ramp widths; a triangle is a trapezoid with a = b = c."""
        if self.kind == "triangle":
            c, left, right = self.params
            return c, c, left, right
        a, b, left, right = self.params
        return a, b, left, right

    def mu(self, x: npt.ArrayLike) -> np.ndarray:
        a, b, left, right = self.plateau
        x = np.asarray(x, dtype=np.float64)
        out = np.where((x >= a) & (x <= b), 1.0, 0.0)
        if left > 0:
            out = np.where(x < a, np.maximum(0.0, 1.0 - (a - x) / left), out)
        if right > 0:
            out = np.where(x > b, np.maximum(0.0, 1.0 - (x - b) / right), out)
        return out

    def breakpoints(self, alpha: float) -> list[float]:
        """Where the set clipped at ``alpha`` changes slope."""
        a, b, left, right = self.plateau
        pts = [a - left, a, b, b + right]
        if 0 < alpha < 1:
            pts += [a - left * (1 - alpha), b + right * (1 - alpha)]
        return pts

    @cached_property
    def area_centroid(self) -> tuple[float, float]:
        """Area and centroid of the unclipped set (for ``weighted_centroids``)."""
        a, b, left, right = self.plateau
        pieces = [(a - left, a, 0.0, 1.0), (a, b, 1.0, 1.0), (b, b + right, 1.0, 0.0)]
        area = sum((y1 - y0) * (m0 + m1) / 2 for y0, y1, m0, m1 in pieces)
        moment = sum((y1 - y0) / 6 * (m0 * (2 * y0 + y1) + m1 * (y0 + 2 * y1)) for y0, y1, m0, m1 in pieces)
        return area, (moment / area if area > 0 else a)


@dataclass(frozen=True)
class Variable:
    name: str
    lo: float
    hi: float
    sets: dict[str, FuzzySet]


# -- rule conditions ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Is:
    var: str
    set: str


@dataclass(frozen=True)
class Op:
    op: str  # "&&", "||", "!"
    args: tuple[Cond, ...]


Cond = Is | Op


@dataclass(frozen=True)
class Rule:
    cond: Cond
    assigns: tuple[tuple[str, str], ...]


# -- tokenizer and parser ---------------------------------------------------------------------------
_TOKEN = re.compile(
    r"""(?P<ws>[ \t\r\n]+)|(?P<comment>/\*.*?\*/|//[^\n]*)
      |(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)
      |(?P<ident>[A-Za-z_][A-Za-z0-9_]*)
      |(?P<op>==|&&|\|\||[(){},;=!])""",
    re.VERBOSE | re.DOTALL,
)


@dataclass
class _Tok:
    kind: str
    text: str
    line: int
    col: int


def _tokenize(text: str, source: str) -> list[_Tok]:
    toks, pos, line, line_start = [], 0, 1, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise RulebaseError(f"unexpected character {text[pos]!r}", line, pos - line_start + 1, source)
        kind = m.lastgroup or ""
        if kind not in ("ws", "comment"):
            toks.append(_Tok(kind, m.group(), line, pos - line_start + 1))
        chunk = m.group()
        nl = chunk.count("\n")
        if nl:
            line += nl
            line_start = pos + chunk.rindex("\n") + 1
        pos = m.end()
    toks.append(_Tok("eof", "", line, pos - line_start + 1))
    return toks


class _Parser:
    def __init__(self, text: str, source: str) -> None:
        self.toks = _tokenize(text, source)
        self.i = 0
        self.source = source

    def err(self, msg: str, tok: _Tok | None = None) -> RulebaseError:
        t = tok or self.toks[self.i]
        return RulebaseError(msg, t.line, t.col, self.source)

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def take(self, text: str | None = None, kind: str | None = None) -> _Tok:
        t = self.toks[self.i]
        if (text is not None and t.text != text) or (kind is not None and t.kind != kind):
            want = repr(text) if text is not None else {"ident": "a name", "num": "a number"}.get(kind or "", kind)
            got = repr(t.text) if t.kind != "eof" else "end of input"
            raise self.err(f"expected {want}, found {got}", t)
        self.i += 1
        return t

    def number(self) -> float:
        return float(self.take(kind="num").text)

    def numbers(self, n: int) -> tuple[float, ...]:
        self.take("(")
        vals = [self.number()]
        for _ in range(n - 1):
            self.take(",")
            vals.append(self.number())
        self.take(")")
        return tuple(vals)

    def parse(self) -> tuple[dict[str, Variable], list[tuple[Rule, _Tok]]]:
        variables: dict[str, Variable] = {}
        rules: list[tuple[Rule, _Tok]] = []
        while self.peek().text == "var":
            start = self.take("var")
            name_tok = self.take(kind="ident")
            if name_tok.text in variables:
                raise self.err(f"variable {name_tok.text!r} is declared twice", name_tok)
            lo, hi = self.numbers(2)
            if not lo < hi:
                raise self.err(f"variable {name_tok.text!r}: the range needs lo < hi, got ({lo:g}, {hi:g})", start)
            self.take("{")
            sets: dict[str, FuzzySet] = {}
            while self.peek().text == "set":
                self.take("set")
                kind_tok = self.take(kind="ident")
                if kind_tok.text not in ("triangle", "trapez"):
                    raise self.err(f"unknown set shape {kind_tok.text!r}: use triangle or trapez", kind_tok)
                set_tok = self.take(kind="ident")
                if set_tok.text in sets:
                    raise self.err(f"set {set_tok.text!r} is declared twice in {name_tok.text!r}", set_tok)
                params = self.numbers(3 if kind_tok.text == "triangle" else 4)
                self.take(";")
                self._check_set(kind_tok.text, set_tok, params)
                sets[set_tok.text] = FuzzySet(set_tok.text, kind_tok.text, params)
            self.take("}")
            variables[name_tok.text] = Variable(name_tok.text, lo, hi, sets)
        while self.peek().text == "if":
            if_tok = self.take("if")
            self.take("(")
            cond = self.cond(variables)
            self.take(")")
            self.take("{")
            assigns = []
            while self.peek().kind == "ident":
                var_tok = self.take(kind="ident")
                self.take("=")
                set_tok = self.take(kind="ident")
                self.take(";")
                self._check_ref(variables, var_tok, set_tok)
                assigns.append((var_tok.text, set_tok.text))
            self.take("}")
            rules.append((Rule(cond, tuple(assigns)), if_tok))
        if self.peek().kind != "eof":
            raise self.err(f"expected 'var' or 'if', found {self.peek().text!r}")
        return variables, rules

    def _check_set(self, kind: str, tok: _Tok, p: tuple[float, ...]) -> None:
        widths = p[1:] if kind == "triangle" else p[2:]
        if any(w < 0 for w in widths):
            raise self.err(f"set {tok.text!r}: ramp widths must be >= 0, got {p}", tok)
        if kind == "trapez" and p[0] > p[1]:
            raise self.err(f"trapezoid {tok.text!r}: the plateau needs a <= b, got a={p[0]:g} > b={p[1]:g}", tok)

    def _check_ref(self, variables: dict[str, Variable], var_tok: _Tok, set_tok: _Tok) -> None:
        var = variables.get(var_tok.text)
        if var is None:
            raise self.err(f"undeclared variable {var_tok.text!r}", var_tok)
        if set_tok.text not in var.sets:
            raise self.err(f"variable {var_tok.text!r} has no set {set_tok.text!r}", set_tok)

    def cond(self, variables: dict[str, Variable]) -> Cond:
        args = [self.conj(variables)]
        while self.peek().text == "||":
            self.take("||")
            args.append(self.conj(variables))
        return args[0] if len(args) == 1 else Op("||", tuple(args))

    def conj(self, variables: dict[str, Variable]) -> Cond:
        args = [self.atom(variables)]
        while self.peek().text == "&&":
            self.take("&&")
            args.append(self.atom(variables))
        return args[0] if len(args) == 1 else Op("&&", tuple(args))

    def atom(self, variables: dict[str, Variable]) -> Cond:
        if self.peek().text == "!":
            self.take("!")
            return Op("!", (self.atom(variables),))
        if self.peek().text == "(":
            self.take("(")
            c = self.cond(variables)
            self.take(")")
            return c
        var_tok = self.take(kind="ident")
        self.take("==")
        set_tok = self.take(kind="ident")
        self._check_ref(variables, var_tok, set_tok)
        return Is(var_tok.text, set_tok.text)


def _tested(c: Cond) -> set[str]:
    return {c.var} if isinstance(c, Is) else set().union(*(_tested(a) for a in c.args))


def _strength(c: Cond, memberships: Mapping[tuple[str, str], np.ndarray]) -> np.ndarray:
    if isinstance(c, Is):
        return memberships[(c.var, c.set)]
    vals = [_strength(a, memberships) for a in c.args]
    if c.op == "!":
        return 1.0 - vals[0]
    return np.minimum.reduce(vals) if c.op == "&&" else np.maximum.reduce(vals)


# -- the rulebase ------------------------------------------------------------------------------------
@dataclass
class Rulebase:
    """A parsed rulebase; call :meth:`evaluate` or, for one input and one output, :meth:`table`.

    >>> rb = Rulebase.parse(DEFAULT_RULEBASE)
    >>> round(float(rb.evaluate({"distance": 0.6})["violation"]), 6)   # 7/29
    0.241379
    """

    variables: dict[str, Variable]
    rules: list[Rule]
    inputs: tuple[str, ...] = field(default=())
    outputs: tuple[str, ...] = field(default=())
    text: str = ""

    @classmethod
    def parse(cls, text: str, source: str = "<rulebase>") -> Rulebase:
        variables, located = _Parser(text, source).parse()
        inputs: dict[str, None] = {}
        outputs: dict[str, None] = {}
        for rule, _ in located:
            inputs.update(dict.fromkeys(sorted(_tested(rule.cond))))
            outputs.update(dict.fromkeys(v for v, _ in rule.assigns))
        for rule, tok in located:
            both = (_tested(rule.cond) | {v for v, _ in rule.assigns}) & set(inputs) & set(outputs)
            if both:
                name = sorted(both)[0]
                raise RulebaseError(
                    f"variable {name!r} is both tested and assigned (input and output)", tok.line, tok.col, source
                )
        if not located:
            raise RulebaseError("the rulebase has no rules", source=source)
        return cls(variables, [r for r, _ in located], tuple(inputs), tuple(outputs), text)

    @classmethod
    def default(cls) -> Rulebase:
        return cls.parse(DEFAULT_RULEBASE, "<default rulebase>")

    @classmethod
    def from_file(cls, path: str) -> Rulebase:
        with open(path, encoding="utf-8") as fh:
            return cls.parse(fh.read(), path)

    def strengths(self, inputs: Mapping[str, npt.ArrayLike]) -> list[np.ndarray]:
        """Firing strength α of every rule (arrays broadcast over the inputs)."""
        missing = [v for v in self.inputs if v not in inputs]
        if missing:
            raise KeyError(f"missing rulebase inputs: {missing}")
        mem: dict[tuple[str, str], np.ndarray] = {}
        for name in self.inputs:
            var = self.variables[name]
            x = np.clip(np.asarray(inputs[name], dtype=np.float64), var.lo, var.hi)
            for s in var.sets.values():
                mem[(name, s.name)] = s.mu(x)
        return [_strength(r.cond, mem) for r in self.rules]

    def evaluate(self, inputs: Mapping[str, float], defuzz: str = "centroid") -> dict[str, float]:
        """Crisp outputs for one set of inputs; NaN where no rule fired (``no_rule_fired``)."""
        alphas = [float(a) for a in self.strengths(inputs)]
        out = {}
        for name in self.outputs:
            contrib = [
                (alpha, self.variables[name].sets[s])
                for rule, alpha in zip(self.rules, alphas, strict=True)
                for v, s in rule.assigns
                if v == name and alpha > 0
            ]
            var = self.variables[name]
            if defuzz == "centroid":
                out[name] = centroid(contrib, var.lo, var.hi)
            elif defuzz == "weighted_centroids":
                w = [(a * s.area_centroid[0], s.area_centroid[1]) for a, s in contrib]
                total = sum(x for x, _ in w)
                out[name] = sum(x * c for x, c in w) / total if total > 0 else float("nan")
            else:
                raise ValueError(f"unknown defuzz {defuzz!r}: use 'centroid' or 'weighted_centroids'")
        return out

    def table(self, points: int = 4001, defuzz: str = "centroid") -> tuple[np.ndarray, np.ndarray]:
        """(x grid, exact outputs) over the input universe, for a one-input, one-output rulebase.

        Used for fast vectorised evaluation by linear interpolation (``np.interp``); the tests bound
        the interpolation error against the exact evaluation. A parsed rulebase's table is computed
        once per machine (about 3 CPU-s of exact evaluations; kept in the user's cache folder,
        :mod:`~perfsift.operators.cache_dir`) and shared, read-only.
        """
        if self.text:
            return _cached_table(self.text, points, defuzz)
        return self._table(points, defuzz)

    def _table(self, points: int, defuzz: str) -> tuple[np.ndarray, np.ndarray]:
        if len(self.inputs) != 1 or len(self.outputs) != 1:
            raise ValueError("a lookup table needs exactly one input and one output variable")
        var = self.variables[self.inputs[0]]
        xs = np.linspace(var.lo, var.hi, points)
        ys = np.array([self.evaluate({var.name: x}, defuzz)[self.outputs[0]] for x in xs])
        return xs, ys


@functools.lru_cache(maxsize=32)
def _cached_table(text: str, points: int, defuzz: str) -> tuple[np.ndarray, np.ndarray]:
    """The table of a rulebase's text, once per process and, on disk, once per machine (about 3
    CPU-s of exact evaluations, which every stage with a contract or a model paid as it started):
    keyed by this module's source as well, so a change to the inference computes it afresh."""
    from pathlib import Path

    from perfsift.operators.cache_dir import cached_array

    key = b"\0".join((Path(__file__).read_bytes(), text.encode(), str(points).encode(), defuzz.encode()))
    both = cached_array("rulebase-tables", key, lambda: np.stack(Rulebase.parse(text)._table(points, defuzz)))
    return both[0], both[1]


def centroid(contrib: list[tuple[float, FuzzySet]], lo: float, hi: float) -> float:
    """Exact centroid over [lo, hi] of ``max_k min(α_k, μ_k(y))`` (piecewise linear).

    Between breakpoints every clipped set is linear; adding the crossings of those lines makes the
    maximum linear on each piece, which is integrated in closed form. Values at piece ends are
    taken as one-sided limits, so vertical edges are handled exactly.
    """
    if not contrib:
        return float("nan")
    pts = {lo, hi}
    for alpha, s in contrib:
        pts.update(p for p in s.breakpoints(alpha) if lo < p < hi)
    grid = sorted(pts)
    alphas = np.array([a for a, _ in contrib])

    def clipped(y: np.ndarray) -> np.ndarray:  # [points, contributions]
        return np.minimum(alphas, np.stack([s.mu(y) for _, s in contrib], axis=1))

    fine = [grid[0]]
    for y0, y1 in itertools.pairwise(grid):
        t = np.array([y0 + (y1 - y0) / 3, y0 + 2 * (y1 - y0) / 3])
        v = clipped(t)
        slope = (v[1] - v[0]) / (t[1] - t[0])
        icpt = v[0] - slope * t[0]
        ds = slope[:, None] - slope[None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            cross = (icpt[None, :] - icpt[:, None]) / ds
        cross = cross[np.isfinite(cross) & (cross > y0) & (cross < y1)]
        fine += sorted(set(cross.tolist()))
        fine.append(y1)
    y = np.array(fine)
    keep = y[1:] > y[:-1]
    a, b = y[:-1][keep], y[1:][keep]
    t1, t2 = a + (b - a) / 3, a + 2 * (b - a) / 3
    m1, m2 = clipped(t1).max(axis=1), clipped(t2).max(axis=1)
    mu0 = 2 * m1 - m2  # linear extrapolation to the piece's ends (one-sided limits)
    mu1 = 2 * m2 - m1
    area = ((b - a) * (mu0 + mu1) / 2).sum()
    moment = ((b - a) / 6 * (mu0 * (2 * a + b) + mu1 * (a + 2 * b))).sum()
    return float(moment / area) if area > 0 else float("nan")


__all__ = ["DEFAULT_RULEBASE", "FuzzySet", "Rule", "Rulebase", "RulebaseError", "Variable", "centroid"]
