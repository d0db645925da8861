"""Issue 16: gold questions. ``gold := share`` puts ceil(share × N) copies of items whose answer the ground-truth
column knows into each HIT of N items; they show exactly what the copied item shows (nothing new is published),
the platform gets their answers (``HitBatch.gold``) to score its workers, and their answers are never taken for
the items' answers or cached. ``gold_drop := true`` leaves out the answers of workers the platform stopped."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from conftest import people_frame

import crowddb
from crowddb.crowd import SimulatedCrowd
from crowddb.errors import ArgumentError

QUERY = ("SELECT id, getposition(age, zip, edu, k := 4, tuples_per_hit := 10, assignments := 2, gold := 0.2) "
         "AS job FROM people ORDER BY id")


class GoldCrowd(SimulatedCrowd):
    """Keeps what each batch carried; reports the workers in ``stopped`` as blocked (as the web crowd does for a
    worker who failed its gold questions)."""

    def __init__(self, stopped=(), **kw):
        super().__init__(**kw)
        self.batches = []
        self.stopped = set(stopped)

    def publish(self, batch, *, knowledge=None):
        self.batches.append(batch)
        super().publish(batch, knowledge=knowledge)

    def workers(self):
        workers = super().workers()
        return workers.assign(blocked=workers["worker_id"].isin(self.stopped))


def people(db, n=45, qis=("age", "zip")):
    db.load_frame("people", people_frame(n), quasi_identifiers=list(qis), sensitive=["salary"], ground_truth="job",
                  key="id")


def test_each_hit_carries_copies_of_its_batch_items_with_their_true_answers():
    crowd = GoldCrowd(qualities=np.ones(4), seed=1)
    with crowddb.connect(platform=crowd, seed=5, progress=False) as db:
        people(db)
        got = db.sql(QUERY).df()
        assert got["id"].tolist() == list(range(1, 46)) and got["job"].notna().all()
        items = db.sql("SELECT hit_id, item_no, item_key || '/' || occurrence AS item_key, content, gold "
                       "FROM crowddb_hit_items "
                       "ORDER BY hit_id, item_no").df()
        answers = db.sql("SELECT hit_id, item_no FROM crowddb_answers").df()
    (batch,) = crowd.batches
    real = items[items["gold"].isna()]
    gold = items[items["gold"].notna()]
    per_hit = real.groupby("hit_id").size()
    assert per_hit.tolist() == [10, 10, 10, 10, 5]  # 45 rows, 10 per HIT
    assert gold.groupby("hit_id").size().tolist() == [math.ceil(0.2 * n) for n in per_hit]  # [2, 2, 2, 2, 1]
    # the gold questions are numbered after the HIT's own items and are copies of items of other HITs
    for hit_id, g in gold.groupby("hit_id"):
        assert g["item_no"].min() == per_hit[hit_id] + 1
        copied = real[real["item_key"].isin(g["item_key"])]
        assert len(copied) == len(g) and (copied["hit_id"] != hit_id).all()
        assert set(g["content"]) == set(copied["content"])  # shows exactly what the copied item shows
    # the platform got exactly the answers on record (the next test ties them to the people's jobs)
    frame = people_frame(45)
    platform_gold = batch.gold.merge(gold[["hit_id", "item_no", "gold"]], on=["hit_id", "item_no"])
    assert len(platform_gold) == len(gold) and (platform_gold["answer"] == platform_gold["gold"]).all()
    assert set(gold["gold"]) <= set(frame["job"])
    # no answer to a gold question is on record as an item's answer (nor cached)
    on_gold = answers.merge(gold[["hit_id", "item_no"]], on=["hit_id", "item_no"])
    assert len(on_gold) == 0
    assert len(answers) == 45 * 2


def test_gold_answers_are_the_copied_rows_ground_truth():
    """Without quasi-identifiers every item is one person's raw row: each gold answer is that person's job."""
    crowd = GoldCrowd(qualities=np.ones(4), seed=1)
    with crowddb.connect(platform=crowd, seed=5, progress=False) as db:
        people(db, qis=())
        db.sql(QUERY).fetchall()
        items = db.sql("SELECT content, gold FROM crowddb_hit_items WHERE gold IS NOT NULL").df()
    frame = people_frame(45)
    jobs = {(int(r.age), r.zip, int(r.edu)): r.job for r in frame.itertuples()}
    for content, answer in zip(items["content"], items["gold"]):
        shown = json.loads(content)
        assert jobs[(int(shown["age"]), shown["zip"], int(shown["edu"]))] == answer


def test_a_rerun_collects_and_caches_without_the_gold_questions(tmp_path):
    crowd = GoldCrowd(qualities=np.ones(4), seed=1)
    with crowddb.connect(tmp_path / "g.duckdb", platform=crowd, seed=5, progress=False) as db:
        people(db)
        first = db.sql(QUERY).df()
        again = db.sql(QUERY).df()  # served from the cache: gold answers are not answers of the copied items
        assert len(crowd.batches) == 1
        assert again.equals(first)


def test_gold_drop_leaves_out_the_answers_of_stopped_workers():
    """Three workers always wrong, two always right, five assignments per HIT: the wrong ones win some majorities
    unless they are dropped. Raw rows (no quasi-identifiers): a right worker knows each person's job exactly."""
    truth = people_frame(45).set_index("id")["job"]
    query = QUERY.replace("assignments := 2", "assignments := 5")
    results = {}
    for drop in (False, True):
        crowd = GoldCrowd(stopped={"W0001", "W0002", "W0003"}, qualities=np.array([0, 0, 0, 1, 1.0]), seed=1)
        with crowddb.connect(platform=crowd, seed=5, progress=False) as db:
            people(db, qis=())
            q = query.replace("gold := 0.2", f"gold := 0.2, gold_drop := {str(drop).lower()}")
            got = db.sql(q).df().set_index("id")["job"]
        results[drop] = int((got != truth.loc[got.index]).sum())
    assert results[True] == 0
    assert results[False] == 29  # seeded: three wrong votes split 3:0 or 2:1 beat or tie the two right


