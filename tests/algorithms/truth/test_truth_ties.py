"""Ties in the label choice follow the stated rule of ``argmax_rows``, not the last bit of a float sum.

The rule: a class whose score is within 1e-11 relative (+1e-300) of the row maximum is tied with it; among tied classes
the lowest class code wins, and ``encode_answers`` codes the distinct labels in sorted order, so the smallest tied
label wins. Posteriors and weighted votes are sums whose last bits depend on the order of the answer rows; with the
old plain argmax the symmetric designs below gave either tied label depending on that order (ds, one_coin, zencrowd,
glad, crh_categorical; mv counts integers, exact in any order).

The designs are exactly symmetric under sigma = (swap labels b and c, swap sources A_i and B_i), which leaves the
tied objects t1 and t2 fixed, so each method's exact-arithmetic posteriors (or weighted votes) for b and c on them are
equal. Sources differ in reliability (A_i and B_i err on i of the anchor objects), so the tied sums add different
numbers in an order set by the rows. Enough unanimous anchors make sigma's tie an attracting point of each EM
(without them GLAD's L-BFGS M-step lets symmetric parameters drift 1e-11..1e-7 apart, which is an optimizer
tolerance, not rounding, and no tolerance below the 1e-9 gaps treated as real could absorb).
"""

from __future__ import annotations

import numpy as np
import pytest

from crowddb.truth import get_method
from crowddb.truth.base import argmax_rows, encode_answers

METHODS = ["mv", "ds", "one_coin", "glad", "zencrowd", "crh_categorical"]
ERRS = (0, 1, 2)  # anchor errors of source pair i: a perfect pair makes CRH's first weights hinge on the tie
N_CLEAN = 10  # unanimous anchor objects per label b and c
N_PERMUTATIONS = 25


def symmetric_design(errs=ERRS, n_clean=N_CLEAN):
    """(object, source, label) rows and the label each object must get, with labels 'a', 'b', 'c' to be renamed.

    t1 = {A_i: b, B_i: c} and t2 = {A_i: c, B_i: b} are the ties; x_ij (A_i alone says c) and y_ij (B_i alone
    says b) give source pair i its i errors; cb_j / cc_j are unanimous b / c; z is unanimous a (a third class, lower
    than both tied ones, so the winner is the lowest *tied* code, not code 0)."""
    a_src = [f"A{i}" for i in range(len(errs))]
    b_src = [f"B{i}" for i in range(len(errs))]
    everyone = a_src + b_src
    rows = []
    rows += [("t1", s, "b") for s in a_src] + [("t1", s, "c") for s in b_src]
    rows += [("t2", s, "c") for s in a_src] + [("t2", s, "b") for s in b_src]
    truth = {"t1": None, "t2": None, "z": "a"}
    for i, k in enumerate(errs):
        for j in range(k):
            rows += [(f"x{i}_{j}", s, "c" if s == a_src[i] else "b") for s in everyone]
            rows += [(f"y{i}_{j}", s, "b" if s == b_src[i] else "c") for s in everyone]
            truth[f"x{i}_{j}"], truth[f"y{i}_{j}"] = "b", "c"
    for j in range(n_clean):
        rows += [(f"cb{j}", s, "b") for s in everyone] + [(f"cc{j}", s, "c") for s in everyone]
        truth[f"cb{j}"], truth[f"cc{j}"] = "b", "c"
    rows += [("z", s, "a") for s in everyone]
    return rows, truth


def _sigma(row):
    """The design's symmetry: labels b <-> c, sources A_i <-> B_i, objects x <-> y and cb <-> cc."""
    o, s, v = row
    o = {"x": "y", "y": "x"}.get(o[0], o[0]) + o[1:] if o[0] in "xy" else o
    o = {"cb": "cc", "cc": "cb"}.get(o[:2], o[:2]) + o[2:] if o[:2] in ("cb", "cc") else o
    return o, {"A": "B", "B": "A"}[s[0]] + s[1:], {"b": "c", "c": "b"}.get(v, v)


def test_design_is_symmetric_and_tied():
    rows, _ = symmetric_design()
    assert sorted(map(_sigma, rows)) == sorted(rows)
    for t in ("t1", "t2"):
        labels = [v for o, _, v in rows if o == t]
        assert labels.count("b") == labels.count("c") == len(ERRS)


LABEL_POOLS = [
    ["p", "q", "r"],
    [10, 9, 2],  # numbers sort numerically (2 < 9 < 10), not as text ("10" < "2" < "9")
]


def _renamed_case(rng, pool):
    """The design with rows shuffled, labels a/b/c mapped to a random arrangement of ``pool`` and sources renamed at
    random (so the first-appearance codes of objects and sources change too)."""
    rows, truth = symmetric_design()
    names = dict(zip("abc", rng.permutation(np.array(pool, dtype=object)).tolist()))
    sources = sorted({s for _, s, _ in rows})
    new_src = dict(zip(sources, (f"w{k}" for k in rng.permutation(1000)[: len(sources)])))
    order = rng.permutation(len(rows))
    shuffled = [(rows[i][0], new_src[rows[i][1]], names[rows[i][2]]) for i in order]
    winner = min(names["b"], names["c"])  # the rule: the lowest class code = the smallest tied label
    expected = {o: winner if v is None else names[v] for o, v in truth.items()}
    return shuffled, expected


