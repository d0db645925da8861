"""Two query shapes the planner rewrites: a group operator over GROUPING SETS / ROLLUP / CUBE, and a STRUCT column's
fields published as ``s.*``.

Results are checked against independent computations over ``people_frame`` (each answer is the key of a row of its
group; with a perfect crowd over raw tuples, a teacher wherever the group has one), what workers saw with the
independent checkers (``privacy_scanner``: protected values, classes below k, a group's intersection;
``composition_checker``: k-anonymity across the runs of one call), and explain() line by line.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from composition_checker import check as composition_check
from composition_checker import releases_from_hit_items
from conftest import people_frame
from privacy_scanner import (
    describe,
    group_intersection_small_classes,
    leaked_protected,
    published_fields,
    published_items,
    small_classes,
)

import crowddb
from crowddb.crowd import SimulatedCrowd
from crowddb.errors import ArgumentError, BudgetExceededError, PrivacyError, UnknownColumnError

QIS = ["age", "sex", "zip"]


def group_ids(frame: pd.DataFrame, keys: dict) -> set:
    """The ids of the rows of the group whose grouping columns hold ``keys`` (None: NULL in the data)."""
    mask = np.ones(len(frame), dtype=bool)
    for column, value in keys.items():
        mask &= frame[column].isna().to_numpy() if value is None else (frame[column] == value).to_numpy()
    return set(frame.loc[mask, "id"])


def check_picks(got: pd.DataFrame, frame: pd.DataFrame, grouped: list[str], *, teachers: bool) -> None:
    """Every output row's pick is the key of a row of its own group (the grouping columns its GROUPING() bits say it
    groups by; a NULL it groups by is a NULL of the data); with ``teachers`` a teacher wherever the group has one."""
    jobs = frame.set_index("id")["job"]
    for row in got.itertuples(index=False):
        mask = int(row.g)
        keys = {c: (None if pd.isna(getattr(row, c)) else getattr(row, c))
                for i, c in enumerate(grouped) if not mask >> (len(grouped) - 1 - i) & 1}
        ids = group_ids(frame, keys)
        assert row.c in ids, (keys, row.c)
        if teachers and (jobs.loc[sorted(ids)] == "teacher").any():
            assert jobs.loc[row.c] == "teacher", (keys, row.c)


# ------------------------------------------------------------------------------------------------- grouping sets
def test_grouping_sets_pick_one_row_per_group_of_each_set(open_db):
    frame = people_frame()
    got = open_db.sql("""
        SELECT sex, zip, GROUPING(sex, zip) AS g, getcandidate(*, 'teacher', k := 5) AS c, count(*) AS n
        FROM people GROUP BY GROUPING SETS ((sex), (zip)) ORDER BY g, sex, zip""").df()
    expected = ([(sex, None, 1, n) for sex, n in frame.groupby("sex").size().items()]
                + [(None, z, 2, n) for z, n in frame.groupby("zip").size().items()])
    assert [(None if pd.isna(r.sex) else r.sex, None if pd.isna(r.zip) else r.zip, r.g, r.n)
            for r in got.itertuples()] == expected
    check_picks(got, frame, ["sex", "zip"], teachers=True)
    assert got["c"].tolist() == [18, 55, 56, 55, 42, 18]  # the seeded crowd's picks (pinned)
    # one run per set, each over every row once, each set's groups as items
    runs = open_db.sql("SELECT input_rows, hits FROM crowddb_runs ORDER BY run_id").fetchall()
    assert runs == [(60, 1), (60, 1)]
    groups = open_db.sql("SELECT h.run_id, json_array_length(i.content) FROM crowddb_hit_items i "
                         "JOIN crowddb_hits h USING (hit_id) ORDER BY 1, 2").fetchall()
    assert groups == sorted([(1, n) for n in frame.groupby("sex").size()]
                            + [(2, n) for n in frame.groupby("zip").size()])


@pytest.mark.parametrize(("group_by", "grouped", "rows", "runs"), [
    ("ROLLUP (sex, hobby)", ["sex", "hobby"], 2 * 3 + 2 + 1, 3),
    ("CUBE (sex, zip)", ["sex", "zip"], 2 * 4 + 2 + 4 + 1, 4),
    ("sex, ROLLUP (hobby)", ["sex", "hobby"], 2 * 3 + 2, 2),
    ("GROUPING SETS ((sex), (sex), ())", ["sex"], 2 + 2 + 1, 2),  # a set twice: DuckDB's rows twice, asked once
    ("GROUPING SETS ((1, 2), (1))", ["sex", "hobby"], 2 * 3 + 2, 2),  # ordinals
])
def test_rollup_and_cube_expand_into_their_sets(open_db, group_by, grouped, rows, runs):
    frame = people_frame()
    columns = ", ".join(grouped)
    got = open_db.sql(f"""
        SELECT {columns}, GROUPING({columns}) AS g, getcandidate(*, 'teacher', k := 5) AS c
        FROM people GROUP BY {group_by}""").df()
    assert len(got) == rows
    check_picks(got, frame, grouped, teachers=True)
    assert open_db.sql("SELECT count(*) FROM crowddb_runs").fetchall() == [(runs,)]


def test_a_null_of_the_data_is_not_a_set_s_null(perfect_crowd):
    """A group whose key is NULL in the data and a set's row where that expression is not grouped (NULL too) are told
    apart by GROUPING(): each gets the pick of its own group."""
    frame = people_frame()
    frame["hobby"] = frame["hobby"].where(frame["id"] % 4 != 0, None)
    with crowddb.connect(platform=perfect_crowd, seed=3, progress=False) as db:
        db.load_frame("people", frame, sensitive=["salary"], ground_truth="job", key="id")
        got = db.sql("""
            SELECT sex, hobby, GROUPING(sex, hobby) AS g, getcandidate(*, 'teacher', k := 5) AS c
            FROM people GROUP BY GROUPING SETS ((sex, hobby), (sex)) ORDER BY g, sex, hobby""").df()
    nulls = got[got["hobby"].isna()]
    assert nulls[["sex", "g"]].values.tolist() == [["F", 0], ["M", 0], ["F", 1], ["M", 1]]
    # (not always a teacher: a NULL is published as '*', and the simulated worker imagines any hobby there)
    check_picks(got, frame, ["sex", "hobby"], teachers=False)
    assert nulls["c"].tolist() == [40, 36, 29, 12]  # the seeded crowd's picks (pinned): four groups, four picks


def test_answers_compose_with_having_and_order_by(open_db):
    got = open_db.sql("""
        SELECT hobby, getcandidate(*, 'teacher', k := 5) AS c FROM people
        GROUP BY GROUPING SETS ((hobby), ()) HAVING c IS NOT NULL ORDER BY c""").df()
    frame = people_frame()
    assert len(got) == 4 and got["c"].is_monotonic_increasing
    for hobby, c in zip(got["hobby"], got["c"]):
        assert c in (set(frame["id"]) if pd.isna(hobby) else group_ids(frame, {"hobby": hobby}))


def test_explain_shows_one_run_per_set(open_db):
    plan = open_db.explain("SELECT sex, zip, getcandidate(*, 'teacher', k := 5) AS c FROM people "
                           "GROUP BY GROUPING SETS ((sex), (zip), (sex, upper(sex)))")
    assert str(plan).splitlines() == [
        "plan: 1. getcandidate",
        "getcandidate (group): 60 rows -> 2 items, 0 cached; 1 HITs, 5 assignments, est. $1.30",
        ("    privacy: no quasi-identifier published, epsilon=-; grouping set (sex) and (sex, UPPER(sex)) (1 of 2): "
         "the same groups"),
        "    withheld: id (key people.id); job (ground truth people.job); salary (sensitive people.salary)",
        "getcandidate (group): 60 rows -> 4 items, 0 cached; 1 HITs, 5 assignments, est. $1.30",
        "    privacy: no quasi-identifier published, epsilon=-; grouping set (zip) (2 of 2)",
        "    withheld: id (key people.id); job (ground truth people.job); salary (sensitive people.salary)",
        "total: 2 HITs, 10 assignments, est. $2.60",
    ]
    assert open_db.sql("SELECT count(*) FROM crowddb_hits").fetchall() == [(0,)]


def test_explain_with_quasi_identifiers(db):
    plan = db.explain("SELECT sex, hobby, getcandidate(*, 'teacher', k := 5) AS c FROM people "
                      "GROUP BY ROLLUP (sex, hobby)")
    lines = str(plan).splitlines()
    assert lines[0] == "plan: 1. getcandidate"
    assert [line.split(";")[0] for line in lines[1:-1:3]] == [
        "getcandidate (group): 60 rows -> 6 items, 0 cached", "getcandidate (group): 60 rows -> 2 items, 0 cached",
        "getcandidate (group): 60 rows -> 1 items, 0 cached"]
    assert [line.split("; ")[-1] for line in lines[2:-1:3]] == [
        "grouping set (sex, hobby) (1 of 3)", "grouping set (sex) (2 of 3)", "grouping set () (3 of 3)"]
    assert all(line.startswith("    privacy: k=5, anonymizer=mondrian") for line in lines[2:-1:3])
    assert lines[-1] == "total: 3 HITs, 15 assignments, est. $3.90"
    assert plan.df()["input_rows"].tolist() == [60, 60, 60]


def token_db(crowd: SimulatedCrowd) -> tuple[crowddb.CrowdDB, pd.DataFrame]:
    """``people`` with a unique token every item carries raw (perfect linkage for the composition checker)."""
    frame = people_frame().assign(token=lambda f: [f"tok{i:03d}" for i in f["id"]])
    db = crowddb.connect(platform=crowd, seed=3, progress=False)
    db.load_frame("people", frame, quasi_identifiers=QIS, sensitive=["salary"], ground_truth="job", key="id",
                  core=["age", "sex", "zip", "edu", "hobby", "token"])
    return db, frame


#: (query, its grouping columns)
_ACROSS_SETS = [
    # every set that shares a quasi-identifier within its groups shares the same one (zip): the release generalizes
    # it per group (plain Mondrian here shows one zip group's rows in several zip labels, whose intersection a
    # worker would read off an item)
    (("SELECT zip, hobby, GROUPING(zip, hobby) AS g, getcandidate(*, 'teacher', k := 5) AS c "
      "FROM people GROUP BY ROLLUP (zip, hobby)"), ["zip", "hobby"]),
    (("SELECT sex, hobby, GROUPING(sex, hobby) AS g, getcandidate(*, 'teacher', k := 5) AS c "
      "FROM people GROUP BY ROLLUP (sex, hobby)"), ["sex", "hobby"]),
    # the grouped quasi-identifiers are not published: nothing a group shares is shown
    (("SELECT sex, zip, GROUPING(sex, zip) AS g, getcandidate(age, edu, token, 'teacher', k := 5) AS c "
      "FROM people GROUP BY GROUPING SETS ((sex), (zip))"), ["sex", "zip"]),
]


@pytest.mark.parametrize(("query", "grouped"), _ACROSS_SETS)
def test_what_workers_saw_is_k_anonymous_across_the_sets(perfect_crowd, query, grouped):
    db, frame = token_db(perfect_crowd)
    with db:
        got = db.sql(query).df()
        check_picks(got, frame, grouped, teachers=False)
        items = published_items(db)
        runs = db.sql("SELECT count(*) FROM crowddb_runs").fetchall()[0][0]
        releases = releases_from_hit_items(db)
    assert runs == len(releases) >= 2
    assert leaked_protected(items, frame, ["job", "salary"], "id") == []
    assert small_classes(items, frame, QIS, 5).empty, describe(small_classes(items, frame, QIS, 5))
    shared = group_intersection_small_classes(items, frame, QIS, [c for c in grouped if c in QIS][:1], 5)
    assert shared.empty, describe(shared)
    report = composition_check(frame, QIS, releases)
    assert not report.violations and not report.uncovered, report.summary()
    assert {"age", "edu", "token"} <= published_fields(items) <= {"age", "sex", "zip", "edu", "hobby", "token"}


def test_sets_sharing_different_quasi_identifiers_are_refused(db):
    """A (sex) group shares sex, a (zip) group zip: every row is shown once per set in one box, which cannot be
    generalized per sex group and per zip group at once (Mondrian's per-group labels hold for one list of shared
    columns), so workers intersecting a group's boxes could narrow it: refused before anything is published."""
    query = ("SELECT sex, zip, getcandidate(*, 'teacher', k := 5) AS c FROM people "
             "GROUP BY GROUPING SETS ((sex), (zip))")
    for run in (db.explain, db.sql):
        with pytest.raises(PrivacyError, match=r"\(\(sex\) shares sex; \(zip\) shares zip\)"):
            run(query)
    assert db.sql("SELECT count(*) FROM crowddb_hits").fetchall() == [(0,)]
    assert db.sql("SELECT count(*) FROM crowddb_runs").fetchall() == [(0,)]


