"""The marketplace behind the HIT page (crowddb.crowd.web.market): every rule, held by SQLite, alone and under
concurrent threads and processes."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from crowddb.crowd.platform import HitBatch
from crowddb.crowd.web import report
from crowddb.crowd.web.market import Forbidden, InvalidAnswers, LeaseLost, Market, NotFound, UnknownToken
from crowddb.errors import ArgumentError

DOMAIN = ("Adm-clerical", "Exec-managerial", "Prof-specialty")


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make_batch(n_hits: int = 2, items: int = 2, assignments: int = 2, run_id: int = 1, gold: dict | None = None,
               kind: str = "choice", rows: int = 1, start: int = 1) -> HitBatch:
    hit_ids = [f"R{run_id}-{start + i:05d}" for i in range(n_hits)]
    hits = pd.DataFrame({"hit_id": hit_ids, "run_id": run_id, "assignments": assignments, "round": 1,
                         "question": "Which one of the listed job positions fits this person best?",
                         "domain": [DOMAIN if kind == "choice" else None] * n_hits, "reward": 0.2,
                         "fee_rate": 0.3, "target": None if kind != "pick_row" else "Prof-specialty"})
    if kind == "number":
        hits["kind"] = "number"
    table = pd.DataFrame([{"hit_id": h, "item_no": i, "row_no": r, "age": f"[{20 + i}-{30 + i}]", "sex": "*"}
                          for h in hit_ids for i in range(1, items + 1) for r in range(1, rows + 1)])
    gold_frame = None
    if gold:
        gold_frame = pd.DataFrame([{"hit_id": h, "item_no": i, "answer": a} for (h, i), a in gold.items()])
    return HitBatch(hits, table, ["age", "sex"], gold_frame)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def market(tmp_path, clock) -> Market:
    m = Market(tmp_path / "market.sqlite", clock=clock, lease=60)
    yield m
    m.close()


def all_right(market: Market, assignment: dict, value: str = DOMAIN[0]) -> dict[int, str]:
    return {item["item_no"]: value for item in market.hit(assignment["hit_id"])["items"]}


def test_post_is_idempotent_and_known(market):
    assert market.post(make_batch()) == 2
    assert market.post(make_batch()) == 0  # the same HIT ids again: nothing new
    assert market.post(make_batch(n_hits=3)) == 1
    assert market.known(["R1-00001", "R1-00003", "R9-00001"]) == {"R1-00001", "R1-00003"}
    rows = market._con().execute("SELECT count(*) FROM items").fetchone()[0]
    assert rows == 3 * 2


def test_take_oldest_first_and_keeps_the_held_assignment(market):
    market.post(make_batch(n_hits=2))
    _, token = market.add_worker()
    first = market.take(token)
    assert first["hit_id"] == "R1-00001" and first["slot"] == 1
    again = market.take(token)  # still held: the same assignment and form token
    assert again["assignment_id"] == first["assignment_id"] and again["csrf"] == first["csrf"]
    market.submit(token, first["assignment_id"], first["csrf"], all_right(market, first))
    second = market.take(token)
    assert second["hit_id"] == "R1-00002"  # never the HIT it answered
    market.submit(token, second["assignment_id"], second["csrf"], all_right(market, second))
    assert market.take(token) is None
    assert not market.available(token)


def test_hit_gets_at_most_its_assignments(market):
    market.post(make_batch(n_hits=1, assignments=2))
    tokens = [market.add_worker()[1] for _ in range(3)]
    got = [market.take(t) for t in tokens]
    assert [g["slot"] for g in got[:2]] == [1, 2]
    assert got[2] is None


def test_rules_are_held_by_the_database(market, clock):
    """Even SQL that bypasses take() cannot give a HIT more assignments or a worker a HIT twice."""
    market.post(make_batch(n_hits=1, assignments=2))
    workers = [market.add_worker()[0] for _ in range(3)]
    con = sqlite3.connect(market.path)
    insert = "INSERT INTO assignments (assignment_id, hit_id, slot, worker_id, csrf, taken_at, lease_until) " \
             "VALUES (?, 'R1-00001', ?, ?, 'x', 0, 1)"
    con.execute(insert, ("a1", 1, workers[0]))
    with pytest.raises(sqlite3.IntegrityError):
        con.execute(insert, ("a2", 1, workers[1]))  # the same slot
    with pytest.raises(sqlite3.IntegrityError):
        con.execute(insert, ("a3", 2, workers[0]))  # the same worker on the HIT
    with pytest.raises(sqlite3.IntegrityError, match="at most its number of assignments"):
        con.execute(insert, ("a4", 3, workers[2]))  # a slot beyond the HIT's assignments
    con.execute("UPDATE assignments SET submitted_at = 5 WHERE assignment_id = 'a1'")
    with pytest.raises(sqlite3.IntegrityError, match="submitted once"):
        con.execute("UPDATE assignments SET submitted_at = 6 WHERE assignment_id = 'a1'")
    con.close()


def test_double_submit_is_paid_once(market):
    market.post(make_batch(n_hits=1))
    _, token = market.add_worker()
    a = market.take(token)
    first = market.submit(token, a["assignment_id"], a["csrf"], all_right(market, a))
    second = market.submit(token, a["assignment_id"], a["csrf"], {1: DOMAIN[1], 2: DOMAIN[1]})
    assert (first["again"], second["again"]) == (False, True)
    assert first["total"] == second["total"] == pytest.approx(0.2)
    assert market.earnings()["reward"].tolist() == [pytest.approx(0.2)]
    answers = market.collected(["R1-00001"]).answers
    assert answers["answer"].tolist() == [DOMAIN[0], DOMAIN[0]]  # the second submit changed nothing


def test_expired_lease_returns_to_the_pool_and_late_submit_is_refused(market, clock):
    market.post(make_batch(n_hits=1, assignments=1))
    _, slow = market.add_worker()
    _, fast = market.add_worker()
    lapsed = market.take(slow)
    assert market.take(fast) is None  # the only slot is held
    clock.t += 59
    assert market.take(fast) is None  # not yet expired
    clock.t += 2
    reclaimed = market.take(fast)
    assert reclaimed["hit_id"] == "R1-00001" and reclaimed["slot"] == 1
    assert reclaimed["assignment_id"] != lapsed["assignment_id"]
    with pytest.raises(LeaseLost, match="ran out"):
        market.submit(slow, lapsed["assignment_id"], lapsed["csrf"], all_right(market, lapsed))
    with pytest.raises(Forbidden):  # the lapsed one is not the fast worker's either
        market.submit(fast, lapsed["assignment_id"], lapsed["csrf"], all_right(market, lapsed))
    market.submit(fast, reclaimed["assignment_id"], reclaimed["csrf"], all_right(market, reclaimed))
    assert market.progress(["R1-00001"]) == (1, 1)
    assert market.collected(["R1-00001"]).assignments["worker_id"].tolist() == [market.worker(fast)["worker_id"]]
    assert market.take(slow) is None


def test_expired_but_not_reclaimed_is_still_accepted(market, clock):
    market.post(make_batch(n_hits=1, assignments=1))
    _, token = market.add_worker()
    a = market.take(token)
    clock.t += 3600
    result = market.submit(token, a["assignment_id"], a["csrf"], all_right(market, a))
    assert result["earned"] == pytest.approx(0.2) and not result["again"]


def test_another_workers_assignment_and_wrong_csrf_are_refused(market):
    market.post(make_batch(n_hits=1))
    _, alice = market.add_worker()
    _, bob = market.add_worker()
    a = market.take(alice)
    with pytest.raises(Forbidden):
        market.submit(bob, a["assignment_id"], a["csrf"], all_right(market, a))
    with pytest.raises(Forbidden):
        market.assignment(bob, a["assignment_id"])
    with pytest.raises(Forbidden):
        market.submit(alice, a["assignment_id"], "forged", all_right(market, a))
    with pytest.raises(UnknownToken):
        market.submit("no-such-token", a["assignment_id"], a["csrf"], all_right(market, a))
    with pytest.raises(NotFound):
        market.submit(alice, "R1-00001-A9-000000", a["csrf"], {})
    assert market.progress(["R1-00001"]) == (0, 2)


def test_validation_names_every_item(market):
    market.post(make_batch(n_hits=1, items=3))
    _, token = market.add_worker()
    a = market.take(token)
    with pytest.raises(InvalidAnswers) as refused:
        market.submit(token, a["assignment_id"], a["csrf"], {1: DOMAIN[0], 3: "Astronaut"})
    assert refused.value.problems == {2: "Item 2: please choose an answer",
                                      3: "Item 3: the answer is not one of the choices"}
    assert market.progress(["R1-00001"]) == (0, 2)  # nothing stored


def test_pick_row_and_number_answers(tmp_path):
    m = Market(tmp_path / "m.sqlite")
    m.post(make_batch(n_hits=1, items=2, kind="pick_row", rows=3))
    m.post(make_batch(n_hits=1, items=1, kind="number", run_id=2))
    _, token = m.add_worker()
    a = m.take(token)
    assert m.hit(a["hit_id"])["kind"] == "pick_row"
    with pytest.raises(InvalidAnswers) as refused:
        m.submit(token, a["assignment_id"], a["csrf"], {1: "4", 2: "2"})
    assert refused.value.problems == {1: "Item 1: please choose one of the listed rows"}
    m.submit(token, a["assignment_id"], a["csrf"], {1: "3", 2: "2"})
    b = m.take(token)
    assert m.hit(b["hit_id"])["kind"] == "number"
    with pytest.raises(InvalidAnswers, match="Item 1: please enter a number"):
        m.submit(token, b["assignment_id"], b["csrf"], {1: "many"})
    m.submit(token, b["assignment_id"], b["csrf"], {1: " 41.5 "})
    assert m.collected(["R2-00001"]).answers["answer"].tolist() == ["41.5"]
    m.close()


def test_one_worker_per_participant(market):
    first = market.worker_for_participant("P1", "S", "X1")
    again = market.worker_for_participant("P1", "S", "X2")
    other = market.worker_for_participant("P2", "S", "X3")
    assert first == again and other != first
    with pytest.raises(ArgumentError):
        market.worker_for_participant("")
    got, errors = [], []

    def visit():
        try:
            got.append(market.worker_for_participant("P3", "S", "X"))
        except Exception as failed:  # noqa: BLE001 - a race must not fail a visit
            errors.append(failed)

    threads = [threading.Thread(target=visit) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(got)) == 1
    frame = market.workers()
    assert sorted(frame["participant_id"].dropna()) == ["P1", "P2", "P3"]


def test_gold_blocks_a_worker_below_accuracy(tmp_path):
    gold = {(f"R1-{h:05d}", 2): DOMAIN[2] for h in range(1, 5)}  # item 2 of every HIT is gold
    m = Market(tmp_path / "m.sqlite", gold_min=3, gold_accuracy=0.7)
    m.post(make_batch(n_hits=4, items=2, assignments=2, gold=gold))
    bad_id, bad = m.add_worker()
    good_id, good = m.add_worker()
    seen = 0
    for _ in range(4):
        a = m.take(bad)
        if a is None:
            break
        result = m.submit(bad, a["assignment_id"], a["csrf"], {1: DOMAIN[0], 2: DOMAIN[1]})  # gold wrong
        seen += 1
        assert result["blocked"] == (seen >= 3)
    assert seen == 3  # stopped after gold_min gold answers
    assert m.take(bad) is None and not m.available(bad)
    for _ in range(4):
        a = m.take(good)
        m.submit(good, a["assignment_id"], a["csrf"], {1: DOMAIN[0], 2: DOMAIN[2]})
    frame = m.workers().set_index("worker_id")
    assert frame.loc[bad_id, "blocked"] and frame.loc[bad_id, "quality"] == 0.0
    assert not frame.loc[good_id, "blocked"] and frame.loc[good_id, "quality"] == 1.0
    got = m.collected([f"R1-{h:05d}" for h in range(1, 5)])
    assert len(got.assignments) == 3 + 4
    assert sorted(got.answers["item_no"].unique()) == [1, 2]  # gold items come back with their item_no
    m.close()


def test_blocked_worker_releases_a_held_assignment(tmp_path):
    gold = {(f"R1-{h:05d}", 1): DOMAIN[2] for h in range(1, 3)}
    m = Market(tmp_path / "m.sqlite", gold_min=1, gold_accuracy=0.7)
    m.post(make_batch(n_hits=2, items=1, assignments=1, gold=gold))
    _, bad = m.add_worker()
    a = m.take(bad)
    assert m.submit(bad, a["assignment_id"], a["csrf"], {1: DOMAIN[0]})["blocked"]
    _, other = m.add_worker()
    assert m.take(other)["hit_id"] == "R1-00002"
    m.close()


def test_reports_progress_runs_and_earnings(market):
    market.post(make_batch(n_hits=2, assignments=2, run_id=1))
    market.post(make_batch(n_hits=1, assignments=1, run_id=2))
    alice_id, alice = market.add_worker()
    bob_id, bob = market.worker_for_participant("PB", "S", "X")
    for token in (alice, bob, alice):
        a = market.take(token)
        market.submit(token, a["assignment_id"], a["csrf"], all_right(market, a))
    market.take(bob)  # held, not submitted
    assert market.progress(["R1-00001", "R1-00002"]) == (3, 4)
    assert market.done_hits(["R1-00001", "R1-00002"]) == 1
    runs = {r["run_id"]: r for r in report.runs(market)}
    assert (runs[1]["hits"], runs[1]["asked"], runs[1]["taken"], runs[1]["submitted"], runs[1]["outstanding"]) == \
        (2, 4, 4, 3, 1)
    assert runs[1]["spent"] == pytest.approx(3 * 0.2 * 1.3) and runs[1]["to_come"] == pytest.approx(0.2 * 1.3)
    earn = market.earnings(1)
    assert earn.to_dict("list") == {"worker_id": [alice_id, bob_id], "participant_id": [None, "PB"],
                                    "assignments": [2, 1], "reward": [pytest.approx(0.4), pytest.approx(0.2)]}
    assert market.earnings(2).empty
    assert len(report.answer_times(market, 1)) == 3
    agreement = report.agreement(market, 1).set_index("worker_id")
    assert agreement.loc[alice_id, "answers"] == 4 and agreement.loc[alice_id, "agreement"] == 1.0


def test_settings_follow_the_file(tmp_path):
    Market(tmp_path / "m.sqlite", lease=30, gold_min=5).close()
    again = Market(tmp_path / "m.sqlite")
    assert (again.lease, again.gold_min, again.gold_accuracy) == (30.0, 5, 0.7)
    with pytest.raises(ArgumentError):
        Market(tmp_path / "m.sqlite", lease=0)
    again.close()


# -- under concurrency ----------------------------------------------------------------------------------------------

def _hammer(market: Market, token: str, rng: np.random.Generator, log: list) -> None:
    while True:
        a = market.take(token)
        if a is None:
            return
        answers = all_right(market, a, DOMAIN[int(rng.integers(0, 3))])
        result = market.submit(token, a["assignment_id"], a["csrf"], answers)
        log.append((a["assignment_id"], result["again"]))
        if rng.random() < 0.3:  # the same form twice: paid once
            log.append((a["assignment_id"], market.submit(token, a["assignment_id"], a["csrf"], answers)["again"]))


def _check_all_done(market: Market, hit_ids: list[str], assignments: int, items: int) -> pd.DataFrame:
    got = market.collected(hit_ids)
    per_hit = got.assignments.groupby("hit_id").size()
    assert (per_hit == assignments).all() and len(per_hit) == len(hit_ids)
    assert not got.assignments.duplicated(["hit_id", "worker_id"]).any()
    assert len(got.answers) == len(hit_ids) * assignments * items
    assert not got.answers.duplicated(["assignment_id", "item_no"]).any()
    earned = market.earnings()
    assert earned["assignments"].sum() == len(hit_ids) * assignments
    assert earned["reward"].sum() == pytest.approx(len(hit_ids) * assignments * 0.2)
    return got


def test_threads_hammering_take_and_submit(tmp_path):
    m = Market(tmp_path / "m.sqlite")
    m.post(make_batch(n_hits=30, items=3, assignments=3))
    tokens = [m.add_worker()[1] for _ in range(10)]
    logs = [[] for _ in tokens]
    errors = []

    def run(i):
        try:
            _hammer(m, tokens[i], np.random.default_rng(i), logs[i])
        except Exception as failed:  # noqa: BLE001
            errors.append(failed)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(tokens))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    hit_ids = [f"R1-{i:05d}" for i in range(1, 31)]
    got = _check_all_done(m, hit_ids, 3, 3)
    first = Counter(aid for log in logs for aid, again in log if not again)
    assert set(first) == set(got.assignments["assignment_id"]) and max(first.values()) == 1
    m.close()


def test_threads_racing_for_reclaimed_slots(tmp_path):
    clock = Clock()
    m = Market(tmp_path / "m.sqlite", clock=clock, lease=10)
    m.post(make_batch(n_hits=5, items=1, assignments=2))
    quitters = [m.add_worker()[1] for _ in range(10)]
    for token in quitters:
        assert m.take(token) is not None  # every slot taken, never submitted
    clock.t += 11
    racers = [m.add_worker()[1] for _ in range(16)]
    barrier = threading.Barrier(len(racers))
    got = []

    def race(token):
        barrier.wait()
        got.append(m.take(token))

    threads = [threading.Thread(target=race, args=(t,)) for t in racers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    taken = [g for g in got if g is not None]
    assert len(taken) == 10  # exactly the ten lapsed slots, each to one racer
    assert len({(g["hit_id"], g["slot"]) for g in taken}) == 10
    assert m._con().execute("SELECT count(*) FROM lapsed").fetchone()[0] == 10
    m.close()


def _process_worker(path: str, seed: int, n_workers: int, queue) -> None:
    market = Market(path)
    try:
        log: list = []
        for i in range(n_workers):
            _, token = market.add_worker()
            _hammer(market, token, np.random.default_rng(seed * 100 + i), log)
        queue.put(("ok", log))
    except Exception as failed:  # noqa: BLE001
        queue.put(("error", repr(failed)))


def test_processes_hammering_one_market_file(tmp_path):
    path = str(tmp_path / "m.sqlite")
    m = Market(path)
    m.post(make_batch(n_hits=12, items=2, assignments=3))
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_process_worker, args=(path, s, 2, queue)) for s in range(3)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(10)
    assert all(kind == "ok" for kind, _ in results), results
    _check_all_done(m, [f"R1-{i:05d}" for i in range(1, 13)], 3, 2)
    m.close()


def test_an_excluded_worker_never_takes_that_hit(market):
    """Issue 28: a later round's HIT is not given to a worker who answered one of its items before
    (HitBatch.exclude); other workers take it, and the excluded one gets the next HIT it may answer."""
    workers = [market.add_worker() for _ in range(2)]
    (w1, t1), (_, t2) = workers
    batch = make_batch(n_hits=2, assignments=1)
    batch.exclude = pd.DataFrame({"hit_id": ["R1-00001"], "item_no": [2], "worker_id": [w1]})
    market.post(batch)
    first = market.take(t1)
    assert first["hit_id"] == "R1-00002"  # the oldest HIT it may answer, not the one it is excluded from
    assert market.take(t2)["hit_id"] == "R1-00001"
    market.submit(t1, first["assignment_id"], first["csrf"], all_right(market, first))
    assert market.take(t1) is None and not market.available(t1)
    # posting the batch again changes nothing (idempotent), and a market file from before the table gains it
    assert market.post(batch) == 0
    assert market._con().execute("SELECT count(*) FROM excluded").fetchone()[0] == 1


def test_a_hit_built_for_a_worker_goes_to_it_first_and_waits_for_it_while_others_have_work(market):
    """Issue 28's quality-aware rounds (HitBatch.offer): the worker a HIT was built for gets it before older HITs;
    another worker takes the HITs built for nobody first, and one built for someone else only when nothing else is
    open; a HIT built for a worker is still posted once and its offer kept once."""
    (w1, t1), (w2, t2), (_, t3) = [market.add_worker() for _ in range(3)]
    batch = make_batch(n_hits=4, assignments=1)
    batch.offer = pd.DataFrame({"hit_id": ["R1-00003", "R1-00004"], "worker_id": [w1, w2]})
    market.post(batch)
    assert market.take(t2)["hit_id"] == "R1-00004"  # its own HIT, though three are older
    first = market.take(t3)
    assert first["hit_id"] == "R1-00001"  # built for nobody, oldest first
    market.submit(t3, first["assignment_id"], first["csrf"], all_right(market, first))
    second = market.take(t3)
    assert second["hit_id"] == "R1-00002"
    market.submit(t3, second["assignment_id"], second["csrf"], all_right(market, second))
    assert market.take(t3)["hit_id"] == "R1-00003"  # nothing else open: w1's HIT goes to t3 rather than wait
    assert market.take(t1) is None  # everything is taken
    assert market.post(batch) == 0
    assert market._con().execute("SELECT count(*) FROM offered").fetchone()[0] == 2


def test_a_market_file_without_the_exclusions_table_gains_it(tmp_path, clock):
    path = tmp_path / "old.sqlite"
    Market(path, clock=clock).close()
    con = sqlite3.connect(path)
    con.execute("DROP TABLE excluded")
    con.commit()
    con.close()
    reopened = Market(path, clock=clock)
    reopened.post(make_batch(n_hits=1))
    _, token = reopened.add_worker()
    assert reopened.take(token)["hit_id"] == "R1-00001"
    reopened.close()
