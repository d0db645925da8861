"""Roles follow data, by lineage: what each column of a derived relation (view, CTE, subquery, union), of a table
filled by a query (CREATE TABLE ... AS, INSERT ... SELECT) and of a renamed table or column may show a worker.

The rule is an allow list, computed with sqlglot's own scope and lineage (``qualify`` expands stars with EXCLUDE,
REPLACE and RENAME; ``to_node`` follows CTEs, subqueries, unions and struct fields down to source columns): a column
is published as it is only when every source column it derives from may be (a declared core column with no other
role, or a column of a table on which no role was ever declared); derived from a quasi-identifier, it is generalized
as one; derived from a sensitive, ground-truth or key column, or of lineage sqlglot cannot establish (UNPIVOT,
COLUMNS(), a column DuckDB and sqlglot name differently), it is withheld. Columns a query equates (JOIN ... ON,
USING, WHERE) share the strictest verdict among them. An unchanged copy of the key or the ground truth stays the key
or the ground truth (``id AS pid``). A dropped table's roles stay: a table re-created under its name is protected until
declared otherwise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import duckdb
import sqlglot
from sqlglot import exp
from sqlglot.lineage import Node, to_node
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, build_scope
from sqlglot.schema import MappingSchema

from . import _sql, replacement
from ._sql import DIALECT
from .errors import PrivacyError
from .privacy import equality, identity
from .privacy.functions import Functions
from .store import composition, links, privacy
from .store.roles import (
    TableRoles,
    declare_roles,
    declared_tables,
    drop_column,
    is_key,
    mark_chosen,
    relation_kind,
    rename_column,
    rename_table,
    roles_of,
    table_columns,
)

#: what a column of a derived relation may become, worst last: published as it is, generalized, never published
RAW, QI, WITHHELD = 0, 1, 2
#: temp tables of earlier crowd steps: an answer of a group operator is a row's key, a table function's output is a
#: release of its own; nothing derived from them is published in a HIT (their lineage is not followed)
_CROWD_TEMP = "__crowd_"


@dataclasses.dataclass(frozen=True)
class Status:
    """What lineage proves about one column: how it may be published, why, and whether ``*`` publishes it."""

    level: int
    kind: str | None = None
    reason: str = ""
    star: bool = True
    truth: bool = False  # an unchanged copy of the ground truth (the simulated crowd's knowledge, the answer domain)
    key: bool = False    # an unchanged copy of the key (what a group operator returns)
    origin: tuple[str, str] | None = None  # an unchanged copy of one stored column: (its table's key, its name)
    #: withheld, and its values may hold a quasi-identifier's: it reads one besides a protected column, or crowddb
    #: cannot tell what it reads (a k-anonymous release must not print it as it is: ``DerivedRoles.mixed``)
    mixed: bool = False


@dataclasses.dataclass(frozen=True)
class DerivedRoles(TableRoles):
    """Roles of a derived relation, with the reason each withheld column is withheld (shown by explain())."""

    withheld: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: per published column derived row by row from one table: (that table, the derivation as an expression over
    #: its columns, qualified by ``BASE_ALIAS``); crowddb evaluates it again on the stored rows before publishing
    recompute: Mapping[str, tuple[str, exp.Expression | None]] = dataclasses.field(default_factory=dict)
    #: per column that is an unchanged copy of one stored column: (that table's key, that column)
    origins: Mapping[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    #: withheld columns whose values may hold a quasi-identifier's (``Status.mixed``): ANONYMIZE withholds them
    mixed: tuple[str, ...] = ()


#: the alias a ``DerivedRoles.recompute`` expression reads its table's columns under
BASE_ALIAS = "__crowd_base"


def base_status(roles: TableRoles, column: str) -> Status:
    """The allow list on a table with declared roles: core columns raw, quasi-identifiers generalized, the rest
    withheld (sensitive, ground truth, key, or simply not declared core)."""
    c, table = column.lower(), identity.display(roles.table)
    if c == (roles.ground_truth or "").lower():
        return Status(WITHHELD, reason=f"ground truth {table}.{column}", truth=True)
    if roles.is_key(c):
        return Status(WITHHELD, reason=f"key {table}.{column}", key=True)
    if c in {s.lower() for s in roles.sensitive}:
        return Status(WITHHELD, reason=f"sensitive {table}.{column}")
    core = {s.lower() for s in roles.core}
    if c in {q.lower() for q in roles.quasi_identifiers}:
        kind = {q.lower(): k for q, k in roles.kinds.items()}.get(c)
        return Status(QI, kind=kind, reason=f"quasi-identifier {table}.{column}", star=not core or c in core)
    if core and c not in core:
        return Status(WITHHELD, reason=f"{table}.{column} is not declared core")
    return Status(RAW)


class Lineage:
    """Where each output column of a query comes from (sqlglot's scope and lineage), judged by the allow list.

    ``temp_roles``: roles of temp tables the planner materialized (derived inputs), which the catalog does not hold.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, temp_roles: Mapping[str, TableRoles] | None = None) -> None:
        self.con = con
        self.temp_roles = {k.lower(): v for k, v in (temp_roles or {}).items()}
        self.ids = identity.Identities(con)  # table references as DuckDB binds them
        home = identity.home(con)
        rows = con.execute("SELECT database_name, schema_name, table_name, column_name FROM duckdb_columns() "
                           "WHERE NOT internal ORDER BY column_index").fetchall()
        self.columns: dict[str, dict[str, str]] = {}  # per table key (lower-cased): its columns
        self._paths: dict[str, tuple[str, str, str]] = {}  # per table key: (catalog, schema, table)
        for catalog, schema, table, column in rows:
            key = identity.TableId(catalog, schema, table, home=catalog.lower() == home.lower()).key.lower()
            self.columns.setdefault(key, {}).setdefault(column, "TEXT")
            self._paths[key] = (catalog, schema, table)
        self._home = home
        self.declared = declared_tables(con)
        self._roles: dict[str, TableRoles | None] = {}  # per table, looked up once per statement
        self.functions = Functions(con)  # which calls lineage may look through
        self._composed: dict[str, tuple[str, exp.Expression | None]] = {}  # column -> its row-wise derivation

    # ------------------------------------------------------------------------------------------ per table
    def roles(self, table: str) -> TableRoles | None:
        """Declared (or materialized) roles of ``table``; None when nothing was declared to protect."""
        name = table.lower()
        if name not in self._roles:
            self._roles[name] = None  # a view cannot read itself; guards the recursion
            self._roles[name] = self._lookup(table)
        return self._roles[name]

    def _lookup(self, table: str) -> TableRoles | None:
        """``table`` is a key (``crowddb.privacy.identity``)."""
        key = table.lower()
        catalog, _, name = identity.split(table)
        if catalog == "temp" and name.lower() in self.temp_roles:  # the planner's materialized inputs
            return self.temp_roles[name.lower()]
        if key in self.declared:
            return roles_of(self.con, table)
        if name.lower().startswith(_CROWD_TEMP):
            return TableRoles(table, sensitive=tuple(self.columns.get(key, {})))
        python_name = replacement.original_name(name)
        if python_name is not None:
            return self._object_roles(table, python_name)
        if relation_kind(self.con, table) == "view":
            return self._view_roles(table)
        return None

    def key(self, table: exp.Table) -> str | None:
        """The key of what a table reference reads (None: a CTE's name, a table function, nothing DuckDB binds)."""
        return self.ids.key(table)

    def _view_roles(self, view: str) -> DerivedRoles | None:
        columns = list(self.columns.get(view.lower(), {}))
        query = view_query(self.con, view)
        if query is None:  # unreadable: everything withheld
            return DerivedRoles(view, sensitive=tuple(columns),
                                withheld={c: f"the lineage of view {view!r} cannot be read" for c in columns},
                                mixed=tuple(columns))
        return self.relation(query, columns, name=view)

    def _object_roles(self, view: str, python_name: str) -> DerivedRoles | None:
        """A Python object the query reads (a replacement scan): no roles while none is declared anywhere; else all
        withheld, as for a file: it may hold a copy of a protected table, and its lineage cannot be followed."""
        if not (self.declared or self.temp_roles):
            return None
        columns = tuple(self.columns.get(view.lower(), {}))
        reason = (f"it comes from the Python object {python_name!r}, whose lineage crowddb cannot follow; load it "
                  f"with db.load_frame({python_name!r}, {python_name}, quasi_identifiers=[...]) to declare its roles")
        return DerivedRoles(view, sensitive=columns, withheld=dict.fromkeys(columns, reason), mixed=columns)

    def touches_roles(self, tree: exp.Expression) -> bool:
        """Does the query read (anywhere, through views too) a table with roles, or, while any role is declared, a
        source whose lineage cannot be followed (a table function such as query('...') or a table macro, a file)?"""
        ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
        keys = [self.key(t) for t in tree.find_all(exp.Table)
                if t.name and not (not t.args.get("db") and t.name.lower() in ctes)]
        if any(self.roles(k) is not None for k in keys if k is not None):
            return True
        return bool(self.declared or self.temp_roles) and bool(opaque_sources(tree, self.key))

    # -------------------------------------------------------------------------------------- per relation
    def relation(self, query: exp.Query, columns: list[str], name: str = "<derived>") -> DerivedRoles | None:
        """Roles of the relation ``query`` produces (DuckDB's output ``columns``), or None when it reads no table
        with roles. A column whose lineage cannot be established is withheld."""
        if not self.touches_roles(query):
            return None
        statuses = self._statuses(query, columns)
        qi, kinds, sensitive, core, withheld, mixed = [], {}, [], [], {}, []
        truth = key = None
        origins = {c: s.origin for c, s in zip(columns, statuses) if s.origin is not None}
        for column, status in zip(columns, statuses):
            if status.level == WITHHELD:
                if status.truth and truth is None:
                    truth = column
                elif status.key and key is None:
                    key = column
                else:
                    sensitive.append(column)
                withheld[column] = status.reason
                if status.mixed:
                    mixed.append(column)
                continue
            if status.level == QI:
                qi.append(column)
                if status.kind:
                    kinds[column] = status.kind
            if status.star:
                core.append(column)
        recompute = {c: self._composed[c] for c in columns if c in self._composed and c not in withheld}
        return DerivedRoles(name, tuple(qi), kinds, tuple(sensitive), tuple(core), truth, key, withheld, recompute,
                            origins, tuple(mixed))

    def origins(self, query: exp.Query, columns: list[str]) -> dict[str, tuple[str, str]]:
        """{output column: (table key, column)} of the columns of ``query`` that are unchanged copies of one stored
        column (whether or not anything is protected)."""
        return {c: s.origin for c, s in zip(columns, self._statuses(query, columns)) if s.origin is not None}

    def _schema(self) -> MappingSchema:
        """Every table's columns for sqlglot's qualify, under its catalog and schema, added as identifier nodes (a
        dict's keys would be parsed)."""
        schema = MappingSchema(dialect=DIALECT)
        for key, columns in self.columns.items():
            catalog, db, table = self._paths[key]
            node = exp.Table(this=_sql.identifier(table), db=_sql.identifier(db), catalog=_sql.identifier(catalog))
            schema.add_table(node, {_sql.identifier(c): t for c, t in columns.items()}, dialect=DIALECT)
        return schema

    def _resolved(self, query: exp.Query) -> exp.Query:
        return resolved(self.ids, query)

    def _leaf_key(self, source: exp.Table) -> str:
        """The key of a lineage leaf's table (a reference ``_resolved`` qualified)."""
        catalog = source.catalog or self._home
        return identity.TableId(catalog, source.db or "main", source.name,
                                home=catalog.lower() == self._home.lower()).key

    def _statuses(self, query: exp.Query, columns: list[str]) -> list[Status]:
        opaque = opaque_sources(query, self.key)
        reason = (f"it may come from {opaque[0]}, whose lineage crowddb cannot follow" if opaque
                  else "its lineage cannot be established")
        unknown = [Status(WITHHELD, reason=reason, mixed=True)] * len(columns)
        tree = self._resolved(query)
        if not any("rowid" in {c.lower() for c in cols} for cols in self.columns.values()):
            for col in list(tree.find_all(exp.Column)):  # DuckDB's row identity (the planner joins answers on it)
                if col.name.lower() == "rowid":
                    col.replace(exp.Null())
        try:
            schema = self._schema()
            tree = qualify(tree, schema=schema, dialect=DIALECT, validate_qualify_columns=False,
                           quote_identifiers=True, identify=True)
            root = build_scope(tree)
        except (sqlglot.errors.SqlglotError, KeyError, ValueError, TypeError):
            return unknown
        if root is None or _opaque(tree) or len(tree.selects) != len(columns):
            return unknown  # a construct whose output columns sqlglot cannot name (UNPIVOT, COLUMNS(), ...)
        misread = _by_name_misread(tree)
        if misread is None:
            return unknown
        equal = self._equalities(root, schema)
        out = []
        for i, (select, column) in enumerate(zip(tree.selects, columns)):
            name = select.alias_or_name
            if column.lower() in misread:
                out.append(Status(WITHHELD, reason="a set operation BY NAME matches it by name, and its branches "
                                                   "hold it at different positions", mixed=True))
                continue
            if name.lower() != column.lower() and not (name.startswith("_col_") or not name):
                out.append(unknown[0])  # sqlglot and DuckDB disagree about this column: fail closed
                continue
            try:
                node = to_node(i, root, dialect=DIALECT, schema=schema)
            except (sqlglot.errors.SqlglotError, KeyError, ValueError, IndexError):
                out.append(unknown[0])
                continue
            status = self._judge(node, equal)
            out.append(status)
            if status.level != WITHHELD:
                composed = _compose(node)
                if composed is not None:
                    self._composed[column] = composed
        return out

    def _judge(self, node: Node, equal: dict[tuple[str, str], Status]) -> Status:
        """Combine the statuses of every source column ``node`` derives from: the worst wins; a constant is raw.
        A call lineage cannot look through (a macro, a UDF, getvariable, ...) makes the column unknown: withheld."""
        for level in node.walk():
            opaque = self.functions.opaque(level.expression)
            if opaque:
                return Status(WITHHELD, reason=f"it goes through {opaque}, which may read more than its arguments",
                              mixed=True)
        statuses, quasi = {}, False
        for leaf in node.walk():
            if leaf.downstream:
                continue
            if isinstance(leaf.source, exp.Table) and isinstance(leaf.source.this, exp.Identifier):
                column = _leaf_column(leaf)
                if column is None:
                    return Status(WITHHELD, reason="its lineage cannot be established", mixed=True)
                table = self._leaf_key(leaf.source)
                source = (table.lower(), column.lower())
                own = self._table_status(table, column)
                quasi = quasi or own.level == QI or own.mixed  # (a quasi-identifier equated with a protected column)
                statuses[source] = equal.get(source) or own
            elif not _is_constant(leaf.expression):
                return Status(WITHHELD, reason="its lineage cannot be established", mixed=True)
        if not statuses:
            return Status(RAW)
        worst = max(statuses.values(), key=lambda s: s.level)
        star = all(s.star for s in statuses.values())
        # withheld, but reading a quasi-identifier too (concat(zip, diagnosis)): printed as it is, it prints the zip
        mixed = worst.level == WITHHELD and (quasi or any(s.mixed or s.level == QI for s in statuses.values()))
        # an unchanged copy of one column (also through every branch of a union) keeps the QI's kind, the truth and
        # key marks
        if len(statuses) == 1 and _is_copy(node):
            return dataclasses.replace(worst, star=star, origin=self._origin(*next(iter(statuses))), mixed=mixed)
        return Status(worst.level, reason=worst.reason, star=star, mixed=mixed)

    def _origin(self, table: str, column: str) -> tuple[str, str]:
        """The stored column an unchanged copy of ``table.column`` is: a view's copy is its table's."""
        roles = self.roles(table)
        if isinstance(roles, DerivedRoles):
            found = {c.lower(): o for c, o in roles.origins.items()}.get(column.lower())
            if found is not None:
                return found
        return table, column

    def _table_status(self, table: str, column: str) -> Status:
        roles = self.roles(table)
        if roles is None:  # nothing declared on this table: published as it is (a column `id` is its key)
            return (Status(WITHHELD, reason=f"key {table}.{column}", key=True) if is_key(column, None)
                    else Status(RAW))
        if isinstance(roles, DerivedRoles) and column in roles.withheld:
            return Status(WITHHELD, reason=roles.withheld[column], truth=column == roles.ground_truth,
                          key=column == roles.key, mixed=column in roles.mixed)
        return base_status(roles, column)

    def _equalities(self, root: Scope, schema) -> dict[tuple[str, str], Status]:
        """Source columns the query equates (JOIN ... ON, USING, WHERE; transitively) share the worst status among
        them: a join partner's copy of a zip is the person's zip, of a key is the key."""
        pairs = []
        for scope in root.traverse():
            for eq in scope.find_all(exp.EQ, exp.NullSafeEQ):
                sides = [self._sources_of(side, scope, schema) for side in (eq.this, eq.expression)]
                pairs += [(a, b) for a in sides[0] for b in sides[1]]
        worse = equality.stricter(pairs, lambda m: self._table_status(*m), lambda s: s.level)
        return {m: dataclasses.replace(s, truth=False, key=False, reason=f"equated with {s.reason}")
                for m, s in worse.items()}

    def _sources_of(self, side: exp.Expression, scope: Scope, schema) -> list[tuple[str, str]]:
        """The source columns (table key, column) an expression of ``scope`` reads."""
        out = []
        for col in side.find_all(exp.Column):
            source = scope.sources.get(col.table)
            if isinstance(source, exp.Table):
                out.append((self._leaf_key(source).lower(), col.name.lower()))
            elif isinstance(source, Scope):
                try:
                    node = to_node(col.name, source, dialect=DIALECT, schema=schema)
                except (sqlglot.errors.SqlglotError, KeyError, ValueError, IndexError):
                    continue
                for leaf in node.walk():
                    if not leaf.downstream and isinstance(leaf.source, exp.Table):
                        column = _leaf_column(leaf)
                        if column is not None:
                            out.append((self._leaf_key(leaf.source).lower(), column.lower()))
        return out


