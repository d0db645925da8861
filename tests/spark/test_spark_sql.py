"""crowddb SQL on Spark (crowddb/spark/sql.py): ``db.sql`` runs a statement naming ``spark.<name>`` on the connected
Spark session. ANONYMIZE through SQL is the ledger's recorded release (the classes of crowddb.spark.anonymize on the
same DataFrame), TRUTH_DISCOVER through SQL is crowddb.spark.truth_discover's result, plain SELECTs are transpiled
(checked against pandas on the same rows), and the guard refuses every read of a protected column of a declared
Spark table outside ANONYMIZE before anything runs or is recorded."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pcsv
import pytest
from pyspark.sql import functions as F
from spark_session import spark  # noqa: F401

import crowddb
import crowddb.spark as cs
from crowddb.anonymize import anonymize
from crowddb.datasets import adult_path
from crowddb.errors import ArgumentError, CrowdDBError, PrivacyError, StatementRefusedError

N = 300
QIS = ["age", "sex", "education_num"]
COLUMNS = ["id", *QIS, "occupation", "workclass", "hours_per_week"]


@pytest.fixture(scope="module")
def frames(spark):  # noqa: F811
    """The first N rows of Adult as the temp view ``census`` (roles declared by ``db``), an undeclared view ``jobs``
    (one row per workclass) and a view ``answers`` of crowd labels; their pandas twins."""
    people = pcsv.read_csv(adult_path()).slice(0, N).select(COLUMNS)
    census = spark.createDataFrame(people).cache()
    census.createOrReplaceTempView("census")
    local = people.to_pandas()
    jobs = pd.DataFrame({"workclass": sorted(local.workclass.unique())})
    jobs["code"] = np.arange(len(jobs)) * 10
    spark.createDataFrame(jobs).createOrReplaceTempView("jobs")
    rng = np.random.default_rng(27)  # 40 tasks x 5 workers, each worker right with its own probability
    truth = rng.integers(0, 3, 40)
    task, worker = np.repeat(np.arange(40), 5), np.tile(np.arange(5), 40)
    right = rng.random(200) < np.array([0.9, 0.8, 0.7, 0.6, 0.5])[worker]
    label = np.where(right, truth[task], rng.integers(0, 3, 200))
    answers = pd.DataFrame({"task": task.astype(np.int64), "worker": [f"w{w}" for w in worker],
                            "label": [f"c{v}" for v in label]})
    answers_df = spark.createDataFrame(pa.Table.from_pandas(answers, preserve_index=False)).cache()
    answers_df.createOrReplaceTempView("answers")
    yield {"census": census, "local": local, "jobs": jobs, "answers": answers_df}
    for name in ("census", "jobs", "answers"):
        spark.catalog.dropTempView(name)
    census.unpersist()
    answers_df.unpersist()


@pytest.fixture
def db(spark, frames, tmp_path):  # noqa: F811
    with crowddb.connect(str(tmp_path / "jobs.duckdb"), spark=spark, progress=False) as con:
        con.declare_roles("spark:census", quasi_identifiers=QIS, sensitive=["occupation"], key="id")
        yield con


def classes(frame: pd.DataFrame) -> set[frozenset[int]]:
    """The partition of the ids into a release's classes."""
    return {frozenset(ids) for ids in frame.groupby("class")["id"].apply(list)}


def joint_classes_below_k(first: pd.DataFrame, second: pd.DataFrame, k: int) -> int:
    """Independent of the ledger: rows sharing a class in both releases form a joint class; the rows in one below k."""
    both = first[["id", "class"]].merge(second[["id", "class"]], on="id")
    size = both.groupby(["class_x", "class_y"])["id"].transform("size")
    return int((size < k).sum())