@pytest.mark.parametrize(("group_by", "protected"), [
    ("GROUPING SETS ((sex), (salary))", "the sensitive column people.salary"),
    ("ROLLUP (hobby, job)", "the ground truth people.job"),
    ("CUBE (hobby, id)", "the key people.id"),
    ("GROUPING SETS ((hobby), (upper(job)))", "the ground truth people.job"),
    ("sex, GROUPING SETS ((hobby), (salary > 50000))", "the sensitive column people.salary"),
    ("GROUPING SETS (ROLLUP (hobby, salary))", "the sensitive column people.salary"),
    ("GROUPING SETS ((pay), ())", "the sensitive column people.salary"),  # a select alias
])
def test_a_protected_column_in_a_grouping_set_is_refused(db, group_by, protected):
    select = "salary AS pay, " if "pay" in group_by else ""
    query = f"SELECT {select}getcandidate(*, 'teacher', k := 5) AS c FROM people GROUP BY {group_by}"
    for run in (db.explain, db.sql):
        with pytest.raises(PrivacyError, match=f"grouped by {protected}"):
            run(query)
    assert db.sql("SELECT count(*) FROM crowddb_hits").fetchall() == [(0,)]


def test_a_set_grouping_by_an_expression_of_a_quasi_identifier_is_refused(db):
    with pytest.raises(PrivacyError, match=r"GROUP BY age // 10 is computed from the quasi-identifier 'age'"):
        db.sql("SELECT getcandidate(*, 'teacher', k := 5) AS c FROM people GROUP BY GROUPING SETS ((age // 10), ())")
    assert db.sql("SELECT count(*) FROM crowddb_hits").fetchall() == [(0,)]


