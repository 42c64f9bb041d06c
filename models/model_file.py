"""The model file of a structural performance model (Berman & Wolski's Performance Prediction
Engineering; METHODS.md §5.3), read with every error naming its line.

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

Components are expressions of :mod:`perfsift.models.expressions`;
:class:`~perfsift.models.structural.StructuralModel` checks that they fit together and evaluates
them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from perfsift.models.expressions import Interval, ModelError, Node, did_you_mean, parse_expression


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


@dataclass(frozen=True)
class ModelFile:
    """What a model file says, entry by entry."""

    name: str
    parameters: dict[str, Parameter]
    components: dict[str, Component]
    outputs: list[str]
    observed: dict[str, str]
    balance: dict[str, Any] | None
    nodes: int | None
    source: str
    text: str


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


def read_model(text: str, source: str = "<model>") -> ModelFile:
    """Read a model file's text (``source`` names it in errors). Each entry is checked on its own
    here; how they fit together (names, cycles, divisions) by the model built from them."""
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
        params[str(name)] = _parameter(str(name), spec, line, lambda m, p=path: err(p, m))  # type: ignore[misc]
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
            raise err(("outputs",), f"output {o!r} is not a component{did_you_mean(str(o), comps)}")
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
            raise err(("balance", "work"), f"balance work {w!r} must be a constant parameter{did_you_mean(w, params)}")
        if t not in comps:
            raise err(("balance", "time"), f"balance time {t!r} is not a component{did_you_mean(t, comps)}")
    nodes = doc.get("nodes")
    if nodes is not None and (not isinstance(nodes, int) or nodes < 1):
        raise err(("nodes",), f"nodes must be a positive integer, got {nodes!r}")
    return ModelFile(
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
            name,
            line,
            metric=spec["metric"],
            stochastic=bool(spec.get("stochastic", True)),
            lo=lo,
            hi=hi,
            distribution=dist,
        )
    if "sigma" not in spec:
        raise err(f"parameter {name!r}: mean: needs sigma:")
    mean, sigma = _floats(spec["mean"], f"{name}.mean", err), _floats(spec["sigma"], f"{name}.sigma", err)
    if any(s < 0 for s in sigma):
        raise err(f"parameter {name!r}: sigma must be >= 0")
    return Parameter(name, line, mean=mean, sigma=sigma, lo=lo, hi=hi)
