"""Pins behaviour of crowddb/synth/kde.py and crowddb/synth/api.py (PrisCrowd KDE layout and the PRIVATE_SYNTH front)
against independent computations (plain loops, closed forms, numpy references)."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from crowddb.errors import ArgumentError, EmptyInputError
from crowddb.synth import api, kde
from crowddb.synth.api import synthesize
from crowddb.synth.kde import (Batch, decimal_resolution, gram, log_cell_prob, make_batches, mixture_density,
                               rkhs_sq_dist, row_percentile, silverman_bandwidth)


# ----------------------------------------------------------------------------------------------- kde: constants
def test_kde_constants():
    assert kde.LOG_SQRT_2PI == pytest.approx(math.log(math.sqrt(2 * math.pi)), rel=1e-15)
    assert kde.SILVERMAN_FACTOR == 0.9
    assert kde.THIN_CELL == 1e-3
    assert kde.CELL_BUDGET == 2_000_000


# ----------------------------------------------------------------------------------------------- kde: batches
def _check_layout(batches, obj, src, x):
    """Every batch row holds exactly its object's claims in input order; padding is 0 / 0 / -1 / False."""
    seen = []
    for b in batches:
        assert b.X.shape == b.mask.shape == b.src.shape == b.pos.shape == (b.objs.size, b.X.shape[1])
        for r, o in enumerate(b.objs):
            idx = [i for i in range(len(obj)) if obj[i] == o]  # plain loop: claims of o in input order
            n = len(idx)
            assert list(b.mask[r]) == [True] * n + [False] * (b.X.shape[1] - n)
            assert list(b.pos[r]) == idx + [-1] * (b.X.shape[1] - n)
            assert list(b.X[r]) == [float(x[i]) for i in idx] + [0.0] * (b.X.shape[1] - n)
            assert list(b.src[r]) == [int(src[i]) for i in idx] + [0] * (b.X.shape[1] - n)
            assert b.counts[r] == n
            seen.append(int(o))
    return seen


def test_make_batches_layout_one_batch():
    obj = np.array([1, 0, 1, 2, 1, 0])
    src = np.array([5, 6, 7, 8, 9, 4])
    x = np.array([1.5, 2.5, 3.5, 4.5, 5.5, 6.5])
    bs = make_batches(obj, src, x)
    assert len(bs) == 1
    # counts (2, 3, 1): sorted by size (stable) -> objects 2, 0, 1, width 3
    assert list(bs[0].objs) == [2, 0, 1]
    assert bs[0].X.shape == (3, 3)
    assert list(bs[0].counts) == [1, 2, 3]
    assert _check_layout(bs, obj, src, x) == [2, 0, 1]
    assert bs[0].X.dtype == float and bs[0].pos.dtype.kind == "i"


def test_make_batches_last_claim_padding_index_clipped():
    # object 0 is the last in the flat order and the widest: padding of the narrower row reaches past the end
    obj = np.array([1, 0, 0, 0])
    src = np.array([3, 2, 1, 0])
    x = np.array([9.0, 1.0, 2.0, 3.0])
    bs = make_batches(obj, src, x)
    assert len(bs) == 1 and list(bs[0].objs) == [1, 0]
    _check_layout(bs, obj, src, x)


def test_make_batches_empty_and_gap_codes():
    assert make_batches(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)) == []
    bs = make_batches(np.array([0, 0]), np.array([0, 1]), np.array([1.0, 2.0]))
    assert len(bs) == 1 and list(bs[0].objs) == [0] and bs[0].X.shape == (1, 2)
    # a code with no claims (gap) still gets a row: 1 column wide, all padding
    bs = make_batches(np.array([2, 0]), np.array([0, 1]), np.array([1.0, 2.0]))
    assert len(bs) == 1 and list(bs[0].objs) == [1, 0, 2] and bs[0].X.shape == (3, 1)
    assert list(bs[0].mask[:, 0]) == [False, True, True]
    _check_layout(bs, np.array([2, 0]), np.array([0, 1]), np.array([1.0, 2.0]))


def _sizes(counts, budget=kde.CELL_BUDGET):
    obj = np.repeat(np.arange(len(counts)), counts)
    bs = make_batches(obj, np.zeros(obj.size, dtype=np.int64), np.arange(obj.size, dtype=float), budget)
    _check_layout(bs, obj, np.zeros(obj.size, dtype=np.int64), np.arange(obj.size, dtype=float))
    return [list(map(int, b.objs)) for b in bs], [b.X.shape[1] for b in bs]


def test_make_batches_budget_boundary():
    # (objects in batch) * width^2 <= budget keeps growing; > budget starts a new batch
    assert _sizes([2, 2], budget=8) == ([[0, 1]], [2])
    assert _sizes([2, 2], budget=7) == ([[0], [1]], [2, 2])
    assert _sizes([1, 1], budget=2) == ([[0, 1]], [1])
    assert _sizes([1, 1], budget=1) == ([[0], [1]], [1, 1])
    assert _sizes([1, 1, 1], budget=3) == ([[0, 1, 2]], [1])
    assert _sizes([1, 1, 1], budget=2) == ([[0, 1], [2]], [1, 1])
    assert _sizes([1, 1, 1, 1], budget=2) == ([[0, 1], [2, 3]], [1, 1])  # the budget counts a later batch's own rows
    assert _sizes([1, 1, 1, 1, 1, 1], budget=3) == ([[0, 1, 2], [3, 4, 5]], [1, 1])
    # the first object of a batch always enters, even above the budget
    assert _sizes([3, 3], budget=1) == ([[0], [1]], [3, 3])


def test_make_batches_width_ratio_boundary():
    # a wider object joins while w <= 1.5 * (smallest count) + 2
    assert _sizes([2, 5]) == ([[0, 1]], [5])
    assert _sizes([2, 6]) == ([[0], [1]], [2, 6])
    assert _sizes([4, 8]) == ([[0, 1]], [8])
    assert _sizes([4, 9]) == ([[0], [1]], [4, 9])
    assert _sizes([0, 2, 3]) == ([[0, 1], [2]], [2, 3])
    assert _sizes([6, 1, 3]) == ([[1, 2], [0]], [3, 6])


# ----------------------------------------------------------------------------------------------- kde: resolution
@pytest.mark.parametrize("x, want", [
    ([1.5, 2.25], 0.01), ([100.0, 300.0], 100.0), ([-20.0, 30.0], 10.0), ([0.1, 0.3], 0.1), ([7.0], 1.0),
    ([0.0, 5.0], 1.0), ([0.0, 0.0], 1.0), ([], 1.0), ([0.0], 1.0), ([1.2345678], 1e-6), ([123.0, 0.5], 0.5 / 5),
    ([1e-6 * 3], 1e-6), ([2e-5, 3e-5], 1e-5), ([999.0], 1.0), ([1000.0], 1000.0),
])
def test_decimal_resolution(x, want):
    assert decimal_resolution(np.array(x, dtype=float)) == pytest.approx(want, rel=1e-12)


def test_decimal_resolution_finest():
    assert decimal_resolution(np.array([1.2345678]), finest=-7) == pytest.approx(1e-7, rel=1e-12)
    assert decimal_resolution(np.array([1.2345678]), finest=-3) == pytest.approx(1e-3, rel=1e-12)
    assert decimal_resolution(np.array([1.23456789]), finest=-7) == pytest.approx(1e-7, rel=1e-12)
    assert decimal_resolution(np.array([1.234]), finest=-3) == pytest.approx(1e-3, rel=1e-12)
    assert decimal_resolution([2, 4]) == 1.0  # plain lists are accepted
    assert decimal_resolution([10**20, 3 * 10**20]) == 1e20  # Python ints beyond int64 are taken as floats


# ----------------------------------------------------------------------------------------------- kde: percentiles
def test_row_percentile_matches_numpy():
    V = np.array([[3.0, 1.0, 2.0, 9.0, 0.0], [5.0, -1.0, 0.0, 0.0, 0.0], [4.0, 0.0, 0.0, 0.0, 0.0],
                  [0.0, 0.0, 0.0, 0.0, 0.0], [2.0, 8.0, 4.0, 6.0, 10.0]])
    n = [4, 2, 1, 0, 5]
    mask = np.arange(5)[None, :] < np.array(n)[:, None]
    for q in (0, 10, 25, 50, 75, 90, 95, 100):
        got = row_percentile(V, mask, q)
        for r in range(5):
            if n[r]:
                assert got[r] == pytest.approx(np.percentile(V[r, :n[r]], q), rel=1e-14, abs=1e-14)
            else:
                assert np.isnan(got[r])


