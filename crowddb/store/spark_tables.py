"""What the crowddb database keeps of a Spark table (issue 27; crowddb/spark/ledger.py does the Spark side): its
declared roles and the folder of its rows' histories (``crowddb_spark_tables``), and its releases with their
write-ahead status (``crowddb_spark_releases``: 'pending' until the release's history version is written whole, then
'completed'). The two tables are made on first use: a database that never releases a Spark table has neither."""

from __future__ import annotations

import json
from typing import Any

import duckdb
import pandas as pd

from .._duck import transaction

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS crowddb_spark_tables (
        name VARCHAR PRIMARY KEY,
        roles VARCHAR NOT NULL,        -- JSON: quasi_identifiers, sensitive, key, kinds
        history VARCHAR NOT NULL,      -- the folder of its history versions
        current BIGINT                 -- the completed release whose version is the history (NULL: none yet)
    )""",
    """CREATE TABLE IF NOT EXISTS crowddb_spark_releases (
        name VARCHAR NOT NULL,
        release_no BIGINT NOT NULL,
        k INTEGER NOT NULL,
        quasi_identifiers VARCHAR NOT NULL,
        status VARCHAR NOT NULL,
        created_at TIMESTAMP DEFAULT current_timestamp,
        PRIMARY KEY (name, release_no)
    )""",
]


def ensure(con: duckdb.DuckDBPyConnection) -> None:
    for ddl in _SCHEMA:
        con.execute(ddl).fetchall()


def table(con: duckdb.DuckDBPyConnection, name: str) -> tuple[dict[str, Any], str, int | None] | None:
    """(roles, history folder, current release) of the Spark table ``name``; None when none are declared."""
    found = con.execute("SELECT roles, history, current FROM crowddb_spark_tables WHERE name = ?", [name]).fetchall()
    if not found:
        return None
    roles, history, current = found[0]
    return json.loads(roles), history, current


def declare(con: duckdb.DuckDBPyConnection, name: str, roles: dict[str, Any], history: str) -> None:
    """Declare (replace) a Spark table's roles and history folder; its releases and current version stay."""
    con.execute("INSERT INTO crowddb_spark_tables VALUES (?, ?, ?, NULL) ON CONFLICT (name) DO UPDATE SET "
                "roles = excluded.roles, history = excluded.history", [name, json.dumps(roles), history]).fetchall()


def releases(con: duckdb.DuckDBPyConnection, name: str) -> pd.DataFrame:
    return con.execute("SELECT release_no, k, quasi_identifiers, status, created_at FROM crowddb_spark_releases "
                       "WHERE name = ? ORDER BY release_no", [name]).df()


def pending(con: duckdb.DuckDBPyConnection, name: str) -> list[int]:
    return [no for (no,) in con.execute("SELECT release_no FROM crowddb_spark_releases WHERE name = ? AND "
                                        "status = 'pending' ORDER BY release_no", [name]).fetchall()]


def next_number(con: duckdb.DuckDBPyConnection, name: str) -> int:
    """The number the table's next release takes (its entries are hashed under it before it is on record)."""
    return int(con.execute("SELECT coalesce(max(release_no), 0) + 1 FROM crowddb_spark_releases WHERE name = ?",
                           [name]).fetchall()[0][0])


def begin(con: duckdb.DuckDBPyConnection, name: str, release_no: int, k: int, quasi_identifiers: list[str]) -> None:
    """Put a release on record as 'pending' (write-ahead: before its history is written). A second process that
    took the same number first makes this fail on the key: nothing of this release is written then."""
    con.execute("INSERT INTO crowddb_spark_releases (name, release_no, k, quasi_identifiers, status) "
                "VALUES (?, ?, ?, ?, 'pending')", [name, int(release_no), int(k), json.dumps(quasi_identifiers)]
                ).fetchall()


def complete(con: duckdb.DuckDBPyConnection, name: str, release_no: int) -> None:
    """The release's history version is written whole: it is completed and becomes the table's history."""
    with transaction(con):
        con.execute("UPDATE crowddb_spark_releases SET status = 'completed' WHERE name = ? AND release_no = ?",
                    [name, release_no]).fetchall()
        con.execute("UPDATE crowddb_spark_tables SET current = ? WHERE name = ?", [release_no, name]).fetchall()


def forget(con: duckdb.DuckDBPyConnection, name: str, release_no: int) -> None:
    """A pending release whose history version was never written whole: rolled back."""
    con.execute("DELETE FROM crowddb_spark_releases WHERE name = ? AND release_no = ? AND status = 'pending'",
                [name, release_no]).fetchall()


def names(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The names of the Spark tables whose roles are declared."""
    return [name for (name,) in con.execute("SELECT name FROM crowddb_spark_tables ORDER BY name").fetchall()]
