"""Truth-inference methods on small hand-made cases: contract, known answers, bad input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowddb.errors import ArgumentError, CrowdDBError, EmptyInputError, UnknownColumnError
from crowddb.truth import METHODS, TruthResult, discover, get_method

CATEGORICAL = ["mv", "ds", "one_coin", "glad", "zencrowd", "crh_categorical"]
NUMERIC = ["mean", "median", "crh", "catd", "gtm", "ti"]


def labels_case() -> pd.DataFrame:
    """3 good workers always right, 2 spammers; 6 tasks with labels a/b/c."""
    truth = ["a", "b", "c", "a", "b", "c"]
    rows = []
    for t, y in enumerate(truth):
        for w in ("g1", "g2", "g3"):
            rows.append((f"t{t}", w, y))
        rows.append((f"t{t}", "s1", "a"))
        rows.append((f"t{t}", "s2", "b" if y != "b" else "c"))
    return pd.DataFrame(rows, columns=["task", "worker", "label"])


def numeric_case(seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """40 objects, 6 accurate sources (sd 0.1) and 4 noisy ones (sd 5)."""
    rng = np.random.default_rng(seed)
    truth = rng.normal(50, 10, 40)
    rows = []
    for s in range(10):
        sd = 0.1 if s < 6 else 5.0
        for o in range(40):
            rows.append((o, f"src{s}", truth[o] + rng.normal(0, sd)))
    return pd.DataFrame(rows, columns=["obj", "src", "val"]), truth


def test_registry_and_aliases() -> None:
    assert set(CATEGORICAL + NUMERIC) <= set(METHODS)
    assert get_method("dawid_skene") is get_method("ds")
    assert get_method("DS") is get_method("ds")
    assert get_method("majority_vote").name == "mv"
    for name in CATEGORICAL:
        assert get_method(name).kind == "categorical"
    for name in NUMERIC:
        assert get_method(name).kind == "numeric"


def test_unknown_method_lists_valid_names() -> None:
    with pytest.raises(ArgumentError, match="valid methods: .*ds.*mv"):
        get_method("nope")
    with pytest.raises(ArgumentError):
        discover(labels_case(), "task", "worker", "label", method="nope")


@pytest.mark.parametrize("name", CATEGORICAL)
def test_categorical_known_answer(name: str) -> None:
    df = labels_case()
    m = get_method(name)(seed=0).fit_frame(df, object="task", source="worker", value="label")
    assert list(m.truths_.loc[[f"t{i}" for i in range(6)]]) == ["a", "b", "c", "a", "b", "c"]
    assert m.confidences_.between(0, 1).all()
    assert set(m.source_weights_.index) == {"g1", "g2", "g3", "s1", "s2"}
    assert m.source_weights_[["g1", "g2", "g3"]].min() > m.source_weights_[["s1", "s2"]].max()
    assert m.n_iter_ >= 1


@pytest.mark.parametrize("name", NUMERIC)
def test_numeric_known_answer(name: str) -> None:
    df, truth = numeric_case()
    m = get_method(name)().fit_frame(df, "obj", "src", "val")
    mae = np.abs(m.truths_.loc[range(40)].to_numpy() - truth).mean()
    bar = {"mean": 2.0, "median": 1.0}.get(name, 0.3)  # quality-aware methods must find the accurate sources
    assert mae < bar, (name, mae)
    assert ((m.confidences_ > 0) & (m.confidences_ <= 1)).all()
    assert np.isfinite(m.source_weights_).all()
    if name not in ("mean", "median"):
        assert m.source_weights_.iloc[:6].min() > m.source_weights_.iloc[6:].max()


def test_mean_median_exact() -> None:
    o = ["x", "x", "x", "y", "y"]
    s = ["a", "b", "c", "a", "b"]
    v = [1.0, 2.0, 6.0, 4.0, 5.0]
    assert get_method("mean")().fit(o, s, v).truths_.to_dict() == {"x": 3.0, "y": 4.5}
    assert get_method("median")().fit(o, s, v).truths_.to_dict() == {"x": 2.0, "y": 4.5}


def test_weighted_median_absolute_crh() -> None:
    df, truth = numeric_case(1)
    m = get_method("crh")(loss="absolute").fit_frame(df, "obj", "src", "val")
    assert np.abs(m.truths_.loc[range(40)].to_numpy() - truth).mean() < 0.3


def test_mv_ties_and_confidence() -> None:
    m = get_method("mv")().fit(["t", "t"], ["w1", "w2"], ["b", "a"])
    assert m.truths_["t"] == "a" and m.confidences_["t"] == 0.5
    r = [get_method("mv")(tie="random", seed=s).fit(["t", "t"], ["w1", "w2"], ["b", "a"]).truths_["t"] for s in range(20)]
    assert set(r) == {"a", "b"}


def test_deterministic_for_seed() -> None:
    df = labels_case()
    a = discover(df, "task", "worker", "label", method="glad", seed=3)
    b = discover(df, "task", "worker", "label", method="glad", seed=3)
    pd.testing.assert_frame_equal(a.objects, b.objects)


def test_discover_result_shape_and_auto() -> None:
    res = discover(labels_case(), object="task", source="worker", value="label")
    assert isinstance(res, TruthResult)
    assert list(res.objects.columns) == ["object", "truth", "confidence"]
    assert list(res.sources.columns) == ["source", "weight"]
    assert res.method == "ds" and res.privacy is None and res.n_iter >= 1
    df, _ = numeric_case()
    assert discover(df, "obj", "src", "val").method == "crh"
    assert discover(df, "obj", "src", "val", method="crh").method == "crh"
    assert discover(labels_case(), "task", "worker", "label", method="crh").method == "crh_categorical"
    # small integer labels are categorical for 'auto'
    ints = labels_case().assign(label=lambda d: d.label.map({"a": 0, "b": 1, "c": 2}))
    r = discover(ints, "task", "worker", "label")
    assert r.method == "ds" and r.objects.truth.tolist()[:3] == [0, 1, 2]
    # ... but an explicit numeric method (and explicit 'crh') reads them as numbers
    assert discover(ints, "task", "worker", "label", method="crh").method == "crh"
    assert discover(ints, "task", "worker", "label", method="mean").objects.truth.dtype.kind == "f"
    # booleans are labels
    assert discover(ints.assign(label=ints.label > 0), "task", "worker", "label").method == "ds"
    # arrays instead of a frame
    r = discover((["o1", "o1"], ["s1", "s2"], [1.0, 3.0]), method="mean")
    assert r.objects.truth.tolist() == [2.0]


def test_kind_mismatch_errors() -> None:
    df, _ = numeric_case()
    with pytest.raises(ArgumentError, match="categorical.*non-integral"):
        get_method("ds")().fit_frame(df, "obj", "src", "val")
    with pytest.raises(ArgumentError, match="numeric"):
        get_method("crh")().fit_frame(labels_case(), "task", "worker", "label")
    with pytest.raises(ArgumentError, match="numeric"):
        discover(labels_case(), "task", "worker", "label", method="mean")
    # integral floats (e.g. from a SQL DOUBLE column) are accepted as labels
    m = get_method("mv")().fit(["o", "o", "o"], ["a", "b", "c"], [1.0, 1.0, 0.0])
    assert m.truths_["o"] == 1


def test_bad_values() -> None:
    with pytest.raises(ArgumentError, match="NaN or infinite"):
        get_method("mean")().fit(["o", "o"], ["a", "b"], [1.0, np.inf])
    with pytest.raises(ArgumentError, match="NULL/NaN"):
        get_method("mean")().fit(["o", "o"], ["a", "b"], [1.0, np.nan])
    with pytest.raises(ArgumentError, match="NULL/NaN"):
        get_method("mv")().fit(["o", "o"], ["a", "b"], ["x", None])
    # dropna drops NULL answers; an object left with none is an error naming it
    assert get_method("mean")(dropna=True).fit(["o", "o"], ["a", "b"], [1.0, np.nan]).truths_["o"] == 1.0
    with pytest.raises(ArgumentError, match="no answers.*'p'"):
        get_method("mean")(dropna=True).fit(["o", "p"], ["a", "b"], [1.0, np.nan])
    with pytest.raises(ArgumentError, match="NULL object"):
        get_method("mv")().fit(["o", None], ["a", "b"], ["x", "y"])
    with pytest.raises(ArgumentError, match="same length"):
        get_method("mv")().fit(["o"], ["a", "b"], ["x", "y"])


def test_empty_input() -> None:
    with pytest.raises(EmptyInputError):
        get_method("ds")().fit([], [], [])
    with pytest.raises(EmptyInputError):
        discover(pd.DataFrame({"object": [], "source": [], "value": []}))


def test_unknown_column_and_bad_parameters() -> None:
    with pytest.raises(UnknownColumnError, match="nope"):
        discover(labels_case(), object="nope", source="worker", value="label")
    with pytest.raises(ArgumentError):
        get_method("ds")(max_iter=0)
    with pytest.raises(ArgumentError):
        get_method("crh")(loss="cubic")


def test_single_answer_source_is_kept_and_finite() -> None:
    df = labels_case()
    df = pd.concat([df, pd.DataFrame([("t0", "lonely", "c")], columns=df.columns)])
    for name in CATEGORICAL:
        m = get_method(name)().fit_frame(df, "task", "worker", "label")
        assert "lonely" in m.source_weights_.index and np.isfinite(m.source_weights_).all(), name
        assert m.truths_["t0"] == "a", name
    ndf, _ = numeric_case()
    ndf = pd.concat([ndf, pd.DataFrame([(99, "lonely", 1.0)], columns=ndf.columns)])
    for name in NUMERIC:
        m = get_method(name)().fit_frame(ndf, "obj", "src", "val")
        assert np.isfinite(m.source_weights_).all() and np.isfinite(m.truths_).all(), name
        assert m.truths_[99] == pytest.approx(1.0), name


def test_duplicates_keep_last() -> None:
    m = get_method("mv")().fit(["o", "o", "o"], ["a", "a", "b"], ["x", "y", "y"])
    assert m.truths_["o"] == "y" and m.confidences_["o"] == 1.0


def test_errors_are_crowddb_errors() -> None:
    with pytest.raises(CrowdDBError):
        discover(labels_case(), "task", "worker", "label", perturb="laplace", epsilon=-1)


@pytest.mark.parametrize("method", ["mv", "ds", "one_coin", "zencrowd", "crh_categorical", "crh", "catd", "median"])
def test_sparse_answers_cost_memory_of_the_answers_not_objects_by_sources(method: str) -> None:
    # 100,000 objects x 20,000 sources, 3 answers each: a dense objects x sources array would be 2e9 cells (16 GB);
    # the peak of what numpy allocates (it reports to tracemalloc) must stay a small multiple of the answers' size
    import tracemalloc

    rng = np.random.default_rng(0)
    n, per, n_src = 100_000, 3, 20_000
    obj = np.repeat(np.arange(n), per)
    src = rng.integers(0, n_src, n * per)
    val = rng.integers(0, 4, n * per) if get_method(method).kind == "categorical" else rng.normal(0, 1, n * per)
    answers_bytes = obj.nbytes + src.nbytes + val.nbytes  # 7.2 MB
    tracemalloc.start()
    try:
        res = discover((obj, src, val), method=method, max_iter=5)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(res.objects) == n and res.objects.truth.notna().all()
    assert peak < 15 * answers_bytes, (method, peak / answers_bytes)  # measured about 5x


def test_segment_median_matches_pandas() -> None:
    from crowddb.truth.voting import segment_median

    rng = np.random.default_rng(0)
    obj = rng.integers(0, 500, 5000)
    val = rng.integers(0, 20, 5000).astype(float)  # many ties
    got = segment_median(obj, val, 500)
    want = pd.Series(val).groupby(obj).median().reindex(range(500)).to_numpy()
    assert np.allclose(got, want)
    # weighted: integer weights equal repeating the claims
    w = rng.integers(1, 4, 5000).astype(float)
    got_w = segment_median(obj, val, 500, w)
    rep = np.repeat(np.arange(5000), w.astype(int))
    want_w = pd.Series(val[rep]).groupby(obj[rep]).median().reindex(range(500)).to_numpy()
    assert np.allclose(got_w, want_w)
