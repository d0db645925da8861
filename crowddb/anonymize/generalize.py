"""Turn equivalence classes into a published table: QI cells become ranges, value sets, hierarchy labels or '*'."""

from __future__ import annotations

import numpy as np
import pandas as pd

from crowddb.anonymize.encoding import Encoding, QIEncoding
from crowddb.anonymize.hierarchy import lca_ranges
from crowddb.anonymize.metrics import compact, lex_ids, release_metrics

SUPPRESSED = "*"


class Release:
    """A k-anonymous release: the generalized table plus each row's class and box in the numeric QI coding.

    Built from pre-classes (rows with the same box): ``pre_class`` gives each row's, ``labels[q]`` each QI's distinct
    labels and each pre-class's index into them. The per-row table and boxes are made on first use, so a caller
    that needs only the labels (the SQL path hands them to DuckDB as Arrow dictionaries) never builds a per-row
    string column."""

    def __init__(self, table: pd.DataFrame | None, groups: np.ndarray, lo: np.ndarray | None,
                 hi: np.ndarray | None, metrics: dict, encoding: dict[str, QIEncoding],
                 quasi_identifiers: list[str] | None = None, *, source: pd.DataFrame | None = None,
                 pre_class: np.ndarray | None = None, boxes: tuple[np.ndarray, np.ndarray] | None = None,
                 labels: dict[str, tuple[np.ndarray, np.ndarray]] | None = None) -> None:
        self._table, self._lo, self._hi = table, lo, hi
        self._source, self.pre_class, self._boxes, self.labels = source, pre_class, boxes, labels or {}
        self.groups, self.metrics = groups, metrics
        self.encoding, self.quasi_identifiers = encoding, list(quasi_identifiers or [])

    @property
    def table(self) -> pd.DataFrame:
        if self._table is None:
            table = self._source.copy(deep=False)  # copy-on-write: the caller's frame is never modified
            for q, (lab, inv) in self.labels.items():
                table[q] = string_column(lab, inv[self.pre_class], table.index)
            self._table = table
        return self._table

    @property
    def lo(self) -> np.ndarray:
        """(n, d) lower box bound of each row in the numeric QI coding."""
        if self._lo is None:
            self._lo = self._boxes[0][self.pre_class]
        return self._lo

    @property
    def hi(self) -> np.ndarray:
        if self._hi is None:
            self._hi = self._boxes[1][self.pre_class]
        return self._hi

    def __repr__(self) -> str:
        m = self.metrics
        return (f"<Release {m.get('method', '?')} k={m.get('k')}: {m.get('n_rows', len(self.groups)):,} rows in "
                f"{m.get('n_groups', '?'):,} classes (smallest {m.get('min_group_size', '?')}), "
                f"NCP {m.get('ncp', float('nan')):.2f}%, quasi-identifiers {', '.join(self.quasi_identifiers)}>")

    def classes(self, limit: int | None = None) -> pd.DataFrame:
        """One row per equivalence class, largest first (ties by class number): its rows and each QI's label."""
        groups = np.asarray(self.groups)
        sizes = np.bincount(groups)
        order = np.lexsort((np.arange(len(sizes)), -sizes))  # largest first, then the class number
        order = order[sizes[order] > 0][:limit]
        first = np.full(len(sizes), -1)
        first[groups[::-1]] = np.arange(len(groups))[::-1]  # each class's first row
        out = pd.DataFrame({"class": order, "rows": sizes[order]})
        for q in self.quasi_identifiers:
            out[q] = self.table[q].to_numpy()[first[order]]
        return out

    def _repr_html_(self) -> str:
        """A notebook's view: the summary line and the 20 largest classes (what a worker sees of each)."""
        import html

        classes = self.classes(limit=20)
        shown = f" (the {len(classes)} largest)" if len(classes) < self.metrics.get("n_groups", 0) else ""
        return (f"<p>{html.escape(repr(self))}</p><p>classes{shown}:</p>"
                + classes.to_html(index=False, escape=True))

    def decode(self, row: int) -> dict[str, list]:
        """Values each QI of row ``row`` may take, decoded from its box."""
        return {q: self.encoding[q].decode(self.lo[row, j], self.hi[row, j])
                for j, q in enumerate(self.quasi_identifiers)}


def fmt_number(v: float, integer: bool) -> str:
    """Compact text for a number: integers without decimals, floats without trailing zeros."""
    if integer or float(v).is_integer():
        return str(int(np.rint(v)))
    return np.format_float_positional(float(v), trim="-")


def range_label(enc: QIEncoding, lo: float, hi: float) -> str:
    """'[lo-hi]' for a numeric range, the value itself when lo == hi."""
    a, b = fmt_number(lo, enc.integer), fmt_number(hi, enc.integer)
    return a if lo == hi else f"[{a}-{b}]"


