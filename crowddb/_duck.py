"""Small DuckDB connection helpers shared by the catalog, the operators and the SQL surface."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import duckdb
import pandas as pd

from .errors import QueryError


def in_transaction(con: duckdb.DuckDBPyConnection) -> bool:
    """True inside an explicit transaction (BEGIN ... COMMIT): its statements share one transaction id, while in
    auto-commit mode every statement gets a new one. (Probing with BEGIN would abort the caller's transaction.)"""
    first = con.execute("SELECT txid_current()").fetchall()
    return con.execute("SELECT txid_current()").fetchall() == first


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """One transaction around the block; inside the caller's own transaction, that one (DuckDB does not nest)."""
    if in_transaction(con):
        yield
        return
    con.execute("BEGIN TRANSACTION")
    try:
        yield
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


@contextlib.contextmanager
def registered(con: duckdb.DuckDBPyConnection, **frames: pd.DataFrame) -> Iterator[None]:
    """DataFrames visible to SQL under the given names for the block, and gone after it."""
    for name, frame in frames.items():
        con.register(name, frame)
    try:
        yield
    finally:
        for name in frames:
            con.unregister(name)


@contextlib.contextmanager
def rolled_back(con: duckdb.DuckDBPyConnection, active: bool = True) -> Iterator[None]:
    """A transaction around the block that is always rolled back (nothing when not ``active``): explain() rehearses
    a query's earlier statements in it."""
    if not active:
        yield
        return
    con.execute("BEGIN TRANSACTION")
    try:
        yield
    finally:
        try:
            con.execute("ROLLBACK")
        except duckdb.TransactionException:  # something ended the transaction: what ran before that was kept
            raise QueryError("explain(): the transaction its rehearsal runs in was ended by a statement it ran, so "
                             "what the earlier statements created or changed was not rolled back") from None
