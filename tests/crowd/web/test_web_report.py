"""What the requester page shows of a market (crowddb.crowd.web.report): the numbers of a small market whose every
answer and time is known, the trade-off a session keeps for the page, the payments CSV and the SVG charts."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from crowddb.crowd.platform import HitBatch
from crowddb.crowd.web import report
from crowddb.crowd.web.market import Market

A, B, C = "Adm-clerical", "Exec-managerial", "Prof-specialty"
T0 = 1_000_000.0


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def make_batch(run_id: int, n_hits: int, items: int, assignments: int, reward: float) -> HitBatch:
    hit_ids = [f"R{run_id}-{i:05d}" for i in range(1, n_hits + 1)]
    hits = pd.DataFrame({"hit_id": hit_ids, "run_id": run_id, "assignments": assignments, "round": 1,
                         "question": "Which job?", "domain": [(A, B, C)] * n_hits, "reward": reward,
                         "fee_rate": 0.3, "target": None})
    table = pd.DataFrame([{"hit_id": h, "item_no": i, "row_no": 1, "age": "[20-29]"}
                          for h in hit_ids for i in range(1, items + 1)])
    return HitBatch(hits, table, ["age"])


@pytest.fixture
def market(tmp_path) -> Market:
    m = Market(tmp_path / "market.sqlite", clock=Clock())
    yield m
    m.close()


@pytest.fixture
def answered(market) -> Market:
    """Run 1: two HITs of two items, three assignments each, $0.20; run 2: one HIT, one assignment, $0.50. Alice
    (a link), Bob (participant PB) and Carol (a link) answer R1-00001 at T0 + 10, 20 and 35; item 1's majority is A
    (Carol disagrees), item 2's is B (Alice disagrees). Alice then holds R1-00002 unsubmitted."""
    market.post(make_batch(1, n_hits=2, items=2, assignments=3, reward=0.2))
    market.post(make_batch(2, n_hits=1, items=1, assignments=1, reward=0.5))
    _, alice = market.add_worker()
    _, bob = market.worker_for_participant("PB", "S", "X")
    _, carol = market.add_worker()
    for token, answers, at in ((alice, {1: A, 2: A}, 10), (bob, {1: A, 2: B}, 20), (carol, {1: B, 2: B}, 35)):
        market.clock.t = T0 + at
        a = market.take(token)
        assert a["hit_id"] == "R1-00001"
        market.submit(token, a["assignment_id"], a["csrf"], answers)
    assert market.take(alice)["hit_id"] == "R1-00002"
    return market


def test_runs_and_their_workers(answered):
    assert report.runs(answered) == [
        {"run_id": 1, "hits": 2, "asked": 6, "taken": 4, "held": 1, "submitted": 3, "outstanding": 3,
         "spent": 0.78, "to_come": 0.78},
        {"run_id": 2, "hits": 1, "asked": 1, "taken": 0, "held": 0, "submitted": 0, "outstanding": 1,
         "spent": 0.0, "to_come": 0.65}]
    assert report.run_workers(answered, 1) == [
        {"worker_id": "web-0001", "participant_id": None, "submitted": 1, "earned": 0.2, "quality": None,
         "blocked": False},
        {"worker_id": "web-0002", "participant_id": "PB", "submitted": 1, "earned": 0.2, "quality": None,
         "blocked": False},
        {"worker_id": "web-0003", "participant_id": None, "submitted": 1, "earned": 0.2, "quality": None,
         "blocked": False}]
    assert report.run_workers(answered, 2) == []


def test_nothing_to_report_on_an_empty_market(market):
    assert report.runs(market) == []
    assert report.answer_times(market) == []
    assert report.agreement(market).to_dict("list") == {"worker_id": [], "answers": [], "agreement": []}
    assert report.worker_quality(market).to_dict("list") == {"worker_id": [], "answers": [], "quality": []}
    assert report.saved_tradeoff(market) is None
    assert report.payments_csv(market, None) == "participant_id,amount,worker_id,assignments\n"


def test_answer_times_and_agreement(answered):
    assert report.answer_times(answered) == [T0 + 10, T0 + 20, T0 + 35]
    assert report.answer_times(answered, 1) == [T0 + 10, T0 + 20, T0 + 35]
    assert report.answer_times(answered, 2) == []
    assert report.agreement(answered).to_dict("list") == {
        "worker_id": ["web-0001", "web-0002", "web-0003"], "answers": [2, 2, 2], "agreement": [0.5, 1.0, 0.5]}
    assert report.agreement(answered, 2).empty


