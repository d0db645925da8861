"""Mondrian (LeFevre, DeWitt, Ramakrishnan, ICDE 2006) on Spark, with the classes of the local Mondrian.

Why the split can be made: strict Mondrian's cut of a partition depends on the partition's rows only (its widest
allowable dimension, normalized by the global ranges, and that dimension's median), so the recursion below any
partition is the same whoever computes it. The top of the tree is therefore computed with Spark aggregations, level
by level, and every partition of at most ``max_partition_rows`` rows is handed whole to the local vectorized Mondrian
(crowddb/anonymize/mondrian.py) inside an executor, which continues the same recursion from there.

One level of the upper cuts (Mondrian's Anonymize(partition), all open partitions at once):
1. each executor assigns its rows to the current partitions (the cuts so far, applied with numpy) and emits the
   partial histogram (partition, dimension, code, count) of its batch;
2. Spark sums the histograms and, per partition and dimension, reads the exact bounds and the frequency-set median
   (Mondrian's splitVal: the first code whose cumulative count reaches half the partition, floor(n / 2)) with the
   count of rows up to it, from a running sum in a window;
3. the driver (partitions x dimensions numbers, never rows) picks for each partition the widest dimension (normalized
   range, lowest dimension on exact ties) whose strict cut is allowable (>= k rows on each side), as ChooseDimension
   with the classic fallback to the next widest dimension; a partition without one is an equivalence class.

Class ids are ``leaf << 32 | class within the leaf``: unique, not dense. Unsupported here (each raises ArgumentError
rather than differ from the local result): relaxed cuts, l-diversity, hierarchies and shared columns.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from crowddb.anonymize.encoding import QIEncoding
from crowddb.anonymize.generalize import code_labels
from crowddb.anonymize.mondrian import mondrian_groups
from crowddb.errors import ArgumentError
from crowddb.spark.encoding import codes_of, learn, prepared, qi_list, validate

DEFAULT_PARTITION_ROWS = 500_000  # rows an executor finishes locally: ~100 MB of codes and labels at 8 QIs
CLASS = "class"
COLLECT_BINS = 2_000_000  # summed histograms up to this many bins are read by the driver (_medians)


class Tree:
    """The upper cuts so far, as arrays indexed by partition id: the cut dimension (-1 for an uncut partition),
    the split code (codes <= split go left) and the left child's id (the right child's is one more)."""

    def __init__(self) -> None:
        self.dim = np.full(1, -1, np.int64)
        self.split = np.zeros(1, np.int64)
        self.child = np.zeros(1, np.int64)
        self.depth = 0

    def cut(self, pids: np.ndarray, dims: np.ndarray, splits: np.ndarray) -> np.ndarray:
        """Cut partitions ``pids``; returns the left children's ids (right = left + 1)."""
        first = len(self.dim)
        left = first + 2 * np.arange(len(pids))
        grow = 2 * len(pids)
        self.dim = np.concatenate((self.dim, np.full(grow, -1, np.int64)))
        self.split = np.concatenate((self.split, np.zeros(grow, np.int64)))
        self.child = np.concatenate((self.child, np.zeros(grow, np.int64)))
        self.dim[pids], self.split[pids], self.child[pids] = dims, splits, left
        self.depth += 1
        return left

    def assign(self, codes: np.ndarray) -> np.ndarray:
        """Partition id of each row: the cuts applied one level at a time, all rows at once."""
        pid = np.zeros(len(codes), np.int64)
        for _ in range(self.depth):
            at = np.flatnonzero(self.dim.take(pid) >= 0)
            if not len(at):
                break
            p = pid.take(at)
            right = codes[at, self.dim.take(p)] > self.split.take(p)
            pid[at] = self.child.take(p) + right
        return pid


