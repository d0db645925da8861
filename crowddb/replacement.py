"""Replacement scans: a pandas, Arrow or Polars object named in SQL is read from the caller's scope, as ``duckdb.sql``
does it ("SELECT * FROM df" reads the DataFrame ``df``).

DuckDB finds such objects in the Python frame that called ``sql()``; crowddb calls DuckDB from its own frames, so:

- plain SQL is handed to DuckDB from a frame that carries the caller's names (``query.plain.call_in``): DuckDB's own
  replacement scan then resolves them exactly as ``duckdb.sql`` would, and nothing is parsed;
- a crowd query is planned over several statements of ours, so each object it names is registered under a name of
  its own (``Scans``) and the query's tree is pointed at it. The registration lives as long as the query's answers.
"""

from __future__ import annotations

import itertools
import sys
from types import FrameType
from typing import Any

import duckdb
from sqlglot import exp

from . import _sql

#: the prefix of a registered object's view; lineage names the object (the rest of the name) in its reasons
PREFIX = "__pyscan_"
#: the libraries whose objects DuckDB scans (DataFrames, Arrow tables/datasets/readers, Polars frames)
_SCANNABLE = frozenset({"pandas", "pyarrow", "polars"})
_COUNTER = itertools.count(1)


def caller_frame() -> FrameType | None:
    """The innermost frame outside the crowddb package: the user's code that called db.sql() (or its caller)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] == "crowddb":
        frame = frame.f_back
    return frame


def original_name(view: str) -> str | None:
    """The Python name a registered view stands for (None for any other view)."""
    if not view.lower().startswith(PREFIX):
        return None
    return view[len(PREFIX):].partition("_")[2]


class Scans:
    """The Python objects a crowd query reads, registered on the connection under names of their own."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.views: list[str] = []

    def bind(self, statements: list[exp.Expression], frame: FrameType | None,
             table_functions: frozenset[str] = frozenset()) -> list[exp.Expression]:
        """``statements`` (copies) with every table name that is not in the catalog, not a CTE of its statement and
        not created by an earlier statement, but names a scannable object in ``frame``, pointed at that object
        (registered now). The object keeps its name as the table's alias, so ``df.col`` still reads it; the input
        of a table function (``ANONYMIZE(df, ...)``, in ``table_functions``) is pointed at it too."""
        if frame is None:
            return statements
        names = {n.name for st in statements for n in [*st.find_all(exp.Table), *table_function_inputs(st, table_functions)]}
        if not any(_scannable(_lookup(frame, name)) for name in names if name):
            return statements  # no name of the query is a Python object DuckDB could scan: nothing to look up
        known = _catalog_names(self.con)
        registered: dict[str, str] = {}
        out = []
        for statement in statements:
            tree = statement.copy()
            ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
            for node in [*tree.find_all(exp.Table), *table_function_inputs(tree, table_functions)]:
                name = node.name
                if (not isinstance(node.this, exp.Identifier) or node.args.get("db") or node.args.get("catalog")
                        or node.args.get("table") or name.lower() in known or name.lower() in ctes):
                    continue
                if name not in registered:
                    view = self._register(name, _lookup(frame, name))
                    if view is None:
                        continue
                    registered[name] = view
                _point(node, registered[name])
            known |= _created(tree)
            out.append(tree)
        return out

    def _register(self, name: str, obj: Any) -> str | None:
        if not _scannable(obj):
            return None
        view = f"{PREFIX}{next(_COUNTER)}_{name}"
        try:
            self.con.register(view, obj)
        except (duckdb.Error, TypeError, ValueError):  # an object DuckDB cannot scan: DuckDB reports the name later
            return None
        self.views.append(view)
        return view

    def drop(self) -> None:
        """Unregister every object this query registered (its answers are no longer read)."""
        for view in self.views:
            self.con.unregister(view)
        self.views.clear()


def _scannable(obj: Any) -> bool:
    """An object DuckDB's replacement scan reads (a pandas, Arrow or Polars object)."""
    return obj is not None and type(obj).__module__.partition(".")[0] in _SCANNABLE


def _lookup(frame: FrameType, name: str) -> Any:
    """``name`` in the caller's locals, then its globals (DuckDB's order)."""
    if name in frame.f_locals:
        return frame.f_locals[name]
    return frame.f_globals.get(name)


def _catalog_names(con: duckdb.DuckDBPyConnection) -> set[str]:
    rows = con.execute("SELECT table_name FROM duckdb_tables() UNION ALL "
                       "SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
    return {r[0].lower() for r in rows}


def _created(statement: exp.Expression) -> set[str]:
    """The tables or views ``statement`` creates (a later statement of the query reads them, not a Python object)."""
    if isinstance(statement, exp.Create) and isinstance(statement.this, (exp.Table, exp.Schema)):
        table = statement.this if isinstance(statement.this, exp.Table) else statement.this.this
        return {table.name.lower()}
    return set()


def table_function_inputs(tree: exp.Expression, table_functions: frozenset[str]) -> list[exp.Column]:
    """The table-name inputs of the table functions in ``tree`` (``ANONYMIZE(df, k := 5)``: the column ``df``)."""
    calls = (n for n in tree.find_all(exp.Anonymous) if n.name.lower() in table_functions)
    return [c.expressions[0] for c in calls if c.expressions and isinstance(c.expressions[0], exp.Column)]


def _point(node: exp.Table | exp.Column, view: str) -> None:
    """Make ``node`` read ``view``, keeping the name the query uses as its alias (a table function's input is just
    renamed: the function's output takes the function's name)."""
    if isinstance(node, exp.Column):
        node.set("this", _sql.identifier(view))
        return
    if not node.alias:
        node.set("alias", exp.TableAlias(this=node.this.copy()))
    node.set("this", _sql.identifier(view))