def test_anonymize_through_sql_is_the_recorded_release_of_the_spark_mondrian(spark, frames, db):  # noqa: F811
    # a GROUP BY over the release, by class: each class's rows (by the key, kept) and labels
    got = db.sql("SELECT a.class, array_sort(list(a.id)) AS ids, count(*) AS n, min(a.age) AS age, min(a.sex) AS sex, "
                 "max(a.education_num) AS education_num FROM ANONYMIZE(spark.census, k := 10, keep_key := true) AS a "
                 "GROUP BY a.class").toPandas()
    direct = cs.anonymize(frames["census"], QIS, 10).toPandas()
    assert {frozenset(ids) for ids in got.ids} == classes(direct) and got.n.min() >= 10
    # each class shows the labels the direct release shows its rows (one label per QI and class)
    expect = direct.groupby("class").agg(first=("id", "min"), **{q: (q, "first") for q in QIS})
    assert direct.groupby("class")[QIS].nunique().max().max() == 1
    got = got.assign(first=[min(ids) for ids in got.ids])
    assert (got.set_index("first")[QIS].sort_index().equals(expect.set_index("first")[QIS].sort_index()))
    assert cs.releases(db, "census")[["release_no", "k", "status"]].values.tolist() == [[1, 10, "completed"]]
    # a release over other quasi-identifiers that cuts these classes (by an independent count over the local
    # Mondrian's classes, which the Spark Mondrian's equal): refused through SQL as the Python call refuses it
    other = ["workclass", "hours_per_week"]
    second = anonymize(frames["local"], other, 10)
    assert joint_classes_below_k(direct, frames["local"].assign(**{"class": second.groups}), 10) > 0
    db.declare_roles("spark:census", quasi_identifiers=other, sensitive=["occupation"], key="id")
    with pytest.raises(PrivacyError, match="nothing was released or recorded"):
        db.sql("SELECT count(*) AS n FROM ANONYMIZE(spark.census, k := 10)")
    assert len(cs.releases(db, "census")) == 1


def test_a_statement_spark_rejects_records_no_release(spark, frames, db):  # noqa: F811
    # jaro_similarity is DuckDB's (the guard lets it through) but not Spark's: Spark's refusal comes first
    with pytest.raises(CrowdDBError, match="Spark rejected"):
        db.sql("SELECT jaro_similarity(a.workclass, 'Private') AS s FROM ANONYMIZE(spark.census, k := 10) AS a")
    assert cs.releases(db, "census").empty
    with pytest.raises(ArgumentError, match="one ANONYMIZE per statement"):
        db.sql("SELECT * FROM ANONYMIZE(spark.census, k := 10) a, ANONYMIZE(spark.census, k := 20) b")
    with pytest.raises(ArgumentError, match="seed := ... is not available on Spark"):
        db.sql("SELECT * FROM ANONYMIZE(spark.census, k := 10, seed := 3)")
    with pytest.raises(ArgumentError, match="roles are not declared"):
        db.sql("SELECT * FROM ANONYMIZE(spark.jobs, k := 2)")
    assert cs.releases(db, "census").empty
    frames["census"].withColumn("id", F.col("id").cast("string")).createOrReplaceTempView("census_texts")
    try:
        db.declare_roles("spark:census_texts", quasi_identifiers=QIS, sensitive=["occupation"], key="id")
        with pytest.raises(ArgumentError, match=r"ANONYMIZE\(spark.census_texts, strict := false\) takes rows in the "
                                                r"key's order, and the key 'id' is not a column of integers; declare"):
            db.sql("SELECT * FROM ANONYMIZE(spark.census_texts, k := 10, strict := false)")
        assert cs.releases(db, "census_texts").empty
    finally:
        spark.catalog.dropTempView("census_texts")


