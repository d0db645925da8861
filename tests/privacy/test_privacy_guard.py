"""Issue 15: the guard of k-anonymity across releases (crowddb/store/composition.py), release by release.

The adversary test (test_privacy_composition.py) runs 30 random sequences through an independent checker; these
tests pin the guard's decisions and its ledger one case at a time: what is refused, that a refusal publishes and pays
nothing, what is accepted, and that the ledger says exactly what workers saw.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import RecordingCrowd, people_frame

import crowddb
from crowddb.errors import PrivacyError
from crowddb.privacy.tracing import ROW_REF, traced
from crowddb.store.composition import BOX_SEPARATOR

ROLES = {"quasi_identifiers": ["age", "sex", "zip"], "sensitive": ["salary"], "ground_truth": "job", "key": "id"}
# subsets of the people by their place in the table (ids 1..120 in order): rows are never chosen by the key (issue 24)
FIRST_60 = "(SELECT * FROM people LIMIT 60) people"
AFTER_60 = "(SELECT * FROM people OFFSET 60) people"
AFTER_30 = "(SELECT * FROM people OFFSET 30) people"
OTHER = "['teacher', 'driver', 'clerk', 'nurse']"  # another answer domain: another question, nothing on record


@pytest.fixture
def db():
    with crowddb.connect(platform=RecordingCrowd(qualities=np.ones(10), seed=1), seed=3, progress=False) as con:
        con.load_frame("people", people_frame(120), **ROLES)
        yield con


def state(db) -> dict:
    """What was published and paid, and what the ledger holds."""
    one = lambda q: db.sql(q).fetchall()
    return {"hits": one("SELECT count(*) FROM crowddb_hits"), "items": one("SELECT count(*) FROM crowddb_hit_items"),
            "paid": one("SELECT count(*), coalesce(sum(reward), 0) FROM crowddb_payments"),
            "runs": one("SELECT run_id, status FROM crowddb_runs ORDER BY run_id"),
            "ledger": one("SELECT release, count(*) FROM crowddb_published GROUP BY ALL ORDER BY ALL"),
            "posted": len(db.platform.published)}


def by_ref(db, table: str = "people") -> pd.Series:
    """Each row's id by its identity in the ledger: its declared key (id), hashed to a BIGINT as the ledger does."""
    return db.sql(f"SELECT (hash(id) >> 1)::BIGINT AS ref, id FROM {table}").df().set_index("ref")["id"]


def ledger(db, release: str) -> pd.DataFrame:
    return db.sql(f"SELECT row_ref, box, k FROM crowddb_published WHERE release = '{release}' ORDER BY row_ref").df()


# ----------------------------------------------------------------------------------------------------- refusals
def test_a_subset_asked_again_at_a_larger_k_is_served_from_the_record(db):
    """Issue 25: every item of the subset is on record (its rows in their earlier boxes), so nothing is shown again
    and the larger k needs no new release; before, this was refused."""
    first = db.sql("SELECT id, getposition(*, k := 10) AS p FROM people ORDER BY id").df()
    before = state(db)
    assert before["ledger"] == [("run:1", 120)]
    again = db.sql("SELECT id, getposition(*, k := 20) AS p FROM people WHERE age < 40 ORDER BY id").df()
    young = db.sql("SELECT id FROM people WHERE age < 40").df()["id"]
    pd.testing.assert_frame_equal(again, first[first["id"].isin(young)].reset_index(drop=True))
    after = state(db)
    assert (after["paid"], after["ledger"], after["posted"]) == (before["paid"], before["ledger"], before["posted"])


def test_nested_partitions_are_accepted_with_the_smaller_k_promised(db):
    """Mondrian's k=20 classes over the same rows are unions of its k=5 classes (the same median cuts, stopped
    earlier), so a worker who intersects them learns the k=5 classes: at least 5 rows, the smaller k promised."""
    db.sql("SELECT id, getposition(*, k := 5) FROM people").df()
    db.sql(f"SELECT id, getposition(*, k := 20, domain := {OTHER}) FROM people").df()  # another question
    fine, coarse = ledger(db, "run:1"), ledger(db, "run:2")
    pairs = fine.merge(coarse, on="row_ref", suffixes=("_5", "_20"))
    assert len(pairs) == 120
    assert pairs.groupby("box_5")["box_20"].nunique().max() == 1  # each k=5 box lies in one k=20 box
    assert pairs.groupby("box_5").size().min() >= 5 and pairs.groupby("box_20").size().min() >= 20


