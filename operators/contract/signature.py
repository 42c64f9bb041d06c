"""Contract signatures (METHODS.md §4.1-4.4; Vraalsen, Aydt, Mendes, Reed): metric spaces, the
equivalence classes a baseline run forms in them, and contract files.

A contract has named metric *spaces*; each dimension is a metric (``instructions_per_s``) or a
ratio of two, written with a slash *between spaces* (``instructions_per_s / flops_per_s``): a
slash inside a name is part of the name, as in nmon's ``NET_ib0-read-KB/s``. A name holding
anything the syntax uses (`` / ``, ``,``, ``@``, ``"``) is written in double quotes, with ``\"``
and ``\\`` inside (:func:`split_dims`, :meth:`Dimension.parse`). From a baseline run, :func:`derive_contract` maps every
sample into each space (``log10``, floored at 1e-300), groups the points into equivalence classes
by leader clustering with one maximum distance D, and gives each class a tolerance per dimension
``τ = max(k_σ·σ, D/√m)``. :func:`load_contract` reads such a contract back and checks it.

Capabilities: a dimension may name a capability unit (``instructions_per_s@flops``). Its values
are then divided by the node's capability in that unit (FLOP/s, bytes/s) before anything else,
which is the projection ``ê^B = e^A · κ^B/κ^A`` of §4.1 written on both sides: a node half as
fast is expected to run at half the rate.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from perfsift.models import bundled_contract
from perfsift.operators.batch import Batch
from perfsift.operators.contract.rules import DEFAULT_RULEBASE, Rulebase, RulebaseError

LOG_FLOOR = 1e-300


class ContractError(ValueError):
    """A contract file or space definition that cannot be used; the message names the problem."""


_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
_RATIO = re.compile(r"\s+/\s+")
SYNTAX = 'METRIC or METRIC / METRIC (a slash between spaces), optionally @UNIT; "quote" names holding " / ", ",", "@"'


def _mask(text: str, what: str) -> str:
    """``text`` with every quoted name blanked out (same length), so separators are found outside
    quotes only; a quote left open is an error."""
    masked = _QUOTED.sub(lambda m: "x" * len(m.group()), text)
    if '"' in masked:
        raise ContractError(f'bad {what} {text!r}: a double quote is not closed (use \\" inside a quoted name)')
    return masked


def _name(raw: str, expr: str) -> str:
    t = raw.strip()
    if not t:
        raise ContractError(f"bad dimension {expr!r}: an empty name; use {SYNTAX}")
    if t.startswith('"'):
        if not _QUOTED.fullmatch(t):
            raise ContractError(f"bad dimension {expr!r}: text outside the quotes of {t!r}; use {SYNTAX}")
        return re.sub(r"\\(.)", r"\1", t[1:-1])
    if '"' in t:
        raise ContractError(f"bad dimension {expr!r}: a quote inside the name {t!r}; quote the whole name")
    return t


def split_dims(text: str) -> list[str]:
    """The dimensions of ``DIM[,DIM...]``, split at commas outside quoted names.

    >>> split_dims('NET_ib0-read-KB/s, "a,b" / c')
    ['NET_ib0-read-KB/s', '"a,b" / c']
    """
    masked = _mask(text, "dimension list")
    cuts = [-1, *(i for i, ch in enumerate(masked) if ch == ","), len(text)]
    return [text[a + 1 : b].strip() for a, b in itertools.pairwise(cuts)]


@dataclass(frozen=True)
class Dimension:
    """``num``, ``num / den`` or either followed by ``@unit`` (a capability unit); see the module
    docstring for quoting.

    >>> Dimension.parse("NET_ib0-read-KB/s").describe()
    "metric 'NET_ib0-read-KB/s'"
    >>> Dimension.parse('instructions / "CPU_ALL_User%" @flops').describe()
    "ratio 'instructions' / 'CPU_ALL_User%' per capability 'flops'"
    """

    expr: str
    num: str
    den: str | None
    unit: str | None

    @classmethod
    def parse(cls, expr: str) -> Dimension:
        text = expr.strip()
        masked = _mask(text, "dimension")
        ats = [i for i, ch in enumerate(masked) if ch == "@"]
        if len(ats) > 1:
            raise ContractError(f"bad dimension {expr!r}: more than one '@'; use {SYNTAX}")
        cut = ats[0] if ats else len(text)
        unit = _name(text[cut + 1 :], expr) if ats else None
        body, mbody = text[:cut], masked[:cut]
        ratio = list(_RATIO.finditer(mbody))
        if len(ratio) > 1:
            raise ContractError(f"bad dimension {expr!r}: more than one ' / '; use {SYNTAX}")
        if ratio:
            r = ratio[0]
            return cls(text, _name(body[: r.start()], expr), _name(body[r.end() :], expr), unit)
        if mbody.strip().startswith("/ ") or mbody.rstrip().endswith(" /"):
            raise ContractError(f"bad dimension {expr!r}: a ratio needs a metric on both sides; use {SYNTAX}")
        return cls(text, _name(body, expr), None, unit)

    def metrics(self) -> list[str]:
        return [self.num] if self.den is None else [self.num, self.den]

    def describe(self) -> str:
        """What was parsed, for error messages."""
        what = f"metric {self.num!r}" if self.den is None else f"ratio {self.num!r} / {self.den!r}"
        return what if self.unit is None else f"{what} per capability {self.unit!r}"

    def values(self, batch: Batch, capability: np.ndarray | None) -> np.ndarray:
        """The dimension's raw value per row (NaN when a metric is missing)."""
        ix = {m: i for i, m in enumerate(batch.metrics)}
        nan = np.full(len(batch), np.nan)
        v = batch.values[:, ix[self.num]] if self.num in ix else nan
        if self.den is not None:
            d = batch.values[:, ix[self.den]] if self.den in ix else nan
            with np.errstate(divide="ignore", invalid="ignore"):
                v = v / d
        if capability is not None:
            v = v / capability
        return v


