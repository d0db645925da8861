"""Local-DP perturbation on Spark (issue 27, item 2): ``crowddb.spark.truth_discover(..., perturb=...)`` and
``crowddb.spark.perturb_answers`` perturb each deduplicated answer in Spark, and TRUTH_DISCOVER(spark.<name>, ...,
perturb := ...) charges the crowddb database's privacy budget as the local TRUTH_DISCOVER does.

The Spark noise is a seeded hash stream (ours, crowddb/spark/truth.py ``_uniform``), not numpy's: the perturbed
values are not the local ones, so each mechanism is checked here against its definition, computed in this file
(Sun et al. Eq. 7 and 8, Algorithm 2; the crowd-sensing paper's exponential variance), with tolerances of a few
binomial / sampling standard deviations (the draws are seeded: every run sees the same numbers); the truths are
checked against the local method run on the perturbed answers (collected here, in the test only); the charge against
the local TRUTH_DISCOVER's on the same rows of a DuckDB table, and against counts made here."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from scipy import stats
from spark_session import spark  # noqa: F401  (the session fixture)

import crowddb
import crowddb.spark as cs
import crowddb.spark.sql as spark_sql
from crowddb.errors import ArgumentError, PrivacyBudgetError, PrivacyError
from crowddb.truth import discover

Z = 4.5  # tolerances: 4.5 standard deviations (a seeded draw; a wrong mechanism is off by far more)


def _answers(n_objects: int, n_sources: int, p_answer: float, seed: int) -> pd.DataFrame:
    """Labels c0..c2 and numbers (the truth + N(0, 1)) of ``n_sources`` workers, each answering each object with
    probability ``p_answer`` (at least one answer per object), right with its own probability; no repeated pair."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 3, n_objects)
    answered = rng.random((n_objects, n_sources)) < p_answer
    answered[np.arange(n_objects), rng.integers(0, n_sources, n_objects)] = True
    obj, src = np.nonzero(answered)
    right = rng.random(len(obj)) < np.linspace(0.9, 0.5, n_sources)[src]
    label = np.where(right, truth[obj], rng.integers(0, 3, len(obj)))
    return pd.DataFrame({"task": obj.astype(np.int64), "worker": [f"w{s}" for s in src],
                         "label": [f"c{v}" for v in label], "score": truth[obj] * 5.0 + rng.normal(0, 1, len(obj))})


def _frame(spark, df: pd.DataFrame):  # noqa: F811
    return spark.createDataFrame(pa.Table.from_pandas(df, preserve_index=False))


def _perturbed(sdf, value: str, **kw) -> tuple[pd.DataFrame, dict]:
    """perturb_answers' rows (collected: in the test only), sorted by (task, worker), and its report."""
    out, report = cs.perturb_answers(sdf, object="task", source="worker", value=value, **kw)
    return out.toArrow().to_pandas().sort_values(["task", "worker"]).reset_index(drop=True), report


ANSWERS = _answers(60, 6, 0.6, 27)


# ------------------------------------------------------------------------------- (a) independent of partitioning
@pytest.mark.parametrize(("perturb", "value", "kw"), [
    ("rr", "label", {}), ("laplace", "score", {}), ("gaussian", "score", {"delta": 1e-5}),
    ("mf", "score", {"perturb_options": {"d": 3}}),
])
def test_the_perturbation_does_not_depend_on_the_partitioning(spark, perturb, value, kw):  # noqa: F811
    sdf = _frame(spark, ANSWERS)
    one, rep1 = _perturbed(sdf.repartition(1), value, perturb=perturb, epsilon=1.0, seed=5, **kw)
    seven, rep7 = _perturbed(sdf.repartition(7), value, perturb=perturb, epsilon=1.0, seed=5, **kw)
    assert rep1 == rep7 and len(one) == len(seven) > 0
    assert one[["task", "worker"]].equals(seven[["task", "worker"]])
    if perturb == "mf":  # u_i solves a system of sums added in Spark's order: equal up to rounding
        np.testing.assert_allclose(one[value], seven[value], rtol=1e-9, atol=1e-9)
    else:  # every other draw is a function of (seed, object, source) alone: bit for bit
        assert one[value].equals(seven[value])
    other, _ = _perturbed(sdf, value, perturb=perturb, epsilon=1.0, seed=6, **kw)
    assert not (other[["task", "worker", value]].equals(one[["task", "worker", value]]))  # the seed matters


