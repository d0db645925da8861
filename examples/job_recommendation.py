"""The paper's job-recommendation scenario end to end: load CVs, declare roles, ask the crowd, look at the bill.

Run: python examples/job_recommendation.py [jobs.duckdb]
"""

from __future__ import annotations

import sys
from pathlib import Path

import crowddb
from crowddb.datasets import adult_path

database = sys.argv[1] if len(sys.argv) > 1 else "jobs.duckdb"

with crowddb.connect(database, seed=2026) as db:
    db.load_csv("adult", adult_path(), replace=True,
                quasi_identifiers=["age", "sex", "education_num"], sensitive=["occupation"],
                ground_truth="occupation", key="id", kinds={"age": "numeric", "education_num": "numeric"},
                core=["age", "sex", "education_num", "workclass", "hours_per_week"])

    # What would it cost, and under which privacy parameters? Nothing is published by explain().
    question = "SELECT id, getposition(*, k := 25) AS job FROM adult WHERE native_country = 'Canada'"
    print(db.explain(question), "\n")

    # Ask; the answers come back as a DuckDB relation.
    jobs = db.sql(question)
    print(jobs.df().head(10).to_string(index=False), "\n")

    # One candidate per education level for a job (knock-out rounds when a group exceeds one HIT).
    best = db.sql("""
        SELECT education, getcandidate(*, 'Exec-managerial', k := 25) AS candidate
        FROM adult WHERE native_country = 'Canada' GROUP BY education ORDER BY education""")
    print(best.df().to_string(index=False), "\n")

    # The SQL file runs the same scenario in pure SQL, composed with CTEs, joins and GROUP BY.
    script = (Path(__file__).parent / "job_recommendation.sql").read_text()
    result = db.sql(script)
    print(result.df().to_string(index=False), "\n")

    print(db.sql("""SELECT operator, sum(hits) AS hits, sum(assignments) AS assignments,
                           sum(cached_items) AS cached, sum(cost) AS usd
                    FROM crowddb_runs GROUP BY operator ORDER BY operator""").df().to_string(index=False))
