"""Group-level generalization: quasi-identifiers a whole group shares (``shared=``) are generalized per group.

A group operator publishes all rows of one group together (``getcandidate ... GROUP BY age``), so an attacker can
intersect the published ranges of the group's rows on a column they share and get the group value back. With
``shared`` columns every set of rows with equal values on all of them gets one label per shared column, so the
intersection is a no-op, and every class (rows with identical labels on all QIs) still holds >= k rows.

Mondrian with shared columns works in two stages:

1. *Stage 1* partitions the rows over the shared columns only, with strict median cuts (which never separate equal
   values), so each set of equal shared values lands in one stage-1 class. Shared columns are labelled by the tight
   box of their stage-1 class.
2. *Stage 2* runs Mondrian over the remaining QIs inside each stage-1 class (``init`` = the stage-1 classes, shared
   columns held constant so they are never cut); the remaining QIs are labelled by the final class's tight box.

The finest stage 1 (Mondrian over the shared columns with k) leaves stage 2 classes of k..2k-1 rows to cut, i.e.
almost nothing: every other QI is then published as the range of its whole stage-1 class. So stage 1 is not one
Mondrian run but a ladder of nested ones (k_i = n / 2^(i/2) down to k, each level refining the previous one),
stage 2 is run below every level, and a bottom-up pass over the ladder picks, for every node, either the node itself
as a stage-1 class or the best choice among its children, whichever publishes less (NCP: summed normalized widths
of all QIs of all its rows). With several shared columns a second ladder (k halving per level) nests differently
and is tried too; the cheaper pick wins. Measured on Adult (hours_per_week > 60, QIs age/sex/education_num, shared age): NCP
13.9% at k=10 and 30.4% at k=50, where the finest stage 1 publishes 40.6% and 60.6% (plain Mondrian, which leaks,
8.8% and 22.7%); on all of Adult 8.9% at k=10 (plain 8.2%).

Full-domain methods (Datafly, Incognito) recode globally, so equal values always get equal labels; only their
suppression could split a shared group ('*' for some of its rows, the level's label for the others). With
``shared`` their suppression takes whole shared groups (see FullDomain.suppression).
"""

from __future__ import annotations

import numpy as np

from crowddb.anonymize.encoding import Encoding
from crowddb.anonymize.generalize import Release, class_boxes
from crowddb.anonymize.metrics import compact, lex_ids
from crowddb.anonymize.mondrian import mondrian_groups
from crowddb.anonymize.ties import less
from crowddb.errors import ArgumentError, PrivacyError, UnknownColumnError


def validate_shared(shared, qis: list[str], columns) -> list[str]:
    """The shared columns as a list (a single name is accepted), each a known column that is a quasi-identifier."""
    if shared is None:
        return []
    names = [shared] if isinstance(shared, str) else list(shared)
    for s in names:
        if not isinstance(s, str):
            raise ArgumentError(f"shared must name columns (strings), got {s!r}")
        if s not in columns:
            raise UnknownColumnError(f"unknown shared column {s!r}; columns are {list(columns)}")
        if s not in qis:
            raise ArgumentError(f"shared column {s!r} is not a quasi-identifier; shared columns must be among {qis}")
    if len(set(names)) != len(names):
        raise ArgumentError(f"shared columns listed twice: {names}")
    return names


def shared_ids(codes: np.ndarray, dims: list[int]) -> np.ndarray:
    """Dense id per row of its combination of values on the shared columns ``dims``."""
    if len(dims) == 1:
        return compact(codes[:, dims[0]])
    return lex_ids(codes[:, dims])


def _widths(enc: Encoding) -> tuple[list[np.ndarray], np.ndarray]:
    """Per-QI scale arrays and their spans (inf for a constant QI, so its widths are 0)."""
    scales = enc.scale_of()
    span = np.array([float(s[-1] - s[0]) for s in scales])
    return scales, np.where(span > 0, span, np.inf)


def _box_cost(scales, safe_span, lo: np.ndarray, hi: np.ndarray, dims: list[int]) -> np.ndarray:
    """Summed normalized width over ``dims`` of each box (rows of lo/hi in codes)."""
    out = np.zeros(len(lo))
    for j in dims:
        out += (scales[j][hi[:, j]] - scales[j][lo[:, j]]) / safe_span[j]
    return out


