"""``crowddb.connect()``: a DuckDB connection whose SQL also understands crowd operators."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import math
import threading
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import Token, TokenType

from . import _sql
from ._duck import in_transaction, registered, rolled_back, transaction
from ._sql import DIALECT
from .crowd import Platform, SimulatedCrowd
from .errors import (
    ArgumentError,
    CrowdDBError,
    PrivacyBudgetError,
    PrivacyError,
    QueryError,
    SQLParseError,
    StatementRefusedError,
    UnknownColumnError,
    UnknownOperatorError,
    duckdb_error,
)
from .lineage import check_write, follow, is_tracked, prepare, writes_home
from .operators.context import OperatorContext
from .operators.human import NOT_ESTIMATED, OperatorPlan
from .operators.purchase import check_query_budget, collect_finished
from .operators.table_functions import TABLE_FUNCTIONS
from .planner import Planner, answer_column, parse
from .privacy import gate, identity
from .privacy.gate import Gated
from .replacement import Scans, call_in, caller_frame
from .store import (
    Store,
    TableRoles,
    composition,
    declare_roles,
    ensure_catalog,
    privacy,
    relation_kind,
    resolve_table,
    roles_of,
)
from .store.roles import declared_tables
from .udf import HumanOperator, Registry

__all__ = ["CrowdDB", "QueryPlan", "connect"]

# ------------------------------------------------------------------------------------ reading SQL text
# Which statements are crowd statements, and which move data or names whose roles must follow, is decided on the
# tokens of the text (sqlglot's DuckDB tokenizer), never by a pattern over the text: a name is one token however it
# is spelt (quotes, semicolons, comments, `--`, `'` inside a quoted identifier), and a literal or a comment is one
# token or none.
_DIALECT = Dialect.get_or_raise(DIALECT)
_TOKENIZERS = threading.local()  # a tokenizer keeps state while it runs: one per thread
#: tokens that are values, never names: an operator name inside one is text, not a call
_LITERAL_TOKENS = frozenset({TokenType.STRING, TokenType.NATIONAL_STRING, TokenType.RAW_STRING,
                             TokenType.NATIONAL_RAW_STRING, TokenType.HEREDOC_STRING, TokenType.BYTE_STRING,
                             TokenType.BIT_STRING, TokenType.HEX_STRING, TokenType.UNICODE_STRING, TokenType.NUMBER})
#: cheap and conservative: a statement that fills a table from a query or renames one holds these keywords in this
#: order, so text without them needs no tokens (a token's text is always a piece of the query's text, in order)
_TRACKED_WORDS = (("create", "table", "as"), ("insert", "select"), ("insert", "from"), ("insert", "table"),
                  ("insert", "by", "name"), ("alter", "rename"), ("update", "set"))
_SCANNED = "scanned_sql"  # a tracked tree's meta: its SQL over the Python objects it reads, registered
_SCAN_CACHE_CHARS = 20_000  # texts up to this long are remembered with their scan (plain SQL is often repeated)


_TABLE_FUNCTION_NAMES = frozenset(name.lower() for name in TABLE_FUNCTIONS)


@dataclasses.dataclass(frozen=True)
class _Scan:
    """What the tokens of a query's text say (before anything is parsed)."""

    crowd: bool            # a registered operator or table function is called: NAME (
    tracked: bool          # a statement may fill a table from a query or rename one (its roles must follow)
    tokenized: bool = True  # False: sqlglot's tokenizer could not read the text (then ``crowd``/``tracked`` are
    #                         what the raw text could hold)
    mentioned: tuple[str, ...] = ()  # registered names that appear in the raw text at all


_COMMANDS = frozenset(_DIALECT.tokenizer_class.COMMANDS)


def _tokenize(sql: str, depth: int = 0) -> list[Token]:
    """The tokens of ``sql``. sqlglot keeps the rest of a statement that starts with a command it does not parse
    (EXPLAIN, PREPARE, EXECUTE, ...) as one string token: that text is SQL DuckDB runs, so it is tokenized too."""
    tokenizer = getattr(_TOKENIZERS, "tokenizer", None)
    if tokenizer is None:
        tokenizer = _TOKENIZERS.tokenizer = _DIALECT.tokenizer_class(dialect=_DIALECT)
    tokens = tokenizer.tokenize(sql)
    if not any(t.token_type in _COMMANDS for t in tokens):
        return tokens
    out: list[Token] = []
    for before, token in zip([None, *tokens], tokens):
        if (depth < 8 and token.token_type == TokenType.STRING and before is not None
                and before.token_type in _COMMANDS):  # (a real literal there only reads as more tokens: fail closed)
            with contextlib.suppress(Exception):  # untokenizable: the rest of the command stays one token
                out.extend(_tokenize(token.text, depth + 1))
                continue
        out.append(token)
    return out


def _statements(tokens: list[Token]) -> list[list[Token]]:
    """Tokens split into statements at semicolons."""
    return [list(group) for semicolon, group in itertools.groupby(tokens, lambda t: t.token_type == TokenType.SEMICOLON)
            if not semicolon]


def _calls(tokens: list[Token], names: frozenset[str]) -> bool:
    """Is one of ``names`` called: a name token (quoted or not; not a literal) right before ``(``?"""
    return any(t.token_type not in _LITERAL_TOKENS and t.text.lower() in names and nxt.token_type == TokenType.L_PAREN
               for t, nxt in itertools.pairwise(tokens))


def _tracks(statement: list[Token]) -> bool:
    """Could this statement fill a table from a query (CREATE ... TABLE ... AS, INSERT ... SELECT / FROM / TABLE /
    BY NAME, UPDATE ... SET) or rename a table or column (ALTER ... RENAME)? By token types: keywords, not names that
    spell them."""
    types = [t.token_type for t in statement]

    def after(first: TokenType, *then: TokenType) -> bool:
        if first not in types:
            return False
        rest = types[types.index(first) + 1:]
        for want in then:
            if want not in rest:
                return False
            rest = rest[rest.index(want) + 1:]
        return True

    by_name = any(a.text.upper() == "BY" and b.text.upper() == "NAME" for a, b in itertools.pairwise(statement)
                  if a.token_type not in _LITERAL_TOKENS and a.token_type != TokenType.IDENTIFIER)
    return (after(TokenType.CREATE, TokenType.TABLE, TokenType.ALIAS)
            or (TokenType.INSERT in types and (by_name or any(after(TokenType.INSERT, t) for t in (
                TokenType.SELECT, TokenType.FROM, TokenType.TABLE))))
            or after(TokenType.ALTER, TokenType.RENAME) or after(TokenType.UPDATE, TokenType.SET))


def _in_order(text: str, words: tuple[str, ...]) -> bool:
    at = 0
    for word in words:
        at = text.find(word, at)
        if at < 0:
            return False
        at += len(word)
    return True


def _scan_text(query: str, names: frozenset[str]) -> _Scan:
    lower = query.lower()
    mentioned = tuple(sorted(n for n in names if n in lower))
    maybe_tracked = any(_in_order(lower, words) for words in _TRACKED_WORDS)
    if not mentioned and not maybe_tracked:
        return _Scan(False, False)
    try:
        tokens = _tokenize(query)
    except Exception:  # noqa: BLE001 - sqlglot's TokenError and whatever else its tokenizer trips on
        return _Scan(bool(mentioned), maybe_tracked, tokenized=False, mentioned=mentioned)
    crowd = bool(mentioned) and _calls(tokens, names)
    tracked = maybe_tracked and any(_tracks(s) for s in _statements(tokens))
    return _Scan(crowd, tracked, mentioned=mentioned)


