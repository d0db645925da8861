"""Human operators over a Spark table (crowddb/spark/crowd.py): ``SELECT c, getposition(*, k := 10) AS job FROM
spark.t WHERE ...`` releases the WHERE's rows in the table's Spark ledger, asks the crowd about that release from the
driver, and joins the answers back on Spark. What workers saw is read back from the HITs and checked independently
of the code that made it: every box a HIT shows covers at least k of the rows asked about (counted on the raw rows),
and no protected value is in any HIT."""

from __future__ import annotations

import json
from pathlib import Path
import re

import numpy as np
import pandas as pd
import pyarrow.csv as pcsv
import pytest
from spark_session import spark  # noqa: F401

import crowddb
import crowddb.spark as cs
from crowddb.datasets import adult_path
from crowddb.errors import ArgumentError, CrowdDBError, PrivacyError

N = 300
QIS = ["age", "sex", "education_num"]
COLUMNS = ["id", *QIS, "occupation", "workclass", "hours_per_week"]
CORE = [*QIS, "workclass", "hours_per_week"]
ASK = "SELECT c.workclass, getposition(*, k := 10) AS job FROM spark.people c WHERE c.hours_per_week >= 40"


@pytest.fixture(scope="module")
def people(spark):  # noqa: F811
    """The first N rows of Adult as the Spark temp view ``people``, and their pandas twin."""
    table = pcsv.read_csv(adult_path()).slice(0, N).select(COLUMNS)
    df = spark.createDataFrame(table).cache()
    df.createOrReplaceTempView("people")
    yield table.to_pandas()
    spark.catalog.dropTempView("people")
    df.unpersist()


@pytest.fixture
def db(spark, people, tmp_path):  # noqa: F811
    with crowddb.connect(str(tmp_path / "jobs.duckdb"), spark=spark, progress=False, seed=3) as con:
        con.declare_roles("spark:people", quasi_identifiers=QIS, sensitive=["occupation"], ground_truth="occupation",
                          key="id", core=CORE)
        yield con


def shown(db) -> pd.DataFrame:
    """Every item a worker was shown, as the HIT content says it (one row per item)."""
    return pd.DataFrame([json.loads(c) for (c,) in db.sql("SELECT content FROM crowddb_hit_items").fetchall()])


def covers(label: str, values: pd.Series) -> np.ndarray:
    """Which raw values a published label stands for: '[a-b]' a range, '*' anything, else the value itself."""
    found = re.fullmatch(r"\[(-?\d+)-(-?\d+)\]", label)
    if found:
        return ((values >= int(found[1])) & (values <= int(found[2]))).to_numpy()
    if label == "*":
        return np.ones(len(values), bool)
    return (values.astype(str) == label).to_numpy()


def payments(db) -> tuple[int, float]:
    n, total = db.sql("SELECT count(*), coalesce(sum(reward + fee), 0) FROM crowddb_payments").fetchall()[0]
    return int(n), float(total)


def test_a_human_operator_asks_about_the_spark_release_and_joins_the_answers_back(spark, people, db):  # noqa: F811
    asked = people[people.hours_per_week >= 40]
    got = db.sql(ASK)
    assert type(got).__name__ == "DataFrame" and got.columns == ["workclass", "job"]
    result = got.toPandas()
    assert len(result) == len(asked)
    assert sorted(result.workclass) == sorted(asked.workclass)
    # the answers are the crowd's, from the operator's domain: the table's ground-truth values (all its rows)
    assert result.job.notna().all() and set(result.job) <= set(people.occupation)
    items = shown(db)
    assert len(items) == len(asked) and sorted(items.columns) == sorted(CORE)
    # independent of the release's code: every box a worker saw covers at least 10 of the rows asked about
    for box, _ in items.groupby(QIS):
        inside = np.logical_and.reduce([covers(label, asked[q]) for q, label in zip(QIS, box)])
        assert inside.sum() >= 10, box
    # nothing protected reached a HIT: no key, no occupation, and no raw age a row asked about has alone
    assert "id" not in items.columns and "occupation" not in items.columns
    assert not set(items.workclass) - set(asked.workclass)
    # what the run says it did: the Spark release's promise, what was withheld, by the Spark table's names
    plan = db.last_plan.operators[0]
    assert (plan.k, plan.anonymizer, plan.input_rows) == (10, "mondrian on Spark (release 1 of spark:people)",
                                                          len(asked))
    assert plan.withheld == {"id": "key spark.people.id", "occupation": "ground truth spark.people.occupation"}
    # on record: one release of the Spark table (before anything was published), and what was paid
    assert cs.releases(db, "people")[["release_no", "k", "status"]].values.tolist() == [[1, 10, "completed"]]
    before = payments(db)
    assert before[0] > 0
    # the same statement again: the same answers, served from the record, nothing paid twice
    again = db.sql(ASK).toPandas()
    assert again.sort_values(["workclass", "job"]).reset_index(drop=True).equals(
        result.sort_values(["workclass", "job"]).reset_index(drop=True))
    assert payments(db) == before
    assert len(cs.releases(db, "people")) == 2