#: table functions that only count (sqlglot parses range() as GenerateSeries): over constant arguments their rows
#: derive from nothing
_GENERATORS = {"range", "generate_series"}


def view_query(con: duckdb.DuckDBPyConnection, view: str) -> exp.Query | None:
    """The query the view of key ``view`` stands for, parsed, its outputs named as the view's column list names them
    (None: no such view, or its text sqlglot cannot read)."""
    found = identity.of_key(con, view)
    if found is None or not found.view:
        return None
    sql = con.execute("SELECT sql FROM duckdb_views() WHERE database_name = ? AND schema_name = ? AND view_name = ? "
                      "AND NOT internal", [found.catalog, found.schema, found.name]).fetchall()
    try:
        tree = sqlglot.parse_one(sql[0][0], read=DIALECT)
    except (sqlglot.errors.SqlglotError, IndexError):
        return None
    query = tree.expression if isinstance(tree, exp.Create) else tree
    if not isinstance(query, exp.Query):
        return None
    names = tree.this.expressions if isinstance(tree, exp.Create) and isinstance(tree.this, exp.Schema) else []
    if names:  # CREATE VIEW v (a, b) AS ...: the list renames the first outputs, by position
        first = query
        while isinstance(first, exp.SetOperation):
            first = first.this
        if (not isinstance(first, exp.Select) or len(names) > len(first.expressions)
                or any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))
                       for e in first.expressions)):
            return None  # (a star's columns are named only once qualify expands it)
        for i, name in enumerate(names):
            item = first.expressions[i]
            first.expressions[i].replace(exp.alias_(item.unalias() if isinstance(item, exp.Alias) else item,
                                                   _sql.identifier(name.name)))
    return query