@pytest.mark.parametrize(("call", "message"), [
    ("getposition(age, zip, edu, gold := 0.7)", "gold is the share of each HIT's items that are gold questions"),
    ("getposition(age, zip, edu, gold := -0.1)", "in \\[0, 0.5\\]"),
    ("getposition(age, zip, edu, gold_drop := 'yes')", "gold_drop"),
])
def test_bad_gold_options_are_refused_before_anything_is_published(call, message):
    crowd = GoldCrowd(qualities=np.ones(4), seed=1)
    with crowddb.connect(platform=crowd, progress=False) as db:
        people(db)
        with pytest.raises(ArgumentError, match=message):
            db.sql(f"SELECT id, {call} AS job FROM people")
        assert not crowd.batches


def test_gold_questions_are_for_tuple_operators():
    crowd = GoldCrowd(qualities=np.ones(4), seed=1)
    with crowddb.connect(platform=crowd, progress=False) as db:
        people(db)
        with pytest.raises(ArgumentError, match="gold questions are for tuple operators"):
            db.sql("SELECT hobby, getcandidate(age, zip, 'teacher', gold := 0.2) FROM people GROUP BY hobby")
        assert not crowd.batches


def test_without_gold_nothing_changes():
    """gold := 0 (the default) posts exactly the HITs of a query that never heard of gold."""
    out = []
    for q in (QUERY.replace(", gold := 0.2", ""), QUERY.replace("gold := 0.2", "gold := 0")):
        crowd = GoldCrowd(qualities=np.ones(4), seed=1)
        with crowddb.connect(platform=crowd, seed=5, progress=False) as db:
            people(db)
            out.append((db.sql(q).df(), crowd.batches[0].items, crowd.batches[0].gold))
    pd.testing.assert_frame_equal(out[0][0], out[1][0])
    pd.testing.assert_frame_equal(out[0][1], out[1][1])
    assert out[0][2] is None and out[1][2] is None