def _histograms(coded: DataFrame, tree: Tree, open_ids: np.ndarray, widths: np.ndarray) -> DataFrame:
    """(pid, dim, code, cnt): each executor's partial histograms of every dimension of the open partitions."""
    n_pid = len(tree.dim)
    slot = np.full(n_pid, -1, np.int64)
    slot[open_ids] = np.arange(len(open_ids))
    d = len(widths)

    def batches(it):
        for batch in it:
            codes = np.stack([batch.column(j).to_numpy(zero_copy_only=False) for j in range(d)], axis=1)
            s = slot.take(tree.assign(codes))
            keep = np.flatnonzero(s >= 0)
            if not len(keep):
                continue
            s = s.take(keep)
            for j in range(d):
                key, cnt = np.unique(s * widths[j] + codes[keep, j], return_counts=True)
                yield pa.RecordBatch.from_arrays(
                    [pa.array(open_ids.take(key // widths[j])), pa.array(np.full(len(key), j, np.int32)),
                     pa.array((key % widths[j]).astype(np.int32)), pa.array(cnt.astype(np.int64))],
                    names=["pid", "dim", "code", "cnt"])

    return coded.mapInArrow(batches, "pid long, dim int, code int, cnt long")


def _medians(hist: DataFrame, bins: int) -> np.ndarray:
    """Per open partition and dimension: size, exact lowest and highest code, the median split code and the rows up
    to it (Mondrian's frequency-set splitVal: the first code whose cumulative count reaches max(floor(n / 2), 1),
    as mondrian._evaluate reads it). Rows (pid, dim, size, lo, hi, split, upto).

    Spark sums the partial histograms; with at most COLLECT_BINS possible bins (open partitions x codes) the summed
    histogram is small and the driver reads the medians from it with numpy (one shuffle per level), else a running
    sum in a Spark window does (two shuffles, and only partitions x dimensions numbers reach the driver)."""
    h = hist.groupBy("pid", "dim", "code").agg(F.sum("cnt").alias("cnt"))
    if bins <= COLLECT_BINS:
        return _medians_local(h.toArrow())
    part = Window.partitionBy("pid", "dim")
    run = part.orderBy("code").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    h = h.withColumn("cum", F.sum("cnt").over(run)).withColumn("size", F.sum("cnt").over(part))
    reached = F.col("cum") >= F.greatest(F.shiftright("size", 1), F.lit(1))
    stats = h.groupBy("pid", "dim").agg(
        F.max("size").alias("size"), F.min("code").alias("lo"), F.max("code").alias("hi"),
        F.min(F.when(reached, F.col("code"))).alias("split"), F.min(F.when(reached, F.col("cum"))).alias("upto"))
    return np.array([tuple(r) for r in stats.collect()], dtype=np.int64).reshape(-1, 7)


def _medians_local(h: pa.Table) -> np.ndarray:
    """_medians' rows from the summed histogram (pid, dim, code, cnt), segment by segment as mondrian._evaluate."""
    pid, dim, code, cnt = (h.column(c).to_numpy(zero_copy_only=False).astype(np.int64)
                           for c in ("pid", "dim", "code", "cnt"))
    order = np.lexsort((code, dim, pid))
    pid, dim, code, cnt = pid[order], dim[order], code[order], cnt[order]
    starts = np.flatnonzero(np.r_[True, (np.diff(pid) != 0) | (np.diff(dim) != 0)])
    ends = np.r_[starts[1:], len(code)]
    cum = cnt.cumsum()
    before = cum.take(starts) - cnt.take(starts)
    size = cum.take(ends - 1) - before
    at = cum.searchsorted(before + np.maximum(size >> 1, 1))  # the first code whose cumulative count reaches half
    return np.stack([pid.take(starts), dim.take(starts), size, code.take(starts), code.take(ends - 1), code.take(at),
                     cum.take(at) - before], axis=1)


def _choose(stats: np.ndarray, open_ids: np.ndarray, scales: list[np.ndarray], k: int):
    """Mondrian's ChooseDimension with the classic fallback, per open partition: (size, best dim, split, upto,
    cut?) in ``open_ids`` order. Widths are computed with the same float operations as mondrian_groups, so exact
    ties resolve the same way (numpy's argmax: the lowest dimension)."""
    d = len(scales)
    m = np.array([len(s) for s in scales], dtype=np.int64)
    span = np.array([float(s[-1] - s[0]) if len(s) else 0.0 for s in scales])
    safe_span = np.where(span > 0, span, np.inf)
    flat_scale = np.concatenate([np.asarray(s, dtype=float) for s in scales])
    scale_off = np.cumsum(m) - m
    slot = np.searchsorted(open_ids, stats[:, 0])  # open_ids is sorted
    grid = np.zeros((len(open_ids), d, 5), np.int64)
    grid[slot, stats[:, 1]] = stats[:, 2:]
    size, lo, hi, split, upto = (grid[:, 0, 0], grid[:, :, 1], grid[:, :, 2], grid[:, :, 3], grid[:, :, 4])
    width = (flat_scale.take(hi + scale_off) - flat_scale.take(lo + scale_off)) / safe_span
    # allowable cut (strict): >= k rows on each side; a partition below 2k rows has none
    ok = (width > 0) & (upto <= (size - k)[:, None]) & (size >= 2 * k)[:, None]
    score = np.where(ok, width, -1.0)
    best = score.argmax(axis=1)
    rows = np.arange(len(open_ids))
    return size, best, split[rows, best], upto[rows, best], score[rows, best] > 0


def _finisher(tree: Tree, encs: list[QIEncoding], k: int, keep: list[str], out_schema: pa.Schema):
    """The function finishing one leaf partition inside an executor: the local Mondrian from the leaf's rows on,
    each class generalized to its tight box with the local labels (generalize.code_labels)."""
    scales = [e.scale for e in encs]
    d = len(encs)

    def finish(table: pa.Table) -> pa.Table:
        leaf = int(table.column("__leaf")[0].as_py())
        codes = np.stack([table.column(f"__c{j}").to_numpy(zero_copy_only=False) for j in range(d)],
                         axis=1).astype(np.int64)
        groups, lo, hi = mondrian_groups(codes, scales, k, strict=True, return_boxes=True)
        cols = {name: table.column(name) for name in keep}
        for j, e in enumerate(encs):
            labs, inv, _, _ = code_labels(e, lo[:, j].astype(np.int64), hi[:, j].astype(np.int64))
            cols[e.name] = pa.array([str(x) for x in labs], pa.string()).take(pa.array(inv.take(groups)))
        cols[CLASS] = pa.array((np.int64(leaf) << 32) | groups)
        return pa.Table.from_arrays([cols[f.name] for f in out_schema], schema=out_schema)

    return finish


def anonymize(df: DataFrame, quasi_identifiers, k: int, *, strict: bool = True, sensitive: str | None = None,
              l: int | None = None, hierarchies: dict | None = None, kinds: dict[str, str] | None = None,
              shared=None, order_by: str | None = None,
              max_partition_rows: int = DEFAULT_PARTITION_ROWS) -> DataFrame:
    """k-anonymous release of a Spark DataFrame by strict Mondrian: the same classes as
    ``crowddb.anonymize.anonymize(frame, quasi_identifiers, k)`` on the same rows.

    Returns ``df``'s columns with each quasi-identifier replaced by its class's label ('[23-35]', '{a,b}', '*'; as
    locally) and a ``class`` column (unique per class, not dense). ``order_by`` names a column that orders the rows
    for categorical codes (first appearance; module docs of crowddb/spark/encoding.py). Partitions of at most
    ``max_partition_rows`` rows are finished inside one executor each.
    """
    if not strict:
        raise ArgumentError("relaxed Mondrian (strict=False) is not supported on Spark yet; use strict=True or "
                            "crowddb.anonymize.anonymize")
    if sensitive is not None or l is not None:
        raise ArgumentError("l-diversity (sensitive=, l=) is not supported on Spark yet; use "
                            "crowddb.anonymize.anonymize")
    if hierarchies:
        raise ArgumentError("hierarchies are not supported on Spark yet; use crowddb.anonymize.anonymize")
    if shared:
        raise ArgumentError("shared= is not supported on Spark yet; use crowddb.anonymize.anonymize")
    if isinstance(max_partition_rows, bool) or not isinstance(max_partition_rows, (int, np.integer)) or (
            max_partition_rows < 1):
        raise ArgumentError(f"max_partition_rows must be a positive integer, got {max_partition_rows!r}")
    qis = qi_list(quasi_identifiers)
    if CLASS in df.columns:
        raise ArgumentError(f"the input already has a column named {CLASS!r}, which the release adds")
    n, kind_of = validate(df, qis, k, kinds)
    k = int(k)
    encs = learn(df, qis, kind_of, order_by)
    scales = [e.scale for e in encs]
    widths = np.array([max(e.m, 1) for e in encs], np.int64)
    d = len(qis)

    def code_batches(it):
        for batch in it:
            codes = codes_of(batch, encs)
            yield pa.RecordBatch.from_arrays([pa.array(codes[:, j]) for j in range(d)], names=[f"c{j}" for j in range(d)])

    coded = df.select(*prepared(df, qis, kind_of)).mapInArrow(
        code_batches, ", ".join(f"c{j} int" for j in range(d))).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        tree = Tree()
        # a partition stays open for Spark while it is too big for one executor and may still be cut (>= 2k rows)
        open_ids = np.array([0] if n > max_partition_rows and n >= 2 * k else [], np.int64)
        while len(open_ids):
            stats = _medians(_histograms(coded, tree, open_ids, widths), len(open_ids) * int(widths.sum()))
            size, best, split, upto, cut = _choose(stats, open_ids, scales, k)
            if not cut.any():
                break
            left = tree.cut(open_ids[cut], best[cut], split[cut])
            kids = np.concatenate((left, left + 1))
            kid_size = np.concatenate((upto[cut], size[cut] - upto[cut]))
            open_ids = np.sort(kids[(kid_size > max_partition_rows) & (kid_size >= 2 * k)])
    finally:
        coded.unpersist()

    # the leaves, each finished whole by the local Mondrian in one executor
    keep = [c for c in df.columns if c not in qis]
    fields = {f.name: f for f in df.schema.fields}
    out_fields = [fields[c] if c in keep else T.StructField(c, T.StringType(), False) for c in df.columns]
    out = T.StructType(out_fields + [T.StructField(CLASS, T.LongType(), False)])
    arrow_schema = pa.schema([pa.field(f.name, _arrow_type(f.dataType), f.nullable) for f in out.fields])

    def leaf_batches(it):
        for batch in it:
            codes = codes_of(batch, encs)
            extra = [pa.array(tree.assign(codes))] + [pa.array(codes[:, j]) for j in range(d)]
            names = batch.schema.names + ["__leaf"] + [f"__c{j}" for j in range(d)]
            yield pa.RecordBatch.from_arrays(batch.columns + extra, names=names)

    src = df.select(*[c for c in df.columns if c not in qis], *prepared(df, qis, kind_of))
    with_leaf = T.StructType(src.schema.fields + [T.StructField("__leaf", T.LongType(), False)]
                             + [T.StructField(f"__c{j}", T.IntegerType(), False) for j in range(d)])
    return (src.mapInArrow(leaf_batches, with_leaf).groupBy("__leaf")
            .applyInArrow(_finisher(tree, encs, k, keep, arrow_schema), out))


def _arrow_type(dt: T.DataType) -> pa.DataType:
    """The Arrow type Spark exchanges a column of type ``dt`` as."""
    from pyspark.sql.pandas.types import to_arrow_type

    return to_arrow_type(dt)