def test_anonymize_through_sql_takes_l_diversity_and_hierarchies(spark, frames, db, tmp_path):  # noqa: F811
    """ANONYMIZE(spark.t, sensitive := ..., l := ..., hierarchies := ...) is the ledger's release with the classes of
    the local Mondrian asked the same (an independent count: every class holds at least l distinct sensitive
    values), and the ledger composes its k with the release before it as it composes any other."""
    got = db.sql("SELECT * FROM ANONYMIZE(spark.census, k := 10, sensitive := 'occupation', l := 4, "
                 "keep_key := true)").toPandas()
    local = anonymize(frames["local"], QIS, 10, sensitive="occupation", l=4)
    assert classes(got) == classes(frames["local"].assign(**{"class": local.groups}))
    assert got.groupby("class")["occupation"].nunique().min() >= 4 and got.groupby("class").size().min() >= 10
    assert len(classes(got)) < len(classes(cs.anonymize(frames["census"], QIS, 10).toPandas()))  # l cost classes
    # a hierarchy for a non-numeric QI: sex's two values under one root ('*'), an ARX CSV given by its path
    path = tmp_path / "sex.csv"
    path.write_text("Male;*\nFemale;*\n")
    again = db.sql(f"SELECT * FROM ANONYMIZE(spark.census, k := 10, hierarchies := {{'sex': '{path}'}}, "
                   "keep_key := true)").toPandas()
    direct = anonymize(frames["local"], QIS, 10, hierarchies={"sex": str(path)})
    assert classes(again) == classes(frames["local"].assign(**{"class": direct.groups}))
    mine = again.set_index("id").loc[frames["local"]["id"], "sex"].astype(str).to_numpy()
    assert (mine == direct.table["sex"].astype(str).to_numpy()).all()
    assert joint_classes_below_k(got, again, 10) == 0  # accepted: no joint class below k (counted independently)
    assert cs.releases(db, "census")[["release_no", "k", "status"]].values.tolist() == [
        [1, 10, "completed"], [2, 10, "completed"]]
    with pytest.raises(ArgumentError, match="hierarchies := .* takes ARX CSV paths"):
        db.sql("SELECT * FROM ANONYMIZE(spark.census, k := 10, hierarchies := {'sex': 3})")
    assert len(cs.releases(db, "census")) == 2


def test_truth_discover_through_sql_is_the_spark_truth_discovery(spark, frames, db):  # noqa: F811
    res = cs.truth_discover(frames["answers"], object="task", source="worker", value="label", method="mv")
    for output, rows in (("objects", 40), ("sources", 5)):
        got = db.sql(f"SELECT * FROM TRUTH_DISCOVER(spark.answers, object := 'task', source := 'worker', "
                     f"value := 'label', method := 'mv', output := '{output}') AS t").toPandas()
        expect = getattr(res, output).toPandas()
        by = expect.columns[0]
        got, expect = got.sort_values(by).reset_index(drop=True), expect.sort_values(by).reset_index(drop=True)
        assert list(got.columns) == list(expect.columns) and len(got) == rows
        pd.testing.assert_frame_equal(got, expect, check_exact=False, rtol=1e-12)
    # local DP on Spark needs a seed (its noise is a seeded hash stream); the rest: tests/spark/test_spark_ldp.py
    with pytest.raises(ArgumentError, match="perturb := ... on Spark needs seed :="):
        db.sql("SELECT * FROM TRUTH_DISCOVER(spark.answers, object := 'task', source := 'worker', value := 'label', "
               "perturb := 'rr', epsilon := 1.0)")


@pytest.mark.parametrize(("query", "column"), [
    ("SELECT age FROM spark.census", "age"),
    ("SELECT workclass FROM spark.census WHERE occupation = 'Sales'", "occupation"),
    ("SELECT j.code FROM spark.jobs j JOIN spark.census c ON c.workclass = j.workclass AND c.sex = 'Male'", "sex"),
    ("SELECT a.workclass FROM spark.census a JOIN spark.census b USING (id)", "id"),
    ("SELECT workclass FROM spark.census ORDER BY education_num LIMIT 5", "education_num"),
    ("SELECT workclass, count(*) AS n FROM spark.census GROUP BY workclass HAVING max(age) > 60", "age"),
    ("WITH x AS (SELECT occupation AS o FROM spark.census) SELECT count(*) AS n FROM x", "occupation"),
    ("SELECT workclass FROM spark.census WHERE hours_per_week > (SELECT avg(age) FROM spark.census)", "age"),
    ("SELECT workclass FROM (SELECT workclass, occupation FROM spark.census) s WHERE s.occupation <> 'x'",
     "occupation"),
    ("SELECT workclass FROM spark.census c WHERE EXISTS (SELECT 1 FROM spark.jobs j WHERE j.code = c.id)", "id"),
    ("SELECT * FROM spark.census", "id"),
    ("SELECT * EXCLUDE (id) FROM spark.census", "age"),
    ("SELECT workclass, row_number() OVER (PARTITION BY sex) AS r FROM spark.census", "sex"),
])
def test_the_guard_refuses_a_protected_column_read_anywhere(spark, db, query, column):  # noqa: F811
    with pytest.raises(PrivacyError, match=rf"spark\.census\.{column} is protected"):
        db.sql(query)


