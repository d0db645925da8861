"""Composition of Theorem 2 over an object's candidates (issue 13): per-object and whole-release figures.

Every expected figure is computed here from plain math on the report's per-value (epsilon, delta) and ``tried``,
independently of ``crowddb.synth.accounting.compose``.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from test_synth_data import claims

import crowddb
from crowddb.errors import ArgumentError
from crowddb.synth import synthesize
from crowddb.synth.accounting import COMPOSITION_DELTA, compose


def _basic(eps: float, delta: float, n: int) -> tuple[float, float]:
    return n * eps, n * delta


def _advanced(eps: float, delta: float, n: int, dp: float) -> tuple[float, float]:
    """Dwork, Rothblum & Vadhan (2010); Dwork & Roth (2014) Theorem 3.20, written out."""
    return math.sqrt(2 * n * math.log(1 / dp)) * eps + n * eps * (math.exp(eps) - 1), n * delta + dp


@pytest.mark.parametrize("eps, delta, n, winner", [
    (0.01, 1e-9, 10_000, "advanced"),   # many candidates, small epsilon: advanced is tighter
    (0.1, 1e-7, 3, "basic"),            # few candidates: basic is tighter
    (2.9, 0.02, 150, "basic"),          # PrisCrowd's default regime (epsilon > ln 2): basic always
    (0.05, 0.0, 1, "basic"),
])
def test_compose_arithmetic(eps, delta, n, winner):
    got = compose(np.array([eps]), np.array([delta]), np.array([n]), 1e-6)
    eb, db = _basic(eps, delta, n)
    ea, da = _advanced(eps, delta, n, 1e-6)
    assert got["epsilon_basic"][0] == pytest.approx(eb, rel=1e-12)
    assert got["delta_basic"][0] == pytest.approx(db, rel=1e-12, abs=1e-300)
    assert got["epsilon_advanced"][0] == pytest.approx(ea, rel=1e-12)
    assert got["delta_advanced"][0] == pytest.approx(da, rel=1e-12)
    assert got["composition"][0] == winner
    assert got["epsilon"][0] == pytest.approx(min(ea, eb), rel=1e-12)
    assert got["delta"][0] == pytest.approx(da if winner == "advanced" else db, rel=1e-12, abs=1e-300)


def test_compose_figures_pinned():
    """Two hand-computed values: eps=0.01, n=10,000, delta'=1e-6 and eps=0.1, n=3."""
    got = compose(np.array([0.01, 0.1]), np.array([0.0, 0.0]), np.array([10_000, 3]), 1e-6)
    # sqrt(2 * 1e4 * 13.815510557964274) * 0.01 = 5.2565..., + 1e4 * 0.01 * 0.010050167084168 = 1.00501...
    assert got["epsilon_advanced"][0] == pytest.approx(6.261, abs=1e-3)
    assert got["epsilon_basic"][0] == pytest.approx(100.0)
    assert got["epsilon"][1] == pytest.approx(0.3) and got["composition"][1] == "basic"


def test_compose_zero_candidates_and_infinite_epsilon():
    got = compose(np.array([np.inf, 2.0]), np.array([np.nan, 0.1]), np.array([0, 4]), 1e-6)
    assert got["composition"][0] == "none" and got["epsilon"][0] == 0 and got["delta"][0] == 0
    inf = compose(np.array([np.inf]), np.array([0.1]), np.array([3]), 1e-6)
    assert np.isinf(inf["epsilon"][0])


def _check_report(res, dp=COMPOSITION_DELTA):
    rep = res.report
    assert (rep["rejected"] > 0).any()  # so counting released values only would differ from counting tried
    for _, r in rep.iterrows():
        n = int(r["tried"])
        assert n == r["rows"] + r["rejected"]
        if n == 0:
            assert r["composition"] == "none" and r["epsilon_object"] == 0
            continue
        eb, db = _basic(r["epsilon"], r["delta"], n)
        ea, da = _advanced(r["epsilon"], r["delta"], n, dp)
        assert r["epsilon_object_basic"] == pytest.approx(eb, rel=1e-12)
        assert r["delta_object_basic"] == pytest.approx(db, rel=1e-12)
        assert r["epsilon_object_advanced"] == pytest.approx(ea, rel=1e-12)
        assert r["delta_object_advanced"] == pytest.approx(da, rel=1e-12)
        assert r["composition"] == ("advanced" if ea < eb else "basic")
        assert r["epsilon_object"] == pytest.approx(min(ea, eb), rel=1e-12)
        assert r["delta_object"] == pytest.approx(da if ea < eb else db, rel=1e-12)
    g = rep[rep["guarantee_holds"] & (rep["tried"] > 0)]
    s = res.summary
    assert s["epsilon_release"] == pytest.approx(g["epsilon_object"].max())
    assert s["delta_release"] == pytest.approx(g["delta_object"].max())
    assert s["composition_release"] == g.loc[g["epsilon_object"].idxmax(), "composition"]
    assert s["epsilon"] is None or s["epsilon_release"] >= s["epsilon"]  # never below the per-value figure
    return g


