"""crowddb on Apache Spark: the algorithms of crowddb/anonymize and crowddb/truth run over Spark DataFrames, with the
same results, and a Spark table's releases are kept in the crowddb database's k-anonymity ledger.

``anonymize(df, quasi_identifiers, k)`` is Mondrian (strict, or relaxed with ``strict=False`` and a unique integer
``order_by`` column; numeric, categorical and ordinal QIs, ARX hierarchies, distinct l-diversity over a sensitive
column, shared columns): the upper cuts are chosen by Spark aggregations, each partition of at most
``max_partition_rows`` rows is finished by the local vectorized Mondrian inside an executor, with the local classes.
``anonymize(db, df, k, name='census')`` is the same release of a Spark table
whose roles were declared (``declare_roles(db, 'census', df, quasi_identifiers=[...], key='id')``), checked against
its earlier releases and recorded (crowddb/spark/ledger.py). ``truth_discover(answers, ...)`` is truth inference
(with ``perturb=``, on answers perturbed under local DP in Spark; ``perturb_answers`` gives them).
crowddb SQL naming ``spark.<name>`` runs on Spark through ``crowddb.connect(path, spark=session)``'s ``db.sql``
(crowddb/spark/sql.py: ANONYMIZE and TRUTH_DISCOVER, the rest transpiled by sqlglot, behind the guard).
Needs the ``spark`` extra (``pip install "crowddb[spark]"``) and Java 17.
"""

from __future__ import annotations

from typing import Any

try:
    import pyspark  # noqa: F401
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError('crowddb.spark needs PySpark: pip install "crowddb[spark]" (and Java 17)') from err

from crowddb.spark import mondrian
from crowddb.spark.ledger import declare_roles, recover, release, releases, roles
from crowddb.spark.mondrian import DEFAULT_PARTITION_ROWS
from crowddb.spark.synth import SparkSynthResult, private_synth
from crowddb.spark.truth import SPARK_METHODS, SparkTruthResult, perturb_answers, truth_discover

__all__ = ["DEFAULT_PARTITION_ROWS", "SPARK_METHODS", "SparkSynthResult", "SparkTruthResult", "anonymize",
           "declare_roles", "perturb_answers", "private_synth", "recover", "release", "releases", "roles", "truth_discover"]


def anonymize(first: Any, *args: Any, **kwargs: Any):
    """``anonymize(df, quasi_identifiers, k, ...)``: Mondrian on Spark (crowddb/spark/mondrian.py);
    ``anonymize(db, df, k, name=..., ...)``: a recorded release of a declared Spark table (``release``)."""
    if hasattr(first, "con") and hasattr(first, "database"):  # a crowddb database: the ledger's release
        return release(first, *args, **kwargs)
    return mondrian.anonymize(first, *args, **kwargs)