def test_row_percentile_zero_width():
    got = row_percentile(np.zeros((2, 0)), np.zeros((2, 0), dtype=bool), 50)
    assert got.shape == (2,) and np.all(np.isnan(got))


# ----------------------------------------------------------------------------------------------- kde: bandwidth
def _silverman_ref(v):
    v = np.asarray(v, dtype=float)
    n = v.size
    sd = float(np.std(v, ddof=1)) if n > 1 else 0.0
    iqr = (np.percentile(v, 75) - np.percentile(v, 25)) / 1.349 if n else 0.0
    scale = min(s for s in (sd, iqr) if s > 0) if (sd > 0 or iqr > 0) else 0.0
    return 0.9 * scale * max(n, 1) ** -0.2


def test_silverman_bandwidth_rows():
    rows = [[0.0, 1.0, 2.0, 3.0, 4.0, 10.0], [1.0, 1.0, 1.0, 1.0, 10.0], [0.0, 0.0, 1.0, 1.0], [5.0, 5.0, 5.0],
            [3.0], [], [2.0, 7.0], [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]]
    w = max(len(r) for r in rows)
    X = np.zeros((len(rows), w))
    mask = np.zeros((len(rows), w), dtype=bool)
    for i, r in enumerate(rows):
        X[i, :len(r)] = r
        X[i, len(r):] = 99.0  # padding values must not matter
        mask[i, :len(r)] = True
    got = silverman_bandwidth(X, mask, 0.0)
    for i, r in enumerate(rows):
        assert got[i] == pytest.approx(_silverman_ref(r), rel=1e-12, abs=1e-15), (i, r)
    # the IQR wins where it is smaller and positive, sd where the IQR is 0 or larger
    assert got[0] == pytest.approx(0.9 * (np.percentile(rows[0], 75) - np.percentile(rows[0], 25)) / 1.349
                                   * 6 ** -0.2)
    assert got[1] == pytest.approx(0.9 * np.std(rows[1], ddof=1) * 5 ** -0.2)
    assert got[2] == pytest.approx(0.9 * np.std(rows[2], ddof=1) * 4 ** -0.2)
    floored = silverman_bandwidth(X, mask, 0.25)
    assert list(floored[3:6]) == [0.25, 0.25, 0.25]
    per_row = silverman_bandwidth(X, mask, np.arange(len(rows)) * 0.1)
    assert per_row[3] == pytest.approx(0.3) and per_row[4] == pytest.approx(0.4)
    assert per_row[0] == pytest.approx(_silverman_ref(rows[0]))


def test_silverman_iqr_equal_to_sd_takes_sd():
    # iqr == sd exactly: both scales agree, any choice gives the same h
    v = np.array([[0.0, 1.0]])
    assert silverman_bandwidth(v, np.ones_like(v, dtype=bool), 0.0)[0] == pytest.approx(_silverman_ref([0.0, 1.0]))


# ----------------------------------------------------------------------------------------------- kde: Gram / RKHS
def test_gram_plain_loop():
    X = np.array([[0.0, 1.0, 3.0], [2.0, -1.0, 0.0]])
    mask = np.array([[True, True, True], [True, True, False]])
    h = np.array([0.5, 2.0])
    K = gram(X, mask, h)
    for b in range(2):
        for s in range(3):
            for t in range(3):
                want = math.exp(-((X[b, s] - X[b, t]) ** 2) / (2 * h[b] ** 2)) if mask[b, s] and mask[b, t] else 0
                assert K[b, s, t] == pytest.approx(want, rel=1e-14, abs=0)


def test_rkhs_sq_dist_plain_loop_and_clamp():
    K = np.array([[[1.0, 0.5, 0.1], [0.5, 1.0, 0.2], [0.1, 0.2, 1.0]]])
    w = np.array([[0.2, 0.3, 0.5]])
    d = rkhs_sq_dist(K, w)
    for s in range(3):
        kw = sum(K[0, s, t] * w[0, t] for t in range(3))
        wkw = sum(w[0, a] * K[0, a, b] * w[0, b] for a in range(3) for b in range(3))
        assert d[0, s] == pytest.approx(1 - 2 * kw + wkw, rel=1e-14)
    bad = np.array([[[1.0, 2.0], [2.0, 1.0]]])  # not PSD: raw value 1 - 3 + 1.5 = -0.5 is clamped to 0
    assert list(rkhs_sq_dist(bad, np.array([[0.5, 0.5]]))[0]) == [0.0, 0.0]


# ----------------------------------------------------------------------------------------------- kde: cell mass
def _exact_log_mass(j, cell, seed, h):
    mpmath.mp.dps = 50
    a = (mpmath.mpf(j) * cell - 0.5 * mpmath.mpf(cell) - seed) / h
    b = (mpmath.mpf(j) * cell + 0.5 * mpmath.mpf(cell) - seed) / h
    return float(mpmath.log(mpmath.ncdf(b) - mpmath.ncdf(a)))


@pytest.mark.parametrize("cell, h", [(1.0, 0.7), (0.5, 2.0), (1e-4, 1.0), (1e-4, 0.3), (2e-4, 1.0)])
def test_log_cell_prob_matches_exact_mass(cell, h):
    seeds = np.array([0.0, 0.3, -1.2, 2.7])
    js = np.array([-3, -1, 0, 1, 4])
    got = log_cell_prob(js[:, None], cell, seeds[None, :] * (cell if cell < 1e-3 else 1), np.array(h))
    for a, j in enumerate(js):
        for b, s in enumerate(seeds):
            want = _exact_log_mass(int(j), cell, float(s * (cell if cell < 1e-3 else 1)), h)
            assert got[a, b] == pytest.approx(want, rel=1e-10, abs=1e-12), (j, s)


def test_log_cell_prob_thin_far_from_seed():
    # thin cells several h away from the seed: the 2nd-order term matters at 1e-9
    cell, h = 5e-4, 1.0
    js = np.array([0, 4000, 8000, 10000])
    got = log_cell_prob(js, cell, 0.0, h)
    for a, j in enumerate(js):
        assert got[a] == pytest.approx(_exact_log_mass(int(j), cell, 0.0, h), rel=1e-13, abs=1e-13)


def test_log_cell_prob_mixed_thin_and_wide():
    cell = 0.01
    h = np.array([1.0, 20.0, 0.05, 100.0])  # cell/h = 0.01, 5e-4, 0.2, 1e-4
    j = np.array([[3], [-2]])
    seeds = np.array([0.0, 0.5, 0.02, -0.3])
    got = log_cell_prob(j, cell, seeds[None, :], h[None, :])
    assert got.shape == (2, 4)
    for a in range(2):
        for b in range(4):
            want = _exact_log_mass(int(j[a, 0]), cell, float(seeds[b]), float(h[b]))
            assert got[a, b] == pytest.approx(want, rel=1e-10), (a, b)


def test_log_cell_prob_threshold_is_inclusive():
    # cell/h == 1e-3 exactly takes the exact mass log(Phi(z + w/2) - Phi(z - w/2)) at z = -|mid|
    cell, h = 1e-3, 1.0
    js = np.array([-2000, 0, 1500, 3000])
    got = log_cell_prob(js, cell, 0.0, h)
    for a, j in enumerate(js):
        z = -abs(j * cell / h)
        assert got[a] == np.log(norm.cdf(z + 0.5e-3) - norm.cdf(z - 0.5e-3))
    # and mixed: one entry exactly at the threshold, one thin
    got = log_cell_prob(np.array([3000, 3000]), cell, 0.0, np.array([1.0, 2.0]))
    assert got[0] == np.log(norm.cdf(-3.0 + 0.5e-3) - norm.cdf(-3.0 - 0.5e-3))
    assert got[1] == pytest.approx(_exact_log_mass(3000, cell, 0.0, 2.0), rel=1e-13)


def test_log_cell_prob_far_tail_is_minus_inf_without_warning():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = log_cell_prob(np.array([100]), 1.0, 0.0, 1.0)
    assert got[0] == -np.inf


