"""Issue 16: a query on a platform whose people are slow waits up to its timeout, then stops saying how many
assignments are still out; running the same query again later collects them without buying anything twice.

``SlowCrowd`` is the simulated crowd with people who are not done yet: its first ``late`` collect() calls run out of
time (as the web crowd does when its timeout passes), the next ones return the answers. The platform counts what it
was asked to publish, so a HIT posted twice would show."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from conftest import people_frame

import crowddb
from crowddb.crowd import SimulatedCrowd
from crowddb.errors import AnswersOutstandingError, ArgumentError

QUERY = "SELECT id, getposition(age, zip, edu, k := 5, tuples_per_hit := 20, assignments := 3) AS job FROM people " \
        "ORDER BY id"


class SlowCrowd(SimulatedCrowd):
    def __init__(self, late: int, **kw):
        super().__init__(**kw)
        self.late = late
        self.posted: Counter = Counter()
        self.timeouts: list = []

    def publish(self, batch, *, knowledge=None):
        self.posted.update(batch.hits["hit_id"])
        super().publish(batch, knowledge=knowledge)

    def collect(self, hit_ids, *, progress=None, timeout=None):
        self.timeouts.append(timeout)
        if self.late:
            self.late -= 1
            total = 3 * len(hit_ids)
            raise AnswersOutstandingError(f"{total - 1} of {total} assignments are still out after {timeout} s",
                                          outstanding=total - 1, total=total)
        return super().collect(hit_ids, progress=progress, timeout=timeout)


def load(db) -> None:
    db.load_frame("people", people_frame(60), quasi_identifiers=["age", "zip"], sensitive=["salary"],
                  ground_truth="job", key="id")


def test_timeout_stops_then_a_rerun_collects_without_buying_twice(tmp_path):
    path = tmp_path / "slow.duckdb"
    crowd = SlowCrowd(late=1, qualities=np.ones(5), seed=2)
    with crowddb.connect(path, platform=crowd, seed=4, progress=False) as db:
        load(db)
        with pytest.raises(AnswersOutstandingError) as out:
            db.sql(QUERY, timeout=0.25)
        assert (out.value.outstanding, out.value.total) == (8, 9)  # 60 rows, 20 per HIT: 3 HITs of 3 assignments
        assert crowd.timeouts == [0.25]  # the query's timeout reached the platform
        status = dict(db.sql("SELECT status, count(*) FROM crowddb_hits GROUP BY ALL").fetchall())
        assert status == {"published": 3}  # on record as published: paid for when collected, never posted again
        assert db.sql("SELECT count(*) FROM crowddb_payments").fetchall()[0][0] == 0
        first = dict(crowd.posted)

        got = db.sql(QUERY, timeout=5).df()  # the people finished: the rerun collects the same HITs
        assert crowd.posted == Counter(first)  # nothing was posted again
        assert max(crowd.posted.values()) == 1
        assert db.sql("SELECT status, count(*) FROM crowddb_hits GROUP BY ALL").fetchall() == [("completed", 3)]
        paid = db.sql("SELECT count(*), count(DISTINCT assignment_id) FROM crowddb_payments").fetchall()[0]
        assert paid == (9, 9)
    with crowddb.connect(tmp_path / "once.duckdb", platform=SlowCrowd(late=0, qualities=np.ones(5), seed=2), seed=4,
                         progress=False) as db:  # the same query with people who were on time
        load(db)
        once = db.sql(QUERY).df()
    assert got["job"].tolist() == once["job"].tolist() and got["id"].tolist() == list(range(1, 61))


def test_answers_that_arrive_between_sessions_are_collected_by_the_next(tmp_path):
    """A requester publishes, closes the session, and reruns the query the next day in a new process-like session:
    the HITs on record are collected, none bought again."""
    path = tmp_path / "later.duckdb"
    crowd = SlowCrowd(late=1, qualities=np.ones(5), seed=2)
    with crowddb.connect(path, platform=crowd, seed=4, progress=False) as db:
        load(db)
        with pytest.raises(AnswersOutstandingError):
            db.sql(QUERY, timeout=1)
    with crowddb.connect(path, platform=crowd, seed=4, progress=False) as db:
        db.sql(QUERY).fetchall()
        assert max(crowd.posted.values()) == 1 and len(crowd.posted) == 3
        assert db.sql("SELECT count(*) FROM crowddb_payments").fetchall()[0][0] == 9
        assert crowd.timeouts == [1.0, None]  # without timeout := the platform's own default


@pytest.mark.parametrize("bad", [0, -1, "10", True, float("nan")])
def test_a_bad_timeout_is_refused_before_anything_is_published(bad):
    crowd = SlowCrowd(late=0, qualities=np.ones(5), seed=2)
    with crowddb.connect(platform=crowd, progress=False) as db:
        load(db)
        with pytest.raises(ArgumentError, match="timeout must be a positive number of seconds"):
            db.sql(QUERY, timeout=bad)
        with pytest.raises(ArgumentError, match="timeout"):
            db.execute(QUERY, timeout=bad)
        assert not crowd.posted
        assert db.sql("SELECT count(*) FROM crowddb_runs").fetchall()[0][0] == 0
