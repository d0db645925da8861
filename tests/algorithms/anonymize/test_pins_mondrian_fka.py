"""Pins exact behaviour of crowddb.anonymize.generalize, .fka and .mondrian (mutation-testing pins).

Every expected value is written out by hand from tiny inputs or computed by plain Python in the test (a textbook
recursive Mondrian, explicit loops over grid cells for FKA's histogram and partition scores)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowddb.anonymize import generalize as gz
from crowddb.anonymize.encoding import QIEncoding, encode
from crowddb.anonymize.hierarchy import Hierarchy


# ---------------------------------------------------------------- generalize.py

def test_fmt_number_exact_text():
    assert gz.fmt_number(3.0, False) == "3"
    assert gz.fmt_number(-3.0, False) == "-3"
    assert gz.fmt_number(3.7, True) == "4"  # integer columns round, never truncate
    assert gz.fmt_number(3.2, True) == "3"
    assert gz.fmt_number(2.5, False) == "2.5"
    assert gz.fmt_number(1.50, False) == "1.5"
    assert gz.fmt_number(0.1, False) == "0.1"
    assert gz.fmt_number(0.00001, False) == "0.00001"  # positional, not scientific


def test_range_label_exact_text():
    ie = QIEncoding("a", "numeric", [1.0, 5.0], np.array([1.0, 5.0]), True)
    fe = QIEncoding("f", "numeric", [1.5, 2.0], np.array([1.5, 2.0]), False)
    assert gz.range_label(ie, 5.0, 5.0) == "5"
    assert gz.range_label(ie, 5.0, 9.0) == "[5-9]"
    assert gz.range_label(fe, 1.5, 2.0) == "[1.5-2]"
    assert gz.range_label(fe, 1.5, 1.5) == "1.5"
    # the integer flag formats both ends (rounded), whatever the value handed in
    assert gz.range_label(ie, 2.6, 5.4) == "[3-5]"


def test_code_labels_categorical_value_sets():
    enc = QIEncoding("c", "categorical", ["a", "b", "c", "d"], np.arange(4.0), True)
    lo = np.array([1, 0, 1, 0, 0, 2, 1, 3], dtype=np.int64)
    hi = np.array([2, 3, 3, 0, 2, 3, 2, 3], dtype=np.int64)
    labs, inv, plo, phi = gz.code_labels(enc, lo, hi)
    expect = ["{b,c}", "*", "{b,c,d}", "a", "{a,b,c}", "{c,d}", "{b,c}", "d"]
    assert [labs[i] for i in inv] == expect
    assert len(labs) == 7  # one label per distinct interval
    assert sorted(labs.tolist()) == sorted(set(expect))
    assert inv.shape == (8,)
    assert plo.tolist() == lo.tolist() and phi.tolist() == hi.tolist()
    assert labs.dtype == object
    # labels come sorted by interval (lo, then hi)
    assert labs.tolist() == ["a", "{a,b,c}", "*", "{b,c}", "{b,c,d}", "{c,d}", "d"]


def test_code_labels_numeric_ranges():
    enc = QIEncoding("n", "numeric", [10.0, 20.0, 25.0, 40.0], np.array([10.0, 20.0, 25.0, 40.0]), True)
    lo = np.array([0, 1, 2, 3, 0], dtype=np.int64)
    hi = np.array([3, 2, 3, 3, 0], dtype=np.int64)
    labs, inv, plo, phi = gz.code_labels(enc, lo, hi)
    assert [labs[i] for i in inv] == ["[10-40]", "[20-25]", "[25-40]", "40", "10"]
    assert plo.tolist() == lo.tolist() and phi.tolist() == hi.tolist()
    assert labs.dtype == object


def test_code_labels_hierarchy_widens_to_ancestor():
    h = Hierarchy(pd.DataFrame([["x1", "X", "*"], ["x2", "X", "*"], ["y1", "Y", "*"], ["y2", "Y", "*"]]))
    enc = QIEncoding("h", "categorical", ["x1", "x2", "y1", "y2"], np.arange(4.0), True, h)
    lo = np.array([0, 1, 2, 0], dtype=np.int64)
    hi = np.array([1, 1, 3, 2], dtype=np.int64)
    labs, inv, plo, phi = gz.code_labels(enc, lo, hi)
    assert [labs[i] for i in inv] == ["X", "x2", "Y", "*"]
    assert plo.tolist() == [0, 1, 2, 0] and phi.tolist() == [1, 1, 3, 3]


def test_string_column_values_index_dtype():
    labels = np.array(["[1-2]", "x", "*"], dtype=object)
    idx = np.array([2, 0, 0, 1], dtype=np.int64)
    s = gz.string_column(labels, idx, pd.Index([10, 11, 12, 13]))
    assert s.tolist() == ["*", "[1-2]", "[1-2]", "x"]
    assert s.index.tolist() == [10, 11, 12, 13]
    assert s.dtype == pd.Series(["a"], dtype="str").dtype
    assert idx.dtype == np.int64  # the caller's index array is not converted in place


def test_string_column_without_pyarrow(monkeypatch):
    import sys

    labels = np.array(["[1-2]", "x", "*"], dtype=object)
    idx = np.array([2, 0, 0, 1], dtype=np.int64)
    fast = gz.string_column(labels, idx, pd.Index([10, 11, 12, 13]))
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` now raises ImportError
    s = gz.string_column(labels, idx, pd.Index([10, 11, 12, 13]))
    assert s.tolist() == ["*", "[1-2]", "[1-2]", "x"]
    assert s.index.tolist() == [10, 11, 12, 13]
    assert s.dtype == fast.dtype == pd.Series(["a"], dtype="str").dtype


def test_class_boxes_compacts_and_bounds():
    codes = np.array([[3, 0], [1, 5], [4, 2], [0, 0], [2, 9]], dtype=np.int64)
    groups = np.array([5, 2, 5, 9, 2])
    gid, lo, hi = gz.class_boxes(codes, groups)
    assert gid.tolist() == [1, 0, 1, 2, 0]
    assert lo.tolist() == [[1, 5], [3, 0], [0, 0]]
    assert hi.tolist() == [[2, 9], [4, 2], [0, 0]]


def _frame():
    return pd.DataFrame({"age": [20, 30, 25, 40, 35, 20], "city": ["a", "b", "a", "c", "b", "c"],
                         "pay": [1, 2, 3, 4, 5, 6]})


def test_release_from_groups_exact_release():
    df = _frame()
    before = df.copy()
    enc = encode(df, ["age", "city"])
    # age codes: 20->0, 25->1, 30->2, 35->3, 40->4 ; city codes a->0, b->1, c->2
    groups = np.array([7, 7, 3, 3, 7, 3])
    r = gz.release_from_groups(df, enc, groups, 2, "mine", {"extra": 1})
    # class 7 = rows 0,1,4: ages 20,30,35 cities a,b,b ; class 3 = rows 2,3,5: ages 25,40,20 cities a,c,c
    assert r.table["age"].tolist() == ["[20-35]", "[20-35]", "[20-40]", "[20-40]", "[20-35]", "[20-40]"]
    assert r.table["city"].tolist() == ["{a,b}", "{a,b}", "*", "*", "{a,b}", "*"]
    assert r.table["pay"].tolist() == [1, 2, 3, 4, 5, 6]
    assert r.table.index.tolist() == df.index.tolist()
    pd.testing.assert_frame_equal(df, before)
    assert r.groups.tolist() == [0, 0, 1, 1, 0, 1]
    assert r.lo.tolist() == [[20, 0], [20, 0], [20, 0], [20, 0], [20, 0], [20, 0]]
    assert r.hi.tolist() == [[35, 1], [35, 1], [40, 2], [40, 2], [35, 1], [40, 2]]
    # NCP by hand: age span 20, city span 2: class 7 per row (15/20 + 1/2)/2, class 3 (20/20 + 2/2)/2
    ncp = (3 * (15 / 20 + 1 / 2) / 2 + 3 * 1.0) / 6 * 100
    m = r.metrics
    assert m["ncp"] == pytest.approx(ncp)
    assert m["discernibility"] == 18
    assert m["n_groups"] == 2 and m["min_group_size"] == 3 and m["n_rows"] == 6 and m["k"] == 2
    assert m["avg_class_size"] == pytest.approx(1.5)
    assert m["method"] == "mine" and m["extra"] == 1 and m["suppressed"] == 0
    assert r.quasi_identifiers == ["age", "city"]
    assert set(r.encoding) == {"age", "city"}
    assert r.decode(0) == {"age": [20.0, 25.0, 30.0, 35.0], "city": ["a", "b"]}
    assert r.decode(3) == {"age": [20.0, 25.0, 30.0, 35.0, 40.0], "city": ["a", "b", "c"]}


def test_release_keeps_the_callers_index():
    df = _frame().set_index(pd.Index([50, 40, 30, 20, 10, 0]))
    enc = encode(df, ["age", "city"])
    r = gz.release_from_groups(df, enc, np.array([7, 7, 3, 3, 7, 3]), 2, "mine")
    assert r.table.index.tolist() == [50, 40, 30, 20, 10, 0]
    assert r.table["age"].tolist() == ["[20-35]", "[20-35]", "[20-40]", "[20-40]", "[20-35]", "[20-40]"]
    assert r.table["city"].tolist() == ["{a,b}", "{a,b}", "*", "*", "{a,b}", "*"]


def test_release_from_groups_with_boxes_and_float_labels():
    df = pd.DataFrame({"x": [0.5, 1.25, 2.0, 3.0]})
    enc = encode(df, ["x"])
    groups = np.array([0, 0, 1, 1])
    # boxes given by the caller are used as they are (here: wider than tight for class 0)
    r = gz.release_from_groups(df, enc, groups, 2, "m", None, (np.array([[0], [2]]), np.array([[2], [3]])))
    assert r.table["x"].tolist() == ["[0.5-2]", "[0.5-2]", "[2-3]", "[2-3]"]
    assert r.lo[:, 0].tolist() == [0.5, 0.5, 2.0, 2.0]
    assert r.hi[:, 0].tolist() == [2.0, 2.0, 3.0, 3.0]
    assert r.metrics["ncp"] == pytest.approx((1.5 / 2.5 + 1 / 2.5) / 2 * 100)
    assert r.metrics["method"] == "m"
    tight = gz.release_from_groups(df, enc, groups, 2, "m")
    assert tight.table["x"].tolist() == ["[0.5-1.25]", "[0.5-1.25]", "[2-3]", "[2-3]"]


def test_assemble_merges_classes_with_equal_boxes():
    df = pd.DataFrame({"a": [1, 3, 1, 3, 2, 2]})
    enc = encode(df, ["a"])
    r = gz.release_from_groups(df, enc, np.array([0, 0, 1, 1, 2, 2]), 2, "m")
    assert r.groups.tolist() == [0, 0, 0, 0, 1, 1]  # classes 0 and 1 publish the same box: one class
    assert r.metrics["n_groups"] == 2 and r.metrics["discernibility"] == 20
    assert r.table["a"].tolist() == ["[1-3]"] * 4 + ["2", "2"]


def test_assemble_weights_and_suppression():
    df = pd.DataFrame({"a": [0, 10, 0, 10, 5]})
    enc = encode(df, ["a"])
    # pre-classes: 0 -> rows 0,1 box [0,10]; 1 -> rows 2,3,4 box [0,5]
    gid = np.array([0, 0, 1, 1, 1])
    blo, bhi = np.array([[0.0], [0.0]]), np.array([[10.0], [5.0]])
    labels = [(np.array(["L0", "L1"], dtype=object), np.array([0, 1]))]
    sup = np.array([False, False, False, False, True])
    r = gz.assemble(df, enc, gid, blo, bhi, labels, 2, "fd", {"z": 2}, sup)
    assert r.table["a"].tolist() == ["L0", "L0", "L1", "L1", "L1"]
    assert r.groups.tolist() == [1, 1, 0, 0, 0]  # ids follow the sorted boxes: [0,5] before [0,10]
    assert r.metrics["ncp"] == pytest.approx((2 * 1.0 + 3 * 0.5) / 5 * 100)  # row-weighted, not per class
    assert r.metrics["suppressed"] == 1
    assert r.metrics["discernibility"] == 4 + 4 + 1 * 5
    assert r.metrics["method"] == "fd" and r.metrics["z"] == 2
    assert r.lo.tolist() == [[0.0]] * 5 and r.hi.tolist() == [[10.0], [10.0], [5.0], [5.0], [5.0]]
    # a third pre-class without rows (e.g. all its rows suppressed) vanishes and weighs nothing
    blo3, bhi3 = np.array([[0.0], [0.0], [2.0]]), np.array([[10.0], [5.0], [2.0]])
    labels3 = [(np.array(["L0", "L1", "L2"], dtype=object), np.array([0, 1, 2]))]
    r3 = gz.assemble(df, enc, gid, blo3, bhi3, labels3, 2, "fd")
    assert r3.groups.tolist() == [1, 1, 0, 0, 0] and r3.metrics["n_groups"] == 2
    assert r3.metrics["ncp"] == pytest.approx((2 * 1.0 + 3 * 0.5) / 5 * 100)
    assert r3.metrics["suppressed"] == 0 and r3.metrics["discernibility"] == 4 + 9


# ---------------------------------------------------------------- fka.py: plain-Python references

from fractions import Fraction  # noqa: E402
from collections import Counter  # noqa: E402
from itertools import product  # noqa: E402

from crowddb.anonymize import fka as fk  # noqa: E402
from crowddb.anonymize.samples import SampleGuard  # noqa: E402
from crowddb.anonymize.synth import copula_samples  # noqa: E402
from crowddb.errors import ArgumentError  # noqa: E402


def slab_of(v, cuts) -> int:
    """Number of cuts strictly below v (cut c keeps c in the lower slab)."""
    return sum(1 for c in cuts if c < v)


def ref_variance(cells: list[tuple], truth, shape, n_ans) -> Fraction:
    total = Fraction(0)
    count = Counter(zip(cells, truth.tolist()))
    for t in product(*[range(s) for s in shape]):
        v = [count[(t, r)] for r in range(n_ans)]
        total += Fraction(sum(x * x for x in v), n_ans) - Fraction(sum(v), n_ans) ** 2
    return total


def ref_histogram(samples, truth, m, n_ans, cell_limit, min_s, allowable, score=ref_variance):
    """Algorithm 1 with loops: round robin over dimensions, best allowable cut by ``score`` (cells, truth, shape,
    n_ans -> an exact Fraction; the paper's variance unless given), stop after d stalls."""
    n, d = samples.shape
    cuts = [[] for _ in range(d)]
    i = stalled = 0
    while stalled < d:
        j = i % d
        i += 1
        shape = [len(c) + 1 for c in cuts]
        shape[j] += 1
        best, best_var = None, None
        if int(np.prod(shape)) <= cell_limit:
            for c in sorted(set(samples[:, j].tolist()) - set(cuts[j]) - {int(m[j]) - 1}):
                new = sorted(cuts[j] + [c])
                cells = [tuple(slab_of(samples[r, q], new if q == j else cuts[q]) for q in range(d))
                         for r in range(n)]
                ks = new.index(c)
                per_cell = Counter(cells)
                if allowable == "cells":
                    ok = all(per_cell[t] >= min_s
                             for t in product(*[range(s) for s in shape]) if t[j] in (ks, ks + 1))
                else:
                    ok = all(sum(1 for cc in cells if cc[j] == s) >= min_s for s in (ks, ks + 1))
                if not ok:
                    continue
                var = score(cells, truth, shape, n_ans)
                if best_var is None or var > best_var:  # exact Fractions: a tie keeps the first (lowest) cut
                    best, best_var = c, var
        if best is None:
            stalled += 1
            continue
        stalled = 0
        cuts[j] = sorted(cuts[j] + [best])
    return cuts


def ref_accuracy(g, lo, hi):
    cells = list(product(*[range(a, b + 1) for a, b in zip(lo, hi)]))
    n_ans = g.truth.shape[-1]
    tc = [sum(g.truth[c][r] for c in cells) for r in range(n_ans)]
    nt = sum(tc)
    p_true = [x / nt for x in tc] if nt else list(g.prior)
    vol = sum(g.volume[c] for c in cells)
    p_theta = []
    for r in range(n_ans):
        s = 0.0
        for c in cells:
            nf = g.feedback[c].sum()
            s += (g.feedback[c][r] / nf if nf > 0 else g.prior[r]) * g.volume[c]
        p_theta.append(s / vol)
    share = sum(g.tuples[c] for c in cells) / g.tuples.sum()
    return sum(a * b for a, b in zip(p_true, p_theta)), share


def ref_allowed(g, lo, hi, k, l):
    cells = list(product(*[range(a, b + 1) for a, b in zip(lo, hi)]))
    if sum(g.tuples[c] for c in cells) < k:
        return False
    if l is not None:
        return sum(1 for s in range(g.sensitive.shape[-1]) if any(g.sensitive[c][s] for c in cells)) >= l
    return True


def ref_tied(a, b):
    """The tie rule of the anonymizers, restated: float scores within 1e-9 relative or 1e-12 absolute are equal."""
    return a == b or abs(a - b) <= 1e-9 * max(abs(a), abs(b)) + 1e-12


def ref_partition(g, k, l, delta):
    """Algorithm 2 phase 1 with loops; ties (ref_tied) go to the first open box and to the first cut."""
    shape = g.tuples.shape
    open_ = [(tuple([0] * len(shape)), tuple(s - 1 for s in shape))]
    done = []
    while open_:
        scores = [ref_accuracy(g, lo, hi)[0] for lo, hi in open_]
        low = min(scores)
        w = next(i for i, x in enumerate(scores) if ref_tied(x, low))
        lo, hi = open_.pop(w)
        acc, share = ref_accuracy(g, lo, hi)
        cands = []
        for j in range(len(shape)):
            for s in range(lo[j], hi[j]):
                h1 = tuple(s if q == j else hi[q] for q in range(len(shape)))
                l2 = tuple(s + 1 if q == j else lo[q] for q in range(len(shape)))
                if not (ref_allowed(g, lo, h1, k, l) and ref_allowed(g, l2, hi, k, l)):
                    continue
                a1, w1 = ref_accuracy(g, lo, h1)
                a2, w2 = ref_accuracy(g, l2, hi)
                dc = w1 * a1 + w2 * a2 - share * acc if delta == "weighted" else a1 + a2 - acc
                cands.append((dc, ((lo, h1), (l2, hi))))
        if not cands:
            done.append((lo, hi))
        else:
            top = max(dc for dc, _ in cands)
            open_.extend(next(cut for dc, cut in cands if ref_tied(dc, top)))
    return done


def recursive_strict(codes, scales, k, rows):
    """Textbook strict Mondrian (LeFevre et al.): widest normalized dimension first, frequency-set median,
    values <= median go left, first allowable cut wins."""
    span = [s[-1] - s[0] for s in scales]
    out = []

    def rec(rows):
        c = codes[rows]
        width = [(scales[j][c[:, j].max()] - scales[j][c[:, j].min()]) / span[j] if span[j] else 0.0
                 for j in range(c.shape[1])]
        for j in sorted(range(c.shape[1]), key=lambda j: (-width[j], j)):
            if width[j] <= 0 or len(rows) < 2 * k:
                break
            vals = sorted(set(c[:, j].tolist()))
            cum, split = 0, None
            for v in vals:
                cum += int((c[:, j] == v).sum())
                if cum >= len(rows) // 2:
                    split = v
                    break
            left = c[:, j] <= split
            if split < vals[-1] and k <= left.sum() <= len(rows) - k:
                rec(rows[left])
                rec(rows[~left])
                return
        out.append(frozenset(rows.tolist()))

    rec(np.asarray(rows))
    return out


def as_sets(groups):
    return {frozenset(np.flatnonzero(groups == g).tolist()) for g in np.unique(groups)}


# ---------------------------------------------------------------- fka.py tests

def test_counting_ask_counts_validates_and_casts():
    seen = []

    def ask(lo, hi):
        seen.append((lo.copy(), hi.copy()))
        return np.arange(len(lo), dtype=np.int32)

    c = fk.CountingAsk(ask)
    lo, hi = np.zeros((3, 2)), np.ones((3, 2))
    out = c(lo, hi)
    assert out.tolist() == [0, 1, 2] and out.dtype == np.int64
    out = c(lo[:2], hi[:2])
    assert (c.tuples, c.calls) == (5, 2)
    assert seen[0][0].tolist() == lo.tolist() and seen[0][1].tolist() == hi.tolist()
    with pytest.raises(ArgumentError, match=r"^method='fka' needs ask=callable\(lo, hi\) -> one answer per tuple$"):
        fk.CountingAsk(None)
    bad = fk.CountingAsk(lambda lo, hi: np.zeros(len(lo) + 1, np.int64))
    with pytest.raises(ArgumentError, match=r"^ask must return 3 integer answers, got shape \(4,\) dtype int64$"):
        bad(lo, hi)
    flt = fk.CountingAsk(lambda lo, hi: np.zeros(len(lo)))
    with pytest.raises(ArgumentError, match=r"^ask must return 3 integer answers, got shape \(3,\) dtype float64$"):
        flt(lo, hi)
    assert (bad.tuples, bad.calls, flt.tuples, flt.calls) == (0, 0, 0, 0)


def test_counting_ask_publishes_guarded_boxes():
    df = pd.DataFrame({"a": [1, 2, 2, 3, 3, 3, 3]})
    enc = encode(df, ["a"])
    seen = []
    c = fk.CountingAsk(lambda lo, hi: (seen.append((lo.copy(), hi.copy())), np.zeros(len(lo), np.int64))[1],
                       SampleGuard(enc, 3))
    c(np.array([[1.0], [3.0]]), np.array([[1.0], [3.0]]))
    # the point 1 holds one real row: widened to it and its 3 nearest rows (1, 2, 2) -> [1, 2]; 3 holds 4 rows
    assert seen[0][0].tolist() == [[1.0], [3.0]] and seen[0][1].tolist() == [[2.0], [3.0]]
    assert c.guard.widened == 1 and c.tuples == 2


def test_slabs_and_cell_ids():
    cuts = [np.array([1, 3]), np.array([0])]
    x = np.array([[0, 0], [1, 1], [2, 0], [3, 2], [4, 1]])
    slab = fk._slabs(cuts, x)
    assert slab.tolist() == [[0, 0], [0, 1], [1, 0], [1, 1], [2, 1]]
    assert fk._cell_ids(slab, (3, 2)).tolist() == [0, 1, 2, 3, 5]


def test_variance_sum_by_hand():
    # cell 0: answers [0, 1] -> counts [1, 1] var 0; cell 1: answers [1, 1, 1] -> [0, 3] var 9/2 - 9/4 = 2.25
    # cell 2 empty -> 0
    cell = np.array([0, 0, 1, 1, 1])
    ans = np.array([0, 1, 1, 1, 1])
    assert fk._variance_sum(cell, ans, 3, 2) == pytest.approx(2.25)
    # three answers: counts [2, 0, 1] -> 5/3 - 1 = 2/3
    assert fk._variance_sum(np.array([0, 0, 0]), np.array([0, 0, 2]), 1, 3) == pytest.approx(2 / 3)


def test_feedback_histogram_worked_example():
    # one dimension, answers switch at code 3. Variance of a 2-answer cell with counts (a, b) is ((a - b) / 2)^2.
    # First cut: 2 (cells [4,0] and [0,4]: 4 + 4 = 8; cut 0 gives 1 + 2.25). Then 0 and 4 tie at 6 (the first, 0,
    # wins) while 1 and 3 leave a one-sample slab; then 4 is the only allowable cut.
    samples = np.array([[0], [1], [2], [3], [4], [5], [0], [5]])
    truth = np.array([0, 0, 0, 1, 1, 1, 0, 1])
    cuts = fk.feedback_histogram(samples, truth, np.array([6]), 2, 400, 2)
    assert [c.tolist() for c in cuts] == [[0, 2, 4]]
    assert [c.tolist() for c in fk.feedback_histogram(samples, truth, np.array([6]), 2, 2, 2)] == [[2]]
    assert [c.tolist() for c in fk.feedback_histogram(samples, truth, np.array([6]), 2, 1, 2)] == [[]]
    assert [c.tolist() for c in fk.feedback_histogram(samples, truth, np.array([6]), 2, 400, 4)] == [[2]]
    assert [c.tolist() for c in fk.feedback_histogram(samples, truth, np.array([6]), 2, 400, 5)] == [[]]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("allowable", ["slabs", "cells"])
def test_feedback_histogram_matches_loops(seed, allowable):
    rng = np.random.default_rng(seed)
    n = 30
    m = np.array([5, 4, 3])
    samples = np.stack([rng.integers(0, mj, n) for mj in m], axis=1)
    truth = ((samples[:, 0] >= 2) ^ (rng.random(n) < 0.2)).astype(np.int64)
    for limit, min_s in ((400, 2), (12, 2), (400, 3), (6, 1), (400, 0)):
        ours = fk.feedback_histogram(samples, truth, m, 2, limit, min_s, allowable)
        ref = ref_histogram(samples, truth, m, 2, limit, min_s, allowable)
        assert [c.tolist() for c in ours] == ref, (limit, min_s)


def _hand_grid():
    # 2 x 3 grid, 2 answers
    fb = np.zeros((2, 3, 2))
    fb[0, 0] = [3, 1]
    fb[0, 1] = [0, 2]
    fb[1, 0] = [1, 1]
    fb[1, 2] = [0, 4]  # cell (0, 2) and (1, 1) have no feedback: the prior stands for them
    tr = np.zeros((2, 3, 2))
    tr[0, 0] = [2, 0]
    tr[0, 1] = [1, 1]
    tr[1, 2] = [0, 3]
    tuples = np.array([[4, 3, 1], [2, 5, 6]])
    vol = np.array([[1.0, 2.0, 1.0], [3.0, 1.0, 2.0]])
    sens = np.zeros((2, 3, 3), bool)
    sens[0, 0, 0] = sens[0, 1, 1] = sens[1, 2, 2] = sens[1, 0, 0] = True
    return fk.Grid(fb, tr, tuples, vol, sens, np.array([0.25, 0.75]))


def test_accuracy_allowed_and_box_by_hand():
    g = _hand_grid()
    # whole grid: truth counts [3, 4]; p_theta = Σ p_cell * vol / 10
    p_cells = {(0, 0): [0.75, 0.25], (0, 1): [0, 1], (0, 2): [0.25, 0.75],
               (1, 0): [0.5, 0.5], (1, 1): [0.25, 0.75], (1, 2): [0, 1]}
    pt0 = sum(p_cells[c][0] * g.volume[c] for c in p_cells) / 10
    acc, share = fk._accuracy(g, np.array([0, 0]), np.array([1, 2]))
    assert acc == pytest.approx(3 / 7 * pt0 + 4 / 7 * (1 - pt0))
    assert share == pytest.approx(1.0)
    # a box without truth samples uses the prior: cell (1, 1) alone
    acc, share = fk._accuracy(g, np.array([1, 1]), np.array([1, 1]))
    assert acc == pytest.approx(0.25 * 0.25 + 0.75 * 0.75)
    assert share == pytest.approx(5 / 21)
    acc, share = fk._accuracy(g, np.array([0, 0]), np.array([0, 1]))
    pt = (0.75 * 1 + 0 * 2) / 3
    assert acc == pytest.approx(3 / 4 * pt + 1 / 4 * (1 - pt))
    assert share == pytest.approx(7 / 21)
    for lo, hi in product(product(range(2), range(3)), repeat=2):
        if all(a <= b for a, b in zip(lo, hi)):
            got = fk._accuracy(g, np.array(lo), np.array(hi))
            assert got == pytest.approx(ref_accuracy(g, lo, hi))
            for k, l in ((7, None), (8, None), (6, 2), (6, 3), (2, 1)):
                assert fk._allowed(g, np.array(lo), np.array(hi), k, l) == ref_allowed(g, lo, hi, k, l)
    assert fk._box(np.arange(6).reshape(2, 3), [0, 1], [1, 2]).tolist() == [[1, 2], [4, 5]]
    assert fk._allowed(g, np.array([0, 0]), np.array([0, 1]), 7, None)
    assert not fk._allowed(g, np.array([0, 0]), np.array([0, 1]), 8, None)
    assert fk._allowed(g, np.array([0, 0]), np.array([0, 1]), 7, 2)
    assert not fk._allowed(g, np.array([0, 0]), np.array([0, 1]), 7, 3)


@pytest.mark.parametrize("delta", ["literal", "weighted"])
def test_adaptive_partition_matches_loops(delta):
    g = _hand_grid()
    for k, l in ((2, None), (4, None), (7, None), (3, 2), (22, None)):
        ours = [(tuple(lo.tolist()), tuple(hi.tolist())) for lo, hi in fk.adaptive_partition(g, k, l, delta)]
        assert ours == ref_partition(g, k, l, delta), (k, l)
    if delta == "literal":  # the default
        assert [(a.tolist(), b.tolist()) for a, b in fk.adaptive_partition(g, 4, None)] == [
            (list(a), list(b)) for a, b in ref_partition(g, 4, None, "literal")]
    with pytest.raises(ArgumentError, match=r"^delta must be one of \('literal', 'weighted'\), got 'x'$"):
        fk.adaptive_partition(g, 2, None, "x")


@pytest.mark.parametrize("seed", [3, 4, 5])
@pytest.mark.parametrize("delta", ["literal", "weighted"])
def test_adaptive_partition_random_grids(seed, delta):
    rng = np.random.default_rng(seed)
    shape = (3, 4)
    fb = rng.integers(0, 4, (*shape, 3)).astype(float)
    tr = rng.integers(0, 3, (*shape, 3)).astype(float)
    tuples = rng.integers(0, 9, shape)
    vol = rng.integers(1, 4, shape).astype(float)
    sens = rng.random((*shape, 4)) < 0.3
    g = fk.Grid(fb, tr, tuples, vol, sens, np.array([0.5, 0.25, 0.25]))
    for k, l in ((5, None), (12, None), (5, 2)):
        ours = [(tuple(lo.tolist()), tuple(hi.tolist())) for lo, hi in fk.adaptive_partition(g, k, l, delta)]
        assert ours == ref_partition(g, k, l, delta), (k, l)


def test_code_widths_exact():
    ie = QIEncoding("a", "numeric", [1.0, 3.0, 4.0], np.array([1.0, 3.0, 4.0]), True)
    assert fk.code_widths(ie).tolist() == [2.0, 1.0, 1.0]
    assert fk.code_widths(ie, "count").tolist() == [1.0, 1.0, 1.0]
    fe = QIEncoding("f", "numeric", [0.5, 1.0, 2.0], np.array([0.5, 1.0, 2.0]), False)
    assert fk.code_widths(fe).tolist() == [0.5, 1.0, 0.5]  # the last value owns the smallest gap
    oe = QIEncoding("o", "ordinal", ["x", "y", "z"], np.array([0.0, 0.5, 2.0]), False)
    assert fk.code_widths(oe).tolist() == [0.5, 1.5, 1.0]  # non-numeric: the last code owns one unit
    two = QIEncoding("t", "numeric", [1.0, 5.0], np.array([1.0, 5.0]), True)
    assert fk.code_widths(two).tolist() == [4.0, 1.0]
    one = QIEncoding("c", "numeric", [7.0], np.array([7.0]), True)
    assert fk.code_widths(one).tolist() == [1.0]
    assert fk.code_widths(QIEncoding("e", "numeric", [], np.zeros(0), True)).tolist() == []


def test_grid_cells_by_hand():
    df = pd.DataFrame({"a": [1, 2, 4, 4, 8, 8], "b": ["x", "y", "x", "x", "y", "y"]})
    enc = encode(df, ["a", "b"])  # a codes 1->0 2->1 4->2 8->3 ; b x->0 y->1
    cuts = [np.array([1]), np.array([0])]  # a: {0,1} | {2,3} ; b: {0} | {1}
    samples = np.array([[0, 0], [1, 1], [3, 1], [3, 1], [2, 0]])
    truth = np.array([0, 1, 1, 0, 2])
    feedback = np.array([1, 1, 0, 2, 2])
    sens = np.array([0, 1, 0, 2, 1, 1])
    g = fk._grid(enc, cuts, samples, truth, feedback, 3, sens)
    assert g.truth.shape == (2, 2, 3) and g.feedback.shape == (2, 2, 3)
    assert g.truth[0, 0].tolist() == [1, 0, 0] and g.truth[0, 1].tolist() == [0, 1, 0]
    assert g.truth[1, 1].tolist() == [1, 1, 0] and g.truth[1, 0].tolist() == [0, 0, 1]
    assert g.feedback[0, 0].tolist() == [0, 1, 0] and g.feedback[1, 1].tolist() == [1, 0, 1]
    assert g.feedback[1, 0].tolist() == [0, 0, 1] and g.feedback[0, 1].tolist() == [0, 1, 0]
    assert g.tuples.tolist() == [[1, 1], [2, 2]]
    # width volume: a codes own 1 (1->2), 2 (2->4), 4 (4->8), 1 (last, integer): slabs 3 and 5 ; b codes 1 each
    assert g.volume.tolist() == [[3.0, 3.0], [5.0, 5.0]]
    assert g.sensitive.shape == (2, 2, 3)
    assert g.sensitive[0, 0].tolist() == [True, False, False] and g.sensitive[0, 1].tolist() == [False, True, False]
    assert g.sensitive[1, 0].tolist() == [True, False, True] and g.sensitive[1, 1].tolist() == [False, True, False]
    assert g.prior.tolist() == [0.2, 0.4, 0.4]
    g4 = fk._grid(enc, cuts, samples, truth, feedback, 4, sens)  # a label nobody answered in the feedback
    assert g4.prior.tolist() == [0.2, 0.4, 0.4, 0.0] and g4.feedback.shape == (2, 2, 4)
    assert g4.sensitive.shape == (2, 2, 3)
    gc = fk._grid(enc, cuts, samples, truth, feedback, 3, None, "count")
    assert gc.volume.tolist() == [[2.0, 2.0], [2.0, 2.0]] and gc.sensitive is None


def _fka_frame():
    # value combinations hold 1..12 rows: some sample boxes single out people and are widened by SampleGuard
    reps = np.random.default_rng(5).integers(1, 13, 36)
    combos = [(a, b, c) for a in (10, 12, 20, 35, 50, 80) for b in (1, 2, 3) for c in ("u", "v")]
    rows = [t for t, r in zip(combos, reps) for _ in range(r)]
    df = pd.DataFrame(rows, columns=["a", "b", "c"])
    df["s"] = np.where(np.random.default_rng(6).random(len(df)) < 0.85, 0, np.arange(len(df)) % 3)  # skewed
    return df


class RecordingAsk:
    """Answer 1 when the box midpoint of a is >= 25, plus 2 when that of b is >= 2.5; records every call."""

    def __init__(self):
        self.calls = []

    def __call__(self, lo, hi):
        self.calls.append((np.array(lo, float), np.array(hi, float)))
        mid = (lo + hi) / 2
        return ((mid[:, 0] >= 25).astype(np.int64) + 2 * (mid[:, 1] >= 2.5)).astype(np.int64)


@pytest.mark.parametrize("opts", [
    {},
    {"sample_ratio": 0.5},
    {"delta": "weighted", "volume": "count", "sample_ratio": 0.4},
    {"allowable": "cells", "cell_limit": 12, "l": 2, "sample_ratio": 0.5},
    {"min_samples": 4, "cell_limit": 6, "sample_ratio": 1.0},
    {"volume": "count", "cell_limit": 8, "sample_ratio": 0.5},
    {"l": 3, "sample_ratio": 0.5},  # phase 1 stops early: 7 partitions instead of 20 without l
    {"strict": False, "sample_ratio": 0.5, "l": 2, "delta": "weighted", "cell_limit": 10},
])
def test_fka_end_to_end_matches_loops(opts):
    df = _fka_frame()
    qis = ["a", "b", "c"]
    enc = encode(df, qis)
    k, seed = 6, 11
    ratio = opts.get("sample_ratio", 0.10)  # the default
    allowable, cell_limit = opts.get("allowable", "slabs"), opts.get("cell_limit", 400)
    l = opts.get("l")
    sens = df["s"].to_numpy() if l is not None else None
    ask = RecordingAsk()
    rel = fk.fka(df, enc, k, ask=ask, seed=seed, sensitive=sens, **opts)
    # reference: the same copula draw, then every step by loops
    n_s = max(2, round(ratio * len(df)))
    samples = copula_samples(enc.codes, n_s, np.random.default_rng(seed))
    scale = enc.scale_of()
    pts = np.stack([scale[j][samples[:, j]] for j in range(3)], axis=1)
    assert len(ask.calls) == 2
    guard = SampleGuard(enc, k)  # deterministic: what the crowd sees of each box
    glo, ghi, _ = guard(pts, pts)
    widened_raw = guard.widened
    assert ask.calls[0][0].tolist() == glo.tolist() and ask.calls[0][1].tolist() == ghi.tolist()
    truth_raw = RecordingAsk()(glo, ghi)
    labels, truth = np.unique(truth_raw, return_inverse=True)
    m = np.array([6, 3, 2])
    if "min_samples" in opts:
        min_s = opts["min_samples"]
    elif allowable == "cells":
        min_s = k
    else:
        min_s = max(2, int(np.ceil(k * ratio)))
    cuts = ref_histogram(samples, truth, m, len(labels), cell_limit, min_s, allowable)
    lo = np.empty((n_s, 3))
    hi = np.empty((n_s, 3))
    for r in range(n_s):
        for j in range(3):
            s = slab_of(samples[r, j], cuts[j])
            lo[r, j] = scale[j][cuts[j][s - 1] + 1 if s > 0 else 0]
            hi[r, j] = scale[j][cuts[j][s] if s < len(cuts[j]) else m[j] - 1]
    glo, ghi, _ = guard(lo, hi)
    assert ask.calls[1][0].tolist() == glo.tolist() and ask.calls[1][1].tolist() == ghi.tolist()
    fb_raw = RecordingAsk()(glo, ghi)
    labels = np.union1d(labels, fb_raw)
    grid = fk._grid(enc, [np.array(c, np.int64) for c in cuts], samples, np.searchsorted(labels, truth_raw),
                    np.searchsorted(labels, fb_raw), len(labels), sens, opts.get("volume", "width"))
    parts = ref_partition(grid, k, l, opts.get("delta", "literal"))
    cell = [tuple(slab_of(enc.codes[i, j], cuts[j]) for j in range(3)) for i in range(len(df))]
    expected = set()
    for plo, phi in parts:
        rows = [i for i in range(len(df)) if all(a <= x <= b for a, x, b in zip(plo, cell[i], phi))]
        expected |= set(ref_mondrian(enc.codes, scale, k, opts.get("strict", True), sens, l, np.array(rows)))
    assert as_sets(rel.groups) == expected
    est = sum(a * w for a, w in (ref_accuracy(grid, plo, phi) for plo, phi in parts))
    mt = rel.metrics
    assert mt["estimated_accuracy"] == pytest.approx(est)
    assert mt["crowd_tuples"] == 2 * n_s and mt["crowd_calls"] == 2 and mt["n_samples"] == n_s
    assert mt["n_cells"] == int(np.prod([len(c) + 1 for c in cuts])) and mt["n_partitions"] == len(parts)
    assert mt["sample_ratio"] == ratio and mt["cell_limit"] == cell_limit and mt["l"] == l
    assert mt["strict"] is opts.get("strict", True) and mt["min_samples"] == min_s
    assert (mt["delta"], mt["allowable"], mt["volume"]) == (opts.get("delta", "literal"), allowable,
                                                            opts.get("volume", "width"))
    assert mt["samples_widened"] == guard.widened and mt["samples_widened_raw"] == widened_raw
    assert mt["method"] == "fka"
    assert min(len(g) for g in as_sets(rel.groups)) >= k
    # published labels are the tight boxes of the classes
    for grp in as_sets(rel.groups):
        i = sorted(grp)
        a = df["a"].iloc[i]
        lab = str(a.min()) if a.min() == a.max() else f"[{a.min()}-{a.max()}]"
        assert set(rel.table["a"].iloc[i]) == {lab}


def test_fka_option_errors_before_asking():
    df = _fka_frame()
    enc = encode(df, ["a", "b"])
    ask = RecordingAsk()
    with pytest.raises(ArgumentError, match=r"^sample_ratio must be in \(0, 1\], got 0$"):
        fk.fka(df, enc, 5, ask=ask, sample_ratio=0)
    with pytest.raises(ArgumentError, match=r"^sample_ratio must be in \(0, 1\], got 1.5$"):
        fk.fka(df, enc, 5, ask=ask, sample_ratio=1.5)
    with pytest.raises(ArgumentError, match=r"^cell_limit must be >= 1, got 0$"):
        fk.fka(df, enc, 5, ask=ask, cell_limit=0)
    with pytest.raises(ArgumentError, match=r"^delta must be one of \('literal', 'weighted'\), got 'q'$"):
        fk.fka(df, enc, 5, ask=ask, delta="q")
    with pytest.raises(ArgumentError, match=r"^allowable must be one of \('slabs', 'cells'\), got 'q'$"):
        fk.fka(df, enc, 5, ask=ask, allowable="q")
    with pytest.raises(ArgumentError, match=r"^volume must be one of \('width', 'count'\), got 'q'$"):
        fk.fka(df, enc, 5, ask=ask, volume="q")
    assert ask.calls == []
    rel = fk.fka(df, enc, 5, ask=ask, cell_limit=1, seed=0, sample_ratio=0.01)
    assert rel.metrics["n_cells"] == 1 and rel.metrics["n_partitions"] == 1 and rel.metrics["n_samples"] == 2


# ---------------------------------------------------------------- mondrian.py

from crowddb.anonymize import mondrian as mo  # noqa: E402


def ref_mondrian(codes, scales, k, strict=True, sens=None, l=None, rows=None):
    """Textbook Mondrian by recursion. Strict: codes <= the frequency-set median go left. Relaxed: |lhs| =
    floor(n / 2), the median ties with the lowest code in the next widest dimension (then lowest row) go left.
    Dimensions are tried by decreasing tight normalized width (lowest index on ties), the first allowable cut
    wins (>= k rows each side and, with l, >= l distinct sensitive values each side)."""
    span = [s[-1] - s[0] if len(s) else 0 for s in scales]
    d = codes.shape[1]
    out = []

    def rec(rows):
        c = codes[rows]
        n = len(rows)
        width = [(scales[j][c[:, j].max()] - scales[j][c[:, j].min()]) / span[j] if span[j] else 0.0
                 for j in range(d)]
        if n >= 2 * k:
            for j in sorted(range(d), key=lambda j: (-width[j], j)):
                if width[j] <= 0:
                    break
                vals = sorted(set(c[:, j].tolist()))
                cum, split = 0, None
                for v in vals:
                    cum += int((c[:, j] == v).sum())
                    if cum >= n // 2:
                        split = v
                        break
                if strict:
                    left = c[:, j] <= split
                    if not (k <= left.sum() <= n - k):
                        continue
                else:
                    others = [q for q in range(d) if q != j]
                    tk = max(others, key=lambda q: (width[q], -q)) if others else j
                    below = [i for i in range(n) if c[i, j] < split]
                    ties = sorted((i for i in range(n) if c[i, j] == split), key=lambda i: (c[i, tk], rows[i]))
                    chosen = set(below) | set(ties[:n // 2 - len(below)])
                    left = np.array([i in chosen for i in range(n)])
                if l is not None and (len(set(sens[rows[left]].tolist())) < l
                                      or len(set(sens[rows[~left]].tolist())) < l):
                    continue
                rec(rows[left])
                rec(rows[~left])
                return
        out.append(frozenset(rows.tolist()))

    rec(np.arange(len(codes)) if rows is None else np.asarray(rows))
    return out


def _random_table(seed, n, d):
    rng = np.random.default_rng(seed)
    cols = {}
    for j in range(d):
        kind = (seed + j) % 5
        if kind == 0:
            cols[f"c{j}"] = rng.integers(0, rng.integers(2, 40), n)
        elif kind == 1:  # skewed: median cuts fail often
            cols[f"c{j}"] = np.where(rng.random(n) < 0.8, 0, rng.integers(1, 20, n))
        elif kind == 2:
            cols[f"c{j}"] = rng.normal(size=n).round(1)
        elif kind == 3:
            cols[f"c{j}"] = rng.choice(list("pqrst"), n)
        else:
            cols[f"c{j}"] = rng.integers(0, 300, n)  # > 127 codes: 16-bit codes
    return pd.DataFrame(cols)


def _check_boxes(codes, groups, lo, hi):
    g_ids = np.unique(groups)
    assert g_ids.tolist() == list(range(len(g_ids)))
    assert lo.shape == hi.shape == (len(g_ids), codes.shape[1])
    for g in g_ids:
        sel = codes[groups == g]
        assert lo[g].tolist() == sel.min(axis=0).tolist() and hi[g].tolist() == sel.max(axis=0).tolist()


CASES = [(s, n, d, k) for s, n, d, k in [(0, 40, 1, 2), (1, 60, 2, 3), (2, 80, 3, 2), (3, 120, 4, 5),
                                          (4, 50, 9, 2), (5, 200, 5, 4), (6, 30, 2, 7), (7, 90, 6, 3),
                                          (8, 150, 3, 10), (9, 70, 10, 2), (10, 25, 3, 3), (11, 300, 2, 2)]]


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("case", CASES)
def test_mondrian_matches_recursion(case, strict):
    seed, n, d, k = case
    enc = encode(_random_table(seed, n, d), [f"c{j}" for j in range(d)])
    groups, lo, hi = mo.mondrian_groups(enc.codes, enc.scale_of(), k, strict=strict, return_boxes=True)
    assert as_sets(groups) == set(ref_mondrian(enc.codes, enc.scale_of(), k, strict))
    _check_boxes(enc.codes, groups, lo, hi)
    assert mo.mondrian_groups(enc.codes, enc.scale_of(), k, strict=strict).tolist() == groups.tolist()


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("case", CASES[:8])
@pytest.mark.parametrize("l", [2, 3])
def test_mondrian_l_diversity_matches_recursion(case, strict, l):
    seed, n, d, k = case
    enc = encode(_random_table(seed, n, d), [f"c{j}" for j in range(d)])
    sens = np.random.default_rng(seed + 100).choice([7, 8, 9, 9, 9, 9], n)
    groups = mo.mondrian_groups(enc.codes, enc.scale_of(), k, strict=strict, sensitive=sens, l=l)
    assert as_sets(groups) == set(ref_mondrian(enc.codes, enc.scale_of(), k, strict, sens, l))


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("case", CASES[:6])
def test_mondrian_init_partitions(case, strict):
    seed, n, d, k = case
    enc = encode(_random_table(seed, n, d), [f"c{j}" for j in range(d)])
    init = np.random.default_rng(seed).choice([3, 10, 11], n)
    groups = mo.mondrian_groups(enc.codes, enc.scale_of(), k, strict=strict, init=init)
    expected = set()
    for p in np.unique(init):
        expected |= set(ref_mondrian(enc.codes, enc.scale_of(), k, strict, rows=np.flatnonzero(init == p)))
    assert as_sets(groups) == expected


def test_mondrian_worked_example():
    # ages 1..8 (one row each), k = 2: median cuts at 4, then 2 and 6 -> four pairs
    codes = np.arange(8).reshape(-1, 1)
    scales = [np.arange(8.0)]
    g = mo.mondrian_groups(codes, scales, 2)
    assert g.tolist() == [0, 0, 2, 2, 1, 1, 3, 3]  # classes are numbered as they close: left children first
    # k = 3: one cut at the median (4 | 4), then no allowable cut
    assert mo.mondrian_groups(codes, scales, 3).tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert mo.mondrian_groups(codes, scales, 5).tolist() == [0] * 8
    # a skewed column: value 0 for 6 rows. Strict, k = 3: the median cut leaves 2 rows above it, so no cut;
    # k = 2: 6 | 2. Relaxed splits the ties 4 | 4; the all-zero half cannot be cut again, the other one 2 | 2
    codes = np.array([0, 0, 0, 0, 0, 0, 1, 2]).reshape(-1, 1)
    scales = [np.array([0.0, 1.0, 2.0])]
    assert mo.mondrian_groups(codes, scales, 3).tolist() == [0] * 8
    assert as_sets(mo.mondrian_groups(codes, scales, 2)) == {frozenset(range(6)), frozenset({6, 7})}
    assert mo.mondrian_groups(codes, scales, 3, strict=False).tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert as_sets(mo.mondrian_groups(codes, scales, 2, strict=False)) == {
        frozenset(range(4)), frozenset({4, 5}), frozenset({6, 7})}


def test_relaxed_ties_follow_the_next_widest_non_constant_dimension():
    # dim 0 is cut (6 ties at code 0); dim 1 is constant; dim 2 orders the ties: its 4 lowest go left
    codes = np.array([[0, 0, 5], [0, 0, 4], [0, 0, 3], [0, 0, 2], [0, 0, 1], [0, 0, 0], [1, 0, 0], [1, 0, 5]])
    scales = [np.array([0.0, 1.0]), np.array([3.0]), np.arange(6.0)]
    g = mo.mondrian_groups(codes, scales, 4, strict=False)
    assert as_sets(g) == {frozenset({2, 3, 4, 5}), frozenset({0, 1, 6, 7})}
    g = mo.mondrian_groups(codes, scales, 2, strict=False)
    assert as_sets(g) == set(ref_mondrian(codes, scales, 2, False))


def test_mondrian_two_dims_widest_first():
    # dim 0 spans 0..3 of scale 0..30 (width 1), dim 1 spans 0..1 of scale 0..10 (0.1 normalized: 1 of 10)
    codes = np.array([[0, 0], [1, 1], [2, 0], [3, 1], [0, 1], [1, 0], [2, 1], [3, 0]])
    scales = [np.array([0.0, 10.0, 20.0, 30.0]), np.array([0.0, 1.0, 10.0])]
    g, lo, hi = mo.mondrian_groups(codes, scales, 2, return_boxes=True)
    assert as_sets(g) == {frozenset({0, 4}), frozenset({1, 5}), frozenset({2, 6}), frozenset({3, 7})}
    _check_boxes(codes, g, lo, hi)


def test_code_type_thresholds():
    assert mo._code_type(1) is np.int8 and mo._code_type(127) is np.int8
    assert mo._code_type(128) is np.int16 and mo._code_type(2**15 - 1) is np.int16
    assert mo._code_type(2**15) is np.int32 and mo._code_type(2**31 - 1) is np.int32
    assert mo._code_type(2**31) is np.int64


def _buffers_in_a_fresh_thread():
    w = mo._workspace("pin_ws", 5, np.dtype(np.int64))
    assert len(w) == 5 and w.dtype == np.int64
    base = w.base
    assert len(base) == 5
    w2 = mo._workspace("pin_ws", 3, np.dtype(np.int64))
    assert w2.base is base and len(w2) == 3  # reused, not reallocated
    w3 = mo._workspace("pin_ws", 7, np.dtype(np.int64))
    assert len(w3) == 7 and len(w3.base) == 10  # grows by doubling
    w4 = mo._workspace("pin_ws", 4, np.dtype(np.int32))
    assert w4.dtype == np.int32 and len(w4.base) == 4  # another dtype: a fresh buffer of exactly that size
    s = mo._steps(5, 3)
    assert s.tolist() == [0, 3, 6, 9, 12] and not s.flags.writeable
    assert len(s.base) == 1024
    big = mo._steps(2000, 3)
    assert big.tolist() == list(range(0, 6000, 3)) and len(big.base) == 2000
    assert mo._steps(4, 3).base is big.base


def test_workspace_and_steps_buffers():
    # the buffers are per thread: a new thread starts without any, whatever ran before in this process
    import threading

    errors = []

    def run():
        try:
            _buffers_in_a_fresh_thread()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if errors:
        raise errors[0]


def test_evaluate_and_below_by_hand():
    c = np.array([2, 3, 3, 5, 0, 0, 1], dtype=np.int8)
    sz = np.array([4, 3])
    lo, hi = np.array([2, 0]), np.array([5, 3])  # the second bound is an outer one
    code, upto, nxt, state = mo._evaluate(c, sz, lo, hi, np.array([2, 1]))
    assert code.tolist() == [[2, 0], [5, 1], [3, 0]]  # lowest, highest, median split
    assert upto.tolist() == [3, 2] and nxt.tolist() == [5, 1]
    assert mo._below(state, slice(None)).tolist() == [1, 0]
    assert mo._below(state, np.array([1])).tolist() == [0]
    code, upto, nxt, state = mo._evaluate(c, sz, lo, hi, np.array([3, 3]))
    assert code[2].tolist() == [3, 1] and upto.tolist() == [3, 3] and nxt[0] == 5
    assert mo._below(state, slice(None)).tolist() == [1, 2]


def test_sides_strict_and_relaxed():
    c = np.array([1, 2, 2, 2, 3, 0, 0, 0, 0], dtype=np.int8)
    sz = np.array([5, 4])
    split = np.array([2, 0])
    upto = np.array([2, 2])
    below = np.array([1, 0])
    assert mo._sides(c, sz, split, upto, below, True).tolist() == [False, False, False, False, True,
                                                                   False, False, False, False]
    # relaxed: 1 tie of segment 0 and 2 of segment 1 go left, the first ones in row order
    assert mo._sides(c, sz, split, upto, below, False).tolist() == [False, False, True, True, True,
                                                                    False, False, True, True]
    key = np.array([0, 9, 1, 5, 0, 4, 3, 2, 1], dtype=np.int8)
    assert mo._sides(c, sz, split, upto, below, False, key).tolist() == [False, True, False, True, True,
                                                                         True, True, False, False]


def test_next_widest_and_distinct2():
    width = np.array([[0.5, 0.9, 0.1], [0.2, 0.2, 0.7], [0.3, 0.3, 0.3]])
    assert mo._next_widest(width, np.array([1, 2, 0])).tolist() == [0, 0, 1]
    assert width.tolist() == [[0.5, 0.9, 0.1], [0.2, 0.2, 0.7], [0.3, 0.3, 0.3]]  # input untouched
    side = np.array([False, True, False, True, False, False, True])
    sz = np.array([4, 3])
    s = np.array([0, 1, 1, 1, 2, 2, 0])
    assert mo._distinct2(side, sz, s, 3).tolist() == [[2, 1], [1, 1]]
    big = 2**23 + 1  # the sparse path (2 * n_p * n_s > 2**24) gives the same counts
    s2 = np.array([0, big - 1, big - 1, 5, 2, 2, 0])
    assert mo._distinct2(side, sz, s2, big).tolist() == [[2, 2], [1, 1]]
    # the last segment with nothing on its right side still gets a row of counts
    left_only = np.array([False, True, False, True, False, False, False])
    assert mo._distinct2(left_only, sz, s2, big).tolist() == [[2, 2], [2, 0]]
    assert mo._distinct2(left_only, sz, s, 3).tolist() == [[2, 1], [2, 0]]


def test_l_ok_by_hand():
    c = np.array([0, 1, 2, 3], dtype=np.int8)
    sz = np.array([4])
    split = np.array([1])
    upto = np.array([2])
    code, up, nxt, state = mo._evaluate(c, sz, np.array([0]), np.array([3]), np.array([2]))
    s = np.array([0, 1, 0, 0])
    assert mo._l_ok(c, sz, split, upto, state, True, None, s, 2, 2).tolist() == [False]
    assert mo._l_ok(c, sz, split, upto, state, True, None, s, 2, 1).tolist() == [True]
    s = np.array([0, 1, 0, 1])
    assert mo._l_ok(c, sz, split, upto, state, True, None, s, 2, 2).tolist() == [True]


def test_fka_box_labels_are_the_boxes_own_values() -> None:
    """fka.box_labels: a box whose bounds are values of the scale shows exactly those values (a bound one step off
    shows a neighbour: [20-22] or [21-23] instead of [21-22]); categoricals by their code range."""
    from crowddb.anonymize.fka import box_labels

    frame = pd.DataFrame({"age": [20, 21, 22, 23, 30], "c": ["a", "b", "c", "a", "b"]})
    enc = encode(frame, ["age", "c"])
    lo = np.array([[21, 0], [20, 1], [30, 2], [22, 0]], dtype=float)
    hi = np.array([[22, 1], [23, 1], [30, 2], [22, 2]], dtype=float)
    got = box_labels(enc, lo, hi)
    assert got.to_dict("list") == {"age": ["[21-22]", "[20-23]", "30", "22"], "c": ["{a,b}", "b", "c", "*"]}
