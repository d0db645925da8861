"""Options of the weighted KDE that are not the paper's defaults: hampel_quantiles, hampel_center, global_loss."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from test_synth_data import claims

from crowddb.errors import ArgumentError
from crowddb.synth import synthesize
from crowddb.synth.kde import gram, make_batches, silverman_bandwidth
from crowddb.synth.weights import global_weights, hampel_irwls, hampel_thresholds, kernel_median_residuals


def _one(x):
    x = np.asarray(x, float)[None, :]
    mask = np.ones_like(x, bool)
    return gram(x, mask, silverman_bandwidth(x, mask, 0.1)), mask


def test_thresholds_take_the_given_percentiles_at_the_given_center():
    rng = np.random.default_rng(4)
    K, mask = _one(np.r_[rng.normal(0, 1, 17), [9.0, 12.0, -15.0]])
    r = kernel_median_residuals(K, mask)[0]
    q = [v[0, 0] for v in hampel_thresholds(K, mask, (50, 75, 95))]
    assert np.allclose(q, np.percentile(r, [50, 75, 95]))
    w = np.full(20, 1 / 20)
    r_kde = np.sqrt(np.maximum(1 - 2 * K[0] @ w + w @ K[0] @ w, 0))  # residuals at the unweighted KDE
    q = [v[0, 0] for v in hampel_thresholds(K, mask, (50, 75, 95), center="kde")]
    assert np.allclose(q, np.percentile(r_kde, [50, 75, 95]))
    with pytest.raises(ArgumentError, match="hampel_center"):
        hampel_thresholds(K, mask, center="mean")


@pytest.mark.parametrize("quantiles,center", [((50, 95, 100), "median"), ((50, 75, 95), "median"),
                                              ((50, 75, 95), "kde")])
def test_far_claim_gets_lower_local_weight_under_every_rule(quantiles, center):
    K, mask = _one([10.0, 10.4, 9.7, 10.2, 9.9, 10.1, 10.3, 9.8, 30.0])  # §4.2: a claim far from the others
    l = hampel_irwls(K, mask, quantiles=quantiles, center=center)[0]
    assert np.isclose(l.sum(), 1.0)
    assert l[-1] == l.min() and l[-1] < l[:-1].mean()  # q3 < max may zero near claims too (9 claims, "kde")


def test_tighter_quantiles_discount_the_far_claims_more():
    rng = np.random.default_rng(2)
    K, mask = _one(np.r_[rng.normal(0, 1, 30), rng.normal(0, 1, 8) * 40 + 60])  # 8 of 38 claims far away
    far = np.arange(38) >= 30
    loose = hampel_irwls(K, mask, quantiles=(50, 95, 100))[0]
    tight = hampel_irwls(K, mask, quantiles=(50, 75, 95))[0]
    assert tight[far].sum() < loose[far].sum() < far.mean()


def test_global_loss_mean_removes_the_claim_count_penalty_of_eq2():
    # two equally accurate sources, one claims 9 objects and one 3; two bad sources claim every object
    rng = np.random.default_rng(0)
    obj, src, x = [], [], []
    for i in range(9):
        for s, (sd, claims_it) in enumerate([(0.1, True), (0.1, i < 3), (3.0, True), (3.0, True)]):
            if claims_it:
                obj.append(i), src.append(s), x.append(100 * i + rng.normal(0, sd))
        for s in range(4, 8):  # filler sources near the truth so every object has a consensus
            obj.append(i), src.append(s), x.append(100 * i + rng.normal(0, 0.1))
    obj, src, x = np.array(obj), np.array(src), np.array(x)
    batches = make_batches(obj, src, x)
    grams = [gram(b.X, b.mask, silverman_bandwidth(b.X, b.mask, 0.01)) for b in batches]
    g_sum = global_weights(batches, grams, 8)
    g_mean = global_weights(batches, grams, 8, loss="mean")
    assert g_sum[1] > g_sum[0]  # Eq. (2) as printed: fewer claims, smaller summed loss, higher weight
    assert abs(g_mean[1] - g_mean[0]) < abs(g_sum[1] - g_sum[0])
    assert g_mean[[2, 3]].max() < g_mean[[0, 1]].min()
    with pytest.raises(ArgumentError, match="global_loss"):
        global_weights(batches, grams, 8, loss="median")


@pytest.mark.parametrize("kw", [{"hampel_quantiles": (50, 40, 90)}, {"hampel_quantiles": (50, 75)},
                                {"hampel_quantiles": (-1, 50, 90)}, {"hampel_quantiles": (50, 75, 101)},
                                {"hampel_quantiles": "abc"}, {"hampel_quantiles": (50, float("nan"), 90)},
                                {"hampel_center": "mean"}, {"global_loss": "max"}])
def test_bad_options(kw):
    obj, src, x = claims(n_obj=2)
    with pytest.raises(ArgumentError):
        synthesize(obj, src, x, **kw)


@pytest.mark.parametrize("kw", [{"hampel_quantiles": (50, 75, 95)}, {"hampel_center": "kde"},
                                {"global_loss": "mean"}])
def test_options_recorded_and_default_unchanged(kw):  # seeded identity: test_synth_api's every-mode test
    obj, src, x = claims(n_obj=8)
    a = synthesize(obj, src, x, m=12, seed=5, **kw)
    key, val = next(iter(kw.items()))
    assert a.summary["parameters"][key] == (tuple(float(v) for v in val) if key == "hampel_quantiles" else val)
    d = synthesize(obj, src, x, m=12, seed=5)
    assert d.summary["parameters"]["hampel_quantiles"] == (50.0, 95.0, 100.0)
    assert d.summary["parameters"]["hampel_center"] == "median"
    assert d.summary["parameters"]["global_loss"] == "sum"


def test_options_reach_sql():
    import crowddb

    obj, src, x = claims(n_obj=6)
    frame = pd.DataFrame({"city": obj.astype(str), "user": src.astype(str), "population": x})
    with crowddb.connect(seed=1, progress=False) as db:
        db.load_frame("claims", frame)
        q = ("SELECT * FROM PRIVATE_SYNTH(claims, object := 'city', source := 'user', value := 'population', m := 5, "
             "seed := 3{})")
        db.sql(q.format(", hampel_quantiles := [50, 75, 95], hampel_center := 'kde', global_loss := 'mean'")).df()
        last = "SELECT params FROM crowddb_releases ORDER BY release_id DESC LIMIT 1"
        params = json.loads(db.sql(last).fetchall()[0][0])
        assert params["hampel_quantiles"] == [50, 75, 95] and params["hampel_center"] == "kde"
        assert params["global_loss"] == "mean"
        with pytest.raises(ArgumentError, match="hampel_quantiles"):
            db.sql(q.format(", hampel_quantiles := [50, 40, 95]"))
        with pytest.raises(ArgumentError, match="global_loss"):
            db.sql(q.format(", global_loss := 'max'"))
