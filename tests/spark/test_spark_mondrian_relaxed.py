"""Relaxed Mondrian on Spark (crowddb.spark.anonymize(..., strict=False)) against the local relaxed Mondrian
(crowddb.anonymize.anonymize(..., strict=False)) on the frame sorted by ``order_by``.

Relaxed cuts part rows with equal quasi-identifiers by their order, so the Spark release must have the local
release's classes as sets of row ids (never compared by labels or class numbers), and the local labels row by row;
every class's size is counted again by a Spark groupBy. The hand-made frame is built so that relaxed cuts really
part equal rows (checked on the local result itself, so the test would fail under strict cuts) and is given to Spark
in another row order than its ids', so only ``order_by`` can make the classes equal."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pcsv
import pytest
from spark_session import spark  # noqa: F401  (the session fixture)
from spark_adult import adult, frame, partition  # noqa: F401  (fixtures)

import crowddb
from crowddb.anonymize import anonymize as local_anonymize
from crowddb.datasets import ADULT_QUASI_IDENTIFIERS, adult_path
from crowddb.errors import ArgumentError

QIS = list(ADULT_QUASI_IDENTIFIERS)
HALF = 16_000  # Adult's 30,162 rows are more than this: Spark makes the root's relaxed cut, executors the rest


def _parted_equal_rows(frame: pd.DataFrame, qis: list[str], groups) -> int:
    """Rows whose QI combination is spread over two classes or more (never under strict cuts)."""
    spread = frame[qis].astype(str).assign(g=np.asarray(groups)).groupby(qis)["g"].transform("nunique")
    return int((spread > 1).sum())


def _same_labels(out: pd.DataFrame, frame: pd.DataFrame, release, qis: list[str]) -> bool:
    mine = out.set_index("id").loc[frame["id"], qis].astype(str).to_numpy()
    return bool((mine == release.table[qis].astype(str).to_numpy()).all())


@pytest.mark.parametrize("k", [2, 10, 50])
def test_adult_relaxed_classes_equal_local(spark, adult, frame, k):  # noqa: F811
    import crowddb.spark as cs

    out = cs.anonymize(adult, QIS, k, strict=False, order_by="id", max_partition_rows=HALF).toArrow().to_pandas()
    release = local_anonymize(frame, QIS, k, strict=False)
    assert len(out) == len(frame)
    assert partition(out["id"], out["class"]) == partition(frame["id"], release.groups)
    assert _same_labels(out, frame, release, QIS)
    assert len(np.unique(out["class"].to_numpy() >> 32)) >= 2  # Spark cut the root: the rows reached two leaves
    # relaxed made other classes than strict on the same rows, and parted equal rows
    assert partition(frame["id"], local_anonymize(frame, QIS, k).groups) != partition(frame["id"], release.groups)
    assert _parted_equal_rows(frame, QIS, release.groups) > 0
    # k-anonymity counted again on the release, by class and by what a reader of it can tell apart
    assert out.groupby("class").size().min() >= k and out.groupby(QIS).size().min() >= k


def _hand_made(n: int, seed: int = 4) -> pd.DataFrame:
    """Few distinct values, so medians fall on long runs of equal rows; ids a permutation (the order)."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"id": rng.permutation(n) * 3 + 7,  # unique, not 0..n-1 and not in the rows' order
                         "x": rng.choice([1, 2, 3, 5], n, p=[0.2, 0.45, 0.25, 0.1]),
                         "y": rng.choice([10, 20, 30], n, p=[0.5, 0.3, 0.2]),
                         "c": rng.choice(["u", "v", "w"], n),
                         "s": rng.choice(["p", "q", "r", "t"], n)})