def _ladder(enc: Encoding, k: int, sdims: list[int], sensitive, l, steps: int) -> list[np.ndarray]:
    """Nested stage-1 partitions over the shared columns: level 0 is one class of all rows, level i refines level
    i-1 by strict Mondrian with k_i = max(k, n / 2^(i / steps)); the last level is Mondrian with k. With one shared
    column every level is a cut through the same tree (plain strict Mondrian's: a median cut depends only on the
    partition's rows), so steps=2 holds every level of steps=1 and more."""
    return ladder_below(enc.codes[:, sdims], [enc.scale_of()[j] for j in sdims], len(enc.codes), k, 0, steps,
                        sensitive, l)


def level_k(n: int, k: int, i: int, steps: int) -> int:
    """k of the ladder's level i: max(k, n / 2^(i / steps))."""
    return max(k, int(n / 2 ** (i / steps)))


def ladder_below(codes: np.ndarray, scales: list[np.ndarray], n: int, k: int, born: int, steps: int, sensitive,
                 l) -> list[np.ndarray]:
    """The ladder's levels (``_ladder``) below one of its classes made at level ``born`` (0: the root, all ``n``
    rows), over that class's rows (``codes``: their shared columns): level 0 is the class, each next level refines
    the one before by strict Mondrian with the whole ladder's k_i (``level_k``), until the level of k_i = k.
    Everything below a class depends on its rows alone (and n, k, its level): Spark builds the top of a ladder and
    hands each class to this function (crowddb/spark/mondrian.py)."""
    levels = [np.zeros(len(codes), np.int64)]
    i = born
    while i == 0 or level_k(n, k, i, steps) > k:  # the last level is the one of k_i = k
        i += 1
        ki = level_k(n, k, i, steps)
        prev = levels[-1]
        g = int(prev.max()) + 1
        cuttable = np.zeros(g, bool)  # classes with two values on some shared column (strict cuts need them)
        for c in codes.T:
            lo, hi = np.full(g, np.iinfo(np.int64).max), np.full(g, -1)
            np.minimum.at(lo, prev, c)
            np.maximum.at(hi, prev, c)
            cuttable |= lo < hi
        size = np.bincount(prev)
        if not (cuttable & (size >= 2 * k)).any():
            return levels  # no class can be cut at any later level either
        open_ = np.flatnonzero((cuttable & (size >= 2 * ki))[prev])  # only classes of >= 2 k_i rows can be cut
        if len(open_):
            sub = mondrian_groups(codes[open_], scales, ki, strict=True, l=l, init=prev[open_],
                                  sensitive=None if sensitive is None else sensitive[open_])
            part = prev.copy()
            part[open_] = g + sub
            part = compact(part)
            if part.max() > prev.max():  # refined (never merged: init partitions are kept apart)
                levels.append(part)
    return levels


def stage2(codes: np.ndarray, scales: list[np.ndarray], k: int, part: np.ndarray, sdims: list[int], strict: bool,
           sensitive, l):
    """Mondrian over the non-shared QIs inside every class of ``part``: class id per row and (G, d) code boxes
    with the shared dimensions taken from the enclosing stage-1 class."""
    flat = codes.copy()
    flat[:, sdims] = 0  # constant: never a candidate dimension
    flat_scales = [np.zeros(1) if j in sdims else s for j, s in enumerate(scales)]
    groups, lo, hi = mondrian_groups(flat, flat_scales, k, strict=strict, sensitive=sensitive, l=l, init=part,
                                     return_boxes=True)
    pid, plo, phi = class_boxes(codes, part)
    rep = np.zeros(len(lo), np.int64)
    rep[groups] = np.arange(len(groups))  # a row of each class: its stage-1 class is the class's
    owner = pid[rep]
    lo[:, sdims], hi[:, sdims] = plo[owner][:, sdims], phi[owner][:, sdims]
    return groups, lo, hi


