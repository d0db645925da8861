"""FKA's synthetic samples are published like real rows: a box that would single out 1..k-1 real people is widened.

FKA (§4) publishes synthetic QI tuples raw and then generalized to their histogram cells. The paper calls them
dummy records, but a copula sample often coincides with a real combination held by a handful of people (on Adult,
ages 45-47, k=8: about 20 distinct raw samples match combinations of 1-7 real rows, some exactly one), and a cell of
the feedback histogram may hold as few. SampleGuard sits in front of the crowd callback: it counts the real rows
of the input inside each box; a box holding 0 or >= k real rows is published as it is, a box holding 1..k-1 is
widened to the smallest box that encloses it and its k nearest real rows (nearest in the code space, each
dimension scaled to [0, 1] by its code range), so it then holds >= k real rows. The guard is deterministic: the
same samples give the same boxes.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.spatial import cKDTree

from crowddb.anonymize.encoding import Encoding
from crowddb.anonymize.generalize import code_labels

MAX_TABLE_CELLS = 1 << 22  # summed-area table over the whole code grid up to this many cells (and 10 QIs)
CHUNK = 1 << 22  # row x box pairs compared at once by the paths without a table


def to_codes(enc: Encoding, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Code intervals of boxes given in the numeric coding (each bound snapped inward to a code's scale value)."""
    clo, chi = np.empty(lo.shape, np.int64), np.empty(hi.shape, np.int64)
    for j, q in enumerate(enc.qis):
        s = enc.columns[q].scale
        clo[:, j] = np.searchsorted(s, lo[:, j] - 1e-9, side="left")
        chi[:, j] = np.searchsorted(s, hi[:, j] + 1e-9, side="right") - 1
    return clo, chi


