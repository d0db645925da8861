"""A published value is one crowddb computes itself: defence in depth, independent of how a query was read.

Lineage decides what a derived input's column is (an unchanged copy of a core column, a derivation through
allow-listed built-ins); a construct it misread (a function or syntax that slipped past the allow list) would show a
worker something else under that name. So before a HIT is posted, each published column of a materialized input is
evaluated again from the stored rows, by the derivation lineage found (``DerivedRoles.recompute``), and compared with
what the query produced:

- rows traced to their table (``traced``): row by row, joined on the row's identity in that table;
- other inputs (a join, a union): every produced value must be one the derivation yields on some stored row;
- a constant: every value must be that constant.

The derivation runs DuckDB's own functions whatever the connection defines: every call of a built-in is pinned to
``system.main`` (a macro that shadows ``upper`` is not what runs again), and a call of anything else fails, which
withholds the column. A derivation holding a reference lineage did not resolve (``#6``) cannot be computed again:
withheld too. A column where any value differs is withheld, with the count in the reason. Columns lineage could not
write as one row-wise derivation over one table (aggregates, windows, several tables) are left to lineage and the
allow list.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import duckdb
import numpy as np
import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import TokenType

from .. import _sql
from .._duck import registered
from .._sql import DIALECT
from .functions import builtin_names

_ROWS = "__crowd_shown_rows"


def misread(con: duckdb.DuckDBPyConnection, temp: str, rows: np.ndarray, columns: Mapping[str, str],
            recompute: Mapping[str, tuple[str, exp.Expression]], traced: tuple[str, np.ndarray] | None,
            identity: Callable[[str, str], exp.Expression], base_alias: str) -> dict[str, str]:
    """{column of ``temp``: why it is withheld} for the published ``columns`` (temp column -> published name) whose
    values on the temp table's ``rows`` (rowids) differ from their recomputation. ``traced``: (the base table, each
    temp row's identity there); ``identity(table, alias)``: a row's identity expression in the privacy ledger."""
    checks = {c: recompute[c] for c in columns if c in recompute}
    if not checks or not len(rows):
        return {}
    unresolved = {c: "it holds a reference lineage could not resolve to a stored column, so crowddb cannot compute "
                     "it again from the stored rows" for c, (_, e) in checks.items() if e is None}
    unresolved.update({c: f"it calls {f.name}(...), which is not a DuckDB built-in crowddb can compute it again with"
                       for c, (_, e) in checks.items() if e is not None
                       for f in e.find_all(exp.Anonymous) if f.name.lower() not in builtin_names()})
    checks = {c: v for c, v in checks.items() if v[1] is not None and c not in unresolved}
    if not checks:
        return unresolved
    temp_alias = "__crowd_temp"
    tests, joins = [], []
    for n, (column, (table, expression)) in enumerate(checks.items()):
        shown = exp.cast(exp.column(column, table=temp_alias, quoted=True), "VARCHAR")
        derived = exp.cast(exp.Paren(this=_pinned(expression)), "VARCHAR")
        if not table:  # a constant: no stored row is read
            differs = exp.NullSafeNEQ(this=shown, expression=derived)
        elif traced is not None and table.lower() == traced[0].lower():
            alias = f"__crowd_recomputed_{n}"
            source = exp.select(exp.alias_(identity(traced[0], base_alias), "ref", quoted=True),
                                exp.alias_(derived, "v", quoted=True)).from_(_sql.table(traced[0], base_alias))
            joins.append(exp.Join(this=exp.Subquery(this=source, alias=exp.TableAlias(this=_sql.identifier(alias))),
                                  on=exp.EQ(this=exp.column("ref", table=alias, quoted=True),
                                            expression=exp.column("ref", table=_ROWS, quoted=True)),
                                  side="LEFT"))
            differs = exp.NullSafeNEQ(this=shown, expression=exp.column("v", table=alias, quoted=True))
        else:  # not traced row by row: the value must be one the derivation yields on some stored row
            values = exp.select(derived).from_(_sql.table(table, base_alias)).where(
                exp.NullSafeEQ(this=derived.copy(), expression=shown.copy()))
            differs = exp.Not(this=exp.Exists(this=values))
        tests.append(exp.alias_(exp.func("count_if", differs), f"c{n}", quoted=True))
    refs = traced[1][rows] if traced is not None else np.zeros(len(rows), dtype=np.int64)
    query = exp.select(*tests).from_(_sql.table(temp, temp_alias)).join(
        _sql.table(_ROWS), on=exp.EQ(this=exp.column("rowid", table=temp_alias, quoted=True),
                                     expression=exp.column("i", table=_ROWS, quoted=True)))
    for join in joins:
        query.append("joins", join)
    shown_rows = pa.table({"i": pa.array(np.asarray(rows, dtype=np.int64)), "ref": pa.array(refs)})
    try:
        with registered(con, **{_ROWS: shown_rows}):
            counts = con.execute(query.sql(DIALECT)).fetchall()[0]
    except duckdb.Error as err:  # cannot be evaluated again: nothing shows it is what lineage says (fail closed)
        return {**unresolved, **{c: f"its values could not be computed again from the stored rows "
                                    f"({str(err).splitlines()[0]})" for c in checks}}
    return {**unresolved, **{
        column: (f"{int(count)} of its values differ from {expression.sql(DIALECT)} computed from the stored rows: "
                 "the query produced something else than lineage read")
        for (column, (_, expression)), count in zip(checks.items(), counts) if count}}


_TOKENIZER = Dialect.get_or_raise(DIALECT).tokenizer_class()


def _pinned(expression: exp.Expression) -> exp.Expression:
    """``expression`` with every call of a DuckDB built-in qualified as ``system.main.name(...)``: what runs is the
    built-in, not a same-named macro or UDF of the connection."""
    text = expression.sql(DIALECT)
    tokens = _TOKENIZER.tokenize(text)
    out, at = [], 0
    for before, token, after in zip([None, *tokens], tokens, [*tokens[1:], None]):
        if (after is not None and after.token_type == TokenType.L_PAREN and token.text.lower() in builtin_names()
                and token.token_type != TokenType.STRING and (before is None or before.token_type != TokenType.DOT)):
            out.append(text[at:token.start] + f"system.main.{_sql.identifier(token.text).sql(DIALECT)}")
            at = token.end + 1
    out.append(text[at:])
    return sqlglot.parse_one("".join(out), read=DIALECT)  # (sqlglot keeps a qualified call as it is written)