@pytest.mark.parametrize(("query", "says"), [
    ("SELECT census FROM spark.census", "reads every column of spark.census"),
    ("SELECT COLUMNS('.*') FROM spark.census", "cannot tell which columns"),
    ("SELECT my_macro(workclass) FROM spark.census", "cannot tell what this call reads"),
    ("SELECT getvariable('x') AS v, workclass FROM spark.census", "cannot tell what this call reads"),
    ("SELECT nope FROM spark.census", "cannot tell which columns"),
    ("SELECT p.male FROM spark.census PIVOT (count(*) FOR sex IN ('Male')) AS p", "PIVOT"),
    ("SELECT c.workclass AS age FROM spark.census c ORDER BY age", "names an output column and the protected"),
])
def test_what_the_guard_cannot_resolve_is_refused(spark, db, query, says):  # noqa: F811
    with pytest.raises(PrivacyError, match=says):
        db.sql(query)


def test_a_spark_user_function_is_refused_even_under_a_built_in_name(spark, frames, tmp_path):  # noqa: F811
    # a session of its own (its temp views and functions are its own; a built-in's name cannot be dropped again)
    other = spark.newSession()
    frames["census"].createOrReplaceTempView("census")  # (the fixture's session)
    other.createDataFrame(frames["jobs"]).createOrReplaceTempView("jobs")
    other.udf.register("lower", lambda v: v, "string")  # a UDF shadows Spark's built-in lower
    with crowddb.connect(str(tmp_path / "u.duckdb"), spark=other, progress=False) as db:
        assert db.sql("SELECT upper(workclass) AS w FROM spark.jobs").columns == ["w"]  # Spark's own upper runs
        with pytest.raises(PrivacyError, match="the Spark session defines a function"):
            db.sql("SELECT lower(workclass) AS w FROM spark.jobs")


def test_unprotected_columns_and_undeclared_tables_are_read_on_spark(spark, frames, db):  # noqa: F811
    local, jobs = frames["local"], frames["jobs"]
    got = db.sql("SELECT workclass, avg(hours_per_week) AS h, count(*) AS n FROM spark.census GROUP BY workclass "
                 "ORDER BY workclass")
    assert got.columns == ["workclass", "h", "n"]
    expect = local.groupby("workclass").agg(h=("hours_per_week", "mean"), n=("id", "size")).reset_index()
    pd.testing.assert_frame_equal(got.toPandas(), expect, check_dtype=False, rtol=1e-12)
    # an undeclared table is read whole, next to a declared one (and a CTE over it)
    joined = db.sql("WITH w AS (SELECT DISTINCT workclass FROM spark.census) "
                    "SELECT j.* FROM spark.jobs j JOIN w ON w.workclass = j.workclass ORDER BY j.code").toPandas()
    pd.testing.assert_frame_equal(joined, jobs[jobs.workclass.isin(local.workclass)].reset_index(drop=True),
                                  check_dtype=False)
    assert db.sql("SELECT count(*) AS n FROM spark.census WHERE hours_per_week >= ?", [40]).collect()[0].n == int(
        (local.hours_per_week >= 40).sum())


def test_only_selects_over_spark_tables_run_on_spark(spark, db):  # noqa: F811
    db.sql("CREATE TABLE local_t AS SELECT 1 AS workclass")
    for statement in ("CREATE TABLE copied AS SELECT workclass FROM spark.census",
                      "INSERT INTO local_t SELECT workclass FROM spark.census"):
        with pytest.raises(StatementRefusedError, match="only SELECT statements"):
            db.sql(statement)
    assert db.sql("SELECT count(*) FROM local_t").fetchall() == [(1,)]
    assert db.sql("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'copied'").fetchall() == [(0,)]
    with pytest.raises(ArgumentError, match="reads only Spark tables"):
        db.sql("SELECT l.workclass FROM spark.jobs j JOIN local_t l ON l.workclass = j.code")
    with pytest.raises(ArgumentError, match="reads only Spark tables"):
        db.sql("SELECT j.code FROM spark.jobs j JOIN jobs ON jobs.code = j.code")  # Spark's jobs, unchecked
    with pytest.raises(ArgumentError, match="PRIVATE_SYNTH: missing argument object"):
        db.sql("SELECT * FROM PRIVATE_SYNTH(spark.census, epsilon := 1.0)")
    with pytest.raises(ArgumentError, match="human operators"):
        db.sql("SELECT workclass, getposition(*) AS job FROM spark.jobs")
    with pytest.raises(ArgumentError, match="one statement at a time"):
        db.sql("SELECT 1; SELECT code FROM spark.jobs")
    with pytest.raises(ArgumentError, match="runs with db.sql"):
        db.execute("SELECT code FROM spark.jobs")