def test_another_question_about_a_subset_with_a_larger_k_keeps_the_earlier_classes_whole(db):
    """A subset of the rows with a larger k and another question: generalized anew, its boxes would cross the first
    release's and the rows it leaves out of each earlier class would be told apart, so (issue 25) the earlier classes
    it touches are shown whole, merged until each holds k; before, this was refused."""
    db.sql("SELECT id, getposition(*, k := 10) FROM people").df()
    out = db.sql(f"SELECT id, getposition(*, k := 20, domain := {OTHER}) AS p FROM {AFTER_30}").df()
    assert len(out) == 90 and out["p"].notna().all()
    second = ledger(db, "run:2")
    assert len(second) >= 90 and second.groupby("box").size().min() >= 20


def test_a_subset_is_shown_in_its_earlier_boxes_and_served_from_the_answers_on_record(db):
    """The table's persisted partition: rows shown before are shown in the same boxes again, so the same question
    about a subset of them is the same items, bought already: nothing is published, nothing refused."""
    first = db.sql("SELECT id, getposition(*, k := 10) AS p FROM people ORDER BY id").df()
    before = state(db)
    plan = db.explain(f"SELECT id, getposition(*, k := 10) AS p FROM {AFTER_30} WHERE age < 50 ORDER BY id")
    assert "every row was shown before: in the boxes of run:1 again" in str(plan) and plan.hits == 0
    again = db.sql(f"SELECT id, getposition(*, k := 10) AS p FROM {AFTER_30} WHERE age < 50 ORDER BY id").df()
    expected = first[(first["id"] > 30) & first["id"].isin(db.sql("SELECT id FROM people WHERE age < 50").df()["id"])]
    pd.testing.assert_frame_equal(again, expected.reset_index(drop=True))
    assert state(db)["posted"] == before["posted"] and state(db)["ledger"] == before["ledger"]
    # another operator over the subset: new items, shown with the rest of each earlier class it touches (issue 25)
    db.register_udf({"name": "gethobby", "kind": "tuple", "question": "Hobby?", "domain": ["chess", "golf"]})
    assert len(db.sql(f"SELECT id, gethobby(*, k := 10) FROM {AFTER_30}").df()) == 90
    assert "widened to whole classes" in db.last_plan.operators[0].note


def test_another_method_over_the_same_rows_is_served_in_the_earlier_boxes(db):
    # every row was shown by release:1 at this k: they are shown in its boxes again (Datafly's full-domain cut would
    # cross them), which a worker who saw release:1 learns nothing from; the report says so and why
    first = db.sql("SELECT * FROM ANONYMIZE(people, k := 10, keep_key := true) ORDER BY id").df()
    second = db.sql("SELECT * FROM ANONYMIZE(people, k := 10, method := 'datafly', keep_key := true) ORDER BY id").df()
    report = db.last_report[0]
    assert report["method"] == "served"
    assert report["served"] == "every row was shown before: in the boxes of release:1 again"
    assert report["served_because"] == "every row was shown before over these quasi-identifiers at this k or more"
    pd.testing.assert_frame_equal(first, second)
    assert db.sql("SELECT release, repeats FROM crowddb_ledger ORDER BY release").fetchall() == [
        ("release:1", None), ("release:2", "release:1")]


# ----------------------------------------------------------------------------------------------------- accepted
def test_a_rerun_is_served_from_the_answers_on_record(db):
    first = db.sql("SELECT id, getposition(*, k := 10) AS p FROM people ORDER BY id").df()
    posted = state(db)["posted"]
    again = db.sql("SELECT id, getposition(*, k := 10) AS p FROM people ORDER BY id").df()  # no seed := either
    pd.testing.assert_frame_equal(first, again)
    assert state(db)["posted"] == posted
    assert state(db)["ledger"] == [("run:1", 120)]


