"""The expression language of structural models (METHODS.md §5.3): parsing, evaluation over
node arrays, and the interval arithmetic that checks divisions.

Every value is an array over the job's nodes (sorted by name); ``max_nodes`` and friends reduce
over them, ``next``/``prev`` read a node's neighbour (cyclically). No Python is evaluated: the
expressions are parsed with :mod:`ast` and only the operators and functions of
:data:`FUNCTIONS` are accepted. A division by something whose range - from the parameters'
declared ``min``/``max`` and constants, by interval arithmetic - contains zero is refused when
the model is loaded.

>>> tree = parse_expression("2 * (RComp + RComm) ^ 2")
>>> unparse(tree), sorted(names_in(tree))
('(2 * ((RComp + RComm) ** 2))', ['RComm', 'RComp'])
>>> evaluate(parse_expression("max_nodes(x) / 2"), {"x": np.array([1.0, 4.0, 3.0])}).tolist()
[[2.0]]
"""

from __future__ import annotations

import ast
import difflib
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

#: function -> (number of arguments (-1 = two or more), kind)
FUNCTIONS: dict[str, tuple[int, str]] = {
    "max": (-1, "kink"),
    "min": (-1, "kink"),
    "max_nodes": (1, "kink"),
    "min_nodes": (1, "kink"),
    "sum_nodes": (1, "reduce"),
    "mean_nodes": (1, "reduce"),
    "next": (1, "shift"),
    "prev": (1, "shift"),
    "sqrt": (1, "smooth"),
    "log": (1, "smooth"),
    "exp": (1, "smooth"),
    "abs": (1, "kink"),
}
_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}


class ModelError(ValueError):
    """A model file that cannot be used; the message names the file, line and problem."""

    def __init__(self, msg: str, source: str = "<model>", line: int = 0, col: int = 0) -> None:
        self.line, self.col = line, col
        where = f"{source}:{line}" + (f":{col}" if col else "") if line else source
        super().__init__(f"{where}: {msg}")


# -- expressions -----------------------------------------------------------------------------------
Node = tuple[Any, ...]  # ("num", v) | ("name", n) | ("bin", op, a, b) | ("neg", a) | ("call", fn, args)


def parse_expression(text: str, source: str = "<model>", line: int = 0, col: int = 0) -> Node:
    """Parse one expression of the model language (``^`` is accepted for ``**``)."""
    try:
        tree = ast.parse(str(text).replace("^", "**").strip(), mode="eval")
    except SyntaxError as e:
        raise ModelError(f"syntax error in {text!r}: {e.msg}", source, line, col + (e.offset or 0)) from None

    def conv(n: ast.AST) -> Node:
        if isinstance(n, ast.Constant) and isinstance(n.value, int | float) and not isinstance(n.value, bool):
            return ("num", float(n.value))
        if isinstance(n, ast.Name):
            return ("name", n.id)
        if isinstance(n, ast.BinOp) and type(n.op) in _BINOPS:
            return ("bin", _BINOPS[type(n.op)], conv(n.left), conv(n.right))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub | ast.UAdd):
            inner = conv(n.operand)
            return ("neg", inner) if isinstance(n.op, ast.USub) else inner
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and not n.keywords:
            fn = n.func.id
            if fn not in FUNCTIONS:
                hint = difflib.get_close_matches(fn, FUNCTIONS, n=1)
                more = f" (did you mean {hint[0]!r}?)" if hint else f"; known: {', '.join(sorted(FUNCTIONS))}"
                raise ModelError(f"unknown function {fn!r}{more}", source, line, col)
            arity = FUNCTIONS[fn][0]
            if (arity == -1 and len(n.args) < 2) or (arity > 0 and len(n.args) != arity):
                want = "two or more arguments" if arity == -1 else f"{arity} argument"
                raise ModelError(f"{fn}() takes {want}, got {len(n.args)}", source, line, col)
            return ("call", fn, [conv(a) for a in n.args])
        what = type(n).__name__
        raise ModelError(
            f"{what} is not allowed in {text!r}: use numbers, names, + - * / ** and {', '.join(sorted(FUNCTIONS))}",
            source,
            line,
            col,
        )

    return conv(tree.body)


def names_in(node: Node) -> set[str]:
    kind = node[0]
    if kind == "name":
        return {node[1]}
    if kind == "bin":
        return names_in(node[2]) | names_in(node[3])
    if kind == "neg":
        return names_in(node[1])
    if kind == "call":
        return set().union(*(names_in(a) for a in node[2]))
    return set()


def unparse(node: Node) -> str:
    kind = node[0]
    if kind == "num":
        return f"{node[1]:g}"
    if kind == "name":
        return str(node[1])
    if kind == "neg":
        return f"-{unparse(node[1])}"
    if kind == "bin":
        return f"({unparse(node[2])} {node[1]} {unparse(node[3])})"
    return f"{node[1]}({', '.join(unparse(a) for a in node[2])})"


