"""Roles carried after a statement ran: its data and names keep the roles of what they came from; and a result the
carrying would replace (DuckDB 2 keeps one pending result per connection) replayed to the caller."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import duckdb
from sqlglot import exp

from .._sql import DIALECT
from ..lineage import follow


def carry(con: duckdb.DuckDBPyConnection, statements: Iterable[exp.Expression],
          temp_roles: Mapping[str, Any] | None = None) -> None:
    """Roles follow data and names of ``statements`` (which have run; ``temp_roles``: the roles of the temp
    tables a crowd statement was rewritten to read)."""
    for statement in statements:
        follow(con, statement, temp_roles)


def carry_keeping(con: duckdb.DuckDBPyConnection, result: Any, statements: list[exp.Expression],
                  temp_roles: Mapping[str, Any] | None = None, relation: bool = False):
    """Carry the roles of ``statements`` and keep ``result`` (their ``execute`` result) pending for the caller:
    the statements roles need would replace it (DuckDB 2), so it is fetched first and replayed after (as a
    relation with ``relation``, what ``sql()`` returns)."""
    rows, described = result.fetchall(), result.description
    carry(con, statements, temp_roles)
    return replay(con, rows, described, relation)


def replay(con: duckdb.DuckDBPyConnection, rows: list[tuple], described: Any, relation: bool = False):
    """Make ``rows`` (a statement's result, fetched before roles were carried with more statements) the
    connection's pending result again, with the same column names and types (``relation``: a relation over
    them)."""
    if not described:
        return None if relation else con
    types = [exp.DataType.build(str(d[1]), dialect=DIALECT) for d in described]
    names = [exp.to_identifier(d[0], quoted=True) for d in described]
    if not rows:
        select = exp.select(*(exp.alias_(exp.cast(exp.Null(), t), n) for t, n in zip(types, names))).where("false")
    else:
        values = exp.values([tuple(exp.cast(exp.convert(v), t) for v, t in zip(row, types)) for row in rows],
                            alias="t", columns=names)
        select = exp.select("*").from_(values)
    return con.sql(select.sql(DIALECT)) if relation else con.execute(select.sql(DIALECT))
