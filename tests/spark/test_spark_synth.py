"""PrisCrowd synthesis on Spark (crowddb.spark.private_synth) against the local algorithm on the same claims.

The Spark release is ``synthesize(..., streams='object')``'s: each object from its own stream keyed by (seed, object),
the global weights of Eq. (2) summed exactly per source. Both run the same numpy code on the same arrays in the same
order (the claims of an object by value, then source text), so the comparison is exact equality (rows, report,
weights, trace, summary), not a tolerance. Claims: a seeded synthetic set (some objects below k, one whose claims
are all equal, values on a 0.1 grid) and a slice of the shared Population claims (the first 120 objects of the
file, as bench/synth.py reads it)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import uuid

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import shared_data
from spark_session import spark  # noqa: F401  (the session fixture)

from crowddb.errors import ArgumentError, EmptyInputError, UnknownColumnError
from crowddb.spark import private_synth
from crowddb.synth import api, synthesize
from crowddb.synth.kde import decimal_resolution, gram, make_batches
from crowddb.synth.weights import global_weights

POP = shared_data.CROWD / "population" / "population-new-new.txt"


def _claims() -> pd.DataFrame:
    """15 objects with 1..13 claims from 8 sources on a 0.1 grid (seeded); object o14's claims are all equal."""
    rng = np.random.default_rng(27)
    sizes = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 4, 6])
    obj = np.repeat([f"o{i}" for i in range(sizes.size)], sizes)
    src = np.array([f"s{j}" for j in rng.integers(0, 8, obj.size)])
    val = np.round(rng.normal(50.0, 5.0, obj.size), 1)
    val[obj == "o14"] = 42.5
    val[rng.random(obj.size) < 0.1] += 30.0  # a few outlying claims
    return pd.DataFrame({"object": obj, "source": src, "value": val})


@pytest.fixture(scope="module")
def frames(spark):  # noqa: F811
    """{'synthetic': (pandas claims, Spark claims), 'population': (...)} (the Population slice when the data is there)."""
    out = {"synthetic": _claims()}
    if POP.exists():
        c = pd.read_csv(POP, sep="\t", header=None, encoding="latin-1", quoting=3,
                        names=["object", "source", "value", "year"])
        first = pd.unique(c["object"])[:120]
        out["population"] = c.loc[c["object"].isin(first), ["object", "source", "value"]].reset_index(drop=True)
    made = {name: (pdf, spark.createDataFrame(pa.Table.from_pandas(pdf, preserve_index=False)).cache())
            for name, pdf in out.items()}
    yield made
    for _, sdf in made.values():
        sdf.unpersist()


@pytest.fixture(scope="module")
def synthetic(frames):
    """The synthetic claims' release on Spark and locally (m=6, k=3, combined weights, seed 4)."""
    pdf, sdf = frames["synthetic"]
    return private_synth(sdf, m=6, k=3, seed=4, max_attempts=300), _local(pdf, m=6, k=3, seed=4, max_attempts=300)


def _local(pdf: pd.DataFrame, **kw):
    return synthesize(pdf["object"], pdf["source"], pdf["value"], streams="object", **kw)


