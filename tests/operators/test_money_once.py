"""Issue 12: money is spent exactly once.

A platform that keeps its HITs on disk (``fault_platform.DiskCrowd``) fails, sleeps or SIGKILLs the process at named
points; after a rerun, the platform received each HIT once, each assignment is paid once, nothing bought is lost,
the money spent in all equals an uninterrupted run's, and so does the result. Reruns without ``seed :=`` are served
from the cache; concurrent connections (threads, processes) never share a run id and never post a HIT they do not
record.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from pathlib import Path

import duckdb
import pandas as pd
import pytest
from conftest import people_frame
from fault_platform import DiskCrowd

import crowddb
from crowddb.errors import PlatformError

TESTS = Path(__file__).resolve().parents[1]

GROUPS = ("SELECT hobby, getcandidate(age, zip, edu, 'teacher', tuples_per_hit := 8) AS pick "
          "FROM people GROUP BY hobby ORDER BY hobby")  # 3 groups of ~40 rows: 5 HITs each, then a knock-out round
FKA = "SELECT id, getposition(age, zip, edu, anonymizer := 'fka', k := 5) AS p FROM people ORDER BY id"
# an accuracy target (issue 28): rounds of one assignment per open item until each reaches the target
ADAPTIVE = ("SELECT id, getposition(age, zip, edu, k := 5, accuracy := 0.9, max_assignments := 4) AS p "
            "FROM people ORDER BY id")
QUERIES = {"groups": GROUPS, "fka": FKA, "adaptive": ADAPTIVE}


def load(db) -> None:
    db.load_frame("people", people_frame(120), quasi_identifiers=["age", "zip"], sensitive=["salary"],
                  ground_truth="job", key="id")


def make_db(path: Path) -> None:
    with crowddb.connect(path, platform=DiskCrowd(path.with_suffix(".crowd.json")), progress=False) as db:
        load(db)


def money(db) -> dict:
    """What the database holds: HITs by status, payments, what was paid in all, duplicate payments."""
    status = dict(db.sql("SELECT status, count(*) FROM crowddb_hits GROUP BY status").fetchall())
    n_paid, n_distinct, paid = db.sql("SELECT count(*), count(DISTINCT assignment_id), coalesce(sum(reward + fee), 0) "
                                      "FROM crowddb_payments").fetchall()[0]
    return {"status": status, "paid": n_paid, "paid_distinct": n_distinct, "cost": round(float(paid), 4)}


def check_platform_agrees(db, crowd: DiskCrowd) -> dict:
    """Every HIT the platform got was posted once and is on record; every recorded HIT was collected and paid."""
    state = crowd.snapshot()
    received = Counter(state["received"])
    assert max(received.values()) == 1, f"HITs posted twice: {[h for h, n in received.items() if n > 1]}"
    recorded = {h: s for h, s in db.sql("SELECT hit_id, status FROM crowddb_hits").fetchall()}
    assert set(state["hits"]) <= set(recorded), "a HIT the platform got is not on record"
    assert {h for h, s in recorded.items() if s != "lost"} == set(state["hits"])
    assert set(recorded.values()) <= {"completed"}, recorded  # nothing stuck 'publishing' or 'published'
    m = money(db)
    assert m["paid"] == m["paid_distinct"] == sum(h["assignments"] for h in state["hits"].values())
    return {"posted": len(state["received"]), "recorded": len(recorded), **m}


@functools.cache
def uninterrupted(kind: str, tmp: str) -> tuple[pd.DataFrame, dict]:
    path = Path(tmp) / f"clean-{kind}.duckdb"
    make_db(path)
    crowd = DiskCrowd(path.with_suffix(".crowd.json"))
    with crowddb.connect(path, platform=crowd, progress=False) as db:
        result = db.sql(QUERIES[kind]).df()
        figures = check_platform_agrees(db, crowd)
    return result, figures


@pytest.fixture(scope="module")
def shared_tmp(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("money"))


CHILD = textwrap.dedent("""
    import json, os, signal, sys, contextlib
    import crowddb
    import crowddb.store as store
    from fault_platform import DiskCrowd

    path, faults, query = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    if faults.pop("commit", None):  # SIGKILL inside the transaction that records collected answers, before COMMIT
        original_record, original_transaction = store.Store.record_collected, store.transaction
        dying = []

        def record(self, *args, **kw):
            dying.append(1)
            return original_record(self, *args, **kw)

        @contextlib.contextmanager
        def transaction(con):
            with original_transaction(con):
                yield
                if dying:
                    os.kill(os.getpid(), signal.SIGKILL)

        store.Store.record_collected, store.transaction = record, transaction
    crowd = DiskCrowd(path.replace(".duckdb", ".crowd.json"), faults=faults)
    with crowddb.connect(path, platform=crowd, progress=False) as db:
        db.sql(query).df()
    print("completed")
