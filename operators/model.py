"""Structural performance models with stochastic parameters (Berman & Wolski's Performance
Prediction Engineering; METHODS.md §5.3).

A model file (YAML) names *parameters* - constants, per-node constants, live metrics whose mean
and spread come from the NWS forecasts of that metric (§5), or static mean/sigma pairs - and
*components*: expressions in a small arithmetic language built on them and on each other. The
*outputs* are the components a prediction reports. Example (the SOR model of the seed paper,
``models/sor.yaml``)::

    parameters:
      NumElts:      {value: 250000}                 # per node: a list, or one value for all
      Benchmark:    {value: 4.0e-7}                 # s per element on a dedicated CPU
      ColumnSize:   {value: 1000}
      EltSize:      {value: 8}
      FracAvailCPU: {metric: cpu_avail, min: 0.02, max: 1}
      BWAvail:      {metric: bw_avail, min: 1.0e5}
    components:
      RComp:    NumElts * Benchmark / FracAvailCPU / 2
      RComm:    ColumnSize * EltSize / BWAvail
      NodeTime: 2 * (RComp + RComm)
      IterTime: max_nodes(NodeTime)
    outputs: [IterTime]

Every value is an array over the job's nodes (sorted by name); ``max_nodes`` and friends reduce
over them, ``next``/``prev`` read a node's neighbour (cyclically). No Python is evaluated: the
expressions are parsed with :mod:`ast` and only the operators and functions of
:data:`FUNCTIONS` are accepted. A division by something whose range - from the parameters'
declared ``min``/``max`` and constants, by interval arithmetic - contains zero is refused when
the model is loaded.

A prediction is a mean and a sigma per output (§5.3: the interval is mean ± 2 sigma), by

- ``first-order`` propagation: the output at the parameter means, and
  ``sigma² = Σ (∂f/∂θ)² σ_θ²`` over every stochastic (parameter, node), derivatives by central
  differences (parameters independent);
- ``monte-carlo``: seeded, vectorised draws of every stochastic parameter - normal, clipped to
  its declared range, or ``distribution: empirical`` (drawn from the metric's recent observed
  values, for parameters that are not normal) - through the model;
- ``auto`` (default): Monte Carlo when a max/min touches a stochastic input (the first-order
  result is then the max of the means, which underestimates the mean of the max) or when the
  second-order term ``½ Σ ∂²f/∂θ² σ_θ²`` exceeds 0.1 sigma; otherwise first order. The
  prediction says which method ran and why.
"""

from __future__ import annotations

import ast
import difflib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

METHODS = ("auto", "first-order", "monte-carlo")

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
NONLINEARITY = 0.1  # auto switches to Monte Carlo above this second-order bias, in sigmas


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


def _evaluate(node: Node, env: Mapping[str, np.ndarray]) -> np.ndarray:
    kind = node[0]
    if kind == "num":
        return np.asarray(node[1])
    if kind == "name":
        return env[node[1]]
    if kind == "neg":
        return -_evaluate(node[1], env)
    if kind == "bin":
        a, b = _evaluate(node[2], env), _evaluate(node[3], env)
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
    args = [_evaluate(a, env) for a in node[2]]
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


def _interval(node: Node, ranges: Mapping[str, Interval], on_div: Callable[[Node, Interval], None]) -> Interval:
    kind = node[0]
    inf = math.inf
    if kind == "num":
        return node[1], node[1]
    if kind == "name":
        return ranges[node[1]]
    if kind == "neg":
        lo, hi = _interval(node[1], ranges, on_div)
        return -hi, -lo
    if kind == "bin":
        a = _interval(node[2], ranges, on_div)
        b = _interval(node[3], ranges, on_div)
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
    args = [_interval(a, ranges, on_div) for a in node[2]]
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


