"""Mondrian (LeFevre, DeWitt, Ramakrishnan, ICDE 2006) on Spark, with the classes of the local Mondrian: strict and
relaxed cuts, distinct l-diversity, ARX hierarchies and shared (group) columns, as crowddb.anonymize.anonymize.

Why the split can be made: Mondrian's cut of a partition depends on the partition's rows only (its widest allowable
dimension, normalized by the global ranges, and that dimension's median; for relaxed cuts also the rows' order), so
the recursion below any partition is the same whoever computes it. The top of the tree is therefore computed with
Spark aggregations, level by level, and every partition of at most ``max_partition_rows`` rows is handed whole to the
local vectorized Mondrian (crowddb/anonymize/mondrian.py) inside an executor, which continues the same recursion
from there. One run (``_grow``, then ``_leaves``) may start from many partitions at once (``ROOT``: shared columns
start runs from the nodes of their ladder), each with its own recursion.

Why strict Mondrian reads the rows twice only: a strict cut sends codes <= split left, so rows with equal
quasi-identifiers never part; Mondrian needs only the distinct QI combinations and how many rows hold each. One
aggregation (encoding.scan) makes them, validates and learns the encodings from them, and counts the root's
histogram; they are coded once in executors (packed into 64-bit words) and cached, and every level and the leaves
read that small table. The release is ``df`` joined with each combination's labels and class (a broadcast join while
the combinations are few): the second and last pass over the rows, in the JVM, with no Python worker and no shuffle
of the rows.

One level of the upper cuts (Mondrian's Anonymize(partition), all open partitions at once):
1. each executor assigns its combinations to the current partitions (the cuts so far, applied with numpy) and sums,
   weighted by rows, the histogram (partition, dimension, code, count) of its whole Spark partition;
2. Spark sums the histograms and, per partition and dimension, reads the exact bounds and the frequency-set median
   (Mondrian's splitVal: the first code whose cumulative count reaches half the partition, floor(n / 2)) with the
   count of rows up to it and below it (on the driver when the summed histogram is small, else from a running sum
   in a window);
3. the driver (partitions x dimensions numbers, never rows) picks for each partition the widest dimension (normalized
   range, lowest dimension on exact ties) whose strict cut is allowable (>= k rows on each side), as ChooseDimension
   with the classic fallback to the next widest dimension; a partition without one is an equivalence class.

Relaxed cuts (``strict=False``; the paper's relaxed multidimensional partitioning, as mondrian_groups(strict=False)):
every partition of >= 2k rows with a dimension of positive width is cut along its widest one so that the left side
holds exactly floor(n / 2) rows; the median value's rows (the ties) are split, the left taking those lowest in the
partition's next widest dimension, then first in the row order. Locally the row order is the frame's; a Spark
DataFrame has none, so relaxed Mondrian on Spark needs ``order_by``, a column of unique integers, and gives the local
classes of the frame sorted by it (ArgumentError without it). Since equal rows may part, relaxed runs read the rows
(packed codes and order, cached) instead of the combinations, and a cut is (dimension, split, tie dimension, tie
code, order): a row goes right if its code is above the split, or equals it and its (tie code, order) is above the
threshold. Per level, after the histograms: an aggregation of the ties' tie-dimension codes per partition finds the
tie code the left side ends at (driver: partitions x codes numbers), and a Spark window over the ties holding that
code (each executor keeps only as many per partition as the left side can take) reads the order the left side ends
at. With ``l`` a third job counts both sides' distinct sensitive values; a cut breaking l is banned and the
partition tries its next widest dimension at the next level (as mondrian_groups' ban). Relaxed classes whose boxes
coincide (equal rows parted, then regrouped below) are one class of the local release (generalize.assemble), so they
are merged as hierarchies' classes are (below). The release joins each row's class by ``order_by``: relaxed Mondrian
costs the rows' codes cached and a join of two row-sized tables, where strict needs neither.

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

Shared columns (``shared=``, crowddb/anonymize/shared.py): rows equal on the shared columns get one label on each.
Locally a ladder of strict Mondrian runs over the shared columns (k_i = max(k, n / 2^(i / steps)), each level
refining the one before) is built, stage 2 (Mondrian over the other QIs, strict or relaxed) is run inside every
node, and a bottom-up pass keeps a node or its children, whichever publishes less (NCP); with several shared columns
two ladders (steps 1 and 2) are tried and the cheaper wins. Everything below a node depends on the node's rows only
(and on n, k and the level it was made at), so on Spark: while a node holds more than ``max_partition_rows`` rows
its ladder level is a Spark run (strict, k_i, over the distinct shared combinations, starting from the big nodes)
and its stage-2 cost a Spark run too (all big nodes of the ladder at once: each entry once per big node above it);
a smaller node is handed whole to an executor, which builds its part of the ladder (``shared.ladder_below``, the local
_ladder from the node's level on), picks inside it with the local shared.choose and runs the local stage 2 there.
The driver then makes the bottom-up choice over the big nodes (nodes x numbers; costs are sums, compared with the
tie rule of crowddb/anonymize/ties.py, so the order of their terms does not matter), and the stage-2 classes of the
big nodes it keeps come from one more Spark run. With every QI shared the release is strict Mondrian's, as locally.

Class ids are ``leaf << 32 | class within the leaf`` (with a merge, the smallest of the merged classes'; the classes
an executor made below a small shared node: ``1 << 62 | node << 32 | class``): unique, not dense.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from crowddb.anonymize import shared as local_shared
from crowddb.anonymize.encoding import QIEncoding, check_l
from crowddb.anonymize.generalize import code_labels
from crowddb.anonymize.mondrian import mondrian_groups
from crowddb.anonymize.ties import less
from crowddb.errors import ArgumentError, PrivacyError, UnknownColumnError
from crowddb.spark.encoding import CNT, Packing, codes_of, kinds_of, prepared, qi_list, scan

DEFAULT_PARTITION_ROWS = 500_000  # rows an executor finishes locally: ~100 MB of repeated codes at 8 QIs
CLASS = "class"
COLLECT_BINS = 2_000_000  # summed histograms up to this many bins are read by the driver (_medians)
DENSE_BINS = 1 << 22  # histograms up to this many bins (32 MB) are summed in an executor before leaving it
BROADCAST_COMBOS = 2_000_000  # the release joins the classes of at most this many QI combinations by broadcast
SENS = "__crowddb_sens"  # the sensitive value, grouped with the QIs (l-diversity)
SCODE = "__s"  # its code: the index of the value among the sensitive column's distinct values
ORDER = "__o"  # relaxed: a row's place in the row order (the order_by column's integer)
ROOT = "__root"  # the partition a run starts an entry in (shared columns: a node of the ladder)
NODE = "__node"  # shared columns: the deepest ladder node of an entry that Spark made
BEST = "__best"  # shared columns: the NCP a small node's part of the ladder publishes at best
SMALL = np.int64(1) << 62  # class ids made below a small shared node
NO_TIE = np.iinfo(np.int64).max  # the tie code of a strict cut: no tie goes right


def _right(code: np.ndarray, split: np.ndarray, tie: np.ndarray, order: np.ndarray, tsplit: np.ndarray,
           osplit: np.ndarray) -> np.ndarray:
    """The side of each row of a cut (True: right): above the split, or at it with (tie code, order) above the
    threshold (relaxed cuts; a strict cut's tie code NO_TIE sends every tie left)."""
    return (code > split) | ((code == split) & ((tie > tsplit) | ((tie == tsplit) & (order > osplit))))


class Tree:
    """The upper cuts so far, as arrays indexed by partition id (ids 0..roots-1: the partitions the run starts
    from): the cut dimension (-1 for an uncut partition), the split code (codes <= split go left), the left child's
    id (the right child's is one more) and, for relaxed cuts, the ties' threshold (_right)."""

    def __init__(self, roots: int = 1) -> None:
        self.dim = np.full(roots, -1, np.int64)
        self.split = np.zeros(roots, np.int64)
        self.child = np.zeros(roots, np.int64)
        self.tdim = np.zeros(roots, np.int64)
        self.tsplit = np.full(roots, NO_TIE, np.int64)
        self.osplit = np.zeros(roots, np.int64)
        self.depth = 0
        self.relaxed = False

    def cut(self, pids: np.ndarray, dims: np.ndarray, splits: np.ndarray, tdims: np.ndarray | None = None,
            tsplits: np.ndarray | None = None, osplits: np.ndarray | None = None) -> np.ndarray:
        """Cut partitions ``pids``; returns the left children's ids (right = left + 1)."""
        first = len(self.dim)
        left = first + 2 * np.arange(len(pids))
        grow = 2 * len(pids)
        self.dim = np.concatenate((self.dim, np.full(grow, -1, np.int64)))
        for name, fill in (("split", 0), ("child", 0), ("tdim", 0), ("tsplit", NO_TIE), ("osplit", 0)):
            setattr(self, name, np.concatenate((getattr(self, name), np.full(grow, fill, np.int64))))
        self.dim[pids], self.split[pids], self.child[pids] = dims, splits, left
        if tdims is not None:
            self.tdim[pids], self.tsplit[pids], self.osplit[pids] = tdims, tsplits, osplits
            self.relaxed = True
        self.depth += 1
        return left

    def assign(self, codes: np.ndarray, start: np.ndarray | None = None, order: np.ndarray | None = None):
        """Partition id of each row, from its root ``start`` (default 0): the cuts applied one level at a time,
        all rows at once (relaxed cuts also read the rows' ``order``)."""
        pid = np.zeros(len(codes), np.int64) if start is None else np.array(start, np.int64)
        for _ in range(self.depth):
            at = np.flatnonzero(self.dim.take(pid) >= 0)
            if not len(at):
                break
            p = pid.take(at)
            c, sp = codes[at, self.dim.take(p)], self.split.take(p)
            if self.relaxed:
                right = _right(c, sp, codes[at, self.tdim.take(p)], order.take(at), self.tsplit.take(p),
                               self.osplit.take(p))
            else:
                right = c > sp
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


def _column(batch, name: str) -> np.ndarray:
    return batch.column(name).to_numpy(zero_copy_only=False)


def _read(it, packing: Packing, tree: Tree, open_ids: np.ndarray, active: np.ndarray | None = None):
    """Each batch of packed entries with its codes (of the ``active`` dimensions, default all), and the open slot
    and row of those in an open partition: (batch, codes, slot, rows), unpacked and assigned to the tree (from
    their ROOT, with their ORDER for relaxed cuts) once for every pass that reads the batch."""
    slot = _slots(tree, open_ids)
    for batch in it:
        codes = packing.unpack([_column(batch, w) for w in packing.names])
        names = batch.schema.names
        start = _column(batch, ROOT) if ROOT in names else None
        order = _column(batch, ORDER) if tree.relaxed else None
        s = slot.take(tree.assign(codes, start, order))
        keep = np.flatnonzero(s >= 0)
        yield batch, codes if active is None else codes[:, active], s.take(keep), keep


def _histograms(words: DataFrame, tree: Tree, open_ids: np.ndarray, widths: np.ndarray,
                packing: Packing, active: np.ndarray | None = None) -> DataFrame:
    """The executors' partial histograms of the open partitions (_histogram_batches) along ``active``."""
    histograms = _histogram_batches(open_ids, widths)
    return words.mapInArrow(lambda it: histograms(_read(it, packing, tree, open_ids, active)), HIST_SCHEMA)


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
    """Per open partition and dimension: size, exact lowest and highest code, the median split code, the rows up
    to it and the rows below it (Mondrian's frequency-set splitVal: the first code whose cumulative count reaches
    max(floor(n / 2), 1), as mondrian._evaluate reads it). Rows (pid, dim, size, lo, hi, split, upto, below).

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
        F.min(F.when(reached, F.col("code"))).alias("split"), F.min(F.when(reached, F.col("cum"))).alias("upto"),
        F.min(F.when(reached, F.col("cum") - F.col("cnt"))).alias("below"))
    return np.array([tuple(r) for r in stats.collect()], dtype=np.int64).reshape(-1, 8)


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
                     cum.take(at) - before, cum.take(at) - cnt.take(at) - before], axis=1)


def _grid(stats: np.ndarray, open_ids: np.ndarray, d: int) -> np.ndarray:
    """_medians' rows as a (open partitions, dimensions, 6) grid of (size, lo, hi, split, upto, below)."""
    grid = np.zeros((len(open_ids), d, 6), np.int64)
    grid[np.searchsorted(open_ids, stats[:, 0]), stats[:, 1]] = stats[:, 2:]  # open_ids is sorted
    return grid


def _widths(stats: np.ndarray, open_ids: np.ndarray, scales: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The open partitions' statistics as a (partitions x dimensions x fields) grid (``_grid``) and each
    dimension's normalized range from its exact bounds, with the same float operations as mondrian_groups (so exact
    ties resolve the same way)."""
    m = np.array([len(s) for s in scales], dtype=np.int64)
    span = np.array([float(s[-1] - s[0]) if len(s) else 0.0 for s in scales])
    safe_span = np.where(span > 0, span, np.inf)
    flat_scale = np.concatenate([np.asarray(s, dtype=float) for s in scales])
    scale_off = np.cumsum(m) - m
    grid = _grid(stats, open_ids, len(scales))
    lo, hi = grid[:, :, 1], grid[:, :, 2]
    return grid, (flat_scale.take(hi + scale_off) - flat_scale.take(lo + scale_off)) / safe_span


def _choose(stats: np.ndarray, open_ids: np.ndarray, scales: list[np.ndarray], k: int,
            l_ok: np.ndarray | None = None):
    """Mondrian's ChooseDimension with the classic fallback, per open partition: (size, best dim, split, upto,
    cut?) in ``open_ids`` order. Widths are computed with the same float operations as mondrian_groups, so exact
    ties resolve the same way (numpy's argmax: the lowest dimension). ``l_ok`` (open partitions x dimensions):
    whether the median cut along the dimension leaves both sides l-diverse (_l_diverse), an extra condition."""
    grid, width = _widths(stats, open_ids, scales)
    size, split, upto = grid[:, 0, 0], grid[:, :, 3], grid[:, :, 4]
    # allowable cut (strict): >= k rows on each side; a partition below 2k rows has none
    ok = (width > 0) & (upto <= (size - k)[:, None]) & (size >= 2 * k)[:, None]
    if l_ok is not None:  # as mondrian_groups: a cut breaking l-diversity is not allowable, the next widest is tried
        ok &= l_ok
    score = np.where(ok, width, -1.0)
    best = score.argmax(axis=1)
    rows = np.arange(len(open_ids))
    return size, best, split[rows, best], upto[rows, best], score[rows, best] > 0


def _sens_bounds(words: DataFrame, tree: Tree, open_ids: np.ndarray, d: int, n_s: int,
                 packing: Packing, active: np.ndarray | None = None) -> DataFrame:
    """The executors' partial sensitive bounds of the open partitions (_bounds_batches) along ``active``."""
    bounds = _bounds_batches(open_ids, d, n_s)
    return words.mapInArrow(lambda it: bounds(_read(it, packing, tree, open_ids, active)), BOUNDS_SCHEMA)


def _bounds_batches(open_ids: np.ndarray, d: int, n_s: int):
    """(pid, dim, s, lo, hi): per open partition, dimension and sensitive code present in it, the lowest and
    highest code of the dimension among the partition's rows holding that sensitive value, from the read batches
    (``_read``) of ``words``' packed codes of the distinct (QI combination, sensitive value) pairs; reduced per
    Spark partition when the bins (open partitions x dimensions x sensitive values) fit DENSE_BINS, else per batch
    (Spark reduces them).

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
                   packing: Packing, l: int, active: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """_medians and _l_diverse of one level in one Spark job (both small enough for the driver): one pass of the
    executors over ``words`` (packed codes, CNT and SCODE) makes both the histograms and the sensitive bounds, and
    they go through one shuffle as one table, told apart by s < 0 (a histogram bin) or code < 0 (a sensitive
    value's bounds). The pass reads each batch of its Spark partition once (``_read``: unpacked and assigned to the
    tree) and holds what it read while it makes both."""
    d = len(widths)
    hist_of = _histogram_batches(open_ids, widths)
    bounds_of = _bounds_batches(open_ids, d, n_s)

    def batches(it):
        held = list(_read(it, packing, tree, open_ids, active))
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


def _choose_relaxed(stats: np.ndarray, open_ids: np.ndarray, scales: list[np.ndarray], ban: np.ndarray):
    """Relaxed Mondrian's choice per open partition (mondrian_groups(strict=False)): the widest dimension (exact
    normalized range > 0, lowest on exact ties) not banned by l, always cut; the next widest dimension (any, banned
    or not, as mondrian._next_widest) orders the median's ties. Returns (size, best, split, below, tie dim, cut?)."""
    grid, width = _widths(stats, open_ids, scales)
    size, split, below = grid[:, 0, 0], grid[:, :, 3], grid[:, :, 5]
    score = np.where((width > 0) & ~ban, width, -1.0)
    best = score.argmax(axis=1)
    rows = np.arange(len(open_ids))
    others = width.copy()
    others[rows, best] = -1.0
    return size, best, split[rows, best], below[rows, best], others.argmax(axis=1), score[rows, best] > 0