def to_scale(enc: Encoding, clo: np.ndarray, chi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Boxes in the numeric coding from code intervals."""
    lo = np.stack([enc.columns[q].scale[clo[:, j]] for j, q in enumerate(enc.qis)], axis=1)
    hi = np.stack([enc.columns[q].scale[chi[:, j]] for j, q in enumerate(enc.qis)], axis=1)
    return lo.astype(float), hi.astype(float)


def published_extent(enc: Encoding, clo: np.ndarray, chi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Code intervals as a reader of the published labels sees them (a hierarchy label covers its whole subtree)."""
    clo, chi = clo.copy(), chi.copy()
    for j, q in enumerate(enc.qis):
        c = enc.columns[q]
        if c.hierarchy is not None and c.kind != "numeric":
            _, _, clo[:, j], chi[:, j] = code_labels(c, clo[:, j], np.maximum(chi[:, j], clo[:, j]))
    return clo, chi


class BoxCounter:
    """Counts the real rows (codes) inside code boxes: a summed-area table over the code grid when it is small,
    exact-match lookups for point boxes and chunked comparisons for the other boxes otherwise."""

    def __init__(self, codes: np.ndarray, m: np.ndarray, max_cells: int = MAX_TABLE_CELLS) -> None:
        """Index the rows ``codes`` (n, d) whose dimension j takes codes 0..m[j]-1."""
        self.codes, self.m = codes, np.asarray(m, np.int64)
        self.table = None
        if float(np.prod((self.m + 1).astype(float))) <= max_cells and codes.shape[1] <= 10:
            hist = np.bincount(np.ravel_multi_index(tuple(codes.T), tuple(self.m)), minlength=int(np.prod(self.m)))
            sat = np.zeros(tuple(self.m + 1), np.int64)
            sat[tuple(slice(1, None) for _ in self.m)] = hist.reshape(tuple(self.m))
            for j in range(len(self.m)):
                np.cumsum(sat, axis=j, out=sat)
            self.table = sat
        else:
            uniq, counts = np.unique(codes, axis=0, return_counts=True)
            self.points, self.point_counts = uniq, counts  # sorted rows: exact-match lookups by searchsorted

    def __call__(self, clo: np.ndarray, chi: np.ndarray) -> np.ndarray:
        """Real rows inside each box clo..chi (inclusive code intervals)."""
        if self.table is not None:
            out = np.zeros(len(clo), np.int64)
            d = clo.shape[1]
            for corner in itertools.product((0, 1), repeat=d):  # inclusion-exclusion over the 2^d corners
                pick = np.array(corner, bool)
                idx = np.where(pick, chi + 1, clo)
                sign = -1 if (d - pick.sum()) % 2 else 1
                out += sign * self.table[tuple(idx.T)]
            return out
        out = np.zeros(len(clo), np.int64)
        point = (clo == chi).all(axis=1)
        if point.any():
            out[point] = self._points(clo[point])
        box = np.flatnonzero(~point)  # general boxes (FKA's cells: few distinct ones), a chunk of boxes at a time
        step = max(1, CHUNK // max(1, self.codes.size))
        for s in range(0, len(box), step):
            b = box[s:s + step]
            inside = (self.codes >= clo[b, None, :]) & (self.codes <= chi[b, None, :])
            out[b] = inside.all(axis=2).sum(axis=1)
        return out

    def _points(self, pts: np.ndarray) -> np.ndarray:
        """Rows equal to each point."""
        key = np.ascontiguousarray(self.points).view(np.dtype((np.void, self.points.dtype.itemsize * pts.shape[1])))
        q = np.ascontiguousarray(pts.astype(self.points.dtype)).view(key.dtype)
        key, q = key.reshape(-1), q.reshape(-1)
        order = np.argsort(key)
        pos = np.searchsorted(key[order], q)
        pos = np.minimum(pos, len(key) - 1)
        hit = key[order][pos] == q
        return np.where(hit, self.point_counts[order][pos], 0)


class SampleGuard:
    """Widens every box that would single out 1..k-1 real rows before it is published (module docs)."""

    def __init__(self, enc: Encoding, k: int, max_cells: int = MAX_TABLE_CELLS) -> None:
        """Index the real rows of ``enc`` for counting and nearest-neighbour queries."""
        self.enc, self.k = enc, int(k)
        self.m = np.array([enc.columns[q].m for q in enc.qis], np.int64)
        self.count = BoxCounter(enc.codes, self.m, max_cells)
        self.unit = 1.0 / np.maximum(self.m - 1, 1)  # each dimension's code range scaled to [0, 1]
        self._tree = None
        self.widened = 0  # boxes widened so far
        self.checked = 0  # boxes checked so far

    @property
    def tree(self) -> cKDTree:
        """k-d tree over the scaled codes of the real rows (built on first use)."""
        if self._tree is None:
            self._tree = cKDTree(self.enc.codes * self.unit)
        return self._tree

    def nearest(self, clo: np.ndarray, chi: np.ndarray) -> np.ndarray:
        """(len(clo), k) row indices of the k real rows nearest to each box (distance 0 inside it)."""
        k = self.k
        out = np.empty((len(clo), k), np.int64)
        point = (clo == chi).all(axis=1)
        if point.any():
            _, idx = self.tree.query(clo[point] * self.unit, k=k)
            out[point] = np.asarray(idx).reshape(-1, k)
        x = self.enc.codes * self.unit
        box = np.flatnonzero(~point)  # boxes: distance to their nearest point, a chunk of boxes at a time
        step = max(1, CHUNK // max(1, x.size))
        for s in range(0, len(box), step):
            b = box[s:s + step]
            gap = np.maximum(np.maximum(clo[b, None, :] * self.unit - x, x - chi[b, None, :] * self.unit), 0.0)
            dist = (gap ** 2).sum(axis=2)
            near = np.argpartition(dist, k - 1, axis=1)[:, :k]
            # nearest first, then lowest row: the same box always gets the same rows
            order = np.lexsort((near, np.take_along_axis(dist, near, axis=1)), axis=1)
            out[b] = np.take_along_axis(near, order, axis=1)
        return out

    def protect(self, clo: np.ndarray, chi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Widened code boxes of the boxes that need it (identical boxes are handled once): (wlo, whi, mask), the
        rows of wlo/whi belonging to the boxes of ``mask``, in order."""
        box = np.hstack([clo, chi])
        uniq, inv = np.unique(box, axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        d = clo.shape[1]
        ulo, uhi = published_extent(self.enc, uniq[:, :d], uniq[:, d:])  # what a reader of the labels sees
        n_in = self.count(ulo, uhi)
        few = (n_in > 0) & (n_in < self.k)
        wlo, whi = ulo[few], uhi[few]
        if few.any():
            near = self.enc.codes[self.nearest(wlo, whi)]  # (f, k, d)
            wlo, whi = published_extent(self.enc, np.minimum(wlo, near.min(axis=1)), np.maximum(whi, near.max(axis=1)))
        slot = np.cumsum(few) - 1
        mask = few[inv]
        self.checked += len(clo)
        self.widened += int(mask.sum())
        return wlo[slot[inv[mask]]], whi[slot[inv[mask]]], mask

    def __call__(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Boxes in the numeric coding, safe to publish: the given ones, except widened copies of those holding
        1..k-1 real rows; plus the mask of widened ones."""
        lo, hi = np.array(lo, dtype=float), np.array(hi, dtype=float)
        clo, chi = to_codes(self.enc, lo, hi)
        live = (chi >= clo).all(axis=1)  # a box between or outside the table's values holds no code: 0 rows
        mask = np.zeros(len(lo), bool)
        if live.any():
            wlo, whi, mask[live] = self.protect(clo[live], chi[live])
            lo[mask], hi[mask] = to_scale(self.enc, wlo, whi)
        return lo, hi, mask