def test_rows_no_release_showed_may_be_released_on_their_own(db):
    db.sql(f"SELECT id, getposition(*, k := 10) FROM {FIRST_60}").df()
    db.sql(f"SELECT id, getposition(*, k := 10) FROM {AFTER_60}").df()
    assert state(db)["ledger"] == [("run:1", 60), ("run:2", 60)]
    assert sorted(by_ref(db)[ledger(db, "run:2")["row_ref"]]) == list(range(61, 121))


def test_anonymize_with_the_crowd_run_s_partition_is_accepted(db):
    """Mondrian is deterministic: ANONYMIZE over the same rows with the same k prints the same boxes."""
    db.sql("SELECT id, getposition(*, k := 10) FROM people").df()
    db.sql("SELECT * FROM ANONYMIZE(people, k := 10)").fetchall()
    (release,), = db.sql("SELECT release_id FROM crowddb_releases WHERE run_id IS NULL").fetchall()
    assert db.sql(f"SELECT repeats FROM crowddb_ledger WHERE release = 'release:{release}'").fetchall() == [("run:1",)]


def test_rows_inserted_later_are_released_on_their_own(db):
    db.sql("SELECT id, getposition(*, k := 10) FROM people").df()
    db.sql("INSERT INTO people SELECT id + 1000 AS id, * EXCLUDE (id) FROM people WHERE id <= 40")  # roles follow
    db.sql("SELECT id, getposition(*, k := 10) FROM (SELECT * FROM people OFFSET 120) people").df()  # only new rows
    assert state(db)["ledger"] == [("run:1", 120), ("run:2", 40)]
    before = state(db)
    # all rows again: each in the box it was shown in (the old ones run 1's, the new ones run 2's), all served from
    # the answers on record (tests/privacy/test_privacy_inserts.py: the new rows of a query over old and new rows)
    db.sql("SELECT id, getposition(*, k := 10) FROM people").df()
    after = state(db)
    assert after.pop("runs") == [*before.pop("runs"), (3, "completed")] and after == before


# -------------------------------------------------------------------------------------- the ledger is the truth
def test_the_ledger_holds_exactly_the_boxes_workers_saw(db):
    """An independent reading: every published item's QI texts (crowddb_hit_items, what the platform got) against
    the ledger's boxes, row by row (the simulated crowd's items carry the row's position in the input)."""
    db.sql("SELECT id, getposition(*, k := 10) FROM people WHERE sex = 'F'").df()
    seen = []
    for batch in db.platform.published:
        seen += [BOX_SEPARATOR.join(str(item[q]) for q in sorted(ROLES["quasi_identifiers"]))
                 for item in batch.to_dict("records")]
    contents = [json.loads(c) for (c,) in db.sql("SELECT content FROM crowddb_hit_items").fetchall()]
    on_record = [BOX_SEPARATOR.join(str(c[q]) for q in sorted(ROLES["quasi_identifiers"])) for c in contents]
    boxes = ledger(db, "run:1")
    assert sorted(seen) == sorted(on_record) == sorted(boxes["box"])
    women = db.sql("SELECT id FROM people WHERE sex = 'F' ORDER BY id").fetchall()
    assert sorted(by_ref(db)[boxes["row_ref"]]) == [r for (r,) in women]
    assert set(boxes["k"]) == {10}
    sizes = boxes.groupby("box").size()
    assert sizes.min() >= 10  # each box names at least k of the rows published with it


def test_the_ledger_survives_reopening_and_still_guards(tmp_path):
    path = tmp_path / "guard.duckdb"
    with crowddb.connect(path, seed=3, progress=False) as db:
        db.load_frame("people", people_frame(120), **ROLES)
        db.sql("SELECT id, getposition(*, k := 10) FROM people").df()
    with crowddb.connect(path, seed=3, progress=False) as db:
        assert db.sql("SELECT count(*) FROM crowddb_published").fetchall() == [(120,)]
        plan = db.explain(f"SELECT id, getposition(*, k := 20, domain := {OTHER}) FROM people WHERE age > 30")
        assert "rows shown before (run:1) kept in their joint classes" in plan.operators[0].note


