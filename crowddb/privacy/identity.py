"""Tables have identities, not names: roles, ledgers and budgets belong to the table DuckDB resolves a name to.

A query spells a table ``adult``, ``main.adult``, ``memory.main.adult`` or ``"Adult"``; after ``CREATE TEMP TABLE
adult`` the bare name reads the temp table, and ``main.adult`` does too (DuckDB searches the temp catalog's ``main``
schema first). So crowddb never keys anything by the spelling: it asks DuckDB's binder what a name reads
(``json_serialize_plan`` names the catalog, schema and table of every scan), and keys roles, the privacy ledger and
the epsilon budget by the result.

Keys are strings, stored in the catalog tables: a table of crowddb's home database (the one holding its catalog) in
its ``main`` schema is keyed by its bare name, as before (files made by earlier versions keep their roles); any other
is ``"\\x00catalog\\x00schema\\x00name"`` (catalog empty for the home database), which no DuckDB identifier can spell.
"""

from __future__ import annotations

import dataclasses
import json
import weakref

import duckdb
from sqlglot import exp

from .. import _sql
from .._sql import DIALECT

_SEP = "\x00"
_HOMES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclasses.dataclass(frozen=True)
class TableId:
    """A table or view as DuckDB resolves it: its catalog (this session's name of its database), schema and name as
    the catalog spells them, whether it is a view, and whether its database is crowddb's home."""

    catalog: str
    schema: str
    name: str
    view: bool = False
    home: bool = True

    @property
    def key(self) -> str:
        """The key roles, ledgers and budgets are kept under (see the module docstring)."""
        if self.home and self.schema.lower() == "main":
            return self.name
        return _SEP + ("" if self.home else self.catalog) + _SEP + self.schema + _SEP + self.name

    def ref(self, alias: str | None = None) -> exp.Table:
        """A reference to exactly this relation, whatever else is named like it (quoted, never parsed)."""
        node = exp.Table(this=_sql.identifier(self.name), db=_sql.identifier(self.schema),
                         catalog=_sql.identifier(self.catalog))
        if alias is not None:
            node.set("alias", exp.TableAlias(this=_sql.identifier(alias)))
        return node

    def __str__(self) -> str:
        return self.name if self.home and self.schema.lower() == "main" else f"{self.catalog}.{self.schema}.{self.name}"


def home(con: duckdb.DuckDBPyConnection) -> str:
    """The database holding crowddb's catalog: the connection's current database when the catalog was made or found
    (``set_home``, called by ``store.roles.ensure_catalog``), else its current database."""
    found = _HOMES.get(con)
    if found is None:
        found = _HOMES[con] = con.execute("SELECT current_database()").fetchall()[0][0]
    return found


def set_home(con: duckdb.DuckDBPyConnection) -> None:
    """Remember the connection's current database as crowddb's home (where its catalog tables are)."""
    _HOMES[con] = con.execute("SELECT current_database()").fetchall()[0][0]


def split(key: str) -> tuple[str | None, str, str]:
    """(catalog, None for home; schema; name) of a key."""
    if not key.startswith(_SEP):
        return None, "main", key
    _, catalog, schema, name = key.split(_SEP, 3)
    return catalog or None, schema, name


def display(key: str) -> str:
    """A key as a user reads it (``temp.main.adult``)."""
    catalog, schema, name = split(key)
    return name if catalog is None and schema.lower() == "main" else f"{catalog or '<home>'}.{schema}.{name}"


def of_key(con: duckdb.DuckDBPyConnection, key: str) -> TableId | None:
    """The relation a key names now, or None when there is none."""
    catalog, schema, name = split(key)
    at = home(con)
    catalog = catalog or at
    rows = con.execute(
        "SELECT database_name, schema_name, table_name, false FROM duckdb_tables() WHERE lower(database_name) = "
        "lower(?) AND lower(schema_name) = lower(?) AND lower(table_name) = lower(?) UNION ALL "
        "SELECT database_name, schema_name, view_name, true FROM duckdb_views() WHERE NOT internal AND "
        "lower(database_name) = lower(?) AND lower(schema_name) = lower(?) AND lower(view_name) = lower(?)",
        [catalog, schema, name] * 2).fetchall()
    if len(rows) != 1:
        return None
    c, s, n, view = rows[0]
    return TableId(c, s, n, bool(view), c.lower() == at.lower())


