"""ReplayCrowd lets crowddb choose who answers (issue 28): a HIT offered to workers gives each item the recorded answer
of the first offered worker who has one left for it, the seeded order where none has, never one worker twice on an
item; through SQL an accuracy target's quality-aware rounds are then answered by the workers crowddb picked."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import crowddb
from crowddb.crowd import HitBatch, Platform, ReplayCrowd, SimulatedCrowd
from crowddb.errors import ArgumentError, PlatformError

# by hand: a did not answer t3, d did not answer t2
RECORD = pd.DataFrame([("t1", "a", "x"), ("t1", "b", "y"), ("t1", "c", "z"), ("t1", "d", "x"),
                       ("t2", "a", "y"), ("t2", "b", "y"), ("t2", "c", "x"),
                       ("t3", "b", "z"), ("t3", "c", "z"), ("t3", "d", "y")], columns=["task", "worker", "answer"])
RECORDED = {(t, w): a for t, w, a in RECORD.itertuples(index=False)}


def hit_batch(tasks, offer=None, assignments=1, hit_id="h1", exclude=None):
    """One HIT of ``tasks`` (item_no 1, 2, ...), offered to the workers ``offer`` in that order."""
    hits = pd.DataFrame({"hit_id": [hit_id], "run_id": "r", "question": "q", "domain": [("x", "y", "z")],
                         "assignments": assignments, "reward": 0.1, "fee_rate": 0.2})
    items = pd.DataFrame({"hit_id": hit_id, "item_no": range(1, len(tasks) + 1), "row_no": 1, "task": tasks})
    offered = None if offer is None else pd.DataFrame({"hit_id": hit_id, "worker_id": offer})
    return HitBatch(hits, items, ["task"], offer=offered, exclude=exclude)


def served(crowd, batch):
    """(item_no, assignment slot, worker, answer) of the batch's one HIT, in item order."""
    crowd.publish(batch)
    got = crowd.collect(batch.hits["hit_id"].tolist()).answers
    slot = got["assignment_id"].str.rsplit("-A", n=1).str[1].astype(int)
    return sorted(zip(got["item_no"], slot, got["worker_id"], got["answer"]))


def seeded(tasks, n=1, seed=5):
    """What the seeded order serves a fresh session (the fallback's expectation, through ``ask``, another path)."""
    got = ReplayCrowd(RECORD, seed=seed).ask(tasks, n)
    return list(zip(got["task"], got["worker"], got["answer"]))


def test_the_replay_declares_that_crowddb_chooses_and_lists_the_recorded_workers():
    crowd = ReplayCrowd(RECORD, seed=5)
    assert crowd.offers_to_workers is True and crowd.excludes_workers is True
    assert crowd.workers()["worker_id"].tolist() == ["a", "b", "c", "d"]
    assert ReplayCrowd(RECORD, offers=False).offers_to_workers is False
    with pytest.raises(ArgumentError, match="offers must be True or False"):
        ReplayCrowd(RECORD, offers="yes")


@pytest.mark.parametrize(("offer", "expected"), [
    (["c", "a"], [(1, 1, "c", "z"), (2, 1, "c", "x")]),
    (["a", "c"], [(1, 1, "a", "x"), (2, 1, "a", "y")]),
    (["d", "a"], [(1, 1, "d", "x"), (2, 1, "a", "y")]),  # d never answered t2: the next offered worker, a
    (["b"], [(1, 1, "b", "y"), (2, 1, "b", "y")]),
])
def test_the_offered_order_decides_which_recorded_answer_comes_back(offer, expected):
    assert served(ReplayCrowd(RECORD, seed=5), hit_batch(["t1", "t2"], offer)) == expected


def test_a_hit_of_several_assignments_takes_the_offered_workers_in_order_then_the_seeded_order():
    # t1 has 4 recorded answers: b and a as offered, then the seeded order's first of c and d
    crowd = ReplayCrowd(RECORD, seed=5)
    got = served(crowd, hit_batch(["t1"], ["b", "a"], assignments=3))
    rest = [(w, a) for t, w, a in seeded(["t1"], 4) if w not in ("a", "b")]
    assert got == [(1, 1, "b", "y"), (1, 2, "a", "x"), (1, 3, *rest[0])]