def test_a_run_that_never_reached_the_platform_leaves_the_ledger(db):
    from crowddb.store import Store

    db.sql("SELECT id, getposition(*, k := 5) FROM people").df()
    db.sql(f"SELECT id, getposition(*, k := 20, domain := {OTHER}) FROM people").df()  # k=5 classes merged
    hits = [h for (h,) in db.sql("SELECT hit_id FROM crowddb_hits WHERE run_id = 2").fetchall()]
    assert hits and state(db)["ledger"] == [("run:1", 120), ("run:2", 120)]
    db.con.execute("UPDATE crowddb_hits SET status = 'publishing' WHERE run_id = 2").fetchall()  # killed before publish
    Store(db.con).drop_unposted(hits)
    assert state(db)["ledger"] == [("run:1", 120)]
    kept = {r: (int(h), k) for r, h, k in db.sql("SELECT row_ref, history, k FROM crowddb_row_history").fetchall()}
    assert len(kept) == 120 and kept == _fold(db)  # the histories are folded again without run 2
    last = db.sql("SELECT h.row_ref, l.release, b.box, l.k FROM crowddb_row_history h JOIN crowddb_ledger l "
                  "ON l.release_no = h.last_release_no JOIN crowddb_ledger_boxes b ON b.release_no = h.last_release_no "
                  "AND b.box_id = h.last_box_id ORDER BY h.row_ref").fetchall()
    run1 = db.sql("SELECT row_ref, release, box, k FROM crowddb_published ORDER BY row_ref").fetchall()
    assert last == run1  # each row's newest entry is run 1's again (the persisted partition)


# ------------------------------------------------------------------------------------ rows crowddb cannot trace
def test_a_release_that_cannot_be_tied_to_rows_blocks_the_table(db):
    db.sql("CREATE TABLE hobbies AS SELECT DISTINCT hobby FROM people")
    db.sql("SELECT p.id, getposition(p.*, k := 10) FROM people p JOIN hobbies h USING (hobby)").df()  # traced: p
    assert state(db)["ledger"] == [("run:1", 120)]
    with pytest.raises(PrivacyError, match=r"cannot be tied to the rows of 'people' \(its quasi-identifiers come"):
        db.sql("SELECT * FROM ANONYMIZE((SELECT sex, zip, max(age) AS age FROM people GROUP BY ALL), k := 2, "
               "quasi_identifiers := ['age', 'sex', 'zip'])").fetchall()


def test_an_untraceable_first_release_blocks_later_ones(db):
    db.sql("SELECT * FROM ANONYMIZE((SELECT sex, zip, max(age) AS age FROM people GROUP BY ALL), k := 2, "
           "quasi_identifiers := ['age', 'sex', 'zip'])").fetchall()
    assert db.sql("SELECT release, table_name, k, traceable FROM crowddb_ledger").fetchall() == [
        ("release:1", "people", 2, False)]
    assert db.sql("SELECT count(*) FROM crowddb_published").fetchall() == [(0,)]
    with pytest.raises(PrivacyError, match=r"earlier release \(release:1\) whose rows crowddb could not tie"):
        db.sql("SELECT id, getposition(*, k := 10) FROM people").df()


# ---------------------------------------------------------------------------------------------- tracing rows
@pytest.mark.parametrize("query, table", [
    ("SELECT * FROM people", "people"),
    ("SELECT id, age FROM people p WHERE age > 30 ORDER BY age LIMIT 7", "people"),
    ("SELECT * FROM (SELECT * FROM people WHERE sex = 'F') s", "people"),
    ("WITH a AS (SELECT * FROM people), b AS (SELECT id, zip FROM a WHERE zip <> '10001') SELECT * FROM b", "people"),
    ("SELECT * FROM older", "people"),  # a view over a view
    ("SELECT p.id FROM people p JOIN people q USING (id)", None),
    ("SELECT sex, count(*) FROM people GROUP BY sex", None),
    ("SELECT DISTINCT zip FROM people", None),
    ("SELECT id, rank() OVER (ORDER BY age) FROM people", None),
    ("SELECT id FROM people WHERE age < 30 UNION ALL SELECT id FROM people WHERE age > 50", "people"),  # issue 25
    ("SELECT id FROM people UNION SELECT id FROM people", None),
    ("WITH RECURSIVE r AS (SELECT 1 AS x UNION ALL SELECT x + 1 FROM r WHERE x < 3) SELECT * FROM r", None),
])
def test_traced_gives_each_row_its_base_identity_and_leaves_the_rows_alone(db, query, table):
    db.sql("CREATE VIEW adults AS SELECT * FROM people WHERE age >= 18")
    db.sql("CREATE VIEW older AS SELECT id, age, zip FROM adults WHERE age > 40")
    import sqlglot

    tree = sqlglot.parse_one(query, read="duckdb")
    with_refs, got = traced(db.con, tree)
    assert got == table
    if table is None:
        assert with_refs is tree
        return
    plain = db.con.execute(query).df()
    traced_rows = db.con.execute(with_refs.sql("duckdb")).df()
    pd.testing.assert_frame_equal(traced_rows.drop(columns=[ROW_REF]), plain)
    if "id" in plain:  # each row's identity is the base row it is (its id says so)
        assert by_ref(db)[traced_rows[ROW_REF]].tolist() == traced_rows["id"].tolist()
    else:
        assert set(traced_rows[ROW_REF]) <= set(by_ref(db).index)


