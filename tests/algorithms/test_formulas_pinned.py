"""Issue 13: each central formula pinned by an independent plain-Python/numpy computation on a small example.

Every expected value here is computed by a loop written from the paper's equation, never by calling the helper
under test. Each test was checked to fail when its formula is replaced by the wrong version named in the issue
(see the note on issue 13 for the mutations tried).
"""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import crowddb
from crowddb.anonymize import anonymize
from crowddb.anonymize.fka import Grid, adaptive_partition
from crowddb.synth.kde import gram, make_batches
from crowddb.synth.sampler import release_batch
from crowddb.synth.weights import global_weights
from crowddb.truth import encode_answers, get_method
from crowddb.truth.ldp import laplace_perturbation, mf_perturbation
from crowddb.truth.noise import ExperimentSampler

# ------------------------------------------------------------------------------------------------------------------
# PrisCrowd Eq. (2): global weights


def _eq2_plain(claims: list[tuple[int, int, float]], h: dict[int, float], n_src: int, g: list[float]) -> list[float]:
    """One step of Eq. (2), by loops: g_s = -log(sum_i d_is / sum_s' sum_i d_is'), d_is = ||Phi(x_is) - f^g_i||^2.

    f^g_i = sum_t g_t Phi(x_it) / sum_t g_t in the RKHS of kappa(x, y) = exp(-(x - y)^2 / 2h^2) (kappa(x, x) = 1), so
    ||Phi(x) - f||^2 = kappa(x, x) - 2 sum_t w_t kappa(x, x_t) + sum_t sum_u w_t w_u kappa(x_t, x_u)."""
    by_obj: dict[int, list[tuple[int, float]]] = {}
    for o, s, x in claims:
        by_obj.setdefault(o, []).append((s, x))
    loss = [0.0] * n_src
    for o, cl in by_obj.items():
        def kap(a: float, b: float, hh: float = h[o]) -> float:
            return math.exp(-((a - b) ** 2) / (2.0 * hh**2))
        tot = sum(g[s] for s, _ in cl)
        w = [g[s] / tot for s, _ in cl]
        ff = sum(w[a] * w[b] * kap(cl[a][1], cl[b][1]) for a in range(len(cl)) for b in range(len(cl)))
        for s, x in cl:
            loss[s] += 1.0 - 2.0 * sum(w[t] * kap(x, cl[t][1]) for t in range(len(cl))) + ff
    total = sum(loss)
    return [-math.log(v / total) for v in loss]


EQ2_CLAIMS = [  # (object, source, value): 3 objects, 4 sources, source 3 far off, source 2 sometimes
    (0, 0, 10.0), (0, 1, 10.4), (0, 2, 9.1), (0, 3, 14.0),
    (1, 0, 50.0), (1, 1, 49.5), (1, 2, 50.2), (1, 3, 47.0),
    (2, 0, 7.0), (2, 1, 7.3), (2, 3, 9.5),  # source 2 did not claim object 2
]
EQ2_H = {0: 1.5, 1: 2.0, 2: 1.0}


def _eq2_setup():
    obj = np.array([c[0] for c in EQ2_CLAIMS])
    src = np.array([c[1] for c in EQ2_CLAIMS])
    x = np.array([c[2] for c in EQ2_CLAIMS])
    batches = make_batches(obj, src, x)
    grams = [gram(b.X, b.mask, np.array([EQ2_H[int(o)] for o in b.objs])) for b in batches]
    return batches, grams


def test_eq2_global_weights_match_a_plain_loop() -> None:
    batches, grams = _eq2_setup()
    g = [1.0] * 4
    steps = []
    for _ in range(200):
        g = _eq2_plain(EQ2_CLAIMS, EQ2_H, 4, g)
        steps.append(g)
    # one and two iterations from g = 1 exactly; the fixed point to the stopping tolerance
    assert np.allclose(global_weights(batches, grams, 4, max_iter=1), steps[0], rtol=1e-12, atol=0)
    assert np.allclose(global_weights(batches, grams, 4, max_iter=2), steps[1], rtol=1e-12, atol=0)
    assert np.allclose(global_weights(batches, grams, 4), steps[-1], rtol=1e-5, atol=0)
    assert np.allclose(steps[-1], steps[-2], rtol=1e-12)  # the plain loop did converge
    assert np.argmin(steps[-1]) == 3  # the far source is the least trusted