def base_tables(con, tree: exp.Expression, seen: frozenset[str] = frozenset(),
                ids: identity.Identities | None = None) -> tuple[str, ...]:
    """The keys of the catalog tables a query reads, however spelt (``main.adult``), through views (a CTE's own name
    is not one; its definition's tables are)."""
    ids = ids or identity.Identities(con)
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    found: list[str] = []
    for table in tree.find_all(exp.Table):
        if not table.name or (not table.args.get("db") and table.name.lower() in ctes):
            continue
        relation = ids.of(table)
        if relation is None or relation.key.lower() in seen:
            continue
        if not relation.view:
            found.append(relation.key)
        else:
            query = view_query(con, relation.key)  # unreadable: the view stands for its tables
            found += (base_tables(con, query, seen | {relation.key.lower()}, ids) if query is not None
                      else [relation.key])
    return tuple(dict.fromkeys(found))


def opaque_sources(tree: exp.Expression, key: Callable[[exp.Table], str | None]) -> list[str]:
    """FROM items that are neither a table or view of the catalog (``key`` resolves it) nor a CTE of the query:
    table functions (which may read anything: ``query('SELECT * FROM people')``, a table macro), files, UNNEST."""
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    out = []
    for node in tree.find_all(exp.Table, exp.Unnest):
        if isinstance(node, exp.Unnest):
            if isinstance(node.parent, (exp.From, exp.Join)):
                out.append(node.sql(DIALECT))
        elif not isinstance(node.this, exp.Identifier):
            generator = isinstance(node.this, exp.GenerateSeries) or (
                isinstance(node.this, exp.Anonymous) and node.this.name.lower() in _GENERATORS)
            if not (generator and all(_is_constant(a) for a in node.this.iter_expressions())):
                out.append(node.this.sql(DIALECT))
        elif not (not node.args.get("db") and node.name.lower() in ctes) and key(node) is None:
            out.append(node.name)
    return out


