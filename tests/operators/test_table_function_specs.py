"""A table function is declared once (``TableFunctionSpec``): registering one reserves its name, makes the token scan
route a query calling it to the planner, and the planner dispatches it by the spec (issue 26)."""

from __future__ import annotations

import pandas as pd
import pytest

import crowddb
from crowddb.errors import ArgumentError, UnknownOperatorError
from crowddb.operators import table_functions
from crowddb.operators.table_functions import TableFunctionSpec, TableResult


@pytest.fixture
def echo_rows():
    """A fake table function: its input's rows, with the column ``times`` := the argument; it reads only ``a``."""
    seen = {}

    def echo(ctx, rows, named, roles):
        seen["columns"] = list(rows.columns)
        return TableResult(rows.df().assign(times=named.get("times", 1)), {"operator": "ECHO_ROWS"})

    table_functions.register(TableFunctionSpec("echo_rows", echo, reads=lambda named: ["a"]))
    yield seen
    table_functions.unregister("echo_rows")


def _db():
    db = crowddb.connect(seed=1, progress=False)
    db.load_frame("t", pd.DataFrame({"a": [2, 1], "b": ["x", "y"]}))
    return db


def test_a_registered_function_is_scanned_dispatched_and_reads_only_what_it_declares(echo_rows):
    with _db() as db:
        assert db.sql("SELECT a, times FROM Echo_Rows(t, times := 3) ORDER BY a").fetchall() == [(1, 3), (2, 3)]
        assert echo_rows["columns"] == ["a"]  # b never left DuckDB
        assert db.last_report == [{"operator": "ECHO_ROWS"}]
        assert "ECHO_ROWS" in str(db.explain("SELECT * FROM echo_rows(t)"))


def test_its_name_is_reserved_for_human_operators(echo_rows):
    with _db() as db:
        definition = {"name": "ECHO_rows", "kind": "tuple", "question": "Is it {x}?",
                      "arguments": [{"name": "x", "type": "VARCHAR"}], "domain": ["yes", "no"]}
        with pytest.raises(ArgumentError, match="taken by the table function ECHO_ROWS"):
            db.register_udf(definition)
        assert "echo_rows" not in db.registry


def test_unregistered_it_is_an_unknown_function():
    with _db() as db, pytest.raises(UnknownOperatorError, match="echo_rows"):
        db.sql("SELECT * FROM echo_rows(t)")


def test_every_shipped_function_is_declared_once_and_reserved():
    assert table_functions.names() == {"truth_discover", "private_synth", "anonymize", "privacy_budget"}
    with _db() as db:
        for name in table_functions.names():
            definition = {"name": name, "kind": "tuple", "question": "Is it {x}?",
                          "arguments": [{"name": "x", "type": "VARCHAR"}], "domain": ["yes", "no"]}
            with pytest.raises(ArgumentError, match=f"taken by the table function {name.upper()}"):
                db.register_udf(definition)


def test_a_function_on_a_tables_own_record_refuses_any_other_input():
    with _db() as db:
        db.sql("CREATE VIEW v AS SELECT * FROM t")
        with pytest.raises(ArgumentError, match="PRIVACY_BUDGET: the first argument must be a table's name "
                                                r"\(budgets are per table\)"):
            db.sql("SELECT * FROM PRIVACY_BUDGET(v, epsilon := 1)")
        assert db.sql("SELECT count(*) FROM crowddb_privacy_ledger").fetchall() == [(0,)]
