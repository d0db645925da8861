"""Mondrian (LeFevre, DeWitt, Ramakrishnan, ICDE 2006) on Spark, with the classes of the local Mondrian.

Why the split can be made: strict Mondrian's cut of a partition depends on the partition's rows only (its widest
allowable dimension, normalized by the global ranges, and that dimension's median), so the recursion below any
partition is the same whoever computes it. The top of the tree is therefore computed with Spark aggregations, level
by level, and every partition of at most ``max_partition_rows`` rows is handed whole to the local vectorized Mondrian
(crowddb/anonymize/mondrian.py) inside an executor, which continues the same recursion from there.

Why the rows are read twice only: a strict cut sends codes <= split left, so rows with equal quasi-identifiers never
part; Mondrian needs only the distinct QI combinations and how many rows hold each. One aggregation
(encoding.scan) makes them, validates and learns the encodings from them, and counts the root's histogram; they are
coded once in executors (packed into 64-bit words) and cached, and every level and the leaves read that small table.
The release is ``df`` joined with each combination's labels and class (a broadcast join while the combinations are
few): the second and last pass over the rows, in the JVM, with no Python worker and no shuffle of the rows.

One level of the upper cuts (Mondrian's Anonymize(partition), all open partitions at once):
1. each executor assigns its combinations to the current partitions (the cuts so far, applied with numpy) and sums,
   weighted by rows, the histogram (partition, dimension, code, count) of its whole Spark partition;
2. Spark sums the histograms and, per partition and dimension, reads the exact bounds and the frequency-set median
   (Mondrian's splitVal: the first code whose cumulative count reaches half the partition, floor(n / 2)) with the
   count of rows up to it (on the driver when the summed histogram is small, else from a running sum in a window);
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
from crowddb.spark.encoding import CNT, Packing, codes_of, kinds_of, prepared, qi_list, scan

DEFAULT_PARTITION_ROWS = 500_000  # rows an executor finishes locally: ~100 MB of repeated codes at 8 QIs
CLASS = "class"
COLLECT_BINS = 2_000_000  # summed histograms up to this many bins are read by the driver (_medians)
DENSE_BINS = 1 << 22  # histograms up to this many bins (32 MB) are summed in an executor before leaving it
BROADCAST_COMBOS = 2_000_000  # the release joins the classes of at most this many QI combinations by broadcast


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


def _histograms(words: DataFrame, tree: Tree, open_ids: np.ndarray, widths: np.ndarray,
                packing: Packing) -> DataFrame:
    """(pid, dim, code, cnt): each executor's histograms of every dimension of the open partitions, from ``words``'
    packed codes of the distinct QI combinations weighted by their rows (CNT); summed over its whole Spark partition
    when they fit DENSE_BINS (one small batch per Spark partition), else per batch."""
    slot = np.full(len(tree.dim), -1, np.int64)
    slot[open_ids] = np.arange(len(open_ids))
    d, n_open = len(widths), len(open_ids)
    base = n_open * np.concatenate(([0], np.cumsum(widths)[:-1]))  # where dimension j's bins start
    total = int(n_open * widths.sum())
    names = packing.names

    def rows(idx: np.ndarray, cnt: np.ndarray) -> pa.RecordBatch:
        dim = np.searchsorted(base, idx, side="right") - 1
        rel, w = idx - base.take(dim), widths.take(dim)
        return pa.RecordBatch.from_arrays(
            [pa.array(open_ids.take(rel // w)), pa.array(dim.astype(np.int32)), pa.array((rel % w).astype(np.int32)),
             pa.array(cnt.astype(np.int64))], names=["pid", "dim", "code", "cnt"])

    def batches(it):
        acc = np.zeros(total, np.int64) if total <= DENSE_BINS else None
        for batch in it:
            codes = packing.unpack([batch.column(w).to_numpy(zero_copy_only=False) for w in names])
            s = slot.take(tree.assign(codes))
            keep = np.flatnonzero(s >= 0)
            if not len(keep):
                continue
            s = s.take(keep)
            keys = np.concatenate([base[j] + s * widths[j] + codes[keep, j] for j in range(d)])
            rows_of = np.tile(batch.column(CNT).to_numpy(zero_copy_only=False).take(keep), d).astype(float)
            if acc is not None and total <= 4 * len(keys):  # bincount costs the bins: worth it when they are few
                acc += np.bincount(keys, rows_of, minlength=total).astype(np.int64)  # exact: counts < 2**53
                continue
            key, inv = np.unique(keys, return_inverse=True)
            cnt = np.bincount(inv, rows_of).astype(np.int64)
            if acc is None:
                yield rows(key, cnt)
            else:
                acc[key] += cnt
        if acc is not None and acc.any():
            idx = np.flatnonzero(acc)
            yield rows(idx, acc.take(idx))

    return words.mapInArrow(batches, "pid long, dim int, code int, cnt long")


def _root(counts: list[np.ndarray]) -> np.ndarray:
    """_medians' rows of the root, from the rows per code that encoding.scan counted (no Spark job)."""
    return _medians_local(pa.table({
        "pid": np.zeros(sum(len(c) for c in counts), np.int64),
        "dim": np.concatenate([np.full(len(c), j, np.int64) for j, c in enumerate(counts)]),
        "code": np.concatenate([np.arange(len(c)) for c in counts]), "cnt": np.concatenate(counts)}))


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


