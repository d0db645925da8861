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

Distinct l-diversity (``sensitive=``, ``l=``; Machanavajjhala et al., TKDD 2007, in its 'distinct' reading, as the
local Mondrian): an extra condition of an allowable cut, both sides holding >= l distinct sensitive values, so the
result is the local one (mondrian_groups bans a dimension whose cut breaks l and falls back to the next widest:
the widest dimension passing both conditions, as step 3 picks). A NULL sensitive value is one value (as
pandas.factorize(use_na_sentinel=False) locally; a float NaN is the same NULL), and a column with fewer than l values
is the local PrivacyError. The rows are grouped by (QI combination, sensitive value), so the combinations carry their
sensitive codes (the value's index among the distinct values, which the scan's grouping sets read). How the upper
cuts check l: since a strict cut at ``split`` sends codes <= split left, a sensitive value s lies on the left iff its
lowest code in the cut dimension, among the partition's rows holding s, is <= split, and on the right iff its
highest is > split. So in the same pass as the histograms (step 1) each executor reduces its combinations to
(partition, dimension, s, lowest code, highest code); Spark reduces them in the same shuffle as the histograms, and
the driver counts per (partition, dimension) the values on each side of the median split (partitions x dimensions x
sensitive values numbers, never rows; a Spark join with the splits instead when they are too many to collect). The
root's bounds come from the scan. Leaves hand the local Mondrian each pair repeated by its rows with its sensitive
code, and keep one row per QI combination (all its pairs share a class: strict cuts never part equal QIs).

Hierarchies (``hierarchies=``, ARX files as locally): a non-numeric QI with one is coded in the hierarchy's
depth-first order (encoding.scan, as encoding.encode_column), which is all Mondrian's cuts see; the leaves label a
class with its lowest common ancestor (generalize.code_labels). Since the local release's classes are what a reader
tells apart (generalize.assemble), Mondrian classes whose widened boxes coincide, within a leaf or across leaves, are
then merged into one by a Spark aggregation over the combinations' boxes.

