"""Roles follow data: the roles of a derived relation (view, CTE, subquery), of a table filled by a query
(CREATE TABLE ... AS, INSERT ... SELECT) and of a renamed table or column, so a copy of a protected table is protected
too. (A dropped table's roles stay: a table re-created under its name is protected until declared otherwise.)

The rule is conservative and by name: a column inherits every role its name has in any table the query reads, and
an alias inherits the roles of every column its expression mentions (``id AS pid`` is the key; an expression of a
key still identifies rows: protected).
"""

from __future__ import annotations

import re

import duckdb
import sqlglot
from sqlglot import exp

from .catalog import TableRoles, declare_roles, roles_of, table_columns

DIALECT = "duckdb"

#: cheap test on literal-free SQL text: could it fill a table from a query or rename one? (then it is parsed)
LINEAGE_PATTERN = re.compile(r"\bcreate\b[\s\S]*?\btable\b[\s\S]*?\bas\b|\binsert\b[\s\S]*?\bselect\b|"
                             r"\balter\b[\s\S]*?\brename\b", re.I)


def relation_kind(con: duckdb.DuckDBPyConnection, name: str) -> str | None:
    """'table', 'view' or None for a name in the current schema."""
    rows = con.execute("SELECT 'table' FROM duckdb_tables() WHERE lower(table_name) = lower(?) UNION ALL "
                       "SELECT 'view' FROM duckdb_views() WHERE lower(view_name) = lower(?) AND NOT internal",
                       [name, name]).fetchall()
    return rows[0][0] if rows else None


def derived_roles(con: duckdb.DuckDBPyConnection, query: exp.Expression, columns: list[str],
                  view_sql: str | None = None) -> TableRoles:
    """Roles of the relation ``query`` produces (its output ``columns``), by name from the tables it reads."""
    tree = query
    if view_sql:
        try:
            tree = sqlglot.parse_one(view_sql, read=DIALECT)
        except sqlglot.errors.ParseError:
            tree = query
    base = {t.name for t in tree.find_all(exp.Table) if relation_kind(con, t.name) in ("table", "view")}
    qi: dict[str, str | None] = {}
    protected: set[str] = set()
    truths: list[str] = []
    keys: list[str] = []
    for r in (roles_of(con, t) for t in sorted(base)):
        for c in r.quasi_identifiers:
            qi.setdefault(c.lower(), r.kinds.get(c))
        protected |= {c.lower() for c in r.protected}
        truths += [r.ground_truth.lower()] if r.ground_truth else []
        keys += [r.key.lower()] if r.key else []
    # aliases: `expr AS name` takes the roles of the columns expr mentions
    for select in tree.find_all(exp.Select):
        for projection in select.expressions:
            if isinstance(projection, exp.Alias):
                mentioned = {c.name.lower() for c in projection.this.find_all(exp.Column)}
                name = projection.alias.lower()
                if isinstance(projection.this, exp.Column) and projection.this.name.lower() in keys:
                    keys.append(name)  # the key under another name
                elif mentioned & protected:  # includes the keys: an expression of a key still identifies rows
                    protected.add(name)
                if mentioned & set(truths):
                    truths.append(name)
                if mentioned & set(qi) and name not in qi:
                    qi[name] = None
    present = {c.lower(): c for c in columns}
    truth = next((present[t] for t in truths if t in present), None)
    key = next((present[k] for k in keys if k in present), None)
    sensitive = tuple(present[p] for p in sorted(protected) if p in present and present[p] not in (truth, key))
    hidden = {*sensitive, truth, key}  # protected wins over quasi-identifier: never published at all
    quasi = tuple(present[q] for q in qi if q in present and present[q] not in hidden)
    return TableRoles("<derived>", quasi, {c: qi[c.lower()] for c in quasi}, sensitive, (), truth, key)


def filled_table(statement: exp.Expression) -> tuple[exp.Table, exp.Expression, list[str] | None] | None:
    """(target table, source query, INSERT column list) of a CREATE TABLE ... AS / INSERT ... SELECT, else None."""
    if isinstance(statement, exp.Create) and str(statement.args.get("kind", "")).upper() == "TABLE":
        target, query, names = statement.this, statement.expression, None
    elif isinstance(statement, exp.Insert):
        target, query = statement.this, statement.expression
        names = [e.name for e in target.expressions] if isinstance(target, exp.Schema) else None
    else:
        return None
    if isinstance(target, exp.Schema):
        target = target.this
    if not isinstance(target, exp.Table) or not isinstance(query, exp.Query):
        return None
    return target, query, names or None


