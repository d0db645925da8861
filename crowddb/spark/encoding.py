"""A Spark DataFrame's quasi-identifiers checked and coded exactly as crowddb/anonymize/encoding.py codes a pandas
frame. One pass over the rows (``scan``: Spark groups them by their QI values) leaves the distinct QI combinations
with their row counts in executors; one small aggregation over those (grouping sets, one per QI) reads everything
the driver needs: the row count, every QI's NULLs, failed numeric casts and infinities (the local checks' counts),
its distinct values (with their first appearance for categoricals) and how many rows hold each value (the root's
histogram). Values are few and never rows. Executors code the combinations with Arrow and numpy (``codes_of``) and
pack a combination's codes into as few 64-bit words as hold them (``Packing``).

Kinds: Spark numeric types are 'numeric' (codes in sorted value order, the values are the scale); every other type
is 'categorical', coded in order of first appearance, as locally ("intuitive ordering"). A Spark DataFrame has no
order of its own: first appearance is read from ``order_by`` when given, else from the DataFrame's partition order
(``monotonically_increasing_id``: the file's order for a DataFrame read from one file or made from a local table).
``kinds={'x': 'ordinal'}`` codes a column in sorted order of its values, as locally for a non-categorical column.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from crowddb.anonymize.encoding import (
    KINDS,
    QIEncoding,
    check_names,
    check_size,
    non_finite_error,
    non_numeric_error,
    null_error,
)
from crowddb.errors import ArgumentError, UnknownColumnError

ORDER = "__crowddb_order"
CNT = "__crowddb_rows"
WORD_BITS = 63  # codes packed per signed 64-bit word (never the sign bit)


def qi_list(quasi_identifiers) -> list[str]:
    """The quasi-identifiers as a list (a single name is accepted)."""
    return [quasi_identifiers] if isinstance(quasi_identifiers, str) else list(quasi_identifiers)


def kinds_of(df: DataFrame, qis: list[str], k, kinds: dict | None) -> dict[str, str]:
    """Each QI's kind, after the local anonymize's checks of names, k and kinds (no Spark job)."""
    if not isinstance(df, DataFrame):
        raise ArgumentError(f"crowddb.spark.anonymize expects a Spark DataFrame, got {type(df).__name__}")
    types = {f.name: f.dataType for f in df.schema.fields}
    check_names(qis, list(types), k)
    kinds = dict(kinds or {})
    unknown = [c for c in kinds if c not in qis]
    if unknown:
        raise UnknownColumnError(f"kinds name columns that are not quasi-identifiers: {unknown}")
    for q, kind in kinds.items():
        if kind not in KINDS:
            raise ArgumentError(f"kind of {q!r} must be one of {KINDS}, got {kind!r}")
    return {q: kinds.get(q) or ("numeric" if isinstance(types[q], T.NumericType) else "categorical") for q in qis}


def prepared(df: DataFrame, qis: list[str], kind_of: dict[str, str]) -> list[Column]:
    """The value each QI is coded from: numeric QIs cast to double by Spark (its cast decides what a number is; a
    failed cast is NULL, which ``scan`` reports), the others as they are."""
    return [F.col(q).try_cast("double") if kind_of[q] == "numeric" else F.col(q) for q in qis]


@dataclass
class Sensitive:
    """What ``scan`` learns of a sensitive column (l-diversity): its distinct values (a NULL is one), and per QI j
    and value s the lowest and highest code of QI j among the rows holding s (-1 where no row does): the root
    partition's sides for any cut."""

    values: list
    lo: np.ndarray  # (d, len(values))
    hi: np.ndarray