def test_worker_quality(answered):
    quality = report.worker_quality(answered)  # Bob, with the majority on both items, weighs most
    assert quality.to_dict("list") == {"worker_id": ["web-0001", "web-0002", "web-0003"], "answers": [2, 2, 2],
                                       "quality": [pytest.approx(0.5), pytest.approx(2 / 3), pytest.approx(0.5)]}
    assert report.worker_quality(answered, 2).empty


def test_payments_csv(answered):
    rows = ",0.20,web-0001,1\nPB,0.20,web-0002,1\n,0.20,web-0003,1\n"
    assert report.payments_csv(answered, 1) == "participant_id,amount,worker_id,assignments\n" + rows
    assert report.payments_csv(answered, None) == "participant_id,amount,worker_id,assignments\n" + rows
    assert report.payments_csv(answered, 2) == "participant_id,amount,worker_id,assignments\n"


def test_the_tradeoff_kept_for_the_page(market):
    frame = pd.DataFrame({"k": [2, 2, 5, 10], "ncp": [12.5, 99.0, 30.0, math.nan],
                          "accuracy_lower": [0.8, 0.1, 0.7, math.nan], "accuracy_upper": [0.9, 0.2, 0.85, None],
                          "refused": [None, None, None, "fewer than 10 rows"]})
    report.save_tradeoff(market, "SELECT  getposition(*)\n  FROM adult", frame)
    assert report.saved_tradeoff(market) == {
        "query": "SELECT getposition(*) FROM adult", "k": [2, 5, 10], "ncp": [12.5, 30.0, None],
        "accuracy_lower": [0.8, 0.7, None], "accuracy_upper": [0.9, 0.85, None],
        "refused": {"10": "fewer than 10 rows"}}


def test_arrivals_svg():
    assert report.arrivals_svg([]) == (
        '<svg xmlns="http://www.w3.org/2000/svg" width="560" height="40" role="img" '
        'aria-label="Submitted assignments over time"><title>Submitted assignments over time</title>'
        '<text x="4" y="16" font-size="13">Submitted assignments over time: no answers yet</text></svg>')
    svg = report.arrivals_svg([0.0, 10.0, 30.0], width=200, height=100)
    # x from 48 to 188 over 30 s, y from 70 down to 24 over 3 answers
    assert ('<polyline fill="none" stroke="#1f5fa8" stroke-width="2" points="48,70 48.0,54.7 94.7,39.3 188.0,24.0"/>'
            in svg)
    assert 'aria-label="Submitted assignments over time: 3 in 30 s"' in svg
    assert 'aria-label="Submitted assignments over time: 2 in 3.3 min"' in report.arrivals_svg([0.0, 200.0])


def test_agreement_svg():
    frame = pd.DataFrame({"worker_id": ["<w1>", "w2"], "answers": [4, 2], "agreement": [0.5, math.nan]})
    svg = report.agreement_svg(frame, title="A & B")
    assert svg.startswith('<svg xmlns="http://www.w3.org/2000/svg" width="560" height="80" role="img" '
                          'aria-label="A &amp; B"><title>A &amp; B</title>')
    # bars 390 wide at 100 %; a missing share draws as none
    assert ('<text x="104" y="38" font-size="11" text-anchor="end">&lt;w1&gt;</text>'
            '<rect x="110" y="26" width="195.0" height="16" fill="#2e7d4f"/>'
            '<text x="309.0" y="38" font-size="11">50% of 4</text>') in svg
    assert ('<rect x="110" y="48" width="0.0" height="16" fill="#2e7d4f"/>'
            '<text x="114.0" y="60" font-size="11">0% of 2</text>') in svg
    assert report.agreement_svg(frame.iloc[:0]).endswith(
        '<text x="4" y="16" font-size="13">Agreement with the majority, per worker: no answers yet</text></svg>')


def test_tradeoff_svg():
    assert report.tradeoff_svg({}).endswith('<text x="4" y="16" font-size="13">k-anonymity trade-off of the current '
                                            'query: no crowd query yet</text></svg>')
    svg = report.tradeoff_svg({"query": "SELECT <x>", "k": [2, 5, 10], "ncp": [50.0, 25.0, None],
                               "accuracy_lower": [0.5, 0.75, None], "accuracy_upper": [1.0, None, None],
                               "refused": {"10": "too few rows"}})
    assert '<text x="4" y="30" font-size="11">SELECT &lt;x&gt;</text>' in svg
    # k from x 48 to 370, the share from y 186 down to 40
    assert 'points="48.0,113.0 168.8,149.5"' in svg  # NCP in percent: 50 % and 25 %
    assert 'points="48.0,113.0 168.8,76.5"' in svg
    assert svg.count("<polyline ") == 3 and svg.count("<circle ") == 5
    assert '<text x="378" y="112" font-size="10">not possible at k = 10</text>' in svg
