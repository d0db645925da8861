"""The allow list, shape by shape: what lineage proves about each output column of a derived relation.

Each case names the columns it expects published raw, generalized (quasi-identifier) and withheld; anything the
engine cannot trace is withheld. Checked on the roles the planner hands the operators (``derived_roles``), so a
wrong verdict fails here before it can reach a HIT; tests/privacy/test_privacy_*.py check what workers actually saw.
"""

from __future__ import annotations

import pytest
import sqlglot
from conftest import people_frame

import crowddb
from crowddb.lineage import derived_roles


@pytest.fixture(scope="module")
def con():
    with crowddb.connect(seed=3, progress=False) as db:
        db.load_frame("people", people_frame(), quasi_identifiers=["age", "sex", "zip"], sensitive=["salary"],
                      ground_truth="job", key="id", core=["age", "sex", "zip", "hobby"])
        db.con.execute("CREATE TABLE offices AS SELECT * FROM (VALUES ('10001', 'north'), ('20001', 'south')) "
                       "t(zip, office)")  # no roles declared: published as it is
        db.sql("CREATE VIEW young AS SELECT id, age, sex, job, upper(job) AS shout, hobby FROM people WHERE age < 40")
        yield db.con


CASES = [
    # (query, raw, generalized, withheld)
    ("SELECT * FROM people", {"hobby"}, {"age", "sex", "zip"}, {"id", "job", "salary", "edu"}),
    ("SELECT id, age, upper(job), job || '' AS j2, salary + 0 FROM people", set(), {"age"},
     {"id", "upper(job)", "j2", "(salary + 0)"}),
    ("SELECT age + 0 AS a, id + 0 AS i, CASE WHEN job = 'clerk' THEN 1 ELSE 0 END AS c FROM people", set(), {"a"},
     {"i", "c"}),
    ("SELECT job, job FROM people", set(), set(), {"job", "job_1"}),
    ("SELECT * RENAME (job AS j2) FROM people", {"hobby"}, {"age", "sex", "zip"}, {"id", "j2", "salary", "edu"}),
    ("SELECT * EXCLUDE (salary) REPLACE (lower(hobby) AS hobby) FROM people", {"hobby"}, {"age", "sex", "zip"},
     {"id", "job", "edu"}),
    ("SELECT COLUMNS('jo.*') AS oc, hobby FROM people", set(), set(), {"oc", "hobby"}),
    ("SELECT * FROM (UNPIVOT people ON job, hobby INTO NAME n VALUE val)", set(), set(),
     {"id", "age", "sex", "zip", "edu", "salary", "n", "val"}),
    ("WITH y AS (SELECT * FROM people WHERE age < 40) SELECT * FROM y", {"hobby"}, {"age", "sex", "zip"},
     {"id", "job", "salary", "edu"}),
    ("SELECT hobby FROM people UNION ALL SELECT job FROM people", set(), set(), {"hobby"}),
    ("SELECT age FROM people UNION ALL SELECT 40", set(), {"age"}, set()),
    ("SELECT (SELECT max(job) FROM people) AS s, hobby FROM people", {"hobby"}, set(), {"s"}),
    ("SELECT count(*) OVER (PARTITION BY job) AS c, hobby FROM people", {"hobby"}, set(), {"c"}),
    ("SELECT {'a': job} AS s, 7 AS seven FROM people", {"seven"}, set(), {"s"}),
    ("SELECT t.s.a FROM (SELECT {'a': job} AS s FROM people) t", set(), set(), {"a"}),
    ("SELECT * FROM young", {"hobby"}, {"age", "sex"}, {"id", "job", "shout"}),
    ("SELECT o.zip AS z, o.office FROM people p JOIN offices o ON o.zip = p.zip", {"office"}, {"z"}, set()),
    ("SELECT o.zip AS z FROM people p, offices o WHERE p.zip = lower(o.zip)", set(), {"z"}, set()),
    ("SELECT o.office AS x FROM people p JOIN offices o ON o.office = p.job", set(), set(), {"x"}),
    ("SELECT z FROM (SELECT o.zip AS z FROM offices o) s JOIN people p ON s.z = p.zip", set(), {"z"}, set()),
    ("SELECT office, zip FROM offices", {"office", "zip"}, set(), set()),  # reads no table with roles
]


