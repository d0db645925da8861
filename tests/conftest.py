"""Shared fixtures: a small people table with declared roles, and a crowd of perfect workers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import crowddb
from crowddb.crowd import SimulatedCrowd


def people_frame(n: int = 60, seed: int = 0) -> pd.DataFrame:
    """People whose job is a rule of age and education: a crowd that knows the rule can answer exactly."""
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 70, n)
    edu = rng.integers(1, 17, n)
    job = np.where(edu >= 13, "teacher", np.where(age >= 40, "driver", "clerk"))
    return pd.DataFrame({
        "id": np.arange(1, n + 1), "age": age, "sex": rng.choice(["F", "M"], n), "zip": rng.choice(
            ["10001", "10002", "20001", "20002"], n), "edu": edu, "hobby": rng.choice(["chess", "golf", "none"], n),
        "job": job, "salary": rng.integers(20_000, 90_000, n)})


class RecordingCrowd(SimulatedCrowd):
    """Keeps every batch of HIT items exactly as published."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.published: list[pd.DataFrame] = []

    def publish(self, batch, *, knowledge=None):
        self.published.append(batch.items.copy())
        super().publish(batch, knowledge=knowledge)


@pytest.fixture
def perfect_crowd() -> SimulatedCrowd:
    return SimulatedCrowd(qualities=np.ones(10), seed=1)


@pytest.fixture
def db(perfect_crowd):
    """In-memory crowd database with `people` loaded: QIs age, sex, zip; sensitive salary; ground truth job."""
    with crowddb.connect(platform=perfect_crowd, seed=3, progress=False) as con:
        con.load_frame("people", people_frame(), quasi_identifiers=["age", "sex", "zip"], sensitive=["salary"],
                       ground_truth="job", key="id")
        yield con


@pytest.fixture
def open_db(perfect_crowd):
    """The same database without any quasi-identifier (raw tuples may be published)."""
    with crowddb.connect(platform=perfect_crowd, seed=3, progress=False) as con:
        con.load_frame("people", people_frame(), sensitive=["salary"], ground_truth="job", key="id")
        yield con


@pytest.fixture
def snapshots(monkeypatch) -> list:
    """Every Arrow table a table function's input was frozen as (``planner.snapshot``), in order."""
    from crowddb import planner as planner_module

    seen: list = []
    original = planner_module.snapshot

    def spy(con, query, coded=False):
        table, types = original(con, query, coded)
        seen.append(table)
        return table, types

    monkeypatch.setattr(planner_module, "snapshot", spy)
    return seen
