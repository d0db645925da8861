"""Pins exact behaviour of crowddb.anonymize (metrics, encoding, hierarchy, fulldomain, incognito, datafly, samples,
shared, api, synth) against hand-computed values: closed forms, plain-Python loops and small worked examples."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from crowddb.errors import ArgumentError, EmptyInputError, PrivacyError, UnknownColumnError

# ----------------------------------------------------------------------------------------------------------- metrics
from crowddb.anonymize import metrics as M


def _py_ncp(lo, hi, spans):
    tot, cnt = 0.0, 0
    for r in range(len(lo)):
        for j in range(len(spans)):
            tot += (hi[r][j] - lo[r][j]) / spans[j] if spans[j] > 0 else 0.0
            cnt += 1
    return 100.0 * tot / cnt if cnt else 0.0


def test_metrics_ncp_closed_form() -> None:
    lo = np.array([[0.0, 5.0, 1.0], [2.0, 5.0, 1.0], [1.0, 5.0, 1.0]])
    hi = np.array([[4.0, 5.0, 1.0], [10.0, 5.0, 1.0], [1.0, 5.0, 1.0]])
    spans = np.array([10.0, 0.0, 4.0])
    assert M.ncp(lo, hi, spans) == pytest.approx(_py_ncp(lo, hi, spans))
    assert M.ncp(lo, hi, spans) == pytest.approx(100.0 * (0.4 + 0.8) / 9)
    # a zero span contributes 0 even when hi != lo (never divided by)
    assert M.ncp(np.array([[0.0]]), np.array([[3.0]]), np.array([0.0])) == 0.0
    assert M.ncp(np.zeros((0, 2)), np.zeros((0, 2)), np.array([1.0, 1.0])) == 0.0
    assert M.ncp(np.array([[0.0]]), np.array([[1.0]]), [2]) == pytest.approx(50.0)  # list spans accepted


def test_metrics_compact() -> None:
    assert M.compact(np.array([3, 3, 5, 0])).tolist() == [1, 1, 2, 0]
    assert M.compact(np.array([1, 0, 1])).tolist() == [1, 0, 1]
    assert M.compact(np.array([2, 2])).tolist() == [0, 0]
    assert M.compact([4, 1]).dtype == np.int64


def _py_lex_ids(matrix) -> list[int]:
    rows = [tuple(float(v) for v in r) for r in matrix]
    rank = {r: i for i, r in enumerate(sorted(set(rows)))}
    return [rank[r] for r in rows]


def test_metrics_lex_ids_is_the_rank_of_each_row_among_the_distinct_rows() -> None:
    m = np.array([[2.0, 1.0], [1.0, 9.0], [2.0, 1.0], [1.0, -3.5], [2.0, 0.0]])
    assert M.lex_ids(m).tolist() == [3, 1, 3, 0, 2]
    assert M.lex_ids(m).dtype == np.int64
    rng = np.random.default_rng(7)
    for shape, top in (((300, 16), 4), ((50, 1), 3), ((400, 40), 3000)):  # the last re-ranks before overflowing
        m = rng.integers(-top, top, shape).astype(float) / 2
        m[1::5] = m[0::5][: len(m[1::5])]  # repeated rows
        assert M.lex_ids(m).tolist() == _py_lex_ids(m)
        assert M.lex_ids(m).tolist() == np.unique(m, axis=0, return_inverse=True)[1].reshape(-1).tolist()


def test_metrics_discernibility_pinned() -> None:
    g = np.array([0, 0, 4, 4, 4, 9])
    assert M.discernibility(g) == 4 + 9 + 1
    none = np.zeros(6, bool)
    assert M.discernibility(g, none) == 14
    sup = np.array([False, False, False, True, False, True])
    assert M.discernibility(g, sup) == 4 + 4 + 2 * 6
    assert M.discernibility(g, np.ones(6, bool)) == 36
    assert isinstance(M.discernibility(g, sup), int)


def test_metrics_release_metrics_pinned() -> None:
    groups = np.array([5, 5, 5, 2, 2, 2, 2])
    lo = np.array([[0.0, 1.0]] * 3 + [[4.0, 1.0]] * 4)
    hi = np.array([[2.0, 1.0]] * 3 + [[8.0, 1.0]] * 4)
    spans = np.array([8.0, 0.0])
    m = M.release_metrics(groups, lo, hi, spans, 3)
    assert m["ncp"] == pytest.approx(_py_ncp(lo, hi, spans))
    assert m["ncp"] == pytest.approx(100 * (3 * 0.25 + 4 * 0.5) / 14)
    assert m["discernibility"] == 9 + 16
    assert m["avg_class_size"] == pytest.approx(7 / 2 / 3)
    assert m["avg_class_size_raw"] == pytest.approx(3.5)
    assert m["n_groups"] == 2 and m["min_group_size"] == 3 and m["k"] == 3 and m["n_rows"] == 7
    assert m["suppressed"] == 0
    # per pre-class boxes with weights (row counts)
    mw = M.release_metrics(groups, np.array([[0.0, 1.0], [4.0, 1.0]]), np.array([[2.0, 1.0], [8.0, 1.0]]), spans, 3,
                           weights=np.array([3.0, 4.0]))
    assert mw["ncp"] == pytest.approx(m["ncp"])
    # suppression: discernibility charges n per suppressed row, count reported
    sup = np.array([False, False, False, False, False, True, True])
    ms = M.release_metrics(groups, lo, hi, spans, 3, suppressed=sup)
    assert ms["discernibility"] == 9 + 4 + 2 * 7
    assert ms["suppressed"] == 2
    m0 = M.release_metrics(groups, lo, hi, spans, 3, suppressed=np.zeros(7, bool))
    assert m0["discernibility"] == 25 and m0["suppressed"] == 0
    assert list(m) == ["ncp", "discernibility", "avg_class_size", "avg_class_size_raw", "n_groups",
                       "min_group_size", "k", "n_rows", "suppressed"]


def test_metrics_distribution_errors() -> None:
    with pytest.raises(ArgumentError, match=r"^answer distribution must be non-negative finite numbers, got \[\]$"):
        M.accuracy_bounds([])
    with pytest.raises(ArgumentError, match=r"^answer distribution must be non-negative finite numbers, got \[-1\.0, 2\.0\]$"):
        M.accuracy_bounds([-1, 2])
    with pytest.raises(ArgumentError, match="non-negative finite"):
        M.accuracy_bounds([np.nan, 1.0])
    with pytest.raises(ArgumentError, match="non-negative finite"):
        M.accuracy_bounds([np.inf, 1.0])
    with pytest.raises(ArgumentError, match=r"^answer distribution sums to zero$"):
        M.accuracy_bounds([0, 0])
    assert M.accuracy_bounds([0.0, 1.0]) == (1.0, 1.0)
    assert M.accuracy_bounds([0.3]) == (1.0, 1.0)
    lower, upper = M.accuracy_bounds([[1, 2], [3, 4]])
    assert lower == pytest.approx((1 + 4 + 9 + 16) / 100) and upper == 1.0


def test_metrics_probability_matrix_pinned() -> None:
    groups = np.array([7, 7, 7, 2, 2])
    answers = np.array(["b", "a", "b", "c", "a"])
    P, sizes, labels = M.probability_matrix(groups, answers)
    assert labels.tolist() == ["a", "b", "c"]
    assert sizes.tolist() == [2.0, 3.0]
    assert np.allclose(P, [[0.5, 1 / 3], [0.0, 2 / 3], [0.5, 0.0]])
    acc = M.release_accuracy(groups, answers)
    assert acc == pytest.approx((2 * (0.25 + 0.25) + 3 * (1 / 9 + 4 / 9)) / 5)


def test_metrics_matrix_accuracy_and_merge_loss() -> None:
    P = np.array([[0.5, 0.1], [0.5, 0.9]])
    assert M.matrix_accuracy(P, [2, 8]) == pytest.approx((2 * 0.5 + 8 * 0.82) / 10)
    assert M.matrix_accuracy(P.tolist(), np.array([1, 3])) == pytest.approx((0.5 + 3 * 0.82) / 4)
    # Eq. 8 with unequal sizes: N0 N1/(N0+N1) * sum (P0-P1)^2 / N
    assert M.merge_loss([1.0, 0.0], 2, [0.25, 0.75], 3, 10) == pytest.approx(2 * 3 / 5 * (0.5625 * 2) / 10)
    assert M.merge_loss([0.2, 0.8], 5, [0.6, 0.4], 1, 7) == pytest.approx(5 / 6 * 0.32 / 7)
    assert M.accuracy_ratio([1, 2, 3, 4, 5], [1, 0, 3, 0, 0]) == pytest.approx(0.4)


# ---------------------------------------------------------------------------------------------------------- encoding
from crowddb.anonymize import encoding as E
from crowddb.anonymize.hierarchy import Hierarchy

TREE = pd.DataFrame([["a1", "A", "*"], ["b1", "B", "*"], ["a2", "A", "*"], ["b2", "B", "*"], ["c1", "C", "*"]])


def test_encoding_qiencoding_properties() -> None:
    q = E.QIEncoding("x", "numeric", [1.0, 3.0, 7.0], np.array([1.0, 3.0, 7.0]))
    assert q.m == 3 and q.span == 6.0 and q.integer is True and q.hierarchy is None
    assert q.decode(2.0, 7.0) == [3.0, 7.0]
    assert q.decode(3.0, 3.0) == [3.0]
    assert q.decode(1.0, 7.0) == [1.0, 3.0, 7.0]
    empty = E.QIEncoding("e", "categorical")
    assert empty.m == 0 and empty.span == 0.0 and empty.categories == [] and len(empty.scale) == 0
    assert E.QIEncoding("c", "numeric", [5.0], np.array([5.0])).span == 0.0


def test_encoding_values_and_scale_of() -> None:
    frame = pd.DataFrame({"n": [10, 30, 20, 30], "c": ["u", "v", "u", "w"]})
    enc = E.encode(frame, ["n", "c"])
    assert [s.tolist() for s in enc.scale_of()] == [[10.0, 20.0, 30.0], [0.0, 1.0, 2.0]]
    assert enc.values().tolist() == [[10.0, 0.0], [30.0, 1.0], [20.0, 0.0], [30.0, 2.0]]
    assert enc.codes.tolist() == [[0, 0], [2, 1], [1, 0], [2, 2]]
    assert enc.codes.dtype == np.int64 and enc.qis == ["n", "c"]
    assert enc.columns["n"].integer is True and enc.columns["n"].kind == "numeric"
    assert enc.columns["n"].categories == [10.0, 20.0, 30.0]


def test_encoding_infer_kind() -> None:
    assert E.infer_kind(pd.Series(pd.Categorical(["a"], categories=["a", "b"], ordered=True))) == "ordinal"
    assert E.infer_kind(pd.Series(pd.Categorical(["a"], categories=["a", "b"], ordered=False))) == "categorical"
    assert E.infer_kind(pd.Series([True, False])) == "categorical"
    assert E.infer_kind(pd.Series([1, 2])) == "numeric"
    assert E.infer_kind(pd.Series([1.5, 2.0])) == "numeric"
    assert E.infer_kind(pd.Series(["x", "y"])) == "categorical"
    assert E.KINDS == ("numeric", "ordinal", "categorical")


def test_encoding_validate_messages() -> None:
    f = pd.DataFrame({"a": [1, 2, 3], "b": [1, None, None]})
    with pytest.raises(ArgumentError, match=r"^anonymize expects a pandas DataFrame, got dict$"):
        E.validate({"a": [1]}, ["a"], 2)
    with pytest.raises(ArgumentError, match=r"^anonymize needs at least one quasi-identifier$"):
        E.validate(f, [], 2)
    with pytest.raises(ArgumentError, match=r"^quasi-identifiers listed twice: \['a', 'a'\]$"):
        E.validate(f, ["a", "a"], 2)
    with pytest.raises(UnknownColumnError, match=r"^unknown quasi-identifier\(s\) \['z'\]; columns are \['a', 'b'\]$"):
        E.validate(f, ["a", "z"], 2)
    with pytest.raises(UnknownColumnError, match=r"\['z'\]"):
        E.validate(f, "z", 2)  # a single name is accepted as a list
    for bad in (True, 2.0, "2"):
        with pytest.raises(ArgumentError, match=r"^k must be an integer, got " + pytest.importorskip("re").escape(repr(bad)) + "$"):
            E.validate(f, ["a"], bad)
    with pytest.raises(EmptyInputError, match=r"^anonymize got a table with no rows$"):
        E.validate(f.iloc[:0], ["a"], 2)
    with pytest.raises(ArgumentError, match=r"^k must be at least 2, got k=1$"):
        E.validate(f, ["a"], 1)
    with pytest.raises(ArgumentError, match=r"^k=4 is larger than the number of rows \(3\): no k-anonymous release exists$"):
        E.validate(f, ["a"], 4)
    with pytest.raises(ArgumentError, match=r"^quasi-identifier 'b' has 2 NULL value\(s\); fill or filter them first$"):
        E.validate(f, ["a", "b"], 2)
    E.validate(f, ["a"], 2)  # boundaries are accepted
    E.validate(f, "a", 3)
    E.validate(f, ["a"], np.int64(3))


def test_encoding_numeric_errors() -> None:
    with pytest.raises(ArgumentError, match=r"^quasi-identifier 'x' is declared numeric but holds non-numeric value "
                                            r"'b' \(2 such rows\)$"):
        E.encode_column(pd.Series(["1", "b", "c", "2"]), "x", "numeric")
    with pytest.raises(ArgumentError, match=r"^quasi-identifier 'x' holds non-finite values \(inf\)$"):
        E.encode_column(pd.Series([1.0, np.inf]), "x", "numeric")
    with pytest.raises(ArgumentError, match=r"^kind of 'x' must be one of \('numeric', 'ordinal', 'categorical'\), "
                                            r"got 'text'$"):
        E.encode_column(pd.Series([1]), "x", "text")


def test_encoding_encode_column_kinds() -> None:
    codes, q = E.encode_column(pd.Series(["3", "1.5", "3", "-2"]), "x", "numeric")
    assert codes.tolist() == [2, 1, 2, 0] and codes.dtype == np.int64
    assert q.categories == [-2.0, 1.5, 3.0] and q.scale.tolist() == [-2.0, 1.5, 3.0] and q.integer is False
    assert q.kind == "numeric" and q.name == "x" and q.hierarchy is None
    codes, q = E.encode_column(pd.Series([5, 1, 5, 3]), "x", "numeric")
    assert codes.tolist() == [2, 0, 2, 1] and q.integer is True
    # ordinal from an ordered categorical: category order, absent categories dropped
    s = pd.Series(pd.Categorical(["hi", "lo", "hi"], categories=["lo", "mid", "hi"], ordered=True))
    codes, q = E.encode_column(s, "o", "ordinal")
    assert q.categories == ["lo", "hi"] and codes.tolist() == [1, 0, 1] and q.scale.tolist() == [0.0, 1.0]
    assert q.kind == "ordinal" and q.integer is True and codes.dtype == np.int64
    # ordinal from plain values: sorted order
    codes, q = E.encode_column(pd.Series(["c", "a", "b", "a"]), "o", "ordinal")
    assert q.categories == ["a", "b", "c"] and codes.tolist() == [2, 0, 1, 0]
    # categorical: first appearance
    codes, q = E.encode_column(pd.Series(["c", "a", "b", "a"]), "o", "categorical")
    assert q.categories == ["c", "a", "b"] and codes.tolist() == [0, 1, 2, 1] and q.scale.tolist() == [0.0, 1.0, 2.0]
    assert q.integer is True and codes.dtype == np.int64
    # hierarchy: DFS order, the hierarchy is kept
    h = Hierarchy.load(TREE, "h")
    codes, q = E.encode_column(pd.Series(["c1", "b1", "a2", "a1"]), "h", "categorical", h)
    assert q.categories == ["a1", "a2", "b1", "c1"] and codes.tolist() == [3, 2, 1, 0] and q.hierarchy is h
    assert q.scale.tolist() == [0.0, 1.0, 2.0, 3.0] and q.integer is True and q.kind == "categorical"
    # a NULL in an ordered categorical (validate normally rejects it first) has no code
    with pytest.raises(ArgumentError, match=r"^values of 'o' missing from its hierarchy: \[nan\]$"):
        E.encode_column(pd.Series(pd.Categorical(["a", None], categories=["a"], ordered=True)), "o", "ordinal")


def test_encoding_encode_options() -> None:
    frame = pd.DataFrame({"n": [3, 1, 2], "c": ["b", "a", "b"]})
    with pytest.raises(UnknownColumnError, match=r"^kinds/hierarchies name columns that are not quasi-identifiers: "
                                                 r"\['z', 'y'\]$"):
        E.encode(frame, ["n", "c"], kinds={"z": "numeric"}, hierarchies={"y": TREE})
    enc = E.encode(frame, ["n", "c"], kinds={"n": "categorical", "c": "ordinal"})
    assert enc.columns["n"].kind == "categorical" and enc.columns["n"].categories == [3, 1, 2]
    assert enc.columns["c"].kind == "ordinal" and enc.columns["c"].categories == ["a", "b"]
    numh = pd.DataFrame([["1", "low", "*"], ["2", "low", "*"], ["3", "high", "*"]])
    enc = E.encode(frame, ["n", "c"], hierarchies={"n": numh})
    assert enc.columns["n"].kind == "numeric" and isinstance(enc.columns["n"].hierarchy, Hierarchy)
    assert enc.columns["n"].categories == [1.0, 2.0, 3.0]
    assert enc.columns["c"].hierarchy is None
    ctree = pd.DataFrame([["a", "*"], ["b", "*"]])
    enc = E.encode(frame, ["c"], hierarchies={"c": ctree})
    assert enc.columns["c"].hierarchy.name == "c" and enc.qis == ["c"]


# --------------------------------------------------------------------------------------------------------- hierarchy
from crowddb.anonymize import hierarchy as H


def test_hierarchy_key() -> None:
    assert H._key(3.0) == "3" and H._key(np.float64(-4.0)) == "-4"
    assert H._key(2.5) == "2.5" and H._key(np.float32(0.5)) == "0.5"
    assert H._key(7) == "7" and H._key("a") == "a" and H._key(np.int64(5)) == "5"


def test_hierarchy_init_and_load(tmp_path) -> None:
    h = H.Hierarchy(pd.DataFrame([[" a ", " A", "*"], ["b", "B ", "*"]], index=[5, 9]), "x")
    assert h.table.iloc[:, 0].tolist() == ["a", "b"] and h.table.iloc[:, 1].tolist() == ["A", "B"]
    assert h.table.index.tolist() == [0, 1] and h.row_of == {"a": 0, "b": 1} and h.name == "x" and h.height == 2
    num = H.Hierarchy(pd.DataFrame([[1, 10], [2, 10]]), "n")
    assert num.row_of == {"1": 0, "2": 1} and num.labels([1.0, 2], 1).tolist() == ["10", "10"]
    with pytest.raises(ArgumentError, match=r"^hierarchy of 'x' needs at least two levels \(leaf and root\)$"):
        H.Hierarchy(pd.DataFrame([["a"], ["b"]]), "x")
    with pytest.raises(ArgumentError, match=r"^hierarchy of 'x' lists a leaf twice$"):
        H.Hierarchy(pd.DataFrame([["a", "*"], [" a", "*"]]), "x")
    empty = H.Hierarchy(pd.DataFrame(columns=[0, 1]), "e")
    assert empty.height == 1 and empty.row_of == {}
    assert H.Hierarchy.load(h) is h
    assert H.Hierarchy.load(pd.DataFrame([["a", "*"]]), "nm").name == "nm"
    p = tmp_path / "h.csv"
    p.write_text("NA;grp;*\nx ;grp;*\n")
    for spec in (str(p), p):
        g = H.Hierarchy.load(spec, "f")
        assert g.table.values.tolist() == [["NA", "grp", "*"], ["x", "grp", "*"]] and g.name == "f" and g.height == 2
    with pytest.raises(ArgumentError, match=r"^hierarchy file for 'f' not found: /nonexistent/h\.csv$"):
        H.Hierarchy.load("/nonexistent/h.csv", "f")
    with pytest.raises(ArgumentError, match=r"^hierarchy of 'f' must be a DataFrame or a CSV path, got list$"):
        H.Hierarchy.load([["a", "*"]], "f")


def test_hierarchy_rows_labels_order() -> None:
    h = H.Hierarchy(TREE, "t")
    assert h.rows(["c1", "a1", "a2"]).tolist() == [4, 0, 2] and h.rows(["c1"]).dtype == np.int64
    with pytest.raises(ArgumentError, match=r"^values of 't' missing from its hierarchy: \['q', 'r'\]$"):
        h.rows(["a1", "q", "r"])
    with pytest.raises(ArgumentError, match=r"missing from its hierarchy: \['v1', 'v2', 'v3', 'v4', 'v5'\]$"):
        h.rows([f"v{i}" for i in range(1, 8)])
    assert h.labels(["b2", "a1"], 1).tolist() == ["B", "A"] and h.labels(["b2"], 0).tolist() == ["b2"]
    assert h.labels(["b2"], 2).tolist() == ["*"]
    # DFS order at every level: root groups in file order, then middle groups, then leaves in file order
    deep = H.Hierarchy(pd.DataFrame([["x1", "X", "P", "*"], ["y1", "Y", "Q", "*"], ["z1", "Z", "P", "*"],
                                     ["x2", "X", "P", "*"], ["y2", "Y", "Q", "*"]]), "d")
    assert deep.ordered_leaves(pd.Series(["y2", "z1", "x2", "y1", "x1", "z1"])) == ["x1", "x2", "z1", "y1", "y2"]
    two_roots = H.Hierarchy(pd.DataFrame([["b", "R2"], ["a", "R1"], ["c", "R2"]]), "r")
    assert two_roots.ordered_leaves(pd.Series(["a", "c", "b"])) == ["b", "c", "a"]


def test_hierarchy_lca_ranges_levels() -> None:
    deep = H.Hierarchy(pd.DataFrame([["x1", "X", "P", "*"], ["x2", "X", "P", "*"], ["z1", "Z", "P", "*"],
                                     ["y1", "Y", "Q", "*"], ["y2", "Y", "Q", "*"]]), "d")
    cats = ["x1", "x2", "z1", "y1", "y2"]
    lab, lo, hi = H.lca_ranges(deep, cats, np.array([0, 1, 0, 3, 2, 4, 2]), np.array([1, 2, 0, 4, 4, 4, 2]))
    assert lab.tolist() == ["X", "P", "x1", "Y", "*", "y2", "z1"]
    assert lo.tolist() == [0, 0, 0, 3, 0, 4, 2] and hi.tolist() == [1, 2, 0, 4, 4, 4, 2]
    # a top level with two labels: the LCA is found at the last level, '*' only above it
    top = H.Hierarchy(pd.DataFrame([["a", "A", "R"], ["b", "B", "R"], ["c", "C", "S"]]), "t")
    lab, lo, hi = H.lca_ranges(top, ["a", "b", "c"], np.array([0, 1, 0]), np.array([1, 2, 2]))
    assert lab.tolist() == ["R", "*", "*"] and lo.tolist() == [0, 0, 0] and hi.tolist() == [1, 2, 2]
    # numeric leaves: integral floats are looked up and labelled without '.0'
    numh = H.Hierarchy(pd.DataFrame([["1", "L"], ["2", "L"], ["3", "H"]]), "n")
    lab, lo, hi = H.lca_ranges(numh, [1.0, 2.0, 3.0], np.array([0, 2, 0]), np.array([1, 2, 0]))
    assert lab.tolist() == ["L", "3", "1"] and lo.tolist() == [0, 2, 0] and hi.tolist() == [1, 2, 0]
    src_lo = np.array([0, 1])
    H.lca_ranges(numh, [1.0, 2.0, 3.0], src_lo, np.array([1, 2]))
    assert src_lo.tolist() == [0, 1]  # inputs are not modified


# -------------------------------------------------------------------------------------------------------- fulldomain
from crowddb.anonymize import fulldomain as F


def _ladder(vals, bands=16, **kw):
    enc = E.encode(pd.DataFrame({"a": vals}), ["a"], **kw)
    lad = F.build_ladder(enc.columns["a"], bands)
    return ([x.tolist() for x in lad.ids], [x.tolist() for x in lad.labels], [x.tolist() for x in lad.lo],
            [x.tolist() for x in lad.hi], lad.height)


def test_fulldomain_nice() -> None:
    assert F._nice(0.0) == 1.0 and F._nice(-3.0) == 1.0
    assert F._nice(1.0) == 1.0 and F._nice(2.0) == 2.0 and F._nice(5.0) == 5.0 and F._nice(10.0) == 10.0
    assert F._nice(3.75) == 5.0 and F._nice(6.25) == 10.0 and F._nice(1.5) == 2.0 and F._nice(7.0) == 10.0
    assert F._nice(0.3) == pytest.approx(0.5) and F._nice(0.15) == pytest.approx(0.2)
    assert F._nice(0.125) == pytest.approx(0.2) and F._nice(20.0) == 20.0 and F._nice(21.0) == 50.0
    assert F._nice(60.0) == 100.0


def test_fulldomain_numeric_ladders() -> None:
    # span 15 / 4 bands = 3.75 -> step 5, anchor 0; 5-wide, then 10-wide bands, clipped to [3, 18]
    ids, labs, lo, hi, height = _ladder([3, 7, 12, 18], 4)
    assert ids == [[0, 1, 2, 3], [0, 1, 2, 3], [0, 0, 1, 1], [0, 0, 0, 0]] and height == 3
    assert labs == [["3", "7", "12", "18"], ["[0-4]", "[5-9]", "[10-14]", "[15-19]"], ["[0-9]", "[10-19]"], ["*"]]
    assert lo == [[3, 7, 12, 18], [3, 5, 10, 15], [3, 10], [3]]
    assert hi == [[3, 7, 12, 18], [4, 9, 14, 18], [9, 18], [18]]
    # span 25 / 4 = 6.25 -> step 10, anchor floor(13/10)*10 = 10
    ids, labs, lo, hi, height = _ladder([13, 17, 22, 38], 4)
    assert ids == [[0, 1, 2, 3], [0, 0, 1, 2], [0, 0, 0, 1], [0, 0, 0, 0]] and height == 3
    assert labs == [["13", "17", "22", "38"], ["[10-19]", "[20-29]", "[30-39]"], ["[10-29]", "[30-49]"], ["*"]]
    assert lo == [[13, 17, 22, 38], [13, 20, 30], [13, 30], [13]]
    assert hi == [[13, 17, 22, 38], [19, 29, 38], [29, 38], [38]]
    # negative values: anchor floor(-7/10)*10 = -10
    ids, labs, lo, hi, height = _ladder([-7, -2, 4], 2)
    assert ids == [[0, 1, 2], [0, 0, 1], [0, 0, 0]]
    assert labs == [["-7", "-2", "4"], ["[-10--1]", "[0-9]"], ["*"]]
    assert lo == [[-7, -2, 4], [-7, 0], [-7]] and hi == [[-7, -2, 4], [-1, 4], [4]]
    # integers: the step is at least 1 (span 2 / 16 bands would give 0.2)
    ids, labs, lo, hi, height = _ladder([1, 2, 3])
    assert labs == [["1", "2", "3"], ["[1-1]", "[2-2]", "[3-3]"], ["[1-2]", "[3-4]"], ["*"]]
    assert ids == [[0, 1, 2], [0, 1, 2], [0, 0, 1], [0, 0, 0]]
    assert lo == [[1, 2, 3], [1, 2, 3], [1, 3], [1]] and hi == [[1, 2, 3], [1, 2, 3], [2, 3], [3]]
    # floats: half-open intervals, no integer rounding of the step
    ids, labs, lo, hi, height = _ladder([0.1, 0.25, 0.9], 2)
    assert labs == [["0.1", "0.25", "0.9"], ["[0-0.5)", "[0.5-1)"], ["*"]] and ids == [[0, 1, 2], [0, 0, 1], [0, 0, 0]]
    assert lo == [[0.1, 0.25, 0.9], [0.1, 0.5], [0.1]] and hi == [[0.1, 0.25, 0.9], [0.5, 0.9], [0.9]]
    ids, labs, lo, hi, height = _ladder([0.5, 1.0, 1.5, 2.0], 4)  # span 1.5 / 4 -> step 0.5, anchor 0.5
    assert labs[1] == ["[0.5-1)", "[1-1.5)", "[1.5-2)", "[2-2.5)"] and labs[2] == ["[0.5-1.5)", "[1.5-2.5)"]
    assert height == 3 and labs[3] == ["*"] and hi[2] == [1.5, 2.0] and lo[2] == [0.5, 1.5]
    # a constant column has the leaf level only
    assert _ladder([5, 5]) == ([[0]], [["5"]], [[5.0]], [[5.0]], 0)
    assert _ladder(["q", "q"]) == ([[0]], [["q"]], [[0.0]], [[0.0]], 0)


def test_fulldomain_categorical_and_hierarchy_ladders() -> None:
    ids, labs, lo, hi, height = _ladder(list("abcde"))
    assert ids == [[0, 1, 2, 3, 4], [0, 0, 1, 1, 2], [0, 0, 0, 0, 1], [0, 0, 0, 0, 0]] and height == 3
    assert labs == [list("abcde"), ["{a,b}", "{c,d}", "{e}"], ["{a,b,c,d}", "{e}"], ["*"]]
    assert lo == [[0, 1, 2, 3, 4], [0, 2, 4], [0, 4], [0]] and hi == [[0, 1, 2, 3, 4], [1, 3, 4], [3, 4], [4]]
    ids, labs, lo, hi, height = _ladder(["x", "y", "z"])
    assert ids == [[0, 1, 2], [0, 0, 1], [0, 0, 0]] and labs == [["x", "y", "z"], ["{x,y}", "{z}"], ["*"]]
    ids, labs, lo, hi, height = _ladder(["x", "y"])
    assert ids == [[0, 1], [0, 0]] and labs == [["x", "y"], ["*"]] and lo == [[0, 1], [0]] and hi == [[0, 1], [1]]
    # hierarchy whose top level has two labels: a '*' level is added above it
    ids, labs, lo, hi, height = _ladder(["b", "a", "c"], hierarchies={"a": pd.DataFrame(
        [["a", "A", "R"], ["b", "A", "R"], ["c", "C", "S"]])})
    assert ids == [[0, 1, 2], [0, 0, 1], [0, 0, 1], [0, 0, 0]] and height == 3
    assert labs == [["a", "b", "c"], ["A", "C"], ["R", "S"], ["*"]]
    assert lo == [[0, 1, 2], [0, 2], [0, 2], [0]] and hi == [[0, 1, 2], [1, 2], [1, 2], [2]]
    ids, labs, lo, hi, height = _ladder(["b", "a", "c"], hierarchies={"a": pd.DataFrame(
        [["a", "A", "*"], ["b", "A", "*"], ["c", "C", "*"]])})
    assert ids == [[0, 1, 2], [0, 0, 1], [0, 0, 0]] and labs == [["a", "b", "c"], ["A", "C"], ["*"]] and height == 2
    ids, labs, lo, hi, height = _ladder([1, 2, 3], hierarchies={"a": pd.DataFrame([["1", "lo"], ["2", "lo"],
                                                                                   ["3", "hi"]])})
    assert labs == [["1", "2", "3"], ["lo", "hi"], ["*"]] and ids == [[0, 1, 2], [0, 0, 1], [0, 0, 0]]
    assert lo == [[1, 2, 3], [1, 3], [1]] and hi == [[1, 2, 3], [2, 3], [3]]
    # _level: class ids compacted, each class's label and its scale box
    q = E.QIEncoding("z", "numeric", [1.0, 4.0, 6.0], np.array([1.0, 4.0, 6.0]))
    cid, clabs, clo, chi = F._level(q, np.array([7, 3, 7]), ["p", "q", "p"])
    assert cid.tolist() == [1, 0, 1] and clabs.tolist() == ["q", "p"] and clo.tolist() == [4, 1]
    assert chi.tolist() == [4, 6]
    t = F._top(q)
    assert t[0].tolist() == [0, 0, 0] and t[1].tolist() == ["*"] and t[2].tolist() == [1.0] and t[3].tolist() == [6.0]


def test_fulldomain_class_keys() -> None:
    k = F.class_keys([np.array([0, 1, 2, 1]), np.array([1, 0, 1, 0])], [3, 2])
    assert k.tolist() == [1, 2, 5, 2]
    assert F.class_keys([np.array([2, 0])], [3]).tolist() == [2, 0]
    # cardinalities whose product passes 2**62: keys are re-densified and still separate every combination
    cols = [np.array([0, 2**31 - 1, 0, 5, 0]), np.array([1, 2**31 - 1, 1, 0, 1]), np.array([3, 0, 3, 3, 2])]
    key = F.class_keys(cols, [2**31, 2**31, 4])
    combos = list(zip(*[c.tolist() for c in cols]))
    for a in range(5):
        for b in range(5):
            assert (key[a] == key[b]) == (combos[a] == combos[b])
    # at the second column 2**31 * 2**31 reaches 2**62: keys re-numbered 0,1,0,2,0 by first appearance first
    assert key.tolist() == [(0 * 2**31 + 1) * 4 + 3, (1 * 2**31 + 2**31 - 1) * 4 + 0, 7, (2 * 2**31 + 0) * 4 + 3,
                            (0 * 2**31 + 1) * 4 + 2]


def _fd(c, sg=None, **cols):
    fr = pd.DataFrame({"c": c, **cols})
    qis = ["c", *cols]
    return fr, F.FullDomain(E.encode(fr, qis), shared_groups=None if sg is None else np.array(sg))


def test_fulldomain_level_loss_and_ncp() -> None:
    # categorical a,a,b,c: level 1 = {a,b},{c}: widths 1,1,0 of span 2 -> (2*1 + 1 + 0) / 4 / 2; top: 1
    _, f = _fd(list("aabc"))
    assert [x.tolist() for x in f.level_loss] == [[0.0, 0.375, 1.0]] and f.heights.tolist() == [2] and f.n == 4
    assert f.ncp([1]) == pytest.approx(37.5)
    assert f.ncp([1], 2) == pytest.approx(100 * (0.375 * 2 + 2) / 4)
    assert f.ncp([0], 4) == pytest.approx(100.0)
    # two QIs: the node's NCP is the mean of the QIs' level losses; a constant QI has 0 at every level
    _, f = _fd(list("aabc"), n=[10, 20, 30, 50], k=[7, 7, 7, 7])
    assert f.level_loss[2].tolist() == [0.0] and f.heights.tolist() == [2, 5, 0]
    # n: span 40 / 16 = 2.5 -> bands of 5, 10, 20, 40 anchored at 10, clipped to [10, 50]; widths over 4 rows / 40
    assert f.level_loss[1].tolist() == pytest.approx([0.0, 12 / 160, 27 / 160, 57 / 160, 117 / 160, 1.0])
    assert f.ncp([1, 3, 0]) == pytest.approx(100 * (0.375 + 57 / 160 + 0.0) / 3)
    # row class ids at a level, all rows or some
    assert f.row_ids(0, 1).tolist() == [0, 0, 0, 1] and f.row_ids(0, 1, rows=[3, 0]).tolist() == [1, 0]
    assert f.row_ids(0, 0, rows=np.array([2])).tolist() == [1]


def test_fulldomain_classes_and_small() -> None:
    _, f = _fd(list("aabbab"), n=[1, 1, 1, 2, 2, 2])
    ids, sizes = f.classes([0, 0])
    assert ids.tolist() == [0, 0, 1, 2, 3, 2] and sizes.tolist() == [2, 1, 2, 1]
    ids, sizes = f.classes([0, 0], dims=[1])
    assert ids.tolist() == [0, 0, 0, 1, 1, 1] and sizes.tolist() == [3, 3]
    ids, sizes = f.classes([1, 0], dims=(0, 1))
    assert ids.tolist() == [0, 0, 0, 1, 1, 1]
    assert f.small([0, 0], 2).tolist() == [False, False, True, False, True, False]
    assert f.small([0, 0], 3).tolist() == [True] * 6
    assert f.small([0, 0], 3, dims=[0]).tolist() == [False] * 6
    assert f.small([0, 0], 4, dims=[1]).tolist() == [True] * 6


def test_fulldomain_suppression_rules() -> None:
    _, f = _fd(["x"] * 5 + ["y"])
    assert f.suppression([0], 2, 2).tolist() == [True, False, False, False, False, True]  # 1 < k: one x joins y
    assert f.suppression([0], 2, 1) is None  # k rows would be suppressed, over the limit
    assert f.suppression([0], 2, 0) is None
    assert f.suppression([1], 2, 0).tolist() == [False] * 6  # the top node: nothing to suppress
    _, f = _fd(["x"] * 3 + ["y"])
    assert f.suppression([0], 2, 5).tolist() == [True, False, False, True]  # x keeps 2 >= k
    _, f = _fd(["x", "x", "y"])
    assert f.suppression([0], 2, 5) is None  # x would keep 1 < k
    _, f = _fd(["x"] * 4 + ["y", "z"])
    assert f.suppression([0], 2, 2).tolist() == [False] * 4 + [True, True]  # exactly the limit, exactly k rows
    assert f.suppression([0], 2, 1) is None
    _, f = _fd(list("xxyy"))
    s = f.suppression([0], 2, 0)
    assert s is not None and s.tolist() == [False] * 4
    # the largest class gives the rows: w (3), x (5), y (1), k=3: two x rows join y
    _, f = _fd(list("wwwxxxxxy"))
    assert f.suppression([0], 3, 3).tolist() == [False] * 3 + [True, True] + [False] * 3 + [True]


def test_fulldomain_group_suppression() -> None:
    # classes a,a,a | b,b,b | c; groups {0,1} {2,3} {4,5} {6}; k=2. c is small -> group 3 out (1 row < k), so the
    # largest class (a) gives its first row's group {0,1}; a keeps 1 row -> out; its group {2,3} takes row 3 of b
    _, f = _fd(list("aaabbbc"), [0, 0, 1, 1, 2, 2, 3])
    assert f.suppression([0], 2, 10).tolist() == [True, True, True, True, False, False, True]
    assert f.suppression([0], 2, 5).tolist() == [True, True, True, True, False, False, True]
    assert f.suppression([0], 2, 4) is None
    assert f.suppression([2], 2, 0).tolist() == [False] * 7  # nothing small
    _, f = _fd(list("aaabc"), [0, 0, 1, 2, 3])
    assert f.suppression([0], 2, 10).tolist() == [False, False, False, True, True]
    assert f.suppression([0], 2, 2).tolist() == [False, False, False, True, True]
    assert f.suppression([0], 2, 1) is None
    _, f = _fd(list("aaab"), [0, 0, 1, 2])  # b alone: the first a group {0,1} joins, a keeps 1 row -> all out
    assert f.suppression([0], 2, 10).tolist() == [True, True, True, True]
    _, f = _fd(list("abc"), [0, 1, 2])
    assert f.suppression([0], 4, 10) is None  # every row out and still fewer than k: impossible
    # a group spanning two classes drags the other class's rows along
    _, f = _fd(list("aabbbc"), [0, 1, 2, 2, 3, 1])
    # c (row 5) small -> group 1 = rows 1, 5 -> a keeps 1 -> row 0 (group 0) out -> 3 rows >= k
    assert f.suppression([0], 2, 10).tolist() == [True, True, False, False, False, True]


def test_fulldomain_release_pinned() -> None:
    fr = pd.DataFrame({"c": list("wwwxxxxxy"), "v": range(9)})
    f = F.FullDomain(E.encode(fr, ["c"]))
    sup = f.suppression([0], 3, 3)
    r = f.release(fr, [0], 3, "datafly", sup, {"z": 1})
    assert r.table["c"].tolist() == ["w", "w", "w", "*", "*", "x", "x", "x", "*"]
    assert r.table["v"].tolist() == list(range(9))
    assert r.groups.tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 1]
    assert r.lo[:, 0].tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 0] and r.hi[:, 0].tolist() == [0, 0, 0, 2, 2, 1, 1, 1, 2]
    m = r.metrics
    assert m["ncp"] == pytest.approx(100 / 3) and m["discernibility"] == 9 + 9 + 3 * 9 and m["suppressed"] == 3
    assert m["method"] == "datafly" and m["levels"] == {"c": 0} and m["z"] == 1 and m["n_groups"] == 3
    # two QIs, a generalized level, suppressed rows '*' in every QI and the whole domain as their box
    fr = pd.DataFrame({"n": [1, 2, 3, 4, 5, 6, 7], "c": list("aabbbbc")})
    f = F.FullDomain(E.encode(fr, ["n", "c"]), bands=2)
    node = [1, 1]
    sup = np.array([False] * 6 + [True])
    r = f.release(fr, node, 2, "incognito", sup, None)
    # span 6 / 2 bands = 3 -> step 5, anchor 0: [0-4] and [5-9], boxes clipped to [1, 7]
    assert r.table["n"].tolist() == ["[0-4]"] * 4 + ["[5-9]"] * 2 + ["*"]
    assert r.table["c"].tolist() == ["{a,b}"] * 6 + ["*"]
    assert r.groups.tolist() == [0, 0, 0, 0, 2, 2, 1]  # classes numbered in box order
    assert r.lo.tolist() == [[1, 0]] * 4 + [[5, 0]] * 2 + [[1, 0]]
    assert r.hi.tolist() == [[4, 1]] * 4 + [[7, 1]] * 2 + [[7, 2]]
    assert r.metrics["levels"] == {"n": 1, "c": 1} and r.metrics["method"] == "incognito"
    assert r.metrics["suppressed"] == 1
    # no suppression mask (or an empty one): no '*' class
    for s in (None, np.zeros(7, bool)):
        r = f.release(fr, [1, 1], 2, "x", s)
        assert r.table["c"].tolist() == ["{a,b}"] * 6 + ["{c}"] and r.groups.tolist() == [0, 0, 0, 0, 1, 1, 2]
        assert r.metrics["suppressed"] == 0 and r.hi[6].tolist() == [7, 2] and r.lo[6].tolist() == [5, 2]
        assert r.table["n"].tolist() == ["[0-4]"] * 4 + ["[5-9]"] * 3


# ------------------------------------------------------------------------------------------------ datafly, incognito
import itertools

from crowddb.anonymize import anonymize
from crowddb.anonymize import datafly as D
from crowddb.anonymize import incognito as I

GRID = pd.DataFrame({"c": list("abcdabcd"), "s": list("xxyyyyxx")})  # every (c, s) pair once


def _levels(rel):
    return rel.metrics["levels"]


def test_datafly_climbs_the_qi_with_most_distinct_values() -> None:
    # c has 4 distinct values, s 2: c climbs to {a,b},{c,d}; then every class has 2 rows
    rel = anonymize(GRID, ["c", "s"], 2, method="datafly")
    assert _levels(rel) == {"c": 1, "s": 0} and rel.metrics["max_suppressed"] == 2 and rel.metrics["suppressed"] == 0
    assert rel.table["c"].tolist() == ["{a,b}", "{a,b}", "{c,d}", "{c,d}"] * 2
    assert rel.metrics["ncp"] == pytest.approx(100 * (1 / 3 + 0) / 2) and rel.metrics["method"] == "datafly"
    # ties go to the first QI: s listed first (2 distinct) against c at level 1 (2 distinct) at k=4
    rel = anonymize(GRID, ["c", "s"], 4, method="datafly", max_suppressed=0)
    assert _levels(rel) == {"c": 2, "s": 0}
    # s first: c climbs (4 > 2 distinct), then the tie 2 = 2 goes to s, which reaches '*'
    rel = anonymize(GRID, ["s", "c"], 4, method="datafly", max_suppressed=0)
    assert _levels(rel) == {"s": 1, "c": 1}
    # with a suppression budget Datafly stops as soon as the small rows fit into it
    frame = pd.DataFrame({"c": list("aaaabbbbc")})
    rel = anonymize(frame, ["c"], 2, method="datafly")
    assert _levels(rel) == {"c": 0}
    assert rel.metrics["suppressed"] == 2 and rel.table["c"].tolist() == ["*"] + list("aaabbbb") + ["*"]
    rel = anonymize(frame, ["c"], 2, method="datafly", max_suppressed=0)
    # level 1 is {a,b},{c}: c still alone, so the top level
    assert _levels(rel) == {"c": 2} and rel.metrics["suppressed"] == 0 and rel.metrics["max_suppressed"] == 0
    assert rel.table["c"].tolist() == ["*"] * 9
    with pytest.raises(ArgumentError, match=r"^max_suppressed must be >= 0, got -1$"):
        anonymize(frame, ["c"], 2, method="datafly", max_suppressed=-1)


def test_datafly_direct_call_defaults() -> None:
    enc = E.encode(GRID, ["c", "s"])
    rel = D.datafly(GRID, enc, 2)
    assert _levels(rel) == {"c": 1, "s": 0} and rel.metrics["max_suppressed"] == 2
    rel = D.datafly(GRID, enc, 2, max_suppressed=np.int64(3), bands=4)
    assert rel.metrics["max_suppressed"] == 3 and type(rel.metrics["max_suppressed"]) is int


def test_incognito_worked_example() -> None:
    # lattice c 0..2 x s 0..1; minimal k-anonymous nodes (1,0) NCP 1/6 and (0,1) NCP 1/2; bottom-up evaluation:
    # (0,0) no, (0,1) yes, (1,0) yes; the rest generalize one of them
    rel = anonymize(GRID, ["c", "s"], 2, method="incognito", max_suppressed=0)
    m = rel.metrics
    assert _levels(rel) == {"c": 1, "s": 0} and m["minimal_nodes"] == 2 and m["evaluations"] == 3
    assert m["lattice_complete"] is True and m["max_suppressed"] == 0 and m["method"] == "incognito"
    assert m["ncp"] == pytest.approx(100 / 6)
    rel = anonymize(GRID, ["c", "s"], 2, method="incognito", max_suppressed=0, max_evaluations=2)
    assert _levels(rel) == {"c": 0, "s": 1} and rel.metrics["evaluations"] == 2
    assert rel.metrics["lattice_complete"] is False and rel.metrics["minimal_nodes"] == 1
    rel = anonymize(GRID, ["c", "s"], 2, method="incognito", max_suppressed=0, max_evaluations=1)
    assert _levels(rel) == {"c": 2, "s": 1} and rel.metrics["ncp"] == 100.0 and rel.metrics["minimal_nodes"] == 1
    rel = anonymize(GRID, ["c", "s"], 2, method="incognito", max_suppressed=0, max_evaluations=3)
    assert rel.metrics["lattice_complete"] is True and rel.metrics["evaluations"] == 3
    rel = anonymize(GRID, ["c", "s"], 2, method="incognito")
    assert rel.metrics["max_suppressed"] == 2 and _levels(rel) == {"c": 1, "s": 0}
    with pytest.raises(ArgumentError, match=r"^Incognito's lattice has 6 nodes over 2 quasi-identifiers \(limit 5\); "
                                            r"use method='datafly' or 'mondrian', or fewer quasi-identifiers$"):
        anonymize(GRID, ["c", "s"], 2, method="incognito", max_lattice=5)
    anonymize(GRID, ["c", "s"], 2, method="incognito", max_lattice=6)


def _brute_force(fd, k, limit):
    """Every node of the lattice, plain loops: the minimal anonymous ones and the lowest-NCP one among them."""
    ranges = [range(h + 1) for h in fd.heights]
    anon = {nd for nd in itertools.product(*ranges) if fd.suppression(np.array(nd), k, limit) is not None}
    minimal = [nd for nd in anon if not any(o != nd and all(a <= b for a, b in zip(o, nd)) for o in anon)]
    if not minimal:
        minimal = [tuple(int(h) for h in fd.heights)]

    def cost(nd):
        s = fd.suppression(np.array(nd), k, limit)
        return fd.ncp(np.array(nd), int(s.sum()))

    # the tie rule, restated: NCPs within 1e-9 relative or 1e-12 absolute are equal, the lowest level vector wins
    costs = {nd: cost(nd) for nd in minimal}
    low = min(costs.values())
    tied = [nd for nd, c in costs.items() if c == low or abs(c - low) <= 1e-9 * max(abs(c), abs(low)) + 1e-12]
    return min(tied), len(minimal)


@pytest.mark.parametrize("seed,k,limit", [(0, 3, 0), (1, 4, 3), (2, 5, None), (3, 2, 1)])
def test_incognito_matches_brute_force(seed, k, limit) -> None:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"a": rng.integers(0, 40, 40), "b": rng.choice(list("pqrstu"), 40),
                          "c": rng.choice(list("xyz"), 40), "d": rng.integers(0, 3, 40)})
    qis = ["a", "b", "c", "d"]
    enc = E.encode(frame, qis)
    fd = F.FullDomain(enc, 4)
    lim = k if limit is None else limit
    best, n_min = _brute_force(fd, k, lim)
    rel = I.incognito(frame, enc, k, max_suppressed=limit, bands=4)
    assert tuple(rel.metrics["levels"][q] for q in qis) == best
    assert rel.metrics["minimal_nodes"] == n_min and rel.metrics["lattice_complete"] is True
    assert rel.metrics["max_suppressed"] == lim


def test_incognito_helpers() -> None:
    enc = E.encode(GRID, ["c", "s"])
    fd = F.FullDomain(enc)
    assert I._anonymous(fd, np.array([0, 0]), 2, 8) is True  # 8 small rows fit a limit of 8 (all suppressed)
    assert I._anonymous(fd, np.array([0, 0]), 2, 7) is False
    assert I._anonymous(fd, np.array([0, 0]), 2, 0, dims=(0,)) is True  # c alone: 2 rows per value
    assert I._anonymous(fd, np.array([0, 0]), 3, 7, dims=(0,)) is False
    assert I._anonymous(fd, np.array([0, 0]), 3, 8, dims=(0,)) is True
    three = pd.DataFrame({"c": list("abcdabcd"), "s": list("xxyyyyxx"), "t": list("uvuvuvuv")})
    fd3 = F.FullDomain(E.encode(three, ["c", "s", "t"]))
    tables = I._pair_tables(fd3, np.array([0, 0, 0]), 2, 0)
    assert sorted(tables) == [(0, 1), (0, 2), (1, 2)]
    assert tables[(0, 1)].tolist() == [[False, True], [True, True], [True, True]]
    # (c, t): c,t pairs a-u a-u b-v b-v c-u c-u d-v d-v: already 2 each at the bottom
    assert tables[(0, 2)].tolist() == [[True, True], [True, True], [True, True]]
    assert tables[(1, 2)].tolist() == [[True, True], [True, True]]
    # rows of the table below lo stay False; a k=3 pass
    tables = I._pair_tables(fd3, np.array([1, 0, 0]), 3, 0)
    assert tables[(0, 1)].tolist() == [[False, False], [False, True], [True, True]]
    rel = I.incognito(three, E.encode(three, ["c", "s", "t"]), 2, max_suppressed=0)
    # minimal nodes (0,1,0) NCP 1/3, (1,0,1) NCP 4/9, (2,0,0) NCP 1/3: the NCP tie goes to the smaller tuple
    assert rel.metrics["levels"] == {"c": 0, "s": 1, "t": 0} and rel.metrics["minimal_nodes"] == 3
    assert rel.metrics["ncp"] == pytest.approx(100 / 3)


# ----------------------------------------------------------------------------------------------------------- samples
from crowddb.anonymize import samples as S


def _count_loop(codes, clo, chi):
    out = []
    for a, b in zip(clo.tolist(), chi.tolist()):
        out.append(sum(all(x >= p and x <= q for x, p, q in zip(row, a, b)) for row in codes.tolist()))
    return out


def _dist_loop(codes, unit, a, b):
    out = []
    for row in codes.tolist():
        g = [max(p * u - x * u, x * u - q * u, 0.0) for x, p, q, u in zip(row, a, b, unit)]
        out.append(sum(v * v for v in g))
    return out


def _check_nearest(codes, unit, clo, chi, k, got):
    """got[i]: k rows nearest to box i, nearest first, equal distances by row (plain loops)."""
    for a, b, rows in zip(clo.tolist(), chi.tolist(), got.tolist()):
        d = _dist_loop(codes, unit, a, b)
        kth = sorted(d)[k - 1]
        assert len(set(rows)) == k
        assert sorted(d[r] for r in rows) == pytest.approx(sorted(d)[:k])
        assert {r for r in range(len(d)) if d[r] < kth - 1e-12} <= set(rows)
        assert [(round(d[r], 12), r) for r in rows] == sorted((round(d[r], 12), r) for r in rows)


def test_samples_to_codes_and_scale() -> None:
    enc = E.encode(pd.DataFrame({"a": [1, 2, 3, 4, 5, 6, 7, 8], "b": [0.5, 1.5] * 4}), ["a", "b"])
    clo, chi = S.to_codes(enc, np.array([[2.0, 0.5], [3.0, 0.0], [8.5, 1.6]]), np.array([[7.0, 1.5], [3.0, 1.4],
                                                                                        [0.0, 9.0]]))
    assert clo.tolist() == [[1, 0], [2, 0], [8, 2]] and chi.tolist() == [[6, 1], [2, 0], [-1, 1]]
    assert clo.dtype == np.int64 and chi.dtype == np.int64
    # bounds within 1e-9 of a value snap to it
    clo, chi = S.to_codes(enc, np.array([[3.0 + 5e-10, 0.5]]), np.array([[3.0 - 5e-10, 0.5]]))
    assert clo.tolist() == [[2, 0]] and chi.tolist() == [[2, 0]]
    lo, hi = S.to_scale(enc, np.array([[1, 0], [0, 1]]), np.array([[7, 1], [0, 1]]))
    assert lo.tolist() == [[2.0, 0.5], [1.0, 1.5]] and hi.tolist() == [[8.0, 1.5], [1.0, 1.5]] and lo.dtype == float


def test_samples_published_extent() -> None:
    frame = pd.DataFrame({"h": ["a1", "a2", "b1", "b2", "c1"], "n": [1, 2, 3, 4, 5], "c": list("vwxyz")})
    tree = pd.DataFrame([["a1", "A", "*"], ["a2", "A", "*"], ["b1", "B", "*"], ["b2", "B", "*"], ["c1", "C", "*"]])
    numh = pd.DataFrame([[str(i), "lo" if i < 3 else "hi"] for i in range(1, 6)])
    enc = E.encode(frame, ["h", "n", "c"], hierarchies={"h": tree, "n": numh})
    clo = np.array([[0, 0, 1], [1, 1, 2], [2, 3, 0], [4, 4, 4]])
    chi = np.array([[0, 0, 2], [2, 2, 3], [3, 4, 4], [3, 4, 4]])
    plo, phi = S.published_extent(enc, clo, chi)
    # h: [0,0] a1; [1,2] a2,b1 -> root 0..4; [2,3] B; [4,3] (empty) read as [4,4] c1. n and c are untouched
    assert plo.tolist() == [[0, 0, 1], [0, 1, 2], [2, 3, 0], [4, 4, 4]]
    assert phi.tolist() == [[0, 0, 2], [4, 2, 3], [3, 4, 4], [4, 4, 4]]
    assert clo.tolist()[1] == [1, 1, 2] and chi.tolist()[1] == [2, 2, 3]  # inputs not modified


@pytest.mark.parametrize("max_cells", [S.MAX_TABLE_CELLS, 1])
def test_samples_box_counter_matches_loop(max_cells, monkeypatch) -> None:
    rng = np.random.default_rng(5)
    codes = np.column_stack([rng.integers(0, 4, 30), rng.integers(0, 3, 30), rng.integers(0, 5, 30)])
    m = np.array([4, 3, 5])
    a = np.column_stack([rng.integers(0, 4, 40), rng.integers(0, 3, 40), rng.integers(0, 5, 40)])
    b = np.column_stack([rng.integers(0, 4, 40), rng.integers(0, 3, 40), rng.integers(0, 5, 40)])
    clo, chi = np.minimum(a, b), np.maximum(a, b)
    clo[:10], chi[:10] = a[:10], a[:10]  # point boxes
    clo[10], chi[10] = [3, 2, 4], [3, 2, 4]
    counter = S.BoxCounter(codes, m, max_cells)
    assert (counter.table is None) == (max_cells == 1)
    assert counter(clo, chi).tolist() == _count_loop(codes, clo, chi)
    monkeypatch.setattr(S, "CHUNK", 7)  # several chunks of boxes
    assert counter(clo, chi).tolist() == _count_loop(codes, clo, chi)


def test_samples_box_counter_paths() -> None:
    codes = np.array([[0, 1], [1, 1], [0, 1], [1, 0]])
    m = np.array([2, 2])
    assert S.BoxCounter(codes, m, 9).table is not None  # (2+1)*(2+1) = 9 cells: the table fits exactly
    assert S.BoxCounter(codes, m, 8).table is None
    assert S.BoxCounter(codes, m).table.tolist() == [[0, 0, 0], [0, 0, 2], [0, 1, 4]]
    wide = np.zeros((3, 11), np.int64)
    wide[1, 0] = 1
    c = S.BoxCounter(wide, np.full(11, 2))
    assert c.table is None  # more than 10 QIs: no table
    assert c(np.zeros((2, 11), np.int64), np.array([[0] * 11, [1] * 11])).tolist() == [2, 3]
    c = S.BoxCounter(codes, m, 1)
    assert c.points.tolist() == [[0, 1], [1, 0], [1, 1]] and c.point_counts.tolist() == [2, 1, 1]
    assert c._points(np.array([[0, 1], [1, 1], [0, 0], [1, 0], [2, 2]])).tolist() == [2, 1, 0, 1, 0]
    assert c(np.array([[0, 0], [0, 1]]), np.array([[0, 0], [1, 1]])).tolist() == [0, 3]


def test_samples_guard_worked_example() -> None:
    enc = E.encode(pd.DataFrame({"a": [1, 2, 3, 4, 5, 6, 7, 8]}), ["a"])
    g = S.SampleGuard(enc, 3)
    assert g.m.tolist() == [8] and g.unit.tolist() == pytest.approx([1 / 7]) and g.k == 3
    assert g.widened == 0 and g.checked == 0
    # [2,3] holds 2 rows: its 3 nearest are codes 1, 2 and (tie at 1/7 between codes 0 and 3) the lower row 0
    # [4,6] holds 3 rows: kept; [9,10] holds none: kept; [0.5,1] holds 1: widened to codes 0..2
    lo, hi, mask = g(np.array([[2.0], [4.0], [9.0], [0.5], [2.0]]), np.array([[3.0], [6.0], [10.0], [1.0], [3.0]]))
    assert lo.ravel().tolist() == [1.0, 4.0, 9.0, 1.0, 1.0] and hi.ravel().tolist() == [3.0, 6.0, 10.0, 3.0, 3.0]
    assert mask.tolist() == [True, False, False, True, True] and g.widened == 3 and g.checked == 4
    lo, hi, mask = g([[20.0]], [[30.0]])
    assert mask.tolist() == [False] and lo.tolist() == [[20.0]] and g.checked == 4
    lo, hi, mask = g([[4.0]], [[4.0]])  # a point box with one real row: its 3 nearest are codes 3, 2 and 4
    assert lo.tolist() == [[3.0]] and hi.tolist() == [[5.0]] and mask.tolist() == [True]
    assert g.widened == 4 and g.checked == 5


def test_samples_guard_nearest_matches_loop(monkeypatch) -> None:
    rng = np.random.default_rng(11)
    frame = pd.DataFrame({"a": rng.integers(0, 9, 25), "b": rng.choice(list("pqrst"), 25)})
    enc = E.encode(frame, ["a", "b"])
    g = S.SampleGuard(enc, 4)
    clo = np.array([[0, 0], [2, 1], [5, 3], [1, 4], [3, 0]])
    chi = np.array([[1, 1], [2, 3], [7, 4], [1, 4], [8, 0]])
    got = g.nearest(clo, chi)
    assert got.shape == (5, 4) and got.dtype == np.int64
    _check_nearest(enc.codes, g.unit, clo, chi, 4, got)
    monkeypatch.setattr(S, "CHUNK", 30)  # one box per chunk
    assert g.nearest(clo, chi).tolist() == got.tolist()
    # point boxes (k-d tree): the same rows as the loop when distances have no ties
    pts = np.array([[4, 2]])
    d = [sum(((x - p) * u) ** 2 for x, p, u in zip(row, pts[0], g.unit)) for row in enc.codes.tolist()]
    assert sorted(g.nearest(pts, pts)[0].tolist()) == sorted(np.argsort(d, kind="stable")[:4].tolist()) or \
        sorted(np.sort(d)[:4].tolist()) == sorted(np.array(d)[g.nearest(pts, pts)[0]].tolist())
    assert g.tree is g.tree


def test_samples_guard_protect_counts_loop() -> None:
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"a": rng.integers(0, 10, 40), "b": rng.integers(0, 6, 40)})
    enc = E.encode(frame, ["a", "b"])
    k = 5
    g = S.SampleGuard(enc, k)
    a = np.column_stack([rng.integers(0, g.m[0], 30), rng.integers(0, g.m[1], 30)])
    b = np.column_stack([rng.integers(0, g.m[0], 30), rng.integers(0, g.m[1], 30)])
    clo, chi = np.minimum(a, b), np.maximum(a, b)
    clo[5], chi[5] = clo[3], chi[3]  # a repeated box
    wlo, whi, mask = g.protect(clo, chi)
    n_in = _count_loop(enc.codes, clo, chi)
    assert mask.tolist() == [0 < c < k for c in n_in]
    for a, b, wa, wb in zip(clo[mask], chi[mask], wlo, whi):
        d = np.array(_dist_loop(enc.codes, g.unit, a.tolist(), b.tolist()))
        kth = np.sort(d)[k - 1]
        sure, maybe = enc.codes[d < kth - 1e-12], enc.codes[d <= kth + 1e-12]
        inner_lo, inner_hi = np.minimum(a, sure.min(axis=0, initial=99)), np.maximum(b, sure.max(axis=0, initial=-1))
        outer_lo, outer_hi = np.minimum(a, maybe.min(axis=0)), np.maximum(b, maybe.max(axis=0))
        assert (outer_lo <= wa).all() and (wa <= inner_lo).all() and (inner_hi <= wb).all() and (wb <= outer_hi).all()
    assert all(c >= k for c in _count_loop(enc.codes, wlo, whi))
    assert g.checked == 30 and g.widened == int(mask.sum())


# --------------------------------------------------------------------------------------------------------------- api
from crowddb.anonymize import api as A

SMALL = pd.DataFrame({"age": [10, 20, 30, 40, 50, 60], "c": list("aabbcc"), "s": list("xyxyxy")})
LEFT = [["[10-30]", "{a,b}"]] * 3 + [["[40-60]", "{b,c}"]] * 3


def _qi_table(rel, qis=("age", "c")):
    return rel.table[list(qis)].values.tolist()


def test_api_sensitive_codes() -> None:
    assert A._sensitive_codes(SMALL, None, None, ["age"]) is None
    assert A._sensitive_codes(SMALL, "s", None, ["age"]) is None
    codes = A._sensitive_codes(SMALL, "s", 2, ["age"])
    assert codes.tolist() == [0, 1, 0, 1, 0, 1] and codes.dtype == np.int64
    assert A._sensitive_codes(pd.DataFrame({"s": ["p", None, "p"]}), "s", 2, ["age"]).tolist() == [0, 1, 0]
    assert A._sensitive_codes(SMALL, "s", 1, ["age"]).tolist() == [0, 1, 0, 1, 0, 1]
    with pytest.raises(ArgumentError, match=r"^l-diversity needs a sensitive column: pass sensitive=<column>$"):
        A._sensitive_codes(SMALL, None, 2, ["age"])
    with pytest.raises(UnknownColumnError, match=r"^unknown sensitive column 'zz'$"):
        A._sensitive_codes(SMALL, "zz", 2, ["age"])
    with pytest.raises(ArgumentError, match=r"^sensitive column 'age' is also a quasi-identifier$"):
        A._sensitive_codes(SMALL, "age", 2, ["age"])
    for bad in (True, 0, 2.0, -1):
        with pytest.raises(ArgumentError, match=r"^l must be a positive integer, got " + repr(bad).replace(".", r"\.")
                           .replace("-", r"\-") + "$"):
            A._sensitive_codes(SMALL, "s", bad, ["age"])
    with pytest.raises(PrivacyError, match=r"^'s' has only 2 distinct values; l=3 is impossible$"):
        A._sensitive_codes(SMALL, "s", 3, ["age"])
    assert A._sensitive_codes(SMALL, "s", np.int64(2), ["age"]).tolist() == [0, 1, 0, 1, 0, 1]


def test_api_as_frame() -> None:
    import duckdb
    import polars as pl
    import pyarrow as pa

    from crowddb._frames import as_frame

    assert as_frame(SMALL, "anonymize()") is SMALL
    con = duckdb.connect()
    rel = con.sql("select 1 as a, 'x' as b")
    assert as_frame(rel, "anonymize()").to_dict("list") == {"a": [1], "b": ["x"]}
    assert as_frame(pa.table({"a": [1, 2]}), "anonymize()").to_dict("list") == {"a": [1, 2]}
    assert as_frame(pl.DataFrame({"a": [1, 2]}), "anonymize()").to_dict("list") == {"a": [1, 2]}
    assert as_frame({"a": [3]}, "anonymize()").to_dict("list") == {"a": [3]}

    class NotCallable:
        df = 3

    with pytest.raises(ArgumentError, match=r"^anonymize\(\) needs a pandas DataFrame, a dict of columns, an Arrow "
                                            r"table, a Polars DataFrame or a DuckDB relation, got NotCallable$"):
        anonymize(NotCallable(), "a", 2)
    with pytest.raises(ArgumentError, match=r"DuckDB relation or \(x\), got list$"):
        as_frame([1, 2], "f()", " or (x)")
    out = anonymize(pa.table({"a": [1, 2, 3, 4]}), "a", 2)
    assert out.table["a"].tolist() == ["[1-2]", "[1-2]", "[3-4]", "[3-4]"]


def test_api_mondrian_paths() -> None:
    rel = anonymize(SMALL, ["age", "c"], 3)
    assert _qi_table(rel) == LEFT and rel.metrics["method"] == "mondrian"
    assert rel.metrics["l"] is None and rel.metrics["strict"] is True and rel.quasi_identifiers == ["age", "c"]
    rel = anonymize(SMALL, ["age", "c"], 3, strict=False)
    assert _qi_table(rel) == LEFT and rel.metrics["method"] == "mondrian-relaxed" and rel.metrics["strict"] is False
    rel = anonymize(SMALL, ["age", "c"], 3, sensitive="s", l=2)
    assert rel.metrics["l"] == 2 and _qi_table(rel) == LEFT
    rel = anonymize(SMALL, "age", 2)
    assert rel.table["age"].tolist() == ["[10-30]"] * 3 + ["[40-60]"] * 3  # halves of 3 < 2k rows: no more cuts
    # the sensitive codes reach Mondrian: the median cut would leave classes with one s value each
    frame = pd.DataFrame({"age": [1, 2, 3, 4], "s": list("xxyy")})
    assert anonymize(frame, ["age"], 2).table["age"].tolist() == ["[1-2]"] * 2 + ["[3-4]"] * 2
    assert anonymize(frame, ["age"], 2, sensitive="s", l=2).table["age"].tolist() == ["[1-4]"] * 4
    assert anonymize(frame, ["age"], 2, sensitive="s", l=2, shared="age").table["age"].tolist() == ["[1-4]"] * 4
    assert anonymize(frame, ["age"], 2, shared="age").table["age"].tolist() == ["[1-2]"] * 2 + ["[3-4]"] * 2
    # strict vs relaxed differ on duplicates: 1,1,1,1 | 2 cannot be cut strictly with k=2
    dup = pd.DataFrame({"v": [1, 1, 1, 2, 2, 2]})
    assert anonymize(dup, ["v"], 2).table["v"].tolist() == ["1"] * 3 + ["2"] * 3
    dup = pd.DataFrame({"v": [1, 1, 1, 1, 2]})
    assert anonymize(dup, ["v"], 2).table["v"].tolist() == ["[1-2]"] * 5
    assert anonymize(dup, ["v"], 2, strict=False).table["v"].tolist() == ["1", "1", "[1-2]", "[1-2]", "[1-2]"]
    with pytest.raises(ArgumentError, match=r"^unknown option\(s\) for mondrian: \['bands', 'x'\]$"):
        anonymize(SMALL, ["age"], 2, x=1, bands=3)


def test_api_dispatch_and_errors() -> None:
    with pytest.raises(ArgumentError, match=r"^unknown anonymization method 'best'; choose one of \('mondrian', "
                                            r"'datafly', 'incognito', 'fka'\)$"):
        anonymize(SMALL, ["age"], 2, method="best")
    assert A.METHODS == ("mondrian", "datafly", "incognito", "fka")
    with pytest.raises(ArgumentError, match=r"^k must be at least 2"):
        anonymize(SMALL, ["age"], 1)
    with pytest.raises(UnknownColumnError, match=r"unknown shared column 'zz'"):
        anonymize(SMALL, ["age"], 2, shared="zz")
    with pytest.raises(ArgumentError, match=r"^unknown option 'shared_groups'; pass shared=\[columns\]$"):
        anonymize(SMALL, ["age"], 2, method="datafly", shared_groups=np.zeros(6, np.int64))
    with pytest.raises(ArgumentError, match=r"^shared=\['c'\] is not supported by method 'fka' \(its phase-1 "
                                            r"partitions cut shared columns between equal values\); use 'mondrian', "
                                            r"'datafly' or 'incognito'$"):
        anonymize(SMALL, ["age", "c"], 2, method="fka", shared=["c"], ask=lambda *a: None)
    for method in ("datafly", "incognito"):
        with pytest.raises(ArgumentError, match=rf"^l-diversity is supported by mondrian and fka, not {method}$"):
            anonymize(SMALL, ["age", "c"], 2, method=method, sensitive="s", l=2)
        with pytest.raises(ArgumentError, match=rf"^l-diversity is supported by mondrian and fka, not {method}$"):
            anonymize(SMALL, ["age", "c"], 2, method=method, sensitive="s", l=2, shared=["c"])
    with pytest.raises(PrivacyError, match=r"l=3 is impossible"):
        anonymize(SMALL, ["age"], 2, sensitive="s", l=3)
    with pytest.raises(ArgumentError, match=r"^unknown option\(s\) for mondrian: \['bands'\]$"):
        anonymize(SMALL, ["age", "c"], 2, shared=["c"], bands=3)
    # kinds and hierarchies reach the encoding
    rel = anonymize(SMALL, ["age"], 3, kinds={"age": "categorical"})
    assert rel.encoding["age"].kind == "categorical" and rel.table["age"].tolist() == ["{10,20,30}"] * 3 + \
        ["{40,50,60}"] * 3
    rel = anonymize(SMALL, ["c"], 2, hierarchies={"c": pd.DataFrame([["a", "AB"], ["b", "AB"], ["c", "C"]])})
    assert rel.table["c"].tolist() == ["a", "a", "b", "b", "c", "c"]
    rel = anonymize(SMALL, ["c"], 3, hierarchies={"c": pd.DataFrame([["a", "AB"], ["b", "AB"], ["c", "C"]])})
    assert rel.table["c"].tolist() == ["AB"] * 4 + ["*"] * 2 or rel.table["c"].tolist() == ["*"] * 6


NS = pd.DataFrame({"n": [1, 1, 1, 1, 2, 2, 2, 2], "c": list("aabbaabc")})


def test_api_full_domain_dispatch_and_shared() -> None:
    rel = anonymize(NS, ["n", "c"], 2, method="datafly")
    assert _qi_table(rel, ("n", "c")) == [["1", "a"]] * 2 + [["1", "b"]] * 2 + [["2", "a"]] * 2 + [["*", "*"]] * 2
    assert rel.metrics["method"] == "datafly" and "shared" not in rel.metrics and rel.metrics["suppressed"] == 2
    rel = anonymize(NS, ["n", "c"], 2, method="incognito")
    assert rel.metrics["method"] == "incognito" and rel.metrics["suppressed"] == 2 and "minimal_nodes" in rel.metrics
    # shared n: suppressing rows 6, 7 would split the group n=2; Datafly climbs to the top instead
    rel = anonymize(NS, ["n", "c"], 2, method="datafly", shared=["n"])
    assert _qi_table(rel, ("n", "c")) == [["*", "*"]] * 8 and rel.metrics["shared"] == ["n"]
    assert rel.metrics["levels"] == {"n": 2, "c": 2} and rel.metrics["method"] == "datafly"
    rel = anonymize(NS, ["n", "c"], 2, method="datafly", shared="n", max_suppressed=4)
    assert _qi_table(rel, ("n", "c")) == [["1", "a"]] * 2 + [["1", "b"]] * 2 + [["*", "*"]] * 4
    rel = anonymize(NS, ["n", "c"], 2, method="incognito", shared=["n"])
    assert _qi_table(rel, ("n", "c")) == [["1", "*"]] * 4 + [["2", "*"]] * 4 and rel.metrics["shared"] == ["n"]
    assert rel.metrics["method"] == "incognito" and "minimal_nodes" in rel.metrics
    # shared mondrian: c's groups hold 2 rows < k=3, so c is one stage-1 class
    rel = anonymize(SMALL, ["age", "c"], 3, shared=["c"])
    assert _qi_table(rel) == [["[10-30]", "*"]] * 3 + [["[40-60]", "*"]] * 3
    assert rel.metrics["shared"] == ["c"] and rel.metrics["shared_classes"] == 1 and rel.metrics["method"] == "mondrian"
    assert rel.metrics["strict"] is True and rel.metrics["l"] is None
    rel = anonymize(SMALL, ["age", "c"], 3, shared=["c"], strict=False)
    assert rel.metrics["method"] == "mondrian-relaxed" and rel.metrics["strict"] is False
    rel = anonymize(SMALL, ["age", "c"], 3, shared=["age", "c"])
    assert _qi_table(rel) == LEFT and rel.metrics["shared_classes"] == 2 and rel.metrics["shared"] == ["age", "c"]
    rel = anonymize(SMALL, ["age", "c"], 3, shared=["c"], sensitive="s", l=2)
    assert rel.metrics["l"] == 2


# ------------------------------------------------------------------------------------------------------------- synth
from statistics import NormalDist

from crowddb.anonymize import synth as Y


def test_synth_normal_scores_plain() -> None:
    codes = np.array([[3, 0], [1, 0], [3, 1], [2, 0]])
    n = 4
    want = np.empty((4, 2))
    for j in range(2):
        col = codes[:, j].tolist()
        for i, v in enumerate(col):
            below = sum(x < v for x in col)
            ties = sum(x == v for x in col)
            rank = below + (ties + 1) / 2  # mid-rank
            want[i, j] = NormalDist().inv_cdf((rank - 0.5) / n)
    assert np.allclose(Y.normal_scores(codes), want)


def test_synth_corr_and_nearest_pd() -> None:
    x = np.array([[1.0, 5.0, 2.0], [2.0, 5.0, 4.0], [3.0, 5.0, 7.0], [4.0, 5.0, 7.0]])
    c = Y._corr(x)
    a, b = x[:, 0] - x[:, 0].mean(), x[:, 2] - x[:, 2].mean()
    r = float((a * b).sum() / math.sqrt((a * a).sum() * (b * b).sum()))
    assert np.allclose(c, [[1, 0, r], [0, 1, 0], [r, 0, 1]])
    assert Y._corr(np.array([[1.0], [2.0]])).tolist() == [[1.0]]
    # 2x2 with |r| > 1: eigenvalues 1 + r, 1 - r (clipped to eps) on (1,1)/sqrt2 and (1,-1)/sqrt2
    for rr, eps in ((1.5, 1e-3), (-1.2, 1e-3), (1.5, 0.1)):
        big, small = max(1 + rr, eps), max(1 - rr, eps)
        diag, off = (big + small) / 2, (big - small) / 2
        got = Y._nearest_pd(np.array([[1.0, rr], [rr, 1.0]]), eps) if eps != 1e-3 else \
            Y._nearest_pd(np.array([[1.0, rr], [rr, 1.0]]))
        assert np.allclose(got, [[1.0, off / diag], [off / diag, 1.0]])
    ok = np.array([[1.0, 0.3], [0.3, 1.0]])
    assert np.allclose(Y._nearest_pd(ok), ok)
    assert np.allclose(Y._nearest_pd(np.array([[1.0, 0.2], [0.4, 1.0]])), [[1.0, 0.3], [0.3, 1.0]])  # symmetrized


def test_synth_draw_and_one_column_copula_plain() -> None:
    codes = np.array([[4], [0], [2], [2], [9]])
    sorted_codes = np.sort(codes, axis=0)
    got = Y._draw(sorted_codes, np.eye(1), 50, np.random.default_rng(7))
    z = np.random.default_rng(7).standard_normal((50, 1))
    want = [[sorted_codes[min(int(NormalDist().cdf(v) * 5), 4), 0]] for v in z[:, 0].tolist()]
    assert got.tolist() == want
    # one column: no calibration draws, the latent correlation is [[1]]
    got = Y.copula_samples(codes, 40, np.random.default_rng(3))
    z = np.random.default_rng(3).standard_normal((40, 1))
    assert got.tolist() == [[sorted_codes[min(int(NormalDist().cdf(v) * 5), 4), 0]] for v in z[:, 0].tolist()]
    # two independent columns with an identity latent: each column its own inverse CDF
    two = np.array([[0, 5], [1, 6], [2, 7], [3, 8]])
    got = Y._draw(np.sort(two, axis=0), np.eye(2), 30, np.random.default_rng(1))
    z = np.random.default_rng(1).standard_normal((30, 2))
    want = [[int(two[min(int(NormalDist().cdf(a) * 4), 3), 0]), int(two[min(int(NormalDist().cdf(b) * 4), 3), 1])]
            for a, b in z.tolist()]
    assert got.tolist() == want
    # a correlated latent: the second normal is rho z1 + sqrt(1 - rho^2) z2 (Cholesky)
    rho = 0.6
    got = Y._draw(np.sort(two, axis=0), np.array([[1, rho], [rho, 1]]), 30, np.random.default_rng(2))
    z = np.random.default_rng(2).standard_normal((30, 2))
    want = [[int(two[min(int(NormalDist().cdf(a) * 4), 3), 0]),
             int(two[min(int(NormalDist().cdf(rho * a + math.sqrt(1 - rho**2) * b) * 4), 3), 1])]
            for a, b in z.tolist()]
    assert got.tolist() == want


def test_synth_copula_keeps_marginals_and_correlation() -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 6, 400)
    b = np.clip(a + rng.integers(-1, 2, 400), 0, 6)
    c = rng.integers(0, 3, 400)
    codes = np.column_stack([a, b, c])
    out = Y.copula_samples(codes, 20000, np.random.default_rng(1))
    assert out.shape == (20000, 3) and out.dtype == codes.dtype
    for j in range(3):
        want = np.bincount(codes[:, j], minlength=7) / 400
        got = np.bincount(out[:, j], minlength=7) / 20000
        assert np.abs(want - got).max() < 0.02
    target = np.corrcoef(codes, rowvar=False)
    got = np.corrcoef(out, rowvar=False)
    assert abs(got[0, 1] - target[0, 1]) < 0.02  # calibrated: the code correlation matches (0.9)
    assert abs(got[0, 2]) < 0.03 and abs(got[1, 2]) < 0.03
    un = Y.copula_samples(codes, 20000, np.random.default_rng(1), calibrate=0)
    assert abs(np.corrcoef(un, rowvar=False)[0, 1] - target[0, 1]) > abs(got[0, 1] - target[0, 1])


def test_metrics_spans_below_one_and_numeric_strings() -> None:
    # spans in (0, 1) are real ranges, not constants
    assert M.ncp(np.array([[0.0], [0.1]]), np.array([[0.25], [0.1]]), np.array([0.5])) == pytest.approx(25.0)
    m = M.release_metrics(np.array([0, 0]), np.array([[0.0, 1.0]] * 2), np.array([[0.25, 4.0]] * 2),
                          np.array([0.5, 0.0]), 2)
    assert m["ncp"] == pytest.approx(100 * (0.5 + 0.0) / 2)  # a zero span adds 0 even when hi - lo = 3
    # numeric inputs are converted to float, numeric strings included
    assert M.ncp(np.array([[0.0]]), np.array([[5.0]]), ["10"]) == pytest.approx(50.0)
    assert M.release_metrics(np.array([0, 0]), np.array([[0.0]] * 2), np.array([[5.0]] * 2), ["10"], 2)["ncp"] == \
        pytest.approx(50.0)
    assert M.matrix_accuracy([["0.5"], ["0.5"]], ["4"]) == pytest.approx(0.5)
    assert M.merge_loss(["1", "0"], 2, ["0", "1"], 2, 4) == pytest.approx(1 * 2 / 4)
    # nested input is flattened before it is checked and reported
    with pytest.raises(ArgumentError, match=r"got \[-1\.0, 2\.0, 3\.0, 4\.0\]$"):
        M.accuracy_bounds([[-1, 2], [3, 4]])
    # answers given as a column: the inverse is flattened
    P, sizes, labels = M.probability_matrix(np.array([0, 0, 1]), np.array([["b"], ["a"], ["b"]]))
    assert labels.tolist() == ["a", "b"] and sizes.tolist() == [2.0, 1.0] and P.tolist() == [[0.5, 0.0], [0.5, 1.0]]


# ------------------------------------------------------------------------------------------------------------ shared
from crowddb.anonymize import shared as SH
from crowddb.anonymize.generalize import Release


def test_shared_validate() -> None:
    cols = pd.Index(["a", "b", "c"])
    assert SH.validate_shared(None, ["a", "b"], cols) == []
    assert SH.validate_shared("a", ["a", "b"], cols) == ["a"]
    assert SH.validate_shared(("b", "a"), ["a", "b"], cols) == ["b", "a"]
    with pytest.raises(ArgumentError, match=r"^shared must name columns \(strings\), got 3$"):
        SH.validate_shared(["a", 3], ["a", "b"], cols)
    with pytest.raises(UnknownColumnError, match=r"^unknown shared column 'z'; columns are \['a', 'b', 'c'\]$"):
        SH.validate_shared(["z"], ["a", "b"], cols)
    with pytest.raises(ArgumentError, match=r"^shared column 'c' is not a quasi-identifier; shared columns must be "
                                            r"among \['a', 'b'\]$"):
        SH.validate_shared(["c"], ["a", "b"], cols)
    with pytest.raises(ArgumentError, match=r"^shared columns listed twice: \['a', 'a'\]$"):
        SH.validate_shared(["a", "a"], ["a", "b"], cols)


def test_shared_ids_widths_cost() -> None:
    codes = np.array([[3, 0, 1], [1, 1, 1], [3, 0, 0], [1, 0, 1]])
    assert SH.shared_ids(codes, [0]).tolist() == [1, 0, 1, 0]
    assert SH.shared_ids(codes, [0, 1]).tolist() == [2, 1, 2, 0]  # rows (3,0) (1,1) (3,0) (1,0) in sorted order
    assert SH.shared_ids(codes, [2, 1]).tolist() == [1, 2, 0, 1]
    enc = E.encode(pd.DataFrame({"n": [10, 30, 20], "k": [5, 5, 5], "c": list("xyx")}), ["n", "k", "c"])
    scales, safe = SH._widths(enc)
    assert [s.tolist() for s in scales] == [[10, 20, 30], [5], [0, 1]] and safe.tolist() == [20.0, np.inf, 1.0]
    lo, hi = np.array([[0, 0, 0], [1, 0, 1]]), np.array([[2, 0, 1], [1, 0, 1]])
    assert SH._box_cost(scales, safe, lo, hi, [0, 1, 2]).tolist() == [2.0, 0.0]
    assert SH._box_cost(scales, safe, lo, hi, [0]).tolist() == [1.0, 0.0]
    assert SH._box_cost(scales, safe, lo, hi, []).tolist() == [0.0, 0.0]


S8 = pd.DataFrame({"s": range(8), "x": [0, 5, 1, 6, 2, 7, 3, 8]})
S2 = pd.DataFrame({"s": [0, 0, 0, 0, 1, 1, 1, 1], "x": [0, 9, 1, 8, 2, 7, 3, 6]})


def test_shared_ladder_levels() -> None:
    enc = E.encode(S8, ["s", "x"])
    # n=8, k=2: k_i = 4 then 2 (steps=1); 5 (no class of 10 rows), 4, then 2 (steps=2): halves, then quarters
    want = [[0] * 8, [0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 2, 2, 1, 1, 3, 3]]
    for steps in (1, 2):
        assert [lv.tolist() for lv in SH._ladder(enc, 2, [0], None, None, steps)] == want
    assert [lv.tolist() for lv in SH._ladder(enc, 4, [0], None, None, 1)] == want[:2]
    assert [lv.tolist() for lv in SH._ladder(enc, 3, [0], None, None, 1)] == want[:2]  # 4 rows < 2k: stop
    const = E.encode(pd.DataFrame({"s": [1] * 8, "x": range(8)}), ["s", "x"])
    assert [lv.tolist() for lv in SH._ladder(const, 2, [0], None, None, 1)] == [[0] * 8]
    # l-diversity: a half with a single sensitive value cannot be cut off
    sens = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    assert [lv.tolist() for lv in SH._ladder(enc, 2, [0], sens, 2, 1)] == [[0] * 8]
    sens = np.array([0, 1, 0, 1, 0, 1, 0, 1])
    assert [lv.tolist() for lv in SH._ladder(enc, 2, [0], sens, 2, 1)] == want


def test_shared_choose_and_stage2_worked_example() -> None:
    enc = E.encode(S2, ["s", "x"])
    levels = SH._ladder(enc, 2, [0], None, None, 2)
    assert [lv.tolist() for lv in levels] == [[0] * 8, [0, 0, 0, 0, 1, 1, 1, 1]]
    # one stage-1 class: s spans its range (1 per row), x pairs of width 1/9 -> 8 * 10/9; split by s: 8 * 1/9
    cost, final = SH.choose(enc, 2, levels, [0], True, None, None)
    assert cost == pytest.approx(8 / 9) and final.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    cost, final = SH.choose(enc, 2, levels[:1], [0], True, None, None)
    assert cost == pytest.approx(80 / 9) and final.tolist() == [0] * 8
    # stage 2 inside one class: x pairs by code {0,1} {2,3} {4,5} {6,7}; s is the whole class's range 0..1
    groups, lo, hi = SH.stage2(enc.codes, enc.scale_of(), 2, final, [0], True, None, None)
    assert groups.tolist() == [0, 3, 0, 3, 2, 1, 2, 1]
    assert lo.tolist() == [[0, 0], [0, 4], [0, 2], [0, 6]] and hi.tolist() == [[1, 1], [1, 5], [1, 3], [1, 7]]
    groups, lo, hi = SH.stage2(enc.codes, enc.scale_of(), 2, np.array([0, 0, 0, 0, 1, 1, 1, 1]), [0], True, None,
                                None)
    assert lo.tolist() == [[0, 0], [1, 2], [0, 6], [1, 4]] and hi.tolist() == [[0, 1], [1, 3], [0, 7], [1, 5]]
    groups, lo, hi, fig = SH.shared_mondrian(enc, 2, ["s"])
    assert groups.tolist() == [0, 2, 0, 2, 1, 3, 1, 3] and fig == {"shared_classes": 2}
    assert lo.tolist() == [[0, 0], [1, 2], [0, 6], [1, 4]] and hi.tolist() == [[0, 1], [1, 3], [0, 7], [1, 5]]


def test_shared_mondrian_ladder_choice() -> None:
    # quarters publish s width 1/7 + x 5/8 per row, halves 3/7 + 1/8, everything one class 1 + 1/8: halves win
    enc = E.encode(S8, ["s", "x"])
    levels = SH._ladder(enc, 2, [0], None, None, 2)
    cost, final = SH.choose(enc, 2, levels, [0], True, None, None)
    assert cost == pytest.approx(8 * (3 / 7 + 1 / 8)) and final.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    groups, lo, hi, fig = SH.shared_mondrian(enc, 2, ["s"])
    assert groups.tolist() == [0, 2, 0, 2, 1, 3, 1, 3] and fig == {"shared_classes": 2}
    assert lo.tolist() == [[0, 0], [4, 2], [0, 4], [4, 6]] and hi.tolist() == [[3, 1], [7, 3], [3, 5], [7, 7]]
    rel = anonymize(S8, ["s", "x"], 2, shared="s")
    assert rel.table["s"].tolist() == ["[0-3]"] * 4 + ["[4-7]"] * 4
    assert rel.table["x"].tolist() == ["[0-1]", "[5-6]", "[0-1]", "[5-6]", "[2-3]", "[7-8]", "[2-3]", "[7-8]"]
    # every QI shared: plain strict Mondrian
    groups, lo, hi, fig = SH.shared_mondrian(enc, 2, ["s", "x"])
    from crowddb.anonymize.mondrian import mondrian_groups

    want = mondrian_groups(enc.codes, enc.scale_of(), 2, strict=True, return_boxes=True)
    assert fig == {"shared_classes": 4} and groups.tolist() == want[0].tolist() == [0, 2, 0, 2, 1, 3, 1, 3]
    assert lo.tolist() == want[1].tolist() and hi.tolist() == want[2].tolist()


def test_shared_check_errors() -> None:
    table = pd.DataFrame({"a": ["1", "1", "2", "2"], "b": ["x", "y", "x", "x"]})
    rel = Release(table, np.array([0, 0, 1, 1]), np.zeros((4, 2)), np.zeros((4, 2)), {}, {}, ["a", "b"])
    SH.check_shared(rel, np.array([0, 0, 1, 1]), ["a"], 2)
    with pytest.raises(PrivacyError, match=r"^internal error: rows sharing their \['b'\] values got different labels "
                                           r"on 'b'$"):
        SH.check_shared(rel, np.array([0, 0, 1, 1]), ["b"], 2)
    SH.check_shared(rel, np.array([0, 1, 0, 0]), ["b"], 2)
    with pytest.raises(PrivacyError, match=r"^internal error: a class of the release with shared=\['a'\] has fewer "
                                           r"than k=3 rows$"):
        SH.check_shared(rel, np.array([0, 0, 1, 1]), ["a"], 3)
    rel.groups = np.array([0, 0, 0, 1])
    with pytest.raises(PrivacyError, match="fewer than k=2"):
        SH.check_shared(rel, np.array([0, 0, 1, 1]), ["a"], 2)
    # the first row of each group sets the label: group 1 is rows 1 and 3 here
    table2 = pd.DataFrame({"a": ["p", "q", "r", "q"]})
    rel2 = Release(table2, np.array([0, 0, 0, 0]), np.zeros((4, 1)), np.zeros((4, 1)), {}, {}, ["a"])
    SH.check_shared(rel2, np.array([0, 1, 2, 1]), ["a"], 2)
    with pytest.raises(PrivacyError):
        SH.check_shared(rel2, np.array([0, 1, 1, 2]), ["a"], 2)


def test_hierarchy_defaults_and_csv_parsing(tmp_path) -> None:
    assert H.Hierarchy(pd.DataFrame([["a", "*"]])).name == ""
    assert H.Hierarchy.load(pd.DataFrame([["a", "*"]])).name == ""
    empty = H.Hierarchy(pd.DataFrame(columns=[0, 1]), "e")
    assert all(not pd.api.types.is_float_dtype(t) for t in empty.table.dtypes)  # kept as strings
    # ';' is the only separator (commas belong to labels); values are read as text ('007' stays '007')
    p = tmp_path / "h.csv"
    p.write_text("x,1;G;*\ny,2;G;*\n007;N;*\n")
    g = H.Hierarchy.load(p, "f")
    assert g.table.values.tolist() == [["x,1", "G", "*"], ["y,2", "G", "*"], ["007", "N", "*"]] and g.height == 2
    assert g.rows(["007"]).tolist() == [2]
    q = tmp_path / "n.csv"
    q.write_text("007;N;*\n010;N;*\n")
    assert H.Hierarchy.load(q, "n").table.iloc[:, 0].tolist() == ["007", "010"]  # an all-number column too
    assert H.Hierarchy(TREE, "t").rows([]).dtype == np.int64


def test_fulldomain_group_suppression_takes_the_largest_class() -> None:
    # z (1 row, class 0) is small; a (3 rows) and b (4 rows) are not; fewer than k rows out, so the largest class b
    # gives the group of its first row (row 4 alone in group 3)
    _, f = _fd(list("zaaabbbb"), [0, 1, 1, 2, 3, 4, 4, 5])
    assert f.suppression([0], 2, 10).tolist() == [True, False, False, False, True, False, False, False]
    _, f = _fd(list("zaaabbbb"), [0, 1, 1, 2, 3, 3, 4, 4])
    assert f.suppression([0], 2, 10).tolist() == [True, False, False, False, True, True, False, False]


def test_default_bands_are_16() -> None:
    # span 17: 17/16 -> step 2 at the first level (17/17 would give step 1, a copy of the leaves)
    frame = pd.DataFrame({"a": list(range(18))})
    enc = E.encode(frame, ["a"])
    assert F.build_ladder(enc.columns["a"]).labels[1][:2].tolist() == ["[0-1]", "[2-3]"]
    assert F.FullDomain(enc).ladders[0].labels[1][:2].tolist() == ["[0-1]", "[2-3]"]
    rel = D.datafly(frame, enc, 2)
    assert rel.metrics["levels"] == {"a": 1} and rel.table["a"].tolist()[:3] == ["[0-1]", "[0-1]", "[2-3]"]
    rel = I.incognito(frame, enc, 2)
    assert rel.metrics["levels"] == {"a": 1}
    assert anonymize(frame, ["a"], 2, method="datafly").metrics["levels"] == {"a": 1}


def test_incognito_evaluation_counts() -> None:
    # c alone is anonymous from level 1 (pairs), so the lattice starts at c=1: (1,0) is anonymous at once
    fr = pd.DataFrame({"c": list("abcdefgh"), "s": list("xxxxyyyy")})
    rel = anonymize(fr, ["c", "s"], 2, method="incognito", max_suppressed=0)
    assert rel.metrics["levels"] == {"c": 1, "s": 0} and rel.metrics["evaluations"] == 1
    # lattice (3 - 1 + 1) * (1 + 1) = 6 nodes above the single-QI bounds
    anonymize(fr, ["c", "s"], 2, method="incognito", max_suppressed=0, max_lattice=6)
    with pytest.raises(ArgumentError, match=r"lattice has 6 nodes over 2 quasi-identifiers \(limit 5\)"):
        anonymize(fr, ["c", "s"], 2, method="incognito", max_suppressed=0, max_lattice=5)
    # three QIs: the (c, s) pair table prunes (0,0,0) and (0,0,1); then (0,1,0) yes, (1,0,0) no, (1,0,1) yes,
    # (2,0,0) yes, everything else generalizes one of them: 4 evaluations
    three = pd.DataFrame({"c": list("abcdabcd"), "s": list("xxyyyyxx"), "t": list("uvuvuvuv")})
    rel = anonymize(three, ["c", "s", "t"], 2, method="incognito", max_suppressed=0)
    assert rel.metrics["evaluations"] == 4 and rel.metrics["minimal_nodes"] == 3
    # pair tables leave entries below the single-QI bounds unset
    fd3 = F.FullDomain(E.encode(three, ["c", "s", "t"]))
    assert I._pair_tables(fd3, np.array([1, 0, 0]), 2, 0)[(0, 1)].tolist() == [[False, False], [True, True],
                                                                                [True, True]]
    assert I._pair_tables(fd3, np.array([0, 1, 0]), 2, 0)[(0, 1)].tolist() == [[False, True], [False, True],
                                                                                [False, True]]


def test_incognito_lattice_size_does_not_overflow() -> None:
    # 32 QIs of 10 values: each alone is anonymous from level 1 of 4, so 4**32 = 2**64 nodes (0 in int64)
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({f"q{i}": rng.permutation(list("abcdefghij")) for i in range(32)})
    with pytest.raises(ArgumentError, match=r"^Incognito's lattice has 18,446,744,073,709,551,616 nodes over 32 "
                                            r"quasi-identifiers \(limit 2,000,000\)"):
        anonymize(frame, list(frame.columns), 2, method="incognito")


def test_incognito_counts_suppressed_rows_in_the_ncp() -> None:
    # minimal nodes (1,1): no suppression, NCP (0.2 + 1/3)/2; (2,0): base NCP 0.2 but 2 rows suppressed ->
    # (0.2 * 8 + 2) / 10 = 0.36. Counting the suppressed rows, (1,1) wins
    frame = pd.DataFrame({"a": [2, 5, 5, 1, 0, 3, 4, 4, 3, 4], "b": list("ssssrsppsq")})
    rel = anonymize(frame, ["a", "b"], 2, method="incognito", bands=4)
    assert rel.metrics["levels"] == {"a": 1, "b": 1} and rel.metrics["suppressed"] == 0
    assert rel.metrics["ncp"] == pytest.approx(100 * (0.2 + 1 / 3) / 2)
    enc = E.encode(frame, ["a", "b"])
    fd = F.FullDomain(enc, 4)
    assert fd.ncp(np.array([2, 0]), 2) == pytest.approx(36.0) and fd.ncp(np.array([2, 0])) == pytest.approx(20.0)


def _truncated_search(fd, k, limit, budget):
    """Incognito without pair pruning, plain loops: bottom-up by height (ties in product order), at most
    ``budget`` evaluations; the lowest-NCP minimal node found."""
    lo = []
    for j, h in enumerate(fd.heights):  # lowest level at which QI j alone leaves at most ``limit`` small rows
        node = np.zeros(len(fd.heights), np.int64)
        lo.append(next(x for x in range(h + 1) if x == h or
                       int(fd.small(np.where(np.arange(len(node)) == j, x, 0), k, [j]).sum()) <= limit))
    nodes = sorted(itertools.product(*[range(a, h + 1) for a, h in zip(lo, fd.heights)]), key=sum)
    minimal, evals = [], 0
    for nd in nodes:
        if any(all(a <= b for a, b in zip(m, nd)) for m in minimal):
            continue
        if evals >= budget:
            break
        evals += 1
        if fd.suppression(np.array(nd), k, limit) is not None:
            minimal.append(nd)
    if not minimal:
        minimal = [tuple(int(h) for h in fd.heights)]
    return min(minimal, key=lambda nd: (fd.ncp(np.array(nd), int(fd.suppression(np.array(nd), k, limit).sum())),
                                        nd)), evals


def test_incognito_truncated_order_is_stable() -> None:
    # two QIs (no pair pruning) with tall ladders: > 16 nodes per sort, cut in the middle of a lattice level
    frame = pd.DataFrame({"a": list(range(16)) * 2, "b": [i % 8 for i in range(32)]})
    enc = E.encode(frame, ["a", "b"])
    fd = F.FullDomain(enc, 16)
    assert len(list(itertools.product(*[range(h + 1) for h in fd.heights]))) > 16
    for budget in (1, 2, 3, 4, 5, 6, 8, 11):
        want, evals = _truncated_search(fd, 4, 0, budget)
        rel = I.incognito(frame, enc, 4, max_suppressed=0, max_evaluations=budget)
        assert tuple(rel.metrics["levels"].values()) == want and rel.metrics["evaluations"] == evals


def test_datafly_picks_the_second_qi_when_it_has_more_values() -> None:
    rel = anonymize(GRID, ["s", "c"], 2, method="datafly")
    assert _levels(rel) == {"s": 0, "c": 1}


def test_fulldomain_nice_tolerance_and_top_dtype() -> None:
    assert F._nice(2.0 + 1e-12) == 2.0  # within 1e-12 of a nice number: that number
    q = E.QIEncoding("z", "categorical", ["a", "b"], np.array([0.0, 1.0]))
    assert F._top(q)[1].dtype == object and F.build_ladder(q).labels[-1].dtype == object


def test_shared_stage2_is_strict() -> None:
    frame = pd.DataFrame({"s": [0] * 5, "x": [1, 1, 1, 1, 2]})
    assert anonymize(frame, ["s", "x"], 2, shared="s").table["x"].tolist() == ["[1-2]"] * 5
    assert anonymize(frame, ["s", "x"], 2, shared="s", strict=False).table["x"].tolist() == \
        ["1", "1", "[1-2]", "[1-2]", "[1-2]"]


def test_shared_choose_ties_and_strict_costs() -> None:
    # s halves each hold x = 1,1,1,2: strict stage 2 cannot cut them (3 | 1), so one stage-1 class costs
    # 8 (s width 1 per row, x cut 1 | 2) and the two halves cost 8 (x width 1 per row): a tie -> the coarser class
    frame = pd.DataFrame({"s": [0, 0, 0, 0, 1, 1, 1, 1], "x": [1, 1, 1, 2, 1, 1, 1, 2]})
    enc = E.encode(frame, ["s", "x"])
    levels = SH._ladder(enc, 2, [0], None, None, 2)
    assert [lv.tolist() for lv in levels] == [[0] * 8, [0, 0, 0, 0, 1, 1, 1, 1]]
    cost, final = SH.choose(enc, 2, levels, [0], True, None, None)
    assert cost == pytest.approx(8.0) and final.tolist() == [0] * 8
    # relaxed stage 2 cuts each half into {1,1} and {1,2}: 2 per half, so the halves win
    cost, final = SH.choose(enc, 2, levels, [0], False, None, None)
    assert cost == pytest.approx(4.0) and final.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    rel = anonymize(frame, ["s", "x"], 2, shared="s")
    assert rel.metrics["shared_classes"] == 1 and rel.table["s"].tolist() == ["[0-1]"] * 8
    assert rel.table["x"].tolist() == ["1", "1", "1", "2", "1", "1", "1", "2"]
    rel = anonymize(frame, ["s", "x"], 2, shared="s", strict=False)
    assert rel.metrics["shared_classes"] == 2 and rel.table["s"].tolist() == ["0"] * 4 + ["1"] * 4
    assert rel.table["x"].tolist() == ["1", "1", "[1-2]", "[1-2]"] * 2


def test_shared_ladder_any_shared_column_makes_a_class_cuttable() -> None:
    frame = pd.DataFrame({"s": [0, 0, 1, 1, 2, 2, 3, 3], "t": [5] * 8, "x": range(8)})
    enc = E.encode(frame, ["s", "t", "x"])
    want = [[0] * 8, [0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 2, 2, 1, 1, 3, 3]]
    assert [lv.tolist() for lv in SH._ladder(enc, 2, [0, 1], None, None, 1)] == want
    assert [lv.tolist() for lv in SH._ladder(enc, 2, [1, 0], None, None, 1)] == want


def test_fulldomain_class_keys_exact_int64() -> None:
    # 2**30 * 2**30 = 2**60 < 2**62: exact int64 mixed-radix keys (a float key would merge these two rows)
    key = F.class_keys([np.array([2**30 - 1, 2**30 - 1]), np.array([0, 1])], [2**30, 2**30])
    assert key.dtype == np.int64 and key.tolist() == [(2**30 - 1) * 2**30, (2**30 - 1) * 2**30 + 1]
    # 2**31 * 2**30 = 2**61: still no re-numbering
    assert F.class_keys([np.array([5, 0]), np.array([1, 2])], [2**31, 2**30]).tolist() == [5 * 2**30 + 1, 2]
    # three columns of 2**21: the running product reaches 2**63 at the third, so keys are re-numbered first
    key = F.class_keys([np.array([2**21 - 1, 0]), np.array([2**21 - 1, 0]), np.array([2**21 - 1, 1])], [2**21] * 3)
    assert key.tolist() == [2**21 - 1, 2**21 + 1]


def test_incognito_default_evaluation_budget_is_20000() -> None:
    # two QIs with 151-level hierarchies whose labels stay distinct below '*': a node is anonymous only with one QI
    # at the top, so every one of the 150 * 150 lower nodes is evaluated (more than 20,000)
    height = 150

    def tall(vals):
        return pd.DataFrame([[v] + [f"{v}{i}" for i in range(1, height)] + ["*"] for v in vals])

    frame = pd.DataFrame({"a": list("aabb"), "b": list("cdcd")})
    rel = anonymize(frame, ["a", "b"], 2, method="incognito", max_suppressed=0,
                    hierarchies={"a": tall("ab"), "b": tall("cd")})
    m = rel.metrics
    assert m["evaluations"] == 20000 and m["lattice_complete"] is False and m["minimal_nodes"] == 2
    assert m["levels"] == {"a": 0, "b": 150}  # (0,150) and (150,0) tie at NCP 50%: the smaller tuple


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_incognito_pair_tables_match_direct_checks(seed) -> None:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"a": rng.integers(0, 30, 30), "b": rng.choice(list("pqrstuvw"), 30),
                          "c": rng.integers(0, 12, 30)})
    fd = F.FullDomain(E.encode(frame, ["a", "b", "c"]), 4)
    k, limit = 3, 2
    lo = np.array([1, 0, 1])
    tables = I._pair_tables(fd, lo, k, limit)
    for (i, j), t in tables.items():
        for a in range(fd.heights[i] + 1):
            for b in range(fd.heights[j] + 1):
                node = np.zeros(3, np.int64)
                node[i], node[j] = a, b
                direct = int(fd.small(node, k, (i, j)).sum()) <= limit
                assert t[a, b] == (direct and a >= lo[i] and b >= lo[j]), (i, j, a, b)


def test_metrics_compact_casts_and_keeps_dense_input() -> None:
    dense = np.array([1, 0, 1], dtype=np.int64)
    assert M.compact(dense) is dense  # already 0..G-1: returned as it is
    out = M.compact(np.array([2.0, 0.0, 2.0]))  # float ids are cast to int64
    assert out.dtype == np.int64 and out.tolist() == [1, 0, 1]
    assert M.compact(np.array([1.0, 0.0])).dtype == np.int64


def test_api_shared_incognito_passes_options() -> None:
    with pytest.raises(ArgumentError, match=r"lattice has \d+ nodes over 2 quasi-identifiers \(limit 1\)"):
        anonymize(NS, ["n", "c"], 2, method="incognito", shared=["n"], max_lattice=1)
    rel = anonymize(NS, ["n", "c"], 2, method="incognito", shared=["n"], max_suppressed=4)
    assert rel.metrics["max_suppressed"] == 4


def test_copula_corr_of_a_constant_column_is_zero_and_quiet():
    """A constant QI column has correlation 0 with the others, and the 0/0 numpy meets inside corrcoef is not a
    RuntimeWarning the user sees."""
    import warnings

    from crowddb.anonymize import synth as copula

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = copula._corr(np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]]))
    assert got.tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_copula_draw_at_the_top_of_the_normal_takes_the_largest_code():
    """ndtr of a 10-sigma normal is exactly 1.0, so u * n == n: the index is clipped to the last sorted code."""
    from crowddb.anonymize import synth as copula

    class TenSigma:
        def standard_normal(self, shape):
            return np.full(shape, 10.0)

    out = copula._draw(np.array([[1], [2], [3]]), np.eye(1), 4, TenSigma())
    assert out.tolist() == [[3], [3], [3], [3]]