_scan_cached = functools.lru_cache(maxsize=512)(_scan_text)


def _scan(query: str, names: frozenset[str]) -> _Scan:
    """The scan of ``query``'s text for crowd calls and role-carrying statements (remembered for short texts)."""
    return _scan_cached(query, names) if len(query) <= _SCAN_CACHE_CHARS else _scan_text(query, names)


def _tracked_command(statement: exp.Expression) -> bool:
    """A statement sqlglot could only keep as text (exp.Command) that may fill a table or rename one."""
    if not isinstance(statement, exp.Command):
        return False
    try:
        return any(_tracks(s) for s in _statements(_tokenize(statement.sql(DIALECT))))
    except Exception:  # noqa: BLE001
        return True


@dataclasses.dataclass
class QueryPlan:
    """What a query would post to the crowd, operator by operator (``CrowdDB.explain``)."""

    query: str
    operators: list[OperatorPlan]
    reports: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    steps: list[str] = dataclasses.field(default_factory=list)  # the planner's steps, in the order they run

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
        lines = [f"plan: {', '.join(f'{i}. {name}' for i, name in enumerate(self.steps, 1))}"] if self.steps else []
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
            if p.withheld:
                lines.append(f"    withheld: {_withheld_text(p.withheld)}")
        for r in self.reports:
            lines.append(f"{r.get('operator')}: epsilon={r.get('epsilon')}, delta={r.get('delta')}"
                         f" ({r.get('guarantee', '')})")
            for c in r.get("privacy_charge", ()):  # the epsilon budget: what the release would be charged
                lines.append(f"    charge on {c['table']}: " + (f"REFUSED: {c['refused']}" if "refused" in c else
                             f"up to epsilon={c['epsilon_max']:.6g}, delta={c['delta_max']:.6g} per {c['unit']} "
                             f"({c['units']} {c['unit']}s); left after it: epsilon={c['epsilon_left']}, "
                             f"delta={c['delta_left']}"))
        lines.append(f"total: {self.hits} HITs, {self.assignments} assignments, est. ${self.estimated_cost:,.2f}")
        return "\n".join(lines)

    def __repr__(self) -> str:  # the plan itself, as a DuckDB relation's repr is its rows
        return str(self)

    def _repr_html_(self) -> str:
        """A notebook's view: one table row per human operator, the table functions' guarantees, the total."""
        import html

        rows = [{"operator": f"{p.operator} ({p.kind})", "rows": p.input_rows, "items": p.items,
                 "cached": p.cached_items, "HITs": p.hits, "assignments": p.assignments,
                 "est. $": f"{p.estimated_cost:,.2f}", "k": p.k if p.k else "-", "anonymizer": p.anonymizer,
                 "NCP %": "-" if p.ncp is None else f"{p.ncp:.2f}",
                 "note": p.note, "withheld": _withheld_text(p.withheld)} for p in self.operators]
        parts = [f"<p><code>{html.escape(' '.join(self.query.split()))}</code></p>"]
        if self.steps:
            parts.append(f"<p>plan: {html.escape(', '.join(f'{i}. {s}' for i, s in enumerate(self.steps, 1)))}</p>")
        if rows:
            parts.append(pd.DataFrame(rows).to_html(index=False, escape=True))
        for r in self.reports:
            parts.append(f"<p>{html.escape(str(r.get('operator')))}: epsilon={html.escape(str(r.get('epsilon')))}, "
                         f"delta={html.escape(str(r.get('delta')))} ({html.escape(str(r.get('guarantee', '')))})</p>")
        parts.append(f"<p>total: {self.hits} HITs, {self.assignments} assignments, "
                     f"est. ${self.estimated_cost:,.2f}</p>")
        return "".join(parts)


def _withheld_text(withheld: Mapping[str, str]) -> str:
    """The columns lineage keeps out of the HITs, with why; columns left out only for not being core are counted."""
    not_core = [c for c, r in withheld.items() if r.endswith("is not declared core")]
    shown = [f"{c} ({r})" for c, r in withheld.items() if c not in not_core]
    if not_core:
        shown.append(f"{len(not_core)} column{'s' if len(not_core) > 1 else ''} not declared core "
                     f"({', '.join(not_core)})")
    return "; ".join(shown)


#: a crowd query's result reads its answers from temp tables (db.sql() returns a lazy relation that reads them each
#: time it runs): those of the last few crowd queries are kept, older ones dropped (an older relation then fails with
#: "table ... does not exist"); explain()'s and a failed query's are dropped at once
#: the ks of the trade-off the requester page plots (``CrowdDB.tradeoff``)
TRADEOFF_KS = (2, 5, 10, 20, 50)
_KEPT_RELATIONS = 4