""")


def run_child(path: Path, faults: dict, query: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", CHILD, str(path), __import__("json").dumps(faults), query],
                          env=env, capture_output=True, text=True, timeout=timeout, check=False)


# point of the run -> faults of the child. Knock-out rounds and FKA's sample phase come first in their runs: the
# n-th call dies, so some HITs were bought before it (for groups, @2 is the knock-out round after round 1).
POINTS = {
    "before publish": {"publish_before@2": "kill"},
    "between publish and its record": {"publish_after@2": "kill"},
    "during collect": {"collect@2": "kill"},
    "before the answers' commit": {"commit": True},
}


RESUMED_ROUNDS_REFUSED = ("before publish", "before the answers' commit")


@pytest.mark.parametrize("kind", ["groups", "fka", "adaptive"])
@pytest.mark.parametrize("point", list(POINTS))
def test_a_run_killed_at_any_point_is_resumed_buying_nothing_twice(tmp_path, shared_tmp, kind, point):
    expected, clean = uninterrupted(kind, shared_tmp)
    path = tmp_path / "killed.duckdb"
    make_db(path)
    child = run_child(path, POINTS[point], QUERIES[kind])
    assert child.returncode == -9, child.stderr[-3000:]  # SIGKILLed, at that point
    crowd = DiskCrowd(path.with_suffix(".crowd.json"))
    if kind == "groups" and point in RESUMED_ROUNDS_REFUSED:
        # the rerun would post the knock-out round itself: a new release showing a subset of the killed run's rows,
        # which a worker could tell apart from the rest of their classes (issue 15's guard refuses it; widening the
        # round to whole classes would let it complete). Nothing is bought by the refused rerun.
        posted = list(crowd.snapshot()["received"])
        with crowddb.connect(path, platform=crowd, progress=False) as db:
            with pytest.raises(crowddb.errors.PrivacyError, match="k-anonymity of run:1"):
                db.sql(QUERIES[kind]).df()
            check_platform_agrees(db, crowd)  # what was posted is on record, collected and paid once
        assert list(crowd.snapshot()["received"]) == posted  # the refused rerun posted nothing
        return
    with crowddb.connect(path, platform=crowd, progress=False) as db:
        got = db.sql(QUERIES[kind]).df()
        figures = check_platform_agrees(db, crowd)
        runs = db.sql("SELECT status, hits FROM crowddb_runs ORDER BY run_id").fetchall()
    pd.testing.assert_frame_equal(got, expected)
    # each HIT reached the platform once; in all, exactly what the uninterrupted run paid
    assert figures["cost"] == clean["cost"] and figures["paid"] == clean["paid"], (figures, clean)
    assert figures["posted"] == len(set(crowd.snapshot()["received"]))
    assert runs[0][0] == "interrupted" and runs[-1][0] == "completed", runs  # the killed run says what it became


def test_a_platform_failure_mid_run_is_resumed_buying_nothing_twice(tmp_path, shared_tmp):
    """In-process: the knock-out round's collect fails; the rerun collects that round, buys nothing again."""
    expected, clean = uninterrupted("groups", shared_tmp)
    path = tmp_path / "failed.duckdb"
    make_db(path)
    state = path.with_suffix(".crowd.json")
    with crowddb.connect(path, platform=DiskCrowd(state, faults={"collect@2": "raise"}), progress=False) as db:
        with pytest.raises(PlatformError, match="marketplace down"):
            db.sql(GROUPS).df()
        assert money(db)["status"].get("published", 0) > 0
        crowd = DiskCrowd(state)
        db.platform = crowd  # the outage is over
        got = db.sql(GROUPS).df()
        figures = check_platform_agrees(db, crowd)
        assert [s for s, in db.sql("SELECT status FROM crowddb_runs ORDER BY run_id").fetchall()] == \
            ["failed", "completed"]
    pd.testing.assert_frame_equal(got, expected)
    assert figures["cost"] == clean["cost"]


def test_a_publish_that_fails_before_the_platform_got_anything_leaves_no_record(tmp_path):
    path = tmp_path / "nopost.duckdb"
    make_db(path)
    state = path.with_suffix(".crowd.json")
    with crowddb.connect(path, platform=DiskCrowd(state, faults={"publish_before": "raise"}), progress=False) as db:
        with pytest.raises(PlatformError):
            db.sql(FKA).df()
        assert money(db)["status"] == {}
        assert db.sql("SELECT count(*) FROM crowddb_runs").fetchall() == [(0,)]


@pytest.mark.parametrize("query, seed", [(GROUPS, None), (FKA, None), (GROUPS, 11), (FKA, 11)],
                         ids=["groups", "fka", "groups-connection-seed", "fka-connection-seed"])
def test_a_rerun_without_seed_is_served_from_the_cache(query, seed):
    # no seed := (without any seed the simulated crowd answers at random): a group's split into items and FKA's
    # samples are functions of the data (and of the connection's seed), so the rerun finds every item bought
    with crowddb.connect(seed=seed, progress=False) as db:
        load(db)
        first = db.sql(query).df()
        paid = money(db)
        second = db.sql(query).df()
        assert money(db) == paid
        runs = db.sql("SELECT hits, cost, status FROM crowddb_runs ORDER BY run_id").fetchall()
    assert runs[0][0] > 1 and float(runs[0][1]) > 0
    assert runs[1][:2] == (0, 0) and runs[1][2] == "completed"  # $0 the second time
    pd.testing.assert_frame_equal(first, second)


