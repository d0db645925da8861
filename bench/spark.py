"""Benchmark: strict Mondrian on Spark (crowddb.spark.anonymize, local[2]) beside the local DuckDB path (SQL
ANONYMIZE), on Adult resampled to 1M, 10M and 50M rows: seconds, rows per second and peak memory of each.

Run: python bench/spark.py [--rows 1000000 10000000 50000000] [--k 10] [--repeats 1] [--driver-memory 6g]
     [--shuffle-partitions 8] [--partition-rows N] [--local-max-rows 10000000] [--local-cap-gb 14] [--data DIR]

Input: each size is written once to Parquet (--data, else a temporary directory) in chunks of 1M rows drawn with
a fixed seed per chunk, so the rows never sit on the driver at once; both paths read that file.
Paths, each timed in the same run (the fastest of --repeats):
- spark: spark.read.parquet, crowddb.spark.anonymize, the release counted per class by Spark (the count is part of
  the time: it makes Spark run every stage). Peak memory: the summed RSS of this process and its children (the
  JVM, which holds the driver and the local[2] executors, and the Python workers), sampled every 0.2 s.
- local: SELECT count(*) FROM ANONYMIZE(...) through crowddb's DuckDB path in a child process (the Parquet file is
  loaded first into an in-memory DuckDB table by read_parquet, as a user with the file would; only the query is
  timed). Peak memory: the child's peak RSS, and beside it the loaded table's RSS and the query's own peak above
  it; the child is killed once its RSS passes --local-cap-gb (reported as out of memory). Sizes above --local-max-rows are skipped:
  10M rows peaked at 13.3 GB at first and 3.9 GB now (the table's 2.0 GB included); 50M would need ~19 GB.
The local runs go first, before Spark's JVM exists, so the two never hold memory at the same time. The first Spark
call also starts the JVM and the Python workers: a warm-up call on 50,000 rows is not timed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Self

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from crowddb.datasets import ADULT_QUASI_IDENTIFIERS, load_adult

QIS = list(ADULT_QUASI_IDENTIFIERS)
CHUNK = 1_000_000  # rows drawn and written at a time
JITTER = (("age", 2), ("education_num", 1))


def write_resampled(path: str, n: int, seed: int = 0) -> None:
    """Adult resampled to n rows, written to Parquet chunk by chunk: rows drawn with replacement, age (+-2) and
    education_num (+-1) jittered within their ranges (as bench/anonymize.py: without jitter every class would be a
    copy of Adult's), ids 1..n in file order. Chunk i draws from default_rng((seed, i)): the same file every time."""
    adult = pa.Table.from_pandas(load_adult(), preserve_index=False)
    bounds = {c: (pc.min(adult[c]).as_py(), pc.max(adult[c]).as_py()) for c, _ in JITTER}
    with pq.ParquetWriter(path, adult.schema) as writer:
        for i, start in enumerate(range(0, n, CHUNK)):
            m = min(CHUNK, n - start)
            rng = np.random.default_rng((seed, i))
            t = adult.take(rng.integers(0, len(adult), m))
            for c, w in JITTER:
                jittered = np.clip(t[c].to_numpy() + rng.integers(-w, w + 1, m), *bounds[c])
                t = t.set_column(t.schema.get_field_index(c), c, pa.array(jittered))
            t = t.set_column(t.schema.get_field_index("id"), "id", pa.array(np.arange(start + 1, start + m + 1)))
            writer.write_table(t)


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids, from /proc."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(entry))
    return kids


def _rss(pid: int) -> int:
    """Resident bytes of one process (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def tree_rss(pid: int) -> int:
    """Summed resident bytes of ``pid`` and all its descendants."""
    kids, todo, total = _children(), [pid], 0
    while todo:
        p = todo.pop()
        total += _rss(p)
        todo.extend(kids.get(p, []))
    return total


class PeakRSS:
    """Samples tree_rss(pid) every ``every`` seconds in a thread while in use; ``peak`` is the highest sample."""

    def __init__(self, pid: int, every: float = 0.2, limit: int | None = None, on_limit=None):
        self.pid, self.every, self.limit, self.on_limit, self.peak = pid, every, limit, on_limit, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss(self.pid))
            if self.limit is not None and self.peak > self.limit:
                self.on_limit()
                return
            self._stop.wait(self.every)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, tree_rss(self.pid))


def local_child(path: str, k: int) -> None:
    """In the child process: the DuckDB path on the Parquet file, loaded as a user with a Parquet file would
    (DuckDB's read_parquet into an in-memory table); prints seconds, classes, smallest class, the RSS once the
    table is loaded and the query's own peak above it, as JSON."""
    import crowddb

    db = crowddb.connect(seed=1, progress=False)
    db.execute("CREATE TABLE big AS SELECT * FROM read_parquet(?)", [path]).fetchall()
    sql = (f"SELECT count(*) FROM ANONYMIZE(big, k := {k}, method := 'mondrian', "
           f"quasi_identifiers := [{', '.join(repr(q) for q in QIS)}])")
    loaded = _rss(os.getpid())
    with PeakRSS(os.getpid(), every=0.1) as mem:
        t = time.perf_counter()
        db.sql(sql).fetchall()
        seconds = time.perf_counter() - t
    report = db.last_report[0]
    print(json.dumps({"seconds": seconds, "classes": report.get("n_groups"), "smallest": report["min_group_size"],
                      "loaded": loaded, "query": max(mem.peak - loaded, 0)}))


def local_run(path: str, k: int, cap: int) -> dict:
    """The DuckDB path in a child process, killed once its RSS passes ``cap`` bytes; adds peak_rss and oom."""
    child = subprocess.Popen([sys.executable, __file__, "--local-child", path, "--k", str(k)],
                             stdout=subprocess.PIPE, text=True)
    killed = threading.Event()

    def kill() -> None:
        killed.set()
        child.kill()

    with PeakRSS(child.pid, limit=cap, on_limit=kill) as mem:
        out, _ = child.communicate()
    if killed.is_set() or child.returncode:
        return {"seconds": None, "peak_rss": mem.peak, "oom": True, "note": "killed at the memory cap"
                if killed.is_set() else f"exited with {child.returncode} (out of memory?)"}
    return {**json.loads(out.strip().splitlines()[-1]), "peak_rss": mem.peak, "oom": False, "note": ""}


def spark_session(driver_memory: str, shuffle_partitions: int):
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("crowddb-bench")
             .config("spark.driver.memory", driver_memory).config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
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


def best_of(repeats: int, f):
    """(fastest seconds, result, peak RSS of this process tree) over ``repeats`` calls of f."""
    runs = []
    for _ in range(repeats):
        with PeakRSS(os.getpid()) as mem:
            t = time.perf_counter()
            r = f()
            runs.append((time.perf_counter() - t, r, mem))
    seconds, result, _ = min(runs, key=lambda x: x[0])
    return seconds, result, max(m.peak for _, _, m in runs)


def _gb(b: int) -> str:
    return f"{b / 2**30:.2f} GB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000, 50_000_000])
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--driver-memory", default="6g", help="the local[2] JVM's heap (driver and executors)")
    ap.add_argument("--shuffle-partitions", type=int, default=8)
    ap.add_argument("--partition-rows", type=int, default=None, help="crowddb.spark's max_partition_rows")
    ap.add_argument("--local-max-rows", type=int, default=10_000_000, help="skip the local path above this")
    ap.add_argument("--local-cap-gb", type=float, default=14.0, help="kill the local path's child above this RSS")
    ap.add_argument("--data", default=None, help="directory for the Parquet inputs (kept; else a temporary one)")
    ap.add_argument("--local-only", action="store_true", help="time the local path alone (no Spark)")
    ap.add_argument("--local-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.local_child:
        local_child(args.local_child, args.k)
        return
    import crowddb.spark as cs

    parts = args.partition_rows or cs.DEFAULT_PARTITION_ROWS
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data or tmp
        os.makedirs(data, exist_ok=True)
        paths = {}
        for n in args.rows:
            paths[n] = os.path.join(data, f"adult_{n}.parquet")
            if not os.path.exists(paths[n]):
                write_resampled(paths[n], n)
        local = {}
        for n in args.rows:  # before the JVM starts: the two paths never hold memory together
            if n > args.local_max_rows:
                local[n] = {"seconds": None, "peak_rss": 0, "oom": None,
                            "note": f"skipped: above --local-max-rows {args.local_max_rows:,}"}
            else:
                local[n] = min((local_run(paths[n], args.k, int(args.local_cap_gb * 2**30))
                                for _ in range(args.repeats)), key=lambda r: r["seconds"] or float("inf"))
        results = {}
        if not args.local_only:
            spark = spark_session(args.driver_memory, args.shuffle_partitions)
            spark_run(spark.read.parquet(paths[args.rows[0]]).limit(50_000), args.k, parts)  # warm-up
            for n in args.rows:
                df = spark.read.parquet(paths[n])
                results[n] = best_of(args.repeats, lambda df=df: spark_run(df, args.k, parts))
            spark.stop()
    print(f"Adult resampled, 8 QIs, k={args.k}, best of {args.repeats}; Spark local[2], spark.driver.memory="
          f"{args.driver_memory}, spark.sql.shuffle.partitions={args.shuffle_partitions}, max_partition_rows="
          f"{parts:,}; local = SQL ANONYMIZE (DuckDB path) in a child capped at {args.local_cap_gb:g} GB")
    head = (f"{'rows':>11} | {'path':<6} | {'seconds':>8} | {'rows/s':>10} | {'peak RSS':>9} | {'classes':>8} | "
            f"{'smallest':>8} | note")
    print(head)
    print("-" * len(head))
    for n in args.rows:
        if n in results:
            t, (classes, smallest), peak = results[n]
            print(f"{n:>11,} | {'spark':<6} | {t:8.1f} | {n / t:10,.0f} | {_gb(peak):>9} | {classes:>8,} | "
                  f"{smallest:>8,} |")
        r = local[n]
        if r["seconds"] is None:
            print(f"{n:>11,} | {'local':<6} | {'-':>8} | {'-':>10} | {_gb(r['peak_rss']) if r['peak_rss'] else '-':>9}"
                  f" | {'-':>8} | {'-':>8} | {r['note']}")
        else:
            print(f"{n:>11,} | {'local':<6} | {r['seconds']:8.1f} | {n / r['seconds']:10,.0f} | "
                  f"{_gb(r['peak_rss']):>9} | {r['classes'] or 0:>8,} | {r['smallest']:>8,} | the loaded table "
                  f"{_gb(r['loaded'])}, the query's peak above it {_gb(r['query'])}")
    ran = [n for n in args.rows if local[n]["seconds"] is not None]
    if args.local_only:
        return
    over = [n for n in ran if results[n][0] < local[n]["seconds"]]
    failed = [n for n in args.rows if local[n]["oom"]]
    print("Spark overtakes the local path at " + (f"{min(over):,} rows" if over else "no size measured here")
          + "; the local path ran out of memory at " + (f"{min(failed):,} rows" if failed else "no size measured")
          + (f" (sizes above {args.local_max_rows:,} not run locally)" if max(args.rows) > args.local_max_rows
             else ""))


if __name__ == "__main__":
    main()