def test_the_same_crowd_query_as_on_a_local_table(spark, people, db, tmp_path):  # noqa: F811
    """The same statement over the same rows as a local table, with the same seed: the same HITs, item for item in
    the same order, and the same payments (the local run generalizes the published quasi-identifiers with the local
    Mondrian; the Spark one shows the Spark release's labels: they are equal). The simulated crowd's answers are not
    compared: its workers look their knowledge up in the rows they are handed, here the release (raw
    quasi-identifiers never reach the driver), there the raw rows."""
    db.sql(ASK).toPandas()
    same_as_local(db, people, ASK, tmp_path)


def same_as_local(db, people: pd.DataFrame, statement: str, tmp_path) -> None:
    """``statement`` over a local copy of ``people`` with the same seed publishes the HITs ``db`` published, item for
    item in the same order, and pays the same."""
    with crowddb.connect(str(tmp_path / "local.duckdb"), progress=False, seed=3) as local:
        local.load_frame("people", people, quasi_identifiers=QIS, sensitive=["occupation"],
                         ground_truth="occupation", key="id", core=CORE)
        local.sql(statement.replace("spark.people", "people")).df()
        hits = "SELECT hit_id, item_no, content FROM crowddb_hit_items ORDER BY hit_id, item_no"
        assert db.sql(hits).fetchall() == local.sql(hits).fetchall()
        assert payments(db) == payments(local)


def test_the_crowd_release_composes_with_anonymize_in_the_spark_ledger(spark, people, db):  # noqa: F811
    """The rows a human operator released are on the Spark ledger's record: a later ANONYMIZE of the whole table is
    judged against them, refused exactly when a joint class would fall below k (counted independently here, from
    the boxes the workers saw and the classes the whole table's release would have)."""
    db.sql(ASK).toPandas()
    asked = people[people.hours_per_week >= 40]
    crowd = cs.anonymize(spark.createDataFrame(asked), QIS, 10).toPandas()  # the same Mondrian over the same rows
    box_of = dict(zip(crowd.id, crowd[QIS].astype(str).agg("|".join, axis=1)))
    assert sorted(box_of.values()) == sorted(shown(db)[QIS].astype(str).agg("|".join, axis=1))  # what workers saw
    whole = cs.anonymize(spark.createDataFrame(people), QIS, 10).toPandas()
    joint = pd.Series([(box_of.get(i), c) for i, c in zip(whole.id, whole["class"])])
    below = int((joint.map(joint.value_counts()) < 10).sum())
    assert below > 0  # this sample's whole-table classes cut the crowd's boxes: the ledger must refuse
    with pytest.raises(PrivacyError, match=f"leave {below} row"):
        db.sql("SELECT * FROM ANONYMIZE(spark.people, k := 10)")
    assert cs.releases(db, "people").status.tolist() == ["completed"]


