"""Privacy claims of the human operators, checked on what the platform actually receives."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import RecordingCrowd, people_frame
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import crowddb
from crowddb.operators import human

QIS = ["age", "sex", "zip"]


def run_and_capture(monkeypatch, frame: pd.DataFrame, k: int, anonymizer: str = "mondrian", seed: int = 0):
    """Run getposition(*) and return (input frame, published text per input row, every published item)."""
    seen = {}
    original = human.HumanOperatorRun._publishable

    def spy(self):
        shown, metrics = original(self)
        seen["frame"], seen["shown"] = self.call.frame.copy(), shown.copy()
        return shown, metrics

    monkeypatch.setattr(human.HumanOperatorRun, "_publishable", spy)
    crowd = RecordingCrowd(n_workers=8, seed=seed)
    with crowddb.connect(platform=crowd, seed=seed, progress=False) as db:
        db.load_frame("people", frame, quasi_identifiers=QIS, sensitive=["salary"], ground_truth="job", key="id")
        db.sql(f"SELECT id, getposition(*, k := {k}, anonymizer := '{anonymizer}') FROM people").fetchall()
    return seen["frame"], seen["shown"], pd.concat(crowd.published, ignore_index=True)


def check_release(frame: pd.DataFrame, shown: pd.DataFrame, items: pd.DataFrame, k: int) -> None:
    # 1. what the platform received is exactly the release (no other column, no raw value of any protected column)
    assert set(items.columns) - {"hit_id", "item_no", "row_no"} == set(shown.columns)
    assert not {"salary", "job", "id"} & set(items.columns)
    assert set(map(tuple, items[list(shown.columns)].to_numpy())) <= set(map(tuple, shown.to_numpy()))
    # 2. every published combination of quasi-identifiers covers at least k input rows
    classes = shown.groupby(QIS).size()
    assert classes.min() >= k
    # 3. a raw QI value appears only where every row of its class shares it
    key = shown[QIS].astype(str).agg("|".join, axis=1)
    for q in QIS:
        raw = frame[q].astype(str)
        distinct = raw.groupby(key).nunique()
        mixed = key.map(distinct) > 1
        assert not (shown.loc[mixed, q] == raw[mixed]).any(), q


@pytest.mark.parametrize("k", [2, 5, 10, 30])
def test_no_raw_quasi_identifier_of_a_mixed_group_reaches_a_hit(monkeypatch, k):
    frame, shown, items = run_and_capture(monkeypatch, people_frame(120, seed=k), k)
    check_release(frame, shown, items, k)


def test_fka_release_and_its_samples_are_safe(monkeypatch):
    frame, shown, items = run_and_capture(monkeypatch, people_frame(200, seed=1), 10, anonymizer="fka")
    # FKA's synthetic samples go out first, with quasi-identifier columns only; the real rows follow
    samples, real = items[items["edu"].isna()], items[items["edu"].notna()]
    per_hit = samples.groupby("hit_id").size()
    assert per_hit.iloc[0] == 20  # the raw samples: 10% of 200 rows
    # then their cell-generalized copies (20 more asked; a copy whose text was already answered is not bought again)
    assert len(per_hit) == 2 and 20 < len(samples) <= 40
    assert samples[["hobby"]].isna().all().all()
    check_release(frame, shown, real.reset_index(drop=True), 10)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(20, 150), k=st.integers(2, 12), seed=st.integers(0, 10_000))
def test_release_property(monkeypatch, n, k, seed):
    frame = people_frame(n, seed=seed)
    frame, shown, items = run_and_capture(monkeypatch, frame, min(k, n), seed=seed)
    check_release(frame, shown, items, min(k, n))


def test_shuffled_rows_reveal_nothing_about_input_order(monkeypatch):
    _, shown, items = run_and_capture(monkeypatch, people_frame(300, seed=2).sort_values("age"), 5)
    first_hit = items[items["hit_id"] == items["hit_id"].iloc[0]]
    low = first_hit["age"].str.extract(r"^\[?(\d+)")[0].astype(int)
    assert low.max() - low.min() > 20  # the first HIT is not the 100 youngest people
    assert not np.array_equal(items["age"].to_numpy()[:len(shown)], shown["age"].to_numpy())
