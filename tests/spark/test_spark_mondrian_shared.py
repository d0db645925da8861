"""Mondrian with shared (group) columns on Spark (crowddb.spark.anonymize(..., shared=[...])) against the local
two-stage Mondrian (crowddb.anonymize.anonymize(..., shared=[...]), crowddb/anonymize/shared.py).

The Spark release must have the local release's classes (as sets of row ids) and labels row by row; the promise of
shared columns is counted again on the release itself by a Spark groupBy: the rows of a shared group (equal on all
shared columns) show one label on each, and every class holds >= k rows. With a partition threshold below Adult's
size, the ladder's top level, the stage-2 cost of the big node and the choice between them are made on Spark."""

from __future__ import annotations

import pytest
from spark_session import spark  # noqa: F401  (the session fixture)
from spark_adult import adult, frame, partition  # noqa: F401  (fixtures)

from crowddb.anonymize import anonymize as local_anonymize
from crowddb.datasets import ADULT_QUASI_IDENTIFIERS

QIS = list(ADULT_QUASI_IDENTIFIERS)


def _shared_promise(released, raw, shared: list[str]) -> tuple[int, int]:
    """Independent counts by Spark over the release joined with the raw rows by id: the most label combinations on
    the shared columns that one shared group (rows equal on all shared columns) shows (1 when the promise holds),
    and the smallest class."""
    from pyspark.sql import functions as F

    raws = [f"raw_{s}" for s in shared]
    joined = released.join(raw.select("id", *[F.col(s).alias(r) for s, r in zip(shared, raws)]), on="id")
    most = joined.groupBy(*raws).agg(F.countDistinct(*shared).alias("n")).agg(F.max("n")).collect()[0][0]
    return int(most), int(released.groupBy("class").count().agg(F.min("count")).collect()[0][0])


@pytest.mark.parametrize("shared,strict,max_rows", [(["age"], True, 20_000), (["age", "sex"], False, None)])
def test_adult_shared_classes_equal_local(spark, adult, frame, shared, strict, max_rows):  # noqa: F811
    """shared=['age'], strict, at most 20,000 rows per executor: Spark cuts Adult's root for the ladder and runs
    stage 2 in the root, executors build the rest below the two halves; shared=['age', 'sex'] relaxed (two ladders,
    the cheaper kept) in one executor."""
    import crowddb.spark as cs

    k = 10
    options = {} if max_rows is None else {"max_partition_rows": max_rows}
    released = cs.anonymize(adult, QIS, k, strict=strict, shared=shared, order_by="id", **options).cache()
    out = released.toArrow().to_pandas()
    release = local_anonymize(frame, QIS, k, strict=strict, shared=shared)
    assert len(out) == len(frame)
    assert partition(out["id"], out["class"]) == partition(frame["id"], release.groups)
    assert (out.set_index("id").loc[frame["id"], QIS].astype(str).to_numpy()
            == release.table[QIS].astype(str).to_numpy()).all()
    # shared mattered: plain Mondrian on the same rows labels equal ages apart
    plain = local_anonymize(frame, QIS, k, strict=strict)
    assert plain.table.assign(raw=frame["age"].to_numpy()).groupby("raw")["age"].nunique().max() > 1
    most, smallest = _shared_promise(released, adult, shared)
    assert most == 1 and smallest >= k
    if max_rows is not None:
        # the ladder's top was Spark's: some class was made below a small node (executors) and the root was cut
        assert (out["class"].to_numpy() >> 62 == 1).any()
    released.unpersist()