def test_an_item_no_offered_worker_can_answer_falls_back_to_the_seeded_order():
    # d answered t3 but not t2; zz is not in the record at all
    got = served(ReplayCrowd(RECORD, seed=5), hit_batch(["t2", "t3"], ["d"]))
    assert got == [(1, 1, *seeded(["t2"])[0][1:]), (2, 1, "d", "y")]
    got = served(ReplayCrowd(RECORD, seed=5), hit_batch(["t1", "t2", "t3"], ["zz"]))
    assert [(w, a) for _, _, w, a in got] == [(w, a) for _, w, a in seeded(["t1", "t2", "t3"])]
    # a replay that does not let crowddb choose ignores the offer
    got = served(ReplayCrowd(RECORD, seed=5, offers=False), hit_batch(["t1", "t2", "t3"], ["c"]))
    assert [(w, a) for _, _, w, a in got] == [(w, a) for _, w, a in seeded(["t1", "t2", "t3"])]
    assert seeded(["t1", "t2", "t3"]) != [("t1", "c", "z"), ("t2", "c", "x"), ("t3", "c", "z")]  # seed 5 differs


def test_a_worker_is_never_served_twice_for_one_item():
    crowd = ReplayCrowd(RECORD, seed=5)
    assert served(crowd, hit_batch(["t1"], ["c"], hit_id="h1")) == [(1, 1, "c", "z")]
    # offered c again on t1: c's answer is served already, so the seeded order's first other worker
    again = served(crowd, hit_batch(["t1"], ["c"], hit_id="h2"))
    first_other = next((w, a) for t, w, a in seeded(["t1"], 4) if w != "c")
    assert again == [(1, 1, *first_other)]
    # two items of one task in one HIT offered to a: a answers one of them, the other gets another worker
    twice = served(ReplayCrowd(RECORD, seed=5), hit_batch(["t1", "t1"], ["a"]))
    assert twice[0] == (1, 1, "a", "x") and twice[1][2] != "a" and RECORDED[("t1", twice[1][2])] == twice[1][3]
    # offered everyone on every task until the record runs out: each recorded answer exactly once
    crowd = ReplayCrowd(RECORD, seed=5)
    seen = []
    for i in range(6):
        got = served(crowd, hit_batch(["t1", "t2", "t3"], ["d", "c", "b", "a"], hit_id=f"r{i}"))
        seen += [(["t1", "t2", "t3"][item - 1], w, a) for item, _, w, a in got]
    assert sorted(seen) == sorted(RECORD.itertuples(index=False, name=None))
    assert crowd.remaining().sum() == 0


def test_a_pair_in_exclude_is_not_served_even_when_offered():
    # an answer on record from an earlier session over the same database: a has answered t1 already
    exclude = pd.DataFrame({"hit_id": ["h1"], "item_no": [1], "worker_id": ["a"]})
    got = served(ReplayCrowd(RECORD, seed=5), hit_batch(["t1"], ["a"], exclude=exclude))
    assert got == [(1, 1, *next((w, a) for t, w, a in seeded(["t1"], 4) if w != "a"))]


def test_collecting_again_serves_nothing_new_and_known_is_unchanged():
    crowd = ReplayCrowd(RECORD, seed=5)
    batch = hit_batch(["t1", "t2"], ["c"])
    crowd.publish(batch)
    assert crowd.known(["h1", "h9"]) == {"h1"}
    first = crowd.collect(["h1"])
    again = crowd.collect(["h1"])
    pd.testing.assert_frame_equal(first.answers, again.answers)
    pd.testing.assert_frame_equal(first.assignments, again.assignments)
    assert crowd.remaining().sum() == len(RECORD) - 2


# ---------------------------------------------------------------------------------------------- through SQL

