"""Datafly and Incognito: full-domain generalization with interval hierarchies for numbers, ARX hierarchies."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
import shared_data

from crowddb.anonymize import anonymize
from crowddb.anonymize.encoding import encode
from crowddb.anonymize.fulldomain import FullDomain, build_ladder

pycanon = pytest.importorskip("pycanon.anonymity")  # pip install --no-deps pycanon
HIER = str(shared_data.ADULT_HIERARCHIES)


def people(n: int = 300, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"age": rng.integers(17, 91, n), "sex": rng.choice(["Male", "Female"], n),
                         "workclass": rng.choice(["Private", "State-gov", "Federal-gov", "Self-emp-inc"], n),
                         "job": rng.integers(0, 5, n)})


def test_numeric_interval_ladder() -> None:
    enc = encode(pd.DataFrame({"age": [17, 25, 33, 90]}), ["age"])
    lad = build_ladder(enc.columns["age"])
    assert list(lad.labels[0]) == ["17", "25", "33", "90"]
    assert list(lad.labels[1]) == ["[15-19]", "[25-29]", "[30-34]", "[90-94]"]  # 5-year bands (range 73 / 16)
    assert lad.labels[2][0] == "[15-24]"
    assert list(lad.labels[-1]) == ["*"]
    assert lad.lo[1][0] == 17 and lad.hi[-1][0] == 90  # boxes are clipped to the public domain


@pytest.mark.parametrize("method", ["datafly", "incognito"])
@pytest.mark.parametrize("k", [2, 10, 50])
def test_k_anonymous(method: str, k: int) -> None:
    frame = people()
    qis = ["age", "sex", "workclass"]
    rel = anonymize(frame, qis, k, method=method)
    assert pycanon.k_anonymity(rel.table, qis) >= k
    assert rel.metrics["method"] == method
    assert rel.metrics["suppressed"] <= max(k, rel.metrics["max_suppressed"])
    sup = (rel.table[qis] == "*").all(axis=1)
    assert sup.sum() == 0 or sup.sum() >= k  # suppressed rows form one k-anonymous class
    levels = rel.metrics["levels"]
    for q in qis:  # full-domain: one generalization level per attribute for every unsuppressed row
        lad = build_ladder(encode(frame, [q]).columns[q])
        assert set(rel.table.loc[~sup, q]) <= set(lad.labels[levels[q]])


def test_incognito_beats_or_ties_datafly_on_ncp() -> None:
    frame = people(500, seed=4)
    qis = ["age", "sex", "workclass"]
    d = anonymize(frame, qis, 10, method="datafly")
    i = anonymize(frame, qis, 10, method="incognito", max_suppressed=d.metrics["max_suppressed"])
    assert i.metrics["ncp"] <= d.metrics["ncp"] + 1e-9
    assert i.metrics["lattice_complete"]


def test_incognito_finds_minimal_nodes() -> None:
    frame = people(200, seed=1)
    qis = ["age", "sex"]
    enc = encode(frame, qis)
    fd = FullDomain(enc)
    rel = anonymize(frame, qis, 5, method="incognito", max_suppressed=0)
    node = np.array([rel.metrics["levels"][q] for q in qis])
    assert not fd.small(node, 5).any()
    for j in range(len(node)):  # minimal: lowering any attribute breaks k-anonymity
        if node[j] > 0:
            lower = node.copy()
            lower[j] -= 1
            assert fd.small(lower, 5).any()


@pytest.mark.skipif(not os.path.isdir(HIER), reason="ARX hierarchies not available")
def test_arx_hierarchies_used() -> None:
    frame = people()
    hier = {q: f"{HIER}/adult_hierarchy_{q}.csv" for q in ["age", "sex", "workclass"]}
    for method in ("datafly", "incognito"):
        rel = anonymize(frame, ["age", "sex", "workclass"], 20, method=method, hierarchies=hier)
        assert pycanon.k_anonymity(rel.table, ["age", "sex", "workclass"]) >= 20
        nodes = set(pd.read_csv(hier["workclass"], sep=";", header=None, dtype=str).to_numpy().ravel())
        assert set(rel.table["workclass"]) <= nodes


def test_suppressed_rows_are_a_class_of_their_own_when_the_top_range_spans_the_scale():
    """Found by the property test: Datafly at the top of an auto-built numeric ladder labels 7 rows with a range that
    spans the whole scale (its box equals a suppressed row's) and suppresses 4 as '*': a worker tells the two labels
    apart, so they are two classes (it counted one)."""
    frame = pd.DataFrame({"q0": [0.5, 0.7, 0.6, 0.1, 0.7, 0.0, 1.4, -1.8, -1.7, -1.8, -0.3],
                          "s": [0, 1, 1, 1, 2, 2, 0, 0, 2, 0, 2]})
    rel = anonymize(frame, ["q0"], 4, method="datafly")
    shown = rel.table["q0"].astype(str).to_numpy()
    assert (shown == "*").sum() == 4
    assert sorted(np.bincount(rel.groups).tolist()) == [4, 7]
    assert len(set(zip(shown, rel.groups))) == len(set(shown)) == len(set(rel.groups)) == 2
    assert rel.metrics["n_groups"] == 2 and rel.metrics["min_group_size"] == 4
