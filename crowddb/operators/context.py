"""What every operator run needs from its connection: the DuckDB connection, the platform, seeds, budgets."""

from __future__ import annotations

import dataclasses

import duckdb
import numpy as np

from ..crowd import Platform
from ..store import Store
from ..udf import Registry


@dataclasses.dataclass
class OperatorContext:
    """Per-query context handed to operators by the planner."""

    con: duckdb.DuckDBPyConnection
    platform: Platform
    registry: Registry
    seed: int | None = None
    query: str = ""
    progress: bool = True
    budget: float | None = None  # per query, across its operators
    timeout: float | None = None  # seconds a crowd step waits for people's answers (None: the platform's default)
    ks: tuple[int, ...] = ()  # explain() of the trade-off: each human call estimated at each of these k, one pass
    spent: float = 0.0
    plans: list = dataclasses.field(default_factory=list)  # OperatorPlan of every operator, in run order
    reports: list = dataclasses.field(default_factory=list)  # privacy/quality reports of table functions

    @property
    def store(self) -> Store:
        """The crowddb_* tables of this connection (runs, HITs, answers, payments, releases)."""
        return Store(self.con)

    def rng(self, run_id: int, seed: int | None = None) -> np.random.Generator:
        """The Generator of one operator run: from the call's seed, else the connection's seed and the run id."""
        if seed is not None:
            return np.random.default_rng(seed)
        if self.seed is None:
            return np.random.default_rng()
        return np.random.default_rng([self.seed, run_id])