def code_labels(enc: QIEncoding, lo: np.ndarray, hi: np.ndarray):
    """Distinct labels, label index per interval, and (hierarchy-widened) code ranges for intervals lo..hi."""
    pair, inv = np.unique(lo * np.int64(enc.m + 1) + hi, return_inverse=True)
    plo, phi = pair // (enc.m + 1), pair % (enc.m + 1)
    if enc.kind == "numeric":
        labs = np.array([range_label(enc, enc.scale[a], enc.scale[b]) for a, b in zip(plo, phi)], dtype=object)
    elif enc.hierarchy is not None:
        labs, plo, phi = lca_ranges(enc.hierarchy, enc.categories, plo, phi)
    else:
        cats = [str(c) for c in enc.categories]
        labs = np.array([cats[a] if a == b else (SUPPRESSED if a == 0 and b == enc.m - 1 else
                         "{" + ",".join(cats[a:b + 1]) + "}") for a, b in zip(plo, phi)], dtype=object)
    inv = inv.reshape(-1)
    return labs, inv, plo[inv], phi[inv]


def string_column(labels: np.ndarray, idx: np.ndarray, index: pd.Index) -> pd.Series:
    """Series of labels[idx] with pandas' string dtype, decoded from a dictionary (Arrow when available: fast)."""
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover - pyarrow ships with the engine
        return pd.Series(labels[idx], index=index, dtype=object).astype("str")
    arr = pa.DictionaryArray.from_arrays(pa.array(idx.astype(np.int32, copy=False)),
                                         pa.array([str(x) for x in labels], pa.large_string()))
    return pd.Series(pd.array(arr.cast(pa.large_string()), dtype="str"), index=index)


def class_boxes(codes: np.ndarray, groups: np.ndarray):
    """Tight per-class code bounds: (G, d) lo and hi, with groups compacted to 0..G-1 (each row into its class per
    column, no sort of the rows: a third of a stable argsort, gather and reduceat at 1M rows in 25k classes)."""
    gid = compact(groups)
    size = int(gid.max(initial=-1)) + 1
    lo = np.full((size, codes.shape[1]), np.iinfo(np.int64).max)
    hi = np.full((size, codes.shape[1]), np.iinfo(np.int64).min)
    for j in range(codes.shape[1]):
        np.minimum.at(lo[:, j], gid, codes[:, j])
        np.maximum.at(hi[:, j], gid, codes[:, j])
    return gid, lo, hi


def release_from_groups(frame: pd.DataFrame, enc: Encoding, groups: np.ndarray, k: int, method: str,
                        extra: dict | None = None, boxes: tuple | None = None) -> Release:
    """Generalize each class of a local-recoding partition (Mondrian, FKA) to its tight box."""
    gid, glo, ghi = (groups, *boxes) if boxes is not None else class_boxes(enc.codes, groups)
    labels, blo, bhi = [], np.empty(glo.shape), np.empty(ghi.shape)
    for j, q in enumerate(enc.qis):
        c = enc.columns[q]
        lab, inv, a, b = code_labels(c, glo[:, j].astype(np.int64), ghi[:, j].astype(np.int64))
        labels.append((lab, inv))
        blo[:, j], bhi[:, j] = c.scale[a], c.scale[b]
    return assemble(frame, enc, gid, blo, bhi, labels, k, method, extra)


def assemble(frame: pd.DataFrame, enc: Encoding, gid: np.ndarray, blo: np.ndarray, bhi: np.ndarray,
             labels: list[tuple[np.ndarray, np.ndarray]], k: int, method: str, extra: dict | None = None,
             suppressed: np.ndarray | None = None) -> Release:
    """Build the Release from pre-classes ``gid`` (0..G-1) with boxes and (distinct labels, label per pre-class)."""
    # classes numbered in their boxes' order; what a worker tells apart is the labels, so they split classes too (a
    # full-domain level whose top range spans the scale has the box of a suppressed row, not its '*'); pre-classes
    # without rows (e.g. all suppressed) vanish
    shown = (np.stack([np.unique(np.asarray(labs).astype(str), return_inverse=True)[1].reshape(-1)[cls]
                       for labs, cls in labels], axis=1).astype(np.float64) if labels else blo[:, :0])
    groups = compact(lex_ids(np.hstack([blo, bhi, shown]))[gid])
    spans = np.array([enc.columns[q].span for q in enc.qis])
    weights = np.bincount(gid, minlength=len(blo)).astype(float)
    metrics = release_metrics(groups, blo, bhi, spans, k, suppressed, weights)
    metrics["method"] = method
    metrics.update(extra or {})
    return Release(None, groups, None, None, metrics, dict(enc.columns), list(enc.qis), source=frame, pre_class=gid,
                   boxes=(blo, bhi), labels={q: labels[j] for j, q in enumerate(enc.qis)})
