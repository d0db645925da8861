"""Local-DP perturbations: reported guarantees follow the papers' theorems; RR's empirical frequencies match Eq. (8)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from crowddb.errors import ArgumentError, PrivacyError
from crowddb.truth import discover, encode_answers
from crowddb.truth.ldp import (
    gaussian_mixture_delta,
    gaussian_perturbation,
    laplace_perturbation,
    mf_perturbation,
    randomized_response,
    rr_probabilities,
    task_profile_matrix,
    theorem_4_8_epsilon,
    theorem_4_8_noise_level,
)
from crowddb.truth.noise import ExperimentSampler, SecureSampler, make_sampler, opendp_available


def sparse_answers(m: int = 300, n: int = 60, density: float = 0.1, seed: int = 0, k: int = 10):
    rng = np.random.default_rng(seed)
    mask = rng.random((m, n)) < density
    s, o = np.nonzero(mask)
    v = rng.integers(0, k, len(s)).astype(float)
    return encode_answers(o, s, v, "numeric"), (s, o, v)


def test_rr_probabilities_formula() -> None:
    keep, other = rr_probabilities(1.0, 10)
    assert keep == pytest.approx(math.e / (10 + math.e))
    assert other == pytest.approx(1 / (10 + math.e))
    assert keep + 10 * other == pytest.approx(1.0)  # own value + (k-1) other values + NULL


def test_rr_empirical_flip_probabilities() -> None:
    eps, k = 1.0, 10
    ans, _ = sparse_answers(m=400, n=100, density=0.2, k=k)
    out, rep = randomized_response(ans, eps, ExperimentSampler(1), domain=range(k))
    keep, other = rr_probabilities(eps, k)
    assert rep["epsilon"] == eps and rep["delta"] == 0 and rep["guarantee"].startswith("epsilon-cell LDP")
    before = pd.Series(ans.val, index=ans.src * ans.n_objects + ans.obj)
    after = pd.Series(out.val, index=out.src * out.n_objects + out.obj)
    assert after.index.is_unique
    common = before.index.intersection(after.index)
    p_keep = float((after[common] == before[common]).sum()) / len(before)
    p_to_null = 1 - len(common) / len(before)
    n_null = ans.n_objects * ans.n_sources - len(before)
    new = after[~after.index.isin(before.index)]
    p_null_to_value = len(new) / n_null
    se = lambda p, n: 4 * math.sqrt(p * (1 - p) / n)
    assert abs(p_keep - keep) < se(keep, len(before))
    assert abs(p_to_null - other) < se(other, len(before))
    assert abs(p_null_to_value - k * other) < se(k * other, n_null)
    # a NULL that turns into an answer takes each of the k values equally often
    counts = np.bincount(new.to_numpy().astype(int), minlength=k) / len(new)
    assert np.abs(counts - 1 / k).max() < 0.02


def test_rr_on_labels_and_secure_sampler() -> None:
    df = pd.DataFrame({"t": ["a", "a", "b", "b", "c"], "w": [1, 2, 1, 2, 3], "l": ["x", "y", "x", "x", "y"]})
    res = discover(df, "t", "w", "l", method="mv", perturb="rr", epsilon=2.0)  # seed None: production sampler
    assert res.privacy["production_safe"] is True and res.privacy["mechanism"] == "randomized_response"
    assert set(res.objects.truth.dropna()) <= {"x", "y"}


def test_laplace_reports_theorem_1_and_densifies() -> None:
    ans, _ = sparse_answers()
    out, rep = laplace_perturbation(ans, 0.5, ExperimentSampler(0), domain=range(10))
    assert len(out.val) == ans.n_objects * ans.n_sources  # every cell, NULLs included, is sent
    assert rep["scale"] == pytest.approx(10 / 0.5) and rep["theorem"].startswith("Sun et al. Theorem 1")
    noise = out.val.reshape(ans.n_sources, ans.n_objects)[ans.src, ans.obj] - ans.val
    assert np.std(noise) == pytest.approx(math.sqrt(2) * 20, rel=0.1)


def test_mf_task_profile_and_guarantee() -> None:
    V = task_profile_matrix(50, 8, np.random.default_rng(0))
    assert np.allclose(np.abs(V).sum(axis=0), 1.0)
    ans, _ = sparse_answers()
    out, rep = mf_perturbation(ans, 1.0, ExperimentSampler(0), d=8, domain=range(10))
    assert rep["theorem"].startswith("Sun et al. Theorem 4") and rep["d"] == 8
    assert len(out.val) == ans.n_objects * ans.n_sources
    with pytest.raises(PrivacyError, match="1-norm"):
        mf_perturbation(ans, 1.0, ExperimentSampler(0), V=np.full((2, ans.n_objects), 0.9))


def test_mf_without_noise_is_least_squares() -> None:
    # with no noise (huge epsilon) and no ridge, a dense worker's MF release reproduces its projection on rows of V
    rng = np.random.default_rng(0)
    V = task_profile_matrix(30, 5, rng)
    u_true = rng.normal(0, 20, (4, 5))
    A = u_true @ V
    s, o = np.nonzero(np.ones_like(A))
    ans = encode_answers(o, s, A[s, o], "numeric")
    out, _ = mf_perturbation(ans, 1e12, ExperimentSampler(0), V=V, ridge=0.0, bounds=(A.min(), A.max()))
    assert np.allclose(out.val.reshape(4, 30), A, atol=1e-6)


def test_theorem_4_8_formula() -> None:
    eps, delta, lam1, b, eta = 0.5, 0.1, 2.0, 3.0, 0.9
    gamma = b * math.sqrt(2 * math.log(1 / (1 - eta)))
    c = theorem_4_8_noise_level(eps, delta, lam1, b, eta)
    assert c == pytest.approx(gamma**2 / (2 * lam1 * eps * math.log(1 / (1 - delta))))
    assert theorem_4_8_epsilon(c, delta, lam1, b, eta) == pytest.approx(eps)
    # larger noise level -> smaller epsilon
    assert theorem_4_8_epsilon(2 * c, delta, lam1, b, eta) == pytest.approx(eps / 2)


def test_gaussian_perturbation_reports_theorem_4_8() -> None:
    ans, _ = sparse_answers()
    out, rep = gaussian_perturbation(ans, 1.0, 0.2, ExperimentSampler(0), lambda1=1.0, b=2.0, eta=0.9)
    c = theorem_4_8_noise_level(1.0, 0.2, 1.0, 2.0, 0.9)
    assert rep["c"] == pytest.approx(c) and rep["lambda2"] == pytest.approx(1.0 / c)
    assert rep["epsilon"] == 1.0 and rep["delta"] == 0.2 and rep["theorem"] == "Li et al. Theorem 4.8"
    assert len(out.val) == len(ans.val)  # only sent records are perturbed
    # the per-user variances are exponential with mean c / lambda1: check on the noise of each user
    noise = out.val - ans.val
    var = pd.Series(noise).groupby(ans.src).var()
    assert var.mean() == pytest.approx(c, rel=0.35)
    with pytest.raises(PrivacyError, match="below"):
        gaussian_perturbation(ans, 1.0, 0.2, ExperimentSampler(0), c=c / 2)
    # the proof's sensitivity form: P(y >= Delta^2 / (2 eps)) = 1 - delta exactly
    _, rep2 = gaussian_perturbation(ans, 1.0, 0.2, ExperimentSampler(0), sensitivity=3.0)
    assert math.exp(-rep2["lambda2"] * 9.0 / 2.0) == pytest.approx(0.8)
    assert 0 <= rep2["delta_exact_mixture"] <= 1


def test_gaussian_mixture_delta_monotone() -> None:
    d1 = gaussian_mixture_delta(1.0, 1.0, 1.0)
    d2 = gaussian_mixture_delta(1.0, 1.0, 10.0)
    assert 0 < d2 < d1 < 1


@pytest.mark.parametrize("eps", [0, -1, float("nan"), float("inf"), "x"])
def test_bad_epsilon(eps) -> None:
    df = pd.DataFrame({"o": [1, 1, 2], "s": [1, 2, 1], "v": [1.0, 2.0, 3.0]})
    with pytest.raises(PrivacyError):
        discover(df, "o", "s", "v", method="mean", perturb="laplace", epsilon=eps, seed=0)


def test_privacy_argument_errors() -> None:
    df = pd.DataFrame({"o": [1, 1, 2], "s": [1, 2, 1], "v": [1.0, 2.0, 3.0]})
    with pytest.raises(PrivacyError, match="needs epsilon"):
        discover(df, "o", "s", "v", method="mean", perturb="rr", seed=0)
    with pytest.raises(PrivacyError, match="delta"):
        discover(df, "o", "s", "v", method="mean", perturb="gaussian", epsilon=1.0, seed=0)
    with pytest.raises(PrivacyError, match="no perturb"):
        discover(df, "o", "s", "v", method="mean", epsilon=1.0)
    with pytest.raises(ArgumentError, match="unknown perturb"):
        discover(df, "o", "s", "v", method="mean", perturb="magic", epsilon=1.0)
    with pytest.raises(ArgumentError, match="numeric"):
        discover(pd.DataFrame({"o": [1], "s": [1], "v": ["x"]}), "o", "s", "v", perturb="laplace", epsilon=1.0)
    with pytest.raises(ArgumentError, match="discrete"):
        discover(df.assign(v=[0.5, 1.5, 2.25]), "o", "s", "v", method="mean", perturb="rr", epsilon=1.0, seed=0)


def test_seeded_runs_reproducible() -> None:
    _, (s, o, v) = sparse_answers()
    df = pd.DataFrame({"o": o, "s": s, "v": v})
    for p in ("laplace", "rr", "mf"):
        a = discover(df, "o", "s", "v", method="ti", perturb=p, epsilon=1.0, seed=5)
        b = discover(df, "o", "s", "v", method="ti", perturb=p, epsilon=1.0, seed=5)
        pd.testing.assert_frame_equal(a.objects, b.objects)
        assert a.privacy["production_safe"] is False


def test_secure_sampler_paths() -> None:
    x = np.zeros(2000)
    for use in ([True] if opendp_available() else []) + [False]:
        smp = SecureSampler(use_opendp=use)
        y = smp.add_laplace(x, 2.0)
        assert np.std(y) == pytest.approx(2 * math.sqrt(2), rel=0.15)
        g = smp.add_gaussian(x, np.full(2000, 3.0))
        assert np.std(g) == pytest.approx(3.0, rel=0.15)
    u = SecureSampler(use_opendp=False).uniform(10000)
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.02
    assert isinstance(make_sampler(None), SecureSampler) and isinstance(make_sampler(1), ExperimentSampler)


def test_mf_utility_beats_lp_and_rr_on_sparse_synthetic() -> None:
    rng = np.random.default_rng(0)
    m, n = 400, 60
    truth = rng.normal(0, 1, n)
    sig = np.where(np.arange(m) < m // 2, 1.0, 5.0)
    A = np.clip(np.round(truth + rng.normal(0, 1, (m, n)) * sig[:, None]), 0, 9)
    s, o = np.nonzero(rng.random((m, n)) < 0.1)
    df = pd.DataFrame({"o": o, "s": s, "v": A[s, o]})

    def mae(res) -> float:
        return float(np.abs(res.objects.set_index("object").truth.reindex(range(n)).to_numpy() - truth).mean())

    base = mae(discover(df, "o", "s", "v", method="ti"))
    change = {p: mae(discover(df, "o", "s", "v", method="ti", perturb=p, epsilon=1.0, seed=0,
                              perturb_options={"domain": range(10)})) - base for p in ("laplace", "rr", "mf")}
    assert change["mf"] < change["laplace"] and change["mf"] < change["rr"], change


def test_rr_never_densifies_a_sparse_universe() -> None:
    # 5,000 workers x 200,000 tasks = 1e9 cells, 20,000 answers: RR must sample the NULL cells it flips, not visit them
    rng = np.random.default_rng(0)
    o, s = rng.integers(0, 200_000, 20_000), rng.integers(0, 5_000, 20_000)
    ans = encode_answers(o, s, rng.integers(0, 2, 20_000).astype(float), "numeric")
    out, _ = randomized_response(ans, 12.0, ExperimentSampler(0), domain=[0, 1])
    cells = ans.n_objects * ans.n_sources
    other = rr_probabilities(12.0, 2)[1]
    expected = len(ans.val) * (1 - other) + (cells - len(ans.val)) * 2 * other  # kept or flipped + NULLs turned
    assert abs(len(out.val) - expected) < 6 * math.sqrt(expected)


def test_mf_guarantee_does_not_cover_answered_or_not() -> None:
    """Why MF's report narrows Theorem 4 to answered values: for a released profile u, the noise that explains it is
    eta = r - (G + ridge I) u (Eq. 10). Changing an answered value by at most |Gamma| moves eta by at most |Gamma| in
    1-norm (the theorem); answering one more task moves it by |a - v.u| * |v|_1, unbounded in u, so the Laplace
    density ratio exceeds e^epsilon for some outputs."""
    rng = np.random.default_rng(0)
    d, n, eps, gamma, ridge = 4, 6, 1.0, 10.0, 0.1
    V = task_profile_matrix(n, d, rng)
    answered = np.array([0, 1, 2])
    a = np.array([3.0, 7.0, 1.0, 5.0, 0.0, 0.0])

    def eta_for(u: np.ndarray, cells: np.ndarray, vals: np.ndarray) -> np.ndarray:
        G = V[:, cells] @ V[:, cells].T + ridge * np.eye(d)
        return V[:, cells] @ vals[cells] - G @ u

    def log_density_ratio(u: np.ndarray, cells2: np.ndarray, vals2: np.ndarray) -> float:
        e1, e2 = eta_for(u, answered, a), eta_for(u, cells2, vals2)
        return float(eps * (np.abs(e2).sum() - np.abs(e1).sum()) / gamma)  # log p_Lap(e1) - log p_Lap(e2)

    outputs = rng.normal(0, 200, (2000, d))  # released profiles, scale of Lap(|Gamma|/eps) noise through G^-1
    changed = a.copy()
    changed[1] = 7.0 - 9.0  # one answered value changed within the domain width
    value_ratio = max(abs(log_density_ratio(u, answered, changed)) for u in outputs)
    assert value_ratio <= eps + 1e-9  # Theorem 4 holds for answered values
    presence_ratio = max(abs(log_density_ratio(u, np.array([0, 1, 2, 3]), a)) for u in outputs)
    assert presence_ratio > 5 * eps  # answering task 3 or not: the bound fails
    _, rep = mf_perturbation(*sparse_answers()[:1], eps, ExperimentSampler(0), d=d, domain=range(10))
    assert "not protected" in rep["guarantee"]


@pytest.mark.skipif(not opendp_available(), reason="the dp extra (OpenDP) is not installed")
def test_release_without_seed_draws_from_opendp() -> None:
    rng = np.random.default_rng(2)
    df = pd.DataFrame({"o": np.repeat(np.arange(20), 10), "s": np.tile(np.arange(10), 20),
                       "v": rng.normal(5, 1, 200)})
    res = discover(df, "o", "s", "v", method="crh", perturb="laplace", epsilon=1.0,
                   perturb_options={"bounds": (0.0, 10.0)})
    assert res.privacy["production_safe"] is True and "OpenDP" in res.privacy["sampler"]
    again = discover(df, "o", "s", "v", method="crh", perturb="laplace", epsilon=1.0,
                     perturb_options={"bounds": (0.0, 10.0)})
    assert not np.allclose(res.objects.truth, again.objects.truth)  # fresh noise, no seed reuse