def _sorted(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    return frame.sort_values(by, kind="stable").reset_index(drop=True)


def _same(result, local, pdf: pd.DataFrame) -> None:
    """The Spark result equals the local one exactly: report, rows in draw order, trace, weights, summary."""
    report = _sorted(result.report.toPandas(), ["object"])
    pd.testing.assert_frame_equal(report, _sorted(local.report, ["object"]), check_exact=True)
    rows = _sorted(result.rows.toPandas(), ["object", "draw"])
    want = local.rows.assign(draw=local.rows.groupby("object").cumcount())
    pd.testing.assert_frame_equal(rows, _sorted(want, ["object", "draw"])[["object", "draw", "value"]],
                                  check_exact=True, check_dtype=False)
    if not len(local.trace):  # 'basic': no candidates, no weights, as locally
        assert result.trace.count() == 0 and result.weights.count() == 0 and not len(local.weights)
    else:
        trace = _sorted(result.trace.toPandas(), ["object", "draw"])
        want = local.trace.assign(draw=local.trace.groupby("object").cumcount())
        cols = ["object", "draw", "value", "bucket", "k_tilde", "k_prime", "bandwidth"]
        pd.testing.assert_frame_equal(trace, _sorted(want, ["object", "draw"])[cols], check_exact=True,
                                      check_dtype=False)
        # each claim's c: the local claim index names its source and value
        w = local.weights.assign(source=pdf["source"].to_numpy()[local.weights["claim"]],
                                 value=pdf["value"].to_numpy(float)[local.weights["claim"]])
        by = ["object", "value", "source", "c"]
        pd.testing.assert_frame_equal(_sorted(result.weights.toPandas()[by], by), _sorted(w[by], by),
                                      check_exact=True)
    assert _summary(result.summary) == _summary(local.summary)


def _summary(summary: dict) -> str:
    """A summary without its timings, as text (NaN, e.g. 'basic''s advanced composition, equal to itself)."""
    return json.dumps({k: v for k, v in summary.items() if k != "seconds"}, sort_keys=True, default=str)


# ------------------------------------------------------------------------------------------ (a) Spark = local
def test_synthetic_claims_equal_the_local_per_object_release(spark, frames, synthetic):  # noqa: F811
    pdf = frames["synthetic"][0]
    result, local = synthetic
    _same(result, local, pdf)
    s = result.summary
    assert s["parameters"]["cell"] == 0.1 == decimal_resolution(pdf["value"].to_numpy())
    assert s["parameters"]["streams"] == "object" and s["objects"] == 15
    report = _sorted(result.report.toPandas(), ["object"]).set_index("object")
    # o0 and o1 have fewer than k = 3 claims: withheld, no candidate drawn; o14's claims are all equal
    assert list(report.loc[["o0", "o1"], "tried"]) == [0, 0]
    assert report.loc["o1", "reason"] == "fewer than k=3 claims; withheld"
    assert "all claims equal: bandwidth = cell width" in report.loc["o14", "reason"]
    assert report.loc["o14", "bandwidth"] == 0.1
    assert s["objects_withheld"] == 2 and s["rows"] == int(report["rows"].sum()) > 0
    # the default 'shared' stream draws other rows from the same seed (same objects, same report counts of claims)
    shared = synthesize(pdf["object"], pdf["source"], pdf["value"], m=6, k=3, seed=4, max_attempts=300)
    assert not shared.rows.equals(local.rows)
    assert list(_sorted(shared.report, ["object"])["n_claims"]) == list(report["n_claims"])


def test_population_slice_equals_the_local_per_object_release(spark, frames):  # noqa: F811
    if "population" not in frames:
        pytest.skip("the shared Population claims are not available")
    pdf, sdf = frames["population"]
    result = private_synth(sdf, seed=7)
    local = _local(pdf, seed=7)
    _same(result, local, pdf)
    assert result.summary["parameters"]["cell"] == 1.0
    assert result.summary["objects"] == 120 and result.summary["objects_released"] > 0


def test_basic_equals_local(spark, frames):  # noqa: F811
    pdf, sdf = frames["synthetic"]
    result = private_synth(sdf, method="basic", epsilon=0.5, sensitivity=20.0, seed=11)
    _same(result, _local(pdf, method="basic", epsilon=0.5, sensitivity=20.0, seed=11), pdf)
    rows = result.rows.toPandas()
    assert len(rows) == len(pdf) and result.summary["epsilon_release"] == 0.5
    assert (rows.groupby("object")["value"].apply(lambda v: bool(np.all(np.diff(v) >= 0)))).all()  # sorted


# ------------------------------------------------------------------------------------------ (b) partitioning
def test_the_release_does_not_depend_on_the_partitioning(spark, frames):  # noqa: F811
    pdf, sdf = frames["synthetic"]
    one = private_synth(sdf.repartition(1), m=5, k=3, weights="global", seed=9, max_attempts=200)
    seven = private_synth(sdf.repartition(7), m=5, k=3, weights="global", seed=9, max_attempts=200)
    _same(seven, _local(pdf, m=5, k=3, weights="global", seed=9, max_attempts=200), pdf)
    for part in ("rows", "report", "weights", "trace"):
        a, b = getattr(one, part).toPandas(), getattr(seven, part).toPandas()
        by = [c for c in ("object", "draw", "value", "source") if c in a.columns]
        pd.testing.assert_frame_equal(_sorted(a, by), _sorted(b, by), check_exact=True)
    assert _summary(one.summary) == _summary(seven.summary)


# ------------------------------------------------------------------------------------------ (c) privacy report
@pytest.mark.parametrize("options", [{"small_objects": "withhold"}, {"small_objects": "release"},
                                     {"epsilon": 4.5}, {"t": 2, "weight_floor": 0.2}])
def test_privacy_report_equals_local_and_theorem2(spark, frames, options):  # noqa: F811
    pdf, sdf = frames["synthetic"]
    kw = {"m": 3, "k": 4, "weights": "uniform", "seed": 5, "max_attempts": 60, **options}
    result, local = private_synth(sdf, **kw), _local(pdf, **kw)
    cols = ["object", "n_claims", "released", "tried", "epsilon", "delta", "guarantee_holds", "reason", "t",
            "epsilon_object", "delta_object", "composition"]
    report = _sorted(result.report.toPandas(), ["object"])
    pd.testing.assert_frame_equal(report[cols], _sorted(local.report, ["object"])[cols], check_exact=True)
    for key in ("epsilon", "delta", "epsilon_release", "delta_release", "epsilon_release_max_attempts",
                "delta_release_max_attempts", "objects_withheld", "guarantee"):
        assert result.summary[key] == local.summary[key]
    small = report["n_claims"] < 4
    if options.get("small_objects") == "release":  # run, without a guarantee
        assert (report.loc[small, "tried"] > 0).all() and not report.loc[small, "guarantee_holds"].any()
    else:
        assert (report.loc[small, "tried"] == 0).all() and (report.loc[small, "rows"] == 0).all()
    # Theorem 2 from the Spark weights themselves: uniform c = 1/n, floored weights equal: max c / min c = 1
    big = report[~small & (report["t"] >= 1)]
    t = big["t"].to_numpy(float)
    eps = 1.0 + np.log1p(4.0 / t * 1.0)
    assert np.allclose(big["epsilon"], eps, rtol=1e-15, atol=0)
    assert np.allclose(big["delta"], big["n_claims"] * (1.0 / big["n_claims"]) * np.exp(-1.0 * (4 - t)),
                       rtol=1e-15, atol=0)
    if "epsilon" in options:  # the target picks the least t with epsilon(t) <= 4.5: t = 1 already (1 + log 5)
        assert (big["t"] == 1).all()


def test_theorem2_from_the_combined_weights(spark, synthetic):  # noqa: F811
    result = synthetic[0]
    w = result.weights.toPandas()
    report = result.report.toPandas().set_index("object")
    for obj, c in w.groupby("object")["c"]:
        if report.loc[obj, "n_claims"] < 3:
            continue
        n, ratio = len(c), c.max() / c.min()
        assert c.sum() == pytest.approx(1.0, rel=1e-12) and ratio <= 1 / 0.1 + 1e-9  # the weight floor
        assert report.loc[obj, "epsilon"] == pytest.approx(1.0 + math.log1p(4.0 * ratio), rel=1e-14)
        assert report.loc[obj, "delta"] == pytest.approx(n * c.max() * math.exp(-2.0), rel=1e-14)


# ------------------------------------------------------------------------------------------ the rules themselves
def test_object_stream_is_the_documented_rule():
    digest = hashlib.sha256(b"o3").digest()[:16]
    key = tuple(int.from_bytes(digest[i:i + 4], "little") for i in range(0, 16, 4))
    want = np.random.Generator(np.random.PCG64(np.random.SeedSequence(7, spawn_key=key))).random(5)
    assert np.array_equal(api.object_stream(7, "o3").random(5), want)
    assert np.array_equal(api.object_stream(7, 3).random(2), api.object_stream(7, "3").random(2))  # str(label)
    assert not np.array_equal(api.object_stream(8, "o3").random(5), want)


def test_exact_global_weights_agree_with_the_batched_ones():
    pdf = _claims()
    obj, src, x, labels, n_src = api._arrays(pdf["object"], pdf["source"], pdf["value"])
    spec = dataclasses.replace(api.spec_of(), cell=0.1)
    batches = make_batches(obj, src, x)
    grams = [gram(b.X, b.mask, api._bandwidths(b, None, labels, 0.1)) for b in batches]
    batched = global_weights(batches, grams, n_src)
    order = np.lexsort((x, obj))
    cuts = np.cumsum(np.bincount(obj))[:-1]
    xs, ss = np.split(x[order], cuts), np.split(src[order], cuts)

    def losses(g):
        d = [api.object_losses(xs[i], g[ss[i]], labels[i], spec) for i in range(labels.size)]
        return api.source_sums(src[order], np.concatenate(d), n_src)
    exact, iterations = api.exact_global_weights(losses, np.bincount(src), "sum")
    assert 1 < iterations < api.GLOBAL_MAX_ITER
    np.testing.assert_allclose(exact, batched, rtol=1e-9, atol=0)


# ------------------------------------------------------------------------------------------ (d) bad input
def _jobs_of(spark, call) -> list[int]:  # noqa: F811
    """The Spark jobs ``call`` started (it is expected to raise)."""
    sc = spark.sparkContext
    group = f"synth-{uuid.uuid4().hex}"
    sc.setJobGroup(group, "bad input")
    try:
        call()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return list(sc.statusTracker().getJobIdsForGroup(group))


@pytest.mark.parametrize(("kw", "local_kw"), [
    ({"m": 0}, {"m": 0}), ({"k": "5"}, {"k": "5"}), ({"gamma": 1.0}, {"gamma": 1.0}),
    ({"method": "laplace"}, {"method": "laplace"}), ({"t": 5, "k": 5}, {"t": 5, "k": 5}),
    ({"hampel_quantiles": (50, 40, 100)}, {"hampel_quantiles": (50, 40, 100)}),
    ({"resolution": -1.0}, {"resolution": -1.0}), ({"composition_delta": 1.5}, {"composition_delta": 1.5}),
])
def test_bad_arguments_raise_the_local_errors_before_any_job(spark, frames, kw, local_kw):  # noqa: F811
    pdf, sdf = frames["synthetic"]
    with pytest.raises(ArgumentError) as local:
        _local(pdf, **local_kw)
    raised = []

    def call():
        with pytest.raises(ArgumentError) as err:
            private_synth(sdf, **kw)
        raised.append(err.value)
    assert _jobs_of(spark, call) == []
    assert type(raised[0]) is type(local.value) and str(raised[0]) == str(local.value)


def test_bad_columns_seed_and_bandwidth_raise_before_any_job(spark, frames):  # noqa: F811
    pdf, sdf = frames["synthetic"]
    text = sdf.withColumn("value", sdf["value"].cast("string"))
    cases = [
        (lambda: private_synth(sdf, value="price"), UnknownColumnError, "value column 'price' not in input columns"),
        (lambda: private_synth(sdf, object="Object"), UnknownColumnError, "object column 'Object' not in input"),
        (lambda: private_synth(text), ArgumentError, r"value column must be numeric \(column 'value' is string\)"),
        (lambda: private_synth(sdf, seed=-1), ArgumentError, "non-negative integer seed"),
        (lambda: private_synth(sdf, seed=np.random.default_rng(1)), ArgumentError, "non-negative integer seed"),
        (lambda: private_synth(sdf, bandwidth=0.0), ArgumentError, "bandwidth must be > 0, got 0.0"),
        (lambda: private_synth(sdf, bandwidth={"o1": -2.0}), ArgumentError, "bandwidth must be > 0"),
        (lambda: private_synth(pdf), ArgumentError, "takes a Spark DataFrame"),
    ]
    for call, error, match in cases:
        def expect(call=call, error=error, match=match):
            with pytest.raises(error, match=match):
                call()
        assert _jobs_of(spark, expect) == []


def test_bad_data_raises_the_local_errors(spark, frames):  # noqa: F811
    pdf = frames["synthetic"][0]
    cases = {"nan": pdf.assign(value=pdf["value"].where(pdf.index != 3, np.nan)),
             "inf": pdf.assign(value=pdf["value"].where(pdf.index != 3, np.inf)),
             "null source": pdf.assign(source=pdf["source"].where(pdf.index != 5, None)),
             "null object": pdf.assign(object=pdf["object"].where(pdf.index != 5, None)),
             "empty": pdf.iloc[:0]}
    for name, bad in cases.items():
        sdf = spark.createDataFrame(pa.Table.from_pandas(bad, preserve_index=False))
        with pytest.raises(ArgumentError) as local:
            _local(bad, seed=1)
        with pytest.raises(ArgumentError) as remote:
            private_synth(sdf, seed=1)
        assert type(remote.value) is type(local.value), name
        head = str(local.value).split("; filter")[0]  # the hint names a Spark filter instead of numpy's
        assert str(remote.value).startswith(head), name
    assert isinstance(remote.value, EmptyInputError)
    _, sdf = frames["synthetic"]
    with pytest.raises(ArgumentError, match="bandwidth mapping has no entry for object 'o"):
        private_synth(sdf, bandwidth={"o1": 2.0}, seed=1)
    with pytest.raises(ArgumentError, match="bandwidth mapping has no entry for object 'o"):
        _local(frames["synthetic"][0], bandwidth={"o1": 2.0}, seed=1)


# ------------------------------------------------------------------------------------------ through SQL
SYNTH_SQL = ("SELECT * FROM PRIVATE_SYNTH({table}, object := 'object', source := 'source', value := 'value', "
             "m := 4, k := 3, weights := 'uniform', max_attempts := 60, seed := 1{extra})")


@pytest.fixture
def dbs(spark, frames, tmp_path):  # noqa: F811
    """(a database on Spark with the temp view ``claims``, a local one with the same rows as its table ``claims``)."""
    import crowddb

    pdf, sdf = frames["synthetic"]
    sdf.createOrReplaceTempView("claims")
    with (crowddb.connect(str(tmp_path / "spark.duckdb"), spark=spark, progress=False) as on_spark,
          crowddb.connect(str(tmp_path / "local.duckdb"), progress=False) as local):
        local.load_frame("claims", pdf)
        yield on_spark, local
    spark.catalog.dropTempView("claims")


def _charges(db) -> list[tuple]:
    """The ledger's charges (source, epsilon, delta) in the order they were written."""
    return db.con.execute("SELECT unit_id, epsilon, delta FROM crowddb_privacy_ledger WHERE act = 'charge' "
                          "ORDER BY seq").fetchall()


def _worst_case(pdf: pd.DataFrame, k: int, attempts: int) -> dict[str, tuple[float, float]]:
    """PRIVATE_SYNTH's charge by hand (Theorem 2 at t = 1, max c / min c <= 1 / 0.1, max c <= 1, composed over
    ``attempts`` candidates: the tighter of basic and advanced), summed over each source's objects with >= k claims."""
    eps1 = 1.0 + math.log1p(4.0 * 10)
    sizes = pdf.groupby("object").size()
    out: dict[str, list[float]] = {}
    for (source, obj), _ in pdf.groupby(["source", "object"], sort=False):
        n = int(sizes[obj])
        e, d = 0.0, 0.0
        if n >= k:
            d1 = n * math.exp(-1.0 * (k - 1))
            basic = (attempts * eps1, attempts * d1)
            advanced = (math.sqrt(2 * attempts * math.log(1e6)) * eps1 + attempts * eps1 * math.expm1(eps1),
                        attempts * d1 + 1e-6)
            e, d = advanced if advanced[0] < basic[0] else basic
        acc = out.setdefault(source, [0.0, 0.0])
        acc[0] += e
        acc[1] += d
    return {s: (e, d) for s, (e, d) in out.items()}


def test_sql_private_synth_runs_on_spark_and_charges_as_locally(spark, frames, dbs):  # noqa: F811
    pdf, sdf = frames["synthetic"]
    on_spark, local = dbs
    got = on_spark.sql(SYNTH_SQL.format(table="spark.claims", extra="")).toPandas()
    theirs = local.sql(SYNTH_SQL.format(table="claims", extra="")).df()
    assert list(got.columns) == list(theirs.columns) == ["object", "value"]
    direct = private_synth(sdf, m=4, k=3, weights="uniform", max_attempts=60, seed=1).rows.toPandas()
    by = ["object", "value"]
    pd.testing.assert_frame_equal(_sorted(got, by), _sorted(direct[by], by), check_exact=True)
    # the charge: the local one, source for source in the same order; its sums are exactly rounded here and
    # pandas' locally, equal on these claims (and by construction to rounding)
    mine, want = _charges(on_spark), _charges(local)
    assert [r[0] for r in mine] == [r[0] for r in want] == list(pd.unique(pdf["source"]))
    assert mine == want
    hand = _worst_case(pdf, 3, 60)
    for source, e, d in mine:
        assert e == pytest.approx(hand[source][0], rel=1e-13) and d == pytest.approx(hand[source][1], rel=1e-13)
    report, expect = on_spark.privacy_report("spark:claims"), local.privacy_report("claims")
    same = [c for c in report.columns if c not in ("created_at", "release_id")]
    pd.testing.assert_frame_equal(report[same], expect[same])
    # the release log: one synthesis, its per-object Theorem 2 figures as locally (uniform weights: no randomness;
    # the local default sums an object's weights in a padded batch, so delta agrees to rounding)
    q = "SELECT object, n_claims, epsilon, delta, guarantee_holds FROM crowddb_synth_objects ORDER BY object"
    logged, local_log = (pd.DataFrame(db.con.execute(q).fetchall(), columns=["object", "n", "e", "d", "holds"])
                         for db in (on_spark, local))
    pd.testing.assert_frame_equal(logged, local_log, check_exact=False, rtol=1e-15)
    q = "SELECT kind, method, k, epsilon, delta FROM crowddb_releases ORDER BY release_id"
    assert on_spark.con.execute(q).fetchall() == local.con.execute(q).fetchall()


def test_sql_private_synth_over_budget_is_refused_before_it_runs(spark, dbs, monkeypatch):  # noqa: F811
    import crowddb.spark.synth as spark_synth
    from crowddb.errors import PrivacyBudgetError

    on_spark, local = dbs
    on_spark.set_privacy_budget("spark:claims", epsilon=1.0)
    local.set_privacy_budget("claims", epsilon=1.0)
    ran: list[int] = []
    monkeypatch.setattr(spark_synth, "private_synth", lambda *a, **k: ran.append(1))
    with pytest.raises(PrivacyBudgetError, match="PRIVATE_SYNTH would overspend the privacy budget of 'spark:claims'"):
        on_spark.sql(SYNTH_SQL.format(table="spark.claims", extra=""))
    with pytest.raises(PrivacyBudgetError, match="PRIVATE_SYNTH would overspend the privacy budget of 'claims'"):
        local.sql(SYNTH_SQL.format(table="claims", extra="")).fetchall()
    assert ran == [] and _charges(on_spark) == []
    assert on_spark.con.execute("SELECT count(*) FROM crowddb_releases").fetchone() == (0,)


def test_sql_private_synth_bad_input_and_protected_columns(spark, frames, dbs):  # noqa: F811
    from crowddb.errors import PrivacyError

    on_spark, _ = dbs
    pdf = frames["synthetic"][0]
    bad = [("gamma := 1.0", ArgumentError, "PRIVATE_SYNTH: gamma must be a finite number > 1, got 1.0"),
           ("method := 'laplace'", ArgumentError, "PRIVATE_SYNTH: method must be one of"),
           ("bandwidth := -1.0", ArgumentError, "PRIVATE_SYNTH: bandwidth must be > 0")]
    for extra, error, match in bad:
        with pytest.raises(error, match=match):
            on_spark.sql(SYNTH_SQL.format(table="spark.claims", extra=", " + extra))
    with pytest.raises(UnknownColumnError, match="PRIVATE_SYNTH: value column 'price' not in input columns"):
        on_spark.sql(SYNTH_SQL.format(table="spark.claims", extra="").replace("'value', m", "'price', m"))
    assert _charges(on_spark) == []
    both = ("SELECT * FROM PRIVATE_SYNTH(spark.claims, object := 'object', source := 'source', value := 'value') a, "
            "PRIVATE_SYNTH(spark.claims, object := 'object', source := 'source', value := 'value') b")
    with pytest.raises(ArgumentError, match="one release per statement on Spark: PRIVATE_SYNTH"):
        on_spark.sql(both)
    people = spark.createDataFrame(pa.Table.from_pandas(pdf.assign(id=np.arange(len(pdf)), value=pdf["value"] + 1),
                                                        preserve_index=False))
    people.createOrReplaceTempView("people")
    try:
        on_spark.declare_roles("spark:people", quasi_identifiers=["source"], key="id")
        with pytest.raises(PrivacyError, match=r"PRIVATE_SYNTH\(spark.people\) reads \['source'\], protected"):
            on_spark.sql(SYNTH_SQL.format(table="spark.people", extra=""))
    finally:
        spark.catalog.dropTempView("people")
    assert _charges(on_spark) == []