class CrowdDB:
    """A DuckDB connection plus a crowd: plain SQL passes through untouched, crowd operators are planned.

    Everything DuckDB's connection offers is reachable through this object (attribute access is delegated)."""

    def __init__(self, database: str | Path | duckdb.DuckDBPyConnection = ":memory:", *, platform: Platform | None = None,
                 seed: int | None = None, budget: float | None = None, udfs: Iterable[str | Path] = (),
                 progress: bool = True, read_only: bool = False, config: Mapping[str, Any] | None = None) -> None:
        seed, budget, udfs = _check_options(database, platform, seed, budget, udfs, progress, read_only, config)
        # a connection the caller opened is wrapped as it is (its attached databases, settings and registered objects)
        # and left open to its owner by close(); otherwise crowddb opens (and closes) its own
        self._owns_connection = not isinstance(database, duckdb.DuckDBPyConnection)
        created = self._owns_connection and not Path(str(database)).exists()  # issue 24: made 0600 below
        if self._owns_connection:
            try:
                self.con = duckdb.connect(str(database), read_only=read_only, config=dict(config or {}))
            except duckdb.Error as err:  # a missing folder, a file another process holds, a bad setting
                raise CrowdDBError(f"cannot open database {str(database)!r}: {err}") from None
            self.database = str(database)
        else:
            self.con = database
            self.database = _database_path(database)
        try:
            if not read_only:
                ensure_catalog(self.con)
                if created:  # issue 24: the new file and its .wal 0600, before any row of the caller's is in them
                    privacy.private_files(self.database)
                Store(self.con).reap_interrupted()  # runs of dead processes are marked: crowddb_runs says so at once
            self.registry = Registry(udfs)
            self.platform = platform if platform is not None else SimulatedCrowd(seed=seed)
            bind = getattr(self.platform, "bind", None)
            if callable(bind):  # a platform keeping state beside the database (the web crowd's marketplace file)
                bind(None if self.database == ":memory:" else self.database)
            if not read_only:
                self._record_workers()
                self._collect_finished()
        except BaseException:
            if self._owns_connection:
                self.con.close()
            raise
        self.seed, self.budget, self.progress = seed, budget, progress
        # is anything protected (roles, ledger, budget)? True stays True for the session; otherwise asked again when
        # a statement may have changed it (see ``_gate``)
        self._protected: bool | None = None
        self.last_plan: QueryPlan | None = None
        # the answers of the last crowd relations db.sql() returned, and the Python objects they read
        self._kept_temps: list[tuple[Planner, Scans]] = []
        self._last_scan: tuple[str, frozenset[str], _Scan] | None = None
        self._scan_names: tuple[frozenset[str] | None, frozenset[str]] = (None, frozenset())

    # --------------------------------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Close the DuckDB connection (idempotent). A connection the caller handed to connect() stays open: crowddb
        only drops what it made there for its queries' results (temp tables, registered Python objects)."""
        con = self.__dict__.get("con")
        if con is None:
            return
        if self.__dict__.get("_owns_connection", True):
            con.close()
        else:
            with contextlib.suppress(duckdb.Error):  # the owner may have closed it already
                for kept in self.__dict__.get("_kept_temps", []):
                    _drop_answers(*kept)
        self.__dict__["_kept_temps"] = []
        self.__dict__["con"] = None

    def __repr__(self) -> str:
        if self.__dict__.get("con") is None:
            return "<CrowdDB (closed)>"
        tables = sorted(declared_tables(self.con))
        return (f"<CrowdDB {self.database!r} (platform {self.platform.name}, seed {self.seed}, "
                f"{'no budget' if self.budget is None else f'budget ${self.budget:,.2f}'}); "
                f"tables with roles: {', '.join(tables) if tables else 'none'}; "
                f"operators: {', '.join(sorted(self.registry.name_set()))}>")

    def _repr_html_(self) -> str:
        """A notebook's view: the repr and what each crowd run of this database bought (``crowddb_runs``)."""
        import html

        if self.__dict__.get("con") is None:
            return html.escape(repr(self))
        runs = Store(self.con).bought_per_operator()
        return f"<p>{html.escape(repr(self))}</p>" + (runs.to_html(index=False) if len(runs) else "<p>no crowd run yet</p>")

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

    def payouts(self, run_id: int) -> pd.DataFrame:
        """What each worker was paid in one run: worker_id, marketplace_id (their id on the marketplace that
        recruited them, if any), assignments, reward; as SQL: ``SELECT * FROM crowddb_payouts WHERE run_id = N``."""
        if isinstance(run_id, bool) or not isinstance(run_id, int):
            raise ArgumentError(f"payouts(): run_id must be an integer, got {run_id!r}")
        return Store(self.con).payouts(run_id)

    def _collect_finished(self) -> None:
        """HITs people finished while no session was open are put on record now (the reruns of their queries would
        collect them too: a failure here only leaves them to the reruns)."""
        try:
            collect_finished(Store(self.con), self.platform)
        except Exception as err:  # noqa: BLE001 - nothing is lost: the HITs stay published, a rerun collects them
            warnings.warn(f"crowddb: HITs people finished could not be collected now ({type(err).__name__}: {err}); "
                          "rerunning their queries collects them", stacklevel=3)

    def _record_workers(self) -> None:
        Store(self.con).record_workers(self.platform.workers(), self.platform.name)

    # ------------------------------------------------------------------------------------------- queries
    def _scan(self, query: str) -> _Scan:
        """What the tokens of ``query`` say: does it call a crowd operator, may it carry roles (see ``_scan_text``)."""
        registered = self.registry.name_set()
        if self._scan_names[0] is not registered:  # a new operator was registered since the last query
            self._scan_names = (registered, registered | _TABLE_FUNCTION_NAMES)
        names = self._scan_names[1]
        last = self._last_scan
        if last is not None and last[0] is query and last[1] == names:
            return last[2]
        scan = _scan(query, names)
        self._last_scan = (query, names, scan)
        return scan

    def sql(self, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None, *,
            timeout: float | None = None):
        """Run SQL; returns a DuckDB relation for a query (None for a statement), like ``duckdb.sql``.
        ``timeout`` (seconds): how long a crowd query waits for people's answers (see ``AnswersOutstandingError``)."""
        timeout = _timeout(timeout)
        _refuse_ledger_writes(query)
        statements = self._crowd_statements(query)
        frame = caller_frame()
        if statements is None:
            gated = self._gate(query)
            if gated is not None:
                return self._run_gated(gated, params, frame, final="sql")
            with self._unknown_functions():  # (params=None costs DuckDB a prepared statement: passed only if given)
                return call_in(frame, self.con.sql, query, **({} if params is None else {"params": params}))
        return self._run(query, statements, params, final="sql", frame=frame, timeout=timeout)

    def execute(self, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None, *,
                timeout: float | None = None):
        """Run SQL like ``DuckDBPyConnection.execute``: returns the connection, ready to fetch (``timeout``: as
        ``sql``)."""
        timeout = _timeout(timeout)
        _refuse_ledger_writes(query)
        statements = self._crowd_statements(query)
        frame = caller_frame()
        if statements is None:
            gated = self._gate(query)
            if gated is not None:
                return self._run_gated(gated, params, frame, final="execute")
            with self._unknown_functions():
                if params is None:
                    return call_in(frame, self.con.execute, query)
                return call_in(frame, self.con.execute, query, parameters=params)
        return self._run(query, statements, params, final="execute", frame=frame, timeout=timeout)

    # ------------------------------------------------------------------------------------- the statement gate
    def _gate(self, query: str) -> list[Gated] | None:
        """DuckDB's classification of ``query``'s statements while anything is protected (a declared role, a
        k-anonymity release, a budget act), with their actions (``crowddb.privacy.gate``); None when nothing is,
        and then the text goes to DuckDB as it is."""
        mentions_catalog = "crowddb_" in query.lower()  # a statement may declare (or delete) roles in SQL
        if self._protected is None or mentions_catalog:
            self._protected = Store(self.con).anything_protected()
        protected = self._protected
        if mentions_catalog:
            self._protected = None  # asked again after it ran
        if not protected:
            return None
        with self._unknown_functions():
            return gate.classify(self.con, query)

    def _run_gated(self, gated: list[Gated], params: Any, frame: Any, final: str):
        """Run plain SQL statement by statement, as DuckDB parsed it: a refused kind stops the whole text before
        anything runs, a statement that writes stored columns is read first (its refusals too) and its roles are
        carried after it ran. ``params`` go to the last statement, as DuckDB does with a text."""
        for g in gated:
            if g.action == gate.REFUSE:
                raise StatementRefusedError(f"crowddb refuses this {g.kind.replace('_', ' ')} statement while roles, "
                                            f"a privacy ledger "
                                            f"or a budget exist: {g.reason}. Nothing was run")
        scans = Scans(self.con)  # Python objects a tracked statement reads: registered, so roles can follow them
        try:
            trees = [self._tracked_tree(g, params if i == len(gated) - 1 else None, frame, scans)
                     if g.action == gate.TRACK else None for i, g in enumerate(gated)]
            return self._run_trees(gated, trees, params, frame, final)
        finally:
            scans.drop()

    def _run_trees(self, gated: list[Gated], trees: list[exp.Expression | None], params: Any, frame: Any,
                   final: str):
        """``_run_gated`` once the tracked statements are read (``trees``)."""
        result = kept = None
        for i, (g, tree) in enumerate(zip(gated, trees)):
            last = i == len(gated) - 1
            values = params if last else None
            # a statement that writes stored columns and the roles it carries are one transaction: if the roles
            # cannot follow, what it wrote is rolled back (the caller's own transaction: left to its ROLLBACK)
            atomic = tree is not None and writes_home(self.con, tree)
            with transaction(self.con) if atomic else contextlib.nullcontext():
                # a statement reading a Python object runs as read, over the object's registered view: roles
                # are then carried from the object DuckDB read (no frame of ours holds the caller's names)
                statement = tree.meta[_SCANNED] if tree is not None and _SCANNED in tree.meta else g.statement
                with self._unknown_functions():
                    if last and final == "sql" and tree is None:
                        result = call_in(frame, self.con.sql, statement,
                                         **({} if values is None else {"params": values}))
                    elif values is None:
                        result = call_in(frame, self.con.execute, statement)
                    else:
                        result = call_in(frame, self.con.execute, statement, parameters=values)
                    if not last:  # DuckDB 2 keeps a connection's result open until it is read
                        result.fetchall()
                if tree is not None:
                    kept = (result.fetchall(), result.description) if last else None
                    self._carry_roles([tree])
            if kept is not None:  # after the transaction: its COMMIT would have replaced a result replayed before
                result = self._replay(*kept, relation=final == "sql")
        return result

    def _tracked_tree(self, g: Gated, params: Any, frame: Any, scans: Scans) -> exp.Expression:
        """The statement of a TRACK kind as crowddb reads it, checked before anything runs: one statement sqlglot
        understands (else refused: its roles could not follow it) that does not break a ledger. A Python object it
        reads is registered (``scans``) and the tree pointed at it; the SQL to run is then kept in its meta."""
        try:
            trees = parse(g.text)
        except SQLParseError as err:
            trees, reason = [], str(err)
        else:
            reason = "sqlglot reads it differently"
        if len(trees) != 1 or isinstance(trees[0], exp.Command):
            raise SQLParseError(f"crowddb cannot read this {g.kind} statement ({reason}), and it may write stored "
                                "columns: crowddb cannot carry the roles of protected tables through a statement it "
                                "cannot read, so nothing was run. Rewrite it in SQL crowddb reads, or run it through "
                                "db.con (plain DuckDB) and then declare the roles of what it wrote with "
                                "db.declare_roles(...)")
        tree = trees[0]
        views = len(scans.views)
        tree = scans.bind([tree], frame)[0]
        scanned = tree.sql(DIALECT) if len(scans.views) > views else None
        tree = self._bind(tree, params)  # (the roles of a statement are computed with its values)
        check_write(self.con, tree)
        tree = prepare(self.con, tree)
        if scanned is not None:
            tree.meta[_SCANNED] = scanned
        return tree

    def _carry_roles_keeping(self, result: Any, statements: list[exp.Expression],
                             temp_roles: Mapping[str, Any] | None = None, relation: bool = False):
        """Carry the roles of ``statements`` and keep ``result`` (their ``execute`` result) pending for the caller:
        the statements roles need would replace it (DuckDB 2), so it is fetched first and replayed after (as a
        relation with ``relation``, what ``sql()`` returns)."""
        rows, described = result.fetchall(), result.description
        self._carry_roles(statements, temp_roles)
        return self._replay(rows, described, relation)

    def _replay(self, rows: list[tuple], described: Any, relation: bool = False):
        """Make ``rows`` (a statement's result, fetched before roles were carried with more statements) the
        connection's pending result again, with the same column names and types (``relation``: a relation over
        them)."""
        if not described:
            return None if relation else self.con
        types = [exp.DataType.build(str(d[1]), dialect=DIALECT) for d in described]
        names = [exp.to_identifier(d[0], quoted=True) for d in described]
        if not rows:
            select = exp.select(*(exp.alias_(exp.cast(exp.Null(), t), n) for t, n in zip(types, names))).where("false")
        else:
            values = exp.values([tuple(exp.cast(exp.convert(v), t) for v, t in zip(row, types)) for row in rows],
                                alias="t", columns=names)
            select = exp.select("*").from_(values)
        return self.con.sql(select.sql(DIALECT)) if relation else self.con.execute(select.sql(DIALECT))

    def _roles_declared(self) -> bool:
        """Is any role declared in crowddb_columns (is there anything a copy could leak)?"""
        return bool(declared_tables(self.con))

    def _refuse_unreadable(self, reason: str) -> None:
        """Refuse (before DuckDB runs anything) a statement that may create, fill or rename a table but that crowddb
        cannot read, while roles are declared: the roles of protected tables could not follow it."""
        if self._roles_declared():
            raise SQLParseError(
                f"crowddb cannot read this SQL ({reason}), and it may create, fill or rename a table: crowddb cannot "
                "carry the roles of protected tables through a statement it cannot read, so nothing was run. Rewrite "
                "it in SQL crowddb reads, or run it through db.con (plain DuckDB) and then declare the roles of the "
                "table it made yourself with db.declare_roles(...)")

    def _refuse_unreadable_commands(self, statements: Iterable[exp.Expression]) -> None:
        """``_refuse_unreadable`` for a statement sqlglot could only keep as text (exp.Command)."""
        for statement in statements:
            if _tracked_command(statement):
                text = " ".join(statement.sql(DIALECT).split())
                self._refuse_unreadable(f"sqlglot does not understand {text[:80]!r}" + ("..." if len(text) > 80 else ""))

    def _carry_roles(self, statements: Iterable[exp.Expression], temp_roles: Mapping[str, Any] | None = None) -> None:
        """Roles follow data and names of ``statements`` (which have run; ``temp_roles``: the roles of the temp
        tables a crowd statement was rewritten to read)."""
        for statement in statements:
            follow(self.con, statement, temp_roles)

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
        scans = Scans(self.con)
        try:
            return self._explain(query, params, scans.bind(self._crowd_statements(query) or [], caller_frame(),
                                                           _TABLE_FUNCTION_NAMES))
        finally:
            scans.drop()

    def tradeoff(self, query: str, ks: Iterable[int] = TRADEOFF_KS, params: Any = None) -> pd.DataFrame:
        """The k-anonymity trade-off of a crowd query: ``explain()`` of it with every human operator's k set to each
        of ``ks`` (nothing is published, paid or written). One row per (k, operator call): k, operator, ncp (the
        information the generalization loses, kanon-crowd-db's NCP), accuracy_lower / accuracy_upper (the crowd
        accuracy bounds explain() reports), hits, estimated_cost, refused (why this k cannot be had: the guard's
        word, or fewer rows than k; the figures are then missing)."""
        ks = list(ks)
        if not ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 2 for k in ks):
            raise ArgumentError(f"tradeoff(): ks must be integers of at least 2, got {ks!r}")
        statements = self._crowd_statements(query) or []
        if not any(self._asks_humans(s) for s in statements):
            raise ArgumentError("tradeoff(): the query calls no human operator, so it has no k to trade off")
        scans = Scans(self.con)
        try:
            return self._tradeoff(query, scans.bind(statements, caller_frame(), _TABLE_FUNCTION_NAMES), params, ks)
        finally:
            scans.drop()

    def _tradeoff(self, query: str, statements: list[exp.Expression], params: Any, ks: list[int]) -> pd.DataFrame:
        """``tradeoff`` over statements already parsed, their Python objects registered."""
        rows = []
        for k in ks:
            try:  # (explain rewrites its trees: a copy per k)
                plan = self._explain(query, params, [_with_k(s.copy(), k, self.registry) for s in statements])
            except (ArgumentError, PrivacyError) as err:  # this k cannot be had (fewer rows than k, the guard)
                rows.append({"k": k, "operator": None, "ncp": None, "accuracy_lower": None, "accuracy_upper": None,
                             "hits": None, "estimated_cost": None, "refused": str(err)})
                continue
            for op in plan.operators:
                refused = op.note.split("would be refused: ", 1)[1] if "would be refused: " in op.note else None
                rows.append({"k": k, "operator": op.operator, "ncp": op.ncp, "accuracy_lower": op.accuracy_lower,
                             "accuracy_upper": op.accuracy_upper, "hits": op.hits,
                             "estimated_cost": op.estimated_cost, "refused": refused})
        return pd.DataFrame(rows, columns=["k", "operator", "ncp", "accuracy_lower", "accuracy_upper", "hits",
                                           "estimated_cost", "refused"])

    def _show_tradeoff(self, query: str, statements: list[exp.Expression], params: Any) -> None:
        """A platform with a requester page (the web crowd) shows the query's k trade-off there before it runs."""
        show = getattr(self.platform, "show_tradeoff", None)
        if not callable(show) or not any(self._asks_humans(s) for s in statements):
            return
        try:
            frame = self._tradeoff(query, statements, params, list(TRADEOFF_KS))
        except Exception:  # noqa: BLE001 - the panel is an aid: a query it cannot estimate runs without it
            return
        show(query, frame)

    def _refuse_crowd_views(self, statements: Iterable[exp.Expression]) -> None:
        """A view over a crowd operator is refused before anything runs: DuckDB would store the view over the temp
        tables its answers are joined from, which go with the query (and the file's session), so the view would
        break later; a table made from the query keeps its answers, and a rerun of the query is served from them."""
        for statement in statements:
            if (isinstance(statement, exp.Create) and str(statement.args.get("kind") or "").upper() == "VIEW"
                    and any(isinstance(n, exp.Anonymous) and (n.name in self.registry
                                                              or n.name.lower() in _TABLE_FUNCTION_NAMES)
                            for n in statement.walk())):
                name = statement.this.this if isinstance(statement.this, exp.Schema) else statement.this
                text = " ".join((statement.expression.sql(DIALECT) if statement.expression else "").split())
                raise ArgumentError(
                    f"CREATE VIEW {name.sql(DIALECT)}: a view over a crowd operator or table function would read "
                    "answers crowddb keeps only while this query's result is read, and break after it (or after the "
                    f"file is reopened). Store them: CREATE TABLE {name.sql(DIALECT)} AS {text[:60]}"
                    + ("..." if len(text) > 60 else "") + " (a rerun of the query is served from the answers on "
                    "record, at no cost). Nothing was run")

    def _asks_humans(self, statement: exp.Expression) -> bool:
        """Whether ``statement`` calls a human operator (not only table functions)."""
        return any(isinstance(n, exp.Anonymous) and n.name in self.registry for n in statement.walk())

    def _explain(self, query: str, params: Any, statements: list[exp.Expression]) -> QueryPlan:
        self._refuse_unreadable_commands(statements)  # what the run would refuse
        self._refuse_crowd_views(statements)
        ctx = self._context(query)
        planner = Planner(ctx, TABLE_FUNCTIONS, estimating=True)
        rehearse = len(statements) > 1 and not in_transaction(self.con)
        with rolled_back(self.con, rehearse):
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
                    self._rehearse(rewritten, bound, planner.temp_roles)
        planner.drop_temps()
        plan = QueryPlan(query, list(ctx.plans), list(ctx.reports), list(planner.steps))
        self.last_plan = plan
        return plan

    def _rehearse(self, rewritten: exp.Expression, bound: exp.Expression,
                  temp_roles: Mapping[str, Any] | None = None) -> None:
        """Run a statement of a multi-statement query inside explain()'s rolled-back transaction, so the statements
        after it are bound and estimated against the tables it creates or fills (crowd answers are NULL there)."""
        try:
            self.con.execute(rewritten.sql(DIALECT)).fetchall()
        except duckdb.Error as err:
            raise _query_error(err) from None
        if is_tracked(bound):
            self._carry_roles([bound], temp_roles)

    def _crowd_statements(self, query: str) -> list[exp.Expression] | None:
        """Parsed statements if ``query`` uses a crowd operator, else None (DuckDB gets the text untouched)."""
        if not isinstance(query, str):
            raise ArgumentError(f"SQL must be a string, got {type(query).__name__}")
        if self.con is None:
            raise CrowdDBError("the connection is closed")
        scan = self._scan(query)
        if not scan.tokenized:  # sqlglot's tokenizer cannot read the text: the parser is the last chance
            try:
                statements = parse(query)
            except SQLParseError as err:
                if scan.mentioned:  # fail closed: it might call a crowd operator DuckDB would not plan
                    raise SQLParseError(f"crowddb cannot read this SQL ({err}), and it mentions "
                                        f"{', '.join(scan.mentioned)}: it is not run, so no crowd operator or table "
                                        "function in it can run unplanned") from None
                return None
        elif not scan.crowd:
            return None
        else:
            statements = parse(query)
        planner = Planner(self._context(query), TABLE_FUNCTIONS)
        if not any(planner.has_crowd(s) for s in statements):
            return None
        return statements

    def _context(self, query: str) -> OperatorContext:
        return OperatorContext(self.con, self.platform, self.registry, seed=self.seed, query=query,
                               progress=self.progress, budget=self.budget)

    def _refuse_in_transaction(self, statements: list[exp.Expression]) -> None:
        """Crowd HITs are paid outside the database: a ROLLBACK could not take them back, only forget that they were
        bought (and buy them again). So human operators do not run inside an explicit transaction, whether the caller
        opened it before the query or the query's own text opens it (BEGIN ...; SELECT getposition(*) ...)."""
        human = [self._asks_humans(s) for s in statements]
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

    def _run(self, query: str, statements: list[exp.Expression], params: Any, final: str, frame: Any,
             timeout: float | None = None):
        scans = Scans(self.con)
        try:
            return self._run_scanned(query, scans.bind(statements, frame, _TABLE_FUNCTION_NAMES), params, final,
                                     scans, timeout)
        except BaseException:
            scans.drop()
            raise
        finally:
            self._protected = self._protected or None  # its releases and charges may have made something protected

    def _run_scanned(self, query: str, statements: list[exp.Expression], params: Any, final: str, scans: Scans,
                     timeout: float | None = None):
        self._refuse_in_transaction(statements)
        self._refuse_unreadable_commands(statements)
        self._refuse_crowd_views(statements)
        binder = Planner(self._context(query), TABLE_FUNCTIONS)
        for statement in statements:  # every call of every statement is bound before the first one pays
            binder.validate(self._bind(statement, params))
        if self.budget is not None:  # refuse before anything is published when the whole query is over budget
            plan = self._explain(query, params, [s.copy() for s in statements])  # explain rewrites its trees
            check_query_budget(plan.estimated_cost, self.budget)
        while len(self._kept_temps) >= _KEPT_RELATIONS:  # before the query: dropping after would replace its result
            _drop_answers(*self._kept_temps.pop(0))
        self._show_tradeoff(query, statements, params)
        ctx = self._context(query)
        ctx.timeout = timeout
        planner = Planner(ctx, TABLE_FUNCTIONS)
        try:
            result = self._execute(statements, params, final, planner)
        except BaseException:
            planner.drop_temps()
            raise
        self.last_plan = QueryPlan(query, list(ctx.plans), list(ctx.reports), list(planner.steps))
        # the result reads the answers' temp tables (a relation each time it runs; a pending execute() result until it
        # is fetched, and dropping them now would replace it): they are kept for a few queries
        self._kept_temps.append((planner, scans))
        return result

    def _execute(self, statements: list[exp.Expression], params: Any, final: str, planner: Planner):
        """Run the statements of a crowd query in order; returns the last one's result."""
        result = None
        for i, statement in enumerate(statements):
            bound = self._bind(statement, params)
            if i:  # a statement of the query may have opened a transaction in a way the text check cannot see
                self._refuse_in_transaction([bound])
            self._check_binds(planner, bound)  # a typo fails here, before its operators publish or pay anything
            tracked = is_tracked(bound)
            if tracked:
                check_write(self.con, bound)
            rewritten_tree = self._rewrite(planner, bound)
            if tracked:  # what its names read before it runs (a renamed table; its operators' answers)
                prepare(self.con, rewritten_tree)
            rewritten = rewritten_tree.sql(DIALECT)
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
                    result = self._carry_roles_keeping(result, [bound], planner.temp_roles)
                else:
                    self._carry_roles([bound], planner.temp_roles)
        return result

    def _check_binds(self, planner: Planner, statement: exp.Expression) -> None:
        """Bind ``statement`` in DuckDB (EXPLAIN: planned, not run) with every human operator call replaced by NULL,
        so an unknown column, table or function elsewhere in it is reported before any HIT is published or paid.

        The placeholder is untyped, so it never rejects a valid query; a type error involving an operator's answer
        still surfaces only in the real run (its purchases are cached, so the corrected query pays nothing again).
        A statement with a table function is left to the real run (their output columns depend on their arguments).
        """
        planner.validate(statement)
        if any(planner.is_table_function(n) for n in statement.walk()):
            return
        probe = statement.copy()
        for call in [n for n in probe.walk() if planner.is_human(n)]:
            # named as the real run names it; a scalar subquery, not a literal: ORDER BY NULL is refused by DuckDB
            call.replace(answer_column(call, exp.Subquery(this=exp.select(exp.Null()))))
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
                node.replace(_param(params[name]))
            return statement
        values = list(params)
        positional = [n for n in placeholders if not n.name or n.name == "?"]
        numbered = [n for n in placeholders if n not in positional]
        if len(positional) > len(values) or (positional and not numbered and len(positional) < len(values)):
            raise ArgumentError(f"the query has {len(positional)} parameters but {len(values)} values were given")
        for node, value in zip(positional, values):
            node.replace(_param(value))
        for node in numbered:
            try:
                node.replace(_param(values[int(node.name) - 1]))
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
        if path.is_dir():
            raise ArgumentError(f"load_csv: {path} is a folder; pass the path of one CSV file")
        size = path.stat().st_size
        if size == 0 or (size < 4096 and not path.read_bytes().strip()):
            raise ArgumentError(f"load_csv: the CSV file {path} is empty (no header, no rows); nothing was loaded. "
                                "Check the path, or write at least a header line")
        options = {k: exp.convert(v) for k, v in read_csv_options.items()}
        reader = exp.Anonymous(this="read_csv", expressions=[exp.convert(str(path))] + [
            exp.PropertyEQ(this=exp.to_identifier(k), expression=v) for k, v in options.items()])
        self._refuse_repeated_header(reader)
        return self._load(table, exp.select("*").from_(reader), replace, quasi_identifiers, sensitive, core,
                          ground_truth, key, kinds)

    def _refuse_repeated_header(self, reader: exp.Anonymous) -> None:
        """A header that names a column twice (``id,age,age,job``) would load the second copy as ``age_1``, a column
        no role names: a raw copy of a quasi-identifier. Refused before anything is created."""
        try:
            names = [d[0] for d in self.con.execute(exp.select("*").from_(reader.copy()).limit(0).sql(DIALECT))
                     .description]
            raw = reader.copy()
            raw.set("expressions", [*raw.expressions, exp.PropertyEQ(this=exp.to_identifier("header"),
                                                                      expression=exp.false()),
                                    exp.PropertyEQ(this=exp.to_identifier("all_varchar"), expression=exp.true())])
            first = self.con.execute(exp.select("*").from_(raw).limit(1).sql(DIALECT)).fetchall()
        except duckdb.Error:
            return  # DuckDB reports an unreadable file when it loads it
        if not first or len(first[0]) != len(names):
            return
        texts = [str(v).strip() if v is not None else "" for v in first[0]]
        header = all(n.lower() == t.lower() or n.lower().startswith(t.lower() + "_") for n, t in zip(names, texts))
        if not header or len({t.lower() for t in texts}) == len(texts):
            return  # no header (the first line is data), or a header without repeats
        seen: dict[str, str] = {}
        for text in texts:
            if text.lower() in seen:
                raise ArgumentError(f"the CSV header names column {text!r} twice; DuckDB would load the second copy "
                                    "under another name, with none of the roles declared for the first: rename or "
                                    "drop the repeated column in the file (or pass names := [...])")
            seen[text.lower()] = text

    def load_frame(self, table: str, frame: pd.DataFrame, *, quasi_identifiers: Iterable[str] = (),
                   sensitive: Iterable[str] = (), core: Iterable[str] = (), ground_truth: str | None = None,
                   key: str | None = None, kinds: Mapping[str, str] | None = None,
                   replace: bool = False) -> duckdb.DuckDBPyRelation:
        """Load a pandas DataFrame (or Arrow table or record batch, polars DataFrame, DuckDB relation) into
        ``table`` and declare its column roles."""
        _check_frame(frame)
        view = f"__crowd_frame_{next(_FRAMES)}"
        try:
            with registered(self.con, **{view: frame}):
                return self._load(table, _sql.select_all(view), replace, quasi_identifiers, sensitive, core,
                                  ground_truth, key, kinds)
        except CrowdDBError:
            raise
        except duckdb.Error as err:  # registering a frame DuckDB cannot scan
            raise ArgumentError(f"load_frame: DuckDB cannot read this {type(frame).__name__}: {err}") from None

    def _load(self, table: str, select: exp.Select, replace: bool, *roles: Any) -> duckdb.DuckDBPyRelation:
        if not isinstance(table, str) or not table:
            raise ArgumentError("table name must be a non-empty string")
        # a name, never parsed ("a.b" is one table, "x; checkpoint" runs nothing), in the current database and schema,
        # where an unqualified CREATE TABLE makes it, spelt out: what its roles belong to is exactly this table
        database, schema = self.con.execute("SELECT current_database(), current_schema()").fetchall()[0]
        made = identity.TableId(database, schema, table, home=database.lower() == identity.home(self.con).lower())
        create = exp.Create(this=made.ref(), kind="TABLE", expression=select, replace=replace)
        try:
            with transaction(self.con):  # the table and its roles appear together, or neither does
                self.con.execute(create.sql(DIALECT))
                qi, sensitive, core, ground_truth, key, kinds = roles
                declare_roles(self.con, made.key, quasi_identifiers=qi, sensitive=sensitive, core=core,
                              ground_truth=ground_truth, key=key, kinds=kinds, transaction=False)
            self._protected = self._protected or None  # roles may have been declared
        except duckdb.Error as err:
            raise _query_error(err) from None
        return self.con.sql(exp.select("*").from_(made.ref()).sql(DIALECT))

    def declare_roles(self, table: str, *, quasi_identifiers: Iterable[str] = (), sensitive: Iterable[str] = (),
                      core: Iterable[str] = (), ground_truth: str | None = None, key: str | None = None,
                      kinds: Mapping[str, str] | None = None) -> TableRoles:
        """Declare (replace) the column roles of an existing table; persisted in ``crowddb_columns``."""
        self._protected = True
        return declare_roles(self.con, resolve_table(self.con, table), quasi_identifiers=quasi_identifiers,
                             sensitive=sensitive, core=core,
                             ground_truth=ground_truth, key=key, kinds=kinds)

    def roles(self, table: str) -> TableRoles:
        """The declared roles of ``table``."""
        return roles_of(self.con, resolve_table(self.con, table))

    # ------------------------------------------------------------------------------------------ epsilon budget
    def set_privacy_budget(self, table: str, *, epsilon: float, delta: float = 0.0, unit: str = "source",
                           composition: str = "sequential") -> None:
        """Set ``table``'s differential-privacy budget per protected ``unit`` (each source may spend ``epsilon`` and
        ``delta``; ``composition`` 'sequential' sums them, 'zcdp' sums rho and converts at ``delta``). A logged act
        of the privacy ledger, persisted in the database file; what was spent before still counts (see
        ``reset_privacy_budget``). SQL: ``SELECT * FROM PRIVACY_BUDGET(table, epsilon := ..., ...)``."""
        self._protected = True
        Store(self.con).set_privacy_budget(self._budget_table(table), epsilon=epsilon, delta=delta, unit=unit,
                                           composition=composition)

    def reset_privacy_budget(self, table: str, *, unit: str = "source") -> None:
        """Forget what ``table``'s releases spent (a logged act: the charges stay on record and in the report).
        SQL: ``SELECT * FROM PRIVACY_BUDGET(table, reset := true)``."""
        Store(self.con).reset_privacy_budget(self._budget_table(table), unit)

    def privacy_report(self, table: str) -> pd.DataFrame:
        """Every DP release charged to ``table``: its largest charge to one unit, the most a unit has spent after it
        (epsilon/delta summed; rho summed and its epsilon), the budget and what is left; verifies the ledger's hash
        chain first (PrivacyBudgetError if it was edited). Per unit in SQL: ``SELECT * FROM crowddb_privacy_spent``.
        Then every k-anonymous release of it (``kind`` 'k-anonymity': its ``ledger_release``, ``k``, ``rows``, the
        release it ``repeats``), and on every row ``smallest_joint_class``: the fewest rows a worker who links all of
        the table's releases cannot tell apart (the guard keeps it at least each row's k)."""
        name = self._budget_table(table)
        spent = privacy.report(self.con, name)
        kanon = composition.releases(self.con, name).assign(kind="k-anonymity", method=lambda f: f["ledger_release"])
        frames = [f for f in (spent, kanon.reindex(columns=privacy.REPORT_COLUMNS)) if len(f)]
        out = pd.concat(frames, ignore_index=True) if frames else spent
        out["smallest_joint_class"] = composition.smallest_class(self.con, name)[0]
        return out.reindex(columns=privacy.REPORT_COLUMNS)

    def _budget_table(self, table: str) -> str:
        if not isinstance(table, str):
            raise ArgumentError(f"a privacy budget is per table: pass its name, got {type(table).__name__}")
        name = resolve_table(self.con, table)
        if relation_kind(self.con, name) != "table":  # releases are charged to the base tables they read
            raise ArgumentError(f"{table!r} is a view: set the privacy budget on the table(s) it reads")
        return name.lower()

    def register_udf(self, definition: str | Path | HumanOperator | Mapping[str, Any]) -> HumanOperator:
        """Add a human operator from a TOML file or folder, a mapping, or a HumanOperator; returns it (a folder's
        first definition). A bad definition is refused before any of a folder's is registered."""
        import os

        if isinstance(definition, HumanOperator):
            op = definition
        elif isinstance(definition, Mapping):
            op = HumanOperator.from_mapping(definition)
        elif isinstance(definition, (str, os.PathLike)):
            ops = self.registry.add_path(Path(definition))  # every definition of a folder, or none if one is bad
            return ops[0]
        else:
            raise ArgumentError(f"register_udf takes a TOML file or folder path, a mapping or a crowddb.HumanOperator; "
                                f"got {type(definition).__name__} {definition!r}")
        self.registry.add(op)
        return op

    @property
    def last_report(self) -> list[dict[str, Any]]:
        """Privacy reports of the table functions of the last query (also in ``crowddb_releases``)."""
        return list(self.last_plan.reports) if self.last_plan else []


