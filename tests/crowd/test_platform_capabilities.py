"""``Platform`` declares its optional capabilities with the defaults of a platform that has none (issue 26): a
platform that implements only the required methods connects, runs crowd queries and is never asked for what it does
not offer; one that declares ``shows_tradeoff`` is shown each crowd query's trade-off before it runs."""

from __future__ import annotations

import numpy as np
import pandas as pd

import crowddb
from crowddb.crowd import Platform, SimulatedCrowd
from crowddb.crowd.platform import Collected

from conftest import people_frame


class Minimal(Platform):
    """Only the required methods, answering through a simulated crowd it keeps."""

    name = "minimal"
    needs_knowledge = True

    def __init__(self) -> None:
        self.crowd = SimulatedCrowd(qualities=np.ones(5), seed=1)

    def workers(self) -> pd.DataFrame:
        return self.crowd.workers()

    def publish(self, batch, *, knowledge=None) -> None:
        self.crowd.publish(batch, knowledge=knowledge)

    def collect(self, hit_ids, *, progress=None, timeout=None) -> Collected:
        return self.crowd.collect(hit_ids, progress=progress, timeout=timeout)


class ShowsTradeoff(Minimal):
    shows_tradeoff = True

    def __init__(self) -> None:
        super().__init__()
        self.shown: list[tuple[str, list[int]]] = []

    def show_tradeoff(self, query: str, tradeoff: pd.DataFrame) -> None:
        self.shown.append((query, sorted(set(tradeoff["k"]))))


QUERY = "SELECT id, getposition(*, k := 5) AS job FROM people WHERE age < 40"


def _run(platform: Platform, path) -> list:
    with crowddb.connect(str(path), platform=platform, seed=3, progress=False) as db:
        db.load_frame("people", people_frame(), quasi_identifiers=["age", "sex", "zip"], sensitive=["salary"],
                      ground_truth="job", key="id")
        return db.sql(QUERY).fetchall()


def test_a_platform_with_only_the_required_methods_runs_a_crowd_query(tmp_path):
    assert Platform.finished(Minimal(), ["h1"]) is None and Minimal.shows_tradeoff is False
    rows = _run(Minimal(), tmp_path / "a.duckdb")
    assert len(rows) == int((people_frame()["age"] < 40).sum()) and all(job is not None for _, job in rows)


def test_a_platform_that_shows_the_tradeoff_is_shown_it_before_the_query_runs(tmp_path):
    platform = ShowsTradeoff()
    _run(platform, tmp_path / "b.duckdb")
    assert platform.shown == [(QUERY, [2, 5, 10, 20, 50])]