def test_a_cte_named_like_a_view_is_traced_as_the_cte(db):
    db.sql("CREATE VIEW few AS SELECT * FROM people WHERE id <= 3")
    import sqlglot

    query = "WITH few AS (SELECT * FROM people) SELECT id FROM few"
    with_refs, table = traced(db.con, sqlglot.parse_one(query, read="duckdb"))
    assert table == "people"
    assert len(db.con.execute(with_refs.sql("duckdb")).fetchall()) == 120


def test_a_table_without_a_key_ties_rows_by_rowid_and_a_duplicate_key_is_refused(db):
    # (DataFrames: a copy of people in SQL would share people's ledger, and be refused without its key)
    db.load_frame("nokey", people_frame(120).drop(columns="id"), quasi_identifiers=["age", "sex", "zip"],
                  sensitive=["salary"], ground_truth="job")
    db.sql("SELECT getposition(*, k := 10) FROM nokey").df()
    assert sorted(ledger(db, "run:1")["row_ref"]) == list(range(120))
    frame = people_frame(120)
    db.load_frame("twice", pd.concat([frame, frame[frame["id"] == 7]], ignore_index=True), **ROLES)
    with pytest.raises(PrivacyError, match="rows share a key value"):
        db.sql("SELECT id, getposition(*, k := 10) FROM twice").df()
    with pytest.raises(PrivacyError, match="rows share a key value"):
        db.sql("SELECT * FROM ANONYMIZE(twice, k := 10)").fetchall()


def test_explain_says_a_query_would_be_refused_and_records_nothing(db):
    db.sql("SELECT id, getposition(*, k := 10) FROM people").df()
    before = state(db)
    # a join's rows cannot be tied to the table's: no safe release exists while the table has one on record
    plan = db.explain("SELECT p.id, getposition(p.*, k := 10) FROM people p JOIN people q ON p.zip = q.zip")
    assert "would be refused: " in str(plan)
    assert "would be refused" not in str(db.explain("SELECT id, getposition(*, k := 10) FROM people"))  # a rerun
    assert state(db) == before


def _fold(db) -> dict:
    """Each row's history computed here from the ledger: XOR of the 128-bit md5 of 'release', chr(31), 'box'."""
    import hashlib

    out: dict = {}
    for release, row, box, k in db.sql("SELECT release, row_ref, box, k FROM crowddb_published "
                                       ).fetchall():
        digest = int.from_bytes(hashlib.md5(f"{release}\x1f{box}".encode()).digest(), "little")
        h, smallest = out.get(row, (0, k))
        out[row] = (h ^ digest, min(smallest, k))
    return out


def test_each_row_s_history_is_the_fold_of_its_ledger_entries(db):
    db.sql("SELECT id, getposition(*, k := 5) FROM people").df()
    db.sql("SELECT id, getposition(*, k := 20) FROM people").df()
    db.sql("SELECT * FROM ANONYMIZE(people, k := 5)").fetchall()
    kept = {r: (int(h), k) for r, h, k in db.sql("SELECT row_ref, history, k FROM crowddb_histories").fetchall()}
    assert len(kept) == 120 and kept == _fold(db)
    assert {k for _, k in kept.values()} == {5}