_FRAMES = itertools.count(1)
#: what load_frame takes: (module prefix, class name) of the frame types DuckDB scans
_FRAME_TYPES = (("pandas", "DataFrame"), ("pyarrow", "Table"), ("pyarrow", "RecordBatch"),
                ("pyarrow", "RecordBatchReader"), ("pyarrow", "Dataset"),
                ("polars", "DataFrame"), ("duckdb", "DuckDBPyRelation"))


def _check_frame(frame: Any) -> None:
    """load_frame's input must be a frame DuckDB scans; anything else is an ArgumentError naming what is taken."""
    for cls in type(frame).__mro__:
        if (cls.__module__.split(".")[0], cls.__name__) in _FRAME_TYPES:
            return
    raise ArgumentError(f"load_frame takes a pandas DataFrame, a pyarrow Table, RecordBatch, RecordBatchReader or "
                        f"Dataset, a polars DataFrame or a DuckDB relation; got {type(frame).__name__}")


# explain() runs (then rolls back) the statements that change the database's own contents, so the statements after
# them see their effect; anything else (COPY TO a file, SET, ATTACH, secrets, transaction control, a SELECT) is not run
_REHEARSED_KINDS = {"TABLE", "VIEW", "SCHEMA", "SEQUENCE", "INDEX", "MACRO", "FUNCTION", "TYPE"}


