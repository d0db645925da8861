"""The HIT web page (crowddb.crowd.web.app) through Starlette's test client: the HTTP contract, the refusals, the
study hand-off, the requester page, and that nothing of a raw row reaches any page a worker can open."""

from __future__ import annotations

import html
import re

import pandas as pd
import pytest
from starlette.testclient import TestClient

from crowddb.crowd.platform import HitBatch
from crowddb.crowd.web.app import create_app
from crowddb.crowd.web.market import Market

DOMAIN = ("Adm-clerical", "Exec-managerial", "Prof-specialty")
QUESTION = "Which one of the listed job positions fits this person best?"


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def make_batch(n_hits=2, items=2, assignments=2, run_id=1, reward=0.2, kind="choice", rows=1) -> HitBatch:
    hit_ids = [f"R{run_id}-{i:05d}" for i in range(1, n_hits + 1)]
    hits = pd.DataFrame({"hit_id": hit_ids, "run_id": run_id, "assignments": assignments, "round": 1,
                         "question": QUESTION, "domain": [DOMAIN if kind == "choice" else None] * n_hits,
                         "reward": reward, "fee_rate": 0.3, "target": None})
    table = pd.DataFrame([{"hit_id": h, "item_no": i, "row_no": r, "age": f"[{20 + i}-{29 + i}]",
                           "education_num": "[5-9]", "marital_status": "{Married-civ-spouse,Divorced}"}
                          for h in hit_ids for i in range(1, items + 1) for r in range(1, rows + 1)])
    return HitBatch(hits, table, ["age", "education_num", "marital_status"])


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def market(tmp_path, clock):
    m = Market(tmp_path / "market.sqlite", clock=clock, lease=60)
    yield m
    m.close()


@pytest.fixture
def client(market):
    with TestClient(create_app(market, completion_url="https://example.org/complete?cc={code}")) as c:
        yield c


def form_of(page: str) -> dict:
    action = re.search(r'<form id="hit-form" method="post" action="([^"]+)"', page).group(1)
    csrf = re.search(r'<input type="hidden" name="csrf" value="([^"]+)"', page).group(1)
    return {"action": action, "csrf": csrf}


def answer_all(page: str, value: str = DOMAIN[0]) -> dict:
    items = [int(n) for n in re.findall(r'class="item[^"]*" data-item="(\d+)"', page)]
    return {f"answer-{n}": value for n in items}


def test_form_shows_question_choices_reward_and_exactly_the_published_items(client, market):
    market.post(make_batch(n_hits=1, items=3))
    _, token = market.add_worker()
    page = client.get(f"/w/{token}")
    assert page.status_code == 200
    text = page.text
    assert f'<h1 id="question">{QUESTION}</h1>' in text
    assert '<strong id="reward">$0.20</strong>' in text
    assert re.findall(r"<li>([^<]+)</li>", text) == list(DOMAIN)  # the positions listed at the head
    form = form_of(text)
    assert form["action"].startswith(f"/w/{token}/a/R1-00001-A1-")
    assert re.findall(r'data-item="(\d+)"', text) == ["1", "2", "3"]
    assert re.findall(r'<th scope="col">([^<]+)</th>', text) == ["age", "education_num", "marital_status"] * 3
    cells = [html.unescape(c) for c in re.findall(r"<td>([^<]*)</td>", text)]
    assert cells == ["[21-30]", "[5-9]", "{Married-civ-spouse,Divorced}", "[22-31]", "[5-9]",
                     "{Married-civ-spouse,Divorced}", "[23-32]", "[5-9]", "{Married-civ-spouse,Divorced}"]
    for n in (1, 2, 3):
        assert re.findall(rf'<input type="radio" name="answer-{n}" value="([^"]+)"', text) == list(DOMAIN)
    assert 'id="submit"' in text
    headers = page.headers
    assert "default-src 'self'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY" and headers["referrer-policy"] == "same-origin"


def test_pick_row_and_number_forms(client, market):
    market.post(make_batch(n_hits=1, items=2, kind="pick_row", rows=3))
    _, token = market.add_worker()
    text = client.get(f"/w/{token}").text
    assert re.findall(r'<input type="radio" name="answer-1" id="a1-\d" value="(\d)"', text) == ["1", "2", "3"]
    assert 'id="choices"' not in text
    number = make_batch(n_hits=1, items=1, run_id=2)
    number.hits["kind"] = "number"
    number.hits["domain"] = [None]
    market.post(number)
    _, other = market.add_worker()
    client.get(f"/w/{other}")  # takes the pick-row HIT
    first = client.get(f"/w/{other}").text
    fields = {"csrf": form_of(first)["csrf"], "answer-1": "2", "answer-2": "3"}
    assert client.post(form_of(first)["action"], data=fields, follow_redirects=False).status_code == 303
    text = client.get(f"/w/{other}").text
    assert '<input type="number" step="any" name="answer-1"' in text