def test_a_gold_table_names_the_known_answers():
    """gold_table := 'known': the answers of the rows it lists (matched by the input's key), not the ground-truth
    column: here the known answers are deliberately not the people's jobs, and the gold questions carry them."""
    crowd = GoldCrowd(qualities=np.ones(4), seed=1)
    with crowddb.connect(platform=crowd, seed=5, progress=False) as db:
        people(db, qis=())
        known = pd.DataFrame({"id": [1, 2, 3, 4, 40], "answer": ["clerk", "clerk", "driver", "teacher", "clerk"]})
        db.load_frame("known", known)
        db.sql(QUERY.replace("gold := 0.2", "gold := 0.2, gold_table := 'known'")).fetchall()
        items = db.sql("SELECT content, gold FROM crowddb_hit_items WHERE gold IS NOT NULL").df()
    assert len(items) == 9  # 2 + 2 + 2 + 2 + 1 gold questions, drawn from the 5 rows with a known answer
    frame = people_frame(45).set_index("id")
    answer_of = dict(zip(known["id"], known["answer"]))
    for content, answer in zip(items["content"], items["gold"]):
        shown = json.loads(content)
        match = frame[(frame["age"] == int(shown["age"])) & (frame["zip"] == shown["zip"])
                      & (frame["edu"] == int(shown["edu"]))]
        assert len(match) == 1 and answer == answer_of[int(match.index[0])]
    assert set(crowd.batches[0].gold["answer"]) <= set(known["answer"])


@pytest.mark.parametrize(("option", "message"), [
    ("gold_table := 'known'", "pass gold := a share of each HIT's items too"),
    ("gold := 0.2, gold_table := 'nowhere'", "no table or view named 'nowhere'"),
    ("gold := 0.2, gold_table := 'badknown'", "gold_table 'badknown' needs an 'answer' column \\(and the input's "
                                              "key\\); it has \\['id', 'job'\\]"),
    ("gold := 0.2, gold_table := 'nokey'", "gold_table 'nokey' needs the columns 'id' \\(the input's key\\) and "
                                           "'answer'; it has no 'id'"),
])
def test_a_bad_gold_table_is_refused_before_anything_is_published(option, message):
    crowd = GoldCrowd(qualities=np.ones(4), seed=1)
    with crowddb.connect(platform=crowd, progress=False) as db:
        people(db)
        db.load_frame("known", pd.DataFrame({"id": [1], "answer": ["clerk"]}))
        db.load_frame("badknown", pd.DataFrame({"id": [1], "job": ["clerk"]}))
        db.load_frame("nokey", pd.DataFrame({"person": [1], "answer": ["clerk"]}))
        with pytest.raises(crowddb.errors.CrowdDBError, match=message):
            db.sql(f"SELECT id, getposition(age, zip, edu, {option}) AS job FROM people")
        assert not crowd.batches
        assert db.sql("SELECT count(*) FROM crowddb_runs").fetchall() == [(0,)]


def test_a_gold_table_needs_a_key_on_the_input():
    crowd = GoldCrowd(qualities=np.ones(4), seed=1)
    with crowddb.connect(platform=crowd, progress=False) as db:
        db.load_frame("people", people_frame(20), quasi_identifiers=["age", "zip"], ground_truth="job")
        db.load_frame("known", pd.DataFrame({"id": [1], "answer": ["clerk"]}))
        with pytest.raises(ArgumentError, match="matched to the input's rows by their key, and no input table "
                                                "declares one"):
            db.sql("SELECT id, getposition(age, zip, edu, gold := 0.2, gold_table := 'known') AS job FROM people")
        assert not crowd.batches


def test_gold_questions_without_known_answers_are_refused_before_anything_is_published():
    crowd = GoldCrowd(qualities=np.ones(4), seed=1)
    with crowddb.connect(platform=crowd, progress=False) as db:
        db.load_frame("people", people_frame(20), quasi_identifiers=["age", "zip"], key="id")
        with pytest.raises(ArgumentError, match="gold := 0.2 needs items with known answers, and its input has no "
                                                "ground-truth column"):
            db.sql("SELECT id, getposition(age, zip, edu, gold := 0.2, domain := ['a', 'b']) AS job FROM people")
        assert not crowd.batches
        assert db.sql("SELECT count(*) FROM crowddb_runs").fetchall() == [(0,)]