TASKS = [f"t{i:02d}" for i in range(16)]
TRUTH = dict(zip(TASKS, ["x", "y"] * 8))
# by hand: g is always right, each n-worker wrong on its own 4 tasks; everyone answered every task (a dense record:
# every offer can be honoured)
WRONG = {"g": set(), "n1": {0, 1, 2, 3}, "n2": {4, 5, 6, 7}, "n3": {8, 9, 10, 11}, "n4": {12, 13, 14, 15}}
DENSE = pd.DataFrame([(t, w, ({"x": "y", "y": "x"}[TRUTH[t]] if i in bad else TRUTH[t]))
                      for w, bad in WRONG.items() for i, t in enumerate(TASKS)], columns=["task", "worker", "answer"])
RECORDED_DENSE = {(t, w): a for t, w, a in DENSE.itertuples(index=False)}


class Spy(ReplayCrowd):
    """Keeps the offers crowddb posted, to check the answers against."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.offers: list[pd.DataFrame] = []

    def publish(self, batch, *, knowledge=None) -> None:
        if batch.offer is not None:
            self.offers.append(batch.offer)
        super().publish(batch, knowledge=knowledge)


def _target(crowd, tasks, max_assignments: int, more: str = ""):
    """An accuracy target over ``tasks`` on ``crowd`` (``more``: further arguments of the call): the result, every
    answer with its HIT, item and task, and the run's report."""
    with crowddb.connect(platform=crowd, seed=1, progress=False) as db:
        db.load_frame("tasks", pd.DataFrame({"task": tasks}))
        result = db.sql("SELECT task, getposition(task, domain := ['x', 'y'], accuracy := 0.95, "
                        f"max_assignments := {max_assignments}, tuples_per_hit := 4{more}) AS label FROM tasks "
                        "ORDER BY task").df()
        got = db.sql("SELECT a.hit_id, a.item_no, i.content, a.worker_id, a.answer FROM crowddb_answers a "
                     "JOIN crowddb_hit_items i USING (hit_id, item_no) ORDER BY a.hit_id, a.item_no").df()
        report = db.last_report[-1]
    got["task"] = got["content"].map(lambda c: json.loads(c)["task"])
    return result, got, report


def accuracy_target(offers, more: str = ", tolerance := 0.9"):
    """By default the result's expected accuracy alone decides (tolerance := 0.9 puts the lower bound at 0.05, met
    by any result): the decisions the pins below were measured and recomputed for."""
    crowd = Spy(DENSE, seed=0, task_column="task", offers=offers)
    result, got, report = _target(crowd, TASKS, 4, more)
    offered = pd.concat(crowd.offers, ignore_index=True) if crowd.offers else None
    return result, got, report, offered


def test_an_accuracy_target_through_sql_is_answered_by_the_workers_it_picks():
    result, got, report, offered = accuracy_target(offers=True)
    plain, plain_got, plain_report, plain_offered = accuracy_target(offers=False)
    assert plain_offered is None  # without offers crowddb builds rounds anyone may take
    assert offered is not None and report["rounds"] > 2
    # every answer of an offered HIT is the recorded answer of the worker it was offered to (crowddb never offers
    # an item to a worker who answered it, and in a dense record that worker has the answer): from the record alone
    later = got.merge(offered, on="hit_id", suffixes=("", "_offered"))
    assert len(later) == int(got["hit_id"].isin(offered["hit_id"]).sum()) > 0
    assert later["worker_id"].tolist() == later["worker_id_offered"].tolist()
    assert later["answer"].tolist() == [RECORDED_DENSE[(t, w)] for t, w in zip(later["task"], later["worker_id"])]
    # round 1 is the same seeded order either way; from round 2 on the workers differ: with quality-aware
    # assignment the always-right g answers more of them (15 of 43 answers against 11 of 49, measured; 41 and 48
    # before the leave-one-out posteriors, whose lower means make the result's rule ask one more item where the
    # plug-in slack was under 0.001: round 2 with offers asks 7, not 6, and round 3 then 4, not 3; round 3 without
    # asks 8, not 7; recomputed by a Dawid-Skene EM written apart from crowddb's, round 2 with offers in
    # tests/algorithms/truth/test_adaptive_calibration.py)
    first = got[~got["hit_id"].isin(offered["hit_id"])]
    assert first[["hit_id", "item_no", "worker_id"]].to_numpy().tolist() == plain_got.loc[
        plain_got["hit_id"].isin(first["hit_id"]), ["hit_id", "item_no", "worker_id"]].to_numpy().tolist()
    assert int((got["worker_id"] == "g").sum()) > int((plain_got["worker_id"] == "g").sum())
    assert [report["answers"], int((got["worker_id"] == "g").sum())] == [43, 15]
    assert [plain_report["answers"], int((plain_got["worker_id"] == "g").sum())] == [49, 11]
    for res in (result, plain):
        assert (res["label"] == res["task"].map(TRUTH)).all()
    assert not got.duplicated(["task", "worker_id"]).any() and not plain_got.duplicated(["task", "worker_id"]).any()