def test_the_call_budget_bounds_all_its_sets(open_db):
    query = ("SELECT hobby, getcandidate(*, 'teacher', k := 5, budget := {}) AS c FROM people "
             "GROUP BY GROUPING SETS ((hobby), ())")
    with pytest.raises(BudgetExceededError, match=r"\$2\.60 of its 2 grouping sets exceeds the budget \$1\.50"):
        open_db.sql(query.format(1.5))
    assert open_db.sql("SELECT count(*) FROM crowddb_hits").fetchall() == [(0,)]
    assert len(open_db.sql(query.format(2.6)).fetchall()) == 4
    assert float(open_db.sql("SELECT sum(cost) FROM crowddb_runs").fetchall()[0][0]) == pytest.approx(2.6)


def test_too_many_grouping_sets_are_refused(open_db):
    open_db.sql("CREATE TABLE wide AS SELECT id, job, sex, zip, hobby, edu, age, edu % 2 AS e2, age % 2 AS a2, "
                "age % 3 AS a3 FROM people")
    with pytest.raises(ArgumentError, match="more than 64"):
        open_db.sql("SELECT getcandidate(*, 'teacher') FROM wide GROUP BY CUBE (sex, zip, hobby, edu, age, e2, a2, a3)")
    with pytest.raises(ArgumentError, match="more than 64"):
        open_db.sql("SELECT getcandidate(*, 'teacher') FROM wide GROUP BY CUBE (sex, zip, hobby), CUBE (edu, age), "
                    "CUBE (e2, a2)")
    assert open_db.sql("SELECT count(*) FROM crowddb_runs").fetchall() == [(0,)]