Class ids are ``leaf << 32 | class within the leaf`` (with hierarchies, the smallest of the merged classes'):
unique, not dense. Unsupported here (each raises ArgumentError rather than differ from the local result): relaxed
cuts and shared columns.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from crowddb.anonymize.encoding import QIEncoding, check_l
from crowddb.anonymize.generalize import code_labels
from crowddb.anonymize.mondrian import mondrian_groups
from crowddb.errors import ArgumentError, PrivacyError, UnknownColumnError
from crowddb.spark.encoding import CNT, Packing, codes_of, kinds_of, prepared, qi_list, scan

DEFAULT_PARTITION_ROWS = 500_000  # rows an executor finishes locally: ~100 MB of repeated codes at 8 QIs
CLASS = "class"
COLLECT_BINS = 2_000_000  # summed histograms up to this many bins are read by the driver (_medians)
DENSE_BINS = 1 << 22  # histograms up to this many bins (32 MB) are summed in an executor before leaving it
BROADCAST_COMBOS = 2_000_000  # the release joins the classes of at most this many QI combinations by broadcast
SENS = "__crowddb_sens"  # the sensitive value, grouped with the QIs (l-diversity)
SCODE = "__s"  # its code: the index of the value among the sensitive column's distinct values


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


HIST_SCHEMA = "pid long, dim int, code int, cnt long"
BOUNDS_SCHEMA = "pid long, dim int, s int, lo int, hi int"
LEVEL_NAMES = ["pid", "dim", "code", "s", "cnt", "lo", "hi"]  # _medians_and_l: both of them in one table
LEVEL_TYPES = ["long", "int", "int", "int", "long", "int", "int"]


def _slots(tree: Tree, open_ids: np.ndarray) -> np.ndarray:
    """Each partition id's position among the open partitions (-1: not open)."""
    slot = np.full(len(tree.dim), -1, np.int64)
    slot[open_ids] = np.arange(len(open_ids))
    return slot


def _read(it, packing: Packing, tree: Tree, open_ids: np.ndarray):
    """Each batch of packed combinations with its codes, and the open slot and row of those in an open partition:
    (batch, codes, slot, rows), unpacked and assigned to the tree once for every pass that reads the batch."""
    slot = _slots(tree, open_ids)
    for batch in it:
        codes = packing.unpack([batch.column(w).to_numpy(zero_copy_only=False) for w in packing.names])
        s = slot.take(tree.assign(codes))
        keep = np.flatnonzero(s >= 0)
        yield batch, codes, s.take(keep), keep


def _histograms(words: DataFrame, tree: Tree, open_ids: np.ndarray, widths: np.ndarray,
                packing: Packing) -> DataFrame:
    """The executors' partial histograms of the open partitions (_histogram_batches)."""
    histograms = _histogram_batches(open_ids, widths)
    return words.mapInArrow(lambda it: histograms(_read(it, packing, tree, open_ids)), HIST_SCHEMA)


def _histogram_batches(open_ids: np.ndarray, widths: np.ndarray):
    """(pid, dim, code, cnt): each executor's histograms of every dimension of the open partitions, from the read
    batches (``_read``) of ``words``' packed codes of the distinct QI combinations weighted by their rows (CNT);
    summed over its whole Spark partition when they fit DENSE_BINS (one small batch per Spark partition), else per
    batch."""
    d, n_open = len(widths), len(open_ids)
    base = n_open * np.concatenate(([0], np.cumsum(widths)[:-1]))  # where dimension j's bins start
    total = int(n_open * widths.sum())

    def rows(idx: np.ndarray, cnt: np.ndarray) -> pa.RecordBatch:
        dim = np.searchsorted(base, idx, side="right") - 1
        rel, w = idx - base.take(dim), widths.take(dim)
        return pa.RecordBatch.from_arrays(
            [pa.array(open_ids.take(rel // w)), pa.array(dim.astype(np.int32)), pa.array((rel % w).astype(np.int32)),
             pa.array(cnt.astype(np.int64))], names=["pid", "dim", "code", "cnt"])

    def batches(read):
        acc = np.zeros(total, np.int64) if total <= DENSE_BINS else None
        for batch, codes, s, keep in read:
            if not len(keep):
                continue
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

    return batches


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


def _grid(stats: np.ndarray, open_ids: np.ndarray, d: int) -> np.ndarray:
    """_medians' rows as a (open partitions, dimensions, 5) grid of (size, lo, hi, split, upto)."""
    grid = np.zeros((len(open_ids), d, 5), np.int64)
    grid[np.searchsorted(open_ids, stats[:, 0]), stats[:, 1]] = stats[:, 2:]  # open_ids is sorted
    return grid


def _choose(stats: np.ndarray, open_ids: np.ndarray, scales: list[np.ndarray], k: int,
            l_ok: np.ndarray | None = None):
    """Mondrian's ChooseDimension with the classic fallback, per open partition: (size, best dim, split, upto,
    cut?) in ``open_ids`` order. Widths are computed with the same float operations as mondrian_groups, so exact
    ties resolve the same way (numpy's argmax: the lowest dimension). ``l_ok`` (open partitions x dimensions):
    whether the median cut along the dimension leaves both sides l-diverse (_l_diverse), an extra condition."""
    d = len(scales)
    m = np.array([len(s) for s in scales], dtype=np.int64)
    span = np.array([float(s[-1] - s[0]) if len(s) else 0.0 for s in scales])
    safe_span = np.where(span > 0, span, np.inf)
    flat_scale = np.concatenate([np.asarray(s, dtype=float) for s in scales])
    scale_off = np.cumsum(m) - m
    grid = _grid(stats, open_ids, d)
    size, lo, hi, split, upto = (grid[:, 0, 0], grid[:, :, 1], grid[:, :, 2], grid[:, :, 3], grid[:, :, 4])
    width = (flat_scale.take(hi + scale_off) - flat_scale.take(lo + scale_off)) / safe_span
    # allowable cut (strict): >= k rows on each side; a partition below 2k rows has none
    ok = (width > 0) & (upto <= (size - k)[:, None]) & (size >= 2 * k)[:, None]
    if l_ok is not None:  # as mondrian_groups: a cut breaking l-diversity is not allowable, the next widest is tried
        ok &= l_ok
    score = np.where(ok, width, -1.0)
    best = score.argmax(axis=1)
    rows = np.arange(len(open_ids))
    return size, best, split[rows, best], upto[rows, best], score[rows, best] > 0


def _sens_bounds(words: DataFrame, tree: Tree, open_ids: np.ndarray, d: int, n_s: int,
                 packing: Packing) -> DataFrame:
    """The executors' partial sensitive bounds of the open partitions (_bounds_batches)."""
    bounds = _bounds_batches(open_ids, d, n_s)
    return words.mapInArrow(lambda it: bounds(_read(it, packing, tree, open_ids)), BOUNDS_SCHEMA)


def _bounds_batches(open_ids: np.ndarray, d: int, n_s: int):
    """(pid, dim, s, lo, hi): per open partition, dimension and sensitive code present in it, the lowest and
    highest code of the dimension among the partition's rows holding that sensitive value, from the read batches
    (``_read``) of ``words``' packed codes of the distinct (QI combination, sensitive value) pairs; reduced per Spark partition when the bins
    (open partitions x dimensions x sensitive values) fit DENSE_BINS, else per batch (Spark reduces them).

    Why these suffice: a strict cut at ``split`` sends codes <= split left, so sensitive value s is on the left
    iff lo <= split and on the right iff hi > split; both sides' distinct counts follow for any split."""
    total = len(open_ids) * d * n_s

    def rows(key: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(
            [pa.array(open_ids.take(key // (d * n_s))), pa.array((key // n_s % d).astype(np.int32)),
             pa.array((key % n_s).astype(np.int32)), pa.array(lo.astype(np.int32)), pa.array(hi.astype(np.int32))],
            names=["pid", "dim", "s", "lo", "hi"])

    def batches(read):
        dense = total <= DENSE_BINS
        acc_lo = np.full(total if dense else 0, np.iinfo(np.int64).max)
        acc_hi = np.full(total if dense else 0, -1, np.int64)
        for batch, codes, s, keep in read:
            if not len(keep):
                continue
            sc = batch.column(SCODE).to_numpy(zero_copy_only=False).astype(np.int64).take(keep)
            base = s * d * n_s + sc
            keys = np.concatenate([base + j * n_s for j in range(d)])
            code = codes.take(keep, axis=0).T.reshape(-1)  # dimension by dimension, as ``keys``
            order = np.argsort(keys, kind="stable")
            keys, code = keys.take(order), code.take(order)
            starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
            key, lo, hi = keys.take(starts), np.minimum.reduceat(code, starts), np.maximum.reduceat(code, starts)
            if dense:
                acc_lo[key] = np.minimum(acc_lo.take(key), lo)
                acc_hi[key] = np.maximum(acc_hi.take(key), hi)
            else:
                yield rows(key, lo, hi)
        if dense:
            idx = np.flatnonzero(acc_hi >= 0)
            if len(idx):
                yield rows(idx, acc_lo.take(idx), acc_hi.take(idx))

    return batches


def _l_count(t: pa.Table, split: np.ndarray, open_ids: np.ndarray, l: int) -> np.ndarray:
    """_l_diverse on the driver, from the reduced (pid, dim, lo, hi) rows of _sens_bounds."""
    n_open, d = split.shape
    pid, dim, lo, hi = (t.column(c).to_numpy(zero_copy_only=False).astype(np.int64) for c in ("pid", "dim", "lo", "hi"))
    cell = np.searchsorted(open_ids, pid) * d + dim
    sp = split.reshape(-1).take(cell)
    left = np.bincount(cell, lo <= sp, minlength=n_open * d)  # sensitive values with a row on the left ...
    right = np.bincount(cell, hi > sp, minlength=n_open * d)  # ... and on the right
    return (np.minimum(left, right) >= l).reshape(n_open, d)


def _reduce_bounds(bounds: DataFrame) -> DataFrame:
    """_sens_bounds' partial rows reduced by Spark: one per (partition, dimension, sensitive value)."""
    return bounds.groupBy("pid", "dim", "s").agg(F.min("lo").alias("lo"), F.max("hi").alias("hi"))


def _l_diverse(bounds: DataFrame, stats: np.ndarray, open_ids: np.ndarray, d: int, n_s: int, l: int) -> np.ndarray:
    """(open partitions x dimensions) bool: both sides of the partition's median cut along the dimension hold at
    least l distinct sensitive values (distinct l-diversity, Machanavajjhala et al., TKDD 2007, Def. 3.2 in its
    'distinct' reading, as mondrian._l_ok checks it), counted from _sens_bounds' rows: s is left iff lo <= split,
    right iff hi > split. With at most COLLECT_BINS rows possible the driver counts them (partitions x dimensions x
    sensitive values numbers, never rows), else Spark does, against the splits as a broadcast table."""
    split = _grid(stats, open_ids, d)[:, :, 3]
    bounds = _reduce_bounds(bounds)
    if len(open_ids) * d * n_s <= COLLECT_BINS:
        return _l_count(bounds.toArrow(), split, open_ids, l)
    splits = bounds.sparkSession.createDataFrame(pa.table({
        "pid": open_ids.repeat(d), "dim": np.tile(np.arange(d, dtype=np.int32), len(open_ids)),
        "split": split.reshape(-1).astype(np.int32)}))
    sides = (bounds.join(F.broadcast(splits), on=["pid", "dim"]).groupBy("pid", "dim")
             .agg(F.sum((F.col("lo") <= F.col("split")).cast("long")).alias("left"),
                  F.sum((F.col("hi") > F.col("split")).cast("long")).alias("right")))
    ok = np.zeros((len(open_ids), d), bool)
    got = np.array([tuple(r) for r in sides.collect()], dtype=np.int64).reshape(-1, 4)
    ok[np.searchsorted(open_ids, got[:, 0]), got[:, 1]] = np.minimum(got[:, 2], got[:, 3]) >= l
    return ok


def _medians_and_l(words: DataFrame, tree: Tree, open_ids: np.ndarray, widths: np.ndarray, n_s: int,
                   packing: Packing, l: int) -> tuple[np.ndarray, np.ndarray]:
    """_medians and _l_diverse of one level in one Spark job (both small enough for the driver): one pass of the
    executors over ``words`` (packed codes, CNT and SCODE) makes both the histograms and the sensitive bounds, and
    they go through one shuffle as one table, told apart by s < 0 (a histogram bin) or code < 0 (a sensitive
    value's bounds). The pass reads each batch of its Spark partition once (``_read``: unpacked and assigned to the
    tree) and holds what it read while it makes both."""
    d = len(widths)
    hist_of = _histogram_batches(open_ids, widths)
    bounds_of = _bounds_batches(open_ids, d, n_s)

    def batches(it):
        held = list(_read(it, packing, tree, open_ids))
        for b in hist_of(iter(held)):
            n = b.num_rows
            yield pa.RecordBatch.from_arrays(
                [b.column(0), b.column(1), b.column(2), pa.array(np.full(n, -1, np.int32)), b.column(3),
                 pa.array(np.zeros(n, np.int32)), pa.array(np.zeros(n, np.int32))], names=LEVEL_NAMES)
        for b in bounds_of(iter(held)):
            n = b.num_rows
            yield pa.RecordBatch.from_arrays(
                [b.column(0), b.column(1), pa.array(np.full(n, -1, np.int32)), b.column(2),
                 pa.array(np.zeros(n, np.int64)), b.column(3), b.column(4)], names=LEVEL_NAMES)

    both = (words.mapInArrow(batches, ", ".join(f"{c} {t}" for c, t in zip(LEVEL_NAMES, LEVEL_TYPES)))
            .groupBy("pid", "dim", "code", "s").agg(F.sum("cnt").alias("cnt"), F.min("lo").alias("lo"),
                                                    F.max("hi").alias("hi")).toArrow())
    is_bin = pc.less(both.column("s"), 0)
    stats = _medians_local(both.filter(is_bin))
    return stats, _l_count(both.filter(pc.invert(is_bin)), _grid(stats, open_ids, d)[:, :, 3], open_ids, l)


def _finisher(encs: list[QIEncoding], packing: Packing, k: int, qis: list[str], max_rows: int,
              out_schema: pa.Schema, l: int | None = None):
    """The function finishing one leaf inside an executor, from the leaf's distinct QI combinations: the local
    Mondrian on the leaf's rows (each combination repeated as many times as rows hold it), each class generalized to
    its tight box with the local labels (generalize.code_labels). Strict cuts never separate equal rows, so each
    combination's class is that of its first copy. Rows (QI values, their labels, class), one per combination.

    With l-diversity the leaf's rows are its distinct (QI combination, sensitive code) pairs: each repeated as many
    times as rows hold it, the sensitive codes go with them to the local Mondrian, and the output keeps one row per
    QI combination (all its pairs share its class)."""
    scales = [e.scale for e in encs]

    def finish(table: pa.Table) -> pa.Table:
        leaf = int(table.column("__leaf")[0].as_py())
        codes = packing.unpack([table.column(w).to_numpy() for w in packing.names])
        rows = table.column(CNT).to_numpy()
        if rows.sum() > max_rows:  # left open by Spark only when no cut was allowable: one class, no copies made
            groups, lo, hi = np.zeros(len(codes), np.int64), codes.min(axis=0)[None], codes.max(axis=0)[None]
        else:
            sens = None if l is None else np.repeat(table.column(SCODE).to_numpy(), rows)
            groups, lo, hi = mondrian_groups(np.repeat(codes, rows, axis=0), scales, k, strict=True,
                                             sensitive=sens, l=l, return_boxes=True)
            groups = groups.take(np.cumsum(rows) - rows)
        if l is not None:  # one row per QI combination: the first of each run of equal codes
            order = np.lexsort(codes.T[::-1])
            ordered = codes.take(order, axis=0)
            first = order.take(np.flatnonzero(np.r_[True, (ordered[1:] != ordered[:-1]).any(axis=1)]))
            table, groups = table.take(pa.array(first)), groups.take(first)
        cols = {q: table.column(q) for q in qis}
        for j, e in enumerate(encs):
            labs, inv, a, b = code_labels(e, lo[:, j].astype(np.int64), hi[:, j].astype(np.int64))
            cols[f"__l{j}"] = pa.array([str(x) for x in labs], pa.string()).take(pa.array(inv.take(groups)))
            cols[f"__a{j}"], cols[f"__b{j}"] = pa.array(a.take(groups)), pa.array(b.take(groups))
        cols[CLASS] = pa.array((np.int64(leaf) << 32) | groups)
        return pa.Table.from_arrays([cols[f.name] for f in out_schema], schema=out_schema)

    return finish


def _coded(combos: DataFrame, qis: list[str], kind_of: dict[str, str], encs: list[QIEncoding],
           packing: Packing, sens_values: list | None = None) -> DataFrame:
    """The distinct combinations with their packed codes: (QI values, words, CNT), coded in executors; with
    ``sens_values`` (l-diversity) also each one's sensitive code SCODE, its value's index in ``sens_values``."""
    d = len(qis)
    src = combos.select(*qis, *[c.alias(f"__v{j}") for j, c in enumerate(prepared(combos, qis, kind_of))], CNT,
                        *([SENS] if sens_values is not None else []))
    schema = T.StructType([src.schema[q] for q in qis] + [T.StructField(w, T.LongType(), False) for w in packing.names]
                          + [src.schema[CNT]]
                          + ([T.StructField(SCODE, T.IntegerType(), False)] if sens_values is not None else []))

    def batches(it):
        for batch in it:
            words = packing.pack(codes_of(batch, encs, [f"__v{j}" for j in range(d)]))
            extra = []
            if sens_values is not None:  # a NULL sensitive value is a value (as pandas.factorize's) and matches NULL
                col = batch.column(SENS)
                extra = [pc.index_in(col, value_set=pa.array(sens_values, type=col.type)).cast(pa.int32())]
            yield pa.RecordBatch.from_arrays([batch.column(q) for q in qis] + [pa.array(w) for w in words]
                                             + [batch.column(CNT)] + extra, names=schema.names)

    return src.mapInArrow(batches, schema)


def _leaves(coded: DataFrame, tree: Tree, packing: Packing) -> DataFrame:
    """``coded`` with each combination's leaf (``__leaf``): the upper cuts applied in executors."""
    schema = T.StructType(coded.schema.fields + [T.StructField("__leaf", T.LongType(), False)])

    def batches(it):
        for batch in it:
            leaf = tree.assign(packing.unpack([batch.column(w).to_numpy() for w in packing.names]))
            yield pa.RecordBatch.from_arrays(batch.columns + [pa.array(leaf)], names=schema.names)

    return coded.mapInArrow(batches, schema)


def _hierarchies(hierarchies: dict | None, qis: list[str]) -> dict:
    """Each named QI's loaded hierarchy (a Hierarchy, a DataFrame or an ARX CSV path, as locally), after the local
    check of the names (encoding.encode)."""
    from crowddb.anonymize.hierarchy import Hierarchy

    unknown = [c for c in hierarchies or {} if c not in qis]
    if unknown:
        raise UnknownColumnError(f"kinds/hierarchies name columns that are not quasi-identifiers: {unknown}")
    return {q: Hierarchy.load(h, q) for q, h in (hierarchies or {}).items() if h is not None}


def anonymize(df: DataFrame, quasi_identifiers, k: int, *, strict: bool = True, sensitive: str | None = None,
              l: int | None = None, hierarchies: dict | None = None, kinds: dict[str, str] | None = None,
              shared=None, order_by: str | None = None,
              max_partition_rows: int = DEFAULT_PARTITION_ROWS) -> DataFrame:
    """k-anonymous release of a Spark DataFrame by strict Mondrian: the same classes as
    ``crowddb.anonymize.anonymize(frame, quasi_identifiers, k)`` on the same rows; with ``sensitive`` and ``l``,
    distinctly l-diverse classes, those of ``crowddb.anonymize.anonymize(..., sensitive=..., l=...)``; with
    ``hierarchies`` (QI -> ARX CSV path, DataFrame or Hierarchy) the local hierarchy labels and classes.

    Returns ``df``'s columns with each quasi-identifier replaced by its class's label ('[23-35]', '{a,b}', '*'; as
    locally) and a ``class`` column (unique per class, not dense). ``order_by`` names a column that orders the rows
    for categorical codes (first appearance; module docs of crowddb/spark/encoding.py). Partitions of at most
    ``max_partition_rows`` rows are finished inside one executor each. Runs the Spark jobs of the cuts before it
    returns; the release itself is a join of ``df`` with the classes of its distinct QI combinations.
    """
    if not strict:
        raise ArgumentError("relaxed Mondrian (strict=False) is not supported on Spark yet; use strict=True or "
                            "crowddb.anonymize.anonymize")
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
    hierarchies = _hierarchies(hierarchies, qis)
    l = check_l(sensitive, l, qis, df.columns)  # the local checks, before any Spark job
    src = df
    if l is not None:  # the rows grouped by (QI combination, sensitive value): what the l checks need, no more
        value = F.col(sensitive)
        if isinstance(df.schema[sensitive].dataType, (T.FloatType, T.DoubleType)):
            value = F.when(F.isnan(value), F.lit(None)).otherwise(value)  # pandas' NaN is its NULL: one value
        src = df.withColumn(SENS, value)
    n, n_combos, encs, counts, combos, sens = scan(src, qis, kind_of, k, order_by, SENS if l is not None else None,
                                                   hierarchies)
    coded = None
    try:
        sens_values = sens.values if sens is not None else None
        n_s = len(sens_values) if l is not None else 0
        if l is not None and n_s < l:  # as locally (api._sensitive_codes): no partition can be l-diverse
            raise PrivacyError(f"{sensitive!r} has only {n_s} distinct values; l={l} is impossible")
        scales = [e.scale for e in encs]
        widths = np.array([max(e.m, 1) for e in encs], np.int64)
        d = len(qis)
        packing = Packing.of(encs)
        # every later job reads the distinct combinations, coded once: never the rows again until the release
        coded = _coded(combos, qis, kind_of, encs, packing, sens_values).persist(StorageLevel.MEMORY_AND_DISK)
        tree = Tree()
        # a partition stays open for Spark while it is too big for one executor and may still be cut (>= 2k rows)
        open_ids = np.array([0] if n > max_partition_rows and n >= 2 * k else [], np.int64)
        while len(open_ids):
            bins = len(open_ids) * int(widths.sum())
            l_ok = None
            if tree.depth == 0:  # the root's histogram (and the sensitive values' bounds) came with scan
                stats = _root(counts)
                if l is not None:
                    cell = sens.hi >= 0
                    l_ok = _l_count(pa.table({
                        "pid": np.zeros(int(cell.sum()), np.int64), "dim": np.nonzero(cell)[0],
                        "lo": sens.lo[cell], "hi": sens.hi[cell]}), _grid(stats, open_ids, d)[:, :, 3], open_ids, l)
            elif l is not None and max(bins, len(open_ids) * d * n_s) <= COLLECT_BINS:
                stats, l_ok = _medians_and_l(coded.select(*packing.names, CNT, SCODE), tree, open_ids, widths,
                                             n_s, packing, l)  # one job per level, as without l
            else:
                stats = _medians(_histograms(coded.select(*packing.names, CNT), tree, open_ids, widths, packing),
                                 bins)
            if l is not None and l_ok is None:
                l_ok = _l_diverse(_sens_bounds(coded.select(*packing.names, SCODE), tree, open_ids, d, n_s, packing),
                                  stats, open_ids, d, n_s, l)
            size, best, split, upto, cut = _choose(stats, open_ids, scales, k, l_ok)
            if not cut.any():
                break
            left = tree.cut(open_ids[cut], best[cut], split[cut])
            kids = np.concatenate((left, left + 1))
            kid_size = np.concatenate((upto[cut], size[cut] - upto[cut]))
            open_ids = np.sort(kids[(kid_size > max_partition_rows) & (kid_size >= 2 * k)])

        # the leaves, each finished whole by the local Mondrian in one executor: each combination's labels and class
        widened = any(e.hierarchy is not None and e.kind != "numeric" for e in encs)
        box = [f"__{x}{j}" for j in range(d) for x in "ab"] if widened else []
        lab_fields = ([combos.schema[q] for q in qis] + [T.StructField(f"__l{j}", T.StringType(), False)
                                                         for j in range(len(qis))]
                      + [T.StructField(c, T.LongType(), False) for c in box]
                      + [T.StructField(CLASS, T.LongType(), False)])
        lab_schema = pa.schema([pa.field(f.name, _arrow_type(f.dataType), f.nullable) for f in lab_fields])
        classes = (_leaves(coded, tree, packing).groupBy("__leaf")
                   .applyInArrow(_finisher(encs, packing, k, qis, max_partition_rows, lab_schema, l),
                                 T.StructType(lab_fields)))
        if widened:
            # as the local release (generalize.assemble): a class is what a reader tells apart, so Mondrian classes
            # whose hierarchy-widened boxes (and so labels) coincide are one class, in a leaf or across leaves; its
            # id is the smallest of theirs (a shuffle of the combinations, never of the rows)
            ids = classes.groupBy(*box).agg(F.min(CLASS).alias("__class"))
            classes = classes.drop(CLASS).join(ids, on=box).drop(*box).withColumnRenamed("__class", CLASS)
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
