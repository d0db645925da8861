"""A crowd query's run: its statements in order, each one's crowd steps run by the planner (answers spliced into the
tree as temp tables it owns), the rewritten statement run by DuckDB, its roles carried."""

from __future__ import annotations

import duckdb
from sqlglot import exp

from .._sql import DIALECT
from ..errors import from_duckdb
from ..lineage import check_write, is_tracked, prepare
from ..planner import Planner
from . import guards, roles
from .estimate import QueryPlan
from .state import State


def run(state: State, planner: Planner, query: str, statements: list[exp.Expression], final: str):
    """Run ``statements`` (parsed from ``query``, values bound, every call already bound by ``planner``) in order;
    returns the last one's result (``final``: 'sql', a relation; 'execute', the connection). What the result reads
    stays in ``planner``'s temp tables, dropped on failure."""
    con = state.con
    result = None
    try:
        for i, statement in enumerate(statements):
            if i:  # a statement of the query may have opened a transaction in a way the text check cannot see
                guards.refuse_in_transaction(con, state.registry, [statement])
            guards.check_binds(con, state.registry, statement)  # a typo fails here, before anything is paid
            tracked = is_tracked(statement)
            if tracked:
                check_write(con, statement)
            try:
                planner.rewrite(statement)  # the crowd steps run; their answers are spliced into the tree
            except duckdb.Error as err:
                raise from_duckdb(err) from None
            if tracked:  # what its names read before it runs (a renamed table; its operators' answers)
                prepare(con, statement)
            last = i == len(statements) - 1
            try:
                result = con.sql(statement.sql(DIALECT)) if last and final == "sql" else con.execute(
                    statement.sql(DIALECT))
            except duckdb.Error as err:
                raise from_duckdb(err) from None
            if tracked:
                if last and final == "execute":
                    result = roles.carry_keeping(con, result, [statement], planner.temp_roles)
                else:
                    roles.carry(con, [statement], planner.temp_roles)
    except BaseException:
        planner.drop_temps()
        raise
    state.last_plan = QueryPlan(query, list(planner.ctx.plans), list(planner.ctx.reports), list(planner.steps))
    return result
