"""WebCrowd, the platform of real people: publish serves the page, people answer over HTTP, collect returns exactly
their answers, or stops after its timeout saying how many assignments are out; a later collect gets them."""

from __future__ import annotations

import re
import socket
import threading

import httpx
import pandas as pd
import pytest

from crowddb.crowd.platform import HitBatch
from crowddb.crowd.web import Market, WebCrowd
from crowddb.errors import AnswersOutstandingError, PlatformError, UnknownHITError

DOMAIN = ("Adm-clerical", "Exec-managerial", "Prof-specialty")


def make_batch(n_hits=3, items=2, assignments=2, run_id=1) -> HitBatch:
    hit_ids = [f"R{run_id}-{i:05d}" for i in range(1, n_hits + 1)]
    hits = pd.DataFrame({"hit_id": hit_ids, "run_id": run_id, "assignments": assignments, "round": 1,
                         "question": "Which job?", "domain": [DOMAIN] * n_hits, "reward": 0.2, "fee_rate": 0.3,
                         "target": None})
    items_frame = pd.DataFrame([{"hit_id": h, "item_no": i, "row_no": 1, "age": f"[{20 + i}-{30 + i}]"}
                                for h in hit_ids for i in range(1, items + 1)])
    return HitBatch(hits, items_frame, ["age"])


def answer_over_http(link: str, pick, limit: int = 100) -> list[tuple[str, int, str]]:
    """One person: open the link, answer every HIT offered (``pick(hit_no, item_no)``), until none is left."""
    given = []
    with httpx.Client(timeout=10) as client:
        for n in range(limit):
            page = client.get(link).text
            if "No HIT available" in page:
                break
            action = re.search(r'action="([^"]+)"', page).group(1)
            csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
            assignment_id = action.rsplit("/", 1)[1]
            answers = {int(i): pick(n, int(i)) for i in re.findall(r'data-item="(\d+)"', page)}
            reply = client.post(link.split("/w/")[0] + action,
                                data={"csrf": csrf, **{f"answer-{i}": a for i, a in answers.items()}},
                                follow_redirects=False)
            assert reply.status_code == 303, reply.text
            given += [(assignment_id, i, a) for i, a in answers.items()]
    return given


@pytest.fixture
def crowd(tmp_path):
    told = []
    c = WebCrowd(port=0, market=tmp_path / "m.sqlite", workers=3, poll=0.02, announce=told.append)
    c.told = told
    yield c
    c.close()


def test_publish_serves_and_collect_returns_exactly_the_answers(crowd):
    batch = make_batch(n_hits=3, items=2, assignments=2)
    crowd.publish(batch)
    crowd.publish(batch)  # idempotent
    assert crowd.known(["R1-00001", "R1-00009"]) == {"R1-00001"}
    assert len(crowd.told) == 1 and crowd.requester_url in crowd.told[0]
    links = crowd.worker_links()
    assert len(links) == 3 and all(link in crowd.told[0] for link in links)
    assert httpx.get(crowd.requester_url).status_code == 200
    given: list = []
    picks = [lambda n, i: DOMAIN[0], lambda n, i: DOMAIN[(n + i) % 3], lambda n, i: DOMAIN[2]]
    threads = [threading.Thread(target=lambda k=k: given.extend(answer_over_http(links[k], picks[k])))
               for k in range(3)]
    for t in threads:
        t.start()
    steps = []
    got = crowd.collect(list(batch.hits["hit_id"]), progress=steps.append, timeout=30)
    for t in threads:
        t.join()
    assert sum(steps) == 3
    answers = got.answers
    assert sorted(zip(answers["assignment_id"], answers["item_no"], answers["answer"])) == sorted(given)
    assert len(got.assignments) == 6 and not got.assignments.duplicated(["hit_id", "worker_id"]).any()
    assert set(got.answers["worker_id"]) <= set(crowd.workers()["worker_id"])
    workers = crowd.workers()
    assert list(workers.columns) == ["worker_id", "quality", "blocked", "marketplace_id"]
    assert workers["quality"].isna().all() and not workers["blocked"].any()
    assert workers["marketplace_id"].tolist() == [None, None, None]
    study = httpx.get(f"{crowd.url}/study?PROLIFIC_PID=p77&STUDY_ID=s&SESSION_ID=x", follow_redirects=False)
    assert study.status_code == 303
    assert crowd.workers()["marketplace_id"].tolist() == [None, None, None, "p77"]