def test_a_query_naming_no_spark_table_runs_in_duckdb(spark, db):  # noqa: F811
    assert isinstance(db.sql("SELECT 42 AS x"), duckdb.DuckDBPyRelation)
    # a subquery aliased spark is DuckDB's: only a table spark.<name> is a Spark table
    assert db.sql("SELECT spark.x FROM (SELECT 7 AS x) AS spark").fetchall() == [(7,)]
    assert db.sql("SELECT 'spark.census' AS s").fetchall() == [("spark.census",)]


def test_declaring_the_roles_of_a_spark_table(spark, frames, db, tmp_path):  # noqa: F811
    assert db.roles("spark:census") == {"quasi_identifiers": QIS, "sensitive": ["occupation"], "key": "id",
                                        "kinds": {}, "ground_truth": None, "core": []}
    assert cs.roles(db, "census")["key"] == "id"  # the Spark ledger's own record
    with pytest.raises(ArgumentError, match="no such table or temp view"):
        db.declare_roles("spark:nowhere", quasi_identifiers=["age"], key="id")
    # what a human operator over the table needs (crowddb/spark/crowd.py): the ground truth and the columns a HIT shows
    db.declare_roles("spark:census", quasi_identifiers=QIS, sensitive=["occupation"], key="id",
                     ground_truth="occupation", core=["workclass", *QIS])
    assert db.roles("spark:census")["core"] == ["workclass", *QIS]
    assert db.roles("spark:census")["ground_truth"] == "occupation"
    with crowddb.connect(str(tmp_path / "other.duckdb"), progress=False) as plain:
        with pytest.raises(ArgumentError, match="needs a Spark session"):
            plain.declare_roles("spark:census", quasi_identifiers=["age"], key="id")
        with pytest.raises(duckdb.CatalogException):  # without a Spark session, spark.<name> is DuckDB's name
            plain.sql("SELECT * FROM spark.census")
    with pytest.raises(ArgumentError, match="SparkSession"):
        crowddb.connect(spark="local[2]")


def test_an_undeclared_copy_of_a_declared_table_is_refused(spark, frames, db):  # noqa: F811
    """A view over the declared table, a DataFrame derived from it and registered, and its rows registered again all
    read what spark.census reads: without roles of their own they are refused (they would carry its protected
    columns past the guard); an unrelated undeclared table is read."""
    spark.sql("CREATE OR REPLACE TEMP VIEW census_view AS SELECT id, age, workclass FROM census WHERE age > 30")
    frames["census"].select("age", "occupation").createOrReplaceTempView("census_derived")
    spark.table("census").createOrReplaceTempView("census_again")
    try:
        for name in ("census_view", "census_derived", "census_again"):
            with pytest.raises(PrivacyError, match=f"spark.{name} reads the rows of spark.census"):
                db.sql(f"SELECT age FROM spark.{name}")
        got = db.sql("SELECT workclass, code FROM spark.jobs ORDER BY code").toPandas()
        assert got.values.tolist() == frames["jobs"].values.tolist()
        db.declare_roles("spark:census_view", quasi_identifiers=["age"], key="id")  # its own roles: guarded
        with pytest.raises(PrivacyError, match="age"):
            db.sql("SELECT age FROM spark.census_view")
        assert db.sql("SELECT count(*) AS n FROM spark.census_view").toPandas().n.tolist() == [
            int((frames["local"].age > 30).sum())]
    finally:
        for name in ("census_view", "census_derived", "census_again"):
            spark.catalog.dropTempView(name)
