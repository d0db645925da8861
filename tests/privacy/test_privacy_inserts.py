"""Issue 15: rows inserted later join the table's existing partition, not a new one. A crowd query over rows shown
before and rows inserted since shows the old rows in their earlier boxes again and puts the new rows in classes of
their own (at least k new rows each); fewer than k new rows are refused before anything is published. The
independent checker (composition_checker, reading only what workers saw) finds no row below its k."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from composition_checker import check, releases_from_hit_items
from conftest import people_frame

import crowddb
from crowddb.errors import PrivacyError

K = 5
ROLES = {"quasi_identifiers": ["age", "zip"], "sensitive": ["salary"], "ground_truth": "job", "key": "id",
         "core": ["age", "zip", "token"]}
ASK = f"SELECT id, getposition(age, zip, token, k := {K}) AS job FROM people ORDER BY id"


def frame(n: int, start: int = 0, seed: int = 0) -> pd.DataFrame:
    people = people_frame(n, seed=seed).assign(id=lambda f: f["id"] + start)
    return people.assign(token=[f"T{i:04d}" for i in people["id"]])


def published(db, release: str) -> pd.Series:
    return db.sql("SELECT row_ref, box FROM crowddb_published WHERE release = ? ORDER BY row_ref",
                  params=[release]).df().set_index("row_ref")["box"]


def posted(db) -> int:
    return db.sql("SELECT count(*) FROM crowddb_hits").fetchall()[0][0]


@pytest.fixture
def db():
    crowd = crowddb.crowd.SimulatedCrowd(qualities=np.ones(5), seed=1)
    with crowddb.connect(platform=crowd, seed=3, progress=False) as con:
        con.load_frame("people", frame(80), **ROLES)
        yield con


def insert(db, rows: pd.DataFrame) -> None:
    """New rows come in through a table with the same roles (the roles of what an INSERT reads follow it)."""
    db.load_frame("extra_rows", rows, replace=True, **ROLES)
    db.sql("INSERT INTO people SELECT * FROM extra_rows")


def test_new_rows_join_the_partition_in_classes_of_their_own(db):
    db.sql(ASK).fetchall()
    first = published(db, "run:1")
    insert(db, frame(12, start=1000, seed=9))
    got = db.sql(ASK).df()
    assert len(got) == 92 and got["job"].notna().all()
    assert "12 rows new since: in classes of their own" in db.last_plan.operators[0].note
    # the old rows' items are those of run 1 (the same boxes): served from the answers on record, not shown again;
    # run 2 published the 12 new rows only, in classes of at least k new rows
    new = published(db, "run:2")
    assert len(new) == 12 and not set(new.index) & set(first.index)
    assert new.value_counts().min() >= K
    assert db.sql("SELECT cached_items FROM crowddb_runs WHERE run_id = 2").fetchall() == [(80,)]
    table = pd.concat([frame(80), frame(12, start=1000, seed=9)], ignore_index=True)
    report = check(table, ["age", "zip"], releases_from_hit_items(db.con))
    assert report.violations == []
    # a third query over all rows: every row was shown by run 2, in its boxes again; nothing new is bought
    before = posted(db)
    again = db.sql(ASK).df()
    assert posted(db) == before and again["job"].tolist() == got["job"].tolist()


def test_fewer_than_k_new_rows_are_refused_before_anything_is_published(db):
    db.sql(ASK).fetchall()
    insert(db, frame(K - 2, start=1000, seed=9))
    before = posted(db), db.sql("SELECT count(*) FROM crowddb_published").fetchall()[0][0]
    with pytest.raises(PrivacyError, match=rf"getposition: {K - 2} of its rows were inserted after run:1 showed the "
                                           rf"others, fewer than k={K}.*Nothing was published"):
        db.sql(ASK).fetchall()
    assert (posted(db), db.sql("SELECT count(*) FROM crowddb_published").fetchall()[0][0]) == before
    db.sql(ASK.replace("FROM people", "FROM people WHERE token < 'T1000'")).fetchall()  # leaving them out: accepted


def test_the_persisted_partition_reads_each_rows_newest_fitting_release():
    """composition.recorded straight over a ledger: the newest entry of each row (kept in crowddb_row_history) when
    its release fits the asked quasi-identifiers and k, else the newest release of the row that fits."""
    import duckdb

    from crowddb._resources import catalog_ddl
    from crowddb.store import composition

    con = duckdb.connect()
    con.execute(catalog_ddl()).fetchall()
    rows = np.arange(40, dtype=np.int64)
    wide = np.where(rows < 20, "[0-19]", "[20-39]")
    narrow = np.array([f"[{lo}-{lo + 9}]" for lo in (rows // 10) * 10])
    composition.record(con, "t", "release:1", 20, composition.planned(rows, wide, quasi_identifiers=["age"]))
    composition.record(con, "t", "release:2", 10, composition.planned(rows, narrow, quasi_identifiers=["age"]))
    name, boxes = composition.recorded(con, "t", rows[::-1], ["age"], 10)  # every row's newest release fits
    assert name == "release:2" and boxes.tolist() == narrow[::-1].tolist()
    name, boxes = composition.recorded(con, "t", rows, ["age"], 20)  # release 2's k is too small: release 1
    assert name == "release:1" and boxes.tolist() == wide.tolist()
    assert composition.recorded(con, "t", rows, ["zip"], 10) is None  # other quasi-identifiers: none fits
    name, boxes = composition.recorded(con, "t", np.r_[rows[:3], [99, 98], rows[:1]], ["age"], 10)
    assert name == "release:2" and boxes.tolist() == ["[0-9]"] * 3 + [None, None, "[0-9]"]  # new rows: None
    assert composition.recorded(con, "t", np.array([99]), ["age"], 10) is None  # no row shown before
    # release 3 shows rows 0-9 again in their release-2 box, promising only k=2 (a whole class: accepted)
    composition.record(con, "t", "release:3", 2, composition.planned(rows[:10], narrow[:10],
                                                                       quasi_identifiers=["age"]))
    name, boxes = composition.recorded(con, "t", rows[:12], ["age"], 10)  # rows 0-9: release 3 is k 2, so release 2
    assert name == "release:2" and boxes.tolist() == narrow[:12].tolist()
    name, boxes = composition.recorded(con, "t", rows[:12], ["age"], 2)
    assert name == "release:2, release:3" and boxes.tolist() == narrow[:12].tolist()