def test_hand_made_relaxed_cuts_made_by_spark_part_equal_rows(spark):  # noqa: F811
    """max_partition_rows=15: the upper relaxed cuts of 60 rows (two levels), with their l checks (distinct
    l-diversity), are made by Spark's aggregations, the rest by executors; the cuts part equal rows, and the Spark
    rows come in another order than their ids, which order_by='id' restores."""
    import crowddb.spark as cs

    frame = _hand_made(60)
    qis, k, options = ["x", "y", "c"], 3, {"sensitive": "s", "l": 2}
    df = spark.createDataFrame(pa.Table.from_pandas(frame, preserve_index=False)).repartition(2)
    out = cs.anonymize(df, qis, k, strict=False, order_by="id", max_partition_rows=15, **options).toArrow().to_pandas()
    ordered = frame.sort_values("id").reset_index(drop=True)
    release = local_anonymize(ordered, qis, k, strict=False, **options)
    assert _parted_equal_rows(ordered, qis, release.groups) > 0  # strict cuts never would
    for other in ({"strict": True, **options}, {"strict": False}):  # strict cuts, and relaxed without l, differ
        assert partition(ordered["id"], local_anonymize(ordered, qis, k, **other).groups) != partition(
            ordered["id"], release.groups)
    assert partition(out["id"], out["class"]) == partition(ordered["id"], release.groups)
    assert _same_labels(out, ordered, release, qis)
    assert len(np.unique(out["class"].to_numpy() >> 32)) == 4  # Spark cut twice: four leaves of 15 rows
    assert out.groupby("class").size().min() >= k and out.groupby("class")["s"].nunique().min() >= options["l"]


def test_relaxed_needs_a_unique_integer_order(spark):  # noqa: F811
    """Relaxed cuts take rows in order: without order_by, or by one that is not unique integers, the request is
    refused with the fix named."""
    import crowddb.spark as cs

    df = spark.createDataFrame(pd.DataFrame({"id": [1, 2, 3, 3], "x": [5, 6, 7, 8], "t": ["a", "b", "c", "d"]}))
    with pytest.raises(ArgumentError, match="needs order_by="):
        cs.anonymize(df, ["x"], 2, strict=False)
    with pytest.raises(ArgumentError, match="must be a column of integers"):
        cs.anonymize(df, ["x"], 2, strict=False, order_by="t")
    with pytest.raises(ArgumentError, match="different integer in every row"):
        cs.anonymize(df, ["x"], 2, strict=False, order_by="id")


def test_sql_anonymize_relaxed_equals_local_sql(spark, tmp_path):  # noqa: F811
    """ANONYMIZE(spark.t, strict := false) through crowddb SQL on Spark (the ledger's release, rows taken in the
    key's order) has the classes and labels of the local ANONYMIZE(t, strict := false) over a DuckDB table holding the
    same rows in key order (there a class is what a reader tells apart: equal labels)."""
    columns = ["id", "age", "sex", "education_num", "occupation"]
    qis = ["age", "sex", "education_num"]
    people = pcsv.read_csv(adult_path()).slice(0, 400).select(columns)
    census = spark.createDataFrame(people).repartition(3)  # the Spark rows in another order: the key orders them
    census.createOrReplaceTempView("relaxed_census")
    local = people.to_pandas().sort_values("id").reset_index(drop=True)
    try:
        with crowddb.connect(str(tmp_path / "relaxed.duckdb"), spark=spark, progress=False) as db:
            db.declare_roles("spark:relaxed_census", quasi_identifiers=qis, sensitive=["occupation"], key="id")
            got = db.sql("SELECT * FROM ANONYMIZE(spark.relaxed_census, k := 10, strict := false, keep_key := true)"
                         ).toPandas()
            db.con.register("people", local)
            db.sql("CREATE TABLE census AS SELECT * FROM people ORDER BY id")
            db.declare_roles("census", quasi_identifiers=qis, sensitive=["occupation"], key="id")
            theirs = db.sql("SELECT * FROM ANONYMIZE(census, k := 10, strict := false, keep_key := true)").df()
    finally:
        spark.catalog.dropTempView("relaxed_census")
    assert sorted(got["id"]) == sorted(theirs["id"]) == sorted(local["id"])
    readers = theirs[qis].astype(str).agg("|".join, axis=1)  # the local SQL release's classes: equal labels
    assert partition(got["id"], got["class"]) == partition(theirs["id"], pd.factorize(readers)[0])
    assert (got.set_index("id").loc[theirs["id"], qis].astype(str).to_numpy()
            == theirs[qis].astype(str).to_numpy()).all()
    assert got.groupby("class").size().min() >= 10
    assert _parted_equal_rows(local, qis, local_anonymize(local, qis, 10, strict=False).groups) > 0