def _summed(keyed, total: int):
    """(key, count) arrays of the keys (0..total-1) of each array ``keyed`` yields: summed over the whole Spark
    partition when they fit DENSE_BINS, else per array."""
    acc = np.zeros(total, np.int64) if total <= DENSE_BINS else None
    for keys in keyed:
        if acc is not None and total <= 4 * len(keys):  # bincount costs the bins: worth it when they are few
            acc += np.bincount(keys, minlength=total)
            continue
        key, cnt = np.unique(keys, return_counts=True)
        if acc is None:
            yield key, cnt
        else:
            acc[key] += cnt
    if acc is not None and acc.any():
        idx = np.flatnonzero(acc)
        yield idx, acc.take(idx)


@dataclass
class _Spec:
    """What one run of Mondrian is (picklable: executors get it): the packing of its entries' codes, each packed
    dimension's scale, the ``active`` dimensions it may cut (the others are held: shared columns in stage 2), k,
    strict or relaxed cuts, the rows an executor finishes, and distinct l-diversity (n_s sensitive values)."""

    packing: Packing
    scales: list
    active: np.ndarray
    k: int
    strict: bool
    max_rows: int
    l: int | None = None
    n_s: int = 0

    @property
    def cut_scales(self) -> list:
        return [self.scales[j] for j in self.active]

    def columns(self, table: DataFrame) -> list[str]:
        """The columns of ``table`` a level reads: packed codes, rows, and as needed order, root, sensitive code."""
        return [*self.packing.names, CNT, *([ORDER] if not self.strict else []),
                *([ROOT] if ROOT in table.columns else []), *([SCODE] if self.l is not None else [])]

    def classes(self, table: pa.Table, dedupe: bool = False):
        """The local Mondrian on one leaf's entries (inside an executor): (entries, their codes, class per entry,
        class boxes lo and hi over the active dimensions). Each entry is repeated by its rows (strict cuts never part
        them: its class is its first copy's); relaxed entries are rows, taken in the row order, as the local frame's.
        A leaf above max_rows was left whole by Spark only when no cut was allowable: one class, no copies made.
        ``dedupe``: one entry per distinct codes (the (combination, sensitive value) pairs of l-diversity)."""
        codes = self.packing.unpack([table.column(w).to_numpy() for w in self.packing.names])
        rows = table.column(CNT).to_numpy()
        if not self.strict:
            order = np.argsort(table.column(ORDER).to_numpy(), kind="stable")
            table, codes, rows = table.take(pa.array(order)), codes.take(order, axis=0), rows.take(order)
        cut = codes[:, self.active]
        if rows.sum() > self.max_rows:
            groups, lo, hi = np.zeros(len(codes), np.int64), cut.min(axis=0)[None], cut.max(axis=0)[None]
        else:
            sens = None if self.l is None else np.repeat(table.column(SCODE).to_numpy(), rows)
            groups, lo, hi = mondrian_groups(np.repeat(cut, rows, axis=0), self.cut_scales, self.k, strict=self.strict,
                                             sensitive=sens, l=self.l, return_boxes=True)
            groups = groups.take(np.cumsum(rows) - rows)
        if dedupe:
            table, codes, groups = _first_of_codes(table, codes, groups)
        return table, codes, groups, lo, hi