# -- the model -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Parameter:
    """One named input of a model.

    ``value``: a constant (scalar or per-node list). ``metric``: a live metric, whose mean and sigma
    come from its forecasts (``stochastic``, the default) or whose last observed value is used as a
    constant (``stochastic: false``). ``mean``/``sigma``: a static stochastic value (scalar or per
    node), e.g. for ``perfsift balance`` without a trace. ``min``/``max`` bound the draws and the
    division check; ``distribution: empirical`` draws Monte Carlo samples from the metric's recent
    observations instead of a normal.
    """

    name: str
    line: int
    value: tuple[float, ...] | None = None
    metric: str | None = None
    stochastic: bool = True
    mean: tuple[float, ...] | None = None
    sigma: tuple[float, ...] | None = None
    lo: float = -math.inf
    hi: float = math.inf
    distribution: str = "normal"

    @property
    def is_random(self) -> bool:
        return (self.metric is not None and self.stochastic) or self.mean is not None

    def range(self) -> Interval:
        if self.value is not None:
            return min(self.value), max(self.value)
        if self.mean is not None and self.sigma is not None and not any(self.sigma):
            return max(self.lo, min(self.mean)), min(self.hi, max(self.mean))
        return self.lo, self.hi


@dataclass(frozen=True)
class Component:
    name: str
    text: str
    tree: Node
    line: int


@dataclass
class Prediction:
    """Per output: ``mean``, ``sigma``, ``lower``/``upper`` (mean ∓ 2 sigma) and, for Monte Carlo,
    ``q025``/``q975`` - arrays over the nodes (length 1 for outputs reduced over nodes)."""

    outputs: dict[str, dict[str, np.ndarray]]
    method: str
    reason: str
    nodes: int
    diagnostics: dict[str, float] = field(default_factory=dict)


_PARAM_KEYS = {"value", "metric", "stochastic", "mean", "sigma", "min", "max", "distribution", "doc"}
_TOP_KEYS = {"name", "description", "nodes", "parameters", "components", "outputs", "observed", "balance"}


def _line_map(node: yaml.Node, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], tuple[int, int]]:
    """(key path) -> (1-based line, column) of every mapping value in a composed YAML document."""
    out: dict[tuple[str, ...], tuple[int, int]] = {}
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            path = (*prefix, str(k.value))
            out[path] = (v.start_mark.line + 1, v.start_mark.column + 1)
            out.update(_line_map(v, path))
    return out


def _floats(v: Any, what: str, err: Callable[[str], ModelError]) -> tuple[float, ...]:
    vals = v if isinstance(v, list) else [v]
    try:
        out = tuple(float(x) for x in vals)
    except (TypeError, ValueError):
        raise err(f"{what} must be a number or a list of numbers, got {v!r}") from None
    if not out or not all(math.isfinite(x) for x in out):
        raise err(f"{what} must be finite numbers, got {v!r}")
    return out


