"""Which functions lineage may look through: an allow list built from ``duckdb_functions()``.

sqlglot's lineage sees a call's arguments, not what the function reads: a user macro ``jobof(rowid, workclass)`` whose
body selects another column, ``getvariable('jobs')`` holding a list of protected values, a Python UDF, or a macro
that shadows a built-in's name (``CREATE MACRO upper(x) AS ...`` is allowed, and wins) all look like derivations of
their arguments. So a call is transparent only when it is one of DuckDB's own functions known to read nothing but its
arguments:

- the functions of a pristine DuckDB of the running version (a fresh in-memory connection: nothing user-defined),
  scalar, aggregate, window and built-in macros of its ``main`` schema, without side effects and without the ones
  that read session or catalog state (``getvariable``, ``current_setting``, ``current_query``, ``nextval``, ...);
- minus every name the connection gives another meaning: any function whose signature the pristine DuckDB does not
  have (a user macro, table macro or Python UDF, also one that adds an overload to a built-in's name; an extension's).

sqlglot parses many names into typed nodes (``nvl(a, b)`` becomes ``COALESCE``): a typed node stands for every name
sqlglot's DuckDB parser reads into its class, and is transparent only when none of them is opaque. Anything else
(a schema-qualified call, a positional reference ``#8``) is opaque.
"""

from __future__ import annotations

import functools

import duckdb
import sqlglot
from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB

from .._sql import DIALECT

#: built-ins that read more than their arguments: session state (variables, settings, the query text, the search
#: path), sequences, the catalog (an ENUM's members: ``CREATE TYPE t AS ENUM (SELECT ...)`` stores a column's
#: values in the catalog, and ``enum_range(NULL::t)`` reads them), the transaction; dates and times of "now"
#: (harmless, but not a function of the row)
_STATEFUL_PREFIXES = ("current_", "get_current_", "pg_", "has_", "txid_", "enum_")
_STATEFUL = frozenset({"getvariable", "nextval", "currval", "setval", "in_search_path", "stats", "vector_type",
                       "now", "today", "transaction_timestamp", "version", "col_description", "obj_description",
                       "format_type", "shobj_description",
                       # a type as a value: an ENUM of the user's prints its members (``typeof(x)`` of a column of
                       # that type, ``make_type('t')::VARCHAR``, a bound plan's types), or casts to them
                       "typeof", "make_type", "get_type", "cast_to_type", "replace_type", "json_serialize_plan"})
_KINDS = ("scalar", "aggregate", "window", "macro")
_SIGNATURE_COLUMNS = ("database_name, schema_name, function_name, function_type, parameter_types::VARCHAR, "
                      "return_type, internal")


@functools.cache
def _pristine() -> tuple[frozenset[tuple], frozenset[str]]:
    """(every function signature of a DuckDB without user functions, the names that are transparent)."""
    with duckdb.connect() as con:
        rows = con.execute(f"SELECT {_SIGNATURE_COLUMNS}, has_side_effects FROM duckdb_functions()").fetchall()
    signatures = frozenset(r[:7] for r in rows)
    allowed = {r[2].lower() for r in rows if r[3] in _KINDS and r[1] == "main" and r[6] and not r[7]}
    allowed = {n for n in allowed if n not in _STATEFUL and not n.startswith(_STATEFUL_PREFIXES)}
    return signatures, frozenset(allowed)


@functools.cache
def _pristine_types() -> frozenset[str]:
    """The type names of a DuckDB without user types (which cannot take one of these names)."""
    with duckdb.connect() as con:
        return frozenset(r[0].lower() for r in con.execute("SELECT type_name FROM duckdb_types()").fetchall())


def user_names(con: duckdb.DuckDBPyConnection) -> frozenset[str]:
    """Names this connection gives a meaning a pristine DuckDB does not have (macros, UDFs, extensions' functions)."""
    signatures, _ = _pristine()
    rows = con.execute(f"SELECT {_SIGNATURE_COLUMNS} FROM duckdb_functions()").fetchall()
    return frozenset(r[2].lower() for r in rows if r not in signatures)


