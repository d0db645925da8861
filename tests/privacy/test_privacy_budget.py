"""The epsilon budget of issue 15 (point 3, and the epsilon half of point 4): a budget per table and protected unit
(a source), set from Python and SQL and persisted; every DP release's charge declared and checked before any noise is
drawn and written with the release; sequential and zCDP composition; the privacy report; the ledger refused to plain
SQL and hash-chained. Expected figures are computed here by hand (sums, the formulas cited in crowddb/store/privacy.py
and crowddb/synth/accounting.py), never read back from crowddb."""

from __future__ import annotations

import importlib
import math

import duckdb
import pandas as pd
import pytest
from scipy.optimize import minimize_scalar

import crowddb
import crowddb.synth.api as synth_api
from crowddb.errors import ArgumentError, PrivacyBudgetError, PrivacyError

discover_module = importlib.import_module("crowddb.truth.discover")  # (crowddb.truth.discover is also a function)

# sources with 3, 2 and 1 answers: their charges differ
ANSWERS = pd.DataFrame({"object": [1, 1, 1, 2, 2, 3], "source": ["a", "b", "c", "a", "b", "a"],
                        "value": [1.0, 2.0, 1.5, 3.0, 3.5, 2.0]})
N_ANSWERS = {"a": 3, "b": 2, "c": 1}


def _td(epsilon: float, perturb: str = "laplace", delta: float | None = None, table: str = "answers") -> str:
    extra = f", delta := {delta!r}" if delta is not None else ""
    return (f"SELECT * FROM TRUTH_DISCOVER({table}, object := 'object', source := 'source', value := 'value', "
            f"perturb := '{perturb}', epsilon := {epsilon!r}{extra}, seed := 3)")


@pytest.fixture
def db():
    con = crowddb.connect(seed=1)
    con.load_frame("answers", ANSWERS)
    yield con
    con.close()


def _catalog(db) -> dict[str, list]:
    """Every crowddb_* table's rows (sorted as text): the database's state as crowddb keeps it."""
    names = [r[0] for r in db.con.execute("SELECT table_name FROM duckdb_tables() WHERE table_name LIKE 'crowddb_%' "
                                          "ORDER BY 1").fetchall()]
    return {n: sorted(map(str, db.con.execute(f"SELECT * FROM {n}").fetchall())) for n in names}


def _charges(db) -> list[tuple]:
    return db.con.execute("SELECT release_id, unit_id, epsilon, delta FROM crowddb_privacy_ledger "
                          "WHERE act = 'charge' ORDER BY seq").fetchall()


