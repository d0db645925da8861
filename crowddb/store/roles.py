"""Column roles, persisted in ``crowddb_columns``: what is a quasi-identifier, sensitive, core, ground truth, key.

Every function here takes a table's key (``crowddb.privacy.identity``: the bare name of a table of the home
database's ``main`` schema, a qualified key for any other), never the spelling of a query: ``resolve_table`` turns a
name a user passes to the API into the key of what DuckDB binds it to."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Mapping

import duckdb
from sqlglot import exp

from .. import _duck, _sql
from .._resources import catalog_ddl
from ..errors import ArgumentError, PrivacyError, UnknownColumnError
from ..privacy import identity
from . import memo

ROLES = ("quasi_identifier", "sensitive", "core", "ground_truth", "key")
PROTECTED = ("sensitive", "ground_truth", "key")  # never published in a HIT (§2.2.1)


@dataclasses.dataclass(frozen=True)
class TableRoles:
    """The roles declared for one table (column names as the table spells them)."""

    table: str
    quasi_identifiers: tuple[str, ...] = ()
    kinds: Mapping[str, str | None] = dataclasses.field(default_factory=dict)
    sensitive: tuple[str, ...] = ()
    core: tuple[str, ...] = ()
    ground_truth: str | None = None
    key: str | None = None

    def is_key(self, column: str) -> bool:
        """Is ``column`` this table's key (``is_key``)?"""
        return is_key(column, self.key)

    @property
    def protected(self) -> set[str]:
        """Columns that must never reach a HIT."""
        out = set(self.sensitive)
        out.update(c for c in (self.ground_truth, self.key) if c)
        return out


#: without a declared key, a column named id is the row's key (a direct identifier, withheld like one)
DEFAULT_KEY = "id"


def is_key(column: str, key: str | None) -> bool:
    """Is ``column`` the key: the declared ``key``, else (none declared) a column named id?"""
    return column.lower() == (key or DEFAULT_KEY).lower()


def is_default_key(column: str, key: str | None) -> bool:
    """Is ``column`` the key only by the default rule (no key declared, and it is named id)?"""
    return key is None and is_key(column, None)


def ensure_catalog(con: duckdb.DuckDBPyConnection) -> None:
    """Create the catalog tables if missing (idempotent), in the current database: crowddb's home."""
    con.execute(catalog_ddl())
    from . import composition  # (composition reads roles: imported here, where the catalog exists)

    composition.migrate(con)
    identity.set_home(con)


def relation_kind(con: duckdb.DuckDBPyConnection, key: str) -> str | None:
    """'table', 'view' or None for a table key."""
    found = identity.of_key(con, key)
    return None if found is None else ("view" if found.view else "table")


def resolve_table(con: duckdb.DuckDBPyConnection, table: str) -> str:
    """The key of the table or view a name a user passes reads (as DuckDB binds the name: a temp table of that name
    first); a clear error if there is none. The name is one name, never split at dots."""
    if not isinstance(table, str):
        raise ArgumentError(f"a table is named by a string, got {type(table).__name__}")
    found = identity.Identities(con).of_name(table)
    if found is None:
        raise UnknownColumnError(f"no table or view named {table!r}")
    return found.key


def table_ref(con: duckdb.DuckDBPyConnection, key: str, alias: str | None = None) -> exp.Table:
    """A reference to exactly the relation of ``key`` (qualified: never another table of the same name)."""
    found = identity.of_key(con, key)
    if found is None:
        raise UnknownColumnError(f"no table or view {identity.display(key)!r}")
    return found.ref(alias)


def table_columns(con: duckdb.DuckDBPyConnection, key: str) -> list[str]:
    """Column names of a table or view, in order."""
    found = identity.of_key(con, key)
    if found is None:
        raise UnknownColumnError(f"no table or view {identity.display(key)!r}")
    rows = con.execute("SELECT column_name FROM duckdb_columns() WHERE database_name = ? AND schema_name = ? AND "
                       "table_name = ? ORDER BY column_index", [found.catalog, found.schema, found.name]).fetchall()
    if rows:
        return [r[0] for r in rows]
    describe = exp.Describe(this=exp.select("*").from_(found.ref()))  # a view whose columns DuckDB does not list
    return [r[0] for r in con.execute(describe.sql(_sql.DIALECT)).fetchall()]