def choose(enc: Encoding, k: int, levels: list[np.ndarray], sdims: list[int], strict: bool, sensitive, l):
    """The best stage-1 partition made of nodes of the ladder: (its total cost, stage-1 class id per row)."""
    scales, safe_span = _widths(enc)
    all_dims = list(range(len(enc.qis)))
    parents = [None] + [np.zeros(int(levels[i].max()) + 1, np.int64) for i in range(1, len(levels))]
    for i in range(1, len(levels)):
        parents[i][levels[i]] = levels[i - 1]
    # cost of each node of each level as a stage-1 class: the summed NCP terms of its rows after stage 2. Stage 2
    # inside a class depends on its rows only, so a node equal to its parent (an only child) keeps the parent's cost
    # and stage 2 runs on the rows of new nodes only
    costs = []
    for i, part in enumerate(levels):
        cost = np.zeros(int(part.max()) + 1)
        new = np.ones(len(cost), bool)
        if i:
            only = (np.bincount(parents[i]) == 1)[parents[i]]
            cost[only] = costs[-1][parents[i][only]]
            new = ~only
        rows = np.flatnonzero(new[part])
        if len(rows):
            g, lo, hi = stage2(enc.codes[rows], scales, k, part[rows], sdims, strict,
                                None if sensitive is None else sensitive[rows], l)
            cost += np.bincount(part[rows], weights=_box_cost(scales, safe_span, lo, hi, all_dims)[g],
                                minlength=len(cost))
        costs.append(cost)
    # bottom-up: a node stops (is a stage-1 class) unless its children together publish strictly less
    best = costs[-1]
    stop = [np.ones(len(best), bool)]
    for i in range(len(levels) - 2, -1, -1):
        below = np.bincount(parents[i + 1], weights=best, minlength=len(costs[i]))
        here = ~less(below, costs[i])  # ties (ties.py): the coarser class (the larger anonymity set)
        stop.insert(0, here)
        best = np.where(here, costs[i], below)
    # top-down: each row's stage-1 class is its ancestor at the first level that stops
    final = np.full(len(enc.codes), -1, np.int64)
    offset = 0
    for part, st in zip(levels, stop):
        take = (final < 0) & st[part]
        final[take] = part[take] + offset
        offset += len(st)
    return float(best[0]), compact(final)


def shared_mondrian(enc: Encoding, k: int, shared: list[str], *, strict: bool = True, sensitive=None, l=None):
    """Two-stage Mondrian (module docs): class id per row, (G, d) code boxes, and figures for the metrics."""
    sdims = [enc.qis.index(s) for s in shared]
    if len(sdims) == len(enc.qis):  # every QI shared: strict Mondrian never separates rows equal on all QIs
        groups, lo, hi = mondrian_groups(enc.codes, enc.scale_of(), k, strict=True, sensitive=sensitive, l=l,
                                         return_boxes=True)
        return groups, lo, hi, {"shared_classes": len(lo)}
    # a ladder halving k per level, and one with two levels per halving; with several shared columns the two
    # nest differently (Mondrian's fallback cuts depend on k), so both are tried and the cheaper one wins
    best = None
    for steps in ((2,) if len(sdims) == 1 else (1, 2)):
        cost, final = choose(enc, k, _ladder(enc, k, sdims, sensitive, l, steps), sdims, strict, sensitive, l)
        if best is None or less(cost, best[0]):  # ties (ties.py): the first ladder
            best = (cost, final)
    final = best[1]
    groups, lo, hi = stage2(enc.codes, enc.scale_of(), k, final, sdims, strict, sensitive, l)
    return groups, lo, hi, {"shared_classes": int(final.max()) + 1}


def check_shared(release: Release, sid: np.ndarray, shared: list[str], k: int) -> None:
    """Invariant of every release with shared columns: one label per shared column within each shared group, and
    every class holds >= k rows. Raises PrivacyError (a bug, never expected)."""
    first = np.zeros(int(sid.max()) + 1, np.int64)
    first[sid[::-1]] = np.arange(len(sid))[::-1]  # the first row of each shared group
    for q in shared:
        labels = release.table[q].to_numpy()
        if (labels != labels[first[sid]]).any():
            raise PrivacyError(f"internal error: rows sharing their {shared} values got different labels on {q!r}")
    if np.bincount(release.groups).min() < k:
        raise PrivacyError(f"internal error: a class of the release with shared={shared} has fewer than k={k} rows")
