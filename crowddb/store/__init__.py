"""Everything crowddb stores, and the only code that reads or writes its ``crowddb_*`` tables (sql/catalog.sql).

- ``roles``: column roles (``crowddb_columns``): what is a quasi-identifier, sensitive, core, ground truth, key.
- ``Store``: the crowd's ledger: runs, HITs and what each showed, assignments, answers, payments, workers, and the
  releases of the table functions. One method per fact, one statement (or one transaction) per method; the operators
  ask it and write no SQL of their own.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import duckdb
import numpy as np
import pandas as pd
from sqlglot import exp

from .. import _sql
from .._duck import registered, transaction
from . import composition, privacy
from .roles import TableRoles, declare_roles, ensure_catalog, relation_kind, resolve_table, roles_of, table_columns

__all__ = ["RUN_TIMEOUT_HOURS", "Store", "TableRoles", "declare_roles", "ensure_catalog", "relation_kind",
           "resolve_table", "roles_of", "table_columns"]

T = TypeVar("T")

RUN_TIMEOUT_HOURS = 24  # a 'running' run of another host without a heartbeat for this long is taken as interrupted


class Store:
    """The crowddb_* tables of one connection (runs, HITs, answers, payments, workers, releases)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con

    # ------------------------------------------------------------------------------------------ ids, transactions
    def next_id(self, table: str, column: str) -> int:
        """Next integer id of a catalog table (run ids, release ids)."""
        query = exp.select(exp.func("coalesce", exp.func("max", _sql.column(column)), exp.Literal.number(0))
                           + exp.Literal.number(1)).from_(_sql.table(table))
        return int(self.con.execute(query.sql(_sql.DIALECT)).fetchall()[0][0])

    def in_own_transaction(self, write: Callable[[], T], one_statement: bool = False) -> T:
        """Run ``write`` in a transaction of its own, again if another connection committed a clashing row first
        (an id taken from max() + 1 inside the transaction: the loser of a race takes the next one). A ``write``
        of ``one_statement`` is a transaction by itself (auto-commit, or the caller's open transaction)."""
        for attempt in range(200):
            try:
                if one_statement:
                    return write()
                with transaction(self.con):
                    return write()
            except (duckdb.TransactionException, duckdb.ConstraintException):
                if attempt == 199:
                    raise
                time.sleep(0.001 * (1 + attempt % 20))
        raise AssertionError("unreachable")  # pragma: no cover

    # ------------------------------------------------------------------------------------------------------ runs
    def next_run_id(self) -> int:
        """The id the next run would take (explain() names its estimates with it; nothing is written)."""
        return self.next_id("crowddb_runs", "run_id")

    def reserve_run(self, operator: str, query: str, input_rows: int, k: int, anonymizer: str) -> int:
        """A new run id, taken in the database: this run's row of crowddb_runs is inserted ('running', with this
        process and host) in the transaction that picks the id, so two connections never get the same one. HIT ids
        are made from run ids, so they stay unique across connections too."""
        def insert() -> int:
            run_id = self.next_id("crowddb_runs", "run_id")
            self.con.execute(
                "INSERT INTO crowddb_runs (run_id, operator, query, input_rows, hits, assignments, cached_items, "
                "cost, k, anonymizer, status, pid, host, heartbeat) "
                "VALUES (?, ?, ?, ?, 0, 0, 0, 0, ?, ?, 'running', ?, ?, current_timestamp)",
                [run_id, operator, query, input_rows, k, anonymizer, os.getpid(), socket.gethostname()])
            return run_id

        return self.in_own_transaction(insert)

    def finish_run(self, run_id: int, *, hits: int, assignments: int, cached_items: int, cost: float, k: int,
                   anonymizer: str, status: str, release: dict[str, Any] | None = None) -> None:
        """A run's totals and status, and (``release``: method, k, params, metrics) the anonymization release its
        HITs made, in one transaction."""
        def write() -> None:  # another connection may take the same release id first: then again, with the next
            self.con.execute("UPDATE crowddb_runs SET hits = ?, assignments = ?, cached_items = ?, cost = ?, k = ?, "
                             "anonymizer = ?, status = ?, heartbeat = current_timestamp WHERE run_id = ?",
                             [hits, assignments, cached_items, cost, k, anonymizer, status, run_id])
            if release is not None:
                self._insert_release(kind="anonymization", run_id=run_id, **release)

        self.in_own_transaction(write)

    def run_has_hits(self, run_id: int) -> bool:
        """Whether a HIT of this run is on record (a write-ahead record the platform never got is dropped)."""
        try:
            return bool(self.con.execute("SELECT count(*) FROM crowddb_hits WHERE run_id = ?",
                                         [run_id]).fetchall()[0][0])
        except duckdb.Error:  # cannot tell: keep the row (fail closed)
            return True

    def forget_run(self, run_id: int) -> None:
        """A run that failed before anything of it was on record leaves no row (and its id is free again)."""
        with transaction(self.con):
            self.con.execute("DELETE FROM crowddb_runs WHERE run_id = ? AND NOT EXISTS "
                             "(SELECT 1 FROM crowddb_hits WHERE run_id = ?)", [run_id, run_id])

    def reap_interrupted(self) -> list[int]:
        """Mark runs that cannot still be running as 'interrupted' and fill in what they bought and paid for (HITs
        collected, assignments, cost): a 'running' run whose process is gone on this host, of another host without a
        heartbeat for RUN_TIMEOUT_HOURS, or written before runs recorded their process. Their HITs stay on record; a
        rerun collects them and adds them to the run's figures. Returns the run ids marked."""
        con = self.con
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

    # ------------------------------------------------------------------------------------------------------ HITs
    def record_posted(self, run_id: int, hits: pd.DataFrame, items: pd.DataFrame, published: Sequence[str],
                      group: bool, ledger: Sequence[tuple[str, str, int, composition.Planned | None]] = ()
                      ) -> None:
        """The HITs about to be posted, with exactly what they show (the ``published`` columns of ``items``, one
        JSON value per item; a group item lists its rows), and the rows they publish in the privacy ledger
        ((table, release, k, rows) each; ``composition.record``), in one transaction."""
        content = _content_sql(list(published), group)

        def write() -> None:
            self.con.execute("UPDATE crowddb_runs SET heartbeat = current_timestamp WHERE run_id = ?", [run_id])
            self.con.execute("INSERT INTO crowddb_hits (hit_id, run_id, operator, question, domain, n_items, "
                             "assignments, reward, fee_rate, platform, status) SELECT hit_id, run_id, operator, "
                             "question, domain, n_items, assignments, reward, fee_rate, platform, status "
                             "FROM __crowd_h")
            self.con.execute(f"INSERT INTO crowddb_hit_items (hit_id, item_no, item_key, occurrence, content, "
                             f"gold) {content}")
            for table, release, k, rows in ledger:  # refuses (and rolls all back) what would break a release
                composition.record(self.con, table, release, k, rows)

        with registered(self.con, __crowd_h=hits, __crowd_i=items):
            self.in_own_transaction(write)

    def set_hit_status(self, hit_ids: Sequence[str], status: str, was: str | None = None) -> None:
        """HITs (of status ``was``, if given) become ``status`` (one statement)."""
        where = "hit_id IN (SELECT hit_id FROM __crowd_d)" + (" AND status = ?" if was is not None else "")
        with registered(self.con, __crowd_d=_ids(hit_ids)):
            self.con.execute(f"UPDATE crowddb_hits SET status = ? WHERE {where}",
                             [status] + ([was] if was is not None else []))

    def drop_unposted(self, hit_ids: Sequence[str]) -> None:
        """Write-ahead records of HITs the platform never got (still 'publishing'): the crowd saw nothing of them."""
        with registered(self.con, __crowd_u=_ids(hit_ids)):
            runs = [r for (r,) in self.con.execute(
                "SELECT DISTINCT run_id FROM crowddb_hits WHERE status = 'publishing' AND hit_id IN "
                "(SELECT hit_id FROM __crowd_u)").fetchall()]
            self.con.execute("DELETE FROM crowddb_hit_items WHERE hit_id IN (SELECT hit_id FROM __crowd_u) AND hit_id "
                             "IN (SELECT hit_id FROM crowddb_hits WHERE status = 'publishing')")
            self.con.execute("DELETE FROM crowddb_hits WHERE status = 'publishing' AND hit_id IN "
                             "(SELECT hit_id FROM __crowd_u)")
        composition.forget_unposted(self.con, runs)

    def resolve_publishing(self, posted: Sequence[str], unposted: Sequence[str]) -> None:
        """'publishing' HITs the platform confirmed become 'published'; the others' records are dropped (one
        transaction)."""
        with transaction(self.con):
            if posted:
                self.set_hit_status(posted, "published", was="publishing")
            if unposted:
                self.drop_unposted(unposted)

    def record_collected(self, assignments: pd.DataFrame, answers: pd.DataFrame, payments: pd.DataFrame,
                         credit: bool = False) -> None:
        """Assignments, answers (with item_key, occurrence) and payments of collected HITs, which become
        'completed' (one transaction). ``credit``: HITs an earlier run posted: their HITs, assignments and cost are
        added to that run's row."""
        done = pd.DataFrame({"hit_id": pd.unique(assignments["hit_id"])})
        con = self.con
        with (registered(con, __crowd_a=assignments, __crowd_ans=answers, __crowd_p=payments, __crowd_d=done),
              transaction(con)):
            con.execute("INSERT INTO crowddb_assignments (assignment_id, hit_id, worker_id) "
                        "SELECT assignment_id, hit_id, worker_id FROM __crowd_a")
            con.execute("INSERT INTO crowddb_answers SELECT assignment_id, hit_id, item_no, item_key, occurrence, "
                        "worker_id, CAST(answer AS VARCHAR) FROM __crowd_ans")
            con.execute("INSERT INTO crowddb_payments (assignment_id, hit_id, worker_id, reward, fee) "
                        "SELECT assignment_id, hit_id, worker_id, reward, fee FROM __crowd_p")
            con.execute("UPDATE crowddb_hits SET status = 'completed' WHERE hit_id IN (SELECT hit_id FROM __crowd_d)")
            if credit:
                con.execute("UPDATE crowddb_runs r SET hits = r.hits + s.n_hits, assignments = r.assignments + s.n, "
                            "cost = r.cost + s.paid FROM (SELECT h.run_id, count(DISTINCT p.hit_id) AS n_hits, "
                            "count(*) AS n, sum(p.reward + p.fee) AS paid FROM __crowd_p p JOIN crowddb_hits h "
                            "USING (hit_id) GROUP BY h.run_id) s WHERE r.run_id = s.run_id")

    def outstanding_hits(self, need: pd.DataFrame, operator: str, platform: str) -> pd.DataFrame:
        """HITs an earlier run posted (or was posting) for the items ``need`` (item_key, occurrence) and never
        collected: hit_id, item_key, occurrence, assignments, status. Only of runs that are over: a run still running
        collects its own."""
        with registered(self.con, __crowd_need=need):
            return self.con.execute(
                "SELECT h.hit_id, i.item_key, i.occurrence, h.assignments, h.status FROM crowddb_hits h "
                "JOIN crowddb_hit_items i USING (hit_id) JOIN __crowd_need n USING (item_key, occurrence) "
                "LEFT JOIN crowddb_runs r ON r.run_id = h.run_id "
                "WHERE h.status IN ('published', 'publishing') AND i.gold IS NULL AND h.operator = ? "
                "AND h.platform = ? "
                "AND coalesce(r.status, '') <> 'running' ORDER BY h.hit_id", [operator, platform]).df()

    def runs_asking(self, need: pd.DataFrame, operator: str) -> list[int]:
        """The runs that posted HITs (not lost) asking every one of the items ``need`` (item_key, occurrence) of
        ``operator``, earliest first: the runs a later round over these items continues."""
        with registered(self.con, __crowd_need=need.drop_duplicates(["item_key", "occurrence"])):
            return [r for (r,) in self.con.execute(
                "SELECT h.run_id FROM crowddb_hits h JOIN crowddb_hit_items i USING (hit_id) "
                "JOIN __crowd_need n USING (item_key, occurrence) WHERE h.operator = ? AND h.status <> 'lost' "
                "AND i.gold IS NULL GROUP BY h.run_id HAVING count(DISTINCT (i.item_key, i.occurrence)) = "
                "(SELECT count(*) FROM __crowd_need) ORDER BY h.run_id", [operator]).fetchall()]

    def published_hits(self, platform: str) -> list[str]:
        """HITs posted on ``platform`` and not collected yet, of runs that are over (a running run collects its own)."""
        return [h for (h,) in self.con.execute(
            "SELECT h.hit_id FROM crowddb_hits h LEFT JOIN crowddb_runs r ON r.run_id = h.run_id "
            "WHERE h.status = 'published' AND h.platform = ? AND coalesce(r.status, '') <> 'running' "
            "ORDER BY h.hit_id", [platform]).fetchall()]

    def hit_items(self, hit_ids: Sequence[str]) -> pd.DataFrame:
        """The items of these HITs (not their gold questions) with what one assignment of each paid: hit_id,
        item_no, item_key, occurrence, reward, fee."""
        with registered(self.con, __crowd_d=_ids(hit_ids)):
            return self.con.execute("SELECT i.hit_id, i.item_no, i.item_key, i.occurrence, h.reward, "
                                    "h.reward * h.fee_rate AS fee FROM crowddb_hit_items i JOIN crowddb_hits h "
                                    "USING (hit_id) WHERE hit_id IN (SELECT hit_id FROM __crowd_d) AND i.gold IS NULL").df()

    def answers_for(self, need: pd.DataFrame) -> pd.DataFrame:
        """Answers already bought for the items ``need`` (item_key, occurrence): item_key, occurrence, worker_id,
        answer, assignment_id, in the order they were bought."""
        with registered(self.con, __crowd_need=need):
            return self.con.execute(
                "SELECT a.item_key, a.occurrence, a.worker_id, a.answer, a.assignment_id "
                "FROM crowddb_answers a JOIN __crowd_need n USING (item_key, occurrence) "
                "ORDER BY a.item_key, a.occurrence, a.assignment_id").df()

    # --------------------------------------------------------------------------------------------------- workers
    def record_workers(self, workers: pd.DataFrame, platform: str) -> None:
        """The platform's workers (worker_id, quality, and marketplace_id where the platform knows it), once each;
        a marketplace id learned later (a participant who arrived through a study link) is added."""
        if "marketplace_id" not in workers:
            workers = workers.assign(marketplace_id=None)
        workers = workers[["worker_id", "quality", "marketplace_id"]].assign(platform=platform)
        with registered(self.con, __crowd_workers=workers.astype({"marketplace_id": object})):
            self.con.execute("INSERT INTO crowddb_workers (worker_id, platform, quality, marketplace_id) "
                             "SELECT worker_id, platform, quality, marketplace_id::VARCHAR FROM __crowd_workers "
                             "ON CONFLICT (worker_id) DO UPDATE SET marketplace_id = "
                             "coalesce(excluded.marketplace_id, crowddb_workers.marketplace_id)")

    def payouts(self, run_id: int) -> pd.DataFrame:
        """What each worker was paid in one run: worker_id, marketplace_id, assignments, reward (crowddb_payouts)."""
        return self.con.execute("SELECT worker_id, marketplace_id, assignments, reward FROM crowddb_payouts "
                                "WHERE run_id = ? ORDER BY worker_id", [run_id]).df()

    def anything_protected(self) -> bool:
        """Is anything protected here: a declared role, a k-anonymous release on record, a privacy-budget act?"""
        return bool(self.con.execute("SELECT EXISTS (FROM crowddb_columns) OR EXISTS (FROM crowddb_ledger) "
                                     "OR EXISTS (FROM crowddb_privacy_ledger)").fetchall()[0][0])

    def bought_per_operator(self) -> pd.DataFrame:
        """Per operator: its runs, HITs and assignments bought and what they cost (US$)."""
        return self.con.execute("SELECT operator, count(*) AS runs, sum(hits)::BIGINT AS hits, "
                                "sum(assignments)::BIGINT AS assignments, round(sum(cost), 2) AS usd "
                                "FROM crowddb_runs GROUP BY operator ORDER BY operator").df()

    def last_run(self) -> int:
        """The id of the latest crowd run (0: none)."""
        return int(self.con.execute("SELECT coalesce(max(run_id), 0) FROM crowddb_runs").fetchall()[0][0])

    def purchases_since(self, run_id: int) -> dict[str, Any]:
        """What the runs after ``run_id`` bought and left published: their run ids, HITs and assignments paid and
        their cost, and the HITs (and assignments) still published, which a rerun collects without paying again."""
        runs = [r for (r,) in self.con.execute("SELECT run_id FROM crowddb_runs WHERE run_id > ? ORDER BY run_id",
                                               [run_id]).fetchall()]
        hits, assignments, cost = self.con.execute(
            "SELECT count(DISTINCT p.hit_id), count(*), coalesce(sum(p.reward + p.fee), 0) FROM crowddb_payments p "
            "JOIN crowddb_hits h USING (hit_id) WHERE h.run_id > ?", [run_id]).fetchall()[0]
        published, waiting = self.con.execute(
            "SELECT count(*), coalesce(sum(assignments), 0) FROM crowddb_hits "
            "WHERE run_id > ? AND status IN ('published', 'publishing')", [run_id]).fetchall()[0]
        return {"runs": runs, "hits": int(hits), "assignments": int(assignments), "cost": float(cost),
                "published": int(published), "waiting": int(waiting)}

    # -------------------------------------------------------------------------------------------------- releases
    def log_release(self, *, kind: str, method: str, k: int | None = None, epsilon: float | None = None,
                    delta: float | None = None, params: dict[str, Any], metrics: dict[str, Any],
                    objects: pd.DataFrame | None = None,
                    ledger: Sequence[tuple[str, composition.Planned | None]] = ()) -> int:
        """One row of crowddb_releases (and, for a synthesis, its per-object log in crowddb_synth_objects; for an
        anonymization, the rows it published per table in the privacy ledger, ``composition.record``), in a
        transaction of its own; returns the release id."""
        return self.in_own_transaction(
            lambda: self._write_release(kind=kind, method=method, k=k, epsilon=epsilon, delta=delta, params=params,
                                        metrics=metrics, objects=objects, ledger=ledger),
            one_statement=objects is None and not ledger)

    def _write_release(self, *, kind: str, method: str, k: int | None = None, epsilon: float | None = None,
                       delta: float | None = None, params: dict[str, Any], metrics: dict[str, Any],
                       objects: pd.DataFrame | None = None,
                       ledger: Sequence[tuple[str, composition.Planned | None]] = ()) -> int:
        """``log_release``'s statements, inside the caller's transaction (which retries them)."""
        release_id = self._insert_release(kind=kind, method=method, k=k, epsilon=epsilon, delta=delta,
                                          params=params, metrics=metrics)
        if objects is not None:
            with registered(self.con, __crowd_synth_log=objects):
                self.con.execute("INSERT INTO crowddb_synth_objects SELECT ?, * FROM __crowd_synth_log", [release_id])
        for table, rows in ledger:
            composition.record(self.con, table, f"release:{release_id}", int(k or 1), rows)
        return release_id

    def _insert_release(self, *, kind: str, method: str, k: int | None, params: dict[str, Any],
                        metrics: dict[str, Any], epsilon: float | None = None, delta: float | None = None,
                        run_id: int | None = None) -> int:
        """The one statement that writes crowddb_releases; its id (max + 1) is taken by the same statement."""
        rows = self.con.execute(
            "INSERT INTO crowddb_releases (release_id, run_id, kind, method, k, epsilon, delta, params, metrics) "
            "SELECT coalesce(max(release_id), 0) + 1, ?, ?, ?, ?, ?, ?, ?, ? FROM crowddb_releases "
            "RETURNING release_id",
            [run_id, kind, method, k, epsilon, delta, json.dumps(params, default=_json_value),
             json.dumps(metrics, default=_json_value)]).fetchall()
        return int(rows[0][0])

    # ------------------------------------------------------------------------------------------ epsilon budget
    def set_privacy_budget(self, table: str, *, epsilon: float, delta: float = 0.0, unit: str = "source",
                           composition: str = "sequential") -> None:
        """A 'budget' act on the privacy ledger (``privacy.set_budget``), in a transaction of its own."""
        self.in_own_transaction(lambda: privacy.set_budget(self.con, table, epsilon=epsilon, delta=delta, unit=unit,
                                                           composition=composition))
        privacy.settle(self.con)  # issue 24: a ledger key this act made becomes <file>.key once it is committed

    def reset_privacy_budget(self, table: str, unit: str = "source") -> None:
        """A 'reset' act on the privacy ledger: earlier charges stop counting, and the reset is on record."""
        self.in_own_transaction(lambda: privacy.reset(self.con, table, unit))
        privacy.settle(self.con)  # issue 24: as set_privacy_budget

    def log_charged_release(self, *, tables: Sequence[str], charge: privacy.Charge, **release: Any) -> int:
        """``log_release`` and the release's charges (``privacy.record``) in ONE transaction: a crash leaves both or
        neither. The budget is checked again inside it (another connection may have charged since the planner's
        check), so a release never commits over budget; returns the release id."""
        def write() -> int:  # one transaction (in_own_transaction's), retried as a whole
            privacy.check(self.con, tables, charge)
            release_id = self._write_release(**release)
            if privacy.AFTER_RELEASE_HOOK is not None:
                privacy.AFTER_RELEASE_HOOK()
            privacy.record(self.con, tables, charge, release_id)
            return release_id

        release_id = self.in_own_transaction(write)
        privacy.settle(self.con)  # issue 24: as set_privacy_budget
        return release_id


