"""bench/synth.py: the generated Stock- and Indoor-like sets have the stated shape; ISE in closed form is right."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.integrate import quad
from scipy.stats import norm

_spec = importlib.util.spec_from_file_location("bench_synth", Path(__file__).resolve().parents[3] / "bench" / "synth.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


@pytest.fixture(scope="module")
def stock():
    return bench.stock_like(3)


def test_stock_like_shape(stock):
    df, truth = stock
    assert df["source"].nunique() == 55 and df["object"].nunique() == len(truth) == 5521
    assert not df.duplicated(["object", "source"]).any()
    assert (df["value"] >= 0.01).all() and np.allclose(df["value"] * 100, np.round(df["value"] * 100))
    again, _ = bench.stock_like(3)
    pd.testing.assert_frame_equal(df, again)


def test_stock_like_outlying_sources_are_systematically_wrong(stock):
    df, truth = stock
    lr = np.log(df["value"].to_numpy() / truth[df["object"]].to_numpy())
    s = df["source"].to_numpy()
    off = np.abs(lr) > 0.05  # beyond any accurate or noisy claim (5 sd of the noisy sources)
    rate = pd.Series(off).groupby(s).mean()
    assert rate[:40].max() < 0.001  # accurate and noisy sources are never off by 5%
    assert rate[40:45].min() > 0.2 and rate[50:].min() > 0.2  # ambiguity and mistakes (stale quotes are nearer)
    for src in range(40, 45):  # ambiguity: one factor per source
        wrong = lr[(s == src) & off]
        assert np.std(wrong) < 0.01
    stale = (s >= 45) & (s < 50) & (np.abs(lr) > 0.03)  # out-of-date: one copied stale quote per object
    spread = pd.Series(lr[stale]).groupby(df["object"].to_numpy()[stale]).agg(lambda v: v.max() - v.min())
    assert len(spread) > 200 and (spread < 0.015).mean() > 0.95
    assert np.std(lr[(s >= 50) & off]) > 0.5  # mistakes: wild values
    assert 0.08 < off.mean() < 0.25  # about one claim in six is wrong


def test_indoor_like_shape():
    df, truth = bench.indoor_like(3)
    per_obj = df.groupby("object")["source"].nunique()
    assert len(truth) == 129 and df["source"].max() < 247
    assert not df.duplicated(["object", "source"]).any()
    assert per_obj.between(10, 90).all()


def test_ise_closed_form_matches_numeric_integration():
    rng = np.random.default_rng(0)
    Z = rng.normal(0.5, 2.0, (4, 6))
    Z[1, 3:] = np.nan  # padding
    Z[2, :] = np.nan  # nothing released
    got = bench.ise_rows(Z)
    for i in range(4):
        v = Z[i][~np.isnan(Z[i])]

        def sq(t, v=v):
            kde = norm.pdf(t, v, 1.0).mean() if v.size else 0.0
            return (norm.pdf(t) - kde) ** 2

        want, _ = quad(sq, -30, 30, limit=200)
        assert np.isclose(got[i], want, atol=1e-8)
    assert np.isclose(got[2], 1 / (2 * np.sqrt(np.pi)))


def test_padded_z_keeps_release_order_and_units():
    rows = pd.DataFrame({"object": ["a", "b", "a", "a"], "value": [12.0, 5.0, 8.0, 10.0]})
    Z = bench.padded_z(rows, pd.Index(["a", "b", "c"]), pd.Series({"a": 10.0, "b": 5.0, "c": 0.0}),
                       pd.Series({"a": 2.0, "b": 1.0, "c": 1.0}), 2)
    assert np.allclose(Z[0], [1.0, -1.0]) and Z[1, 0] == 0.0 and np.isnan(Z[1, 1]) and np.isnan(Z[2]).all()


def test_by_claim_count_groups_every_object_once():
    rng = np.random.default_rng(0)
    n = np.r_[np.full(3, 2), np.full(4, 6)]  # 3 objects with 2 claims, 4 with 6
    obj = np.repeat(np.arange(n.size), n)
    df = pd.DataFrame({"object": obj, "source": rng.integers(0, 8, obj.size),
                       "value": np.round(100 + rng.normal(0, 2, obj.size), 1)})
    tau = pd.Series(100.0, index=np.arange(n.size))
    table = bench.by_claim_count(df, tau, tau.index, [1])
    assert table["objects"].to_dict() == {"2": 3, "5-9": 4}
    assert list(table.columns) == ["objects", "PrisCrowd", "Global", "Uniform", "PrisCrowd(g mean)"]
    assert (table.drop(columns="objects").to_numpy() > 0).all()
    assert (table.drop(columns="objects").to_numpy() < 2 * bench.G0 * table[["objects"]].to_numpy()).all()