def _resolve_columns(names: Iterable[str], columns: list[str], table: str, role: str) -> list[str]:
    lookup = {c.lower(): c for c in columns}
    out = []
    for name in names:
        if not isinstance(name, str):
            raise ArgumentError(f"{role}: column names must be strings, got {name!r}")
        if name.lower() not in lookup:
            raise UnknownColumnError(f"{role}: table {table!r} has no column {name!r}; it has {columns}")
        out.append(lookup[name.lower()])
    return out


def declare_roles(con: duckdb.DuckDBPyConnection, table: str, *, quasi_identifiers: Iterable[str] = (),
                  sensitive: Iterable[str] = (), core: Iterable[str] = (), ground_truth: str | None = None,
                  key: str | None = None, kinds: Mapping[str, str] | None = None, replace: bool = True,
                  transaction: bool = True) -> TableRoles:
    """Declare roles for ``table`` (all validated before anything is written; one transaction unless the caller
    already holds one)."""
    found = identity.of_key(con, table)
    if found is None:
        raise UnknownColumnError(f"no table or view {identity.display(table)!r}")
    table, name = found.key, str(found)  # the catalog's spelling
    columns = table_columns(con, table)
    qi = _resolve_columns(quasi_identifiers, columns, name, "quasi_identifiers")
    sens = _resolve_columns(sensitive, columns, name, "sensitive")
    cor = _resolve_columns(core, columns, name, "core")
    gt = _resolve_columns([ground_truth], columns, name, "ground_truth") if ground_truth else []
    ky = _resolve_columns([key], columns, name, "key") if key else []
    kinds = {(_resolve_columns([c], columns, name, "kinds")[0]): v for c, v in (kinds or {}).items()}
    for col, kind in kinds.items():
        if kind not in ("numeric", "ordinal", "categorical"):
            raise ArgumentError(f"kind of {col!r} must be 'numeric', 'ordinal' or 'categorical', got {kind!r}")
        if col not in qi:
            raise ArgumentError(f"a kind is given for {col!r}, which is not declared a quasi-identifier")
    for col, kind in kinds.items():
        if kind == "numeric":
            _check_numeric(con, table, col)
    clash = [(a, b, set(x) & set(y)) for a, x, b, y in [
        ("quasi_identifiers", qi, "sensitive", sens), ("core", cor, "sensitive", sens),
        ("core", cor, "ground_truth", gt), ("core", cor, "key", ky), ("quasi_identifiers", qi, "ground_truth", gt),
        ("quasi_identifiers", qi, "key", ky)] if set(x) & set(y)]
    if clash:
        a, b, both = clash[0]
        raise PrivacyError(f"columns {sorted(both)} of {name!r} cannot be both {a} and {b}")
    rows = [(table, c, "quasi_identifier", kinds.get(c)) for c in qi]
    rows += [(table, c, "sensitive", None) for c in sens] + [(table, c, "core", None) for c in cor]
    rows += [(table, c, "ground_truth", None) for c in gt] + [(table, c, "key", None) for c in ky]
    with _duck.transaction(con) if transaction else contextlib.nullcontext():
        if replace:
            con.execute("DELETE FROM crowddb_columns WHERE table_name = ?", [table])
        if rows:
            con.executemany("INSERT OR REPLACE INTO crowddb_columns VALUES (?, ?, ?, ?)", rows)
    return roles_of(con, table)


def _check_numeric(con: duckdb.DuckDBPyConnection, table: str, column: str) -> None:
    """A column declared a numeric quasi-identifier must hold numbers (NULLs aside): name the first that is not."""
    ident = _sql.column(column)
    as_number = exp.TryCast(this=ident.copy(), to=exp.DataType.build("DOUBLE"))
    not_number = exp.and_(exp.Not(this=exp.Is(this=ident.copy(), expression=exp.Null())),
                          exp.Is(this=as_number, expression=exp.Null()))
    query = (exp.select(exp.Cast(this=ident.copy(), to=exp.DataType.build("VARCHAR")))
             .from_(table_ref(con, table)).where(not_number).limit(1))
    bad = con.execute(query.sql(_sql.DIALECT)).fetchall()
    if bad:
        raise ArgumentError(f"quasi-identifier {column!r} of {table!r} is declared numeric but holds non-numeric "
                            f"value {bad[0][0]!r}")


