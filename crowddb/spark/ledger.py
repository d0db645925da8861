"""The k-anonymity ledger of a Spark table (issue 27): roles and releases stay in the crowddb database file, each
row's history is a Parquet table beside the database, checked and appended by Spark joins, never collected.

A Spark table is named by the caller (shown as ``spark:<name>``); its roles are declared against a DataFrame
(``declare_roles``) and its rows are told apart by its key, hashed (a Spark table has no rowid). A release
(``release``) keeps the local ledger's rule (crowddb/store/composition.py): each row's history combines, by XOR, a
128-bit hash of (release, box) over the releases that showed it (here two 64-bit halves, Spark's xxhash64 of the box
under two tags, where the local ledger takes md5), rows with the same history form a joint class, and a release that
would leave a row in a joint class smaller than the least k promised to it is refused before anything is written.

Write-ahead, as locally: a release is on record as 'pending' in ``crowddb_spark_releases`` before its history is
written (a new Parquet version ``v<release_no>`` in the table's history folder) and 'completed' after; a pending
release is finished (its version was written whole: Hadoop's ``_SUCCESS`` marker) or rolled back (its partial
version removed) the next time the table's ledger is used (``recover``). The history folder is read and written
through Spark's own file system, so it may live wherever the cluster's storage is.
"""

from __future__ import annotations

import os
import re
from typing import Any

import duckdb
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from crowddb.errors import ArgumentError, CrowdDBError, PrivacyError, UnknownColumnError
from crowddb.spark.encoding import qi_list
from crowddb.spark.mondrian import DEFAULT_PARTITION_ROWS, anonymize
from crowddb.store import spark_tables

