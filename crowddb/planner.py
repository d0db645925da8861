"""The planner: plan a statement's crowd operators (``Planner.plan``: steps, innermost first), then run them one step
at a time (``execute``) and splice their results back.

Human operators in a SELECT become a join to a temp table of answers keyed by the input rows' identity (their
``rowid``); a table function becomes a view over what it computed (an Arrow table or a frame DuckDB reads in place) in
place of the call. The rest of the query runs in DuckDB as written. Every rewrite is an AST transformation (sqlglot);
identifiers are quoted through the AST.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import sqlglot
from sqlglot import exp

from . import _sql
from ._duck import arrow_select, registered, snapshot, stacked
from ._sql import DIALECT
from .errors import (
    ArgumentError,
    BudgetExceededError,
    PrivacyBudgetError,
    PrivacyError,
    UnknownColumnError,
)
from .lineage import (
    BASE_ALIAS,
    QI,
    WITHHELD,
    DerivedRoles,
    base_status,
    base_tables,
    derived_roles,
    opaque_sources,
)
from .operators import table_functions
from .operators.columns import CONFIDENCE, GOLD, WIDENED
from .operators.context import OperatorContext
from .operators.human import (
    GROUP_ID,
    KEY,
    NOT_ESTIMATED,
    ROW_ID,
    TRUTH,
    HumanInput,
    HumanOperatorRun,
    OperatorPlan,
    RowsOf,
)
from .operators.table_functions import ArrowRows, TableInput, check_charged_unit, repeats
from .privacy import equality, identity, selection, serve, values
from .privacy.tracing import ROW_REF, hands_on_columns, row_identity, traced
from .query import plan as planning
from .query.plan import BoundCall, Step, answer_column, contains, split_arguments, visible_ctes
from .query.text import crowd_nodes, is_human, is_table_function
from .store import TableRoles, composition, memo, privacy, relation_kind, resolve_table, roles_of, table_columns
from .store.roles import is_default_key, is_key
from .udf import HumanOperator, Registry

_ID = "__crowd_id"
_GROUP = "__crowd_g"
_REF = "__crowd_ref"  # the privacy ledger's identity of the rows a call publishes (row_identity)
_ANSWER = "answer"
_CONFIDENCE = "confidence"  # an accuracy target's posterior (issue 28), beside _ANSWER
_SET = "__crowd_set"  # a grouping set's GROUPING() mask, in the answers of a group operator over grouping sets
_SET_ANSWER = "__crowd_answer"  # their answer (prefixed: the lookup reads the query's own columns beside it)
_MAX_GROUPING_SETS = 64  # each set is asked about on its own (every input row once per set)
_counter = itertools.count(1)



@dataclasses.dataclass
class _Source:
    """One FROM/JOIN item of a scope: its alias, the table it reads, its columns and roles."""

    alias: str
    table: str
    columns: list[str]
    roles: TableRoles
    bases: tuple[str, ...] = ()  # the catalog tables it reads (itself, for a base table)
    base: bool = False  # a base table: the privacy ledger reads its rows' identity (``row_identity``) directly
    of: str | None = None  # a materialized view/CTE/subquery of this one base table, row by row (``traced``) ...
    refs: np.ndarray | None = None  # ... and each of its rows' identity in that table (by the temp table's rowid)
    #: columns the planner added for a STRUCT column published as ``X.*``: column -> (X, the field it holds)
    fields: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _GroupingSets:
    """A group operator's GROUP BY with GROUPING SETS, ROLLUP or CUBE, expanded: the distinct grouping expressions
    (in order of first appearance: GROUPING() takes them so) and every distinct set, as the positions of its
    expressions."""

    exprs: list[exp.Expression]
    sets: list[tuple[int, ...]]

    def mask(self, members: tuple[int, ...]) -> int:
        """What GROUPING(every expression) gives the output rows of a set: the bit of an expression the set does not
        group by is set, the first expression's the most significant (DuckDB's, as the SQL standard's)."""
        n = len(self.exprs)
        return sum(1 << (n - 1 - i) for i in range(n) if i not in members)

    def label(self, members: tuple[int, ...]) -> str:
        return "(" + ", ".join(self.exprs[i].sql(DIALECT) for i in members) + ")"


