"""One SQL text through crowddb, top to bottom: its text read, its calls bound, the refusals, the estimate, the run,
the roles carried. ``CrowdDB.sql``/``execute``/``explain``/``tradeoff`` are each one call into this module.

    text      query.text      does it call a crowd operator? (tokens; parsed only if it does)
    plain     query.plain     no: DuckDB runs it (classified first while anything is protected)
    bind      query.params    its values bound; the Python objects it reads registered (replacement scans)
    guards    query.guards    refusals before anything is paid: transactions, unreadable statements, views
    calls     planner         every crowd call bound to its definition (a typo fails before the first HIT)
    estimate  query.estimate  the budget checked against the estimate; the trade-off shown where a page shows it
    run       query.execute   each statement's crowd steps run, their answers spliced in, DuckDB runs it, roles
                              carried (query.roles)
"""

from __future__ import annotations

from types import FrameType
from typing import Any

import pandas as pd
from sqlglot import exp

from ..errors import ArgumentError
from ..operators import table_functions
from ..planner import Planner
from ..replacement import Scans
from . import estimate, execute, guards, params, plain
from .estimate import QueryPlan
from .state import State


def run(state: State, query: str, values: Any, frame: FrameType | None, final: str, timeout: float | None = None):
    """Run ``query`` with ``values`` for its parameters, as the code in ``frame`` would (its DataFrames are
    tables); ``final``: 'sql' returns a relation, 'execute' the connection."""
    guards.refuse_ledger_writes(query)
    statements = state.reader.crowd_statements(query)
    if statements is None:
        return plain.run(state, query, values, frame, final)
    scans = Scans(state.con)
    try:
        statements = [params.bind(s, values) for s in scans.bind(statements, frame, table_functions.names())]
        guards.refuse_before_planning(state.con, state.registry, statements)
        planner = Planner(state.con, state.registry, state.context(query, timeout))
        for statement in statements:  # every call of every statement is bound before the first one pays
            planner.validate(statement)
        estimate.before_run(state, query, statements)  # the budget checked, the trade-off shown
        state.make_room()  # before the query: dropping after would replace its result
        result = execute.run(state, planner, query, statements, final)
    except BaseException:
        scans.drop()
        raise
    finally:
        state.protected = state.protected or None  # its releases and charges may have made something protected
    # the result reads the answers' temp tables (a relation each time it runs; a pending execute() result until it
    # is fetched, and dropping them now would replace it): they are kept for a few queries
    state.keep((planner, scans))
    return result


def explain(state: State, query: str, values: Any, frame: FrameType | None) -> QueryPlan:
    """How many HITs and assignments ``query`` would post, its estimated cost and the privacy parameters that
    apply; nothing is published, paid or written."""
    scans = Scans(state.con)
    try:
        statements = scans.bind(state.reader.crowd_statements(query) or [], frame, table_functions.names())
        return estimate.estimate(state, query, [params.bind(s, values) for s in statements])
    finally:
        scans.drop()


def tradeoff(state: State, query: str, ks: list[int], values: Any, frame: FrameType | None) -> pd.DataFrame:
    """The k-anonymity trade-off of a crowd query (``estimate.tradeoff``)."""
    if not ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 2 for k in ks):
        raise ArgumentError(f"tradeoff(): ks must be integers of at least 2, got {ks!r}")
    statements: list[exp.Expression] = state.reader.crowd_statements(query) or []
    if not any(state.reader.asks_humans(s) for s in statements):
        raise ArgumentError("tradeoff(): the query calls no human operator, so it has no k to trade off")
    scans = Scans(state.con)
    try:
        statements = [params.bind(s, values) for s in scans.bind(statements, frame, table_functions.names())]
        return estimate.tradeoff(state, query, statements, ks)
    finally:
        scans.drop()