#: the privacy ledgers (the epsilon budget's and its view; k-anonymity's, store/composition.py): written only by
#: crowddb (set/reset_privacy_budget, a release)
_LEDGER_NAMES = (privacy.LEDGER, privacy.SPENT_VIEW, *composition.TABLES)
_WRITES = (exp.Insert, exp.Update, exp.Delete, exp.Drop, exp.Alter, exp.Create, exp.TruncateTable, exp.Merge,
           exp.Copy, exp.Command)


def _refuse_ledger_writes(query: Any) -> None:
    """Plain SQL may read the privacy ledger but not write, drop, alter, replace or load it: a budget is spent and
    reset only through the API, where every act is logged and hash-chained. Text that names the ledger and that
    sqlglot cannot read is refused too (fail closed)."""
    if not isinstance(query, str):
        return
    lower = query.lower()
    if "crowddb_" not in lower or not any(n in lower for n in _LEDGER_NAMES):  # (the first test is the fast path)
        return
    refusal = PrivacyBudgetError(
        f"the privacy ledgers ({', '.join(_LEDGER_NAMES)}) are written only by crowddb: set a budget with "
        "db.set_privacy_budget(table, epsilon=...) or SELECT * FROM PRIVACY_BUDGET(table, epsilon := ...), reset "
        "it with db.reset_privacy_budget(table) or PRIVACY_BUDGET(table, reset := true); releases charge it "
        "themselves. Nothing was run")
    try:
        statements = parse(query)
    except SQLParseError:
        raise refusal from None
    for statement in statements:
        if isinstance(statement, exp.Select) and not any(isinstance(n, _WRITES) for n in statement.walk()):
            continue
        if isinstance(statement, _WRITES) or any(isinstance(n, _WRITES) for n in statement.walk()):
            names = {t.name.lower() for t in statement.find_all(exp.Table)} | (
                {statement.this.lower()} if isinstance(statement, exp.Command) and isinstance(statement.this, str)
                else set())
            text = statement.sql(DIALECT).lower() if not isinstance(statement, exp.Command) else query.lower()
            if names & set(_LEDGER_NAMES) or any(n in text for n in _LEDGER_NAMES):
                raise refusal