def _histories(db, source: str) -> dict:
    return {r: (int(h), k, n, b) for r, h, k, n, b in db.sql(
        f"SELECT row_ref, history, k, last_release_no, last_box_id FROM {source}").fetchall()}


def test_a_table_s_one_release_leaves_its_histories_pending_until_a_second_one_folds_into_them(db):
    """A first release appends its rows alone: their histories are its entries, read through crowddb_histories; the
    next release with rows of its own writes them first and folds its entries in, as if they had been written."""
    db.sql("SELECT id, getposition(*, k := 5) FROM people").df()
    assert _histories(db, "crowddb_row_history") == {}
    assert db.sql("SELECT pending FROM crowddb_ledger_tables").fetchall() == [(True,)]
    first = _histories(db, "crowddb_histories")
    assert {r: v[:2] for r, v in first.items()} == _fold(db) and len(first) == 120
    boxes = dict(db.sql("SELECT row_ref, box_id FROM crowddb_ledger_rows").fetchall())
    assert {r: v[2:] for r, v in first.items()} == {r: (1, b) for r, b in boxes.items()}  # newest: run 1's box
    db.sql(f"SELECT id, getposition(*, k := 20, domain := {OTHER}) FROM people").df()  # k=5 classes merged
    assert db.sql("SELECT pending FROM crowddb_ledger_tables").fetchall() == [(False,)]
    written = _histories(db, "crowddb_row_history")
    assert written == _histories(db, "crowddb_histories") and len(written) == 120
    assert {r: v[:2] for r, v in written.items()} == _fold(db)
    assert {v[2] for v in written.values()} == {2}


def test_a_pending_release_never_posted_leaves_nothing_and_the_next_one_is_pending_again(db):
    from crowddb.store import Store

    db.sql("SELECT id, getposition(*, k := 5) FROM people").df()
    hits = [h for (h,) in db.sql("SELECT hit_id FROM crowddb_hits WHERE run_id = 1").fetchall()]
    db.con.execute("UPDATE crowddb_hits SET status = 'publishing' WHERE run_id = 1").fetchall()  # killed before publish
    Store(db.con).drop_unposted(hits)
    assert db.sql("SELECT count(*) FROM crowddb_ledger").fetchall() == [(0,)]
    assert _histories(db, "crowddb_histories") == {}
    db.sql(f"SELECT id, getposition(*, k := 20, domain := {OTHER}) FROM people").df()
    assert _histories(db, "crowddb_row_history") == {}
    assert {r: v[:2] for r, v in _histories(db, "crowddb_histories").items()} == _fold(db) and len(_fold(db)) == 120


def test_planned_keeps_each_row_once_with_its_first_box():
    from crowddb.store.composition import planned

    by_row = planned(np.array([7, 3, 7, 5]), np.array(["a", "b", "c", "b"], dtype=object))
    pairs = lambda p: [(r, p.boxes.column("box")[b].as_py())
                       for r, b in zip(p.rows.column("row_ref").to_pylist(), p.rows.column("box_id").to_pylist())]
    assert pairs(by_row) == [(7, "a"), (3, "b"), (5, "b")] and len(by_row) == 3
    by_class = planned(np.array([7, 3, 7, 5]), np.array(["a", "b"], dtype=object), np.array([0, 1, 1, 1]))
    assert pairs(by_class) == [(7, "a"), (3, "b"), (5, "b")]
    assert len(planned(np.array([], dtype=np.int64), np.array([], dtype=object))) == 0


def test_the_smallest_joint_class_is_read_from_the_histories(db):
    from crowddb.store.composition import smallest_class

    assert smallest_class(db.con, "people") == (None, 0)
    db.sql("SELECT id, getposition(*, k := 5) FROM people").df()
    db.sql("SELECT id, getposition(*, k := 20) FROM people").df()
    boxes = db.sql("SELECT row_ref, string_agg(box, '|' ORDER BY release) AS h FROM crowddb_published "
                   "GROUP BY row_ref").df().groupby("h").size()  # the joint classes, computed here from the ledger
    assert smallest_class(db.con, "PEOPLE") == (int(boxes.min()), int(boxes.min() * (boxes == boxes.min()).sum()))
    assert boxes.min() >= 5


