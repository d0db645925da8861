"""Weighted KDE of §4.2: global (Eq. 2), local Hampel IRWLS (Eq. 3), combined (Eq. 4/5)."""

from __future__ import annotations

import numpy as np
from scipy.integrate import quad
from test_synth_data import claims

from crowddb.synth import synthesize
from crowddb.synth.kde import gram, make_batches, mixture_density, rkhs_sq_dist, silverman_bandwidth
from crowddb.synth.weights import combined_weights, global_weights, hampel_irwls, hampel_phi


def _setup(obj, src, x):
    batches = make_batches(obj, src, x)
    hs = [silverman_bandwidth(b.X, b.mask, 0.1) for b in batches]
    return batches, [gram(b.X, b.mask, h) for b, h in zip(batches, hs)]


def test_outlier_sources_lose_global_weight():
    obj, src, x = claims()
    batches, grams = _setup(obj, src, x)
    g = global_weights(batches, grams, 12)
    assert g[[10, 11]].max() < g[:10].min()


def test_rkhs_distance_closed_form_matches_numeric_l2_of_features():
    x = np.array([[0.0, 1.0, 3.0]])
    mask = np.ones_like(x, bool)
    K = gram(x, mask, np.array([1.0]))
    w = np.array([[0.2, 0.3, 0.5]])
    d = rkhs_sq_dist(K, w)[0]
    # explicit features in the RKHS of kappa: <kappa(., a), kappa(., b)> = kappa(a, b); check via the Gram form
    for s in range(3):
        e = np.eye(3)[s] - w[0]
        assert np.isclose(d[s], e @ K[0] @ e)


def test_far_claim_gets_lower_local_weight():
    x = np.array([[10.0, 10.4, 9.7, 10.2, 9.9, 10.1, 30.0]])
    mask = np.ones_like(x, bool)
    K = gram(x, mask, silverman_bandwidth(x, mask, 0.1))
    l = hampel_irwls(K, mask)[0]
    assert np.isclose(l.sum(), 1.0)
    assert l[-1] == l.min() and l[-1] < 1 / 7
    assert l[:-1].max() > 1 / 7


def test_hampel_phi_pieces():
    r = np.array([0.5, 1.5, 2.5, 3.5])
    phi = hampel_phi(r, 1.0, 2.0, 3.0)
    assert np.allclose(phi, [1.0, 1 / 1.5, 1.0 * (3 - 2.5) / (1.0 * 2.5), 0.0])


def test_combined_is_normalized_sqrt_of_local_times_global():
    l = np.array([[0.5, 0.3, 0.2]])
    g = np.array([[1.0, 4.0, 9.0]])
    c = combined_weights(l, g, np.ones_like(l, bool))
    expect = np.sqrt(l * g) / np.sqrt(l * g).sum()
    assert np.allclose(c, expect)


def test_density_eq5_integrates_to_one():
    centers = np.array([0.0, 1.0, 5.0])
    w = np.array([0.5, 0.3, 0.2])
    total, _ = quad(lambda t: mixture_density(np.array([t]), centers, w, 0.7)[0], -20, 30, points=[0, 1, 5])
    assert np.isclose(total, 1.0, atol=1e-6)


def test_combined_weights_down_weight_outlier_sources_end_to_end():
    obj, src, x = claims()
    res = synthesize(obj, src, x, m=5, seed=1)
    w = res.weights.assign(src=src[res.weights["claim"].to_numpy()])
    mean_c = w.groupby("src")["c"].mean()
    assert mean_c[[10, 11]].max() < mean_c[:10].min()
    uni = synthesize(obj, src, x, m=5, weights="uniform", seed=1).weights
    assert np.allclose(uni["c"], 1 / 12)
    glob = synthesize(obj, src, x, m=5, weights="global", seed=1).weights
    assert glob.assign(src=src)["c"][src >= 10].max() < glob["c"][src < 10].min()


def test_two_claims_keep_uniform_local_weights():
    x = np.array([[1.0, 5.0]])
    mask = np.ones_like(x, bool)
    l = hampel_irwls(gram(x, mask, np.array([1.0])), mask)
    assert np.allclose(l, 0.5)