def _leaf_column(leaf: Node) -> str | None:
    """The column name of a lineage leaf (its name is the column's SQL, which sqlglot wrote quoted)."""
    try:
        column = sqlglot.parse_one(leaf.name, read=DIALECT, into=exp.Column)
    except sqlglot.errors.SqlglotError:
        return None
    return column.name if isinstance(column, exp.Column) else None


#: node types a constant expression may hold (a literal, arithmetic or a cast of literals); anything else, e.g. the
#: COLUMNS('regex') star, is treated as of unknown lineage
_CONSTANT_NODES = (exp.Literal, exp.Null, exp.Boolean, exp.Paren, exp.Neg, exp.Binary, exp.Cast, exp.DataType,
                   exp.Alias, exp.Identifier, exp.DataTypeParam)


def _is_constant(node: exp.Expression) -> bool:
    return all(isinstance(n, _CONSTANT_NODES) and not isinstance(n, exp.Column) for n in node.walk())


def _is_copy(node: Node) -> bool:
    """Is ``node`` an unchanged copy of one column through every level (aliases and plain column references)?"""
    for n in node.walk():
        expression = n.expression.unalias() if isinstance(n.expression, exp.Alias) else n.expression
        if n.downstream and not isinstance(expression, (exp.Column, exp.SetOperation)):
            return False
    return True


def resolved(ids: identity.Identities, query: exp.Expression) -> exp.Expression:
    """A copy of ``query`` whose table references name what DuckDB binds them to (catalog, schema, table): what
    lineage follows is the table DuckDB reads, whatever the spelling (a temp table shadows ``adult`` and
    ``main.adult``). A reference DuckDB cannot bind stays as it is, and lineage cannot follow it."""
    tree = query.copy()
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    for table in list(tree.find_all(exp.Table)):
        if not table.name or (not table.args.get("db") and table.name.lower() in ctes):
            continue
        found = ids.of(table)
        if found is not None:
            ref = found.ref()
            ref.set("alias", table.args.get("alias") or exp.TableAlias(this=_sql.identifier(table.name)))
            table.replace(ref)
    return tree