__all__ = ["declare_roles", "declared", "recover", "release", "releases", "roles"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_ROW, _H1, _H2, _K = "row_ref", "h1", "h2", "k"
_HISTORY = T.StructType([T.StructField(_ROW, T.LongType(), False), T.StructField(_H1, T.LongType(), False),
                         T.StructField(_H2, T.LongType(), False), T.StructField(_K, T.IntegerType(), False)])


def _con(db: Any):
    """The crowddb database's DuckDB connection, with the Spark ledger's tables (``store.spark_tables``)."""
    con = getattr(db, "con", None)
    if con is None or not hasattr(db, "database"):
        raise ArgumentError("the first argument must be an open crowddb database (crowddb.connect(...)), "
                            f"got {type(db).__name__}")
    spark_tables.ensure(con)
    return con


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ArgumentError(f"name must name the Spark table (letters, digits, '_', '.', '-'; e.g. 'census'), "
                            f"got {name!r}")
    return name


def declare_roles(db: Any, name: str, df: DataFrame, *, quasi_identifiers, key: str, sensitive=(),
                  kinds: dict[str, str] | None = None, history: str | None = None, ground_truth: str | None = None,
                  core=()) -> dict[str, Any]:
    """Declare (replace) the roles of the Spark table ``name`` against its DataFrame ``df``, in the crowddb
    database: quasi-identifiers (generalized by ``release``), sensitive columns, and the key that tells its rows
    apart across releases (required: a Spark table has no rowid). ``history``: the folder of its rows' histories
    (default ``<database file>.spark/<name>``; required for an in-memory database, which keeps nothing). For human
    operators over the table (crowddb/spark/crowd.py), as locally: ``ground_truth`` (never published; the simulated
    crowd answers from it) and ``core`` (the columns a HIT shows; default: every column not protected)."""
    con = _con(db)
    name = _check_name(name)
    if not isinstance(df, DataFrame):
        raise ArgumentError(f"declare_roles expects the table's Spark DataFrame, got {type(df).__name__}")
    columns = set(df.columns)
    qis, sens, core = qi_list(quasi_identifiers), qi_list(sensitive), qi_list(core)
    truth = [] if ground_truth is None else [ground_truth]
    if not qis:
        raise ArgumentError(f"spark:{name}: declare at least one quasi-identifier")
    if not isinstance(key, str):
        raise ArgumentError(f"spark:{name}: key must name the column that tells its rows apart (e.g. key='id'): "
                            "the ledger follows each row across releases by it")
    missing = [c for c in [*qis, *sens, key, *truth, *core] if c not in columns]
    if missing:
        raise UnknownColumnError(f"spark:{name}: no column(s) {missing}; columns are {sorted(columns)}")
    both = sorted((set(qis) & set(sens)) | (set(qis) & {key}) | (set(sens) & {key}) | (set(qis) & set(truth))
                  | ({key} & set(truth)))
    if both:
        raise PrivacyError(f"spark:{name}: columns {both} are given two roles (quasi-identifier, sensitive, key, "
                           "ground truth)")
    shown = sorted(set(core) & ({key} | set(sens) | set(truth)))
    if shown:
        raise PrivacyError(f"spark:{name}: core columns are shown to workers, and {shown} are protected (key, "
                           "sensitive, ground truth); leave them out of core")
    kinds = dict(kinds or {})
    if [c for c in kinds if c not in qis]:
        raise UnknownColumnError(f"spark:{name}: kinds name columns that are not quasi-identifiers: "
                                 f"{[c for c in kinds if c not in qis]}")
    if history is None:
        if db.database == ":memory:":
            raise ArgumentError(f"spark:{name}: an in-memory database keeps nothing; pass history='folder' for "
                                "the rows' histories, or connect to a database file")
        # absolute: Spark resolves a relative path against the JVM's folder, which is not Python's after os.chdir
        history = f"{os.path.abspath(db.database)}.spark/{name}"
    before = spark_tables.table(con, name)
    if before is not None and before[2] is not None and before[0]["key"] != key:
        raise PrivacyError(f"spark:{name}: its releases follow rows by {before[0]['key']!r}; a new key {key!r} would "
                           "make every row a new one to the ledger. Keep the key")
    declared = {"quasi_identifiers": qis, "sensitive": sens, "key": key, "kinds": kinds,
                "ground_truth": ground_truth, "core": core}
    spark_tables.declare(con, name, declared, str(history))
    return declared


def _declared(con, name: str) -> tuple[dict[str, Any], str, int | None]:
    """(roles, history folder, current release) of the Spark table ``name``; ArgumentError when it has no roles."""
    found = spark_tables.table(con, _check_name(name))
    if found is None:
        raise ArgumentError(f"spark:{name} has no declared roles: crowddb.spark.declare_roles(db, {name!r}, df, "
                            "quasi_identifiers=[...], key='id') first")
    return found


def declared(db: Any) -> list[str]:
    """The names of the Spark tables whose roles are declared in the crowddb database."""
    return spark_tables.names(_con(db))


def roles(db: Any, name: str) -> dict[str, Any]:
    """The declared roles of the Spark table ``name`` (ArgumentError when none are)."""
    return _declared(_con(db), name)[0]


def releases(db: Any, name: str):
    """The Spark table's releases on record (release_no, k, quasi_identifiers, status, created_at), as pandas."""
    return spark_tables.releases(_con(db), _check_name(name))


def _fs(spark: SparkSession, path: str):
    """(Hadoop file system, Path) of ``path``: the ledger's files live wherever Spark writes."""
    jvm = spark.sparkContext._jvm
    p = jvm.org.apache.hadoop.fs.Path(path)
    return p.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), p


def _version(history: str, release_no: int) -> str:
    return f"{history}/v{release_no}"


def recover(db: Any, name: str, spark: SparkSession) -> list[tuple[int, str]]:
    """Finish or roll back the table's pending releases (a process that died between the write-ahead record and its
    completion): a version written whole is completed, any other is removed with its record. Returns (release_no,
    'completed' | 'rolled back') per pending release."""
    con = _con(db)
    history = _declared(con, name)[1]
    done = []
    for no in spark_tables.pending(con, name):
        fs, path = _fs(spark, _version(history, no))
        if fs.exists(_fs(spark, _version(history, no) + "/_SUCCESS")[1]):
            spark_tables.complete(con, name, no)
            done.append((no, "completed"))
        else:
            if fs.exists(path):
                fs.delete(path, True)
            spark_tables.forget(con, name, no)
            done.append((no, "rolled back"))
    return done


