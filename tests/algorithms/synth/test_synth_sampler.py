"""Algorithm 1 and the privacy test of §4.3."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm
from test_synth_data import claims

from crowddb.synth import k_prime, privacy_buckets, synthesize
from crowddb.synth.kde import log_cell_prob


def test_every_released_value_passes_the_rerun_test():
    obj, src, x = claims(n_obj=15)
    res = synthesize(obj, src, x, m=20, k=5, gamma=4.0, epsilon0=1.0, seed=3)
    tr = res.trace
    assert len(tr) == len(res.rows) == 15 * 20
    assert (tr["value"].to_numpy() == res.rows["value"].to_numpy()).all()
    for o, grp in tr.groupby("object"):
        kp = k_prime(grp["value"].to_numpy(), x[obj == o], grp["bandwidth"].iloc[0], 0.1, 4.0,
                     grp["bucket"].to_numpy())
        assert (kp == grp["k_prime"].to_numpy()).all()
        assert (kp >= grp["k_tilde"].to_numpy()).all()


def test_cell_probability_matches_scalar_definition():
    seeds = np.array([0.0, 0.3, 2.0, -1.5])
    for j, cell, h in [(3, 0.1, 0.5), (-20, 0.1, 0.5), (0, 1.0, 1.0), (12, 1.0, 2.0)]:
        got = log_cell_prob(np.array([j])[:, None], cell, seeds[None, :], np.array(h))[0]
        lo, hi = ((j - 0.5) * cell - seeds) / h, ((j + 0.5) * cell - seeds) / h
        want = np.log(np.where(lo > 0, norm.sf(lo) - norm.sf(hi), norm.cdf(hi) - norm.cdf(lo)))
        assert np.allclose(got, want, rtol=1e-9, atol=1e-9)


def test_buckets_follow_the_definition():
    claims_ = np.array([0.0, 0.5, 1.0, 4.0])
    b = privacy_buckets(np.array([0.2, 3.0]), claims_, 1.0, 0.1, 4.0)
    for r, v in enumerate([0.2, 3.0]):
        for s, c in enumerate(claims_):
            p = norm.cdf(v + 0.05 - c) - norm.cdf(v - 0.05 - c)
            assert 4.0 ** (-b[r, s] - 1) < p <= 4.0 ** (-b[r, s])


def test_privacy_test_rejects_lonely_candidates_and_counts_attempts():
    # one object with 5 scattered claims and a huge epsilon0 (k~ = k): nothing can pass with k = 5
    obj = np.zeros(5, int)
    x = np.array([0.0, 100.0, 200.0, 300.0, 400.0])
    res = synthesize(obj, np.arange(5), x, m=10, k=5, epsilon0=50.0, bandwidth=1.0, max_attempts=300, seed=0)
    rep = res.report.iloc[0]
    assert rep["rows"] == 0 and not rep["reached_m"] and rep["tried"] == 300 and rep["rejected"] == 300
    assert "max_attempts=300" in rep["reason"]
    assert res.summary["objects_short_of_m"] == 1 and res.summary["objects_withheld"] == 0


def test_without_privacy_test_tries_exactly_m():
    obj, src, x = claims(n_obj=4)
    res = synthesize(obj, src, x, m=7, privacy_test=False, seed=0)
    assert (res.report["tried"] == 7).all() and (res.report["rejected"] == 0).all()
    assert not res.report["guarantee_holds"].any() and res.summary["epsilon"] is None


def test_released_values_lie_on_the_data_grid():
    obj, src, x = claims(n_obj=5)
    v = synthesize(obj, src, x, m=10, seed=0).rows["value"].to_numpy()
    assert np.allclose(v * 10, np.round(v * 10), atol=1e-9)


@pytest.mark.parametrize("n_obj", [1, 40])
def test_batches_of_many_objects_reach_m(n_obj):
    obj, src, x = claims(n_obj=n_obj, n_src=8, bad=())
    res = synthesize(obj, src, x, m=30, seed=2)
    assert res.report["reached_m"].all() and len(res.rows) == 30 * n_obj
    assert res.rows.groupby("object").size().eq(30).all()
    assert math.isclose(res.rows["value"].mean(), x.mean(), rel_tol=0.05)


def test_vectorized_test_equals_a_scalar_loop():
    from crowddb.synth.sampler import _test

    rng = np.random.default_rng(0)
    X = np.array([[10.0, 10.5, 11.0, 30.0], [1000.0, 1200.0, 900.0, 0.0]])
    M = np.array([[True] * 4, [True, True, True, False]])
    hh = np.array([[0.7], [5000.0]])  # one wide-cell object, one thin-cell object (cell = 1)
    seed = rng.integers(0, 3, (2, 6))
    j = np.round(np.take_along_axis(X, seed, 1) + hh * rng.standard_normal((2, 6)))
    kp, a = _test(j, seed, X, M, hh, 1.0, 4.0)
    for o in range(2):
        for r in range(6):
            def bucket(c, o=o, r=r):
                lo, hi = (j[o, r] - 0.5 - c) / hh[o, 0], (j[o, r] + 0.5 - c) / hh[o, 0]
                p = norm.sf(lo) - norm.sf(hi) if lo > 0 else norm.cdf(hi) - norm.cdf(lo)
                return math.floor(-math.log(p) / math.log(4.0))
            want_a = bucket(X[o, seed[o, r]])
            want_k = sum(bucket(X[o, s]) == want_a for s in range(4) if M[o, s])
            assert a[o, r] == want_a and kp[o, r] == want_k


@pytest.mark.parametrize("weights", ["combined", "uniform"])
def test_released_values_pass_an_independent_rerun_of_the_test(weights):
    # recompute every released value's test from scratch with scipy: cell mass of each claim, its gamma-bucket, k'
    obj, src, x = claims(n_obj=6, n_src=9, bad=(8,))
    gamma, k = 4.0, 5
    res = synthesize(obj, src, x, m=15, k=k, gamma=gamma, weights=weights, seed=11)
    assert res.report["reached_m"].all()
    h = res.report.set_index("object")["bandwidth"]
    for row in res.trace.itertuples():
        c = x[obj == row.object]
        lo, hi = (row.value - 0.05 - c) / h[row.object], (row.value + 0.05 - c) / h[row.object]
        p = np.where(lo > 0, norm.sf(lo) - norm.sf(hi), norm.cdf(hi) - norm.cdf(lo))
        with np.errstate(divide="ignore"):  # p = 0 (a claim far from the value): no bucket, -1 here
            a = np.where(p > 0, np.floor(-np.log(p) / math.log(gamma)), -1).astype(int)  # gamma^-(a+1) < p <= gamma^-a
        assert row.bucket in set(a)  # the generating seed is one of the claims
        kp = int((a == row.bucket).sum())
        assert kp == row.k_prime and kp >= row.k_tilde