def test_a_repeat_of_a_release_is_recorded_by_reference(db):
    """The same rows in the same boxes again (ANONYMIZE run twice) show nothing new: on record as a repeat, without
    writing its rows again; a release that differs in one row is judged in full."""
    db.sql("SELECT * FROM ANONYMIZE(people, k := 10)").fetchall()
    db.sql("SELECT * FROM ANONYMIZE(people, k := 10, seed := 5)").fetchall()  # another shuffle, the same boxes
    assert db.sql("SELECT release, repeats FROM crowddb_ledger ORDER BY release").fetchall() == [
        ("release:1", None), ("release:2", "release:1")]
    assert state(db)["ledger"] == [("release:1", 120)]
    # all rows but one (issue 25): the one left out would be told apart, so its class is released whole
    widened = db.sql("SELECT * FROM ANONYMIZE((SELECT * FROM people WHERE id > 1), k := 10)").df()
    assert len(widened) == 120 and db.last_plan.reports[0]["widened"] == 1


def test_two_connections_racing_crossing_releases_never_both_publish(tmp_path):
    """Check and record are one transaction, retried when another connection's release of the same rows commits
    first: of two crossing releases started together, one is refused, and the ledger keeps the promise."""
    import threading

    path = tmp_path / "race.duckdb"
    with crowddb.connect(path, seed=3, progress=False) as db:
        db.load_frame("people", people_frame(120), **ROLES)
    outcomes: list = []
    start = threading.Barrier(2)

    def work(con, where):
        start.wait()
        try:
            con.sql(f"SELECT id, getposition(*, k := 10) FROM {where}").df()
            outcomes.append("published")
        except PrivacyError:
            outcomes.append("refused")

    cons = [crowddb.connect(path, seed=3, progress=False) for _ in range(2)]
    try:
        threads = [threading.Thread(target=work, args=(c, w)) for c, w in zip(cons, [
            "(SELECT * FROM people LIMIT 80) people", "(SELECT * FROM people OFFSET 40) people"])]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == ["published", "refused"]
        histories = cons[0].sql("SELECT row_ref, string_agg(release || box, '|' ORDER BY release) AS h "
                                "FROM crowddb_published GROUP BY row_ref").df()
        assert histories.groupby("h").size().min() >= 10
    finally:
        for c in cons:
            c.close()


@pytest.mark.parametrize("statement", [
    "DELETE FROM crowddb_published", "UPDATE crowddb_row_history SET k = 1", "DROP TABLE crowddb_ledger",
    "CREATE OR REPLACE VIEW crowddb_histories AS SELECT * FROM crowddb_row_history",
    "UPDATE crowddb_ledger_tables SET pending = false",
    "INSERT INTO crowddb_ledger VALUES ('run:9', 'people', 2, true, NULL, NULL, NULL, now())"])
def test_plain_sql_cannot_rewrite_the_ledger(db, statement):
    db.sql("SELECT id, getposition(*, k := 10) FROM people").df()
    before = state(db)
    with pytest.raises(PrivacyError, match="written only by crowddb"):
        db.sql(statement)
    assert state(db) == before
    assert db.sql("SELECT count(*) FROM crowddb_published").fetchall() == [(120,)]  # reading is fine


def test_the_privacy_report_lists_the_k_anonymous_releases_and_the_smallest_joint_class(db):
    db.sql("SELECT id, getposition(*, k := 5) FROM people").df()
    db.sql(f"SELECT id, getposition(*, k := 20, domain := {OTHER}) FROM people").df()  # k=5 classes merged
    db.sql("SELECT * FROM ANONYMIZE(people, k := 20)").fetchall()  # run 2's partition again: a repeat
    report = db.privacy_report("people")
    kanon = report[report["kind"] == "k-anonymity"]
    got = kanon[["ledger_release", "k", "rows", "repeats"]].astype(object)
    assert got.where(got.notna(), None).values.tolist() == [
        ["run:1", 5, 120, None], ["run:2", 20, 120, None], ["release:3", 20, 120, "run:2"]]
    from crowddb.store.composition import smallest_class

    assert report["smallest_joint_class"].tolist() == [smallest_class(db.con, "people")[0]] * 3
    assert smallest_class(db.con, "people")[0] >= 5


