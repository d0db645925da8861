"""Hierarchies and coding: ARX files load, subtrees are contiguous codes, LCA labels, first-appearance order."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowddb.anonymize.encoding import encode
from crowddb.anonymize.hierarchy import Hierarchy, lca_ranges

TREE = pd.DataFrame([["a1", "A", "*"], ["b1", "B", "*"], ["a2", "A", "*"], ["b2", "B", "*"], ["c1", "C", "*"]])


def test_dfs_order_makes_subtrees_contiguous() -> None:
    h = Hierarchy.load(TREE, "x")
    s = pd.Series(["b2", "a1", "c1", "a2", "b1"])
    order = h.ordered_leaves(s)
    assert order == ["a1", "a2", "b1", "b2", "c1"]  # A's leaves, then B's, then C's (file order inside)
    enc = encode(pd.DataFrame({"x": s}), ["x"], hierarchies={"x": TREE})
    assert enc.columns["x"].categories == order


def test_lca_labels_and_ranges() -> None:
    h = Hierarchy.load(TREE, "x")
    cats = ["a1", "a2", "b1", "b2", "c1"]
    lab, lo, hi = lca_ranges(h, cats, np.array([0, 0, 2, 1, 4]), np.array([0, 1, 3, 2, 4]))
    assert list(lab) == ["a1", "A", "B", "*", "c1"]  # [2,3] = {b1,b2} -> B; [1,2] = {a2,b1} -> root
    assert list(lo) == [0, 0, 2, 0, 4] and list(hi) == [0, 1, 3, 4, 4]


def test_arx_csv(tmp_path) -> None:
    p = tmp_path / "h.csv"
    p.write_text("Male;*\nFemale;*\n")
    h = Hierarchy.load(str(p), "sex")
    assert h.height == 1 and list(h.labels(["Female"], 1)) == ["*"]


def test_first_appearance_coding() -> None:
    enc = encode(pd.DataFrame({"c": ["z", "a", "z", "m"], "n": [3.5, 1.0, 3.5, 2.0]}), ["c", "n"])
    assert enc.columns["c"].categories == ["z", "a", "m"]  # intuitive ordering, as the reference reads Adult
    assert list(enc.codes[:, 0]) == [0, 1, 0, 2]
    assert list(enc.columns["n"].scale) == [1.0, 2.0, 3.5] and list(enc.codes[:, 1]) == [2, 0, 2, 1]
    assert enc.columns["n"].integer is False


def test_duplicate_leaf_rejected() -> None:
    with pytest.raises(ValueError, match="twice"):
        Hierarchy.load(pd.DataFrame([["a", "*"], ["a", "*"]]), "x")