def test_log_cell_prob_symmetric_sides():
    got = log_cell_prob(np.array([-2, 2]), 1.0, 0.0, 1.0)
    assert got[0] == got[1] == pytest.approx(math.log(norm.cdf(2.5) - norm.cdf(1.5)), rel=1e-13)


# ----------------------------------------------------------------------------------------------- kde: mixture
def test_mixture_density_plain_loop():
    grid = np.array([-1.0, 0.0, 0.5, 3.0])
    centers = np.array([0.0, 1.0, 2.5])
    weights = np.array([0.2, 0.5, 0.3])
    h = 0.8
    got = mixture_density(grid, centers, weights, h)
    for g, x in enumerate(grid):
        want = sum(w * math.exp(-0.5 * ((x - c) / h) ** 2) / (h * math.sqrt(2 * math.pi))
                   for c, w in zip(centers, weights))
        assert got[g] == pytest.approx(want, rel=1e-14)
    assert list(mixture_density([0.0], np.array([0.0]), np.array([1.0]), 1.0)) == pytest.approx([norm.pdf(0.0)])


# =============================================================================================== api
import re  # noqa: E402

OBJ = ["b"] * 5 + ["a"] * 3 + ["c"] * 4
SRC = [f"s{i}" for i in range(5)] + ["s0", "s1", "s2"] + ["s0", "s1", "s2", "s3"]
VAL = [1.0, 2.0, 2.0, 3.0, 5.0, 7.0, 7.5, 9.0, 4.0, 4.0, 4.0, 4.0]
TINY = (["o"] * 4, ["s0", "s1", "s2", "s3"], [1.0, 2.0, 4.0, 7.0])


def _full(msg):
    return "^" + re.escape(msg) + "$"


def _compose_ref(eps, delta, T, dp=1e-6):
    """Basic (T eps, T delta) and advanced (sqrt(2T ln 1/dp) eps + T eps (e^eps - 1), T delta + dp), plain Python."""
    if T == 0:
        return 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, "none"
    eb, db = T * eps, T * delta
    ea = math.sqrt(2 * T * math.log(1 / dp)) * eps + T * eps * math.expm1(eps) if math.isfinite(eps) else math.inf
    da = T * delta + dp
    if ea < eb:
        return eb, db, ea, da, ea, da, "advanced"
    return eb, db, ea, da, eb, db, "basic"


def _check_composition(report, dp=1e-6):
    for _, r in report.iterrows():
        eb, db, ea, da, e, d, comp = _compose_ref(float(r["epsilon"]), float(r["delta"]), int(r["tried"]), dp)
        assert r["composition"] == comp
        for col, want in (("epsilon_object_basic", eb), ("delta_object_basic", db), ("epsilon_object_advanced", ea),
                          ("delta_object_advanced", da), ("epsilon_object", e), ("delta_object", d)):
            if math.isnan(want):
                assert math.isnan(r[col]), col
            else:
                assert r[col] == pytest.approx(want, rel=1e-12, abs=0), col


# ----------------------------------------------------------------------------------------------- api: parameters
@pytest.mark.parametrize("kw, msg", [
    ({"m": 0}, "m must be an integer >= 1, got 0"),
    ({"m": True}, "m must be an integer >= 1, got True"),
    ({"m": 2.0}, "m must be an integer >= 1, got 2.0"),
    ({"k": 0}, "k must be an integer >= 1, got 0"),
    ({"k": "3"}, "k must be an integer >= 1, got '3'"),
    ({"max_attempts": 0}, "max_attempts must be an integer >= 1, got 0"),
    ({"max_attempts": False}, "max_attempts must be an integer >= 1, got False"),
    ({"method": "laplace"}, "method must be one of ('priscrowd', 'basic'), got 'laplace'"),
    ({"weights": "x"}, "weights must be one of ('combined', 'global', 'uniform'), got 'x'"),
    ({"small_objects": "drop"}, "small_objects must be one of ('withhold', 'release'), got 'drop'"),
    ({"gamma": 1}, "gamma must be a finite number > 1, got 1"),
    ({"gamma": 1.0}, "gamma must be a finite number > 1, got 1.0"),
    ({"gamma": math.inf}, "gamma must be a finite number > 1, got inf"),
    ({"gamma": "4"}, "gamma must be a finite number > 1, got '4'"),
    ({"epsilon0": 0}, "epsilon0 must be a finite number > 0, got 0"),
    ({"epsilon0": math.inf}, "epsilon0 must be a finite number > 0, got inf"),
    ({"epsilon0": "1"}, "epsilon0 must be a finite number > 0, got '1'"),
    ({"epsilon": 0}, "epsilon must be a number > 0, got 0"),
    ({"epsilon": "2"}, "epsilon must be a number > 0, got '2'"),
    ({"t": 0}, "t must be an integer >= 1, got 0"),
    ({"t": 1.0}, "t must be an integer >= 1, got 1.0"),
    ({"t": 5}, "t must satisfy 1 <= t < k (Theorem 2), got t=5, k=5"),
    ({"t": 3, "k": 2}, "t must satisfy 1 <= t < k (Theorem 2), got t=3, k=2"),
    ({"weight_floor": 1.0}, "weight_floor must be in [0, 1), got 1.0"),
    ({"weight_floor": -0.1}, "weight_floor must be in [0, 1), got -0.1"),
    ({"composition_delta": 0.0}, "composition_delta must be in (0, 1), got 0.0"),
    ({"composition_delta": 1.0}, "composition_delta must be in (0, 1), got 1.0"),
    ({"composition_delta": "0.1"}, "composition_delta must be in (0, 1), got '0.1'"),
    ({"global_loss": "max"}, "global_loss must be one of ('sum', 'mean'), got 'max'"),
    ({"hampel_center": "mean"}, "hampel_center must be one of ('median', 'kde'), got 'mean'"),
    ({"resolution": 0.0}, "resolution must be > 0, got 0.0"),
    ({"resolution": -1.0}, "resolution must be > 0, got -1.0"),
    ({"resolution": math.inf}, "resolution must be > 0, got inf"),
    ({"bandwidth": 0.0}, "bandwidth must be > 0, got 0.0"),
    ({"bandwidth": math.nan}, "bandwidth must be > 0, got nan"),
    ({"bandwidth": math.inf}, "bandwidth must be > 0, got inf"),
    ({"bandwidth": {"o": -1.0}}, "bandwidth must be > 0, got {'o': -1.0}"),
    ({"bandwidth": {"x": 1.0}}, "bandwidth mapping has no entry for object 'o'"),
    ({"method": "basic", "sensitivity": {"x": 1.0}},
     "sensitivity mapping has no entry for object 'o'"),
    ({"method": "basic", "sensitivity": 0.0}, "sensitivity must be > 0, got 0.0"),
    ({"method": "basic", "sensitivity": math.inf}, "sensitivity must be > 0, got inf"),
    ({"method": "basic", "sensitivity": {"o": -2.0}}, "sensitivity must be > 0, got {'o': -2.0}"),
])
def test_bad_parameter_messages(kw, msg):
    with pytest.raises(ArgumentError, match=_full(msg)):
        synthesize(*TINY, **kw)


@pytest.mark.parametrize("hq", [(50, 95), (50, 95, 100, 100), (50, 50, 100), (50, 100, 100), (60, 50, 100), (-1, 50, 100),
                                (0, 50, 100.5), (50, math.nan, 100), (50, 95, math.inf), 5, ("a", "b", "c"), None])
def test_bad_hampel_quantiles_message(hq):
    msg = f"hampel_quantiles must be three percentiles p1 < p2 < p3 in [0, 100], got {hq!r}"
    with pytest.raises(ArgumentError, match=_full(msg)):
        synthesize(*TINY, hampel_quantiles=hq)


def test_hampel_quantiles_accepted_at_bounds_as_floats():
    assert api._quantiles([0, 50, 100]) == (0.0, 50.0, 100.0)
    assert all(type(v) is float for v in api._quantiles(np.array([1, 2, 3])))
    r = synthesize(*TINY, m=1, k=2, hampel_quantiles=[0, 1, 100], seed=0, privacy_test=False)
    assert r.summary["parameters"]["hampel_quantiles"] == (0.0, 1.0, 100.0)