def _first_of_codes(table: pa.Table, codes: np.ndarray, groups: np.ndarray):
    """One entry per distinct codes: the first of each run of equal codes."""
    order = np.lexsort(codes.T[::-1])
    ordered = codes.take(order, axis=0)
    first = order.take(np.flatnonzero(np.r_[True, (ordered[1:] != ordered[:-1]).any(axis=1)]))
    return table.take(pa.array(first)), codes.take(first, axis=0), groups.take(first)


def _thresholds(words: DataFrame, spec: _Spec, tree: Tree, cids: np.ndarray, best: np.ndarray, split: np.ndarray,
                tdim: np.ndarray, need: np.ndarray, widths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where the left side of each relaxed cut of partitions ``cids`` ends among the median's ties: (tie code,
    order) of the ``need``-th tie in (tie-dimension code, order) order, as mondrian._sides ranks them. Dimensions
    are ``spec.active`` positions. Two Spark jobs: the ties' tie-dimension histogram (summed in executors; the
    driver finds the code), then the ties at that code, each executor keeping per partition the lowest orders, as
    many as the left can still take (the one wanted is among them), ranked by a Spark window (one order per
    partition reaches the driver)."""
    packing, active = spec.packing, spec.active
    tw = widths.take(tdim)
    base = np.cumsum(tw) - tw
    total = int(tw.sum())

    def tie_codes(it):
        def keyed():
            for _batch, codes, s, keep in _read(it, packing, tree, cids, active):
                c, r = codes.take(keep, axis=0), np.arange(len(keep))
                tie = c[r, best.take(s)] == split.take(s)
                yield (base.take(s) + c[r, tdim.take(s)])[tie]

        for key, cnt in _summed(keyed(), total):
            slot = np.searchsorted(base, key, side="right") - 1
            yield pa.RecordBatch.from_arrays([pa.array(cids.take(slot)), pa.array(key - base.take(slot)),
                                              pa.array(cnt.astype(np.int64))], names=["pid", "code", "cnt"])

    h = (words.mapInArrow(tie_codes, "pid long, code long, cnt long").groupBy("pid", "code")
         .agg(F.sum("cnt").alias("cnt")).toArrow())
    pid, code, cnt = (h.column(c).to_numpy(zero_copy_only=False).astype(np.int64) for c in ("pid", "code", "cnt"))
    slot = np.searchsorted(cids, pid)
    order = np.lexsort((code, slot))
    slot, code, cnt = slot.take(order), code.take(order), cnt.take(order)
    cum = cnt.cumsum()
    start = np.searchsorted(slot, np.arange(len(cids)))  # every partition cut has ties: its split's rows
    before = cum.take(start) - cnt.take(start)
    at = cum.searchsorted(before + need)  # the first tie code whose running count reaches what the left takes
    tsplit = code.take(at)
    left = need - (cum.take(at) - cnt.take(at) - before)  # ties at that code the left still takes

    def tie_orders(it):
        for batch, codes, s, keep in _read(it, packing, tree, cids, active):
            c, r = codes.take(keep, axis=0), np.arange(len(keep))
            sel = (c[r, best.take(s)] == split.take(s)) & (c[r, tdim.take(s)] == tsplit.take(s))
            ss, o = s[sel], _column(batch, ORDER).take(keep)[sel]
            srt = np.lexsort((o, ss))
            ss, o = ss.take(srt), o.take(srt)
            few = (np.arange(len(ss)) - np.searchsorted(ss, ss)) < left.take(ss)  # the rest cannot be the one
            if few.any():
                ss, o = ss[few], o[few]
                yield pa.RecordBatch.from_arrays([pa.array(cids.take(ss)), pa.array(o.astype(np.int64)),
                                                  pa.array(left.take(ss))], names=["pid", "ord", "need"])

    picked = (words.mapInArrow(tie_orders, "pid long, ord long, need long")
              .withColumn("rn", F.row_number().over(Window.partitionBy("pid").orderBy("ord")))
              .where(F.col("rn") == F.col("need")).select("pid", "ord").toArrow())
    osplit = np.zeros(len(cids), np.int64)
    osplit[np.searchsorted(cids, picked.column("pid").to_numpy())] = picked.column("ord").to_numpy()
    return tsplit, osplit


def _relaxed_l(words: DataFrame, spec: _Spec, tree: Tree, cids: np.ndarray, best: np.ndarray, split: np.ndarray,
               tdim: np.ndarray, tsplit: np.ndarray, osplit: np.ndarray) -> np.ndarray:
    """Whether both sides of each relaxed cut (as _right sends the rows) hold >= l distinct sensitive values
    (mondrian._l_ok): executors emit their distinct (partition, side, value), Spark counts them."""
    packing, active, n_s = spec.packing, spec.active, spec.n_s

    def sides(it):
        for batch, codes, s, keep in _read(it, packing, tree, cids, active):
            c, r = codes.take(keep, axis=0), np.arange(len(keep))
            right = _right(c[r, best.take(s)], split.take(s), c[r, tdim.take(s)], _column(batch, ORDER).take(keep),
                           tsplit.take(s), osplit.take(s))
            key = np.unique((s * 2 + right) * n_s + _column(batch, SCODE).astype(np.int64).take(keep))
            if len(key):
                yield pa.RecordBatch.from_arrays([pa.array(cids.take(key // (2 * n_s))),
                                                  pa.array((key // n_s % 2).astype(np.int32)),
                                                  pa.array((key % n_s).astype(np.int32))], names=["pid", "side", "s"])

    got = (words.mapInArrow(sides, "pid long, side int, s int").groupBy("pid", "side")
           .agg(F.countDistinct("s").alias("n")).toArrow())
    count = np.zeros((len(cids), 2), np.int64)
    count[np.searchsorted(cids, got.column("pid").to_numpy()), got.column("side").to_numpy()] = got.column(
        "n").to_numpy()
    return count.min(axis=1) >= spec.l


def _grow(table: DataFrame, spec: _Spec, roots: np.ndarray, root_stats: np.ndarray | None = None,
          root_l: np.ndarray | None = None) -> Tree:
    """The upper cuts of one run, level by level, by Spark aggregations over ``table`` (its entries, each starting
    in its ROOT, default 0): ``roots`` holds each root's rows (0 for roots that hold none here). A partition stays
    open for Spark while it is too big for one executor and may still be cut (>= 2k rows). ``root_stats``: _medians
    rows of roots already known (the scan's counts make the whole input's), and ``root_l`` their _l_diverse when
    they are all the open roots."""
    k, a = spec.k, len(spec.active)
    scales = spec.cut_scales
    widths = np.array([max(len(s), 1) for s in scales], np.int64)
    words = table.select(*spec.columns(table))
    tree = Tree(len(roots))
    size_of = np.asarray(roots, np.int64)
    ban = np.zeros((len(roots), a), bool)  # relaxed with l: dimensions whose cut broke l, per partition
    open_ids = np.flatnonzero((size_of > spec.max_rows) & (size_of >= 2 * k))
    first = True
    while len(open_ids):
        bins = len(open_ids) * int(widths.sum())
        l_ok = None
        if first and root_stats is not None:
            known = np.isin(open_ids, root_stats[:, 0])
            stats = root_stats[np.isin(root_stats[:, 0], open_ids)]
            if known.all():
                l_ok = root_l
            else:  # the other roots' histograms, by Spark
                rest = open_ids[~known]
                stats = np.concatenate((stats, _medians(_histograms(words, tree, rest, widths, spec.packing,
                                                                    spec.active), len(rest) * int(widths.sum()))))
        elif spec.strict and spec.l is not None and max(bins, len(open_ids) * a * spec.n_s) <= COLLECT_BINS:
            stats, l_ok = _medians_and_l(words, tree, open_ids, widths, spec.n_s, spec.packing, spec.l,
                                         spec.active)  # one job per level, as without l
        else:
            stats = _medians(_histograms(words, tree, open_ids, widths, spec.packing, spec.active), bins)
        first = False
        retry = np.zeros(len(open_ids), bool)
        if spec.strict:
            if spec.l is not None and l_ok is None:
                l_ok = _l_diverse(_sens_bounds(words, tree, open_ids, a, spec.n_s, spec.packing, spec.active),
                                  stats, open_ids, a, spec.n_s, spec.l)
            size, best, split, left, cut = _choose(stats, open_ids, scales, k, l_ok)
            if cut.any():
                tree.cut(open_ids[cut], spec.active.take(best[cut]), split[cut])
        else:
            size, best, split, below, tdim, cut = _choose_relaxed(stats, open_ids, scales, ban[open_ids])
            left = size >> 1
            c = np.flatnonzero(cut)
            if len(c):
                # relaxed multidimensional partitioning (LeFevre et al., ICDE 2006): |lhs| = floor(n / 2), the
                # median's rows split between the sides (ours, as mondrian._sides: by next widest code, then order)
                tsplit, osplit = _thresholds(words, spec, tree, open_ids[c], best[c], split[c], tdim[c],
                                             (left - below)[c], widths)
                if spec.l is not None:
                    ok = _relaxed_l(words, spec, tree, open_ids[c], best[c], split[c], tdim[c], tsplit, osplit)
                    retry[c[~ok]], cut[c[~ok]] = True, False
                    ban[open_ids[c[~ok]], best[c[~ok]]] = True  # as mondrian_groups: the next widest, next level
                    c, tsplit, osplit = c[ok], tsplit[ok], osplit[ok]
                if len(c):
                    tree.cut(open_ids[c], spec.active.take(best[c]), split[c], spec.active.take(tdim[c]), tsplit,
                             osplit)
        if not cut.any() and not retry.any():
            break
        kid_size = np.stack((left[cut], (size - left)[cut]), axis=1).reshape(-1)  # ids: left, right, left, ...
        kids = len(size_of) + np.arange(len(kid_size))
        size_of = np.concatenate((size_of, kid_size))
        ban = np.concatenate((ban, np.zeros((len(kid_size), a), bool)))
        open_ids = np.sort(np.concatenate((kids[(kid_size > spec.max_rows) & (kid_size >= 2 * k)],
                                           open_ids[retry])))
    return tree


def _leaves(table: DataFrame, tree: Tree, packing: Packing) -> DataFrame:
    """``table`` with each entry's leaf (``__leaf``): the upper cuts applied in executors."""
    schema = T.StructType(table.schema.fields + [T.StructField("__leaf", T.LongType(), False)])

    def batches(it):
        for batch in it:
            names = batch.schema.names
            leaf = tree.assign(packing.unpack([_column(batch, w) for w in packing.names]),
                               _column(batch, ROOT) if ROOT in names else None,
                               _column(batch, ORDER) if tree.relaxed else None)
            yield pa.RecordBatch.from_arrays(batch.columns + [pa.array(leaf)], names=schema.names)

    return table.mapInArrow(batches, schema)