# ------------------------------------------------------------------------------------------------------------------
# PrisCrowd Algorithm 1, step 3: seed s drawn with probability c_s


def test_algorithm1_step3_draws_seeds_with_probability_c() -> None:
    # two objects of 3 and 4 claims, 100 apart; a bandwidth far below the grid cell (1.0) so that every candidate
    # rounds back onto its seed: the released values are the drawn seeds
    X = np.array([[0.0, 100.0, 200.0, 0.0], [0.0, 100.0, 200.0, 300.0]])
    mask = np.array([[True, True, True, False], [True, True, True, True]])
    batches = make_batches(np.repeat([0, 1], [3, 4]), np.r_[0:3, 0:4], X[mask])
    assert len(batches) == 1
    b = batches[0]
    c_obj = {0: np.array([0.6, 0.3, 0.1]), 1: np.array([0.05, 0.15, 0.3, 0.5])}
    c = np.zeros(b.X.shape)
    for r, o in enumerate(b.objs):
        c[r, : len(c_obj[int(o)])] = c_obj[int(o)]
    m = 6000
    rel = release_batch(b, c, np.full(len(b.objs), 1e-3), 1.0, m, 5, 2.0, 1.0, m, np.random.default_rng(2024),
                        test=False)
    assert (rel.accepted == m).all() and len(b.objs) == 2
    for r, o in enumerate(b.objs):
        vals = rel.value[rel.row == r]
        seeds = b.X[r, b.mask[r]]
        assert np.isin(vals, seeds).all()
        observed = np.array([(vals == s).sum() for s in seeds])
        expected = m * c_obj[int(o)]
        chi2 = float(((observed - expected) ** 2 / expected).sum())
        # chi-square goodness of fit, len(seeds)-1 dof: p > 0.001 (a uniform draw gives chi2 in the thousands)
        assert stats.chi2.sf(chi2, len(seeds) - 1) > 1e-3, (observed, expected, chi2)


# ------------------------------------------------------------------------------------------------------------------
# kanon-crowd-db Algorithm 2, phase 1 (Eq. 9-13): feedback-guided cuts


def _acc_plain(truth, feedback, volume, tuples, prior, lo, hi):
    """Eq. 11 with the Cov term constant: Acc(S) = sum_r P_S(t -> r) P_S(theta(t) -> r), by loops over cells.

    P_S(t -> r): the raw samples' ground-truth answers in S. P_S(theta(t) -> r): Eq. 12/13, the cells' feedback
    distributions mixed by each cell's share of the box volume (a cell without feedback uses the overall prior).
    Also returns the share of real rows in S (the weight of S in the expected accuracy of the release)."""
    R = len(prior)
    cells = list(itertools.product(*[range(a, b + 1) for a, b in zip(lo, hi)]))
    t = [sum(truth[c][r] for c in cells) for r in range(R)]
    nt = sum(t)
    p_true = [v / nt for v in t] if nt else list(prior)
    vol = sum(volume[c] for c in cells)
    p_theta = [0.0] * R
    for c in cells:
        nf = sum(feedback[c])
        for r in range(R):
            p_theta[r] += (feedback[c][r] / nf if nf else prior[r]) * volume[c] / vol
    share = sum(tuples[c] for c in cells) / sum(tuples.values())
    return sum(p_true[r] * p_theta[r] for r in range(R)), share


def _phase1_plain(shape, truth, feedback, volume, tuples, prior, k, delta="literal"):
    """Algorithm 2 lines 1-6 by loops: split the worst partition at the cut of largest delta among the cuts leaving
    >= k real rows on both sides; stop when none is allowable. delta: Eq. 10 as printed, Acc(S1) + Acc(S2) - Acc(S)
    (the default), or 'weighted' (ours), each Acc weighted by its share of the real rows."""
    rows = lambda lo, hi: sum(tuples[c] for c in itertools.product(*[range(a, b + 1) for a, b in zip(lo, hi)]))
    acc = lambda lo, hi: _acc_plain(truth, feedback, volume, tuples, prior, lo, hi)
    open_, done, first = [(tuple(0 for _ in shape), tuple(s - 1 for s in shape))], [], None
    while open_:
        worst = min(range(len(open_)), key=lambda i: acc(*open_[i])[0])
        lo, hi = open_.pop(worst)
        a, w = acc(lo, hi)
        best, best_delta = None, -math.inf
        for j in range(len(shape)):
            for s in range(lo[j], hi[j]):
                h1 = tuple(s if q == j else hi[q] for q in range(len(shape)))
                l2 = tuple(s + 1 if q == j else lo[q] for q in range(len(shape)))
                if rows(lo, h1) < k or rows(l2, hi) < k:
                    continue
                (a1, w1), (a2, w2) = acc(lo, h1), acc(l2, hi)
                d = w1 * a1 + w2 * a2 - w * a if delta == "weighted" else a1 + a2 - a
                if d > best_delta:
                    best, best_delta = ((lo, h1), (l2, hi)), d
        if best is None:
            done.append((lo, hi))
        else:
            first = first or best
            open_.extend(best)
    return sorted(done), first