def test_what_does_not_run_on_spark_is_refused_before_anything_is_released_or_paid(spark, people, db):  # noqa: F811
    refused = [
        (PrivacyError, "protected", ("SELECT c.workclass, getposition(*) AS job FROM spark.people c "
                                     "WHERE c.occupation = 'Sales'")),
        (PrivacyError, "protected", "SELECT c.id, getposition(*) AS job FROM spark.people c"),
        (ArgumentError, "limit", "SELECT c.workclass, getposition(*) AS job FROM spark.people c LIMIT 5"),
        (ArgumentError, "group", "SELECT c.workclass, getposition(*) AS job FROM spark.people c GROUP BY c.workclass"),
        (ArgumentError, "one human operator per statement",
         "SELECT getposition(*) AS a, getposition(*) AS b FROM spark.people"),
        (ArgumentError, "asks about whole rows", "SELECT getposition(workclass) AS job FROM spark.people"),
        (ArgumentError, "outermost SELECT", "SELECT * FROM (SELECT getposition(*) AS job FROM spark.people) t"),
        (ArgumentError, "anonymizer", "SELECT getposition(*, anonymizer := 'fka') AS job FROM spark.people"),
        (PrivacyError, "protected", ("SELECT c.sex, getcandidate(*, 'teacher') AS t "
                                     "FROM spark.people c GROUP BY c.sex")),
        (ArgumentError, "ROLLUP", ("SELECT c.workclass, getcandidate(*, 'teacher') AS t "
                                   "FROM spark.people c GROUP BY ROLLUP (c.workclass)")),
        (ArgumentError, "own answer", "SELECT getcandidate(*, 'teacher') AS t FROM spark.people c GROUP BY 1"),
        (ArgumentError, "having", ("SELECT c.workclass, getcandidate(*, 'teacher') AS t FROM spark.people c "
                                   "GROUP BY c.workclass HAVING count(*) > 2")),
        (ArgumentError, "accuracy := is for tuple operators", (
            "SELECT c.workclass, getcandidate(*, 'teacher', accuracy := 0.9) AS t FROM spark.people c GROUP BY 1")),
        (ArgumentError, "k := 1 must be at least 2", (
            "SELECT c.workclass, getposition(*, k := 1) AS job FROM spark.people c")),
        (ArgumentError, "k := 'ten' must be an integer", (
            "SELECT c.workclass, getposition(*, k := 'ten') AS job FROM spark.people c")),
        (ArgumentError, "assignments", (
            "SELECT c.workclass, getposition(*, assignments := 0) AS job FROM spark.people c")),
        (CrowdDBError, "Spark rejected", ("SELECT c.workclass, c.hours_per_week, getcandidate(*, 'teacher') AS t "
                                          "FROM spark.people c GROUP BY c.workclass")),
        (ArgumentError, "need its roles declared", "SELECT getposition(*) AS job FROM spark.undeclared"),
    ]
    spark.createDataFrame(pd.DataFrame({"x": [1, 2]})).createOrReplaceTempView("undeclared")
    try:
        for error, match, statement in refused:
            with pytest.raises(error, match=match):
                db.sql(statement)
    finally:
        spark.catalog.dropTempView("undeclared")
    assert cs.releases(db, "people").empty
    assert payments(db) == (0, 0.0)
    assert db.sql("SELECT count(*) FROM crowddb_hits").fetchall() == [(0,)]


def test_an_operator_defined_with_another_anonymizer_is_refused_on_spark(spark, people, db, tmp_path):  # noqa: F811
    # the definition's own anonymizer (its TOML), not only a call's override, decides: Spark runs Mondrian alone
    toml = (Path(__file__).resolve().parents[2] / "udfs" / "getposition.toml").read_text()
    for anonymizer in ("fka", "datafly"):
        path = tmp_path / f"pick_{anonymizer}.toml"
        path.write_text(toml.replace('name = "getposition"', f'name = "pick_{anonymizer}"')
                        .replace('anonymizer = "mondrian"', f'anonymizer = "{anonymizer}"'))
        db.register_udf(path)
        with pytest.raises(ArgumentError, match=f"anonymizer '{anonymizer}' runs on local tables only"):
            db.sql(f"SELECT c.workclass, pick_{anonymizer}(*) AS job FROM spark.people c")
    assert cs.releases(db, "people").empty
    assert payments(db) == (0, 0.0)
    assert db.sql("SELECT count(*) FROM crowddb_hits").fetchall() == [(0,)]


def test_the_roles_a_crowd_needs_are_checked_when_declared(spark, people, db):  # noqa: F811
    from crowddb.errors import UnknownColumnError

    for roles, error, match in [
        ({"core": ["workclass", "occupation"]}, PrivacyError, r"core columns are shown to workers, and \['occupation'\]"),
        ({"core": ["id"]}, PrivacyError, r"\['id'\] are protected"),
        ({"ground_truth": "age"}, PrivacyError, r"\['age'\] are given two roles"),
        ({"ground_truth": "nope"}, UnknownColumnError, r"no column\(s\) \['nope'\]"),
    ]:
        with pytest.raises(error, match=match):
            db.declare_roles("spark:people", **{"quasi_identifiers": QIS, "sensitive": ["occupation"], "key": "id",
                                                "ground_truth": "occupation", **roles})
    assert db.roles("spark:people")["core"] == CORE  # the declared roles stay as they were
    assert db.roles("spark:people")["ground_truth"] == "occupation"


