"""ARX-style generalization hierarchies (leaf;level1;...;*) and the label lookups Mondrian and full-domain need."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from crowddb.errors import ArgumentError


def _key(v) -> str:
    """String form of a leaf value as it appears in ARX files (integral floats lose their '.0')."""
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v)


class Hierarchy:
    """A generalization hierarchy: one row per leaf, column 0 the leaf, last column the root ('*')."""

    def __init__(self, table: pd.DataFrame, name: str = "") -> None:
        """Keep the table as strings; every leaf appears once."""
        t = table.astype(str).map(str.strip) if len(table) else table.astype(str)
        if t.shape[1] < 2:
            raise ArgumentError(f"hierarchy of {name!r} needs at least two levels (leaf and root)")
        if t.iloc[:, 0].duplicated().any():
            raise ArgumentError(f"hierarchy of {name!r} lists a leaf twice")
        self.name = name
        self.table = t.reset_index(drop=True)
        self.row_of = {v: i for i, v in enumerate(self.table.iloc[:, 0])}

    @classmethod
    def load(cls, spec, name: str = "") -> Hierarchy:
        """Build from a Hierarchy, a DataFrame or a path to an ARX CSV (';'-separated, no header)."""
        if isinstance(spec, Hierarchy):
            return spec
        if isinstance(spec, pd.DataFrame):
            return cls(spec, name)
        if isinstance(spec, (str, os.PathLike)):
            if not os.path.exists(spec):
                raise ArgumentError(f"hierarchy file for {name!r} not found: {spec}")
            return cls(pd.read_csv(spec, sep=";", header=None, dtype=str, keep_default_na=False), name)
        raise ArgumentError(f"hierarchy of {name!r} must be a DataFrame or a CSV path, got {type(spec).__name__}")

    @property
    def height(self) -> int:
        """Number of generalization steps above the leaves."""
        return self.table.shape[1] - 1

    def rows(self, values) -> np.ndarray:
        """Hierarchy row index of each value; raises if one is missing."""
        idx = np.array([self.row_of.get(_key(v), -1) for v in values], dtype=np.int64)
        if (idx < 0).any():
            miss = [v for v, i in zip(values, idx) if i < 0][:5]
            raise ArgumentError(f"values of {self.name!r} missing from its hierarchy: {miss}")
        return idx

    def ordered_leaves(self, s: pd.Series) -> list:
        """Distinct values of ``s`` in depth-first hierarchy order, so every subtree is a contiguous code range."""
        values = list(pd.unique(s))
        rows = self.rows(values)
        ranks = []
        for col in range(self.height, -1, -1):  # root first, leaf last
            _, first = np.unique(self.table.iloc[:, col].to_numpy(), return_index=True)
            order = {lab: r for r, lab in enumerate(self.table.iloc[np.sort(first), col])}
            ranks.append(np.array([order[self.table.iat[r, col]] for r in rows]))
        perm = np.lexsort(ranks[::-1])
        return [values[i] for i in perm]

    def labels(self, values, level: int) -> np.ndarray:
        """Label of each value at ``level`` (0 = the leaf itself)."""
        return self.table.iloc[self.rows(values), level].to_numpy(dtype=object)


def lca_ranges(h: Hierarchy, categories: list, lo: np.ndarray, hi: np.ndarray):
    """Lowest common ancestor of the codes lo..hi (DFS-ordered): its label and the code range it covers."""
    m = len(categories)
    out_lo, out_hi = lo.copy(), hi.copy()
    label = np.empty(len(lo), dtype=object)
    done = lo == hi
    label[done] = [_key(categories[c]) for c in lo[done]]
    for level in range(1, h.height + 1):
        labs = h.labels(categories, level)
        _, lab_id = np.unique(labs, return_inverse=True)
        first = np.full(lab_id.max() + 1, m, dtype=np.int64)
        last = np.full(lab_id.max() + 1, -1, dtype=np.int64)
        np.minimum.at(first, lab_id, np.arange(m))
        np.maximum.at(last, lab_id, np.arange(m))
        hit = ~done & (lab_id[lo] == lab_id[hi])
        out_lo[hit], out_hi[hit] = first[lab_id[lo[hit]]], last[lab_id[lo[hit]]]
        label[hit] = labs[lo[hit]]
        done |= hit
    label[~done] = "*"
    out_lo[~done], out_hi[~done] = 0, m - 1
    return label, out_lo, out_hi