class Planner:
    """Rewrites one statement, running its crowd operators through ``ctx``."""

    def __init__(self, con: duckdb.DuckDBPyConnection, registry: Registry, ctx: OperatorContext, *,
                 estimating: bool = False) -> None:
        """Plans and checks read the database (``con``) and the operators' definitions (``registry``), those of
        ``ctx``; only the operators' runs read ``ctx`` (the query's text they record, its budget, its timeout).
        ``estimating``: explain(): every step is run to estimate it, nothing is bought and no release recorded."""
        self.con = con
        self.registry = registry
        self.ctx = ctx
        self.estimating = estimating
        self.temp_roles: dict[str, TableRoles] = {}  # roles of the derived inputs this planner materialized
        self.temps: list[str] = []  # every temp table this planner made (inputs, answers, table-function results)
        self.registered: list[str] = []  # every Arrow table it registered (table-function inputs and releases)
        self.plain_temps: set[str] = set()  # materialized sources that are one table's rows and columns as stored
        self.steps: list[str] = []  # the steps it ran, in order (explain() shows them)
        self.identities = identity.Identities(con)

    # ------------------------------------------------------------------------------------------- detection
    def is_human(self, node: exp.Expression) -> bool:
        return is_human(node, self.registry)

    def is_table_function(self, node: exp.Expression) -> bool:
        return is_table_function(node)

    def crowd_nodes(self, root: exp.Expression) -> list[exp.Expression]:
        return crowd_nodes(root, self.registry)

    def has_crowd(self, root: exp.Expression) -> bool:
        return any(True for _ in self.crowd_nodes(root))

    # ------------------------------------------------------------------------------------------------ main
    def rewrite(self, tree: exp.Expression) -> exp.Expression:
        """Plan ``tree``'s crowd operators, then run them in the plan's order; returns the rewritten tree."""
        # names resolved as DuckDB binds them, each once for this statement (the statement before it may have made
        # or dropped tables; its own steps make only temp tables of crowddb's names)
        self.identities = identity.Identities(self.con)
        for step in self.plan(tree):
            self.execute(step)
        return tree

    def plan(self, tree: exp.Expression) -> list[Step]:
        """The statement's steps (``query.plan.steps``, pure), each SELECT's row selection checked before any step
        runs: rows chosen (or grouped) by a protected column are refused (issue 24)."""
        steps = planning.steps(tree, self.registry)
        for step in steps:
            if step.calls:
                selection.check(self.con, tree, step.node, step.calls, is_human=self.is_human,
                                group=self.registry.get(step.calls[-1].name).kind == "group")
        return steps

    def execute(self, step: Step) -> None:
        """Run one step of the plan and splice its result into the tree."""
        self.steps.append(step.name)
        if step.calls:
            self._run_scope(step.node, step.calls)
        else:
            with memo.one_read(self.con):  # its table's roles and ledger root read once (it writes neither)
                self._run_table_function(step.node)

    def _with_context(self, query: exp.Select, origin: exp.Expression) -> exp.Select:
        """``query`` with the CTEs it needs from around ``origin`` attached."""
        # the query is scanned too: a table function's input names a CTE as an argument, not as a table
        ctes = [c for c in planning.referenced_ctes(origin, also=query) if not contains(c, origin)]
        query = query.copy()
        # a CTE of a WITH RECURSIVE may read itself: the WITH it is carried into stays recursive
        recursive = any(isinstance(c.parent, exp.With) and c.parent.args.get("recursive") for c in ctes)
        for cte in ctes:
            query = query.with_(cte.args["alias"].copy(), as_=cte.this.copy(), recursive=recursive or None,
                                copy=False)  # a name, never parsed
        return query

    def _execute_df(self, query: exp.Expression) -> pd.DataFrame:
        return self.con.execute(query.sql(DIALECT)).df()

    def _temp_table(self, prefix: str, query: exp.Expression | None = None, frame: pd.DataFrame | None = None
                    ) -> str:
        """Create a connection-scoped temp table from a query or a DataFrame; returns its name."""
        name = f"__crowd_{prefix}_{next(_counter)}"
        self.temps.append(name)
        target = _sql.table(name)
        con = self.con
        if frame is not None:
            view = f"{name}_df"
            with registered(con, **{view: frame}):
                con.execute(f"CREATE TEMP TABLE {target.sql(DIALECT)} AS SELECT * FROM {view}")
        else:
            con.execute(f"CREATE TEMP TABLE {target.sql(DIALECT)} AS {query.sql(DIALECT)}")
        return name

    def _arrow_select(self, prefix: str, rows: ArrowRows) -> tuple[exp.Select, list[str]]:
        """A SELECT over an immutable Arrow table registered under a name of its own (``_duck.arrow_select``);
        returns it and its columns."""
        name = f"__crowd_{prefix}_{next(_counter)}"
        query, columns = arrow_select(self.con, name, rows.table, rows.types)
        self.registered.append(name)
        return query, columns

    def _input(self, query: exp.Select, reads: list[str] | None = None, coded: bool = False) -> TableInput:
        """A table function's input: ``query`` run once, frozen as Arrow, read through a typed view. With ``reads``
        (the columns the function reads) only those leave DuckDB, when the query has them all as named; ``coded``:
        a large input's text of few distinct values held coded (``_duck.snapshot``)."""
        if reads == []:  # a function of the name alone (PRIVACY_BUDGET): no row leaves DuckDB
            query = exp.select("*").from_(query.subquery(_sql.identifier("__crowd_input"))).limit(0)
        elif reads is not None and set(reads) <= set(self.con.sql(query.sql(DIALECT)).columns):  # bound, not run
            query = exp.select(*(_sql.column(c) for c in dict.fromkeys(reads))).from_(
                query.subquery(_sql.identifier("__crowd_input")))
        return self._frozen(*snapshot(self.con, query.sql(DIALECT), coded))

    def _frozen(self, table: pa.Table, types: list) -> TableInput:
        """A table function's input from its snapshot: the rows' identities (``ROW_REF``) taken out of the columns."""
        row_refs = None
        if ROW_REF in table.column_names:  # added by traced(): the rows' identity, not input
            at = table.column_names.index(ROW_REF)
            row_refs = table.column(at).to_numpy()
            table, types = table.remove_column(at), types[:at] + types[at + 1:]
        names = table.column_names
        if len({c.lower() for c in names}) == len(names):  # DuckDB's names as they are: the typed SELECT is made
            # (the snapshot registered) only when a column is read through it, not straight from the snapshot
            return TableInput(self.con, lambda: self._arrow_select("in", ArrowRows(table, types))[0], names,
                              table, types, row_refs)
        source, columns = self._arrow_select("in", ArrowRows(table, types))
        return TableInput(self.con, source, columns, table.rename_columns(columns), types, row_refs)

    def drop_temps(self) -> None:
        """Drop the temp tables this planner made and release the Arrow tables it registered (none is needed once its
        query's result is read)."""
        for name in self.temps:
            self.con.execute(exp.Drop(tables=[_sql.table(name)], kind="TABLE", exists=True).sql(DIALECT))
        for name in self.registered:
            self.con.unregister(name)
        self.temps.clear()
        self.registered.clear()

    # ------------------------------------------------------------------------------------- table functions
    def _run_table_function(self, node: exp.Table) -> None:
        call: exp.Anonymous = node.this
        spec = table_functions.TABLE_FUNCTIONS[call.name.lower()]
        name = spec.sql_name
        positional, named = split_arguments(call, name)
        if not positional:
            raise ArgumentError(f"{name}: the first argument must be a table name or a (subquery)")
        source = positional[0]
        if len(positional) > 1:
            raise ArgumentError(f"{name}: only the input is positional; pass the rest as name := value")
        table_name = kind = None
        if isinstance(source, exp.Subquery):
            query = self._with_context(source.this, node)
        elif isinstance(source, (exp.Column, exp.Table, exp.Identifier)):
            spelt = _as_table(source)  # main.adult is a column's table-qualified name to sqlglot
            table = spelt
            if spelt.args.get("db") or source.name.lower() not in visible_ctes(node):
                relation = self.identities.of(spelt)
                if relation is None:
                    # DuckDB would read a missing name ending in .csv as a file (and quote its first line in errors)
                    raise UnknownColumnError(f"{name}: no table, view or CTE named {spelt.sql(DIALECT)!r}")
                kind, table_name, table = "view" if relation.view else "table", relation.key, relation.ref()
            query = self._with_context(exp.select("*").from_(table), node)
        else:
            raise ArgumentError(f"{name}: the first argument must be a table name or a (subquery), "
                                f"got {source.sql(DIALECT)!r}")
        if spec.table_input and kind != "table":
            raise ArgumentError(f"{name}: the first argument must be a table's name ({spec.table_input})")
        reads = spec.reads(named)
        traced_table = bases = None
        untraced = query
        if spec.traced:  # a k-anonymous release: its rows go in the privacy ledger, by their identity
            self._refuse_untraceable(name, query, "release")
            bases = base_tables(self.con, query, ids=self.identities)
            query, traced_table = traced(self.con, query, self.identities)
        rows = self._input(query, reads, spec.coded)  # the input once, in its order, only what the function reads
        roles = (self._relation_roles(table_name, untraced, rows.columns, kind) if spec.roles
                 else TableRoles(table_name or ""))
        asked = state = None
        if traced_table is not None and rows.row_refs is not None:
            # a repeat of the release served last time (same request, rows, values and ledger): nothing to widen,
            # plan or box again (``repeats``)
            asked = repeats.request(named, rows.columns, rows.types, roles)
            state = composition.version(self.con, traced_table)
            repeat = repeats.find(self.con, traced_table, asked, rows.row_refs, rows.snapshot, state)
            rows = self._widened_input(rows, query, traced_table, named, spec.coded) if repeat is None else rows
            rows.repeat = repeat
        rows.ledger_table = traced_table
        charge, charged, spend = None, [], None
        if spec.charge is not None:  # the epsilon budget: the charge is declared and checked before any noise is drawn
            charge = spec.charge(rows, named)
            if charge is not None:
                if not self.estimating:  # issue 24: a ROLLBACK would take back the charge, not what the caller saw
                    privacy.refuse_in_transaction(self.con, charge.operator)
                charged = [table_name.lower()] if kind == "table" else sorted(
                    {t.lower() for t in base_tables(self.con, untraced, ids=self.identities)})
                self._refuse_untraceable(name, untraced, "charge")
                try:  # PrivacyBudgetError: nothing ran or was written
                    check_charged_unit(self.con, untraced, named, charged, charge.operator)  # issue 24
                    spend = privacy.check(self.con, charged, charge)
                except PrivacyBudgetError as refused:
                    if not self.estimating:
                        raise
                    spend = [{"table": t, "refused": str(refused)} for t in charged]  # explain() says so
        result = spec.run(self.ctx, rows, named, roles)
        ledger = []
        if bases is not None and result.release is not None:
            ledger = [(traced_table, result.release.published)] if traced_table else [(t, None) for t in bases]
            for table, published in ledger if self.estimating else ():  # a run is checked as it is recorded
                composition.check(self.con, table, "release:next", result.release.k or 1, published)
        if (spec.charge is not None and charge is None and result.release is not None
                and result.release.epsilon is not None):
            raise PrivacyError(f"{name}: internal error: a DP release whose charge could not be declared; "
                               "nothing was recorded")  # fail closed: never an uncharged release
        if spend is not None:  # explain() shows it too
            result.report["privacy_charge"] = spend
        if result.release is not None and not self.estimating:  # explain() records nothing
            release = result.release
            if spec.act is not None:  # a logged act on the table, not a release
                spec.act(self.ctx.store, table_name, release)
            elif charge is not None:  # the release and its charges in one transaction
                result.report["release_id"] = self.ctx.store.log_charged_release(
                    tables=charged, charge=charge, kind=release.kind, method=release.method, k=release.k,
                    epsilon=release.epsilon, delta=release.delta, params=release.params, metrics=release.metrics,
                    objects=release.objects, ledger=ledger)
            else:
                result.report["release_id"] = self.ctx.store.log_release(
                    kind=release.kind, method=release.method, k=release.k, epsilon=release.epsilon,
                    delta=release.delta, params=release.params, metrics=release.metrics, objects=release.objects,
                    ledger=ledger)
            if asked is not None:  # kept for the next repeat only if the ledger holds this one as a repeat
                read, served = result.remember or ([], None)
                repeats.keep(self.con, traced_table, f"release:{result.report['release_id']}", state,
                             None if result.remember is None else repeats.Remembered(
                                 asked, rows.row_refs, rows.snapshot.select(read), state, served))
        self.ctx.reports.append(result.report)
        rows_out = result.rows if isinstance(result.rows, ArrowRows) else ArrowRows(result.rows, None)
        computed = self._arrow_select("tf", rows_out)[0]  # read in place: nothing copied, no catalog entry
        alias = node.args.get("alias")
        node.replace(computed.subquery(alias.copy() if alias else exp.TableAlias(
            this=exp.to_identifier(name, quoted=True))))

    def _refuse_untraceable(self, name: str, query: exp.Expression, what: str) -> None:
        """A release (or a charge) over rows crowddb cannot tie to their table (``query('SELECT ...')``, a table
        macro, a file: they may read any table) is refused while any table has a privacy ledger or a budget: the
        ledger could not record whose rows it showed, the budget whose sources it spent."""
        opaque = opaque_sources(query, self.identities.key)
        if opaque and self.ctx.store.anything_protected():
            raise PrivacyError(f"{name.upper()}: its input reads {opaque[0]}, which may read any table, and crowddb "
                               f"cannot tie its rows to one; while tables have roles, a privacy ledger or a budget, "
                               f"a {what} over it is refused (nothing was computed). Read the table directly, or "
                               "through a view or a subquery")

    def _relation_roles(self, table_name: str | None, query: exp.Select, columns: list[str],
                        kind: str | None = None) -> TableRoles:
        """Roles of an operator's input: a table's declared roles; a view's, or derived from its definition; a
        subquery's or CTE's (``table_name`` None) derived from what ``query`` reads. ``kind``: the name's
        ``relation_kind`` when the caller already looked it up."""
        con = self.con
        if table_name and (kind or relation_kind(con, table_name)) == "table":
            return roles_of(con, table_name)
        if table_name:
            roles = roles_of(con, table_name)
            if roles.quasi_identifiers or roles.protected or roles.core:
                return roles
        return derived_roles(con, query, columns, self.temp_roles)

    # ----------------------------------------------------------------------------------- human operators
    def _run_scope(self, scope: exp.Select, calls: list[exp.Anonymous]) -> None:
        """Run the human ``calls`` whose SELECT is ``scope``, in the plan's order (tuple operators, then group)."""
        sources = _equated_roles(scope, self._prepare_sources(scope, self._struct_stars(scope, calls)))
        for call in calls:
            self._run_call(scope, call, sources)

    def _prepare_sources(self, scope: exp.Select, structs: dict[tuple[str, str], str] | None = None
                         ) -> list[_Source]:
        """Give every FROM/JOIN item a rowid: base tables have one; anything else is materialized first. ``structs``
        (``_struct_stars``): STRUCT columns published as ``X.*``, whose items are materialized with their fields."""
        from_ = scope.args.get("from_") or scope.args.get("from")
        if from_ is None:
            raise ArgumentError("a human operator needs a FROM clause: it asks about rows of a table")
        items = [from_.this] + [j.this for j in scope.args.get("joins") or []]
        fields = self._struct_fields(scope, items, structs) if structs else {}
        out = []
        for i, item in enumerate(items):
            out.append(self._prepare_struct_source(scope, item, fields[i]) if i in fields
                       else self._prepare_source(scope, item))
        return out

    @staticmethod
    def _struct_stars(scope: exp.Select, calls: list[exp.Anonymous]) -> dict[tuple[str, str], str]:
        """The ``X.*`` (or ``alias.X.*``) arguments of ``calls`` whose X is not a FROM item's alias: a STRUCT column's
        fields to publish. Keyed by (the FROM alias written, or '', X), lower-cased; the value names the call."""
        from_ = scope.args.get("from_") or scope.args.get("from")
        items = ([from_.this] if from_ is not None else []) + [j.this for j in scope.args.get("joins") or []]
        aliases = {(item.alias_or_name or "unnamed_subquery").lower() for item in items}
        out: dict[tuple[str, str], str] = {}
        for call in calls:
            for arg in call.expressions:
                if isinstance(arg, exp.Column) and isinstance(arg.this, exp.Star) and arg.table and (
                        arg.args.get("db") or arg.table.lower() not in aliases):
                    out.setdefault(((arg.db or "").lower(), arg.table.lower()), f"{call.name}(...)")
        return out

    def _struct_fields(self, scope: exp.Select, items: list[exp.Expression], structs: dict[tuple[str, str], str]
                       ) -> dict[int, list[tuple[str, str]]]:
        """Per FROM item (by position): the (STRUCT column, field) pairs its ``X.*`` publishes. Each X is a STRUCT
        column of exactly one item (of the one its alias names), else an error names it; the items are bound by
        DuckDB (nothing runs) to read their columns' types."""
        typed = []
        for item in items:
            relation = self.con.sql(self._with_context(exp.select("*").from_(item.copy()), scope).sql(DIALECT))
            typed.append(list(zip(relation.columns, relation.types)))
        out: dict[int, list[tuple[str, str]]] = {}
        for (alias, name), what in structs.items():
            hits = [(i, column, kind) for i, item in enumerate(items)
                    if not alias or (item.alias_or_name or "unnamed_subquery").lower() == alias
                    for column, kind in typed[i] if column.lower() == name]
            spelt = f"{alias}.{name}" if alias else name
            if not hits:
                raise UnknownColumnError(f"{what}: no table, alias or STRUCT column {spelt!r} in FROM")
            if len(hits) > 1:
                raise ArgumentError(f"{what}: {spelt!r} is a column of more than one table in FROM; qualify it with "
                                    "a table alias (alias.column.*)")
            i, column, kind = hits[0]
            if kind.id != "struct":
                raise ArgumentError(f"{what}: {spelt}.* publishes a STRUCT column's fields, and {spelt!r} is a "
                                    f"{kind}; name it, or a table alias followed by .*")
            out.setdefault(i, []).extend((column, field) for field, _ in kind.children)
        return out

    def _prepare_struct_source(self, scope: exp.Select, item: exp.Expression, fields: list[tuple[str, str]]
                               ) -> _Source:
        """A FROM item with STRUCT columns published as ``X.*``: materialized (as any derived input, rows traced to
        their base table) with every field beside its struct as a column of its own, under a name of the planner's
        (a field's name may be a column's too, and the query's ``*`` leaves them out): lineage gives each the role
        of what it derives from, and the HIT shows it under the field's name."""
        con = self.con
        alias = item.alias_or_name or "unnamed_subquery"  # DuckDB's name for a FROM item written without one
        added: dict[str, tuple[str, str]] = {}
        for struct, field in dict.fromkeys(fields):
            added[f"__crowd_field_{next(_counter)}"] = (struct, field)
        extra = [exp.alias_(exp.Dot(this=exp.column(struct, table=alias, quoted=True),
                                    expression=exp.to_identifier(field, quoted=True)), name, quoted=True)
                 for name, (struct, field) in added.items()]
        query = self._with_context(exp.select(exp.Star(), *extra).from_(item.copy()), scope)
        bases = base_tables(con, query)
        temp, of, refs = self._materialize(item, query, alias)
        columns = _columns(con, temp)
        roles = self.temp_roles[temp] = _rename_roles(self._relation_roles(None, query, columns), temp)
        key = "except_" if "except_" in exp.Star.arg_types else "except"  # sqlglot renamed it
        hidden = [exp.column(name, quoted=True) for name in added]
        for node in scope.expressions:  # the query's own * and alias.* read the item as it was
            star = node if isinstance(node, exp.Star) else (
                node.this if isinstance(node, exp.Column) and isinstance(node.this, exp.Star)
                and node.table.lower() == alias.lower() and not node.args.get("db") else None)
            if star is not None:
                star.set(key, [*(star.args.get(key) or []), *(h.copy() for h in hidden)])
        return _Source(alias, temp, columns, roles, bases, False, of, refs, fields=added)

    def _prepare_source(self, scope: exp.Select, item: exp.Expression) -> _Source:
        con = self.con
        alias = item.alias_or_name or "unnamed_subquery"  # DuckDB's name for a FROM item written without one
        if isinstance(item, exp.Table) and isinstance(item.this, exp.Identifier):
            name = item.name
            if item.args.get("db") or name.lower() not in visible_ctes(scope):
                relation = self.identities.of(item)  # what DuckDB reads under this spelling
                if relation is not None and not relation.view:
                    key = relation.key
                    return _Source(alias, key, _columns(con, relation.ref()), roles_of(con, key), (key,), True)
                if relation is not None:
                    select = exp.select("*").from_(relation.ref())
                    bases = base_tables(con, select)
                    temp, of, refs = self._materialize(item, select, alias)
                    columns = _columns(con, temp)
                    roles = self.temp_roles[temp] = _rename_roles(
                        self._relation_roles(relation.key, select, columns, "view"), temp)
                    return _Source(alias, temp, columns, roles, bases, False, of, refs)
                raise UnknownColumnError(f"no table, view or CTE named {item.sql(DIALECT)!r}")
            query = self._with_context(_sql.select_all(name), scope)
        elif isinstance(item, exp.Subquery):
            query = self._with_context(item.this, scope)
        else:
            query = self._with_context(exp.select("*").from_(item.copy()), scope)
        bases = base_tables(con, query)
        temp, of, refs = self._materialize(item, query, alias)
        columns = _columns(con, temp)
        roles = self.temp_roles[temp] = _rename_roles(self._relation_roles(None, query, columns), temp)
        return _Source(alias, temp, columns, roles, bases, False, of, refs)

    def _materialize(self, item: exp.Expression, query: exp.Select, alias: str
                     ) -> tuple[str, str | None, np.ndarray | None]:
        """A FROM item as a temp table (rowids 0..n-1); when its rows are rows of one base table (``traced``), also
        that table and each row's identity in it (``row_identity``: how the privacy ledger names the rows a worker
        sees)."""
        with_refs, of = traced(self.con, query, self.identities)
        if of is None:
            temp = self._temp_table("src", query=query)
            item.replace(_sql.table(temp, alias))
            return temp, None, None
        con = self.con
        full = _sql.table(f"__crowd_src_{next(_counter)}").sql(DIALECT)
        con.execute(f"CREATE TEMP TABLE {full} AS {with_refs.sql(DIALECT)}").fetchall()
        ref = _sql.identifier(ROW_REF).sql(DIALECT)
        try:
            refs = np.asarray([r for (r,) in con.execute(f"SELECT {ref} FROM {full} ORDER BY rowid").fetchall()],
                              dtype=np.int64)
            temp = self._temp_table("src", query=sqlglot.parse_one(  # the same rows in the same order, without it
                f"SELECT * EXCLUDE ({ref}) FROM {full} ORDER BY rowid", read=DIALECT))
        finally:
            con.execute(f"DROP TABLE IF EXISTS {full}").fetchall()
        item.replace(_sql.table(temp, alias))
        if hands_on_columns(with_refs):  # its rows are the table's, column for column: widening may read more
            self.plain_temps.add(temp)
        return temp, of, refs

    def bind(self, call: exp.Anonymous) -> BoundCall:
        return planning.bind(call, self.registry)

    def validate(self, statement: exp.Expression) -> None:
        """Bind every human operator call of ``statement`` (see ``bind``), before any of them runs or pays."""
        for node in statement.walk():
            if self.is_human(node):
                bound = self.bind(node)
                self._gold_table(bound.definition, bound.what)

    def _run_call(self, scope: exp.Select, call: exp.Anonymous, sources: list[_Source]) -> None:
        bound = self.bind(call)
        op, definition, what, columns_args, args, named = (bound.op, bound.definition, bound.what, bound.columns,
                                                          bound.args, bound.named)
        published, qi, kinds, protected, withheld = self._published(columns_args, sources, what)
        truth_expr, key_expr = self._truth_and_key(sources, what, op.kind == "group")

        where = scope.args.get("where")
        filters = _sql.conjuncts(where.this) if where else []
        clean = [c for c in filters if not self.has_crowd(c)]
        pushdown = self._limit_pushdown(scope, filters, clean, op.kind)
        identity = [exp.column("rowid", table=s.alias, quoted=True) for s in sources]
        # GROUPING SETS / ROLLUP / CUBE: every distinct grouping expression is projected once, each set's groups are
        # formed from its own ones (``_run_grouping_sets``)
        grouping = self._grouping_sets(scope, sources, what) if op.kind == "group" else None
        group_exprs = grouping.exprs if grouping is not None else (self._group_exprs(scope) if op.kind == "group"
                                                                    else [])
        projections: list[exp.Expression] = [exp.alias_(e, f"{_ID}{i}", quoted=True) for i, e in enumerate(identity)]
        rows_of = _rows_of(published, qi, sources)
        if rows_of is not None and rows_of.column is not None and rows_of.refs is None:  # a base table's own rows
            owner = sources[int(rows_of.column[len(_ID):])]
            projections.append(exp.alias_(row_identity(self.con, owner.table, owner.alias), _REF, quoted=True))
            rows_of = RowsOf(rows_of.tables, _REF)
        projections += [exp.alias_(e.copy(), f"{_GROUP}{i}", quoted=True) for i, e in enumerate(group_exprs)]
        if truth_expr is not None:
            projections.append(exp.alias_(truth_expr, TRUTH, quoted=True))
        if key_expr is not None:
            projections.append(exp.alias_(key_expr, KEY, quoted=True))
        gold_expr = self._gold_answers(definition, sources, what)
        if gold_expr is not None:
            projections.append(exp.alias_(gold_expr, GOLD, quoted=True))
        elif definition.gold and truth_expr is None:  # asked for gold questions, with no answer known: refused
            raise ArgumentError(f"{what}: gold := {definition.gold} needs items with known answers, and its input has "
                                "no ground-truth column; declare one, or name a table of known answers with "
                                "gold_table := '...'")
        projections += [exp.alias_(expr, name, quoted=True) for name, expr in published]
        query = exp.Select(expressions=projections)
        query.set("from_", (scope.args.get("from_") or scope.args.get("from")).copy())
        if scope.args.get("joins"):
            query.set("joins", [j.copy() for j in scope.args["joins"]])
        every_row = query.copy()  # (the rows the statement could reach: widening fetches from them)
        if clean:
            query = query.where(exp.and_(*[c.copy() for c in clean]), copy=False)
        if pushdown:
            order = scope.args.get("order")
            if order:
                query.set("order", self._resolve_aliases(order.copy(), scope))
            query.set("limit", scope.args["limit"].copy())
            if scope.args.get("offset"):
                query.set("offset", scope.args["offset"].copy())
        query = self._with_context(query, scope)
        frame = self._execute_df(query)
        published, qi = self._verified(published, qi, withheld, sources, frame, what)

        def ask(definition: HumanOperator, frame: pd.DataFrame, rows_of: RowsOf | None) -> None:
            """The rest of the call at ``definition``'s k: the rows widened to whole classes, the operator run (or
            estimated) and its answers spliced in."""
            joint = None
            if rows_of is not None and rows_of.column is not None and qi and len(sources) == 1 and grouping is None:
                frame, rows_of, joint = self._widened(frame, every_row, scope, sources[0], rows_of, int(definition.k))

            names = [n for n, _ in published]
            frame = frame.reset_index(drop=True)
            frame.insert(0, ROW_ID, np.arange(len(frame)))
            if op.kind == "group" and grouping is None:
                keys = frame[[f"{_GROUP}{i}" for i in range(len(group_exprs))]]
                if WIDENED in frame:  # rows shown only to keep classes whole form groups of their own (answers unused)
                    keys = keys.assign(**{WIDENED: frame[WIDENED].to_numpy(dtype=bool)})
                frame[GROUP_ID] = (pd.MultiIndex.from_frame(keys).factorize()[0] if keys.shape[1]
                                   else np.zeros(len(frame), dtype=np.int64))
            if op.kind == "group" and KEY not in frame:
                frame[KEY] = frame[f"{_ID}0"]
            # issue 24: the answer domain is the definition's list or the whole stored ground-truth column's values
            definition = selection.with_answer_domain(self.con, definition, call, TRUTH in frame, what)
            human = HumanInput(op=definition, frame=frame, published=names,
                               quasi_identifiers=[n for n in names if n in qi], rows_of=rows_of, joint_classes=joint,
                               kinds={n: kinds[n] for n in names if kinds.get(n)}, protected=protected, args=args,
                               budget=named.get("budget"), seed=named.get("seed"), withheld=withheld,
                               shared=[] if grouping is not None else
                               self._shared(frame, [n for n in names if n in qi], group_exprs, sources, what))
            # in explain() every estimated human operator's answers are NULL (spliced below), so once one has been
            # estimated a later input may be empty only because it filters or joins on those answers
            if grouping is not None and not (self.estimating and frame.empty and self.ctx.plans):
                self._run_grouping_sets(scope, call, human, grouping, sources, what)
                return
            if self.estimating and frame.empty and self.ctx.plans:
                self.ctx.plans.append(OperatorPlan(
                    operator=op.name, kind=op.kind, input_rows=0, items=0, cached_items=0, hits=0, assignments=0,
                    estimated_cost=0.0, budget=None, k=None, anonymizer=NOT_ESTIMATED,
                    note="its input depends on answers of an earlier operator, which explain() does not buy"))
                answers = None
            elif self.estimating:
                HumanOperatorRun(self.ctx, human, estimating=True).estimate()
                answers = None
            else:
                answers, _plan = HumanOperatorRun(self.ctx, human).run()
            if answers is None:  # explain(): splice a typed NULL so outer operators can still be estimated
                call.replace(answer_column(call, exp.cast(exp.null(), "VARCHAR")))
                return
            if WIDENED in frame:  # rows shown only to keep joint classes whole: their answers are not the query's
                frame = frame[~frame[WIDENED].to_numpy(dtype=bool)]
            self._splice(scope, call, op.kind, frame, answers, sources, group_exprs, pushdown)

        if self.estimating and self.ctx.ks:  # the trade-off: the call estimated at each k in this one pass
            for k in self.ctx.ks:
                before = len(self.ctx.plans)
                try:
                    ask(dataclasses.replace(definition, k=k), frame.copy(), rows_of)
                except (ArgumentError, PrivacyError) as refused:  # this k cannot be had (fewer rows than k, ...)
                    self.ctx.plans.append(OperatorPlan(
                        operator=op.name, kind=op.kind, input_rows=len(frame), items=0, cached_items=0, hits=0,
                        assignments=0, estimated_cost=0.0, budget=None, k=k, anonymizer=NOT_ESTIMATED,
                        note=f"would be refused: {refused}"))
                for plan in self.ctx.plans[before:]:
                    plan.k = k  # (a plan not estimated has none: the trade-off reads each plan's k)
            call.replace(answer_column(call, exp.cast(exp.null(), "VARCHAR")))  # (the first k replaced it already)
            return
        ask(definition, frame, rows_of)

    def _widened_input(self, rows: TableInput, query: exp.Query, table: str, named: dict[str, Any],
                       coded: bool = False) -> TableInput:
        """ANONYMIZE's input and the rows of ``table`` that keep the joint classes it touches whole (``serve.widening``,
        as ``_widened`` for a crowd call): released with it, in their classes, so that no earlier class is split into
        a part below k. Only when the query hands on the table's columns as they are (its rows are then read from the
        table itself); else the input as it is, and the guard decides."""
        k = named.get("k", 10)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            return rows  # (ANONYMIZE reports the bad k)
        rows.joint_classes, extra = self._to_widen(table, rows.row_refs, k)  # (read once: ANONYMIZE reuses them)
        relation = identity.of_key(self.con, table) if len(extra) else None
        if relation is None or relation.view or not hands_on_columns(query):
            return rows
        alias = "__crowd_w"
        stored = exp.select(exp.Star()).from_(relation.ref(alias))
        if [c.lower() for c in rows.columns] != [c.lower() for c in self.con.sql(stored.sql(DIALECT)).columns]:
            return rows
        ref = row_identity(self.con, table, alias)
        more = stored.select(exp.alias_(ref, ROW_REF, quoted=True)).where(exp.In(
            this=ref.copy(), query=exp.Subquery(this=exp.select("row_ref").from_(_sql.table("__crowd_widen"))))
        ).order_by(exp.column(ROW_REF, quoted=True))  # (a semi-join's rows come in no fixed order)
        with registered(self.con, __crowd_widen=pd.DataFrame({"row_ref": extra})):
            added, types = snapshot(self.con, more.sql(DIALECT), coded)
        # the input as it was read, then the added rows: the input is not run again (a UNION ALL of the two would
        # interleave them in no fixed order, and a second run of the input may not give its first rows)
        asked = rows.snapshot.append_column(ROW_REF, pa.array(rows.row_refs, pa.int64()))
        out = self._frozen(stacked(asked, added.rename_columns(asked.column_names)), types)
        out.widened = len(extra)
        return out

    def _widened(self, frame: pd.DataFrame, every_row: exp.Select, scope: exp.Select, source: _Source,
                 rows_of: RowsOf, k: int) -> tuple[pd.DataFrame, RowsOf, pd.DataFrame | None]:
        """``frame`` and the rows of its table that keep the joint classes it touches whole (``serve.widening``: a
        part of an earlier class below k, shown or left out, is what a worker who links releases tells apart): the
        same columns, marked ``WIDENED`` (shown; their answers are not the query's), read from the same FROM (a base
        table) or from the table a materialized source is the rows and columns of (then each row's identity moves
        to ``_REF``). Else ``frame`` as it is, and the guard decides. Also the joint classes it read (the operator
        plans its release over them)."""
        if frame.empty:
            return frame, rows_of, None
        identities = rows_of.identities(frame).astype(np.int64)
        classes, extra = self._to_widen(rows_of.tables[0], identities, k)
        if not len(extra):
            return frame, rows_of, classes
        wanted = exp.Subquery(this=exp.select("row_ref").from_(_sql.table("__crowd_widen")))
        if source.base:
            ref = row_identity(self.con, source.table, source.alias)
            query = every_row.where(exp.In(this=ref, query=wanted), copy=False)
        else:
            relation = identity.of_key(self.con, rows_of.tables[0])
            if source.table not in self.plain_temps or relation is None or relation.view or source.fields:
                return frame, rows_of, classes
            stored = {c.lower(): c for c in _columns(self.con, relation.ref())}
            if any(c.lower() not in stored for c in source.columns):
                return frame, rows_of, classes
            alias = "__crowd_w"
            ref = row_identity(self.con, rows_of.tables[0], alias)
            read = exp.select(*(exp.alias_(exp.column(stored[c.lower()], table=alias, quoted=True), c, quoted=True)
                                for c in source.columns), exp.alias_(ref, _REF, quoted=True)).from_(
                relation.ref(alias)).where(exp.In(this=ref.copy(), query=wanted))
            with registered(self.con, __crowd_widen=pd.DataFrame({"row_ref": extra})):
                temp = self._temp_table("wide", query=read)
            query = every_row.select(exp.alias_(exp.column(_REF, table=source.alias, quoted=True), _REF, quoted=True),
                                     copy=False)
            query.set("from_", exp.From(this=_sql.table(temp, source.alias)))
            frame = frame.assign(**{_REF: identities})
            rows_of = RowsOf(rows_of.tables, _REF)
        with registered(self.con, __crowd_widen=pd.DataFrame({"row_ref": extra})):
            wider = self._execute_df(self._with_context(query, scope))
        return (pd.concat([frame.assign(**{WIDENED: False}), wider.assign(**{WIDENED: True})], ignore_index=True),
                rows_of, classes)

    def _to_widen(self, table: str, identities: np.ndarray, k: int) -> tuple[pd.DataFrame, np.ndarray]:
        """The joint classes ``identities`` of ``table`` touch, and the rows to add so that none is split into a
        part below k (``serve.widening``)."""
        classes = composition.joint_classes(self.con, table, identities)
        extra = serve.widening(identities, classes, k) if not classes.empty else np.zeros(0, dtype=np.int64)
        return classes, extra

    def _splice(self, scope: exp.Select, call: exp.Anonymous, kind: str, frame: pd.DataFrame, answers: pd.DataFrame,
                sources: list[_Source], group_exprs: list[exp.Expression], pushdown: bool) -> None:
        """Join the answers to ``scope`` by row identity (or group key) and put their column in place of the call."""
        # an accuracy target's answers carry their posterior (issue 28): a column of its own beside the answer
        extra = [_CONFIDENCE] if kind == "tuple" and CONFIDENCE in answers else []
        if kind == "tuple":
            keys = [f"{_ID}{i}" for i in range(len(sources))]
            table = (frame[[ROW_ID, *keys]].merge(answers.rename(columns={CONFIDENCE: _CONFIDENCE}), on=ROW_ID,
                                                  how="left")[[*keys, _ANSWER, *extra]])
        else:
            keys = [f"{_GROUP}{i}" for i in range(len(group_exprs))]
            firsts = frame.drop_duplicates(GROUP_ID)[[GROUP_ID, *keys]]
            table = firsts.merge(answers, on=GROUP_ID, how="inner")[[*keys, _ANSWER]]
        temp = self._temp_table("ans", frame=table)
        # what a query may carry on from the answers: a tuple operator's answer (the crowd's, from what it was
        # shown); a group operator's is the chosen row's key; the join columns equal the input's own values (the
        # join's equalities give them the input's roles)
        self.temp_roles[temp] = TableRoles(temp, core=tuple(keys) + ((_ANSWER, *extra) if kind == "tuple" else ()),
                                           key=_ANSWER if kind == "group" else None)
        alias = f"{temp}_a"
        if kind == "tuple":
            conditions = [exp.EQ(this=exp.column(k, table=alias, quoted=True),
                                 expression=exp.column("rowid", table=s.alias, quoted=True))
                          for k, s in zip(keys, sources)]
        else:
            conditions = [exp.NullSafeEQ(this=exp.column(k, table=alias, quoted=True), expression=e.copy())
                          for k, e in zip(keys, group_exprs)] or [exp.true()]
        join = exp.Join(this=exp.Table(this=exp.to_identifier(temp, quoted=True),
                                       alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True))),
                        on=exp.and_(*conditions), side=None if pushdown else "LEFT")
        if pushdown:
            join.set("kind", "INNER")
            scope.set("offset", None)
        scope.append("joins", join)
        value: exp.Expression = exp.column(_ANSWER, table=alias, quoted=True)
        if kind == "group":
            value = exp.func("any_value", value)
        item = call.parent if isinstance(call.parent, exp.Alias) else call  # the select item the call is, if any
        at = next((i for i, e in enumerate(scope.expressions) if e is item), None)
        named = item.alias if isinstance(item, exp.Alias) else call.name.lower()
        call.replace(answer_column(call, value))
        if extra and at is not None:  # the posterior beside its answer: <name>_confidence after the call's item
            expressions = list(scope.expressions)
            expressions.insert(at + 1, exp.alias_(exp.column(_CONFIDENCE, table=alias, quoted=True),
                                                  f"{named}_confidence", quoted=True))
            scope.set("expressions", expressions)
        hidden = [exp.column(c, table=alias, quoted=True) for c in [*keys, _ANSWER, *extra]]
        key = "except_" if "except_" in exp.Star.arg_types else "except"  # sqlglot renamed it
        for star in scope.expressions:
            if isinstance(star, exp.Star):
                star.set(key, [*(star.args.get(key) or []), *hidden])

    def _run_grouping_sets(self, scope: exp.Select, call: exp.Anonymous, human: HumanInput, grouping: _GroupingSets,
                           sources: list[_Source], what: str) -> None:
        """A group operator over GROUPING SETS (ROLLUP, CUBE): it picks one row per group of every set, a row being in
        one group per set. One run per set (sets whose groups are the same rows share one), each over every input row
        once with that set's groups; the answers are spliced in by each output row's set (GROUPING()) and key.

        Privacy: a HIT shows one group's rows, so the quasi-identifiers a group shares are generalized per group
        (``_shared``); every run is one release of the same rows, and the guard of k-anonymity across releases would
        refuse a second one with other boxes. So all runs publish the same boxes: the same rows, columns and k, and
        one list of shared quasi-identifiers, which must then be every set's (a set sharing none is fine: its rows
        are not intersected). Sets sharing different ones are refused before anything is published."""
        frame = human.frame
        runs: list[tuple[np.ndarray, list[tuple[int, ...]]]] = []  # a partition of the rows, and the sets it answers
        for members in grouping.sets:
            columns = [f"{_GROUP}{i}" for i in members]
            gid = np.asarray(pd.MultiIndex.from_frame(frame[columns]).factorize()[0] if columns and len(frame)
                             else np.zeros(len(frame)), dtype=np.int64)
            same = next((run for run in runs if _same_partition(run[0], gid)), None)
            if same is not None:
                same[1].append(members)
            else:
                runs.append((gid, [members]))
        qi_names = list(human.quasi_identifiers)
        found: list[tuple[list[tuple[int, ...]], frozenset[str]]] = []
        for gid, members_list in runs:
            grouped = frame.assign(**{GROUP_ID: gid})
            shared: set[str] = set()
            for members in members_list:  # (each set's expressions are checked: one of a QI is refused)
                shared |= set(self._shared(grouped, qi_names, [grouping.exprs[i] for i in members], sources, what))
            found.append((members_list, frozenset(shared)))
        distinct = {s for _, s in found if s}
        if len(distinct) > 1:
            sharing = "; ".join(f"{' and '.join(grouping.label(m) for m in ms)} shares {', '.join(sorted(s))}"
                                for ms, s in found if s)
            raise PrivacyError(
                f"{what}: its grouping sets share different quasi-identifiers within their groups ({sharing}): a HIT "
                "shows one group's rows together, so the quasi-identifiers a group shares are generalized per group, "
                "and every row is shown once per set, in the same box in all of them, which can be generalized per "
                "group for one list of quasi-identifiers only. Group every set by the same quasi-identifiers (other "
                "columns may differ), or publish the quasi-identifiers of only one of them; nothing was published")
        shared_list = [q for q in qi_names if distinct and q in next(iter(distinct))]
        inputs = [dataclasses.replace(human, frame=frame.assign(**{GROUP_ID: gid}), shared=shared_list)
                  for gid, _ in runs]
        budget = human.budget
        if budget is not None and len(runs) > 1 and not self.estimating:
            # the call's budget bounds all its sets together: checked on the estimates before the first set publishes
            before = len(self.ctx.plans)
            total = sum(HumanOperatorRun(self.ctx, run, estimating=True).estimate().estimated_cost for run in inputs)
            del self.ctx.plans[before:]  # (estimates, not this query's plans)
            if total > budget + 1e-9:
                raise BudgetExceededError(
                    f"{human.op.name}: estimated cost ${total:,.2f} of its {len(runs)} grouping sets exceeds the "
                    f"budget ${budget:,.2f}; nothing was published")
        spent, estimated = self.ctx.spent, 0.0
        results: list[pd.DataFrame | None] = []
        for n, (run, (_, members_list)) in enumerate(zip(inputs, runs)):
            if budget is not None:  # what the earlier sets left of the call's budget
                run.budget = budget - (estimated if self.estimating else self.ctx.spent - spent)
            if self.estimating:
                plan, answers = HumanOperatorRun(self.ctx, run, estimating=True).estimate(), None
            else:
                answers, plan = HumanOperatorRun(self.ctx, run).run()
            estimated += plan.estimated_cost
            which = " and ".join(grouping.label(m) for m in members_list)
            plan.note = "; ".join(filter(None, [f"grouping set {which} ({n + 1} of {len(runs)})"
                                                + (": the same groups" if len(members_list) > 1 else ""), plan.note]))
            results.append(answers)
        if self.estimating:  # explain(): a typed NULL, as for any estimated operator
            call.replace(answer_column(call, exp.cast(exp.null(), "VARCHAR")))
            return
        parts = []
        for (gid, members_list), answers in zip(runs, results):
            firsts = np.flatnonzero(~pd.Series(gid).duplicated().to_numpy())  # a row of each group: its key values
            chosen = pd.DataFrame({GROUP_ID: gid[firsts], ROW_ID: firsts}).merge(
                answers[[GROUP_ID, _ANSWER]], on=GROUP_ID, how="inner")
            rows = chosen[ROW_ID].to_numpy()
            for members in members_list:
                part = {_SET: np.full(len(rows), grouping.mask(members), dtype=np.int64)}
                for i in range(len(grouping.exprs)):
                    values = frame[f"{_GROUP}{i}"].iloc[rows].to_numpy(dtype=object)
                    # a set's rows hold NULL for the expressions it does not group by, as DuckDB's output rows do
                    part[f"{_GROUP}{i}"] = (np.where(pd.isna(frame[f"{_GROUP}{i}"].iloc[rows]).to_numpy(), None, values)
                                            if i in members else np.full(len(rows), None, dtype=object))
                part[_SET_ANSWER] = chosen[_ANSWER].to_numpy()
                parts.append(pd.DataFrame(part))
        table = pd.concat(parts, ignore_index=True)
        temp = self._temp_table("ans", frame=table)
        keys = [f"{_GROUP}{i}" for i in range(len(grouping.exprs))]
        # what a query may carry on from the answers: the chosen row's key (as a plain GROUP BY's)
        self.temp_roles[temp] = TableRoles(temp, core=(_SET, *keys), key=_SET_ANSWER)
        alias = f"{temp}_a"
        # a join cannot tell a set's NULL from a NULL of the data, nor give an input row one answer per set: a scalar
        # subquery in the aggregate's output reads each output row's own (its set by GROUPING(), its key by the
        # grouping expressions, columns qualified so that none is read from the answers)
        exprs = [_qualified(e, sources) for e in grouping.exprs]
        conditions: list[exp.Expression] = [
            exp.NullSafeEQ(this=exp.column(k, table=alias, quoted=True), expression=e) for k, e in zip(keys, exprs)]
        if exprs:
            conditions.insert(0, exp.EQ(this=exp.column(_SET, table=alias, quoted=True),
                                        expression=exp.func("grouping", *(e.copy() for e in exprs))))
        lookup = exp.select(exp.column(_SET_ANSWER, table=alias, quoted=True)).from_(
            exp.Table(this=exp.to_identifier(temp, quoted=True),
                      alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True))))
        if conditions:
            lookup = lookup.where(exp.and_(*conditions), copy=False)
        call.replace(answer_column(call, exp.Subquery(this=lookup)))

    # ----------------------------------------------------------------------------------------- arguments
    def _published(self, args: list[exp.Expression], sources: list[_Source], what: str
                   ) -> tuple[list[tuple[str, exp.Expression]], set[str], dict[str, str | None], set[str],
                              dict[str, str]]:
        """(name, expression) of every published column, the QIs among them, their kinds, protected names, and the
        columns ``*`` leaves out with the reason (the allow list: only what lineage proves allowed is published)."""
        chosen: list[tuple[_Source, str]] = []
        withheld: dict[str, str] = {}
        for arg in args:
            if isinstance(arg, exp.Star) or (isinstance(arg, exp.Column) and isinstance(arg.this, exp.Star)):
                table = arg.table if isinstance(arg, exp.Column) else ""
                qualifier = arg.db if isinstance(arg, exp.Column) else ""
                picked = [s for s in sources if not table or s.alias.lower() == table.lower()]
                if table and (qualifier or not picked):  # a STRUCT column's X.*: its fields (``_prepare_sources``)
                    fields = [(s, c) for s in sources if not qualifier or s.alias.lower() == qualifier.lower()
                              for c, (struct, _) in s.fields.items() if struct.lower() == table.lower()]
                    if not fields:
                        raise UnknownColumnError(f"{what}: no table or alias {table!r} in FROM")
                    for s, c in fields:
                        reason = _field_reason(s, c)
                        if reason:
                            withheld[s.fields[c][1]] = reason
                        else:
                            chosen.append((s, c))
                    continue
                for s in picked:
                    allowed = self._in_declared_order(s, [c for c in _published_columns(s) if c not in s.fields])
                    chosen += [(s, c) for c in allowed]
                    withheld.update({c: _withheld_reason(s, c) for c in s.columns if c not in allowed
                                     and c not in s.fields})
            elif isinstance(arg, exp.Column):
                source, column = _resolve_column(arg, sources, what)
                reason = _withheld_reason(source, column)
                if column.lower() in {p.lower() for p in source.roles.protected} or _is_default_key(source, column):
                    raise PrivacyError(f"{what}: column {column!r} is never published in a HIT: it derives from "
                                       f"{reason}")
                if reason and column.lower() not in {q.lower() for q in source.roles.quasi_identifiers}:
                    raise PrivacyError(f"{what}: column {column!r} is not published: {reason}; declare it core "
                                       "(declare_roles(..., core=[...])) if workers may see it")
                chosen.append((source, column))
            else:
                raise ArgumentError(f"{what}: publish columns by name (or *), got {arg.sql(DIALECT)!r}")
        def shown(s: _Source, c: str) -> tuple[str, str]:
            """The names a published column goes by in a HIT: its own, or qualified when two would be shown alike (a
            struct's field: the field's, or struct.field)."""
            if c in s.fields:
                struct, field = s.fields[c]
                return field, f"{struct}.{field}"
            return c, f"{s.alias}.{c}"

        counts: dict[str, int] = {}
        for s, c in chosen:
            plain = shown(s, c)[0].lower()
            counts[plain] = counts.get(plain, 0) + 1
        published, qi, kinds, protected = [], set(), {}, set()
        seen = set()
        for s, c in chosen:
            plain, qualified = shown(s, c)
            name = qualified if counts[plain.lower()] > 1 else plain
            if name in seen:
                continue
            seen.add(name)
            published.append((name, exp.column(c, table=s.alias, quoted=True)))
            if c.lower() in {q.lower() for q in s.roles.quasi_identifiers}:
                qi.add(name)
                kinds[name] = {k.lower(): v for k, v in s.roles.kinds.items()}.get(c.lower())
        for s in sources:  # the last line of defence (HumanOperatorRun) checks published names against these
            protected |= {p for p in s.roles.protected if p not in seen}
        if not published:
            because = "; ".join(f"{c}: {r}" for c, r in withheld.items())
            raise PrivacyError(f"{what}: nothing to publish: lineage allows no column of the input"
                               + (f" ({because})" if because else "") + "; declare the columns workers may see as "
                               "core, or publish a quasi-identifier (it is generalized)")
        return published, qi, kinds, protected, withheld

    def _in_declared_order(self, source: _Source, columns: list[str]) -> list[str]:
        """``columns`` of a view, CTE or subquery over one table in the order that table declares its core columns
        (the rest after them, as they come): ``*`` then publishes the same items whether the rows are read from the
        table or through ``(SELECT * FROM adult ...) adult``, and answers on record serve either spelling."""
        if source.base or len(source.bases) != 1:
            return columns
        declared = {c.lower(): i for i, c in enumerate(roles_of(self.con, source.bases[0]).core)}
        if not declared:
            return columns
        return sorted(columns, key=lambda c: declared.get(c.lower(), len(declared)))

    def _verified(self, published: list[tuple[str, exp.Expression]], qi: set[str], withheld: dict[str, str],
                  sources: list[_Source], frame: pd.DataFrame, what: str
                  ) -> tuple[list[tuple[str, exp.Expression]], set[str]]:
        """The published columns whose values crowddb computes again from the stored rows, by the derivation lineage
        found, and finds equal (``crowddb.privacy.values``); the others are withheld (``withheld`` says why)."""
        dropped: dict[str, str] = {}
        for i, s in enumerate(sources):
            recompute = getattr(s.roles, "recompute", None)
            if s.base or not recompute:
                continue
            columns = {e.name: name for name, e in published if e.table == s.alias}
            rows = pd.unique(frame[f"{_ID}{i}"].to_numpy(dtype=np.int64))
            traced = (s.of, s.refs) if s.of is not None and s.refs is not None else None
            found = values.misread(self.con, s.table, rows, columns, recompute, traced,
                                   lambda table, alias: row_identity(self.con, table, alias), BASE_ALIAS)
            dropped.update({columns[c]: reason for c, reason in found.items()})
        if not dropped:
            return published, qi
        withheld.update(dropped)
        kept = [(n, e) for n, e in published if n not in dropped]
        if not kept:
            raise PrivacyError(f"{what}: nothing to publish: " + "; ".join(f"{c}: {r}" for c, r in dropped.items()))
        return kept, qi - set(dropped)

    def _truth_and_key(self, sources: list[_Source], what: str, group: bool
                       ) -> tuple[exp.Expression | None, exp.Expression | None]:
        truth = next(((s, s.roles.ground_truth) for s in sources if s.roles.ground_truth), None)
        truth_expr = exp.column(truth[1], table=truth[0].alias, quoted=True) if truth else None
        key_expr = None
        if group:
            key = next(((s, s.roles.key) for s in sources if s.roles.key), None)
            if key is None:
                key = next(((s, c) for s in sources for c in s.columns if is_key(c, None)), None)
            if key is not None:
                key_expr = exp.column(key[1], table=key[0].alias, quoted=True)
        return truth_expr, key_expr

    def _gold_table(self, definition: HumanOperator, what: str) -> tuple[str, dict[str, str]] | None:
        """The table ``gold_table`` names, as the database spells it, and its columns (lower-case -> name); checked
        when the statement's calls are validated, before any of them runs."""
        name = definition.gold_table
        if name is None:
            return None
        if not definition.gold and not definition.adaptive:  # an accuracy target's model is anchored on them
            raise ArgumentError(f"{what}: gold_table := {name!r} holds the known answers of gold questions; pass "
                                "gold := a share of each HIT's items too (e.g. gold := 0.1), or an accuracy target "
                                "(accuracy := 0.95), whose workers' model they anchor")
        table = resolve_table(self.con, name)
        columns = {c.lower(): c for c in table_columns(self.con, table)}
        if "answer" not in columns:
            raise UnknownColumnError(f"{what}: gold_table {table!r} needs an 'answer' column (and the input's key); "
                                     f"it has {list(columns.values())}")
        return table, columns

    def _gold_answers(self, definition: HumanOperator, sources: list[_Source], what: str) -> exp.Expression | None:
        """``gold_table := 'name'``: the known answer of each input row for gold questions, from a table of the
        input's declared key and an ``answer`` column (a correlated subquery; every name a quoted identifier)."""
        found = self._gold_table(definition, what)
        if found is None:
            return None
        name, (table, columns) = definition.gold_table, found
        owner = next((s for s in sources if s.roles.key), None)
        if owner is None:
            raise ArgumentError(f"{what}: gold_table := {name!r} is matched to the input's rows by their key, and "
                                "no input table declares one; declare it (key := 'id' in load_csv or declare_roles)")
        missing = [c for c in (owner.roles.key, "answer") if c.lower() not in columns]
        if missing:
            raise UnknownColumnError(f"{what}: gold_table {table!r} needs the columns {owner.roles.key!r} (the "
                                     f"input's key) and 'answer'; it has no {', '.join(map(repr, missing))}")
        alias = "__crowd_known"
        known = exp.select(exp.func("any_value", exp.column(columns["answer"], table=alias, quoted=True))).from_(
            exp.Table(this=exp.to_identifier(table, quoted=True), alias=exp.TableAlias(this=exp.to_identifier(alias))))
        known = known.where(exp.column(columns[owner.roles.key.lower()], table=alias, quoted=True).eq(
            exp.column(owner.roles.key, table=owner.alias, quoted=True)))
        return exp.cast(exp.Subquery(this=known), "VARCHAR")

    def _shared(self, frame: pd.DataFrame, qi_names: list[str], group_exprs: list[exp.Expression],
                sources: list[_Source], what: str) -> list[str]:
        """Published quasi-identifiers every row of a group shares (a GROUP BY on them): a group operator's item
        shows rows of one group, so workers could intersect their boxes; these are generalized per group. A GROUP BY
        on an expression of a quasi-identifier (age // 10) is refused: the rows of an item would share it."""
        if GROUP_ID not in frame:
            return []
        for expr in group_exprs:
            if isinstance(expr, exp.Column):
                continue
            for col in expr.find_all(exp.Column):
                try:
                    source, column = _resolve_column(col, sources, what)
                except (UnknownColumnError, ArgumentError):
                    continue
                if column.lower() in {q.lower() for q in source.roles.quasi_identifiers}:
                    raise PrivacyError(
                        f"{what}: GROUP BY {expr.sql(DIALECT)} is computed from the quasi-identifier {column!r}: "
                        "every row of a HIT would share it, so workers could narrow it down; group by the "
                        f"quasi-identifier itself (it is then generalized per group) or by a column that is not one")
        if not qi_names or frame.empty:
            return []
        distinct = frame.groupby(GROUP_ID)[qi_names].nunique(dropna=False).max()
        return [q for q in qi_names if distinct[q] <= 1]

    def _grouping_sets(self, scope: exp.Select, sources: list[_Source], what: str) -> _GroupingSets | None:
        """The GROUP BY of ``scope`` expanded into its grouping sets, when it holds GROUPING SETS, ROLLUP or CUBE
        (None: a plain GROUP BY). Elements side by side combine as DuckDB combines them (every set of one with every
        set of the other); ordinals and select aliases are resolved; an expression is one whatever the spelling of its
        columns (``sex``, ``people.sex``); sets of the same expressions are one set (DuckDB's rows for them are equal
        and get equal answers)."""
        group = scope.args.get("group")
        if group is None:
            return None
        # (an older sqlglot keeps them apart from the plain expressions)
        elements = [*group.expressions, *(n for part in ("grouping_sets", "cube", "rollup")
                                          for n in group.args.get(part) or [])]
        if not any(isinstance(e, (exp.GroupingSets, exp.Cube, exp.Rollup)) for e in elements):
            return None
        exprs: list[exp.Expression] = []
        positions: dict[str, int] = {}

        def position(node: exp.Expression) -> int:
            if isinstance(node, exp.Literal) and not node.is_string:
                node = scope.expressions[int(node.this) - 1].unalias().copy()
            else:  # (in a holder: a bare alias is itself the node replaced)
                node = self._resolve_aliases(exp.Paren(this=node.copy()), scope).this
            key = _qualified(node, sources).sql(DIALECT)
            if key not in positions:
                positions[key] = len(exprs)
                exprs.append(node)
            return positions[key]

        def one(node: exp.Expression) -> frozenset[int]:  # a set written as an expression, (a, b) or ()
            inner = node.this if isinstance(node, exp.Paren) else node
            return frozenset(position(e) for e in (inner.expressions if isinstance(inner, exp.Tuple) else [inner]))

        def expand(node: exp.Expression) -> list[frozenset[int]]:
            if isinstance(node, exp.GroupingSets):
                return [s for item in node.expressions for s in expand(item)]
            if isinstance(node, (exp.Rollup, exp.Cube)):
                parts = [one(e) for e in node.expressions]
                if isinstance(node, exp.Rollup):  # (a, b): (a, b), (a), ()
                    return [frozenset().union(*parts[:n]) for n in range(len(parts), -1, -1)]
                if len(parts) > _MAX_GROUPING_SETS.bit_length():
                    raise ArgumentError(f"{what}: CUBE of {len(parts)} elements makes {2 ** len(parts)} grouping sets, "
                                        f"more than {_MAX_GROUPING_SETS}; each is asked about on its own")
                return [frozenset().union(*(p for p, on in zip(parts, bits) if on))
                        for bits in itertools.product((True, False), repeat=len(parts))]
            return [one(node)]

        sets: list[frozenset[int]] = [frozenset()]
        for element in elements:
            sets = list(dict.fromkeys(a | b for a in sets for b in expand(element)))
            if len(sets) > _MAX_GROUPING_SETS:
                raise ArgumentError(f"{what}: its GROUP BY makes more than {_MAX_GROUPING_SETS} grouping sets; each is "
                                    "asked about on its own (every input row once per set)")
        if len(exprs) > 62:  # GROUPING() of them all is a BIGINT bit mask
            raise ArgumentError(f"{what}: its grouping sets hold {len(exprs)} expressions, more than 62")
        return _GroupingSets(exprs, [tuple(sorted(s)) for s in sets])

    def _group_exprs(self, scope: exp.Select) -> list[exp.Expression]:
        """The GROUP BY expressions of ``scope`` with ordinals and select aliases resolved."""
        group = scope.args.get("group")
        if group is None:
            return []
        exprs = list(group.expressions)
        if group.args.get("all") or (len(exprs) == 1 and isinstance(exprs[0], exp.Var) and exprs[0].name.upper() == "ALL"):
            return [p.unalias().copy() for p in scope.expressions
                    if not self.has_crowd(p) and not p.find(exp.AggFunc) and not isinstance(p, exp.Star)]
        out = []
        for e in exprs:
            if isinstance(e, exp.Literal) and not e.is_string:
                out.append(scope.expressions[int(e.this) - 1].unalias().copy())
            else:
                out.append(self._resolve_aliases(e.copy(), scope))
        return out

    def _resolve_aliases(self, node: exp.Expression, scope: exp.Select) -> exp.Expression:
        """Replace bare references to select-list aliases by the aliased expressions."""
        aliases = {p.alias.lower(): p.this for p in scope.expressions if isinstance(p, exp.Alias)}
        source_columns = set()
        for col in node.find_all(exp.Column):
            if not col.table and col.name.lower() in aliases:
                source_columns.add(col)
        for col in source_columns:
            col.replace(aliases[col.name.lower()].copy())
        return node

    def _limit_pushdown(self, scope: exp.Select, filters: list, clean: list, kind: str) -> bool:
        """May the scope's LIMIT be applied to the operator's input (so only those rows are asked about)?"""
        if kind != "tuple" or not scope.args.get("limit") or len(filters) != len(clean):
            return False
        if scope.args.get("group") or scope.args.get("having") or scope.args.get("distinct"):
            return False
        if any(p.find(exp.AggFunc) or p.find(exp.Window) for p in scope.expressions):
            return False
        order = scope.args.get("order")
        if order is not None:
            resolved = self._resolve_aliases(order.copy(), scope)
            if self.has_crowd(resolved):
                return False
        return True


