"""Nothing is lost when the page server dies: a server process is SIGKILLed while people submit, restarted, and the
work finished. Every submit a worker was thanked for is stored exactly once, with the answers it sent, and nobody is
paid twice."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pandas as pd
import pytest

from crowddb.crowd.platform import HitBatch
from crowddb.crowd.web.market import Market

DOMAIN = ("Adm-clerical", "Exec-managerial", "Prof-specialty")
N_HITS, ITEMS, ASSIGNMENTS, WORKERS = 40, 3, 2, 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(path: str, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "crowddb.crowd.web.server", "--market", path, "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).text == "ok":
                return proc
        except httpx.HTTPError:
            time.sleep(0.05)
        if proc.poll() is not None:
            raise RuntimeError(f"the server died: {proc.stderr.read().decode()}")
    proc.kill()
    raise RuntimeError("the server did not start")


def batch() -> HitBatch:
    hit_ids = [f"R7-{i:05d}" for i in range(1, N_HITS + 1)]
    hits = pd.DataFrame({"hit_id": hit_ids, "run_id": 7, "assignments": ASSIGNMENTS, "round": 1,
                         "question": "Which job?", "domain": [DOMAIN] * N_HITS, "reward": 0.2, "fee_rate": 0.3,
                         "target": None})
    items = pd.DataFrame([{"hit_id": h, "item_no": i, "row_no": 1, "age": f"[{20 + i}-{30 + i}]"}
                          for h in hit_ids for i in range(1, ITEMS + 1)])
    return HitBatch(hits, items, ["age"])


class Person(threading.Thread):
    """Takes and submits HITs over HTTP until none is left, riding out a dead server."""

    def __init__(self, base: str, token: str, seed: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.base, self.token, self.seed, self.stop = base, token, seed, stop
        self.thanked: dict[str, dict[int, str]] = {}  # assignment_id -> the answers sent, for each 303 received
        self.failures = 0
        self.error: str | None = None

    def run(self) -> None:
        n = self.seed
        with httpx.Client(base_url=self.base, timeout=5) as client:
            while not self.stop.is_set():
                try:
                    page = client.get(f"/w/{self.token}")
                    if "No HIT available" in page.text:
                        return
                    action = re.search(r'action="([^"]+)"', page.text).group(1)
                    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
                    items = [int(x) for x in re.findall(r'data-item="(\d+)"', page.text)]
                    answers = {i: DOMAIN[(n + i) % 3] for i in items}
                    n += 1
                    reply = client.post(action, data={"csrf": csrf, **{f"answer-{i}": a for i, a in answers.items()}},
                                        follow_redirects=False)
                    if reply.status_code == 303:
                        self.thanked[action.rsplit("/", 1)[1]] = answers
                    else:
                        self.error = f"submit answered {reply.status_code}: {reply.text[:300]}"
                        return
                except (httpx.HTTPError, AttributeError):  # the server is down (or died mid-page): try again
                    self.failures += 1
                    time.sleep(0.05)


def test_sigkill_while_answers_arrive(tmp_path):
    path = str(tmp_path / "market.sqlite")
    market = Market(path)
    market.post(batch())
    tokens = [market.add_worker()[1] for _ in range(WORKERS)]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = start_server(path, port)
    stop = threading.Event()
    people = [Person(base, t, i, stop) for i, t in enumerate(tokens)]
    try:
        for p in people:
            p.start()
        total = N_HITS * ASSIGNMENTS
        deadline = time.monotonic() + 20
        while sum(len(p.thanked) for p in people) < total // 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        server.send_signal(signal.SIGKILL)  # mid-way, with requests in flight
        server.wait(5)
        killed_at = market.progress([f"R7-{i:05d}" for i in range(1, N_HITS + 1)])[0]
        assert 0 < killed_at < total
        time.sleep(0.3)
        server = start_server(path, port)
        for p in people:
            p.join(30)
        assert not any(p.is_alive() for p in people)
    finally:
        stop.set()
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            server.wait(5)
    assert all(p.error is None for p in people), [p.error for p in people if p.error]
    assert sum(p.failures for p in people) > 0  # the kill was felt

    hit_ids = [f"R7-{i:05d}" for i in range(1, N_HITS + 1)]
    got = market.collected(hit_ids)
    stored: dict[str, dict[int, str]] = {}
    for row in got.answers.itertuples(index=False):
        stored.setdefault(row.assignment_id, {})[int(row.item_no)] = row.answer
    thanked = {aid: answers for p in people for aid, answers in p.thanked.items()}
    for aid, answers in thanked.items():  # every thanked submit is stored, with exactly its answers
        assert stored.get(aid) == answers, aid
    assert not got.answers.duplicated(["assignment_id", "item_no"]).any()
    assert market.progress(hit_ids) == (N_HITS * ASSIGNMENTS, N_HITS * ASSIGNMENTS)
    assert (got.assignments.groupby("hit_id").size() == ASSIGNMENTS).all()
    assert not got.assignments.duplicated(["hit_id", "worker_id"]).any()
    earned = market.earnings(7)
    assert earned["assignments"].sum() == len(got.assignments) == N_HITS * ASSIGNMENTS
    assert earned["reward"].sum() == pytest.approx(0.2 * N_HITS * ASSIGNMENTS)  # nobody paid twice
    # the answers of a submit the server died under were either thanked later (retried) or not stored at all
    assert set(stored) >= set(thanked)
    assert len(thanked) >= len(stored) - WORKERS  # at most one unthanked (response lost) per person
    market.close()
