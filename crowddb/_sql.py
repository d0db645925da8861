"""Names are only ever names: SQL nodes for identifiers that come from users or the catalog, built without parsing.

``sqlglot.exp.to_table("p; checkpoint")`` parses its argument (a name holding ``;``, ``--``, ``/*`` or a function call
becomes SQL); these helpers wrap the text in a quoted identifier node as it is, so it reaches DuckDB as one name.
"""

from __future__ import annotations

from sqlglot import exp

DIALECT = "duckdb"


def identifier(name: str) -> exp.Identifier:
    """A quoted identifier node holding ``name`` verbatim."""
    if not isinstance(name, str):
        raise TypeError(f"a name must be a string, got {type(name).__name__}")
    return exp.Identifier(this=name, quoted=True)


def table(name: str, alias: str | None = None) -> exp.Table:
    """A table reference to ``name`` in the current schema (never split at dots, never parsed)."""
    node = exp.Table(this=identifier(name))
    if alias is not None:
        node.set("alias", exp.TableAlias(this=identifier(alias)))
    return node


def column(name: str, table_alias: str | None = None) -> exp.Column:
    """A column reference ``"table_alias"."name"`` (or ``"name"``), never parsed."""
    return exp.Column(this=identifier(name), table=identifier(table_alias) if table_alias is not None else None)


def select_all(name: str) -> exp.Select:
    """``SELECT * FROM "name"``."""
    return exp.select("*").from_(table(name))


def conjuncts(node: exp.Expression) -> list[exp.Expression]:
    """The terms of an AND chain (parentheses around one included), each a condition of its own."""
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    if isinstance(node, exp.Paren) and isinstance(node.this, exp.And):
        return conjuncts(node.this)
    return [node]
