"""One read of a table's catalog rows per table-function step.

A table function's step reads the same catalog rows several times: the table's roles (planning, the ledger's
identity, the release's record) and its ledger root (the ledger's version, joint classes, the record, the repeat
kept), each read one DuckDB statement. Inside ``one_read`` each is read once and handed back after: the step writes
neither (a release writes the ledger, never ``crowddb_columns`` or the links), and a value read inside its own
transaction would be no fresher than the rows the step snapshotted before it. Outside the block every call reads."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Hashable, Iterator
from typing import TypeVar

import duckdb

T = TypeVar("T")

_ACTIVE: weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, dict] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def one_read(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Each catalog read through ``cached`` made once for the block (an inner block shares the outer one's)."""
    if con in _ACTIVE:
        yield
        return
    _ACTIVE[con] = {}
    try:
        yield
    finally:
        _ACTIVE.pop(con, None)


def cached(con: duckdb.DuckDBPyConnection, key: Hashable, read: Callable[[], T]) -> T:
    """``read()``, once per ``key`` inside ``one_read`` (an error is not kept: the next call reads again)."""
    memo = _ACTIVE.get(con)
    if memo is None:
        return read()
    if key not in memo:
        memo[key] = read()
    return memo[key]