@pytest.mark.parametrize("offers, pins", [(True, [49, 16]), (False, [56, 12])])
def test_a_lower_bound_out_of_reach_asks_every_open_item_as_each_item_does(offers, pins):
    """With the default lower bound (0.99 on the result's accuracy at 0.95 - 0.01) on 16 tasks the bound is out of
    reach (one wrong answer in 16 is 0.06; the report's bound ends near 0.82), so every round asks every open item
    and no item at the target (result_rule: all open items when they cannot meet it; items at the target only when
    one round of them can): the same answers, from the same workers, as each_item := true buys (measured: 49 answers,
    16 from g with offers; 56 and 12 without), more than the expected accuracy alone (43 and 49 above)."""
    _, got, report, _ = accuracy_target(offers, more="")
    _, each, _, _ = accuracy_target(offers, more=", each_item := true")
    assert got[["hit_id", "item_no", "worker_id", "answer"]].equals(each[["hit_id", "item_no", "worker_id", "answer"]])
    assert [report["answers"], int((got["worker_id"] == "g").sum())] == pins
    assert report["accuracy_bound"] < 0.94 <= report["mean_confidence"]



# ---------------------------------------------------------------------------------------------- candidates


def pairs(got):
    return sorted(zip(got["item_id"], got["worker_id"]))


def test_candidates_are_the_recorded_workers_not_yet_served_nor_excluded():
    crowd = ReplayCrowd(RECORD, seed=5)
    items = pd.DataFrame({"item_id": [10, 11, 12, 13], "row_no": 1, "task": ["t1", "t2", "t3", "t2"]})
    # by hand from RECORD: t1 a b c d, t2 a b c, t3 b c d (item 13 is t2 again)
    everyone = [(10, "a"), (10, "b"), (10, "c"), (10, "d"), (11, "a"), (11, "b"), (11, "c"),
                (12, "b"), (12, "c"), (12, "d"), (13, "a"), (13, "b"), (13, "c")]
    assert pairs(crowd.candidates(items, ["task"])) == everyone
    served(crowd, hit_batch(["t1", "t2"], ["c"]))  # c's answers to t1 and t2 are served
    no_c = [p for p in everyone if not (p[1] == "c" and p[0] in (10, 11, 13))]
    assert pairs(crowd.candidates(items, ["task"])) == no_c
    # an answer on record from an earlier session: b on item 11 (t2) blocks b for every item of t2
    exclude = pd.DataFrame({"item_id": [11, 99], "worker_id": ["b", "a"]})
    assert pairs(crowd.candidates(items, ["task"], exclude)) == [p for p in no_c if p not in ((11, "b"), (13, "b"))]
    crowd.reset(5)
    assert pairs(crowd.candidates(items, ["task"])) == everyone
    with pytest.raises(ArgumentError, match="not in the recorded answer set"):
        crowd.candidates(items.assign(task=["t1", "t9", "t3", "t2"]), ["task"])


def test_a_platform_without_candidates_lets_anyone_answer_anything():
    assert SimulatedCrowd(n_workers=3, seed=0).candidates(pd.DataFrame({"item_id": [0], "row_no": 1, "x": ["1"]}),
                                                          ["x"]) is None


