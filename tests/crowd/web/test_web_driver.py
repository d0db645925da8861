"""The simulated people (crowddb.crowd.web.driver) answer every HIT of a small batch over HTTP, against the app served
from a thread, and what they were thanked for is exactly what the marketplace stored."""

from __future__ import annotations

import sqlite3
from collections import Counter

import pandas as pd
import pytest

from crowddb.crowd import HitBatch
from crowddb.crowd.web import Market
from crowddb.crowd.web.app import create_app
from crowddb.crowd.web.driver import SimulatedPeople, crowd_policy, gold_wrong_policy, parse_form, parse_form_fast
from crowddb.crowd.web.server import serve_in_thread

DOMAIN = ("Adm-clerical", "Craft-repair", "Exec-managerial", "Sales")
COLUMNS = ["age", "sex", "workclass"]
QUESTION = "Which one of the listed job positions fits this person best?"


def batch(n_hits: int = 4, n_items: int = 3, assignments: int = 3) -> HitBatch:
    hits = pd.DataFrame({"hit_id": [f"R1-{h:05d}" for h in range(1, n_hits + 1)], "run_id": 1,
                         "assignments": assignments, "round": 1, "question": QUESTION,
                         "domain": [DOMAIN] * n_hits, "reward": 0.2, "fee_rate": 0.3, "target": None})
    items = pd.DataFrame([{"hit_id": f"R1-{h:05d}", "item_no": i, "row_no": 1, "age": f"[{20 + h}-{30 + i}]",
                           "sex": "*", "workclass": f"wc{h}.{i}"}
                          for h in range(1, n_hits + 1) for i in range(1, n_items + 1)])
    return HitBatch(hits=hits, items=items, published_columns=COLUMNS)


@pytest.fixture
def served(tmp_path):
    market = Market(str(tmp_path / "market.sqlite"))
    handle = serve_in_thread(create_app(market), port=0)
    try:
        yield market, handle
    finally:
        handle.stop()


def test_five_people_answer_every_hit_and_the_market_stores_exactly_their_answers(served):
    market, handle = served
    b = batch()
    market.post(b)
    tokens = [market.add_worker()[1] for _ in range(5)]
    seen = []  # what each person read on its form

    def reading(form, rng):
        seen.append(form)
        return crowd_policy()(form, rng)

    run = SimulatedPeople(handle.url, tokens, policy=reading, seed=3, max_seconds=20).run()

    # every person worked until nothing was left, nothing failed
    assert [p.stopped for p in run.people] == ["no HIT available"] * 5
    assert Counter(r.outcome for r in run.requests if r.kind == "submit") == {"thanked": 12}  # 4 HITs x 3
    assert all("$0.20" in s.earned for s in run.thanked())
    # the forms showed the question, the domain and exactly the published items of the batch
    by_hit = {h: g for h, g in b.items.groupby("hit_id")}
    collected = market.collected(list(b.hits["hit_id"]))
    hit_of = dict(zip(collected.assignments["assignment_id"], collected.assignments["hit_id"]))
    for form in seen:
        assert form.question == QUESTION
        items = by_hit[hit_of[form.assignment_id]]
        assert sorted(form.items) == items["item_no"].tolist()
        for no, item in form.items.items():
            assert (item.kind, item.choices) == ("choice", list(DOMAIN))
            row = items[items["item_no"] == no].iloc[0]
            assert item.rows == [{c: row[c] for c in COLUMNS}]
    # exactly the thanked answers are in the market, once each; 3 different people per HIT
    stored = collected.answers
    assert len(stored) == len(run.answers()) == 12 * 3
    token_of = {}
    for s in run.thanked():
        token_of[s.assignment_id] = s.token
    mine = sorted((a, int(n), token_of[a], str(x)) for a, n, x in
                  zip(stored["assignment_id"], stored["item_no"], stored["answer"]))
    assert mine == run.answers()
    per_hit = collected.assignments.groupby("hit_id")["worker_id"].agg(["count", "nunique"])
    assert (per_hit["count"] == 3).all() and (per_hit["nunique"] == 3).all() and len(per_hit) == 4
    assert set(hit_of.values()) == set(b.hits["hit_id"])
    # latency was recorded for every page, submit and thank-you page
    assert {k: v["count"] for k, v in run.summary().items()} == {"page": 12 + 5, "submit": 12, "thanks": 12}