def output_columns(con, query: str) -> list[str]:
    """The columns of ``query`` as the planner's materialized input names them (DuckDB renames duplicates)."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE shape AS {query} LIMIT 0")
    return [d[0] for d in con.execute("SELECT * FROM shape").description]


@pytest.mark.parametrize("query, raw, generalized, withheld", CASES, ids=[c[0][:60] for c in CASES])
def test_each_output_column_gets_the_verdict_lineage_proves(con, query, raw, generalized, withheld):
    columns = output_columns(con, query)
    roles = derived_roles(con, sqlglot.parse_one(query, read="duckdb"), columns)
    assert set(columns) == raw | generalized | withheld  # every output column has exactly one verdict
    hidden = set(roles.protected)
    assert hidden == withheld
    assert set(roles.quasi_identifiers) == generalized
    published_as_is = set(roles.core or [c for c in columns if c not in hidden]) - generalized
    assert published_as_is == raw if roles.core or hidden or generalized else raw == set(columns)


def test_the_truth_and_key_stay_marked_through_unchanged_copies(con):
    query = "SELECT pid, j FROM (SELECT id AS pid, job AS j FROM people) s"
    roles = derived_roles(con, sqlglot.parse_one(query, read="duckdb"), ["pid", "j"])
    assert (roles.key, roles.ground_truth) == ("pid", "j")
    query = "SELECT id + 1 AS pid, upper(job) AS j FROM people"
    roles = derived_roles(con, sqlglot.parse_one(query, read="duckdb"), ["pid", "j"])
    assert (roles.key, roles.ground_truth, set(roles.sensitive)) == (None, None, {"pid", "j"})


def test_a_quasi_identifiers_kind_follows_a_copy_not_an_expression(con):
    con.execute("UPDATE crowddb_columns SET kind = 'numeric' WHERE table_name = 'people' AND column_name = 'age'")
    try:
        query = "SELECT age AS a, age + 1 AS b FROM people"
        roles = derived_roles(con, sqlglot.parse_one(query, read="duckdb"), ["a", "b"])
        assert roles.kinds == {"a": "numeric"} and set(roles.quasi_identifiers) == {"a", "b"}
    finally:
        con.execute("UPDATE crowddb_columns SET kind = NULL WHERE table_name = 'people' AND column_name = 'age'")


def test_withheld_columns_say_why(con):
    query = "SELECT id, upper(job) AS u, edu, COLUMNS('sal.*') FROM people"
    columns = output_columns(con, query)
    roles = derived_roles(con, sqlglot.parse_one(query, read="duckdb"), columns)
    assert set(roles.withheld.values()) == {"its lineage cannot be established"}  # COLUMNS(): nothing traced
    query = "SELECT id, upper(job) AS u, edu FROM people"
    roles = derived_roles(con, sqlglot.parse_one(query, read="duckdb"), ["id", "u", "edu"])
    assert roles.withheld == {"id": "key people.id", "u": "ground truth people.job",
                              "edu": "people.edu is not declared core"}


def test_an_update_carries_the_roles_of_what_it_copies_into_a_table():
    with crowddb.connect(seed=3, progress=False) as db:
        db.load_frame("people", people_frame(), quasi_identifiers=["age", "sex", "zip"], sensitive=["salary"],
                      ground_truth="job", key="id")
        db.load_frame("notes", people_frame()[["id"]].rename(columns={"id": "pid"}).assign(note="-", n=0))
        assert db.roles("notes") == crowddb.store.TableRoles("notes")  # nothing declared yet
        db.sql("UPDATE notes AS x SET note = p.job, n = p.age FROM people p WHERE x.pid = p.id")
        roles = db.roles("notes")
        assert (roles.ground_truth, roles.quasi_identifiers) == ("note", ("n",))
        db.sql("UPDATE people SET hobby = upper(job)")  # a core-less column now holds the truth: never published
        assert "hobby" in db.roles("people").sensitive
        db.sql("UPDATE people SET edu = edu + 1")  # from itself, unprotected: nothing changes
        assert "edu" not in db.roles("people").protected
        db.sql("SELECT getposition(*) FROM people").fetchall()
        shown = db.sql("SELECT content FROM crowddb_hit_items").fetchall()
        assert shown and not any('"hobby"' in c for (c,) in shown)


@pytest.mark.parametrize("source", ["query('SELECT * FROM people')", "tm()", "'{path}'"])
def test_a_source_whose_lineage_cannot_be_followed_is_withheld_while_roles_exist(tmp_path, source):
    with crowddb.connect(seed=3, progress=False) as db:
        db.load_frame("people", people_frame(), quasi_identifiers=["age", "sex", "zip"], sensitive=["salary"],
                      ground_truth="job", key="id")
        db.sql("CREATE MACRO tm() AS TABLE SELECT * FROM people")
        db.con.execute(f"COPY people TO '{tmp_path / 'copy.csv'}'")  # through db.con: a file no role follows
        query = f"SELECT getposition(*, domain := ['a', 'b']) FROM (SELECT * FROM {source}) s"
        with pytest.raises(crowddb.errors.PrivacyError, match="nothing to publish.*whose lineage crowddb cannot"):
            db.explain(query.format(path=tmp_path / "copy.csv"))
    with crowddb.connect(seed=3, progress=False) as db:  # no role declared anywhere: nothing to protect
        db.load_frame("people", people_frame())
        db.sql("CREATE MACRO tm() AS TABLE SELECT * FROM people")
        plan = db.explain(query.format(path=tmp_path / "copy.csv").replace("'a', 'b'", "'x', 'y'"))
        assert plan.operators[0].items == 60 and set(plan.operators[0].withheld) <= {"id"}
