"""ReplayCrowd (issue 28): a recorded answer set served as a crowd: only recorded answers, never one worker twice on a
task, seeded, as a Platform for posted HITs, and refusals naming the fix."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from crowddb.crowd import HitBatch, ReplayCrowd
from crowddb.errors import ArgumentError, EmptyInputError, PlatformError, UnknownColumnError, UnknownHITError


def record(n_tasks=30, n_workers=12, seed=0):
    rng = np.random.default_rng(seed)
    rows = [(f"t{t}", f"w{w}", str(rng.choice(["a", "b", "c"])))
            for t in range(n_tasks) for w in rng.choice(n_workers, size=rng.integers(1, 7), replace=False)]
    return pd.DataFrame(rows, columns=["task", "worker", "answer"])


def keys(df):
    return list(zip(df["task"], df["worker"], df["answer"]))


def test_it_serves_only_recorded_answers_and_never_a_worker_twice_per_task():
    rec = record()
    crowd = ReplayCrowd(rec, seed=4)
    recorded = set(keys(rec))
    parts = [crowd.ask(crowd.tasks, 2) for _ in range(5)]  # asks past the end: tasks run out, nothing is invented
    served = pd.concat(parts, ignore_index=True)
    assert set(keys(served)) <= recorded
    assert not served.duplicated(["task", "worker"]).any()
    assert len(served) == len(rec) and (crowd.remaining() == 0).all()
    assert crowd.n_recorded().sum() == len(rec)
    assert keys(crowd.served()) == keys(served)
    assert crowd.ask(["t0"]).empty


def test_a_task_asked_twice_gets_two_different_workers():
    crowd = ReplayCrowd(pd.DataFrame({"task": [1, 1, 1], "worker": ["a", "b", "c"], "answer": [0, 1, 0]}), seed=1)
    got = crowd.ask([1, 1])
    assert len(got) == 2 and got["worker"].nunique() == 2
    assert len(crowd.ask([1], 5)) == 1


def test_the_order_is_seeded():
    rec = record()
    a, b, c = (ReplayCrowd(rec, seed=s) for s in (7, 7, 8))
    assert keys(a.ask(a.tasks, 3)) == keys(b.ask(b.tasks, 3))
    assert keys(a.ask(a.tasks, 3)) != keys(c.ask(c.tasks, 6))
    a.reset(7)
    b.reset(7)
    assert keys(a.ask(a.tasks)) == keys(b.ask(b.tasks))


def test_a_policy_names_the_worker():
    rec = record()
    crowd = ReplayCrowd(rec, seed=0)
    pairs = crowd.available(["t0", "t1"])
    assert set(pairs["task"]) == {"t0", "t1"}
    got = crowd.answer(pairs["task"], pairs["worker"])
    assert set(keys(got)) <= set(keys(rec)) and len(got) == len(pairs)
    assert crowd.available(["t0", "t1"]).empty and crowd.ask(["t0", "t1"]).empty
    with pytest.raises(ArgumentError, match="already answered task"):
        crowd.answer(pairs["task"][:1], pairs["worker"][:1])
    other = crowd.available(["t2"]).iloc[0]
    with pytest.raises(ArgumentError, match="listed twice"):
        crowd.answer([other["task"]] * 2, [other["worker"]] * 2)
    absent = min(set(rec["worker"]) - set(rec.loc[rec["task"] == "t2", "worker"]))
    with pytest.raises(ArgumentError, match="has no recorded answer"):
        crowd.answer(["t2"], [absent])
    assert crowd.available(["t2"]).shape[0] == (rec["task"] == "t2").sum()  # refused calls served nothing


def test_duplicates_keep_the_last_answer_and_truth_scores_workers():
    rec = pd.DataFrame({"task": [1, 1, 2, 2, 1], "worker": ["a", "b", "a", "b", "a"],
                        "answer": ["x", "x", "y", "x", "y"]})
    crowd = ReplayCrowd(rec, truth={1: "x", 2: "y"}, seed=0)
    assert crowd.n_recorded().to_dict() == {1: 2, 2: 2}
    assert set(keys(crowd.ask([1], 2))) == {(1, "a", "y"), (1, "b", "x")}
    assert crowd.workers().set_index("worker_id")["quality"].to_dict() == {"a": 0.5, "b": 0.5}
    assert ReplayCrowd(rec).workers()["quality"].isna().all()


def batch(tasks, assignments=2):
    hits = pd.DataFrame({"hit_id": ["h1", "h2"], "run_id": "r", "question": "q", "domain": [("a", "b", "c")] * 2,
                         "assignments": assignments, "reward": 0.1, "fee_rate": 0.2})
    items = pd.DataFrame({"hit_id": ["h1", "h1", "h2"], "item_no": [1, 2, 1], "row_no": 1, "task": tasks})
    return HitBatch(hits, items, ["task"])


def test_as_a_platform_posted_hits_are_answered_from_the_record():
    rec = record()
    crowd = ReplayCrowd(rec, seed=2)
    crowd.publish(batch(["t0", "t1", "t2"]))
    crowd.publish(batch(["t0", "t1", "t2"]))  # idempotent on hit ids
    assert crowd.known(["h1", "h2", "h9"]) == {"h1", "h2"}
    got = crowd.collect(["h1", "h2"])
    ans = got.answers
    assert set(ans.columns) == {"assignment_id", "hit_id", "item_no", "worker_id", "answer"}
    served = ans.merge(pd.DataFrame({"hit_id": ["h1", "h1", "h2"], "item_no": [1, 2, 1], "task": ["t0", "t1", "t2"]}))
    assert set(zip(served["task"], served["worker_id"], served["answer"])) <= set(keys(rec))
    assert not served.duplicated(["task", "worker_id"]).any()
    per_item = served.groupby("task").size()
    assert (per_item <= 2).all() and per_item.to_dict() == rec.groupby("task").size().clip(upper=2).loc[
        ["t0", "t1", "t2"]].to_dict()
    assert set(got.assignments["assignment_id"]) == set(ans["assignment_id"])
    again = crowd.collect(["h1", "h2"])  # collected again: the same answers, nothing served twice
    pd.testing.assert_frame_equal(again.answers, got.answers)
    with pytest.raises(UnknownHITError):
        crowd.collect(["h9"])


def test_refusals_name_the_fix():
    rec = record()
    with pytest.raises(UnknownColumnError, match="worker="):
        ReplayCrowd(rec.rename(columns={"worker": "who"}))
    assert len(ReplayCrowd(rec.rename(columns={"worker": "who"}), worker="who").tasks) == rec["task"].nunique()
    with pytest.raises(EmptyInputError):
        ReplayCrowd(rec.iloc[:0])
    with pytest.raises(ArgumentError, match="NULL"):
        ReplayCrowd(pd.DataFrame({"task": [1, None], "worker": ["a", "b"], "answer": ["x", "y"]}))
    with pytest.raises(ArgumentError, match="DataFrame"):
        ReplayCrowd([("t", "w", "a")])
    crowd = ReplayCrowd(rec)
    with pytest.raises(ArgumentError, match="not in the recorded answer set"):
        crowd.ask(["nope"])
    with pytest.raises(ArgumentError, match="positive integer"):
        crowd.ask(["t0"], 0)
    b = batch(["t0", "t1", "t2"])
    b.items = b.items.rename(columns={"task": "url"})
    b.items["other"] = "z"
    b.published_columns = ["url", "other"]
    with pytest.raises(PlatformError, match="task_column="):
        crowd.publish(b)
    ReplayCrowd(rec, task_column="url").publish(b)
    with pytest.raises(ArgumentError, match="not in the recorded"):
        ReplayCrowd(rec).publish(batch(["t0", "t1", "zzz"]))


def test_an_accuracy_target_through_sql_buys_only_recorded_answers():
    """The replayed crowd behind SQL (issue 28: how a user tries a policy on their own past data): an accuracy target
    over the recorded tasks buys in rounds, every answer on record is one of the recorded (task, worker, answer)
    triples, no worker answers a task twice, and no task gets more than max_assignments answers."""
    import crowddb

    rec = record(n_tasks=60, n_workers=12, seed=3)
    with crowddb.connect(platform=ReplayCrowd(rec, seed=0, task_column="task"), seed=1, progress=False) as db:
        db.load_frame("tasks", pd.DataFrame({"task": sorted(rec["task"].unique())}))
        result = db.sql("SELECT task, getposition(task, domain := ['a', 'b', 'c'], accuracy := 0.9, "
                        "max_assignments := 4) AS label FROM tasks ORDER BY task").df()
        got = db.sql("SELECT i.content, a.worker_id, a.answer FROM crowddb_answers a JOIN crowddb_hit_items i "
                     "USING (item_key, occurrence) GROUP BY ALL").df()
        answered = db.sql("SELECT item_key, occurrence, worker_id, answer FROM crowddb_answers").df()
        report = db.last_report[-1]
    assert len(result) == 60 and report["rounds"] > 1
    tasks = got["content"].map(lambda c: json.loads(c)["task"])  # the item as published: {"task": ...}
    assert set(zip(tasks, got["worker_id"], got["answer"])) <= set(keys(rec))
    assert not answered.duplicated(["item_key", "occurrence", "worker_id"]).any()
    assert answered.groupby(["item_key", "occurrence"]).size().max() <= 4
    assert report["answers"] == len(answered)
    # tasks whose recorded answers ran out below the target stop uncertain: the run ends, it does not fail
    per_task = answered.groupby(["item_key", "occurrence"]).size()
    recorded_per_task = rec.groupby("task").size()
    assert report["unanswered"] > 0 and report["uncertain"] >= report["unanswered"]
    assert (per_task.to_numpy() <= 4).all() and len(per_task) == 60
    assert int((recorded_per_task < 4).sum()) >= report["unanswered"]  # only a task with fewer than 4 can run out