def _label_columns(encs: list[QIEncoding], lo: np.ndarray, hi: np.ndarray, groups: np.ndarray,
                   merge: bool) -> dict[str, pa.Array]:
    """Each entry's labels (``__l{j}``) from its class's code box (generalize.code_labels, the local labels) and,
    with ``merge``, the class's widened box (``__a{j}``, ``__b{j}``), which classes are merged by."""
    cols = {}
    for j, e in enumerate(encs):
        labs, inv, a, b = code_labels(e, lo[:, j].astype(np.int64), hi[:, j].astype(np.int64))
        cols[f"__l{j}"] = pa.array([str(x) for x in labs], pa.string()).take(pa.array(inv.take(groups)))
        if merge:
            cols[f"__a{j}"], cols[f"__b{j}"] = pa.array(a.take(groups)), pa.array(b.take(groups))
    return cols


def _out_fields(key_fields: list, d: int, merge: bool) -> list:
    """The schema of a run's labelled entries: their keys, labels, widened boxes (with ``merge``) and class."""
    return (key_fields + [T.StructField(f"__l{j}", T.StringType(), False) for j in range(d)]
            + [T.StructField(f"__{x}{j}", T.LongType(), False) for j in range(d) for x in "ab" if merge]
            + [T.StructField(CLASS, T.LongType(), False)])


