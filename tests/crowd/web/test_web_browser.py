"""Real people on the HIT web page, played by a real browser: headless Chromium (Debian's, through its chromedriver
and Selenium) drives the whole loop of a crowd query on the web crowd, and a participant's arrival through the
study link with the completion code and the redirect.

Without Chromium and chromedriver (Debian packages ``chromium`` and ``chromium-driver``; the browser cannot be
downloaded by a test tool here) they are skipped with the reason in the summary on a developer's machine, and FAIL
under CI (``CI`` set to a true value, as ``.ci/run`` does after installing both): CI must run them. Screenshots of the worker and requester
pages go to /tmp/crowddb-screens/ (outside the repository)."""

from __future__ import annotations

import base64
import os
import re
import shutil
import socket
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import httpx
import pandas as pd
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

import crowddb
from crowddb.crowd import HitBatch
from crowddb.crowd.web import WebCrowd
from crowddb.datasets import adult_path
from crowddb.demo import ROLES

SCREENS = Path("/tmp/crowddb-screens")
# the first 12 people (ids 1..12): rows are never chosen by the key (issue 24)
QUERY = "SELECT * FROM (SELECT id, getposition(*, k := 3, assignments := 3) AS job FROM adult LIMIT 12) ORDER BY id"


def _binary(name: str, fallback: str) -> str:
    found = shutil.which(name) or (fallback if Path(fallback).exists() else None)
    if found is None:
        reason = (f"{name} is missing: the HIT-page tests drive Debian's Chromium through its chromedriver "
                  "(apt-get install chromium chromium-driver)")
        if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
            pytest.fail(f"{reason}; under CI they must run, not skip (.ci/run installs them)")
        pytest.skip(reason)
    return found


@pytest.fixture
def browsers():
    """A factory of headless Chromium sessions (each its own profile: its own person); all quit at the end."""
    chromium, chromedriver = _binary("chromium", "/usr/bin/chromium"), _binary("chromedriver", "/usr/bin/chromedriver")
    opened: list[webdriver.Chrome] = []

    def new() -> webdriver.Chrome:
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1100,900",
                    "--disable-gpu", "--no-first-run", "--disable-extensions"):
            options.add_argument(arg)
        browser = webdriver.Chrome(service=Service(chromedriver), options=options)
        browser.set_page_load_timeout(20)
        opened.append(browser)
        return browser

    yield new
    for browser in opened:
        browser.quit()


def screenshot(browser, name: str) -> None:
    """The whole page, however long, as a PNG under /tmp/crowddb-screens (Chromium's DevTools capture)."""
    SCREENS.mkdir(parents=True, exist_ok=True)
    size = browser.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    shot = browser.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}})
    (SCREENS / name).write_bytes(base64.b64decode(shot["data"]))


def read_form(browser) -> tuple[str, dict[int, list[str]], dict[int, dict[str, str]]]:
    """What the person sees: the question, per item its radio choices and its published cells (column -> text)."""
    form = browser.find_element(By.ID, "hit-form")
    choices: dict[int, list[str]] = {}
    cells: dict[int, list[str]] = {}
    for block in form.find_elements(By.CSS_SELECTOR, ".item[data-item]"):
        no = int(block.get_attribute("data-item"))
        choices[no] = [r.get_attribute("value") for r in
                       block.find_elements(By.CSS_SELECTOR, f"input[type=radio][name='answer-{no}']")]
        header = [th.text for th in block.find_elements(By.TAG_NAME, "th")]
        cells[no] = dict(zip(header, [td.text for td in block.find_elements(By.TAG_NAME, "td")]))
    return browser.find_element(By.TAG_NAME, "body").text, choices, cells


def shows(cell: str, value) -> bool:
    """Does a published cell ('[28-37]', '{A,B}', '*' or a plain value) cover the raw value?"""
    if cell == "*":
        return True
    if cell.startswith("[") and cell.endswith("]") and "-" in cell[1:]:
        low, high = cell[1:-1].split("-", 1)
        return float(low) <= float(value) <= float(high)
    if cell.startswith("{") and cell.endswith("}"):
        return str(value) in cell[1:-1].split(",")
    return cell == str(value)


