"""Engine benchmark: plain-SQL passthrough against raw DuckDB (on a database without roles, and with roles, where
every statement passes DuckDB's statement gate), what the gate itself costs per statement, and getposition(*) over
all of Adult.

Run: python bench/engine.py [--repeat 30]. Prints tables; figures are ratios to a baseline timed in the same run.
Goals: without roles within 5% of a fresh ``duckdb.connect()`` (issue 26); the gate at most 50 us per statement
(issue 24).
"""

from __future__ import annotations

import argparse
import statistics
import time

import duckdb

import crowddb
from crowddb.datasets import adult_path
from crowddb.privacy import gate

PLAIN = [
    ("point lookup", "SELECT * FROM adult WHERE id = 4242"),
    ("aggregate", "SELECT education, avg(age), count(*) FROM adult GROUP BY education"),
    ("join", "SELECT count(*) FROM adult a JOIN adult b USING (id) WHERE a.age < 30"),
    ("text mentioning getposition(", "SELECT 'getposition(*)' AS s FROM adult LIMIT 1"),
]


def timed(fn, repeat: int) -> float:
    """Median seconds of ``repeat`` calls (after one warm-up)."""
    return paired(fn, fn, repeat)[0]


def paired(base, ours, repeat: int, batch: int = 20) -> tuple[float, float]:
    """Median seconds per call of two functions timed alternately, so both see the same machine load; each sample
    times ``batch`` calls (a sub-millisecond query timed alone is mostly the timer's and the scheduler's noise)."""
    base(), ours()
    a, b = [], []
    for _ in range(repeat):
        for fn, out in ((base, a), (ours, b)):
            start = time.perf_counter()
            for _ in range(batch):
                fn()
            out.append((time.perf_counter() - start) / batch)
    return statistics.median(a), statistics.median(b)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()

    raw = duckdb.connect()
    raw.execute(f"CREATE TABLE adult AS SELECT * FROM read_csv('{adult_path()}')")
    plain = crowddb.connect(seed=1, progress=False)  # no role, ledger or budget: the gate is off
    plain.load_csv("adult", adult_path())
    # the baseline a user would compare against: a fresh duckdb.connect() with the same table loaded the same way
    print(f"{'plain SQL, no roles (fetch all)':32} {'duckdb ms':>10} {'crowddb ms':>11} {'ratio':>7}")
    for name, query in PLAIN:
        base, ours = paired(lambda q=query: raw.sql(q).fetchall(), lambda q=query: plain.sql(q).fetchall(),
                            args.repeat)
        print(f"{name:32} {base * 1e3:10.3f} {ours * 1e3:11.3f} {ours / base:7.3f}")
    plain.close()
    print()

    db = crowddb.connect(seed=1, progress=False)
    db.load_csv("adult", adult_path(), quasi_identifiers=["age", "sex", "education_num", "marital_status", "race"],
                sensitive=["occupation", "income"], ground_truth="occupation", key="id",
                core=["age", "sex", "education_num", "marital_status", "race", "workclass", "hours_per_week"])

    # the baseline is DuckDB's own connection under crowddb (db.con): the same tables, so the ratio is crowddb's
    # overhead alone (a second database loaded separately differs in storage layout by a few percent either way)
    print(f"{'plain SQL, roles: gated':32} {'duckdb ms':>10} {'crowddb ms':>11} {'ratio':>7}")
    con = db.con
    for name, query in PLAIN:
        base, ours = paired(lambda q=query: con.sql(q).fetchall(), lambda q=query: db.sql(q).fetchall(), args.repeat)
        print(f"{name:32} {base * 1e3:10.3f} {ours * 1e3:11.3f} {ours / base:7.3f}")

    # the gate's own cost: DuckDB parses the text either way (the parsed statements are the ones that run), so what
    # the gate adds is classifying them; timed over many calls
    print(f"\n{'statement gate, per statement':32} {'parse us':>10} {'gate us':>11} {'added us':>9}")
    for name, query in PLAIN:
        n = 2000
        base, ours = paired(lambda q=query, n=n: [con.extract_statements(q) for _ in range(n)],
                            lambda q=query, n=n: [gate.classify(con, q) for _ in range(n)], max(3, args.repeat // 6))
        print(f"{name:32} {base / n * 1e6:10.1f} {ours / n * 1e6:11.1f} {(ours - base) / n * 1e6:9.1f}")

    print()
    query = "SELECT id, getposition(*) AS job FROM adult"
    base = timed(lambda: raw.sql("SELECT id, occupation FROM adult").df(), 5)
    start = time.perf_counter()
    result = db.sql(query).df()
    first = time.perf_counter() - start
    plan = db.last_plan.operators[0]
    start = time.perf_counter()
    db.sql(query).df()
    cached = time.perf_counter() - start
    agree = db.sql("SELECT avg((j.job = a.occupation)::INT) FROM adult a JOIN "
                   "(SELECT id, getposition(*) AS job FROM adult) j USING (id)").fetchall()[0][0]
    print(f"{'getposition(*) over Adult':32} {'rows':>7} {'HITs':>6} {'assign.':>8} {'seconds':>8} "
          f"{'x plain scan':>12}")
    print(f"{'first run (simulated crowd)':32} {len(result):7d} {plan.hits:6d} {plan.assignments:8d} {first:8.2f} "
          f"{first / base:12.0f}")
    print(f"{'rerun (answer cache)':32} {len(result):7d} {0:6d} {0:8d} {cached:8.2f} {cached / base:12.0f}")
    print(f"\nk={plan.k} ({plan.anonymizer}), NCP {plan.ncp:.2f}%, est. cost ${plan.estimated_cost:,.2f}; "
          f"crowd answer = true occupation for {agree:.1%} of rows")
    db.close()


if __name__ == "__main__":
    main()
