"""Issue 16, end to end over HTTP: a requester publishes, goes home, `crowddb serve` keeps the page up while people
answer, and the next day's rerun collects their answers without buying anything twice; gold questions stop a worker
who fails them, and ``gold_drop`` leaves that worker's answers out.

People are the simulated crowd playing workers on the page (``crowddb.crowd.web.driver.SimulatedPeople``): every
answer goes through the same forms a browser posts."""

from __future__ import annotations

import socket
import sqlite3
import subprocess
import sys
import threading
import time

import httpx
import pytest
from conftest import people_frame

import crowddb
from crowddb.crowd import WebCrowd
from crowddb.crowd.web.driver import SimulatedPeople, fixed_policy, gold_wrong_policy
from crowddb.errors import AnswersOutstandingError

QUERY = ("SELECT id, getposition(age, zip, edu, k := 5, tuples_per_hit := 10, assignments := 3) AS job "
         "FROM people ORDER BY id")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load(db, n: int = 30) -> None:
    db.load_frame("people", people_frame(n), quasi_identifiers=["age", "zip"], sensitive=["salary"],
                  ground_truth="job", key="id")


def wait_up(url: str, seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"no server on {url}")


def test_publish_go_home_serve_and_collect_the_next_day(tmp_path):
    path = tmp_path / "jobs.duckdb"
    port = free_port()
    crowd = WebCrowd(port=port, workers=3, poll=0.05, announce=None)
    with crowddb.connect(path, platform=crowd, seed=1, progress=False) as db:
        load(db)
        with pytest.raises(AnswersOutstandingError, match=r"9 of 9 assignments are still out after 0.3 s; the HITs "
                                                          r"stay published: run the same query again later") as out:
            db.sql(QUERY, timeout=0.3)
        assert (out.value.outstanding, out.value.total) == (9, 9)
        shown = db.sql("SELECT hit_id, item_no, content FROM crowddb_hit_items ORDER BY ALL").fetchall()
    crowd.close()  # the session is over: its page goes down with it

    market = f"{path}.market.sqlite"
    server = subprocess.Popen([sys.executable, "-m", "crowddb.cli", "serve", "--db", str(path), "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_up(base)
        told = server.stdout.readline()
        assert told.startswith(f"HIT page: requester page {base}/r/")
        links = [t for (t,) in sqlite3.connect(market).execute("SELECT token FROM workers ORDER BY worker_id")]
        assert len(links) == 5  # `crowddb serve` tops the 3 links up to its default 5
        people = SimulatedPeople(base, links, policy=fixed_policy(lambda form, no: "teacher"), max_seconds=30)
        run = people.run()
        assert len(run.thanked()) == 9  # 3 HITs x 3 people
        page = httpx.get(told.split()[-1], timeout=5).text  # the requester page, served by `crowddb serve`
        assert 'id="tradeoff"' in page and "k-anonymity trade-off" in page  # the panel the session left there
    finally:
        server.kill()
        server.wait(10)

    crowd = WebCrowd(port=port, workers=3, poll=0.05, announce=None)
    with crowddb.connect(path, platform=crowd, seed=1, progress=False) as db:
        # the next day: what people answered is on record as soon as a session opens the database
        assert db.sql("SELECT count(*) FROM crowddb_answers").fetchall() == [(9 * 10,)]
        assert db.sql("SELECT run_id, hits, assignments FROM crowddb_runs").fetchall() == [(1, 3, 9)]
        got = db.sql(QUERY, timeout=10).df()  # and the rerun is served from those answers: nothing bought again
        assert got["job"].tolist() == ["teacher"] * 30
        assert db.sql("SELECT count(*), count(DISTINCT assignment_id) FROM crowddb_payments").fetchall() == [(9, 9)]
        assert db.sql("SELECT status, count(*) FROM crowddb_hits GROUP BY ALL").fetchall() == [("completed", 3)]
        assert db.sql("SELECT hit_id, item_no, content FROM crowddb_hit_items ORDER BY ALL").fetchall() == shown
    crowd.close()
    assert sqlite3.connect(market).execute("SELECT count(*) FROM hits").fetchall() == [(3,)]  # posted once


def test_a_worker_failing_gold_questions_is_stopped_and_left_out(tmp_path):
    """Two gold questions per HIT (gold := 0.2 of 10 items), gold_min 2: the two workers answering them wrongly are
    blocked after their first HIT (both take the first); the good people answer gold right and 'clerk' elsewhere,
    the stopped ones 'teacher', a majority of that HIT; with gold_drop every row's answer is 'clerk'."""
    crowd = WebCrowd(port=0, workers=5, poll=0.05, gold_min=2, gold_accuracy=0.7, announce=None)
    query = QUERY.replace("assignments := 3", "assignments := 3, gold := 0.2, gold_drop := true")
    result: dict = {}
    with crowddb.connect(tmp_path / "gold.duckdb", platform=crowd, seed=1, progress=False) as db:
        load(db, 40)
        runner = threading.Thread(target=lambda: result.update(df=db.sql(query, timeout=60).df()))
        runner.start()
        deadline = time.monotonic() + 30
        while not crowd.market.known([f"R1-0000{i}" for i in range(1, 5)]) and time.monotonic() < deadline:
            time.sleep(0.05)
        market = crowd.market.path
        gold = {(h, n): a for h, n, a in sqlite3.connect(market).execute("SELECT hit_id, item_no, answer FROM gold")}
        assert len(gold) == 4 * 2

        def hit_of(assignment_id: str) -> str:
            return sqlite3.connect(market).execute("SELECT hit_id FROM assignments WHERE assignment_id = ?",
                                                   [assignment_id]).fetchone()[0]

        tokens = list(crowd.market.link_tokens().values())
        bad = SimulatedPeople(crowd.url, tokens[:2], hit_of=hit_of, max_seconds=20,
                              policy=gold_wrong_policy(gold, fixed_policy(lambda form, no: "teacher"))).run()
        assert len(bad.thanked()) == 2  # each stopped after its first HIT's two gold questions
        good = SimulatedPeople(crowd.url, tokens[2:], hit_of=hit_of, max_seconds=30,  # right on gold, else clerk
                               policy=fixed_policy(lambda form, no: gold.get((form.hit_id, no), "clerk"))).run()
        runner.join(60)
        workers = crowd.workers().set_index("worker_id")
        blocked = workers.index[workers["blocked"]].tolist()
        assert len(blocked) == 2 and (workers.loc[blocked, "quality"] == 0.0).all()
        assert len(good.thanked()) == 4 * 3 - 2
        assert result["df"]["job"].tolist() == ["clerk"] * 40
        stopped = db.sql("SELECT worker_id, count(*) FROM crowddb_answers WHERE worker_id IN (?, ?) GROUP BY ALL "
                         "ORDER BY ALL", params=blocked).fetchall()
        assert stopped == [(w, 10) for w in sorted(blocked)]  # bought and on record; the aggregation left them out
    crowd.close()


def test_the_cli_publishes_on_the_page_and_says_what_is_still_out(tmp_path, capsys):
    from crowddb.cli import main

    path = tmp_path / "cli.duckdb"
    with crowddb.connect(path, progress=False) as db:
        load(db)
    assert main(["sql", QUERY, "--db", str(path), "--web", "--port", "0", "--timeout", "0.2"]) == 2
    out, err = capsys.readouterr()
    assert out.startswith("HIT page: requester page http://127.0.0.1:") and out.count("/w/") == 5
    assert err.strip() == ("crowddb: AnswersOutstandingError: 9 of 9 assignments are still out after 0.2 s; the HITs "
                           "stay published: run the same query again later to collect them without buying anything "
                           "twice")
    assert sqlite3.connect(f"{path}.market.sqlite").execute("SELECT count(*) FROM hits").fetchall() == [(3,)]


def test_serve_needs_a_database_file(capsys):
    from crowddb.cli import main

    assert main(["serve", "--db", ":memory:"]) == 2
    assert "crowddb serve needs a database file" in capsys.readouterr().err


def test_a_group_operator_on_the_page_returns_the_rows_people_picked(tmp_path):
    """getcandidate on the web: each item is a group's rows, people pick a row, and the query returns the picked
    person's key per group; what crowddb bought is exactly what the people submitted."""
    crowd = WebCrowd(port=0, workers=2, poll=0.05, announce=None)
    query = ("SELECT hobby, getcandidate(age, zip, edu, 'teacher', k := 5, assignments := 1) AS pick "
             "FROM people GROUP BY hobby ORDER BY hobby")
    result: dict = {}
    with crowddb.connect(tmp_path / "group.duckdb", platform=crowd, seed=1, progress=False) as db:
        load(db)
        runner = threading.Thread(target=lambda: result.update(df=db.sql(query, timeout=60).df()))
        runner.start()
        people = SimulatedPeople(crowd.url, list(crowd.market.link_tokens().values())[:1], patience=3, max_seconds=30,
                                 policy=fixed_policy(lambda form, no: form.items[no].choices[-1]))  # the last row
        run = people.run()
        runner.join(60)
        got = result["df"]
        frame = people_frame(30)
        assert got["hobby"].tolist() == sorted(frame["hobby"].unique())
        for hobby, pick in zip(got["hobby"], got["pick"]):  # each pick is a person of that group
            assert int(pick) in set(frame.loc[frame["hobby"] == hobby, "id"])
        bought = db.sql("SELECT assignment_id, item_no, answer FROM crowddb_answers ORDER BY ALL").fetchall()
    assert bought == [(a, n, v) for a, n, _, v in run.answers()]
    assert len(run.thanked()) == 1 and len(bought) == 3  # the 3 groups' 30 rows fit one HIT (100 rows): 3 items
    crowd.close()