@pytest.mark.parametrize("kw", [
    {"m": 1}, {"m": np.int64(2)}, {"k": 1}, {"k": np.int32(2)}, {"max_attempts": 1}, {"max_attempts": np.int64(3)},
    {"t": 1, "k": 2}, {"t": 3, "k": 4}, {"t": np.int64(1)}, {"gamma": 1.0001}, {"gamma": 2}, {"gamma": np.float32(3)},
    {"epsilon0": 1e-9}, {"epsilon0": 2}, {"epsilon0": np.float64(0.5)}, {"epsilon": 1e-9}, {"epsilon": 100},
    {"epsilon": math.inf}, {"epsilon": np.float64(50.0)}, {"weight_floor": 0.0}, {"weight_floor": 0.99},
    {"composition_delta": 1e-12}, {"composition_delta": 0.999}, {"composition_delta": np.float64(0.5)},
    {"resolution": 0.5}, {"bandwidth": 0.3}, {"bandwidth": {"o": 2}},
    {"method": "basic", "sensitivity": {"o": 1}}, {"method": "basic", "sensitivity": 3},
])
def test_parameters_accepted_at_bounds(kw):
    res = synthesize(*TINY, m=kw.pop("m", 2), seed=0, **kw)
    assert len(res.report) == 1


def test_input_array_messages():
    with pytest.raises(ArgumentError, match=r"^value column must be numeric \(.+\)$"):
        synthesize(["a", "a"], ["x", "y"], ["1", "abc"])
    with pytest.raises(ArgumentError, match=_full("object, source and value lengths differ (2, 3, 2)")):
        synthesize(["a", "a"], ["x", "y", "z"], [1.0, 2.0])
    with pytest.raises(ArgumentError, match=_full("object, source and value lengths differ (3, 2, 2)")):
        synthesize(["a", "a", "a"], ["x", "y"], [1.0, 2.0])
    with pytest.raises(ArgumentError, match=_full("object, source and value lengths differ (2, 2, 3)")):
        synthesize(["a", "a"], ["x", "y"], [1.0, 2.0, 3.0])
    with pytest.raises(EmptyInputError, match=_full("the input has no claims")):
        synthesize([], [], [])
    with pytest.raises(ArgumentError, match=_full(
            "2 claim value(s) are NaN or infinite; filter them first (e.g. keep only the claims where "
            "np.isfinite(value))")):
        synthesize(["a"] * 3, ["x", "y", "z"], [1.0, math.nan, -math.inf])
    with pytest.raises(ArgumentError, match=_full("1 claim value(s) are NaN or infinite; filter them "
                                                  "first (e.g. keep only the claims where np.isfinite(value))")):
        synthesize(["a"] * 3, ["x", "y", "z"], [1.0, 2.0, math.inf])
    null = "object and source labels must not be NULL"
    with pytest.raises(ArgumentError, match=_full(null)):
        synthesize(["a", None], ["x", "y"], [1.0, 2.0])
    with pytest.raises(ArgumentError, match=_full(null)):
        synthesize(["a", "a"], ["x", None], [1.0, 2.0])
    with pytest.raises(ArgumentError, match=_full(null)):
        synthesize(["a", "a"], [math.nan, "y"], [1.0, 2.0])


def test_arrays_codes_in_first_appearance_order():
    oc, sc, x, labels, n_src = api._arrays([["z", "y"], ["z", "x"]], ["s2", "s1", "s1", "s3"], [[1, 2], [3, 4]])
    assert oc.dtype == np.int64 and sc.dtype == np.int64 and x.dtype == float
    assert list(oc) == [0, 1, 0, 2] and list(sc) == [0, 1, 1, 2] and list(x) == [1.0, 2.0, 3.0, 4.0]
    assert list(labels) == ["z", "y", "x"] and labels.dtype == object and n_src == 3


# ----------------------------------------------------------------------------------------------- api: report
def test_report_uniform_weights_closed_form():
    res = synthesize(OBJ, SRC, VAL, m=3, k=4, weights="uniform", seed=1)
    rep = res.report
    assert list(rep.columns) == api.REPORT_COLUMNS == [
        "object", "n_claims", "released", "rows", "reached_m", "tried", "rejected", "epsilon", "delta",
        "guarantee_holds", "reason", "t", "bandwidth", "epsilon_object_basic", "delta_object_basic",
        "epsilon_object_advanced", "delta_object_advanced", "epsilon_object", "delta_object", "composition"]
    assert list(rep["object"]) == ["b", "a", "c"]
    assert list(rep["n_claims"]) == [5, 3, 4]
    # uniform c: max c / min c = 1, t = 1: epsilon = 1 + log(1 + 4), delta = n * (1/n) * e^-(k - 1)
    assert list(rep["t"]) == [1, 1, 1]
    for e, d in zip(rep["epsilon"], rep["delta"]):
        assert e == pytest.approx(1 + math.log(5), rel=1e-14)
        assert d == pytest.approx(math.exp(-3), rel=1e-14)
    assert list(rep["guarantee_holds"]) == [True, False, True]
    assert list(rep["released"]) == [True, False, True]
    assert list(rep["rows"]) == [3, 0, 3]
    assert list(rep["reached_m"]) == [True, False, True]
    assert rep["tried"].iloc[1] == 0 and rep["rejected"].iloc[1] == 0
    assert all(rep["tried"] - rep["rows"] == rep["rejected"])
    assert all(rep.loc[[0, 2], "tried"] >= 3)
    assert list(rep["reason"]) == ["", "fewer than k=4 claims; withheld", "all claims equal: bandwidth = cell width"]
    cell = 0.1
    assert rep["bandwidth"].iloc[0] == pytest.approx(max(_silverman_ref(VAL[:5]), cell), rel=1e-12)
    assert rep["bandwidth"].iloc[1] == pytest.approx(max(_silverman_ref(VAL[5:8]), cell), rel=1e-12)
    assert rep["bandwidth"].iloc[2] == pytest.approx(cell, rel=1e-12)
    assert rep["released"].dtype == bool and rep["guarantee_holds"].dtype == bool
    _check_composition(rep)

    # rows: m per released object, in order of first appearance, on the cell grid
    assert list(res.rows.columns) == ["object", "value"]
    assert list(res.rows["object"]) == ["b"] * 3 + ["c"] * 3
    q = res.rows["value"].to_numpy() / cell
    assert np.allclose(q, np.round(q), atol=1e-9)
    # trace: the same rows, with the secret bucket / k~ / k' and the object's bandwidth
    tr = res.trace
    assert list(tr.columns) == ["object", "value", "bucket", "k_tilde", "k_prime", "bandwidth"]
    assert list(tr["object"]) == list(res.rows["object"])
    assert list(tr["value"]) == list(res.rows["value"])
    assert all(tr["k_prime"] >= tr["k_tilde"]) and all(tr["bucket"] >= 0)
    assert list(tr["bandwidth"]) == [rep["bandwidth"].iloc[0]] * 3 + [rep["bandwidth"].iloc[2]] * 3
    # weights: one row per claim in input order, uniform c = 1/n
    w = res.weights
    assert list(w.columns) == ["object", "claim", "c"]
    assert list(w["claim"]) == list(range(12)) and list(w["object"]) == OBJ
    assert np.allclose(w["c"], [0.2] * 5 + [1 / 3] * 3 + [0.25] * 4, rtol=1e-14)


