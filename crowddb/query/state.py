"""What the pipeline keeps between the queries of one connection (the ``CrowdDB`` facade holds one ``State``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import duckdb

from ..crowd import Platform
from ..operators.context import OperatorContext
from ..udf import Registry
from .text import Reader

#: a crowd query's result reads its answers from temp tables (db.sql() returns a lazy relation that reads them each
#: time it runs): those of the last few crowd queries are kept, older ones dropped (an older relation then fails with
#: "table ... does not exist"); explain()'s and a failed query's are dropped at once
KEPT_RESULTS = 4


@dataclasses.dataclass(eq=False)
class State:
    """One connection's crowd settings and what its queries leave behind."""

    con: duckdb.DuckDBPyConnection
    platform: Platform
    registry: Registry
    seed: int | None
    budget: float | None
    progress: bool
    reader: Reader = dataclasses.field(init=False)
    #: is anything protected (roles, ledger, budget)? True stays True for the session; otherwise (None) asked again
    #: when a statement may have changed it (``query.plain``)
    protected: bool | None = None
    #: the answers the last crowd results read (their executors' temp tables) and the Python objects they registered
    kept: list[tuple[Any, Any]] = dataclasses.field(default_factory=list)
    last_plan: Any = None  # the QueryPlan of the last crowd query or explain()

    def __post_init__(self) -> None:
        self.reader = Reader(self.registry)

    def context(self, query: str, timeout: float | None = None) -> OperatorContext:
        """What the operators of one run of ``query`` read: the connection, the crowd, the seed, the budget."""
        return OperatorContext(self.con, self.platform, self.registry, seed=self.seed, query=query,
                               progress=self.progress, budget=self.budget, timeout=timeout)

    def keep(self, result_of: tuple[Any, Any]) -> None:
        """Keep what a crowd result reads (its planner's temp tables, the Python objects it registered) until
        ``make_room`` or ``drop_all`` drops it."""
        self.kept.append(result_of)

    def make_room(self) -> None:
        """Drop what the oldest kept results read, beyond ``KEPT_RESULTS`` - 1: called before a crowd query runs
        (dropping after would replace its pending result)."""
        while len(self.kept) >= KEPT_RESULTS:
            _drop(self.kept.pop(0))

    def drop_all(self) -> None:
        for result_of in self.kept:
            _drop(result_of)
        self.kept = []


def _drop(result_of: tuple[Any, Any]) -> None:
    planner, scans = result_of
    planner.drop_temps()
    scans.drop()
