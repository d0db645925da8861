"""What every operator run needs from its connection: the DuckDB connection, the platform, seeds, budgets."""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Callable
from typing import TypeVar

import duckdb
import numpy as np

from .._duck import transaction
from ..crowd import Platform
from ..udf import Registry

T = TypeVar("T")


@dataclasses.dataclass
class OperatorContext:
    """Per-query context handed to operators by the planner."""

    con: duckdb.DuckDBPyConnection
    platform: Platform
    registry: Registry
    seed: int | None = None
    query: str = ""
    dry_run: bool = False
    progress: bool = True
    budget: float | None = None  # per query, across its operators
    spent: float = 0.0
    plans: list = dataclasses.field(default_factory=list)  # OperatorPlan of every operator, in run order
    reports: list = dataclasses.field(default_factory=list)  # privacy/quality reports of table functions

    def next_id(self, table: str, column: str) -> int:
        """Next integer id of a catalog table (run ids, release ids)."""
        return int(self.con.execute(f'SELECT coalesce(max("{column}"), 0) + 1 FROM "{table}"').fetchall()[0][0])

    def in_own_transaction(self, write: Callable[[], T]) -> T:
        """Run ``write`` in a transaction of its own, again if another connection committed a clashing row first
        (an id taken from max() + 1 inside the transaction: the loser of a race takes the next one)."""
        for attempt in range(200):
            try:
                with transaction(self.con):
                    return write()
            except (duckdb.TransactionException, duckdb.ConstraintException):
                if attempt == 199:
                    raise
                time.sleep(0.001 * (1 + attempt % 20))
        raise AssertionError("unreachable")  # pragma: no cover

    def reserve_run(self, operator: str, input_rows: int, k: int, anonymizer: str) -> int:
        """A new run id, taken in the database: this run's row of crowddb_runs is inserted ('running', with this
        process and host) in the transaction that picks the id, so two connections never get the same one. HIT ids
        are made from run ids, so they stay unique across connections too."""
        def insert() -> int:
            run_id = self.next_id("crowddb_runs", "run_id")
            self.con.execute(
                "INSERT INTO crowddb_runs (run_id, operator, query, input_rows, hits, assignments, cached_items, "
                "cost, k, anonymizer, status, pid, host, heartbeat) "
                "VALUES (?, ?, ?, ?, 0, 0, 0, 0, ?, ?, 'running', ?, ?, current_timestamp)",
                [run_id, operator, self.query, input_rows, k, anonymizer, os.getpid(), socket.gethostname()])
            return run_id

        return self.in_own_transaction(insert)

    def rng(self, run_id: int, seed: int | None = None) -> np.random.Generator:
        """The Generator of one operator run: from the call's seed, else the connection's seed and the run id."""
        if seed is not None:
            return np.random.default_rng(seed)
        if self.seed is None:
            return np.random.default_rng()
        return np.random.default_rng([self.seed, run_id])


RUN_TIMEOUT_HOURS = 24  # a 'running' run of another host without a heartbeat for this long is taken as interrupted


def _alive(pid: int) -> bool:
    """Whether a process of this host is alive (a zombie is not)."""
    if pid == os.getpid():
        return True  # a run of this process (another thread or connection): still running
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def reap_interrupted(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Mark runs that cannot still be running as 'interrupted' and fill in what they bought and paid for (HITs
    collected, assignments, cost): a 'running' run whose process is gone on this host, of another host without a
    heartbeat for RUN_TIMEOUT_HOURS, or written before runs recorded their process. Their HITs stay on record; a
    rerun collects them and adds them to the run's figures. Returns the run ids marked."""
    try:
        rows = con.execute("SELECT run_id, pid, host, epoch(current_timestamp::TIMESTAMP) - epoch(heartbeat) "
                           "FROM crowddb_runs WHERE status = 'running'").fetchall()
    except duckdb.Error:
        return []
    host = socket.gethostname()
    dead = [run_id for run_id, pid, run_host, age in rows
            if pid is None or (run_host == host and not _alive(int(pid)))
            or (run_host != host and (age is None or age > RUN_TIMEOUT_HOURS * 3600))]
    marked = []
    for run_id in dead:
        try:
            with transaction(con):
                con.execute(
                    "UPDATE crowddb_runs SET status = 'interrupted', "
                    "hits = (SELECT count(DISTINCT p.hit_id) FROM crowddb_payments p JOIN crowddb_hits h "
                    "        USING (hit_id) WHERE h.run_id = $1), "
                    "assignments = (SELECT count(*) FROM crowddb_payments p JOIN crowddb_hits h USING (hit_id) "
                    "               WHERE h.run_id = $1), "
                    "cost = (SELECT coalesce(sum(p.reward + p.fee), 0) FROM crowddb_payments p "
                    "        JOIN crowddb_hits h USING (hit_id) WHERE h.run_id = $1) "
                    "WHERE run_id = $1 AND status = 'running'", [run_id])
            marked.append(run_id)
        except duckdb.TransactionException:  # another connection is marking it (or updating its row): leave it
            pass
    return marked
