"""Bad input gets a crowddb error that names the problem, and leaves the database as it was."""

from __future__ import annotations

import pytest

from crowddb.errors import (
    ArgumentError,
    CrowdDBError,
    EmptyInputError,
    PrivacyError,
    SQLParseError,
    UnknownColumnError,
    UnknownOperatorError,
)


@pytest.mark.parametrize("query, error, words", [
    ("SELECT getposition(* FROM people", SQLParseError, "malformed SQL"),
    ("SELECT getposition(nope) FROM people", UnknownColumnError, "nope"),
    ("SELECT getposition(*) FROM people WHERE nope > 1", UnknownColumnError, "nope"),
    ("SELECT getposition(*) FROM ghosts", CrowdDBError, "ghosts"),
    ("SELECT getposition(*, colour := 3) FROM people", ArgumentError, "colour"),
    ("SELECT getposition(*, k := 'ten') FROM people", ArgumentError, "integer"),
    ("SELECT getposition(*, k := 1) FROM people", ArgumentError, "at least 2"),
    ("SELECT getposition(*, k := 500) FROM people", CrowdDBError, "500"),
    ("SELECT getposition(*, assignments := 0) FROM people", ArgumentError, "assignments"),
    ("SELECT getposition(*, anonymizer := 'none') FROM people", PrivacyError, "quasi-identifier"),
    ("SELECT getposition(age, edu, anonymizer := 'magic') FROM people", ArgumentError, "anonymizer must be one of"),
    ("SELECT getposition() FROM people", ArgumentError, "name the columns"),
    ("SELECT getposition(*) FROM people WHERE age > 1000", EmptyInputError, "no rows"),
    ("SELECT getcandidate(*) FROM people", ArgumentError, "job"),
    ("SELECT getcandidate(*, 42) FROM people", ArgumentError, "string"),
    ("SELECT getposition(getposition(*)) FROM people", ArgumentError, "nested"),
    ("SELECT getposition(1 + 1) FROM people", ArgumentError, "by name"),
    ("SELECT getposition(*)", ArgumentError, "FROM"),
    ("SELECT getpositoin(*) FROM people", UnknownOperatorError, "getpositoin"),
])
def test_bad_queries(db, query, error, words):
    with pytest.raises(error, match=words):
        db.sql(query)
    assert db.sql("SELECT (SELECT count(*) FROM crowddb_hits) + (SELECT count(*) FROM crowddb_runs)").fetchall() \
        == [(0,)]


def test_bad_connection_arguments():
    import crowddb

    with pytest.raises(ArgumentError, match="seed"):
        crowddb.connect(seed="x")
    with pytest.raises(ArgumentError, match="budget"):
        crowddb.connect(budget=-1)


def test_bad_operator_definitions(tmp_path):
    import crowddb

    (tmp_path / "bad.toml").write_text('name = "x"\nkind = "row"\nquestion = "?"\n')
    with pytest.raises(ArgumentError, match="kind"):
        crowddb.connect(udfs=[tmp_path])
    (tmp_path / "bad.toml").write_text('name = "x"\nkind = "tuple"\nquestion = "?"\nasignments = 3\n')
    with pytest.raises(ArgumentError, match="asignments"):
        crowddb.connect(udfs=[tmp_path])
    (tmp_path / "bad.toml").write_text('name = "x"\nkind = "tuple"\nquestion = \n')
    with pytest.raises(ArgumentError, match="cannot read"):
        crowddb.connect(udfs=[tmp_path])