# ------------------------------------------------------------------------------------------------- helpers
def _as_table(name: exp.Expression) -> exp.Table:
    """A table function's first argument (a column, an identifier or a table, as sqlglot parsed the name) as the
    table reference it spells, qualifiers included."""
    if isinstance(name, exp.Table):
        return name.copy()
    if isinstance(name, exp.Identifier):
        return exp.Table(this=name.copy())
    parts = [name.args.get(p) for p in ("catalog", "db", "table")]
    node = exp.Table(this=name.this.copy())
    qualifiers = [p.copy() for p in parts if p is not None]
    if qualifiers:
        node.set("db", qualifiers[-1])
    if len(qualifiers) > 1:
        node.set("catalog", qualifiers[-2])
    return node


def _columns(con, relation: str | exp.Table) -> list[str]:
    """The columns of a relation: a temp table's name, or a resolved reference (``TableId.ref``)."""
    source = _sql.table(relation) if isinstance(relation, str) else relation
    return [d[0] for d in con.execute(exp.select("*").from_(source).limit(0).sql(DIALECT)).description]


def _rename_roles(roles: TableRoles, table: str) -> TableRoles:
    """Roles matched (by lower-case name) onto the columns of a materialized table."""
    return dataclasses.replace(roles, table=table)


def _is_default_key(source: _Source, column: str) -> bool:
    """Without a declared key, a column named ``id`` is treated as the row's key (a direct identifier)."""
    return is_default_key(column, source.roles.key)