def test_an_accuracy_target_over_a_spark_table(spark, people, db):  # noqa: F811
    """accuracy := ... runs its rounds from the driver as locally; the answer's confidence follows it on Spark."""
    got = db.sql("SELECT c.workclass, getposition(*, k := 10, accuracy := 0.9, max_assignments := 5) AS job "
                 "FROM spark.people c WHERE c.hours_per_week >= 40")
    assert got.columns == ["workclass", "job", "job_confidence"]
    result = got.toPandas()
    report = db.last_report[-1]
    assert report["kind"] == "accuracy target" and report["items"] == len(result) == (people.hours_per_week >= 40).sum()
    answered = db.sql("SELECT count(*) FROM crowddb_answers").fetchall()[0][0]
    assert report["bought"] == answered and report["rounds"] >= 2  # a first run measures the crowd in round 2
    assert result.job_confidence.between(0, 1).all()
    assert abs(result.job_confidence.mean() - report["mean_confidence"]) < 1e-6


PICK = ("SELECT c.workclass, getcandidate(*, 'Prof-specialty', tuples_per_hit := 200) AS pick FROM spark.people c "
        "WHERE c.hours_per_week >= 40 GROUP BY c.workclass")


def test_a_group_operator_picks_one_row_per_group_of_the_spark_release(spark, people, db, tmp_path):  # noqa: F811
    """getcandidate(*, ...) ... GROUP BY over a Spark table: one pick per group, each the key of a row of that group
    that WHERE kept (checked on the raw rows); every HIT shows one group's rows, in boxes covering at least k of the
    rows asked about, and nothing protected; the HITs are those of the same statement over a local copy with the
    same seed, item for item; a rerun pays nothing."""
    asked = people[people.hours_per_week >= 40]
    result = db.sql(PICK).toPandas()
    assert sorted(result.workclass) == sorted(asked.workclass.unique())
    row = asked.set_index("id")
    assert all(row.loc[p, "workclass"] == w for w, p in zip(result.workclass, result.pick))  # a row of its group
    hits = [json.loads(c) for (c,) in db.sql("SELECT content FROM crowddb_hit_items").fetchall()]  # a group each
    assert sorted(len({r["workclass"] for r in group}) for group in hits) == [1] * len(hits)
    assert len(hits) == asked.workclass.nunique()  # one item per group: no knock-out round
    items = pd.DataFrame([r for group in hits for r in group])
    assert sorted(items.columns) == sorted(CORE) and len(items) == len(asked)
    for box, _ in items.groupby(QIS):
        inside = np.logical_and.reduce([covers(label, asked[q]) for q, label in zip(QIS, box)])
        assert inside.sum() >= 10, box
    assert "id" not in items.columns and "occupation" not in items.columns
    assert cs.releases(db, "people")[["release_no", "k", "status"]].values.tolist() == [[1, 10, "completed"]]
    same_as_local(db, people, PICK, tmp_path)
    before = payments(db)
    again = db.sql(PICK).toPandas()
    assert again.sort_values("workclass").reset_index(drop=True).equals(
        result.sort_values("workclass").reset_index(drop=True))
    assert payments(db) == before


def test_a_group_operator_over_an_expression_and_without_group_by(spark, people, db):  # noqa: F811
    """Groups by an expression Spark computes, and a statement without GROUP BY is one group, as locally; a group
    larger than one HIT is decided in knock-out rounds."""
    grouped = db.sql("SELECT c.hours_per_week > 45 AS long, getcandidate(*, 'Sales') AS pick FROM spark.people c "
                     "WHERE c.hours_per_week >= 40 GROUP BY c.hours_per_week > 45").toPandas()
    asked = people[people.hours_per_week >= 40].set_index("id")
    assert sorted(grouped.long) == [False, True]
    assert all((asked.loc[p, "hours_per_week"] > 45) == long for long, p in zip(grouped.long, grouped.pick))
    # the same rows again (the same release: a second one of other rows would cut the first one's boxes)
    one = db.sql("SELECT getcandidate(*, 'Sales') AS pick FROM spark.people c WHERE c.hours_per_week >= 40").toPandas()
    assert len(one) == 1 and one.pick[0] in set(asked.index)
    last = db.sql("SELECT i.content FROM crowddb_hit_items i JOIN crowddb_hits h USING (hit_id) "
                  "WHERE h.run_id = (SELECT max(run_id) FROM crowddb_hits) ORDER BY h.hit_id, i.item_no").fetchall()
    sizes = [len(json.loads(c)) for (c,) in last]
    # knock-out rounds: every row once in round 1, at most a HIT's 100 rows an item; then one item of the winners
    assert sum(sizes[:-1]) == len(asked) and max(sizes[:-1]) <= 100 and sizes[-1] == len(sizes) - 1 >= 2