def parse_space(spec: str) -> tuple[str, list[Dimension]]:
    """``NAME=DIM[,DIM...]`` as on the command line (commas inside quoted names do not split)."""
    name, sep, dims = spec.partition("=")
    if not sep or not name.strip() or not dims.strip():
        raise ContractError(f"bad space {spec!r}: use NAME=DIM[,DIM...] with DIM = {SYNTAX}")
    return name.strip(), [Dimension.parse(d) for d in split_dims(dims)]


def explain_missing(name: str, dims: Sequence[Dimension], metrics: Sequence[str]) -> str:
    """Why no baseline sample has every dimension of a space: what was parsed, which metrics the
    baseline lacks, and a hint where a missing name looks like the old ``a/b`` ratio syntax."""
    have = set(metrics)
    parsed = "; ".join(d.describe() for d in dims)
    absent = sorted({m for d in dims for m in d.metrics() if m not in have})
    msg = f"space {name!r}: no baseline sample has every dimension (parsed: {parsed})"
    if not absent:
        return msg + "; every metric exists, but never all present and non-negative in one sample"
    msg += f"; not in the baseline: {absent}"
    for m in absent:
        a, sep, b = m.partition("/")
        if sep and a.strip() in have and b.strip() in have:
            msg += f" (for the ratio of {a.strip()!r} and {b.strip()!r} write '{a.strip()} / {b.strip()}')"
    return msg


def phi(v: np.ndarray) -> np.ndarray:
    """The map into a space's coordinates: log10, floored at :data:`LOG_FLOOR`; NaN for values that
    are missing or negative."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log10(np.maximum(v, LOG_FLOOR))
    out[~np.isfinite(v) | (v < 0)] = np.nan  # a negative rate or ratio has no place in log space
    return out


def capability_column(
    batch: Batch, unit: str | None, capabilities: Mapping[str, Mapping[str, float]]
) -> np.ndarray | None:
    """Per-row capability of each row's node in ``unit`` (1 where the node has none)."""
    if unit is None or not capabilities:
        return None
    per_node = np.array([float(capabilities.get(n, {}).get(unit, 1.0)) for n in batch.nodes] or [1.0])
    return per_node[batch.node_idx]


def space_points(
    batch: Batch, dims: Sequence[Dimension], capabilities: Mapping[str, Mapping[str, float]]
) -> np.ndarray:
    """φ-mapped points [rows, dims] of a batch in one space (NaN where unknown)."""
    cols = [phi(d.values(batch, capability_column(batch, d.unit, capabilities))) for d in dims]
    return np.stack(cols, axis=1) if cols else np.empty((len(batch), 0))


def baseline_capabilities(batch: Batch, unit_metrics: Mapping[str, str]) -> dict[str, dict[str, float]]:
    """Per node, each unit's capability as the node's mean of a metric in a baseline run
    (``{"flops": "flops_per_s"}``: a node's FLOP/s capability is the FLOP rate it sustained)."""
    out: dict[str, dict[str, float]] = {}
    for unit, metric in unit_metrics.items():
        if metric not in batch.metrics:
            raise ContractError(f"capability {unit}={metric}: the baseline has no metric {metric!r}")
        col = batch.values[:, batch.metrics.index(metric)]
        for ni, node in enumerate(batch.nodes):
            v = col[batch.node_idx == ni]
            v = v[~np.isnan(v)]
            if len(v) and v.mean() > 0:
                out.setdefault(node, {})[unit] = float(v.mean())
    return out