def test_summary_uniform_weights():
    res = synthesize(OBJ, SRC, VAL, m=3, k=4, weights="uniform", seed=1)
    rep, s = res.report, res.summary
    assert s["method"] == "priscrowd"
    assert s["epsilon"] == pytest.approx(1 + math.log(5)) and s["delta"] == pytest.approx(math.exp(-3))
    assert s["objects"] == 3 and s["objects_released"] == 2 and s["objects_withheld"] == 1
    assert s["objects_without_guarantee_released"] == 0 and s["objects_short_of_m"] == 0
    assert s["rows"] == 6 and s["tried"] == int(rep["tried"].sum()) and s["rejected"] == int(rep["rejected"].sum())
    assert s["epsilon_release"] == pytest.approx(rep["epsilon_object"].max())
    assert s["delta_release"] == pytest.approx(rep["delta_object"].max())
    assert s["epsilon_release_basic"] == pytest.approx(rep["epsilon_object_basic"].max())
    assert s["epsilon_release_advanced"] == pytest.approx(rep["epsilon_object_advanced"].max())
    top = rep.loc[rep["epsilon_object"].idxmax()]
    assert s["composition_release"] == top["composition"]
    # worst case: every guaranteed object composes max_attempts = 200 m = 600 candidates
    eb, db, ea, da, e, d, comp = _compose_ref(1 + math.log(5), math.exp(-3), 600)
    assert s["epsilon_release_max_attempts"] == pytest.approx(e, rel=1e-12)
    assert s["delta_release_max_attempts"] == pytest.approx(d, rel=1e-12)
    assert s["parameters"] == {
        "m": 3, "k": 4, "gamma": 4.0, "epsilon0": 1.0, "weights": "uniform", "t": None, "epsilon": None,
        "small_objects": "withhold", "cell": 0.1, "weight_floor": 0.1, "privacy_test": True,
        "hampel_quantiles": (50.0, 95.0, 100.0), "global_loss": "sum", "hampel_center": "median",
        "composition_delta": 1e-06, "max_attempts": 600}
    assert s["scope"] == api.SCOPE["priscrowd"] == (
        "Theorem 2 per candidate of an object: one claim of D_i replaced, c taken as fixed inputs (as in the "
        "paper); an object composes over every candidate tried (released or rejected); objects are "
        "disjoint (max over them); a source with claims on several objects adds up their figures")
    assert set(s["seconds"]) == {"weights", "sampling", "total"}
    sec = s["seconds"]
    assert 0 <= sec["weights"] < 60 and 0 <= sec["sampling"] < 60 and 0 <= sec["total"] < 60
    assert sec["total"] >= sec["weights"] + sec["sampling"]
    unit = ("one claim of one object replaced; an object's figure composes Theorem 2 over every candidate it "
            "tried, released or rejected; objects are disjoint, so the release is the max over objects; a "
            "source with claims on several objects adds up their figures")
    want = (f"the release as a whole is ({s['epsilon_release']:.6g}, {s['delta_release']:.6g})-DP "
            f"({s['composition_release']} composition; {unit}); this is the guarantee; the per-value (epsilon, delta)"
            f" = ({1 + math.log(5):.6g}, {math.exp(-3):.6g}) is the paper's Theorem 2 for one released value, not the"
            " release's guarantee")
    if s["delta_release"] >= 1:
        want += "; delta >= 1: the figure bounds nothing"
    assert s["guarantee"] == want


def test_params_reflect_arguments():
    r = synthesize(*TINY, m=2, k=3, gamma=2.5, epsilon0=2, weights="global", t=2, small_objects="release",
                   epsilon=50.0, max_attempts=7, seed=0, resolution=0.5, weight_floor=0.2, privacy_test=False,
                   hampel_quantiles=(10, 20, 30), global_loss="mean", hampel_center="kde", composition_delta=0.01)
    p = r.summary["parameters"]
    assert p == {"m": 2, "k": 3, "gamma": 2.5, "epsilon0": 2.0, "weights": "global", "t": 2, "epsilon": 50.0,
                 "small_objects": "release", "cell": 0.5, "weight_floor": 0.2, "privacy_test": False,
                 "hampel_quantiles": (10.0, 20.0, 30.0), "global_loss": "mean", "hampel_center": "kde",
                 "composition_delta": 0.01, "max_attempts": 7}
    assert type(p["gamma"]) is float and type(p["epsilon0"]) is float and type(p["composition_delta"]) is float
    assert list(r.report["t"]) == [2]
    _check_composition(r.report, 0.01)


def test_given_t_closed_form():
    # k = 4, t = 3: epsilon = 1 + log(1 + 4/3), delta = 4 * (1/4) * e^-(4 - 3)
    r = synthesize(*TINY, m=2, k=4, t=3, weights="uniform", seed=2)
    assert r.report["epsilon"].iloc[0] == pytest.approx(1 + math.log(1 + 4 / 3), rel=1e-14)
    assert r.report["delta"].iloc[0] == pytest.approx(math.exp(-1), rel=1e-14)
    assert r.report["t"].iloc[0] == 3


def test_epsilon_target_picks_t_and_withholds():
    # epsilon(t) = 1 + log(1 + 4/t): target between epsilon(2) and epsilon(1) -> t = 2
    target = 1 + math.log(1 + 4 / 2) + 1e-9
    r = synthesize(*TINY, m=2, k=4, epsilon=target, weights="uniform", seed=2)
    assert r.report["t"].iloc[0] == 2
    assert r.report["epsilon"].iloc[0] == pytest.approx(1 + math.log(3), rel=1e-14)
    assert r.report["delta"].iloc[0] == pytest.approx(math.exp(-2), rel=1e-14)
    # unreachable target: no t, withheld, epsilon inf, delta NaN
    r = synthesize(*TINY, m=2, k=4, epsilon=1.5, weights="uniform", seed=2)
    rep = r.report
    assert rep["t"].iloc[0] == 0 and rep["epsilon"].iloc[0] == math.inf and math.isnan(rep["delta"].iloc[0])
    assert rep["reason"].iloc[0] == "no t in 1..3 meets epsilon <= 1.5; withheld"
    assert not rep["released"].iloc[0] and not rep["guarantee_holds"].iloc[0] and rep["tried"].iloc[0] == 0
    assert len(r.rows) == 0 and list(r.rows.columns) == ["object", "value"]
    assert list(r.trace.columns) == ["object", "value", "bucket", "bandwidth"] and len(r.trace) == 0
    assert r.summary["epsilon"] is None and r.summary["delta"] is None
    assert r.summary["objects_withheld"] == 1 and r.summary["objects_released"] == 0
    assert r.summary["guarantee"] == "no object was released with a guarantee: this release has no (epsilon, delta)"
    for key in ("epsilon_release", "delta_release", "composition_release", "epsilon_release_basic",
                "epsilon_release_advanced", "epsilon_release_max_attempts", "delta_release_max_attempts"):
        assert key in r.summary and r.summary[key] is None
    # the same object released anyway: no guarantee, reason without 'withheld'
    r = synthesize(*TINY, m=2, k=4, epsilon=1.5, weights="uniform", seed=2, small_objects="release")
    rep = r.report
    assert rep["reason"].iloc[0] == "no t in 1..3 meets epsilon <= 1.5"
    assert rep["tried"].iloc[0] >= 2 and rep["rows"].iloc[0] == 2 and not rep["guarantee_holds"].iloc[0]
    assert r.summary["objects_without_guarantee_released"] == 1
    assert r.summary["epsilon_release"] is None


def test_k1_admits_no_t():
    r = synthesize(*TINY, m=2, k=1, weights="uniform", seed=3)
    rep = r.report
    assert rep["reason"].iloc[0] == "k=1 admits no t with 1 <= t < k (Theorem 2); withheld"
    assert rep["t"].iloc[0] == 0 and rep["epsilon"].iloc[0] == math.inf and math.isnan(rep["delta"].iloc[0])
    assert rep["tried"].iloc[0] == 0
    r = synthesize(*TINY, m=2, k=1, weights="uniform", seed=3, small_objects="release", privacy_test=False)
    rep = r.report
    assert rep["reason"].iloc[0] == "k=1 admits no t with 1 <= t < k (Theorem 2); privacy test disabled: no guarantee"
    assert rep["rows"].iloc[0] == 2 and rep["tried"].iloc[0] == 2 and not rep["guarantee_holds"].iloc[0]


