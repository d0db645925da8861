"""Pins exact behaviour of crowddb.synth (sampler: Algorithm 1 of PrisCrowd; weights: Eq. 2-5; accounting:
Theorem 2 and composition; basic: the Laplace baseline) and crowddb.crowd (knowledge, simulated crowd, platform)
against independent computations written here: plain Python loops over the documented definitions, closed forms,
and the same numpy Generator draws reproduced directly (mutation-testing pins)."""

from __future__ import annotations

import bisect
import itertools
import math

import numpy as np
import pytest
from scipy.stats import norm

from crowddb.synth import sampler
from crowddb.synth.kde import CELL_BUDGET, Batch

# ---------------------------------------------------------------------------------------------------------------
# synth/sampler.py
# ---------------------------------------------------------------------------------------------------------------


def _cell_bucket(j: float, cell: float, claim: float, h: float, gamma: float) -> int:
    """gamma-bucket of the Gaussian mass N(claim, h^2) puts on cell j, straight from scipy (2**62 for mass 0)."""
    lo, hi = ((j - 0.5) * cell - claim) / h, ((j + 0.5) * cell - claim) / h
    p = norm.sf(lo) - norm.sf(hi) if lo > 0 else norm.cdf(hi) - norm.cdf(lo)
    if p <= 0:
        return 2**62
    return max(0, math.floor(-math.log(p) / math.log(gamma)))