def test_missing_item_is_named_and_given_answers_stay_checked(client, market):
    market.post(make_batch(n_hits=1, items=3))
    _, token = market.add_worker()
    form = form_of(client.get(f"/w/{token}").text)
    reply = client.post(form["action"], data={"csrf": form["csrf"], "answer-1": DOMAIN[1], "answer-3": "Astronaut"},
                        follow_redirects=False)
    assert reply.status_code == 400
    errors = re.search(r'<div id="errors" role="alert">(.*?)</div>', reply.text, re.DOTALL).group(1)
    assert re.findall(r'<a href="#item-\d">([^<]+)</a>', errors) == [
        "Item 2: please choose an answer", "Item 3: the answer is not one of the choices"]
    assert f'name="answer-1" value="{DOMAIN[1]}" checked' in reply.text
    assert reply.text.count(" checked") == 1
    assert market.progress(["R1-00001"]) == (0, 2)


def test_refusals(client, market, clock):
    market.post(make_batch(n_hits=1, items=1, assignments=1))
    _, alice = market.add_worker()
    _, bob = market.add_worker()
    page = client.get(f"/w/{alice}").text
    form = form_of(page)
    good = {"csrf": form["csrf"], "answer-1": DOMAIN[0]}
    assert client.get("/w/not-a-token").status_code == 404
    assert client.post("/w/not-a-token/a/x", data=good).status_code == 404
    forged = client.post(form["action"], data={**good, "csrf": "forged"}, follow_redirects=False)
    assert forged.status_code == 403
    stolen = client.post(form["action"].replace(alice, bob), data=good, follow_redirects=False)
    assert stolen.status_code == 403  # another worker's assignment
    assert client.get(f"/w/{bob}/thanks/{form['action'].rsplit('/', 1)[1]}").status_code == 403
    foreign = client.post(form["action"], data=good, headers={"origin": "https://evil.example"},
                          follow_redirects=False)
    assert foreign.status_code == 403
    assert market.progress(["R1-00001"]) == (0, 1)  # none of these stored anything
    clock.t += 61  # alice's lease runs out, bob takes the slot
    assert 'id="hit-form"' in client.get(f"/w/{bob}").text
    late = client.post(form["action"], data=good, headers={"origin": "http://testserver"}, follow_redirects=False)
    assert late.status_code == 409 and "went to another worker" in late.text
    assert client.get("/nowhere").status_code == 404
    assert client.get("/healthz").text == "ok"


def test_submit_thanks_and_paid_once(client, market):
    market.post(make_batch(n_hits=2, items=2))
    _, token = market.add_worker()
    form = form_of(client.get(f"/w/{token}").text)
    fields = {"csrf": form["csrf"], **answer_all(client.get(f"/w/{token}").text)}
    first = client.post(form["action"], data=fields, headers={"origin": "null"}, follow_redirects=False)
    assert first.status_code == 303  # an opaque origin (privacy settings) is let through: the csrf decides
    assignment_id = form["action"].rsplit("/", 1)[1]
    assert first.headers["location"] == f"/w/{token}/thanks/{assignment_id}"
    again = client.post(form["action"], data=fields, follow_redirects=False)
    assert again.status_code == 303 and again.headers["location"] == first.headers["location"]
    thanks = client.get(first.headers["location"]).text
    earned = re.search(r'<p id="earned">(.*?)</p>', thanks, re.DOTALL).group(1)
    assert re.findall(r"<strong>([^<]+)</strong>", earned) == ["$0.20", "$0.20"]
    assert f'<a id="next" href="/w/{token}">Next HIT</a>' in thanks
    assert "completion-code" not in thanks  # not a study participant
    page = client.get(f"/w/{token}").text
    second = form_of(page)
    assert client.post(second["action"], data={"csrf": second["csrf"], **answer_all(page)},
                       follow_redirects=False).status_code == 303
    thanks = client.get(f"/w/{token}/thanks/{second['action'].rsplit('/', 1)[1]}").text
    assert re.findall(r"<strong>([^<]+)</strong>", thanks) == ["$0.20", "$0.40"]
    assert "No further HIT" in thanks
    assert "No HIT available" in client.get(f"/w/{token}").text
    assert market.earnings()["reward"].tolist() == [pytest.approx(0.4)]


