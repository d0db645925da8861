"""Quality figures against hand-computed cases, and the §3 accuracy model against the paper's worked examples."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowddb.anonymize import accuracy_bounds, anonymize, discernibility, matrix_accuracy, ncp, release_accuracy
from crowddb.anonymize.metrics import accuracy_ratio, merge_loss, probability_matrix
from crowddb.errors import ArgumentError


def test_eq3_paper_example() -> None:
    lower, upper = accuracy_bounds([0.8, 0.2])
    assert lower == pytest.approx(0.68)  # §3.2: "the lower bound of any K-anonymity algorithm is 68%"
    assert upper == 1.0  # Eq. 4
    assert accuracy_bounds([0.5, 0.5])[0] == pytest.approx(0.5)
    assert accuracy_bounds([8, 2])[0] == pytest.approx(0.68)  # counts are normalized
    with pytest.raises(ArgumentError):
        accuracy_bounds([-1, 2])


def test_matrix_model_fig3() -> None:
    # Fig. 3: G1 answers (25% teacher, 75% driver): workers answering by the distribution are right 62.5%
    assert matrix_accuracy(np.array([[0.25], [0.75]]), np.array([4])) == pytest.approx(0.625)
    # merging G0 (pure teacher, 2 rows) into G1 (4 rows) gives (50%, 50%) and accuracy 0.5 (Eq. 5-8)
    P = np.array([[1.0, 0.25], [0.0, 0.75]])
    before = matrix_accuracy(P, np.array([2, 4]))
    after = matrix_accuracy(np.array([[0.5], [0.5]]), np.array([6]))
    assert after == pytest.approx(0.5)
    assert before - after == pytest.approx(merge_loss(P[:, 0], 2, P[:, 1], 4, 6))  # Eq. 8
    lower, upper = accuracy_bounds([0.5, 0.5])
    assert lower <= after <= before <= upper  # Eq. 3 and Eq. 4 bracket every grouping


def test_release_accuracy_and_matrix() -> None:
    groups = np.array([0, 0, 1, 1, 1, 1])
    answers = np.array(["t", "t", "t", "d", "d", "d"])
    P, sizes, labels = probability_matrix(groups, answers)
    assert list(labels) == ["d", "t"] and list(sizes) == [2, 4]
    assert np.allclose(P.sum(axis=0), 1.0)  # matrix property 1: columns sum to one
    assert release_accuracy(groups, answers) == pytest.approx((2 * 1.0 + 4 * 0.625) / 6)
    assert accuracy_ratio([1, 2, 3, 4], [1, 2, 0, 4]) == 0.75


def test_ncp_and_discernibility_by_hand() -> None:
    frame = pd.DataFrame({"age": [10, 20, 30, 40, 50, 60], "c": list("aabbcc")})
    rel = anonymize(frame, ["age", "c"], 3)
    # two classes {10,20,30}/{a,b} and {40,50,60}/{b,c}; age range 50, c domain 3 values (|set|-1)/(|D|-1) = 1/2
    assert sorted(set(rel.table["age"])) == ["[10-30]", "[40-60]"]
    assert sorted(set(rel.table["c"])) == ["{a,b}", "{b,c}"]
    expected = 100 * np.mean([20 / 50, 0.5])
    assert rel.metrics["ncp"] == pytest.approx(expected)
    assert rel.metrics["discernibility"] == 3**2 + 3**2
    assert rel.metrics["avg_class_size"] == pytest.approx(6 / 2 / 3)
    assert rel.metrics["avg_class_size_raw"] == 3
    assert rel.metrics["n_groups"] == 2 and rel.metrics["k"] == 3
    spans = np.array([50.0, 2.0])
    assert ncp(rel.lo, rel.hi, spans) == pytest.approx(expected)


def test_discernibility_with_suppression() -> None:
    groups = np.array([0, 0, 1, 1, 1, 2, 2])
    sup = np.array([False, False, False, False, False, True, True])
    assert discernibility(groups) == 4 + 9 + 4
    assert discernibility(groups, sup) == 4 + 9 + 2 * 7  # each suppressed row costs |D|


def test_full_domain_ncp_counts_suppressed_rows() -> None:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.integers(0, 100, 60), "b": rng.choice(list("xyz"), 60)})
    rel = anonymize(frame, ["a", "b"], 5, method="datafly")
    spans = np.array([rel.encoding["a"].span, rel.encoding["b"].span])
    assert rel.metrics["ncp"] == pytest.approx(ncp(rel.lo, rel.hi, spans))
