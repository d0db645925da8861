"""DuckDB's conventions through crowddb: replacement scans (pandas, Arrow and Polars objects in the caller's scope) in
plain and crowd queries, and wrapping a DuckDB connection the user opened.

The reference for a plain query is DuckDB's own replacement scan (``duckdb.sql`` on a fresh connection, same frame);
for a crowd query, the same query over the object loaded as a table, and a majority vote counted by pandas."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import crowddb
from crowddb.errors import ArgumentError, CrowdDBError, UnknownColumnError
from crowddb.replacement import PREFIX

from conftest import RecordingCrowd, people_frame

ANSWERS = pd.DataFrame({"task": [1, 1, 1, 2, 2, 2, 3, 3, 3], "worker": [1, 2, 3] * 3,
                        "label": ["a", "a", "b", "b", "b", "a", "c", "a", "c"]})
GLOBAL_FRAME = pd.DataFrame({"x": [100, 200]})
VOTE = ("SELECT object, truth FROM TRUTH_DISCOVER({}, object := 'task', source := 'worker', value := 'label', "
        "method := 'mv') ORDER BY object")


def _frames():
    return {"pandas": ANSWERS, "arrow": pa.Table.from_pandas(ANSWERS), "polars": pl.from_pandas(ANSWERS),
            "polars_lazy": pl.from_pandas(ANSWERS).lazy()}


def _scan_views(con) -> list[str]:
    rows = con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
    return [r[0] for r in rows if r[0].startswith(PREFIX)]


@pytest.fixture
def db():
    with crowddb.connect(seed=1, progress=False) as con:
        yield con


@pytest.mark.parametrize("kind", list(_frames()))
def test_plain_query_reads_the_object_as_duckdb_does(db, kind):
    obj = _frames()[kind]  # noqa: F841 (read by name from the SQL)
    query = "SELECT label, count(*) AS n, sum(worker) AS w FROM obj WHERE task > 1 GROUP BY label ORDER BY label"
    expected = duckdb.connect().sql(query).fetchall()  # DuckDB's own replacement scan, from this frame
    assert expected == [("a", 2, 5), ("b", 2, 3), ("c", 2, 4)]
    assert db.sql(query).fetchall() == expected
    assert db.execute(query).fetchall() == expected
    assert db.execute("SELECT count(*) FROM obj WHERE task = ?", [2]).fetchall() == [(3,)]


def test_locals_before_globals_and_tables_before_objects(db):
    assert db.sql("SELECT sum(x) FROM GLOBAL_FRAME").fetchall() == [(300,)]
    GLOBAL_FRAME = pd.DataFrame({"x": [1]})  # noqa: N806, F841 (a local shadows the module's frame, as in DuckDB)
    assert db.sql("SELECT sum(x) FROM GLOBAL_FRAME").fetchall() == [(1,)]
    db.execute("CREATE TABLE answers AS SELECT 7 AS task").fetchall()
    answers = ANSWERS  # noqa: F841 (the table of the same name wins, as in DuckDB)
    assert db.sql("SELECT * FROM answers").fetchall() == [(7,)]
    with pytest.raises(UnknownColumnError):  # and the crowd path agrees: TRUTH_DISCOVER reads the table
        db.sql(VOTE.format("answers")).fetchall()


def test_relation_outlives_the_name(db):
    def make():
        gone = pd.DataFrame({"x": [1, 2, 3]})  # noqa: F841
        return db.sql("SELECT sum(x) FROM gone")
    relation = make()
    assert relation.fetchall() == [(6,)]
    assert relation.fetchall() == [(6,)]


@pytest.mark.parametrize("kind", list(_frames()))
def test_table_function_reads_the_object(db, kind):
    votes = _frames()[kind]  # noqa: F841
    # independent: the majority label per task counted by pandas (no ties in ANSWERS)
    expected = [(t, g.value_counts().idxmax()) for t, g in ANSWERS.groupby("task")["label"]]
    assert db.sql(VOTE.format("votes")).fetchall() == expected
    assert db.sql(VOTE.format("(SELECT * FROM votes WHERE task < 3)")).fetchall() == expected[:2]
    with_cte = "WITH v AS (SELECT * FROM votes) " + VOTE.format("v")
    assert db.sql(with_cte).fetchall() == expected
    db.load_frame("loaded", ANSWERS)
    assert db.sql(VOTE.format("loaded")).fetchall() == expected


def test_crowd_result_keeps_reading_the_object_and_registrations_end(db):
    def query():
        votes = ANSWERS.copy()  # noqa: F841 (gone when this function returns)
        return db.sql("SELECT t.object, t.truth, v.n FROM TRUTH_DISCOVER(votes, object := 'task', source := 'worker', "
                      "value := 'label', method := 'mv') AS t JOIN (SELECT task, count(*) AS n FROM votes GROUP BY "
                      "task) AS v ON v.task = t.object ORDER BY t.object")
    relation = query()
    assert relation.fetchall() == [(1, "a", 3), (2, "b", 3), (3, "c", 3)]
    assert len(_scan_views(db.con)) == 1  # kept while the relation may run again
    assert relation.fetchall() == [(1, "a", 3), (2, "b", 3), (3, "c", 3)]
    votes = ANSWERS  # noqa: F841
    for _ in range(4):  # the last 4 crowd queries' answers are kept; older ones (and their objects) are dropped
        db.sql(VOTE.format("votes")).fetchall()
    assert len(_scan_views(db.con)) == 4
    db.explain("SELECT * FROM ANONYMIZE(votes, k := 2, quasi_identifiers := ['worker'])")
    assert len(_scan_views(db.con)) == 4  # explain() unregisters what it registered


def test_our_own_names_are_never_scanned(db):
    """The caller's frame is the one read: crowddb's internal DataFrames (``frame``, ``answers``...) never are."""
    with pytest.raises(UnknownColumnError, match="no table, view or CTE named 'frame'"):
        db.sql(VOTE.format("frame"))
    with pytest.raises(duckdb.CatalogException):
        db.sql("SELECT * FROM result")
    assert _scan_views(db.con) == []


def test_object_in_a_human_operator_query_is_withheld_while_roles_exist():
    crowd = RecordingCrowd(qualities=np.ones(10), seed=1)
    # joined by education, not by the key: rows chosen by the key are refused (issue 24)
    picks = pd.DataFrame({"edu": [3, 5, 8], "note": ["SECRET-3", "SECRET-5", "SECRET-8"]})  # noqa: F841
    people = people_frame()
    with crowddb.connect(platform=crowd, seed=3, progress=False) as db:
        db.load_frame("people", people, sensitive=["salary"], ground_truth="job", key="id")
        plan = db.explain("SELECT p.id, getposition(*) AS job FROM people p JOIN picks USING (edu)")
        assert "picks" in plan.operators[0].withheld.get("note", "")
        got = db.sql("SELECT p.id, getposition(*) AS job FROM people p JOIN picks USING (edu) ORDER BY p.id"
                     ).fetchall()
    chosen = people[people["edu"].isin([3, 5, 8])]
    assert len(chosen) > 0 and got == list(zip(chosen["id"], chosen["job"]))  # a perfect crowd
    published = pd.concat(crowd.published)
    assert not published.astype(str).apply(lambda c: c.str.contains("SECRET")).any().any()
    assert "note" not in published.columns


def test_object_without_any_roles_is_published_like_an_undeclared_table(db):
    people = people_frame(6)  # noqa: F841
    plan = db.explain("SELECT getposition(*, domain := ['teacher', 'driver', 'clerk']) FROM people")
    assert set(plan.operators[0].withheld) == {"id"}  # only the key, as for a table without declared roles
    assert plan.hits == 1


# ------------------------------------------------------------------------------------------ wrapping a connection
def test_wrap_an_open_connection_and_leave_it_open():
    con = duckdb.connect()
    con.execute("ATTACH ':memory:' AS other")
    con.execute("CREATE TABLE other.votes AS SELECT * FROM ANSWERS")
    con.execute("SET threads = 1")
    registered = pd.DataFrame({"x": [5]})
    con.register("registered_view", registered)
    db = crowddb.connect(con, seed=1, progress=False)
    assert db.con is con and db.database == ":memory:"
    assert db.sql("SELECT current_setting('threads'), (SELECT x FROM registered_view)").fetchall() == [(1, 5)]
    expected = [(1, "a"), (2, "b"), (3, "c")]
    assert db.sql(VOTE.format("(SELECT * FROM other.votes)")).fetchall() == expected
    db.close()
    db.close()  # idempotent
    assert con.execute("SELECT count(*) FROM other.votes").fetchall() == [(9,)]  # still open, still attached
    temps = con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()
    assert temps == []  # what crowddb made for its answers is gone
    db = crowddb.connect(con, seed=1, progress=False)
    con.execute("CREATE TABLE kept AS SELECT 1 AS id, 'a' AS label").fetchall()
    db.declare_roles("kept", sensitive=["label"])
    db.close()
    with crowddb.connect(con, seed=1, progress=False) as again:  # a second wrap sees the same catalog
        assert again.roles("kept").sensitive == ("label",)
    assert con.execute("SELECT 1").fetchall() == [(1,)]
    con.close()


def test_wrap_refuses_what_only_opening_sets():
    con = duckdb.connect()
    with pytest.raises(ArgumentError, match="read_only and config apply when crowddb opens the database"):
        crowddb.connect(con, read_only=True)
    with pytest.raises(ArgumentError, match="read_only and config apply"):
        crowddb.connect(con, config={"threads": 1})
    con.close()
    with pytest.raises(CrowdDBError, match="cannot use the DuckDB connection given to connect"):
        crowddb.connect(con)
    with pytest.raises(ArgumentError, match="an open duckdb connection"):
        crowddb.connect(42)
