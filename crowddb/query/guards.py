"""Every refusal before anything is paid: ledger writes, transactions, statements crowddb cannot read, views over
crowd operators, binding errors; and DuckDB's errors said as crowddb's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import duckdb
from sqlglot import exp

from .._duck import in_transaction
from .._sql import DIALECT
from ..errors import (
    ArgumentError,
    PrivacyBudgetError,
    QueryError,
    SQLParseError,
    UnknownOperatorError,
    from_duckdb,
)
from ..operators import table_functions
from ..store import composition, privacy
from ..store.roles import declared_tables
from ..udf import Registry
from .plan import answer_column
from .text import asks_humans, is_human, is_table_function, parse, tracked_command

#: the privacy ledgers (the epsilon budget's and its view; k-anonymity's, store/composition.py): written only by
#: crowddb (set/reset_privacy_budget, a release)
_LEDGER_NAMES = (privacy.LEDGER, privacy.SPENT_VIEW, *composition.TABLES)
_WRITES = (exp.Insert, exp.Update, exp.Delete, exp.Drop, exp.Alter, exp.Create, exp.TruncateTable, exp.Merge,
           exp.Copy, exp.Command)


def refuse_ledger_writes(query: object) -> None:
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


def refuse_before_planning(con: duckdb.DuckDBPyConnection, registry: Registry,
                           statements: list[exp.Expression]) -> None:
    """What a crowd query is refused for before any call is bound: a human operator inside a transaction, a
    statement crowddb cannot read that may move roles, a view over a crowd operator."""
    refuse_in_transaction(con, registry, statements)
    refuse_unreadable_commands(con, statements)
    refuse_crowd_views(registry, statements)


def refuse_in_transaction(con: duckdb.DuckDBPyConnection, registry: Registry,
                          statements: list[exp.Expression]) -> None:
    """Crowd HITs are paid outside the database: a ROLLBACK could not take them back, only forget that they were
    bought (and buy them again). So human operators do not run inside an explicit transaction, whether the caller
    opened it before the query or the query's own text opens it (BEGIN ...; SELECT getposition(*) ...)."""
    human = [asks_humans(s, registry) for s in statements]
    if not any(human):
        return
    is_open = in_transaction(con)
    for statement, asks in zip(statements, human):
        if isinstance(statement, exp.Transaction):
            is_open = True
        elif isinstance(statement, (exp.Commit, exp.Rollback)):
            is_open = False
        elif is_open and asks:
            raise QueryError("crowd operators publish paid HITs, which a ROLLBACK cannot take back: run this "
                             "query outside BEGIN ... COMMIT (nothing was published)")


def refuse_unreadable(con: duckdb.DuckDBPyConnection, reason: str) -> None:
    """Refuse (before DuckDB runs anything) a statement that may create, fill or rename a table but that crowddb
    cannot read, while roles are declared: the roles of protected tables could not follow it."""
    if declared_tables(con):
        raise SQLParseError(
            f"crowddb cannot read this SQL ({reason}), and it may create, fill or rename a table: crowddb cannot "
            "carry the roles of protected tables through a statement it cannot read, so nothing was run. Rewrite "
            "it in SQL crowddb reads, or run it through db.con (plain DuckDB) and then declare the roles of the "
            "table it made yourself with db.declare_roles(...)")


def refuse_unreadable_commands(con: duckdb.DuckDBPyConnection, statements: Iterable[exp.Expression]) -> None:
    """``refuse_unreadable`` for a statement sqlglot could only keep as text (exp.Command)."""
    for statement in statements:
        if tracked_command(statement):
            text = " ".join(statement.sql(DIALECT).split())
            refuse_unreadable(con, f"sqlglot does not understand {text[:80]!r}" + ("..." if len(text) > 80 else ""))


def refuse_crowd_views(registry: Registry, statements: Iterable[exp.Expression]) -> None:
    """A view over a crowd operator is refused before anything runs: DuckDB would store the view over the temp
    tables its answers are joined from, which go with the query (and the file's session), so the view would
    break later; a table made from the query keeps its answers, and a rerun of the query is served from them."""
    functions = table_functions.names()
    for statement in statements:
        if (isinstance(statement, exp.Create) and str(statement.args.get("kind") or "").upper() == "VIEW"
                and any(isinstance(n, exp.Anonymous) and (n.name in registry or n.name.lower() in functions)
                        for n in statement.walk())):
            name = statement.this.this if isinstance(statement.this, exp.Schema) else statement.this
            text = " ".join((statement.expression.sql(DIALECT) if statement.expression else "").split())
            raise ArgumentError(
                f"CREATE VIEW {name.sql(DIALECT)}: a view over a crowd operator or table function would read "
                "answers crowddb keeps only while this query's result is read, and break after it (or after the "
                f"file is reopened). Store them: CREATE TABLE {name.sql(DIALECT)} AS {text[:60]}"
                + ("..." if len(text) > 60 else "") + " (a rerun of the query is served from the answers on "
                "record, at no cost). Nothing was run")


def check_binds(con: duckdb.DuckDBPyConnection, registry: Registry, statement: exp.Expression) -> None:
    """Bind ``statement`` in DuckDB (EXPLAIN: planned, not run) with every human operator call replaced by NULL,
    so an unknown column, table or function elsewhere in it is reported before any HIT is published or paid.

    The placeholder is untyped, so it never rejects a valid query; a type error involving an operator's answer
    still surfaces only in the real run (its purchases are cached, so the corrected query pays nothing again).
    A statement with a table function is left to the real run (their output columns depend on their arguments).
    """
    if any(is_table_function(n) for n in statement.walk()):
        return
    probe = statement.copy()
    for call in [n for n in probe.walk() if is_human(n, registry)]:
        # named as the real run names it; a scalar subquery, not a literal: ORDER BY NULL is refused by DuckDB
        call.replace(answer_column(call, exp.Subquery(this=exp.select(exp.Null()))))
    try:
        con.execute("EXPLAIN " + probe.sql(DIALECT)).fetchall()  # fetched: DuckDB 2 blocks on open results
    except (duckdb.BinderException, duckdb.CatalogException) as err:
        # DuckDB's "LINE 1: ..." context would quote the probe (EXPLAIN, NULL placeholders), not the user's SQL
        raise from_duckdb(type(err)(str(err).split("\n\nLINE ")[0])) from None
    except duckdb.Error:
        return  # anything else (a statement EXPLAIN does not take, ...) is left to the real run


@contextlib.contextmanager
def unknown_functions(registry: Registry) -> Iterator[None]:
    """DuckDB's 'function does not exist' becomes UnknownOperatorError (a misspelt crowd operator lands here)."""
    try:
        yield
    except duckdb.CatalogException as err:
        message = str(err)
        if "function" in message.lower() and "does not exist" in message.lower():
            raise UnknownOperatorError(f"{message}\n(crowd operators: {registry.names()}; table functions: "
                                       f"{sorted(n.upper() for n in table_functions.names())})") from None
        raise
