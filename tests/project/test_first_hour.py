"""A new user's first hour (issue 23): what they print, what explain() promises, what the base install does."""

from __future__ import annotations

import math
import re
import sys
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from conftest import people_frame

import crowddb
from crowddb.anonymize import anonymize
from crowddb.errors import CrowdDBWarning, PlatformError
from crowddb.store import privacy
from crowddb.truth import get_method


# ------------------------------------------------------------------------------------------------- reprs
def test_crowddb_repr(db):
    assert repr(db) == ("<CrowdDB ':memory:' (platform simulated, seed 3, no budget); tables with roles: people; "
                        "operators: getcandidate, getposition>")
    html = db._repr_html_()
    assert html.startswith("<p>&lt;CrowdDB &#x27;:memory:&#x27;") and "no crowd run yet" in html
    db.sql("SELECT id, getposition(*, k := 5) AS job FROM people").fetchall()
    html = db._repr_html_()
    assert "<td>getposition</td>" in html and "<td>1</td>" in html  # one run of getposition
    db.close()
    assert repr(db) == "<CrowdDB (closed)>"


def test_query_plan_repr_is_the_plan(db):
    plan = db.explain("SELECT id, getposition(*, k := 5) AS job FROM people")
    assert repr(plan) == str(plan)
    assert repr(plan).splitlines()[1] == ("getposition (tuple): 60 rows -> 60 items, 0 cached; 1 HITs, "
                                           "5 assignments, est. $1.30")
    html = plan._repr_html_()
    assert "<td>getposition (tuple)</td>" in html and "<td>1.30</td>" in html
    assert html.count("<tr") == 2  # a header and one operator
    assert html.endswith("<p>total: 1 HITs, 5 assignments, est. $1.30</p>")


def test_release_repr_and_classes():
    frame = people_frame(60)
    release = anonymize(frame, ["age", "sex"], 5)
    sizes = np.bincount(release.groups)
    sizes = sizes[sizes > 0]
    assert repr(release) == (f"<Release mondrian k=5: 60 rows in {len(sizes)} classes (smallest {sizes.min()}), "
                             f"NCP {release.metrics['ncp']:.2f}%, quasi-identifiers age, sex>")
    classes = release.classes()
    assert classes["rows"].tolist() == sorted(sizes.tolist(), reverse=True)  # largest first
    assert classes["rows"].sum() == 60
    table = release.table
    for _, row in classes.iterrows():  # each class's labels are those its rows show
        members = table[release.groups == row["class"]]
        assert set(members["age"]) == {row["age"]} and set(members["sex"]) == {row["sex"]}
    assert len(release.classes(limit=3)) == 3
    assert release._repr_html_().count("<tr") == 1 + min(20, len(sizes))


def test_truth_method_repr():
    method = get_method("ds")()
    assert repr(method) == "DawidSkene(tol=1e-06, max_iter=100, seed=None): not fitted"
    answers = pd.DataFrame({"task": [1, 1, 2, 2, 2], "worker": ["a", "b", "a", "b", "c"],
                            "label": ["x", "x", "y", "x", "y"]})
    method.fit_frame(answers, "task", "worker", "label")
    assert re.fullmatch(r"DawidSkene\(tol=1e-06, max_iter=100, seed=None\): fitted on 5 answers of 2 objects by 3 "
                        r"sources in \d+ iterations", repr(method))
    assert "<p>truths (first 10):</p>" in method._repr_html_()


# ----------------------------------------------------------------- explain() says what the run will say
def test_dataframe_without_ground_truth_explain_says_the_simulated_crowd_cannot_answer():
    people = pd.DataFrame({"id": [1, 2, 3, 4, 5, 6], "age": [23, 45, 31, 52, 38, 29], "city": list("abcabc")})
    query = "SELECT id, getposition(*, k := 2, domain := ['x', 'y']) AS job FROM people"
    with crowddb.connect(seed=1, progress=False) as db:
        plan = db.explain(query)
        refusal = ("getposition: the simulated crowd answers from a ground-truth column of the input, and this input "
                   "has none")
        assert f"would be refused: {refusal}" in str(plan)
        with pytest.raises(PlatformError, match=re.escape(refusal)):
            db.sql(query)
        # nothing was recorded or published: no run, no HIT
        assert db.sql("SELECT count(*) FROM crowddb_hits").fetchall() == [(0,)]
        assert db.sql("SELECT count(*) FROM crowddb_runs").fetchall() == [(0,)]


