"""synthesize(): reproducibility, bad input, edge cases, the Basic baseline."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_synth_data import claims

from crowddb.errors import ArgumentError, EmptyInputError
from crowddb.synth import SynthResult, synthesize


def test_seeded_runs_identical():
    obj, src, x = claims(n_obj=10)
    a = synthesize(obj, src, x, m=10, seed=42)
    b = synthesize(obj, src, x, m=10, seed=42)
    c = synthesize(obj, src, x, m=10, seed=43)
    assert isinstance(a, SynthResult)
    pd.testing.assert_frame_equal(a.rows, b.rows)
    pd.testing.assert_frame_equal(a.report, b.report)
    assert not a.rows["value"].equals(c.rows["value"])
    ba = synthesize(obj, src, x, method="basic", epsilon=1.0, seed=5)
    bb = synthesize(obj, src, x, method="basic", epsilon=1.0, seed=5)
    pd.testing.assert_frame_equal(ba.rows, bb.rows)


def test_labels_and_columns():
    obj = np.array(["b city"] * 6 + ["a city"] * 6)
    src = np.array([f"u{i}" for i in range(6)] * 2)
    x = np.r_[np.full(6, 100.0) + np.arange(6), np.full(6, 7.0) + np.arange(6) / 10]
    res = synthesize(obj, src, x, m=4, seed=0)
    assert list(res.rows.columns) == ["object", "value"]
    assert list(res.rows["object"].unique()) == ["b city", "a city"]
    assert list(res.report.columns[:11]) == ["object", "n_claims", "released", "rows", "reached_m", "tried",
                                             "rejected", "epsilon", "delta", "guarantee_holds", "reason"]


@pytest.mark.parametrize("kw", [{"m": 0}, {"k": 0}, {"gamma": 1.0}, {"gamma": 0.5}, {"epsilon0": 0.0},
                                {"epsilon0": -1.0}, {"m": 2.5}, {"method": "laplace"}, {"weights": "x"},
                                {"small_objects": "drop"}, {"bandwidth": 0.0}, {"max_attempts": 0},
                                {"weight_floor": 1.0}, {"epsilon": 0.0}])
def test_bad_parameters(kw):
    obj, src, x = claims(n_obj=2)
    with pytest.raises(ArgumentError):
        synthesize(obj, src, x, **kw)


def test_bad_input_arrays():
    obj, src, x = claims(n_obj=2)
    x = x.copy()
    x[3] = np.nan
    with pytest.raises(ArgumentError, match="NaN"):
        synthesize(obj, src, x)
    with pytest.raises(EmptyInputError):
        synthesize([], [], [])
    with pytest.raises(ArgumentError, match="lengths"):
        synthesize(obj, src[:-1], x)


def test_all_equal_claims_use_the_cell_width():
    obj = np.zeros(6, int)
    x = np.full(6, 1234.0)
    res = synthesize(obj, np.arange(6), x, m=30, seed=0)
    rep = res.report.iloc[0]
    assert rep["bandwidth"] == 1.0 and "all claims equal" in rep["reason"]
    assert rep["reached_m"] and rep["rejected"] <= rep["tried"]
    assert np.abs(res.rows["value"] - 1234.0).max() <= 5.0


def test_basic_baseline():
    obj, src, x = claims(n_obj=20)
    res = synthesize(obj, src, x, method="basic", epsilon=2.0, sensitivity=10.0, seed=0)
    assert len(res.rows) == len(x) and res.summary["method"] == "basic"
    assert res.report["guarantee_holds"].all() and (res.report["epsilon"] == 2.0).all()
    order = np.argsort(obj, kind="stable")
    noise = res.rows["value"].to_numpy() - x[order]
    assert abs(np.abs(noise).mean() - 10.0 / 2.0) < 0.5  # E|Lap(b)| = b = sensitivity / epsilon
    data_range = synthesize(obj, src, x, method="basic", epsilon=2.0, seed=0)
    assert not data_range.report["guarantee_holds"].any()


def test_given_bandwidth_mapping_and_resolution():
    obj, src, x = claims(n_obj=3)
    res = synthesize(obj, src, x, m=5, bandwidth={0: 1.0, 1: 2.0, 2: 3.0}, resolution=0.5, seed=0)
    assert list(res.report["bandwidth"]) == [1.0, 2.0, 3.0]
    v = res.rows["value"].to_numpy()
    assert np.allclose(v * 2, np.round(v * 2))
    with pytest.raises(ArgumentError, match="no entry"):
        synthesize(obj, src, x, bandwidth={0: 1.0})
    with pytest.raises(ArgumentError, match="resolution"):
        synthesize(obj, src, x, resolution=-1.0)


@pytest.mark.parametrize("kw", [{"weights": "global"}, {"weights": "uniform"}, {"small_objects": "release", "k": 13},
                                {"privacy_test": False}, {"hampel_quantiles": (50, 75, 95)}, {"hampel_center": "kde"},
                                {"global_loss": "mean"}])
def test_seeded_runs_identical_for_every_mode(kw):
    obj, src, x = claims(n_obj=8)
    a = synthesize(obj, src, x, m=12, seed=5, **kw)
    b = synthesize(obj, src, x, m=12, seed=5, **kw)
    pd.testing.assert_frame_equal(a.rows, b.rows)
    pd.testing.assert_frame_equal(a.report, b.report)
    pd.testing.assert_frame_equal(a.weights, b.weights)
    pd.testing.assert_frame_equal(a.trace, b.trace)