def is_tracked(statement: exp.Expression) -> bool:
    """Does ``statement`` move data or names whose roles must follow (see ``follow``)?"""
    return filled_table(statement) is not None or bool(_renames(statement))


def follow(con: duckdb.DuckDBPyConnection, statement: exp.Expression) -> None:
    """After ``statement`` ran: carry roles into the table it filled, or along the names it renamed."""
    renames = _renames(statement)
    if renames:
        table = statement.this.name
        for action in renames:
            if isinstance(action, exp.AlterRename):
                con.execute("UPDATE crowddb_columns SET table_name = ? WHERE lower(table_name) = lower(?)",
                            [action.this.name, table])
            else:
                con.execute("UPDATE crowddb_columns SET column_name = ? WHERE lower(table_name) = lower(?) AND "
                            "lower(column_name) = lower(?)", [action.args["to"].name, table, action.this.name])
        return
    carry_roles(con, statement)


def _renames(statement: exp.Expression) -> list[exp.Expression]:
    """The RENAME TO / RENAME COLUMN actions of an ALTER TABLE."""
    if not isinstance(statement, exp.Alter) or not isinstance(statement.this, exp.Table):
        return []
    return [a for a in statement.args.get("actions") or [] if isinstance(a, (exp.AlterRename, exp.RenameColumn))]


def carry_roles(con: duckdb.DuckDBPyConnection, statement: exp.Expression) -> TableRoles | None:
    """After ``statement`` ran: declare on the table it created or filled the roles its columns carry.

    A created table gets exactly the derived roles. A table filled by INSERT keeps its own roles and gains, per
    column it received, the source column's role where it had none (a protected source makes the column sensitive,
    or the ground truth / key when the table has none). Returns the new roles, or None when nothing changed.
    """
    found = filled_table(statement)
    if found is None:
        return None
    table, query, names = found
    if relation_kind(con, table.name) != "table":
        return None
    columns = table_columns(con, table.name)
    if isinstance(statement, exp.Create):
        if statement.args.get("exists"):
            return None  # IF NOT EXISTS: an existing table was left as it was (its roles too)
        derived = derived_roles(con, query, columns)
        return _declare(con, table.name, derived)
    source_columns = [r[0] for r in con.execute("DESCRIBE " + query.sql(DIALECT)).fetchall()]
    targets = names or columns[:len(source_columns)]
    derived = derived_roles(con, query, source_columns)
    old = roles_of(con, table.name)
    lookup = {c.lower(): c for c in columns}
    qi, kinds = list(old.quasi_identifiers), dict(old.kinds)
    sensitive, core = list(old.sensitive), list(old.core)
    truth, key = old.ground_truth, old.key
    changed = False
    for src, dst in zip(source_columns, targets):
        dst = lookup.get(dst.lower(), dst)
        if dst in old.protected:
            continue
        if src in derived.protected:
            if src == derived.ground_truth and truth is None and dst not in qi:
                truth = dst
            elif src == derived.key and key is None and dst not in qi:
                key = dst
            else:
                sensitive.append(dst)
            qi = [c for c in qi if c != dst]
            core = [c for c in core if c != dst]
            changed = True
        elif src in derived.quasi_identifiers and dst not in qi:
            qi.append(dst)
            if derived.kinds.get(src):
                kinds[dst] = derived.kinds[src]
            changed = True
    if not changed:
        return None
    merged = TableRoles(table.name, tuple(qi), {c: k for c, k in kinds.items() if c in qi}, tuple(sensitive),
                        tuple(core), truth, key)
    return _declare(con, table.name, merged)


def _declare(con: duckdb.DuckDBPyConnection, table: str, roles: TableRoles) -> TableRoles:
    """Write ``roles`` for ``table``, replacing what was declared (in the caller's transaction, if one is open)."""
    return declare_roles(con, table, quasi_identifiers=roles.quasi_identifiers, sensitive=roles.sensitive,
                         core=roles.core, ground_truth=roles.ground_truth, key=roles.key,
                         kinds={c: k for c, k in roles.kinds.items() if k})