def test_class_codes_follow_sorted_labels():
    """What 'lowest class code' means for labels: encode_answers codes the distinct labels in sorted order."""
    for pool in LABEL_POOLS:
        ans = encode_answers(["o"] * 3, ["s1", "s2", "s3"], pool, "categorical")
        assert ans.classes.tolist() == sorted(pool)


@pytest.mark.parametrize("pool", LABEL_POOLS, ids=["text", "numbers"])
@pytest.mark.parametrize("name", METHODS)
def test_exact_tie_is_independent_of_answer_order_and_naming(name, pool):
    rng = np.random.default_rng(sum(map(ord, name)) + len(str(pool)))
    confidences = []
    for _ in range(N_PERMUTATIONS):
        rows, expected = _renamed_case(rng, pool)
        objects, sources, values = zip(*rows)
        m = get_method(name)().fit(list(objects), list(sources), list(values))
        assert m.truths_.to_dict() == expected
        confidences.append(m.confidences_.loc[["t1", "t2"]].to_numpy())
    # the tied objects' confidences are the same number in every order, up to rounding
    np.testing.assert_allclose(np.array(confidences), confidences[0][0], rtol=1e-9)


# ----------------------------------------------------------------------------------------- argmax_rows itself


def _ulps(x, n):
    """x moved up by n ulps."""
    for _ in range(n):
        x = np.nextafter(x, np.inf)
    return x


@pytest.mark.parametrize("scale", [1e-280, 1e-12, 0.5, 3.7, 1e4, 1e200])
def test_one_ulp_apart_is_a_tie_the_lowest_code_wins(scale):
    a = scale
    b = _ulps(a, 1)
    assert b > a
    assert argmax_rows(np.array([[a, b], [b, a]])).tolist() == [0, 0]
    # a hundred ulps too (1e-14 relative): the order of a few hundred additions, far below the tolerance
    c = _ulps(a, 100)
    assert argmax_rows(np.array([[a, c, a / 2], [a / 2, a, c]])).tolist() == [0, 1]


@pytest.mark.parametrize("scale", [1e-280, 1e-12, 0.5, 3.7, 1e4, 1e200])
def test_a_5e_10_relative_gap_is_not_a_tie(scale):
    hi = scale
    lo = scale * (1 - 5e-10)
    assert argmax_rows(np.array([[lo, hi], [hi, lo]])).tolist() == [1, 0]
    for seed in range(30):  # nor is it ever flipped at random
        assert argmax_rows(np.array([[lo, hi]]), np.random.default_rng(seed)).tolist() == [1]


def test_random_ties_up_to_rounding_draw_every_tied_class():
    p = np.array([[0.1 + 0.2, 0.3, 0.3 - 1e-6]])  # classes 0 and 1 one ulp apart, class 2 genuinely lower
    assert (0.1 + 0.2) != 0.3
    wins = [int(argmax_rows(p, np.random.default_rng(seed))[0]) for seed in range(400)]
    assert set(wins) == {0, 1}
    assert 150 < wins.count(0) < 250  # uniform between the two tied classes


def test_integer_votes_are_compared_exactly():
    votes = np.array([[3, 3, 1], [2, 5, 5], [10**15, 10**15 + 1, 0]], dtype=np.int64)
    assert argmax_rows(votes).tolist() == [0, 1, 1]


def test_infinities_and_nan():
    inf, nan = np.inf, np.nan
    p = np.array([[1e308, inf, inf], [nan, 0.2, 0.2], [nan, nan, nan], [-inf, -inf, -inf], [nan, 0.1, 0.3]])
    # inf ties only with inf; NaN never wins; an all-NaN row gives code 0
    assert argmax_rows(p).tolist() == [1, 1, 0, 0, 2]
    # the absolute part: scores within 1e-300 of each other tie whatever their ratio (underflowed posteriors)
    assert argmax_rows(np.array([[0.0, 5e-301], [0.0, 5e-300]])).tolist() == [0, 1]


def _rule(row):
    """The rule, restated in plain Python: the lowest index within 1e-11 relative (+1e-300) of the largest score."""
    m = max(row)
    return next(i for i, x in enumerate(row) if x == m or abs(m - x) <= 1e-11 * max(abs(m), abs(x)) + 1e-300)


def test_vectorized_rule_matches_the_plain_rule():
    rng = np.random.default_rng(7)
    p = rng.random((2000, 5)) * 10.0 ** rng.integers(-5, 6, (2000, 1))
    top = p.max(axis=1)
    # plant near-ties: a copy of the maximum moved by k ulps (k up to 2000: still a tie) or by a relative 1e-9
    col = rng.integers(0, 5, 2000)
    k = rng.integers(0, 2000, 2000)
    moved = np.where(rng.random(2000) < 0.5, top * (1 + 1e-9 * rng.choice([-1, 1], 2000)),
                     top + k * np.spacing(top) * rng.choice([-1, 1], 2000))
    p[np.arange(2000), col] = moved
    assert argmax_rows(p).tolist() == [_rule(row) for row in p.tolist()]