def _equated_roles(scope: exp.Select, sources: list[_Source]) -> list[_Source]:
    """Sources whose columns take the roles of the columns the query equates them with (JOIN ... ON a.x = b.y,
    USING (x), WHERE a.x = b.y), transitively: publishing ``o.zip`` after ``ON o.zip = p.zip`` would publish the
    person's raw zip. A column equal to a protected one becomes sensitive; one equal to a quasi-identifier, a
    quasi-identifier of the same kind. Conservative: an equality under OR counts too."""
    if len(sources) < 2:
        return sources

    def locate(col: exp.Column) -> tuple[int, str] | None:
        hits = [(i, c) for i, s in enumerate(sources) if not col.table or s.alias.lower() == col.table.lower()
                for c in s.columns if c.lower() == col.name.lower()]
        return hits[0] if len(hits) == 1 else None

    pairs: list[tuple[tuple[int, str], tuple[int, str]]] = []
    conditions = [j.args.get("on") for j in scope.args.get("joins") or []] + [scope.args.get("where")]
    for condition in filter(None, conditions):
        for eq in condition.find_all(exp.EQ, exp.NullSafeEQ):
            if isinstance(eq.this, exp.Column) and isinstance(eq.expression, exp.Column):
                a, b = locate(eq.this), locate(eq.expression)
                if a and b and a[0] != b[0]:
                    pairs += [(a, b), (b, a)]
    for join in scope.args.get("joins") or []:
        for ident in join.args.get("using") or []:
            holders = [(i, c) for i, s in enumerate(sources) for c in s.columns if c.lower() == ident.name.lower()]
            pairs += [(a, b) for a in holders for b in holders if a[0] != b[0]]
    if not pairs:
        return sources
    qi = [{c.lower(): s.roles.kinds.get(c) for c in s.roles.quasi_identifiers} for s in sources]
    hidden = [{c.lower() for c in s.roles.protected} for s in sources]

    def verdict(member: tuple[int, str]) -> tuple[int, str | None]:  # (2: protected, 1: a QI of its kind, 0: raw)
        i, c = member
        return (2, None) if c in hidden[i] else (1, qi[i][c]) if c in qi[i] else (0, None)

    lowered = [((i, a.lower()), (j, b.lower())) for (i, a), (j, b) in pairs]
    for (i, c), (level, kind) in equality.stricter(lowered, verdict, lambda v: v[0]).items():
        if level == 2:
            hidden[i].add(c)
            qi[i].pop(c, None)
        else:
            qi[i][c] = kind
    out = []
    for s, q, h in zip(sources, qi, hidden):
        by_lower = {c.lower(): c for c in s.columns}
        r = s.roles
        extra_hidden = [by_lower[c] for c in sorted(h) if c in by_lower and by_lower[c] not in r.protected]
        quasi = tuple(by_lower[c] for c in q if c in by_lower)
        if not extra_hidden and set(quasi) == set(r.quasi_identifiers):
            out.append(s)
            continue
        roles = TableRoles(r.table, quasi, {by_lower[c]: k for c, k in q.items() if c in by_lower},
                           (*r.sensitive, *extra_hidden), tuple(c for c in r.core if c not in extra_hidden),
                           r.ground_truth, r.key)
        out.append(dataclasses.replace(s, roles=roles))
    return out


