"""Validate a frame's quasi-identifiers and code each one to integers, so every algorithm works on int arrays."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from crowddb.errors import ArgumentError, EmptyInputError, UnknownColumnError

KINDS = ("numeric", "ordinal", "categorical")


@dataclass
class QIEncoding:
    """How one quasi-identifier maps to codes 0..m-1 and to the numeric scale used for ranges and NCP."""

    name: str
    kind: str
    categories: list = field(default_factory=list)  # value of each code, in code order
    scale: np.ndarray = field(default_factory=lambda: np.zeros(0))  # numeric coordinate of each code
    integer: bool = True  # numeric values are all integers (labels print without decimals)
    hierarchy: object | None = None  # hierarchy.Hierarchy for categoricals, when given

    @property
    def m(self) -> int:
        """Number of distinct codes."""
        return len(self.categories)

    @property
    def span(self) -> float:
        """Range of the scale (0 for a constant column)."""
        return float(self.scale[-1] - self.scale[0]) if self.m else 0.0

    def decode(self, lo: float, hi: float) -> list:
        """Values of this QI covered by the coded interval [lo, hi]."""
        keep = (self.scale >= lo) & (self.scale <= hi)
        return [c for c, k in zip(self.categories, keep) if k]


@dataclass
class Encoding:
    """Codes (n, d) of the quasi-identifiers plus one QIEncoding per column."""

    qis: list[str]
    columns: dict[str, QIEncoding]
    codes: np.ndarray

    def scale_of(self) -> list[np.ndarray]:
        """Per-QI numeric scale arrays, in QI order."""
        return [self.columns[q].scale for q in self.qis]

    def values(self) -> np.ndarray:
        """(n, d) float matrix of each row's QI values in the numeric coding."""
        out = np.empty(self.codes.shape, dtype=float)
        for j, q in enumerate(self.qis):
            out[:, j] = self.columns[q].scale[self.codes[:, j]]
        return out


