"""The k-anonymity ledger of a Spark table (crowddb/spark/ledger.py): releases recorded in the crowddb database file,
each row's history a Parquet version beside it; a release whose joint classes with the earlier ones fall below k is
refused with nothing written (decided the same way by an independent check in pandas over the released rows), and a
release that died between its write-ahead record and its completion is finished or rolled back."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.csv as pcsv
import pytest
from spark_session import spark  # noqa: F401

import crowddb
import crowddb.spark as cs
from crowddb.datasets import adult_path
from crowddb.errors import ArgumentError, CrowdDBError, PrivacyError, UnknownColumnError
from crowddb.store import spark_tables

N = 3_000


def _ids():
    ids = sorted(pcsv.read_csv(adult_path()).slice(0, N).column("id").to_pylist())
    return ids[N // 3], ids[2 * N // 3]  # two releases over the first two thirds and the last two: a third in both


MIDDLE_LOW, MIDDLE_HIGH = _ids()


@pytest.fixture(scope="module")
def people(spark):  # noqa: F811
    """The first N rows of Adult (its key: id), as a cached Spark DataFrame."""
    df = spark.createDataFrame(pcsv.read_csv(adult_path()).slice(0, N)).cache()
    df.count()
    yield df
    df.unpersist()


@pytest.fixture
def db(tmp_path):
    with crowddb.connect(str(tmp_path / "jobs.duckdb"), progress=False) as con:
        yield con


def declare(db, df, qis, name="adult"):
    return cs.declare_roles(db, name, df, quasi_identifiers=qis, key="id")


def boxes(released, qis) -> pd.Series:
    """id -> the box a release showed the row in (its quasi-identifiers' labels), read from the release itself."""
    frame = released.select("id", *qis).toPandas()
    return pd.Series(frame[qis].astype(str).agg("|".join, axis=1).to_numpy(), index=frame["id"].to_numpy())


def joint_classes_below_k(shown: list[tuple[pd.Series, int]]) -> int:
    """Independent of the ledger: rows with the same sequence of boxes over the releases (None where a release did
    not show the row) form a joint class; the number of rows whose class is smaller than the least k promised to
    them."""
    ids = sorted(set().union(*(set(s.index) for s, _ in shown)))
    key = pd.Series([tuple(s.get(i) for s, _ in shown) for i in ids], index=ids)
    promised = pd.Series([min(k for s, k in shown if i in s.index) for i in ids], index=ids)
    size = key.map(key.value_counts())
    return int((size < promised).sum())


def history_dir(db) -> Path:
    return Path(f"{db.database}.spark/adult")


def test_a_release_is_recorded_and_its_history_written(spark, people, db):  # noqa: F811
    qis = ["age", "education", "sex"]
    declare(db, people, qis)
    released = cs.anonymize(db, people, 10, name="adult", keep_key=True)
    shown = boxes(released, qis)
    assert len(shown) == N and shown.value_counts().min() >= 10
    got = cs.releases(db, "adult")
    assert got[["release_no", "k", "status"]].values.tolist() == [[1, 10, "completed"]]
    history = spark.read.parquet(str(history_dir(db) / "v1")).toPandas()
    assert len(history) == N and history.groupby(["h1", "h2"]).size().min() >= 10
    # the rows' histories group them exactly as the release's boxes do
    assert history.groupby(["h1", "h2"]).size().sort_values().tolist() == shown.value_counts().sort_values().tolist()
    assert "id" not in cs.anonymize(db, people, 10, name="adult").columns  # the key is dropped unless kept


def test_releases_over_overlapping_rows_are_refused_exactly_when_a_joint_class_falls_below_k(spark, people, db):  # noqa: F811
    first_rows, second_rows = people.where(f"id < {MIDDLE_HIGH}"), people.where(f"id >= {MIDDLE_LOW}")
    declare(db, people, ["age", "education"])
    r1 = boxes(cs.anonymize(db, first_rows, 10, name="adult", keep_key=True), ["age", "education"])
    # the second release over other quasi-identifiers, computed as the ledger computes it (Mondrian is deterministic)
    qis2 = ["sex", "race", "marital_status"]
    r2 = boxes(cs.anonymize(second_rows, qis2, 10), qis2)
    below = joint_classes_below_k([(r1, 10), (r2, 10)])
    assert below > 0  # these two partitions cut each other's classes
    declare(db, people, qis2)
    with pytest.raises(PrivacyError, match="nothing was released or recorded"):
        cs.anonymize(db, second_rows, 10, name="adult")
    assert cs.releases(db, "adult")["release_no"].tolist() == [1]
    assert sorted(p.name for p in history_dir(db).iterdir()) == ["v1"]
    # the same quasi-identifiers again over the overlapping rows: the independent check and the ledger agree
    declare(db, people, ["age", "education"])
    again = boxes(cs.anonymize(second_rows, ["age", "education"], 10), ["age", "education"])
    expect_refused = joint_classes_below_k([(r1, 10), (again, 10)]) > 0
    if expect_refused:
        with pytest.raises(PrivacyError):
            cs.anonymize(db, second_rows, 10, name="adult")
        assert cs.releases(db, "adult")["release_no"].tolist() == [1]
    else:
        cs.anonymize(db, second_rows, 10, name="adult")
        assert cs.releases(db, "adult")["status"].tolist() == ["completed", "completed"]


def test_the_same_release_again_is_accepted_and_the_history_moves_to_its_version(spark, people, db):  # noqa: F811
    declare(db, people, ["age", "sex"])
    first = boxes(cs.anonymize(db, people, 25, name="adult", keep_key=True), ["age", "sex"])
    second = boxes(cs.anonymize(db, people, 25, name="adult", keep_key=True), ["age", "sex"])
    assert first.sort_index().equals(second.sort_index())
    assert joint_classes_below_k([(first, 25), (second, 25)]) == 0
    assert cs.releases(db, "adult")["status"].tolist() == ["completed", "completed"]
    assert sorted(p.name for p in history_dir(db).iterdir()) == ["v2"]  # the older version went


def test_the_ledger_outlives_the_session(spark, people, tmp_path):  # noqa: F811
    path = str(tmp_path / "jobs.duckdb")
    with crowddb.connect(path, progress=False) as db:
        declare(db, people, ["age", "education"])
        cs.anonymize(db, people.where(f"id < {MIDDLE_HIGH}"), 10, name="adult")
    with crowddb.connect(path, progress=False) as db:
        assert cs.roles(db, "adult")["key"] == "id"
        cs.declare_roles(db, "adult", people, quasi_identifiers=["sex", "race", "marital_status"], key="id")
        with pytest.raises(PrivacyError, match="below the k=10"):
            cs.anonymize(db, people.where(f"id >= {MIDDLE_LOW}"), 10, name="adult")


def test_a_release_that_died_before_completing_is_finished_or_rolled_back(spark, people, db, monkeypatch):  # noqa: F811
    declare(db, people, ["age", "sex"])
    cs.anonymize(db, people, 10, name="adult")
    real = spark_tables.complete

    def dies(con, name, number):
        raise KeyboardInterrupt("the process died after writing the history")

    monkeypatch.setattr(spark_tables, "complete", dies)
    with pytest.raises(KeyboardInterrupt):
        cs.anonymize(db, people, 10, name="adult")
    assert cs.releases(db, "adult")["status"].tolist() == ["completed", "pending"]
    monkeypatch.setattr(spark_tables, "complete", real)
    # a pending release whose version never got written (the process died before): rolled back
    db.con.execute("INSERT INTO crowddb_spark_releases (name, release_no, k, quasi_identifiers, status) "
                   "VALUES ('adult', 3, 10, '[]', 'pending')")
    (history_dir(db) / "v3").mkdir()  # a partial version: no _SUCCESS marker
    assert cs.recover(db, "adult", spark) == [(2, "completed"), (3, "rolled back")]
    assert cs.releases(db, "adult")["status"].tolist() == ["completed", "completed"]
    assert not (history_dir(db) / "v3").exists()
    assert db.con.execute("SELECT current FROM crowddb_spark_tables").fetchall() == [(2,)]
    # another process put release 2 on record while this one was being checked: refused, nothing written
    monkeypatch.setattr(spark_tables, "next_number", lambda con, name: 2)
    with pytest.raises(CrowdDBError, match="another process"):
        cs.anonymize(db, people, 10, name="adult")
    assert cs.releases(db, "adult")["status"].tolist() == ["completed", "completed"]
    assert not (history_dir(db) / "v3").exists()


def test_bad_requests_are_refused_before_anything_is_written(spark, people, db, tmp_path):  # noqa: F811
    with pytest.raises(ArgumentError, match="declare_roles"):
        cs.anonymize(db, people, 10, name="adult")
    with pytest.raises(ArgumentError, match="declare_roles"):
        cs.recover(db, "adult", spark)
    with pytest.raises(UnknownColumnError, match="no column"):
        cs.declare_roles(db, "adult", people, quasi_identifiers=["agee"], key="id")
    with pytest.raises(ArgumentError, match="key must name"):
        cs.declare_roles(db, "adult", people, quasi_identifiers=["age"], key=None)
    with pytest.raises(PrivacyError, match="two roles"):
        cs.declare_roles(db, "adult", people, quasi_identifiers=["age", "id"], key="id")
    with crowddb.connect(progress=False) as memory, pytest.raises(ArgumentError, match="in-memory"):
        cs.declare_roles(memory, "adult", people, quasi_identifiers=["age"], key="id")
    cs.declare_roles(db, "twice", people.unionByName(people.limit(5)), quasi_identifiers=["age"], key="id")
    with pytest.raises(ArgumentError, match="must tell every row apart"):
        cs.anonymize(db, people.unionByName(people.limit(5)), 10, name="twice")
    texts = people.withColumn("id", people["id"].cast("string"))
    cs.declare_roles(db, "texts", texts, quasi_identifiers=["age"], key="id")
    with pytest.raises(ArgumentError, match=r"spark:texts: relaxed Mondrian \(strict=False\) takes rows in the key's "
                                            r"order, and the key 'id' is not a column of integers; pass order_by="):
        cs.anonymize(db, texts, 10, name="texts", strict=False)
    declare(db, people, ["age"])
    cs.anonymize(db, people, 10, name="adult")
    with pytest.raises(PrivacyError, match="Keep the key"):
        cs.declare_roles(db, "adult", people.withColumnRenamed("id", "ident"), quasi_identifiers=["age"],
                         key="ident")
    assert cs.releases(db, "twice").empty and cs.releases(db, "texts").empty and len(cs.releases(db, "adult")) == 1
