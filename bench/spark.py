"""Benchmark: strict Mondrian on Spark (crowddb.spark.anonymize, local[2]) beside the local paths, on Adult
resampled to 1,000,000 rows, as rows per second.

Run: python bench/spark.py [--rows 1000000] [--ks 10] [--partition-rows 500000]
Paths, each timed once per k in the same run:
- spark: the resampled table read from Parquet by Spark, anonymized, the release counted per class by Spark (the
  count is part of the time: it makes Spark run every stage, and gives the classes and the smallest one);
- local: crowddb.anonymize.anonymize on the pandas frame (the algorithm alone);
- sql: SELECT count(*) FROM ANONYMIZE(big, ...) through crowddb's DuckDB path (a new release, recorded).
The first Spark call also starts the JVM and the Python workers: a warm-up call on 50,000 rows is not timed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import pandas as pd

import crowddb
from crowddb.anonymize import anonymize
from crowddb.datasets import ADULT_QUASI_IDENTIFIERS, load_adult

QIS = list(ADULT_QUASI_IDENTIFIERS)


def resample(df: pd.DataFrame, n: int, seed: int = 0) -> pd.DataFrame:
    """n rows drawn with replacement, age (+-2) and education_num (+-1) jittered within their ranges (as
    bench/anonymize.py does: without jitter every class would be a copy of Adult's), new ids 1..n."""
    rng = np.random.default_rng(seed)
    out = df.iloc[rng.integers(0, len(df), n)].reset_index(drop=True)
    for c, w in (("age", 2), ("education_num", 1)):
        lo, hi = int(df[c].min()), int(df[c].max())
        out[c] = np.clip(out[c].to_numpy() + rng.integers(-w, w + 1, n), lo, hi)
    out["id"] = np.arange(1, n + 1)
    return out


def spark_session():
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("crowddb-bench")
             .config("spark.driver.memory", "1g").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "4")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def spark_run(df, k: int, partition_rows: int) -> tuple[int, int]:
    """Classes and the smallest class of one Spark release (every stage runs)."""
    from pyspark.sql import functions as F

    import crowddb.spark as cs

    out = cs.anonymize(df, QIS, k, order_by="id", max_partition_rows=partition_rows)
    row = out.groupBy("class").count().agg(F.count("*"), F.min("count")).collect()[0]
    return int(row[0]), int(row[1])


def timed(f):
    t = time.perf_counter()
    r = f()
    return time.perf_counter() - t, r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--ks", type=int, nargs="+", default=[10])
    ap.add_argument("--partition-rows", type=int, default=None, help="crowddb.spark's max_partition_rows")
    args = ap.parse_args()
    import crowddb.spark as cs

    parts = args.partition_rows or cs.DEFAULT_PARTITION_ROWS
    big = resample(load_adult(), args.rows)
    spark = spark_session()
    db = crowddb.connect(seed=1, progress=False)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "big.parquet")
        big.to_parquet(path, index=False)
        df = spark.read.parquet(path)
        spark_run(df.limit(50_000), 10, parts)  # warm-up: JVM, Python workers, imports
        print(f"Adult resampled to {args.rows:,} rows, 8 QIs, Spark local[2] (driver 1g), "
              f"max_partition_rows={parts:,}")
        head = f"{'k':>4} | {'path':<6} | {'seconds':>8} | {'rows/s':>12} | {'classes':>8} | {'smallest':>8}"
        print(head)
        print("-" * len(head))
        for k in args.ks:
            t_spark, (classes, smallest) = timed(lambda k=k: spark_run(df, k, parts))
            t_local, rel = timed(lambda k=k: anonymize(big, QIS, k))
            db.load_frame(f"big_{k}", big)  # a table of its own: a new release
            sql = (f"SELECT count(*) FROM ANONYMIZE(big_{k}, k := {k}, method := 'mondrian', "
                   f"quasi_identifiers := [{', '.join(repr(q) for q in QIS)}])")
            t_sql, _ = timed(lambda sql=sql: db.sql(sql).fetchall())
            report = db.last_report[0]
            rows = [("spark", t_spark, classes, smallest),
                    ("local", t_local, rel.metrics["n_groups"], rel.metrics["min_group_size"]),
                    ("sql", t_sql, report.get("n_groups", rel.metrics["n_groups"]), report["min_group_size"])]
            for name, t, g, s in rows:
                print(f"{k:>4} | {name:<6} | {t:8.2f} | {args.rows / t:12,.0f} | {g:>8,} | {s:>8,}")
    spark.stop()


if __name__ == "__main__":
    main()
