"""A safe release of rows shown before, found instead of refused (issue 25).

The privacy ledger keeps each published row's history (which releases showed it, in which box); rows with the same
history form a joint class, which a worker who links every release cannot split, and the guard keeps each of them at
least its k. A new release keeps every joint class whole when it shows all of a class's rows, each in the same box:
then nobody's history splits from a classmate's, and the release is safe whatever boxes it chooses, as long as its own
classes (rows sharing one new box) hold at least its k. So instead of refusing a request over rows shown before,
crowddb plans such a release:

- **from the record**: rows whose items, in the boxes they were last shown in, all have answers on record are
  served from them whatever k those boxes had (``plan(..., any_k=True)``; the caller keeps such a plan only when
  nothing is left to publish): nothing is shown again;
- **reuse**: a joint class shown last in a box over the same quasi-identifiers with a k at least this one's is shown
  in that box again (the persisted partition): the same items, served from the answers on record;
- **coarsen**: joint classes smaller than this k (a larger k than before) are merged, whole, with their neighbours
  (in the order of their boxes) until each merged class holds k rows, shown in the box covering them;
- **added quasi-identifiers, another anonymizer**: a joint class keeps its rows together in a box over the requested
  quasi-identifiers, generalized over its rows;
- **widen**: when a request would split a joint class into a part below k, the rows of that class it leaves out
  are added to the release (``widening``; shown, their answers not used), where the caller can fetch them (a tuple
  operator over a table's own rows); otherwise the guard refuses, naming the classes;
- **new rows** (no release showed them) form classes of their own, at least k each (the caller anonymizes them), or
  are refused when fewer than k.

Pure: the joint classes come in as a frame (``store.composition.joint_classes``), the plan goes out; the caller
prints the boxes (``anonymize.generalize`` for boxes it computes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from ..store.composition import BOX_SEPARATOR


@dataclasses.dataclass
class Served:
    """How to show the requested rows (and the rows added to keep classes whole).

    ``rows``: identities of the release, the requested ones first (in their order) then the widened ones;
    ``groups``: each row's class in this release (-1: a new row, for the caller's anonymizer);
    ``boxes``: each row's box text (joined by the ledger's separator) when it is shown in the box an earlier release
    showed it in, else None (its class's box is computed over its rows); ``widened``: how many rows were added; ``how``: what explain() says."""

    rows: np.ndarray
    groups: np.ndarray
    boxes: np.ndarray
    widened: int
    new: int
    how: str
    below_k: int = 0  # rows shown in an earlier box of a smaller k (``plan(..., any_k=True)``): only from the record
    sources: tuple[str, ...] = ()  # the earlier releases whose classes it keeps (their names in the ledger)


class Refused(Exception):  # a plan that cannot be made, with the reason (the caller words the error)
    """No safe release: ``reason`` says why, ``advice`` what works."""

    def __init__(self, reason: str, advice: str) -> None:
        super().__init__(reason)
        self.reason, self.advice = reason, advice


def plan(requested: np.ndarray, classes: pd.DataFrame, k: int, signature: str, *,
         groups: np.ndarray | None = None, widened: int = 0, any_k: bool = False) -> Served:
    """A safe release of ``requested`` (identities) given their joint ``classes`` (every member of each touched
    class, ``composition.joint_classes``) at promise ``k`` over the quasi-identifiers ``signature``.

    ``widened``: how many of ``requested`` (the last ones) the caller added to keep classes whole (``widening``);
    ``groups``: a group operator's group of each requested row: a group
    is shown together, so its rows' shared quasi-identifiers must not tell them apart, and a group and the joint
    classes it touches share one box.

    ``any_k``: reuse earlier boxes of any k when every requested row was shown before (none new, none widened):
    the caller takes such a plan only when every item it makes is served from the answers on record, so that
    nothing is shown again (``Served.below_k`` counts the rows it needs the record for)."""
    rows = np.asarray(requested, dtype=np.int64)
    shown = classes.drop_duplicates("row_ref")
    cls, members = _classes_of(rows, shown)  # each requested row's joint class (-1: new), the classes' attributes
    new = int((cls < 0).sum())
    unit = np.full(len(rows), -1, dtype=np.int64)  # each old row's joint class, numbered as the rows come
    unit[cls >= 0] = pd.factorize(cls[cls >= 0])[0]
    n_units = int(unit.max()) + 1 if (unit >= 0).any() else 0
    if groups is not None:  # a group operator: a group and the joint classes it touches are one class
        unit = _joined(unit, np.asarray(groups, dtype=np.int64), n_units)
        n_units = int(unit.max()) + 1 if (unit >= 0).any() else 0
    if not n_units:
        return Served(rows, unit, np.full(len(rows), None, dtype=object), widened, new, "",
                      sources=tuple(sorted(map(str, set(members["last_release"].dropna())))))
    # a unit's size is its whole joint classes' (rows the request leaves out included): a subset shown in its
    # earlier box is served from the answers on record; only a class smaller than this k is merged
    info = _units(unit, cls, members, n_units)
    # a joint class last shown over these quasi-identifiers with a k at least this one's is shown in its box again,
    # whatever its own size: that box's class in that release held k rows (with the classes sharing it); a unit (a
    # group with the classes it touches) is shown as it was when each of its classes can be
    same = ((info["last_quasi_identifiers"] == signature) & (info["signatures"] == 1)
            & ~info["has_new"].astype(bool)).to_numpy()
    at_k = (info["last_k"] >= k).to_numpy()
    again = same & (at_k | (any_k and not new and not widened))
    row_again = (unit >= 0) & again[np.maximum(unit, 0)]
    boxes = np.full(len(rows), None, dtype=object)
    boxes[row_again] = members["last_box"].to_numpy(dtype=object)[cls[row_again]]
    out = np.full(len(rows), -1, dtype=np.int64)
    if row_again.any():  # rows reused in one box are one class, numbered in the order of the boxes' texts
        from ..anonymize.encoding import sorted_texts  # the algorithm layer
        from ..anonymize.metrics import compact

        _, box_rank = sorted_texts(members["last_box"].astype(object).fillna("").to_numpy(dtype=object))
        out[row_again] = compact(box_rank[cls[row_again]])
    merged = np.full(len(info), -1, dtype=np.int64)
    if (~again).any():
        base = int(out.max()) + 1
        merged[~again] = base + _merge(info[~again], k)
        fresh = (unit >= 0) & ~row_again
        out[fresh] = merged[unit[fresh]]
    sources = set(pd.unique(info["last_release"].dropna().to_numpy(dtype=object)))
    how = _how(again, merged, widened, new, sorted(map(str, sources)))
    below = (unit >= 0) & (again & ~at_k)[np.maximum(unit, 0)]
    if below.any():
        how = how.replace("again", "again, from the answers on record", 1)
    return Served(rows, out, boxes, widened, new, how, int(below.sum()), tuple(sorted(map(str, sources))))


def _classes_of(rows: np.ndarray, shown: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """Each of ``rows``' joint class as a number (-1: a row no release showed), and per class (by that number) its
    whole size and its newest box, release, k and quasi-identifiers (one row per class, from its first member).
    Vectorized: a sorted search of the rows among the members, one factorization of the histories."""
    refs = shown["row_ref"].to_numpy(dtype=np.int64)
    history, _ = pd.factorize(shown["history"])  # each member's class
    order = np.argsort(refs, kind="stable")
    at = np.clip(np.searchsorted(refs, rows, sorter=order), 0, max(len(refs) - 1, 0))
    found = (refs[order[at]] == rows) if len(refs) else np.zeros(len(rows), dtype=bool)
    cls = np.where(found, history[order[at]] if len(refs) else -1, -1).astype(np.int64)
    first = first_rows(history)
    members = shown.iloc[first][["last_box", "last_release", "last_k", "last_quasi_identifiers"]].reset_index(drop=True)
    members["last_k"] = pd.to_numeric(members["last_k"], errors="coerce")
    members["size"] = np.bincount(history, minlength=len(first))
    return cls, members


def widening(requested: np.ndarray, classes: pd.DataFrame, k: int) -> np.ndarray:
    """The rows to add to a release of ``requested`` so that it splits no joint class into a part below k: for each
    touched class whose requested part or left-out part would hold fewer than k rows (a worker who links releases
    would tell either apart), the rows the request leaves out, in ascending order."""
    refs = classes["row_ref"].to_numpy(dtype=np.int64)
    asked = pd.Series(refs).isin(np.asarray(requested, dtype=np.int64)).to_numpy()  # (a hash lookup)
    history, _ = pd.factorize(classes["history"])
    size = np.bincount(history)
    part = np.bincount(history, weights=asked).astype(np.int64)
    split = (part > 0) & (part < size) & ((part < k) | (size - part < k))
    return np.sort(refs[split[history] & ~asked]) if len(refs) else np.zeros(0, dtype=np.int64)


def labels(served: Served, raw: pd.DataFrame, quasi_identifiers: list[str], kinds: dict[str, str] | None, k: int,
           fresh: Callable[[np.ndarray], Any]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Each requested row's published text per quasi-identifier (``raw``: the requested rows' values, in the plan's
    order) under the plan ``served``: a box an earlier release showed it in, split back into its columns; else its
    (merged) joint class's tight box over its rows' values (``anonymize.generalize``); rows no release showed go to
    ``fresh(mask)`` (the caller's anonymizer over those rows alone: classes of their own), which returns their
    ``Release``. Refused when fewer than k rows are new (they cannot form a class of their own)."""
    from ..anonymize.encoding import encode  # the algorithm layer
    from ..anonymize.generalize import release_from_groups

    names = sorted(quasi_identifiers)
    out = pd.DataFrame(index=raw.index, columns=names, dtype=object)
    groups, boxes = served.groups[:len(raw)], served.boxes[:len(raw)]
    reused = pd.notna(boxes)
    if reused.any():  # each distinct box split once (a box is shown to k rows or more), then taken per row
        which, distinct = pd.factorize(pd.Series(boxes[reused], dtype=object))
        parts = [box.split(BOX_SEPARATOR) for box in distinct]
        if any(len(p) != len(names) for p in parts):  # (a reused box is over these quasi-identifiers by construction)
            raise Refused(f"an earlier box does not print {names}", "ask over the quasi-identifiers it was shown over")
        texts = np.array(parts, dtype=object).reshape(len(parts), len(names))
        for j, name in enumerate(names):
            out.loc[reused, name] = texts[which, j]
    recomputed = (groups >= 0) & ~reused
    metrics: dict[str, Any] = {"method": "served", "served": served.how}
    if recomputed.any():  # one box per (merged) joint class, over its rows' values
        part = raw[recomputed].reset_index(drop=True)
        _, ids = np.unique(groups[recomputed], return_inverse=True)
        enc = encode(part, list(quasi_identifiers), kinds or None)
        boxed = release_from_groups(part, enc, ids.astype(np.int64), k, "served")
        for name in names:
            out.loc[recomputed, name] = boxed.table[name].astype(str).to_numpy(dtype=object)
        metrics["recomputed_ncp"] = boxed.metrics.get("ncp")
    new = groups < 0
    if new.any():
        if new.sum() < k:
            raise Refused(f"{int(new.sum())} of its rows were inserted after "
                          f"{', '.join(served.sources) or 'an earlier release'} showed the others, fewer than k={k}: "
                          "they cannot form a class of their own, and putting them in an earlier box would let a "
                          "worker who saw it tell them apart",
                          f"ask again when at least {k} new rows are in, or leave them out (WHERE ...)")
        release = fresh(new)
        for name in names:
            out.loc[new, name] = release.table[name].astype(str).to_numpy(dtype=object)
        metrics.update(new_rows=int(new.sum()), new_rows_ncp=release.metrics.get("ncp"))
        metrics["served"] += f"; {int(new.sum())} rows new since: in classes of their own"
    return out, metrics


def box_labels(served: Served, n: int, quasi_identifiers: list[str]) -> tuple[np.ndarray, dict[str, np.ndarray],
                                                                          dict[str, Any]]:
    """``labels`` of a plan that shows each of its first ``n`` rows in the box an earlier release showed it in, as
    the release's pre-classes: each row's class (rows printing the same box, numbered as first met: ``labels``'
    texts give the same numbering, one box printing one text per quasi-identifier) and each class's text per
    quasi-identifier. Each distinct box is split once; no text is made per row."""
    names = sorted(quasi_identifiers)
    pre_class = pd.factorize(served.groups[:n])[0]  # (one class per distinct box: ``plan``)
    first = first_rows(pre_class)
    parts = [box.split(BOX_SEPARATOR) for box in served.boxes[:n][first]]
    if any(len(p) != len(names) for p in parts):  # (a reused box is over these quasi-identifiers by construction)
        raise Refused(f"an earlier box does not print {names}", "ask over the quasi-identifiers it was shown over")
    texts = np.array(parts, dtype=object).reshape(len(parts), len(names))
    return (pre_class.astype(np.int64), {q: texts[:, names.index(q)] for q in quasi_identifiers},
            {"method": "served", "served": served.how})


def first_rows(codes: np.ndarray) -> np.ndarray:
    """Where each code first occurs, code by code, for codes numbered as first met (``pd.factorize``'s): where the
    running maximum grows (``np.unique(codes, return_index=True)[1]`` without sorting the rows)."""
    if not len(codes):
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, codes[1:] > np.maximum.accumulate(codes)[:-1]])


def _joined(unit: np.ndarray, groups: np.ndarray, n_units: int) -> np.ndarray:
    """Joint classes and groups joined where they share a row (connected components of the graph whose nodes are
    the classes and the groups, a row an edge), renumbered 0..m-1 in order of first appearance; rows of neither stay
    -1. A group's new rows join it too (its rows are shown together)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n_groups = int(groups.max()) + 1 if (groups >= 0).any() else 0
    node = np.where(unit >= 0, unit, np.where(groups >= 0, n_units + groups, -1))
    both = (unit >= 0) & (groups >= 0)
    n = n_units + n_groups
    edges = coo_matrix((np.ones(int(both.sum())), (unit[both], n_units + groups[both])), shape=(n, n))
    _, component = connected_components(edges, directed=False)
    out = np.full(len(unit), -1, dtype=np.int64)
    seen = node >= 0
    _, first, renumbered = np.unique(component[node[seen]], return_index=True, return_inverse=True)
    out[seen] = np.argsort(np.argsort(first))[renumbered]  # numbered by first appearance (a stated order)
    return out


def _units(unit: np.ndarray, cls: np.ndarray, members: pd.DataFrame, n_units: int) -> pd.DataFrame:
    """Per unit (a joint class, or a group joined with its classes): its size (its whole classes', and each new row
    of a group once), its newest box and release (its first class's), the smallest k its classes were last shown
    at, the first of its boxes (the order merging follows), how many signatures its classes were last shown over,
    and whether it holds a row no release showed (a group's new row). Over (unit, class) pairs: one per class."""
    old = (unit >= 0) & (cls >= 0)
    pairs = pd.unique(unit[old] * (len(members) + 1) + cls[old])  # each (unit, class) once, in the rows' order
    pair_unit, pair_cls = pairs // (len(members) + 1), pairs % (len(members) + 1)
    frame = pd.DataFrame({"unit": pair_unit, "size": members["size"].to_numpy()[pair_cls]})
    for column in ("last_box", "last_release", "last_quasi_identifiers"):  # (object: pandas' string dtype iterates)
        frame[column] = pd.Series(members[column].to_numpy(dtype=object)[pair_cls], dtype=object)
    frame["last_k"] = members["last_k"].to_numpy(dtype=float)[pair_cls]
    boxes = frame["last_box"].to_numpy(dtype=object)
    frame["order"] = pd.Series(np.where(pd.isna(boxes), "", boxes), dtype=object)  # (object: no string dtype)
    if (np.bincount(pair_unit, minlength=n_units) == 1).all():  # one class per unit (a tuple operator): as it is
        info = frame.set_index("unit").sort_index().assign(signatures=1)
    else:
        info = frame.groupby("unit", sort=True).agg(
            size=("size", "sum"), last_box=("last_box", "first"), last_release=("last_release", "first"),
            last_k=("last_k", "min"), last_quasi_identifiers=("last_quasi_identifiers", "first"),
            order=("order", "min"), signatures=("last_quasi_identifiers", "nunique")).reindex(range(n_units))
    fresh = (unit >= 0) & (cls < 0)
    new_rows = np.bincount(unit[fresh], minlength=n_units)
    info["size"] = (info["size"].fillna(0).to_numpy() + new_rows).astype(np.int64)
    info["has_new"] = new_rows > 0
    info["signatures"] = info["signatures"].fillna(0).astype(np.int64)
    info["order"] = pd.Series(info["order"].to_numpy(dtype=object), dtype=object).fillna("").to_numpy(dtype=object)
    return info


def _merge(info: pd.DataFrame, k: int) -> np.ndarray:
    """Each unit's merged class: units of at least k rows alone; smaller ones merged with their neighbours in the
    order of their boxes (similar boxes merge into narrow ones) until each merged class holds k rows, a short tail
    joining the class before it. Ties in the order are broken by the unit's number (stated, not by a float)."""
    order = np.lexsort((np.arange(len(info)), info["order"].to_numpy(dtype=object).astype(str)))
    merged = np.full(len(info), -1, dtype=np.int64)
    sizes = info["size"].to_numpy(dtype=np.int64)
    group, filled, last_small = -1, k, []
    for u in order:
        if sizes[u] >= k:  # a class that holds k rows stays as it is
            group += 1
            merged[u] = group
            continue
        if filled >= k:  # the small units accumulate in a merged class of their own
            group += 1
            filled = 0
            last_small.append(group)
        merged[u] = group
        filled += int(sizes[u])
    if last_small and filled < k:  # the last merged class is short: it joins the merged class before it, if any
        short = last_small[-1]
        target = last_small[-2] if len(last_small) > 1 else next(
            (merged[u] for u in order[::-1] if merged[u] != short), None)
        if target is None:  # every row there is holds fewer than k: no class of k can be made
            raise Refused(f"the rows shown before hold {int(sizes.sum())} row(s) in their joint classes, fewer "
                          f"than k={k}", f"ask with k := {int(sizes.sum())} or less")
        merged[merged == short] = target
    _, merged = np.unique(merged, return_inverse=True)
    return merged.astype(np.int64)


def _how(again: np.ndarray, merged: np.ndarray, widened: int, new: int, sources: list[str]) -> str:
    """What explain() says of the plan (the caller adds what it does with the ``new`` rows)."""
    parts = []
    if again.all():
        parts.append(f"{'the rows' if new else 'every row was'} shown before: in the boxes of {', '.join(sources)} "
                     "again")
    else:
        counts = np.bincount(merged[~again])
        joined = int((counts > 1).sum())
        parts.append(f"rows shown before ({', '.join(sources)}) kept in their joint classes"
                     + (f", {joined} class(es) merged to hold k" if joined else ""))
    if widened:
        parts.append(f"{widened} row(s) widened to whole classes (shown, their answers not used)")
    return "; ".join(parts)
