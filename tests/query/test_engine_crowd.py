"""The simulated crowd: seeded, quality-driven, answering generalized tuples from the nearest records."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import people_frame

import crowddb
from crowddb.cli import main
from crowddb.crowd import HitBatch, KnowledgeBase, SimulatedCrowd
from crowddb.errors import ArgumentError, PlatformError


def knowledge() -> KnowledgeBase:
    frame = pd.DataFrame({"age": [20, 30, 40, 50, 60], "sex": ["F", "M", "F", "M", "F"]})
    return KnowledgeBase(frame, np.array(["a", "b", "c", "d", "e"]))


def test_raw_tuple_is_answered_from_itself():
    kb = knowledge()
    shown = pd.DataFrame({"age": ["20", "50"], "sex": ["F", "M"]})
    assert (kb.sample(shown, 4, np.random.default_rng(0)) == np.array([["a"] * 4, ["d"] * 4])).all()


def test_generalized_tuple_draws_uniformly_inside_the_published_range():
    kb = knowledge()
    shown = pd.DataFrame({"age": ["[18-45]"] * 3, "sex": ["{F,M}", "F", "*"]})
    got = kb.sample(shown, 4000, np.random.default_rng(0))
    assert set(np.unique(got[1])) <= {"a", "c"}            # females of age 18..45 are records a and c
    assert set(np.unique(got[0])) == {"a", "b", "c", "d"}  # any sex, 18..45: a man of 45 is nearest d (50)
    assert "e" not in got[0] and "e" not in got[1]          # e (60) is never the nearest of an age <= 45
    share = (got[1] == "a").mean()
    assert 0.3 < share < 0.7                               # uniform over the range: both neighbours answer


def test_worker_quality_drives_accuracy():
    frame = people_frame(200)
    truth = frame["job"].to_numpy()
    kb = KnowledgeBase(frame[["age", "edu"]], truth)
    items = pd.DataFrame({"hit_id": "H1", "item_no": np.arange(1, 201), "row_no": 1,
                          "age": frame["age"].astype(str), "edu": frame["edu"].astype(str)})
    hits = pd.DataFrame({"hit_id": ["H1"], "question": ["?"], "domain": [("clerk", "driver", "teacher")],
                         "assignments": [5], "reward": [0.2], "fee_rate": [0.3], "target": [None]})
    for quality, low, high in ((1.0, 1.0, 1.0), (0.0, 0.0, 0.0), (0.6, 0.5, 0.7)):
        crowd = SimulatedCrowd(qualities=np.full(5, quality), seed=2)
        crowd.publish(HitBatch(hits, items, ["age", "edu"]), knowledge=kb)
        got = crowd.collect(["H1"])
        assert len(got.assignments) == 5 and len(got.answers) == 1000
        by_item = got.answers.sort_values(["item_no", "assignment_id"])
        right = (by_item["answer"].to_numpy() == np.repeat(truth, 5)).mean()
        assert low <= right <= high, (quality, right)
        assert got.assignments["worker_id"].is_unique  # distinct workers per HIT


def test_simulated_crowd_is_seeded():
    a, b = SimulatedCrowd(seed=9).workers(), SimulatedCrowd(seed=9).workers()
    pd.testing.assert_frame_equal(a, b)
    assert 0.7 < a["quality"].mean() < 0.9 and a["quality"].std() > 0.05  # workers of differing quality


def test_platform_errors():
    with pytest.raises(ArgumentError):
        SimulatedCrowd(qualities=[1.5])
    crowd = SimulatedCrowd(n_workers=2, seed=1)
    with crowddb.connect(platform=crowd, progress=False) as db:
        db.load_frame("people", people_frame(), ground_truth="job", key="id")
        with pytest.raises(PlatformError, match="2 workers"):
            db.sql("SELECT getposition(age) FROM people")
    with crowddb.connect(progress=False) as db:
        db.load_frame("people", people_frame().drop(columns="job"), key="id")
        with pytest.raises(PlatformError, match="ground-truth"):
            db.sql("SELECT getposition(age, domain := ['a', 'b']) FROM people")


def test_workers_and_payments_are_tables(open_db):
    open_db.sql("SELECT getposition(age, edu) FROM people").fetchall()
    paid = open_db.sql("SELECT count(*) FROM crowddb_payments p JOIN crowddb_workers w USING (worker_id)").fetchall()
    assert paid == [(5,)]


def test_progress_bar_is_quiet_off_a_terminal(capsys):
    with crowddb.connect(seed=1) as db:  # progress on, but stderr is not a terminal under pytest
        db.load_frame("people", people_frame(500), ground_truth="job", key="id")
        db.sql("SELECT getposition(age, edu, tuples_per_hit := 10) FROM people").fetchall()
    assert capsys.readouterr().err == ""


def test_cli_sql_explain_and_demo(tmp_path, capsys):
    path = str(tmp_path / "cli.duckdb")
    assert main(["sql", "SELECT 40 + 2 AS answer", "--db", path]) == 0
    assert "42" in capsys.readouterr().out
    assert main(["sql", "SELECT getposition(*) FROM nowhere", "--db", path]) == 2
    assert "nowhere" in capsys.readouterr().err
    assert main(["demo", "--rows", "300", "--db", path]) == 0
    out = capsys.readouterr().out
    assert "getposition (tuple): 300 rows" in out and "k=10" in out
    assert main(["explain", "SELECT id, getposition(*) FROM (SELECT * FROM adult LIMIT 50) adult", "--db", path]) == 0
    assert "50 rows" in capsys.readouterr().out


def test_progress_bar_shows_on_a_terminal(monkeypatch, capsys):
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with crowddb.connect(seed=1) as db:
        db.load_frame("people", people_frame(500), ground_truth="job", key="id")
        db.sql("SELECT getposition(age, edu, tuples_per_hit := 10) FROM people").fetchall()
    err = capsys.readouterr().err
    assert "getposition: HITs" in err and "/50" in err  # a bar over the 50 HITs (cleared when done)