def test_study_link_one_worker_and_completion_code(client, market):
    market.post(make_batch(n_hits=1, items=1, assignments=1))
    assert client.get("/study?STUDY_ID=s").status_code == 400
    first = client.get("/study?PROLIFIC_PID=p1&STUDY_ID=s&SESSION_ID=x1", follow_redirects=False)
    again = client.get("/study?PROLIFIC_PID=p1&STUDY_ID=s&SESSION_ID=x2", follow_redirects=False)
    assert first.status_code == again.status_code == 303
    assert first.headers["location"] == again.headers["location"]
    token = first.headers["location"].rsplit("/", 1)[1]
    assert market.workers()["participant_id"].tolist() == ["p1"]
    page = client.get(first.headers["location"]).text
    form = form_of(page)
    done = client.post(form["action"], data={"csrf": form["csrf"], **answer_all(page)})
    assert done.status_code == 200  # followed the 303 to the thanks page
    code = market.completion_code
    assert f'<span class="code" id="completion-code">{code}</span>' in done.text
    link = f"https://example.org/complete?cc={code}"
    assert f'<meta http-equiv="refresh" content="3;url={link}">' in done.text
    assert f'href="{link}"' in done.text
    nohit = client.get(f"/w/{token}").text
    assert "No HIT available" in nohit and code in nohit
    fresh = client.get("/study?PROLIFIC_PID=p2&STUDY_ID=s&SESSION_ID=y").text
    assert "No HIT available" in fresh and code not in fresh  # no code before a submission


def test_study_parameter_names_are_configurable(market):
    with TestClient(create_app(market, study_params=("workerId", "batch", "visit"))) as c:
        assert c.get("/study?PROLIFIC_PID=p1").status_code == 400
        reply = c.get("/study?workerId=w9&batch=b&visit=v", follow_redirects=False)
        assert reply.status_code == 303
    assert market.workers()["participant_id"].tolist() == ["w9"]


def test_requester_page_and_payments_csv(market):
    market.post(make_batch(n_hits=2, items=1, assignments=2, run_id=1))
    market.post(make_batch(n_hits=1, items=1, assignments=1, run_id=2, reward=0.5))
    alice_id, alice = market.add_worker()
    bob_id, bob = market.worker_for_participant("PB", "S", "X")
    for token, answer in ((alice, DOMAIN[0]), (bob, DOMAIN[0]), (alice, DOMAIN[1]), (bob, DOMAIN[2])):
        a = market.take(token)
        market.submit(token, a["assignment_id"], a["csrf"], {1: answer})
    panel = '<svg id="k-tradeoff"><text>k trade-off</text></svg>'
    with TestClient(create_app(market, extra_panels=lambda: [panel])) as c:
        assert c.get("/r/wrong").status_code == 404
        assert c.get("/r/wrong/payments.csv?run=1").status_code == 404
        page = c.get(f"/r/{market.requester_token}").text
        run1 = re.search(r'<section class="run" id="run-1">(.*?)</section>', page, re.DOTALL).group(1)
        summary = re.findall(r"<td>([^<]*)</td>", run1)[:7]
        assert summary == ["2", "4", "4", "4", "0", "$1.04", "$0.00"]
        assert f"<tr><td>{bob_id}</td><td>PB</td><td>2</td><td>$0.40</td><td>–</td><td>no</td></tr>" in run1
        run2 = re.search(r'<section class="run" id="run-2">(.*?)</section>', page, re.DOTALL).group(1)
        assert re.findall(r"<td>([^<]*)</td>", run2)[:7] == ["1", "1", "0", "0", "1", "$0.00", "$0.65"]
        assert '<figure id="arrivals"><svg' in page and '<figure id="agreement"><svg' in page
        assert "polyline" in page
        figures = dict(re.findall(r'<figure id="(\w+)">(.*?)</figure>', page, re.DOTALL))
        assert figures["agreement"].count("<rect ") == 2  # one agreement bar per worker
        assert figures["quality"].count("<rect ") == 2  # and one Dawid-Skene weight bar
        assert panel in page
        csv = c.get(f"/r/{market.requester_token}/payments.csv?run=1")
        assert csv.headers["content-type"].startswith("text/csv")
        assert csv.text == f"participant_id,amount,worker_id,assignments\n,0.40,{alice_id},2\nPB,0.40,{bob_id},2\n"
        assert c.get(f"/r/{market.requester_token}/payments.csv?run=2").text == \
            "participant_id,amount,worker_id,assignments\n"
        assert c.get(f"/r/{market.requester_token}/payments.csv?run=x").status_code == 400


# -- nothing of a raw row leaks ---------------------------------------------------------------------------------------