def _compose(node: Node) -> tuple[str, exp.Expression | None] | None:
    """A column's derivation written over the columns of the one table it reads row by row (its lineage's expressions
    substituted level by level down to the table's columns, read under ``BASE_ALIAS``), or None: it reads several
    tables, aggregates or windows over rows, or has a level crowddb cannot substitute. (table, None): it holds a
    reference lineage did not resolve to a stored column (a positional reference, a star)."""
    tables: set[str] = set()

    def down(n: Node) -> exp.Expression | None:
        if not n.downstream:
            if isinstance(n.source, exp.Table) and isinstance(n.source.this, exp.Identifier):
                column = _leaf_column(n)
                if column is None:
                    return None
                tables.add(n.source.name)
                return exp.column(column, table=BASE_ALIAS, quoted=True)
            expression = n.expression.unalias() if isinstance(n.expression, exp.Alias) else n.expression
            return expression.copy() if _is_constant(expression) else None
        expression = (n.expression.unalias() if isinstance(n.expression, exp.Alias) else n.expression).copy()
        if expression.find(exp.AggFunc, exp.Window, exp.Query):
            return None
        children = {}
        for d in n.downstream:
            column = _parsed_column(d.name)
            if column is None:
                return None
            children[(column.table.lower(), column.name.lower())] = d
        holder = exp.Paren(this=expression)  # (a level that is a bare column is replaced inside its holder)
        for col in list(holder.find_all(exp.Column)):
            child = children.get((col.table.lower(), col.name.lower()))
            if child is None:
                return None
            value = down(child)
            if value is None:
                return None
            col.replace(value if isinstance(value, exp.Column) else exp.Paren(this=value))
        return holder.this

    composed = down(node)
    if composed is None or len(tables) > 1:
        return None
    unresolved = [n for n in composed.walk() if isinstance(n, (exp.PositionalColumn, exp.Star, exp.Placeholder))
                  or (isinstance(n, exp.Column) and n.table != BASE_ALIAS)]
    if unresolved:  # a reference lineage did not resolve to a stored column: nothing to compute it again from
        return (tables.pop() if tables else "", None)
    return (tables.pop() if tables else "", composed)


def _parsed_column(name: str) -> exp.Column | None:
    try:
        column = sqlglot.parse_one(name, read=DIALECT, into=exp.Column)
    except sqlglot.errors.SqlglotError:
        return None
    return column if isinstance(column, exp.Column) else None


def _by_name_misread(tree: exp.Expression) -> set[str] | None:
    """The columns sqlglot's lineage would misread in a UNION/EXCEPT/INTERSECT ... BY NAME (it pairs columns by
    position, DuckDB by name): those its branches hold at different positions. None: a branch that is not a plain
    query (then nothing of it can be read)."""
    out: set[str] = set()
    for op in tree.find_all(exp.SetOperation):
        if not op.args.get("by_name"):
            continue
        sides = (op.this, op.expression)
        if not all(isinstance(side, exp.Query) for side in sides):
            return None
        orders = [[s.alias_or_name.lower() for s in side.selects] for side in sides]
        for names in orders:
            out.update(n for i, n in enumerate(names) if any(i >= len(o) or o[i] != n for o in orders))
    return out


def _opaque(tree: exp.Expression) -> bool:
    """Constructs whose output columns sqlglot's scope cannot name: a star left unexpanded, COLUMNS(), PIVOT, and
    a table or subquery renamed with a column list (``FROM t AS c(a, b)``: DuckDB renames by position, lineage
    would follow the names)."""
    return any((isinstance(n, (exp.Star, exp.Columns, exp.Pivot)) and not isinstance(n.parent, exp.Count))
               or (isinstance(n, exp.TableAlias) and n.columns and isinstance(n.parent, (exp.Table, exp.Subquery)))
               for n in tree.walk())


def derived_roles(con: duckdb.DuckDBPyConnection, query: exp.Expression, columns: list[str],
                  temp_roles: Mapping[str, TableRoles] | None = None) -> TableRoles:
    """Roles of the relation ``query`` produces (its output ``columns``): the allow list through sqlglot's lineage.
    Empty roles when it reads no table with roles (nothing was declared to protect)."""
    roles = Lineage(con, temp_roles).relation(query, columns)
    return roles if roles is not None else TableRoles("<derived>")


def filled_table(statement: exp.Expression) -> tuple[exp.Table, exp.Expression, list[str] | None] | None:
    """(target table, source query, target column list) of a CREATE TABLE ... AS / INSERT ... SELECT / UPDATE ... SET,
    else None."""
    if isinstance(statement, exp.Create) and str(statement.args.get("kind", "")).upper() == "TABLE":
        target, query, names = statement.this, statement.expression, None
    elif isinstance(statement, exp.Insert):
        target, query = statement.this, statement.expression
        names = [e.name for e in target.expressions] if isinstance(target, exp.Schema) else None
        if isinstance(query, exp.Values):  # constants fill nothing roles follow (see ``withheld_columns``)
            return None
    elif isinstance(statement, exp.Update) and isinstance(statement.this, exp.Table):
        target, (query, names) = statement.this, _update_source(statement)
    elif isinstance(statement, exp.Alter) and isinstance(statement.this, exp.Table) and _using(statement):
        target, (query, names) = statement.this, _using_source(statement)  # ALTER ... TYPE ... USING: an UPDATE
    else:
        return None
    if isinstance(target, exp.Schema):
        target = target.this
    if not isinstance(target, exp.Table) or not isinstance(query, exp.Query):
        return None
    return target, query, names or None


def _update_source(update: exp.Update) -> tuple[exp.Select | None, list[str]]:
    """An UPDATE's new values as a query (``SET a = p.job FROM people p`` -> ``SELECT p.job AS a FROM t, people p
    WHERE ...``): a column set from a protected one takes its roles, as an INSERT ... SELECT's would."""
    pairs = [(e.this, e.expression) for e in update.expressions
             if isinstance(e, exp.EQ) and isinstance(e.this, exp.Column)]
    if not pairs:
        return None, []
    target = update.this.copy()
    query = exp.Select(expressions=[exp.alias_(value.copy(), _sql.identifier(column.name)) for column, value in pairs])
    query = query.from_(target)
    from_ = update.args.get("from_") or update.args.get("from")
    for item in ([from_.this] if from_ is not None else []) + [j.this for j in update.args.get("joins") or []]:
        query = query.join(item.copy(), join_type="cross")
    if update.args.get("where") is not None:
        query.set("where", update.args["where"].copy())
    return query, [column.name for column, _ in pairs]


def _using(alter: exp.Alter) -> list[exp.AlterColumn]:
    """The ALTER COLUMN ... TYPE ... USING actions of an ALTER TABLE: each rewrites a stored column."""
    return [a for a in alter.args.get("actions") or [] if isinstance(a, exp.AlterColumn) and a.args.get("using")]


