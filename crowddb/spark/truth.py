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

Local DP (``perturb``, ``epsilon``, ``delta``): each deduplicated answer is perturbed in Spark by the mechanisms of
crowddb/truth/ldp.py (RR extended to NULL, LP, MF, the crowd-sensing Gaussian), with their checks, domains and
privacy reports, and the method then runs on the perturbed answers as discover() runs it (objects left without
answers get a NULL truth and confidence 0; sources left without answers are dropped). The noise is ours: the local
draws come from one numpy Generator consumed in the answers' order by samplers whose draws per value vary (bounded
integers reject, geometric gaps and the unanswered cells they pick depend on all the draws before), which no executor
can reproduce without the answers before its own; here every cell's uniforms are a hash of (seed, stream, object,
source) (``_uniform``), so the perturbed values are a function of the answers and the seed alone (the same under any
partitioning), distributed as the local ones but not equal to them. Hence ``seed`` must be an integer: the secure
sampler of ``seed=None`` (os.urandom, OpenDP) runs locally only. MF's V is drawn per object from ``v_seed`` (a given
V, indexed by the local object order, is refused). 'rr' and 'laplace' perturb every unanswered cell too (the m x n
task vectors, generated per object from the source codes), as locally; 'mf' sends every cell.

Departures from local (each labelled where it is made): float sums are added in Spark's order, so results equal the
local ones up to rounding, and wherever the local code breaks ties by a rule (``base.argmax_rows``) the same rule is
applied here, in SQL, so a label never depends on the last bit of a sum. Not available here (ArgumentError naming the
local call instead): ``tie='random'``, the other methods, perturbation without an integer seed (secure noise) and
MF with a given V.
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

from crowddb.errors import ArgumentError, EmptyInputError, PrivacyError, UnknownColumnError
from crowddb.truth.base import MAX_AUTO_CATEGORIES, TIE_ABS_TOL, TIE_REL_TOL, TruthMethod, encode_answers, value_kind
from crowddb.truth.crh import crh_weights
from crowddb.truth.discover import _columns, _route_options, resolve_method
from crowddb.truth.ldp import (
    PERTURBATIONS,
    _check_delta,
    check_epsilon,
    check_mf_d,
    check_ridge,
    gaussian_report,
    laplace_report,
    mf_report,
    null_fill_value,
    numeric_domain,
    perturbation_key,
    perturbation_options,
    rr_classes,
    rr_probabilities,
    rr_report,
    sensitivity_of,
)

__all__ = ["SPARK_METHODS", "SparkTruthResult", "perturb_answers", "truth_discover"]

O, SRC, S, V, N, ORD = "__o", "__src", "__sid", "__v", "__n", "__order"
MEAN, STD, MED, FIRST = "__mean", "__std", "__med", "__first"
_VALUE = V  # V under a second name, for _mf (whose option V, the task profile matrix, hides it)
_EPS = 1e-10  # dawid_skene._EPS: the floor of priors, confusion entries and accuracies
_TINY = 1e-12  # base._TINY: the floor of numeric_confidence's weight sum


@dataclass
class SparkTruthResult:
    """Result of truth_discover(), as ``crowddb.truth.discover.TruthResult``: Spark DataFrames ``objects`` (object,
    truth, confidence; checkpointed in the executors) and ``sources`` (source, weight; in order of first appearance),
    the method's name and its number of iterations, ``privacy``: the perturbation's report as discover()'s (None
    without ``perturb``). ``params`` holds the final per-class / per-source parameters (priors, confusion matrices,
    accuracies) as numpy arrays, sources in the order of ``sources``."""

    objects: DataFrame
    sources: DataFrame
    method: str
    n_iter: int
    privacy: dict[str, Any] | None = None
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
class _Coded:
    """The deduplicated, coded answers (``df``: columns O, S, V, hash partitioned by object) and the labels the
    driver keeps (source code = position in ``sources``, class code = position in ``classes``)."""

    df: DataFrame
    sources: pa.Array
    source_type: T.DataType
    classes: pa.Array | None
    class_type: T.DataType | None
    object_type: T.DataType


@dataclass
class _Answers(_Coded):
    """The deduplicated answers, cached in Spark (columns O, S, V, N and the numeric methods' per-object MEAN, STD,
    MED), and what the driver keeps: the source labels (code = position), the class labels, the counts."""

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