class Identities:
    """Names resolved as DuckDB binds them, each asked once per statement."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self._seen: dict[tuple[str, ...], TableId | None] = {}

    def of(self, table: exp.Table) -> TableId | None:
        """What a table reference of a query reads (None: not a table or view of the catalog, e.g. a CTE's name, a
        table function, or a name DuckDB cannot bind)."""
        if not isinstance(table.this, exp.Identifier):
            return None
        parts = tuple(p.name for p in (table.args.get("catalog"), table.args.get("db"), table.this) if p is not None
                      and p.name)
        return self.resolve(parts)

    def key(self, table: exp.Table) -> str | None:
        """The key of what a table reference reads (None, as ``of``)."""
        found = self.of(table)
        return None if found is None else found.key

    def of_name(self, name: str) -> TableId | None:
        """What a name a user passes to the API reads (one name, never split at dots)."""
        return self.resolve((name,))

    def resolve(self, parts: tuple[str, ...]) -> TableId | None:
        key = tuple(p.lower() for p in parts)
        if key not in self._seen:
            found = self._seen[key] = self._resolve(parts)
            if found is not None:  # its catalog-qualified spelling names the same relation (``TableId.ref``)
                self._seen.setdefault((found.catalog.lower(), found.schema.lower(), found.name.lower()), found)
        return self._seen[key]

    def _resolve(self, parts: tuple[str, ...]) -> TableId | None:
        node = exp.Table(this=_sql.identifier(parts[-1]))
        if len(parts) > 1:
            node.set("db", _sql.identifier(parts[-2]))
        if len(parts) > 2:
            node.set("catalog", _sql.identifier(parts[-3]))
        probe = exp.select("*").from_(node).limit(0).sql(DIALECT)
        # what the binder scans for the spelling, and the views it may name with DuckDB's search order: one statement
        serialized, current, schema, path, found = self.con.execute(
            "SELECT json_serialize_plan(?), current_database(), current_schema(), current_setting('search_path'), "
            "(SELECT list((database_name, schema_name, view_name)) FROM duckdb_views() WHERE NOT internal AND "
            "lower(view_name) = lower(?))", [probe, parts[-1]]).fetchall()[0]
        plan = json.loads(serialized)
        if plan.get("error") and plan.get("error_type") != "not implemented":
            return None  # nothing of that name (or a name DuckDB cannot bind)
        scans = list(_scans(plan))  # (a registered Python object's scan cannot be serialized: a view, below)
        at = home(self.con)
        views = _views(parts, [tuple(r) for r in found or ()], current, schema, path)
        table = [s for s in scans if s[2].lower() == parts[-1].lower()]
        if len(scans) == 1 and table and not views:
            c, s, n = table[0]
            return TableId(c, s, n, False, c.lower() == at.lower())
        if len(views) == 1 and not (len(scans) == 1 and table and self._table_shadows(table[0], views[0])):
            c, s, n = views[0]
            return TableId(c, s, n, True, c.lower() == at.lower())
        return None  # several candidates crowddb cannot order: unknown (withheld, or refused)

    def _table_shadows(self, table: tuple[str, str, str], view: tuple[str, str, str]) -> bool:
        """Whether the table the binder scanned is what the name reads rather than the view (the view does not
        merely read a table of its own name): only the temp catalog shadows; otherwise it is not decidable here."""
        return table[0] == "temp" and view[0] != "temp"


def _views(parts: tuple[str, ...], rows: list[tuple[str, str, str]], current: str, schema: str, path: str
           ) -> list[tuple[str, str, str]]:
    """Of the views named like the spelling's last part (``rows``: catalog, schema, name), those it may name by
    DuckDB's search order: the temp catalog first, then the current database's search path (qualified spellings:
    those qualifiers)."""
    if len(parts) == 3:
        return [r for r in rows if r[0].lower() == parts[0].lower() and r[1].lower() == parts[1].lower()]
    if len(parts) == 2:
        return [r for r in rows if parts[0].lower() in (r[0].lower(), r[1].lower())]
    schemas = {schema.lower(), *(p.strip().split(".")[-1].strip('"').lower() for p in path.split(",") if p.strip())}
    return ([r for r in rows if r[0] == "temp"]
            or [r for r in rows if r[0].lower() == current.lower() and r[1].lower() in schemas])


def _scans(plan: dict) -> list[tuple[str, str, str]]:
    """(catalog, schema, table) of every table scan in a serialized plan."""
    out = []
    stack = list(plan.get("plans", []))
    while stack:
        node = stack.pop()
        data = node.get("function_data") or {}
        if node.get("type") == "LOGICAL_GET" and {"catalog", "schema", "table"} <= set(data):
            out.append((data["catalog"], data["schema"], data["table"]))
        stack.extend(node.get("children", []))
    return out