def test_parse_form_reads_the_contract_markup():
    html = """<html><body><h1>HIT</h1><p id="question">Which one?</p>
    <form id="hit-form" method="post" action="/w/tok/a/A-7"><input type="hidden" name="csrf" value="c5">
    <table><thead><tr><th>age</th><th>sex</th></tr></thead>
    <tbody class="item" data-item="1"><tr><td>[20-30]</td><td>*</td></tr>
      <tr><td><label><input type="radio" name="answer-1" value="a">a</label>
      <label><input type="radio" name="answer-1" value="b" checked>b</label></td></tr></tbody>
    <tbody class="item" data-item="2"><tr><td>[31-40]</td><td>F</td></tr>
      <tr><td><input type="number" name="answer-2"></td></tr></tbody></table>
    <button id="submit">Submit</button></form></body></html>"""
    form = parse_form(html)
    assert (form.action, form.csrf, form.assignment_id, form.question) == ("/w/tok/a/A-7", "c5", "A-7", "Which one?")
    assert form.items[1].choices == ["a", "b"] and form.items[1].checked == "b"
    assert form.items[1].rows[0] == {"age": "[20-30]", "sex": "*"}
    assert form.items[2].kind == "number" and form.items[2].rows[0] == {"age": "[31-40]", "sex": "F"}
    assert parse_form("<p>No HIT available now</p>") is None
    fast = parse_form_fast(html)  # the load test's reading: the same form fields, no question, no rows
    assert (fast.action, fast.csrf, fast.assignment_id) == ("/w/tok/a/A-7", "c5", "A-7")
    assert [(i.item_no, i.kind, i.choices) for i in fast.items.values()] == [(1, "choice", ["a", "b"]),
                                                                            (2, "number", [])]


def test_participants_arrive_through_the_study_link_and_leave_with_the_completion_code(served):
    market, handle = served
    market.set_setting("completion_url", handle.url + "/healthz?cc={code}")
    market.post(batch(n_hits=2, n_items=2, assignments=2))
    run = SimulatedPeople(handle.url, participants=["p1", "p2"], seed=1, max_seconds=20).run()
    code = market.completion_code
    assert [(p.participant_id, p.submitted, p.completion_code, p.redirect, p.stopped) for p in run.people] == [
        (pid, 2, code, f"{handle.url}/healthz?cc={code}", "no HIT available") for pid in ("p1", "p2")]
    # again with the same ids: the same two workers, nothing left for them
    again = SimulatedPeople(handle.url, participants=["p1", "p2"], seed=2, max_seconds=20).run()
    assert [p.token for p in again.people] == [p.token for p in run.people]
    assert sorted(market.workers()["participant_id"].dropna()) == ["p1", "p2"]
    assert not again.submits


def test_a_person_answering_every_gold_item_wrongly_is_stopped_after_gold_min(served):
    market, handle = served
    b = batch(n_hits=6, n_items=3, assignments=1)
    b.gold = pd.DataFrame({"hit_id": b.hits["hit_id"], "item_no": 3, "answer": "Sales"})  # item 3 of each HIT
    market.post(b)
    gold = {(h, n): a for h, n, a in zip(b.gold["hit_id"], b.gold["item_no"], b.gold["answer"])}
    con = sqlite3.connect(market.path)  # the test reads the hit of an assignment (the page does not show it)

    def hit_of(assignment_id):
        return con.execute("SELECT hit_id FROM assignments WHERE assignment_id = ?", (assignment_id,)).fetchone()[0]

    bad, good = market.add_worker(), market.add_worker()
    first = SimulatedPeople(handle.url, [bad[1]], policy=gold_wrong_policy(gold), hit_of=hit_of, max_seconds=20).run()
    assert [(p.submitted, p.stopped) for p in first.people] == [(3, "no HIT available")]  # gold_min = 3
    assert all(s.answers[3] != "Sales" for s in first.thanked())
    truth = lambda h, n: gold.get((h, n))
    second = SimulatedPeople(handle.url, [good[1]], policy=crowd_policy(1.0, truth), hit_of=hit_of,
                             max_seconds=20).run()
    assert [(p.submitted, p.stopped) for p in second.people] == [(3, "no HIT available")]
    workers = market.workers().set_index("worker_id")
    assert bool(workers.loc[bad[0], "blocked"]) and not bool(workers.loc[good[0], "blocked"])
    assert (workers.loc[bad[0], "quality"], workers.loc[good[0], "quality"]) == (0.0, 1.0)
    con.close()