def _coded(answers: DataFrame, object: str, source: str, value: str, order_by: str | None, kind: str,
           method: str, dropna: bool) -> _Coded:
    """Validate (``_check``), deduplicate and code the answers, partitioned by object."""
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
    return _Coded(df.select(O, S, V), labels, types[SRC], classes, class_type, types[O])


def _answers(coded: _Coded, numeric_stats: bool) -> _Answers:
    """The coded answers with their per-object columns, cached, and their counts."""
    w = _object_window()
    # FIRST marks one answer per object (its lowest source code): per-object results are read from those rows
    df = coded.df.select(O, S, V, F.count(F.lit(1)).over(w).alias(N), (F.min(S).over(w) == F.col(S)).alias(FIRST))
    if numeric_stats:
        # base.object_std: the plain mean, then the mean squared deviation from it (two passes, as locally);
        # CRH reads std 0 as 1
        df = df.withColumn(MEAN, F.sum(V).over(w) / F.col(N))
        std = F.sqrt(F.sum((F.col(V) - F.col(MEAN)) ** 2).over(w) / F.col(N))
        df = _with_median(df.withColumn(STD, F.when(std > 0, std).otherwise(1.0)), F.lit(1.0), MED)
    df = df.cache()
    # one job fills the cache and counts: answers, objects, and np.std of the values (numeric_confidence's scale)
    counts = df.agg(F.count(F.lit(1)), F.sum(F.col(FIRST).cast("long")),
                    F.stddev_pop(V) if coded.classes is None else F.lit(0.0)).collect()[0]
    classes = coded.classes
    return _Answers(df, coded.sources, coded.source_type, classes, coded.class_type, coded.object_type,
                    int(counts[0]), int(counts[1] or 0), float(counts[2] or 0.0), len(coded.sources),
                    0 if classes is None else len(classes))


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


# ---------------------------------------------------------------- local-DP perturbation (crowddb/truth/ldp.py)


class _HashStream:
    """The noise source a Spark perturbation's privacy report names (``ldp._report`` reads these two)."""

    secure = False
    description = ("Spark's xxhash64 of (seed, stream, object, source) as uniforms in (0, 1) (reproducible and "
                   "independent of the partitioning; experiments only, not for production releases)")


def _uniform(seed: int, stream: str, *key: Column) -> Column:
    """Ours: the uniform of ``key`` in a named stream, u = (floor(h / 2^11) + 1/2) / 2^53 in (0, 1) with h =
    xxhash64(seed, stream, *key) (Spark's, under its seed 42): a function of the values alone, so the same for the
    same answers whatever their partitioning or order, and each (stream, key) a draw of its own."""
    h = F.xxhash64(F.lit(seed).cast("long"), F.lit(stream), *key)
    return (F.shiftrightunsigned(h, 11).cast("double") + 0.5) * 2.0**-53


def _laplace(u: Column, scale: float) -> Column:
    """Lap(scale) by inversion of a uniform u in (0, 1): -scale sign(u - 1/2) ln(1 - 2 |u - 1/2|)."""
    w = u - 0.5
    return -scale * F.signum(w) * F.log(1.0 - 2.0 * F.abs(w))


def _normal(u1: Column, u2: Column) -> Column:
    """N(0, 1) from two uniforms in (0, 1) (Box & Muller 1958): sqrt(-2 ln u1) cos(2 pi u2)."""
    return F.sqrt(-2.0 * F.log(u1)) * F.cos(2.0 * np.pi * u2)


@dataclass
class _Perturbation:
    """A checked perturbation request: the mechanism's key, (epsilon, delta), the seed, the mechanism's options."""

    key: str
    epsilon: float
    delta: float
    seed: int
    options: dict[str, Any]


def _request(perturb: str, epsilon: Any, delta: Any, seed: Any, options: dict[str, Any]) -> _Perturbation:
    """The request's checks before any Spark job: the local ones (ldp.perturb's, in its words), then Spark's own: an
    integer seed (the noise is a seeded stream; the secure sampler of seed=None runs locally only) and no given V."""
    key = perturbation_key(perturb, epsilon, delta)
    eps = check_epsilon(epsilon)
    dl = _check_delta(delta) if key == "gaussian" else 0.0
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**63:
        raise ArgumentError(
            f"perturb={perturb!r} on Spark needs seed= a non-negative integer, got {seed!r}: Spark draws its noise "
            "from a seeded hash stream (reproducible, for experiments only). For a production release (secure noise, "
            "seed=None) run crowddb.truth.discover locally")
    v_seed = options.get("v_seed")
    if options.get("V") is not None or (v_seed is not None and (isinstance(v_seed, bool) or not isinstance(
            v_seed, (int, np.integer)) or not 0 <= v_seed < 2**63)):
        raise ArgumentError("perturb='mf' on Spark draws V per object from v_seed= (a non-negative integer; the seed "
                            "without it): a given V, whose columns follow the local object order, or another v_seed "
                            "is not available on Spark; run crowddb.truth.discover for those")
    return _Perturbation(key, eps, dl, int(seed), dict(options))