def test_default_release_basic_is_tighter():
    obj, src, x = claims(n_obj=6)
    res = synthesize(obj, src, x, m=5, seed=0)
    g = _check_report(res)
    assert (g["composition"] == "basic").all()
    assert res.summary["composition_release"] == "basic"
    # the whole-release figure is m-fold or more the per-value one
    assert res.summary["epsilon_release"] >= 5 * res.summary["epsilon"]
    # worst case over runs: max_attempts (200 m = 1000) candidates at the largest per-value epsilon
    assert res.summary["epsilon_release_max_attempts"] == pytest.approx(1000 * g["epsilon"].max())


def _many_claims(n_obj=2, n=300, seed=3):
    rng = np.random.default_rng(seed)
    obj = np.repeat(np.arange(n_obj), n)
    src = np.tile(np.arange(n), n_obj)
    x = np.round(rng.normal(100.0, 0.3, obj.size), 1)
    return obj, src, x


# small per-value epsilon (t close to k, gamma close to 1) and many candidates: advanced composition is tighter
SMALL_EPS = {"m": 5, "k": 100, "t": 50, "gamma": 1.1, "epsilon0": 0.1, "weights": "uniform", "max_attempts": 1500}


def test_advanced_is_tighter_for_many_candidates_at_small_epsilon():
    obj, src, x = _many_claims()
    res = synthesize(obj, src, x, seed=1, **SMALL_EPS)
    g = _check_report(res)
    assert (g["epsilon"] < 0.13).all() and (g["tried"] > 100).all()
    assert (g["composition"] == "advanced").all() and res.summary["composition_release"] == "advanced"
    assert res.summary["epsilon_release"] < res.summary["epsilon_release_basic"]
    dp = 1e-9  # a smaller delta' costs epsilon
    tight = synthesize(obj, src, x, seed=1, composition_delta=dp, **SMALL_EPS)
    _check_report(tight, dp)
    assert tight.summary["parameters"]["composition_delta"] == dp


def test_basic_baseline_is_parallel():
    obj, src, x = claims(n_obj=3)
    res = synthesize(obj, src, x, method="basic", epsilon=0.5, sensitivity=1.0, seed=0)
    assert (res.report["composition"] == "parallel").all()
    assert np.allclose(res.report["epsilon_object"], 0.5)
    assert res.summary["epsilon_release"] == 0.5 and res.summary["composition_release"] == "parallel"


@pytest.mark.parametrize("dp", [0.0, 1.0, -1e-6, 2.0])
def test_bad_composition_delta(dp):
    obj, src, x = claims(n_obj=2)
    with pytest.raises(ArgumentError, match="composition_delta"):
        synthesize(obj, src, x, composition_delta=dp)


@pytest.fixture
def db():
    obj, src, x = claims(n_obj=6)
    frame = pd.DataFrame({"city": [f"c{o}" for o in obj], "user": [f"u{s}" for s in src], "pop": x})
    with crowddb.connect(seed=2, progress=False) as con:
        con.load_frame("claims", frame)
        yield con, frame