def test_the_ledger_still_names_the_same_rows_after_deletes_and_a_checkpoint(tmp_path):
    """A checkpoint after deletes renumbers DuckDB's rowids; the ledger ties rows by their declared key."""
    path = tmp_path / "renumbered.duckdb"
    with crowddb.connect(path, seed=3, progress=False) as db:
        db.sql("CREATE TABLE big AS SELECT range AS id, range % 70 AS age, range % 2 AS sex FROM range(300000)")
        db.declare_roles("big", quasi_identifiers=["age", "sex"], key="id")
        db.sql("SELECT count(*) FROM ANONYMIZE(big, k := 10)").fetchall()
        db.con.execute("CHECKPOINT").fetchall()
        before = db.sql("SELECT rowid FROM big WHERE id = 250000").fetchall()
        db.sql("DELETE FROM big WHERE id < 200000")
        db.con.execute("CHECKPOINT").fetchall()  # compacts the deleted rows: DuckDB renumbers the rest
        assert db.sql("SELECT rowid FROM big WHERE id = 250000").fetchall() != before  # renumbered indeed
        shown = set(db.sql("SELECT row_ref FROM crowddb_published").df()["row_ref"])
        assert set(by_ref(db, "big").index) <= shown  # every row still there is named by the ledger as itself


def test_fka_over_rows_partly_shown_before_keeps_their_boxes_and_anonymizes_only_the_new_ones(db):
    db.sql(f"SELECT id, getposition(*, k := 10) FROM {FIRST_60}").df()
    first = ledger(db, "run:1").set_index("row_ref")["box"]
    items = state(db)["items"][0][0]
    answer = db.sql("SELECT id, getposition(*, k := 10, anonymizer := 'fka') AS p FROM people").df()
    assert answer["p"].notna().sum() == 120
    # the rows shown before are shown in their boxes again: the same items, served from the answers on record, so
    # run:2 publishes only the 60 new rows (and FKA's samples of them), in classes of their own of k each
    new = ledger(db, "run:2").set_index("row_ref")["box"]
    assert sorted(new.index) == sorted(set(by_ref(db).index) - set(first.index))
    assert new.value_counts().min() >= 10
    assert not set(new) & set(first)  # no new row was put in an earlier box
    assert state(db)["items"][0][0] > items + 60  # FKA asked about synthetic samples of the new rows too


def test_has_releases_and_shown_before_read_the_ledger(db):
    from crowddb.store.composition import has_releases, shown_before

    assert not has_releases(db.con, ("people",)) and shown_before(db.con, "people", by_ref(db).index.to_numpy()) == 0
    db.sql(f"SELECT id, getposition(*, k := 10) FROM {FIRST_60}").df()
    assert has_releases(db.con, ("other", "PEOPLE")) and not has_releases(db.con, ("other",))
    refs = by_ref(db)
    shown = refs[refs <= 60].index.to_numpy()
    assert shown_before(db.con, "people", refs.index.to_numpy()) == 60
    assert shown_before(db.con, "people", np.r_[shown[:7], shown[:7]]) == 7  # each row once


def test_a_key_declared_after_releases_is_refused_until_it_is_the_one_they_used(db):
    db.load_frame("nokey", people_frame(), quasi_identifiers=["age", "sex", "zip"], sensitive=["salary"],
                  ground_truth="job")  # (a DataFrame: its rows start a ledger of their own)
    db.sql("SELECT id, getposition(*, k := 10) FROM nokey").df()  # rows told apart by rowid
    db.declare_roles("nokey", quasi_identifiers=["age", "sex", "zip"], sensitive=["salary"], ground_truth="job",
                     key="id")
    db.sql("SELECT id, getposition(*, k := 10) FROM nokey").df()  # the same items again: nothing shown, nothing refused
    with pytest.raises(PrivacyError, match=r"told apart by rowid in its releases on record and by key:id now"):
        db.sql("SELECT id, getposition(*, k := 20) FROM nokey").df()  # new boxes: the ledger would have to follow