# by hand: 12 tasks, 6 workers, each task answered by two neighbours (t_i by w_i mod 6 and w_(i+1) mod 6), so each
# worker answered 4 of the 12 tasks (a sparse record); both answers agree, wrong on t01, t04 and t09
SPARSE_TASKS = [f"t{i:02d}" for i in range(12)]
SPARSE_TRUTH = {t: "xy"[i % 2] for i, t in enumerate(SPARSE_TASKS)}
SPARSE_WRONG = {"t01", "t04", "t09"}
SPARSE = pd.DataFrame([(t, f"w{(i + d) % 6}", ({"x": "y", "y": "x"}[SPARSE_TRUTH[t]] if t in SPARSE_WRONG
                                                else SPARSE_TRUTH[t]))
                       for i, t in enumerate(SPARSE_TASKS) for d in (0, 1)], columns=["task", "worker", "answer"])
RECORDED_SPARSE = {(t, w): a for t, w, a in SPARSE.itertuples(index=False)}


class Blind(Spy):
    """The replay without its candidates: crowddb offers items to workers who may never have answered them."""

    def candidates(self, items, published_columns, exclude=None):
        return Platform.candidates(self, items, published_columns, exclude)


def sparse_target(crowd):
    result, got, report = _target(crowd, SPARSE_TASKS, 2)
    got = got.drop(columns="item_no")
    offered = pd.concat(crowd.offers, ignore_index=True).drop_duplicates("hit_id")
    on = got.merge(offered, on="hit_id", suffixes=("", "_offered"))
    return result, got, report, on


def test_on_a_sparse_record_every_offer_is_kept():
    result, got, report, on = sparse_target(Spy(SPARSE, seed=0, task_column="task"))
    # every task's two recorded answers are bought, one a round: round 1 the seeded order, round 2 (no item stops
    # before the crowd is measured) the one worker left, to whom crowddb offers it: every offer is kept
    assert [report["rounds"], report["answers"], len(got)] == [2, 24, 24]
    assert sorted(zip(got["task"], got["worker_id"], got["answer"])) == sorted(SPARSE.itertuples(index=False,
                                                                                                   name=None))
    assert len(on) == 12 and sorted(on["task"]) == SPARSE_TASKS
    assert float((on["worker_id"] == on["worker_id_offered"]).mean()) == 1.0
    assert on["answer"].tolist() == [RECORDED_SPARSE[(t, w)] for t, w in zip(on["task"], on["worker_id_offered"])]
    # both answers agree on every task: the result is the recorded answer, right on 9 of the 12 tasks
    assert result["label"].tolist() == [SPARSE.set_index("task")["answer"].groupby(level=0).first()[t]
                                        for t in SPARSE_TASKS]
    assert float((result["label"] == result["task"].map(SPARSE_TRUTH)).mean()) == 0.75
    # without the candidates crowddb offers the 12 items to the first three workers, 4 each (every gain ties after
    # one answer), who answered 4 of them in the record: 4 offers kept, the other 8 fall back (measured)
    _, _, blind_report, blind_on = sparse_target(Blind(SPARSE, seed=0, task_column="task"))
    assert [blind_report["rounds"], blind_report["answers"], len(blind_on)] == [2, 24, 12]
    assert blind_on["worker_id_offered"].nunique() == 3
    assert int((blind_on["worker_id"] == blind_on["worker_id_offered"]).sum()) == 4


def test_a_platform_whose_candidates_are_not_pairs_is_refused():
    class Broken(ReplayCrowd):
        def candidates(self, items, published_columns, exclude=None):
            return [("t01", "w1")]

    with crowddb.connect(platform=Broken(SPARSE, seed=0, task_column="task"), seed=1, progress=False) as db:
        db.load_frame("tasks", pd.DataFrame({"task": SPARSE_TASKS}))
        with pytest.raises(PlatformError, match=r"candidates\(\) returned list .*columns item_id, worker_id"):
            db.sql("SELECT task, getposition(task, domain := ['x', 'y'], accuracy := 0.95, max_assignments := 2) "
                   "AS label FROM tasks").df()
