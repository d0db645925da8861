"""Adult for the Mondrian tests of tests/spark/: the shipped file as a cached Spark DataFrame and as the local frame
(fixtures), and classes compared as partitions of the rows (labels do not matter, only which rows share a class)."""

from __future__ import annotations

import numpy as np
import pyarrow.csv as pcsv
import pytest
from spark_session import spark  # noqa: F401  (the session fixture)

from crowddb.datasets import adult_path, load_adult


@pytest.fixture(scope="module")
def adult(spark):  # noqa: F811
    """Adult as a cached Spark DataFrame (read by Arrow from the shipped file, in the file's order)."""
    df = spark.createDataFrame(pcsv.read_csv(adult_path())).cache()
    df.count()
    yield df
    df.unpersist()


@pytest.fixture(scope="module")
def frame():
    """Adult as the local frame, in id order (as order_by='id' orders the Spark rows)."""
    return load_adult()


def partition(ids, classes) -> set[frozenset]:
    """The classes as sets of row ids."""
    ids, classes = np.asarray(ids), np.asarray(classes)
    order = np.argsort(classes, kind="stable")
    cuts = np.flatnonzero(np.diff(classes[order])) + 1
    return {frozenset(part.tolist()) for part in np.split(ids[order], cuts)}
