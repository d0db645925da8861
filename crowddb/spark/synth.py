"""PrisCrowd synthesis on Apache Spark (issue 27): ``private_synth(claims, object=, source=, value=, ...)`` releases
synthetic claims from a Spark DataFrame of crowd claims (Huai et al., IJCAI 2019: weighted KDE, Algorithm 1,
Theorem 2), the release ``crowddb.synth.synthesize(..., streams='object')`` makes of the same claims, row for row.

What runs where. PrisCrowd works per object; only two of its steps read across objects, and those are Spark
aggregations whose small results go to the driver and come back as broadcast tables:
1. checks and counts (one job): claims per source (with the source's id, its position in the collected table), the
   NaN/NULL values and labels, max |value|; the cell, ``kde.decimal_resolution`` of all claims, in a second job:
   each Arrow batch tests every decimal exponent from the largest one down, the driver takes the largest exponent
   every batch passes (the local loop's answer exactly);
2. the global source weights g of Eq. (2) (weights 'combined' and 'global'): each iteration is one Spark job, the
   claims' losses computed per object in the executors (``api.object_losses``, from the broadcast g) and summed per
   source exactly (``api.fsum_segments`` over each source's collected losses), the driver updating g
   (``api.exact_global_weights``, the local per-object mode's own loop);
3. each object's run (``groupBy(object).applyInArrow``): its claims in canonical order (value, then source text),
   Silverman's bandwidth, the weights c (Eq. 4/5), Theorem 2 and Algorithm 1 (``api.release_object``;
   ``api.basic_object`` for method='basic'), from its own random stream ``api.object_stream(seed, object)``. It
   returns one row per object: the report's columns and the released values as arrays. This table is
   checkpointed in the executors; ``rows``, ``report``, ``trace`` and ``weights`` are read from it.
4. the summary: each Arrow batch of the report gives its counts and maxima (``api.summary_parts``), the driver merges
   them (``api.merge_parts``) and words them as locally (``api.summary_from_parts``).
Claims never reach the driver; what does: one row per source (its id, claim count, loss), per decimal exponent one
flag, per Arrow batch of the report one summary part.

Randomness (ours). ``synthesize``'s default draws every object from one Generator, objects batched by size, so an
object's draws depend on the others; no executor could reproduce that. Here each object has its own stream,
SeedSequence(seed, spawn_key=SHA-256 of str(object)), and runs on its own, so the rows are a function of the
claims and the seed alone, under any partitioning. ``synthesize(..., streams='object')`` is the same rule locally:
its rows, report, weights and summary equal these exactly (tests/spark/test_spark_synth.py); the default
``streams='shared'`` gives other rows for the same seed (the same distribution). ``seed=None`` draws fresh entropy.

Departures (ours): the global weights' per-source sums are exactly rounded (math.fsum), where the local default adds
batch by batch (g equal to rounding); 'basic' releases each object's noisy values sorted; the rows carry ``draw``,
the position in the object's draw order (a DataFrame has no order); a bandwidth or sensitivity mapping is checked
whole (every value > 0), and for a missing object by a Spark job before anything runs; a tie for the release's
largest epsilon between objects of different compositions would be broken by the name (``api.merge_parts``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from crowddb.arguments import bind
from crowddb.errors import ArgumentError, EmptyInputError, PrivacyError, UnknownColumnError
from crowddb.operators.table_functions.base import _named
from crowddb.operators.table_functions.private_synth import synth_charge, synth_options, synth_params, synth_release
from crowddb.synth import api
from crowddb.synth.accounting import COMPOSITION_DELTA
from crowddb.synth.kde import decimal_resolution
from crowddb.synth.weights import HAMPEL_QUANTILES

__all__ = ["SparkSynthResult", "private_synth"]

O, S, V, SID, G, ORD = "__o", "__s", "__v", "__sid", "__g", "__ord"
VALUES, BUCKET, K_TILDE, K_PRIME, W_SOURCE, W_VALUE, W_C = (
    "__values", "__bucket", "__k_tilde", "__k_prime", "__w_source", "__w_value", "__w_c")
FINEST = -6  # kde.decimal_resolution's finest exponent (its default)
_REPORT_TYPES = {"n_claims": pa.int64(), "released": pa.bool_(), "rows": pa.int64(), "reached_m": pa.bool_(),
                 "tried": pa.int64(), "rejected": pa.int64(), "epsilon": pa.float64(), "delta": pa.float64(),
                 "guarantee_holds": pa.bool_(), "reason": pa.string(), "t": pa.int64(), "bandwidth": pa.float64(),
                 "epsilon_object_basic": pa.float64(), "delta_object_basic": pa.float64(),
                 "epsilon_object_advanced": pa.float64(), "delta_object_advanced": pa.float64(),
                 "epsilon_object": pa.float64(), "delta_object": pa.float64(), "composition": pa.string()}
_SPARK_TYPES = {pa.int64(): T.LongType(), pa.bool_(): T.BooleanType(), pa.float64(): T.DoubleType(),
                pa.string(): T.StringType()}


@dataclass
class SparkSynthResult:
    """Result of ``private_synth``, as ``crowddb.synth.SynthResult`` with Spark DataFrames: ``rows`` (object, draw,
    value), ``report`` (one row per object, ``api.REPORT_COLUMNS``), ``summary`` (a dict, as locally, with
    ``seconds``), and the secret ``weights`` (object, source, value, c: the sampling weight of each claim) and
    ``trace`` (object, draw, value, bucket, k_tilde, k_prime, bandwidth), not for release. All are read from one
    table checkpointed in the executors."""

    rows: DataFrame
    report: DataFrame
    summary: dict[str, Any]
    weights: DataFrame = dataclasses.field(repr=False)
    trace: DataFrame = dataclasses.field(repr=False)


def _col(name: str) -> Column:
    return F.col(f"`{name.replace('`', '``')}`")


def _positive(name: str, value: Any) -> None:
    """A bandwidth or sensitivity: a positive number, or a mapping object -> positive number (every value)."""
    if value is None:
        return
    values = list(value.values()) if isinstance(value, Mapping) else [value]
    try:
        ok = all(math.isfinite(float(v)) and float(v) > 0 for v in values)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ArgumentError(f"{name} must be > 0, got {value!r}")


def _claims(claims: Any, object: str, source: str, value: str) -> DataFrame:
    """The claims as columns O, S, V (V a double), after the checks of the schema (no Spark job)."""
    if not isinstance(claims, DataFrame):
        raise ArgumentError(f"private_synth takes a Spark DataFrame of claims, got {type(claims).__name__}; for a "
                            "pandas DataFrame use crowddb.synth.synthesize")
    for role, col in (("object", object), ("source", source), ("value", value)):
        if not isinstance(col, str) or col not in claims.columns:
            raise UnknownColumnError(f"{role} column {col!r} not in input columns {claims.columns!r}")
    kind = claims.schema[value].dataType
    if not isinstance(kind, (T.NumericType, T.BooleanType)):
        raise ArgumentError(f"value column must be numeric (column {value!r} is {kind.simpleString()})")
    return claims.select(_col(object).alias(O), _col(source).alias(S), _col(value).cast("double").alias(V))


def _nan(col: str, kind: T.DataType) -> Column:
    """NULL, or NaN in a floating column: what pandas reads as missing."""
    null = F.col(col).isNull()
    return null | F.isnan(F.col(col)) if isinstance(kind, (T.FloatType, T.DoubleType)) else null


def _sources(df: DataFrame) -> pa.Table:
    """One job: per source its claims (``n``), bad values and NULL objects, and max |value|; the local errors of
    ``api._arrays`` (empty input, NaN or infinite values, NULL labels), in its order."""
    kinds = {f.name: f.dataType for f in df.schema.fields}
    bad = _nan(V, kinds[V]) | (F.abs(F.col(V)) == float("inf"))
    t = df.groupBy(S).agg(F.count(F.lit(1)).alias("n"), F.sum(bad.cast("long")).alias("bad"),
                          F.sum(_nan(O, kinds[O]).cast("long")).alias("null_o"),
                          F.max(F.when(~bad, F.abs(F.col(V)))).alias("top")).toArrow()
    if t.num_rows == 0:
        raise EmptyInputError("the input has no claims")
    n_bad = int(np.sum(t.column("bad").to_numpy()))
    if n_bad:
        raise ArgumentError(f"{n_bad} claim value(s) are NaN or infinite; filter them first (e.g. keep only the "
                            "claims where the value is not NULL, NaN or infinite: df.where(F.col(value).isNotNull() "
                            "& ~F.isnan(value) & (F.abs(value) != float('inf'))))")
    if np.sum(t.column("null_o").to_numpy()) or pd.isna(t.column(S).to_pandas()).any():
        raise ArgumentError("object and source labels must not be NULL")
    return t


def _missing_keys(df: DataFrame, mapping: Mapping[Any, Any], name: str) -> None:
    """ArgumentError as locally when an object has no entry in a bandwidth / sensitivity mapping (a Spark job)."""
    keys = list(mapping)
    missing = df.select(O).distinct().where(~F.col(O).isin(keys) if keys else F.lit(True)).limit(1).toArrow()
    if missing.num_rows:
        raise ArgumentError(f"{name} mapping has no entry for object {missing.column(O)[0].as_py()!r}")


def _passes(batches: Iterator[pa.RecordBatch], top: int) -> Iterator[pa.RecordBatch]:
    """Per batch and exponent e = top..FINEST whether every nonzero |value| is a multiple of 10^e, by
    ``kde.decimal_resolution``'s own test."""
    exps = np.arange(top, FINEST - 1, -1)
    for batch in batches:
        x = np.abs(batch.column(0).to_numpy(zero_copy_only=False))
        x = x[x > 0]
        ok = np.ones(exps.size, dtype=bool)
        for i, e in enumerate(exps):
            q = x / 10.0 ** int(e)
            ok[i] = np.all(np.abs(q - np.round(q)) <= 64 * np.finfo(float).eps * q)
        yield pa.RecordBatch.from_pydict({"e": exps.astype(np.int64), "ok": ok})