def _withheld_reason(source: _Source, column: str) -> str:
    """Why ``column`` of ``source`` is not published as it is ('' when it may be): the derived relation's lineage,
    else the table's declared roles."""
    roles = source.roles
    if isinstance(roles, DerivedRoles) and column in roles.withheld:
        return roles.withheld[column]
    if not (roles.quasi_identifiers or roles.protected or roles.core):
        return (f"key {column} (a column named id is the key unless one is declared)"
                if _is_default_key(source, column) else "")
    status = base_status(roles, column)
    if status.level == QI and not status.star:  # ``*`` publishes the core columns; this one must be named
        return f"quasi-identifier {identity.display(roles.table)}.{column} is not declared core"
    return status.reason if status.level == WITHHELD else ""


def _field_reason(source: _Source, column: str) -> str:
    """Why a STRUCT field's column (``_Source.fields``) published by ``X.*`` is withheld ('' when it may be shown):
    as a column named by the query, a quasi-identifier is shown (generalized), anything lineage withholds is not, and
    nor is a field named ``id`` of a relation that declares no key (the key, as a column named id is)."""
    protected = {p.lower() for p in source.roles.protected}
    if column.lower() in protected:
        return _withheld_reason(source, column) or "derived from a protected column"
    if column.lower() in {q.lower() for q in source.roles.quasi_identifiers}:
        return ""
    reason = _withheld_reason(source, column)
    if not reason and is_default_key(source.fields[column][1], source.roles.key):
        return f"key {source.fields[column][1]} (a column named id is the key unless one is declared)"
    return reason