def _ref_release(rows, c, h, cell, m, k, gamma, eps0, max_attempts, seed, test=True, decimals=1):
    """Algorithm 1 as a plain loop: rounds sized as documented, draws reproduced with numpy's Generator."""
    rng = np.random.default_rng(seed)
    B = len(rows)
    cums = [list(itertools.accumulate(cb))[:-1] + [1.0] for cb in c]
    tried, acc = [0] * B, [0] * B
    out = []  # (row, round, col, value, bucket, k_tilde, k_prime)
    rnd = 0
    while True:
        active = [b for b in range(B) if acc[b] < m and tried[b] < max_attempts]
        if not active:
            break
        n = max(len(r) for r in rows)
        R = max(math.ceil(1.25 * (m - acc[b]) / ((acc[b] + 1.0) / (tried[b] + 2.0))) + 4 for b in active)
        R = min(R, max(max_attempts - tried[b] for b in active))
        R = max(1, min(R, CELL_BUDGET // n))
        active = active[: max(1, CELL_BUDGET // (R * n))]
        A = len(active)
        u = rng.random((A, R))
        z = rng.standard_normal((A, R))
        lap = rng.laplace(0.0, 1.0 / eps0, (A, R)) if test else None
        for ai, b in enumerate(active):
            X, cb = rows[b], c[b]
            for r in range(R):
                if acc[b] >= m or tried[b] >= max_attempts:
                    break
                s = min(bisect.bisect_left(cums[b], u[ai, r]), len(X) - 1)  # claims whose cumulative c < u
                j = round(float(X[s] + h[b] * z[ai, r]) / cell)
                tried[b] += 1
                if test:
                    bk = [_cell_bucket(j, cell, xt, h[b], gamma) for xt in X]
                    a, kp, kt = bk[s], sum(v == bk[s] for v in bk), k + lap[ai, r]
                    if not kp >= kt:
                        continue
                else:
                    a, kp, kt = 0, 0, -np.inf
                acc[b] += 1
                out.append((b, rnd, r, round(j * cell, decimals), a, kt, kp))
        rnd += 1
    out.sort(key=lambda t: (t[0], t[1], t[2]))
    return out, tried, acc


def _batch(rows):
    n = max(len(r) for r in rows)
    X = np.zeros((len(rows), n))
    mask = np.zeros((len(rows), n), bool)
    for i, r in enumerate(rows):
        X[i, : len(r)] = r
        mask[i, : len(r)] = True
    return Batch(objs=np.arange(len(rows)), X=X, mask=mask, src=np.zeros((len(rows), n), int),
                 pos=np.where(mask, 0, -1))


def _weights(rows, ws):
    n = max(len(r) for r in rows)
    c = np.zeros((len(rows), n))
    for i, w in enumerate(ws):
        c[i, : len(w)] = w
    return c


def _check_release(rows, ws, h, cell, m, k, gamma, eps0, max_attempts, seed, test=True, decimals=1):
    args = (_batch(rows), _weights(rows, ws), np.array(h, float), cell, m, k, gamma, eps0, max_attempts,
            np.random.default_rng(seed))
    got = sampler.release_batch(*args) if test else sampler.release_batch(*args, test=False)  # test=True: default
    want, tried, acc = _ref_release(rows, ws, h, cell, m, k, gamma, eps0, max_attempts, seed, test, decimals)
    assert got.tried.tolist() == tried and got.accepted.tolist() == acc
    assert got.row.tolist() == [t[0] for t in want]
    assert got.value.tolist() == [t[3] for t in want]
    assert got.bucket.tolist() == [t[4] for t in want]
    assert got.k_tilde.tolist() == [t[5] for t in want]
    assert got.k_prime.tolist() == [t[6] for t in want]
    assert got.row.dtype.kind == "i" and got.bucket.dtype.kind == "i" and got.k_prime.dtype.kind == "i"
    assert got.tried.dtype == np.int64 and got.accepted.dtype == np.int64 and got.k_tilde.dtype == np.float64
    return got


def test_release_batch_single_object_matches_plain_loop():
    rows = [[10.0, 10.4, 11.0, 12.5, 30.0]]
    got = _check_release(rows, [[0.1, 0.3, 0.2, 0.25, 0.15]], [0.8], 0.1, 6, 3, 4.0, 1.0, 400, 5)
    assert got.accepted.tolist() == [6]


def test_release_batch_two_objects_and_thin_cells_match_plain_loop():
    rows = [[10.0, 10.5, 11.0, 30.0], [1000.0, 1200.0, 900.0]]
    ws = [[0.4, 0.3, 0.2, 0.1], [0.5, 0.25, 0.25]]
    _check_release(rows, ws, [0.7, 5000.0], 1.0, 5, 2, 4.0, 2.0, 300, 1, decimals=0)


def test_release_batch_hits_max_attempts_and_counts_them():
    # scattered claims and k = 4: few candidates pass; max_attempts stops the object
    rows = [[0.0, 3.0, 6.0, 9.0, 12.0], [0.0, 0.1, 0.2, 0.3, 0.4]]
    ws = [[0.2] * 5, [0.2] * 5]
    got = _check_release(rows, ws, [0.5, 0.5], 0.1, 8, 4, 2.0, 0.5, 23, 7)
    assert got.tried.tolist()[0] == 23


def test_release_batch_without_test_takes_the_first_m_candidates():
    rows = [[1.0, 2.0, 3.0], [5.0, 5.0]]
    got = _check_release(rows, [[0.2, 0.5, 0.3], [0.5, 0.5]], [0.3, 0.2], 0.1, 4, 3, 4.0, 1.0, 50, 9, test=False)
    assert got.tried.tolist() == [4, 4] and np.isneginf(got.k_tilde).all()


def test_release_batch_cell_budget_splits_rounds():
    # 2000 claims per object: a round holds at most CELL_BUDGET // 2000 candidates of one object at a time
    rng = np.random.default_rng(0)
    rows = [list(np.round(rng.normal(50, 5, 2000), 1)), list(np.round(rng.normal(10, 2, 1999), 1))]
    ws = [list(np.full(2000, 1 / 2000)), list(rng.dirichlet(np.ones(1999)))]
    got = _check_release(rows, ws, [1.0, 0.5], 0.1, 420, 3, 4.0, 1.0, 5000, 4, test=False)
    assert got.tried.tolist() == [420, 420]


def test_release_batch_noise_free_threshold_is_inclusive():
    # epsilon0 = 1e300: k~ = k exactly, so a candidate with k' = k passes (k' >= k~)
    rows = [[10.0, 10.4, 11.0, 12.5, 30.0]]
    got = _check_release(rows, [[0.1, 0.3, 0.2, 0.25, 0.15]], [0.8], 0.1, 10, 2, 4.0, 1e300, 400, 5)
    assert (got.k_tilde == 2.0).all() and (got.k_prime == 2).any()


def test_release_batch_last_round_of_one_candidate():
    # round 1 draws 24 candidates (1.25 * 8 / (1/2) + 4); with max_attempts = 25 the next round has R = 1
    rows = [[0.0, 3.0, 6.0, 9.0, 12.0], [0.0, 0.1, 0.2, 0.3, 0.4]]
    got = _check_release(rows, [[0.2] * 5, [0.2] * 5], [0.5, 0.5], 0.1, 8, 4, 2.0, 0.5, 25, 7)
    assert got.tried.tolist()[0] == 25


def test_release_batch_single_candidate_round_can_pass():
    # m = 6: round 1 draws 19; max_attempts = 20 leaves a round of R = 1 whose candidate passes
    rows = [[10.0, 10.4, 11.0, 12.5, 30.0]]
    out, tried, _ = _ref_release(rows, [[0.1, 0.3, 0.2, 0.25, 0.15]], [0.8], 0.1, 6, 4, 4.0, 0.7, 20, 0)
    assert tried == [20] and any(t[1] == 1 for t in out)
    _check_release(rows, [[0.1, 0.3, 0.2, 0.25, 0.15]], [0.8], 0.1, 6, 4, 4.0, 0.7, 20, 0)


def test_release_batch_seed_choice_is_strict():
    # the weights' CDF hits the first uniform exactly: seed s is the number of cumulative weights strictly below u
    u0 = float(np.random.default_rng(3).random())
    got = _check_release([[0.0, 100.0]], [[u0, 1 - u0]], [0.5], 0.1, 1, 1, 4.0, 1.0, 10, 3, test=False)
    assert got.value.tolist()[0] < 50


def test_release_batch_budget_starves_later_objects_and_stops_at_max_attempts():
    # R is capped at CELL_BUDGET // 2000 = 1000 and one object per round: object 0 runs out of attempts (1200)
    # in a round of 1000 candidates where only its first 200 count
    rng = np.random.default_rng(1)
    rows = [list(np.round(rng.normal(50, 5, 2000), 1)), list(np.round(rng.normal(10, 2, 2000), 1))]
    ws = [list(np.full(2000, 1 / 2000))] * 2
    got = _check_release(rows, ws, [1.0, 0.5], 0.1, 1500, 3, 4.0, 1.0, 1200, 2, test=False)
    assert got.tried.tolist() == [1200, 1200] and got.accepted.tolist() == [1200, 1200]


def test_release_batch_nothing_released():
    rows = [[0.0, 100.0, 200.0]]
    got = _check_release(rows, [[1 / 3, 1 / 3, 1 / 3]], [1.0], 0.1, 3, 3, 4.0, 50.0, 12, 0)
    assert got.value.size == 0 and got.tried.tolist() == [12] and got.accepted.tolist() == [0]
    assert got.value.dtype == float and got.k_tilde.dtype == float


def test_buckets_definition_and_extremes():
    g = 4.0
    lp = np.array([0.0, 0.3, -np.inf, math.log(0.2), math.log(0.05), math.log(0.01), -700.0])
    want = [0, 0, 2**62, 1, 2, 3, math.floor(700 / math.log(4))]
    assert sampler.buckets(lp, g).tolist() == want
    assert sampler.buckets(np.array([math.log(0.3)]), 2.0).tolist() == [1]


@pytest.mark.parametrize("cell,dec", [(1.0, 0), (10.0, 0), (0.1, 1), (0.01, 2), (0.001, 3), (1e-6, 6), (0.5, 1)])
def test_decimals(cell, dec):
    assert sampler._decimals(cell) == dec


def test_privacy_buckets_and_k_prime_match_scipy():
    claims = np.array([0.0, 0.5, 1.0, 4.0, 1.1])
    vals = np.array([0.2, 3.0, 1.04])
    b = sampler.privacy_buckets(vals, claims, 0.9, 0.1, 3.0)
    want = [[_cell_bucket(round(v / 0.1), 0.1, c, 0.9, 3.0) for c in claims] for v in vals]
    assert b.tolist() == want and b.dtype == np.int64
    a = np.array([want[0][1], want[1][3], want[2][2]])
    kp = sampler.k_prime(vals, claims, 0.9, 0.1, 3.0, a)
    assert kp.tolist() == [sum(w == ai for w in row) for row, ai in zip(want, a)]


def test_privacy_test_thin_and_wide_cells():
    X = np.array([[10.0, 10.5, 11.0, 30.0], [1000.0, 1200.0, 900.0, 0.0], [5.0, 5.2, 5.1, 0.0]])
    M = np.array([[True] * 4, [True, True, True, False], [True, True, True, False]])
    hh = np.array([[0.7], [5000.0], [1e4]])
    seed = np.array([[0, 1, 3], [2, 0, 1], [0, 1, 2]])
    j = np.array([[10.0, 11.0, 29.0], [950.0, 1190.0, 1000.0], [5.0, 7.0, 100.0]])
    kp, a = sampler._test(j, seed, X, M, hh, 1.0, 4.0)
    for o in range(3):
        for r in range(3):
            bk = [_cell_bucket(j[o, r], 1.0, X[o, s], hh[o, 0], 4.0) for s in range(4) if M[o, s]]
            assert a[o, r] == bk[seed[o, r]] and kp[o, r] == sum(v == bk[seed[o, r]] for v in bk)
    assert kp.dtype == np.int64 and a.dtype == np.int64


# ---------------------------------------------------------------------------------------------------------------
# synth/weights.py
# ---------------------------------------------------------------------------------------------------------------

from crowddb.errors import ArgumentError  # noqa: E402
from crowddb.synth import weights as W  # noqa: E402
from crowddb.synth.kde import gram, make_batches  # noqa: E402


def _K(x, h):
    return [[math.exp(-((a - b) ** 2) / (2 * h * h)) for b in x] for a in x]


def _sqd(K, w):
    """||Phi(x_s) - sum_t w_t Phi(x_t)||^2 per claim, by plain sums."""
    n = len(w)
    wKw = sum(w[s] * w[t] * K[s][t] for s in range(n) for t in range(n))
    return [max(1 - 2 * sum(w[t] * K[s][t] for t in range(n)) + wKw, 0.0) for s in range(n)]


def _norm(v):
    v = [max(a, 0.0) for a in v]
    tot = sum(v)
    return [a / tot for a in v] if tot > 0 else [1 / len(v)] * len(v)


def _ref_global(objects, n_sources, max_iter=50, tol=1e-6, loss="sum"):
    n_claims = [0] * n_sources
    for _, src, _ in objects:
        for s in src:
            n_claims[s] += 1
    g = [1.0] * n_sources
    for _ in range(max_iter):
        ls = [0.0] * n_sources
        for x, src, h in objects:
            d = _sqd(_K(x, h), _norm([g[s] for s in src]))
            for s, dd in zip(src, d):
                ls[s] += dd
        if loss == "mean":
            ls = [v / max(c, 1) for v, c in zip(ls, n_claims)]
        total = sum(ls)
        if total <= 0:
            return [1.0] * n_sources
        new = [-math.log(max(v, 1e-12 * total) / total) for v in ls]
        done = max(abs(a - b) for a, b in zip(new, g)) <= tol * max(max(abs(a) for a in new), 1e-12)
        g = new
        if done:
            break
    return g


_OBJS = [([10.0, 10.3, 9.8, 14.0], [0, 1, 2, 3], 0.6),
         ([5.0, 5.2, 7.5], [0, 1, 3], 0.4),
         ([20.0, 20.5], [6, 1], 0.5),
         ([1.0, 1.1, 0.9, 1.05, 3.0, 1.0], [0, 1, 2, 3, 4, 4], 0.2)]


def _flat(objects):
    obj = np.concatenate([[i] * len(x) for i, (x, _, _) in enumerate(objects)]).astype(int)
    src = np.concatenate([s for _, s, _ in objects]).astype(int)
    x = np.concatenate([x for x, _, _ in objects])
    batches = make_batches(obj, src, x, budget=40)  # several batches: losses add up across them
    hs = {i: h for i, (_, _, h) in enumerate(objects)}
    grams = [gram(b.X, b.mask, np.array([hs[o] for o in b.objs])) for b in batches]
    return batches, grams


@pytest.mark.parametrize("loss", ["sum", "mean"])
@pytest.mark.parametrize("max_iter,tol", [(50, 1e-6), (1, 1e-6), (2, 1e-6), (3, 0.05), (200, 1e-12)])
def test_global_weights_match_plain_eq2_loop(loss, max_iter, tol):
    batches, grams = _flat(_OBJS)
    got = W.global_weights(batches, grams, 7, max_iter=max_iter, tol=tol, loss=loss)
    assert len(batches) >= 2
    want = _ref_global(_OBJS, 7, max_iter, tol, loss)
    assert np.allclose(got, want, rtol=1e-9, atol=1e-12)


def test_global_weights_defaults_and_zero_loss():
    batches, grams = _flat(_OBJS)
    assert np.allclose(W.global_weights(batches, grams, 7), _ref_global(_OBJS, 7), rtol=1e-9)
    # slow to converge: the default max_iter (50) is what stops it
    slow = [([4.89, 0.96], [1, 2], 1.0), ([-5.59, 0.65, 0.27], [3, 0, 3], 1.0), ([0.18, 0.66, -0.2], [1, 3, 3], 1.0)]
    bs, gs = _flat(slow)
    assert np.allclose(W.global_weights(bs, gs, 4), _ref_global(slow, 4, max_iter=50), rtol=1e-9)
    assert not np.allclose(_ref_global(slow, 4, max_iter=50), _ref_global(slow, 4, max_iter=51), rtol=1e-4)
    # total loss below 1: still Eq. (2), not the all-equal shortcut
    tight = [([3.0, 3.1, 3.05], [0, 1, 2], 1.0)]
    bt, gt = _flat(tight)
    want = _ref_global(tight, 3)
    assert want != [1.0, 1.0, 1.0] and np.allclose(W.global_weights(bt, gt, 3), want, rtol=1e-9)
    same = [([3.0, 3.0], [0, 1], 0.5), ([4.0, 4.0, 4.0], [0, 1, 2], 0.5)]
    b2, g2 = _flat(same)
    assert W.global_weights(b2, g2, 3).tolist() == [1.0, 1.0, 1.0]
    # one source with zero loss: floored at 1e-12 of the total, not infinite
    one = [([3.0, 3.0, 9.0], [0, 1, 2], 1.0)]
    b3, g3 = _flat(one)
    assert np.allclose(W.global_weights(b3, g3, 3, max_iter=1), _ref_global(one, 3, max_iter=1), rtol=1e-12)


def test_global_weights_bad_loss_message():
    batches, grams = _flat(_OBJS)
    with pytest.raises(ArgumentError, match=r"^global_loss must be one of \('sum', 'mean'\), got 'avg'$"):
        W.global_weights(batches, grams, 7, loss="avg")


def _phi(r, q1, q2, q3):
    r = max(r, 1e-300)
    if r < q1:
        return 1.0
    if r < q2:
        return q1 / r
    if r < q3:
        return q1 * (q3 - r) / max((q3 - q2) * r, 1e-300)
    return 0.0


def _rho(r, q1, q2, q3):
    top = q1 * (q2 + q3 - q1) / 2
    if r < q1:
        return r * r / 2
    if r < q2:
        return q1 * r - q1 * q1 / 2
    if r < q3:
        return -q1 * (r - q3) ** 2 / (2 * (q3 - q2)) + top
    return top


def test_hampel_phi_and_rho_pieces_exact():
    q = (0.5, 1.0, 2.0)
    r = np.array([0.0, 0.2, 0.5, 0.7, 1.0, 1.4, 1.99, 2.0, 2.5])
    assert np.allclose(W.hampel_phi(r, *q), [_phi(v, *q) for v in r], rtol=1e-14, atol=0)
    assert np.allclose(W.hampel_rho(r, *q), [_rho(v, *q) for v in r], rtol=1e-14, atol=0)
    # rho is continuous at the thresholds and flat at the top
    assert W.hampel_rho(np.array([2.0]), *q)[0] == pytest.approx(0.5 * (1.0 + 2.0 - 0.5) / 2)
    # q2 == q3: no descent piece; rho jumps to the top
    assert np.allclose(W.hampel_rho(np.array([0.3, 0.8, 1.5]), 0.5, 1.0, 1.0), [0.045, 0.275, 0.375])
    assert np.allclose(W.hampel_phi(np.array([0.3, 0.8, 1.5]), 0.5, 1.0, 1.0), [1.0, 0.625, 0.0])
    # r = 0 exactly: no division by zero
    assert W.hampel_phi(np.array([0.0]), 0.0, 0.0, 0.0).tolist() == [0.0]
    assert W.hampel_phi(np.array([1.5]), 1.0, 1.5, 1.5).tolist() == [0.0]


def _ref_kirwls(x, h, phi, rho, max_iter, tol):
    K = _K(x, h)
    n = len(x)
    w = [1 / n] * n
    r = [math.sqrt(v) for v in _sqd(K, w)]
    J = sum(rho(v) for v in r) / n
    for _ in range(max_iter):
        v = [phi(a) for a in r]
        new_w = _norm(v) if sum(v) > 0 else w
        new_r = [math.sqrt(a) for a in _sqd(K, new_w)]
        new_J = sum(rho(a) for a in new_r) / n
        conv = abs(new_J - J) <= tol * max(J, 1e-300)
        w, r, J = new_w, new_r, new_J
        if conv:
            break
    return w, r


_LOCAL = [([10.0, 10.4, 9.7, 10.2, 9.9, 10.1, 30.0], 0.5),
          ([1.0, 1.0, 1.0, 2.0, 5.0], 1.0),
          ([0.0, 0.3, 0.5, 0.9, 1.6, 2.4, 4.0, 7.0], 0.7),
          ([3.0, 3.5], 0.4),
          ([2.0, 2.1, 2.3, 2.2, 8.0, -5.0], 0.3)]


def _local_batch(objs):
    n = max(len(x) for x, _ in objs)
    X = np.zeros((len(objs), n))
    M = np.zeros((len(objs), n), bool)
    for i, (x, _) in enumerate(objs):
        X[i, : len(x)], M[i, : len(x)] = x, True
    return X, M, gram(X, M, np.array([h for _, h in objs]))


@pytest.mark.parametrize("max_iter,tol", [(100, 1e-8), (1, 1e-8), (3, 1e-8), (100, 1e-3)])
def test_kernel_median_residuals_match_plain_loop(max_iter, tol):
    X, M, K = _local_batch(_LOCAL)
    got = W.kernel_median_residuals(K, M, max_iter=max_iter, tol=tol)
    for i, (x, h) in enumerate(_LOCAL):
        _, r = _ref_kirwls(x, h, lambda v: 1 / max(v, 1e-9), lambda v: v, max_iter, tol)
        assert np.allclose(got[i, : len(x)], r, rtol=1e-7, atol=1e-7)
    assert np.allclose(W.kernel_median_residuals(K, M), got if (max_iter, tol) == (100, 1e-8) else
                       W.kernel_median_residuals(K, M, 100, 1e-8), rtol=0, atol=0)


def test_kernel_median_default_max_iter():
    x = [1.13, -1.95, 1.13, -1.46]
    X, M, K = _local_batch([(x, 1.0)])
    _, r100 = _ref_kirwls(x, 1.0, lambda v: 1 / max(v, 1e-9), lambda v: v, 100, 1e-8)
    _, r101 = _ref_kirwls(x, 1.0, lambda v: 1 / max(v, 1e-9), lambda v: v, 101, 1e-8)
    assert not np.allclose(r100, r101, rtol=1e-5)
    assert np.allclose(W.kernel_median_residuals(K, M)[0], r100, rtol=1e-7, atol=1e-7)


def test_global_weights_stopping_rule_uses_largest_weight_below_one():
    # two sources, both weights below 1: the stopping threshold is tol * max|g|, not tol
    objs = [([0.85, -0.41, -0.15, 0.81], [0, 0, 1, 1], 1.0), ([0.86, -0.48, 0.13], [0, 1, 1], 1.0)]
    bs, gs = _flat(objs)
    want = _ref_global(objs, 2, tol=0.1)
    assert max(want) < 1
    assert np.allclose(W.global_weights(bs, gs, 2, tol=0.1), want, rtol=1e-9)
    assert np.allclose(want, [0.4770667754667771, 0.9691670864893396], rtol=1e-9)


def test_hampel_irwls_default_max_iter_and_given_q_shapes():
    x = [-0.11, 0.07, 0.25, 0.3, -0.41, 0.6, 0.28, -0.11]
    X, M, K = _local_batch([(x, 1.0)])
    q1, q2, q3 = _ref_thresholds(x, 1.0)
    q1 = max(q1, 1e-9)
    q2 = max(q2, q1)
    ph, rh = (lambda v: _phi(v, q1, q2, q3)), (lambda v: _rho(v, q1, q2, q3))
    w100, _ = _ref_kirwls(x, 1.0, ph, rh, 100, 1e-8)
    w101, _ = _ref_kirwls(x, 1.0, ph, rh, 101, 1e-8)
    assert not np.allclose(w100, w101, rtol=0, atol=5e-5)
    assert np.allclose(W.hampel_irwls(K, M)[0], w100, rtol=0, atol=1e-6)
    # more objects than claims per object, thresholds given
    objs = [([1.0, 1.3], 0.5), ([2.0, 2.1], 0.5), ([0.0, 4.0], 1.0), ([5.0, 5.5], 0.2), ([7.0, 7.1], 1.0)]
    X, M, K = _local_batch(objs)
    got = W.hampel_irwls(K, M, q=(0.1, 0.3, 1.2))
    for i, (x, h) in enumerate(objs):
        w, _ = _ref_kirwls(x, h, lambda v: _phi(v, 0.1, 0.3, 1.2), lambda v: _rho(v, 0.1, 0.3, 1.2), 100, 1e-8)
        assert np.allclose(got[i], w, rtol=1e-7, atol=1e-9)
    # q3 == q1 (== q2): degenerate thresholds keep uniform weights
    X, M, K = _local_batch(_LOCAL)
    assert np.allclose(W.hampel_irwls(K, M, q=(0.5, 0.5, 0.5)), W._normalize(np.ones(M.shape), M), rtol=1e-14)
    assert np.allclose(W.hampel_irwls(K, M, q=(0.5, 0.2, 0.5)), W._normalize(np.ones(M.shape), M), rtol=1e-14)


def _ref_thresholds(x, h, quantiles=(50.0, 95.0, 100.0), center="median"):
    if center == "median":
        _, r = _ref_kirwls(x, h, lambda v: 1 / max(v, 1e-9), lambda v: v, 100, 1e-8)
    else:
        r = [math.sqrt(v) for v in _sqd(_K(x, h), [1 / len(x)] * len(x))]
    return [float(np.percentile(r, p)) for p in quantiles]


@pytest.mark.parametrize("center", ["median", "kde"])
@pytest.mark.parametrize("quantiles", [(50.0, 95.0, 100.0), (50.0, 75.0, 95.0)])
def test_hampel_thresholds_and_irwls_match_plain_loop(center, quantiles):
    X, M, K = _local_batch(_LOCAL)
    q = W.hampel_thresholds(K, M, quantiles, center)
    assert all(a.shape == (len(_LOCAL), 1) for a in q)
    got = W.hampel_irwls(K, M, quantiles=quantiles, center=center)
    for i, (x, h) in enumerate(_LOCAL):
        q1, q2, q3 = _ref_thresholds(x, h, quantiles, center)
        assert np.allclose([q[0][i, 0], q[1][i, 0], q[2][i, 0]], [q1, q2, q3], rtol=1e-6, atol=1e-7)
        q1 = max(q1, 1e-9)
        q2 = max(q2, q1)
        if q3 > q1:
            w, _ = _ref_kirwls(x, h, lambda v: _phi(v, q1, q2, q3), lambda v: _rho(v, q1, q2, q3), 100, 1e-8)
        else:
            w = [1 / len(x)] * len(x)
        assert np.allclose(got[i, : len(x)], w, rtol=1e-6, atol=1e-7)
        assert (got[i, len(x):] == 0).all()


def test_hampel_irwls_defaults_and_given_q():
    X, M, K = _local_batch(_LOCAL)
    assert np.array_equal(W.hampel_irwls(K, M), W.hampel_irwls(K, M, None, 100, 1e-8, (50.0, 95.0, 100.0), "median"))
    for qq in [(0.3, 0.6, 0.9), (0.0, 0.0, 0.5), (0.5, 0.4, 0.45), (0.2, 0.9, 0.9)]:
        for mi, tol in [(100, 1e-8), (2, 1e-8), (100, 1e-2)]:
            got = W.hampel_irwls(K, M, q=qq, max_iter=mi, tol=tol)
            q1 = max(qq[0], 1e-9)
            q2 = max(qq[1], q1)
            q3 = qq[2]
            for i, (x, h) in enumerate(_LOCAL):
                if q3 > q1:
                    w, _ = _ref_kirwls(x, h, lambda v: _phi(v, q1, q2, q3), lambda v: _rho(v, q1, q2, q3), mi, tol)
                else:
                    w = [1 / len(x)] * len(x)
                assert np.allclose(got[i, : len(x)], w, rtol=1e-6, atol=1e-9), (qq, mi, tol, i)


def test_hampel_center_message():
    X, M, K = _local_batch(_LOCAL)
    with pytest.raises(ArgumentError,
                       match=r"^hampel_center must be one of \('median', 'kde'\), got 'mode'$"):
        W.hampel_thresholds(K, M, center="mode")


def test_combined_and_floor_weights_closed_form():
    local = np.array([[0.5, 0.3, 0.2, 0.0], [0.1, -0.2, 0.9, 0.0]])
    g = np.array([[2.0, 1.0, 0.5, 7.0], [1.0, 3.0, -1.0, 0.0]])
    mask = np.array([[True, True, True, False], [True, True, True, False]])
    c = W.combined_weights(local, g, mask)
    a = [math.sqrt(1.0), math.sqrt(0.3), math.sqrt(0.1)]
    assert np.allclose(c[0], [v / sum(a) for v in a] + [0.0], rtol=1e-14)
    assert np.allclose(c[1], [1.0, 0.0, 0.0, 0.0], rtol=1e-14)
    f = W.floor_weights(c, mask, 0.5)
    top = a[0]
    b = [max(v, 0.5 * top) for v in a]
    assert np.allclose(f[0], [v / sum(b) for v in b] + [0.0], rtol=1e-14)
    assert np.allclose(f[1], [0.5, 0.25, 0.25, 0.0], rtol=1e-14)
    assert W.floor_weights(c, mask, 0.0) is c and W.floor_weights(c, mask, -1.0) is c
    # a masked-out entry larger than every claim does not set the floor
    c2 = np.array([[0.6, 0.4, 0.0, 5.0]])
    m2 = np.array([[True, True, True, False]])
    assert np.allclose(W.floor_weights(c2, m2, 0.5), [[0.6 / 1.3, 0.4 / 1.3, 0.3 / 1.3, 0.0]], rtol=1e-14)
    # no mass: uniform over the mask
    assert np.allclose(W._normalize(np.zeros((1, 4)), m2), [[1 / 3, 1 / 3, 1 / 3, 0.0]], rtol=1e-14)
    assert W._normalize(np.zeros((1, 2)), np.zeros((1, 2), bool)).tolist() == [[0.0, 0.0]]
    assert np.allclose(W._row_mean(np.array([[1.0, 2.0, 9.0], [4.0, 4.0, 4.0]]),
                                   np.array([[True, True, False], [False, False, False]])), [1.5, 0.0])


@pytest.mark.parametrize("kind", ["uniform", "global", "combined"])
@pytest.mark.parametrize("floor", [0.0, 0.3])
def test_object_weights_closed_form(kind, floor):
    batches, grams = _flat(_OBJS)
    out, g = W.object_weights(batches, grams, 7, kind, floor)
    gw = _ref_global(_OBJS, 7) if kind != "uniform" else [1.0] * 7
    assert np.allclose(g, gw, rtol=1e-9)
    for b, K, c in zip(batches, grams, out):
        for row, o in enumerate(b.objs):
            x, src, h = _OBJS[o]
            if kind == "uniform":
                want = [1 / len(x)] * len(x)
            elif kind == "global":
                want = _norm([gw[s] for s in src])
            else:
                xx, mm = np.array([x]), np.ones((1, len(x)), bool)
                l = W.hampel_irwls(gram(xx, mm, np.array([h])), mm)[0]
                want = _norm([math.sqrt(max(a, 0) * gw[s]) for a, s in zip(l, src)])
            if floor > 0:
                want = _norm([max(v, floor * max(want)) for v in want])
            order = np.argsort(b.pos[row][b.mask[row]])
            assert np.allclose(np.asarray(c[row][b.mask[row]])[order], want, rtol=1e-7, atol=1e-12)


def test_object_weights_options_pass_through():
    batches, grams = _flat(_OBJS)
    out, g = W.object_weights(batches, grams, 7, "combined", 0.0, hampel_quantiles=(50.0, 75.0, 95.0),
                              global_loss="mean", hampel_center="kde")
    assert np.allclose(g, _ref_global(_OBJS, 7, loss="mean"), rtol=1e-9)
    differs = []
    for b, K, c in zip(batches, grams, out):
        l = W.hampel_irwls(K, b.mask, quantiles=(50.0, 75.0, 95.0), center="kde")
        assert np.allclose(c, W.combined_weights(l, g[b.src], b.mask), rtol=1e-12)
        l0 = W.hampel_irwls(K, b.mask)
        differs.append(not np.allclose(c, W.combined_weights(l0, g[b.src], b.mask), rtol=1e-6))
    assert any(differs)


# ---------------------------------------------------------------------------------------------------------------
# synth/accounting.py
# ---------------------------------------------------------------------------------------------------------------

from crowddb.synth import accounting as ACC  # noqa: E402


def test_theorem2_closed_form():
    n, cmax, cmin = np.array([10, 20]), np.array([0.2, 0.1]), np.array([0.05, 0.1])
    eps, delta = ACC.theorem2(n, cmax, cmin, 6, 4.0, 0.5, np.array([1, 3]))
    assert eps.tolist() == pytest.approx([0.5 + math.log(1 + 4.0 / 1 * 0.2 / 0.05), 0.5 + math.log(1 + 4.0 / 3 * 1.0)],
                                         rel=1e-15)
    assert delta.tolist() == pytest.approx([10 * 0.2 * math.exp(-0.5 * 5), 20 * 0.1 * math.exp(-0.5 * 3)], rel=1e-15)
    e2, d2 = ACC.theorem2(7, 0.3, 0.1, 4, 2.0, 1.5, 2)
    assert float(e2) == pytest.approx(1.5 + math.log(1 + 2.0 / 2 * 3.0), rel=1e-15)
    assert float(d2) == pytest.approx(7 * 0.3 * math.exp(-1.5 * 2), rel=1e-15)


def _ref_t(ratio, k, gamma, eps0, emax):
    if k < 2:
        return 0
    if emax is None:
        return 1
    for t in range(1, k):
        if eps0 + math.log(1 + gamma / t * ratio) <= emax:
            return t
    return 0


@pytest.mark.parametrize("k", [1, 2, 5, 9])
@pytest.mark.parametrize("emax", [None, 0.4, 1.2, 2.0, 3.5, 100.0])
def test_choose_t_matches_loop(k, emax):
    ratio = np.array([1.0, 2.0, 5.0, 30.0, 1.5])
    got = ACC.choose_t(ratio, k, 4.0, 0.3, emax)
    assert got.tolist() == [_ref_t(r, k, 4.0, 0.3, emax) for r in ratio]
    assert got.shape == ratio.shape and got.dtype.kind == "i"
    two = ACC.choose_t(np.array([[1.0, 3.0], [2.0, 8.0]]), k, 4.0, 0.3, emax)
    assert two.tolist() == [[_ref_t(r, k, 4.0, 0.3, emax) for r in row] for row in [[1.0, 3.0], [2.0, 8.0]]]


def test_choose_t_boundary_is_inclusive():
    emax = 0.3 + math.log1p(4.0 / 2 * 3.0)
    assert ACC.choose_t(np.array([3.0]), 5, 4.0, 0.3, emax).tolist() == [2]


def test_compose_closed_form():
    eps = np.array([0.05, 1.0, 0.01, np.inf, 0.2])
    dl = np.array([1e-5, 1e-3, 0.0, 0.1, 1e-4])
    n = np.array([400, 3, 1000, 5, 0])
    out = ACC.compose(eps, dl, n)
    L = math.log(1 / 1e-6)
    for i in range(4):
        eb, db = n[i] * eps[i], n[i] * dl[i]
        ea = math.sqrt(2 * n[i] * L) * eps[i] + n[i] * eps[i] * math.expm1(eps[i]) if np.isfinite(eps[i]) else np.inf
        da = n[i] * dl[i] + 1e-6
        adv = ea < eb
        assert out["epsilon_basic"][i] == pytest.approx(eb, rel=1e-12)
        assert out["delta_basic"][i] == pytest.approx(db, rel=1e-12)
        assert out["epsilon_advanced"][i] == pytest.approx(ea, rel=1e-12)
        assert out["delta_advanced"][i] == pytest.approx(da, rel=1e-12)
        assert out["epsilon"][i] == pytest.approx(ea if adv else eb, rel=1e-12)
        assert out["delta"][i] == pytest.approx(da if adv else db, rel=1e-12)
        assert out["composition"][i] == ("advanced" if adv else "basic")
    assert [out[k][4] for k in ("epsilon_basic", "delta_basic", "epsilon_advanced", "delta_advanced",
                                "epsilon", "delta")] == [0.0] * 6
    assert out["composition"][4] == "none"
    assert out["composition"].tolist()[:3] == ["advanced", "basic", "advanced"]
    assert ACC.COMPOSITION_DELTA == 1e-6
    o2 = ACC.compose(np.array([0.01]), np.array([0.0]), np.array([1000]), delta_prime=1e-3)
    assert o2["epsilon_advanced"][0] == pytest.approx(math.sqrt(2000 * math.log(1e3)) * 0.01 + 10 * math.expm1(0.01))
    assert o2["delta_advanced"][0] == pytest.approx(1e-3)


def test_compose_tie_is_basic():
    # eps with sqrt(2 n ln(1/d')) eps + n eps (e^eps - 1) == n eps exactly: n = 2 ln(1/d') / (1 - n (e^eps - 1))^2 ...
    # simplest tie: eps = 0 (both 0)
    out = ACC.compose(np.array([0.0]), np.array([0.5]), np.array([4]))
    assert out["composition"].tolist() == ["basic"] and out["delta"].tolist() == [2.0]


# ---------------------------------------------------------------------------------------------------------------
# synth/basic.py
# ---------------------------------------------------------------------------------------------------------------

from crowddb.synth import basic as BASIC  # noqa: E402


def test_laplace_release_default_sensitivity():
    obj = np.array([0, 1, 0, 2, 1, 0])
    x = np.array([1.0, 5.0, 4.0, 7.0, 5.0, 2.5])
    noisy, d = BASIC.laplace_release(obj, x, 4, 0.5, None, 0.1, np.random.default_rng(3))
    lap = np.random.default_rng(3).laplace(0.0, 1.0, 6)
    want_d = [3.0, 0.1, 0.1, 0.1]  # ranges, at least one cell; object 3 has no claims -> -inf - inf -> cell
    assert d.tolist() == want_d
    assert noisy.tolist() == pytest.approx([x[i] + lap[i] * want_d[obj[i]] / 0.5 for i in range(6)], rel=1e-15)


def test_laplace_release_given_sensitivity():
    obj = np.array([0, 1, 1])
    x = np.array([1.0, 2.0, 3.0])
    lap = np.random.default_rng(8).laplace(0.0, 1.0, 3)
    noisy, d = BASIC.laplace_release(obj, x, 2, 2.0, 4, 0.1, np.random.default_rng(8))
    assert d.dtype == np.float64  # an integer domain width is read as a float
    assert d.tolist() == [4.0, 4.0] and noisy.tolist() == pytest.approx((x + lap * 2.0).tolist(), rel=1e-15)
    d.fill(0)  # a writable copy, not a broadcast view
    noisy, d = BASIC.laplace_release(obj, x, 2, 1.0, np.array([1.0, 10.0]), 0.1, np.random.default_rng(8))
    assert d.tolist() == [1.0, 10.0]
    assert noisy.tolist() == pytest.approx([1 + lap[0], 2 + 10 * lap[1], 3 + 10 * lap[2]], rel=1e-15)


# ---------------------------------------------------------------------------------------------------------------
# crowd/knowledge.py
# ---------------------------------------------------------------------------------------------------------------

import pandas as pd  # noqa: E402

from crowddb.crowd import knowledge as KN  # noqa: E402
from crowddb.crowd.knowledge import KnowledgeBase  # noqa: E402


def _kb_frame():
    return pd.DataFrame({"x": [1.0, 2.5, 4.0, 7.5, 11.0, np.nan], "n": [10, 20, 30, 40, 50, 60],
                         "c": ["b", "a", "b", "c", "a", "b"]})


_TRUTH = np.array(["r0", "r1", "r2", "r3", "r4", "r5"], dtype=object)


def test_knowledge_base_statistics():
    kb = KnowledgeBase(_kb_frame(), _TRUTH)
    xs = [1.0, 2.5, 4.0, 7.5, 11.0]
    mu = sum(xs) / 5
    sd = math.sqrt(sum((v - mu) ** 2 for v in xs) / 5)
    assert len(kb) == 6 and kb.columns == ["x", "n", "c"]
    assert kb._numeric == ["x", "n"] and kb._categorical == ["c"]
    assert kb._center == pytest.approx({"x": mu, "n": 35.0}, rel=1e-15)
    assert kb._scale == pytest.approx({"x": sd, "n": math.sqrt(1750 / 6)}, rel=1e-15)
    assert kb._ranges == {"x": (1.0, 11.0), "n": (10.0, 60.0)}
    assert kb._integer == {"x": False, "n": True}
    assert kb._categories["c"].tolist() == ["a", "b", "c"] and kb._codes["c"].tolist() == [1, 0, 1, 2, 0, 1]
    assert kb.labels == {} and kb.truth.dtype == object
    # the tree holds the standardized points, a missing number at 1000, categorical codes times 1e4
    want = [[(v - mu) / sd if np.isfinite(v) else 1000.0, (nn - 35.0) / math.sqrt(1750 / 6), code * 1e4]
            for v, nn, code in zip(_kb_frame()["x"], _kb_frame()["n"], [1, 0, 1, 2, 0, 1])]
    assert np.allclose(kb._tree.data, want, rtol=1e-14, atol=0)
    assert kb._standardized("x", np.array([np.inf, -np.inf, np.nan])).tolist() == [1000.0] * 3


def test_knowledge_base_degenerate_columns():
    frame = pd.DataFrame({"z": [3.0, 3.0], "e": [np.nan, np.inf]})
    kb = KnowledgeBase(frame, ["p", "q"], labels={"z": {}})
    assert kb._scale == {"z": 1.0, "e": 1.0} and kb._center == {"z": 3.0, "e": 0.0}
    assert kb._ranges == {"z": (3.0, 3.0), "e": (0.0, 0.0)}
    assert kb.labels == {"z": {}} and kb.truth.tolist() == ["p", "q"]
    only_cat = KnowledgeBase(pd.DataFrame({"c": ["x", "y"]}), ["p", "q"])
    assert only_cat._tree.data.tolist() == [[0.0], [1e4]]


@pytest.mark.parametrize("text,want", [
    ("*", (1.0, 11.0)), ("", (1.0, 11.0)), ("nan", (1.0, 11.0)), ("None", (1.0, 11.0)), (" * ", (1.0, 11.0)),
    ("[2-5]", (2.0, 5.0)), ("[ -2.5 , 3e1 ]", (-2.5, 30.0)), ("[1~2]", (1.0, 2.0)), ("[-3--1]", (-3.0, -1.0)),
    ("7", (7.0, 7.0)), (" 7.25 ", (7.25, 7.25)), ("abc", (1.0, 11.0)), ("inf", (1.0, 11.0)),
    ("-inf", (1.0, 11.0)), ("[1-2", (1.0, 11.0)), ("x[1-2]", (1.0, 11.0)), ("[1-2]x", (1.0, 11.0)),
    ("[1e999-2]", (1.0, 11.0)), ("[1-1e999]", (1.0, 11.0)), ("[1.5E+1,2e+1]", (15.0, 20.0)),
])
def test_parse_range(text, want):
    kb = KnowledgeBase(_kb_frame(), _TRUTH)
    assert kb._parse_range("x", text) == want


def test_members():
    kb = KnowledgeBase(_kb_frame(), _TRUTH, labels={"c": {"AB": ["a", "b"], "odd": ["c", "zz"]}})
    cats = kb._categories["c"]
    index = {v: i for i, v in enumerate(cats)}
    assert kb._members("c", "*", cats, index).tolist() == [0, 1, 2]
    assert kb._members("c", " * ", cats, index).tolist() == [0, 1, 2]
    assert kb._members("c", "{c, a}", cats, index).tolist() == [2, 0]
    assert kb._members("c", "{ b ,zz}", cats, index).tolist() == [1, -1]
    assert kb._members("c", "AB", cats, index).tolist() == [0, 1]
    assert kb._members("c", "odd", cats, index).tolist() == [2, -1]
    assert kb._members("c", " b ", cats, index).tolist() == [1]
    assert kb._members("c", "q", cats, index).tolist() == [-1]
    assert kb._members("c", "{a}x", cats, index).tolist() == [-1]
    assert kb._members("x", "a", cats, index).tolist() == [0]
    assert kb._members("c", "*", cats, index).dtype == np.int64


def _onehot_d2(kb, qx, qn, qc, r):
    frame = _kb_frame()
    d = 0.0
    for col, q in (("x", qx), ("n", qn)):
        v = frame[col].iloc[r]
        a = (v - kb._center[col]) / kb._scale[col] if np.isfinite(v) else 1000.0
        b = (q - kb._center[col]) / kb._scale[col]
        d += (a - b) ** 2
    code = kb._codes["c"][r]
    d += 0.0 if code == qc else (1.0 if qc >= 0 else 0.5)
    return d


def test_sample_reproduces_draws_and_nearest_records():
    labels = {"c": {"AB": ["a", "b"], "ghost": ["zz"]}}
    kb = KnowledgeBase(_kb_frame(), _TRUTH, labels=labels)
    shown = pd.DataFrame({"x": ["[1-3]", "7.5", "*", "[2-9]", "4", "[0-12]"],
                          "n": ["[10-25]", "40", "*", "[15-35]", "60", "[10-60]"],
                          "c": ["{a,b}", "c", "*", "AB", "ghost", "{zz, c}"]})
    draws = 40
    got = kb.sample(shown, draws, np.random.default_rng(4))
    assert got.shape == (6, draws)
    rng = np.random.default_rng(4)
    bounds = {"x": [(1, 3), (7.5, 7.5), (1, 11), (2, 9), (4, 4), (0, 12)],
              "n": [(10, 25), (40, 40), (10, 60), (15, 35), (60, 60), (10, 60)]}
    lo, hi = (np.array([[b[i] for b in bounds["x"]]]).T for i in (0, 1))
    qx = rng.uniform(lo, hi, size=(6, draws))
    lo, hi = (np.array([[b[i] for b in bounds["n"]]]).T for i in (0, 1))
    qn = np.floor(rng.uniform(lo, hi + 1.0, size=(6, draws))).clip(lo, hi)
    u = rng.random((6, draws))
    members = [[0, 1], [2], [0, 1, 2], [0, 1], [-1], [-1, 2]]
    frame = _kb_frame()
    for i in range(6):
        for d in range(draws):
            qc = members[i][int(u[i, d] * len(members[i]))]
            same = [r for r in range(6) if kb._codes["c"][r] == qc]
            if same:
                dist = []
                for r in same:
                    a = (frame["x"].iloc[r] - kb._center["x"]) / kb._scale["x"] if np.isfinite(frame["x"].iloc[r]) \
                        else 1000.0
                    dist.append((a - (qx[i, d] - kb._center["x"]) / kb._scale["x"]) ** 2
                                + ((frame["n"].iloc[r] - 35.0) - (qn[i, d] - 35.0)) ** 2 / kb._scale["n"] ** 2)
                best = same[int(np.argmin(dist))]
            else:
                best = int(np.argmin([_onehot_d2(kb, qx[i, d], qn[i, d], qc, r) for r in range(6)]))
            assert got[i, d] == _TRUTH[best], (i, d)
    # integer columns stay on integers inside the shown range
    assert set(np.unique(qn[0])) <= set(range(10, 26))


def test_sample_far_queries_rank_by_hamming_then_numbers():
    frame = pd.DataFrame({"v": [0.0, 10.0, 0.2], "c": ["a", "b", "a"], "d": ["u", "v", "v"]})
    kb = KnowledgeBase(frame, ["ra", "rb", "rc"])
    # (a, v) exists only as record 2; (b, u) matches nothing: one mismatch away from records 0 (c=a) and 1 (d=v)
    shown = pd.DataFrame({"v": ["0", "9", "0.1"], "c": ["a", "b", "b"], "d": ["v", "u", "u"]})
    got = kb.sample(shown, 3, np.random.default_rng(0))
    assert got.tolist() == [["rc"] * 3, ["rb"] * 3, ["ra"] * 3]
    assert kb._onehot_tree is not None
    # the one-hot points: standardized v, then one-hot codes / sqrt(2)
    mu, sd = np.mean([0.0, 10.0, 0.2]), np.std([0.0, 10.0, 0.2])
    s = 1 / math.sqrt(2)
    want = [[(0.0 - mu) / sd, s, 0, s, 0], [(10.0 - mu) / sd, 0, s, 0, s], [(0.2 - mu) / sd, s, 0, 0, s]]
    assert np.allclose(kb._onehot_tree.data, want, rtol=1e-12, atol=1e-12)
    known = kb._known_numeric()
    assert np.allclose(known["v"], [0.0, 10.0, 0.2], rtol=1e-12, atol=1e-12)
    # an unknown categorical value: zero one-hot row, nearest by the numbers
    got2 = kb.sample(pd.DataFrame({"v": ["9.5"], "c": ["zz"], "d": ["zz"]}), 2, np.random.default_rng(0))
    assert got2.tolist() == [["rb", "rb"]]


def test_sample_exact_categorical_pick():
    frame = pd.DataFrame({"c": ["a", "b", "c", "d"]})
    kb = KnowledgeBase(frame, ["A", "B", "C", "D"])
    got = kb.sample(pd.DataFrame({"c": ["{d,a,c}", "*", "b"]}), 50, np.random.default_rng(2))
    u = np.random.default_rng(2).random((3, 50))
    want0 = np.array(["D", "A", "C"], dtype=object)[np.floor(u[0] * 3).astype(int)]
    want1 = np.array(["A", "B", "C", "D"], dtype=object)[np.floor(u[1] * 4).astype(int)]
    assert got[0].tolist() == want0.tolist() and got[1].tolist() == want1.tolist() and set(got[2]) == {"B"}


def test_floats_helper_reads_nullable_na():
    s = pd.Series([1, None, 3], dtype="Int64")
    out = KN._floats(s)
    assert out.dtype == np.float64 and out[0] == 1.0 and np.isnan(out[1]) and out[2] == 3.0
    kb = KnowledgeBase(pd.DataFrame({"i": s}), ["a", "b", "c"])
    assert kb._ranges == {"i": (1.0, 3.0)} and kb._integer == {"i": True} and kb._center == {"i": 2.0}


def test_constants():
    assert KN._MISMATCH == 1.0e4 and KN._MISSING == 1.0e3


# ---------------------------------------------------------------------------------------------------------------
# crowd/simulated.py and crowd/platform.py
# ---------------------------------------------------------------------------------------------------------------

from crowddb.crowd import simulated as SIM  # noqa: E402
from crowddb.crowd.platform import Collected, HitBatch, Platform  # noqa: E402
from crowddb.crowd.simulated import SimulatedCrowd  # noqa: E402
from crowddb.errors import PlatformError, UnknownHITError  # noqa: E402


def _cat_kb():
    """One categorical column: an item shown as a plain value is answered from that record (no randomness in
    the answer, though the pick still draws one uniform per (row, slot))."""
    frame = pd.DataFrame({"k": ["p", "q", "r", "s"]})
    return KnowledgeBase(frame, np.array(["A", "B", "C", "Z"], dtype=object))


def _tuple_batch(n_hits, per_hit, domain, items_per_hit=2, keys=("p", "q", "r", "s")):
    hit_ids = [f"H{i + 1:02d}" for i in range(n_hits)]
    hits = pd.DataFrame({"hit_id": hit_ids, "question": "?", "domain": [domain] * n_hits,
                         "assignments": per_hit, "reward": 0.1, "fee_rate": 0.2, "target": [None] * n_hits})
    rows = []
    for i, h in enumerate(hit_ids):
        for it in range(items_per_hit):
            rows.append({"hit_id": h, "item_no": it + 1, "row_no": 1, "k": keys[(i + it) % len(keys)]})
    return HitBatch(hits, pd.DataFrame(rows), ["k"])


def _ref_tuple_answers(batch, qualities, seed, chunk=25):
    """Plain-loop simulation of choose-one-of-M HITs with the same Generator draws."""
    rng = np.random.default_rng(seed)
    ids = [f"W{i + 1:04d}" for i in range(len(qualities))]
    truth_of = {"p": "A", "q": "B", "r": "C", "s": "Z"}
    hit_ids = batch.hits["hit_id"].tolist()
    assignments, answers = [], []
    for start in range(0, len(hit_ids), chunk):
        ch = hit_ids[start:start + chunk]
        hits = batch.hits.set_index("hit_id").loc[ch]
        per = hits["assignments"].tolist()
        width = max(per)
        perm = rng.random((len(ch), len(ids)))
        chosen = [sorted(range(len(ids)), key=lambda w, p=p: p[w])[:width] for p in perm]
        for h, hid in enumerate(ch):
            for s in range(per[h]):
                assignments.append((f"{hid}-A{s + 1}", hid, ids[chosen[h][s]]))
        items = batch.items[batch.items["hit_id"].isin(ch)]
        rng.random((len(items), width))  # the knowledge base's categorical pick
        domain = list(hits["domain"].iloc[0])
        m = len(domain)
        knows = rng.random((len(items), width))
        guess = rng.integers(0, m, size=(len(items), width))
        wrong = rng.integers(0, max(m - 1, 1), size=(len(items), width))
        for i, it in enumerate(items.itertuples()):
            h = ch.index(it.hit_id)
            t = truth_of[it.k]
            code = domain.index(t) if t in domain else -1
            for s in range(per[h]):
                q = qualities[chosen[h][s]]
                if code < 0:
                    a = domain[guess[i, s]]
                elif knows[i, s] < q:
                    a = domain[code]
                elif m > 1:
                    a = domain[wrong[i, s] + 1 if wrong[i, s] >= code else wrong[i, s]]
                else:
                    a = domain[0]
                answers.append((f"{it.hit_id}-A{s + 1}", it.hit_id, it.item_no, ids[chosen[h][s]], a))
    return assignments, answers


def _rows(df, cols):
    return [tuple(r) for r in df[cols].itertuples(index=False)]


@pytest.mark.parametrize("domain", [("A", "B", "C"), ("B", "A"), ("A",), ("Z", "C", "B", "A", "Y")])
def test_tuple_hits_match_plain_loop(domain):
    q = [0.9, 0.1, 0.5, 0.0, 1.0, 0.7]
    batch = _tuple_batch(4, [3, 1, 2, 3], domain)
    crowd = SimulatedCrowd(qualities=q, seed=5)
    crowd.publish(batch, knowledge=_cat_kb())
    got = crowd.collect(batch.hits["hit_id"].tolist())
    want_a, want_ans = _ref_tuple_answers(batch, q, 5)
    assert _rows(got.assignments, ["assignment_id", "hit_id", "worker_id"]) == want_a
    assert list(got.answers.columns) == ["assignment_id", "hit_id", "item_no", "worker_id", "answer"]
    assert sorted(_rows(got.answers, list(got.answers.columns))) == sorted(want_ans)
    assert len(got.answers) == len(want_ans)


def test_tuple_hits_in_chunks_and_progress():
    q = [0.8, 0.3, 0.6]
    batch = _tuple_batch(27, [2] * 27, ("A", "B", "C", "Z"), items_per_hit=1)
    crowd = SimulatedCrowd(qualities=q, seed=11)
    crowd.publish(batch, knowledge=_cat_kb())
    ticks = []
    got = crowd.collect(batch.hits["hit_id"].tolist(), progress=ticks.append)
    assert ticks == [25, 2]
    assert got.assignments.index.tolist() == list(range(54))
    assert got.answers.index.tolist() == list(range(54))
    want_a, want_ans = _ref_tuple_answers(batch, q, 11)
    assert _rows(got.assignments, ["assignment_id", "hit_id", "worker_id"]) == want_a
    assert sorted(_rows(got.answers, list(got.answers.columns))) == sorted(want_ans)
    assert SIM._CHUNK == 25


def test_collect_again_returns_the_same_and_is_idempotent():
    q = [0.5, 0.6, 0.7, 0.8]
    batch = _tuple_batch(3, [2, 2, 2], ("A", "B", "C"))
    crowd = SimulatedCrowd(qualities=q, seed=3)
    kb = _cat_kb()
    crowd.publish(batch, knowledge=kb)
    crowd.publish(batch, knowledge=kb)  # posted again: not duplicated
    assert crowd.known(["H01", "H02", "X"]) == {"H01", "H02"}
    first = crowd.collect(["H01", "H02"])
    assert crowd.known(["H01", "H03", "X"]) == {"H01", "H03"}
    crowd.publish(batch, knowledge=kb)  # collected HITs are not posted again
    ticks = []
    mixed = crowd.collect(["H01", "H03"], progress=ticks.append)
    assert ticks == [1, 1]  # one fresh HIT in a chunk, then the one collected before
    old = first.answers[first.answers["hit_id"] == "H01"].reset_index(drop=True)
    again = mixed.answers[mixed.answers["hit_id"] == "H01"].reset_index(drop=True)
    pd.testing.assert_frame_equal(old, again)
    assert mixed.answers["hit_id"].tolist()[: 4] == ["H03"] * 4  # fresh answers first
    assert mixed.assignments["hit_id"].tolist() == ["H03", "H03", "H01", "H01"]
    assert mixed.assignments.index.tolist() == [0, 1, 2, 3]
    assert mixed.answers.index.tolist() == list(range(len(mixed.answers)))
    only_old = crowd.collect(["H02", "H01"])
    assert sorted(only_old.assignments["hit_id"]) == ["H01", "H01", "H02", "H02"]
    assert list(only_old.assignments.index) == list(range(4))
    assert only_old.answers.index.tolist() == list(range(len(only_old.answers)))
    # collected from two earlier collects, in the order they were collected
    assert only_old.assignments["hit_id"].tolist() == ["H01", "H01", "H02", "H02"]
    whole = pd.concat([first.assignments, mixed.assignments], ignore_index=True)
    assert set(map(tuple, only_old.assignments.values.tolist())) <= set(map(tuple, whole.values.tolist()))
    ticks2 = []
    crowd.collect(["H02"], progress=ticks2.append)
    assert ticks2 == [1]
    assert crowd.collect(["H02"]).answers.equals(first.answers[first.answers["hit_id"] == "H02"].reset_index(drop=True))


def test_collect_nothing_and_unknown_hits():
    crowd = SimulatedCrowd(qualities=[1.0], seed=0)
    empty = crowd.collect([])
    assert list(empty.assignments.columns) == ["assignment_id", "hit_id", "worker_id"]
    assert list(empty.answers.columns) == ["assignment_id", "hit_id", "item_no", "worker_id", "answer"]
    assert len(empty.assignments) == 0 and len(empty.answers) == 0
    with pytest.raises(UnknownHITError, match=r"^HITs never published here: \['a', 'b', 'c', 'd', 'e'\]$"):
        crowd.collect(["a", "b", "c", "d", "e", "f"])
    ticks = []
    crowd.collect([], progress=ticks.append)
    assert ticks == []


def test_constructor_and_workers():
    c = SimulatedCrowd(n_workers=3, seed=7)
    want = np.random.default_rng(7).beta(8.0, 2.0, size=3)
    w = c.workers()
    assert list(w.columns) == ["worker_id", "quality"]
    assert w["worker_id"].tolist() == ["W0001", "W0002", "W0003"] and w["quality"].tolist() == want.tolist()
    c2 = SimulatedCrowd(n_workers=2, quality=(2.0, 5.0), seed=7)
    assert c2.workers()["quality"].tolist() == np.random.default_rng(7).beta(2.0, 5.0, size=2).tolist()
    c3 = SimulatedCrowd(seed=1)
    assert len(c3.workers()) == 100 and c3.workers()["worker_id"].iloc[-1] == "W0100"
    assert c3.workers()["quality"].tolist() == np.random.default_rng(1).beta(8.0, 2.0, size=100).tolist()
    c4 = SimulatedCrowd(qualities=[0, 1, 0.5])
    assert c4.workers()["quality"].tolist() == [0.0, 1.0, 0.5] and c4.workers()["quality"].dtype == float
    assert SimulatedCrowd.name == "simulated" and Platform.name == "platform"
    one = SimulatedCrowd(n_workers=1, seed=0)
    assert one.workers()["worker_id"].tolist() == ["W0001"]


@pytest.mark.parametrize("bad", [[1.5], [-0.1], [], [[0.5, 0.5]], [0.2, 1.0001]])
def test_bad_qualities_message(bad):
    with pytest.raises(ArgumentError,
                       match=r"^worker qualities must be a non-empty list of probabilities in \[0, 1\]$"):
        SimulatedCrowd(qualities=bad)


@pytest.mark.parametrize("n", [0, -3])
def test_no_workers_message(n):
    with pytest.raises(ArgumentError, match=r"^the simulated crowd needs at least one worker$"):
        SimulatedCrowd(n_workers=n)


def test_publish_errors_messages():
    crowd = SimulatedCrowd(qualities=[0.5, 0.5], seed=0)
    batch = _tuple_batch(2, [2, 3], ("A", "B"))
    with pytest.raises(PlatformError, match=r"^the simulated crowd needs a ground-truth column to answer from: "
                                            r"declare one with role 'ground_truth' on the input table$"):
        crowd.publish(batch)
    with pytest.raises(PlatformError,
                       match=r"^a HIT asks for 3 assignments but the simulated crowd has 2 workers$"):
        crowd.publish(batch, knowledge=_cat_kb())
    assert crowd.known(["H01", "H02"]) == set()
    ok = _tuple_batch(1, [2], ("A", "B"))
    crowd.publish(ok, knowledge=_cat_kb())
    assert crowd.known(["H01"]) == {"H01"}


def test_seeded_generator_is_used_as_is():
    g = np.random.default_rng(12)
    c = SimulatedCrowd(n_workers=2, seed=g)
    assert c._rng is g
    g2 = np.random.default_rng(12)
    c2 = SimulatedCrowd(qualities=[0.3], seed=g2)
    assert c2._rng is g2


def test_pick_answer_closed_form():
    rng = np.random.default_rng(6)
    domain = np.array(["x", "y", "z", "w"], dtype=object)
    truth = np.array([["x", "y", "z"], ["w", "nope", "x"], ["z", "z", "y"]], dtype=object)
    quality = np.array([[1.0, 0.0, 0.5], [0.2, 0.9, 0.0], [0.6, 0.4, 1.0]])
    got = SimulatedCrowd._pick_answer(truth, domain, quality, rng)
    r = np.random.default_rng(6)
    knows, guess, wrong = r.random((3, 3)), r.integers(0, 4, size=(3, 3)), r.integers(0, 3, size=(3, 3))
    for i in range(3):
        for s in range(3):
            t = truth[i, s]
            if t not in domain:
                want = domain[guess[i, s]]
            else:
                code = list(domain).index(t)
                want = t if knows[i, s] < quality[i, s] else domain[wrong[i, s] + (wrong[i, s] >= code)]
            assert got[i, s] == want
    # a one-answer domain: wrong answers are that answer
    one = SimulatedCrowd._pick_answer(np.array([["a", "a"]], dtype=object), np.array(["a"], dtype=object),
                                      np.array([[0.0, 0.0]]), np.random.default_rng(0))
    assert one.tolist() == [["a", "a"]]


def _group_batch():
    hits = pd.DataFrame({"hit_id": ["G1", "G2"], "question": "?", "domain": [None, None], "assignments": [3, 2],
                         "reward": 0.1, "fee_rate": 0.2, "target": ["B", "C"]})
    items = pd.DataFrame({
        "hit_id": ["G1"] * 5 + ["G2"] * 4,
        "item_no": [1, 1, 1, 2, 2, 1, 1, 1, 1],
        "row_no": [1, 2, 3, 1, 2, 1, 2, 3, 4],
        "k": ["p", "q", "q", "r", "s", "r", "p", "r", "s"],
    })
    return HitBatch(hits, items, ["k"])


def test_pick_a_row_hits_match_plain_loop():
    q = [0.9, 0.2, 0.6, 1.0, 0.0]
    batch = _group_batch()
    crowd = SimulatedCrowd(qualities=q, seed=21)
    crowd.publish(batch, knowledge=_cat_kb())
    got = crowd.collect(["G1", "G2"])
    rng = np.random.default_rng(21)
    ids = [f"W{i + 1:04d}" for i in range(5)]
    perm = rng.random((2, 5))
    chosen = [sorted(range(5), key=lambda w, p=p: p[w])[:3] for p in perm]
    per = {"G1": 3, "G2": 2}
    hpos = {"G1": 0, "G2": 1}
    items = batch.items
    rng.random((9, 3))
    knows = rng.random((9, 3))
    score = rng.random((9, 3))
    truth = {"p": "A", "q": "B", "r": "C", "s": "Z"}
    target = {"G1": "B", "G2": "C"}
    want = []
    segs = {}
    for i, it in enumerate(items.itertuples()):
        segs.setdefault((it.hit_id, it.item_no), []).append(i)
    for (hid, item_no), rows in segs.items():
        h = hpos[hid]
        for s in range(per[hid]):
            kn = knows[rows[0], s] < q[chosen[h][s]]
            sc = [score[i, s] + (1.0 if kn and truth[items["k"].iloc[i]] == target[hid] else 0.0) for i in rows]
            best = rows[int(np.argmax(sc))]
            want.append((f"{hid}-A{s + 1}", hid, item_no, ids[chosen[h][s]], str(items["row_no"].iloc[best])))
    assert sorted(_rows(got.answers, list(got.answers.columns))) == sorted(want)
    assert len(got.answers) == len(want) == 3 * 2 + 2
    assert _rows(got.assignments, ["assignment_id", "hit_id", "worker_id"]) == [
        (f"{h}-A{s + 1}", h, ids[chosen[hpos[h]][s]]) for h in ("G1", "G2") for s in range(per[h])]


def test_platform_base_defaults():
    class Dummy(Platform):
        def workers(self):
            return pd.DataFrame()

        def publish(self, batch, *, knowledge=None):
            return None

        def collect(self, hit_ids, *, progress=None):
            return Collected(pd.DataFrame(), pd.DataFrame())

    assert Dummy().known(["a", "b"]) == {"a", "b"} and Dummy.name == "platform"
    hb = _tuple_batch(2, [2, 3], ("A",))
    assert hb.n_assignments == 5
    assert HitBatch(hb.hits.iloc[:0], hb.items, ["k"]).n_assignments == 0


# ---------------------------------------------------------------------------------------------------------------
# object-dtype inputs (as pandas hands them out) are read as floats; no RuntimeWarning for infinite epsilon
# ---------------------------------------------------------------------------------------------------------------

import warnings  # noqa: E402


def _obj(*v):
    return np.array(v, dtype=object)


def test_accounting_reads_object_arrays_as_floats():
    eps, delta = ACC.theorem2(_obj(10, 20), _obj(0.2, 0.1), _obj(0.05, 0.1), 6, 4.0, 0.5, _obj(1, 3))
    assert eps.dtype == np.float64 and delta.dtype == np.float64
    assert eps.tolist() == pytest.approx([0.5 + math.log(17.0), 0.5 + math.log(1 + 4.0 / 3)], rel=1e-15)
    assert delta.tolist() == pytest.approx([2 * math.exp(-2.5), 2 * math.exp(-1.5)], rel=1e-15)
    e1, d1 = ACC.theorem2(_obj(10), np.array([0.2]), np.array([0.05]), 6, 4.0, 0.5, 1)
    assert d1.dtype == np.float64
    e2, _ = ACC.theorem2(np.array([10]), _obj(0.2), np.array([0.05]), 6, 4.0, 0.5, 1)
    e3, d3 = ACC.theorem2(np.array([10]), np.array([0.2]), _obj(0.05), 6, 4.0, 0.5, 1)
    _, d4 = ACC.theorem2(np.array([10]), _obj(0.2), np.array([0.05]), 6, 4.0, 0.5, 1)
    assert e2.dtype == e3.dtype == d4.dtype == np.float64 and e2.tolist() == e3.tolist()
    assert ACC.choose_t(_obj(1.0, 30.0), 5, 4.0, 0.3, 2.0).tolist() == [_ref_t(1.0, 5, 4.0, 0.3, 2.0),
                                                                          _ref_t(30.0, 5, 4.0, 0.3, 2.0)]
    out = ACC.compose(_obj(0.05, 1.0), _obj(1e-5, 1e-3), _obj(400, 3))
    for key in ("epsilon", "delta", "epsilon_basic", "delta_basic", "epsilon_advanced", "delta_advanced"):
        assert out[key].dtype == np.float64
    assert out["composition"].tolist() == ["advanced", "basic"]
    for args in [(_obj(0.05), np.array([1e-5]), np.array([400])), (np.array([0.05]), _obj(1e-5), np.array([400])),
                 (np.array([0.05]), np.array([1e-5]), _obj(400))]:
        o = ACC.compose(*args)
        assert o["delta"].dtype == np.float64 and o["epsilon"].dtype == np.float64
        assert o["delta"][0] == pytest.approx(400 * 1e-5 + 1e-6)


def test_choose_t_infinite_target_is_t1():
    assert ACC.choose_t(np.array([2.0, 7.0]), 4, 4.0, 0.3, math.inf).tolist() == [1, 1]


def test_compose_quiet_on_infinite_and_huge_epsilon():
    with warnings.catch_warnings(), np.errstate(all="warn"):
        warnings.simplefilter("error")
        out = ACC.compose(np.array([np.inf, 800.0, np.inf]), np.array([0.1, 0.1, 0.1]), np.array([5, 3, 0]))
    assert out["epsilon"][0] == np.inf and out["epsilon_advanced"][1] == np.inf
    assert out["composition"].tolist() == ["basic", "basic", "none"]


def test_sampler_reads_object_arrays_as_floats():
    claims = np.array([0.0, 0.5, 1.0, 4.0])
    want = sampler.privacy_buckets(np.array([0.2, 3.0]), claims, 1.0, 0.1, 4.0)
    assert sampler.privacy_buckets(_obj(0.2, 3.0), claims, 1.0, 0.1, 4.0).tolist() == want.tolist()
    assert sampler.privacy_buckets(np.array([0.2, 3.0]), _obj(0.0, 0.5, 1.0, 4.0), 1.0, 0.1, 4.0).tolist() == \
        want.tolist()


def test_laplace_release_object_sensitivity():
    _, d = BASIC.laplace_release(np.array([0, 1]), np.array([1.0, 2.0]), 2, 1.0, _obj(2, 3), 0.1,
                                 np.random.default_rng(0))
    assert d.dtype == np.float64 and d.tolist() == [2.0, 3.0]


def test_kirwls_round_without_weight_keeps_the_weights():
    # object 0 (3 claims, padded) gets no weight in round 2: it keeps its round-1 weights; object 1 goes on
    objs = [([0.0, 0.4, 2.0], 1.0), ([0.0, 0.3, 0.5, 3.0], 1.0)]
    X, M, K = _local_batch(objs)
    calls = [0]

    def phi(r, rows):
        calls[0] += 1
        out = 1.0 / np.maximum(r, 1e-9)
        if calls[0] >= 2:
            out[rows == 0, :] = 0.0
        return out

    w, r = W._kirwls(K, M, phi, lambda r, rows: r, 2, 0.0)
    inv = lambda v: 1 / max(v, 1e-9)  # noqa: E731
    w0, _ = _ref_kirwls(objs[0][0], 1.0, inv, lambda v: v, 1, 0.0)
    w1, r1 = _ref_kirwls(objs[1][0], 1.0, inv, lambda v: v, 2, 0.0)
    assert max(w0) - min(w0) > 0.05
    assert np.allclose(w[0, :3], w0, rtol=1e-9) and w[0, 3] == 0
    assert np.allclose(w[1], w1, rtol=1e-9) and np.allclose(r[1], r1, rtol=1e-9)


def test_normalize_and_row_mean_small_rows():
    m = np.array([[True, False, False], [True, True, True]])
    assert W._normalize(np.zeros((2, 3)), m).tolist() == [[1.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3]]
    assert W._normalize(np.array([[0.0, 0.0, 0.0], [1.0, 3.0, 0.0]]), m).tolist() == [[1.0, 0.0, 0.0],
                                                                                       [0.25, 0.75, 0.0]]
    assert W._row_mean(np.array([[4.0, 9.0, 9.0], [1.0, 2.0, 6.0]]), m).tolist() == [4.0, 3.0]


def test_compose_single_candidate_and_empty_objects():
    out = ACC.compose(np.array([0.3, np.inf]), np.array([0.01, 0.2]), np.array([1, 0]))
    assert out["delta_basic"].tolist() == [0.01, 0.0] and out["epsilon_basic"].tolist() == [0.3, 0.0]
    assert out["epsilon_advanced"].tolist()[1] == 0.0 and out["delta_advanced"].tolist()[1] == 0.0
    assert out["composition"].tolist() == ["basic", "none"]
    # a large delta' makes advanced composition win even for one candidate
    o = ACC.compose(np.array([0.01]), np.array([0.0]), np.array([1]), delta_prime=0.9)
    ea = math.sqrt(2 * math.log(1 / 0.9)) * 0.01 + 0.01 * math.expm1(0.01)
    assert o["composition"].tolist() == ["advanced"] and o["epsilon"][0] == pytest.approx(ea, rel=1e-12)
    assert o["delta"][0] == pytest.approx(0.9, rel=1e-12)


@pytest.mark.parametrize("m,max_attempts", [(0, 10), (3, 0)])
def test_release_batch_without_any_round(m, max_attempts):
    got = _check_release([[1.0, 2.0]], [[0.5, 0.5]], [0.3], 0.1, m, 1, 4.0, 1.0, max_attempts, 0)
    assert got.row.size == 0 and got.tried.tolist() == [0] and got.accepted.tolist() == [0]
    assert got.row.dtype == np.int64 and got.value.dtype == np.float64 and got.bucket.dtype == np.int64
    assert got.k_tilde.dtype == np.float64 and got.k_prime.dtype == np.int64


def test_collect_hits_of_two_batches_at_once():
    q = [0.9, 0.4, 0.7]
    a = _tuple_batch(2, [2, 1], ("A", "B", "C"))
    b = _tuple_batch(1, [3], ("Z", "A"))
    b.hits["hit_id"] = ["B01"]
    b.items["hit_id"] = "B01"
    crowd = SimulatedCrowd(qualities=q, seed=4)
    kb = _cat_kb()
    crowd.publish(a, knowledge=kb)
    crowd.publish(b, knowledge=kb)
    got = crowd.collect(["H01", "B01", "H02"])
    assert sorted(got.assignments["hit_id"]) == ["B01", "B01", "B01", "H01", "H01", "H02"]
    assert set(got.answers.loc[got.answers["hit_id"] == "B01", "answer"]) <= {"Z", "A"}
    assert set(got.answers.loc[got.answers["hit_id"] != "B01", "answer"]) <= {"A", "B", "C"}
    assert got.assignments.index.tolist() == list(range(6))


def test_mixed_type_domain_answers_keep_their_types():
    batch = _tuple_batch(1, [3], ("A", 7), items_per_hit=4, keys=("p",))
    crowd = SimulatedCrowd(qualities=[0.0, 0.0, 0.0], seed=0)  # nobody knows: every answer is the wrong one, 7
    crowd.publish(batch, knowledge=_cat_kb())
    got = crowd.collect(["H01"])
    assert got.answers["answer"].tolist() == [7] * 12


def test_release_batch_one_claim_objects_allow_huge_rounds():
    # one claim per object: a round may hold CELL_BUDGET // 1 candidates (1.05 million here, all in one round)
    m = 420_000
    got = sampler.release_batch(_batch([[5.0]]), np.array([[1.0]]), np.array([0.4]), 0.1, m, 1, 4.0, 1.0,
                                2_000_000, np.random.default_rng(6), test=False)
    R = math.ceil(1.25 * m / 0.5) + 4
    rng = np.random.default_rng(6)
    rng.random((1, R))
    z = rng.standard_normal((1, R))[0, :m]
    assert got.tried.tolist() == [m] and got.accepted.tolist() == [m]
    assert np.array_equal(got.value, np.round(np.round((5.0 + 0.4 * z) / 0.1) * 0.1, 1))


def test_publish_keeps_the_first_batch_of_a_pending_hit():
    crowd = SimulatedCrowd(qualities=[0.5, 0.5], seed=1)
    crowd.publish(_tuple_batch(1, [2], ("A", "B")), knowledge=_cat_kb())
    crowd.publish(_tuple_batch(1, [2], ("Y", "X")), knowledge=_cat_kb())  # same HIT id posted again: ignored
    assert set(crowd.collect(["H01"]).answers["answer"]) <= {"A", "B"}


def test_draw_numeric_integer_column_reproduced():
    kb = KnowledgeBase(_kb_frame(), _TRUTH)
    shown = pd.Series(["[10.5-12.5]", "40", "[15-35]"], name="n")
    got = kb._draw_numeric(shown, 3, 50, np.random.default_rng(9))
    lo = np.array([[10.5], [40.0], [15.0]])
    hi = np.array([[12.5], [40.0], [35.0]])
    u = np.random.default_rng(9).uniform(lo, hi + 1.0, size=(3, 50))
    want = np.minimum(np.maximum(np.floor(u), lo), hi)
    assert np.array_equal(got, want)
    assert set(np.unique(got[0])) <= {10.5, 11.0, 12.0, 12.5} and 10.5 in got[0] and 12.5 in got[0]
    shown_x = pd.Series(["[1-3]", "7.5"], name="x")
    gx = kb._draw_numeric(shown_x, 2, 5, np.random.default_rng(2))
    assert np.array_equal(gx, np.random.default_rng(2).uniform(np.array([[1.0], [7.5]]), np.array([[3.0], [7.5]]),
                                                                size=(2, 5)))


def test_standardized_is_quiet_on_overflow():
    kb = KnowledgeBase(pd.DataFrame({"v": [0.0, 0.1, 0.2]}), ["a", "b", "c"])
    with warnings.catch_warnings(), np.errstate(all="warn"):
        warnings.simplefilter("error")
        out = kb._standardized("v", np.array([1.7e308, -1.7e308, np.nan]))
    assert out.tolist() == [1000.0, 1000.0, 1000.0]


def test_knowledge_sample_of_no_rows_is_empty():
    """A published frame with no rows (and a categorical column) draws nothing (it was an IndexError: float offsets)."""
    from crowddb.crowd.knowledge import KnowledgeBase

    kb = KnowledgeBase(pd.DataFrame({"x": [1.0, 2.0], "c": ["a", "b"]}), ["p", "q"])
    empty = pd.DataFrame({"x": pd.Series([], dtype=float), "c": pd.Series([], dtype=object)})
    got = kb.sample(empty, 3, np.random.default_rng(0))
    assert got.shape == (0, 3)


def test_a_null_shown_value_is_drawn_as_unknown():
    """A published NULL (a core column's missing value) is the text 'None' or 'nan', as str() prints it: a number
    drawn from the whole range, a category no record has (code -1); the other rows draw as before."""
    kb = KnowledgeBase(_kb_frame(), _TRUTH)
    shown = pd.DataFrame({"x": ["[2-5]", None, "7"], "n": [None, "[10-20]", "30"], "c": ["{a,b}", None, "c"]},
                         dtype=object)
    rng = np.random.default_rng(0)
    x = kb._draw_numeric(shown["x"], 3, 50, rng)
    assert ((x[0] >= 2) & (x[0] <= 5)).all() and ((x[1] >= 1) & (x[1] <= 11)).all() and (x[2] == 7).all()
    n = kb._draw_numeric(shown["n"], 3, 50, rng)
    assert ((n[0] >= 10) & (n[0] <= 60)).all() and ((n[1] >= 10) & (n[1] <= 20)).all() and (n[2] == 30).all()
    c = kb._draw_categorical(shown["c"], 3, 50, rng)
    assert set(c[0]) == {0, 1} and (c[1] == -1).all() and (c[2] == 2).all()
    assert kb.sample(shown, 4, np.random.default_rng(1)).shape == (3, 4)