def _cell(df: DataFrame, top_value: float | None) -> float:
    """``kde.decimal_resolution`` of every claim: the largest 10^e, e >= FINEST, of which every claim is a multiple."""
    if top_value is None or not top_value > 0:
        return decimal_resolution(np.zeros(0))  # no nonzero claim
    top = int(np.floor(np.log10(top_value)))
    if top < FINEST:
        return 10.0 ** FINEST
    t = (df.select(V).mapInArrow(lambda it: _passes(it, top), "e long, ok boolean")
         .groupBy("e").agg(F.min(F.col("ok").cast("int")).alias("ok")).toArrow())
    ok = dict(zip(t.column("e").to_pylist(), t.column("ok").to_pylist()))
    return next((10.0 ** e for e in range(top, FINEST - 1, -1) if ok.get(e, 1)), 10.0 ** FINEST)


def _table(spark, columns: dict[str, Any]) -> DataFrame:
    """A small driver table as a Spark DataFrame for a broadcast join, made from Arrow."""
    return spark.createDataFrame(pa.table(columns))


def _object(table: pa.Table) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
    """(label, the claims' order by ``api.canonical_order``, values, source texts) of one object's claims."""
    label = table.column(O)[0].as_py()
    x = table.column(V).to_numpy()
    text = table.column(S).to_pandas().astype(str).to_numpy(dtype=str)
    return label, api.canonical_order(x, text), x, text