@pytest.mark.parametrize(("perturb", "value", "method"), [("rr", "label", "mv"), ("laplace", "score", "mean")])
def test_the_truths_do_not_depend_on_the_partitioning(spark, perturb, value, method):  # noqa: F811
    sdf = _frame(spark, ANSWERS)
    got = []
    for parts in (1, 7):
        res = cs.truth_discover(sdf.repartition(parts), object="task", source="worker", value=value, method=method,
                                perturb=perturb, epsilon=1.0, seed=5)
        got.append((res.objects.toArrow().to_pandas().sort_values("object").reset_index(drop=True),
                    res.sources.toArrow().to_pandas().sort_values("source").reset_index(drop=True), res.privacy))
    (o1, s1, p1), (o7, s7, p7) = got
    assert p1 == p7 and len(o1) == 60
    assert o1.object.equals(o7.object) and o1.truth.isna().equals(o7.truth.isna())
    if value == "label":
        assert o1.truth.equals(o7.truth)
    np.testing.assert_allclose(o1.truth.astype(float) if value == "score" else o1.confidence,
                               o7.truth.astype(float) if value == "score" else o7.confidence, rtol=1e-12)
    assert s1.source.equals(s7.source)
    np.testing.assert_allclose(s1.weight, s7.weight, rtol=1e-12)


# ------------------------------------------------------------------------ (b) each mechanism against its definition
def test_randomized_response_keeps_flips_and_fills_as_eq_8(spark):  # noqa: F811
    """RR extended to NULL over k = 3 labels: an answer is kept w.p. e^eps / (k + e^eps) and becomes each of its k
    other outcomes (2 labels, NULL) w.p. 1 / (k + e^eps); an unanswered cell is sent w.p. k / (k + e^eps), as a
    uniformly drawn label."""
    a = _answers(2000, 6, 0.6, 1)
    eps, k = 1.0, 3
    got, report = _perturbed(_frame(spark, a), "label", perturb="rr", epsilon=eps, seed=11)
    keep, other = math.exp(eps) / (k + math.exp(eps)), 1 / (k + math.exp(eps))
    assert report["keep_probability"] == pytest.approx(keep, rel=1e-15)
    assert report["other_probability"] == pytest.approx(other, rel=1e-15)
    both = a.merge(got, on=["task", "worker"], how="outer", suffixes=("", "_sent"), indicator=True)
    answered = both[both._merge != "right_only"]
    n = len(answered)

    def close(count: int, trials: int, p: float) -> None:
        assert abs(count - trials * p) <= Z * math.sqrt(trials * p * (1 - p)), (count, trials, p)

    close(int((answered.label_sent == answered.label).sum()), n, keep)
    close(int(answered.label_sent.isna().sum()), n, other)  # the answer turned into NULL: not sent
    changed = answered[answered.label_sent.notna() & (answered.label_sent != answered.label)]
    close(len(changed), n, 2 * other)
    unanswered = both[both._merge == "right_only"]
    n_null = 2000 * 6 - n
    close(len(unanswered), n_null, k * other)
    counts = unanswered.label_sent.value_counts().reindex(["c0", "c1", "c2"], fill_value=0).to_numpy()
    assert stats.chisquare(counts).pvalue > 1e-4  # uniform over the k labels
    assert report["answers_sent"] == len(got) == int(both.label_sent.notna().sum())


