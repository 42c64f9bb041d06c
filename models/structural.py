"""Structural performance models with stochastic parameters (Berman & Wolski's Performance
Prediction Engineering; METHODS.md §5.3): a model file (:mod:`perfsift.models.model_file`) whose
components are expressions (:mod:`perfsift.models.expressions`), checked as a whole and evaluated.

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from perfsift.models.expressions import (
    FUNCTIONS,
    Interval,
    ModelError,
    Node,
    did_you_mean,
    evaluate,
    interval,
    names_in,
    unparse,
)
from perfsift.models.model_file import Component, Parameter, read_model

METHODS = ("auto", "first-order", "monte-carlo")
NONLINEARITY = 0.1  # auto switches to Monte Carlo above this second-order bias, in sigmas


@dataclass
class Prediction:
    """Per output: ``mean``, ``sigma``, ``lower``/``upper`` (mean ∓ 2 sigma) and, for Monte Carlo,
    ``q025``/``q975`` - arrays over the nodes (length 1 for outputs reduced over nodes)."""

    outputs: dict[str, dict[str, np.ndarray]]
    method: str
    reason: str
    nodes: int
    diagnostics: dict[str, float] = field(default_factory=dict)


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
        self._static: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]] = {}  # node count -> constants' moments
        self._kinks: dict[tuple[str, ...], list[str]] = {}  # target list -> kinks()

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
        f = read_model(text, source)
        return cls(f.name, f.parameters, f.components, f.outputs, f.observed, f.balance, f.nodes, f.source, f.text)

    def _check(self) -> list[str]:
        """Names resolve, no cycles, no division by something that can be zero; returns the
        components in evaluation order."""
        known = set(self.parameters) | set(self.components)
        for c in self.components.values():
            for n in sorted(names_in(c.tree)):
                if n not in known:
                    raise ModelError(
                        f"component {c.name!r}: unknown name {n!r}{did_you_mean(n, known)}", self.source, c.line
                    )
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

            ranges[name] = interval(c.tree, ranges, on_div)
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

    def _kinks_of(self, targets: tuple[str, ...]) -> list[str]:
        """:meth:`kinks`, worked out once per target list (the model does not change)."""
        cache = self._kinks
        if targets not in cache:
            cache[targets] = self.kinks(targets)
        return cache[targets]

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
        """Mean and sigma over nodes of every parameter (sigma 0 for constants). Those of the
        parameters that read no metric are the same every call: made once per node count, read-only."""
        static = self._static_moments(nodes)
        means, sigmas = {}, {}
        for name, p in self.parameters.items():
            if name in static:
                means[name], sigmas[name] = static[name]
                continue
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
            sd = sd.astype(np.float64)
            sigmas[name] = sd if np.isfinite(sd).all() else np.nan_to_num(sd)
        return means, sigmas

    def _static_moments(self, nodes: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """(mean, sigma) over ``nodes`` of the parameters given by ``value`` or ``mean``/``sigma``."""
        cache = self._static
        if nodes not in cache:
            out = {}
            for name, p in self.parameters.items():
                if p.value is not None:
                    mu, sd = np.broadcast_to(np.array(p.value), (nodes,)), np.zeros(nodes)
                elif p.mean is not None:
                    mu = np.broadcast_to(np.array(p.mean), (nodes,))
                    sd = np.broadcast_to(np.array(p.sigma), (nodes,))
                else:
                    continue
                if np.isnan(mu).any():
                    raise ModelError(f"parameter {name!r} has no value for some node", self.source, p.line)
                pair = np.clip(mu.astype(np.float64), p.lo, p.hi), np.nan_to_num(sd.astype(np.float64))
                for a in pair:
                    a.setflags(write=False)  # shared by every prediction
                out[name] = pair
            cache[nodes] = out
        return cache[nodes]

    def evaluate(self, env: dict[str, np.ndarray], targets: Sequence[str]) -> dict[str, np.ndarray]:
        """Evaluate components over env (parameters as (samples, nodes) arrays); returns targets as
        (samples, nodes or 1) arrays."""
        env = dict(env)
        with np.errstate(all="ignore"):
            for name in self.order:
                env[name] = np.atleast_2d(evaluate(self.components[name].tree, env))
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
        quantiles: bool = True,
    ) -> Prediction:
        """Predict the outputs.

        ``inputs`` gives the metric parameters per name: ``{"mean": per-node array, "sigma": per-node
        array, "samples": (observations, nodes) array for empirical ones}``. ``quantiles=False``
        leaves out Monte Carlo's ``q025``/``q975`` (two partial sorts of the draws per output) for a
        caller that reads the mean and sigma only.
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
            kinks = self._kinks_of(tuple(targets))
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
            out[t] = {"mean": mean, "sigma": sd, "lower": mean - 2 * sd, "upper": mean + 2 * sd}
            if quantiles:
                q = np.quantile(v, [0.025, 0.975], axis=0)
                out[t].update(q025=q[0], q975=q[1])
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