def leader_clusters(points: np.ndarray, max_distance: float, refine: int = 1) -> np.ndarray:
    """Leader clustering (§4.2): cluster index of every point, in order; ``refine`` reassignment passes.

    >>> leader_clusters(np.array([[0], [0.05], [1], [1.04], [0.02]]), 0.1).tolist()
    [0, 0, 1, 1, 0]
    """
    centroids: list[np.ndarray] = []
    counts: list[int] = []
    labels = np.empty(len(points), dtype=np.int64)
    for i, u in enumerate(points):
        if centroids:
            dist = np.linalg.norm(np.asarray(centroids) - u, axis=1)
            c = int(np.argmin(dist))
            if dist[c] <= max_distance:
                counts[c] += 1
                centroids[c] = centroids[c] + (u - centroids[c]) / counts[c]
                labels[i] = c
                continue
        centroids.append(u.astype(np.float64).copy())
        counts.append(1)
        labels[i] = len(centroids) - 1
    for _ in range(refine):
        cent = np.asarray(centroids)
        labels = np.argmin(np.linalg.norm(points[:, None, :] - cent[None, :, :], axis=2), axis=1)
        used = np.unique(labels)
        centroids = [points[labels == c].mean(axis=0) for c in used]
        labels = np.searchsorted(used, labels)
    return labels


def derive_contract(
    baseline: Batch,
    spaces: Mapping[str, Sequence[str]],
    max_distance: float = 0.1,
    k_sigma: float = 2.0,
    refine: int = 1,
    min_size: int = 1,
    rulebase: str = DEFAULT_RULEBASE,
    capabilities: Mapping[str, Mapping[str, float]] | None = None,
) -> dict[str, Any]:
    """A contract (JSON-able dict) from a baseline run; see the module docstring."""
    try:
        Rulebase.parse(rulebase)
    except RulebaseError as exc:
        raise ContractError(f"rulebase: {exc}") from None
    caps = dict(capabilities or {})
    out_spaces = []
    for name, exprs in spaces.items():
        dims = [Dimension.parse(e) for e in exprs]
        pts = space_points(baseline, dims, caps)
        pts = pts[~np.isnan(pts).any(axis=1)]
        if len(pts) == 0:
            raise ContractError(explain_missing(name, dims, baseline.metrics))
        labels = leader_clusters(pts, max_distance, refine)
        floor = max_distance / np.sqrt(len(dims))
        classes = []
        for c in np.unique(labels):
            members = pts[labels == c]
            if len(members) < min_size:
                continue
            sd = members.std(axis=0)  # population
            classes.append(
                {
                    "centroid": members.mean(axis=0).tolist(),
                    "tolerance": np.maximum(k_sigma * sd, floor).tolist(),
                    "size": len(members),
                }
            )
        out_spaces.append({"name": name, "dims": [d.expr for d in dims], "classes": classes})
    return {
        "version": 1,
        "max_distance": max_distance,
        "k_sigma": k_sigma,
        "phi": "log10",
        "spaces": out_spaces,
        "rulebase": rulebase,
        "capabilities": caps,
    }


def contract_path(path: str | Path) -> Path:
    """The contract file ``path`` names: a path, or else the name of a bundled contract
    (``"demo"``, :func:`perfsift.models.bundled_contract`)."""
    p = Path(path)
    if not p.is_file() and isinstance(path, str) and "/" not in path:
        with contextlib.suppress(FileNotFoundError):
            return bundled_contract(path)
    return p


def load_contract(path: str | Path) -> dict[str, Any]:
    """Read and check a contract file (or a bundled contract's name); errors name the file and the
    problem."""
    p = contract_path(path)
    try:
        doc = json.loads(p.read_text())
    except OSError as exc:
        raise ContractError(f"{p}: cannot read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ContractError(f"{p}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    check_contract(doc, str(p))
    return doc


def check_contract(doc: Any, source: str = "<contract>") -> None:
    if not isinstance(doc, dict) or not isinstance(doc.get("spaces"), list) or not doc["spaces"]:
        raise ContractError(f"{source}: a contract is an object with a non-empty 'spaces' list")
    for i, sp in enumerate(doc["spaces"]):
        where = f"{source}: spaces[{i}]"
        if not isinstance(sp, dict) or not isinstance(sp.get("dims"), list) or not sp["dims"]:
            raise ContractError(f"{where}: needs 'name', 'dims' (non-empty list) and 'classes'")
        for d in sp["dims"]:
            Dimension.parse(str(d))
        m = len(sp["dims"])
        classes = sp.get("classes")
        if not isinstance(classes, list) or not classes:
            raise ContractError(f"{where}: has no classes (a contract needs at least one)")
        for j, c in enumerate(classes):
            cent, tol = c.get("centroid"), c.get("tolerance")
            if not (isinstance(cent, list) and isinstance(tol, list) and len(cent) == len(tol) == m):
                raise ContractError(f"{where}.classes[{j}]: centroid and tolerance need {m} numbers each")
            if any((not isinstance(t, int | float)) or t <= 0 for t in tol):
                raise ContractError(f"{where}.classes[{j}]: tolerances must be positive numbers")
    try:
        Rulebase.parse(doc.get("rulebase", DEFAULT_RULEBASE), f"{source}: rulebase")
    except RulebaseError as exc:
        raise ContractError(str(exc)) from None
