"""Plain SQL through crowddb returns exactly what DuckDB returns, and the connection behaves like DuckDB's."""

from __future__ import annotations

import subprocess
import sys

import duckdb
import pandas as pd
import pytest

import crowddb

QUERIES = [
    "SELECT 42 AS answer",
    "SELECT range AS i, i * i AS sq FROM range(5) ORDER BY i",
    "WITH t AS (SELECT * FROM (VALUES (1, 'a'), (2, 'b')) v(x, y)) SELECT y, sum(x) FROM t GROUP BY y ORDER BY y",
    "SELECT 'getposition(*) is only text here' AS s",
    "SELECT [1, 2, 3] AS l, {'a': 1} AS s, DATE '2026-01-02' + 1 AS d",
]


@pytest.mark.parametrize("query", QUERIES)
def test_plain_sql_matches_duckdb(query):
    raw = duckdb.connect()
    with crowddb.connect() as db:
        ours = db.sql(query)
        assert isinstance(ours, duckdb.DuckDBPyRelation)
        pd.testing.assert_frame_equal(ours.df(), raw.sql(query).df())
        assert db.execute(query).fetchall() == raw.execute(query).fetchall()
        arrow = ours.arrow()
        table = arrow.read_all() if hasattr(arrow, "read_all") else arrow  # DuckDB >= 2 returns a reader
        assert table.num_rows == len(raw.sql(query).fetchall())


def test_statements_and_parameters_pass_through():
    raw = duckdb.connect()
    with crowddb.connect() as db:
        assert type(db.sql("CREATE TABLE t (x INTEGER)")) is type(raw.sql("CREATE TABLE t (x INTEGER)"))
        db.execute("INSERT INTO t VALUES (?), (?)", [1, 2])
        assert db.sql("SELECT sum(x) FROM t").fetchall() == [(3,)]
        assert db.execute("SELECT x FROM t WHERE x > $1", [1]).fetchall() == [(2,)]


def test_duckdb_api_is_reachable_and_catalog_exists():
    with crowddb.connect() as db:
        tables = {r[0] for r in db.sql("SELECT table_name FROM duckdb_tables()").fetchall()}
        assert {"crowddb_columns", "crowddb_hits", "crowddb_assignments", "crowddb_answers", "crowddb_workers",
                "crowddb_payments", "crowddb_releases", "crowddb_runs"} <= tables
        assert db.table("crowddb_workers").fetchall()  # delegated to DuckDB's connection
        assert db.sql("SELECT count(*) FROM crowddb_workers").fetchall()[0][0] == 100


def test_closed_connection_and_context_manager():
    with crowddb.connect() as db:
        pass
    with pytest.raises(crowddb.CrowdDBError, match="closed"):
        db.sql("SELECT 1")
    db.close()  # idempotent


def test_no_warnings_at_interpreter_exit(tmp_path):
    script = ("import crowddb\n"
              f"db = crowddb.connect({str(tmp_path / 'x.duckdb')!r}, seed=1)\n"
              "db.sql('SELECT 1').fetchall()\n"
              "with crowddb.connect() as other: other.sql('SELECT 2').fetchall()\n")
    done = subprocess.run([sys.executable, "-W", "error", "-c", script], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_unknown_function_is_a_crowddb_error():
    with crowddb.connect() as db, pytest.raises(crowddb.errors.UnknownOperatorError, match="getpositon"):
        db.sql("SELECT getpositon(*) FROM range(3)")