class StructuralModel:
    """A parsed, checked model. Build it with :meth:`load` (a file) or :meth:`parse` (text)."""

    def __init__(
        self,
        name: str,
        parameters: dict[str, Parameter],
        components: dict[str, Component],
        outputs: list[str],
        observed: dict[str, str],
        balance: dict[str, Any] | None,
        nodes: int | None,
        source: str,
        text: str,
    ) -> None:
        self.name = name
        self.parameters = parameters
        self.components = components
        self.outputs = outputs
        self.observed = observed
        self.balance = balance
        self.nodes = nodes
        self.source = source
        self.text = text
        self.order = self._check()

    # -- loading ---------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> StructuralModel:
        p = Path(path)
        try:
            text = p.read_text()
        except OSError as e:
            raise ModelError(f"cannot read the model: {e.strerror}", str(p)) from None
        return cls.parse(text, str(p))

    @classmethod
    def parse(cls, text: str, source: str = "<model>") -> StructuralModel:
        try:
            composed = yaml.compose(text)
            doc = yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            line = mark.line + 1 if mark is not None else 0
            raise ModelError(f"not valid YAML: {getattr(e, 'problem', e)}", source, line) from None
        if not isinstance(doc, dict):
            raise ModelError("a model is a mapping with parameters, components and outputs", source, 1)
        lines = _line_map(composed) if composed is not None else {}

        def err(path: tuple[str, ...], msg: str) -> ModelError:
            line, col = lines.get(path, (0, 0))
            return ModelError(msg, source, line, col)

        unknown = set(doc) - _TOP_KEYS
        if unknown:
            k = sorted(unknown)[0]
            raise err((k,), f"unknown key {k!r}; a model has {', '.join(sorted(_TOP_KEYS))}")
        for key in ("parameters", "components", "outputs"):
            if key not in doc:
                raise ModelError(f"missing {key!r}", source, 1)
        if not isinstance(doc["parameters"], dict) or not isinstance(doc["components"], dict):
            raise ModelError("parameters and components are mappings of name: definition", source, 1)
        params: dict[str, Parameter] = {}
        for name, spec in doc["parameters"].items():
            path = ("parameters", str(name))
            line = lines.get(path, (0, 0))[0]
            params[str(name)] = cls._parameter(str(name), spec, line, lambda m, p=path: err(p, m))  # type: ignore[misc]
        comps: dict[str, Component] = {}
        for name, expr in doc["components"].items():
            path = ("components", str(name))
            line, col = lines.get(path, (0, 0))
            if str(name) in params:
                raise err(path, f"{name!r} is both a parameter and a component")
            if not isinstance(expr, str | int | float):
                raise err(path, f"component {name!r} must be an expression, got {type(expr).__name__}")
            comps[str(name)] = Component(str(name), str(expr), parse_expression(str(expr), source, line, col), line)
        outputs = doc["outputs"]
        if isinstance(outputs, str):
            outputs = [outputs]
        if not isinstance(outputs, list) or not outputs:
            raise err(("outputs",), "outputs is a non-empty list of component names")
        for o in outputs:
            if str(o) not in comps:
                raise err(("outputs",), f"output {o!r} is not a component{_hint(str(o), comps)}")
        observed = doc.get("observed") or {}
        if not isinstance(observed, dict):
            raise err(("observed",), "observed maps output names to the metric that measures them")
        for o in observed:
            if str(o) not in outputs:
                raise err(("observed", str(o)), f"observed {o!r} is not an output")
        balance = doc.get("balance")
        if balance is not None:
            if not isinstance(balance, dict) or {"work", "time"} - set(balance):
                raise err(("balance",), "balance needs work: PARAMETER and time: COMPONENT")
            w, t = str(balance["work"]), str(balance["time"])
            if w not in params or params[w].value is None:
                raise err(("balance", "work"), f"balance work {w!r} must be a constant parameter{_hint(w, params)}")
            if t not in comps:
                raise err(("balance", "time"), f"balance time {t!r} is not a component{_hint(t, comps)}")
        nodes = doc.get("nodes")
        if nodes is not None and (not isinstance(nodes, int) or nodes < 1):
            raise err(("nodes",), f"nodes must be a positive integer, got {nodes!r}")
        return cls(
            str(doc.get("name", Path(source).stem)),
            params,
            comps,
            [str(o) for o in outputs],
            {str(k): str(v) for k, v in observed.items()},
            balance,
            nodes,
            source,
            text,
        )

    @staticmethod
    def _parameter(name: str, spec: Any, line: int, err: Callable[[str], ModelError]) -> Parameter:
        if isinstance(spec, int | float) and not isinstance(spec, bool):
            spec = {"value": spec}
        if not isinstance(spec, dict):
            raise err(f"parameter {name!r}: give value:, metric: or mean:/sigma:")
        bad = set(spec) - _PARAM_KEYS
        if bad:
            raise err(f"parameter {name!r}: unknown key {sorted(bad)[0]!r}; use {', '.join(sorted(_PARAM_KEYS))}")
        kinds = [k for k in ("value", "metric", "mean") if k in spec]
        if len(kinds) != 1:
            raise err(f"parameter {name!r}: give exactly one of value:, metric: or mean: (with sigma:)")
        lo = float(spec.get("min", -math.inf))
        hi = float(spec.get("max", math.inf))
        if lo > hi:
            raise err(f"parameter {name!r}: min {lo} > max {hi}")
        dist = str(spec.get("distribution", "normal"))
        if dist not in ("normal", "empirical"):
            raise err(f"parameter {name!r}: distribution is normal or empirical, got {dist!r}")
        if dist == "empirical" and "metric" not in spec:
            raise err(f"parameter {name!r}: an empirical distribution needs a metric to draw observations from")
        if "value" in spec:
            return Parameter(name, line, value=_floats(spec["value"], f"{name}.value", err), lo=lo, hi=hi)
        if "metric" in spec:
            if not isinstance(spec["metric"], str) or not spec["metric"]:
                raise err(f"parameter {name!r}: metric must be a metric name")
            return Parameter(
                name, line, metric=spec["metric"], stochastic=bool(spec.get("stochastic", True)), lo=lo, hi=hi,
                distribution=dist,
            )  # fmt: skip
        if "sigma" not in spec:
            raise err(f"parameter {name!r}: mean: needs sigma:")
        mean, sigma = _floats(spec["mean"], f"{name}.mean", err), _floats(spec["sigma"], f"{name}.sigma", err)
        if any(s < 0 for s in sigma):
            raise err(f"parameter {name!r}: sigma must be >= 0")
        return Parameter(name, line, mean=mean, sigma=sigma, lo=lo, hi=hi)

    def _check(self) -> list[str]:
        """Names resolve, no cycles, no division by something that can be zero; returns the
        components in evaluation order."""
        known = set(self.parameters) | set(self.components)
        for c in self.components.values():
            for n in sorted(names_in(c.tree)):
                if n not in known:
                    raise ModelError(f"component {c.name!r}: unknown name {n!r}{_hint(n, known)}", self.source, c.line)
        order: list[str] = []
        state: dict[str, int] = {}

        def visit(name: str, path: list[str]) -> None:
            if state.get(name) == 2:
                return
            if state.get(name) == 1:
                cyc = [*path[path.index(name) :], name]
                raise ModelError(
                    f"components form a cycle: {' -> '.join(cyc)}", self.source, self.components[name].line
                )
            state[name] = 1
            for dep in sorted(names_in(self.components[name].tree)):
                if dep in self.components:
                    visit(dep, [*path, name])
            state[name] = 2
            order.append(name)

        for name in self.components:
            visit(name, [])
        ranges: dict[str, Interval] = {n: p.range() for n, p in self.parameters.items()}
        for name in order:
            c = self.components[name]

            def on_div(den: Node, iv: Interval, c: Component = c) -> None:
                raise ModelError(
                    f"component {c.name!r} divides by {unparse(den)}, which can be zero (its range is "
                    f"[{iv[0]:g}, {iv[1]:g}]); bound the parameters it uses with min:/max:",
                    self.source,
                    c.line,
                )

            ranges[name] = _interval(c.tree, ranges, on_div)
        return order

    # -- structure -------------------------------------------------------------------------------
    def metrics(self) -> list[str]:
        """Metrics the model reads (parameters and observed outputs)."""
        ms = {p.metric for p in self.parameters.values() if p.metric}
        return sorted(ms | set(self.observed.values()))

    def random_inputs(self, name: str) -> set[str]:
        """The stochastic parameters a component or parameter depends on."""
        if name in self.parameters:
            return {name} if self.parameters[name].is_random else set()
        return set().union(*(self.random_inputs(n) for n in names_in(self.components[name].tree)))

    def kinks(self, targets: Sequence[str]) -> list[str]:
        """Descriptions of max/min/abs applied to stochastic inputs on the way to ``targets``."""
        found: list[str] = []
        seen: set[str] = set()

        def walk(node: Node) -> None:
            if node[0] == "call":
                if FUNCTIONS[node[1]][1] == "kink" and any(self._random_expr(a) for a in node[2]):
                    found.append(f"{node[1]}({', '.join(unparse(a) for a in node[2])})")
                for a in node[2]:
                    walk(a)
            elif node[0] == "bin":
                walk(node[2])
                walk(node[3])
            elif node[0] == "neg":
                walk(node[1])
            elif node[0] == "name" and node[1] in self.components and node[1] not in seen:
                seen.add(node[1])
                walk(self.components[node[1]].tree)

        for t in targets:
            seen.add(t)
            walk(self.components[t].tree)
        return found

    def per_node(self, name: str) -> bool:
        """Whether a component has one value per node (False: one value for the job, as after
        ``max_nodes``)."""

        def walk(node: Node) -> bool:
            kind = node[0]
            if kind == "num":
                return False
            if kind == "name":
                n = node[1]
                if n in self.components:
                    return walk(self.components[n].tree)
                p = self.parameters[n]
                return p.metric is not None or len(p.value or p.mean or ()) > 1
            if kind == "neg":
                return walk(node[1])
            if kind == "bin":
                return walk(node[2]) or walk(node[3])
            if node[1].endswith("_nodes"):
                return False
            return any(walk(a) for a in node[2])

        return walk(self.components[name].tree)

    def _random_expr(self, node: Node) -> bool:
        return any(self.random_inputs(n) for n in names_in(node))

    # -- evaluation ------------------------------------------------------------------------------
    def node_count(self, inputs: Mapping[str, Mapping[str, Any]], nodes: int | None) -> int:
        """The job's node count: ``nodes``, else the model's ``nodes:``, else the length of the
        per-node values; every per-node value must have that length."""
        sizes = {len(p.value) for p in self.parameters.values() if p.value is not None and len(p.value) > 1}
        sizes |= {len(p.mean) for p in self.parameters.values() if p.mean is not None and len(p.mean) > 1}
        sizes |= {np.size(v["mean"]) for v in inputs.values() if "mean" in v and np.size(v["mean"]) > 1}
        if nodes is None:
            nodes = self.nodes or (max(sizes) if sizes else 1)
        bad = sorted(s for s in sizes if s != nodes)
        if bad:
            raise ModelError(f"per-node values of length {bad[0]} for a job of {nodes} nodes", self.source)
        return nodes

    def _moments(
        self, inputs: Mapping[str, Mapping[str, Any]], nodes: int
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Mean and sigma over nodes of every parameter (sigma 0 for constants)."""
        means, sigmas = {}, {}
        for name, p in self.parameters.items():
            if p.value is not None:
                mu, sd = np.broadcast_to(np.array(p.value), (nodes,)), np.zeros(nodes)
            elif p.mean is not None:
                mu = np.broadcast_to(np.array(p.mean), (nodes,))
                sd = np.broadcast_to(np.array(p.sigma), (nodes,))
            else:
                got = inputs.get(name)
                if got is None:
                    raise ModelError(f"no value for parameter {name!r} (metric {p.metric!r})", self.source, p.line)
                mu = np.broadcast_to(np.asarray(got["mean"], dtype=np.float64), (nodes,))
                sd = np.broadcast_to(np.asarray(got.get("sigma", 0.0), dtype=np.float64), (nodes,))
                if not p.stochastic:
                    sd = np.zeros(nodes)
            if np.isnan(mu).any():
                raise ModelError(f"parameter {name!r} has no value for some node", self.source, p.line)
            means[name] = np.clip(mu.astype(np.float64), p.lo, p.hi)
            sigmas[name] = np.nan_to_num(sd.astype(np.float64))
        return means, sigmas

    def evaluate(self, env: dict[str, np.ndarray], targets: Sequence[str]) -> dict[str, np.ndarray]:
        """Evaluate components over env (parameters as (samples, nodes) arrays); returns targets as
        (samples, nodes or 1) arrays."""
        env = dict(env)
        with np.errstate(all="ignore"):
            for name in self.order:
                env[name] = np.atleast_2d(_evaluate(self.components[name].tree, env))
        return {t: env[t] for t in targets}

    def draw(
        self,
        inputs: Mapping[str, Mapping[str, Any]],
        samples: int,
        seed: int | np.random.Generator = 0,
        nodes: int | None = None,
    ) -> dict[str, np.ndarray]:
        """Monte Carlo draws of every parameter, (samples, nodes) each (constants broadcast)."""
        p_count = self.node_count(inputs, nodes)
        means, sigmas = self._moments(inputs, p_count)
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        env = {}
        for name, p in self.parameters.items():
            if p.distribution == "empirical":
                hist = np.asarray(inputs[name].get("samples", np.empty((0, p_count))), dtype=np.float64)
                if hist.ndim != 2 or hist.shape[0] == 0:
                    raise ModelError(f"parameter {name!r}: no observations to draw from yet", self.source, p.line)
                pick = rng.integers(0, hist.shape[0], size=(samples, p_count))
                col = hist[pick, np.arange(p_count)[None, :]]
                fill = np.where(np.isnan(col), means[name][None, :], col)
                env[name] = np.clip(fill, p.lo, p.hi)
            elif sigmas[name].any():
                env[name] = np.clip(rng.normal(means[name], sigmas[name], size=(samples, p_count)), p.lo, p.hi)
            else:
                env[name] = means[name][None, :]
        return env

    def predict(
        self,
        inputs: Mapping[str, Mapping[str, Any]] | None = None,
        method: str = "auto",
        samples: int = 4000,
        seed: int = 0,
        nodes: int | None = None,
        outputs: Sequence[str] | None = None,
    ) -> Prediction:
        """Predict the outputs.

        ``inputs`` gives the metric parameters per name: ``{"mean": per-node array, "sigma": per-node
        array, "samples": (observations, nodes) array for empirical ones}``.
        """
        if method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
        inputs = inputs or {}
        targets = list(outputs or self.outputs)
        p_count = self.node_count(inputs, nodes)
        empirical = [n for n, p in self.parameters.items() if p.distribution == "empirical"]
        reason = ""
        diag: dict[str, float] = {}
        if method == "auto":
            kinks = self.kinks(targets)
            if kinks:
                method, reason = "monte-carlo", f"{kinks[0]} has stochastic inputs"
            elif empirical:
                method, reason = "monte-carlo", f"{empirical[0]} is drawn from observations"
        if method in ("auto", "first-order"):
            first = self._first_order(inputs, p_count, targets)
            ratio = float(first.diagnostics.get("nonlinearity", 0.0))
            if method == "first-order" or ratio <= NONLINEARITY:
                first.method = "first-order"
                first.reason = reason or (
                    "asked for" if method == "first-order" else f"smooth (second-order term {ratio:.3f} sigma)"
                )
                return first
            reason = f"non-linear: second-order term {ratio:.2f} sigma > {NONLINEARITY}"
            diag.update(first.diagnostics)
        env = self.draw(inputs, samples, seed, p_count)
        res = self.evaluate(env, targets)
        out = {}
        for t, v in res.items():
            v = np.broadcast_to(v, (samples, v.shape[1]))
            mean, sd = v.mean(axis=0), v.std(axis=0, ddof=1) if samples > 1 else np.zeros(v.shape[1])
            q = np.quantile(v, [0.025, 0.975], axis=0)
            out[t] = {
                "mean": mean,
                "sigma": sd,
                "lower": mean - 2 * sd,
                "upper": mean + 2 * sd,
                "q025": q[0],
                "q975": q[1],
            }
        diag["samples"] = float(samples)
        return Prediction(out, "monte-carlo", reason or "asked for", p_count, diag)

    def _first_order(self, inputs: Mapping[str, Mapping[str, Any]], nodes: int, targets: Sequence[str]) -> Prediction:
        means, sigmas = self._moments(inputs, nodes)
        free = [(n, j) for n in self.parameters for j in range(nodes) if sigmas[n][j] > 0]
        k = len(free)
        env = {n: np.repeat(means[n][None, :], 1 + 2 * k, axis=0) for n in self.parameters}
        steps = np.empty(k)
        for i, (n, j) in enumerate(free):
            h = 1e-3 * sigmas[n][j]
            steps[i] = h
            env[n][1 + 2 * i, j] += h
            env[n][2 + 2 * i, j] -= h
        res = self.evaluate(env, targets)
        out, worst = {}, 0.0
        for t, v in res.items():
            v = np.broadcast_to(v, (1 + 2 * k, v.shape[1]))
            f0, up, down = v[0], v[1::2], v[2::2]  # (k, outputs) each
            h = steps[:, None]
            s2 = np.array([sigmas[n][j] ** 2 for n, j in free])[:, None]
            var = (((up - down) / (2 * h)) ** 2 * s2).sum(axis=0)
            bias = (0.5 * (up - 2 * f0 + down) / h**2 * s2).sum(axis=0)
            sd = np.sqrt(var)
            with np.errstate(all="ignore"):
                rel = np.where(sd > 0, np.abs(bias) / sd, 0.0)
            worst = max(worst, float(np.nanmax(rel)) if rel.size else 0.0)
            out[t] = {"mean": f0.copy(), "sigma": sd, "lower": f0 - 2 * sd, "upper": f0 + 2 * sd}
        return Prediction(out, "first-order", "", nodes, {"nonlinearity": worst, "stochastic_inputs": float(k)})


def _hint(name: str, known: Any) -> str:
    m = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {m[0]!r}?)" if m else ""


# -- time balancing --------------------------------------------------------------------------------
def allocate(a: np.ndarray, b: np.ndarray, total: float, integer: bool = True) -> np.ndarray:
    """Work per node so that ``a·n + b`` is equal on every node that gets work and ``Σ n = total``
    (nodes whose fixed cost b alone exceeds that time get none)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if (a <= 0).any():
        raise ValueError("time per unit of work must be positive on every node")
    active = np.ones(len(a), dtype=bool)
    while True:
        t = (total + (b[active] / a[active]).sum()) / (1 / a[active]).sum()
        n = np.where(active, (t - b) / a, 0.0)
        if (n >= 0).all():
            break
        active &= n > 0
    if not integer:
        return n
    base = np.floor(n)
    short = round(total - base.sum())
    order = np.argsort(-(n - base), kind="stable")
    base[order[:short]] += 1  # largest remainders
    return base


def balance(
    model: StructuralModel,
    total: float,
    inputs: Mapping[str, Mapping[str, Any]] | None = None,
    runs: int = 4000,
    seed: int = 0,
    nodes: int | None = None,
) -> dict[str, Any]:
    """Solve the time-balancing problem ``T(p) = A(p)·work(p) + B(p)`` equal for all p with
    ``Σ work = total``, with the *mean* strategy (A, B at their means) and the *conservative* one
    (mean + 2 sigma: less work to high-variance nodes), and predict each allocation's completion
    time (the slowest node) over ``runs`` simulated runs."""
    if model.balance is None:
        raise ModelError("the model has no balance: section (work: PARAMETER, time: COMPONENT)", model.source)
    inputs = inputs or {}
    work, comp = str(model.balance["work"]), str(model.balance["time"])
    p_count = model.node_count(inputs, nodes)
    if p_count < 2:
        raise ModelError("balancing needs a job of two or more nodes", model.source)

    def times(env: dict[str, np.ndarray], w: float) -> np.ndarray:
        """The time component per draw and node with ``w`` units of work on every node."""
        e = dict(env)
        e[work] = np.full((1, p_count), w)
        return np.broadcast_to(model.evaluate(e, [comp])[comp], (runs, p_count))

    env = model.draw(inputs, runs, seed, p_count)
    b_s = times(env, 0.0)
    a_s = times(env, 1.0) - b_s
    linear = np.allclose(times(env, 2.0) - b_s, 2 * a_s, rtol=1e-6, atol=1e-12)
    sim = model.draw(inputs, runs, np.random.default_rng(seed + 1), p_count)  # independent simulated runs
    b_run = times(sim, 0.0)
    a_run = times(sim, 1.0) - b_run
    out: dict[str, Any] = {"model": model.name, "total": total, "nodes": p_count, "linear": bool(linear), "runs": runs}
    for strategy, k in (("mean", 0.0), ("conservative", 2.0)):
        a = a_s.mean(axis=0) + k * a_s.std(axis=0)
        b = b_s.mean(axis=0) + k * b_s.std(axis=0)
        n = allocate(a, b, total)
        planned = a * n + b
        completion = (a_run * n + b_run).max(axis=1)
        mu, sd = float(completion.mean()), float(completion.std(ddof=1))
        out[strategy] = {
            "work": n.tolist(),
            "planned_time": planned.tolist(),
            "completion_mean": mu,
            "completion_sigma": sd,
            "completion_interval": [mu - 2 * sd, mu + 2 * sd],
            "completion_p95": float(np.quantile(completion, 0.95)),
        }
    return out
