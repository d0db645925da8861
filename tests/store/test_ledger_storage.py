"""Issue 26: the k-anonymity ledger stored as numbers (crowddb_ledger_rows, crowddb_ledger_boxes; crowddb_published a
view over them), and a ledger written before that (text rows in a crowddb_published table) moved into it when its
database opens.

The round trip is checked against the ledger itself: a session's ledger is rewritten by hand into the old layout (as
crowddb 0.x wrote it), the file reopened, and every view and table must read as before; a release after it is judged
against the migrated past exactly as against the original one.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from conftest import RecordingCrowd, people_frame

import crowddb
from crowddb.errors import PrivacyError

ROLES = {"quasi_identifiers": ["age", "sex", "zip"], "sensitive": ["salary"], "ground_truth": "job", "key": "id"}
FIRST_60 = "(SELECT * FROM people LIMIT 60) people"
OTHER = "['teacher', 'driver', 'clerk', 'nurse']"

# what the ledger says, read only through the view and the histories joined to their newest release and box
_LEDGER = "SELECT release, table_name, row_ref, k, box FROM crowddb_published ORDER BY ALL"
_NEWEST = ("SELECT h.table_name, h.row_ref, h.history::VARCHAR, h.k, l.release, b.box FROM crowddb_row_history h "
           "JOIN crowddb_ledger l ON l.release_no = h.last_release_no JOIN crowddb_ledger_boxes b "
           "ON b.release_no = h.last_release_no AND b.box_id = h.last_box_id ORDER BY ALL")
_RELEASES = "SELECT release, table_name, k, traceable, fingerprint, repeats FROM crowddb_ledger ORDER BY ALL"

# crowddb 0.x's layout, rebuilt from the one now (the inverse of composition.migrate, written independently)
_TO_OLD = [
    "CREATE TABLE __old_published AS SELECT release, table_name, row_ref, k, box FROM crowddb_published",
    ("CREATE TABLE __old_last AS SELECT h.table_name, h.row_ref, l.release AS last_release, b.box AS last_box, "
     "l.k AS last_k, l.quasi_identifiers AS last_quasi_identifiers FROM crowddb_row_history h "
     "JOIN crowddb_ledger l ON l.release_no = h.last_release_no JOIN crowddb_ledger_boxes b "
     "ON b.release_no = h.last_release_no AND b.box_id = h.last_box_id"),
    "DROP VIEW crowddb_published",
    ("CREATE TABLE crowddb_published (release VARCHAR NOT NULL, table_name VARCHAR NOT NULL, row_ref BIGINT NOT NULL, "
     "k INTEGER NOT NULL, box VARCHAR NOT NULL)"),
    "INSERT INTO crowddb_published SELECT * FROM __old_published",
    "ALTER TABLE crowddb_row_history DROP COLUMN last_release_no",
    "ALTER TABLE crowddb_row_history DROP COLUMN last_box_id",
    *(f"ALTER TABLE crowddb_row_history ADD COLUMN {c} {t}" for c, t in (
        ("last_release", "VARCHAR"), ("last_box", "VARCHAR"), ("last_k", "INTEGER"),
        ("last_quasi_identifiers", "VARCHAR"))),
    ("UPDATE crowddb_row_history AS h SET last_release = o.last_release, last_box = o.last_box, last_k = o.last_k, "
     "last_quasi_identifiers = o.last_quasi_identifiers FROM __old_last o "
     "WHERE o.table_name = h.table_name AND o.row_ref = h.row_ref"),
    "ALTER TABLE crowddb_ledger DROP COLUMN release_no",
    "DROP TABLE crowddb_ledger_rows", "DROP TABLE crowddb_ledger_boxes", "DROP SEQUENCE crowddb_ledger_numbers",
    "DROP TABLE __old_published", "DROP TABLE __old_last",
]


def _session(path: str):
    return crowddb.connect(path, platform=RecordingCrowd(qualities=np.ones(10), seed=1), seed=3, progress=False)


def _read(db) -> dict:
    return {q: db.sql(q).fetchall() for q in (_LEDGER, _NEWEST, _RELEASES)}


def test_the_ledger_is_stored_as_numbers():
    with _session(":memory:") as db:
        db.load_frame("people", people_frame(120), **ROLES)
        db.sql("SELECT id, getposition(*, k := 10) FROM people").df()
        boxes = db.sql("SELECT count(DISTINCT box) FROM crowddb_published").fetchall()[0][0]
        assert db.sql("SELECT count(*), count(DISTINCT row_ref) FROM crowddb_ledger_rows").fetchall() == [(120, 120)]
        assert db.sql("SELECT count(*) FROM crowddb_ledger_boxes").fetchall() == [(boxes,)]  # one row per box
        types = dict(db.sql("SELECT column_name, data_type FROM information_schema.columns "
                            "WHERE table_name = 'crowddb_ledger_rows'").fetchall())
        assert types == {"release_no": "INTEGER", "row_ref": "BIGINT", "box_id": "INTEGER"}
        assert db.sql("SELECT table_type FROM information_schema.tables WHERE table_name = 'crowddb_published'"
                      ).fetchall() == [("VIEW",)]
        with pytest.raises(PrivacyError, match="written only by crowddb"):
            db.sql("DELETE FROM crowddb_ledger_rows")


def test_a_ledger_in_the_old_layout_is_moved_when_the_database_opens(tmp_path):
    old, kept = str(tmp_path / "old.duckdb"), str(tmp_path / "kept.duckdb")
    with _session(old) as db:
        db.load_frame("people", people_frame(120), **ROLES)
        db.sql(f"SELECT id, getposition(*, k := 5) FROM {FIRST_60}").df()
        db.sql(f"SELECT id, getposition(*, k := 20, domain := {OTHER}) FROM people").df()  # a second release, merged
        db.sql("SELECT * FROM ANONYMIZE(people, k := 10)").df()
        before = _read(db)
    shutil.copy(old, kept)  # the same database, never moved
    with _session(old) as db:
        for statement in _TO_OLD:
            db.con.execute(statement).fetchall()
    with _session(old) as db:  # opened by this version: moved into the new layout
        assert db.sql("SELECT table_type FROM information_schema.tables WHERE table_name = 'crowddb_published'"
                      ).fetchall() == [("VIEW",)]
        assert _read(db) == before
        assert "last_box" not in {c for (c,) in db.sql("SELECT column_name FROM information_schema.columns "
                                                       "WHERE table_name = 'crowddb_row_history'").fetchall()}
        moved = _after(db)
    with _session(kept) as db:
        assert _after(db) == moved  # later releases are judged against the moved past as against the kept one
    assert moved["repeats"] == [("release:6", "run:4")]  # ANONYMIZE at k=10 shows what the k=10 run did: a repeat


def _after(db) -> dict:
    """Releases after the past: served, widened or refused, what they return and what the ledger then holds."""
    out = {}
    for i, query in enumerate([
            ("SELECT id, getposition(*, k := 5, domain := ['a', 'b']) AS p FROM (SELECT * FROM people OFFSET 30) "
            "people ORDER BY id"),
            "SELECT id, getposition(*, k := 10) AS p FROM people ORDER BY id",
            "SELECT * FROM ANONYMIZE(people, k := 10) ORDER BY ALL"]):
        try:
            out[i] = db.sql(query).fetchall()
        except PrivacyError as e:
            out[i] = str(e)
    out["repeats"] = db.sql("SELECT release, repeats FROM crowddb_ledger WHERE repeats IS NOT NULL").fetchall()
    return out | _read(db)


def test_a_history_without_its_newest_release_still_counts_as_shown():
    """A row whose history does not name its newest release (an old ledger's rows from before it kept one) is still a
    row shown before: its box is read from the releases themselves, never taken for a row nobody saw."""
    from crowddb.store import composition

    with _session(":memory:") as db:
        db.load_frame("people", people_frame(120), **ROLES)
        db.sql("SELECT id, getposition(*, k := 10) FROM people").df()
        # the histories written, as an old crowddb wrote a table's first release's (its releases now leave them pending)
        db.con.execute("INSERT INTO crowddb_row_history SELECT * FROM crowddb_histories").fetchall()
        db.con.execute("UPDATE crowddb_ledger_tables SET pending = false").fetchall()
        refs = np.array([r for (r,) in db.sql("SELECT row_ref FROM crowddb_row_history ORDER BY row_ref").fetchall()])
        qis = ROLES["quasi_identifiers"]
        before = composition.recorded(db.con, "people", refs, qis, 10)
        db.con.execute("UPDATE crowddb_row_history SET last_release_no = NULL").fetchall()
        after = composition.recorded(db.con, "people", refs, qis, 10)
    assert before is not None and after is not None
    assert after[0] == before[0] == "run:1" and list(after[1]) == list(before[1])


@pytest.mark.parametrize("rows", [[1, 2, 2, 3], [5, 5], [3, 1, 3], [-2, -2, 7]])
def test_identities_that_repeat_are_refused_in_any_order(rows):
    # (strictly increasing identities are distinct without hashing: repeats side by side must still be found)
    from crowddb.store import composition

    with pytest.raises(PrivacyError, match=r"1 row\(s\) of people come twice"):
        composition.distinct_rows("ANONYMIZE", "people", np.array(rows))
    composition.distinct_rows("ANONYMIZE", "people", np.array(sorted(set(rows))))  # each once: accepted


def test_a_planned_row_shown_twice_keeps_its_first_box_in_any_order():
    from crowddb.store import composition

    for rows, boxes, kept in (([4, 4, 9], ["a", "b", "c"], [(4, "a"), (9, "c")]),
                              ([9, 4, 9], ["a", "b", "c"], [(9, "a"), (4, "b")]),
                              ([1, 2, 3], ["a", "a", "b"], [(1, "a"), (2, "a"), (3, "b")])):
        planned = composition.planned(np.array(rows), np.array(boxes, dtype=object))
        texts = planned.boxes.column("box").to_pylist()
        got = list(zip(planned.rows.column("row_ref").to_pylist(),
                       [texts[i] for i in planned.rows.column("box_id").to_pylist()]))
        assert got == kept
