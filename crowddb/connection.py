"""``crowddb.connect()``: a DuckDB connection whose SQL also understands crowd operators."""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
from sqlglot import exp

from ._duck import in_transaction, registered, transaction
from .catalog import TableRoles, declare_roles, ensure_catalog, resolve_table, roles_of
from .crowd import Platform, SimulatedCrowd
from .errors import (
    ArgumentError,
    BudgetExceededError,
    CrowdDBError,
    QueryError,
    SQLParseError,
    UnknownColumnError,
    UnknownOperatorError,
)
from .operators.context import OperatorContext
from .operators.human import NOT_ESTIMATED, OperatorPlan
from .operators.table_functions import TABLE_FUNCTIONS
from .lineage import LINEAGE_PATTERN, follow, is_tracked
from .planner import DIALECT, Planner, answer_column, parse
from .udf import HumanOperator, Registry

__all__ = ["CrowdDB", "QueryPlan", "connect"]

# string literals and comments: an operator name inside them does not make a query a crowd query
_LITERALS = re.compile(r"'(?:[^']|'')*'|--[^\n]*|/\*.*?\*/", re.DOTALL)


@dataclasses.dataclass
class QueryPlan:
    """What a query would post to the crowd, operator by operator (``CrowdDB.explain``)."""

    query: str
    operators: list[OperatorPlan]
    reports: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def hits(self) -> int:
        return sum(p.hits for p in self.operators)

    @property
    def assignments(self) -> int:
        return sum(p.assignments for p in self.operators)

    @property
    def estimated_cost(self) -> float:
        return round(sum(p.estimated_cost for p in self.operators), 4)

    def df(self) -> pd.DataFrame:
        """One row per human operator."""
        return pd.DataFrame([p.as_row() for p in self.operators],
                            columns=[f.name for f in dataclasses.fields(OperatorPlan)])

    def __str__(self) -> str:
        if not self.operators and not self.reports:
            return "no crowd operator: the query runs in DuckDB unchanged"
        lines = []
        for p in self.operators:
            lines.append(f"{p.operator} ({p.kind}): {p.input_rows} rows -> {p.items} items, {p.cached_items} cached; "
                         f"{p.hits} HITs, {p.assignments} assignments, est. ${p.estimated_cost:,.2f}"
                         + (f" (budget ${p.budget:,.2f})" if p.budget is not None else ""))
            if p.anonymizer == NOT_ESTIMATED:
                lines.append(f"    not estimated: {p.note}")
                continue
            privacy = f"k={p.k}, anonymizer={p.anonymizer}" if p.k else "no quasi-identifier published"
            if p.ncp is not None:
                privacy += f", NCP={p.ncp:.2f}%"
            if p.accuracy_lower is not None:
                privacy += f", accuracy in [{p.accuracy_lower:.3f}, {p.accuracy_upper:.3f}]"
            privacy += f", epsilon={p.epsilon if p.epsilon is not None else '-'}"
            lines.append(f"    privacy: {privacy}" + (f"; {p.note}" if p.note else ""))
        for r in self.reports:
            lines.append(f"{r.get('operator')}: epsilon={r.get('epsilon')}, delta={r.get('delta')}"
                         f" ({r.get('guarantee', '')})")
        lines.append(f"total: {self.hits} HITs, {self.assignments} assignments, est. ${self.estimated_cost:,.2f}")
        return "\n".join(lines)


