"""Step 1 of statistical data reduction (METHODS.md §2.1; Yang, Schopf, Dumitrescu, Foster):
incremental correlations and redundant-metric elimination by Fisher-z correlation clustering.

**Co-moments with missing values [deviation].** Real traces have gaps and features that start late,
so correlations are *pairwise complete*: each pair uses the rows where both are present. Each block
of rows keeps the sums ``n_jk = Σ m_j m_k``, ``s_jk = Σ x_j m_k``, ``q_jk = Σ x_j² m_k`` and
``p_jk = Σ x_j x_k`` (m = presence mask, x = value minus the *block's own* first value of the
feature); a batch costs four GEMMs. The blocks are combined as centred statistics by Chan et al.'s
pairwise merge (§0.2), never as raw sums, so a shift is only ever used within the block whose
first value it is: a level, a drift or a jump (0 → 1e9 ± 1) keeps its variance to rounding. The
block-ring window of §0.2 (K blocks of L/K rows) and any partition of the stream give the same
result as one pass over the window. The one residual loss: within one block, a pair whose rows
start after the feature's first value *and* sit far from it (a feature that jumped inside the block
while its partner was absent) pays ``eps · (jump / spread)²``; a feature's own variance is always
within ``eps · (1 + L/K)`` relative.
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

    Each block keeps the pairwise sums of its rows shifted by the block's own first value of each
    feature (four GEMMs per batch); a block is turned into centred statistics (count, pairwise
    means, sums of squares and co-moment about those means) and the blocks are combined by the
    pairwise merge of Chan, Golub and LeVeque. A level, a drift or a jump therefore never meets a
    stale shift: a feature that jumped from 0 to 1e9 ± 1 keeps its variance of 1.

    Parameters
    ----------
    window : int or None
        Rows L in the window (None = all rows ever seen).
    blocks : int
        K blocks in the ring (K must divide L); the window covers between L − L/K + 1 and L rows.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> u = rng.normal(size=400)
    >>> x = np.stack([np.r_[np.zeros(200), 1e9 + u[200:]], u], axis=1)
    >>> pm = PairwiseMoments(window=160, blocks=8)
    >>> pm.add(x, ["jumped", "noise"])
    >>> s = pm.stats()
    >>> round(float(s["sd"][0] / np.std(x[-160:, 0])), 12), round(float(s["r"][0, 1]), 12)
    (1.0, 1.0)
    """

    def __init__(self, window: int | None = 1000, blocks: int = 8) -> None:
        if window is not None and (window % blocks or window < blocks):
            raise ValueError(f"blocks ({blocks}) must divide window ({window})")
        self.window = window
        self.blocks = blocks
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.ring: list[dict[str, np.ndarray]] = []  # oldest first; each: n, s, q, p, shift, rows
        self.rows_in_newest = 0
        # the merge of every block but the newest (which alone takes rows), and what it was made from
        self._older: tuple[list[dict[str, np.ndarray]], int, bytes, dict[str, np.ndarray]] | None = None

    # -- features ----------------------------------------------------------------------------------
    def columns(self, names: list[str]) -> np.ndarray:
        """State columns of ``names``, adding new features (with empty history)."""
        new = [n for n in names if n not in self.index]
        if new:
            for n in new:
                self.index[n] = len(self.names)
                self.names.append(n)
            grow = len(new)
            for b in self.ring:
                for key in ("n", "s", "q", "p"):
                    b[key] = np.pad(b[key], ((0, grow), (0, grow)))
                b["shift"] = np.concatenate([b["shift"], np.full(grow, np.nan)])
        return np.array([self.index[n] for n in names], dtype=np.int64)

    # -- data --------------------------------------------------------------------------------------
    def add(self, values: np.ndarray, names: list[str]) -> None:
        """Add rows (``values[rows, len(names)]``, NaN = missing) in order."""
        cols = self.columns(names)
        d = len(self.names)
        x = np.full((len(values), d), np.nan)
        x[:, cols] = values
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
        block = {k: z.copy() for k in ("n", "s", "q", "p")}
        self.ring.append({**block, "shift": np.full(d, np.nan), "rows": np.zeros(1)})
        self.rows_in_newest = 0
        if len(self.ring) > self.blocks:
            self.ring.pop(0)

    @staticmethod
    def _accumulate(block: dict[str, np.ndarray], x: np.ndarray) -> None:
        present = ~np.isnan(x)
        unset = np.isnan(block["shift"]) & present.any(axis=0)
        if unset.any():  # the block's shift: its first value of each feature
            first = np.argmax(present, axis=0)
            block["shift"][unset] = x[first[unset], np.nonzero(unset)[0]]
        m = present.astype(np.float64)
        xs = np.where(present, x - np.nan_to_num(block["shift"]), 0.0)
        block["n"] += m.T @ m
        block["s"] += xs.T @ m
        block["q"] += (xs * xs).T @ m
        block["p"] += xs.T @ xs
        block["rows"] += len(x)

    # -- statistics ---------------------------------------------------------------------------------
    @staticmethod
    def _centred(block: dict[str, np.ndarray], ref: np.ndarray) -> dict[str, np.ndarray]:
        """One block as pairwise count ``n``, means ``mean[j, k]`` (of j over the rows where j and k
        are present, minus ``ref[j]``: means near 1e12 would lose the digits the merge needs),
        sums of squares ``m2[j, k]`` about them and co-moments ``c``."""
        n, s = block["n"], block["s"]
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = np.where(n > 0, s / n, 0.0)
        return {
            "n": n,
            "mean": rel + np.nan_to_num(block["shift"] - ref)[:, None],
            "m2": np.maximum(block["q"] - rel * s, 0.0),
            "c": block["p"] - rel * s.T,
        }

    @staticmethod
    def _merge(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Chan et al.'s pairwise merge, elementwise over the pairs."""
        n = a["n"] + b["n"]
        with np.errstate(invalid="ignore", divide="ignore"):
            w = np.where(n > 0, b["n"] / n, 0.0)
        delta = b["mean"] - a["mean"]
        f = a["n"] * w  # n_a n_b / n
        return {
            "n": n,
            "mean": a["mean"] + delta * w,
            "m2": a["m2"] + b["m2"] + delta * delta * f,
            "c": a["c"] + b["c"] + delta * delta.T * f,
        }

    def reference(self) -> np.ndarray:
        """Per feature, the first block shift in the ring (0 for a feature with no value yet)."""
        ref = np.full(len(self.names), np.nan)
        for b in self.ring:
            ref = np.where(np.isnan(ref), b["shift"], ref)
        return np.nan_to_num(ref)

    def totals(self) -> dict[str, np.ndarray]:
        """The window's pairwise ``n``, ``mean`` (minus :meth:`reference`), ``m2`` and ``c``
        (see :meth:`_centred`)."""
        d = len(self.names)
        if not self.ring:
            z = np.zeros((d, d))
            return {"n": z, "mean": z.copy(), "m2": z.copy(), "c": z.copy()}
        ref = self.reference()
        if len(self.ring) == 1:
            return self._centred(self.ring[0], ref)
        return self._merge(self._merged_older(ref, d), self._centred(self.ring[-1], ref))

    def _merged_older(self, ref: np.ndarray, d: int) -> dict[str, np.ndarray]:
        """The blocks before the newest, merged oldest first (the fold :meth:`totals` continues
        with the newest block). Those blocks take no more rows, so the fold is kept while they
        are the same blocks, with the same features and the same reference: a row then costs one
        block's centring and one merge, not the whole ring's, and gives the same bits."""
        older = self.ring[:-1]
        key = ref.tobytes()
        c = self._older
        if (
            c is None
            or c[1] != d
            or c[2] != key
            or len(c[0]) != len(older)
            or any(a is not b for a, b in zip(c[0], older, strict=True))
        ):
            out = self._centred(older[0], ref)
            for b in older[1:]:
                out = self._merge(out, self._centred(b, ref))
            self._older = c = (older, d, key, out)
        return c[3]

    @property
    def rows(self) -> int:
        return int(sum(b["rows"][0] for b in self.ring))

    def stats(self) -> dict[str, np.ndarray]:
        """Pairwise counts ``n``, correlations ``r`` (clipped to [-1, 1], NaN where undefined),
        and per-feature count, mean and population standard deviation."""
        t = self.totals()
        n, m2 = t["n"], t["m2"]
        with np.errstate(invalid="ignore", divide="ignore"):
            r = t["c"] / np.sqrt(m2 * m2.T)
            r = np.where(n > 0, r, np.nan)
        r = np.clip(r, -1.0, 1.0)
        diag_n = np.diag(n).copy()
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(diag_n > 0, np.diag(t["mean"]) + self.reference(), np.nan)
            sd = np.sqrt(np.diag(m2) / diag_n)
        np.fill_diagonal(r, 1.0)
        return {"n": n, "r": r, "count": diag_n, "mean": mean, "sd": sd}


def constant_features(count: np.ndarray, mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """The zero-variance rule of §0.2: ``sd ≤ max(1e-9·|mean|, 1e-12)`` (features with < 2 rows too)."""
    with np.errstate(invalid="ignore"):
        return (count < 2) | ~(sd > np.maximum(EPS_REL * np.abs(mean), EPS_ABS))


def _components(d: int, edges: np.ndarray) -> np.ndarray:
    """Connected-component label of each of d nodes: the smallest index in its component.

    Label propagation over the boolean adjacency, all nodes at once: each takes the smallest label
    among itself and its neighbours, then the label of its label (pointer jumping), until nothing
    changes. The labels a union-find that links the larger root under the smaller gives (its
    Python loop over every edge was a tenth of a reclustering of 200 features), in O(d²) numpy
    per round and O(log d)-ish rounds.

    >>> e = np.zeros((5, 5), dtype=bool); e[3, 1] = e[1, 3] = e[4, 3] = e[3, 4] = True
    >>> _components(5, e).tolist()
    [0, 1, 2, 1, 1]
    """
    label = np.arange(d)
    if d == 0:
        return label
    up = np.triu(edges, 1)
    adj = up | up.T  # the pairs above the diagonal, as undirected edges
    while True:
        nxt = np.minimum(label, np.where(adj, label[None, :], d).min(axis=1))
        nxt = nxt[nxt]
        if np.array_equal(nxt, label):
            return label
        label = nxt


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
        by_label: dict[int, list[int]] = {}  # label -> its live features, in index order
        for i, (lab, on) in enumerate(zip(_components(d, edges).tolist(), live.tolist(), strict=True)):
            if on:
                by_label.setdefault(lab, []).append(i)
        groups.extend(by_label[lab] for lab in sorted(by_label))
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