def scan(df: DataFrame, qis: list[str], kind_of: dict[str, str], k: int, order_by: str | None,
         sensitive: str | None = None, hierarchies: dict | None = None) -> tuple[
             int, int, list[QIEncoding], list[np.ndarray], DataFrame, Sensitive | None]:
    """Validate and learn: the row count, the number of distinct QI combinations, one QIEncoding per QI (equal to
    what encoding.encode_column makes of the same rows), each QI's rows per code, ``combos``: the distinct QI
    combinations with their rows (CNT), persisted (the caller unpersists it), and what ``sensitive`` holds (None
    without it). Raises the local errors.

    A ``sensitive`` column (l-diversity) is grouped with the QIs: ``combos`` then holds the distinct (QI combination,
    sensitive value) pairs and the count of combinations is theirs; the encodings and counts are the same, and the
    same small job reads the sensitive values, alone and with each QI's values (``Sensitive``).

    ``hierarchies`` (QI -> loaded hierarchy.Hierarchy) code a non-numeric QI in its hierarchy's depth-first order,
    as encoding.encode_column does, so that every subtree is a contiguous code range."""
    if order_by is not None and order_by not in df.columns:
        raise UnknownColumnError(f"unknown order_by column {order_by!r}; columns are {df.columns}")
    types = {f.name: f.dataType for f in df.schema.fields}
    d = len(qis)
    order = F.col(order_by) if order_by is not None else F.monotonically_increasing_id()
    # the one full scan before the leaves: Mondrian needs only how many rows share each QI combination
    extra = [sensitive] if sensitive is not None else []
    combos = (df.select(*qis, *extra, order.alias(ORDER)).groupBy(*qis, *extra)
              .agg(F.count(F.lit(1)).alias(CNT), F.min(ORDER).alias(ORDER)).persist(StorageLevel.MEMORY_AND_DISK))
    vals = [f"__v{j}" for j in range(d)]
    raws = [f"__r{j}" for j in range(d)]
    base = combos.select(*[c.alias(v) for c, v in zip(prepared(combos, qis, kind_of), vals)], CNT, ORDER, *extra,
                         *[F.when(F.col(q).isNotNull(), F.col(CNT)).alias(r) for q, r in zip(qis, raws)])
    # grouping sets over the combinations: every QI's distinct values and rows in one small job
    sets = [[v] for v in vals] + [[]]
    if sensitive is not None:  # the sensitive values alone and with each QI's values
        sets += [[sensitive]] + [[v, sensitive] for v in vals]
    rows = base.groupingSets(sets, *vals, *extra).agg(
        F.grouping_id().alias("__g"), F.sum(CNT).alias(CNT), F.min(ORDER).alias(ORDER),
        F.count(F.lit(1)).alias("__combos"), *[F.sum(r).alias(r) for r in raws]).collect()
    by_set: list[list] = [[] for _ in range(d + 1)]
    with_s: list[list] = [[] for _ in range(d + 1)]  # the sets with the sensitive column, by QI (d: alone)
    for r in rows:
        grouped = ~r["__g"] & ((1 << (d + len(extra))) - 1)  # grouping_id: a 0 bit = a grouped column, the last
        if extra:  # column is the lowest bit
            (with_s if grouped & 1 else by_set)[d - (grouped >> 1).bit_length()].append(r)
        else:
            by_set[d - grouped.bit_length()].append(r)
    n, n_combos = (by_set[d][0][CNT], by_set[d][0]["__combos"]) if by_set[d] else (0, 0)  # set (): all rows
    try:
        check_size(k, n)
        learned = [_learn(q, kind_of[q], types[q], by_set[j], vals[j], raws[j], combos, (hierarchies or {}).get(q))
                   for j, q in enumerate(qis)]
    except Exception:
        combos.unpersist()
        raise
    encs = [e for e, _ in learned]
    sens = None if sensitive is None else _sensitive(encs, with_s, vals, sensitive)
    return n, n_combos, encs, [c for _, c in learned], combos, sens


def _sensitive(encs: list[QIEncoding], with_s: list[list], vals: list[str], sensitive: str) -> Sensitive:
    """``Sensitive`` from the grouping sets' rows (values and counts: at most QIs x QI values x sensitive values)."""
    d = len(encs)
    values = [r[sensitive] for r in with_s[d]]
    index = {v: i for i, v in enumerate(values)}
    lo = np.full((d, len(values)), -1, np.int64)
    hi = np.full((d, len(values)), -1, np.int64)
    for j, e in enumerate(encs):
        if not with_s[j]:
            continue
        code_of = ({float(x): i for i, x in enumerate(e.scale)} if e.kind == "numeric"
                   else {c: i for i, c in enumerate(e.categories)})
        s = np.array([index[r[sensitive]] for r in with_s[j]], np.int64)
        c = np.array([code_of[float(r[vals[j]]) if e.kind == "numeric" else r[vals[j]]] for r in with_s[j]],
                     np.int64)
        order = np.lexsort((c, s))
        s, c = s[order], c[order]
        first = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
        last = np.r_[first[1:], len(s)] - 1
        lo[j, s[first]], hi[j, s[last]] = c[first], c[last]
    return Sensitive(values, lo, hi)


