"""Incognito (LeFevre et al. SIGMOD 2005): all minimal k-anonymous full-domain generalizations, best NCP wins."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from crowddb.anonymize.encoding import Encoding
from crowddb.anonymize.fulldomain import FullDomain
from crowddb.anonymize.generalize import Release
from crowddb.anonymize.ties import first_best
from crowddb.errors import ArgumentError


def _anonymous(fd: FullDomain, node, k: int, limit: int, dims=None) -> bool:
    """At most ``limit`` rows of the (projected) table sit in classes of fewer than k rows."""
    if dims is None:
        return fd.suppression(node, k, limit) is not None
    return int(fd.small(node, k, dims).sum()) <= limit


def _pair_tables(fd: FullDomain, lo: np.ndarray, k: int, limit: int) -> dict:
    """Incognito's 2-attribute subset pass: k-anonymity of every level pair of every QI pair."""
    d = len(lo)
    tables = {}
    for i, j in itertools.combinations(range(d), 2):
        t = np.zeros((fd.heights[i] + 1, fd.heights[j] + 1), bool)
        for a in range(lo[i], fd.heights[i] + 1):
            for b in range(lo[j], fd.heights[j] + 1):
                if (t[:a + 1, :b + 1]).any():  # a generalization of an anonymous pair is anonymous
                    t[a, b] = True
                    continue
                node = np.zeros(d, np.int64)
                node[i], node[j] = a, b
                t[a, b] = _anonymous(fd, node, k, limit, (i, j))
        tables[(i, j)] = t
    return tables


def incognito(frame: pd.DataFrame, enc: Encoding, k: int, *, max_suppressed: int | None = None, bands: int = 16,
              max_evaluations: int = 20000, max_lattice: int = 2_000_000,
              shared_groups: np.ndarray | None = None) -> Release:
    """Search the generalization lattice bottom-up with subset pruning (single QIs, then pairs) and
    generalization tagging; among the minimal k-anonymous nodes (suppression budget ``max_suppressed`` rows,
    default k as for Datafly) publish the one with the lowest NCP."""
    limit = k if max_suppressed is None else int(max_suppressed)
    fd = FullDomain(enc, bands, shared_groups)
    d = len(enc.qis)
    lo = np.zeros(d, np.int64)
    for j in range(d):  # subset property on single QIs: the lowest level at which QI j alone is k-anonymous
        node = np.zeros(d, np.int64)
        while lo[j] < fd.heights[j]:
            node[j] = lo[j]
            if _anonymous(fd, node, k, limit, (j,)):
                break
            lo[j] += 1
    size = int(np.prod((fd.heights - lo + 1).astype(float)))
    if size > max_lattice:
        raise ArgumentError(f"Incognito's lattice has {size:,} nodes over {d} quasi-identifiers (limit "
                            f"{max_lattice:,}); use method='datafly' or 'mondrian', or fewer quasi-identifiers")
    pairs = _pair_tables(fd, lo, k, limit) if d > 2 else {}
    grids = np.array(list(itertools.product(*[range(a, h + 1) for a, h in zip(lo, fd.heights)])), dtype=np.int64)
    grids = grids[np.argsort(grids.sum(axis=1), kind="stable")]  # bottom-up by lattice height
    ok = np.ones(len(grids), bool)
    for (i, j), t in pairs.items():
        ok &= t[grids[:, i], grids[:, j]]  # a node whose 2-QI projection is not k-anonymous cannot be
    minimal: list[np.ndarray] = []
    evaluations, complete = 0, True
    for node in grids[ok]:
        if minimal and (np.asarray(minimal) <= node).all(axis=1).any():
            continue  # generalizes a k-anonymous node: anonymous, not minimal
        if evaluations >= max_evaluations:
            complete = False
            break
        evaluations += 1
        if _anonymous(fd, node, k, limit):
            minimal.append(node)
    if not minimal:
        minimal = [fd.heights.copy()]  # the top node: one class of every row
    sup = {tuple(nd): fd.suppression(nd, k, limit) for nd in minimal}
    # the lowest NCP, the lexicographically lowest level vector on ties (ties.py: NCP is a float mean over QIs, so
    # nodes of equal NCP in real arithmetic differ in their last bits)
    minimal.sort(key=tuple)
    best = minimal[first_best([fd.ncp(nd, int(sup[tuple(nd)].sum())) for nd in minimal], maximize=False)]
    extra = {"minimal_nodes": len(minimal), "evaluations": evaluations, "lattice_complete": complete,
             "max_suppressed": limit}
    return fd.release(frame, best, k, "incognito", sup[tuple(best)], extra)