def _rehearsable(statement: exp.Expression) -> bool:
    """Does explain() run ``statement`` (in its rolled-back transaction) before estimating the next ones?"""
    if isinstance(statement, (exp.Create, exp.Drop)):
        return str(statement.args.get("kind") or "").upper() in _REHEARSED_KINDS
    return isinstance(statement, (exp.Insert, exp.Update, exp.Delete, exp.Alter))


def _drop_answers(planner: Planner, scans: Scans) -> None:
    """What a crowd query's result read: the temp tables of its planner and the Python objects it registered."""
    planner.drop_temps()
    scans.drop()


def _param(value: Any) -> exp.Expression:
    """A query parameter as a literal node; NaN stays NaN (exp.convert makes it NULL, which reads as 'not given')."""
    if isinstance(value, float) and math.isnan(value):
        return exp.cast(exp.Literal.string("NaN"), exp.DataType.build("DOUBLE"))
    return exp.convert(value)


def _query_error(err: duckdb.Error) -> CrowdDBError:
    """DuckDB's error as crowddb's (still catchable as DuckDB's own class); crowddb's own errors pass unchanged."""
    if isinstance(err, CrowdDBError):
        return err
    message = str(err).lower()
    if isinstance(err, duckdb.BinderException) and "not found" in message and "column" in message:
        return duckdb_error(UnknownColumnError, err)
    return duckdb_error(QueryError, err)


