"""Issue 25's property: random working days (tuple and group operators, ANONYMIZE, ks, subsets, inserts and deletes,
in any order) never leave a joint class below its k, and never refuse after buying.

Every statement either runs or is refused with a ``crowddb.errors`` error before anything is bought (the payments
and the runs on record are unchanged); any other exception fails. At the end the independent composition checker
(``composition_checker``: imports nothing of crowddb) reads what workers saw (every HIT item, every ANONYMIZE
result) and finds no row below the k it was promised."""

from __future__ import annotations

import pandas as pd
from composition_checker import check, release_from_frame, releases_from_hit_items
from conftest import people_frame
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import crowddb
from crowddb.errors import CrowdDBError

ROLES = {"quasi_identifiers": ["age", "sex", "zip"], "sensitive": ["salary"], "ground_truth": "job", "key": "id",
         "core": ["token", "age", "sex", "zip"]}
QIS = ["age", "sex", "zip"]
START = 150

#: how an analyst picks rows (never by the key or a protected column)
SUBSETS = ["TRUE", "age < 40", "age >= 40", "age BETWEEN 30 AND 50", "hobby = 'chess'", "sex = 'F'",
           "zip LIKE '1%'", "age < 40 AND sex = 'M'", "hobby <> 'golf' AND age > 25"]

steps = st.one_of(
    st.tuples(st.just("tuple"), st.sampled_from([5, 10, 25]), st.sampled_from(SUBSETS)),
    st.tuples(st.just("group"), st.sampled_from([5, 10]), st.sampled_from(SUBSETS)),
    st.tuples(st.just("anonymize"), st.sampled_from([5, 10, 25]), st.sampled_from(SUBSETS)),
    st.tuples(st.just("insert"), st.integers(1, 30), st.just("")),
    st.tuples(st.just("delete"), st.just(0), st.sampled_from(["age > 65", "hobby = 'golf' AND age < 25"])),
)


def statement(step: tuple) -> str:
    kind, k, where = step
    if kind == "tuple":
        return (f"SELECT token, getposition(*, k := {k}, assignments := 1) AS p FROM people WHERE {where}")
    if kind == "group":
        return (f"SELECT hobby, getcandidate(*, 'teacher', k := {k}, assignments := 1, tuples_per_hit := 8) AS pick "
                f"FROM people WHERE {where} GROUP BY hobby")
    return f"SELECT * FROM ANONYMIZE((SELECT * FROM people WHERE {where}), k := {k})"


def bought(db) -> tuple:
    return db.sql("SELECT (SELECT count(*) FROM crowddb_payments), (SELECT count(*) FROM crowddb_hits)").fetchall()[0]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(day=st.lists(steps, min_size=2, max_size=6))
def test_a_random_working_day_keeps_every_joint_class_at_k_and_never_refuses_after_buying(day):
    everyone = people_frame(START + 200)
    everyone["token"] = [f"t{i}" for i in range(len(everyone))]
    released, next_row, outcomes = [], START, []
    with crowddb.connect(seed=11, progress=False) as db:
        db.load_frame("people", everyone.iloc[:START], **ROLES)
        for step in day:
            kind = step[0]
            if kind == "insert":
                arrivals = everyone.iloc[next_row:next_row + step[1]]
                next_row += step[1]
                db.load_frame("arrivals", arrivals, **ROLES)
                db.sql("INSERT INTO people SELECT * FROM arrivals")
                db.sql("DROP TABLE arrivals")
                continue
            if kind == "delete":
                db.sql(f"DELETE FROM people WHERE {step[2]}")
                continue
            before = bought(db)
            try:
                out = db.sql(statement(step)).df()
            except CrowdDBError as refused:
                assert bought(db) == before, f"refused after buying: {statement(step)}: {refused}"
                outcomes.append(("refused", statement(step), str(refused)[:120]))
                continue
            outcomes.append(("ran", statement(step)))
            if kind == "anonymize":
                released.append(release_from_frame(f"anonymize {len(released) + 1}", out, step[1]))
        report = check(everyone.iloc[:max(next_row, START)], QIS, releases_from_hit_items(db) + released)
    assert report.summary().startswith("no violation"), (report.summary(), outcomes)


def test_the_property_can_fail():
    """The checker behind the property finds a class below k when one is there (it is not vacuous)."""
    table = pd.DataFrame({"token": ["a", "b", "c"], "age": [30, 31, 50], "sex": ["F", "F", "M"],
                          "zip": ["1", "1", "2"]})
    shown = pd.DataFrame({"token": ["a", "b", "c"], "age": ["[30-31]", "[30-31]", "50"], "sex": ["F", "F", "M"],
                          "zip": ["1", "1", "2"]})
    assert not check(table, QIS, [release_from_frame("one", shown, 2)]).summary().startswith("no violation")