def _finisher(encs: list[QIEncoding], packing: Packing, k: int, qis: list[str], max_rows: int,
              out_schema: pa.Schema):
    """The function finishing one leaf inside an executor, from the leaf's distinct QI combinations: the local
    Mondrian on the leaf's rows (each combination repeated as many times as rows hold it), each class generalized to
    its tight box with the local labels (generalize.code_labels). Strict cuts never separate equal rows, so each
    combination's class is that of its first copy. Rows (QI values, their labels, class), one per combination."""
    scales = [e.scale for e in encs]

    def finish(table: pa.Table) -> pa.Table:
        leaf = int(table.column("__leaf")[0].as_py())
        codes = packing.unpack([table.column(w).to_numpy() for w in packing.names])
        rows = table.column(CNT).to_numpy()
        if rows.sum() > max_rows:  # left open by Spark only when no cut was allowable: one class, no copies made
            groups, lo, hi = np.zeros(len(codes), np.int64), codes.min(axis=0)[None], codes.max(axis=0)[None]
        else:
            groups, lo, hi = mondrian_groups(np.repeat(codes, rows, axis=0), scales, k, strict=True,
                                             return_boxes=True)
            groups = groups.take(np.cumsum(rows) - rows)
        cols = {q: table.column(q) for q in qis}
        for j, e in enumerate(encs):
            labs, inv, _, _ = code_labels(e, lo[:, j].astype(np.int64), hi[:, j].astype(np.int64))
            cols[f"__l{j}"] = pa.array([str(x) for x in labs], pa.string()).take(pa.array(inv.take(groups)))
        cols[CLASS] = pa.array((np.int64(leaf) << 32) | groups)
        return pa.Table.from_arrays([cols[f.name] for f in out_schema], schema=out_schema)

    return finish


def _coded(combos: DataFrame, qis: list[str], kind_of: dict[str, str], encs: list[QIEncoding],
           packing: Packing) -> DataFrame:
    """The distinct combinations with their packed codes: (QI values, words, CNT), coded in executors."""
    d = len(qis)
    src = combos.select(*qis, *[c.alias(f"__v{j}") for j, c in enumerate(prepared(combos, qis, kind_of))], CNT)
    schema = T.StructType([src.schema[q] for q in qis] + [T.StructField(w, T.LongType(), False) for w in packing.names]
                          + [src.schema[CNT]])

    def batches(it):
        for batch in it:
            words = packing.pack(codes_of(batch, encs, [f"__v{j}" for j in range(d)]))
            yield pa.RecordBatch.from_arrays([batch.column(q) for q in qis] + [pa.array(w) for w in words]
                                             + [batch.column(CNT)], names=schema.names)

    return src.mapInArrow(batches, schema)


def _leaves(coded: DataFrame, tree: Tree, packing: Packing) -> DataFrame:
    """``coded`` with each combination's leaf (``__leaf``): the upper cuts applied in executors."""
    schema = T.StructType(coded.schema.fields + [T.StructField("__leaf", T.LongType(), False)])

    def batches(it):
        for batch in it:
            leaf = tree.assign(packing.unpack([batch.column(w).to_numpy() for w in packing.names]))
            yield pa.RecordBatch.from_arrays(batch.columns + [pa.array(leaf)], names=schema.names)

    return coded.mapInArrow(batches, schema)