def test_laplace_noise_has_the_scale_of_eq_7(spark):  # noqa: F811
    """LP with bounds (0, 15): |Gamma| is the range, 15, so every cell gets Lap(15 / eps); unanswered cells are
    filled with null_fill first. The noise (sent - answer, sent - fill) is checked against Laplace(0, 15 / eps)."""
    a = _answers(1000, 10, 0.5, 2)
    a["score"] = a.score.clip(0, 15)
    eps, fill = 2.0, 7.5
    got, report = _perturbed(_frame(spark, a), "score", perturb="laplace", epsilon=eps, seed=12,
                             perturb_options={"bounds": (0.0, 15.0), "null_fill": fill})
    scale = 15.0 / eps
    assert report["scale"] == scale and report["cells"] == 1000 * 10 == len(got)
    both = got.merge(a, on=["task", "worker"], how="left", suffixes=("", "_answer"))
    noise = (both.score - both.score_answer.fillna(fill)).to_numpy()
    n = len(noise)
    assert abs(noise.mean()) <= Z * math.sqrt(2) * scale / math.sqrt(n)  # Var Lap(b) = 2 b^2
    assert abs(np.abs(noise).mean() - scale) <= Z * scale / math.sqrt(n)  # E|Lap(b)| = b, Var |Lap(b)| = b^2
    assert stats.kstest(noise, "laplace", args=(0.0, scale)).pvalue > 1e-3
    answered = both.score_answer.notna().to_numpy()
    assert stats.ks_2samp(noise[answered], noise[~answered]).pvalue > 1e-3  # the same noise, answered or not


def test_gaussian_noise_is_an_exponential_mixture_of_normals(spark):  # noqa: F811
    """Crowd-sensing Algorithm 2: source s draws y_s ~ Exp(mean 1 / lambda2) once and adds N(0, y_s) to each answer.
    With one answer per source the noises are independent draws of that mixture, which is Laplace(0, sqrt(mean / 2))
    (a normal whose variance is exponential); the calibration is the local report's (Theorem 4.8)."""
    n = 10_000
    a = pd.DataFrame({"task": np.arange(n, dtype=np.int64) % 1000, "worker": [f"w{i}" for i in range(n)],
                      "score": np.random.default_rng(3).normal(10, 2, n)})
    got, report = _perturbed(_frame(spark, a), "score", perturb="gaussian", epsilon=1.0, delta=1e-5, seed=13)
    local = discover(a, "task", "worker", "score", method="mean", perturb="gaussian", epsilon=1.0, delta=1e-5,
                     seed=13).privacy
    mean = local["mean_noise_variance"]
    assert report["mean_noise_variance"] == mean and report["sensitivity"] == local["sensitivity"]
    noise = got.merge(a, on=["task", "worker"], suffixes=("", "_answer")).eval("score - score_answer").to_numpy()
    assert len(noise) == n
    assert abs((noise**2).mean() / mean - 1) <= Z * math.sqrt(5 / n)  # E N(0, y)^2 = E y; Var = 6 m^2 - m^2
    assert stats.kstest(noise, "laplace", args=(0.0, math.sqrt(mean / 2))).pvalue > 1e-3


def test_matrix_factorization_sends_the_projection_on_the_task_profiles(spark):  # noqa: F811
    """MF (Algorithm 2): a worker who answered every task sends u V with u = argmin |a - u V|^2 + 2 u.eta: with a
    negligible eta (epsilon 1e9) and no ridge, the projection of its answers on the row space of V, the same d-dim
    space for every worker (the m x n matrix sent has rank d). The space is read from the matrix sent itself."""
    d, n_obj, m = 3, 40, 8
    a = _answers(n_obj, m, 1.0, 4)
    got, report = _perturbed(_frame(spark, a), "score", perturb="mf", epsilon=1e9, seed=14,
                             perturb_options={"d": d, "ridge": 0.0})
    assert report["d"] == d and report["cells"] == n_obj * m == len(got)
    sent = got.pivot(index="worker", columns="task", values="score").to_numpy()
    answers = a.pivot(index="worker", columns="task", values="score").to_numpy()
    sv = np.linalg.svd(sent, compute_uv=False)
    assert sv[d - 1] > 1e-3 * sv[0] and sv[d] < 1e-9 * sv[0]  # rank d
    basis = np.linalg.svd(sent, full_matrices=False)[2][:d]  # orthonormal rows spanning V's row space
    np.testing.assert_allclose(sent, answers @ basis.T @ basis, rtol=0, atol=1e-6)