def _losses(spec: api.Spec):
    def run(table: pa.Table) -> pa.Table:
        label, order, x, _ = _object(table)
        d = api.object_losses(x[order], table.column(G).to_numpy()[order], label, spec)
        return pa.table({SID: table.column(SID).to_numpy()[order], "d": d})
    return run


def _fsums(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Each source's losses summed exactly (``api.fsum_segments``)."""
    for batch in batches:
        lists = batch.column("ds")
        offsets = np.concatenate([[0], np.cumsum(lists.value_lengths().to_numpy(zero_copy_only=False))])
        yield pa.RecordBatch.from_pydict({SID: batch.column(SID),
                                          "loss": api.fsum_segments(lists.flatten().to_numpy(), offsets)})


def _global_weights(prepared: DataFrame, n_claims: np.ndarray, spec: api.Spec) -> np.ndarray:
    """Eq. (2)'s g by ``api.exact_global_weights``: per iteration one Spark job (losses per object in the
    executors, exact sums per source), the update on the driver."""
    spark = prepared.sparkSession

    def losses(g: np.ndarray) -> np.ndarray:
        table = _table(spark, {SID: np.arange(g.size, dtype=np.int32), G: g})
        d = prepared.join(F.broadcast(table), SID).groupBy(O).applyInArrow(_losses(spec), f"{SID} int, d double")
        t = (d.groupBy(SID).agg(F.collect_list("d").alias("ds"))
             .mapInArrow(_fsums, f"{SID} int, loss double").toArrow())
        out = np.zeros(g.size)
        out[t.column(SID).to_numpy()] = t.column("loss").to_numpy()
        return out

    g, _ = api.exact_global_weights(losses, n_claims, spec.global_loss)
    return g


def _schema(object_type: T.DataType, source_type: T.DataType) -> T.StructType:
    """One object's row: its label, the report's columns, the released values and secrets as arrays."""
    fields = [T.StructField(O, object_type)]
    fields += [T.StructField(c, _SPARK_TYPES[t]) for c, t in _REPORT_TYPES.items()]
    fields += [T.StructField(VALUES, T.ArrayType(T.DoubleType())), T.StructField(BUCKET, T.ArrayType(T.LongType())),
               T.StructField(K_TILDE, T.ArrayType(T.DoubleType())), T.StructField(K_PRIME, T.ArrayType(T.LongType())),
               T.StructField(W_SOURCE, T.ArrayType(source_type)), T.StructField(W_VALUE, T.ArrayType(T.DoubleType())),
               T.StructField(W_C, T.ArrayType(T.DoubleType()))]
    return T.StructType(fields)


def _releases(spec: api.Spec, seed: int):
    def run(table: pa.Table) -> pa.Table:
        label, order, x, _ = _object(table)
        rng = api.object_stream(seed, label)
        if spec.method == "basic":
            out = api.basic_object(x[order], label, spec, rng)
        else:
            out = api.release_object(x[order], table.column(G).to_numpy()[order], label, spec, rng)
        report = api.object_report(np.array([label], dtype=object), {f: [v] for f, v in out.fields.items()}, spec)
        weighed = order if spec.method == "priscrowd" else order[:0]  # 'basic' has no weights, as locally
        cols: dict[str, Any] = {O: table.column(O).slice(0, 1)}
        cols |= {c: pa.array(report[c].to_numpy(), type=t) for c, t in _REPORT_TYPES.items()}

        def one(values: Any, kind: pa.DataType | None = None) -> pa.Array:
            values = values if isinstance(values, pa.Array) else pa.array(np.asarray(values), type=kind)
            return pa.ListArray.from_arrays(pa.array([0, len(values)], type=pa.int32()), values)
        cols |= {VALUES: one(out.value, pa.float64()), BUCKET: one(out.bucket, pa.int64()),
                 K_TILDE: one(out.k_tilde, pa.float64()), K_PRIME: one(out.k_prime, pa.int64()),
                 W_SOURCE: one(table.column(S).combine_chunks().take(pa.array(weighed))),
                 W_VALUE: one(x[weighed], pa.float64()), W_C: one(out.c[: weighed.size], pa.float64())}
        return pa.table(cols)
    return run


def _parts(method: str, params: dict[str, Any]):
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if batch.num_rows:
                parts = api.summary_parts(batch.to_pandas(), method, params)
                yield pa.RecordBatch.from_pydict({"parts": [json.dumps(parts)]})
    return run


def private_synth(claims: DataFrame, object: str = "object", source: str = "source", value: str = "value",
                  m: int = 30, k: int = 5, gamma: float = 4.0, epsilon0: float = 1.0, method: str = "priscrowd",
                  weights: str = "combined", bandwidth: float | Mapping[Any, float] | None = None,
                  t: int | None = None, small_objects: str = "withhold", epsilon: float | None = None,
                  max_attempts: int | None = None, seed: int | None = None, resolution: float | None = None,
                  weight_floor: float = 0.1, privacy_test: bool = True,
                  sensitivity: float | Mapping[Any, float] | None = None,
                  hampel_quantiles: tuple[float, float, float] = HAMPEL_QUANTILES, global_loss: str = "sum",
                  hampel_center: str = "median", composition_delta: float = COMPOSITION_DELTA) -> SparkSynthResult:
    """PrisCrowd (or 'basic') over a Spark DataFrame of claims: ``synthesize(..., streams='object')``'s release,
    computed in Spark (see the module's docs). Bad arguments raise its errors before any Spark job; bad data (no
    claims, NaN values, NULL labels, a mapping missing an object) after the first, before anything is released."""
    t0 = time.perf_counter()
    spec = api.spec_of(m, k, gamma, epsilon0, method, weights, bandwidth, t, small_objects, epsilon, max_attempts,
                       weight_floor, privacy_test, sensitivity, hampel_quantiles, global_loss, hampel_center,
                       composition_delta, "object")
    api.check_resolution(resolution)
    _positive("bandwidth", bandwidth if method == "priscrowd" else None)
    _positive("sensitivity", sensitivity if method == "basic" else None)
    root = api.root_seed(seed)
    df = _claims(claims, object, source, value)
    spark = df.sparkSession
    sources = _sources(df)
    for name, mapping in (("bandwidth", bandwidth if method == "priscrowd" else None),
                          ("sensitivity", sensitivity if method == "basic" else None)):
        if isinstance(mapping, Mapping):
            _missing_keys(df, mapping, name)
    top = pc.max(sources.column("top")).as_py()
    cell = float(resolution) if resolution is not None else _cell(df, top)
    spec = dataclasses.replace(spec, cell=cell)
    params = api._params(spec) | {"streams": "object"}
    n_claims = sources.column("n").to_numpy()
    ids = _table(spark, {S: sources.column(S), SID: np.arange(sources.num_rows, dtype=np.int32)})
    prepared = df.join(F.broadcast(ids), S).repartition(O).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        g = np.ones(n_claims.size)
        if method == "priscrowd" and weights != "uniform":
            g = _global_weights(prepared, n_claims, spec)
        t1 = time.perf_counter()
        gt = _table(spark, {SID: np.arange(g.size, dtype=np.int32), G: g})
        schema = _schema(df.schema[O].dataType, df.schema[S].dataType)
        done = (prepared.join(F.broadcast(gt), SID).groupBy(O).applyInArrow(_releases(spec, root), schema)
                .localCheckpoint())
    finally:
        prepared.unpersist()
    t2 = time.perf_counter()
    report = done.select(F.col(O).alias("object"), *_REPORT_TYPES)
    parts = report.mapInArrow(_parts(method, params), "parts string").toArrow().column("parts").to_pylist()
    summary = api.summary_from_parts(method, api.merge_parts([json.loads(p) for p in parts]), params)
    summary["seconds"] = {"weights": t1 - t0, "sampling": t2 - t1, "total": time.perf_counter() - t0}
    rows = done.select(F.col(O).alias("object"), F.posexplode(VALUES).alias("draw", "value"))
    drawn = F.arrays_zip(F.col(VALUES).alias("value"), F.col(BUCKET).alias("bucket"),
                         F.col(K_TILDE).alias("k_tilde"), F.col(K_PRIME).alias("k_prime"))
    trace = (done.select(F.col(O).alias("object"), F.posexplode(drawn).alias("draw", "x"), "bandwidth")
             .select("object", "draw", "x.value", "x.bucket", "x.k_tilde", "x.k_prime", "bandwidth"))
    if method == "basic":  # no candidates, no buckets: an empty trace, as locally
        trace = trace.limit(0)
    claim = F.arrays_zip(F.col(W_SOURCE).alias("source"), F.col(W_VALUE).alias("value"), F.col(W_C).alias("c"))
    weights_df = (done.select(F.col(O).alias("object"), F.explode(claim).alias("x"))
                  .select("object", "x.source", "x.value", "x.c"))
    return SparkSynthResult(rows=rows, report=report, summary=summary, weights=weights_df, trace=trace)


# ------------------------------------------------------------------------------------ PRIVATE_SYNTH(spark.<name>, ...)
def bind_sql(named: dict[str, Any]) -> dict[str, Any]:
    """PRIVATE_SYNTH's SQL arguments bound as the local table function binds them, and checked as ``private_synth``
    checks them (no Spark job): a bad one raises before anything is charged."""
    args = bind("PRIVATE_SYNTH", named, synth_params())
    options = synth_options(args)
    with _named("PRIVATE_SYNTH"):
        api.spec_of(**{k: v for k, v in options.items() if k != "resolution"})
        api.check_resolution(options["resolution"])
        _positive("bandwidth", options["bandwidth"])
        _positive("sensitivity", options["sensitivity"])
    return args


def _fsum_lists(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Per source its text (as pandas writes it) and the exact sums of its objects' figures."""
    for batch in batches:
        out = {"unit_id": pa.array(batch.column(S).to_pandas().astype(str).to_numpy(dtype=object), pa.string()),
               ORD: batch.column(ORD)}
        for col in ("epsilon", "delta"):
            lists = batch.column(col)
            offsets = np.concatenate([[0], np.cumsum(lists.value_lengths().to_numpy(zero_copy_only=False))])
            out[col] = pa.array(api.fsum_segments(lists.flatten().to_numpy(), offsets))
        yield pa.RecordBatch.from_pydict(out)


def _charge_per_source(table: DataFrame, obj: str, src: str, figures) -> pd.DataFrame:
    """The local charge's per-source sums (``private_synth._per_source``) in Spark: per object its claim count, the
    figures of each distinct count on the driver (``figures``, the local function), per (source, object) pair one
    figure, per source their exact sum (math.fsum; the local pandas sum agrees to rounding); sources in order of
    first appearance (Spark's partition order, as ``sql._source_counts``). One row per source reaches the driver."""
    spark = table.sparkSession
    df = table.select(_col(obj).alias(O), _col(src).alias(S), F.monotonically_increasing_id().alias(ORD))
    sizes = df.groupBy(O).agg(F.count(F.lit(1)).alias("n"))
    distinct = sizes.select("n").distinct().toArrow().column("n").to_numpy()
    eps, delta = figures(distinct)
    by_size = _table(spark, {"n": distinct, "epsilon": np.asarray(eps, float), "delta": np.asarray(delta, float)})
    pairs = df.groupBy(S, O).agg(F.min(ORD).alias(ORD)).join(sizes, O).join(F.broadcast(by_size), "n")
    t = (pairs.groupBy(S).agg(F.collect_list("epsilon").alias("epsilon"), F.collect_list("delta").alias("delta"),
                              F.min(ORD).alias(ORD))
         .mapInArrow(_fsum_lists, f"unit_id string, {ORD} long, epsilon double, delta double").toArrow())
    t = t.take(pc.sort_indices(t.column(ORD)))
    return pd.DataFrame({"unit_id": t.column("unit_id").to_pylist(), "epsilon": t.column("epsilon").to_numpy(),
                         "delta": t.column("delta").to_numpy()})


def sql_charge(db: Any, name: str, table: DataFrame, args: dict[str, Any]) -> tuple[str, Any]:
    """(budget key, charge) of PRIVATE_SYNTH(spark.<name>, ...): the local charge (``private_synth.synth_charge``,
    the Theorem 2 worst case per object summed over each source's objects; 'basic': claims per source times
    epsilon) with its per-source sums computed in Spark, checked against the budget of ``spark:<name>`` before
    anything runs (refused inside BEGIN ... COMMIT, and when a copy of the table has acts of its own)."""
    from crowddb.spark import sql  # (sql.py imports this module)

    with _named("PRIVATE_SYNTH"):
        _claims(table, args["object"], args["source"], args["value"])  # the columns and their types (no job)
    charge = synth_charge(args, lambda: sql._source_counts(table, args["source"]),
                          lambda figures: _charge_per_source(table, args["object"], args["source"], figures))
    if charge is None:  # the arguments were checked (bind_sql): fail closed on a release without a charge
        raise PrivacyError("PRIVATE_SYNTH: internal error: a DP release whose charge could not be declared; "
                           "nothing ran or was recorded")
    return sql.checked_charge(db, name, table, charge, "PRIVATE_SYNTH")


def run_sql(table: DataFrame, args: dict[str, Any]) -> SparkSynthResult:
    """PRIVATE_SYNTH(spark.<name>, ...)'s synthesis: ``private_synth`` with the bound arguments (its errors named
    PRIVATE_SYNTH: ...; a seed left out draws fresh entropy)."""
    with _named("PRIVATE_SYNTH"):
        return private_synth(table, object=args["object"], source=args["source"], value=args["value"],
                             seed=args["seed"], **synth_options(args))


def record_sql(db: Any, args: dict[str, Any], result: SparkSynthResult, charged: tuple[str, Any]) -> None:
    """The synthesis' release and its charge in one transaction that checks the budget again, as the local planner
    records PRIVATE_SYNTH (``Store.log_charged_release``; the release as ``private_synth.synth_release`` words it).
    The per-object log (crowddb_synth_objects, one row per object) is written as locally, so the report reaches the
    driver here, once the statement has been accepted; warns as locally when no row was released."""
    from crowddb.spark import sql  # (sql.py imports this module)

    table = result.report.toPandas().sort_values("object", kind="stable").reset_index(drop=True)
    _, release = synth_release(args, result.summary, table, result.summary["rows"], charged[1])
    sql.log_charged(db, charged, release)