def _entries(released: DataFrame, key: str, qis: list[str], tag: str) -> DataFrame:
    """Each released row's identity and its share of a history: the box's hash under the release's tag, two
    64-bit halves (the box: its quasi-identifiers' printed labels in name order, as composition.box_text orders)."""
    box = F.concat_ws(chr(31), *[F.col(q).cast("string") for q in sorted(qis)])
    return released.select(F.xxhash64(F.col(key)).alias(_ROW), F.xxhash64(F.lit(tag + "#1"), box).alias(_H1),
                           F.xxhash64(F.lit(tag + "#2"), box).alias(_H2))


def _after(before: DataFrame, added: DataFrame, k: int) -> DataFrame:
    """Every row's history once this release is on record: rows it shows fold its entry in (and the smaller k), the
    others keep theirs (a full outer join on the row's identity)."""
    b, a = before.alias("b"), added.alias("a")
    shown = F.col("a." + _ROW).isNotNull()
    joined = b.join(a, F.col("b." + _ROW) == F.col("a." + _ROW), "full_outer")
    fold = [F.when(shown, F.coalesce(F.col("b." + h), F.lit(0).cast("long")).bitwiseXOR(F.col("a." + h)))
            .otherwise(F.col("b." + h)).alias(h) for h in (_H1, _H2)]
    least = F.when(shown, F.least(F.coalesce(F.col("b." + _K), F.lit(k)), F.lit(k))).otherwise(F.col("b." + _K))
    return joined.select(F.coalesce(F.col("b." + _ROW), F.col("a." + _ROW)).alias(_ROW), *fold,
                         least.cast("int").alias(_K))


def _smallest_broken(after: DataFrame) -> tuple[int, int, int] | None:
    """(rows, class size, k) of the joint classes below the k promised to their rows, the smallest first; None when
    there are none (two aggregations over the histories; only these three numbers reach the driver)."""
    sized = after.withColumn("size", F.count(F.lit(1)).over(Window.partitionBy(_H1, _H2)))
    broken = sized.where(F.col("size") < F.col(_K))
    found = broken.agg(F.count(F.lit(1)).alias("n"), F.min("size").alias("size")).collect()[0]
    if not found["n"]:
        return None
    k = broken.where(F.col("size") == found["size"]).agg(F.max(_K)).collect()[0][0]
    return int(found["n"]), int(found["size"]), int(k)


def key_counts(df: DataFrame, key: str) -> tuple[int, int, int]:
    """The rows of ``df``, their distinct keys and their NULL keys, by one Spark aggregation."""
    n, distinct, nulls = df.agg(F.count(F.lit(1)), F.countDistinct(key), F.count(F.when(F.col(key).isNull(), 1))
                                ).collect()[0]
    return int(n), int(distinct), int(nulls)


def integer_key(df: DataFrame, key: str, what: str, fix: str) -> None:
    """Relaxed cuts part equal rows in the key's order, which tells every row apart: the key must be a column of
    integers (ArgumentError naming ``what`` asked for it and the ``fix``)."""
    if not isinstance(df.schema[key].dataType, T.IntegralType):
        raise ArgumentError(f"{what} takes rows in the key's order, and the key {key!r} is not a column of integers; "
                            f"{fix}")