def test_small_objects_release_and_short_of_m():
    r = synthesize(OBJ, SRC, VAL, m=3, k=4, weights="uniform", seed=1, small_objects="release", privacy_test=False,
                   max_attempts=2)
    rep = r.report
    assert list(rep["tried"]) == [2, 2, 2] and list(rep["rows"]) == [2, 2, 2] and list(rep["rejected"]) == [0, 0, 0]
    assert list(rep["reached_m"]) == [False] * 3 and list(rep["released"]) == [True] * 3
    assert list(rep["guarantee_holds"]) == [False] * 3
    assert list(rep["reason"]) == [
        "privacy test disabled: no guarantee; max_attempts=2 reached with 2 of m=3 rows",
        "fewer than k=4 claims; privacy test disabled: no guarantee; max_attempts=2 reached with 2 of m=3 rows",
        "privacy test disabled: no guarantee; max_attempts=2 reached with 2 of m=3 rows; all claims equal: "
        "bandwidth = cell width"]
    s = r.summary
    assert s["objects_short_of_m"] == 3 and s["objects_without_guarantee_released"] == 3 and s["rows"] == 6
    assert s["objects_withheld"] == 0 and s["epsilon"] is None
    assert list(r.rows["object"]) == ["b", "b", "a", "a", "c", "c"]
    # no privacy test: released values are seed + N(0, h^2) rounded to the cell: trace has k~ = -inf, k' = 0
    assert all(r.trace["k_tilde"] == -np.inf) and all(r.trace["k_prime"] == 0)


def test_rows_are_claims_with_tiny_bandwidth():
    # bandwidth far below the cell: each candidate is its seed's cell, i.e. one of the object's own claims
    obj = ["q", "p", "q", "p", "q", "p"]
    x = [10.0, 1.0, 20.0, 2.0, 30.0, 3.0]
    r = synthesize(obj, list("abcdef"), x, m=5, k=2, bandwidth=1e-6, weights="uniform", privacy_test=False, seed=4)
    assert list(r.rows["object"]) == ["q"] * 5 + ["p"] * 5
    assert set(r.rows["value"].iloc[:5]) <= {10.0, 20.0, 30.0}
    assert set(r.rows["value"].iloc[5:]) <= {1.0, 2.0, 3.0}
    assert list(r.report["bandwidth"]) == [1e-6, 1e-6]
    assert list(r.report["reason"]) == ["privacy test disabled: no guarantee"] * 2
    assert r.summary["parameters"]["cell"] == 1.0


def test_bandwidth_mapping_and_equal_claims():
    obj = ["u", "u", "u", "v", "v", "v"]
    x = [5.0, 5.0, 5.0, 1.0, 2.0, 3.0]
    r = synthesize(obj, list("abcabc"), x, m=2, k=2, bandwidth={"u": 0.5, "v": 2.0, "w": 9.0}, seed=5)
    assert list(r.report["bandwidth"]) == [0.5, 2.0]
    assert "all claims equal" not in r.report["reason"].iloc[0]
    r = synthesize(obj, list("abcabc"), x, m=2, k=2, seed=5, resolution=0.25)
    assert list(r.report["bandwidth"]) == [0.25, pytest.approx(max(_silverman_ref([1.0, 2.0, 3.0]), 0.25))]
    assert r.report["reason"].iloc[0] == "all claims equal: bandwidth = cell width"
    assert r.report["reason"].iloc[1] == ""
    assert r.summary["parameters"]["cell"] == 0.25


def test_always_rejected_candidates():
    # three far-apart claims, h = 1: k' = 1 (only the seed is near) < k~ ~ 3: every candidate is rejected
    r = synthesize(["o"] * 3, ["a", "b", "c"], [0.0, 100.0, 200.0], m=2, k=3, epsilon0=50.0, bandwidth=1.0,
                   weights="uniform", max_attempts=5, seed=6)
    rep = r.report
    assert list(rep["tried"]) == [5] and list(rep["rows"]) == [0] and list(rep["rejected"]) == [5]
    assert list(rep["released"]) == [False] and list(rep["guarantee_holds"]) == [True]
    assert rep["reason"].iloc[0] == "max_attempts=5 reached with 0 of m=2 rows"
    _check_composition(rep)
    s = r.summary
    assert s["objects_withheld"] == 0 and s["objects_short_of_m"] == 1 and s["objects_released"] == 0
    assert s["epsilon"] is None and s["rows"] == 0 and s["tried"] == 5 and s["rejected"] == 5
    # tried > 0 with a guarantee: the release has a figure, the per-value one is '-'
    e1 = 50 + math.log(1 + 4)
    eb, db, ea, da, e, d, comp = _compose_ref(e1, 3 * (1 / 3) * math.exp(-50 * 2), 5)
    assert s["epsilon_release"] == pytest.approx(e) and s["composition_release"] == comp == "basic"
    assert "the per-value (epsilon, delta) = (-, -) is the paper's" in s["guarantee"]
    assert len(r.trace) == 0
    assert list(r.trace.columns) == ["object", "value", "bucket", "k_tilde", "k_prime", "bandwidth"]


def test_delta_exactly_one_bounds_nothing():
    # k = 2, t = 1, uniform c: delta = 1 * e^-epsilon0 = 1/2 at epsilon0 = log 2; two candidates: delta = 1.0
    eps0 = math.log(2)
    assert 2 * math.exp(-eps0) == 1.0
    r = synthesize(["o"] * 2, ["a", "b"], [1.0, 2.0], m=2, k=2, epsilon0=eps0, weights="uniform", max_attempts=2,
                   seed=7)
    s = r.summary
    assert list(r.report["tried"]) == [2]
    assert s["delta_release"] == 1.0 and s["composition_release"] == "basic"
    assert s["guarantee"].endswith("; delta >= 1: the figure bounds nothing")


def test_guarantee_small_delta_has_no_suffix_and_counts_unguaranteed():
    r = synthesize(OBJ, SRC, VAL, m=2, k=3, epsilon0=8.0, weights="uniform", seed=8, small_objects="release")
    s = r.summary
    assert s["delta_release"] < 1
    assert s["guarantee"].endswith("not the release's guarantee")
    # epsilon0 = 1: k~ = k + Lap(1) lets the 3-claim object pass now and then
    r = synthesize(OBJ[:8], SRC[:8], VAL[:8], m=2, k=4, weights="uniform", seed=8, small_objects="release")
    s = r.summary
    assert r.report["guarantee_holds"].tolist() == [True, False]
    assert r.report["released"].tolist() == [True, True]
    assert s["objects_without_guarantee_released"] == 1
    assert s["guarantee"].endswith("; 1 object(s) released without a guarantee are not covered")
    assert s["guarantee"].count("; delta >= 1: the figure bounds nothing") == (s["delta_release"] >= 1)


def test_infinite_epsilon_without_floor():
    # weight_floor = 0: a Hampel weight of exactly 0 gives max c / min c = inf
    x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 50.0]
    obj = ["o"] * 7
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # min c = 0 divides by zero on purpose, silently
        r = synthesize(obj, [f"s{i}" for i in range(7)], x, m=2, k=3, weight_floor=0.0, seed=9)
    rep = r.report
    assert rep["epsilon"].iloc[0] == math.inf and rep["guarantee_holds"].iloc[0]
    assert r.weights["c"].min() == 0.0
    s = r.summary
    assert s["epsilon_release"] == math.inf
    assert s["guarantee"].startswith("the release as a whole is (inf, ")
    assert s["guarantee"].endswith("; epsilon = inf: an object has a sampling weight c = 0 (Theorem 2 gives no "
                                   "finite bound; weight_floor > 0 bounds it)")
    # with the default floor: max c / min c <= 10, epsilon finite and equal to Theorem 2 with the reported c
    r = synthesize(obj, [f"s{i}" for i in range(7)], x, m=2, k=3, seed=9)
    c = r.weights["c"].to_numpy()
    assert c.max() / c.min() == pytest.approx(10.0, rel=1e-12)
    assert r.report["epsilon"].iloc[0] == pytest.approx(1 + math.log1p(4 * c.max() / c.min()), rel=1e-12)
    assert r.report["delta"].iloc[0] == pytest.approx(7 * c.max() * math.exp(-(3 - 1)), rel=1e-12)


def test_report_extremes_over_padding_in_mixed_batches():
    # objects of different sizes share a batch: c extremes must ignore the padding
    obj = ["a"] * 3 + ["b"] * 4
    x = [1.0, 2.0, 4.0, 1.0, 1.5, 3.0, 8.0]
    r = synthesize(obj, [f"s{i}" for i in range(7)], x, m=2, k=3, seed=10)
    w = r.weights
    for lab, n in (("a", 3), ("b", 4)):
        c = w.loc[w["object"] == lab, "c"].to_numpy()
        assert c.sum() == pytest.approx(1.0)
        row = r.report[r.report["object"] == lab].iloc[0]
        assert row["epsilon"] == pytest.approx(1 + math.log1p(4 * c.max() / c.min()), rel=1e-12)
        assert row["delta"] == pytest.approx(n * c.max() * math.exp(-2), rel=1e-12)


