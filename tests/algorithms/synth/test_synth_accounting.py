"""Theorem 2 accounting, choice of t, small objects."""

from __future__ import annotations

import numpy as np
import pytest
from test_synth_data import claims

from crowddb.errors import ArgumentError
from crowddb.synth import choose_t, synthesize, theorem2


def _expect(res, k, gamma, eps0, t):
    w = res.weights.groupby("object")["c"]
    cmax, cmin, n = w.max(), w.min(), w.size()
    eps = eps0 + np.log(1 + gamma / t * cmax / cmin)
    delta = n * cmax * np.exp(-eps0 * (k - t))
    return eps, delta


@pytest.mark.parametrize("weights", ["combined", "global", "uniform"])
def test_report_matches_theorem2_with_t1(weights):
    obj, src, x = claims(n_obj=6)
    res = synthesize(obj, src, x, m=5, k=5, gamma=4.0, epsilon0=1.0, weights=weights, seed=0)
    eps, delta = _expect(res, 5, 4.0, 1.0, 1)
    rep = res.report.set_index("object")
    assert (rep["t"] == 1).all()
    assert np.allclose(rep["epsilon"], eps[rep.index]) and np.allclose(rep["delta"], delta[rep.index])
    assert res.summary["epsilon"] == pytest.approx(rep["epsilon"].max())
    assert res.summary["delta"] == pytest.approx(rep["delta"].max())
    if weights == "uniform":
        assert np.allclose(rep["epsilon"], 1.0 + np.log(1 + 4.0))
        assert np.allclose(rep["delta"], 12 * (1 / 12) * np.exp(-4.0))


def test_given_t_and_weight_floor_bound():
    obj, src, x = claims(n_obj=6)
    res = synthesize(obj, src, x, m=3, k=6, gamma=2.0, epsilon0=0.5, t=3, weight_floor=0.2, seed=0)
    eps, delta = _expect(res, 6, 2.0, 0.5, 3)
    rep = res.report.set_index("object")
    assert np.allclose(rep["epsilon"], eps[rep.index]) and np.allclose(rep["delta"], delta[rep.index])
    assert (rep["epsilon"] <= 0.5 + np.log(1 + 2.0 / 3 * 5) + 1e-12).all()  # max c / min c <= 1 / 0.2


def test_t_minimizes_delta_and_meets_epsilon_target():
    ratio = np.array([1.0, 3.0])
    assert (choose_t(ratio, 5, 4.0, 1.0) == 1).all()
    target = 1.0 + np.log(1 + 4.0 / 3 * 1.0)  # t = 3 meets it exactly for ratio 1
    t = choose_t(ratio, 5, 4.0, 1.0, target)
    assert t[0] == 3 and (t[1] == 0 or t[1] > 3)
    eps, delta = theorem2(np.array([5]), np.array([0.3]), np.array([0.1]), 5, 4.0, 1.0, np.arange(1, 5))
    assert np.all(np.diff(delta) > 0) and np.all(np.diff(eps) < 0)  # the trade-off t walks along
    assert (choose_t(ratio, 1, 4.0, 1.0) == 0).all()


def test_epsilon_target_in_synthesize():
    obj, src, x = claims(n_obj=3)
    res = synthesize(obj, src, x, m=3, weights="uniform", epsilon=1.0 + np.log(1 + 4.0 / 2), seed=0)
    assert (res.report["t"] == 2).all() and res.report["guarantee_holds"].all()
    res = synthesize(obj, src, x, m=3, weights="uniform", epsilon=1.0, seed=0)
    assert not res.report["released"].any() and res.report["reason"].str.contains("no t in").all()


def test_small_objects_withheld_or_released_without_guarantee():
    obj = np.array([0] * 6 + [1] * 3)
    src = np.array(list(range(6)) + [0, 1, 2])
    x = np.array([5.0, 5.1, 5.0, 4.9, 5.2, 5.0, 7.0, 7.0, 7.0])
    res = synthesize(obj, src, x, m=4, k=5, seed=0)
    rep = res.report.set_index("object")
    assert rep.loc[1, "rows"] == 0 and not rep.loc[1, "released"] and not rep.loc[1, "guarantee_holds"]
    assert "fewer than k=5" in rep.loc[1, "reason"] and "withheld" in rep.loc[1, "reason"]
    assert set(res.rows["object"]) == {0}
    rel = synthesize(obj, src, x, m=4, k=5, small_objects="release", seed=0, max_attempts=20000)
    rep = rel.report.set_index("object")
    assert rep.loc[1, "released"] and not rep.loc[1, "guarantee_holds"]
    assert rel.summary["objects_without_guarantee_released"] == 1
    assert rel.summary["epsilon"] == pytest.approx(rep.loc[0, "epsilon"])  # overall = guaranteed objects only


def test_k1_has_no_guarantee_and_bad_t():
    obj, src, x = claims(n_obj=2)
    res = synthesize(obj, src, x, m=2, k=1, seed=0)
    assert not res.report["guarantee_holds"].any() and not res.report["released"].any()
    with pytest.raises(ArgumentError):
        synthesize(obj, src, x, k=5, t=5)
