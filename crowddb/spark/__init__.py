"""crowddb on Apache Spark: the algorithms of crowddb/anonymize run over Spark DataFrames, with the same results.

``anonymize(df, quasi_identifiers, k)`` is Mondrian (strict, numeric / categorical / ordinal QIs): the upper cuts
are chosen by Spark aggregations, each partition of at most ``max_partition_rows`` rows is finished by the local
vectorized Mondrian inside an executor. Needs the ``spark`` extra (``pip install "crowddb[spark]"``) and Java 17.
"""

from __future__ import annotations

try:
    import pyspark  # noqa: F401
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError('crowddb.spark needs PySpark: pip install "crowddb[spark]" (and Java 17)') from err

from crowddb.spark.mondrian import DEFAULT_PARTITION_ROWS, anonymize
from crowddb.spark.truth import SPARK_METHODS, SparkTruthResult, truth_discover

__all__ = ["DEFAULT_PARTITION_ROWS", "SPARK_METHODS", "SparkTruthResult", "anonymize", "truth_discover"]
