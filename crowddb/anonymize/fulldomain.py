"""Full-domain generalization ladders (one per QI) and the class/release machinery Datafly and Incognito share."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from crowddb.anonymize.encoding import Encoding, QIEncoding
from crowddb.anonymize.generalize import SUPPRESSED, Release, assemble, fmt_number
from crowddb.anonymize.hierarchy import _key


@dataclass
class Ladder:
    """Levels of one QI: per level the class id of every code, each class's label and its box on the scale."""

    ids: list[np.ndarray]
    labels: list[np.ndarray]
    lo: list[np.ndarray]
    hi: list[np.ndarray]

    @property
    def height(self) -> int:
        """Index of the top level (everything generalized to '*')."""
        return len(self.ids) - 1


def _level(enc: QIEncoding, ids: np.ndarray, labels: list) -> tuple:
    """Compact class ids, and per class its label and scale box."""
    uniq, ids = np.unique(ids, return_inverse=True)
    n_c = len(uniq)
    lo = np.full(n_c, np.inf)
    hi = np.full(n_c, -np.inf)
    np.minimum.at(lo, ids, enc.scale)
    np.maximum.at(hi, ids, enc.scale)
    labs = np.empty(n_c, dtype=object)
    labs[ids] = labels
    return ids.reshape(-1), labs, lo, hi


def _nice(x: float) -> float:
    """Smallest of 1, 2, 5 x 10^e that is >= x."""
    if x <= 0:
        return 1.0
    e = 10.0 ** math.floor(math.log10(x))
    return next(f * e for f in (1, 2, 5, 10) if f * e >= x - 1e-12)


def _top(enc: QIEncoding) -> tuple:
    """The '*' level: one class spanning the whole domain."""
    return (np.zeros(enc.m, np.int64), np.array([SUPPRESSED], dtype=object),
            np.array([enc.scale[0]]), np.array([enc.scale[-1]]))


def build_ladder(enc: QIEncoding, bands: int = 16) -> Ladder:
    """Hierarchy levels if one was given; numeric: doubling interval bands; categorical: doubling code intervals."""
    levels = []
    if enc.hierarchy is not None:
        h = enc.hierarchy
        for lev in range(h.height + 1):
            labs = h.labels(enc.categories, lev) if lev else np.array([_key(c) for c in enc.categories], dtype=object)
            ids = pd.factorize(labs)[0]
            levels.append(_level(enc, ids, labs))
        if len(levels[-1][1]) > 1:
            levels.append(_top(enc))
    elif enc.kind == "numeric":
        v = enc.scale
        levels.append(_level(enc, np.arange(enc.m), [fmt_number(x, enc.integer) for x in v]))
        step = _nice(enc.span / bands) if enc.span > 0 else 1.0
        step = max(step, 1.0) if enc.integer else step
        anchor = math.floor(v[0] / step) * step
        w = step
        while True:
            b = np.floor((v - anchor) / w).astype(np.int64)
            if len(np.unique(b)) <= 1:
                break
            lo_edge = anchor + b * w
            hi_edge = lo_edge + w - (1 if enc.integer else 0)
            close = "]" if enc.integer else ")"
            labs = [f"[{fmt_number(a, enc.integer)}-{fmt_number(z, enc.integer)}{close}"
                    for a, z in zip(lo_edge, hi_edge)]
            ids, labels, _, _ = _level(enc, b, labs)
            # the published interval, clipped to the (public) domain, is the class box
            box_lo = np.zeros(len(labels))
            box_hi = np.zeros(len(labels))
            box_lo[ids] = np.maximum(lo_edge, v[0])
            box_hi[ids] = np.minimum(hi_edge, v[-1])
            levels.append((ids, labels, box_lo, box_hi))
            w *= 2
        levels.append(_top(enc))
    else:
        cats = [str(c) for c in enc.categories]
        levels.append(_level(enc, np.arange(enc.m), cats))
        shift = 1
        while (enc.m - 1) >> shift > 0:
            b = np.arange(enc.m) >> shift
            labs = ["{" + ",".join(cats[g << shift:(g + 1) << shift]) + "}" for g in b]
            levels.append(_level(enc, b, labs))
            shift += 1
        levels.append(_top(enc))
    if enc.m <= 1:
        levels = levels[:1]
    ids, labels, lo, hi = (list(x) for x in zip(*levels))
    return Ladder(ids, labels, lo, hi)


def class_keys(cols: list[np.ndarray], cards: list[int]) -> np.ndarray:
    """Dense class id per row for the combination of several per-row class id columns."""
    key = np.zeros(len(cols[0]), np.int64)
    size = 1
    for c, card in zip(cols, cards):
        if size * card >= 2**62:
            key, uniq = pd.factorize(key)
            size = len(uniq)
        key = key * card + c
        size *= card
    return key