def _keyed(df: DataFrame, src: DataFrame) -> DataFrame:
    """Rows (with a source code S) with their source's label SRC, from ``src`` (S, SRC): every hash reads the labels
    from this one table, whether the cell was answered or not."""
    return df.join(F.broadcast(src), S)


def _unanswered(coded: _Coded, m: int) -> DataFrame:
    """Every cell (O, S) of the m x n task vectors with no answer: per object (within its partition: no shuffle),
    the source codes 0..m-1 without those that answered it."""
    answered = coded.df.groupBy(O).agg(F.collect_list(S).alias("__a"))
    return answered.select(O, F.explode(F.array_except(F.sequence(F.lit(0), F.lit(m - 1)), "__a")).alias(S))


def _domain(coded: _Coded, domain: Any, bounds: Any, need_discrete: bool, mech: str):
    """ldp.numeric_domain with the answers' facts from Spark (one small job for each fact it asks)."""
    spark, df = coded.df.sparkSession, coded.df

    def outside(dom: np.ndarray) -> bool:
        return bool(df.join(F.broadcast(_params_table(spark, {V: dom})), V, "left_anti").limit(1).count())

    def beyond(lo: float, hi: float) -> bool:
        return bool(df.where((F.col(V) < lo) | (F.col(V) > hi)).limit(1).count())

    def data() -> tuple[float, float, bool]:
        r = df.agg(F.min(V), F.max(V), F.sum((F.col(V) % 1.0 != 0).cast("long"))).collect()[0]
        return float(r[0]), float(r[1]), not r[2]

    kind = "categorical" if coded.classes is not None else "numeric"
    return numeric_domain(kind, domain, bounds, need_discrete, mech, outside=outside, beyond=beyond, data=data)


def _lookup(df: DataFrame, code: Column, values: np.ndarray, out: str) -> DataFrame:
    """``df`` with ``out`` = values[code] (a broadcast join: the domain's values stay one copy on the driver)."""
    table = _params_table(df.sparkSession, {"__i": np.arange(len(values), dtype=np.int64), out: values})
    return df.withColumn("__i", code.cast("long")).join(F.broadcast(table), "__i").drop("__i")


_Perturbed = tuple[DataFrame, pa.Array, pa.Array | None, Callable[[int], dict[str, Any]]]