def _ids(hit_ids: Sequence[str]) -> pd.DataFrame:
    """HIT ids as a one-column frame to register (object dtype: an empty list stays a text column)."""
    return pd.DataFrame({"hit_id": list(hit_ids)}, dtype=object)


def _json_value(value: Any) -> Any:
    """What json cannot write itself: numpy numbers as numbers, anything else as its text."""
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


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


def _content_sql(columns: list[str], group: bool) -> str:
    """SELECT of one JSON content value per HIT item from __crowd_i, built as an AST (identifiers quoted)."""
    struct = exp.Struct(expressions=[
        exp.PropertyEQ(this=exp.to_identifier(c, quoted=True), expression=exp.column(c, quoted=True))
        for c in columns])
    if not group:
        return exp.select("hit_id", "item_no", "item_key", "occurrence",
                          exp.Anonymous(this="to_json", expressions=[struct]), "gold").from_("__crowd_i").sql(
            _sql.DIALECT)
    rows = exp.Anonymous(this="list", expressions=[exp.Order(
        this=struct, expressions=[exp.Ordered(this=exp.column("row_no"))])])
    return (exp.select("hit_id", "item_no", exp.func("any_value", exp.column("item_key")),
                       exp.func("any_value", exp.column("occurrence")),
                       exp.Anonymous(this="to_json", expressions=[rows]),
                       exp.cast(exp.Null(), "VARCHAR")).from_("__crowd_i")
            .group_by("hit_id", "item_no").sql(_sql.DIALECT))