#: the options ``connect()`` takes besides database, platform and seed
CONNECT_OPTIONS = ("budget", "udfs", "progress", "read_only", "config")


def _check_options(database: Any, platform: Any, seed: Any, budget: Any, udfs: Any, progress: Any, read_only: Any,
                   config: Any) -> tuple[int | None, float | None, list[str | Path]]:
    """``connect()``'s arguments checked before anything is opened: (seed, budget, udfs) as used."""
    import math
    import numbers
    import os

    if isinstance(database, duckdb.DuckDBPyConnection):
        if read_only or config:
            raise ArgumentError("read_only and config apply when crowddb opens the database; an open DuckDB "
                                "connection was given: set them when you open it (duckdb.connect(path, read_only=..., "
                                "config=...)) and leave them out here")
    elif not isinstance(database, (str, os.PathLike)):
        raise ArgumentError(f"database must be a file path, ':memory:' or an open duckdb connection, got "
                            f"{type(database).__name__} {database!r}")
    if platform is not None and not isinstance(platform, Platform):
        raise ArgumentError(f"platform must be a crowddb.Platform instance (e.g. crowddb.SimulatedCrowd(seed=1), or "
                            f"your subclass of crowddb.Platform for a real marketplace), got {type(platform).__name__} "
                            f"{platform!r}; leave it out for the embedded simulated crowd")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise ArgumentError(f"seed must be a non-negative integer or None, got {seed!r}")
        if seed < 0:
            raise ArgumentError(f"seed must be a non-negative integer or None, got {seed!r}")
        seed = int(seed)
    if budget is not None:
        if isinstance(budget, bool) or not isinstance(budget, numbers.Real):
            raise ArgumentError(f"budget must be a number of US$ per query (e.g. budget=10.0) or None, got "
                                f"{type(budget).__name__} {budget!r}")
        if not math.isfinite(budget) or budget < 0:
            raise ArgumentError(f"budget must be a finite number >= 0 (US$ per query), got {budget!r}; leave it out "
                                "(None) for no limit")
        budget = float(budget)
    if isinstance(udfs, (str, os.PathLike)):  # one folder (a string is not a list of folders, one per character)
        udfs = [udfs]
    try:
        udfs = list(udfs)
    except TypeError:
        raise ArgumentError(f"udfs must be a list of folders or files of human operator definitions, got "
                            f"{udfs!r}") from None
    bad = [u for u in udfs if not isinstance(u, (str, os.PathLike))]
    if bad:
        raise ArgumentError(f"udfs must be a list of folders or files of human operator definitions, got {bad[0]!r}")
    for name, value in (("progress", progress), ("read_only", read_only)):
        if not isinstance(value, bool):
            raise ArgumentError(f"{name} must be True or False, got {value!r}")
    if config is not None and not isinstance(config, Mapping):
        raise ArgumentError(f"config must be a mapping of DuckDB settings (e.g. {{'threads': 4}}), got {config!r}")
    return seed, budget, udfs


