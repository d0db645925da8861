"""Which rows a human operator shows, and which answers it offers: neither may come from a protected column.

Workers learn from *which* rows they are shown as much as from what each row shows: ``WHERE occupation =
'Armed-Forces'`` publishes generalized rows that all share one occupation, though no row shows it. So the rows a
crowd operator publishes may be chosen only by columns it could show (core columns; quasi-identifiers, which are
generalized) or by operators' answers; never by a sensitive, ground-truth or key column (a declared key, a column
named ``id`` where a table with roles declares none, DuckDB's ``rowid`` of such a table), nor by a column derived
from one (``md5(occupation)``, a window partitioned by it, a column a subquery computes from it), nor through a call
lineage cannot look through (a macro, ``getvariable``: ``crowddb.privacy.functions``) while anything is protected.

``check`` reads every clause that chooses rows: WHERE, JOIN ... ON / USING (semi and anti joins too), IN / EXISTS /
ANY subqueries, HAVING, QUALIFY, ORDER BY under LIMIT or OFFSET, DISTINCT ON and INTERSECT / EXCEPT, of the
operator's SELECT and of every derived input it reads (subqueries, CTEs, views, each inlined so that its own filters
are read as well), and a group operator's GROUP BY (a HIT shows one group's rows together). Each column is followed
to the stored columns it derives from with sqlglot's scope analysis. A column equated with a protected one is caught
where the equality is written (it reads the protected column), or, for a table an earlier statement made, by the
roles lineage carried into it. One exception: a key matched to operators' answers (``p.id = b.pick``, where
``pick`` is a group operator's answer: the key of the row the crowd chose) selects what the crowd chose, not what
the key holds.

The answer domain is never the rows' either (``with_answer_domain``): it is the operator's own list (its definition,
or ``domain := [...]``), or every value of the stored ground-truth column the input's ground truth is an unchanged
copy of; ``check`` finds that column while it reads the statement and notes it on each call.

Both run before anything is published: ``check`` from ``Planner.plan``, which explain() runs as well, so explain()
raises the same ``PrivacyError``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import duckdb
from sqlglot import exp
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, build_scope
from sqlglot.schema import MappingSchema

from .. import _sql, replacement
from .._sql import DIALECT
from ..errors import ArgumentError, PrivacyError
from ..store.roles import DEFAULT_KEY, TableRoles, chosen_reason, declared_tables, relation_kind, roles_of
from . import identity
from .functions import Functions

#: what a refusal says is allowed instead
ALLOWED = "choose the rows by core or quasi-identifier columns (or by an operator's answers)"
#: meta key of a human call: the stored ground-truth columns (table, column) its input's ground truth copies, as
#: ``check`` found them (absent: not known)
TRUTH_ORIGINS = "crowddb.truth_origins"
_VIEW = "crowddb.view"  # meta key of an inlined view's subquery: the view's name (for messages)
_MAX_DEPTH = 64  # views within views, columns through derived tables: deeper is refused rather than followed


@dataclasses.dataclass(frozen=True)
class _Leaf:
    """One thing a column derives from: a stored column (``table``, ``column``), an operator's answer, or a call
    lineage cannot look through (``opaque``, its SQL)."""

    table: str | None = None
    column: str | None = None
    answer: bool = False
    opaque: str | None = None


@dataclasses.dataclass(frozen=True)
class _Protected:
    """Why a leaf is protected: ``kind`` (key, truth, sensitive, rowid, opaque) and how messages name it."""

    kind: str
    text: str
    column: str = ""


def check(con: duckdb.DuckDBPyConnection, tree: exp.Expression, scope: exp.Select, calls: list[exp.Expression], *,
          is_human: Callable[[exp.Expression], bool], group: bool) -> None:
    """Refuse (``PrivacyError``) when the rows the human ``calls`` of ``scope`` (a SELECT of the statement ``tree``)
    publish are chosen by a protected column, or when a group operator (``group``) groups them by one; else note on
    each call the stored ground-truth columns its input copies (``TRUTH_ORIGINS``). Nothing runs or is written."""
    what = f"{calls[0].name}(...)" if calls else "the operator"
    analysis = _Statement(con, tree, is_human)
    if analysis.failed is not None:  # sqlglot cannot read it: every name a predicate reads is judged by its name
        analysis.refuse_by_name(scope, what)
        origins = analysis.stored_truths(scope)
        for call in calls:
            if origins is not None:
                call.meta[TRUTH_ORIGINS] = origins
        return
    op_scope = analysis.scope_of(scope)
    if op_scope is None:  # pragma: no cover - every SELECT is a scope of its statement
        raise PrivacyError(f"{what}: crowddb cannot tell which rows this SELECT chooses; nothing was published")
    chosen = analysis.chosen(op_scope, op=True, group=group)
    if chosen is not None:
        raise PrivacyError(f"{what}: the rows it would publish are chosen by {chosen}: workers would learn it from "
                           f"which rows they are shown, though no row shows it. {ALLOWED[0].upper()}{ALLOWED[1:]}; "
                           "nothing was published")
    if group:
        for expression in analysis.group_by(op_scope):
            found = analysis.protected_in(expression, op_scope, False)
            if found is not None:
                column, protected = found
                raise PrivacyError(
                    f"{what}: GROUP BY {analysis.text(expression)} would show a HIT the rows of one group together, "
                    f"grouped by {protected.text}{analysis.via(column, protected)}: workers would learn which people "
                    "share it. Group by core or quasi-identifier columns; nothing was published")
    origins = analysis.truth_origins(op_scope)
    for call in calls:
        call.meta[TRUTH_ORIGINS] = origins


#: what chooses the rows of a table an earlier statement filled without refusing a later operator over it: its
#: key and row identity (ours: tables are combined by joins on the key, and which people two tables share tells no
#: worker a protected value; an operator's own clause on the key is still refused)
_FILLED_IGNORES = frozenset({"key", "rowid"})


def chosen_by(con: duckdb.DuckDBPyConnection, statement: exp.Expression) -> str | None:
    """Why the rows ``statement`` keeps are chosen by a protected column ('WHERE occupation = 'x', which reads the
    ground truth adult.occupation'), or None: for a query that fills a table (CREATE TABLE ... AS, INSERT ...
    SELECT), a DELETE (its WHERE chooses the rows that stay) or an UPDATE (its WHERE chooses the rows whose values
    it sets), whose rows a later operator would publish as they are (``crowddb_chosen``). Read like an operator's
    derived input, a key or row identity aside (``_FILLED_IGNORES``); a statement sqlglot cannot read is judged by
    its names."""
    if isinstance(statement, (exp.Delete, exp.Update)):
        where = statement.args.get("where")
        if where is None or not isinstance(statement.this, exp.Table):
            return None
        query = exp.select("*").from_(statement.this.copy())
        extra = statement.args.get("using") if isinstance(statement, exp.Delete) else None
        from_ = None if isinstance(statement, exp.Delete) else statement.args.get("from_") or statement.args.get("from")
        items = list(extra or []) + ([from_.this] if from_ is not None else [])
        items += [j.this for j in statement.args.get("joins") or []]
        for item in items:
            query = query.join(item.copy(), join_type="cross")
        statement = query.where(where.this.copy())
    if not isinstance(statement, exp.Query):
        return None
    analysis = _Statement(con, statement, lambda node: False)
    if analysis.failed is not None:
        select = statement if isinstance(statement, exp.Select) else statement.find(exp.Select)
        try:
            if select is not None:
                analysis.refuse_by_name(select, "the statement", _FILLED_IGNORES)
        except PrivacyError as err:
            return str(err)
        return None
    root = analysis.scopes.get(id(analysis.copy))
    return None if root is None else analysis.chosen(root, op=False, group=False, ignore=_FILLED_IGNORES)


def with_answer_domain(con: duckdb.DuckDBPyConnection, op, call: exp.Expression, has_truth: bool, what: str):
    """The operator definition ``op`` with its answer domain resolved to a list, never from the rows it asks about:
    its own list (the definition's, or ``domain := [...]``) as it is; else every value of the stored ground-truth
    column the input's ground truth (``has_truth``: the input carries one) is an unchanged copy of. Refused when that
    column cannot be told (a derived expression, several tables' ground truths) or holds fewer than two values. Group
    operators pick a row: no domain. Without a ground truth ``op`` is returned as it is (its run says the input has
    none)."""
    if op.kind != "tuple" or isinstance(op.domain, tuple) or not has_truth:
        return op
    origins = call.meta.get(TRUTH_ORIGINS)
    if not origins or len(origins) > 1:
        found = "" if not origins else " (it may come from " + ", ".join(f"{t}.{c}" for t, c in sorted(origins)) + ")"
        raise ArgumentError(
            f"{what}: its answer domain is every value of the stored ground-truth column, and crowddb cannot tell "
            f"which stored column the input's ground truth is a copy of{found}; pass the answers with "
            "domain := ['...', '...'] (the rows asked about never supply them: workers would learn those rows' "
            "values from the choices)")
    (table, column), = origins
    query = exp.select(_sql.column(column)).distinct().from_(_sql.table(table)).where(
        exp.Not(this=exp.Is(this=_sql.column(column), expression=exp.Null())))
    values = con.execute(query.sql(DIALECT)).df().iloc[:, 0].astype(str).unique()
    if len(values) < 2:
        raise ArgumentError(
            f"{what}: its answer domain is every value of the ground-truth column {table}.{column}, which holds "
            f"{len(values)} distinct value{'s' if len(values) != 1 else ''}; a question needs at least two answers: "
            "pass them with domain := ['...', '...']")
    return dataclasses.replace(op, domain=tuple(sorted(values)))


# ------------------------------------------------------------------------------------------------- the analysis
class _Statement:
    """One statement read for ``check``: a copy with its views inlined, qualified against the catalog, its scopes."""

    def __init__(self, con: duckdb.DuckDBPyConnection, tree: exp.Expression,
                 is_human: Callable[[exp.Expression], bool]) -> None:
        self.con, self.is_human = con, is_human
        self.declared = bool(declared_tables(con))
        self.functions = Functions(con)
        self.identities = identity.Identities(con)
        self._roles: dict[str, TableRoles | None] = {}
        self._catalog: dict[str, list[str]] = {}  # every table's and view's columns, as the catalog spells them
        for table, column in con.execute("SELECT table_name, column_name FROM duckdb_columns() WHERE NOT internal "
                                         "ORDER BY database_name <> 'temp', column_index").fetchall():
            if column not in self._catalog.setdefault(table, []):
                self._catalog[table].append(column)
        # table (lower) -> its real columns (lower): a column named rowid is a column, not DuckDB's row identity
        self._real = {t.lower(): {c.lower() for c in cs} for t, cs in self._catalog.items()}
        self.tree = tree
        copy = tree.copy()
        pairs = list(zip(tree.walk(), copy.walk()))
        self._original = {id(c): o for o, c in pairs}  # copy node -> the statement's own (messages quote it)
        self._counterpart = {id(o): c for o, c in pairs}
        self.failed: str | None = None
        try:
            self._inline_views(copy, frozenset(), 0)
            self.copy = qualify(copy, schema=self._schema(), dialect=DIALECT, validate_qualify_columns=False,
                                quote_identifiers=True, identify=True)
            root = build_scope(self.copy)
        # sqlglot raises many kinds on what it cannot read (UNPIVOT: an AssertionError): any of them means the
        # statement is judged by its names instead (refuse_by_name), never that it passes unread
        except Exception as err:  # noqa: BLE001
            self.failed = str(err) or type(err).__name__
            return
        if root is None:
            self.failed = "it is not a query"
            return
        self.scopes = {id(s.expression): s for s in root.traverse()}

    # -------------------------------------------------------------------------------------------- reading
    def _schema(self) -> MappingSchema:
        """Every table's columns for sqlglot's qualify, as identifier nodes (a dict's keys would be parsed)."""
        schema = MappingSchema(dialect=DIALECT)
        for table, names in self._catalog.items():
            schema.add_table(_sql.table(table), {_sql.identifier(c): "TEXT" for c in names}, dialect=DIALECT)
        return schema

    def _inline_views(self, node: exp.Expression, seen: frozenset[str], depth: int) -> None:
        """Replace every view the query reads by its definition (a subquery under the view's alias), so that the
        view's own filters are read like a subquery's. A view crowddb cannot read stays a table: its roles withhold
        what lineage cannot establish."""
        if depth > _MAX_DEPTH:
            raise ValueError("views nested too deeply to be read")
        ctes = {c.alias_or_name.lower() for c in node.find_all(exp.CTE)}
        for table in list(node.find_all(exp.Table)):
            if not isinstance(table.this, exp.Identifier) or table.args.get("db") or table.args.get("catalog"):
                continue
            name = table.name
            if name.lower() in ctes or name.lower() in seen or replacement.original_name(name) is not None:
                continue
            if relation_kind(self.con, name) != "view":
                continue
            from ..lineage import view_query  # lineage imports the privacy package

            query = view_query(self.con, name)
            if query is None:
                continue
            self._inline_views(query, seen | {name.lower()}, depth + 1)
            alias = table.args.get("alias") or exp.TableAlias(this=_sql.identifier(table.name))
            subquery = exp.Subquery(this=query, alias=alias.copy())
            subquery.meta[_VIEW] = name
            table.replace(subquery)

    def scope_of(self, select: exp.Select) -> Scope | None:
        counterpart = self._counterpart.get(id(select))
        return None if counterpart is None else self.scopes.get(id(counterpart))

    def text(self, node: exp.Expression) -> str:
        """A node as the user wrote it (its counterpart in the statement), else as crowddb read it."""
        original = self._original.get(id(node))
        return (original if original is not None else node).sql(DIALECT)

    def via(self, column: exp.Expression | None, protected: _Protected) -> str:
        """' (through q.o)' when the predicate reads the protected column under another name."""
        if (not isinstance(column, exp.Column) or not protected.column
                or column.name.lower() == protected.column.lower()):
            return ""
        return f" (through {self.text(column)})"

    # ------------------------------------------------------------------------------------------- contexts
    def chosen(self, top: Scope, *, op: bool, group: bool, ignore: frozenset[str] = frozenset()) -> str | None:
        """The first clause that chooses the rows of ``top`` (the operator's SELECT when ``op``) by a protected
        column, as messages quote it ('WHERE h LIKE 'a%' in the CTE t, which reads ... (through h)'), or the stored
        table it reads whose rows an earlier statement chose so (``crowddb_chosen``); else None. ``ignore``: kinds of
        protected column (``_Protected.kind``) not counted."""
        for context, where in self.contexts(top):
            for _, source in self._from_items(context):
                if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier):
                    found = self.identities.of(source)  # (a temp table's mark is kept under its own key)
                    mark = chosen_reason(self.con, found.key if found is not None else source.name)
                    if mark is not None:
                        return (f"the table {source.name} it reads{where} (an earlier statement chose its rows by "
                                f"{mark})")
            for label, predicate, exempt, owner in self.clauses(context, op and context is top, group):
                found = self.protected_in(predicate, owner, exempt, ignore)
                if found is not None:
                    column, protected = found
                    return (f"{label.format(self.text(predicate))}{where}, which reads {protected.text}"
                            f"{self.via(column, protected)}")
        return None

    def contexts(self, op_scope: Scope) -> Iterator[tuple[Scope, str]]:
        """The SELECTs whose clauses choose the operator's rows: its own, and (transitively) every derived input it
        reads from (subquery, CTE, view), every subquery of a clause that chooses rows, every branch of a set
        operation, every subquery argument of a table function it reads from; with how messages name each."""
        seen: set[int] = set()
        todo = [(op_scope, "")]
        while todo:
            scope, where = todo.pop()
            if id(scope) in seen:
                continue
            seen.add(id(scope))
            yield scope, where
            for child in scope.set_operation_scopes:
                todo.append((child, where))
            for alias, source in self._from_items(scope):
                if isinstance(source, Scope):
                    todo.append((source, self._describe(source, alias)))
            select_list = scope.expression.expressions if isinstance(scope.expression, exp.Select) else []
            for child in scope.subquery_scopes + scope.udtf_scopes:
                if not any(_contains(item, child.expression) for item in select_list):
                    todo.append((child, where or " in a subquery"))

    def _from_items(self, scope: Scope) -> list[tuple[str, exp.Table | Scope]]:
        """The FROM and JOIN items of a SELECT scope (semi and anti joins too), with their sources."""
        select = scope.expression
        if not isinstance(select, exp.Select):
            return []
        from_ = select.args.get("from_") or select.args.get("from")
        items = ([from_.this] if from_ is not None else []) + [j.this for j in select.args.get("joins") or []]
        out = []
        for item in items:
            alias = item.alias_or_name
            source = scope.sources.get(alias)
            if source is None:
                source = next((s for a, s in scope.sources.items() if a.lower() == alias.lower()), None)
            if source is not None:
                out.append((alias, source))
        return out

    def _describe(self, source: Scope, alias: str) -> str:
        parent = source.expression.parent
        if isinstance(parent, exp.Subquery) and parent.meta.get(_VIEW):
            return f" in the view {parent.meta[_VIEW]}"
        if source.is_cte:
            return f" in the CTE {alias}"
        return f" in the subquery {alias}" if not alias.startswith("_") else " in a subquery"

    def clauses(self, scope: Scope, is_op: bool, group: bool
                ) -> Iterator[tuple[str, exp.Expression, bool, Scope]]:
        """(label, predicate, may a key in it be matched to answers, the scope it reads) of every clause of
        ``scope`` that chooses rows. In the operator's own SELECT a conjunct holding its call runs after the operator
        (it filters the answers, not the rows asked about), and ORDER BY ... LIMIT chooses them only when the planner
        pushes the LIMIT into the operator's input."""
        select = scope.expression
        if isinstance(select, (exp.Intersect, exp.Except)):  # rows kept by comparing every column of its branches
            kind = "INTERSECT on {}" if isinstance(select, exp.Intersect) else "EXCEPT on {}"
            for branch in scope.set_operation_scopes:
                for item in branch.expression.selects if isinstance(branch.expression, exp.Query) else []:
                    yield kind, item.unalias(), False, branch
            return
        if not isinstance(select, exp.Select):
            return
        where = select.args.get("where")
        conjuncts = _sql.conjuncts(where.this) if where is not None else []
        clean = [c for c in conjuncts if not self._has_call(c)]
        for c in clean if is_op else conjuncts:
            yield "WHERE {}", c, True, scope
        for join in select.args.get("joins") or []:
            on = join.args.get("on")
            for c in _sql.conjuncts(on) if on is not None else []:
                yield "JOIN ... ON {}", c, True, scope
            for ident in join.args.get("using") or []:  # (qualify writes USING as ON; kept for safety)
                yield "JOIN ... USING ({})", exp.column(ident.name), False, scope
        for part, label in (("having", "HAVING {}"), ("qualify", "QUALIFY {}")):
            node = select.args.get(part)
            for c in _sql.conjuncts(node.this) if node is not None else []:
                if not (is_op and self._has_call(c)):
                    yield label, c, False, scope
        distinct = select.args.get("distinct")
        on = distinct.args.get("on") if distinct is not None else None
        for e in (on.expressions if isinstance(on, exp.Tuple) else [on] if on is not None else []):
            yield "DISTINCT ON ({})", e, False, scope
        order = select.args.get("order")
        if order is not None and (select.args.get("limit") or select.args.get("offset")):
            items = [o.this if isinstance(o, exp.Ordered) else o for o in order.expressions]
            if is_op and not self._pushed_down(select, scope, conjuncts, clean, items, group):
                return
            for e in items:
                yield "ORDER BY {} with a LIMIT", e, False, scope

    def _pushed_down(self, select: exp.Select, scope: Scope, conjuncts: list, clean: list,
                     items: list[exp.Expression], group: bool) -> bool:
        """Does the planner apply the operator SELECT's ORDER BY ... LIMIT to the rows it asks about (as
        ``Planner._limit_pushdown`` decides)? Else they only cut its answers."""
        if group or len(conjuncts) != len(clean):
            return False
        if select.args.get("group") or select.args.get("having") or select.args.get("distinct"):
            return False
        if any(p.find(exp.AggFunc) or p.find(exp.Window) for p in select.expressions):
            return False
        return not any(leaf.answer for e in items for _, leaf in self._leaves_of(e, scope))

    def group_by(self, scope: Scope) -> list[exp.Expression]:
        """A group operator SELECT's GROUP BY expressions (qualify resolved ordinals and aliases); GROUP BY ALL is
        every select item that holds no aggregate and no operator call."""
        select = scope.expression
        group = select.args.get("group") if isinstance(select, exp.Select) else None
        if group is None:
            return []
        exprs = list(group.expressions)
        if group.args.get("all") or (len(exprs) == 1 and isinstance(exprs[0], exp.Var)
                                     and exprs[0].name.upper() == "ALL"):
            return [p.unalias() for p in select.expressions
                    if not self._has_call(p) and not p.find(exp.AggFunc) and not isinstance(p, exp.Star)]
        return exprs

    # --------------------------------------------------------------------------------------------- judging
    def protected_in(self, predicate: exp.Expression, scope: Scope, exempt: bool,
                     ignore: frozenset[str] = frozenset()) -> tuple[exp.Expression | None, _Protected] | None:
        """The first protected thing ``predicate`` reads, with the column through which it reads it; None when it
        reads none. ``exempt``: a key equated with (or IN) operators' answers only is not a selection by the key;
        ``ignore``: kinds of protected thing not counted."""
        if exempt and self._key_matched_to_answers(predicate, scope):
            return None
        for column, leaf in self._leaves_of(predicate, scope):
            protected = self._protected(leaf)
            if protected is not None and protected.kind not in ignore:
                return column, protected
        return None

    def _key_matched_to_answers(self, predicate: exp.Expression, scope: Scope) -> bool:
        if isinstance(predicate, (exp.EQ, exp.NullSafeEQ)):
            sides = [predicate.this, predicate.expression]
        elif isinstance(predicate, exp.In) and isinstance(predicate.args.get("query"), exp.Expression):
            sides = [predicate.this, predicate.args["query"]]
        else:
            return False
        judged = []
        for side in sides:
            leaves = self._side_leaves(side, scope)
            judged.append((leaves, [self._protected(leaf) for leaf in leaves]))
        for (leaves, protected), (other, _) in (judged, judged[::-1]):
            keys = [p for p in protected if p is not None]
            if keys and all(p.kind == "key" for p in keys) and other and all(leaf.answer for leaf in other):
                return True
        return False

    def _side_leaves(self, side: exp.Expression, scope: Scope) -> list[_Leaf]:
        """What one side of a comparison derives from; a subquery side (IN, = ANY) is its output column."""
        while isinstance(side, (exp.Any, exp.All, exp.Subquery, exp.Paren)):
            side = side.this
        child = self.scopes.get(id(side)) if isinstance(side, exp.Query) else None
        if child is None:
            return [leaf for _, leaf in self._leaves_of(side, scope)]
        return [leaf for name in _output_names(child) for leaf in self._output_leaves(child, name, 1)]

    def _protected(self, leaf: _Leaf) -> _Protected | None:
        if leaf.opaque is not None:
            return _Protected("opaque", f"the result of {leaf.opaque}, a call crowddb cannot see into (it may read "
                                        "a protected column)") if self.declared else None
        if leaf.answer or leaf.table is None or leaf.column is None:
            return None
        table, column = leaf.table, leaf.column
        roles = self._roles_of(table)
        if roles is None:  # nothing declared on it (a Python object, a file, a table without roles)
            return None
        c = column.lower()
        if c == (roles.ground_truth or "").lower():
            return _Protected("truth", f"the ground truth {roles.table}.{roles.ground_truth}", column)
        if roles.is_key(c):
            return _Protected("key", f"the key {roles.table}.{column}", column)
        if c in {s.lower() for s in roles.sensitive}:
            return _Protected("sensitive", f"the sensitive column {roles.table}.{column}", column)
        if c == "rowid" and c not in self._real.get(table.lower(), set()):
            return _Protected("rowid", f"the row identity {roles.table}.rowid", column)
        return None

    def _roles_of(self, table: str) -> TableRoles | None:
        """Roles of a stored table, or of a view crowddb could not inline (what its lineage allows); None when
        nothing is declared."""
        name = table.lower()
        if name not in self._roles:
            self._roles[name] = None
            if replacement.original_name(table) is None:
                kind = relation_kind(self.con, table)
                if kind == "table":
                    roles = roles_of(self.con, table)
                    self._roles[name] = roles if (roles.quasi_identifiers or roles.protected or roles.core) else None
                elif kind == "view":
                    from ..lineage import Lineage  # lineage imports the privacy package

                    self._roles[name] = Lineage(self.con).roles(table)
        return self._roles[name]

    # ------------------------------------------------------------------------------------- column lineage
    def _has_call(self, node: exp.Expression) -> bool:
        return any(self.is_human(n) for n in node.walk())

    def _leaves_of(self, expression: exp.Expression, scope: Scope, depth: int = 0
                   ) -> list[tuple[exp.Expression | None, _Leaf]]:
        """What ``expression`` (of ``scope``) derives from, each with the column of ``expression`` it comes
        through: an operator call is an answer (its arguments are what it publishes, not what chooses rows); a
        call lineage cannot look through is opaque; a nested query contributes every column it reads."""
        if depth > _MAX_DEPTH:
            return [(None, _Leaf(opaque="a column derived through too many levels"))]
        out: list[tuple[exp.Expression | None, _Leaf]] = []
        if self.is_human(expression):
            return [(None, _Leaf(answer=True))]
        stripped = expression.copy()
        for call in [n for n in stripped.walk() if self.is_human(n)]:
            call.replace(exp.Null())
        opaque = self.functions.opaque(stripped)
        if opaque:
            out.append((None, _Leaf(opaque=opaque)))
        for node in _walk_outside_queries(expression, self.is_human):
            if self.is_human(node):
                out.append((None, _Leaf(answer=True)))
            elif isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
                out += [(node, leaf) for leaf in self._column_leaves(node, scope, depth + 1)]
            elif isinstance(node, exp.Query) and node is not expression:
                out += [(None, leaf) for leaf in self._query_leaves(node, depth + 1)]
        return out

    def _query_leaves(self, query: exp.Query, depth: int) -> list[_Leaf]:
        """Every column a nested query reads (its value may depend on any of them)."""
        out = []
        for col in query.find_all(exp.Column):
            if isinstance(col.this, exp.Star) or any(self.is_human(a) for a in _ancestors(col, query)):
                continue
            owner = next((self.scopes[id(a)] for a in _ancestors(col, None) if id(a) in self.scopes), None)
            if owner is not None:
                out += self._column_leaves(col, owner, depth)
        return out

    def _column_leaves(self, column: exp.Column, scope: Scope, depth: int) -> list[_Leaf]:
        name = column.name
        if column.table:
            source = self._source(scope, column.table)
            if source is None:
                return self._any_source(scope, name, depth)
            return self._source_leaves(source, name, depth)
        select = scope.expression
        if isinstance(select, exp.Select):  # a select alias (ORDER BY, QUALIFY, WHERE in DuckDB)
            for item in select.expressions:
                if item.alias_or_name.lower() == name.lower() and not _contains(item, column):
                    return [leaf for _, leaf in self._leaves_of(item.unalias(), scope, depth + 1)]
        return self._any_source(scope, name, depth)

    def _any_source(self, scope: Scope, name: str, depth: int) -> list[_Leaf]:
        """A column qualify could not place (``rowid``, or one of a source without a schema): it may be any FROM
        item's (of this scope or an enclosing one)."""
        out = []
        current: Scope | None = scope
        while current is not None and not out:
            for _, source in self._from_items(current):
                out += self._source_leaves(source, name, depth)
            current = current.parent
        return out

    def _source(self, scope: Scope, alias: str) -> exp.Table | Scope | None:
        current: Scope | None = scope
        while current is not None:  # a correlated column is a source of an enclosing scope
            source = current.sources.get(alias)
            if source is None:
                source = next((s for a, s in current.sources.items() if a.lower() == alias.lower()), None)
            if source is not None:
                return source
            current = current.parent
        return None

    def _source_leaves(self, source: exp.Table | Scope, name: str, depth: int) -> list[_Leaf]:
        if isinstance(source, Scope):
            return self._output_leaves(source, name, depth)
        if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier):
            return [_Leaf(source.name, name)]
        return []  # a table function's rows (a file, range(), a crowd table function's release): nothing declared

    def _output_leaves(self, scope: Scope, name: str, depth: int) -> list[_Leaf]:
        """What output column ``name`` of a derived relation derives from (every branch of a set operation)."""
        if depth > _MAX_DEPTH:
            return [_Leaf(opaque="a column derived through too many levels")]
        query = scope.expression
        if isinstance(query, exp.SetOperation):
            position = _position(query, name)
            out = []
            for branch in scope.set_operation_scopes:
                if position is None:
                    out += self._output_leaves(branch, name, depth + 1)
                else:
                    out += self._position_leaves(branch, position, depth + 1)
            return out
        if not isinstance(query, exp.Select):
            return []
        for item in query.expressions:
            if item.alias_or_name.lower() == name.lower():
                return [leaf for _, leaf in self._leaves_of(item.unalias(), scope, depth + 1)]
        if any(isinstance(i, exp.Star) or (isinstance(i, exp.Column) and isinstance(i.this, exp.Star))
               for i in query.expressions):  # a star qualify could not expand: any source's column of that name
            return self._any_source(scope, name, depth + 1)
        return []

    def _position_leaves(self, scope: Scope, position: int, depth: int) -> list[_Leaf]:
        query = scope.expression
        if isinstance(query, exp.SetOperation):
            out = []
            for branch in scope.set_operation_scopes:
                out += self._position_leaves(branch, position, depth + 1)
            return out
        if isinstance(query, exp.Select) and position < len(query.expressions):
            return [leaf for _, leaf in self._leaves_of(query.expressions[position].unalias(), scope, depth + 1)]
        return []

    # --------------------------------------------------------------------------------------- ground truth
    def truth_origins(self, scope: Scope) -> frozenset[tuple[str, str]]:
        """The stored ground-truth columns (table, column) the FROM items of the operator's SELECT carry as
        unchanged copies (as the planner's roles find its input's ground truth)."""
        out: set[tuple[str, str]] = set()
        for _, source in self._from_items(scope):
            if isinstance(source, Scope):
                for name in _output_names(source):
                    origin = self._copy_origin(source, name, 0)
                    if origin is not None:
                        out.add(origin)
            elif isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier):
                origin = self._stored_truth(source.name, None)
                if origin is not None:
                    out.add(origin)
        return frozenset(out)

    def _stored_truth(self, table: str, column: str | None) -> tuple[str, str] | None:
        """(table, its ground truth) when ``table`` is a stored table declaring one (and ``column`` is it)."""
        if relation_kind(self.con, table) != "table":
            return None
        roles = self._roles_of(table)
        if roles is None or not roles.ground_truth:
            return None
        if column is not None and column.lower() != roles.ground_truth.lower():
            return None
        return roles.table, roles.ground_truth

    def _copy_origin(self, scope: Scope, name: str, depth: int) -> tuple[str, str] | None:
        """The stored ground-truth column output ``name`` of a derived relation is an unchanged copy of (through
        aliases, derived tables, CTEs, views, and every branch of a set operation alike), else None."""
        if depth > _MAX_DEPTH:
            return None
        query = scope.expression
        if isinstance(query, exp.SetOperation):
            position = _position(query, name)
            found = {self._branch_origin(b, name, position, depth + 1) for b in scope.set_operation_scopes}
            return found.pop() if len(found) == 1 else None
        if not isinstance(query, exp.Select):
            return None
        item = next((i for i in query.expressions if i.alias_or_name.lower() == name.lower()), None)
        expression = item.unalias() if item is not None else None
        if not isinstance(expression, exp.Column) or isinstance(expression.this, exp.Star):
            return None
        source = self._source(scope, expression.table) if expression.table else None
        if isinstance(source, Scope):
            return self._copy_origin(source, expression.name, depth + 1)
        if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier):
            return self._stored_truth(source.name, expression.name)
        return None

    def _branch_origin(self, scope: Scope, name: str, position: int | None, depth: int) -> tuple[str, str] | None:
        query = scope.expression
        if position is not None and isinstance(query, exp.Select) and position < len(query.expressions):
            name = query.expressions[position].alias_or_name
        return self._copy_origin(scope, name, depth)

    # ----------------------------------------------------------------------------------------- fallback
    def stored_truths(self, select: exp.Select) -> frozenset[tuple[str, str]] | None:
        """The stored ground truths of a SELECT whose FROM items are all stored tables (read without sqlglot's
        scopes); None when one is anything else (its ground truth cannot be told)."""
        from_ = select.args.get("from_") or select.args.get("from")
        items = ([from_.this] if from_ is not None else []) + [j.this for j in select.args.get("joins") or []]
        ctes = {c.alias_or_name.lower() for c in self.tree.find_all(exp.CTE)}
        out = set()
        for item in items:
            if (not isinstance(item, exp.Table) or not isinstance(item.this, exp.Identifier)
                    or item.name.lower() in ctes or relation_kind(self.con, item.name) != "table"):
                return None
            origin = self._stored_truth(item.name, None)
            if origin is not None:
                out.add(origin)
        return frozenset(out)

    def refuse_by_name(self, scope: exp.Select, what: str, ignore: frozenset[str] = frozenset()) -> None:
        """sqlglot could not read the statement (``failed``): refuse when a clause that may choose the operator's
        rows names a column the way a protected column of a table the statement reads is named (or ``rowid``);
        ``ignore``: kinds of protected column (``_Protected.kind``) not counted."""
        protected: dict[str, str] = {}
        for table in self.tree.find_all(exp.Table):
            if isinstance(table.this, exp.Identifier):
                roles = self._roles_of(table.name)
                if roles is None:
                    continue
                named = [(c, "sensitive") for c in roles.sensitive] + [(roles.ground_truth, "truth")]
                named += [(roles.key, "key"), ("rowid", "rowid")] + [(DEFAULT_KEY, "key")] * (roles.key is None)
                for column, kind in named:
                    if column and kind not in ignore:
                        protected.setdefault(column.lower(), f"the row identity {roles.table}.rowid"
                                             if kind == "rowid" else f"{roles.table}.{column}")
        for select in [scope, *scope.find_all(exp.Select)]:
            for part in ("where", "joins", "having", "qualify", "order", "distinct", "group"):
                value = select.args.get(part)
                for node in value if isinstance(value, list) else [value] if value is not None else []:
                    for col in node.find_all(exp.Column):
                        if col.name.lower() in protected:
                            raise PrivacyError(
                                f"{what}: crowddb cannot read this statement's lineage ({self.failed}), and a clause "
                                f"that may choose the rows it publishes reads {col.sql(DIALECT)}, named like "
                                f"{protected[col.name.lower()]}; {ALLOWED}, or write the query so that crowddb can "
                                "read it; nothing was published")