def anonymize(df: DataFrame, quasi_identifiers, k: int, *, strict: bool = True, sensitive: str | None = None,
              l: int | None = None, hierarchies: dict | None = None, kinds: dict[str, str] | None = None,
              shared=None, order_by: str | None = None,
              max_partition_rows: int = DEFAULT_PARTITION_ROWS) -> DataFrame:
    """k-anonymous release of a Spark DataFrame by strict Mondrian: the same classes as
    ``crowddb.anonymize.anonymize(frame, quasi_identifiers, k)`` on the same rows.

    Returns ``df``'s columns with each quasi-identifier replaced by its class's label ('[23-35]', '{a,b}', '*'; as
    locally) and a ``class`` column (unique per class, not dense). ``order_by`` names a column that orders the rows
    for categorical codes (first appearance; module docs of crowddb/spark/encoding.py). Partitions of at most
    ``max_partition_rows`` rows are finished inside one executor each. Runs the Spark jobs of the cuts before it
    returns; the release itself is a join of ``df`` with the classes of its distinct QI combinations.
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
    kind_of = kinds_of(df, qis, k, kinds)
    k = int(k)
    n, n_combos, encs, counts, combos = scan(df, qis, kind_of, k, order_by)
    coded = None
    try:
        scales = [e.scale for e in encs]
        widths = np.array([max(e.m, 1) for e in encs], np.int64)
        packing = Packing.of(encs)
        # every later job reads the distinct combinations, coded once: never the rows again until the release
        coded = _coded(combos, qis, kind_of, encs, packing).persist(StorageLevel.MEMORY_AND_DISK)
        tree = Tree()
        # a partition stays open for Spark while it is too big for one executor and may still be cut (>= 2k rows)
        open_ids = np.array([0] if n > max_partition_rows and n >= 2 * k else [], np.int64)
        while len(open_ids):
            stats = _root(counts) if tree.depth == 0 else _medians(  # the root's histogram came with scan
                _histograms(coded.select(*packing.names, CNT), tree, open_ids, widths, packing),
                len(open_ids) * int(widths.sum()))
            size, best, split, upto, cut = _choose(stats, open_ids, scales, k)
            if not cut.any():
                break
            left = tree.cut(open_ids[cut], best[cut], split[cut])
            kids = np.concatenate((left, left + 1))
            kid_size = np.concatenate((upto[cut], size[cut] - upto[cut]))
            open_ids = np.sort(kids[(kid_size > max_partition_rows) & (kid_size >= 2 * k)])

        # the leaves, each finished whole by the local Mondrian in one executor: each combination's labels and class
        lab_fields = ([combos.schema[q] for q in qis] + [T.StructField(f"__l{j}", T.StringType(), False)
                                                         for j in range(len(qis))]
                      + [T.StructField(CLASS, T.LongType(), False)])
        lab_schema = pa.schema([pa.field(f.name, _arrow_type(f.dataType), f.nullable) for f in lab_fields])
        classes = (_leaves(coded, tree, packing).groupBy("__leaf")
                   .applyInArrow(_finisher(encs, packing, k, qis, max_partition_rows, lab_schema),
                                 T.StructType(lab_fields)))
        # computed now and kept by the returned DataFrame (freed with it), so the caches can go
        classes = classes.localCheckpoint(eager=True)
    finally:
        combos.unpersist()
        if coded is not None:
            coded.unpersist()
    small = n_combos <= BROADCAST_COMBOS  # a hash table in every executor; else Spark shuffles both sides
    released = df.join(F.broadcast(classes) if small else classes, on=qis)  # equal values: Spark's equality
    label = {q: f"__l{j}" for j, q in enumerate(qis)}
    return released.select(*[F.col(label[c]).alias(c) if c in label else F.col(c) for c in df.columns], CLASS)


def _arrow_type(dt: T.DataType) -> pa.DataType:
    """The Arrow type Spark exchanges a column of type ``dt`` as."""
    from pyspark.sql.pandas.types import to_arrow_type

    return to_arrow_type(dt)