def _learn(q: str, kind: str, dtype: T.DataType, rows: list, v: str, raw: str, combos: DataFrame,
           hierarchy=None) -> tuple[QIEncoding, np.ndarray]:
    """One QI's encoding and rows per code from its grouping set's rows (value ``v``, rows CNT, first appearance
    ORDER, rows whose value was not NULL before the cast ``raw``), after the local checks; a non-numeric QI with a
    ``hierarchy`` is coded in its depth-first order (hierarchy.ordered_leaves, as locally)."""
    present, nulls, bad, inf = [], 0, 0, False
    nan_is_null = kind == "numeric" or isinstance(dtype, (T.FloatType, T.DoubleType))
    for r in rows:
        x = r[v]
        if x is None:
            failed = (r[raw] or 0) if kind == "numeric" else 0  # not NULL, yet Spark's cast to double failed
            bad, nulls = bad + failed, nulls + r[CNT] - failed
        elif nan_is_null and isinstance(x, float) and math.isnan(x):
            nulls += r[CNT]  # pandas calls NaN NULL
        else:
            inf = inf or (kind == "numeric" and math.isinf(x))
            present.append(r)
    if nulls:
        raise null_error(q, nulls)
    if bad:
        example = combos.where(F.col(q).isNotNull() & F.col(q).try_cast("double").isNull()).select(q).first()[0]
        raise non_numeric_error(q, example, bad)
    if inf:
        raise non_finite_error(q)
    present.sort(key=(lambda r: r[ORDER]) if kind == "categorical" else (lambda r: r[v]))  # first appearance
    if hierarchy is not None and kind != "numeric":  # raises the local error for a value missing from it
        at = {r[v]: i for i, r in enumerate(present)}
        present = [present[at[x]] for x in hierarchy.ordered_leaves(pd.Series([r[v] for r in present], dtype=object))]
    cats = [r[v] for r in present]
    counts = np.array([r[CNT] for r in present], np.int64)
    if kind == "numeric":  # a numeric QI's hierarchy only serves full-domain methods (kept, as locally)
        uniq = np.array(cats, dtype=float)
        return QIEncoding(q, kind, list(uniq), uniq, bool(np.all(uniq == np.round(uniq))), hierarchy), counts
    return QIEncoding(q, kind, cats, np.arange(len(cats), dtype=float), True, hierarchy), counts


@dataclass
class Packing:
    """Where each QI's code lives: word ``word[j]``, bits ``shift[j]`` up (``bits[j]`` wide)."""

    word: list[int]
    shift: list[int]
    bits: list[int]

    @classmethod
    def of(cls, encs: list[QIEncoding]) -> Packing:
        word, shift, bits, w, at = [], [], [], 0, 0
        for e in encs:
            b = max(int(e.m - 1).bit_length(), 1)
            if at + b > WORD_BITS:
                w, at = w + 1, 0
            word.append(w), shift.append(at), bits.append(b)
            at += b
        return cls(word, shift, bits)

    @property
    def names(self) -> list[str]:
        return [f"__w{w}" for w in range(max(self.word) + 1)]

    def pack(self, codes: np.ndarray) -> list[np.ndarray]:
        """The int64 words of (n, d) codes."""
        words = [np.zeros(len(codes), np.int64) for _ in self.names]
        for j, (w, s) in enumerate(zip(self.word, self.shift)):
            words[w] |= codes[:, j].astype(np.int64) << s
        return words

    def unpack(self, words: list[np.ndarray]) -> np.ndarray:
        """(n, d) int64 codes from the words' int64 arrays (inside executors)."""
        out = np.empty((len(words[0]), len(self.word)), np.int64)
        for j, (w, s, b) in enumerate(zip(self.word, self.shift, self.bits)):
            np.bitwise_and(words[w] >> s, (1 << b) - 1, out=out[:, j])
        return out


def codes_of(table: pa.Table | pa.RecordBatch, encs: list[QIEncoding], columns: list[str]) -> np.ndarray:
    """(n, d) int64 codes of one Arrow batch (inside executors) from its ``columns``, the QIs' values as
    ``prepared`` made them: numbers found in the scale, the others looked up among the categories."""
    codes = np.empty((table.num_rows, len(encs)), np.int64)
    for j, (e, name) in enumerate(zip(encs, columns)):
        col = table.column(name)
        if e.kind == "numeric":
            codes[:, j] = np.searchsorted(e.scale, col.to_numpy(zero_copy_only=False))
        else:
            codes[:, j] = pc.index_in(col, value_set=pa.array(e.categories, type=col.type)).to_numpy(
                zero_copy_only=False)
    return codes