# ----------------------------------------------------------------------------------------------- api: basic
def test_basic_with_sensitivity_reproduces_laplace():
    obj = ["b", "a", "b", "a", "b"]
    x = [1.25, 2.5, 3.0, 4.0, 5.5]
    r = synthesize(obj, list("vwxyz"), x, method="basic", epsilon=0.5, sensitivity=2.0, seed=11)
    lap = np.random.default_rng(11).laplace(0.0, 1.0, 5)
    noisy = [x[i] + lap[i] * 2.0 / 0.5 for i in range(5)]
    order = [0, 2, 4, 1, 3]  # object b first (first appearance), claims in input order
    assert list(r.rows["object"]) == ["b", "b", "b", "a", "a"]
    assert list(r.rows["value"]) == [round(noisy[i], 4) for i in order]  # cell 0.01 -> 2 + 2 decimals
    rep = r.report
    assert list(rep["object"]) == ["b", "a"] and list(rep["n_claims"]) == [3, 2]
    assert list(rep["rows"]) == [3, 2] and list(rep["tried"]) == [3, 2] and list(rep["rejected"]) == [0, 0]
    assert list(rep["released"]) == [True, True] and list(rep["reached_m"]) == [True, True]
    assert list(rep["epsilon"]) == [0.5, 0.5] and list(rep["delta"]) == [0.0, 0.0]
    assert list(rep["guarantee_holds"]) == [True, True] and list(rep["reason"]) == ["", ""]
    assert list(rep["t"]) == [0, 0] and rep["bandwidth"].isna().all()
    assert list(rep["epsilon_object_basic"]) == [0.5, 0.5] and list(rep["delta_object_basic"]) == [0.0, 0.0]
    assert rep["epsilon_object_advanced"].isna().all() and rep["delta_object_advanced"].isna().all()
    assert list(rep["epsilon_object"]) == [0.5, 0.5] and list(rep["delta_object"]) == [0.0, 0.0]
    assert list(rep["composition"]) == ["parallel", "parallel"]
    assert list(rep.columns) == api.REPORT_COLUMNS
    s = r.summary
    assert s["method"] == "basic" and s["epsilon"] == 0.5 and s["delta"] == 0.0
    assert s["epsilon_release"] == 0.5 and s["delta_release"] == 0.0 and s["composition_release"] == "parallel"
    assert s["epsilon_release_basic"] == 0.5 and math.isnan(s["epsilon_release_advanced"])
    assert s["epsilon_release_max_attempts"] is None and s["delta_release_max_attempts"] is None
    assert s["guarantee"] == ("the release as a whole is (0.5, 0)-DP (parallel composition; one claim replaced; each "
                              "claim is noised once (parallel composition)); this is the guarantee; per value = per "
                              "object (Laplace mechanism)")
    assert s["scope"] == api.SCOPE["basic"] == ("Laplace mechanism per claim with the stated sensitivity; data-range "
                                                "sensitivity gives no guarantee")
    assert s["objects"] == 2 and s["objects_released"] == 2 and s["objects_withheld"] == 0
    assert s["objects_without_guarantee_released"] == 0 and s["objects_short_of_m"] == 0
    assert s["rows"] == 5 and s["tried"] == 5 and s["rejected"] == 0
    assert s["parameters"]["epsilon"] == 0.5 and "max_attempts" not in s["parameters"]
    assert s["parameters"]["cell"] == 0.01
    assert "seconds" not in s
    assert r.weights.empty and r.trace.empty


def test_basic_sensitivity_mapping_and_default():
    obj = ["b", "a", "b", "a"]
    x = [1.0, 2.0, 3.0, 7.0]
    r = synthesize(obj, list("wxyz"), x, method="basic", sensitivity={"a": 4, "b": 1.0}, seed=12)
    lap = np.random.default_rng(12).laplace(0.0, 1.0, 4)
    sens = [1.0, 4.0, 1.0, 4.0]
    noisy = [x[i] + lap[i] * sens[i] / 1.0 for i in range(4)]
    assert list(r.rows["value"]) == [round(noisy[i], 2) for i in (0, 2, 1, 3)]
    assert r.summary["parameters"]["epsilon"] == 1.0 and list(r.report["epsilon"]) == [1.0, 1.0]
    # no sensitivity: the claims' range (data-dependent), no guarantee
    r = synthesize(obj, list("wxyz"), x, method="basic", seed=12)
    rng_range = [2.0, 5.0, 2.0, 5.0]  # b: 3 - 1, a: 7 - 2
    assert list(r.rows["value"]) == [round(x[i] + lap[i] * rng_range[i], 2) for i in (0, 2, 1, 3)]
    rep = r.report
    assert list(rep["guarantee_holds"]) == [False, False]
    assert list(rep["reason"]) == ["sensitivity = range of the object's claims (data-dependent)"] * 2
    s = r.summary
    assert s["epsilon"] is None and s["epsilon_release"] is None
    assert s["guarantee"] == "no object was released with a guarantee: this release has no (epsilon, delta)"
    assert s["objects_without_guarantee_released"] == 2


def test_synth_result_repr_hides_secrets():
    r = synthesize(*TINY, m=1, k=2, seed=0)
    text = repr(r)
    assert "rows=" in text and "report=" in text and "summary=" in text
    assert "weights=" not in text and "trace=" not in text


def test_release_composition_named_by_the_largest_object_figure():
    # A: 20 equal claims pass often (basic over few candidates); B: spread claims are mostly rejected (advanced)
    obj = ["A"] * 20 + ["B"] * 20
    x = [5.0] * 20 + [10.0 * i for i in range(20)]
    r = synthesize(obj, [f"s{i}" for i in range(20)] * 2, x, m=20, k=20, t=19, gamma=1.0001, epsilon0=0.3,
                   weights="uniform", bandwidth=1.0, seed=3, max_attempts=400)
    rep, s = r.report, r.summary
    assert list(rep["composition"]) == ["basic", "advanced"]
    _check_composition(rep)
    big = int(np.argmax(rep["epsilon_object"].to_numpy()))
    assert s["composition_release"] == rep["composition"].iloc[big] == "advanced"
    assert s["epsilon_release"] == max(rep["epsilon_object"]) and s["delta_release"] == max(rep["delta_object"])
    assert s["epsilon_release_basic"] == max(rep["epsilon_object_basic"])
    assert s["epsilon_release_advanced"] == max(rep["epsilon_object_advanced"])
    assert "(advanced composition; " in s["guarantee"]


def test_per_value_figures_are_the_max_over_released_objects():
    obj = ["a"] * 3 + ["b"] * 4
    x = [1.0, 2.0, 4.0, 1.0, 1.5, 3.0, 8.0]
    r = synthesize(obj, [f"s{i}" for i in range(7)], x, m=2, k=3, seed=10)
    rep, s = r.report, r.summary
    assert list(rep["released"]) == [True, True] and list(rep["guarantee_holds"]) == [True, True]
    e, d = rep["epsilon"].to_numpy(), rep["delta"].to_numpy()
    assert e[0] != e[1] and d[0] != d[1]
    assert s["epsilon"] == max(e) and s["delta"] == max(d)
    assert f"the per-value (epsilon, delta) = ({max(e):.6g}, {max(d):.6g}) is the paper's" in s["guarantee"]


def test_small_objects_in_their_own_batch_do_not_stop_later_batches():
    # a 1-claim object (withheld at k = 2) sits alone in the first batch; the 10-claim object still runs
    obj = ["s"] + ["L"] * 10
    x = [3.0] + [float(i) for i in range(10)]
    r = synthesize(obj, [f"u{i}" for i in range(11)], x, m=2, k=2, weights="uniform", seed=13)
    assert len(make_batches(np.array([0] + [1] * 10), np.zeros(11, dtype=np.int64), np.array(x))) == 2
    assert list(r.report["rows"]) == [0, 2] and list(r.rows["object"]) == ["L", "L"]
    assert r.report["reason"].iloc[0] == "fewer than k=2 claims; withheld; all claims equal: bandwidth = cell width"
    assert list(r.weights["object"]) == obj and list(r.weights["claim"]) == list(range(11))
    assert r.weights["c"].iloc[0] == 1.0 and np.allclose(r.weights["c"].iloc[1:], 0.1)