# ---------------------------------------------------------------- (c) the truths: the local method, perturbed answers
@pytest.mark.parametrize(("perturb", "value", "method", "kw"), [
    ("rr", "label", "mv", {}),
    ("rr", "label", "ds", {"max_iter": 5}),
    ("laplace", "score", "crh", {"max_iter": 5}),
    ("gaussian", "score", "median", {"delta": 1e-5}),
    ("mf", "score", "mean", {"perturb_options": {"d": 4}}),
])
def test_the_truths_are_the_local_method_on_the_perturbed_answers(spark, perturb, value, method, kw):  # noqa: F811
    sdf = _frame(spark, ANSWERS)
    options = {k: v for k, v in kw.items() if k != "max_iter"}
    with pytest.MonkeyPatch.context() as mp:  # no answer reaches the driver
        mp.setattr("pyspark.sql.DataFrame.toPandas", lambda self: pytest.fail("toPandas inside truth_discover"))
        res = cs.truth_discover(sdf, object="task", source="worker", value=value, method=method, perturb=perturb,
                                epsilon=1.5, seed=21, **kw)
    sent, report = _perturbed(sdf, value, method=method, perturb=perturb, epsilon=1.5, seed=21, **options)
    assert res.privacy == report
    local = discover(sent, "task", "worker", value, method=method, max_iter=kw.get("max_iter", 100))
    assert res.method == local.method and res.n_iter == local.n_iter
    objects = res.objects.toArrow().to_pandas().set_index("object").sort_index()
    assert list(objects.index) == list(range(60))  # every object of the input
    mine = local.objects.set_index("object").sort_index()
    lost = objects.index.difference(mine.index)  # objects RR left without an answer: NULL, confidence 0
    assert objects.loc[lost, "truth"].isna().all() and (objects.loc[lost, "confidence"] == 0).all()
    kept = objects.loc[mine.index]
    if value == "label":
        assert (kept.truth == mine.truth).all()
    else:
        np.testing.assert_allclose(kept.truth.astype(float), mine.truth.astype(float), rtol=1e-9)
    np.testing.assert_allclose(kept.confidence, mine.confidence, rtol=0, atol=1e-9)
    sources = res.sources.toArrow().to_pandas().set_index("source").sort_index()
    theirs = local.sources.set_index("source").sort_index()
    assert list(sources.index) == list(theirs.index)
    np.testing.assert_allclose(sources.weight, theirs.weight, rtol=1e-9, atol=1e-12)
    # the privacy parameters beside the result, as discover() reports them on the same answers
    here = discover(ANSWERS, "task", "worker", value, method=method, perturb=perturb, epsilon=1.5, seed=21,
                    max_iter=1, **options).privacy
    assert set(report) == set(here)
    random = {"sampler", "answers_sent", "production_safe"}
    assert {k: v for k, v in report.items() if k not in random} == {k: v for k, v in here.items() if k not in random}
    assert report["production_safe"] is False and "xxhash64" in report["sampler"]


