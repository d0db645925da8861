"""Pins for the fast paths of TRUTH_DISCOVER(..., method := 'ds') (issue 14): each gives exactly what the plain
code it replaced gave (pd.factorize codes and labels, the stable-argsort de-duplication, the COO-built incidence,
the (objects x classes) EM), including NULLs, mixed types, numbers and booleans."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from crowddb.errors import ArgumentError
from crowddb.truth import discover
from crowddb.truth.base import _factorize, _last_answer_per_pair, class_votes, encode_answers, normalize_rows
from crowddb.truth.dawid_skene import DawidSkene
from crowddb.truth.discover import method_options

_EPS = 1e-10


def _same_factorization(x: pd.Series) -> None:
    codes, uniq = _factorize(x)
    ref_codes, ref_uniq = pd.factorize(x)
    assert codes.tolist() == ref_codes.tolist()
    assert pd.Index(uniq).equals(pd.Index(ref_uniq))
    assert pd.Index(uniq).dtype == pd.Index(ref_uniq).dtype


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int16, np.uint8, np.uint64])
def test_factorize_sorted_integers_matches_pd_factorize(dtype):
    rng = np.random.default_rng(0)
    for _ in range(50):
        a = np.sort(rng.integers(0, int(rng.integers(1, 40)), int(rng.integers(1, 200)))).astype(dtype)
        _same_factorization(pd.Series(a))


@pytest.mark.parametrize("values", [
    [5, 3, 3, 9, 5],  # unsorted integers: pd.factorize's hashing
    [-3, -3, -1, 0, 0, 7],  # sorted, negative
    [42],  # one answer
    [1.5, 1.5, 2.0],  # floats
    [True, False, True],  # booleans
    ["b", "a", "b"],  # text
    [1, "a", 2.5, "a"],  # mixed types (object)
])
def test_factorize_other_columns_match_pd_factorize(values):
    _same_factorization(pd.Series(values))


def test_factorize_nullable_integers_fall_back_to_pd_factorize():
    _same_factorization(pd.Series([1, 1, 2, 3], dtype="Int64"))
    _same_factorization(pd.Series([1, None, 2, 2], dtype="Int64"))  # NA: code -1, as pd.factorize


def _reference_keep(key: np.ndarray) -> np.ndarray | None:
    order = np.argsort(key, kind="stable")
    ks = key[order]
    last = np.append(ks[1:] != ks[:-1], True)
    return None if last.all() else np.sort(order[last])


def test_last_answer_per_pair_matches_the_stable_argsort_both_ways():
    rng = np.random.default_rng(1)
    for _ in range(200):
        n_keys = int(rng.integers(1, 60))
        key = rng.integers(0, n_keys, int(rng.integers(1, 150))).astype(np.int64)
        ref = _reference_keep(key)
        for bound in (n_keys, 1 << 62):  # packed unstable sort, and the stable argsort for too many pairs
            got = _last_answer_per_pair(key, bound)
            assert (got is None) == (ref is None)
            if ref is not None:
                assert got.tolist() == ref.tolist()


def test_encode_keeps_the_last_answer_of_a_repeated_pair_in_input_order():
    ans = encode_answers([2, 1, 2, 1, 2], ["w", "w", "v", "w", "w"], ["a", "b", "c", "d", "e"], "categorical")
    # (2, w) answered at positions 0 and 4, (1, w) at 1 and 3: keep 2, 3, 4 in that order
    assert ans.obj.tolist() == [0, 1, 0] and ans.src.tolist() == [1, 0, 0]
    assert list(ans.classes[ans.val]) == ["c", "d", "e"]
    assert list(ans.objects) == [2, 1] and list(ans.sources) == ["w", "v"]


def test_encode_sorted_integer_objects_give_the_same_answers_as_unsorted_coding():
    rng = np.random.default_rng(2)
    obj = np.sort(rng.integers(0, 30, 300))
    src = rng.integers(0, 8, 300)
    val = rng.choice(["x", "y", "z"], 300)
    ans = encode_answers(obj, src, val, "categorical")
    ref = encode_answers(obj.astype(object), src, val, "categorical")  # object dtype: pd.factorize's path
    assert ans.obj.tolist() == ref.obj.tolist() and ans.src.tolist() == ref.src.tolist()
    assert ans.val.tolist() == ref.val.tolist()
    assert ans.objects.tolist() == ref.objects.tolist() and ans.objects.dtype == np.int64
    assert ans.obj.dtype == np.int64 and ans.src.dtype == np.int64


def test_encode_null_objects_and_sources_still_raise():
    with pytest.raises(ArgumentError, match="NULL object"):
        encode_answers(pd.Series([1, None, 2], dtype="Int64"), [1, 2, 3], ["a", "b", "c"], "categorical")
    with pytest.raises(ArgumentError, match="NULL source"):
        encode_answers([1, 2, 3], [1.0, np.nan, 3.0], ["a", "b", "c"], "categorical")


def test_incidence_equals_the_coo_built_matrix_sorted_or_not():
    rng = np.random.default_rng(3)
    for shuffle in (False, True):
        obj = np.sort(rng.integers(0, 40, 400))
        if shuffle:
            obj = rng.permutation(obj)
        ans = encode_answers(obj, rng.integers(0, 9, 400), rng.integers(0, 4, 400), "categorical")
        k = ans.n_classes
        ref = sp.coo_matrix((np.ones(len(ans.val)), (ans.obj, ans.src * k + ans.val)),
                            shape=(ans.n_objects, ans.n_sources * k)).toarray()
        assert np.array_equal(DawidSkene._incidence(ans).toarray(), ref)


def _first_of_tied(xs):
    """The label tie rule, restated: the lowest index within 1e-11 relative (+1e-300) of the largest score."""
    m = max(xs)
    return next(i for i, x in enumerate(xs) if x == m or abs(m - x) <= 1e-11 * max(abs(m), abs(x)) + 1e-300)


def _reference_ds(ans, tol=1e-6, max_iter=100, smoothing=0.0, diag_prior=0.0):
    """The (objects x classes) EM the (classes x objects) one replaced, written out densely."""
    k, w = ans.n_classes, ans.n_sources
    by_pair = sp.csr_matrix((np.ones(len(ans.val)), (ans.src * k + ans.val, ans.obj)),
                            shape=(w * k, ans.n_objects))

    def m_step(post):
        priors = np.clip(post.mean(axis=0), _EPS, None)
        cm = np.asarray(by_pair @ post).reshape(w, k, k).transpose(0, 2, 1) + smoothing + diag_prior * np.eye(k)
        cm = np.clip(cm, _EPS, None)
        return priors / priors.sum(), cm / cm.sum(axis=2, keepdims=True)

    post = normalize_rows(class_votes(ans))
    priors, cm = m_step(post)
    ll_old, n_iter = -np.inf, 0
    for n_iter in range(1, max_iter + 1):
        logp = np.log(cm)[ans.src, :, ans.val]  # per answer, log pi[w, k, l] for every k
        logp = np.stack([np.bincount(ans.obj, logp[:, c], ans.n_objects) for c in range(k)], axis=1)
        logp += np.log(priors)
        mx = logp.max(axis=1, keepdims=True)
        e = np.exp(logp - mx)
        post = e / e.sum(axis=1, keepdims=True)
        ll = float((mx.ravel() + np.log(e.sum(axis=1))).sum())
        priors, cm = m_step(post)
        if (ll - ll_old) / len(ans.val) < tol:
            break
        ll_old = ll
    truth = np.array([_first_of_tied(row) for row in post.tolist()], dtype=np.int64)
    weights = (np.diagonal(cm, axis1=1, axis2=2) * priors).sum(axis=1)
    return truth, post[np.arange(ans.n_objects), truth], weights, n_iter, cm, post, priors


@pytest.mark.parametrize("opts", [{}, {"smoothing": 0.5}, {"diag_prior": 2.0}, {"tol": 0.0, "max_iter": 7}])
def test_ds_fit_matches_the_objects_by_classes_em(opts):
    rng = np.random.default_rng(4)
    n = 600
    obj = rng.permutation(np.repeat(np.arange(120), 5))
    src = rng.integers(0, 25, n)
    truth = rng.integers(0, 3, 120)
    right = rng.random(n) < 0.7
    val = np.where(right, truth[obj], rng.integers(0, 3, n))
    ans = encode_answers(obj, src, val, "categorical")
    m = DawidSkene(**opts)
    got = m._fit(ans)
    ref = _reference_ds(ans, **{"tol": 1e-6, "max_iter": 100, **opts})
    assert got[3] == ref[3]  # same iterations
    assert got[0].tolist() == ref[0].tolist()
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got[2], ref[2], rtol=1e-12, atol=1e-14)
    # documented layouts: confusion (source, true k, label l), rows over l sum to 1; posteriors (objects x classes)
    assert m.confusion_.shape == (ans.n_sources, 3, 3) and m.confusion_.flags.c_contiguous
    np.testing.assert_allclose(m.confusion_, ref[4], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(m.confusion_.sum(axis=2), 1.0)
    assert m.posteriors_.shape == (ans.n_objects, 3) and m.posteriors_.flags.c_contiguous
    np.testing.assert_allclose(m.posteriors_, ref[5], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(m.priors_, ref[6], rtol=1e-12, atol=1e-14)


def test_ds_through_sql_equals_discover_on_answers_listed_object_by_object():
    import crowddb

    rng = np.random.default_rng(5)
    task = np.repeat(np.arange(200), 6)
    frame = pd.DataFrame({"task": task, "worker": rng.integers(0, 30, len(task)),  # repeated pairs too
                          "label": rng.choice(["c0", "c1", "c2"], len(task))})
    with crowddb.connect(seed=1, progress=False) as db:
        db.load_frame("answers", frame)
        got = db.sql("SELECT object, truth, confidence FROM TRUTH_DISCOVER(answers, object := 'task', "
                     "source := 'worker', value := 'label', method := 'ds')").df()
    ref = discover(frame, "task", "worker", "label", method="ds").objects
    assert got["object"].tolist() == ref["object"].tolist()
    assert got["truth"].tolist() == ref["truth"].tolist()
    np.testing.assert_allclose(got["confidence"].to_numpy(), ref["confidence"].to_numpy(), rtol=1e-12)


def test_method_options_is_cached_and_unchanged():
    assert method_options(DawidSkene) == ("smoothing", "diag_prior")
    assert method_options(DawidSkene) is method_options(DawidSkene)