class FullDomain:
    """Evaluates full-domain generalization vectors (one level per QI) on an encoded table."""

    def __init__(self, enc: Encoding, bands: int = 16, shared_groups: np.ndarray | None = None) -> None:
        """Build every QI's ladder and the per-row class ids at each level. ``shared_groups``: id per row of its
        values on the shared columns (crowddb/anonymize/shared.py); suppression then takes whole groups."""
        self.enc = enc
        self.shared_groups = shared_groups
        self.ladders = [build_ladder(enc.columns[q], bands) for q in enc.qis]
        self.heights = np.array([lad.height for lad in self.ladders])
        self.n = len(enc.codes)
        freq = [np.bincount(enc.codes[:, j], minlength=enc.columns[q].m) for j, q in enumerate(enc.qis)]
        span = [enc.columns[q].span for q in enc.qis]
        # mean normalized width of each QI at each level: NCP of a node is the mean of these
        self.level_loss = [np.array([0.0 if span[j] == 0 else
                                     float((freq[j] * (lad.hi[h] - lad.lo[h])[lad.ids[h]]).sum()) / self.n / span[j]
                                     for h in range(lad.height + 1)]) for j, lad in enumerate(self.ladders)]

    def row_ids(self, j: int, h: int, rows=None) -> np.ndarray:
        """Class id of each row's QI j at level h."""
        c = self.enc.codes[:, j] if rows is None else self.enc.codes[rows, j]
        return self.ladders[j].ids[h][c]

    def classes(self, node, dims=None) -> tuple[np.ndarray, np.ndarray]:
        """Class id per row and class sizes for a generalization vector, optionally projected on ``dims``."""
        dims = list(range(len(node))) if dims is None else list(dims)
        cols = [self.row_ids(j, node[j]) for j in dims]
        cards = [len(self.ladders[j].labels[node[j]]) for j in dims]
        ids, uniq = pd.factorize(class_keys(cols, cards))
        return ids, np.bincount(ids, minlength=len(uniq))

    def small(self, node, k: int, dims=None) -> np.ndarray:
        """Mask of rows whose class (under ``node``, projected on ``dims``) has fewer than k rows."""
        ids, sizes = self.classes(node, dims)
        return sizes[ids] < k

    def suppression(self, node, k: int, limit: int) -> np.ndarray | None:
        """Rows to suppress so that ``node`` is k-anonymous, or None if more than ``limit`` would be needed.

        Rows in classes < k are suppressed; if they are fewer than k, rows of the largest class (which keeps >= k)
        join them so that the suppressed rows, published as one all-'*' class, are k-anonymous too.
        """
        ids, sizes = self.classes(node)
        small = sizes[ids] < k
        if self.shared_groups is not None:
            return self._group_suppression(ids, small, k, limit)
        out = int(small.sum())
        if out == 0:
            return small
        if out > limit:
            return None
        if out < k:
            big = int(np.argmax(sizes))
            need = k - out
            if sizes[big] - need < k or k > limit:
                return None
            small[np.flatnonzero(ids == big)[:need]] = True
        return small

    def _group_suppression(self, ids: np.ndarray, small: np.ndarray, k: int, limit: int) -> np.ndarray | None:
        """suppression() when rows of one shared group must share their labels: a group is suppressed whole or not
        at all. Suppressing whole groups can leave other classes below k, so this repeats until no published class
        is below k; if fewer than k rows end up suppressed, whole groups of the largest class join them."""
        sg = self.shared_groups
        n_sg, n_c = int(sg.max()) + 1, int(ids.max()) + 1
        while True:
            touched = np.zeros(n_sg, bool)
            touched[sg[small]] = True
            grown = touched[sg]
            left = np.bincount(ids[~grown], minlength=n_c)
            grown |= left[ids] < k
            out = int(grown.sum())
            if out > limit:
                return None
            if out == 0 or (out >= k and (grown == small).all()):
                return grown
            if (grown == small).all():  # closed, but fewer than k rows suppressed: take more from the largest class
                big = int(np.argmax(np.where(left > 0, left, -1)))
                if left[big] == 0:
                    return None
                grown |= sg == sg[np.flatnonzero((ids == big) & ~grown)[0]]
            small = grown

    def ncp(self, node, suppressed: int = 0) -> float:
        """NCP (%) of a node: suppressed rows count as fully generalized in every QI."""
        base = np.mean([self.level_loss[j][h] for j, h in enumerate(node)])
        return 100.0 * (base * (self.n - suppressed) + suppressed) / self.n

    def release(self, frame: pd.DataFrame, node, k: int, method: str, suppress: np.ndarray | None,
                extra: dict | None = None) -> Release:
        """Release of a node: QIs replaced by the node's labels; suppressed rows get '*' everywhere."""
        enc = self.enc
        ids, _ = self.classes(node)
        gid = ids.copy()
        n_g = int(gid.max()) + 1
        sup = suppress if suppress is not None and suppress.any() else None
        if sup is not None:
            gid[sup] = n_g  # one pre-class for all suppressed rows
        n_pre = int(gid.max()) + 1
        rep = np.zeros(n_pre, np.int64)
        rep[gid[::-1]] = np.arange(self.n)[::-1]  # a representative row of each pre-class
        blo, bhi = np.empty((n_pre, len(node))), np.empty((n_pre, len(node)))
        labels = []
        for j, h in enumerate(node):
            lad = self.ladders[j]
            cls = lad.ids[h][enc.codes[rep, j]]
            labs = np.append(lad.labels[h], SUPPRESSED)
            lo = np.append(lad.lo[h], enc.columns[enc.qis[j]].scale[0])
            hi = np.append(lad.hi[h], enc.columns[enc.qis[j]].scale[-1])
            if sup is not None:
                cls[n_g] = len(labs) - 1
            blo[:, j], bhi[:, j] = lo[cls], hi[cls]
            labels.append((labs, cls))
        extra = {"levels": {q: int(h) for q, h in zip(enc.qis, node)}, **(extra or {})}
        return assemble(frame, enc, gid, blo, bhi, labels, k, method, extra, suppress)