def _using_source(alter: exp.Alter) -> tuple[exp.Select, list[str]]:
    """``ALTER TABLE t ALTER c TYPE ... USING expr`` as the query of what it writes: ``SELECT expr AS c FROM t``."""
    actions = _using(alter)
    query = exp.Select(expressions=[exp.alias_(a.args["using"].copy(), _sql.identifier(a.this.name))
                                    for a in actions]).from_(alter.this.copy())
    return query, [a.this.name for a in actions]


def withheld_columns(statement: exp.Expression) -> tuple[exp.Table, list[str] | None, str] | None:
    """Columns a statement writes through a path lineage does not compute, to be withheld until their role is
    declared: (table, columns or None for all, why). A generated column (its value is computed when read, from
    columns whose roles may change), columns loaded from a file (COPY ... FROM: it may hold a copy of a protected
    table), and columns an INSERT's ON CONFLICT DO UPDATE sets to anything but a constant."""
    if isinstance(statement, exp.Create) and isinstance(statement.this, exp.Schema):
        generated = [d.name for d in statement.this.expressions if isinstance(d, exp.ColumnDef)
                     and any(isinstance(c.kind, (exp.ComputedColumnConstraint, exp.GeneratedAsIdentityColumnConstraint))
                             for c in d.args.get("constraints") or [])]
        if generated and isinstance(statement.this.this, exp.Table):
            return statement.this.this, generated, "a generated column, computed from other columns when read"
        return None
    if isinstance(statement, exp.Copy) and statement.args.get("kind"):  # kind True: COPY ... FROM
        target = statement.this
        names = [e.name for e in target.expressions] if isinstance(target, exp.Schema) else None
        table = target.this if isinstance(target, exp.Schema) else target
        return (table, names, "loaded from a file by COPY ... FROM") if isinstance(table, exp.Table) else None
    if isinstance(statement, exp.Insert) and isinstance(statement.expression, exp.Values):
        rows = [row.expressions if isinstance(row, exp.Tuple) else [row] for row in statement.expression.expressions]
        positions = sorted({i for row in rows for i, e in enumerate(row) if not _is_constant(e)})
        table = statement.this.this if isinstance(statement.this, exp.Schema) else statement.this
        if positions and isinstance(table, exp.Table):  # a value that is not a constant (a subquery) may read anything
            names = ([e.name for e in statement.this.expressions] if isinstance(statement.this, exp.Schema)
                     else None)
            return table, _positions(names, positions), "inserted from an expression that is not a constant"
    if isinstance(statement, exp.Insert) and isinstance(statement.args.get("conflict"), exp.OnConflict):
        set_ = [e.this.name for e in statement.args["conflict"].expressions or []
                if isinstance(e, exp.EQ) and isinstance(e.this, exp.Column) and not _is_constant(e.expression)]
        table = statement.this.this if isinstance(statement.this, exp.Schema) else statement.this
        if set_ and isinstance(table, exp.Table):
            return table, set_, "set by ON CONFLICT DO UPDATE, which crowddb does not follow"
    return None


class _Positions(list):
    """Columns of a table named by position (a VALUES row without a column list), resolved against the table."""


def _positions(names: list[str] | None, positions: list[int]) -> list[str] | _Positions:
    return [names[i] for i in positions if i < len(names)] if names else _Positions(positions)


def writes_home(con: duckdb.DuckDBPyConnection, statement: exp.Expression) -> bool:
    """Does ``statement`` write a table of crowddb's home database (or the temp one)? DuckDB lets one transaction
    write one attached database, so the roles of a table written elsewhere are carried after its own commit."""
    found = filled_table(statement)
    table = found[0] if found else (withheld_columns(statement) or (None,))[0]
    if table is None and isinstance(statement, exp.Alter) and isinstance(statement.this, exp.Table):
        table = statement.this
    if not isinstance(table, exp.Table):
        return True
    home = identity.home(con).lower()
    if table.catalog:
        return table.catalog.lower() in (home, "temp")
    if table.db:
        databases = {r[0].lower() for r in con.execute("SELECT database_name FROM duckdb_databases()").fetchall()}
        schemas = {r[0].lower() for r in con.execute("SELECT schema_name FROM duckdb_schemas() WHERE "
                                                      "database_name = current_database()").fetchall()}
        return not (table.db.lower() in databases - {home, "temp"} and table.db.lower() not in schemas)
    return con.execute("SELECT current_database()").fetchall()[0][0].lower() == home


def is_tracked(statement: exp.Expression) -> bool:
    """Does ``statement`` move data or names whose roles must follow (see ``follow``)?"""
    return filled_table(statement) is not None or bool(_renames(statement)) or withheld_columns(statement) is not None


_TARGET = "crowd_target"  # a statement's meta: the table it renames, resolved before it ran (``prepare``)
_SOURCE = "crowd_source"  # ... and the query it fills a table from, its names resolved before it ran


def prepare(con: duckdb.DuckDBPyConnection, statement: exp.Expression) -> exp.Expression:
    """Before ``statement`` runs: resolve what its names read while they still read it (an ALTER TABLE ... RENAME's
    table has another name, or none, afterwards; ``CREATE TEMP TABLE adult AS SELECT * FROM main.adult`` reads
    main.adult, which the same spelling no longer reads afterwards); ``follow`` reads them. Returns the statement."""
    ids = identity.Identities(con)
    if _renames(statement):
        found = ids.of(statement.this)
        if found is not None:
            statement.meta[_TARGET] = found
    filled = filled_table(statement)
    if filled is not None:
        statement.meta[_SOURCE] = resolved(ids, filled[1])
    return statement


def _target(con: duckdb.DuckDBPyConnection, table: exp.Table) -> str | None:
    """The key of the table a statement wrote (resolved after it ran), None when it is not a catalog table."""
    found = identity.Identities(con).of(table)
    return None if found is None or found.view else found.key


