"""kanon-crowd-db §5.1's synthetic dataset (crowddb/datasets/synthetic.py), checked by independent computations:
every tuple lies in a region whose Adult majority is its category, 10,000 tuples, the same output for the same seed;
the uniform variant (§5.2: the synthetic data "follow uniform distribution") spread exactly evenly over the kept
points of the data space, counted by plain loops;
FKA's ``tag`` ablation (the paper's tagged samples, §5.1); and Algorithm 1's cut score, the paper's var(V) of the
answer counts beside ours, the cells' purity."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from test_pins_mondrian_fka import ref_histogram

from crowddb.anonymize import anonymize
from crowddb.anonymize.fka import feedback_histogram
from crowddb.datasets import OCCUPATION_CATEGORY, load_adult
from crowddb.datasets.synthetic import kanon_synthetic
from crowddb.errors import ArgumentError


@pytest.fixture(scope="module")
def adult() -> pd.DataFrame:
    return load_adult()


def test_size_columns_and_reproducible(adult) -> None:
    a = kanon_synthetic(seed=3, adult=adult)
    b = kanon_synthetic(seed=3, adult=adult)
    assert len(a.frame) == 10_000 and a.frame["id"].is_unique
    pd.testing.assert_frame_equal(a.frame, b.frame)
    assert {q: c.tolist() for q, c in a.cuts.items()} == {q: c.tolist() for q, c in b.cuts.items()}
    c = kanon_synthetic(seed=4, adult=adult)
    assert not a.frame["id"].equals(c.frame["id"])
    # every tuple is an unchanged Adult row
    merged = a.frame.merge(adult, on="id", suffixes=("", "_adult"))
    assert len(merged) == 10_000
    for col in adult.columns.drop("id"):
        assert (merged[col] == merged[f"{col}_adult"]).all()
    assert (a.frame["category"] == a.frame["occupation"].map(OCCUPATION_CATEGORY)).all()
    assert (a.frame["job"] == "CAT" + a.frame["category"].astype(str)).all()


def test_every_tuple_in_its_majority_region(adult) -> None:
    syn = kanon_synthetic(seed=1, adult=adult)
    cuts = syn.cuts
    assert sorted(cuts) == ["age", "education_num"] and len(cuts["age"]) == 3 and len(cuts["education_num"]) == 2
    lo, hi = np.percentile(adult["age"], [5, 95])
    assert all(lo <= c < hi for c in cuts["age"])

    age_cuts, edu_cuts = cuts["age"].tolist(), cuts["education_num"].tolist()

    def keys(frame: pd.DataFrame) -> list[tuple]:  # plain Python: the slab of each QI (a cut c keeps c on the left)
        return [(sum(a > c for c in age_cuts), sum(e > c for c in edu_cuts), s)
                for a, e, s in zip(frame["age"].tolist(), frame["education_num"].tolist(), frame["sex"].tolist())]

    votes: dict[tuple, dict[int, int]] = {}
    for r, occupation in zip(keys(adult), adult["occupation"].tolist()):
        cat = OCCUPATION_CATEGORY[occupation]
        votes.setdefault(r, {}).setdefault(cat, 0)
        votes[r][cat] += 1
    label = {r: min(v, key=lambda c: (-v[c], c)) for r, v in votes.items()}
    kept = sum(v[label[r]] for r, v in votes.items())
    assert kept >= 10_000
    regions = keys(syn.frame)
    assert (syn.frame["category"].to_numpy() == np.array([label[r] for r in regions])).all()
    # the grid id agrees with the slabs (QIs in order, sex values sorted)
    expect = [(a * 3 + e) * 2 + (s == "Male") for a, e, s in regions]
    assert syn.frame["region"].tolist() == expect == syn.region_of(syn.frame).tolist()
    assert syn.labels[syn.frame["region"]].tolist() == syn.frame["category"].tolist()


def test_adult_variant_unchanged(adult) -> None:
    # the first rebuild's draws, pinned so that adding the uniform variant left them as they were
    a = kanon_synthetic(seed=3, adult=adult)
    assert a.distribution == "adult" and a.space == {} and "source_id" not in a.frame
    assert {q: c.tolist() for q, c in a.cuts.items()} == {"age": [23, 27, 52], "education_num": [11, 12]}
    assert int(a.frame["id"].sum()) == 150_835_797
    pd.testing.assert_frame_equal(a.frame, kanon_synthetic(seed=3, adult=adult, distribution="adult").frame)


def test_uniform_variant_exactly_even_over_kept_points(adult) -> None:
    syn = kanon_synthetic(seed=2, adult=adult, distribution="uniform")
    frame = syn.frame
    assert syn.distribution == "uniform" and len(frame) == 10_000
    assert frame["id"].tolist() == list(range(10_000))
    # the same grid as the 'adult' variant of the same seed; the data space is the 5th..95th percentiles
    assert {q: c.tolist() for q, c in syn.cuts.items()} == {"age": [24, 30, 53], "education_num": [9, 11]}
    assert {q: c.tolist() for q, c in kanon_synthetic(seed=2, adult=adult).cuts.items()} == {
        "age": [24, 30, 53], "education_num": [9, 11]}
    assert syn.space == {"age": (20.0, 62.0), "education_num": (6.0, 14.0)}

    age_cuts, edu_cuts = syn.cuts["age"], syn.cuts["education_num"]

    def region(a: int, e: int, s: str) -> tuple:  # plain Python: the slab of each QI (a cut c keeps c on the left)
        return sum(a > c for c in age_cuts), sum(e > c for c in edu_cuts), s

    # plain loops over Adult: the rows inside the data space vote their region's label (lowest category on ties)
    rows = list(zip(adult["id"].tolist(), adult["age"].tolist(), adult["education_num"].tolist(),
                    adult["sex"].tolist(), adult["occupation"].tolist()))
    inside = [(i, a, e, s, OCCUPATION_CATEGORY[o]) for i, a, e, s, o in rows if 20 <= a <= 62 and 6 <= e <= 14]
    votes: dict[tuple, Counter] = {}
    for _, a, e, s, c in inside:
        votes.setdefault(region(a, e, s), Counter())[c] += 1
    label = {r: min(v, key=lambda c: (-v[c], c)) for r, v in votes.items()}
    agreeing: dict[tuple, set] = {}  # point -> ids of its rows that agree with their region's label
    for i, a, e, s, c in inside:
        if c == label[region(a, e, s)]:
            agreeing.setdefault((a, e, s), set()).add(i)
    assert len(agreeing) == 667  # of the 43 x 9 x 2 = 774 points, 107 hold only noise

    tuples = list(zip(frame["age"].tolist(), frame["education_num"].tolist(), frame["sex"].tolist()))
    # every region's tuples share one ground truth, the census majority there
    truth: dict[tuple, set] = {}
    for point, c in zip(tuples, frame["category"].tolist()):
        truth.setdefault(region(*point), set()).add(c)
    assert all(cats == {label[r]} for r, cats in truth.items())
    # uniform: every kept point holds 10,000 // 667 = 14 tuples, 10,000 - 14 * 667 = 662 of them one more
    count = Counter(tuples)
    assert set(count) == set(agreeing)
    assert Counter(count.values()) == {15: 662, 14: 5}
    # a point's tuples are its agreeing rows, each used once before any repeats
    sources: dict[tuple, list] = {}
    for point, i in zip(tuples, frame["source_id"].tolist()):
        sources.setdefault(point, []).append(i)
    for point, ids in sources.items():
        assert set(ids) <= agreeing[point]
        assert len(set(ids)) == min(len(agreeing[point]), len(ids))
        assert max(Counter(ids).values()) - min(Counter(ids).values()) <= 1
    # every tuple an unchanged Adult row
    merged = frame.merge(adult, left_on="source_id", right_on="id", suffixes=("", "_adult"))
    assert len(merged) == 10_000
    for col in adult.columns.drop("id"):
        assert (merged[col] == merged[f"{col}_adult"]).all()
    assert (frame["job"] == "CAT" + frame["category"].astype(str)).all()
    assert syn.region_of(frame).tolist() == frame["region"].tolist()
    # same seed, same rows; another seed, other rows
    pd.testing.assert_frame_equal(frame, kanon_synthetic(seed=2, adult=adult, distribution="uniform").frame)
    other = kanon_synthetic(seed=3, adult=adult, distribution="uniform").frame
    assert not frame["source_id"].equals(other["source_id"])
    with pytest.raises(ArgumentError, match="distribution must be one of"):
        kanon_synthetic(seed=2, adult=adult, distribution="gaussian")


def test_too_many_rows_or_cuts_refused(adult) -> None:
    with pytest.raises(ArgumentError, match="fewer than n=30000"):
        kanon_synthetic(30_000, seed=0, adult=adult)
    with pytest.raises(ArgumentError, match="education_num: 99 cuts"):
        kanon_synthetic(seed=0, cuts={"education_num": 99}, adult=adult)


def test_fka_tagged_samples_not_published() -> None:
    rng = np.random.default_rng(0)
    n = 600
    frame = pd.DataFrame({"a": rng.integers(0, 40, n), "b": rng.integers(0, 10, n)})
    asked = []

    def ask(lo, hi):
        asked.append(len(lo))
        return ((lo[:, 0] + hi[:, 0]) / 2 >= 20).astype(np.int64)

    tagged = []

    def tag(labels: pd.DataFrame) -> np.ndarray:
        tagged.append(labels.copy())
        return (labels["a"].astype(int) >= 20).to_numpy().astype(np.int64)

    rel = anonymize(frame, ["a", "b"], 20, method="fka", ask=ask, seed=5, tag=tag)
    n_s = round(0.10 * n)
    assert asked == [n_s]  # only the cell-generalized samples are published
    assert len(tagged) == 1 and len(tagged[0]) == n_s and list(tagged[0].columns) == ["a", "b"]
    assert rel.metrics["crowd_tuples"] == n_s and rel.metrics["tagged"] is True
    assert rel.metrics["samples_widened_raw"] == 0
    with pytest.raises(ArgumentError, match="tag must return"):
        anonymize(frame, ["a", "b"], 20, method="fka", ask=ask, seed=5, tag=lambda labels: np.zeros(3, int))


# ---------------------------------------------------------------- Algorithm 1's cut score: counts vs purity (ours)

def test_counts_slice_a_sliver_purity_cuts_the_boundary() -> None:
    x = np.arange(60)[:, None]
    # values 0..29 all answer 0; 30..59 answer 1 where x % 6 == 0 (25 zeros, 5 ones)
    t = np.where(x[:, 0] < 30, 0, (x[:, 0] % 6 == 0).astype(np.int64))

    def counts(c: int) -> int:  # §4.3: n_ans * Σv² - (Σv)² per cell (n_ans = 2), summed
        out = 0
        for cell in (t[: c + 1], t[c + 1:]):
            v = np.bincount(cell, minlength=2)
            out += 2 * int((v * v).sum()) - int(v.sum()) ** 2
        return out

    def purity(c: int) -> float:
        return sum(float((np.bincount(cell, minlength=2) ** 2).sum()) / len(cell) for cell in (t[: c + 1], t[c + 1:]))

    allowed = range(5, 54)  # both slabs keep >= 6 samples
    assert (counts(29), counts(53)) == (1300, 2132)  # the sliver 54..59 outscores the pure region boundary
    assert max(allowed, key=counts) == 53
    assert max(allowed, key=purity) == 29 and purity(29) == pytest.approx(900 / 30 + 650 / 30)
    m = np.array([60])
    assert feedback_histogram(x, t, m, 2, cell_limit=2, min_samples=6)[0].tolist() == [53]
    assert feedback_histogram(x, t, m, 2, cell_limit=2, min_samples=6, criterion="purity")[0].tolist() == [29]


def ref_purity(cells: list[tuple], truth, shape, n_ans) -> Fraction:
    """The purity score by plain loops and exact fractions: over the cells holding samples, Σ v² / n."""
    per_cell: dict[tuple, list[int]] = {}
    for cell, a in zip(cells, truth.tolist()):
        per_cell.setdefault(cell, [0] * n_ans)[a] += 1
    return sum((Fraction(sum(v * v for v in vs), sum(vs)) for vs in per_cell.values()), Fraction(0))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_purity_histogram_matches_loops(seed) -> None:
    rng = np.random.default_rng(seed)
    m = np.array([12, 7])
    x = np.stack([rng.integers(0, 12, 150), rng.integers(0, 7, 150)], axis=1)
    truth = ((x[:, 0] >= 5).astype(np.int64) + (x[:, 1] >= 4) + (rng.random(150) < 0.2)) % 3
    got = feedback_histogram(x, truth, m, 3, cell_limit=16, min_samples=8, criterion="purity")
    # Algorithm 1's loops (the pins' reference) with the purity score and slabs
    assert [c.tolist() for c in got] == ref_histogram(x, truth, m, 3, 16, 8, "slabs", score=ref_purity)


def test_fka_criterion_recorded_and_unknown_refused() -> None:
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"a": rng.integers(0, 40, 500), "b": rng.integers(0, 10, 500)})
    calls = []

    def ask(lo, hi):
        calls.append(len(lo))
        return ((lo[:, 0] + hi[:, 0]) / 2 >= 20).astype(np.int64)

    rel = anonymize(frame, ["a", "b"], 20, method="fka", ask=ask, seed=2, criterion="purity")
    assert rel.metrics["criterion"] == "purity"
    assert "criterion" not in anonymize(frame, ["a", "b"], 20, method="fka", ask=ask, seed=2).metrics
    calls.clear()
    with pytest.raises(ArgumentError, match="criterion must be one of"):
        anonymize(frame, ["a", "b"], 20, method="fka", ask=ask, seed=2, criterion="gini")
    assert calls == []
