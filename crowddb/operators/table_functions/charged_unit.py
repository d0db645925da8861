"""A charge's unit must be a stored column of the tables charged (issue 24): one check for every charged function."""

from __future__ import annotations

from typing import Any

import duckdb
from sqlglot import exp

from ... import _sql
from ...errors import (
    PrivacyBudgetError,
)


def check_charged_unit(con: duckdb.DuckDBPyConnection, query: exp.Query, named: dict[str, Any],
                       tables: list[str], operator: str) -> None:
    """Refuse (PrivacyBudgetError, before anything is computed) a charge whose unit column is not an unchanged copy
    of a stored column of the tables it is charged to (through CTEs, subqueries, unions and views; issue 24). The
    budget is kept per unit id, so ``worker || '#'`` or ``upper(worker)`` would make every source a new one, with a
    budget of its own. ``query``: the call's input as written (before it was frozen); ``tables``: the charged base
    tables (none: nothing is charged to a table, nothing to check)."""
    column = named.get("source")
    if not tables or not isinstance(column, str):
        return
    found = _stored_columns(con, query, column, frozenset())
    if isinstance(found, set):
        from ...privacy.identity import display
        from ...store import links

        outside = sorted(f"{display(t)}.{c}" for t, c in found if t.lower() not in {x.lower() for x in tables})
        # a copy's (or a renamed table's) sources are its root's only through the columns it holds unchanged
        rewritten = sorted(f"{display(t)}.{c}" for t, c in found
                           if (links.carried(con, t) is not None and c.lower() not in links.carried(con, t)))
        if not outside and not rewritten:
            return
        found = (f"it is a copy of {', '.join(outside)}, which the budget of "
                 f"{', '.join(display(t) for t in tables)} does not cover"
                 if outside else f"{', '.join(rewritten)} was not copied unchanged from the table whose budget it "
                                 "shares, so its ids are not that table's sources")
    from ...privacy.identity import display

    raise PrivacyBudgetError(
        f"{operator}: source := {column!r} is not a stored column of {', '.join(display(t) for t in tables)}: "
        f"{found}. The privacy budget "
        f"is kept per source id, so a spelling of the source made by an expression would be a new source with a "
        f"budget of its own: pass the stored column itself (e.g. SELECT worker ... with source := 'worker'), "
        "unchanged. Nothing was computed or charged")


def _stored_columns(con: duckdb.DuckDBPyConnection, query: exp.Query, column: str,
                    seen: frozenset[str]) -> set[tuple[str, str]] | str:
    """The stored (table, column) pairs output ``column`` of ``query`` is an unchanged copy of (one per branch of a
    union), following views into their definitions; else why it is not one (text for the refusal). Lineage by
    sqlglot's scope and lineage, as crowddb/lineage.py judges what a worker may see."""
    import sqlglot
    from sqlglot.lineage import to_node
    from sqlglot.optimizer.qualify import qualify
    from sqlglot.optimizer.scope import build_scope

    from ...lineage import Lineage, _is_copy, _leaf_column, view_query
    from ...store.roles import relation_kind

    lineage = Lineage(con)
    schema = lineage._schema()
    try:
        tree = qualify(lineage._resolved(query), schema=schema, dialect=_sql.DIALECT, validate_qualify_columns=False,
                       quote_identifiers=True, identify=True)
        root = build_scope(tree)
        at = [i for i, s in enumerate(tree.selects) if s.alias_or_name.lower() == column.lower()]
        node = to_node(at[0], root, dialect=_sql.DIALECT, schema=schema) if root is not None and len(at) == 1 else None
    except (sqlglot.errors.SqlglotError, KeyError, ValueError, TypeError, IndexError):
        node = None
    if node is None:
        return "its lineage cannot be followed"
    if not _is_copy(node):
        return "it is computed by an expression, not copied from a column"
    found: set[tuple[str, str]] = set()
    for leaf in node.walk():
        if leaf.downstream:
            continue
        name = _leaf_column(leaf)
        if not (isinstance(leaf.source, exp.Table) and isinstance(leaf.source.this, exp.Identifier)) or name is None:
            return "it is not read from a table"
        table = lineage._leaf_key(leaf.source)
        kind = relation_kind(con, table)
        if kind == "view" and table.lower() not in seen:
            definition = view_query(con, table)
            inner = "the view's definition cannot be read" if definition is None else _stored_columns(
                con, definition, name, seen | {table.lower()})
            if isinstance(inner, str):
                return f"through view {table}: {inner}"
            found |= inner
        elif kind == "table":
            found.add((table, name))
        else:
            return f"it comes from {table}, which is not a stored table"
    return found