def test_two_threads_on_one_file_never_share_a_run_id(tmp_path):
    path = tmp_path / "threads.duckdb"
    make_db(path)
    crowd = DiskCrowd(path.with_suffix(".crowd.json"), faults={"publish_after": "sleep:0.05"})
    with crowddb.connect(path, platform=crowd, progress=False) as db:
        db.sql("CREATE TABLE people2 AS SELECT * FROM people")
        db.declare_roles("people2", quasi_identifiers=["age", "zip"], sensitive=["salary"], ground_truth="job",
                         key="id")
    errors, queries = [], [f"SELECT id, getposition(age, zip, edu, tuples_per_hit := {n}) FROM {t}"
                           for t in ("people", "people2") for n in (7, 11)]

    def work(con, query):
        try:
            con.sql(query).df()
        except Exception as err:  # noqa: BLE001 - any failure of a thread is reported below
            errors.append(err)

    cons = [crowddb.connect(path, platform=crowd, progress=False) for _ in queries]
    try:
        threads = [threading.Thread(target=work, args=(c, q)) for c, q in zip(cons, queries)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        runs = cons[0].sql("SELECT run_id, status FROM crowddb_runs ORDER BY run_id").fetchall()
        assert len(runs) == 4 and {s for _, s in runs} == {"completed"}
        check_platform_agrees(cons[0], crowd)
    finally:
        for c in cons:
            c.close()


PROCESS = textwrap.dedent("""
    import sys, time
    import crowddb
    from crowddb.errors import CrowdDBError
    from fault_platform import DiskCrowd

    path, queries = sys.argv[1], sys.argv[2:]
    crowd = DiskCrowd(path.replace(".duckdb", ".crowd.json"))
    for query in queries:
        for attempt in range(600):  # DuckDB lets one process at a time hold the file: wait for the other
            try:
                db = crowddb.connect(path, platform=crowd, progress=False)
                break
            except CrowdDBError:
                time.sleep(0.05)
        with db:
            db.sql(query).df()
    print("done")
""")


def test_two_processes_on_one_file_never_share_a_run_id(tmp_path):
    path = tmp_path / "procs.duckdb"
    make_db(path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-c", PROCESS, str(path),
                               *[f"SELECT id, getposition(age, zip, edu, tuples_per_hit := {n}) FROM people"
                                 for n in ns]], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for ns in ((5, 7), (6, 9))]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    crowd = DiskCrowd(path.with_suffix(".crowd.json"))
    with crowddb.connect(path, platform=crowd, progress=False) as db:
        runs = db.sql("SELECT run_id, status FROM crowddb_runs ORDER BY run_id").fetchall()
        assert [s for _, s in runs] == ["completed"] * 4 and len({r for r, _ in runs}) == 4
        check_platform_agrees(db, crowd)


def test_a_run_whose_process_died_is_marked_interrupted_by_a_later_connection(tmp_path):
    path = tmp_path / "reaped.duckdb"
    make_db(path)
    child = run_child(path, {"collect": "kill"}, FKA)
    assert child.returncode == -9
    with duckdb.connect(str(path)) as raw:  # as the killed process left it
        assert raw.execute("SELECT status FROM crowddb_runs").fetchall() == [("running",)]
    with crowddb.connect(path, platform=DiskCrowd(path.with_suffix(".crowd.json")), progress=False) as db:
        first = db.sql("SELECT status, hits, cost FROM crowddb_runs WHERE run_id = 1").fetchall()[0]
        assert first == ("interrupted", 0, 0)  # killed in its first collect: nothing of it was paid yet
        assert db.sql("SELECT status, count(*) FROM crowddb_hits WHERE run_id = 1 GROUP BY status").fetchall() == \
            [("published", 1)]  # but its HIT is on record, to be collected
        db.sql(FKA).df()  # the rerun collects it: the interrupted run's row says what became of it
        first = db.sql("SELECT status, hits, cost FROM crowddb_runs WHERE run_id = 1").fetchall()[0]
        assert first[:2] == ("interrupted", 1) and float(first[2]) == pytest.approx(1.30)


def test_two_threads_logging_releases_on_one_file_never_share_a_release_id(tmp_path):
    path = tmp_path / "releases.duckdb"
    make_db(path)
    errors = []

    def work(db):
        try:
            for _ in range(6):
                db.sql("SELECT count(*) FROM ANONYMIZE(people, k := 5)").fetchall()
        except Exception as err:  # noqa: BLE001 - any failure of a thread is reported below
            errors.append(err)

    connections = [crowddb.connect(path, progress=False) for _ in range(2)]  # one database, two connections
    try:
        threads = [threading.Thread(target=work, args=(db,)) for db in connections]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        ids = [r for r, in connections[0].sql("SELECT release_id FROM crowddb_releases").fetchall()]
    finally:
        for db in connections:
            db.close()
    assert sorted(ids) == list(range(1, 13))
