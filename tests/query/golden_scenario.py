"""A fixed working session through ``db.sql``: what crowddb publishes, buys and records, in canonical form.

The pipeline's refactors (issue 26) must leave this unchanged: the same HITs (question, domain, reward,
assignments), the same items as workers see them, the same answers, the same rows in every ``crowddb_*`` table
(minus wall-clock times, process ids and the ledger's keyed MACs), the same query results. ``python
tests/query/golden_scenario.py --write`` records it (only when a change is meant to alter what is published).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

import crowddb
from crowddb.crowd import SimulatedCrowd
from crowddb.datasets import adult_path

GOLDEN = Path(__file__).with_name("golden.json")
#: columns that hold wall-clock times, this process, or values keyed by a per-file secret
_VOLATILE = {"created_at", "submitted_at", "paid_at", "heartbeat", "pid", "host", "prev_hash", "hash", "mac"}


class Recording(SimulatedCrowd):
    """The simulated crowd, keeping every batch it was asked to publish (hits and items as workers see them)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.published: list[dict] = []

    def publish(self, batch, *, knowledge=None) -> None:
        self.published.append({
            "hits": _rows(batch.hits.drop(columns=["run_id"], errors="ignore")),
            "items": _rows(batch.items),
            "columns": list(batch.published_columns),
        })
        super().publish(batch, knowledge=knowledge)


def _cell(value):
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return round(float(value), 9)
    if isinstance(value, (tuple, list, np.ndarray)):
        return [_cell(v) for v in value]
    if isinstance(value, str) and value.startswith("{"):  # a JSON report: its timings are wall-clock
        try:
            return json.dumps(_untimed(json.loads(value)), sort_keys=True)
        except ValueError:
            return value
    return value if isinstance(value, (int, str, bool)) else str(value)


def _untimed(value):
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k not in ("seconds", "elapsed")}
    return [_untimed(v) for v in value] if isinstance(value, list) else value


def _rows(frame: pd.DataFrame) -> list[list]:
    frame = frame[[c for c in frame.columns if c not in _VOLATILE]]
    return [list(frame.columns)] + [[_cell(v) for v in row] for row in frame.itertuples(index=False)]


def _sorted_rows(frame: pd.DataFrame) -> list[list]:
    rows = _rows(frame)
    return rows[:1] + sorted(rows[1:], key=lambda r: json.dumps(r, default=str))


def _text_of_wide(con, table: str) -> pd.DataFrame:
    """A table's rows, its 128-bit integers (the row history's bit sets) as text: numpy has no such type."""
    columns = con.execute(f'SELECT column_name, data_type FROM information_schema.columns WHERE table_name = '
                          f"'{table}' ORDER BY ordinal_position").fetchall()
    select = ", ".join(f'"{c}"::VARCHAR AS "{c}"' if t in ("UHUGEINT", "HUGEINT") else f'"{c}"' for c, t in columns)
    return con.sql(f'SELECT {select} FROM "{table}"').df()


_STATEMENTS = [
    "explain:SELECT id, getposition(*, k := 25) AS job FROM adult WHERE native_country = 'Canada'",
    "SELECT id, getposition(*, k := 25) AS job FROM adult WHERE native_country = 'Canada' ORDER BY id",
    # served from the same answers, at no cost
    "SELECT id, getposition(*, k := 25) AS job FROM adult WHERE native_country = 'Canada' ORDER BY id",
    """SELECT education, getcandidate(*, 'Exec-managerial', k := 25) AS candidate
       FROM adult WHERE native_country = 'Canada' GROUP BY education ORDER BY education""",
    """WITH recommended AS (
           SELECT id, education, getposition(*, k := 10, assignments := 3) AS job
           FROM adult WHERE age BETWEEN 25 AND 35 AND native_country = 'Mexico')
       SELECT job, count(*) AS people, round(avg(a.hours_per_week), 1) AS avg_hours
       FROM recommended r JOIN adult a USING (id) GROUP BY job ORDER BY people DESC, job""",
    "SELECT sex, count(*) AS n FROM ANONYMIZE((SELECT * FROM adult WHERE age >= 70), k := 10) GROUP BY sex ORDER BY sex",
    "SELECT * FROM PRIVACY_BUDGET(answers, epsilon := 40)",
    """SELECT * FROM TRUTH_DISCOVER(answers, object := 'task', source := 'worker', value := 'label',
       method := 'ds') ORDER BY object""",
    """SELECT * FROM TRUTH_DISCOVER(answers, object := 'task', source := 'worker', value := 'label',
       method := 'mv', perturb := 'rr', epsilon := 1, seed := 3) ORDER BY object""",
    """SELECT object, count(*) AS n, round(avg(value), 6) AS mean FROM PRIVATE_SYNTH(claims, object := 'city',
       source := 'user', value := 'population', m := 5, k := 3, seed := 4) GROUP BY object ORDER BY object""",
    "CREATE TABLE jobs AS SELECT id, getposition(*, k := 25) AS job FROM adult WHERE native_country = 'Canada'",
    "SELECT job, count(*) FROM jobs GROUP BY job ORDER BY job",
]


def run() -> dict:
    """Run the session on a fresh in-memory database; what it published, bought, recorded and returned."""
    platform = Recording(seed=7)
    rng = np.random.default_rng(0)
    truth = rng.choice(["yes", "no"], 30)
    answers = pd.DataFrame([(f"t{t}", f"w{w}", truth[t] if rng.random() < 0.8 else "maybe")
                            for w in range(6) for t in range(30)], columns=["task", "worker", "label"])
    claims = pd.DataFrame({"city": np.repeat(["a", "b", "c"], 8), "user": [f"u{i % 6}" for i in range(24)],
                           "population": np.round(rng.normal(100, 10, 24), 3)})
    out: dict = {"results": []}
    with crowddb.connect(platform=platform, seed=2026, progress=False) as db:
        db.load_csv("adult", adult_path(), quasi_identifiers=["age", "sex", "education_num"],
                    sensitive=["occupation"], ground_truth="occupation", key="id",
                    kinds={"age": "numeric", "education_num": "numeric"},
                    core=["age", "sex", "education_num", "workclass", "hours_per_week"])
        db.load_frame("answers", answers)
        db.load_frame("claims", claims)
        for statement in _STATEMENTS:
            if statement.startswith("explain:"):
                out["results"].append(str(db.explain(statement.removeprefix("explain:"))))
                continue
            result = db.sql(statement)
            out["results"].append(None if result is None else _rows(result.df()))
        tables = [r[0] for r in db.con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE table_name LIKE 'crowddb%' UNION "
            "SELECT view_name FROM duckdb_views() WHERE view_name LIKE 'crowddb%' ORDER BY 1").fetchall()]
        out["tables"] = {t: _sorted_rows(_text_of_wide(db.con, t)) for t in tables}
    out["published"] = platform.published
    return out


if __name__ == "__main__":
    got = json.loads(json.dumps(run(), default=str))
    if "--write" in sys.argv:
        GOLDEN.write_text(json.dumps(got, indent=0, sort_keys=True) + "\n")
    print(json.dumps({k: len(v) for k, v in got.items()}))