def test_refusals_before_any_spark_job(spark):  # noqa: F811
    sdf = _frame(spark, ANSWERS)
    kw = {"object": "task", "source": "worker", "value": "score"}
    with pytest.raises(ArgumentError, match=r"needs seed= a non-negative integer, got None.*crowddb\.truth\.discover"):
        cs.truth_discover(sdf, **kw, perturb="laplace", epsilon=1.0)
    with pytest.raises(PrivacyError, match="epsilon/delta were given but no perturb mechanism"):
        cs.truth_discover(sdf, **kw, epsilon=1.0, seed=1)
    with pytest.raises(PrivacyError, match="is pure epsilon-LDP; delta must be omitted or 0"):
        cs.truth_discover(sdf, **kw, perturb="rr", epsilon=1.0, delta=1e-5, seed=1)
    with pytest.raises(PrivacyError, match="needs delta"):
        cs.truth_discover(sdf, **kw, perturb="gaussian", epsilon=1.0, seed=1)
    with pytest.raises(ArgumentError, match="a given V.*is not available on Spark"):
        cs.truth_discover(sdf, **kw, perturb="mf", epsilon=1.0, seed=1, perturb_options={"V": np.zeros((2, 60))})
    with pytest.raises(ArgumentError, match="unknown perturb_options"):
        cs.perturb_answers(sdf, **kw, perturb="rr", epsilon=1.0, seed=1, perturb_options={"d": 3})


# ------------------------------------------------------------------------- (d) through SQL: the budget, as locally
def _ledger(db) -> list[tuple]:
    return db.con.execute("SELECT act, unit, unit_id, release_id, epsilon, delta, rho FROM crowddb_privacy_ledger "
                          "ORDER BY seq").fetchall()


def _catalog(db) -> dict[str, list]:
    """Every crowddb_* table's rows (as text): the database's state as crowddb keeps it (empty tables left out: the
    Spark ledger's are made, empty, by the first statement on Spark)."""
    names = [r[0] for r in db.con.execute("SELECT table_name FROM duckdb_tables() WHERE table_name LIKE 'crowddb_%' "
                                          "ORDER BY 1").fetchall()]
    rows = {n: sorted(map(str, db.con.execute(f"SELECT * FROM {n}").fetchall())) for n in names}
    return {n: r for n, r in rows.items() if r}


@pytest.fixture
def pair(spark, tmp_path):  # noqa: F811
    """(a database on Spark with the temp view ``answers``, a local one with the same rows as its table ``answers``;
    one (object, source) pair answered twice: both charge every row)."""
    rows = pd.concat([ANSWERS, ANSWERS.iloc[[0]].assign(label="c2")], ignore_index=True)
    view = _frame(spark, rows).cache()
    view.createOrReplaceTempView("answers")
    with (crowddb.connect(str(tmp_path / "spark.duckdb"), spark=spark, progress=False) as on_spark,
          crowddb.connect(str(tmp_path / "local.duckdb"), progress=False) as local):
        local.load_frame("answers", rows)
        yield on_spark, local, rows
    spark.catalog.dropTempView("answers")
    view.unpersist()


def _sql(table: str, perturb: str, epsilon: float, extra: str = "") -> str:
    value, method = ("label", "mv") if perturb == "rr" else ("score", "mean")
    return (f"SELECT * FROM TRUTH_DISCOVER({table}, object := 'task', source := 'worker', value := '{value}', "
            f"method := '{method}', perturb := '{perturb}', epsilon := {epsilon}{extra}, seed := 1)")


@pytest.mark.parametrize(("perturb", "extra"), [("rr", ""), ("gaussian", ", delta := 1e-6")])
def test_sql_charges_the_budget_as_the_local_truth_discover(pair, perturb, extra):
    on_spark, local, rows = pair
    on_spark.set_privacy_budget("spark:answers", epsilon=40.0, delta=1e-3)
    local.set_privacy_budget("answers", epsilon=40.0, delta=1e-3)
    got = on_spark.sql(_sql("spark.answers", perturb, 0.5, extra)).toArrow().to_pandas()
    theirs = local.sql(_sql("answers", perturb, 0.5, extra)).df()
    assert list(got.columns) == list(theirs.columns) == ["object", "truth", "confidence", "epsilon", "delta"]
    assert len(got) == len(theirs) == 60
    assert set(got.epsilon) == set(theirs.epsilon) == {0.5}
    assert set(got.delta) == set(theirs.delta) == {1e-6 if extra else 0.0}
    # the ledger: the same acts, sources, amounts, in the same order; the amounts counted here (every row)
    assert _ledger(on_spark) == _ledger(local)
    per_source = rows.worker.value_counts(sort=False)
    charges = [r for r in _ledger(on_spark) if r[0] == "charge"]
    assert [(r[2], r[4], r[5]) for r in charges] == [(w, n * 0.5, n * (1e-6 if extra else 0.0))
                                                    for w, n in per_source.items()]
    report, expect = on_spark.privacy_report("spark:answers"), local.privacy_report("answers")
    same = [c for c in report.columns if c != "created_at"]
    pd.testing.assert_frame_equal(report[same], expect[same])
    assert report.epsilon_spent.tolist() == [0.5 * per_source.max()]
    query = "SELECT kind, method, k, epsilon, delta, params FROM crowddb_releases ORDER BY release_id"
    assert on_spark.con.execute(query).fetchall() == local.con.execute(query).fetchall()


