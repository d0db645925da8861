"""Mondrian on Spark (crowddb.spark.anonymize) against the local Mondrian (crowddb.anonymize.anonymize).

The Spark release must have the local release's classes (the same sets of rows, compared by the ``id`` column, never
by class labels) and labels, with the partition threshold small enough that Spark's own median cuts make the top of
the tree; every class's size is counted again by means that share no code with either (a Spark groupBy over the
published labels, and pycanon when installed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from spark_session import spark  # noqa: F401  (the session fixture)
from spark_adult import adult, frame, partition  # noqa: F401  (fixtures)

from crowddb.anonymize import anonymize as local_anonymize
from crowddb.datasets import ADULT_QUASI_IDENTIFIERS
from crowddb.errors import ArgumentError, EmptyInputError, UnknownColumnError

QIS = list(ADULT_QUASI_IDENTIFIERS)
THRESHOLD = 2_000  # rows a partition may have before the local Mondrian finishes it: Adult's 30,162 need Spark cuts


def _smallest_class(released, columns: list[str]) -> int:
    """Independent count: the smallest group of rows with equal published values, by a Spark groupBy."""
    return int(released.groupBy(*columns).count().agg({"count": "min"}).collect()[0][0])


@pytest.mark.parametrize("k", [2, 10, 50])
def test_adult_classes_equal_local(spark, adult, frame, monkeypatch, k):
    import crowddb.spark as cs
    import crowddb.spark.mondrian as sm

    if k == 50:  # the other way to read medians: a running sum in a Spark window (for histograms too big to collect)
        monkeypatch.setattr(sm, "COLLECT_BINS", 0)
    released = cs.anonymize(adult, QIS, k, order_by="id", max_partition_rows=THRESHOLD).cache()
    out = released.toArrow().to_pandas()
    release = local_anonymize(frame, QIS, k)
    assert len(out) == len(frame)
    assert partition(out["id"], out["class"]) == partition(frame["id"], release.groups)
    # the top of the tree was cut by Spark: the rows reached the local Mondrian in many leaves
    leaves, leaf_rows = np.unique(out["class"].to_numpy() >> 32, return_counts=True)
    assert len(leaves) >= len(frame) // THRESHOLD and leaf_rows.max() <= THRESHOLD
    # the same published labels, row by row
    mine = out.set_index("id").loc[frame["id"], QIS].astype(str).to_numpy()
    theirs = release.table[QIS].astype(str).to_numpy()
    assert (mine == theirs).all()
    # k-anonymity counted independently, by class and by what a reader of the release can tell apart
    assert _smallest_class(released, ["class"]) >= k
    assert _smallest_class(released, QIS) >= k
    released.unpersist()
    try:
        from pycanon import anonymity
    except ImportError:
        return
    assert anonymity.k_anonymity(out[QIS].astype(str), QIS) >= k


def test_numbers_booleans_ordinals_without_order_column(spark):
    """Float and integer numbers, a boolean and an ordinal text column; no order column (the DataFrame's own order
    decides the boolean's first appearance, as the frame's order does locally)."""
    import crowddb.spark as cs

    rng = np.random.default_rng(7)
    n = 3_000
    frame = pd.DataFrame({"id": np.arange(n), "score": np.round(rng.normal(50, 15, n), 2),
                          "years": rng.integers(0, 40, n), "member": rng.random(n) < 0.3,
                          "grade": rng.choice(["C", "A", "B", "D"], n), "note": rng.choice(["x", None], n)})
    qis, kinds = ["score", "years", "member", "grade"], {"grade": "ordinal"}
    df = spark.createDataFrame(pa.Table.from_pandas(frame, preserve_index=False))
    out = cs.anonymize(df, qis, 5, kinds=kinds, max_partition_rows=300).toArrow().to_pandas()
    release = local_anonymize(frame, qis, 5, kinds=kinds)
    assert partition(out["id"], out["class"]) == partition(frame["id"], release.groups)
    assert len(np.unique(out["class"].to_numpy() >> 32)) >= n // 300
    assert (out.set_index("id").loc[frame["id"], qis].astype(str).to_numpy()
            == release.table[qis].astype(str).to_numpy()).all()
    assert out.set_index("id").loc[frame["id"], "note"].isna().sum() == frame["note"].isna().sum()  # untouched


def test_bad_requests_raise_the_local_errors(spark, adult):
    import crowddb.spark as cs

    with pytest.raises(UnknownColumnError):
        cs.anonymize(adult, ["age", "nope"], 10)
    with pytest.raises(ArgumentError, match="larger than the number of rows"):
        cs.anonymize(adult, ["age"], 10**6)
    with pytest.raises(ArgumentError, match="k must be at least 2"):
        cs.anonymize(adult, ["age"], 1)
    with pytest.raises(ArgumentError, match="max_partition_rows"):
        cs.anonymize(adult, ["age"], 10, max_partition_rows=0)
    with pytest.raises(EmptyInputError):
        cs.anonymize(adult.limit(0), ["age"], 10)
    nulls = spark.createDataFrame(pa.table({"age": pa.array([30, None, 40, 50]), "x": pa.array(["a", "b", "c", "d"])}))
    with pytest.raises(ArgumentError, match="NULL"):
        cs.anonymize(nulls, ["age", "x"], 2)
    text = spark.createDataFrame(pa.table({"age": pa.array(["30", "forty", "40", "50"])}))
    with pytest.raises(ArgumentError, match="non-numeric value 'forty'"):
        cs.anonymize(text, ["age"], 2, kinds={"age": "numeric"})


@pytest.mark.parametrize("dense", [True, False])
def test_resampled_adult_deep_spark_tree_equals_local(spark, frame, monkeypatch, dense):
    """200,000 rows (Adult resampled, age and education_num jittered as bench/spark.py does) with partitions of at
    most 12,000 rows: Spark's histograms make several levels of upper cuts (more than 8 leaves need a tree at least
    4 deep, the root's cut aside), summed per Spark partition (dense) or emitted per Arrow batch (not dense)."""
    import crowddb.spark as cs
    import crowddb.spark.mondrian as sm

    if not dense:
        monkeypatch.setattr(sm, "DENSE_BINS", 0)
    rng = np.random.default_rng(3)
    n = 200_000
    big = frame.iloc[rng.integers(0, len(frame), n)].reset_index(drop=True)
    for c, w in (("age", 2), ("education_num", 1)):
        big[c] = np.clip(big[c].to_numpy() + rng.integers(-w, w + 1, n), frame[c].min(), frame[c].max())
    big["id"] = np.arange(n)
    df = spark.createDataFrame(pa.Table.from_pandas(big, preserve_index=False)).repartition(3)
    out = cs.anonymize(df, QIS, 10, order_by="id", max_partition_rows=12_000).toArrow().to_pandas()
    release = local_anonymize(big, QIS, 10)
    assert partition(out["id"], out["class"]) == partition(big["id"], release.groups)
    leaves, leaf_rows = np.unique(out["class"].to_numpy() >> 32, return_counts=True)
    assert len(leaves) > 8 and leaf_rows.max() <= 12_000
    assert (out.set_index("id").loc[big["id"], QIS].astype(str).to_numpy()
            == release.table[QIS].astype(str).to_numpy()).all()


