"""Truth discovery on Spark (crowddb.spark.truth_discover) against the local discover() on the same answers.

The shared real answer sets (../shared/data/crowd) are read once into pandas (as tests/algorithms/truth/
test_truth_real.py reads them) and into Spark through Arrow, in the file's order (so that the last answer of a
repeated (task, worker) pair is the same row for both). Every Spark run is compared with the local run: the same
label on every object (observed: 100% on every set and method, so pinned as exact equality; the issue's bar is
99.9%), hence the same accuracy against the gold, numeric truths within 1e-12 relative, confidences and source
weights within 1e-9, the same sources in the same order, the same number of iterations."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import shared_data
from spark_session import spark  # noqa: F401  (the session fixture)

from crowddb.errors import ArgumentError, EmptyInputError, UnknownColumnError
from crowddb.truth import discover

DATA = shared_data.CROWD
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="real crowd data sets not available")


def _read(name: str) -> tuple[pd.DataFrame, tuple[str, str, str], pd.Series | None]:
    """(answers, (object, source, value) column names, gold truths) of one shared set, as the README describes it;
    adultcontent2 keeps its repeated (worker, url) answers: both sides must keep the last one."""
    if name in ("d_product", "emotion"):
        a = pd.read_csv(DATA / name / "answer.csv")
        gold = pd.read_csv(DATA / name / "truth.csv").set_index("question")["truth"]
        return a, ("question", "worker", "answer"), gold
    if name == "adultcontent2":
        lab = pd.read_csv(DATA / name / "labels.txt", sep="\t", header=None, names=["worker", "url", "label"])
        gold = pd.read_csv(DATA / name / "gold.txt", sep="\t", header=None, names=["url", "label"]).set_index("url")
        return lab, ("url", "worker", "label"), gold["label"][gold.index.isin(lab.url)]
    p = pd.read_csv(DATA / name / "population-new-new.txt", sep="\t", header=None, encoding="latin-1",
                    names=["object", "source", "value", "year"], on_bad_lines="skip")
    return p, ("object", "source", "value"), None


SETS = ("d_product", "adultcontent2", "emotion", "population")


@pytest.fixture(scope="module")
def frames(spark):
    """Each set as (pandas answers, cached Spark DataFrame of the same rows in the same order, columns, gold)."""
    out = {}
    for name in SETS:
        a, cols, gold = _read(name)
        sdf = spark.createDataFrame(pa.Table.from_pandas(a, preserve_index=False)).cache()
        assert sdf.count() == len(a)
        out[name] = (a, sdf, cols, gold)
    yield out
    for _, sdf, _, _ in out.values():
        sdf.unpersist()


def _run(frames, name: str, method: str, **kw):
    """(Spark result's objects and sources as pandas, Spark result, local result), the algorithm run with
    DataFrame.toPandas disabled: no answers reach the driver through it."""
    a, sdf, (o, s, v), _ = frames[name]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("pyspark.sql.DataFrame.toPandas", lambda self: pytest.fail("toPandas inside truth_discover"))
        import crowddb.spark as cs

        res = cs.truth_discover(sdf, object=o, source=s, value=v, method=method, **kw)
    local = discover(a, o, s, v, method=method, **kw)
    objects = res.objects.toArrow().to_pandas().set_index("object")
    sources = res.sources.toArrow().to_pandas()
    return objects, sources, res, local


def _same_model(objects, sources, res, local) -> pd.DataFrame:
    """What every method must share with the local run; returns the local objects beside the Spark ones."""
    assert res.method == local.method and res.n_iter == local.n_iter
    lo = local.objects.set_index("object")
    assert len(objects) == len(lo) and objects.index.is_unique
    both = lo.join(objects.add_suffix("_spark"), how="left")
    assert both.truth_spark.notna().all()
    np.testing.assert_allclose(both.confidence_spark, both.confidence, rtol=0, atol=1e-9)
    assert list(sources.source) == list(local.sources.source)  # every source, in order of first appearance
    np.testing.assert_allclose(sources.weight, local.sources.weight, rtol=1e-9, atol=1e-9)
    return both


def _accuracy(truths: pd.Series, gold: pd.Series) -> float:
    return float((truths.reindex(gold.index) == gold).mean())


# (set, method, options, local accuracy against the gold: pinned, it is the local engine's and so Spark's).
# Each Spark EM step is one Spark job (about a second on a busy 2-core machine), so the iterative methods run a few
# steps here, the same number on both sides (n_iter is compared); run to convergence (41 DS steps on d_product,
# accuracy 0.939627) they agree on every object as well (measured outside the suite, see the report).
LABEL_CASES = [
    ("d_product", "mv", {}, 0.896572),
    ("d_product", "ds", {"max_iter": 6}, 0.931569),
    ("d_product", "one_coin", {"max_iter": 4}, 0.910283),
    ("d_product", "crh_categorical", {}, 0.898737),  # converges in 4 steps
    ("adultcontent2", "crh", {"max_iter": 3}, 0.762763),  # 'crh' on text labels is CRH with 0-1 loss, as locally
    ("adultcontent2", "auto", {"max_iter": 3}, 0.765766),  # 'auto' on labels: DS (4 classes)
]


@pytest.mark.parametrize(("name", "method", "kw", "acc"), LABEL_CASES, ids=[f"{c[0]}-{c[1]}" for c in LABEL_CASES])
def test_labels_equal_local(frames, name, method, kw, acc):
    objects, sources, res, local = _run(frames, name, method, **kw)
    both = _same_model(objects, sources, res, local)
    equal = int((both.truth_spark == both.truth).sum())
    # observed: every object (d_product 8,315 / 8,315, adultcontent2 11,040 / 11,040), so pinned exactly
    assert equal == len(both) == {"d_product": 8315, "adultcontent2": 11040}[name]
    gold = frames[name][3]
    assert _accuracy(both.truth_spark, gold) == _accuracy(both.truth, gold) == pytest.approx(acc, abs=1e-6)


def test_duplicates_keep_the_last_answer(frames):
    """adultcontent2 repeats (worker, url) pairs with different labels: keeping another than the last would change
    majority votes, so the equality above depends on it. Counted here, independently of both engines."""
    lab = frames["adultcontent2"][0]
    per_pair = lab.groupby(["worker", "url"]).label.nunique()
    assert int((per_pair > 1).sum()) > 0  # pairs answered twice with different labels exist
    objects, sources, res, local = _run(frames, "adultcontent2", "mv")
    both = _same_model(objects, sources, res, local)
    assert int((both.truth_spark == both.truth).sum()) == len(both) == 11040  # observed: every object
    gold = frames["adultcontent2"][3]
    assert _accuracy(both.truth_spark, gold) == _accuracy(both.truth, gold) == pytest.approx(0.759760, abs=1e-6)
    last = lab.drop_duplicates(["worker", "url"], keep="last")
    # majority vote over the last answers, ties to the smallest label, computed with pandas alone
    counts = last.groupby(["url", "label"]).size().unstack(fill_value=0)
    expected = counts.idxmax(axis=1)  # idxmax: the first column (smallest label) among equal counts
    assert (objects.truth.reindex(expected.index) == expected).all()


NUMERIC_CASES = [
    ("emotion", "mean", {}, 12.02),
    ("emotion", "median", {}, 13.53),
    ("emotion", "crh", {}, None),
    ("emotion", "crh", {"loss": "absolute"}, None),  # weighted median, Eq. (17),
    ("population", "auto", {"max_iter": 6}, None),  # 'auto' on integer values with many distinct: CRH on numbers
    ("population", "median", {}, None),
]


@pytest.mark.parametrize(("name", "method", "kw", "mae"), NUMERIC_CASES,
                         ids=[f"{c[0]}-{c[1]}-{'-'.join(map(str, c[2].values()))}" for c in NUMERIC_CASES])
def test_numbers_equal_local(frames, name, method, kw, mae):
    objects, sources, res, local = _run(frames, name, method, **kw)
    both = _same_model(objects, sources, res, local)
    # population reaches 6e17 (a garbled claim): the tolerance is relative to each truth
    np.testing.assert_allclose(both.truth_spark.astype(float), both.truth, rtol=1e-12, atol=1e-9)
    if mae is not None:  # the README's benchmark MAE, recomputed from the Spark truths
        gold = frames[name][3]
        assert float((both.truth_spark.reindex(gold.index) - gold).abs().mean()) == pytest.approx(mae, abs=0.01)


# ---------------------------------------------------------------- exact ties and small cases


def _spark_frame(spark, df: pd.DataFrame):
    return spark.createDataFrame(pa.Table.from_pandas(df, preserve_index=False))


@pytest.mark.parametrize("method", ["mv", "ds"])
def test_exact_ties_go_to_the_smallest_label(spark, method):
    """Every object answered 'b' by one worker and 'a' by the other, symmetrically: the posteriors tie in exact
    arithmetic, and argmax_rows' rule gives the smallest label, whatever the order of the float sums."""
    rows = [(f"t{i}", w, lab) for i in range(6) for w, lab in (("w1", "b" if i % 2 else "a"), ("w2", "a" if i % 2
                                                                                              else "b"))]
    df = pd.DataFrame(rows, columns=["object", "source", "value"])
    import crowddb.spark as cs

    res = cs.truth_discover(_spark_frame(spark, df), method=method)
    got = res.objects.toArrow().to_pandas().set_index("object").truth.sort_index()
    local = discover(df, method=method).objects.set_index("object").truth.sort_index()
    assert list(got) == list(local) == ["a"] * 6


def test_options_reach_the_method(spark, frames):
    """DS's smoothing and CRH's loss are the method's options, as locally (smoothing changes the weights)."""
    a, sdf, (o, s, v), _ = frames["d_product"]
    import crowddb.spark as cs

    res = cs.truth_discover(sdf, object=o, source=s, value=v, method="ds", max_iter=2, smoothing=5.0)
    local = discover(a, o, s, v, method="ds", max_iter=2, smoothing=5.0)
    plain = discover(a, o, s, v, method="ds", max_iter=2)
    w = res.sources.toArrow().to_pandas().weight.to_numpy()
    np.testing.assert_allclose(w, local.sources.weight, atol=1e-9)
    assert np.abs(w - plain.sources.weight.to_numpy()).max() > 1e-3


# ---------------------------------------------------------------- errors: the local ones, before any algorithm


def _same_error(spark_call, local_call, cls):
    with pytest.raises(cls) as mine:
        spark_call()
    with pytest.raises(cls) as theirs:
        local_call()
    assert type(mine.value) is type(theirs.value) and str(mine.value) == str(theirs.value)


SMALL = pd.DataFrame({"object": ["x", "x", "y", "z"], "source": ["a", "b", "a", "b"], "value": [1.0, 2.0, 3.0, 4.0]})


@pytest.mark.parametrize(("change", "kw", "cls"), [
    (None, {"value": "nope"}, UnknownColumnError),
    (None, {"method": "no_such_method"}, ArgumentError),
    (None, {"method": "crh", "loss": "cubic"}, ArgumentError),
    (None, {"method": "ds", "bogus": 1}, ArgumentError),
    (None, {"tol": -1.0}, ArgumentError),
    ("empty", {}, EmptyInputError),
    ("null_object", {}, ArgumentError),
    ("null_source", {}, ArgumentError),
    ("null_value", {}, ArgumentError),
    ("null_value_all", {"dropna": True}, ArgumentError),
    ("inf", {}, ArgumentError),
    ("fraction", {"method": "mv"}, ArgumentError),
    ("text", {"method": "mean"}, ArgumentError),
], ids=lambda x: str(x))
def test_bad_input_raises_the_local_error(spark, change, kw, cls):
    df = SMALL.copy()
    if change == "empty":
        df = df.iloc[:0]
    elif change == "null_object":
        df["object"] = [None, "x", None, "z"]
    elif change == "null_source":
        df.loc[1, "source"] = None
    elif change == "null_value":
        df.loc[2, "value"] = np.nan
    elif change == "null_value_all":
        df.loc[[2, 3], "value"] = np.nan  # y and z lose their only answer
    elif change == "inf":
        df.loc[3, "value"] = np.inf
    elif change == "fraction":
        df.loc[1, "value"] = 2.5
    elif change == "text":
        df["value"] = ["p", "q", "p", "q"]
    import crowddb.spark as cs

    sdf = _spark_frame(spark, df)
    _same_error(lambda: cs.truth_discover(sdf, **kw), lambda: discover(df, **kw), cls)


def test_refused_requests(spark):
    import crowddb.spark as cs

    sdf = _spark_frame(spark, SMALL)
    # local DP runs on Spark from a seeded hash stream only (tests/spark/test_spark_ldp.py): secure noise is local
    with pytest.raises(ArgumentError, match=r"needs seed= a non-negative integer, got None.*crowddb\.truth\.discover"):
        cs.truth_discover(sdf, perturb="laplace", epsilon=1.0)
    with pytest.raises(ArgumentError, match="'glad' is not available on Spark.*crowddb.truth.discover"):
        cs.truth_discover(sdf, method="glad")
    with pytest.raises(ArgumentError, match="tie='random' is not available on Spark"):
        cs.truth_discover(sdf.selectExpr("object", "source", "cast(value as string) as value"), method="mv",
                          tie="random")
    with pytest.raises(ArgumentError, match="expects a Spark DataFrame, got DataFrame"):
        cs.truth_discover(SMALL)