# ------------------------------------------------------------------------------------------------- struct stars
@pytest.fixture
def structs(db):
    """``s``: the QIs in a STRUCT; ``s2``: a STRUCT holding the sensitive salary, and one of core columns."""
    db.sql("CREATE TABLE s AS SELECT id, {'age': age, 'sex': sex, 'zip': zip} AS st, job FROM people")
    db.sql("CREATE TABLE s2 AS SELECT id, {'age': age, 'pay': salary} AS st, {'hobby': hobby, 'edu': edu} AS h, job "
           "FROM people")
    return db


def test_struct_star_publishes_its_fields_generalized_as_quasi_identifiers(structs):
    db, frame = structs, people_frame()
    got = db.sql("SELECT id, getposition(st.*, k := 5) AS a FROM s ORDER BY id").df()
    assert got["id"].tolist() == frame["id"].tolist()
    assert set(got["a"]) <= {"teacher", "driver", "clerk"}
    items = published_items(db)
    assert published_fields(items) == {"age", "sex", "zip"}  # named after the fields
    assert len(items) == 60
    assert leaked_protected(items, frame, ["job", "salary"], "id") == []
    assert small_classes(items, frame, QIS, 5).empty, describe(small_classes(items, frame, QIS, 5))
    # the ledger traced the rows of s to people (s was made from people's rows and holds its key)
    assert db.sql("SELECT table_name, count(*) FROM crowddb_published GROUP BY ALL").fetchall() == [("people", 60)]