def release(db: Any, df: DataFrame, k: int, *, name: str, keep_key: bool = False, strict: bool = True,
            sensitive: str | None = None, l: int | None = None, hierarchies: dict | None = None,
            shared=None, order_by: str | None = None,
            max_partition_rows: int = DEFAULT_PARTITION_ROWS, counts: tuple[int, int, int] | None = None
            ) -> DataFrame:
    """A k-anonymous release of the Spark table ``name`` (its DataFrame ``df``), by Mondrian on Spark over its
    declared quasi-identifiers, checked against every release of it on record and recorded in the crowddb database
    (``crowddb.spark.anonymize(db, df, k, name=...)`` calls this). Refused (PrivacyError, nothing written) when a
    row would share its joint class across releases with fewer rows than the least k promised to it. The key is
    dropped from the release unless ``keep_key``; the release is checkpointed, so what the ledger records is what
    the caller reads. ``strict``, ``sensitive`` and ``l`` (distinct l-diversity), ``hierarchies`` (QI -> ARX CSV
    path, DataFrame or Hierarchy) and ``shared`` (QIs labelled alike for rows equal on them) shape this release as in
    ``crowddb.spark.anonymize``; relaxed cuts (``strict=False``) take rows in ``order_by``'s order, by default the
    key's (it tells every row apart; it must then be a column of integers). The ledger composes k across releases,
    as the local one does (l is a property of each release, checked when it is made). ``counts``: ``key_counts(df,
    key)`` when the caller has them already (one Spark job fewer)."""
    con = _con(db)
    if not isinstance(df, DataFrame):
        raise ArgumentError(f"spark:{name}: release expects the table's Spark DataFrame, got {type(df).__name__}")
    spark = df.sparkSession
    recover(db, name, spark)  # (refuses a table without roles) a pending release is finished or rolled back first
    declared, history, current = _declared(con, name)
    qis, key = declared["quasi_identifiers"], declared["key"]
    missing = [c for c in [*qis, key, *([sensitive] if isinstance(sensitive, str) else [])] if c not in df.columns]
    if missing:
        raise UnknownColumnError(f"spark:{name}: the DataFrame has no column(s) {missing} its roles name")
    n, distinct, nulls = key_counts(df, key) if counts is None else counts
    if nulls or distinct != n:
        raise ArgumentError(f"spark:{name}: the key {key!r} must tell every row apart ({n} rows, {distinct} distinct "
                            f"keys, {nulls} NULL); the ledger follows rows across releases by it")
    if not strict and order_by is None:
        integer_key(df, key, f"spark:{name}: relaxed Mondrian (strict=False)",
                    "pass order_by=<a column of unique integers> or use strict=True")
        order_by = key  # relaxed cuts part equal rows by their order: the key's, which tells every row apart
    released = anonymize(df, qis, k, strict=strict, sensitive=sensitive, l=l, hierarchies=hierarchies,
                         kinds=declared["kinds"] or None, shared=shared, order_by=order_by,
                         max_partition_rows=max_partition_rows).localCheckpoint()
    k = int(k)
    number = spark_tables.next_number(con, name)
    before = (spark.read.schema(_HISTORY).parquet(_version(history, current)) if current is not None
              else spark.createDataFrame([], _HISTORY))
    after = _after(before, _entries(released, key, qis, f"spark:{name}:{number}"), k).persist()
    try:
        broken = _smallest_broken(after)
        if broken is not None:
            rows, size, promised = broken
            raise PrivacyError(
                f"spark:{name}: this release would leave {rows} row(s) in joint classes with the releases before it "
                f"as small as {size} row(s), below the k={promised} promised to them; nothing was released or "
                "recorded. Release over the quasi-identifiers and k of the earlier releases, or a larger k")
        try:
            spark_tables.begin(con, name, number, k, qis)
        except duckdb.ConstraintException:
            raise CrowdDBError(f"spark:{name}: another process put release {number} of this table on record "
                               "while this one was checked; nothing of this one was written. Run it again: it is "
                               "checked against that release then") from None
        after.write.mode("overwrite").parquet(_version(history, number))  # write-ahead: pending until written whole
        spark_tables.complete(con, name, number)
    finally:
        after.unpersist()
    if current is not None:  # the version before is no longer the history (best effort: a leftover is harmless)
        fs, path = _fs(spark, _version(history, current))
        fs.delete(path, True)
    return released if keep_key else released.drop(key)