def _published_columns(source: _Source) -> list[str]:
    """What ``*`` publishes for one source: its core columns if declared, else every unprotected column."""
    protected = {p.lower() for p in source.roles.protected}
    by_lower = {c.lower(): c for c in source.columns}
    if source.roles.core:  # (a column declared both core and protected is protected: the stricter role wins)
        return [by_lower[c.lower()] for c in source.roles.core if c.lower() in by_lower and c.lower() not in protected]
    return [c for c in source.columns if c.lower() not in protected and not _is_default_key(source, c)]


def _resolve_column(col: exp.Column, sources: list[_Source], what: str) -> tuple[_Source, str]:
    name = col.name.lower()
    candidates = [s for s in sources if not col.table or s.alias.lower() == col.table.lower()]
    hits = [(s, c) for s in candidates for c in s.columns if c.lower() == name]
    if not hits:
        raise UnknownColumnError(f"{what}: unknown column {col.sql(DIALECT)!r}; the input has "
                                 f"{sorted({c for s in sources for c in s.columns})}")
    if len(hits) > 1:
        raise ArgumentError(f"{what}: column {col.name!r} is ambiguous; qualify it with a table alias")
    return hits[0]


def _qualified(node: exp.Expression, sources: list[_Source]) -> exp.Expression:
    """A copy of ``node`` with every column qualified by the one FROM item it names (how DuckDB binds it): ``sex`` and
    ``people.sex`` are one grouping expression, and a column keeps its meaning inside a subquery over other tables.
    A column no FROM item (or more than one) holds is left as written."""
    holder = exp.Paren(this=node.copy())  # (a node that is itself a column is replaced inside its holder)
    for col in list(holder.find_all(exp.Column)):
        if isinstance(col.this, exp.Star):
            continue
        hits = [(s, c) for s in sources if not col.table or s.alias.lower() == col.table.lower()
                for c in s.columns if c.lower() == col.name.lower()]
        if len(hits) == 1 and not col.args.get("db"):
            col.replace(exp.column(hits[0][1], table=hits[0][0].alias, quoted=True))
    return holder.this


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """Do the group ids ``a`` and ``b`` (one per row) split the rows into the same groups?"""
    if len(a) != len(b):
        return False
    if not len(a):
        return True
    n_a, n_b = len(pd.unique(a)), len(pd.unique(b))
    return n_a == n_b and len(pd.unique(a * (int(b.max()) + 1) + b)) == n_a


def _rows_of(published: list[tuple[str, exp.Expression]], qi: set[str], sources: list[_Source]) -> RowsOf | None:
    """Whose rows a call's quasi-identifiers are, for the privacy ledger: one base table's (in the frame's identity
    column of that source, which ``_run_call`` turns into ``row_identity``; or through a traced temp table's
    ``refs``), or tables' rows crowddb cannot tie them to; None without QIs."""
    if not qi:
        return None
    aliases = {expr.table.lower() for name, expr in published if name in qi and isinstance(expr, exp.Column)}
    owners = [(i, s) for i, s in enumerate(sources) if s.alias.lower() in aliases]
    if len(owners) == 1 and owners[0][1].base:
        i, source = owners[0]
        return RowsOf((source.table,), f"{_ID}{i}")
    if len(owners) == 1 and owners[0][1].of is not None:
        i, source = owners[0]
        return RowsOf((source.of,), f"{_ID}{i}", source.refs)
    tables = tuple(dict.fromkeys(t for _, s in (owners or list(enumerate(sources))) for t in s.bases))
    return RowsOf(tables, None)