def pick(browser, item_no: int, value: str) -> None:
    radio = browser.find_element(By.CSS_SELECTOR, f"input[type=radio][name='answer-{item_no}'][value='{value}']")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", radio)
    radio.click()
    assert radio.is_selected()


def submit(browser) -> None:
    button = browser.find_element(By.ID, "submit")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", button)
    button.click()


def wait_for(predicate, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.1)
    pytest.fail(f"timed out after {seconds} s waiting for {what}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_three_people_in_browsers_answer_a_crowd_query(browsers, tmp_path):
    announced: list[str] = []
    crowd = WebCrowd(port=0, workers=3, poll=0.1, announce=lambda *a: announced.append(" ".join(map(str, a))))
    with closing(crowd), crowddb.connect(str(tmp_path / "jobs.duckdb"), platform=crowd, seed=5, progress=False) as db:
        db.load_csv("adult", adult_path(), replace=True, **ROLES)
        outcome: dict = {}

        def query() -> None:  # blocks in collect until the three people have submitted
            try:
                outcome["rows"] = db.sql(QUERY, timeout=50).fetchall()
            except BaseException as e:  # noqa: BLE001 - reported by the main thread
                outcome["error"] = e

        runner = threading.Thread(target=query, daemon=True)
        runner.start()
        with ThreadPoolExecutor(3) as pool:  # start the browsers meanwhile
            sessions = pool.map(lambda _: browsers(), range(3))

        def published():
            if "error" in outcome:
                pytest.fail(f"the query failed before anyone answered: {outcome['error']!r}")
            try:
                links = crowd.worker_links()
                return links if links and "hit-form" in httpx.get(links[0], timeout=5).text else None
            except Exception:  # noqa: BLE001 - the server is not up yet
                return None

        links = wait_for(published, 30, "the query to publish its HIT")
        assert len(links) == 3
        people = list(sessions)
        for browser, link in zip(people, links):
            browser.get(link)

        # everyone reads the same question, choices and items
        pages = [read_form(b) for b in people]
        text, choices, cells = pages[0]
        assert "Which one of the listed job positions fits this person best?" in text
        assert "$0.20" in text
        items = sorted(choices)
        assert items == list(range(1, 13))  # 12 rows, one item each, one HIT (tuples_per_hit 100)
        for _, other_choices, other_cells in pages[1:]:
            assert (other_choices, other_cells) == (choices, cells)
        domain = choices[1]
        assert len(domain) >= 3 and all(choices[no] == domain for no in items)
        assert all(cells[no] for no in items)  # every item shows its published values
        screenshot(people[0], "worker-form.png")

        # the picks, fixed here: per item a majority answer given by two people and another by the third
        majority = {no: domain[no % len(domain)] for no in items}
        minority = {no: domain[(no + 1) % len(domain)] for no in items}
        picks = [{no: (minority[no] if no % 3 == p else majority[no]) for no in items} for p in range(3)]

        # the first person leaves item 1 empty and is told so; the answers it gave stay checked
        first = people[0]
        for no in items[1:]:
            pick(first, no, picks[0][no])
        submit(first)
        errors = WebDriverWait(first, 10).until(lambda b: b.find_element(By.ID, "errors"))
        assert re.findall(r"\bItem (\d+)", errors.text) == ["1"]  # names the empty item, and only it
        screenshot(first, "worker-missing-item.png")
        for no in items[1:]:
            checked = first.find_element(By.CSS_SELECTOR, f"input[name='answer-{no}']:checked")
            assert checked.get_attribute("value") == picks[0][no]
        pick(first, 1, picks[0][1])
        submit(first)
        for browser, mine in zip(people[1:], picks[1:]):
            for no in items:
                pick(browser, no, mine[no])
            submit(browser)
        for browser in people:
            earned = WebDriverWait(browser, 10).until(lambda b: b.find_element(By.ID, "earned"))
            assert "$0.20" in earned.text
        screenshot(people[0], "worker-thanks.png")

        runner.join(40)
        assert not runner.is_alive(), "the query did not return after all three people submitted"
        if "error" in outcome:
            raise outcome["error"]
        rows = outcome["rows"]

        # the query returns exactly the browsers' answers: the majority of the three picks per item
        assert [r[0] for r in rows] == list(range(1, 13))
        assert Counter(r[1] for r in rows) == Counter(majority.values())
        # per row: the majority pick of an item showing that row (rows with the same published values share items)
        columns = list(cells[1])
        assert columns == ROLES["core"]  # the published columns, nothing else of the row
        raw = db.sql(f"SELECT id, {', '.join(columns)} FROM adult WHERE id <= 12 ORDER BY id").fetchall()
        for (row_id, *values), (_, job) in zip(raw, rows):
            showing = [no for no in items if all(shows(cells[no][c], v) for c, v in zip(columns, values))]
            assert showing and job in {majority[no] for no in showing}, (row_id, job, showing)
        stored = db.sql("SELECT item_no, answer FROM crowddb_answers").fetchall()
        given = Counter((no, mine[no]) for mine in picks for no in items)
        assert Counter(stored) == given
        hits = db.sql("SELECT count(*) FROM crowddb_hits").fetchall()[0][0]
        payments = db.sql("SELECT count(*), count(DISTINCT worker_id), min(reward), max(reward) "
                          "FROM crowddb_payments").fetchall()[0]
        assert hits == 1
        assert (payments[0], payments[1], float(payments[2]), float(payments[3])) == (3 * hits, 3, 0.2, 0.2)

        # the requester page: progress, per worker, money
        requester = people[1]
        requester.get(crowd.requester_url)
        page = requester.find_element(By.TAG_NAME, "body").text
        assert "$0.78" in page  # 3 assignments x $0.20 x (1 + 0.3 fee)
        screenshot(requester, "requester.png")
    assert any(crowd_link in " ".join(announced) for crowd_link in links)  # the links were announced


def study_batch() -> HitBatch:
    hits = pd.DataFrame({"hit_id": ["S1-00001"], "run_id": 1, "assignments": 1, "round": 1,
                         "question": "Which one of the listed job positions fits this person best?",
                         "domain": [("Adm-clerical", "Sales", "Tech-support")], "reward": 0.2, "fee_rate": 0.3,
                         "target": None})
    items = pd.DataFrame({"hit_id": "S1-00001", "item_no": [1, 2], "row_no": 1, "age": ["[20-29]", "[30-39]"],
                          "sex": ["*", "*"]})
    return HitBatch(hits=hits, items=items, published_columns=["age", "sex"])


def test_a_participant_arrives_through_the_study_link_and_leaves_with_the_completion_code(browsers, tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    crowd = WebCrowd(port=port, workers=1, market=str(tmp_path / "market.sqlite"), completion_code="C1A2B3",
                     completion_url=base + "/healthz?cc={code}", announce=lambda *a: None)
    try:
        crowd.publish(study_batch())
        browser = browsers()
        link = f"{base}/study?PROLIFIC_PID=p1&STUDY_ID=s&SESSION_ID=x"
        browser.get(link)
        assert "/w/" in browser.current_url  # sent on to the participant's own worker link
        token_url = browser.current_url
        _, choices, _ = read_form(browser)
        assert sorted(choices) == [1, 2]
        pick(browser, 1, "Sales")
        pick(browser, 2, "Tech-support")
        submit(browser)
        code = WebDriverWait(browser, 10).until(lambda b: b.find_element(By.ID, "completion-code"))
        assert code.text.strip() == "C1A2B3"
        screenshot(browser, "study-thanks.png")
        # no HIT left: the page sends the browser on to the completion URL with the code
        WebDriverWait(browser, 15).until(lambda b: b.current_url.startswith(f"{base}/healthz"))
        assert browser.current_url == f"{base}/healthz?cc=C1A2B3"

        # the same participant opening the link again is the same worker
        browser.get(link)
        assert browser.current_url == token_url
        assert "No HIT available" in browser.find_element(By.TAG_NAME, "body").text
        other = browsers()
        other.get(link)
        assert other.current_url == token_url
        workers = crowd.market.workers()
        assert workers["participant_id"].tolist().count("p1") == 1
        assert len(workers) == 2  # the one pre-created link's worker and the participant
        collected = crowd.collect(["S1-00001"], timeout=5)
        assert sorted(zip(collected.answers["item_no"], collected.answers["answer"])) == [
            (1, "Sales"), (2, "Tech-support")]
    finally:
        crowd.close()