def _spy_sampler(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = discover_module.make_sampler

    def spy(seed):
        calls.append(seed)
        return real(seed)
    monkeypatch.setattr(discover_module, "make_sampler", spy)
    return calls


# ------------------------------------------------------------------------------------------ refusal
def test_refusal_draws_no_noise_changes_nothing_and_burns_nothing(db, monkeypatch):
    db.set_privacy_budget("answers", epsilon=2.0)
    calls = _spy_sampler(monkeypatch)
    db.sql(_td(0.5)).fetchall()  # source a: 3 answers x 0.5 = 1.5 of 2
    assert len(calls) == 1
    before = _catalog(db)
    with pytest.raises(PrivacyBudgetError) as refused:
        db.sql(_td(0.25)).fetchall()  # a would reach 1.5 + 0.75 = 2.25 > 2
    assert len(calls) == 1  # the sampler was never made: no noise drawn
    assert _catalog(db) == before  # not one crowddb_* row changed
    message = str(refused.value)
    assert ("source 'a' has spent epsilon=1.5, delta=0, this release asks epsilon=0.75, delta=0, epsilon=0.5, "
            "delta=0 is left (1 of 3 sources would overspend). Nothing was released or charged.") in message
    assert "db.reset_privacy_budget('answers')" in message
    # a refusal burns nothing: a request that fits (a: 3 x 1/6 = 0.5, exactly what is left) succeeds
    db.sql(_td(1 / 6)).fetchall()
    assert len(calls) == 2
    assert _charges(db) == [(1, "a", 1.5, 0.0), (1, "b", 1.0, 0.0), (1, "c", 0.5, 0.0),
                            (2, "a", 3 * (1 / 6), 0.0), (2, "b", 2 * (1 / 6), 0.0), (2, "c", 1 / 6, 0.0)]


def test_refusal_of_private_synth_draws_nothing(db, monkeypatch):
    db.set_privacy_budget("answers", epsilon=1.0)
    calls: list[int] = []
    monkeypatch.setattr(synth_api, "release_batch", lambda *a, **k: calls.append(1))
    before = _catalog(db)
    with pytest.raises(PrivacyBudgetError, match="PRIVATE_SYNTH would overspend the privacy budget of 'answers'"):
        db.sql("SELECT * FROM PRIVATE_SYNTH(answers, object := 'object', source := 'source', value := 'value', "
               "m := 2, k := 2, max_attempts := 3, seed := 1)").fetchall()
    assert calls == []
    assert _catalog(db) == before


# ------------------------------------------------------------------------------------- persistence
def test_budget_and_spending_survive_reopening(tmp_path):
    path = tmp_path / "db.duckdb"
    with crowddb.connect(path, seed=1) as db:
        db.load_frame("answers", ANSWERS)
        db.set_privacy_budget("answers", epsilon=2.0)
        db.sql(_td(0.5)).fetchall()
    with crowddb.connect(path, seed=1) as db:
        spent = db.sql("SELECT unit_id, epsilon_spent, epsilon_left FROM crowddb_privacy_spent ORDER BY unit_id"
                       ).fetchall()
        assert spent == [("a", 1.5, 0.5), ("b", 1.0, 1.0), ("c", 0.5, 1.5)]
        with pytest.raises(PrivacyBudgetError, match="source 'a' has spent epsilon=1.5"):
            db.sql(_td(0.25)).fetchall()
        db.sql(_td(0.1)).fetchall()
        assert db.privacy_report("answers")["epsilon_spent"].tolist() == [1.5, 1.5 + 3 * 0.1]


# -------------------------------------------------------------------------------------- composition
def test_sequential_composition_per_worker(db):
    db.sql(_td(0.5)).fetchall()  # no budget: charged and reported all the same
    db.sql(_td(0.25)).fetchall()
    spent = dict(db.sql("SELECT unit_id, epsilon_spent FROM crowddb_privacy_spent").fetchall())
    # each answer of a worker perturbed twice counts twice; workers with more answers spend more
    assert spent == {u: n * 0.5 + n * 0.25 for u, n in N_ANSWERS.items()}
    report = db.privacy_report("answers")
    assert report["release_id"].tolist() == [1, 2]
    assert report["epsilon"].tolist() == [1.5, 0.75]  # the largest charge to one source: a's 3 answers
    assert report["epsilon_spent"].tolist() == [1.5, 2.25]
    assert report["rho"].tolist() == [3 * 0.5**2 / 2, 3 * 0.25**2 / 2]  # pure DP: rho = epsilon^2 / 2 per answer
    assert report["rho_spent"].tolist() == [3 * 0.5**2 / 2, 3 * 0.5**2 / 2 + 3 * 0.25**2 / 2]
    assert report["budget_epsilon"].isna().all() and report["smallest_joint_class"].isna().all()


def _cks_epsilon(rho: float, delta: float) -> float:
    """Canonne, Kamath & Steinke 2020, Proposition 12, minimized numerically here."""
    def f(a: float) -> float:
        return rho * a + (math.log(1 / delta) + (a - 1) * math.log(1 - 1 / a) - math.log(a)) / (a - 1)
    return minimize_scalar(f, bounds=(1 + 1e-9, 1e5), method="bounded", options={"xatol": 1e-12}).fun


def test_zcdp_for_gaussian_releases(db):
    db.set_privacy_budget("answers", epsilon=10.0, delta=1e-5, composition="zcdp")
    db.sql(_td(0.5, perturb="gaussian", delta=1e-5)).fetchall()
    db.sql(_td(0.8, perturb="gaussian", delta=1e-5)).fetchall()
    rho_i = [e * e / (4 * math.log(1.25 / 1e-5)) for e in (0.5, 0.8)]  # Dwork & Roth A.1 + Bun & Steinke 1.6
    report = db.privacy_report("answers")
    rho_a = 3 * rho_i[0] + 3 * rho_i[1]  # zCDP: rho = sum of rho_i (a has 3 answers)
    assert report["rho_spent"].iloc[1] == pytest.approx(rho_a, rel=1e-12)
    assert report["epsilon_zcdp"].iloc[1] == pytest.approx(_cks_epsilon(rho_a, 1e-5), rel=1e-7)
    assert report["epsilon_spent"].iloc[1] == 3 * 0.5 + 3 * 0.8  # the sequential total, shown both ways
    assert report["delta_spent"].iloc[1] == pytest.approx(6 * 1e-5, rel=1e-12)
    assert report["epsilon_left"].iloc[1] == pytest.approx(10.0 - _cks_epsilon(rho_a, 1e-5), rel=1e-7)
    # summed sequentially, delta (6e-5) is already over the budget's 1e-5: zCDP is the tighter account. It refuses
    # when the converted epsilon would pass 10: a's rho would become rho_a + 3 rho(8.0)
    rho_more = rho_a + 3 * 8.0**2 / (4 * math.log(1.25 / 1e-5))
    assert _cks_epsilon(rho_more, 1e-5) > 10.0
    with pytest.raises(PrivacyBudgetError, match=r"zcdp composition\): source 'a' has spent rho="):
        db.sql(_td(8.0, perturb="gaussian", delta=1e-5)).fetchall()


def test_zcdp_budget_refuses_releases_without_rho(db):
    db.set_privacy_budget("answers", epsilon=1e6, delta=1e-6, composition="zcdp")
    with pytest.raises(PrivacyBudgetError, match="composes in zCDP, but this release has no rho"):
        db.sql("SELECT * FROM PRIVATE_SYNTH(answers, object := 'object', source := 'source', value := 'value', "
               "m := 2, k := 2, max_attempts := 3, seed := 1)").fetchall()
    with pytest.raises(ArgumentError, match="pass delta > 0"):
        db.set_privacy_budget("answers", epsilon=1.0, composition="zcdp")


def test_private_synth_charge_is_the_theorem2_worst_case(db):
    db.sql("SELECT * FROM PRIVATE_SYNTH(answers, object := 'object', source := 'source', value := 'value', "
           "m := 2, k := 2, max_attempts := 3, seed := 1)").fetchall()
    # Theorem 2 per candidate at t = 1 with max c / min c <= 1 / weight_floor = 10 and max c <= 1
    eps1 = 1.0 + math.log1p(4.0 / 1 * 10)
    figures = {}
    for obj, n in ((1, 3), (2, 2)):  # object 3 has 1 < k claims: withheld, free
        d1 = n * math.exp(-1.0 * (2 - 1))
        basic = (3 * eps1, 3 * d1)
        advanced = (math.sqrt(2 * 3 * math.log(1 / 1e-6)) * eps1 + 3 * eps1 * math.expm1(eps1), 3 * d1 + 1e-6)
        figures[obj] = advanced if advanced[0] < basic[0] else basic
    expected = {"a": (figures[1][0] + figures[2][0], figures[1][1] + figures[2][1]),
                "b": (figures[1][0] + figures[2][0], figures[1][1] + figures[2][1]),
                "c": figures[1]}
    got = {u: (e, d) for _, u, e, d in _charges(db)}
    assert got.keys() == expected.keys()
    for u, figure in expected.items():
        assert got[u] == pytest.approx(figure, rel=1e-12)
    row = db.con.execute("SELECT kind FROM crowddb_releases r JOIN crowddb_privacy_ledger l USING (release_id)"
                         ).fetchall()
    assert {r[0] for r in row} == {"synthesis"}


# ------------------------------------------------------------------------------------------- explain
def test_explain_shows_the_charge_and_records_nothing(db):
    db.set_privacy_budget("answers", epsilon=2.0)
    before = _catalog(db)
    plan = db.explain(_td(0.5))
    charge = plan.reports[0]["privacy_charge"][0]
    assert (charge["epsilon_max"], charge["units"], charge["epsilon_left"]) == (1.5, 3, 0.5)
    assert "charge on answers: up to epsilon=1.5, delta=0 per source (3 sources); left after it: epsilon=0.5" \
        in str(plan)
    refused = db.explain(_td(1.0)).reports[0]["privacy_charge"][0]
    assert refused["refused"].startswith("TRUTH_DISCOVER would overspend")
    assert _catalog(db) == before


# ------------------------------------------------------------------------------------ SQL and Python
def _acts(db) -> list[tuple]:
    return db.con.execute("SELECT act, table_name, unit, epsilon, delta, composition FROM crowddb_privacy_ledger "
                          "WHERE act <> 'charge' ORDER BY seq").fetchall()


def test_sql_and_python_set_the_same_budget():
    a, b = crowddb.connect(), crowddb.connect()
    for con in (a, b):
        con.load_frame("answers", ANSWERS)
    a.set_privacy_budget("answers", epsilon=5, delta=1e-6, composition="zcdp")
    a.reset_privacy_budget("answers")
    assert b.sql("SELECT * FROM PRIVACY_BUDGET(answers, epsilon := 5, delta := 1e-6, composition := 'zcdp')"
                 ).fetchall() == [("budget", "source", 5.0, 1e-6, "zcdp")]
    b.sql("SELECT * FROM PRIVACY_BUDGET(Answers, reset := true)").fetchall()
    assert _acts(a) == _acts(b) == [("budget", "answers", "source", 5.0, 1e-6, "zcdp"),
                                    ("reset", "answers", "source", None, None, None)]
    with pytest.raises(ArgumentError, match="either epsilon := ... .set the budget. or reset := true"):
        b.sql("SELECT * FROM PRIVACY_BUDGET(answers)").fetchall()
    with pytest.raises(ArgumentError, match="unknown protected unit 'row'"):
        a.set_privacy_budget("answers", epsilon=1, unit="row")
    before = _acts(b)
    b.explain("SELECT * FROM PRIVACY_BUDGET(answers, epsilon := 1)")
    assert _acts(b) == before


def test_reset_is_a_logged_act(db):
    db.set_privacy_budget("answers", epsilon=1.5)
    db.sql(_td(0.5)).fetchall()
    with pytest.raises(PrivacyBudgetError):
        db.sql(_td(0.5)).fetchall()
    db.reset_privacy_budget("answers")
    db.sql(_td(0.5)).fetchall()
    report = db.privacy_report("answers")
    assert report["after_reset"].tolist() == [False, True]
    assert report["epsilon_spent"].tolist() == [1.5, 1.5]  # spending restarted at the reset
    assert [a for a, *_ in _acts(db)] == ["budget", "reset"]


# ------------------------------------------------------------------------------------- tamper-evidence
@pytest.mark.parametrize("statement", [
    ("INSERT INTO crowddb_privacy_ledger (seq, act, table_name, unit, prev_hash, hash) VALUES (9, 'reset', "
     "'answers', 'source', '', '')"),
    "UPDATE crowddb_privacy_ledger SET epsilon = 100",
    "DELETE FROM crowddb_privacy_ledger",
    "DROP TABLE crowddb_privacy_ledger",
    "CREATE OR REPLACE VIEW crowddb_privacy_spent AS SELECT 1",
    "BEGIN; DELETE FROM CROWDDB_PRIVACY_LEDGER WHERE act = 'charge'; COMMIT",
])
def test_plain_sql_cannot_write_the_ledger(db, statement):
    db.set_privacy_budget("answers", epsilon=2.0)
    before = _catalog(db)
    for run in (db.sql, db.execute):
        with pytest.raises(PrivacyBudgetError, match=r"written only by crowddb: set a budget with "
                                                     r"db.set_privacy_budget"):
            run(statement)
    assert _catalog(db) == before
    assert db.sql("SELECT count(*) FROM crowddb_privacy_ledger").fetchall() == [(1,)]  # reading is fine


def test_an_edit_through_a_raw_connection_is_visible(db):
    db.set_privacy_budget("answers", epsilon=2.0)
    db.sql(_td(0.5)).fetchall()
    assert len(db.privacy_report("answers")) == 1
    raw: duckdb.DuckDBPyConnection = db.con
    raw.execute("UPDATE crowddb_privacy_ledger SET epsilon = 0.0 WHERE unit_id = 'a'").fetchall()
    with pytest.raises(PrivacyBudgetError, match="changed outside crowddb at seq 2"):
        db.privacy_report("answers")


def test_a_deleted_ledger_row_is_visible(db):
    db.sql(_td(0.5)).fetchall()
    db.con.execute("DELETE FROM crowddb_privacy_ledger WHERE seq = 1").fetchall()
    with pytest.raises(PrivacyBudgetError, match="seq 2 .row 1."):
        db.privacy_report("answers")


def test_truth_discover_without_perturb_is_not_charged(db):
    db.set_privacy_budget("answers", epsilon=0.1)
    db.sql("SELECT * FROM TRUTH_DISCOVER(answers, object := 'object', source := 'source', value := 'value')"
           ).fetchall()
    assert _charges(db) == []
    assert len(db.privacy_report("answers")) == 0
    with pytest.raises(PrivacyError):
        db.sql("SELECT * FROM TRUTH_DISCOVER(answers, object := 'object', source := 'source', value := 'value', "
               "epsilon := 1)").fetchall()


def test_a_view_or_subquery_is_charged_to_its_table(db):
    db.sql("CREATE VIEW some_answers AS SELECT * FROM answers WHERE source <> 'c'")
    db.set_privacy_budget("answers", epsilon=2.0)
    db.sql(_td(0.5, table="some_answers")).fetchall()
    db.sql(_td(0.25, table="(SELECT * FROM answers WHERE source = 'c')")).fetchall()
    assert _charges(db) == [(1, "a", 1.5, 0.0), (1, "b", 1.0, 0.0), (2, "c", 0.25, 0.0)]
    with pytest.raises(ArgumentError, match="'some_answers' is a view: set the privacy budget on the table"):
        db.set_privacy_budget("some_answers", epsilon=1.0)
    with pytest.raises(PrivacyBudgetError, match="source 'a' has spent epsilon=1.5"):
        db.sql(_td(0.2, table="some_answers")).fetchall()


def test_privacy_budget_reads_no_row_of_its_table(db, snapshots):
    db.sql("SELECT * FROM PRIVACY_BUDGET(answers, epsilon := 2)").fetchall()
    assert [t.num_rows for t in snapshots] == [0]