@functools.cache
def _names_by_class() -> dict[type, frozenset[str]]:
    """Every name sqlglot's DuckDB parser reads into each expression class (``nvl`` -> Coalesce)."""
    out: dict[type, set[str]] = {}
    for name, builder in DuckDB.Parser.FUNCTIONS.items():
        owner = getattr(builder, "__self__", None)
        if isinstance(owner, type) and issubclass(owner, exp.Expression):
            out.setdefault(owner, set()).add(name.lower())
            continue
        for args in ("x", "x, y", "x, y, z"):  # a builder function: the classes it makes, by arity
            try:
                made = sqlglot.parse_one(f"SELECT {name}({args})", read=DIALECT).selects[0]
            except Exception:  # noqa: BLE001, S112 - a builder that cannot take this arity (IndexError, ParseError)
                continue
            out.setdefault(type(made), set()).add(name.lower())
    for name in DuckDB.Parser.FUNCTION_PARSERS:
        out.setdefault(_parsed_class(name), set()).add(name.lower())
    return {cls: frozenset(names) for cls, names in out.items()}


def _parsed_class(name: str) -> type:
    try:
        return type(sqlglot.parse_one(f"SELECT {name}(x)", read=DIALECT).selects[0])
    except Exception:  # noqa: BLE001 - special syntax that does not take one plain argument
        return type(None)


class Functions:
    """The transparency verdict on the calls of one connection's statements (its user functions read once)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self._user: frozenset[str] | None = None

    @property
    def user(self) -> frozenset[str]:
        if self._user is None:
            self._user = user_names(self.con)
        return self._user

    def opaque(self, expression: exp.Expression) -> str | None:
        """The first call of ``expression`` (not inside a subquery, whose lineage is followed on its own) that is
        not transparent, as SQL; None when every call is."""
        for node in expression.walk(prune=lambda n: isinstance(n, exp.Query) and n is not expression):
            reason = self._verdict(node)
            if reason:
                return reason
        return None

    def _verdict(self, node: exp.Expression) -> str | None:
        if isinstance(node, exp.PositionalColumn):
            return f"the positional reference {node.sql(DIALECT)}"
        if isinstance(node, exp.DataType) and node.this == exp.DataType.Type.USERDEFINED and (
                str(node.args.get("kind") or "").split(".")[-1].strip('"').lower() not in _pristine_types()):
            # a user's type may be an ENUM of a column's values: a cast to it reads its members (NULL unless the
            # value is one), so the result is not a function of the argument alone
            return f"the user-defined type {node.sql(DIALECT)}"
        if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Func):
            return f"the qualified call {node.sql(DIALECT)}"
        if not isinstance(node, exp.Func) or isinstance(node, _OPERATORS):
            return None
        _, allowed = _pristine()
        if isinstance(node, exp.Anonymous):
            names = frozenset({node.name.lower()})
        else:
            names = _names_by_class().get(type(node)) or frozenset(n.lower() for n in type(node).sql_names())
        for name in sorted(names):
            if name in self.user or (name not in allowed and _is_builtin(name)):
                return f"{name}(...)"
        if isinstance(node, exp.Anonymous) and node.name.lower() not in allowed:
            return f"{node.name}(...)"
        return None


#: typed nodes that are operators or syntax, not catalog functions (CASE, CAST, x[i], a || b, IN, ...)
_OPERATORS = (exp.Case, exp.If, exp.Cast, exp.TryCast, exp.Bracket, exp.DPipe, exp.Paren, exp.Struct, exp.Array,
              exp.Lambda, exp.Extract, exp.Interval, exp.Distinct)


@functools.cache
def builtin_names() -> frozenset[str]:
    """Every function name of a pristine DuckDB's ``system.main`` (what ``system.main.name(...)`` calls)."""
    signatures, _ = _pristine()
    return frozenset(s[2].lower() for s in signatures if s[0] == "system" and s[1] == "main")


def _is_builtin(name: str) -> bool:
    return name in builtin_names()