def test_struct_star_explain(structs):
    plan = structs.explain("SELECT id, getposition(st.*, k := 5) AS a FROM s")
    lines = str(plan).splitlines()
    assert lines[:2] == ["plan: 1. getposition",
                         "getposition (tuple): 60 rows -> 60 items, 0 cached; 1 HITs, 5 assignments, est. $1.30"]
    assert lines[2].startswith("    privacy: k=5, anonymizer=mondrian, NCP=")
    assert lines[3:] == ["total: 1 HITs, 5 assignments, est. $1.30"]  # no field withheld
    plan = structs.explain("SELECT id, getposition(st.*, h.*, k := 5) AS a FROM s2")
    assert str(plan).splitlines()[1:] == [
        "getposition (tuple): 60 rows -> 60 items, 0 cached; 1 HITs, 5 assignments, est. $1.30",
        "    privacy: no quasi-identifier published, epsilon=-",
        "    withheld: age (sensitive s2.st); pay (sensitive s2.st)",
        "total: 1 HITs, 5 assignments, est. $1.30"]
    assert structs.sql("SELECT count(*) FROM crowddb_hits").fetchall() == [(0,)]


def test_struct_fields_derived_from_a_protected_column_are_withheld(structs):
    db, frame = structs, people_frame()
    with pytest.raises(PrivacyError, match=r"nothing to publish: .*age: sensitive s2\.st; pay: sensitive s2\.st"):
        db.sql("SELECT id, getposition(st.*, k := 5) AS a FROM s2")
    assert db.sql("SELECT count(*) FROM crowddb_hits").fetchall() == [(0,)]
    got = db.sql("SELECT id, getposition(st.*, h.*, k := 5) AS a FROM s2").df()
    assert len(got) == 60
    items = published_items(db)
    assert published_fields(items) == {"hobby", "edu"}
    assert leaked_protected(items, frame, ["job", "salary"], "id") == []
    # the same through a CTE: lineage follows the struct to salary and job
    db.sql("""WITH c AS (SELECT id, {'e': edu, 'pay': salary} AS st, {'j': job} AS t, {'h': hobby} AS u, job
                        FROM people)
              SELECT id, getposition(st.*, t.*, u.*, k := 5) AS a FROM c""").fetchall()
    items = published_items(db)
    assert published_fields(items) == {"hobby", "edu", "h"}
    assert leaked_protected(items, frame, ["job", "salary"], "id") == []
    plan = db.explain("WITH c AS (SELECT id, {'e': edu, 'pay': salary} AS st, {'j': job} AS t, {'h': hobby} AS u, "
                      "job FROM people) SELECT id, getposition(st.*, t.*, u.*, k := 5) AS a FROM c")
    assert str(plan).splitlines()[-2] == ("    withheld: e (sensitive people.salary); pay (sensitive people.salary); "
                                          "j (ground truth people.job)")


def test_struct_star_keeps_the_query_s_own_columns(structs):
    got = structs.sql("SELECT *, getposition(s.st.*, k := 5) AS a FROM s")
    assert got.columns == ["id", "st", "job", "a"]
    got = structs.sql("SELECT x.*, getposition(x.st.*, k := 5) AS a FROM s AS x")
    assert got.columns == ["id", "st", "job", "a"]


def test_a_field_named_like_a_column_is_qualified(structs):
    db = structs
    db.sql("CREATE TABLE s3 AS SELECT id, age, {'age': age, 'edu': edu} AS st, job FROM people")
    db.sql("SELECT id, getposition(age, st.*, k := 5) AS a FROM s3").fetchall()
    assert published_fields(published_items(db)) == {"s3.age", "st.age", "edu"}


def test_struct_star_through_a_subquery_is_traced_to_its_table(structs):
    db, frame = structs, people_frame()
    got = db.sql("SELECT x.id, getposition(x.st.*, k := 5) AS a FROM (SELECT id, {'age': age, 'edu': edu} AS st, job "
                 "FROM people WHERE age > 25) AS x").df()
    assert sorted(got["id"]) == sorted(frame.loc[frame["age"] > 25, "id"])
    assert db.sql("SELECT table_name, count(*) FROM crowddb_published GROUP BY ALL").fetchall() == [
        ("people", int((frame["age"] > 25).sum()))]


def test_struct_star_errors(structs):
    db = structs
    with pytest.raises(ArgumentError, match=r"id\.\* publishes a STRUCT column's fields, and 'id' is a"):
        db.sql("SELECT getposition(id.*, k := 5) FROM s")
    with pytest.raises(UnknownColumnError, match="no table, alias or STRUCT column 'nope' in FROM"):
        db.sql("SELECT getposition(nope.*, k := 5) FROM s")
    with pytest.raises(ArgumentError, match="'st' is a column of more than one table in FROM"):
        db.sql("SELECT getposition(st.*, k := 5) FROM s JOIN (SELECT st FROM s2 LIMIT 1) AS o ON true")
    assert len(db.sql("SELECT getposition(s.st.*, k := 5) FROM s JOIN (SELECT st FROM s2 LIMIT 1) AS o ON true")
               .fetchall()) == 60