def test_collect_times_out_then_a_later_collect_returns(crowd):
    batch = make_batch(n_hits=2, items=1, assignments=2)
    crowd.publish(batch)
    hit_ids = list(batch.hits["hit_id"])
    links = crowd.worker_links()
    answer_over_http(links[0], lambda n, i: DOMAIN[1])  # one person answers both HITs: 2 of 4 assignments
    with pytest.raises(AnswersOutstandingError, match=r"2 of 4 assignments are still out after 0.2 s") as out:
        crowd.collect(hit_ids, timeout=0.2)
    assert (out.value.outstanding, out.value.total) == (2, 4)
    crowd.timeout = 0.1  # the platform's default when the call gives none
    with pytest.raises(AnswersOutstandingError, match="run the same query again later"):
        crowd.collect(hit_ids)
    answer_over_http(links[1], lambda n, i: DOMAIN[2])
    got = crowd.collect(hit_ids, timeout=5)
    assert len(got.assignments) == 4
    assert sorted(got.answers["answer"]) == [DOMAIN[1]] * 2 + [DOMAIN[2]] * 2
    again = crowd.collect(hit_ids, timeout=0)  # collecting again: the same
    assert again.answers.equals(got.answers)


def test_unknown_hits_raise(crowd):
    crowd.publish(make_batch(n_hits=1))
    with pytest.raises(UnknownHITError):
        crowd.collect(["R1-00001", "R5-00001"], timeout=0)


def test_bind_places_the_market_beside_the_database(tmp_path):
    crowd = WebCrowd(port=0, serve=False, announce=None)
    crowd.bind(str(tmp_path / "jobs.duckdb"))
    assert crowd.market.path == f"{tmp_path / 'jobs.duckdb'}.market.sqlite"
    crowd.close()
    memory = WebCrowd(port=0, serve=False, announce=None)
    memory.bind(":memory:")
    assert memory.market.path.endswith("market.sqlite") and "crowddb-market-" in memory.market.path
    memory.close()
    explicit = WebCrowd(port=0, market=tmp_path / "mine.sqlite", serve=False, announce=None)
    explicit.bind(str(tmp_path / "jobs.duckdb"))
    assert explicit.market.path == str(tmp_path / "mine.sqlite")
    explicit.close()


def test_a_server_already_serving_the_market_is_used(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    first = WebCrowd(port=port, market=tmp_path / "m.sqlite", announce=None, completion_code="C1A2B3",
                     completion_url="https://example.org/done?cc={code}")
    first.publish(make_batch(n_hits=1))
    second = WebCrowd(port=port, market=tmp_path / "m.sqlite", announce=None)  # like a later session
    second.publish(make_batch(n_hits=2))
    assert second._server is None and second.url == first.url  # it did not start its own
    assert Market(tmp_path / "m.sqlite").completion_code == "C1A2B3"
    stranger = WebCrowd(port=port, market=tmp_path / "other.sqlite", announce=None)
    with pytest.raises(PlatformError, match="not for this market"):
        stranger.publish(make_batch(n_hits=1))
    for c in (stranger, second, first):
        c.close()


def test_a_taken_port_is_a_platform_error(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, not listening: nothing answers, and nobody else can bind it
        crowd = WebCrowd(port=s.getsockname()[1], market=tmp_path / "m.sqlite", announce=None)
        with pytest.raises(PlatformError, match="cannot serve the HIT page"):
            crowd.publish(make_batch(n_hits=1))
        assert crowd.known(["R1-00001"]) == {"R1-00001"}  # posted: a later session can still collect it
        crowd.close()