def _database_path(con: duckdb.DuckDBPyConnection) -> str:
    """The file behind a connection's current database (':memory:' for an in-memory one)."""
    try:
        rows = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchall()
    except duckdb.Error as err:  # a closed connection
        raise CrowdDBError(f"cannot use the DuckDB connection given to connect(): {err}") from None
    return rows[0][0] if rows and rows[0][0] else ":memory:"


def _with_k(statement: exp.Expression, k: int, registry: Registry) -> exp.Expression:
    """``statement`` with ``k := k`` on every call of a human operator (replacing a k it names)."""
    for node in list(statement.walk()):
        if isinstance(node, exp.Anonymous) and node.name in registry:
            args = [a for a in node.expressions
                    if not (isinstance(a, exp.PropertyEQ) and a.this.name.lower() == "k")]
            node.set("expressions", [*args, exp.PropertyEQ(this=exp.to_identifier("k"),
                                                           expression=exp.Literal.number(int(k)))])
    return statement


def _timeout(timeout: Any) -> float | None:
    """A query's wait for people's answers, in seconds (None: the platform's own default)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ArgumentError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout)


def connect(database: str | Path | duckdb.DuckDBPyConnection = ":memory:", *, platform: Platform | None = None, seed: int | None = None,
            **options: Any) -> CrowdDB:
    """Open a crowd database (a DuckDB file, or in memory), or wrap an open ``duckdb`` connection (which stays
    open to its owner when crowddb closes). ``platform`` defaults to the embedded simulated crowd;
    ``seed`` makes every random choice (crowd, anonymization, noise) reproducible. Options: budget (US$ per query),
    udfs (extra folders of operator definitions), progress, read_only, config (DuckDB settings)."""
    unknown = [name for name in options if name not in CONNECT_OPTIONS]
    if unknown:
        raise ArgumentError(f"connect(): unknown option{'s' if len(unknown) > 1 else ''} "
                            f"{', '.join(map(repr, unknown))}; accepted: database, platform, seed, "
                            f"{', '.join(CONNECT_OPTIONS)}")
    return CrowdDB(database, platform=platform, seed=seed, **options)
