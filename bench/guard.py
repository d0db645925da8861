"""Benchmark: the cost of the guard of k-anonymity across releases (crowddb/store/composition.py), by releases on
record.

A table of N rows (default 1,000,000) gets R earlier releases of all its rows straight into the ledger (each a
partition into consecutive classes of k * (j + 1) rows: no two alike), then one more release of all N rows is checked
(``composition.check``: one DuckDB statement over the rows' histories and the planned boxes) and recorded
(``composition.record``: check, history fold, ledger rows; ``write s`` is record less check: what the ledger's
writes cost), and the persisted partition is looked up for all N rows
(``composition.recorded``: each row's box in the newest release that showed it). The baseline, measured in the same run on the same
connection, is DuckDB grouping the planned rows by box (``SELECT box_id, count(*) ... GROUP BY box_id``): the least
any check of N rows' classes costs.

``plan s`` is the planner step of issue 25 for the same N rows at a larger k than any on record (the costly case:
every joint class merged with its neighbours): their joint classes read from the ledger
(``composition.joint_classes``), the rows to widen (``serve.widening``) and the safe release (``serve.plan``);
``plan+check s`` adds the check, the goal of issue 25 being under 1 s for 1M rows and 100 releases.
``floor s`` is what recording costs at the least: the release's ledger row, its boxes and its rows appended by one
statement each (no check, no history, no serialization), in a transaction rolled back as ``record s`` is; at 30,162
rows it is most of issue 26's 5 ms goal for ``record s`` on a machine whose statements cost about a millisecond.
Run: ``python bench/guard.py [--rows N] [--releases 1,10,100]``.
"""

from __future__ import annotations

import argparse
import time

import duckdb
import numpy as np
import pandas as pd

from crowddb._resources import catalog_ddl
from crowddb.privacy import serve
from crowddb.store import composition


def release(n: int, size: int) -> composition.Planned:
    """All n rows cut into consecutive classes of ``size`` rows (the last takes what is left over, so none is
    smaller), each class's box printed like a generalized QI."""
    classes = max(n // size, 1)
    lo = np.arange(classes) * size
    hi = np.append(lo[1:] - 1, n - 1)
    texts = pd.Series(lo).astype(str).str.cat(pd.Series(hi).astype(str), sep="-").to_numpy(dtype=object)
    return composition.planned(np.arange(n, dtype=np.int64), texts, np.minimum(np.arange(n) // size, classes - 1))


def timed(f, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--releases", default="0,1,10,100")  # 0: the table's first release (nothing on record)
    args = ap.parse_args()
    marks = sorted({int(r) for r in args.releases.split(",")})
    n, k = args.rows, 10
    con = duckdb.connect()
    con.execute(catalog_ddl()).fetchall()
    planned = release(n, k)
    con.register("__bench_planned", planned.rows)
    print(f"guard of k-anonymity across releases: a release of {n:,} rows checked against R earlier releases of "
          "all of them; best of 3")
    print(f"{'R':>5} | {'ledger rows':>12} | {'check s':>8} | {'record s':>8} | {'write s':>7} | {'persisted s':>11} | "
          f"{'plan s':>7} | {'plan+check s':>12} | {'baseline s':>10} | {'x baseline':>10} | {'floor s':>7}")
    print("-" * 130)
    done = 0
    for mark in marks:
        while done < mark:  # earlier releases, each a new one: classes of k * (j + 1) rows (every boundary a multiple
            done += 1        # of k, so every row's joint class is a union of the checked release's classes: accepted)
            composition.record(con, "big", f"release:{done}", k, release(n, k * (done + 1)))
        check = timed(lambda: composition.check(con, "big", "release:new", k, planned))
        base = timed(lambda: con.execute("SELECT box_id, count(*) FROM __bench_planned GROUP BY box_id").fetchall())
        record = timed(lambda: _record_and_undo(con, n, k, planned))
        floor = timed(lambda: _bare_writes(con, k, planned))
        # the persisted partition: every row's box in the newest release that showed it (a query over rows shown
        # before is planned in these boxes)
        persisted = timed(lambda: composition.recorded(con, "big", planned.rows["row_ref"].to_numpy(), [], k),
                          repeat=1)
        plan = timed(lambda larger=k * (done + 2): _plan(con, planned.rows["row_ref"].to_numpy(), larger))
        rows = con.execute("SELECT count(*) FROM crowddb_published").fetchall()[0][0]
        print(f"{mark:>5} | {rows:>12,} | {check:>8.3f} | {record:>8.3f} | {record - check:>7.3f} | {persisted:>11.3f} | "
              f"{plan:>7.3f} | "
              f"{plan + check:>12.3f} | {base:>10.3f} | {check / base:>10.1f} | {floor:>7.3f}")


def _plan(con, refs: np.ndarray, k: int) -> serve.Served:
    """Issue 25's planner step for ``refs`` at ``k`` (larger than any release's on record: classes merged)."""
    classes = composition.joint_classes(con, "big", refs)
    serve.widening(refs, classes, k)
    return serve.plan(refs, classes, k, composition.signature([]))


def _bare_writes(con, k: int, planned: composition.Planned) -> None:
    """The least a ledger of these rows writes: one ledger row, the boxes, the rows (one append each), in a
    transaction rolled back like ``_record_and_undo``'s."""
    con.execute("BEGIN TRANSACTION").fetchall()
    try:
        con.execute("INSERT INTO crowddb_ledger (release, table_name, k, traceable, release_no) "
                    "VALUES ('release:floor', 'big', ?, true, -1)", [k]).fetchall()
        con.register("__bench_boxes", planned.boxes)
        con.execute("INSERT INTO crowddb_ledger_boxes SELECT -1, box_id, box FROM __bench_boxes").fetchall()
        con.execute("INSERT INTO crowddb_ledger_rows SELECT -1, row_ref, box_id FROM __bench_planned").fetchall()
    finally:
        con.execute("ROLLBACK").fetchall()
        con.unregister("__bench_boxes")


def _record_and_undo(con, n: int, k: int, planned: composition.Planned) -> None:
    """Record the new release inside a transaction that is rolled back (the next mark starts from the same past)."""
    con.execute("BEGIN TRANSACTION").fetchall()
    try:
        composition.record(con, "big", "release:new", k, planned)
    finally:
        con.execute("ROLLBACK").fetchall()


if __name__ == "__main__":
    main()