def follow(con: duckdb.DuckDBPyConnection, statement: exp.Expression,
           temp_roles: Mapping[str, TableRoles] | None = None) -> None:
    """After ``statement`` ran: carry roles into the table it filled, or along the names it renamed."""
    renames = _renames(statement)
    if renames:
        found = statement.meta.get(_TARGET) or identity.Identities(con).of(statement.this)
        if found is None:
            return
        table = found.key
        for action in renames:
            if isinstance(action, exp.AlterRename):
                renamed = dataclasses.replace(found, name=action.this.name)
                rename_table(con, table, renamed.key)
                links.renamed(con, table, renamed.key, table_columns(con, renamed.key))  # its ledger and budget
                table = renamed.key
            elif isinstance(action, exp.Drop):  # the column's roles go with it: a column added later under its
                for column in action.args.get("tables") or []:  # name takes its roles from how it is filled
                    drop_column(con, table, column.name)
            else:
                rename_column(con, table, action.this.name, action.args["to"].name)
                links.column_renamed(con, table, action.this.name, action.args["to"].name)
        return
    carry_roles(con, statement, temp_roles)
    withheld = withheld_columns(statement)
    if withheld is not None:
        withhold(con, *withheld)
    _mark_chosen(con, statement)


def _mark_chosen(con: duckdb.DuckDBPyConnection, statement: exp.Expression) -> None:
    """After ``statement`` ran: put on record a table whose rows it chose by a protected column (``selection.
    chosen_by``): made or filled from such a query (or from such a table), cut by a DELETE, or set by an UPDATE whose
    WHERE reads one. A later operator over the table is refused as over the clause itself."""
    from .privacy.selection import chosen_by

    fresh = isinstance(statement, exp.Create) and str(statement.args.get("kind", "")).upper() == "TABLE"
    if fresh and statement.args.get("exists"):
        return  # IF NOT EXISTS: an existing table was left as it was
    found = None if isinstance(statement, (exp.Alter, exp.Delete, exp.Update)) else filled_table(statement)
    if isinstance(statement, (exp.Delete, exp.Update)):  # its WHERE chooses the rows it keeps or sets
        table, chooser = statement.this, statement
    elif found is not None:  # made or filled from a query (its names as they read before it ran)
        table, chooser = found[0], statement.meta.get(_SOURCE) or found[1]
    elif fresh:  # CREATE TABLE t (...): made empty, chosen by nothing
        table, chooser = statement.this.this if isinstance(statement.this, exp.Schema) else statement.this, None
    else:
        return
    if not isinstance(table, exp.Table):
        return
    target = _target(con, table)
    if target is None:
        return
    mark_chosen(con, target, chosen_by(con, chooser) if chooser is not None else None, fresh=fresh)


def check_write(con: duckdb.DuckDBPyConnection, statement: exp.Expression) -> None:
    """Before a statement that writes stored columns runs, refuse what would make the ledgers lose people:

    - an UPDATE (or ALTER ... USING) that rewrites the key of a table with k-anonymous releases on record: the
      ledger tells its rows apart by the key, a rewritten key makes every row a new person;
    - one that rewrites a column of a table with epsilon charges on record: its sources are the ids its releases
      read, a rewritten id (``worker || '#'``) is a new source with a budget of its own;
    - an INSERT ... SELECT of a protected table's rows into a table with records of its own under another root: its
      people would be in two ledgers, each seeing only its own releases."""
    if isinstance(statement, exp.Update) and isinstance(statement.this, exp.Table):
        table, written = statement.this, _update_source(statement)[1]
    elif isinstance(statement, exp.Alter) and isinstance(statement.this, exp.Table):
        table, written = statement.this, [a.this.name for a in _using(statement)]
    elif isinstance(statement, exp.Insert) and isinstance(statement.expression, exp.Query):
        _refuse_mixing(con, statement)
        return
    else:
        return
    target = _target(con, table)
    if target is None or not written:
        return
    name, key = identity.display(target), roles_of(con, target).key
    if key and key.lower() in {w.lower() for w in written} and composition.has_releases(con, (target,)):
        raise PrivacyError(f"{name}.{key} is the key the privacy ledger tells the rows of {name!r} apart by, and "
                           "releases of them are on record: rewriting it would make every row a new person to the "
                           "ledger. Nothing was run; insert new rows instead")
    if privacy.has_charges(con, target):
        raise PrivacyError(f"releases were charged to the epsilon budget of {name!r} per source id: rewriting its "
                           f"stored values ({', '.join(written)}) could make a source a new one, with a budget of its "
                           "own. Nothing was run; insert new rows instead, or reset the budget "
                           f"(db.reset_privacy_budget({name!r}), a logged act)")


def _refuse_mixing(con: duckdb.DuckDBPyConnection, statement: exp.Insert) -> None:
    table = statement.this.this if isinstance(statement.this, exp.Schema) else statement.this
    target = _target(con, table) if isinstance(table, exp.Table) else None
    if target is None:
        return
    own = links.root(con, target)
    if own == target.lower() and not (composition.has_releases(con, (target,)) or privacy.has_acts(con, target)):
        return  # nothing of its own on record: it joins the source's ledger (``_link``)
    others = sorted({links.root(con, t) for t in _read_protected(con, statement.expression) if _has_records(con, t)}
                    - {own})
    if others:
        raise PrivacyError(f"this INSERT would put rows of {identity.display(others[0])!r} into "
                           f"{identity.display(target)!r}, whose releases are on record under "
                           f"{identity.display(own)!r}: the same people would be in two privacy ledgers, each "
                           "blind to the other's releases. Nothing was run; release them from their own table")


def withhold(con: duckdb.DuckDBPyConnection, table: exp.Table, columns: list[str] | None, reason: str) -> None:
    """Declare ``columns`` of ``table`` (None: all) sensitive: withheld from HITs until the user declares their role
    (``reason`` says why; the roles are checked against the table's columns as stored). With no role declared
    anywhere there is nothing to protect, and nothing is declared."""
    target = _target(con, table)
    if target is None or not declared_tables(con):
        return
    old = roles_of(con, target)
    stored = table_columns(con, target)
    names = stored if columns is None else columns
    if isinstance(names, _Positions):
        names = [stored[i] for i in names if i < len(stored)]
    lookup = {c.lower(): c for c in stored}
    names = [lookup[n.lower()] for n in names if n.lower() in lookup and lookup[n.lower()] not in old.protected]
    if not names:
        return
    merged = TableRoles(target, tuple(q for q in old.quasi_identifiers if q not in names),
                        {c: k for c, k in old.kinds.items() if c not in names}, (*old.sensitive, *names),
                        tuple(c for c in old.core if c not in names), old.ground_truth, old.key)
    _declare(con, target, merged)