# ---------------------------------------------------------------------------------------------------- helpers
def _ancestors(node: exp.Expression, stop: exp.Expression | None) -> Iterator[exp.Expression]:
    current = node.parent
    while current is not None:
        yield current
        if current is stop:
            return
        current = current.parent


def _contains(outer: exp.Expression, inner: exp.Expression) -> bool:
    current: exp.Expression | None = inner
    while current is not None:
        if current is outer:
            return True
        current = current.parent
    return False


def _walk_outside_queries(expression: exp.Expression, is_human: Callable[[exp.Expression], bool]
                          ) -> Iterator[exp.Expression]:
    """The nodes of ``expression``, not descending into nested queries (yielded themselves) or operator calls."""
    todo = [expression]
    while todo:
        node = todo.pop()
        yield node
        if is_human(node) or (isinstance(node, exp.Query) and node is not expression):
            continue
        todo.extend(node.iter_expressions())


def _position(query: exp.SetOperation, name: str) -> int | None:
    """The position of output ``name`` in a set operation (its left-most branch names the columns); None BY NAME."""
    if query.args.get("by_name"):
        return None
    left: exp.Expression = query
    while isinstance(left, exp.SetOperation):
        left = left.this
    if isinstance(left, exp.Subquery):
        left = left.unnest()
    names = [s.alias_or_name.lower() for s in left.selects] if isinstance(left, exp.Query) else []
    return names.index(name.lower()) if name.lower() in names else None


def _output_names(scope: Scope) -> list[str]:
    query = scope.expression
    while isinstance(query, exp.SetOperation):
        query = query.this
    if isinstance(query, exp.Subquery):
        query = query.unnest()
    return [s.alias_or_name for s in query.selects] if isinstance(query, exp.Query) else []
