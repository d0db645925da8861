"""A Spark DataFrame's quasi-identifiers checked and coded exactly as crowddb/anonymize/encoding.py codes a pandas
frame: the driver learns each QI's distinct values (a Spark aggregation: few values, never the rows), and the
executors turn values into codes batch by batch with Arrow and numpy.

Kinds: Spark numeric types are 'numeric' (codes in sorted value order, the values are the scale); every other type
is 'categorical', coded in order of first appearance, as locally ("intuitive ordering"). A Spark DataFrame has no
order of its own: first appearance is read from ``order_by`` when given, else from the DataFrame's partition order
(``monotonically_increasing_id``: the file's order for a DataFrame read from one file or made from a local table).
``kinds={'x': 'ordinal'}`` codes a column in sorted order of its values, as locally for a non-categorical column.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
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


def qi_list(quasi_identifiers) -> list[str]:
    """The quasi-identifiers as a list (a single name is accepted)."""
    return [quasi_identifiers] if isinstance(quasi_identifiers, str) else list(quasi_identifiers)


def validate(df: DataFrame, qis: list[str], k, kinds: dict | None) -> tuple[int, dict[str, str]]:
    """Raise the local anonymize's errors (encoding.validate's checks, the same functions) for a Spark DataFrame;
    return its row count and each QI's kind. One Spark aggregation counts the rows and every QI's NULLs (and NaNs, which pandas calls NULL)."""
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
    kind_of = {q: kinds.get(q) or ("numeric" if isinstance(types[q], T.NumericType) else "categorical") for q in qis}
    aggs = [F.count(F.lit(1)).alias("n")]
    for j, q in enumerate(qis):
        null = F.col(q).isNull()
        if isinstance(types[q], (T.FloatType, T.DoubleType)):
            null = null | F.isnan(F.col(q))
        aggs.append(F.sum(null.cast("long")).alias(f"null{j}"))
        if kind_of[q] == "numeric":
            x = F.col(q).try_cast("double")  # NULL where Spark's cast fails (ANSI mode would raise)
            aggs.append(F.sum((x.isNull() & F.col(q).isNotNull()).cast("long")).alias(f"bad{j}"))
            aggs.append(F.sum(x.isin(float("inf"), float("-inf")).cast("long")).alias(f"inf{j}"))
    row = df.agg(*aggs).collect()[0]
    n = int(row["n"])
    check_size(k, n)
    for j, q in enumerate(qis):
        if row[f"null{j}"]:
            raise null_error(q, row[f"null{j}"])
        if kind_of[q] == "numeric" and row[f"bad{j}"]:
            x = F.col(q).try_cast("double")
            example = df.where(x.isNull() & F.col(q).isNotNull()).select(q).first()[0]
            raise non_numeric_error(q, example, row[f"bad{j}"])
        if kind_of[q] == "numeric" and row[f"inf{j}"]:
            raise non_finite_error(q)
    return n, kind_of


def prepared(df: DataFrame, qis: list[str], kind_of: dict[str, str]) -> list:
    """The column expressions the executors code: numeric QIs cast to double by Spark (its cast decides what a
    number is, as the checks in ``validate`` did), the others as they are."""
    return [F.col(q).cast("double").alias(q) if kind_of[q] == "numeric" else F.col(q) for q in qis]


def learn(df: DataFrame, qis: list[str], kind_of: dict[str, str], order_by: str | None) -> list[QIEncoding]:
    """One QIEncoding per QI, equal to what encoding.encode_column makes of the same rows: one small Spark
    aggregation per QI (its distinct values, with their first appearance for categoricals)."""
    if order_by is not None and order_by not in df.columns:
        raise UnknownColumnError(f"unknown order_by column {order_by!r}; columns are {df.columns}")
    order = F.col(order_by) if order_by is not None else F.monotonically_increasing_id()

    def one(q: str, col) -> QIEncoding:
        kind = kind_of[q]
        if kind == "numeric":
            uniq = np.array(sorted(r[0] for r in df.select(col).distinct().collect()), dtype=float)
            integer = bool(np.all(uniq == np.round(uniq)))
            return QIEncoding(q, kind, list(uniq), uniq.astype(float), integer)
        if kind == "ordinal":
            cats = sorted(r[0] for r in df.select(col).distinct().collect())
        else:  # categorical: order of first appearance
            firsts = df.select(col, order.alias(ORDER)).groupBy(q).agg(F.min(ORDER).alias(ORDER)).collect()
            cats = [r[0] for r in sorted(firsts, key=lambda r: r[1])]
        return QIEncoding(q, kind, cats, np.arange(len(cats), dtype=float), True)

    # one small job per QI, submitted together: each is mostly Spark's fixed cost per job, which they then share
    with ThreadPoolExecutor(max_workers=min(len(qis), 4)) as pool:
        return list(pool.map(one, qis, prepared(df, qis, kind_of)))


def codes_of(table: pa.Table | pa.RecordBatch, encs: list[QIEncoding]) -> np.ndarray:
    """(n, d) int32 codes of one Arrow batch whose QI columns were selected by ``prepared`` (inside executors)."""
    codes = np.empty((table.num_rows, len(encs)), np.int32)
    for j, e in enumerate(encs):
        col = table.column(e.name)
        if e.kind == "numeric":
            codes[:, j] = np.searchsorted(e.scale, col.to_numpy(zero_copy_only=False))
        else:
            codes[:, j] = pc.index_in(col, value_set=pa.array(e.categories, type=col.type)).to_numpy(
                zero_copy_only=False)
    return codes