def test_sql_refuses_over_budget_before_running_and_charges_nothing(pair, monkeypatch):
    on_spark, local, rows = pair
    most = int(rows.worker.value_counts().max())  # the busiest source's answers
    for db, name in ((on_spark, "spark:answers"), (local, "answers")):
        db.set_privacy_budget(name, epsilon=1.5 * most)
    on_spark.sql(_sql("spark.answers", "rr", 1.0)).count()  # spends `most` of 1.5 `most`
    local.sql(_sql("answers", "rr", 1.0)).fetchall()
    ran = []
    monkeypatch.setattr(spark_sql, "truth_discover", lambda *a, **k: ran.append(1))
    before = _catalog(on_spark)
    with pytest.raises(PrivacyBudgetError) as refused:
        on_spark.sql(_sql("spark.answers", "rr", 0.75))  # the busiest would spend 1.75 `most`
    assert ran == [] and _catalog(on_spark) == before  # nothing ran, nothing charged or recorded
    with pytest.raises(PrivacyBudgetError) as refused_locally:
        local.sql(_sql("answers", "rr", 0.75)).fetchall()
    assert str(refused.value) == str(refused_locally.value).replace("'answers'", "'spark:answers'")
    assert "db.reset_privacy_budget('spark:answers')" in str(refused.value)
    on_spark.reset_privacy_budget("spark:answers")  # the message's way out works: the next call fits again
    monkeypatch.undo()
    on_spark.sql(_sql("spark.answers", "rr", 0.75)).count()
    assert [r[3] for r in _ledger(on_spark) if r[0] == "charge"][-1] == 2


def test_sql_refuses_bad_privacy_arguments_as_locally(pair):
    on_spark, local, _ = pair
    on_spark.set_privacy_budget("spark:answers", epsilon=10.0)
    before = _catalog(on_spark)
    no_perturb = ("SELECT * FROM TRUTH_DISCOVER({}, object := 'task', source := 'worker', value := 'label', "
                  "epsilon := 1)")
    with pytest.raises(PrivacyError) as refused:
        on_spark.sql(no_perturb.format("spark.answers"))
    with pytest.raises(PrivacyError) as refused_locally:
        local.sql(no_perturb.format("answers")).fetchall()
    assert str(refused.value) == str(refused_locally.value) == (
        "TRUTH_DISCOVER: epsilon/delta were given but no perturb mechanism; pass "
        "perturb := 'laplace'|'rr'|'mf'|'gaussian'")
    with pytest.raises(ArgumentError, match=r"needs seed := <a non-negative integer>"):
        on_spark.sql(_sql("spark.answers", "rr", 1.0).replace(", seed := 1", ""))
    assert _catalog(on_spark) == before
    with pytest.raises(ArgumentError, match=r"spark\.nope: no such table"):
        on_spark.set_privacy_budget("spark:nope", epsilon=1.0)
    on_spark.con.execute('CREATE TABLE "spark:answers" (x INTEGER)')
    with pytest.raises(PrivacyBudgetError, match="has the budget key of the Spark table spark.answers"):
        on_spark.sql(_sql("spark.answers", "rr", 1.0))
    assert _catalog(on_spark) == before
