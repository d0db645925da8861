"""Column roles: declared from Python and from SQL, persisted in the file, validated, and enforced in HITs."""

from __future__ import annotations

import json

import duckdb
import pytest
from conftest import people_frame

import crowddb
from crowddb.errors import ArgumentError, PrivacyError, UnknownColumnError


def test_roles_from_python_persist_across_reopen(tmp_path, perfect_crowd):
    path = tmp_path / "roles.duckdb"
    with crowddb.connect(path, platform=perfect_crowd) as db:
        db.load_frame("people", people_frame(), quasi_identifiers=["age", "sex"], sensitive=["salary"],
                      core=["age", "sex", "edu"], ground_truth="job", key="id", kinds={"age": "numeric"})
    with crowddb.connect(path, platform=perfect_crowd) as db:
        roles = db.roles("PEOPLE")
        assert roles.quasi_identifiers == ("age", "sex")
        assert roles.kinds["age"] == "numeric"
        assert roles.sensitive == ("salary",)
        assert roles.core == ("age", "sex", "edu")
        assert (roles.ground_truth, roles.key) == ("job", "id")
        assert roles.protected == {"salary", "job", "id"}


def test_roles_from_sql_are_used_by_operators(open_db):
    open_db.sql("DELETE FROM crowddb_columns WHERE table_name = 'people'")
    open_db.sql("INSERT INTO crowddb_columns VALUES ('people', 'job', 'ground_truth', NULL), "
                "('people', 'salary', 'sensitive', NULL), ('people', 'hobby', 'sensitive', NULL)")
    roles = open_db.roles("people")
    assert roles.ground_truth == "job" and set(roles.sensitive) == {"salary", "hobby"}
    open_db.sql("SELECT id, getposition(*) FROM people").fetchall()
    content = [json.loads(c) for (c,) in open_db.sql("SELECT content FROM crowddb_hit_items").fetchall()]
    assert content and all("hobby" not in c and "salary" not in c and "job" not in c for c in content)


def test_sql_catalog_rejects_unknown_role(open_db):
    with pytest.raises(duckdb.ConstraintException):  # plain SQL: DuckDB's own error, untouched
        open_db.execute("INSERT INTO crowddb_columns VALUES ('people', 'age', 'secret', NULL)")


def test_role_declaration_errors(db):
    with pytest.raises(UnknownColumnError, match="nope"):
        db.declare_roles("people", quasi_identifiers=["nope"])
    with pytest.raises(UnknownColumnError, match="no table"):
        db.declare_roles("ghosts", sensitive=["x"])
    with pytest.raises(PrivacyError, match="both"):
        db.declare_roles("people", quasi_identifiers=["age"], sensitive=["age"])
    with pytest.raises(PrivacyError, match="both"):
        db.declare_roles("people", core=["salary"], sensitive=["salary"])
    assert db.roles("people").quasi_identifiers == ("age", "sex", "zip")  # nothing half-written


def test_failed_load_leaves_nothing(db, tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("a,b\n1,2\n")
    with pytest.raises(UnknownColumnError):
        db.load_csv("t", csv, quasi_identifiers=["zz"])
    assert db.sql("SELECT count(*) FROM duckdb_tables() WHERE table_name = 't'").fetchall() == [(0,)]
    db.load_csv("t", csv, quasi_identifiers=["a"])
    assert db.sql("SELECT * FROM t").fetchall() == [(1, 2)]


def test_core_columns_are_what_star_publishes(perfect_crowd):
    with crowddb.connect(platform=perfect_crowd, progress=False) as db:
        db.load_frame("people", people_frame(), core=["edu", "hobby"], sensitive=["salary"], ground_truth="job")
        db.sql("SELECT getposition(*) FROM people").fetchall()
        keys = {tuple(json.loads(c)) for (c,) in db.sql("SELECT content FROM crowddb_hit_items").fetchall()}
        assert keys == {("edu", "hobby")}


def test_protected_columns_never_published_even_when_named(db):
    for column in ("salary", "job", "id"):
        with pytest.raises(PrivacyError, match=column):
            db.sql(f"SELECT getposition({column}) FROM people")
    assert db.sql("SELECT count(*) FROM crowddb_hits").fetchall() == [(0,)]


def test_roles_follow_columns_through_ctes_views_and_aliases(open_db):
    open_db.sql("CREATE VIEW v AS SELECT id, age, edu, salary AS pay, job FROM people")
    open_db.sql("WITH c AS (SELECT age, edu, salary AS s2, job AS j FROM people) SELECT getposition(*) FROM c")
    open_db.sql("SELECT getposition(*) FROM v").fetchall()
    open_db.sql("SELECT getposition(*) FROM (SELECT age, salary * 2 AS doubled, job FROM people) t").fetchall()
    for (content,) in open_db.sql("SELECT content FROM crowddb_hit_items").fetchall():
        keys = set(json.loads(content))
        assert not keys & {"salary", "pay", "s2", "j", "job", "doubled", "id"}, keys


def test_a_numeric_quasi_identifier_with_text_is_refused_at_declaration(tmp_path):
    path = tmp_path / "people.csv"
    path.write_text("id,age,job\n1,34,clerk\n2,abc,clerk\n3,,teacher\n")
    with crowddb.connect(progress=False) as db:
        with pytest.raises(ArgumentError, match="'age' of 'people' is declared numeric but holds non-numeric value "
                                                "'abc'"):
            db.load_csv("people", path, quasi_identifiers=["age"], kinds={"age": "numeric"}, ground_truth="job")
        assert db.sql("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'people'").fetchall() == [(0,)]
        path.write_text("id,age,job\n1,34,clerk\n2,,clerk\n3,51,teacher\n")  # NULLs are not text
        db.load_csv("people", path, quasi_identifiers=["age"], kinds={"age": "numeric"}, ground_truth="job")