def sorted_texts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values.astype(str), return_inverse=True)``: the distinct texts in code-point order and each value's
    index into them, by one hash factorization and a sort of the distinct texts alone (NumPy sorts every value as a
    fixed-width string: seconds per million rows, where a release's texts repeat on every row of a class)."""
    values = np.asarray(values, dtype=object)
    nulls = pd.isna(values)  # (factorize takes None and NaN for one missing value; their texts differ)
    codes, distinct = pd.factorize(np.where(nulls, None, values))
    texts = np.array([str(x) for x in distinct] + [str(x) for x in values[nulls]], dtype=object)  # (few)
    codes = codes.astype(np.int64)
    codes[nulls] = len(distinct) + np.arange(int(nulls.sum()))
    by_text, distinct_texts = pd.factorize(texts)  # values whose texts are equal (3 and '3') are one text
    order = np.argsort(np.asarray(distinct_texts, dtype=object).astype(str), kind="stable")  # (distinct: no ties)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return np.asarray(distinct_texts, dtype=object)[order].astype(str), rank[by_text[codes]]


def infer_kind(s: pd.Series) -> str:
    """Numeric dtypes are 'numeric', ordered pandas categoricals 'ordinal', everything else 'categorical'."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        return "ordinal" if s.dtype.ordered else "categorical"
    if pd.api.types.is_bool_dtype(s.dtype):
        return "categorical"
    if pd.api.types.is_numeric_dtype(s.dtype):
        return "numeric"
    return "categorical"


def validate(frame: pd.DataFrame, qis: list[str], k: int) -> None:
    """Raise a crowddb error for unusable k, unknown/duplicate QIs, empty input or NULLs in QIs."""
    if not isinstance(frame, pd.DataFrame):
        raise ArgumentError(f"anonymize expects a pandas DataFrame, got {type(frame).__name__}")
    if isinstance(qis, str):
        qis = [qis]
    check_names(qis, list(frame.columns), k)
    check_size(k, len(frame))
    for q in qis:
        nulls = int(frame[q].isna().sum())
        if nulls:
            raise null_error(q, nulls)


# the checks of a request, apart from how its rows are held (a pandas frame here, a Spark DataFrame in crowddb.spark)
def check_names(qis: list[str], columns: list[str], k) -> None:
    """Refuse no quasi-identifier, one listed twice, one not among ``columns``, or a k that is not an integer."""
    if not qis:
        raise ArgumentError("anonymize needs at least one quasi-identifier")
    if len(set(qis)) != len(qis):
        raise ArgumentError(f"quasi-identifiers listed twice: {qis}")
    missing = [q for q in qis if q not in columns]
    if missing:
        raise UnknownColumnError(f"unknown quasi-identifier(s) {missing}; columns are {columns}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ArgumentError(f"k must be an integer, got {k!r}")


def check_l(sensitive: str | None, l, qis: list[str], columns: list[str]) -> int | None:
    """Refuse an l-diversity request that cannot be read: l without a sensitive column, an unknown one, one that is
    also a quasi-identifier, an l that is not a positive integer. Returns l (None without l-diversity; ``sensitive``
    alone is ignored)."""
    if l is None:
        return None
    if sensitive is None:
        raise ArgumentError("l-diversity needs a sensitive column: pass sensitive=<column>")
    if sensitive not in columns:
        raise UnknownColumnError(f"unknown sensitive column {sensitive!r}")
    if sensitive in qis:
        raise ArgumentError(f"sensitive column {sensitive!r} is also a quasi-identifier")
    if isinstance(l, bool) or not isinstance(l, (int, np.integer)) or l < 1:
        raise ArgumentError(f"l must be a positive integer, got {l!r}")
    return int(l)


def check_size(k: int, n: int) -> None:
    """Refuse an empty input and a k below 2 or above the ``n`` rows."""
    if n == 0:
        raise EmptyInputError("anonymize got a table with no rows")
    if k < 2:
        raise ArgumentError(f"k must be at least 2, got k={k}")
    if k > n:
        raise ArgumentError(f"k={k} is larger than the number of rows ({n}): no k-anonymous release exists")


def null_error(name: str, nulls: int) -> ArgumentError:
    # Documented behaviour: NULLs in a quasi-identifier are rejected, never silently published or dropped.
    return ArgumentError(f"quasi-identifier {name!r} has {nulls} NULL value(s); fill or filter them first")


def non_numeric_error(name: str, example, count: int) -> ArgumentError:
    return ArgumentError(f"quasi-identifier {name!r} is declared numeric but holds non-numeric value {example!r} "
                         f"({count} such rows)")


def non_finite_error(name: str) -> ArgumentError:
    return ArgumentError(f"quasi-identifier {name!r} holds non-finite values (inf)")


def _numeric(s: pd.Series, name: str) -> np.ndarray:
    """Column as float64, raising if any value is not a number."""
    num = pd.to_numeric(s, errors="coerce")
    bad = num.isna() & s.notna()
    if bad.any():
        raise non_numeric_error(name, s[bad].iloc[0], int(bad.sum()))
    arr = num.to_numpy(dtype=float)
    if not np.isfinite(arr).all():
        raise non_finite_error(name)
    return arr


def encode_column(s: pd.Series, name: str, kind: str, hierarchy=None) -> tuple[np.ndarray, QIEncoding]:
    """Code one column: numeric by sorted value, ordinal by category/sort order, categorical by first appearance."""
    if kind not in KINDS:
        raise ArgumentError(f"kind of {name!r} must be one of {KINDS}, got {kind!r}")
    if kind == "numeric":
        arr = _numeric(s, name)
        first, uniq = pd.factorize(arr)  # hash, then rank the few distinct values (no O(n log n) sort)
        order = np.argsort(uniq, kind="stable")
        rank = np.empty(len(uniq), dtype=np.int64)
        rank[order] = np.arange(len(uniq))
        uniq, codes = np.asarray(uniq, dtype=float)[order], rank[first]
        integer = bool(np.all(uniq == np.round(uniq)))
        return codes.astype(np.int64), QIEncoding(name, kind, list(uniq), uniq.astype(float), integer)
    if hierarchy is not None:
        cats = hierarchy.ordered_leaves(s)
    elif kind == "ordinal":
        if isinstance(s.dtype, pd.CategoricalDtype):
            present = set(s.dropna().unique())
            cats = [c for c in s.dtype.categories if c in present]
        else:
            cats = sorted(pd.unique(s))
    else:
        codes, uniq = pd.factorize(s, use_na_sentinel=False)  # intuitive ordering: order of first appearance
        cats = list(uniq)
        return codes.astype(np.int64), QIEncoding(name, kind, cats, np.arange(len(cats), dtype=float), True)
    index = pd.Index(cats)
    codes = index.get_indexer(s)
    if (codes < 0).any():
        raise ArgumentError(f"values of {name!r} missing from its hierarchy: {list(pd.unique(s[codes < 0]))[:5]}")
    enc = QIEncoding(name, kind, cats, np.arange(len(cats), dtype=float), True, hierarchy)
    return codes.astype(np.int64), enc


def encode(frame: pd.DataFrame, qis: list[str], kinds: dict[str, str] | None = None,
           hierarchies: dict | None = None) -> Encoding:
    """Code every QI of ``frame``; kinds default to infer_kind, hierarchies apply to non-numeric QIs."""
    from crowddb.anonymize.hierarchy import Hierarchy

    kinds = dict(kinds or {})
    unknown = [c for c in list(kinds) + list(hierarchies or {}) if c not in qis]
    if unknown:
        raise UnknownColumnError(f"kinds/hierarchies name columns that are not quasi-identifiers: {unknown}")
    cols: dict[str, QIEncoding] = {}
    codes = np.empty((len(frame), len(qis)), dtype=np.int64)
    for j, q in enumerate(qis):
        kind = kinds.get(q) or infer_kind(frame[q])
        h = (hierarchies or {}).get(q)
        h = Hierarchy.load(h, q) if h is not None else None
        codes[:, j], cols[q] = encode_column(frame[q], q, kind, h if kind != "numeric" else None)
        if kind == "numeric" and h is not None:
            cols[q].hierarchy = h  # numeric hierarchies only serve full-domain methods
    return Encoding(list(qis), cols, codes)