def roles_of(con: duckdb.DuckDBPyConnection, table: str) -> TableRoles:
    """The roles declared for ``table`` (empty roles if none); checked against the table's current columns. Read
    once per table-function step (``memo``)."""
    return memo.cached(con, ("roles", table), lambda: _roles_of(con, table))


def _roles_of(con: duckdb.DuckDBPyConnection, table: str) -> TableRoles:
    rows = con.execute("SELECT column_name, role, kind FROM crowddb_columns WHERE lower(table_name) = lower(?) "
                       "ORDER BY rowid", [table]).fetchall()
    if not rows:
        return TableRoles(table)
    columns = table_columns(con, table)
    lookup = {c.lower(): c for c in columns}
    by_role: dict[str, list[str]] = {r: [] for r in ROLES}
    kinds: dict[str, str | None] = {}
    for column, role, kind in rows:
        if column.lower() not in lookup:
            raise UnknownColumnError(f"crowddb_columns declares {role} {column!r} for table {table!r}, "
                                     f"which has no such column (columns: {columns})")
        if role not in by_role:
            raise ArgumentError(f"crowddb_columns has unknown role {role!r} for {table}.{column}")
        by_role[role].append(lookup[column.lower()])
        if role == "quasi_identifier":
            kinds[lookup[column.lower()]] = kind
    for single in ("ground_truth", "key"):
        if len(by_role[single]) > 1:
            raise ArgumentError(f"table {table!r} declares more than one {single} column: {by_role[single]}")
    return TableRoles(table, tuple(by_role["quasi_identifier"]), kinds, tuple(by_role["sensitive"]),
                      tuple(by_role["core"]), (by_role["ground_truth"] or [None])[0], (by_role["key"] or [None])[0])


def declared_tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    """The tables (lower-cased) with any role declared; empty when the catalog is missing (a file plain DuckDB made,
    opened read-only): nothing is declared there."""
    try:
        return {r[0] for r in con.execute("SELECT DISTINCT lower(table_name) FROM crowddb_columns").fetchall()}
    except duckdb.CatalogException:
        return set()


def rename_table(con: duckdb.DuckDBPyConnection, old: str, new: str) -> None:
    """Roles follow ALTER TABLE old RENAME TO new (and the mark of rows chosen by a protected column)."""
    con.execute("UPDATE crowddb_columns SET table_name = ? WHERE lower(table_name) = lower(?)", [new, old])
    con.execute("UPDATE crowddb_chosen SET table_name = ? WHERE lower(table_name) = lower(?)", [new, old])


def mark_chosen(con: duckdb.DuckDBPyConnection, table: str, reason: str | None, *, fresh: bool = False) -> None:
    """Put on record that ``table``'s rows were chosen by a protected column (``reason``: the clause, as a refusal
    quotes it); ``fresh``: a table made anew, whose earlier mark (a table of that name dropped) goes first. A mark
    stays until the table is made again: rows added later do not unchoose the ones already there."""
    if fresh:
        con.execute("DELETE FROM crowddb_chosen WHERE lower(table_name) = lower(?)", [table])
    if reason is not None:
        con.execute("INSERT INTO crowddb_chosen VALUES (?, ?)", [table, reason])


def chosen_reason(con: duckdb.DuckDBPyConnection, table: str) -> str | None:
    """Why ``table``'s rows were chosen by a protected column (the first mark on record), or None."""
    found = con.execute("SELECT reason FROM crowddb_chosen WHERE lower(table_name) = lower(?) ORDER BY rowid LIMIT 1",
                        [table]).fetchall()
    return found[0][0] if found else None


def drop_column(con: duckdb.DuckDBPyConnection, table: str, column: str) -> None:
    """Roles follow ALTER TABLE table DROP COLUMN column: its roles go."""
    con.execute("DELETE FROM crowddb_columns WHERE lower(table_name) = lower(?) AND lower(column_name) = lower(?)",
                [table, column])


def rename_column(con: duckdb.DuckDBPyConnection, table: str, old: str, new: str) -> None:
    """Roles follow ALTER TABLE table RENAME COLUMN old TO new (roles left under the new name by a column dropped
    around crowddb go first: they were another column's)."""
    drop_column(con, table, new)
    con.execute("UPDATE crowddb_columns SET column_name = ? WHERE lower(table_name) = lower(?) AND "
                "lower(column_name) = lower(?)", [new, table, old])
