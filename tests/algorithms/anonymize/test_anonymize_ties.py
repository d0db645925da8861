"""The tie rule of crowddb/anonymize (crowddb/anonymize/ties.py): outcomes that tie in real arithmetic do not depend on
the order in which a float score was summed.

Each chooser is checked against plain-Python references written here with exact arithmetic (Fractions), where a tie
is exact equality and the first candidate in enumeration order wins, on inputs built so that candidates tie exactly
while the float sums of the code differ in their last bits; the terms are reordered (answer columns permuted, samples
shuffled) and the outcome must not move."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from itertools import permutations, product

import numpy as np
import pandas as pd
import pytest

from crowddb.anonymize import fka as fk
from crowddb.anonymize import incognito as inc
from crowddb.anonymize.encoding import encode
from crowddb.anonymize.fulldomain import FullDomain
from crowddb.anonymize.ties import ABS_TOL, REL_TOL, equal, first_best, less

# ---------------------------------------------------------------- the helper


def test_tolerances_are_the_stated_ones():
    assert (REL_TOL, ABS_TOL) == (1e-9, 1e-12)


def test_first_best_ties_go_to_the_first_position():
    # 0.75 and 0.75 + 1 ulp: the pair FKA's selectWorstPartition met (a box summed in another order)
    assert first_best([0.75, 0.7500000000000001], maximize=False) == 0
    assert first_best([0.7500000000000001, 0.75], maximize=False) == 0
    assert first_best([0.75, 0.7500000000000001]) == 0
    assert first_best([0.7500000000000001, 0.75]) == 0
    # 0.1 + 0.2 vs 0.3: equal in real arithmetic, not in floats
    assert first_best([0.2, 0.1 + 0.2, 0.3]) == 1
    assert first_best([0.2, 0.3, 0.1 + 0.2]) == 1
    assert first_best([0.5, 0.3, 0.1 + 0.2, 0.9], maximize=False) == 1


def test_first_best_genuine_differences_win():
    # relative tolerance: 1e-9 of the larger score
    assert first_best([1.0, 1.0 + 1e-8]) == 1
    assert first_best([1.0, 1.0 + 5e-10]) == 0
    assert first_best([1.0 + 1e-8, 1.0], maximize=False) == 1
    assert first_best([1e6, 1e6 + 5e-4]) == 0  # 5e-10 relative: a tie at any scale
    assert first_best([1e6, 1e6 + 5e-3]) == 1
    # absolute tolerance near 0 (a gain that cancels to rounding noise)
    assert first_best([0.0, 5e-13]) == 0
    assert first_best([0.0, -5e-13], maximize=False) == 0
    assert first_best([0.0, 5e-12]) == 1
    # ties are judged against the best score, not a running best: 0 is 1.6e-9 below the best, 1 only 0.8e-9
    assert first_best([1.0, 1.0 + 0.8e-9, 1.0 + 1.6e-9]) == 1
    assert first_best([-np.inf, 0.0, -1.0]) == 1
    assert first_best([np.inf, np.inf]) == 0


def test_first_best_exact_scores_compare_exactly():
    # integers (numerators over a common denominator) never get a tolerance, however large
    assert first_best([10**17, 10**17 + 1]) == 1
    assert first_best(np.array([10**17, 10**17 + 1, 10**17 + 1], dtype=np.int64)) == 1
    assert first_best(np.array([3, 1, 1], dtype=np.int64), maximize=False) == 1
    assert first_best([10**30, 10**30 + 1]) == 1  # Python ints beyond int64
    third = Fraction(1, 3)
    assert first_best([third, Fraction(2, 6)]) == 0
    assert first_best([third, third + Fraction(1, 10**30)]) == 1
    assert first_best([third, third - Fraction(1, 10**30)], maximize=False) == 1


def test_first_best_nan_and_empty():
    assert first_best([np.nan, 1.0, 2.0]) == 2
    assert first_best([np.nan, 1.0, 2.0], maximize=False) == 1
    assert first_best([np.nan, np.nan]) == 0
    with pytest.raises(ValueError, match=r"^first_best needs a non-empty 1-D sequence of scores, got shape \(0,\)$"):
        first_best([])


def test_equal_and_less():
    assert equal(0.3, 0.1 + 0.2) and not equal(0.3, 0.3 + 1e-8)
    assert equal(np.inf, np.inf) and not equal(np.inf, 1e308)
    assert not equal(10**17, 10**17 + 1)  # integers: exact
    assert equal(np.array([1.0, 2.0, 0.0]), np.array([1.0 + 1e-12, 2.1, 1e-13])).tolist() == [True, False, True]
    assert not less(0.1 + 0.2, 0.3) and not less(0.3, 0.1 + 0.2)
    assert less(0.3, 0.3 + 1e-8) and not less(0.3 + 1e-8, 0.3)
    assert less(np.array([1.0, 1.0, 0.5]), np.array([1.0 + 1e-12, 1.1, 0.4])).tolist() == [False, True, False]


# ---------------------------------------------------------------- FKA adaptive partitioning (Algorithm 2 phase 1)


def _q(x) -> Fraction:
    """The exact value of a float (or int) grid entry."""
    return Fraction(float(x))


def exact_accuracy(g, lo, hi):
    """Eq. 11 with Eq. 12/13 mixing, in Fractions: (Acc(S), the row share of S)."""
    cells = list(product(*[range(a, b + 1) for a, b in zip(lo, hi)]))
    n_ans = g.truth.shape[-1]
    prior = [_q(x) for x in g.prior]
    tc = [sum(_q(g.truth[c][r]) for c in cells) for r in range(n_ans)]
    nt = sum(tc)
    p_true = [x / nt for x in tc] if nt else prior
    vol = sum(_q(g.volume[c]) for c in cells)
    p_theta = []
    for r in range(n_ans):
        s = Fraction(0)
        for c in cells:
            nf = sum(_q(x) for x in g.feedback[c])
            s += (_q(g.feedback[c][r]) / nf if nf else prior[r]) * _q(g.volume[c])
        p_theta.append(s / vol)
    share = sum(_q(g.tuples[c]) for c in cells) / sum(_q(x) for x in g.tuples.reshape(-1))
    return sum(a * b for a, b in zip(p_true, p_theta)), share


def exact_partition(g, k, delta):
    """Algorithm 2 phase 1 by loops in exact arithmetic: a tie is exact equality; the first open box is cut first,
    and the first cut (lowest dimension, then lowest position) wins."""
    shape = g.tuples.shape
    open_ = [(tuple([0] * len(shape)), tuple(s - 1 for s in shape))]
    done = []

    def rows(lo, hi):
        return sum(int(g.tuples[c]) for c in product(*[range(a, b + 1) for a, b in zip(lo, hi)]))

    while open_:
        scores = [exact_accuracy(g, lo, hi)[0] for lo, hi in open_]
        lo, hi = open_.pop(scores.index(min(scores)))  # list.index: the first of the equal minima
        acc, share = exact_accuracy(g, lo, hi)
        cands = []
        for j in range(len(shape)):
            for s in range(lo[j], hi[j]):
                h1 = tuple(s if q == j else hi[q] for q in range(len(shape)))
                l2 = tuple(s + 1 if q == j else lo[q] for q in range(len(shape)))
                if rows(lo, h1) < k or rows(l2, hi) < k:
                    continue
                a1, w1 = exact_accuracy(g, lo, h1)
                a2, w2 = exact_accuracy(g, l2, hi)
                dc = w1 * a1 + w2 * a2 - share * acc if delta == "weighted" else a1 + a2 - acc  # Eq. 10 / ours
                cands.append((dc, ((lo, h1), (l2, hi))))
        if not cands:
            done.append((lo, hi))
        else:
            top = max(dc for dc, _ in cands)
            open_.extend(next(cut for dc, cut in cands if dc == top))
    return done


def _hand_grid():
    """The 2 x 3 grid of tests/algorithms/anonymize/test_pins_mondrian_fka.py, where boxes of Acc 3/4 met 0.75 vs 0.7500000000000001."""
    fb = np.zeros((2, 3, 2))
    fb[0, 0], fb[0, 1], fb[1, 0], fb[1, 2] = [3, 1], [0, 2], [1, 1], [0, 4]
    tr = np.zeros((2, 3, 2))
    tr[0, 0], tr[0, 1], tr[1, 2] = [2, 0], [1, 1], [0, 3]
    tuples = np.array([[4, 3, 1], [2, 5, 6]])
    vol = np.array([[1.0, 2.0, 1.0], [3.0, 1.0, 2.0]])
    return fk.Grid(fb, tr, tuples, vol, None, np.array([0.25, 0.75]))


def _cut_tie_grid():
    """A 2 x 3 grid, 3 answers, where cuts of equal delta in real arithmetic round apart as floats by answer order."""
    fb = np.array([[[2, 0, 0], [0, 0, 1], [1, 0, 2]], [[2, 0, 0], [1, 1, 0], [0, 2, 1]]], dtype=float)
    tr = np.array([[[1, 1, 1], [0, 0, 0], [1, 1, 1]], [[1, 0, 1], [1, 1, 1], [1, 1, 1]]], dtype=float)
    tuples = np.array([[3, 3, 1], [4, 2, 2]])
    vol = np.array([[2.0, 1.0, 2.0], [1.0, 2.0, 2.0]])
    return fk.Grid(fb, tr, tuples, vol, None, np.array([0.5, 0.25, 0.25]))


def _answers_permuted(g, p):
    """The same grid with the answer labels renamed by p: every accuracy is the same sum in another order."""
    p = list(p)
    return fk.Grid(g.feedback[..., p], g.truth[..., p], g.tuples, g.volume, g.sensitive, g.prior[p])


def _boxes(parts):
    return [(tuple(lo.tolist()), tuple(hi.tolist())) for lo, hi in parts]


def float_accuracy(g, lo, hi):
    """Acc(S) of Eq. 11 in floats, summed cell by cell in plain Python (another order than numpy's)."""
    cells = list(product(*[range(a, b + 1) for a, b in zip(lo, hi)]))
    n_ans = g.truth.shape[-1]
    tc = [sum(float(g.truth[c][r]) for c in cells) for r in range(n_ans)]
    vol = sum(float(g.volume[c]) for c in cells)
    p_theta = []
    for r in range(n_ans):
        s = 0.0
        for c in cells:
            nf = float(g.feedback[c].sum())
            s += (g.feedback[c][r] / nf if nf > 0 else g.prior[r]) * g.volume[c]
        p_theta.append(s / vol)
    return sum(x / sum(tc) * y for x, y in zip(tc, p_theta))


def test_hand_grid_boxes_tie_exactly_but_not_as_floats():
    # the defect: with k = 2 and the weighted delta, the open boxes (0,1)-(1,2) and (0,0)-(0,0) both have Acc = 3/4
    # exactly; numpy sums both to 0.75, a cell-by-cell loop sums the first to 0.7500000000000001, so an argmin over
    # floats took (0,1)-(1,2) in one and (0,0)-(0,0) in the other
    g = _hand_grid()
    assert exact_accuracy(g, (0, 1), (1, 2))[0] == exact_accuracy(g, (0, 0), (0, 0))[0] == Fraction(3, 4)
    # (numpy's own sum may land on either side of 3/4 by a bit, by the machine's SIMD width: the tie rule may not
    # depend on it, and the partition tests below pin the boxes it chooses)
    assert fk._accuracy(g, np.array([0, 1]), np.array([1, 2]))[0] == pytest.approx(0.75, rel=0, abs=1e-12)
    assert float_accuracy(g, (0, 1), (1, 2)) == 0.7500000000000001
    assert float_accuracy(g, (0, 0), (0, 0)) == 0.75


@pytest.mark.parametrize("delta", ["literal", "weighted"])
@pytest.mark.parametrize("make,ks", [(_hand_grid, (2, 4, 7, 22)), (_cut_tie_grid, (2, 3, 4, 6))])
def test_adaptive_partition_is_the_exact_one_whatever_the_answer_order(make, ks, delta):
    g = make()
    for k in ks:
        want = exact_partition(g, k, delta)
        for p in permutations(range(g.truth.shape[-1])):
            assert _boxes(fk.adaptive_partition(_answers_permuted(g, p), k, None, delta)) == want, (k, p)


def test_adaptive_partition_ties_pinned():
    # weighted delta, k = 2: after (1,0)-(1,0) closes (Acc 1/2), the worst open boxes tie at Acc 3/4 and the first
    # open one, (0,1)-(1,2), is cut; its half (0,1)-(0,2) (Acc 1/2) closes next, before (0,0)-(0,0)
    got = _boxes(fk.adaptive_partition(_hand_grid(), 2, None, "weighted"))
    assert got == [((1, 0), (1, 0)), ((0, 1), (0, 2)), ((0, 0), (0, 0)), ((1, 1), (1, 1)), ((1, 2), (1, 2))]
    # k = 3: the box (0,1)-(1,2) cuts as well across dimension 0 as after position 1 of dimension 1 (delta 1/3
    # literal, 0 weighted; in floats 1/3 ± 2 ulp and ±2.8e-17 by answer order); the first, dimension 0, wins
    want = [((0, 1), (0, 2)), ((1, 1), (1, 2)), ((0, 0), (0, 0)), ((1, 0), (1, 0))]
    for delta in ("literal", "weighted"):
        for p in permutations(range(3)):
            assert _boxes(fk.adaptive_partition(_answers_permuted(_cut_tie_grid(), p), 3, None, delta)) == want


# ---------------------------------------------------------------- FKA feedback histogram (Algorithm 1)

# one QI of 5 codes, 15 samples, 5 answers: the first cut at 1, 2 (and 3, no sample there) all give summed variance
# 62/25; summed cell by cell in floats, cut 1 comes out 2.4799999999999995 and cut 2 2.48
HIST_X = [0, 4, 0, 0, 0, 4, 2, 2, 1, 0, 4, 0, 2, 2, 2]
HIST_T = [4, 2, 0, 4, 1, 2, 3, 1, 0, 1, 3, 4, 3, 1, 0]


def exact_variance(x, t, cuts, n_ans):
    """§4.3 summed over the slabs of a 1-D grid, in Fractions: Σ_slabs Σv²/n - (Σv/n)²."""
    slab = [sum(1 for c in cuts if c < v) for v in x]
    count = Counter(zip(slab, t))
    total = Fraction(0)
    for s in range(len(cuts) + 1):
        v = [count[(s, r)] for r in range(n_ans)]
        total += Fraction(sum(q * q for q in v), n_ans) - Fraction(sum(v), n_ans) ** 2
    return total


def float_variance(x, t, cuts, n_ans):
    """The same sum in floats, slab by slab (as a float implementation sums it)."""
    slab = [sum(1 for c in cuts if c < v) for v in x]
    count = Counter(zip(slab, t))
    total = 0.0
    for s in range(len(cuts) + 1):
        v = [float(count[(s, r)]) for r in range(n_ans)]
        total += sum(q * q for q in v) / n_ans - (sum(v) / n_ans) ** 2
    return total


def test_histogram_cuts_tie_exactly_but_not_as_floats():
    assert [exact_variance(HIST_X, HIST_T, [c], 5) for c in (0, 1, 2)] == [Fraction(58, 25), Fraction(62, 25),
                                                                           Fraction(62, 25)]
    assert float_variance(HIST_X, HIST_T, [1], 5) < float_variance(HIST_X, HIST_T, [2], 5)
    samples, truth = np.array(HIST_X).reshape(-1, 1), np.array(HIST_T)
    nums = [fk._variance_numerator(np.searchsorted([c], samples[:, 0]), truth, 2, 5) for c in (0, 1, 2)]
    assert nums == [58, 62, 62]  # 25 x the summed variance: exact integers
    assert fk._variance_sum(np.searchsorted([1], samples[:, 0]), truth, 2, 5) == pytest.approx(62 / 25)


def test_feedback_histogram_ties_go_to_the_lowest_cut_whatever_the_order():
    # first cut: 1 (tied with 2, the lowest wins); then 0 would leave one sample in a slab, so 2: [1, 2]. Ranked by
    # the float sums the first cut is 2, then 0 (74/25): [0, 2]
    x, t = np.array(HIST_X), np.array(HIST_T)
    rng = np.random.default_rng(0)
    for p in list(permutations(range(5)))[::7]:  # rename the answers: the same variances, summed in another order
        for _ in range(2):  # and shuffle the samples
            order = rng.permutation(len(x))
            cuts = fk.feedback_histogram(x[order].reshape(-1, 1), np.array(p)[t[order]], np.array([5]), 5, 400, 2)
            assert [c.tolist() for c in cuts] == [[1, 2]], p


# ---------------------------------------------------------------- Incognito: the lowest NCP among minimal nodes

TWO_BY_TWO = pd.DataFrame({"a": [1, 1, 2, 2], "b": ["x", "y", "x", "y"]})


def test_incognito_equal_ncp_goes_to_the_lowest_level_vector(monkeypatch):
    # the minimal 2-anonymous nodes are (0, 1) and (2, 0), both of NCP 50%. Whichever of the two gets its NCP summed
    # with a rounding error (0.1 + 0.2 against 0.3), the lexicographically lowest node wins
    enc = encode(TWO_BY_TWO, ["a", "b"])
    rel = inc.incognito(TWO_BY_TWO, enc, 2, max_suppressed=0)
    assert rel.metrics["levels"] == {"a": 0, "b": 1} and rel.metrics["minimal_nodes"] == 2
    for noisy in ((0, 1), (2, 0)):
        def ncp(self, node, suppressed=0, noisy=noisy):
            return 0.1 + 0.2 if tuple(int(v) for v in node) == noisy else 0.3

        monkeypatch.setattr(FullDomain, "ncp", ncp)
        assert inc.incognito(TWO_BY_TWO, enc, 2, max_suppressed=0).metrics["levels"] == {"a": 0, "b": 1}, noisy

    # a genuine difference still wins: (2, 0) below (0, 1) by 1e-6
    def lower(self, node, suppressed=0):
        return 0.3 - 1e-6 if tuple(int(v) for v in node) == (2, 0) else 0.3

    monkeypatch.setattr(FullDomain, "ncp", lower)
    assert inc.incognito(TWO_BY_TWO, enc, 2, max_suppressed=0).metrics["levels"] == {"a": 2, "b": 0}