RAW = [  # a small table: key, raw quasi-identifiers, a sensitive value, the ground truth
    {"id": "K-93017", "age": 37, "zip": "10001", "salary": "73519", "diagnosis": "Hepatitis-Q", "job": DOMAIN[0]},
    {"id": "K-93018", "age": 41, "zip": "10002", "salary": "58211", "diagnosis": "Fracture-Z", "job": DOMAIN[1]},
    {"id": "K-93019", "age": 39, "zip": "10001", "salary": "91377", "diagnosis": "Asthma-W", "job": DOMAIN[2]},
    {"id": "K-93020", "age": 43, "zip": "10002", "salary": "66090", "diagnosis": "Migraine-V", "job": DOMAIN[0]},
]


def leak_batch(rows: list[dict]) -> HitBatch:
    """One mixed group generalized to age [35-44], zip 1000*; the batch's items also carry the raw columns (a
    careless producer), but only age and zip are published."""
    hits = pd.DataFrame({"hit_id": ["R1-00001"], "run_id": 1, "assignments": 2, "round": 1, "question": QUESTION,
                         "domain": [DOMAIN], "reward": 0.2, "fee_rate": 0.3, "target": None})
    items = pd.DataFrame([{"hit_id": "R1-00001", "item_no": n, "row_no": 1, "age": "[35-44]", "zip": "1000*",
                           **{f"raw_{k}": v for k, v in row.items()}} for n, row in enumerate(rows, 1)])
    return HitBatch(hits, items, ["age", "zip"])


def worker_pages(market: Market, completion_url: str) -> list[str]:
    """Every page a worker can reach: form, invalid form, refusals, thanks, no-HIT, study, error pages."""
    pages = []
    with TestClient(create_app(market, completion_url=completion_url)) as c:
        study = c.get("/study?PROLIFIC_PID=p-leak&STUDY_ID=s&SESSION_ID=x", follow_redirects=False)
        pages.append(study.text)
        token = study.headers["location"].rsplit("/", 1)[1]
        _, other = market.add_worker()
        form_page = c.get(f"/w/{token}").text
        pages.append(form_page)
        form = form_of(form_page)
        pages.append(c.post(form["action"], data={"csrf": form["csrf"], "answer-1": DOMAIN[0]}).text)
        pages.append(c.post(form["action"], data={"csrf": "forged"}).text)
        pages.append(c.post(form["action"].replace(token, other), data={"csrf": form["csrf"]}).text)
        pages.append(c.post(form["action"], data={"csrf": form["csrf"]}, headers={"origin": "http://x.test"}).text)
        thanks = c.post(form["action"], data={"csrf": form["csrf"], **answer_all(form_page, DOMAIN[2])})
        pages.append(thanks.text)
        pages.append(c.get(f"/w/{token}").text)  # no HIT available (with the completion code)
        other_page = c.get(f"/w/{other}").text
        pages.append(other_page)
        pages += [c.get("/w/unknown").text, c.get("/study").text, c.get("/nowhere").text,
                  c.get(f"/w/{token}/thanks/nothing").text]
    return pages


def normalized(page: str) -> str:
    page = re.sub(r"<style>.*?</style>", "", page, flags=re.DOTALL)
    page = re.sub(r"/w/[A-Za-z0-9_-]{20,}", "/w/TOKEN", page)
    page = re.sub(r'(name="csrf" value=")[^"]+', r"\1CSRF", page)
    page = re.sub(r"R1-00001-A\d-[0-9a-f]{6}", "ASSIGNMENT", page)
    return re.sub(r"[0-9A-F]{8}", "CODE", page)


def test_nothing_of_a_raw_row_reaches_a_page(tmp_path):
    market = Market(tmp_path / "leak.sqlite")
    market.post(leak_batch(RAW))
    pages = [normalized(p) for p in worker_pages(market, "https://example.org/done?cc={code}")]
    assert len(pages) == 13 and all(pages[1:])  # the first is the study link's redirect
    text = "\n".join(pages)
    assert "[35-44]" in text and "1000*" in text  # the published values are there
    for row in RAW:
        for value in (row["id"], row["salary"], row["diagnosis"], row["zip"]):
            assert value not in text
        assert not re.search(rf"\b{row['age']}\b", text)
    assert "raw_" not in text
    # the ground truth is one of the listed positions: the pages must not depend on it
    swapped = Market(tmp_path / "swapped.sqlite")
    truths = [r["job"] for r in RAW]
    swapped.post(leak_batch([{**r, "job": truths[(i + 1) % len(RAW)]} for i, r in enumerate(RAW)]))
    assert [normalized(p) for p in worker_pages(swapped, "https://example.org/done?cc={code}")] == pages
    # and the market file itself holds only the published strings
    stored = "\n".join(v for (v,) in market._con().execute("SELECT vals FROM items"))
    assert all(row["id"] not in stored and row["salary"] not in stored for row in RAW)
    market.close()
    swapped.close()