def test_fka_phase1_cut_follows_the_feedback_not_the_median() -> None:
    # 1-D histogram of 6 cells; real rows are symmetric (Mondrian's median cut is between cells 2 and 3), but the
    # crowd's answers change between cells 0 and 1 and between cells 4 and 5: the feedback must move the first cut
    tuples_l = [12, 8, 10, 10, 8, 12]
    truth_l = [[6, 0, 0], [0, 5, 1], [0, 4, 1], [1, 4, 0], [0, 5, 0], [0, 0, 6]]
    fb_l = [[5, 1, 0], [1, 4, 1], [0, 4, 2], [1, 4, 1], [0, 5, 1], [0, 1, 5]]
    vol_l = [3, 2, 2, 2, 2, 3]
    k = 12
    shape = (6,)
    g = Grid(feedback=np.array(fb_l), truth=np.array(truth_l), tuples=np.array(tuples_l),
             volume=np.array(vol_l, float), sensitive=None,
             prior=np.array(fb_l).sum(axis=0) / np.array(fb_l).sum())
    as_cells = lambda v: {(i,): v[i] for i in range(6)}
    want, first = _phase1_plain(shape, as_cells(truth_l), as_cells(fb_l), as_cells(vol_l), as_cells(tuples_l),
                                list(g.prior), k)
    got = sorted((tuple(int(v) for v in lo), tuple(int(v) for v in hi)) for lo, hi in adaptive_partition(g, k, None))
    assert got == want
    assert first == (((0,), (0,)), ((1,), (5,)))  # the first cut isolates cell 0 ...
    assert ((0,), (2,)) not in got  # ... not the median cut Mondrian would take (30 | 30 rows)
    assert len(got) > 1


@pytest.mark.parametrize("delta", ["literal", "weighted"])
def test_fka_phase1_two_dimensions_match_plain_loop(delta) -> None:
    rng = np.random.default_rng(5)
    shape = (3, 4)
    R = 3
    truth = rng.integers(0, 6, shape + (R,))
    truth[0, :, 0] += 8  # answer 0 dominates the first row of cells, answer 2 the last column
    truth[:, 3, 2] += 8
    fb = truth + rng.integers(0, 3, shape + (R,))
    fb[1, 1] = 0  # a cell without feedback: the prior stands in
    tuples = rng.integers(3, 12, shape)
    vol = rng.integers(1, 5, shape).astype(float)
    g = Grid(feedback=fb, truth=truth, tuples=tuples, volume=vol, sensitive=None, prior=fb.sum(axis=(0, 1)) / fb.sum())
    cells = list(itertools.product(range(3), range(4)))
    d = lambda a: {c: a[c] for c in cells}
    k = 15
    want, _ = _phase1_plain(shape, d(truth), d(fb), d(vol), d(tuples), list(g.prior), k, delta)
    got = sorted((tuple(int(v) for v in lo), tuple(int(v) for v in hi))
                 for lo, hi in adaptive_partition(g, k, None, delta))
    assert got == want and len(got) > 2
    if delta == "literal":  # the default is Eq. 10 as printed
        assert sorted((tuple(int(v) for v in lo), tuple(int(v) for v in hi))
                      for lo, hi in adaptive_partition(g, k, None)) == want