def _arrow_schema(fields: list) -> pa.Schema:
    return pa.schema([pa.field(f.name, _arrow_type(f.dataType), f.nullable) for f in fields])


def _finisher(spec: _Spec, encs: list[QIEncoding], keys: list[str], fields: list, merge: bool,
              held: tuple[np.ndarray, np.ndarray] | None = None):
    """The function finishing one leaf inside an executor (_Spec.classes) and labelling its entries: (keys,
    labels, widened box with ``merge``, class). ``held``: the code bounds (roots x dimensions) of the dimensions the
    run does not cut, per root (stage 2's shared columns: the box of its stage-1 class)."""
    schema = _arrow_schema(fields)
    d = len(encs)
    dedupe = spec.strict and spec.l is not None  # one row per QI combination: its pairs share its class

    def finish(table: pa.Table) -> pa.Table:
        leaf = int(table.column("__leaf")[0].as_py())
        table, _codes, groups, lo, hi = spec.classes(table, dedupe)
        if len(spec.active) < d:
            root = int(table.column(ROOT)[0].as_py())
            full_lo, full_hi = np.repeat(held[0][root][None], len(lo), 0), np.repeat(held[1][root][None], len(lo), 0)
            full_lo[:, spec.active], full_hi[:, spec.active] = lo, hi
            lo, hi = full_lo, full_hi
        cols = {q: table.column(q) for q in keys}
        cols.update(_label_columns(encs, lo, hi, groups, merge))
        cols[CLASS] = pa.array((np.int64(leaf) << 32) | groups)
        return pa.Table.from_arrays([cols[f.name] for f in schema], schema=schema)

    return finish


def _coded(src: DataFrame, keys: list[str], qis: list[str], kind_of: dict[str, str], encs: list[QIEncoding],
           packing: Packing, sens_values: list | None = None, order: bool = False) -> DataFrame:
    """The entries of ``src`` with their packed codes: (keys, words, CNT[, ORDER][, SCODE]), coded in executors.
    ``src`` holds the distinct combinations with their rows (CNT), or the rows (``order``: each row one entry with
    its ORDER); with ``sens_values`` (l-diversity) each entry's sensitive code SCODE, its value's index in
    ``sens_values``."""
    d = len(qis)
    rows = F.col(CNT) if CNT in src.columns else F.lit(1).cast("long").alias(CNT)
    src = src.select(*keys, *[c.alias(f"__v{j}") for j, c in enumerate(prepared(src, qis, kind_of))], rows,
                     *([ORDER] if order else []), *([SENS] if sens_values is not None else []))
    schema = T.StructType([src.schema[q] for q in keys] + [T.StructField(w, T.LongType(), False)
                                                           for w in packing.names]
                          + [T.StructField(CNT, T.LongType(), False)]
                          + ([T.StructField(ORDER, T.LongType(), True)] if order else [])
                          + ([T.StructField(SCODE, T.IntegerType(), False)] if sens_values is not None else []))

    def batches(it):
        for batch in it:
            words = packing.pack(codes_of(batch, encs, [f"__v{j}" for j in range(d)]))
            extra = [batch.column(ORDER)] if order else []
            if sens_values is not None:  # a NULL sensitive value is a value (as pandas.factorize's) and matches NULL
                col = batch.column(SENS)
                extra.append(pc.index_in(col, value_set=pa.array(sens_values, type=col.type)).cast(pa.int32()))
            yield pa.RecordBatch.from_arrays([batch.column(q) for q in keys] + [pa.array(w) for w in words]
                                             + [batch.column(CNT).cast(pa.int64())] + extra, names=schema.names)

    return src.mapInArrow(batches, schema)


def _hierarchies(hierarchies: dict | None, qis: list[str]) -> dict:
    """Each named QI's loaded hierarchy (a Hierarchy, a DataFrame or an ARX CSV path, as locally), after the local
    check of the names (encoding.encode)."""
    from crowddb.anonymize.hierarchy import Hierarchy

    unknown = [c for c in hierarchies or {} if c not in qis]
    if unknown:
        raise UnknownColumnError(f"kinds/hierarchies name columns that are not quasi-identifiers: {unknown}")
    return {q: Hierarchy.load(h, q) for q, h in (hierarchies or {}).items() if h is not None}
def _order_column(df: DataFrame, order_by: str | None) -> str:
    """The column relaxed cuts order rows by: required, of integers (checked here, before any Spark job; NULLs and
    repeats are checked once the rows are coded)."""
    if order_by is None:
        raise ArgumentError("relaxed Mondrian (strict=False) on Spark needs order_by=<a column of unique integers>: "
                            "relaxed cuts part rows with equal quasi-identifiers by their order (locally the frame's "
                            "row order), and a Spark DataFrame has none. Pass e.g. order_by='id', or use strict=True")
    if order_by not in df.columns:
        raise UnknownColumnError(f"unknown order_by column {order_by!r}; columns are {df.columns}")
    if not isinstance(df.schema[order_by].dataType, T.IntegralType):
        raise ArgumentError(f"order_by={order_by!r} must be a column of integers for relaxed Mondrian on Spark (its "
                            f"values order the rows), got {df.schema[order_by].dataType.simpleString()}; add a row "
                            "number column (e.g. the file's row index) and order by it")
    return order_by


def _check_order(rows: DataFrame, n: int, order_by: str) -> None:
    """order_by tells every row apart: no NULL, no repeat (one aggregation, which also fills the rows' cache)."""
    given, distinct = rows.agg(F.count(ORDER), F.count_distinct(ORDER)).collect()[0]
    if given != n or distinct != n:
        raise ArgumentError(f"order_by={order_by!r} must hold a different integer in every row ({n} rows, {n - given} "
                            f"NULL, {distinct} distinct values): relaxed cuts take rows in its order")


