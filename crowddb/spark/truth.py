"""Truth discovery on Apache Spark: the methods of crowddb/truth run over a Spark DataFrame of answers, with the
truths of ``crowddb.truth.discover`` on the same answers.

Methods: 'mv', 'ds', 'one_coin', 'crh' (numbers; on labels it is 'crh_categorical', as locally), 'mean', 'median'.
What stays where: answers and per-object state stay in Spark; only per-source and per-class parameters (confusion
matrices, accuracies, CRH weights, class priors) reach the driver, which updates them with numpy and joins them back
as a broadcast table. Per-object state is never stored between iterations: every step recomputes it from the
answers and the driver's parameters, so the plan of a step does not grow with the iterations.

The answers are deduplicated (the last answer of each (object, source) pair, as ``base.encode_answers``), hash
partitioned by object and cached once. One EM step is then one Spark job of two aggregations: per object (a window
over the object's answers, within its partition: no shuffle) the E-step's scores, posteriors and truth, and per
source (or per source and label) the M-step's sums, which the driver collects.

Order: a Spark DataFrame has none; "last answer" and "first appearance" (the order of the sources in the result)
read the order from ``order_by`` when given, else from the DataFrame's partition order (``monotonically_increasing_id``,
the file's order for a DataFrame read from one file or made from a local table), as crowddb/spark/encoding.py.

Departures from local (each labelled where it is made): float sums are added in Spark's order, so results equal the
local ones up to rounding, and wherever the local code breaks ties by a rule (``base.argmax_rows``) the same rule is
applied here, in SQL, so a label never depends on the last bit of a sum. Not available here (ArgumentError naming the
local call instead): local-DP perturbation (``perturb``/``epsilon``/``delta``), ``tie='random'``, and the other methods.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from crowddb.errors import ArgumentError, EmptyInputError, UnknownColumnError
from crowddb.truth.base import MAX_AUTO_CATEGORIES, TIE_ABS_TOL, TIE_REL_TOL, TruthMethod, encode_answers, value_kind
from crowddb.truth.crh import crh_weights
from crowddb.truth.discover import _columns, _route_options, resolve_method

__all__ = ["SPARK_METHODS", "SparkTruthResult", "truth_discover"]

O, SRC, S, V, N, ORD = "__o", "__src", "__sid", "__v", "__n", "__order"
MEAN, STD, MED, FIRST = "__mean", "__std", "__med", "__first"
_EPS = 1e-10  # dawid_skene._EPS: the floor of priors, confusion entries and accuracies
_TINY = 1e-12  # base._TINY: the floor of numeric_confidence's weight sum


@dataclass
class SparkTruthResult:
    """Result of truth_discover(), as ``crowddb.truth.discover.TruthResult``: Spark DataFrames ``objects`` (object,
    truth, confidence; checkpointed in the executors) and ``sources`` (source, weight; in order of first appearance),
    the method's name and its number of iterations. ``params`` holds the final per-class / per-source parameters
    (priors, confusion matrices, accuracies) as numpy arrays, sources in the order of ``sources``."""

    objects: DataFrame
    sources: DataFrame
    method: str
    n_iter: int
    privacy: None = None
    params: dict[str, Any] | None = None


# ---------------------------------------------------------------- validation and coding


def _object_window():
    return Window.partitionBy(O)


def _null(col: str, dtype: T.DataType) -> Column:
    """NULL as pandas reads it: NULL, and NaN in a float column."""
    null = F.col(col).isNull()
    return null | F.isnan(F.col(col)) if isinstance(dtype, (T.FloatType, T.DoubleType)) else null


def _first(df: DataFrame, cond: Column, col: str) -> Any:
    """The value of ``col`` in the first row (in input order) where ``cond`` holds, as pandas reads it (the value
    the local error message shows, with its repr: numpy scalars for numbers)."""
    t = df.where(cond).orderBy(ORD).select(col).limit(1).toArrow()
    return t.to_pandas()[col].iloc[0]


def _kind(df: DataFrame, value: str, dtype: T.DataType, method: str) -> str:
    """The value kind discover() would find (value_kind on the column, itself: called on the column's distinct
    values, at most MAX_AUTO_CATEGORIES + 1 of them, which decide it)."""
    name = str(method).strip().lower()
    numeric = isinstance(dtype, T.NumericType)
    if name != "auto":
        cls = resolve_method(name, "numeric")
        if cls.name != "crh":
            return cls.kind
        if numeric:  # explicit 'crh': CRH 0-1 loss only for non-numeric labels (discover's rule)
            return "numeric"
    hint = ("int64" if isinstance(dtype, T.IntegralType) else "float64" if isinstance(dtype, (T.FloatType, T.DoubleType))
            else "bool" if isinstance(dtype, T.BooleanType) else object)
    sample = df.select(value).where(~_null(value, dtype)).distinct().limit(MAX_AUTO_CATEGORIES + 1).toArrow()
    return value_kind(pd.Series(sample.column(0).to_pylist(), dtype=hint))


@dataclass
class _Answers:
    """The deduplicated answers, cached in Spark (columns O, S, V, N and the numeric methods' per-object MEAN, STD,
    MED), and what the driver keeps: the source labels (code = position), the class labels, the counts."""

    df: DataFrame
    sources: pa.Array
    source_type: T.DataType
    classes: pa.Array | None
    class_type: T.DataType | None
    object_type: T.DataType
    n_answers: int
    n_objects: int
    scale: float  # np.std of the values (numeric)
    n_sources: int
    n_classes: int  # 0 for numbers


def _check(base: DataFrame, types: dict[str, T.DataType], kind: str, method: str, dropna: bool) -> None:
    """encode_answers' checks, in its order and with its messages, from one Spark aggregation (and, on an error,
    a query for the example it names)."""
    vt = types[V]
    null_v = _null(V, vt)
    aggs = [F.count(F.lit(1)).alias("n"), F.sum(_null(O, types[O]).cast("long")).alias("null_o"),
            F.sum(_null(SRC, types[SRC]).cast("long")).alias("null_s"), F.sum(null_v.cast("long")).alias("null_v")]
    floats = isinstance(vt, (T.FloatType, T.DoubleType))  # NaN is NULL above; infinities are checked here
    numeric_ok = isinstance(vt, T.NumericType)
    if floats:
        inf = F.col(V).cast("double").isin(float("inf"), float("-inf"))
        aggs.append(F.sum(inf.cast("long")).alias("inf"))
        if kind == "categorical":
            x = F.col(V).cast("double")
            aggs.append(F.sum((~null_v & ~inf & (x != F.round(x))).cast("long")).alias("frac"))
    row = base.agg(*aggs).collect()[0].asDict()
    if row["n"] == 0:
        raise EmptyInputError(f"{method}: the input has no answers")
    if row["null_o"]:
        raise ArgumentError(f"{method}: {row['null_o']} answers have a NULL object")
    if row["null_s"]:
        raise ArgumentError(f"{method}: {row['null_s']} answers have a NULL source")
    if row["null_v"] and not dropna:
        raise ArgumentError(
            f"{method}: {row['null_v']} answers have a NULL/NaN value (first on object {_first(base, null_v, O)!r}); "
            "filter them out or pass dropna=True")
    if row["null_v"]:
        left = base.groupBy(O).agg(F.count(F.when(~null_v, 1)).alias("c")).where("c = 0").select(O)
        missing = [r[0] for r in left.orderBy(O).limit(5).collect()]  # Index.difference sorts them, as here
        if missing:
            raise ArgumentError(
                f"{method}: {left.count()} objects have no answers once NULL values are dropped (e.g. "
                f"{missing!r}); there is nothing to infer their truth from")
    if kind == "numeric" and (not numeric_ok or isinstance(vt, T.BooleanType)):
        witness = base.where(~null_v).orderBy(ORD).limit(1).toArrow().to_pandas()
        encode_answers(witness[O], witness[SRC], witness[V], kind, method=method)  # raises the local error
        raise ArgumentError(f"{method}: the value column is not numeric")  # pragma: no cover - encode_answers raised
    if row.get("inf") and kind == "numeric":
        first = _first(base, F.col(V).cast("double").isin(float("inf"), float("-inf")), O)
        raise ArgumentError(f"{method}: {row['inf']} values are NaN or infinite (first on object {first!r})")
    if row.get("inf") or row.get("frac"):  # categorical floats: the local errors, raised on the first bad value
        bad = F.col(V).cast("double").isin(float("inf"), float("-inf")) if row.get("inf") else (
            ~null_v & (F.col(V).cast("double") != F.round(F.col(V).cast("double"))))
        witness = base.where(bad).orderBy(ORD).limit(1).toArrow().to_pandas()
        encode_answers(witness[O], witness[SRC], witness[V], kind, method=method)
        raise ArgumentError(f"{method}: the value column holds invalid labels")  # pragma: no cover


def _encode(answers: DataFrame, object: str, source: str, value: str, order_by: str | None, kind: str,
            method: str, dropna: bool, numeric_stats: bool) -> _Answers:
    """Validate (``_check``), deduplicate and code the answers; cache them partitioned by object."""
    spark = answers.sparkSession
    order = F.col(order_by) if order_by is not None else F.monotonically_increasing_id()
    base = answers.select(F.col(object).alias(O), F.col(source).alias(SRC), F.col(value).alias(V), order.alias(ORD))
    types = {f.name: f.dataType for f in base.schema.fields}
    _check(base, types, kind, method, dropna)
    if dropna:
        base = base.where(~_null(V, types[V]))
    if kind == "numeric":
        base = base.withColumn(V, F.col(V).cast("double"))
    elif isinstance(types[V], (T.FloatType, T.DoubleType)):  # integral floats are integer labels, as locally
        base = base.withColumn(V, F.col(V).cast("long"))
    # sources in order of first appearance (local: pd.factorize), coded by their position
    firsts = base.groupBy(SRC).agg(F.min(ORD).alias(ORD)).toArrow()
    labels = firsts.column(SRC).take(pc.sort_indices(firsts.column(ORD))).combine_chunks()
    sids = _params_table(spark, {SRC: labels, S: np.arange(len(labels), dtype=np.int32)})
    classes = class_type = None
    if kind == "categorical":  # classes from every answer, duplicates included (encode_answers), in sorted order
        class_type = base.schema[V].dataType
        uniq = base.select(V).distinct().toArrow().column(0).combine_chunks()
        classes = uniq.take(np.argsort(np.asarray(uniq.to_pylist()), kind="stable"))
        codes = _params_table(spark, {V: classes, "__code": np.arange(len(classes), dtype=np.int64)})
    # the last answer of each (object, source) pair; hash partitioned by object, so that the groupBy and every
    # later per-object window need no further shuffle
    df = (base.repartition(O).groupBy(O, SRC).agg(F.max_by(V, ORD).alias(V))
          .join(F.broadcast(sids), SRC))
    if kind == "categorical":
        df = df.join(F.broadcast(codes), V).drop(V).withColumnRenamed("__code", V)
    w = _object_window()
    # FIRST marks one answer per object (its lowest source code): per-object results are read from those rows
    df = df.select(O, S, V, F.count(F.lit(1)).over(w).alias(N), (F.min(S).over(w) == F.col(S)).alias(FIRST))
    if numeric_stats:
        # base.object_std: the plain mean, then the mean squared deviation from it (two passes, as locally);
        # CRH reads std 0 as 1
        df = df.withColumn(MEAN, F.sum(V).over(w) / F.col(N))
        std = F.sqrt(F.sum((F.col(V) - F.col(MEAN)) ** 2).over(w) / F.col(N))
        df = _with_median(df.withColumn(STD, F.when(std > 0, std).otherwise(1.0)), F.lit(1.0), MED)
    df = df.cache()
    # one job fills the cache and counts: answers, objects, and np.std of the values (numeric_confidence's scale)
    counts = df.agg(F.count(F.lit(1)), F.sum(F.col(FIRST).cast("long")),
                    F.stddev_pop(V) if kind == "numeric" else F.lit(0.0)).collect()[0]
    return _Answers(df, labels, types[SRC], classes, class_type, types[O], int(counts[0]), int(counts[1]),
                    float(counts[2] or 0.0), len(labels), 0 if classes is None else len(classes))


# ---------------------------------------------------------------- shared per-object expressions


def _argmax(scores: list[Column], exact: bool = False) -> Column:
    """base.argmax_rows (rng=None) in SQL: the lowest class code tied with the row maximum, a tie being
    ``|m - x| <= TIE_REL_TOL * max(|m|, |x|) + TIE_ABS_TOL`` between finite scores (equality for integer scores);
    NaN never wins (skipped by the maximum, as np.fmax), a row without a tied class gives code 0."""
    if len(scores) == 1:
        return F.lit(0)
    m = F.greatest(*[F.when(~F.isnan(c), c) for c in scores]) if not exact else F.greatest(*scores)
    tied = []
    for c in scores:
        if exact:
            tied.append(c == m)
            continue
        finite = ~F.isnan(c) & (F.abs(c) != float("inf")) & (F.abs(m) != float("inf"))
        near = F.abs(m - c) <= F.lit(TIE_REL_TOL) * F.greatest(F.abs(m), F.abs(c)) + F.lit(TIE_ABS_TOL)
        tied.append((c == m) | (near & finite))
    return F.coalesce(*[F.when(t, F.lit(k)) for k, t in enumerate(tied)], F.lit(0))


def _pick(values: list[Column], code: Column) -> Column:
    """values[code] per row."""
    return F.coalesce(*[F.when(code == k, v) for k, v in enumerate(values)])


def _softmax(x: DataFrame, k: int) -> DataFrame:
    """Posteriors p0..p{k-1} and the log normalizer ``lognorm`` from log scores s0..s{k-1} (DS Eq. 2.5's
    normalization, as dawid_skene._log_softmax_rows: subtract the row maximum, exponentiate, divide by the sum)."""
    s = [F.col(f"s{j}") for j in range(k)]
    x = x.withColumn("__m", F.greatest(*s) if k > 1 else s[0])
    x = x.withColumn("__z", sum((F.exp(c - F.col("__m")) for c in s), F.lit(0.0)))
    return x.select("*", *[(F.exp(s[j] - F.col("__m")) / F.col("__z")).alias(f"p{j}") for j in range(k)],
                    (F.col("__m") + F.log("__z")).alias("lognorm"))


def _votes(k: int, weight: Column | None = None) -> list[Column]:
    """Per object (a window over its answers): the (weighted) votes of each class (base.class_votes)."""
    w = _object_window()
    if weight is None:
        return [F.sum(F.when(F.col(V) == j, 1).otherwise(0)).over(w) for j in range(k)]
    return [F.sum(F.when(F.col(V) == j, weight).otherwise(0.0)).over(w) for j in range(k)]


def _params_table(spark, columns: dict[str, np.ndarray | pa.Array]) -> DataFrame:
    """A small driver table (per source, or per source and label) as a Spark DataFrame, for a broadcast join: made
    from Arrow, a local relation in the plan (a table made from Python rows would be an RDD read by Python workers)."""
    return spark.createDataFrame(pa.table(columns))


def _objects(x: DataFrame, ans: _Answers) -> DataFrame:
    """(object, truth, confidence) from per-answer rows that carry their object's ``truth`` (a class code for
    labels) and ``confidence``; class codes decoded to labels; computed now and checkpointed in the executors."""
    out = x.where(F.col(FIRST)).select(O, "truth", "confidence")
    if ans.classes is not None:
        labels = _params_table(x.sparkSession, {"truth": np.arange(len(ans.classes)), "__label": ans.classes})
        out = out.join(F.broadcast(labels), "truth").drop("truth").withColumnRenamed("__label", "truth")
    return out.select(F.col(O).alias("object"), "truth", "confidence").localCheckpoint()


def _sources(ans: _Answers, weights: np.ndarray) -> DataFrame:
    return _params_table(ans.df.sparkSession, {"source": ans.sources, "weight": np.asarray(weights, dtype=np.float64)})


def _per_source(t: pa.Table, col: str, n: int) -> np.ndarray:
    """A collected per-source column as an array indexed by source code (0 for a source absent from ``t``)."""
    out = np.zeros(n)
    out[t.column(S).to_numpy()] = t.column(col).to_numpy()
    return out


# ---------------------------------------------------------------- categorical methods


def _mv(ans: _Answers, model: TruthMethod) -> tuple:
    k = ans.n_classes
    votes = _votes(k)
    x = ans.df.select("*", *[v.alias(f"c{j}") for j, v in enumerate(votes)])
    c = [F.col(f"c{j}") for j in range(k)]
    x = x.withColumn("truth", _argmax(c, exact=True))  # integer votes: ties are equal counts, lowest label wins
    x = x.withColumn("confidence", _pick(c, F.col("truth")) / F.col(N))  # normalize_rows(votes)[truth]
    # voting.source_accuracy: share of each source's answers equal to the truth
    t = x.groupBy(S).agg(F.avg((F.col(V) == F.col("truth")).cast("double")).alias("acc")).toArrow()
    return _objects(x, ans), _per_source(t, "acc", ans.n_sources), 1, None


def _posterior_sums(x: DataFrame, k: int, by: list[str], extra: list[Column] = ()) -> pa.Table:
    """The M-step's aggregation over answers carrying their object's posteriors p0..: per ``by`` group the sums of
    p_j, of p_j / N (summed over groups: each object's posterior once, for the priors) and of lognorm / N (the
    marginal log-likelihood); collected (per source / label: small)."""
    aggs = [F.sum(f"p{j}").alias(f"t{j}") for j in range(k)]
    aggs += [F.sum(F.col(f"p{j}") / F.col(N)).alias(f"q{j}") for j in range(k)]
    if "lognorm" in x.columns:
        aggs.append(F.sum(F.col("lognorm") / F.col(N)).alias("ll"))
    return x.groupBy(*by).agg(*aggs, *extra).toArrow()


def _majority_posteriors(ans: _Answers) -> DataFrame:
    """Majority-vote start of the EM methods: normalize_rows(class_votes) per object."""
    k = ans.n_classes
    return ans.df.select("*", *[(v / F.col(N)).alias(f"p{j}") for j, v in enumerate(_votes(k))])


def _priors(t: pa.Table, k: int, n_objects: int) -> np.ndarray:
    """Class priors: the mean posterior over objects, floored at _EPS, normalized (DawidSkene._m_step)."""
    p = np.clip(np.array([pc.sum(t.column(f"q{j}")).as_py() for j in range(k)]) / n_objects, _EPS, None)
    return p / p.sum()


def _em_finish(ans: _Answers, x: DataFrame) -> DataFrame:
    """Objects from the last E-step's posteriors: the tie rule's truth and its posterior."""
    p = [F.col(f"p{j}") for j in range(ans.n_classes)]
    x = x.withColumn("truth", _argmax(p))
    return _objects(x.withColumn("confidence", _pick(p, F.col("truth"))), ans)


def _em(ans: _Answers, model: TruthMethod, start: DataFrame, m_step: Callable, e_step: Callable, by: list[str],
        signed: bool, extra: list[Column] = ()) -> tuple:
    """The EM loop of DawidSkene._fit / OneCoinDawidSkene._fit: an M-step from the majority vote (``start``), then
    E and M per iteration (one Spark job: the E-step per object, the M-step's sums per ``by``, collected) until the
    change of the marginal log-likelihood per answer is below tol (``signed``: DS's ll - ll_old, one-coin's
    |ll - ll_old|). Returns the parameters of the last E-step, those of the M-step after it, and n_iter."""
    new = m_step(_posterior_sums(start, ans.n_classes, by, extra))
    ll_old = -np.inf
    n_iter = 0
    for n_iter in range(1, model.max_iter + 1):
        params = new  # the parameters of this iteration's E-step
        sums = _posterior_sums(e_step(params), ans.n_classes, by, extra)
        ll = float(pc.sum(sums.column("ll")).as_py())
        new = m_step(sums)
        change = (ll - ll_old) if signed else abs(ll - ll_old)
        if change / ans.n_answers < model.tol:
            break
        ll_old = ll
    return params, new, n_iter


def _ds(ans: _Answers, model: TruthMethod) -> tuple:
    k, w = ans.n_classes, ans.n_sources
    spark = ans.df.sparkSession

    def m_step(t: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        # DS Eq. (2.3): pi[w, label l, true k] ∝ sum over answers of w with label l of T[i, k] (layout of _m_step)
        cm = np.zeros((w, k, k))
        sid, lab = t.column(S).to_numpy(), t.column(V).to_numpy()
        for j in range(k):
            cm[sid, lab, j] = t.column(f"t{j}").to_numpy()
        cm += model.smoothing + model.diag_prior * np.eye(k)  # Dirichlet pseudo-counts, as DawidSkene._m_step
        np.clip(cm, _EPS, None, out=cm)
        cm /= cm.sum(axis=1, keepdims=True)
        return _priors(t, k, ans.n_objects), cm

    def e_step(params) -> DataFrame:
        priors, cm = params
        # DS Eq. (2.5): log T[i, k] = log p_k + sum over answers (i, w, l) of log pi[w, l, k]
        logcm = np.log(cm)
        table = {S: np.repeat(np.arange(w, dtype=np.int32), k), V: np.tile(np.arange(k, dtype=np.int64), w)}
        table.update({f"c{j}": logcm[:, :, j].ravel() for j in range(k)})
        x = ans.df.join(F.broadcast(_params_table(spark, table)), [S, V])
        lp = np.log(priors)
        win = _object_window()
        x = x.select(O, S, V, N, FIRST, *[(F.sum(f"c{j}").over(win) + float(lp[j])).alias(f"s{j}") for j in range(k)])
        return _softmax(x, k)

    params, (priors, cm), n_iter = _em(ans, model, _majority_posteriors(ans), m_step, e_step, [S, V], signed=True)
    # source weight: expected accuracy sum_k p_k * pi[w, k, k] (from the last M-step, as locally)
    weights = (np.diagonal(cm, axis1=1, axis2=2) * priors).sum(axis=1)
    return (_em_finish(ans, e_step(params)), weights, n_iter,
            {"priors": priors, "confusion": np.ascontiguousarray(cm.transpose(0, 2, 1))})


def _one_coin(ans: _Answers, model: TruthMethod) -> tuple:
    k = ans.n_classes
    spark = ans.df.sparkSession

    def with_own(x: DataFrame) -> DataFrame:
        """Each answer's posterior of its own label, T[i, l], for the M-step."""
        return x.withColumn("__own", _pick([F.col(f"p{j}") for j in range(k)], F.col(V)))

    def m_step(t: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        # M-step: p_w = mean over w's answers of T[i, l]; priors as DS
        acc = _per_source(t, "own", ans.n_sources) / _per_source(t, "cnt", ans.n_sources)
        return _priors(t, k, ans.n_objects), np.clip(acc, _EPS, 1 - _EPS)

    def e_step(params) -> DataFrame:
        priors, acc = params
        log_right, log_wrong = np.log(acc), np.log((1 - acc) / max(k - 1, 1))
        table = {S: np.arange(ans.n_sources, dtype=np.int32), "lw": log_wrong, "d": log_right - log_wrong}
        x = ans.df.join(F.broadcast(_params_table(spark, table)), S)
        lp = np.log(priors)
        win = _object_window()
        # E-step: log T[i, k] = log p_k + sum_w [l == k] log p_w + [l != k] log((1 - p_w)/(K - 1))
        base = F.sum("lw").over(win)
        bonus = [F.sum(F.when(F.col(V) == j, F.col("d")).otherwise(0.0)).over(win) for j in range(k)]
        x = x.select(O, S, V, N, FIRST, *[(base + bonus[j] + float(lp[j])).alias(f"s{j}") for j in range(k)])
        return with_own(_softmax(x, k))

    extra = [F.sum("__own").alias("own"), F.count(F.lit(1)).alias("cnt")]
    params, _, n_iter = _em(ans, model, with_own(_majority_posteriors(ans)), m_step, e_step, [S], signed=False,
                            extra=extra)
    priors, acc = params  # the accuracies of the last E-step are the weights, as locally
    return _em_finish(ans, e_step(params)), acc, n_iter, {"priors": priors, "accuracy": acc}


def _crh_categorical(ans: _Answers, model: TruthMethod) -> tuple:
    k = ans.n_classes
    spark = ans.df.sparkSession
    plain = [c.cast("double") for c in _votes(k)]

    def truths(x: DataFrame, weights: dict[str, np.ndarray | None]) -> DataFrame:
        """Per answer, its object's truth under each named weight vector (None: the plain vote)."""
        given = {name: w for name, w in weights.items() if w is not None}
        if given:
            table = {S: np.arange(ans.n_sources, dtype=np.int32)} | {f"w_{n}": w for n, w in given.items()}
            x = x.join(F.broadcast(_params_table(spark, table)), S)
        for name, w in weights.items():
            if w is None:
                x = x.select("*", *[p.alias(f"{name}{j}") for j, p in enumerate(plain)])
            else:
                votes = _votes(k, F.col(f"w_{name}"))
                total = sum(votes[1:], votes[0])
                # ours (as locally): an object answered only by sources of weight 0 takes its plain vote
                x = x.select("*", *[F.when(total <= 0, plain[j]).otherwise(votes[j]).alias(f"{name}{j}")
                                    for j in range(k)])
            # the tie rule (integer plain votes: equal counts tie, as argmax_rows on class_votes' int64 counts)
            x = x.withColumn(f"truth_{name}", _argmax([F.col(f"{name}{j}") for j in range(k)], exact=w is None))
        return x

    def loss_job(w_prev, w_cur) -> tuple[np.ndarray, int]:
        x = truths(ans.df, {"a": w_prev, "b": w_cur})
        t = x.groupBy(S).agg(
            F.sum((F.col(V) != F.col("truth_b")).cast("double")).alias("loss"),  # CRH Eq. (12): 0-1 loss
            F.sum((F.col("truth_a") != F.col("truth_b")).cast("long")).alias("changed")).toArrow()
        return _per_source(t, "loss", ans.n_sources), int(pc.sum(t.column("changed")).as_py())

    loss, _ = loss_job(None, None)
    prev = None
    w = np.ones(ans.n_sources)
    n_iter = 0
    for n_iter in range(1, model.max_iter + 1):
        w = crh_weights(loss)  # CRH Eq. (5)
        loss, changed = loss_job(prev, w)  # the new truths (weighted vote, CRH Eq. 11) and their 0-1 loss
        prev = w
        if changed == 0:
            break
    x = truths(ans.df, {"b": w})
    v = [F.col(f"b{j}") for j in range(k)]
    x = x.withColumn("truth", F.col("truth_b"))
    x = x.withColumn("confidence", _pick(v, F.col("truth")) / sum(v[1:], v[0]))  # normalize_rows(votes)[truth]
    return _objects(x, ans), w, n_iter, None


# ---------------------------------------------------------------- numeric methods


def _with_median(x: DataFrame, weight: Column, out: str) -> DataFrame:
    """voting.segment_median per object, on the per-answer rows (``out`` = the object's (weighted) median): order
    the object's claims by value, lo = the first whose cumulative weight reaches half the total (1e-12 relative
    slack), hi = the first beyond it; the midpoint of both when lo's cumulative weight is np.isclose to half.
    Claims of equal value are ordered by source code (locally by input position: the same value either way)."""
    obj = _object_window()
    ordered = Window.partitionBy(O).orderBy(V, S)
    x = x.withColumn("__w", weight)
    x = x.withColumn("__rel", F.sum("__w").over(ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
    x = x.withColumn("__rn", F.row_number().over(ordered)).withColumn("__half", F.sum("__w").over(obj) / 2.0)
    slack = 1e-12 * F.greatest(2.0 * F.col("__half"), F.lit(1.0))
    lo = F.min(F.when(F.col("__rel") >= F.col("__half") - slack, F.struct("__rn", V, "__rel"))).over(obj)
    hi = F.min(F.when(F.col("__rel") > F.col("__half") + slack, F.struct("__rn", V))).over(obj)
    x = x.withColumn("__lo", lo).withColumn("__hi", hi)
    lo_v, hi_v = F.col("__lo").getField(V), F.coalesce(F.col("__hi").getField(V), F.col("__lo").getField(V))
    exact = F.abs(F.col("__lo").getField("__rel") - F.col("__half")) <= 1e-8 + 1e-5 * F.abs(F.col("__half"))
    x = x.withColumn(out, F.when(exact, (lo_v + hi_v) / 2.0).otherwise(lo_v))
    return x.drop("__w", "__rel", "__rn", "__half", "__lo", "__hi")


def _numeric_truth(x: DataFrame, w: np.ndarray | None, loss: str, out: str) -> DataFrame:
    """Per answer, its object's truth under source weights ``w`` (column ``w_<out>`` already joined): the plain
    median for None, else CRH Eq. (16) the weighted mean (plain mean where the weights sum to 0, as
    crh.weighted_mean) or Eq. (17) the weighted median."""
    if w is None:
        return x.withColumn(out, F.col(MED))
    wcol = F.col(f"w_{out}")
    if loss == "absolute":
        return _with_median(x, wcol, out)
    win = _object_window()
    num, den = F.sum(wcol * F.col(V)).over(win), F.sum(wcol).over(win)
    return x.withColumn(out, F.when(den > 0, num / den).otherwise(F.col(MEAN)))


def _numeric_finish(ans: _Answers, x: DataFrame, w: np.ndarray | None) -> DataFrame:
    """base.numeric_confidence: 1 / (1 + weighted RMS deviation from the truth / std of all claims)."""
    if w is not None:
        x = x.join(F.broadcast(_params_table(x.sparkSession, {S: np.arange(len(w), dtype=np.int32), "__cw": w})), S)
    cw = F.greatest(F.col("__cw"), F.lit(0.0)) if w is not None else F.lit(1.0)
    win = _object_window()
    num = F.sum(cw * (F.col(V) - F.col("truth")) ** 2).over(win)
    rms = F.sqrt(num / F.greatest(F.sum(cw).over(win), F.lit(_TINY)))
    return _objects(x.withColumn("confidence", 1.0 / (1.0 + rms / (ans.scale or 1.0))), ans)


def _mean(ans: _Answers, model: TruthMethod) -> tuple:
    x = ans.df.withColumn("truth", F.col(MEAN))
    return _numeric_finish(ans, x, None), np.ones(ans.n_sources), 1, None


def _median(ans: _Answers, model: TruthMethod) -> tuple:
    x = ans.df.withColumn("truth", F.col(MED))
    return _numeric_finish(ans, x, None), np.ones(ans.n_sources), 1, None


def _crh(ans: _Answers, model: TruthMethod) -> tuple:
    spark = ans.df.sparkSession
    scale = max(ans.scale, 1e-12)

    def with_truths(weights: dict[str, np.ndarray | None]) -> DataFrame:
        given = {n: w for n, w in weights.items() if w is not None}
        x = ans.df
        if given:
            table = {S: np.arange(ans.n_sources, dtype=np.int32)} | {f"w_{n}": w for n, w in given.items()}
            x = x.join(F.broadcast(_params_table(spark, table)), S)
        for name, w in weights.items():
            x = _numeric_truth(x, w, model.loss, name)
        return x

    hist: list[np.ndarray | None] = [None]  # hist[n] = w_n; truth_n = the median for n = 0, else Eq. (16)/(17)
    n = 0
    while n < model.max_iter:
        # one job: truth_n, its change from truth_{n-1} (max over objects) and the losses under it
        x = with_truths({"cur": hist[n]} | ({"prev": hist[n - 1]} if n else {}))
        r = F.col(V) - F.col("cur")
        # CRH Eq. (14) normalized squared loss, or Eq. (15) normalized absolute loss
        d = r * r / F.col(STD) if model.loss == "squared" else F.abs(r) / F.col(STD)
        aggs = [F.sum(d).alias("loss")] + ([F.max(F.abs(F.col("cur") - F.col("prev"))).alias("delta")] if n else [])
        t = x.groupBy(S).agg(*aggs).toArrow()
        if n and float(pc.max(t.column("delta")).as_py()) / scale < model.tol:
            break
        hist.append(crh_weights(_per_source(t, "loss", ans.n_sources)))  # CRH Eq. (5)
        n += 1
    w = hist[n] if n else np.ones(ans.n_sources)
    x = with_truths({"truth": hist[n]})
    return _numeric_finish(ans, x, w), w, n, None


_RUNNERS: dict[str, Callable] = {"mv": _mv, "ds": _ds, "one_coin": _one_coin, "crh_categorical": _crh_categorical,
                                 "crh": _crh, "mean": _mean, "median": _median}
#: the methods truth_discover runs on Spark (local names; aliases resolve as locally)
SPARK_METHODS = tuple(_RUNNERS)


def truth_discover(answers: DataFrame, *, object: str = "object", source: str = "source", value: str = "value",
                   method: str = "auto", tol: float = 1e-6, max_iter: int = 100, dropna: bool = False,
                   order_by: str | None = None, seed: Any = None, perturb: str | None = None,
                   epsilon: float | None = None, delta: float | None = None,
                   perturb_options: Mapping[str, Any] | None = None, options: Mapping[str, Any] | None = None,
                   **method_kw: Any) -> SparkTruthResult:
    """Each object's truth and each source's weight from a Spark DataFrame of answers: the results of
    ``crowddb.truth.discover(frame, object, source, value, method, ...)`` on the same answers (up to float rounding,
    ties broken by the same rule).

    ``method``: 'auto' (Dawid-Skene for labels, CRH for numbers, by discover's rule), 'mv', 'ds', 'one_coin', 'crh'
    (labels: 'crh_categorical'), 'mean', 'median' and their aliases. ``options`` and keyword arguments are the
    method's options (DS's ``smoothing``/``diag_prior``, CRH's ``loss``), routed and checked as by discover().
    ``order_by`` names a column giving the answers' order (the last answer of a pair wins); without it the
    DataFrame's partition order. Local DP (``perturb``, ``epsilon``, ``delta``) is refused: run it locally.
    """
    if perturb is not None or epsilon is not None or delta is not None or perturb_options:
        raise ArgumentError(
            "crowddb.spark.truth_discover does not perturb answers (perturb=, epsilon=, delta=): local DP is not "
            "implemented on Spark, and no privacy budget is charged here. Run it locally with "
            "crowddb.truth.discover(frame, ..., perturb=..., epsilon=...) on the answers (e.g. df.toArrow())")
    if not isinstance(answers, DataFrame):
        raise ArgumentError(f"crowddb.spark.truth_discover expects a Spark DataFrame, got {type(answers).__name__}")
    types = {f.name: f.dataType for f in answers.schema.fields}
    _columns(pd.DataFrame(columns=list(types)), object, source, value)  # discover's UnknownColumnError
    if order_by is not None and order_by not in types:
        raise UnknownColumnError(f"unknown order_by column {order_by!r}; columns are {list(types)}")
    name = str(method).strip().lower()
    if name != "auto":
        resolve_method(name, "numeric")  # an unknown method fails before any Spark job
    kind = _kind(answers, value, types[value], name)
    cls = resolve_method(name, kind)
    method_kw, _ = _route_options(cls, None, (), {**method_kw, **dict(options or {})})
    model = cls(tol=tol, max_iter=max_iter, seed=seed, **method_kw)  # the local checks of tol, max_iter, options
    if cls.name not in _RUNNERS:
        raise ArgumentError(f"method {cls.name!r} is not available on Spark (it runs {', '.join(SPARK_METHODS)}); "
                            f"run it locally with crowddb.truth.discover(..., method={cls.name!r})")
    if getattr(model, "tie", "first") != "first":
        raise ArgumentError("tie='random' is not available on Spark (its draws follow the local object order); "
                            "use tie='first' or crowddb.truth.discover")
    ans = _encode(answers, object, source, value, order_by, cls.kind, cls.name, dropna,
                  numeric_stats=cls.kind == "numeric")
    try:
        objects, weights, n_iter, params = _RUNNERS[cls.name](ans, model)
        sources = _sources(ans, weights)
    finally:
        ans.df.unpersist()
    return SparkTruthResult(objects, sources, cls.name, int(n_iter), None, params)

