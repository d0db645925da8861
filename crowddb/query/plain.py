"""Plain SQL (no crowd operator in it): DuckDB gets the text as it is while nothing is protected; otherwise DuckDB's
own classification of each statement decides (``crowddb.privacy.gate``): a refused kind stops the whole text before
anything runs, a statement that writes stored columns is read first (its refusals too) and its roles are carried
after it ran."""

from __future__ import annotations

import contextlib
from types import FrameType
from typing import Any

from sqlglot import exp

from .._duck import transaction
from .._sql import DIALECT
from ..errors import SQLParseError, StatementRefusedError
from ..lineage import check_write, prepare, writes_home
from ..privacy import gate
from ..privacy.gate import Gated
from ..replacement import Scans
from ..store import Store
from . import guards, params, roles
from .state import State
from .text import parse

_SCANNED = "scanned_sql"  # a tracked tree's meta: its SQL over the Python objects it reads, registered
# compiled once: evaluated with the caller's globals and locals, so the frame DuckDB inspects holds the caller's names
_CALL = compile("__crowddb_method(__crowddb_query, **__crowddb_kwargs)", "<crowddb>", "eval")


def run(state: State, query: str, values: Any, frame: Any, final: str):
    """Run ``query``, a text without crowd operators; ``final``: 'sql' (a relation) or 'execute' (the connection)."""
    con = state.con
    with guards.unknown_functions(state.registry):
        if not _protected_now(state, query):
            if final == "sql":  # (params=None costs DuckDB a prepared statement: passed only if given)
                return call_in(frame, con.sql, query, **({} if values is None else {"params": values}))
            if values is None:
                return call_in(frame, con.execute, query)
            return call_in(frame, con.execute, query, parameters=values)
        gated = gate.classify(con, query)
    for g in gated:
        if g.action == gate.REFUSE:
            raise StatementRefusedError(f"crowddb refuses this {g.kind.replace('_', ' ')} statement while roles, "
                                        f"a privacy ledger "
                                        f"or a budget exist: {g.reason}. Nothing was run")
    scans = Scans(con)  # Python objects a tracked statement reads: registered, so roles can follow them
    try:
        trees = [_tracked_tree(state, g, values if i == len(gated) - 1 else None, frame, scans)
                 if g.action == gate.TRACK else None for i, g in enumerate(gated)]
        return _run_statements(state, gated, trees, values, frame, final)
    finally:
        scans.drop()


def _run_statements(state: State, gated: list[Gated], trees: list[exp.Expression | None], values: Any, frame: Any,
                    final: str):
    """The gated statements in order, once the tracked ones are read (``trees``); ``values`` go to the last
    statement, as DuckDB does with a text."""
    con = state.con
    result = kept = None
    for i, (g, tree) in enumerate(zip(gated, trees)):
        last = i == len(gated) - 1
        given = values if last else None
        # a statement that writes stored columns and the roles it carries are one transaction: if the roles
        # cannot follow, what it wrote is rolled back (the caller's own transaction: left to its ROLLBACK)
        atomic = tree is not None and writes_home(con, tree)
        with transaction(con) if atomic else contextlib.nullcontext():
            # a statement reading a Python object runs as read, over the object's registered view: roles
            # are then carried from the object DuckDB read (no frame of ours holds the caller's names)
            statement = tree.meta[_SCANNED] if tree is not None and _SCANNED in tree.meta else g.statement
            with guards.unknown_functions(state.registry):
                if last and final == "sql" and tree is None:
                    result = call_in(frame, con.sql, statement, **({} if given is None else {"params": given}))
                elif given is None:
                    result = call_in(frame, con.execute, statement)
                else:
                    result = call_in(frame, con.execute, statement, parameters=given)
                if not last:  # DuckDB 2 keeps a connection's result open until it is read
                    result.fetchall()
            if tree is not None:
                kept = (result.fetchall(), result.description) if last else None
                roles.carry(con, [tree])
        if kept is not None:  # after the transaction: its COMMIT would have replaced a result replayed before
            result = roles.replay(con, *kept, relation=final == "sql")
    return result


def _tracked_tree(state: State, g: Gated, values: Any, frame: Any, scans: Scans) -> exp.Expression:
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
    tree = params.bind(tree, values)  # (the roles of a statement are computed with its values)
    check_write(state.con, tree)
    tree = prepare(state.con, tree)
    if scanned is not None:
        tree.meta[_SCANNED] = scanned
    return tree


def _protected_now(state: State, query: str) -> bool:
    """Is anything protected (a declared role, a k-anonymity release, a budget act)? Asked of the database once,
    then again only after a statement that names crowddb's tables (it may declare or delete roles in SQL)."""
    mentions_catalog = "crowddb_" in query.lower()
    if state.protected is None or mentions_catalog:
        state.protected = Store(state.con).anything_protected()
    protected = state.protected
    if mentions_catalog:
        state.protected = None  # asked again after it ran
    return protected


def call_in(frame: FrameType | None, method: Any, query: str, **kwargs: Any) -> Any:
    """``method(query, **kwargs)`` (a DuckDB connection's sql or execute) called from a frame with ``frame``'s names,
    so DuckDB's replacement scan sees the caller's DataFrames as ``duckdb.sql`` would (``crowddb.replacement``)."""
    if frame is None:
        return method(query, **kwargs)
    names = {**frame.f_locals, "__crowddb_method": method, "__crowddb_query": query, "__crowddb_kwargs": kwargs}
    return eval(_CALL, frame.f_globals, names)  # a fixed, compiled expression: no user text