def anonymize(df: DataFrame, quasi_identifiers, k: int, *, strict: bool = True, sensitive: str | None = None,
              l: int | None = None, hierarchies: dict | None = None, kinds: dict[str, str] | None = None,
              shared=None, order_by: str | None = None,
              max_partition_rows: int = DEFAULT_PARTITION_ROWS) -> DataFrame:
    """k-anonymous release of a Spark DataFrame by Mondrian: the same classes as
    ``crowddb.anonymize.anonymize(frame, quasi_identifiers, k, strict=..., shared=...)`` on the same rows; with
    ``sensitive`` and ``l``, distinctly l-diverse classes, those of ``crowddb.anonymize.anonymize(..., sensitive=...,
    l=...)``; with ``hierarchies`` (QI -> ARX CSV path, DataFrame or Hierarchy) the local hierarchy labels and classes.

    Returns ``df``'s columns with each quasi-identifier replaced by its class's label ('[23-35]', '{a,b}', '*'; as
    locally) and a ``class`` column (unique per class, not dense). ``order_by`` names a column that orders the rows
    for categorical codes (first appearance; module docs of crowddb/spark/encoding.py) and, required with
    ``strict=False``, for relaxed cuts (unique integers: the local classes are those of the frame sorted by it).
    ``shared`` (a subset of the QIs): rows equal on them get equal labels on them (crowddb/anonymize/shared.py).
    Partitions of at most ``max_partition_rows`` rows are finished inside one executor each. Runs the Spark jobs of
    the cuts before it returns; the release itself is a join of ``df`` with the classes of its distinct QI
    combinations (relaxed: of its rows, by ``order_by``).
    """
    if isinstance(max_partition_rows, bool) or not isinstance(max_partition_rows, (int, np.integer)) or (
            max_partition_rows < 1):
        raise ArgumentError(f"max_partition_rows must be a positive integer, got {max_partition_rows!r}")
    if not isinstance(strict, (bool, np.bool_)):
        raise ArgumentError(f"strict must be True or False, got {strict!r}")
    qis = qi_list(quasi_identifiers)
    if CLASS in df.columns:
        raise ArgumentError(f"the input already has a column named {CLASS!r}, which the release adds")
    kind_of = kinds_of(df, qis, k, kinds)
    k = int(k)
    shared = local_shared.validate_shared(shared, qis, df.columns)
    if shared and len(shared) == len(qis):  # as locally: every QI shared is strict Mondrian (equal rows never part)
        strict, shared = True, []
    hierarchies = _hierarchies(hierarchies, qis)
    l = check_l(sensitive, l, qis, df.columns)  # the local checks, before any Spark job
    if not strict:
        order_by = _order_column(df, order_by)
    src = df
    if l is not None:  # the rows grouped by (QI combination, sensitive value): what the l checks need, no more
        value = F.col(sensitive)
        if isinstance(df.schema[sensitive].dataType, (T.FloatType, T.DoubleType)):
            value = F.when(F.isnan(value), F.lit(None)).otherwise(value)  # pandas' NaN is its NULL: one value
        src = df.withColumn(SENS, value)
    n, n_combos, encs, counts, combos, sens = scan(src, qis, kind_of, k, order_by, SENS if l is not None else None,
                                                   hierarchies)
    cached = [combos]
    try:
        sens_values = sens.values if sens is not None else None
        n_s = len(sens_values) if l is not None else 0
        if l is not None and n_s < l:  # as locally (api._sensitive_codes): no partition can be l-diverse
            raise PrivacyError(f"{sensitive!r} has only {n_s} distinct values; l={l} is impossible")
        scales = [e.scale for e in encs]
        d = len(qis)
        packing = Packing.of(encs)
        spec = _Spec(packing, scales, np.arange(d), k, bool(strict), int(max_partition_rows), l, n_s)
        # every later job reads the entries, coded once: the distinct combinations (strict) or the rows (relaxed),
        # never the rows' other columns again until the release
        if strict:
            keys = qis
            entries = _coded(combos, qis, qis, kind_of, encs, packing, sens_values)
        else:
            keys = [order_by]
            entries = _coded(src.withColumn(ORDER, F.col(order_by).cast("long")), keys, qis, kind_of, encs, packing,
                             sens_values, order=True)
        entries = entries.persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(entries)
        if not strict:
            _check_order(entries, n, order_by)
        widened = any(e.hierarchy is not None and e.kind != "numeric" for e in encs)
        merge = widened or not strict  # relaxed: equal rows parted may meet again in classes of equal boxes
        key_fields = [entries.schema[q] for q in keys]
        if shared:
            classes = _shared(entries, spec, encs, keys, key_fields, merge, n, qis, shared, combos, kind_of,
                              sens_values, counts, cached)
        else:
            root_stats, root_l = _root(counts), None
            if l is not None and strict:  # the root's sensitive bounds came with scan
                cell = sens.hi >= 0
                root_l = _l_count(pa.table({"pid": np.zeros(int(cell.sum()), np.int64), "dim": np.nonzero(cell)[0],
                                            "lo": sens.lo[cell], "hi": sens.hi[cell]}),
                                  _grid(root_stats, np.zeros(1, np.int64), d)[:, :, 3], np.zeros(1, np.int64), l)
            tree = _grow(entries, spec, np.array([n]), root_stats, root_l)
            # the leaves, each finished whole by the local Mondrian in one executor: each entry's labels and class
            fields = _out_fields(key_fields, d, merge)
            classes = (_leaves(entries, tree, packing).groupBy("__leaf")
                       .applyInArrow(_finisher(spec, encs, keys, fields, merge), T.StructType(fields)))
        if merge:
            # as the local release (generalize.assemble): a class is what a reader tells apart, so Mondrian classes
            # whose widened boxes (and so labels) coincide are one class, in a leaf or across leaves; its id is the
            # smallest of theirs (one shuffle of the entries by box, never of the rows' other columns)
            box = [f"__{x}{j}" for j in range(d) for x in "ab"]
            classes = classes.withColumn(CLASS, F.min(CLASS).over(Window.partitionBy(*box))).drop(*box)
        # computed now and kept by the returned DataFrame (freed with it), so the caches can go
        classes = classes.localCheckpoint(eager=True)
    finally:
        for table in cached:
            table.unpersist()
    # a hash table in every executor while the combinations are few; else Spark shuffles (relaxed: a class per row,
    # never forced through the driver as a broadcast; Spark's adaptive joins broadcast it when it is small)
    small = strict and n_combos <= BROADCAST_COMBOS
    released = df.join(F.broadcast(classes) if small else classes, on=keys)  # equal values: Spark's equality
    label = {q: f"__l{j}" for j, q in enumerate(qis)}
    return released.select(*[F.col(label[c]).alias(c) if c in label else F.col(c) for c in df.columns], CLASS)