def test_report_fields_through_sql(db):
    con, frame = db
    con.sql("SELECT * FROM PRIVATE_SYNTH(claims, object := 'city', source := 'user', value := 'pop', m := 5, "
            "seed := 3)").df()
    rep = con.last_report[0]
    expected = synthesize(frame["city"].to_numpy(), frame["user"].to_numpy(), frame["pop"].to_numpy(), m=5, seed=3)
    table = rep["table"]
    for col in ("epsilon_object_basic", "delta_object_basic", "epsilon_object_advanced", "delta_object_advanced",
                "epsilon_object", "delta_object", "composition", "tried", "epsilon", "delta"):
        assert col in table.columns
    g = table[table["guarantee_holds"] & (table["tried"] > 0)]
    assert np.allclose(g["epsilon_object_basic"], g["tried"] * g["epsilon"])
    assert rep["epsilon"] == pytest.approx(expected.summary["epsilon"])  # per value, the paper's
    assert rep["epsilon_release"] == pytest.approx(g["epsilon_object"].max())
    assert rep["epsilon_release"] == pytest.approx(expected.summary["epsilon_release"])
    assert rep["delta_release"] == pytest.approx(g["delta_object"].max())
    assert rep["composition_release"] == "basic"
    text = rep["guarantee"]
    assert "release as a whole" in text and "this is the guarantee" in text and "per-value" in text
    assert f"{rep['epsilon_release']:.6g}" in text and "paper's Theorem 2 for one released value" in text
    eps, delta, metrics = con.sql("SELECT epsilon, delta, metrics FROM crowddb_releases "
                                  "WHERE kind = 'synthesis'").fetchall()[0]
    # crowddb_releases logs what the budget charged (issue 24): the worst case, not this run's epsilon_release
    assert (eps, delta) == (rep["epsilon_charged"], rep["delta_charged"]) and eps >= rep["epsilon_release"]
    m = json.loads(metrics)
    assert m["epsilon"] == pytest.approx(rep["epsilon"]) and m["epsilon_charged"] == eps
    assert m["epsilon_release"] == pytest.approx(rep["epsilon_release"])
    assert m["composition_release"] == "basic"


def test_advanced_through_sql_and_composition_delta(db):
    con, _ = db
    obj, src, x = _many_claims()
    con.load_frame("many", pd.DataFrame({"o": obj, "s": src, "v": x}))
    args = ", ".join(f"{k} := {v!r}" for k, v in SMALL_EPS.items())
    con.sql(f"SELECT * FROM PRIVATE_SYNTH(many, object := 'o', source := 's', value := 'v', {args}, "
            "composition_delta := 1e-8, seed := 1)").df()
    rep = con.last_report[0]
    g = rep["table"][rep["table"]["tried"] > 0]
    for _, r in g.iterrows():
        ea, da = _advanced(r["epsilon"], r["delta"], int(r["tried"]), 1e-8)
        assert r["epsilon_object"] == pytest.approx(ea) and r["delta_object"] == pytest.approx(da)
    assert rep["composition_release"] == "advanced" and "advanced composition" in rep["guarantee"]
    with pytest.raises(ArgumentError, match="composition_delta"):
        con.sql("SELECT * FROM PRIVATE_SYNTH(many, object := 'o', source := 's', value := 'v', "
                "composition_delta := 0.0)")


def test_object_with_every_candidate_rejected_still_counts():
    """Rejections are outputs too: an object that tried candidates and released none is in the release's figure."""
    obj, src, x = _many_claims()
    res = synthesize(obj, src, x, seed=1, **{**SMALL_EPS, "k": 200, "max_attempts": 300})
    rep = res.report
    assert (rep["rows"] == 0).all() and (rep["tried"] == 300).all() and rep["guarantee_holds"].all()
    assert res.summary["epsilon"] is None  # no released value: no per-value figure
    expected = max(min(_advanced(e, d, 300, COMPOSITION_DELTA)[0], _basic(e, d, 300)[0])
                   for e, d in zip(rep["epsilon"], rep["delta"]))
    assert res.summary["epsilon_release"] == pytest.approx(expected) and expected > 0
    assert "release as a whole" in res.summary["guarantee"]


def test_default_weight_floor_keeps_the_release_finite():
    """weight_floor = 0.1 (ours) is the default; the paper's 0 leaves an infinite epsilon when a Hampel weight is 0."""
    import inspect

    assert inspect.signature(synthesize).parameters["weight_floor"].default == 0.1
    x = np.r_[np.linspace(9.0, 11.0, 19), 40.0]
    obj, src = np.zeros(20, int), np.arange(20)
    paper = synthesize(obj, src, x, m=3, weight_floor=0.0, seed=0)
    assert np.isinf(paper.summary["epsilon_release"]) and "inf" in paper.summary["guarantee"]
    ours = synthesize(obj, src, x, m=3, seed=0)
    eps = 1.0 + np.log(1 + 4.0 * 10.0)
    n = int(ours.report["tried"].iloc[0])
    assert ours.summary["epsilon_release"] == pytest.approx(n * eps)