def test_fka_phase1_literal_and_weighted_delta_differ() -> None:
    # the grid above: Eq. 10 as printed and ours (row-share weighted) choose different partitions, so the pins above
    # tell them apart
    rng = np.random.default_rng(5)
    shape, R = (3, 4), 3
    truth = rng.integers(0, 6, shape + (R,))
    truth[0, :, 0] += 8
    truth[:, 3, 2] += 8
    fb = truth + rng.integers(0, 3, shape + (R,))
    fb[1, 1] = 0
    tuples = rng.integers(3, 12, shape)
    vol = rng.integers(1, 5, shape).astype(float)
    g = Grid(feedback=fb, truth=truth, tuples=tuples, volume=vol, sensitive=None, prior=fb.sum(axis=(0, 1)) / fb.sum())
    boxes = lambda parts: sorted((tuple(int(v) for v in lo), tuple(int(v) for v in hi)) for lo, hi in parts)
    assert boxes(adaptive_partition(g, 15, None, "literal")) != boxes(adaptive_partition(g, 15, None, "weighted"))


def _fka_table(n: int = 800, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 70, n)
    return pd.DataFrame({"age": age, "hours": rng.integers(10, 60, n)})


def _fka_oracle(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The job depends on age only, changing at 25: the median age cut (about 44) is not where answers change."""
    mid = (lo + hi) / 2
    return np.where(mid[:, 0] < 25, 0, 1).astype(np.int64)


def test_fka_end_to_end_differs_from_mondrian() -> None:
    frame = _fka_table()
    k = 40
    fka = anonymize(frame, ["age", "hours"], k, method="fka", ask=_fka_oracle, seed=3)
    mon = anonymize(frame, ["age", "hours"], k)
    assert fka.metrics["n_partitions"] > 1  # phase 1 cut the space before Mondrian ran
    boxes = lambda rel: {(tuple(a), tuple(b)) for a, b in zip(rel.lo.tolist(), rel.hi.tolist())}
    assert boxes(fka) != boxes(mon)
    # the feedback puts a class boundary at age 25: no FKA class mixes ages below and above it
    truth = (frame["age"].to_numpy() >= 25).astype(int)
    mixed = pd.Series(truth).groupby(fka.groups).nunique()
    mon_mixed = pd.Series(truth).groupby(mon.groups).nunique()
    assert (mixed > 1).sum() < (mon_mixed > 1).sum()


# ------------------------------------------------------------------------------------------------------------------
# CRH (Li et al., SIGMOD 2014): Eq. (5) weights, Eq. (14) normalized squared loss, Eq. (16) weighted mean

CRH_CLAIMS = {  # object -> values of sources A, B, C (every source claims every object)
    "o1": (10.0, 10.5, 13.0),
    "o2": (20.0, 19.0, 26.0),
    "o3": (5.0, 5.5, 3.0),
    "o4": (7.0, 8.0, 9.5),
}
SOURCES = ("A", "B", "C")


def _frame(claims: dict) -> pd.DataFrame:
    return pd.DataFrame([(o, s, v) for o, vals in claims.items() for s, v in zip(SOURCES, vals)],
                        columns=["task", "worker", "value"])


def _crh_plain(claims: dict, iters: int) -> tuple[dict, dict]:
    """CRH by loops: truths start at the median; w_k = -log(sum_i d_ik / sum_k' sum_i d_ik') (Eq. 5) with
    d_ik = (v_ik - v*_i)^2 / std_i (Eq. 14, std of the claims on object i); v*_i = sum_k w_k v_ik / sum_k w_k."""
    truth = {o: statistics.median(v) for o, v in claims.items()}
    std = {o: statistics.pstdev(v) for o, v in claims.items()}
    w = {}
    for _ in range(iters):
        loss = {s: sum((claims[o][k] - truth[o]) ** 2 / std[o] for o in claims) for k, s in enumerate(SOURCES)}
        total = sum(loss.values())
        w = {s: -math.log(loss[s] / total) for s in SOURCES}
        truth = {o: sum(w[s] * v[k] for k, s in enumerate(SOURCES)) / sum(w.values()) for o, v in claims.items()}
    return truth, w


@pytest.mark.parametrize("iters", [1, 2, None])
def test_crh_weights_are_eq5_on_three_sources(iters) -> None:
    df = _frame(CRH_CLAIMS)
    fit = get_method("crh")(**({"max_iter": iters} if iters else {"tol": 1e-12, "max_iter": 500}))
    fit.fit_frame(df, "task", "worker", "value")
    truth, w = _crh_plain(CRH_CLAIMS, iters or 500)
    rtol = 1e-12 if iters else 1e-8
    assert np.allclose(fit.source_weights_[list(SOURCES)].to_numpy(), [w[s] for s in SOURCES], rtol=rtol, atol=0)
    assert np.allclose(fit.truths_[list(CRH_CLAIMS)].to_numpy(), [truth[o] for o in CRH_CLAIMS], rtol=rtol, atol=0)


# ------------------------------------------------------------------------------------------------------------------
# Truth inference of the LDP paper (Sun et al., Algorithm 1): Eq. (1) weighted mean, Eq. (2) q_i ∝ 1/sigma_i


def _ti_plain(claims: dict, iters: int) -> tuple[dict, dict]:
    """Algorithm 1 by loops: q_i = 1/m; mu_j = sum q_i a_ij / sum q_i (Eq. 1);
    q_i ∝ 1/sigma_i, sigma_i = sqrt(mean over the worker's tasks of (a_ij - mu_j)^2) (Eq. 2)."""
    q = {s: 1.0 / len(SOURCES) for s in SOURCES}
    mu = {o: sum(q[s] * v[k] for k, s in enumerate(SOURCES)) / sum(q.values()) for o, v in claims.items()}
    for _ in range(iters):
        sigma = {s: math.sqrt(sum((claims[o][k] - mu[o]) ** 2 for o in claims) / len(claims))
                 for k, s in enumerate(SOURCES)}
        inv = {s: 1.0 / sigma[s] for s in SOURCES}
        q = {s: inv[s] / sum(inv.values()) for s in SOURCES}
        mu = {o: sum(q[s] * v[k] for k, s in enumerate(SOURCES)) / sum(q.values()) for o, v in claims.items()}
    return mu, q


@pytest.mark.parametrize("iters", [1, 3, None])
def test_sigma_weighted_truth_inference_is_algorithm1(iters) -> None:
    df = _frame(CRH_CLAIMS)
    fit = get_method("ti")(**({"max_iter": iters, "tol": 0.0} if iters else {"tol": 1e-13, "max_iter": 1000}))
    fit.fit_frame(df, "task", "worker", "value")
    mu, q = _ti_plain(CRH_CLAIMS, iters or 1000)
    rtol = 1e-12 if iters else 1e-8
    assert np.allclose(fit.source_weights_[list(SOURCES)].to_numpy(), [q[s] for s in SOURCES], rtol=rtol, atol=0)
    assert np.allclose(fit.truths_[list(CRH_CLAIMS)].to_numpy(), [mu[o] for o in CRH_CLAIMS], rtol=rtol, atol=0)


# ------------------------------------------------------------------------------------------------------------------
# LDP paper: MF noise eta_i ~ Lap(|Gamma|/eps)^d (Eq. 9-10); LP's NULL fill v drawn uniformly from Gamma (Eq. 6)


def test_mf_noise_is_laplace_of_scale_gamma_over_epsilon() -> None:
    m, n, d, eps = 5000, 6, 3, 2.0
    rng = np.random.default_rng(0)
    src = np.repeat(np.arange(m), 4)
    obj = np.concatenate([rng.choice(n, 4, replace=False) for _ in range(m)])
    val = rng.integers(0, 10, src.size).astype(float)
    ans = encode_answers(obj, src, val, "numeric")
    V = rng.standard_normal((d, n))
    V /= np.abs(V).sum(axis=0, keepdims=True)
    ridge = 0.1
    out, rep = mf_perturbation(ans, eps, ExperimentSampler(7), V=V, ridge=ridge, domain=range(10))
    M = out.val.reshape(ans.n_sources, ans.n_objects)
    # invert Eq. (10) per worker: grad L_DP = 0 <=> (sum_j v_j v_j^T + ridge I) u = sum_j a_ij v_j - eta
    Vo = V  # column j of V is the task profile of coded object j
    eta = np.empty((m, d))
    for i in range(m):
        u = np.linalg.lstsq(Vo.T, M[i], rcond=None)[0]  # M(a_i) = u_i V
        sel = ans.src == i
        A = sum(np.outer(Vo[:, j], Vo[:, j]) for j in ans.obj[sel]) + ridge * np.eye(d)
        b = sum(a * Vo[:, j] for j, a in zip(ans.obj[sel], ans.val[sel]))
        eta[i] = b - A @ u
    eta = eta.ravel()
    scale = 10 / eps  # |Gamma| = 10 values
    assert rep["laplace_scale"] == pytest.approx(scale)
    # E|Lap(b)| = b: 15000 draws give a standard error of b/122; a scale of (max - min)/eps = 9/eps is 10% off
    assert abs(np.abs(eta).mean() / scale - 1) < 0.03
    assert stats.kstest(eta, stats.laplace(scale=scale).cdf).pvalue > 1e-3


def test_laplace_fills_nulls_uniformly_from_the_domain() -> None:
    m, n = 400, 50
    rng = np.random.default_rng(1)
    mask = rng.random((m, n)) < 0.1
    s, o = np.nonzero(mask)
    v = np.full(len(s), 2.0)  # every real answer is 2: the NULL cells must not look like them
    ans = encode_answers(o, s, v, "numeric")
    dom = [0, 1, 2, 3, 4, 5, 6, 7]
    out, _ = laplace_perturbation(ans, 1e9, ExperimentSampler(3), domain=dom)  # noise scale 8e-9
    M = out.val.reshape(ans.n_sources, ans.n_objects)
    answered = np.zeros(M.shape, bool)
    answered[ans.src, ans.obj] = True
    assert np.allclose(M[answered], 2.0, atol=1e-6)
    fill = M[~answered]
    assert np.allclose(fill, np.round(fill), atol=1e-6)  # v is a value of Gamma ...
    counts = np.array([(np.round(fill) == x).sum() for x in dom])
    assert counts.sum() == fill.size
    # ... drawn uniformly: chi-square goodness of fit against 1/|Gamma| each
    assert stats.chisquare(counts).pvalue > 1e-3
    # continuous answers with bounds: v ~ U(low, high)
    ans_c = encode_answers(o, s, np.full(len(s), 2.5), "numeric")
    out_c, _ = laplace_perturbation(ans_c, 1e9, ExperimentSampler(4), bounds=(1.0, 5.0))
    Mc = out_c.val.reshape(ans_c.n_sources, ans_c.n_objects)
    ans_c_mask = np.zeros(Mc.shape, bool)
    ans_c_mask[ans_c.src, ans_c.obj] = True
    assert stats.kstest(Mc[~ans_c_mask], stats.uniform(loc=1.0, scale=4.0).cdf).pvalue > 1e-3


# ------------------------------------------------------------------------------------------------------------------
# kanon-crowd-db Eq. 3-4 through explain(): NULL ground truths are not a class

PEOPLE = pd.DataFrame({
    "id": range(12),
    "age": [20, 21, 22, 23, 30, 31, 32, 33, 40, 41, 42, 43],
    "sex": ["F", "M"] * 6,
    "occupation": ["a", "a", "a", "b", "b", "b", None, None, None, "a", "a", "c"],
    "code": [1, 1, 2, 2, None, None, 3, 1, 1, 2, None, 1],
    "nothing": pd.Series([None] * 12, dtype=object),
})


def _bounds(truth_column: str, call: str = "getposition(*, k := 3)") -> tuple[float, float]:
    with crowddb.connect(seed=1) as db:
        db.load_frame("p", PEOPLE, quasi_identifiers=["age", "sex"], ground_truth=truth_column, key="id",
                      core=["age", "sex"])
        plan = db.explain(f"SELECT id, {call} AS job FROM p")
    (op,) = plan.operators
    return op.accuracy_lower, op.accuracy_upper


def _eq3_plain(values) -> float:
    """Eq. 3: sum over answers of P_i^2, P_i the share of answer i among the rows whose ground truth is known."""
    known = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum((known.count(a) / len(known)) ** 2 for a in set(known))


@pytest.mark.parametrize("column", ["occupation", "code"])
def test_explain_accuracy_bounds_exclude_null_ground_truth(column) -> None:
    lower, upper = _bounds(column)
    want = _eq3_plain(PEOPLE[column].tolist())
    assert want == pytest.approx(35 / 81)  # shares 5/9, 3/9, 1/9 over the 9 known rows
    assert lower == pytest.approx(want, abs=1e-12)
    assert upper == 1.0  # Eq. 4


def test_explain_accuracy_bounds_all_null_ground_truth_fall_back_to_the_domain() -> None:
    # no known ground truth: the answer distribution is uniform over the given domain (1/2 with two answers)
    lower, upper = _bounds("nothing", "getposition(*, k := 3, domain := ['x', 'y'])")
    assert lower == pytest.approx(0.5) and upper == 1.0
