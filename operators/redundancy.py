"""Step 1 of statistical data reduction (METHODS.md §2.1; Yang, Schopf, Dumitrescu, Foster):
incremental correlations and redundant-metric elimination by Fisher-z correlation clustering.

**Co-moments with missing values [deviation].** Real traces have gaps and features that start late,
so correlations are *pairwise complete*: each pair uses the rows where both are present. The state
keeps, per block of rows, the sums ``n_jk = Σ m_j m_k``, ``s_jk = Σ x_j m_k``, ``q_jk = Σ x_j² m_k``
and ``p_jk = Σ x_j x_k`` (m = presence mask, x = value minus a fixed per-feature shift, the first
value seen - §0.2's shift c). A batch costs four GEMMs; merging blocks is exact addition, so the
block-ring window of §0.2 (K blocks of L/K rows) and any partition of the stream give the same
result as one pass over the window. Co-moments are formed from the shifted sums, which removes
the cancellation the spec warns about for counters around 1e9.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

Z95 = 1.6448536269514722  # one-tailed 95 % normal quantile
EPS_REL, EPS_ABS = 1e-9, 1e-12


def fisher_z(r: npt.ArrayLike, n: npt.ArrayLike, threshold: float) -> np.ndarray:
    """One-tailed statistic for H1: |ρ| > threshold: ``(atanh|r| − atanh t)·sqrt(n − 3)``.

    >>> round(float(fisher_z(0.90, 30, 0.8)), 4), round(float(fisher_z(-0.95, 30, 0.8)), 4)
    (1.9413, 3.8097)
    """
    r = np.minimum(np.abs(np.asarray(r, dtype=np.float64)), 1 - 1e-15)
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return (np.arctanh(r) - np.arctanh(threshold)) * np.sqrt(np.maximum(n - 3, 0.0))


class PairwiseMoments:
    """Pairwise-complete co-moments of a growing set of features over a block-ring window of rows.

    Parameters
    ----------
    window : int or None
        Rows L in the window (None = all rows ever seen).
    blocks : int
        K blocks in the ring (K must divide L); the window covers between L − L/K + 1 and L rows.
    """

    def __init__(self, window: int | None = 1000, blocks: int = 8) -> None:
        if window is not None and (window % blocks or window < blocks):
            raise ValueError(f"blocks ({blocks}) must divide window ({window})")
        self.window = window
        self.blocks = blocks
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.shift = np.zeros(0)
        self.ring: list[dict[str, np.ndarray]] = []  # oldest first; each: n, s, q, p, rows
        self.rows_in_newest = 0

    # -- features ----------------------------------------------------------------------------------
    def columns(self, names: list[str]) -> np.ndarray:
        """State columns of ``names``, adding new features (with empty history)."""
        new = [n for n in names if n not in self.index]
        if new:
            for n in new:
                self.index[n] = len(self.names)
                self.names.append(n)
            grow = len(new)
            self.shift = np.concatenate([self.shift, np.full(grow, np.nan)])
            for b in self.ring:
                for key in ("n", "s", "q", "p"):
                    b[key] = np.pad(b[key], ((0, grow), (0, grow)))
        return np.array([self.index[n] for n in names], dtype=np.int64)

    # -- data --------------------------------------------------------------------------------------
    def add(self, values: np.ndarray, names: list[str]) -> None:
        """Add rows (``values[rows, len(names)]``, NaN = missing) in order."""
        cols = self.columns(names)
        d = len(self.names)
        x = np.full((len(values), d), np.nan)
        x[:, cols] = values
        unset = np.isnan(self.shift) & ~np.isnan(x).all(axis=0)
        if unset.any():  # shift = first value seen of each feature
            first = np.argmax(~np.isnan(x), axis=0)
            self.shift[unset] = x[first[unset], np.nonzero(unset)[0]]
        start = 0
        while start < len(x):
            if not self.ring or (self.window is not None and self.rows_in_newest >= self.window // self.blocks):
                self._open_block(d)
            room = len(x) - start if self.window is None else self.window // self.blocks - self.rows_in_newest
            chunk = x[start : start + room]
            self._accumulate(self.ring[-1], chunk)
            self.rows_in_newest += len(chunk)
            start += len(chunk)

    def _open_block(self, d: int) -> None:
        z = np.zeros((d, d))
        self.ring.append({"n": z.copy(), "s": z.copy(), "q": z.copy(), "p": z.copy(), "rows": np.zeros(1)})
        self.rows_in_newest = 0
        if len(self.ring) > self.blocks:
            self.ring.pop(0)

    def _accumulate(self, block: dict[str, np.ndarray], x: np.ndarray) -> None:
        m = (~np.isnan(x)).astype(np.float64)
        xs = np.where(m > 0, x - np.nan_to_num(self.shift), 0.0)
        block["n"] += m.T @ m
        block["s"] += xs.T @ m
        block["q"] += (xs * xs).T @ m
        block["p"] += xs.T @ xs
        block["rows"] += len(x)

    # -- statistics ---------------------------------------------------------------------------------
    def totals(self) -> dict[str, np.ndarray]:
        d = len(self.names)
        out = {k: np.zeros((d, d)) for k in ("n", "s", "q", "p")}
        for b in self.ring:
            for k in out:
                out[k] += b[k]
        return out

    @property
    def rows(self) -> int:
        return int(sum(b["rows"][0] for b in self.ring))

    def stats(self) -> dict[str, np.ndarray]:
        """Pairwise counts ``n``, correlations ``r`` (clipped to [-1, 1], NaN where undefined),
        and per-feature count, mean and population standard deviation."""
        t = self.totals()
        n, s, q, p = t["n"], t["s"], t["q"], t["p"]
        with np.errstate(invalid="ignore", divide="ignore"):
            mean_j = s / n  # mean of j over rows where k present
            cov = p / n - mean_j * mean_j.T  # co-moment / n over the pairwise rows
            var_j = q / n - mean_j**2
            r = cov / np.sqrt(var_j * var_j.T)
        r = np.clip(r, -1.0, 1.0)
        diag_n = np.diag(n).copy()
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.diag(s) / diag_n + np.nan_to_num(self.shift)
            sd = np.sqrt(np.maximum(np.diag(q) / diag_n - (np.diag(s) / diag_n) ** 2, 0.0))
        np.fill_diagonal(r, 1.0)
        return {"n": n, "r": r, "count": diag_n, "mean": mean, "sd": sd}


def constant_features(count: np.ndarray, mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """The zero-variance rule of §0.2: ``sd ≤ max(1e-9·|mean|, 1e-12)`` (features with < 2 rows too)."""
    with np.errstate(invalid="ignore"):
        return (count < 2) | ~(sd > np.maximum(EPS_REL * np.abs(mean), EPS_ABS))


def _components(d: int, edges: np.ndarray) -> np.ndarray:
    """Connected-component label of each of d nodes (union-find with path halving)."""
    parent = np.arange(d)

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for a, b in zip(*np.nonzero(np.triu(edges, 1)), strict=True):
        ra, rb = find(int(a)), find(int(b))
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return np.array([find(i) for i in range(d)])


@dataclass
class Clustering:
    """Result of step 1."""

    names: list[str]
    zero_variation: list[str]
    clusters: list[list[str]]  # each: representative first
    representatives: list[str]
    edges: np.ndarray = field(repr=False)  # boolean [d, d] over ``names`` (for hysteresis)
    flags: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "zero_variation": self.zero_variation,
            "clusters": self.clusters,
            "representatives": self.representatives,
            "flags": self.flags,
        }


def cluster_features(
    names: list[str],
    r: np.ndarray,
    n: np.ndarray,
    r_y: np.ndarray | None,
    constant: np.ndarray,
    variance: np.ndarray,
    threshold: float = 0.9,
    z_crit: float = Z95,
    linkage: str = "component",
    previous: Clustering | None = None,
    hysteresis: float = 0.25,
    challenger_margin: float = 0.05,
) -> Clustering:
    """Redundancy clusters (§2.1) of the non-constant features.

    ``r`` and ``n`` are the pairwise correlations and counts among ``names``; ``r_y`` their
    correlations with the response (None: the representative is the member with the highest
    variance - documented fallback when there is no performance metric).
    """
    d = len(names)
    z = fisher_z(r, n, threshold)
    z = np.where(np.isfinite(z), z, -np.inf)
    flags = []
    if (n[np.triu_indices(d, 1)] <= 3).any() if d > 1 else False:
        flags.append("insufficient_data")
    if previous is None:
        edges = z > z_crit
    else:  # hysteresis: old edges persist down to z_crit - h, new ones need z_crit + h
        prev = np.zeros((d, d), dtype=bool)
        pi = {nm: i for i, nm in enumerate(previous.names)}
        common = [i for i, nm in enumerate(names) if nm in pi]
        idx = np.array([pi[names[i]] for i in common], dtype=np.int64)
        if len(common):
            prev[np.ix_(common, common)] = previous.edges[np.ix_(idx, idx)]
        edges = np.where(prev, z > z_crit - hysteresis, z > z_crit + hysteresis)
    live = ~constant
    edges &= live[:, None] & live[None, :]
    np.fill_diagonal(edges, False)
    score = np.abs(r_y) if r_y is not None else variance
    score = np.where(np.isfinite(score), score, -np.inf)
    incumbents = set(previous.representatives) if previous is not None else set()

    def better(a: int, b: int) -> bool:  # is a a better representative than b?
        margin = challenger_margin if names[b] in incumbents and names[a] not in incumbents else 0.0
        return bool(score[a] > score[b] + margin)

    groups: list[list[int]] = []
    if linkage == "component":
        labels = _components(d, edges)
        for lab in sorted(set(labels[live].tolist())):
            groups.append([i for i in range(d) if live[i] and labels[i] == lab])
    elif linkage == "star":
        todo = sorted((i for i in range(d) if live[i]), key=lambda i: (-score[i], i))
        while todo:
            head = todo[0]
            members = [head] + [i for i in todo[1:] if edges[head, i]]
            groups.append(members)
            todo = [i for i in todo if i not in members]
    else:
        raise ValueError(f"linkage must be 'component' or 'star', got {linkage!r}")
    clusters: list[list[str]] = []
    reps: list[str] = []
    for g in groups:
        best = g[0]
        inc = [i for i in g if names[i] in incumbents]
        if inc:
            best = inc[0]
        for i in g:
            if i != best and (better(i, best) or (score[i] == score[best] and not inc and i < best)):
                best = i
        member_names = [names[best]] + [names[i] for i in g if i != best]
        clusters.append(member_names)
        reps.append(names[best])
    return Clustering(list(names), [names[i] for i in range(d) if constant[i]], clusters, reps, edges, flags)