def _shift(x: np.ndarray, k: int) -> np.ndarray:
    return np.roll(x, -k, axis=-1) if x.shape[-1] > 1 else x


_CALLS: dict[str, Callable[..., np.ndarray]] = {
    "max_nodes": lambda x: np.max(x, axis=-1, keepdims=True),
    "min_nodes": lambda x: np.min(x, axis=-1, keepdims=True),
    "sum_nodes": lambda x: np.sum(x, axis=-1, keepdims=True),
    "mean_nodes": lambda x: np.mean(x, axis=-1, keepdims=True),
    "next": lambda x: _shift(x, 1),
    "prev": lambda x: _shift(x, -1),
    "sqrt": np.sqrt,
    "log": np.log,
    "exp": np.exp,
    "abs": np.abs,
}


def evaluate(node: Node, env: Mapping[str, np.ndarray]) -> np.ndarray:
    """The value of an expression tree, every name taken from ``env``."""
    kind = node[0]
    if kind == "num":
        return np.asarray(node[1])
    if kind == "name":
        return env[node[1]]
    if kind == "neg":
        return -evaluate(node[1], env)
    if kind == "bin":
        a, b = evaluate(node[2], env), evaluate(node[3], env)
        op = node[1]
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            return a / b
        return np.power(a, b)
    args = [evaluate(a, env) for a in node[2]]
    fn = node[1]
    if fn in ("max", "min"):
        out = args[0]
        for a in args[1:]:
            out = np.maximum(out, a) if fn == "max" else np.minimum(out, a)
        return out
    # per-node arrays broadcast to (samples, nodes) before a node-wise function sees them
    x = np.atleast_2d(args[0])
    return _CALLS[fn](x)


# -- interval arithmetic (division check) ----------------------------------------------------------
Interval = tuple[float, float]


def _mul(a: Interval, b: Interval) -> Interval:
    ps = [x * y if not (x == 0 or y == 0) else 0.0 for x in a for y in b]
    return min(ps), max(ps)


def _pow(x: float, c: float) -> float:
    """x ** c for x >= 0 in the extended reals (0 ** negative = inf, overflow = inf)."""
    if x == 0 and c < 0:
        return math.inf
    try:
        return float(x**c)
    except OverflowError:
        return math.inf


def interval(node: Node, ranges: Mapping[str, Interval], on_div: Callable[[Node, Interval], None]) -> Interval:
    """The range of an expression from its names' ``ranges``; ``on_div`` is told of every
    denominator whose range contains zero."""
    kind = node[0]
    inf = math.inf
    if kind == "num":
        return node[1], node[1]
    if kind == "name":
        return ranges[node[1]]
    if kind == "neg":
        lo, hi = interval(node[1], ranges, on_div)
        return -hi, -lo
    if kind == "bin":
        a = interval(node[2], ranges, on_div)
        b = interval(node[3], ranges, on_div)
        op = node[1]
        if op == "+":
            return a[0] + b[0], a[1] + b[1]
        if op == "-":
            return a[0] - b[1], a[1] - b[0]
        if op == "*":
            return _mul(a, b)
        if op == "/":
            if b[0] <= 0 <= b[1]:
                on_div(node[3], b)
                return -inf, inf
            return _mul(a, (1 / b[1], 1 / b[0]))
        if a[0] >= 0 and b[0] == b[1]:  # x ** constant, x >= 0: monotone, so the ends map to the ends
            lo, hi = sorted(_pow(x, b[0]) for x in a)
            return lo, hi
        return -inf, inf
    fn = node[1]
    args = [interval(a, ranges, on_div) for a in node[2]]
    lo, hi = args[0]
    if fn == "max":
        return max(a[0] for a in args), max(a[1] for a in args)
    if fn == "min":
        return min(a[0] for a in args), min(a[1] for a in args)
    if fn == "sum_nodes":
        return (lo if lo >= 0 else -inf), (hi if hi <= 0 else inf)
    if fn == "sqrt":
        return math.sqrt(max(lo, 0.0)), math.sqrt(hi) if hi >= 0 else 0.0
    if fn == "log":
        return (math.log(lo) if lo > 0 else -inf), (math.log(hi) if hi > 0 else -inf)
    if fn == "exp":
        return math.exp(min(lo, 700.0)), math.exp(min(hi, 700.0))
    if fn == "abs":
        return (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))), max(abs(lo), abs(hi))
    return lo, hi  # *_nodes reductions other than sum, next, prev


def did_you_mean(name: str, known: Any) -> str:
    """`` (did you mean 'X'?)`` for the closest of ``known`` names, or nothing."""
    m = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {m[0]!r}?)" if m else ""