# ------------------------------------------------------------------------- PRIVATE_SYNTH says why it is empty
def test_private_synth_with_too_few_claims_says_why():
    claims = pd.DataFrame({"object": list("aaabbb"), "source": ["s1", "s2", "s3"] * 2,
                           "value": [1.0, 1.2, 0.9, 5.0, 5.5, 4.8]})
    with crowddb.connect(progress=False) as db:
        with pytest.warns(CrowdDBWarning) as caught:
            rows = db.sql("SELECT * FROM PRIVATE_SYNTH(claims, object := 'object', source := 'source', "
                          "value := 'value', seed := 1)").fetchall()
        assert rows == []
        assert str(caught[0].message) == (
            "PRIVATE_SYNTH released no rows (2 object(s): fewer than k=5 claims; withheld). Objects with fewer than "
            "k=5 claims are withheld: the most claims of one object here is 3; lower k (k := 3), collect more claims "
            "per object, or pass small_objects := 'release' (no guarantee for them)")
        with np.errstate(all="ignore"):  # following the advice releases rows
            rows = db.sql("SELECT * FROM PRIVATE_SYNTH(claims, object := 'object', source := 'source', "
                          "value := 'value', k := 3, seed := 1)").fetchall()
        assert {r[0] for r in rows} == {"a", "b"}


# ------------------------------------------------------------- the epsilon accounting without OpenDP
def _reference_pure_rho(epsilon: float) -> Fraction:
    """epsilon^2 / 2 exactly (Bun & Steinke 2016, Proposition 1.4), for the Laplace scale 1/epsilon as a float."""
    return Fraction(1) / (Fraction(1.0 / epsilon) ** 2) / 2


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 0.3, 2.7, 1e-3, 7.25, 19.99])
def test_pure_rho_without_opendp_is_opendps_figure(monkeypatch, epsilon):
    with_opendp = privacy.pure_rho(epsilon)
    monkeypatch.setitem(sys.modules, "opendp", None)  # `import opendp` now raises ImportError: the base install
    without = privacy.pure_rho(epsilon)
    assert without == with_opendp  # bit for bit
    exact = _reference_pure_rho(epsilon)
    assert Fraction(without) >= exact and Fraction(math.nextafter(without, 0)) < exact * (1 + Fraction(1, 10**12))


def test_pure_rho_without_opendp_matches_on_many_epsilons(monkeypatch):
    eps = np.random.default_rng(0).uniform(1e-3, 20, 2000).tolist()
    with_opendp = [privacy.pure_rho(e) for e in eps]
    monkeypatch.setitem(sys.modules, "opendp", None)
    assert [privacy.pure_rho(e) for e in eps] == with_opendp


@pytest.mark.parametrize("rho, delta", [(0.5, 1e-6), (0.01, 1e-5), (3.0, 1e-9), (1e-6, 1e-6), (100.0, 1e-3)])
def test_zcdp_epsilon_without_opendp_never_below_opendps(monkeypatch, rho, delta):
    privacy.zcdp_epsilon.cache_clear()
    with_opendp = privacy.zcdp_epsilon(rho, delta)
    monkeypatch.setitem(sys.modules, "opendp", None)
    privacy.zcdp_epsilon.cache_clear()
    without = privacy.zcdp_epsilon(rho, delta)
    privacy.zcdp_epsilon.cache_clear()
    assert with_opendp <= without <= with_opendp * (1 + 2e-9)


def test_truth_discover_perturbed_on_the_base_install(monkeypatch):
    """The README promises a fallback sampler without the dp extra: a charged local-DP release works, with and
    without a seed, under both compositions."""
    monkeypatch.setitem(sys.modules, "opendp", None)
    privacy.zcdp_epsilon.cache_clear()
    answers = pd.DataFrame({"task": np.repeat(np.arange(20), 3), "worker": np.tile(["a", "b", "c"], 20),
                            "label": np.where(np.arange(60) % 4 == 0, "no", "yes")})
    with crowddb.connect(progress=False) as db:
        db.load_frame("answers", answers)
        db.set_privacy_budget("answers", epsilon=40, delta=1e-6, composition="zcdp")
        for seed in ("seed := 3, ", ""):
            rows = db.sql(f"SELECT * FROM TRUTH_DISCOVER(answers, object := 'task', source := 'worker', "
                          f"value := 'label', method := 'mv', perturb := 'rr', {seed}epsilon := 0.5)").fetchall()
            assert len(rows) == 20
        spent = db.sql("SELECT max(rho_spent) FROM crowddb_privacy_spent WHERE table_name = 'answers'").fetchall()[0][0]
        assert spent == pytest.approx(2 * 20 * 0.5**2 / 2)  # 2 releases x 20 answers per worker x rho(0.5)
    privacy.zcdp_epsilon.cache_clear()


def test_crowd_query_over_a_subquery_without_alias(db):
    """DuckDB names an unaliased FROM subquery itself; crowddb did not (it built ``""."rowid"``)."""
    named = db.sql("SELECT id, getposition(*, k := 5) AS job FROM (SELECT * FROM people WHERE age > 30) t "
                   "ORDER BY id").fetchall()
    unnamed = db.sql("SELECT id, getposition(*, k := 5) AS job FROM (SELECT * FROM people WHERE age > 30) "
                     "ORDER BY id").fetchall()
    assert unnamed == named and len(named) == db.sql("SELECT count(*) FROM people WHERE age > 30").fetchall()[0][0]