class CrowdDB:
    """A DuckDB connection plus a crowd: plain SQL passes through untouched, crowd operators are planned.

    Everything DuckDB's connection offers is reachable through this object (attribute access is delegated)."""

    def __init__(self, database: str | Path = ":memory:", *, platform: Platform | None = None,
                 seed: int | None = None, budget: float | None = None, udfs: Iterable[str | Path] = (),
                 progress: bool = True, read_only: bool = False, config: Mapping[str, Any] | None = None) -> None:
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ArgumentError(f"seed must be an integer or None, got {seed!r}")
        if budget is not None and budget < 0:
            raise ArgumentError("budget must be >= 0 (US$ per query)")
        try:
            self.con = duckdb.connect(str(database), read_only=read_only, config=dict(config or {}))
        except duckdb.Error as err:  # a missing folder, a file another process holds, a bad setting
            raise CrowdDBError(f"cannot open database {str(database)!r}: {err}") from None
        self.database = str(database)
        try:
            if not read_only:
                ensure_catalog(self.con)
            self.registry = Registry(udfs)
            self.platform = platform if platform is not None else SimulatedCrowd(seed=seed)
            if not read_only:
                self._record_workers()
        except BaseException:
            self.con.close()
            raise
        self.seed, self.budget, self.progress = seed, budget, progress
        self.last_plan: QueryPlan | None = None
        self._pattern: re.Pattern[str] | None = None

    # --------------------------------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Close the DuckDB connection (idempotent)."""
        con = self.__dict__.get("con")
        if con is not None:
            con.close()
            self.__dict__["con"] = None

    def __enter__(self) -> CrowdDB:  # noqa: PYI034 (typing.Self needs Python 3.11)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        with contextlib.suppress(Exception):  # never raise from a finalizer
            self.close()

    def __getattr__(self, name: str) -> Any:
        con = self.__dict__.get("con")
        if con is None:
            raise AttributeError(name)
        return getattr(con, name)

    def _record_workers(self) -> None:
        workers = self.platform.workers().assign(platform=self.platform.name)
        with registered(self.con, __crowd_workers=workers):
            self.con.execute("INSERT OR IGNORE INTO crowddb_workers (worker_id, platform, quality) "
                             "SELECT worker_id, platform, quality FROM __crowd_workers")

    # ------------------------------------------------------------------------------------------- queries
    def _crowd_pattern(self) -> re.Pattern[str]:
        names = sorted({*self.registry.names(), *TABLE_FUNCTIONS})
        if self._pattern is None or self._pattern_names != names:
            self._pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\s*\(", re.IGNORECASE)
            self._pattern_names = names
        return self._pattern

    def sql(self, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None):
        """Run SQL; returns a DuckDB relation for a query (None for a statement), like ``duckdb.sql``."""
        statements = self._crowd_statements(query)
        if statements is None:
            tracked = self._tracked_statements(query, params)
            with self._unknown_functions():
                result = self.con.sql(query, params=params)
            self._carry_roles(tracked)
            return result
        return self._run(query, statements, params, final="sql")

    def execute(self, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None):
        """Run SQL like ``DuckDBPyConnection.execute``: returns the connection, ready to fetch."""
        statements = self._crowd_statements(query)
        if statements is None:
            tracked = self._tracked_statements(query, params)
            with self._unknown_functions():
                result = self.con.execute(query, params) if params is not None else self.con.execute(query)
            return self._carry_roles_keeping(result, tracked) if tracked else result
        return self._run(query, statements, params, final="execute")

    def _carry_roles_keeping(self, result: Any, statements: list[exp.Expression]):
        """Carry the roles of ``statements`` and keep ``result`` (their ``execute`` result) pending for the caller:
        the statements roles need would replace it (DuckDB 2), so it is fetched first and replayed after."""
        rows, described = result.fetchall(), result.description
        self._carry_roles(statements)
        return self._replay(rows, described)

    def _replay(self, rows: list[tuple], described: Any):
        """Make ``rows`` (a statement's result, fetched before roles were carried with more statements) the
        connection's pending result again, with the same column names and types."""
        if not described:
            return self.con
        types = [exp.DataType.build(str(d[1]), dialect=DIALECT) for d in described]
        names = [exp.to_identifier(d[0], quoted=True) for d in described]
        if not rows:
            select = exp.select(*(exp.alias_(exp.cast(exp.Null(), t), n) for t, n in zip(types, names))).where("false")
        else:
            values = exp.values([tuple(exp.cast(exp.convert(v), t) for v, t in zip(row, types)) for row in rows],
                                alias="t", columns=names)
            select = exp.select("*").from_(values)
        return self.con.execute(select.sql(DIALECT))

    def _tracked_statements(self, query: str, params: Any) -> list[exp.Expression]:
        """The statements of plain SQL whose data or names roles must follow (CREATE TABLE ... AS, INSERT ... SELECT,
        ALTER TABLE ... RENAME; parsed only when the text may hold one), with their parameters bound."""
        if not LINEAGE_PATTERN.search(_LITERALS.sub(" ", query)):
            return []
        try:
            statements = parse(query)
        except SQLParseError:
            return []  # sqlglot cannot read it; DuckDB judges the SQL itself
        return [self._bind(s, params) for s in statements if is_tracked(s)]

    def _carry_roles(self, statements: Iterable[exp.Expression]) -> None:
        """Roles follow data and names of ``statements`` (which have run)."""
        for statement in statements:
            follow(self.con, statement)

    @contextlib.contextmanager
    def _unknown_functions(self):
        """DuckDB's 'function does not exist' becomes UnknownOperatorError (a misspelt crowd operator lands here)."""
        try:
            yield
        except duckdb.CatalogException as err:
            message = str(err)
            if "function" in message.lower() and "does not exist" in message.lower():
                raise UnknownOperatorError(f"{message}\n(crowd operators: {self.registry.names()}; table functions: "
                                           f"{sorted(n.upper() for n in TABLE_FUNCTIONS)})") from None
            raise

    query = sql

    def explain(self, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> QueryPlan:
        """How many HITs and assignments ``query`` would post, its estimated cost and the privacy parameters that
        apply; nothing is published, paid or written."""
        statements = self._crowd_statements(query) or []
        ctx = self._context(query, dry_run=True)
        planner = Planner(ctx, TABLE_FUNCTIONS)
        rehearse = len(statements) > 1 and not in_transaction(self.con)
        with _rolled_back(self.con, rehearse):
            for i, statement in enumerate(statements):
                bound = self._bind(statement, params)
                try:
                    self._check_binds(planner, bound)
                except QueryError as err:
                    if i == 0 or rehearse:
                        raise
                    raise QueryError(f"{err}\n(explain() inside an open transaction cannot rehearse the earlier "
                                     "statements of the query, so this one cannot see what they create)") from None
                rewritten = self._rewrite(planner, bound)
                if rehearse and i < len(statements) - 1 and _rehearsable(rewritten):
                    self._rehearse(rewritten, bound)
        plan = QueryPlan(query, list(ctx.plans), list(ctx.reports))
        self.last_plan = plan
        return plan

    def _rehearse(self, rewritten: exp.Expression, bound: exp.Expression) -> None:
        """Run a statement of a multi-statement query inside explain()'s rolled-back transaction, so the statements
        after it are bound and estimated against the tables it creates or fills (crowd answers are NULL there)."""
        try:
            self.con.execute(rewritten.sql(DIALECT)).fetchall()
        except duckdb.Error as err:
            raise _query_error(err) from None
        if is_tracked(bound):
            self._carry_roles([bound])

    def _crowd_statements(self, query: str) -> list[exp.Expression] | None:
        """Parsed statements if ``query`` uses a crowd operator, else None (DuckDB gets the text untouched)."""
        if not isinstance(query, str):
            raise ArgumentError(f"SQL must be a string, got {type(query).__name__}")
        if self.con is None:
            raise CrowdDBError("the connection is closed")
        if not self._crowd_pattern().search(_LITERALS.sub(" ", query)):
            return None
        statements = parse(query)
        planner = Planner(self._context(query), TABLE_FUNCTIONS)
        if not any(planner.has_crowd(s) for s in statements):
            return None
        return statements

    def _context(self, query: str, dry_run: bool = False) -> OperatorContext:
        return OperatorContext(self.con, self.platform, self.registry, seed=self.seed, query=query,
                               dry_run=dry_run, progress=self.progress, budget=self.budget)

    def _refuse_in_transaction(self, statements: list[exp.Expression]) -> None:
        """Crowd HITs are paid outside the database: a ROLLBACK could not take them back, only forget that they were
        bought (and buy them again). So human operators do not run inside an explicit transaction, whether the caller
        opened it before the query or the query's own text opens it (BEGIN ...; SELECT getposition(*) ...)."""
        human = [any(isinstance(n, exp.Anonymous) and n.name in self.registry for n in s.walk()) for s in statements]
        if not any(human):
            return
        is_open = in_transaction(self.con)
        for statement, asks in zip(statements, human):
            if isinstance(statement, exp.Transaction):
                is_open = True
            elif isinstance(statement, (exp.Commit, exp.Rollback)):
                is_open = False
            elif is_open and asks:
                raise QueryError("crowd operators publish paid HITs, which a ROLLBACK cannot take back: run this "
                                 "query outside BEGIN ... COMMIT (nothing was published)")

    def _run(self, query: str, statements: list[exp.Expression], params: Any, final: str):
        self._refuse_in_transaction(statements)
        if self.budget is not None:  # refuse before anything is published when the whole query is over budget
            plan = self.explain(query, params)
            if plan.estimated_cost > self.budget + 1e-9:
                raise BudgetExceededError(f"the query's estimated cost ${plan.estimated_cost:,.2f} exceeds the "
                                          f"budget ${self.budget:,.2f}; nothing was published")
        ctx = self._context(query)
        planner = Planner(ctx, TABLE_FUNCTIONS)
        result = None
        for i, statement in enumerate(statements):
            bound = self._bind(statement, params)
            if i:  # a statement of the query may have opened a transaction in a way the text check cannot see
                self._refuse_in_transaction([bound])
            self._check_binds(planner, bound)  # a typo fails here, before its operators publish or pay anything
            rewritten = self._rewrite(planner, bound).sql(DIALECT)
            last = i == len(statements) - 1
            try:
                if last and final == "sql":
                    result = self.con.sql(rewritten)
                else:
                    result = self.con.execute(rewritten)
            except duckdb.Error as err:
                raise _query_error(err) from None
            if is_tracked(bound):
                if last and final == "execute":
                    result = self._carry_roles_keeping(result, [bound])
                else:
                    self._carry_roles([bound])
        self.last_plan = QueryPlan(query, list(ctx.plans), list(ctx.reports))
        return result

    def _check_binds(self, planner: Planner, statement: exp.Expression) -> None:
        """Bind ``statement`` in DuckDB (EXPLAIN: planned, not run) with every human operator call replaced by NULL,
        so an unknown column, table or function elsewhere in it is reported before any HIT is published or paid.

        The placeholder is untyped, so it never rejects a valid query; a type error involving an operator's answer
        still surfaces only in the real run (its purchases are cached, so the corrected query pays nothing again).
        A statement with a table function is left to the real run (their output columns depend on their arguments).
        """
        if any(planner.is_table_function(n) for n in statement.walk()):
            return
        probe = statement.copy()
        for call in [n for n in probe.walk() if planner.is_human(n)]:
            call.replace(answer_column(call, exp.Null()))  # named as the real run names it
        try:
            self.con.execute("EXPLAIN " + probe.sql(DIALECT)).fetchall()  # fetched: DuckDB 2 blocks on open results
        except (duckdb.BinderException, duckdb.CatalogException) as err:
            # DuckDB's "LINE 1: ..." context would quote the probe (EXPLAIN, NULL placeholders), not the user's SQL
            raise _query_error(type(err)(str(err).split("\n\nLINE ")[0])) from None
        except duckdb.Error:
            return  # anything else (a statement EXPLAIN does not take, ...) is left to the real run

    def _rewrite(self, planner: Planner, statement: exp.Expression) -> exp.Expression:
        try:
            return planner.rewrite(statement)
        except duckdb.Error as err:
            raise _query_error(err) from None

    @staticmethod
    def _bind(statement: exp.Expression, params: Any) -> exp.Expression:
        """Substitute parameters into the tree as literals (crowd queries are planned with their values)."""
        if params is None:
            return statement
        statement = statement.copy()
        placeholders = list(statement.find_all(exp.Placeholder, exp.Parameter))
        if isinstance(params, Mapping):
            for node in placeholders:
                name = node.name
                if name not in params:
                    raise ArgumentError(f"no value given for parameter ${name}")
                node.replace(exp.convert(params[name]))
            return statement
        values = list(params)
        positional = [n for n in placeholders if not n.name or n.name == "?"]
        numbered = [n for n in placeholders if n not in positional]
        if len(positional) > len(values) or (positional and not numbered and len(positional) < len(values)):
            raise ArgumentError(f"the query has {len(positional)} parameters but {len(values)} values were given")
        for node, value in zip(positional, values):
            node.replace(exp.convert(value))
        for node in numbered:
            try:
                node.replace(exp.convert(values[int(node.name) - 1]))
            except (ValueError, IndexError):
                raise ArgumentError(f"no value given for parameter ${node.name}") from None
        return statement

    # ------------------------------------------------------------------------------------- data and roles
    def load_csv(self, table: str, path: str | Path, *, quasi_identifiers: Iterable[str] = (),
                 sensitive: Iterable[str] = (), core: Iterable[str] = (), ground_truth: str | None = None,
                 key: str | None = None, kinds: Mapping[str, str] | None = None, replace: bool = False,
                 **read_csv_options: Any) -> duckdb.DuckDBPyRelation:
        """Load a CSV file into ``table`` and declare its column roles (one transaction: all or nothing)."""
        path = Path(path)
        if not path.exists():
            raise ArgumentError(f"no such file: {path}")
        options = {k: exp.convert(v) for k, v in read_csv_options.items()}
        reader = exp.Anonymous(this="read_csv", expressions=[exp.convert(str(path))] + [
            exp.PropertyEQ(this=exp.to_identifier(k), expression=v) for k, v in options.items()])
        return self._load(table, exp.select("*").from_(reader), replace, quasi_identifiers, sensitive, core,
                          ground_truth, key, kinds)

    def load_frame(self, table: str, frame: pd.DataFrame, *, quasi_identifiers: Iterable[str] = (),
                   sensitive: Iterable[str] = (), core: Iterable[str] = (), ground_truth: str | None = None,
                   key: str | None = None, kinds: Mapping[str, str] | None = None,
                   replace: bool = False) -> duckdb.DuckDBPyRelation:
        """Load a pandas DataFrame (or Arrow table) into ``table`` and declare its column roles."""
        with registered(self.con, __crowd_frame=frame):
            return self._load(table, exp.select("*").from_("__crowd_frame"), replace, quasi_identifiers, sensitive,
                              core, ground_truth, key, kinds)

    def _load(self, table: str, select: exp.Select, replace: bool, *roles: Any) -> duckdb.DuckDBPyRelation:
        if not isinstance(table, str) or not table:
            raise ArgumentError("table name must be a non-empty string")
        target = exp.to_table(table, quoted=True)
        create = exp.Create(this=target, kind="TABLE", expression=select, replace=replace)
        try:
            with transaction(self.con):  # the table and its roles appear together, or neither does
                self.con.execute(create.sql(DIALECT))
                qi, sensitive, core, ground_truth, key, kinds = roles
                declare_roles(self.con, table, quasi_identifiers=qi, sensitive=sensitive, core=core,
                              ground_truth=ground_truth, key=key, kinds=kinds, transaction=False)
        except duckdb.Error as err:
            raise _query_error(err) from None
        return self.con.table(target.sql(DIALECT))

    def declare_roles(self, table: str, *, quasi_identifiers: Iterable[str] = (), sensitive: Iterable[str] = (),
                      core: Iterable[str] = (), ground_truth: str | None = None, key: str | None = None,
                      kinds: Mapping[str, str] | None = None) -> TableRoles:
        """Declare (replace) the column roles of an existing table; persisted in ``crowddb_columns``."""
        return declare_roles(self.con, table, quasi_identifiers=quasi_identifiers, sensitive=sensitive, core=core,
                             ground_truth=ground_truth, key=key, kinds=kinds)

    def roles(self, table: str) -> TableRoles:
        """The declared roles of ``table``."""
        return roles_of(self.con, resolve_table(self.con, table))

    def register_udf(self, definition: str | Path | HumanOperator | Mapping[str, Any]) -> HumanOperator:
        """Add a human operator from a TOML file or folder, a mapping, or a HumanOperator."""
        if isinstance(definition, HumanOperator):
            op = definition
        elif isinstance(definition, Mapping):
            op = HumanOperator.from_mapping(definition)
        else:
            path = Path(definition)
            before = set(self.registry.names())
            self.registry.add_path(path)
            added = sorted(set(self.registry.names()) - before) or self.registry.names()
            return self.registry.get(added[0])
        self.registry.add(op)
        return op

    @property
    def last_report(self) -> list[dict[str, Any]]:
        """Privacy reports of the table functions of the last query (also in ``crowddb_releases``)."""
        return list(self.last_plan.reports) if self.last_plan else []


# explain() runs (then rolls back) the statements that change the database's own contents, so the statements after
# them see their effect; anything else (COPY TO a file, SET, ATTACH, secrets, transaction control, a SELECT) is not run
_REHEARSED_KINDS = {"TABLE", "VIEW", "SCHEMA", "SEQUENCE", "INDEX", "MACRO", "FUNCTION", "TYPE"}


def _rehearsable(statement: exp.Expression) -> bool:
    """Does explain() run ``statement`` (in its rolled-back transaction) before estimating the next ones?"""
    if isinstance(statement, (exp.Create, exp.Drop)):
        return str(statement.args.get("kind") or "").upper() in _REHEARSED_KINDS
    return isinstance(statement, (exp.Insert, exp.Update, exp.Delete, exp.Alter))


@contextlib.contextmanager
def _rolled_back(con: duckdb.DuckDBPyConnection, active: bool):
    """A transaction around the block that is always rolled back (nothing when not ``active``)."""
    if not active:
        yield
        return
    con.execute("BEGIN TRANSACTION")
    try:
        yield
    finally:
        con.execute("ROLLBACK")


def _query_error(err: duckdb.Error) -> CrowdDBError:
    message = str(err)
    if isinstance(err, duckdb.BinderException) and "not found" in message.lower() and "column" in message.lower():
        return UnknownColumnError(message)
    return QueryError(message)


def connect(database: str | Path = ":memory:", *, platform: Platform | None = None, seed: int | None = None,
            **options: Any) -> CrowdDB:
    """Open a crowd database (a DuckDB file, or in memory). ``platform`` defaults to the embedded simulated crowd;
    ``seed`` makes every random choice (crowd, anonymization, noise) reproducible. Options: budget (US$ per query),
    udfs (extra folders of operator definitions), progress, read_only, config (DuckDB settings)."""
    return CrowdDB(database, platform=platform, seed=seed, **options)
