"""Rows traced to their table: which base-table row each row of a query is (its identity in the privacy ledger),
when the query reads one table row by row, through views, CTEs and subqueries. The lineage of rows the privacy ledger
needs, as ``crowddb.lineage`` is the lineage of columns."""

from __future__ import annotations

from sqlglot import exp

from ..lineage import view_query
from ..store.roles import roles_of
from . import identity

ROW_REF = "__crowd_row_ref"
# parts of a SELECT that make its rows other than its FROM item's rows, one by one
_NOT_ROW_BY_ROW = ("joins", "group", "distinct", "having", "qualify", "laterals", "pivots", "windows", "connect")


def traced(con, query: exp.Expression, ids: identity.Identities | None = None) -> tuple[exp.Expression, str | None]:
    """``query`` with a column ``ROW_REF`` holding the identity (``row_identity``) of the base-table row each of its
    rows is, and that table, when it reads one base table row by row, through views, CTEs and subqueries (each a
    SELECT with a WHERE, ORDER BY or LIMIT at most: no join, GROUP BY, DISTINCT, aggregate, window or set operation);
    else ``query`` unchanged and None. The lineage of rows the privacy ledger needs, as ``lineage`` is the lineage of columns."""
    copy = query.copy()
    table = _trace(con, copy, {}, frozenset(), ids or identity.Identities(con))
    return (copy, table) if table is not None else (query, None)


def _trace(con, select: exp.Expression, ctes: dict[str, exp.CTE], seen: frozenset[str],
           ids: identity.Identities) -> str | None:
    """Add ``ROW_REF`` to ``select`` in place (and to the CTE definitions and inlined views it reads); returns the
    base table, or None (then nothing was changed that the caller keeps: it works on a copy). A UNION ALL whose
    branches each read the same table row by row is that table's rows (``_trace_union``)."""
    if isinstance(select, exp.Union):
        return _trace_union(con, select, ctes, seen, ids)
    if (not isinstance(select, exp.Select) or any(select.args.get(part) for part in _NOT_ROW_BY_ROW)
            or any(e.find(exp.AggFunc, exp.Window) for e in select.expressions)):
        return None  # (a WHERE filters rows one by one, whatever it reads; an aggregate or window in the list does not)
    with_ = select.args.get("with_") or select.args.get("with")  # sqlglot renamed it
    if with_ is not None:
        if with_.args.get("recursive"):
            return None
        ctes = {**ctes, **{c.alias_or_name.lower(): c for c in with_.expressions}}
    from_ = select.args.get("from_") or select.args.get("from")
    item = from_.this if from_ is not None else None
    alias = item.alias_or_name if item is not None else ""
    star = any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))
               for e in select.expressions)
    if isinstance(item, exp.Table) and isinstance(item.this, exp.Identifier):
        name = item.name.lower()
        if not item.args.get("db") and name in ctes:
            if name in seen:
                return None
            table = _trace(con, ctes[name].this, ctes, seen | {name}, ids)
            ref = exp.column(ROW_REF, table=alias, quoted=True)
        else:
            relation = ids.of(item)  # however spelt: main.adult is adult
            if relation is not None and not relation.view:
                table, star = relation.key, False  # a table's * does not bring its rowid
                ref = row_identity(con, relation.key, alias)
            elif relation is not None and relation.key.lower() not in seen:
                definition = view_query(con, relation.key)
                if definition is None:
                    return None
                table = _trace(con, definition, {}, seen | {relation.key.lower()}, ids)
                if table is not None:  # the view inlined, so its rows can carry their identity
                    item.replace(exp.Subquery(this=definition, alias=exp.TableAlias(
                        this=exp.to_identifier(alias, quoted=True))))
                ref = exp.column(ROW_REF, table=alias, quoted=True)
            else:
                return None
    elif isinstance(item, exp.Subquery):
        table = _trace(con, item.this, ctes, seen, ids)
        ref = exp.column(ROW_REF, table=alias, quoted=True)
    else:
        return None
    if table is not None and not star:  # a * over a traced relation brings ROW_REF along
        select.select(exp.alias_(ref, ROW_REF, quoted=True), copy=False)
    return table


def hands_on_columns(query: exp.Query) -> bool:
    """Does every SELECT of ``query`` (outside its WHERE clauses) project ``*`` or stored columns under their own
    names? Then its rows are the table's rows, column for column, and more of them can be read from the table."""
    for select in query.find_all(exp.Select):
        if select.find_ancestor(exp.Where) is not None:
            continue
        for e in select.expressions:
            inner = e.this if isinstance(e, exp.Alias) else e
            if isinstance(e, exp.Alias) and e.alias == ROW_REF:
                continue
            if not (isinstance(inner, exp.Star) or (isinstance(inner, exp.Column)
                                                     and (isinstance(inner.this, exp.Star) or e.alias_or_name == inner.name))):
                return False
    return True


def _trace_union(con, union: exp.Union, ctes: dict[str, exp.CTE], seen: frozenset[str],
                 ids: identity.Identities) -> str | None:
    """``_trace`` of a UNION ALL: each branch traced, ROW_REF last in each (so it lines up by position and by name);
    the table when every branch reads the same one. UNION (DISTINCT) merges rows, so it is not row by row."""
    if union.args.get("distinct") or (union.args.get("with_") or union.args.get("with")) is not None:
        return None
    tables = {_trace(con, side.this if isinstance(side, exp.Subquery) else side, ctes, seen, ids)
              for side in (union.this, union.expression)}
    if len(tables) != 1 or None in tables:
        return None
    return tables.pop()


def row_identity(con, table: str, alias: str) -> exp.Expression:
    """A row's identity in the privacy ledger (``composition.identity`` names it): its declared key, hashed to a
    BIGINT (stable whatever DuckDB does to rowids), or its rowid when the table declares no key (which a checkpoint
    renumbers after deletes)."""
    key = roles_of(con, table).key
    if not key:
        return exp.column("rowid", table=alias, quoted=True)
    hashed = exp.BitwiseRightShift(this=exp.func("hash", exp.column(key, table=alias, quoted=True)),
                                   expression=exp.Literal.number(1))
    return exp.cast(hashed, "BIGINT")