def test_single_candidate_objects_have_a_release_figure():
    r = synthesize(*TINY, m=1, k=2, weights="uniform", max_attempts=1, seed=14)
    rep, s = r.report, r.summary
    assert list(rep["tried"]) == [1] and list(rep["guarantee_holds"]) == [True]
    e = 1 + math.log(5)
    d = 4 * 0.25 * math.exp(-1)
    assert s["epsilon_release"] == pytest.approx(e, rel=1e-14) and s["delta_release"] == pytest.approx(d, rel=1e-14)
    assert s["composition_release"] == "basic"
    eb, db, ea, da, e1, d1, comp = _compose_ref(e, d, 1)
    assert s["epsilon_release_max_attempts"] == pytest.approx(e1) and s["delta_release_max_attempts"] == \
        pytest.approx(d1)


def test_make_batches_stable_orders_on_many_ties():
    # 300 objects of 1-3 claims in shuffled input order: objects sorted by size with ties in code order, and each
    # object's claims in input order (numpy's default quicksort would reorder ties at this size)
    rng = np.random.default_rng(1)
    counts = rng.integers(1, 4, 300)
    obj = rng.permutation(np.repeat(np.arange(300), counts))
    src = np.arange(obj.size) % 7
    x = np.arange(obj.size, dtype=float)
    bs = make_batches(obj, src, x)
    assert len(bs) == 1
    assert list(bs[0].objs) == sorted(range(300), key=lambda o: counts[o])
    _check_layout(bs, obj, src, x)
    few = np.repeat(np.arange(3), 100)[rng.permutation(300)]
    _check_layout(make_batches(few, np.zeros(300, dtype=np.int64), x), few, np.zeros(300, dtype=np.int64), x)


def test_basic_many_claims_keep_input_order_within_objects():
    # 300 claims over 3 objects in shuffled order: rows grouped by object (first appearance), claims in input order
    rng = np.random.default_rng(2)
    codes = np.repeat(np.arange(3), 100)[rng.permutation(300)]
    labels = np.array(["k", "m", "n"])[codes]
    x = np.round(rng.normal(0, 5, 300), 1)
    r = synthesize(labels, np.arange(300) % 9, x, method="basic", epsilon=2.0, sensitivity=3.0, seed=15)
    lap = np.random.default_rng(15).laplace(0.0, 1.0, 300)
    first = list(dict.fromkeys(labels))
    want_obj, want_val = [], []
    for lab in first:
        for i in range(300):
            if labels[i] == lab:
                want_obj.append(lab)
                want_val.append(round(x[i] + lap[i] * 3.0 / 2.0, 3))
    assert list(r.rows["object"]) == want_obj
    assert np.allclose(r.rows["value"].to_numpy(), want_val, rtol=0, atol=1e-9)


def test_basic_single_claim_object_is_released_and_columns_are_float():
    r = synthesize(["x", "y", "y"], ["a", "b", "c"], [1.0, 2.0, 3.0], method="basic", sensitivity=1.0, seed=16)
    rep = r.report
    assert list(rep["released"]) == [True, True] and list(rep["rows"]) == [1, 2]
    for col in ("epsilon_object_advanced", "delta_object_advanced", "bandwidth", "epsilon", "delta",
                "epsilon_object", "delta_object", "delta_object_basic", "epsilon_object_basic"):
        assert rep[col].dtype == np.float64, col
    assert r.summary["objects_released"] == 2


def test_labels_keep_their_type():
    # objects 1 and "1" are different objects, and integer labels stay integers (object dtype, not strings)
    r = synthesize([1, 1, "1", "1"], ["a", "b", "a", "b"], [1.0, 2.0, 3.0, 4.0], method="basic", sensitivity=1.0,
                   seed=17)
    assert r.report["object"].tolist() == [1, "1"] and type(r.report["object"].iloc[0]) is int
    assert r.rows["object"].tolist() == [1, 1, "1", "1"]
    oc, sc, x, labels, n_src = api._arrays([5, 5, 7], [1, "1", 1], [1, 2, 3])
    assert labels.dtype == object and labels.tolist() == [5, 7] and n_src == 2 and list(sc) == [0, 1, 0]
    assert x.dtype == np.float64 and list(x) == [1.0, 2.0, 3.0]


def test_single_claim_input():
    r = synthesize(["a"], ["s"], [2.5], method="basic", sensitivity=1.0, seed=18)
    assert len(r.rows) == 1 and r.report["released"].tolist() == [True]
    r = synthesize(["a"], ["s"], [2.5], m=2, k=1, small_objects="release", privacy_test=False, seed=18)
    assert r.report["rows"].tolist() == [2] and len(r.rows) == 2


def test_one_row_object_is_released_and_one_candidate_short_of_m():
    r = synthesize(*TINY, m=1, k=2, privacy_test=False, seed=19)
    rep = r.report
    assert rep["rows"].tolist() == [1] and rep["released"].tolist() == [True] and rep["reached_m"].tolist() == [True]
    assert r.summary["objects_released"] == 1 and r.summary["objects_short_of_m"] == 0
    for col in ("n_claims", "rows", "tried", "rejected", "t"):
        assert rep[col].dtype == np.int64, col
    r = synthesize(*TINY, m=2, k=2, privacy_test=False, max_attempts=1, seed=19)
    rep = r.report
    assert rep["tried"].tolist() == [1] and rep["rows"].tolist() == [1] and rep["reached_m"].tolist() == [False]
    assert r.summary["objects_short_of_m"] == 1 and r.summary["objects_withheld"] == 0


def test_many_rows_keep_draw_order_in_rows_and_trace():
    # 2 objects x 40 rows from different batches: rows and trace list the same values in the same order
    obj = ["big"] * 12 + ["small"] * 3
    x = [float(i) for i in range(12)] + [100.0, 120.0, 140.0]
    r = synthesize(obj, [f"s{i}" for i in range(15)], x, m=40, k=2, bandwidth=1e-6, weights="uniform",
                   privacy_test=False, seed=20)
    assert len(make_batches(np.repeat([0, 1], [12, 3]), np.zeros(15, dtype=np.int64), np.array(x))) == 2
    assert list(r.rows["object"]) == ["big"] * 40 + ["small"] * 40
    assert list(r.trace["object"]) == list(r.rows["object"])
    assert list(r.trace["value"]) == list(r.rows["value"])
    assert set(r.rows["value"].iloc[:40]) <= set(x[:12]) and set(r.rows["value"].iloc[40:]) <= set(x[12:])
    # the draws themselves are not sorted: order within an object is the draw order, not the value order
    v = list(r.rows["value"].iloc[:40])
    assert v != sorted(v)


def test_worst_case_release_figure_uses_the_declared_composition_delta():
    # small per-candidate epsilon, many allowed candidates: the worst case composes advanced with delta' = 0.01
    r = synthesize(*TINY, m=1, k=4, t=3, gamma=1.0001, epsilon0=0.05, weights="uniform", max_attempts=1000,
                   composition_delta=0.01, seed=21)
    s = r.summary
    e = 0.05 + math.log1p(1.0001 / 3)
    d = 4 * 0.25 * math.exp(-0.05 * 1)
    assert r.report["epsilon"].iloc[0] == pytest.approx(e, rel=1e-14)
    eb, db, ea, da, e1, d1, comp = _compose_ref(e, d, 1000, 0.01)
    assert comp == "advanced"
    assert s["epsilon_release_max_attempts"] == pytest.approx(e1, rel=1e-12)
    assert s["delta_release_max_attempts"] == pytest.approx(d1, rel=1e-12)
    _check_composition(r.report, 0.01)


def test_log_cell_prob_takes_python_int_bandwidth_as_float():
    # h = 10**20 (beyond int64): cell/h = 1e-20, thin cell at the seed: log(w) - log(sqrt(2 pi)) to 1e-15
    got = log_cell_prob(np.array([0, 0]), 1.0, 0.0, 10**20)
    assert got.dtype == np.float64
    assert got == pytest.approx([math.log(1e-20) - 0.5 * math.log(2 * math.pi)] * 2, rel=1e-15)