def _rr(coded: _Coded, src: DataFrame, p: _Perturbation, *, domain: Any = None) -> _Perturbed:
    """RR extended to NULL (Sun et al. Eq. 8) on every cell: one uniform u per cell, keep its value (NULL: code k)
    if u < e^eps / (k + e^eps), else outcome j = floor((u - keep) / other) of the k others (j, or j + 1 from the
    own code up), each with probability 1 / (k + e^eps). Local draws a uniform and an integer; ours one uniform."""
    m = len(coded.sources)
    if coded.classes is not None:
        seen = pd.Index(coded.classes.to_pylist())
        classes, prov = rr_classes(seen, domain)
        x = coded.df
        if domain is not None:  # the labels' codes in the domain given with them
            x = _lookup(x, F.col(V), classes.get_indexer(seen).astype(np.int64), "__x").drop(V)
            x = x.withColumnRenamed("__x", V)
        try:
            labels: pa.Array | None = pa.array(list(classes), type=coded.classes.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            raise ArgumentError(f"perturb='rr': the domain's labels must be of the value column's type "
                                f"({coded.classes.type}), got {domain!r}") from None
        values = None
    else:
        values, _, _, prov = _domain(coded, domain, None, True, "rr")
        codes = _params_table(coded.df.sparkSession, {V: values, "__x": np.arange(len(values), dtype=np.int64)})
        x = coded.df.join(F.broadcast(codes), V).drop(V).withColumnRenamed("__x", V)
        labels = None
    k = len(values) if values is not None else len(labels)
    keep, other = rr_probabilities(p.epsilon, k)
    cells = _keyed(x.select(O, S, F.col(V).cast("long").alias(V)).unionByName(
        _unanswered(coded, m).withColumn(V, F.lit(k).cast("long"))), src)
    u = _uniform(p.seed, "rr", O, SRC)
    j = F.least(F.floor((u - keep) / other), F.lit(k - 1))
    y = F.when(u < keep, F.col(V)).otherwise(F.when(j >= F.col(V), j + 1).otherwise(j))
    out = cells.select(O, S, y.alias(V)).where(F.col(V) < k)  # code k: NULL, not sent
    if values is not None:
        out = _lookup(out, F.col(V), values, "__v").drop(V).withColumnRenamed("__v", V)
    # the sources left with answers (locally: re-coded in discover), in their order
    t = out.groupBy(S).agg(F.count(F.lit(1)).alias("n")).toArrow()
    present = np.sort(t.column(S).to_numpy()).astype(np.int32)
    sources = coded.sources
    if len(present) < m:
        recode = _params_table(coded.df.sparkSession, {S: present, "__s": np.arange(len(present), dtype=np.int32)})
        out = out.join(F.broadcast(recode), S).drop(S).withColumnRenamed("__s", S)
        sources = sources.take(pa.array(present))
    return out, sources, labels, lambda sent: rr_report(p.epsilon, k, prov, _HashStream, sent)


def _lp(coded: _Coded, src: DataFrame, p: _Perturbation, *, domain: Any = None, bounds: Any = None,
        null_fill: str | float = "uniform", block_cells: int = 4_000_000) -> _Perturbed:
    """LP (Sun et al. Eq. 6-7): a NULL cell takes the fill g (a value uniform over Gamma, or the number given), then
    every cell gets Lap(|Gamma| / eps). ``block_cells`` bounds local memory and has no use here."""
    dom, lo, hi, prov = _domain(coded, domain, bounds, False, "laplace")
    sens = sensitivity_of(dom, lo, hi)
    fill = null_fill_value(null_fill)
    nulls = _keyed(_unanswered(coded, len(coded.sources)), src)
    uf = _uniform(p.seed, "laplace-fill", O, SRC)
    if fill is not None:
        nulls = nulls.withColumn(V, F.lit(fill))
    elif dom is None:
        nulls = nulls.withColumn(V, lo + (hi - lo) * uf)
    else:  # a uniform index of the domain's values (the least guards u * |Gamma| rounding up to |Gamma|)
        nulls = _lookup(nulls, F.least(F.floor(uf * len(dom)), F.lit(len(dom) - 1)), dom, V)
    cells = _keyed(coded.df, src).select(O, S, SRC, F.col(V).cast("double").alias(V)).unionByName(
        nulls.select(O, S, SRC, F.col(V).cast("double").alias(V)))
    out = cells.select(O, S, (F.col(V) + _laplace(_uniform(p.seed, "laplace", O, SRC), sens / p.epsilon)).alias(V))
    return out, coded.sources, None, lambda sent: laplace_report(p.epsilon, sens, prov, _HashStream, sent)


def _profile(key: int, d: int, x: DataFrame) -> DataFrame:
    """Ours: ``x`` with v0..v{d-1}, the column of MF's task profile matrix V (ldp.task_profile_matrix: d standard
    normals, divided by their 1-norm so that the column's 1-norm is 1, as Theorem 4 asks) of each row's object,
    drawn from the object's own uniforms under ``key`` (the same V for an object wherever its rows are)."""
    z = [f"__z{r}" for r in range(d)]
    x = x.select("*", *[_normal(_uniform(key, f"mf-v{r}a", O), _uniform(key, f"mf-v{r}b", O)).alias(c)
                        for r, c in enumerate(z)])
    norm = sum((F.abs(F.col(c)) for c in z[1:]), F.abs(F.col(z[0])))
    return x.select("*", *[(F.col(c) / norm).alias(f"v{r}") for r, c in enumerate(z)]).drop(*z)


def _mf(coded: _Coded, src: DataFrame, p: _Perturbation, *, d: int = 10, ridge: float = 0.1, domain: Any = None,
        bounds: Any = None, V: Any = None, v_seed: int | None = None, block_cells: int = 4_000_000) -> _Perturbed:
    """MF (Sun et al. Algorithm 2): per worker i, u_i solves (sum_{j in T_i} v_j v_j^T + ridge I) u = sum a_ij v_j
    - eta_i with eta_i ~ Lap(|Gamma| / eps)^d (Eq. 9-10, in closed form as locally), and the worker sends u_i V. The
    per-worker sums are one Spark aggregation (m x (d^2 + 2d) numbers reach the driver); the m x n cells u_i . v_j
    are a cross join of the objects with the broadcast u."""
    spark = coded.df.sparkSession
    dom, lo, hi, prov = _domain(coded, domain, bounds, False, "mf")
    sens = sensitivity_of(dom, lo, hi)
    check_mf_d(d)
    check_ridge(ridge)
    m, key = len(coded.sources), p.seed if v_seed is None else int(v_seed)
    scale = sens / p.epsilon
    x = _profile(key, d, _keyed(coded.df, src))
    x = x.select("*", *[_laplace(_uniform(p.seed, f"mf-eta{r}", SRC), scale).alias(f"e{r}") for r in range(d)])
    pairs = [(r, q) for r in range(d) for q in range(r, d)]
    t = x.groupBy(S).agg(*[F.sum(F.col(f"v{r}") * F.col(f"v{q}")).alias(f"g{r}_{q}") for r, q in pairs],
                         *[F.sum(F.col(_VALUE) * F.col(f"v{r}")).alias(f"b{r}") for r in range(d)],
                         *[F.max(f"e{r}").alias(f"e{r}") for r in range(d)]).toArrow()
    sid = t.column(S).to_numpy()
    gram = np.zeros((m, d, d))
    for r, q in pairs:
        gram[sid, r, q] = gram[sid, q, r] = t.column(f"g{r}_{q}").to_numpy()
    gram += ridge * np.eye(d)
    rhs, eta = np.zeros((m, d)), np.zeros((m, d))
    for r in range(d):
        rhs[sid, r], eta[sid, r] = t.column(f"b{r}").to_numpy(), t.column(f"e{r}").to_numpy()
    u = np.linalg.solve(gram, (rhs - eta)[:, :, None])[:, :, 0]  # Eq. (10): grad L_DP = 0, as locally
    table = _params_table(spark, {S: np.arange(m, dtype=np.int32)} | {f"u{r}": u[:, r] for r in range(d)})
    objects = _profile(key, d, coded.df.select(O).distinct())
    dot = sum((F.col(f"u{r}") * F.col(f"v{r}") for r in range(1, d)), F.col("u0") * F.col("v0"))
    out = objects.crossJoin(F.broadcast(table)).select(O, S, dot.alias(_VALUE))  # M(a_i) = u_i V
    return out, coded.sources, None, lambda sent: mf_report(p.epsilon, d, ridge, sens, prov, _HashStream, sent)


def _gaussian(coded: _Coded, src: DataFrame, p: _Perturbation, *, lambda1: float = 1.0, b: float = 3.0,
              eta: float = 0.95, sensitivity: float | None = None, c: float | None = None) -> _Perturbed:
    """Crowd-sensing Algorithm 2: source s draws its secret variance y_s ~ Exp(1 / lambda2) (by inversion of its
    uniform) and sends x + N(0, y_s) (Eq. 3) for each answer; unanswered cells are not sent."""
    if coded.classes is not None:
        raise ArgumentError("perturb='gaussian' needs numeric answers")
    rep = gaussian_report(p.epsilon, p.delta, _HashStream, lambda1=lambda1, b=b, eta=eta, sensitivity=sensitivity,
                          c=c)
    var = -rep["mean_noise_variance"] * F.log(_uniform(p.seed, "gaussian-variance", SRC))
    noise = F.sqrt(var) * _normal(_uniform(p.seed, "gaussian-a", O, SRC), _uniform(p.seed, "gaussian-b", O, SRC))
    out = _keyed(coded.df, src).select(O, S, (F.col(V) + noise).alias(V))
    return out, coded.sources, None, lambda sent: rep


_MECHANISMS: dict[str, Callable[..., _Perturbed]] = {"rr": _rr, "laplace": _lp, "mf": _mf, "gaussian": _gaussian}


def _perturb(coded: _Coded, p: _Perturbation) -> tuple[_Coded, Callable[[int], dict[str, Any]]]:
    """The coded answers perturbed (as ldp.perturb on the same answers: the same mechanism, its checks and report;
    the noise from ``_uniform``) and the report's maker (given the answers sent)."""
    src = _params_table(coded.df.sparkSession, {S: np.arange(len(coded.sources), dtype=np.int32),
                                                SRC: coded.sources})
    df, sources, classes, report = _MECHANISMS[p.key](coded, src, p, **p.options)
    class_type = coded.class_type if classes is not None else None
    return _Coded(df.select(O, S, V), sources, coded.source_type, classes, class_type, coded.object_type), report


# ---------------------------------------------------------------- entry points


@dataclass
class _Request:
    """truth_discover's checked arguments: the method, its model, the kind to code the answers as, and the
    perturbation (None: none)."""

    cls: type[TruthMethod]
    model: TruthMethod
    kind: str
    perturbation: _Perturbation | None


def _prepare(answers: DataFrame, object: str, source: str, value: str, method: str, order_by: str | None,
             perturb: str | None, epsilon: Any, delta: Any, seed: Any, perturb_options: Mapping[str, Any] | None,
             options: Mapping[str, Any], tol: float, max_iter: int) -> _Request:
    """discover()'s checks, in its order and with its messages, before the answers are read (but for the value
    kind of method='auto', read from at most MAX_AUTO_CATEGORIES + 1 distinct values); then Spark's own refusals."""
    if not isinstance(answers, DataFrame):
        raise ArgumentError(f"crowddb.spark.truth_discover expects a Spark DataFrame, got {type(answers).__name__}")
    types = {f.name: f.dataType for f in answers.schema.fields}
    _columns(pd.DataFrame(columns=list(types)), object, source, value)  # discover's UnknownColumnError
    if order_by is not None and order_by not in types:
        raise UnknownColumnError(f"unknown order_by column {order_by!r}; columns are {list(types)}")
    name = str(method).strip().lower()
    if name != "auto":
        resolve_method(name, "numeric")  # an unknown method fails before any Spark job
    numeric_noise = perturb is not None and PERTURBATIONS.get(str(perturb).lower()) in ("laplace", "mf", "gaussian")
    kind = "numeric" if name == "auto" and numeric_noise else _kind(answers, value, types[value], name)
    cls = resolve_method(name, kind)
    if perturb is None and (epsilon is not None or delta is not None):
        raise PrivacyError("epsilon/delta were given but no perturb mechanism; pass "
                           "perturb='laplace'|'rr'|'mf'|'gaussian'")
    p_names = perturbation_options(perturb) if perturb is not None else ()
    unknown = set(perturb_options or {}) - set(p_names)
    if unknown:
        raise ArgumentError(f"unknown perturb_options {sorted(unknown)} for perturb {perturb!r}"
                            + (f"; it takes {list(p_names)}" if perturb is not None else ""))
    method_kw, routed = _route_options(cls, perturb, p_names, options)
    model = cls(tol=tol, max_iter=max_iter, seed=seed, **method_kw)  # the local checks of tol, max_iter, options
    if cls.name not in _RUNNERS:
        raise ArgumentError(f"method {cls.name!r} is not available on Spark (it runs {', '.join(SPARK_METHODS)}); "
                            f"run it locally with crowddb.truth.discover(..., method={cls.name!r})")
    if getattr(model, "tie", "first") != "first":
        raise ArgumentError("tie='random' is not available on Spark (its draws follow the local object order); "
                            "use tie='first' or crowddb.truth.discover")
    request = None if perturb is None else _request(perturb, epsilon, delta, seed,
                                                    {**dict(perturb_options or {}), **routed})
    return _Request(cls, model, "numeric" if perturb is not None and kind == "numeric" else cls.kind, request)


def _coded_perturbed(answers: DataFrame, object: str, source: str, value: str, order_by: str | None, dropna: bool,
                     req: _Request) -> tuple[_Coded, _Coded, Callable[[int], dict[str, Any]]]:
    """(the coded answers, cached: the caller unpersists them; the same perturbed; the report's maker)."""
    coded = _coded(answers, object, source, value, order_by, req.kind, req.cls.name, dropna)
    coded.df = coded.df.cache()
    try:
        perturbed, report = _perturb(coded, req.perturbation)
        if (perturbed.classes is None) != (req.cls.kind == "numeric"):
            kind = "numeric" if perturbed.classes is None else "categorical"
            raise ArgumentError(f"method {req.cls.name!r} is {req.cls.kind} but perturb="
                                f"{req.perturbation.key!r} produces {kind} answers")
    except Exception:
        coded.df.unpersist()
        raise
    return coded, perturbed, report


def perturb_answers(answers: DataFrame, *, object: str = "object", source: str = "source", value: str = "value",
                    method: str = "auto", perturb: str, epsilon: float, delta: float | None = None, seed: int,
                    perturb_options: Mapping[str, Any] | None = None, order_by: str | None = None,
                    dropna: bool = False) -> tuple[DataFrame, dict[str, Any]]:
    """The answers as ``truth_discover(..., perturb=...)`` perturbs them before inferring (the same values for the
    same answers, ``method`` and seed: the method decides, as there, whether the values are labels or numbers): a
    Spark DataFrame (columns named ``object``, ``source``, ``value``, one row per answer sent, checkpointed in the
    executors) and the privacy report. Nothing is charged (as ``crowddb.truth.discover``)."""
    req = _prepare(answers, object, source, value, method, order_by, perturb, epsilon, delta, seed, perturb_options,
                   {}, 1e-6, 100)
    coded, perturbed, report = _coded_perturbed(answers, object, source, value, order_by, dropna, req)
    try:
        spark = answers.sparkSession
        out = perturbed.df.join(F.broadcast(_params_table(spark, {S: np.arange(len(perturbed.sources), dtype=np.int32),
                                                                  SRC: perturbed.sources})), S)
        if perturbed.classes is not None:
            out = _lookup(out, F.col(V), perturbed.classes, "__label").drop(V).withColumnRenamed("__label", V)
        out = out.select(F.col(O).alias(object), F.col(SRC).alias(source), F.col(V).alias(value)).localCheckpoint()
        return out, report(out.count())
    finally:
        coded.df.unpersist()


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
    method's options (DS's ``smoothing``/``diag_prior``, CRH's ``loss``) or the perturbation's, routed and checked as
    by discover(). ``order_by`` names a column giving the answers' order (the last answer of a pair wins); without it
    the DataFrame's partition order.

    Local DP: ``perturb`` in {'laplace', 'rr', 'mf', 'gaussian'} with ``epsilon`` (and ``delta`` for 'gaussian')
    perturbs each deduplicated answer (and, for 'rr' and 'laplace', each unanswered cell of a worker's task vector)
    in Spark, by ldp.py's mechanisms, before inferring, as discover() does; ``privacy`` is the report. The noise is
    ours: a seeded hash stream (``_uniform``), so ``seed`` must be an integer, and the perturbed values differ from
    the local ones (same distribution). ``perturb_answers`` gives the perturbed answers. Nothing is charged here (as
    discover()); ``TRUTH_DISCOVER(spark.<table>, ..., perturb := ...)`` through db.sql charges the budget.
    """
    options = {**method_kw, **dict(options or {})}
    req = _prepare(answers, object, source, value, method, order_by, perturb, epsilon, delta, seed, perturb_options,
                   options, tol, max_iter)
    cls, numeric = req.cls, req.cls.kind == "numeric"
    if req.perturbation is None:
        ans = _answers(_coded(answers, object, source, value, order_by, req.kind, cls.name, dropna), numeric)
        coded, privacy = None, None
    else:
        coded, perturbed, report = _coded_perturbed(answers, object, source, value, order_by, dropna, req)
        try:
            ans = _answers(perturbed, numeric)
        except Exception:
            coded.df.unpersist()
            raise
        privacy = report(ans.n_answers)
    try:
        if not ans.n_answers:  # ours: locally some methods return NULL truths here, others fail
            raise EmptyInputError(f"{cls.name}: perturb={perturb!r} left no answers (every answer and unanswered cell "
                                  "came out NULL); there is nothing to infer from: ask with a larger epsilon")
        objects, weights, n_iter, params = _RUNNERS[cls.name](ans, req.model)
        sources = _sources(ans, weights)
        if coded is not None and req.perturbation.key == "rr":  # objects left without answers: NULL, confidence 0
            every = coded.df.select(F.col(O).alias("object")).distinct()
            objects = (every.join(objects, "object", "left")
                       .select("object", "truth", F.coalesce("confidence", F.lit(0.0)).alias("confidence"))
                       .localCheckpoint())
    finally:
        ans.df.unpersist()
        if coded is not None:
            coded.df.unpersist()
    return SparkTruthResult(objects, sources, cls.name, int(n_iter), privacy, params)