def test_every_cut_made_by_spark(spark, adult, frame):
    """max_partition_rows=1: Spark cuts until no cut is allowable, and every leaf is then one class, labelled
    without the local Mondrian (its rows are never repeated in an executor)."""
    import crowddb.spark as cs

    out = cs.anonymize(adult, QIS, 50, order_by="id", max_partition_rows=1).toArrow().to_pandas()
    release = local_anonymize(frame, QIS, 50)
    assert partition(out["id"], out["class"]) == partition(frame["id"], release.groups)
    assert (out["class"].to_numpy() & 0xFFFFFFFF == 0).all()  # one class per leaf
    assert (out.set_index("id").loc[frame["id"], QIS].astype(str).to_numpy()
            == release.table[QIS].astype(str).to_numpy()).all()


def _status_kb(field: str) -> int:
    """A field of this process's /proc/self/status, in kB (VmRSS: resident now; VmHWM: the peak since reset)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/self/status")


def test_rows_never_reach_the_python_driver(spark):
    """Issue 27: the rows never reach the driver. 1M rows made by Spark (never by Python) are anonymized; the Python
    driver's peak resident memory during the whole release (Linux's high-water mark, reset before it) grows by less
    than half of what the rows' quasi-identifiers alone take as pandas (measured: under a tenth), and every
    published class, counted by a Spark groupBy, holds k rows or more."""
    from pyspark.sql import functions as F

    import crowddb.spark as cs

    clear = Path("/proc/self/clear_refs")
    if not clear.exists():
        pytest.skip("needs Linux's /proc/self/clear_refs to reset the peak resident memory")
    n, k = 1_000_000, 25
    columns = {"age": 74, "education_num": 16, "hours": 12}  # each a hash of the id into that many values
    df = spark.range(n).select("id", *(
        (F.abs(F.xxhash64("id", F.lit(i))) % size + 1).alias(name) for i, (name, size) in enumerate(columns.items())))
    as_pandas = n * len(columns) * 8  # int64 columns, before any index or copy
    clear.write_text("5")  # resets VmHWM to the current resident size
    before = _status_kb("VmRSS") * 1024
    released = cs.anonymize(df, list(columns), k)
    smallest, rows = released.groupBy(*columns).count().agg(F.min("count"), F.sum("count")).collect()[0]
    grown = _status_kb("VmHWM") * 1024 - before
    assert rows == n and smallest >= k
    assert grown < as_pandas / 2, f"the driver grew by {grown:,} bytes; the rows as pandas take {as_pandas:,}"


SAMPLE_ROWS = 4_000  # an Adult sample: small enough for a fast Spark test, big enough for several levels of cuts
SAMPLE_THRESHOLD = 1_000  # its partitions above this many rows are cut by Spark, l checked by Spark aggregations


@pytest.fixture(scope="module")
def adult_sample(frame):
    """SAMPLE_ROWS Adult rows drawn without replacement, kept in id order (first appearance decides categorical
    codes, locally by the frame's order and on Spark by order_by='id')."""
    rng = np.random.default_rng(11)
    return frame.iloc[np.sort(rng.choice(len(frame), SAMPLE_ROWS, replace=False))].reset_index(drop=True)


@pytest.fixture(scope="module")
def adult_sample_df(spark, adult_sample):  # noqa: F811
    df = spark.createDataFrame(pa.Table.from_pandas(adult_sample, preserve_index=False)).cache()
    df.count()
    yield df
    df.unpersist()


def _l_checked(released, sensitive: str, columns: list[str]) -> tuple[int, int]:
    """Independent counts by a Spark groupBy over ``columns``: the smallest group's rows and the fewest distinct
    sensitive values in a group."""
    from pyspark.sql import functions as F

    row = released.groupBy(*columns).agg(F.count(F.lit(1)).alias("n"), F.countDistinct(sensitive).alias("s")).agg(
        F.min("n"), F.min("s")).collect()[0]
    return int(row[0]), int(row[1])


@pytest.mark.parametrize("sensitive,k,l,spark_counts", [("income", 10, 2, False), ("relationship", 5, 4, True)])
def test_l_diverse_classes_equal_local(spark, adult_sample, adult_sample_df, monkeypatch,  # noqa: F811
                                       sensitive, k, l, spark_counts):
    """Distinct l-diversity: the Spark classes are the local ones (as sets of ids), with upper cuts made by Spark;
    every class has >= k rows and >= l distinct sensitive values, counted again by a Spark groupBy. With
    spark_counts the medians and both sides' distinct sensitive values are counted by Spark (not collected), and
    the executors' partial results leave them per Arrow batch."""
    import crowddb.spark as cs
    import crowddb.spark.mondrian as sm

    if spark_counts:
        monkeypatch.setattr(sm, "COLLECT_BINS", 0)
        monkeypatch.setattr(sm, "DENSE_BINS", 0)
    released = cs.anonymize(adult_sample_df, QIS, k, sensitive=sensitive, l=l, order_by="id",
                            max_partition_rows=SAMPLE_THRESHOLD).cache()
    out = released.toArrow().to_pandas()
    release = local_anonymize(adult_sample, QIS, k, sensitive=sensitive, l=l)
    assert len(out) == SAMPLE_ROWS
    assert partition(out["id"], out["class"]) == partition(adult_sample["id"], release.groups)
    leaves, leaf_rows = np.unique(out["class"].to_numpy() >> 32, return_counts=True)
    assert len(leaves) >= SAMPLE_ROWS // SAMPLE_THRESHOLD and leaf_rows.max() <= SAMPLE_THRESHOLD  # Spark cut
    assert (out.set_index("id").loc[adult_sample["id"], QIS].astype(str).to_numpy()
            == release.table[QIS].astype(str).to_numpy()).all()
    # l mattered: plain k-anonymity on the same rows makes other classes
    plain = local_anonymize(adult_sample, QIS, k)
    assert partition(adult_sample["id"], plain.groups) != partition(adult_sample["id"], release.groups)
    for columns in (["class"], QIS):
        smallest, fewest = _l_checked(released, sensitive, columns)
        assert smallest >= k and fewest >= l
    released.unpersist()


def test_l_diverse_every_cut_made_by_spark(spark, adult_sample, adult_sample_df):  # noqa: F811
    """max_partition_rows=1: every cut, with its l check, is made by Spark's aggregations, and the classes are
    still the local ones (one class per leaf)."""
    import crowddb.spark as cs

    out = cs.anonymize(adult_sample_df, QIS, 50, sensitive="relationship", l=3, order_by="id",
                       max_partition_rows=1).toArrow().to_pandas()
    release = local_anonymize(adult_sample, QIS, 50, sensitive="relationship", l=3)
    assert partition(out["id"], out["class"]) == partition(adult_sample["id"], release.groups)
    assert (out["class"].to_numpy() & 0xFFFFFFFF == 0).all()
    plain = local_anonymize(adult_sample, QIS, 50)
    assert partition(adult_sample["id"], plain.groups) != partition(adult_sample["id"], release.groups)


def test_l_diversity_bad_requests_raise_the_local_errors(spark, adult_sample, adult_sample_df):  # noqa: F811
    """An unreachable l (income has 2 values) is the local PrivacyError; a malformed request the local
    ArgumentError / UnknownColumnError."""
    import crowddb.spark as cs
    from crowddb.errors import PrivacyError

    with pytest.raises(PrivacyError, match="only 2 distinct values; l=3"):
        local_anonymize(adult_sample, QIS, 10, sensitive="income", l=3)
    with pytest.raises(PrivacyError, match="only 2 distinct values; l=3"):
        cs.anonymize(adult_sample_df, QIS, 10, sensitive="income", l=3)
    for options, error in [({"l": 2}, ArgumentError), ({"sensitive": "nope", "l": 2}, UnknownColumnError),
                           ({"sensitive": "age", "l": 2}, ArgumentError),
                           ({"sensitive": "income", "l": 0}, ArgumentError)]:
        with pytest.raises(error):
            local_anonymize(adult_sample, QIS, 10, **options)
        with pytest.raises(error):
            cs.anonymize(adult_sample_df, QIS, 10, **options)


def test_l_diversity_null_sensitive_value_is_a_value(spark):  # noqa: F811
    """A NULL sensitive value counts as one distinct value (pandas.factorize(use_na_sentinel=False) locally, a NULL
    group on Spark): 1,500 synthetic rows whose diagnosis is NULL a quarter of the time, cut by Spark."""
    import crowddb.spark as cs

    rng = np.random.default_rng(5)
    n = 1_500
    frame = pd.DataFrame({"id": np.arange(n), "age": rng.integers(20, 70, n), "zip": rng.integers(0, 30, n),
                          "diag": rng.choice(["flu", "cold", "asthma", None], n, p=[0.3, 0.3, 0.15, 0.25])})
    df = spark.createDataFrame(pa.Table.from_pandas(frame, preserve_index=False))
    out = cs.anonymize(df, ["age", "zip"], 5, sensitive="diag", l=4, max_partition_rows=300).toArrow().to_pandas()
    release = local_anonymize(frame, ["age", "zip"], 5, sensitive="diag", l=4)
    assert partition(out["id"], out["class"]) == partition(frame["id"], release.groups)
    assert len(np.unique(out["class"].to_numpy() >> 32)) >= n // 300
    # every class holds all four values, the NULL among them (counted by pandas, NULL kept as a value)
    assert out.groupby("class")["diag"].nunique(dropna=False).min() == 4


HIERARCHIES = ("workclass", "marital_status", "occupation", "native_country", "age")  # ARX files shipped for Adult


@pytest.mark.parametrize("options,merged", [({}, False), ({"sensitive": "relationship", "l": 3}, True)])
def test_hierarchies_equal_local(spark, adult_sample, adult_sample_df, options, merged):  # noqa: F811
    """ARX hierarchies (age's numeric one only serves full-domain methods, as locally): the local classes and
    lowest-common-ancestor labels, with or without l-diversity. Mondrian classes whose widened boxes coincide are one
    class of the local release, so the Spark classes must merge them too (with l-diversity on this sample the local
    release has fewer classes than Mondrian made: the merge is exercised)."""
    import crowddb.spark as cs
    from crowddb.datasets import adult_hierarchy

    hierarchies = {c: adult_hierarchy(c) for c in HIERARCHIES}
    out = cs.anonymize(adult_sample_df, QIS, 10, hierarchies=hierarchies, order_by="id",
                       max_partition_rows=SAMPLE_THRESHOLD, **options).toArrow().to_pandas()
    release = local_anonymize(adult_sample, QIS, 10, hierarchies=hierarchies, **options)
    assert (len(np.unique(release.pre_class)) > len(np.unique(release.groups))) == merged
    assert partition(out["id"], out["class"]) == partition(adult_sample["id"], release.groups)
    assert len(np.unique(out["class"].to_numpy() >> 32)) > 1  # Spark cut the top of the tree
    mine = out.set_index("id").loc[adult_sample["id"], QIS].astype(str).to_numpy()
    assert (mine == release.table[QIS].astype(str).to_numpy()).all()
    assert "North America" in set(mine[:, QIS.index("native_country")])  # an ancestor's label is published


def test_hierarchy_bad_requests_raise_the_local_errors(spark, adult_sample, adult_sample_df):  # noqa: F811
    """A hierarchy naming no QI, a missing file and a value the hierarchy lacks: the local errors."""
    import crowddb.spark as cs

    lacking = pd.DataFrame({"leaf": ["Private", "Self-emp-inc"], "top": ["*", "*"]})
    for hierarchies, error, match in [({"nope": lacking}, UnknownColumnError, "not quasi-identifiers"),
                                      ({"workclass": "/nonexistent.csv"}, ArgumentError, "not found"),
                                      ({"workclass": lacking}, ArgumentError, "missing from its hierarchy")]:
        with pytest.raises(error, match=match):
            local_anonymize(adult_sample, QIS, 10, hierarchies=hierarchies)
        with pytest.raises(error, match=match):
            cs.anonymize(adult_sample_df, QIS, 10, hierarchies=hierarchies)