def _renames(statement: exp.Expression) -> list[exp.Expression]:
    """The RENAME TO / RENAME COLUMN / DROP COLUMN actions of an ALTER TABLE (names roles follow)."""
    if not isinstance(statement, exp.Alter) or not isinstance(statement.this, exp.Table):
        return []
    return [a for a in statement.args.get("actions") or [] if isinstance(a, (exp.AlterRename, exp.RenameColumn))
            or (isinstance(a, exp.Drop) and str(a.args.get("kind", "")).upper() == "COLUMN")]


def carry_roles(con: duckdb.DuckDBPyConnection, statement: exp.Expression,
                temp_roles: Mapping[str, TableRoles] | None = None) -> TableRoles | None:
    """After ``statement`` ran: declare on the table it created or filled the roles its columns carry.

    A created table gets exactly the derived roles. A table filled by INSERT keeps its own roles and gains, per
    column it received, the source column's role where it had none (a protected source makes the column sensitive,
    or the ground truth / key when the table has none). Returns the new roles, or None when nothing changed.
    """
    found = filled_table(statement)
    if found is None:
        return None
    table, query, names = found
    query = statement.meta.get(_SOURCE) or query  # its names as they read before it ran (``prepare``)
    target = _target(con, table)
    if target is None:
        return None
    columns = table_columns(con, target)
    if isinstance(statement, exp.Create):
        if statement.args.get("exists"):
            return None  # IF NOT EXISTS: an existing table was left as it was (its roles too)
        derived = derived_roles(con, query, columns, temp_roles)
        _link(con, target, query, dict(zip(columns, columns)), derived)
        return _declare(con, target, derived)
    source_columns = [r[0] for r in con.execute("DESCRIBE " + query.sql(DIALECT)).fetchall()]
    by_name = isinstance(statement, exp.Insert) and statement.args.get("by_name")  # columns matched by name
    targets = source_columns if by_name else names or columns[:len(source_columns)]
    derived = derived_roles(con, query, source_columns, temp_roles)
    _link(con, target, query, {src: dst for src, dst in zip(source_columns, targets)}, derived)
    old = roles_of(con, target)
    lookup = {c.lower(): c for c in columns}
    qi, kinds = list(old.quasi_identifiers), dict(old.kinds)
    sensitive, core = list(old.sensitive), list(old.core)
    truth, key = old.ground_truth, old.key
    changed = False
    target_core = {c.lower() for c in old.core}
    withheld = getattr(derived, "withheld", {})
    for src, dst in zip(source_columns, targets):
        dst = lookup.get(dst.lower(), dst)
        if dst in old.protected:
            continue
        if target_core and dst.lower() not in target_core and withheld.get(src, "").endswith("is not declared core"):
            continue  # withheld only for not being core, into a column the table's own core list withholds already
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
    merged = TableRoles(target, tuple(qi), {c: k for c, k in kinds.items() if c in qi}, tuple(sensitive),
                        tuple(core), truth, key)
    return _declare(con, target, merged)


def protected_table(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """Does anything protect ``table``'s rows: declared roles, a ledger or budget record (through its root)?"""
    return (table.lower() in declared_tables(con) or links.root(con, table) != table.lower()
            or composition.has_releases(con, (table,)) or privacy.has_acts(con, table))


def _has_records(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """Does ``table`` (through its root) have a k-anonymous release or a budget act on record?"""
    return composition.has_releases(con, (table,)) or privacy.has_acts(con, table)


def _read_protected(con: duckdb.DuckDBPyConnection, query: exp.Expression) -> list[str]:
    """The protected tables (``protected_table``) ``query`` reads, through views, in a stable order."""
    return sorted({t.lower() for t in base_tables(con, query) if protected_table(con, t)})


def _link(con: duckdb.DuckDBPyConnection, target: str, query: exp.Expression, columns: Mapping[str, str],
          derived: TableRoles) -> None:
    """A table made or filled from a protected table's rows shares its ledger and budget (``store.links``), through
    the columns it holds unchanged (``columns``: the query's output column -> the table's column it fills). Rows of
    several protected tables cannot be tied to one: linked with nothing carried, their releases are refused. A table
    that has records of its own keeps them (``check_write`` refused mixing two tables' rows before it ran)."""
    sources = _read_protected(con, query)
    if not sources or target.lower() in sources:
        return
    origins = getattr(derived, "origins", None) or Lineage(con).origins(query, list(columns))
    if links.root(con, target) == target.lower() and _has_records(con, target):
        # rows of a table with nothing on record (a staging table) joined a table with records: from now on the
        # staging table's people are the target's, so it shares the target's ledger (``check_write`` refused rows
        # of a table with records of its own)
        for source in sources:
            if links.root(con, source) == source and not _has_records(con, source):
                back = {o: columns[c] for c, (t, o) in origins.items() if t.lower() == source and c in columns}
                links.link(con, source, target, back, "its rows were inserted into it")
        return

    def carried_from(source: str) -> dict[str, str]:
        return {columns[c]: o for c, (t, o) in origins.items() if t.lower() == source and c in columns}

    # whose people the rows are: the one protected table whose key they hold unchanged (a join with a lookup
    # table, or with a file loaded about the same people, keeps the people of the table it takes the key from)
    keyed = [s for s in sources if (roles_of(con, s).key or "").lower() in set(carried_from(s).values())]
    source = keyed[0] if len(keyed) == 1 else sources[0] if len(sources) == 1 else None
    if source is None:
        links.link(con, target, sources[0], {}, f"made from the rows of {len(sources)} protected tables")
        return
    links.link(con, target, source, carried_from(source), "made from its rows")


def _declare(con: duckdb.DuckDBPyConnection, table: str, roles: TableRoles) -> TableRoles:
    """Write ``roles`` for ``table``, replacing what was declared (in the caller's transaction, if one is open)."""
    return declare_roles(con, table, quasi_identifiers=roles.quasi_identifiers, sensitive=roles.sensitive,
                         core=roles.core, ground_truth=roles.ground_truth, key=roles.key,
                         kinds={c: k for c, k in roles.kinds.items() if k})