# ------------------------------------------------------------------------------------------ shared columns
@dataclass
class _Nodes:
    """The ladder's nodes Spark made (node 0: all rows), as arrays by node id: parent (-1 for the root), level made
    at, rows, and the tight code box over the shared columns."""

    parent: np.ndarray
    born: np.ndarray
    size: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    def add(self, parent: np.ndarray, born: int, size: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        ids = len(self.parent) + np.arange(len(parent))
        self.parent = np.concatenate((self.parent, parent))
        self.born = np.concatenate((self.born, np.full(len(parent), born)))
        self.size = np.concatenate((self.size, size))
        self.lo, self.hi = np.concatenate((self.lo, lo)), np.concatenate((self.hi, hi))
        return ids

    def depth(self) -> np.ndarray:
        """Each node's depth (parents come before their children)."""
        depth = np.zeros(len(self.parent), np.int64)
        for v in range(1, len(self.parent)):  # nodes x 1 numbers on the driver: a few per big node
            depth[v] = depth[self.parent[v]] + 1
        return depth


def _ladder_level(lad: DataFrame, nodes: _Nodes, go: np.ndarray, spec_s: _Spec, born: int, cached: list,
                  root_stats: np.ndarray) -> DataFrame:
    """One level (``born``) of the ladder for the big nodes ``go``: strict Mondrian with spec_s.k inside each (a
    Spark run over their distinct shared combinations, starting from the nodes); a node cut into two classes or more
    gets them as children (added to ``nodes``), the others stay. Returns the entries with their new nodes.
    ``root_stats``: the root node's _medians rows over the shared columns (from the scan's counts)."""
    s = len(spec_s.active)
    roots = np.zeros(len(nodes.parent), np.int64)
    roots[go] = nodes.size[go]
    work = lad.where(F.col(NODE).isin([int(v) for v in go])).withColumn(ROOT, F.col(NODE))
    tree = _grow(work, spec_s, roots, root_stats)
    if not tree.depth:  # every node of ``go`` is open (big, >= 2k) and none could be cut: each is one class, itself
        return lad
    fields = (work.schema.fields + [T.StructField(CLASS, T.LongType(), False)]
              + [T.StructField(f"__{x}{j}", T.LongType(), False) for j in range(s) for x in "ab"])
    schema = _arrow_schema(fields)
    names = work.columns

    def finish(table: pa.Table) -> pa.Table:
        leaf = int(table.column("__leaf")[0].as_py())
        table, _codes, groups, lo, hi = spec_s.classes(table)
        cols = {c: table.column(c) for c in names}
        cols[CLASS] = pa.array((np.int64(leaf) << 32) | groups)
        for j in range(s):
            cols[f"__a{j}"], cols[f"__b{j}"] = pa.array(lo[:, j].take(groups)), pa.array(hi[:, j].take(groups))
        return pa.Table.from_arrays([cols[f.name] for f in schema], schema=schema)

    out = (_leaves(work, tree, spec_s.packing).groupBy("__leaf").applyInArrow(finish, T.StructType(fields))
           .localCheckpoint(eager=True))
    box = [f"__{x}{j}" for j in range(s) for x in "ab"]
    got = out.groupBy(CLASS).agg(F.first(NODE).alias(NODE), F.sum(CNT).alias(CNT),
                                 *[F.first(c).alias(c) for c in box]).toArrow()  # classes x numbers
    order = np.argsort(got.column(CLASS).to_numpy())  # new nodes numbered in their classes' order
    cls, parent, rows = (got.column(c).to_numpy().astype(np.int64).take(order) for c in (CLASS, NODE, CNT))
    lo = np.stack([got.column(f"__a{j}").to_numpy() for j in range(s)], axis=1).astype(np.int64).take(order, axis=0)
    hi = np.stack([got.column(f"__b{j}").to_numpy() for j in range(s)], axis=1).astype(np.int64).take(order, axis=0)
    split = np.bincount(parent, minlength=len(nodes.parent))[parent] > 1  # a class alone is its node itself
    node_of = parent.copy()
    node_of[split] = nodes.add(parent[split], born, rows[split], lo[split], hi[split])
    columns = lad.columns

    def renode(it):
        for batch in it:
            node = pa.array(node_of.take(np.searchsorted(cls, _column(batch, CLASS))))
            yield pa.RecordBatch.from_arrays([node if c == NODE else batch.column(c) for c in columns], names=columns)

    moved = out.mapInArrow(renode, lad.schema)
    new = lad.where(~F.col(NODE).isin([int(v) for v in go])).unionByName(moved).localCheckpoint(eager=True)
    cached.append(out)
    return new


def _shared_words(entries: DataFrame, packing: Packing, packing_s: Packing, sdims: list[int]) -> DataFrame:
    """``entries`` with their shared columns' codes packed as the ladder's entries pack them (``__sw*``)."""
    names = [f"__s{w}" for w in packing_s.names]
    schema = T.StructType(entries.schema.fields + [T.StructField(w, T.LongType(), False) for w in names])

    def batches(it):
        for batch in it:
            words = packing_s.pack(packing.unpack([_column(batch, w) for w in packing.names])[:, sdims])
            yield pa.RecordBatch.from_arrays(batch.columns + [pa.array(w) for w in words], names=schema.names)

    return entries.mapInArrow(batches, schema)


def _shared(entries: DataFrame, spec: _Spec, encs: list[QIEncoding], keys: list[str], key_fields: list, merge: bool,
            n: int, qis: list[str], shared: list[str], combos: DataFrame, kind_of: dict, sens_values,
            counts: list[np.ndarray], cached: list) -> DataFrame:
    """The labelled entries of shared._shared_mondrian's release (module docs): each ladder built (Spark for its big
    nodes, executors below them), the cheaper one kept, stage 2 of its stage-1 classes."""
    d = len(qis)
    sdims = [qis.index(s) for s in shared]
    odims = np.array([j for j in range(d) if j not in sdims])
    encs_s = [encs[j] for j in sdims]
    packing_s = Packing.of(encs_s)
    spec_s = _Spec(packing_s, [spec.scales[j] for j in sdims], np.arange(len(sdims)), spec.k, True, spec.max_rows,
                   spec.l, spec.n_s)
    spec2 = _Spec(spec.packing, spec.scales, odims, spec.k, spec.strict, spec.max_rows, spec.l, spec.n_s)
    extra = [SENS] if sens_values is not None else []
    lad0 = _coded(combos.groupBy(*shared, *extra).agg(F.sum(CNT).alias(CNT)), [], shared, kind_of, encs_s,
                  packing_s, sens_values)
    lad0 = lad0.withColumn(NODE, F.lit(0).cast("long")).persist(StorageLevel.MEMORY_AND_DISK)
    cached.append(lad0)
    ent = _shared_words(entries, spec.packing, packing_s, sdims).persist(StorageLevel.MEMORY_AND_DISK)
    cached.append(ent)
    best = None
    for steps in ((2,) if len(sdims) == 1 else (1, 2)):
        built = _build_ladder(lad0, ent, spec, spec_s, spec2, encs, keys, key_fields, merge, n, sdims, steps,
                              packing_s, counts, cached)
        if best is None or less(built[0], best[0]):  # ties (ties.py): the first ladder, as locally
            best = built
    _cost, nodes, final_of, small_out, reached, ent_n = best
    # stage 2 of the big nodes kept as stage-1 classes: one more Spark run, starting from them
    parts = [small_out.where(F.col(NODE).isin([int(v) for v in reached])).drop(NODE, BEST)]
    stop = np.flatnonzero(final_of == np.arange(len(final_of)))
    if len(stop):
        roots = np.zeros(len(nodes.parent), np.int64)
        roots[stop] = nodes.size[stop]
        work = _rooted(ent_n, final_of)
        tree = _grow(work, spec2, roots, _root([counts[j] for j in spec2.active]))  # the root's: the scan's counts
        held_lo, held_hi = np.zeros((len(roots), d), np.int64), np.zeros((len(roots), d), np.int64)
        held_lo[:, sdims], held_hi[:, sdims] = nodes.lo, nodes.hi
        fields = _out_fields(key_fields, d, merge)
        parts.append(_leaves(work, tree, spec.packing).groupBy("__leaf").applyInArrow(
            _finisher(spec2, encs, keys, fields, merge, (held_lo, held_hi)), T.StructType(fields)))
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


def _rooted(ent_n: DataFrame, root_of: np.ndarray) -> DataFrame:
    """The entries under a node with ``root_of[node] >= 0``, each with that root (ROOT)."""
    schema = T.StructType(ent_n.schema.fields + [T.StructField(ROOT, T.LongType(), False)])

    def batches(it):
        for batch in it:
            root = root_of.take(_column(batch, NODE))
            keep = np.flatnonzero(root >= 0)
            if len(keep):
                yield pa.RecordBatch.from_arrays(
                    [c.take(pa.array(keep)) for c in batch.columns] + [pa.array(root.take(keep))], names=schema.names)

    return ent_n.mapInArrow(batches, schema)


def _build_ladder(lad0: DataFrame, ent: DataFrame, spec: _Spec, spec_s: _Spec, spec2: _Spec, encs, keys, key_fields,
                  merge: bool, n: int, sdims: list[int], steps: int, packing_s: Packing, counts: list[np.ndarray],
                  cached: list):
    """One ladder (shared._ladder with ``steps``) and its best stage-1 partition (shared.choose): (its cost, the
    nodes Spark made, each node's stage-1 class among them (-1: none; the node itself when kept), the labelled
    entries below the small nodes (their own ladder, choice and stage 2, made in executors, with NODE and BEST), the
    small nodes whose choice is kept, the entries with their node)."""
    k, max_rows = spec.k, spec.max_rows
    m = np.array([len(spec.scales[j]) for j in sdims], np.int64)  # every code is some row's: the root's box
    nodes = _Nodes(np.array([-1]), np.array([0]), np.array([n], np.int64), np.zeros((1, len(sdims)), np.int64),
                   (m - 1)[None])
    lad = lad0
    frontier = np.array([0] if n > max_rows else [], np.int64)
    i = 0
    while len(frontier) and (i == 0 or local_shared.level_k(n, k, i, steps) > k):
        i += 1
        ki = local_shared.level_k(n, k, i, steps)
        cuttable = (nodes.hi[frontier] > nodes.lo[frontier]).any(axis=1)
        stay = cuttable & (nodes.size[frontier] >= 2 * k)  # the others are never cut again: ladder leaves
        go = frontier[stay & (nodes.size[frontier] >= 2 * ki)]
        before = len(nodes.parent)
        if len(go):
            level = _Spec(packing_s, spec_s.scales, spec_s.active, ki, True, max_rows, spec_s.l, spec_s.n_s)
            lad = _ladder_level(lad, nodes, go, level, i, cached, _root([counts[j] for j in sdims]))
        new = np.arange(before, len(nodes.parent))
        refined = np.isin(frontier, nodes.parent[new])
        frontier = np.concatenate((frontier[stay & ~refined], new[nodes.size[new] > max_rows]))
    big = nodes.size > max_rows
    small = np.flatnonzero(~big)
    n_nodes = len(nodes.parent)
    if n_nodes == 1:
        ent_n = ent.withColumn(NODE, F.lit(0).cast("long"))
    else:
        sw = [f"__s{w}" for w in packing_s.names]
        at = lad.select(*[F.col(w).alias(f"__s{w}") for w in packing_s.names], NODE).dropDuplicates()
        ent_n = ent.join(F.broadcast(at), on=sw)
    ent_n = ent_n.persist(StorageLevel.MEMORY_AND_DISK)
    cached.append(ent_n)
    # below each small node: its ladder, choice and stage 2 in one executor (the local functions)
    fields = _out_fields(key_fields, len(encs), merge) + [T.StructField(NODE, T.LongType(), False),
                                                          T.StructField(BEST, T.DoubleType(), False)]
    best = np.zeros(n_nodes)
    small_out = (ent_n.where(F.col(NODE).isin([int(v) for v in small])).groupBy(NODE)
                 .applyInArrow(_small_finisher(spec, encs, keys, fields, merge, n, sdims, steps, nodes.born),
                               T.StructType(fields)).localCheckpoint(eager=True))
    cached.append(small_out)
    got = small_out.groupBy(NODE).agg(F.first(BEST).alias(BEST)).toArrow()
    best[got.column(NODE).to_numpy()] = got.column(BEST).to_numpy()
    # stage 2 inside every big node, all at once (each entry once per big node above it): its cost as a stage-1 class
    cost = np.zeros(n_nodes)
    bigs = np.flatnonzero(big)
    if len(bigs):
        cost[bigs] = _big_costs(ent_n, spec2, nodes, bigs, cached, _root([counts[j] for j in spec2.active]))
        scales, safe_span = _spans(spec.scales)
        for jj, j in enumerate(sdims):  # the shared columns' part: the node's own box, for each of its rows
            cost[bigs] += nodes.size[bigs] * (scales[j][nodes.hi[bigs, jj]] - scales[j][nodes.lo[bigs, jj]]) / (
                safe_span[j])
    # bottom-up (shared.choose): a big node stops unless its children together publish strictly less
    depth = nodes.depth()
    stop = np.zeros(n_nodes, bool)
    has_kids = np.bincount(nodes.parent[1:], minlength=n_nodes) > 0
    for dd in range(int(depth.max()), -1, -1):
        at = np.flatnonzero((depth == dd) & big)
        kids = np.flatnonzero(depth == dd + 1)
        below = np.bincount(nodes.parent[kids], weights=best[kids], minlength=n_nodes)[at]
        here = ~has_kids[at] | ~less(below, cost[at])  # ties (ties.py): the coarser class
        stop[at] = here
        best[at] = np.where(here, cost[at], below)
    # top-down: each node's stage-1 class is its first ancestor that stops (-1: under a small node's own choice)
    final_of = np.full(n_nodes, -1, np.int64)
    reached = np.zeros(n_nodes, bool)
    reached[0] = True
    for v in np.argsort(depth, kind="stable"):  # nodes x 1 numbers on the driver
        p = nodes.parent[v]
        if v:
            reached[v] = reached[p] and big[p] and not stop[p]
            final_of[v] = final_of[p]
        if reached[v] and big[v] and stop[v]:
            final_of[v] = v
    return float(best[0]), nodes, final_of, small_out, np.flatnonzero(reached & ~big), ent_n


def _spans(scales: list[np.ndarray]) -> tuple[list[np.ndarray], np.ndarray]:
    """The scales and their spans (inf for a constant QI, so its widths are 0), as shared._widths."""
    span = np.array([float(s[-1] - s[0]) if len(s) else 0.0 for s in scales])
    return [np.asarray(s, dtype=float) for s in scales], np.where(span > 0, span, np.inf)


def _big_costs(ent_n: DataFrame, spec2: _Spec, nodes: _Nodes, bigs: np.ndarray, cached: list,
               root_stats: np.ndarray) -> np.ndarray:
    """Per big node, the summed NCP terms of its rows over the non-shared QIs after stage 2 inside it (a Spark run
    from every big node at once: each entry repeated once per big node above it, itself included; the root node's
    histograms are ``root_stats``, the scan's)."""
    n_nodes = len(nodes.parent)
    big = np.zeros(n_nodes, bool)
    big[bigs] = True
    # each node's big ancestors (itself included), as CSR arrays: nodes x depth numbers
    chains = [[]] * n_nodes
    for v in range(n_nodes):  # parents come first
        p = nodes.parent[v]
        chains[v] = (chains[p] if p >= 0 else []) + ([v] if big[v] else [])
    count = np.array([len(c) for c in chains], np.int64)
    ptr = np.concatenate(([0], np.cumsum(count)))
    anc = np.array([a for c in chains for a in c], np.int64)
    cols = [c for c in spec2.columns(ent_n) if c != ROOT] + [NODE]
    schema = T.StructType([ent_n.schema[c] for c in cols] + [T.StructField(ROOT, T.LongType(), False)])

    def explode(it):
        for batch in it:
            v = _column(batch, NODE)
            reps = count.take(v)
            idx = np.repeat(np.arange(len(v)), reps)
            pos = ptr.take(v).repeat(reps) + np.arange(int(reps.sum())) - np.repeat(np.cumsum(reps) - reps, reps)
            yield pa.RecordBatch.from_arrays([c.take(pa.array(idx)) for c in batch.columns] + [pa.array(anc.take(pos))],
                                             names=schema.names)

    work = ent_n.select(*cols).mapInArrow(explode, schema).persist(StorageLevel.MEMORY_AND_DISK)
    cached.append(work)
    roots = np.where(big, nodes.size, 0)
    tree = _grow(work, spec2, roots, root_stats)
    scales, safe_span = _spans(spec2.cut_scales)

    def finish(table: pa.Table) -> pa.Table:
        root = int(table.column(ROOT)[0].as_py())
        table, _codes, groups, lo, hi = spec2.classes(table)
        width = sum((scales[j].take(hi[:, j]) - scales[j].take(lo[:, j])) / safe_span[j] for j in range(len(scales)))
        total = float((table.column(CNT).to_numpy() * np.asarray(width).take(groups)).sum())
        return pa.table({ROOT: pa.array([root], pa.int64()), "cost": pa.array([total], pa.float64())})

    got = (_leaves(work, tree, spec2.packing).groupBy("__leaf").applyInArrow(finish, "__root long, cost double")
           .groupBy(ROOT).agg(F.sum("cost").alias("cost")).toArrow())
    cost = np.zeros(n_nodes)
    cost[got.column(ROOT).to_numpy()] = got.column("cost").to_numpy()
    return cost[bigs]


def _small_finisher(spec: _Spec, encs, keys: list[str], fields: list, merge: bool, n: int, sdims: list[int],
                    steps: int, born: np.ndarray):
    """The function finishing a small node inside an executor: its part of the ladder (shared.ladder_below), the local
    shared.choose inside it (its best cost, BEST, and stage-1 classes) and the local shared.stage2 of those,
    labelled (the shared columns by their stage-1 class's box, as locally)."""
    schema = _arrow_schema(fields)
    scales = spec.scales
    d = len(scales)
    dedupe = spec.strict and spec.l is not None

    def finish(table: pa.Table) -> pa.Table:
        node = int(table.column(NODE)[0].as_py())
        codes = spec.packing.unpack([table.column(w).to_numpy() for w in spec.packing.names])
        rows = table.column(CNT).to_numpy()
        if not spec.strict:  # the node's rows in the row order, as the local frame's
            order = np.argsort(table.column(ORDER).to_numpy(), kind="stable")
            table, codes, rows = table.take(pa.array(order)), codes.take(order, axis=0), rows.take(order)
        full = np.repeat(codes, rows, axis=0)
        sens = None if spec.l is None else np.repeat(table.column(SCODE).to_numpy(), rows)
        levels = local_shared.ladder_below(full[:, sdims], [scales[j] for j in sdims], n, spec.k, int(born[node]),
                                           steps, sens, spec.l)
        view = SimpleNamespace(codes=full, qis=list(range(d)), scale_of=lambda: scales)  # what shared.choose reads of enc
        best, stage1 = local_shared.choose(view, spec.k, levels, sdims, spec.strict, sens, spec.l)
        groups, lo, hi = local_shared.stage2(full, scales, spec.k, stage1, sdims, spec.strict, sens, spec.l)
        groups = groups.take(np.cumsum(rows) - rows)
        if dedupe:
            table, codes, groups = _first_of_codes(table, codes, groups)
        cols = {q: table.column(q) for q in keys}
        cols.update(_label_columns(encs, lo, hi, groups, merge))
        cols[CLASS] = pa.array(SMALL | (np.int64(node) << 32) | groups)
        cols[NODE] = pa.array(np.full(len(groups), node, np.int64))
        cols[BEST] = pa.array(np.full(len(groups), best, np.float64))
        return pa.Table.from_arrays([cols[f.name] for f in schema], schema=schema)

    return finish


def _arrow_type(dt: T.DataType) -> pa.DataType:
    """The Arrow type Spark exchanges a column of type ``dt`` as."""
    from pyspark.sql.pandas.types import to_arrow_type

    return to_arrow_type(dt)
