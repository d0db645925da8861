"""The planner plans a statement before it runs it: ``Planner.plan`` is the ordered list of steps (table functions and
SELECTs with their human calls, innermost first), built without running anything, so a query that cannot run as a
whole is refused before its first step publishes a HIT."""

from __future__ import annotations

import numpy as np
import pytest
import sqlglot

import crowddb
from crowddb.planner import Planner

from conftest import RecordingCrowd, people_frame


@pytest.fixture
def recorded():
    crowd = RecordingCrowd(qualities=np.ones(10), seed=1)
    with crowddb.connect(platform=crowd, seed=3, progress=False) as db:
        db.load_frame("people", people_frame(), quasi_identifiers=["age", "sex", "zip"], sensitive=["salary"],
                      ground_truth="job", key="id")
        yield db, crowd


def _plan(db, sql: str):
    planner = Planner(db.con, db.registry, db._state.context(sql))
    return planner.plan(sqlglot.parse_one(sql, read="duckdb"))


def test_steps_come_innermost_first_with_their_calls(recorded):
    db, crowd = recorded
    steps = _plan(db, "WITH a AS (SELECT * FROM ANONYMIZE(people, k := 5)) "
                      "SELECT p.age, getcandidate(*, 'teacher'), getposition(*) FROM people p "
                      "JOIN (SELECT age, getposition(*) AS g FROM people) q ON p.age = q.age GROUP BY p.age")
    assert [s.name for s in steps] == ["getposition", "getposition, getcandidate"]  # the CTE is never read
    assert [c.name for c in steps[1].calls] == ["getposition", "getcandidate"]  # tuple operators before group ones
    steps = _plan(db, "WITH a AS (SELECT * FROM ANONYMIZE(people, k := 5)) SELECT getposition(*) FROM a")
    assert [s.name for s in steps] == ["ANONYMIZE", "getposition"]
    assert crowd.published == []  # planning publishes nothing
    assert db.sql("SELECT count(*) FROM crowddb_hits").fetchall() == [(0,)]


def test_a_query_that_cannot_run_whole_is_refused_before_its_first_step(recorded):
    """The CTE's getposition would run (and pay) first if the statement were checked step by step."""
    db, crowd = recorded
    with pytest.raises(crowddb.errors.ArgumentError,
                       match=r"^getposition: crowd operators cannot be nested inside its arguments$"):
        db.sql("WITH a AS (SELECT age, sex, zip, getposition(*) AS g FROM people) "
               "SELECT getposition(getposition(*)) FROM a")
    assert crowd.published == []
    assert db.sql("SELECT count(*) FROM crowddb_hits").fetchall() == [(0,)]


def test_a_cte_nothing_reads_runs_no_operator(recorded):
    """DuckDB never evaluates a CTE nothing reads; its crowd operators publish and pay nothing either, also when the
    CTE is only read by another CTE nothing reads. A CTE read by a table function's input (a column argument) runs."""
    db, crowd = recorded
    got = db.sql("WITH a AS (SELECT getposition(*) AS g FROM people), b AS (SELECT * FROM a), "
                 "C AS (SELECT age FROM people) SELECT count(*) FROM c").fetchall()
    assert got == [(60,)]
    assert crowd.published == []
    assert db.sql("SELECT count(*) FROM crowddb_hits").fetchall() == [(0,)]
    steps = _plan(db, "WITH a AS (SELECT age, sex, zip, getposition(*) AS g FROM people) "
                      "SELECT * FROM ANONYMIZE(a, k := 5, quasi_identifiers := ['age'])")
    assert [s.name for s in steps] == ["getposition", "ANONYMIZE"]
    steps = _plan(db, "WITH a AS (SELECT getposition(*) AS g FROM people), b AS (SELECT * FROM A) "
                      "SELECT * FROM (WITH a AS (SELECT 1 AS g) SELECT * FROM a) x, b")
    assert [s.name for s in steps] == ["getposition"]  # the outer a, read through b (case ignored)
    steps = _plan(db, "WITH a AS (SELECT getposition(*) AS g FROM people) "
                      "SELECT * FROM (WITH a AS (SELECT 1 AS g) SELECT * FROM a) x")
    assert steps == []  # the inner a shadows the outer one


def test_table_functions_describe_their_release_and_the_executor_records_it(recorded):
    """A table function writes nothing: explain() runs it and records no release; a run records it once, and its
    report names the row."""
    db, _ = recorded
    db.explain("SELECT count(*) FROM ANONYMIZE(people, k := 5)")
    assert db.sql("SELECT count(*) FROM crowddb_releases").fetchall() == [(0,)]
    assert "release_id" not in db.last_plan.reports[0]
    db.sql("SELECT count(*) FROM ANONYMIZE(people, k := 5)").fetchall()
    rows = db.sql("SELECT release_id, kind, method, k FROM crowddb_releases").fetchall()
    assert rows == [(1, "anonymization", "mondrian", 5)]
    assert db.last_report[0]["release_id"] == 1 and db.last_report[0]["operator"] == "ANONYMIZE"


def test_explain_shows_the_plans_steps(recorded):
    db, _ = recorded
    plan = db.explain("SELECT getposition(*), (SELECT count(*) FROM ANONYMIZE(people, k := 5)) AS n FROM people")
    assert plan.steps == ["ANONYMIZE", "getposition"]
    assert str(plan).splitlines()[0] == "plan: 1. ANONYMIZE, 2. getposition"
    assert db.explain("SELECT 1").steps == []


def test_truth_discover_takes_only_its_three_columns_out_of_duckdb(recorded, snapshots):
    """TRUTH_DISCOVER and PRIVATE_SYNTH freeze only object, source and value; ANONYMIZE takes the whole input (its
    release carries every column); a misnamed column still gets the function's own error naming the input's columns."""
    db, _ = recorded
    db.execute("CREATE TABLE wide AS SELECT range % 20 AS o, range % 7 AS s, (range % 3)::VARCHAR AS v, "
               "range AS extra1, 'x' || range AS extra2 FROM range(140)").fetchall()
    got = db.sql("SELECT count(*) FROM TRUTH_DISCOVER(wide, object := 'o', source := 's', value := 'v', "
                 "method := 'mv')").fetchall()
    assert got == [(20,)] and [t.column_names for t in snapshots] == [["o", "s", "v"]]
    db.sql("SELECT count(*) FROM ANONYMIZE(wide, k := 5, quasi_identifiers := ['o'])").fetchall()
    # all its columns (the release keeps them), and each row's rowid for the privacy ledger (not a column of the input)
    assert snapshots[-1].column_names == ["o", "s", "v", "extra1", "extra2", "__crowd_row_ref"]
    with pytest.raises(crowddb.errors.UnknownColumnError,
                       match=r"^TRUTH_DISCOVER: value column 'nope' is not in the input \(columns: \['o', 's', 'v', "
                             r"'extra1', 'extra2'\]\)$"):
        db.sql("SELECT * FROM TRUTH_DISCOVER(wide, object := 'o', source := 's', value := 'nope')")

