"""Load test of the HIT web page (issue 16): many simulated people taking and submitting assignments at once.

    python bench/web.py                         # 10,000 items, 20 per HIT, 3 assignments, 200 people, paced
    python bench/web.py --think 0 0 --ramp 0    # stress: 200 people all at once, submitting as fast as they can

A temp marketplace gets the HITs; the server runs as its own process (``python -m crowddb.crowd.web.server``,
uvicorn, one worker) on 127.0.0.1 at a free port, warmed up by a few unknown-token requests; ``SimulatedPeople``
(asyncio tasks, one httpx client each) plays the people. On this 2-core machine the server process is pinned to
core 0 and the load generator to core 1 (Linux affinity): each has one core, and the load generator's CPU time does
not queue the server's requests (``--no-pin`` shares both). It stops by itself: when no HIT is left, or at
``--max-seconds`` (default 120).

Default pace: the 200 people arrive over 5 s and each spends 2-8 s on a HIT before submitting (real people need
minutes for 20 items: this is still a heavy crowd). ``--think 0 0 --ramp 0`` is a closed loop of 200 people without
pauses: it measures the server's capacity, and its latency is queueing (Little's law: 200 requests in flight over
the requests per second the one server core completes).

Prints the CPU time of server and load generator, throughput (submits/s, pages/s), p50/p99/max latency of the page
(GET /w/..), the submit (POST) and the thank-you page as the people saw them, and the checks: every submit answered
303 is in the market exactly once with the answers sent (0 lost, 0 duplicated), nothing stored that was not
thanked, no HIT with more assignments than it asks, no worker on a HIT twice. To see where the server's time goes,
profile its process while the bench runs (the pid is printed), e.g. ``py-spy record -p PID --threads``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from crowddb.crowd import HitBatch
from crowddb.crowd.web import Market
from crowddb.crowd.web.driver import SimulatedPeople, crowd_policy, percentile

DOMAIN = ("Adm-clerical", "Craft-repair", "Exec-managerial", "Farming-fishing", "Handlers-cleaners",
          "Machine-op-inspct", "Other-service", "Priv-house-serv", "Prof-specialty", "Protective-serv", "Sales",
          "Tech-support", "Transport-moving", "Armed-Forces")
COLUMNS = ["age", "sex", "education_num", "marital_status", "race", "workclass", "hours_per_week"]


def make_batch(items: int, per_hit: int, assignments: int) -> HitBatch:
    """HITs like getposition's over Adult: ``items`` items, ``per_hit`` per HIT, generalized-looking values."""
    n_hits = -(-items // per_hit)
    hits = pd.DataFrame({"hit_id": [f"R1-{h:05d}" for h in range(1, n_hits + 1)], "run_id": 1,
                         "assignments": assignments, "round": 1,
                         "question": "Which one of the listed job positions fits this person best?",
                         "domain": [DOMAIN] * n_hits, "reward": 0.2, "fee_rate": 0.3, "target": None})
    rows = []
    for i in range(items):
        h, no = divmod(i, per_hit)
        rows.append({"hit_id": f"R1-{h + 1:05d}", "item_no": no + 1, "row_no": 1,
                     "age": f"[{20 + i % 40}-{24 + i % 40}]", "sex": "*", "education_num": f"[{i % 9}-{i % 9 + 4}]",
                     "marital_status": "{Married-civ-spouse,Divorced}", "race": "White", "workclass": "Private",
                     "hours_per_week": str(20 + i % 40)})
    return HitBatch(hits=hits, items=pd.DataFrame(rows), published_columns=COLUMNS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(market: str, port: int, pin: bool, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "crowddb.crowd.web.server", "--market", market, "--port", str(port)]
    with open(log, "wb") as out:  # a file, not a pipe: a full pipe would stall the server's logging
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    if pin:  # before it has started its threads (they inherit the main thread's affinity)
        os.sched_setaffinity(proc.pid, {0})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).text.strip() == "ok":
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server did not answer /healthz within 30 s")


def warm_up(base: str, n: int = 64) -> None:
    """Requests the measurement should not pay for: the server's first requests open a SQLite connection per
    thread-pool thread and compile the templates. ``n`` concurrent unknown-token pages (404: the market is asked)."""
    async def go() -> None:
        async with httpx.AsyncClient(base_url=base, limits=httpx.Limits(max_connections=n)) as client:
            for _ in range(2):
                await asyncio.gather(*(client.get(f"/w/warm-up-{i}") for i in range(n)))
    asyncio.run(go())


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, s) a process has used so far (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def checks(path: str, run, batch: HitBatch) -> list[tuple[str, int]]:
    """(check, count of violations): every check must be 0."""
    con = sqlite3.connect(path)
    submitted = pd.read_sql("SELECT assignment_id, hit_id, worker_id FROM assignments WHERE submitted_at IS NOT NULL",
                            con)
    taken = pd.read_sql("SELECT hit_id, worker_id FROM assignments UNION ALL SELECT hit_id, worker_id FROM lapsed",
                        con)
    answers = pd.read_sql("SELECT assignment_id, item_no, answer FROM answers", con)
    asked = dict(zip(batch.hits["hit_id"], batch.hits["assignments"]))
    con.close()
    thanked = run.thanked()
    thanked_ids = Counter(s.assignment_id for s in thanked)
    stored_ids = Counter(submitted["assignment_id"])
    sent = {(s.assignment_id, no): a for s in thanked for no, a in s.answers.items()}
    stored = Counter(zip(answers["assignment_id"], answers["item_no"]))
    got = dict(zip(zip(answers["assignment_id"], answers["item_no"]), answers["answer"]))
    per_hit = submitted.groupby("hit_id").size()
    live = taken.groupby("hit_id").size() if len(taken) else pd.Series(dtype=int)
    return [
        ("thanked submits not stored (lost)", sum(1 for a in thanked_ids if a not in stored_ids)),
        ("thanked answers lost or changed", sum(1 for k, a in sent.items() if got.get(k) != a)),
        ("answers stored twice (duplicated)", sum(n - 1 for n in stored.values() if n > 1)),
        ("assignments thanked twice", sum(n - 1 for n in thanked_ids.values() if n > 1)),
        ("stored submits never thanked", sum(1 for a in stored_ids if a not in thanked_ids)),
        ("HITs with more submitted assignments than asked", int(sum(per_hit[h] > asked[h] for h in per_hit.index))),
        ("HITs with more live assignments than asked",
         int(sum(n > asked[h] for h, n in live.items())) if len(live) else 0),
        ("workers who answered a HIT twice", int(submitted.duplicated(["hit_id", "worker_id"]).sum())),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=10_000)
    ap.add_argument("--per-hit", type=int, default=20, help="items per HIT (default 20: 500 HITs)")
    ap.add_argument("--assignments", type=int, default=3)
    ap.add_argument("--people", type=int, default=200)
    ap.add_argument("--max-seconds", type=float, default=120.0)
    ap.add_argument("--think", type=float, nargs=2, default=(2.0, 8.0), metavar=("LO", "HI"),
                    help="seconds a person spends on a HIT before submitting (uniform; default 2 8; 0 0: no pause)")
    ap.add_argument("--ramp", type=float, default=5.0,
                    help="the people arrive spread over this many seconds (default 5; 0: all at once)")
    ap.add_argument("--cold", action="store_true", help="no warm-up requests before the measurement")
    ap.add_argument("--no-pin", action="store_true", help="do not pin server and load generator to one core each")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)

    pin = not args.no_pin and hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2
    with tempfile.TemporaryDirectory(prefix="crowddb-bench-web-") as tmp:
        path = str(Path(tmp) / "market.sqlite")
        market = Market(path)
        batch = make_batch(args.items, args.per_hit, args.assignments)
        t0 = time.perf_counter()
        market.post(batch)
        tokens = [market.add_worker()[1] for _ in range(args.people)]
        market.close()
        posted = time.perf_counter() - t0
        port = free_port()
        server = start_server(path, port, pin, Path(tmp) / "server.log")
        print(f"server pid {server.pid} on port {port}", flush=True)
        if pin:
            os.sched_setaffinity(0, {1})
        if not args.cold:
            warm_up(f"http://127.0.0.1:{port}")
        try:
            people = SimulatedPeople(f"http://127.0.0.1:{port}", tokens, policy=crowd_policy(), seed=args.seed,
                                     max_seconds=args.max_seconds, think=tuple(args.think), ramp=args.ramp, fast=True)
            cpu0 = time.process_time()
            run = people.run()
            client_cpu = time.process_time() - cpu0
            server_cpu = cpu_seconds(server.pid)
        finally:
            server.terminate()  # SIGTERM: uvicorn shuts down
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
        results = checks(path, run, batch)

    n_hits, total = len(batch.hits), int(batch.hits["assignments"].sum())
    print(f"{args.items:,} items in {n_hits} HITs x {args.assignments} assignments = {total} assignments; "
          f"{args.people} people arriving over {args.ramp:g} s; think {args.think[0]:g}-{args.think[1]:g} s; "
          f"{'server on core 0, load generator on core 1' if pin else 'server and load generator share the cores'}")
    print(f"posted in {posted:.2f} s; run {run.seconds:.1f} s; people stopped: "
          f"{dict(Counter(p.stopped for p in run.people))}")
    print(f"CPU: server {server_cpu:.1f} s ({server_cpu / run.seconds:.0%} of one core), load generator "
          f"{client_cpu:.1f} s ({client_cpu / run.seconds:.0%} of one core)")
    outcomes = Counter((r.kind, r.outcome) for r in run.requests)
    print(f"requests: {dict(sorted(outcomes.items()))}")
    thanked = len(run.thanked())
    pages = sum(1 for r in run.requests if r.kind in ("page", "thanks"))
    print()
    print(f"{'':28}{'count':>8}{'per s':>9}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for label, kind in (("page    GET /w/{t}", "page"), ("submit  POST /w/{t}/a/{id}", "submit"),
                        ("thanks  GET /w/{t}/thanks", "thanks")):
        lat = sorted(run.latencies(kind, ok_only=False))
        print(f"{label:28}{len(lat):8d}{len(lat) / run.seconds:9.1f}{percentile(lat, 50) * 1e3:9.1f}"
              f"{percentile(lat, 99) * 1e3:9.1f}{(lat[-1] if lat else float('nan')) * 1e3:9.1f}")
    print(f"{'throughput':28}{'':8}{thanked / run.seconds:9.1f} submits/s (thanked {thanked} of {total}); "
          f"{pages / run.seconds:.1f} pages/s")
    goal = all(percentile(sorted(run.latencies(k, ok_only=False)), 99) < 0.1 for k in ("page", "submit"))
    print(f"goal p99 < 100 ms for page and submit: {'met' if goal else 'MISSED'}")
    print()
    for name, n in results:
        print(f"{name:52}{n:6d}  {'ok' if n == 0 else 'FAIL'}")
    complete = thanked == total
    if not complete:
        print(f"note: {total - thanked} assignments were not submitted within {args.max_seconds:g} s")
    return 0 if all(n == 0 for _, n in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
