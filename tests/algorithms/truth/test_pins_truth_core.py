"""Pins exact behaviour of crowddb.truth.noise, crowddb.truth.base and crowddb.truth.ldp.

Values are derived independently in the tests (closed forms, plain Python loops, or
re-drawing the same numpy Generator streams), not by comparing two crowddb outputs.
"""

from __future__ import annotations

import math
import struct
import sys

import numpy as np
import opendp.prelude  # noqa: F401  (imported up front: its import reads os.urandom, which some tests fake)
import pandas as pd
import pytest

from crowddb.errors import ArgumentError, EmptyInputError, PrivacyError, UnknownColumnError
from crowddb.truth import base, ldp, noise
from crowddb.truth.base import Answers, encode_answers
from crowddb.truth.noise import ExperimentSampler, SecureSampler, make_sampler, opendp_available


# =============================================================================== noise.py


class FakeUrandom:
    """Deterministic stand-in for os.urandom: a fixed list of uint64 words, little-endian, consumed in order."""

    def __init__(self, words):
        self.words = list(words)
        self.calls = []

    def __call__(self, nbytes):
        assert nbytes % 8 == 0
        k = nbytes // 8
        self.calls.append(nbytes)
        out, self.words = self.words[:k], self.words[k:]
        assert len(out) == k, "fake urandom ran out of words"
        return b"".join(struct.pack("<Q", w) for w in out)


def _u53(w):
    """Plain-Python image of SecureSampler.uniform for one 64-bit word: top 53 bits / 2^53."""
    return (w >> 11) / 2.0**53


WORDS = [
    0x0123456789ABCDEF, 0xFEDCBA9876543210, 0x8000000000000000, 0x7FFFFFFFFFFFFFFF,
    0x0000000000001000, 0xDEADBEEFCAFEBABE, 0x5555555555555555, 0xAAAAAAAAAAAAAAAA,
    0x3333333333333333, 0xCCCCCCCCCCCCCCCC, 0x1111111111111111, 0x9999999999999999,
]


@pytest.fixture
def fake_urandom(monkeypatch):
    def install(words):
        f = FakeUrandom(words)
        monkeypatch.setattr(noise.os, "urandom", f)
        return f
    return install


def test_opendp_available_true_and_false(monkeypatch):
    assert opendp_available() is True  # opendp is installed in this environment
    monkeypatch.setitem(sys.modules, "opendp", None)  # makes `import opendp` raise ImportError
    assert opendp_available() is False


def test_experiment_sampler_reproduces_numpy_streams():
    s = ExperimentSampler(11)
    assert s.secure is False
    assert s.description == "numpy PCG64 with a seed (reproducible; experiments only, not for production releases)"
    r = np.random.default_rng(11)
    np.testing.assert_array_equal(s.uniform(5), r.random(5))
    np.testing.assert_array_equal(s.integers(7, 6), r.integers(0, 7, size=6))
    np.testing.assert_array_equal(s.geometric(0.3, 6), r.geometric(0.3, size=6))
    np.testing.assert_array_equal(s.exponential(2.5, 4), r.exponential(2.5, size=4))
    np.testing.assert_array_equal(s.normal(4), r.standard_normal(4))
    x = np.array([1.0, -2.0, 3.5])
    np.testing.assert_array_equal(s.add_laplace(x, 0.7), x + r.laplace(0.0, 0.7, size=3))
    sc = np.array([0.5, 2.0, 3.0])
    np.testing.assert_array_equal(s.add_gaussian(x, sc), x + r.standard_normal(3) * sc)


def test_experiment_sampler_accepts_generator():
    g = np.random.default_rng(5)
    s = ExperimentSampler(g)
    assert s.rng is g


def test_integers_lower_bound_is_zero():
    s = ExperimentSampler(0)
    v = s.integers(2, 2000)
    assert set(np.unique(v)) == {0, 1}


def test_make_sampler_dispatch():
    s = make_sampler(3)
    assert isinstance(s, ExperimentSampler)
    np.testing.assert_array_equal(s.uniform(3), np.random.default_rng(3).random(3))
    sec = make_sampler(None, use_opendp=False)
    assert isinstance(sec, SecureSampler) and sec.use_opendp is False
    sec2 = make_sampler(None, use_opendp=True)
    assert isinstance(sec2, SecureSampler) and sec2.use_opendp is True
    sec3 = make_sampler(None)
    assert sec3.use_opendp is True  # default: opendp_available()


def test_secure_sampler_descriptions(monkeypatch):
    a = SecureSampler(use_opendp=True)
    assert a.secure is True
    assert a.description == "OpenDP measurements (exact discrete sampling) with os.urandom"
    b = SecureSampler(use_opendp=False)
    assert b.use_opendp is False
    assert b.description == "grid-snapped discrete noise from os.urandom (OpenDP not installed)"
    assert SecureSampler().use_opendp is True
    monkeypatch.setattr(noise, "opendp_available", lambda: False)
    assert SecureSampler().use_opendp is False
    assert SecureSampler(use_opendp=True).use_opendp is True


def test_secure_uniform_exact(fake_urandom):
    f = fake_urandom(WORDS[:4])
    u = SecureSampler(use_opendp=False).uniform(4)
    assert f.calls == [32]
    assert u.dtype == np.float64
    assert u.tolist() == [_u53(w) for w in WORDS[:4]]
    fake_urandom([0xFFFFFFFFFFFFFFFF])
    top = SecureSampler(use_opendp=False).uniform(1)[0]
    assert top == (2**53 - 1) / 2.0**53 and top < 1.0


def test_secure_integers_exact(fake_urandom):
    f = fake_urandom(WORDS[:6])
    v = SecureSampler(use_opendp=False).integers(7, 6)
    assert f.calls == [48]
    assert v.dtype == np.int64
    assert v.tolist() == [w % 7 for w in WORDS[:6]]


def test_secure_geometric_exact(fake_urandom):
    p = 0.3
    fake_urandom(WORDS[:5])
    g = SecureSampler(use_opendp=False).geometric(p, 5)
    assert g.dtype == np.int64
    exp = [math.floor(math.log(1.0 - _u53(w)) / math.log1p(-p)) + 1 for w in WORDS[:5]]
    assert g.tolist() == exp
    # p >= 1: every trial succeeds at once; p == 1 exactly must not reach log1p(-1)
    f = fake_urandom([])
    one = SecureSampler(use_opendp=False).geometric(1.0, 3)
    assert one.tolist() == [1, 1, 1] and one.dtype == np.int64 and f.calls == []
    assert SecureSampler(use_opendp=False).geometric(1.5, 2).tolist() == [1, 1]


def test_secure_exponential_exact(fake_urandom):
    fake_urandom(WORDS[:4])
    e = SecureSampler(use_opendp=False).exponential(2.5, 4)
    exp = [-2.5 * math.log(1.0 - _u53(w)) for w in WORDS[:4]]
    np.testing.assert_allclose(e, exp, rtol=1e-15, atol=0)


def test_secure_normal_box_muller_exact(fake_urandom):
    f = fake_urandom(WORDS[:6])
    z = SecureSampler(use_opendp=False).normal(3)
    assert f.calls == [24, 24]
    u1 = [1.0 - _u53(w) for w in WORDS[:3]]
    u2 = [_u53(w) for w in WORDS[3:6]]
    exp = [math.sqrt(-2 * math.log(a)) * math.cos(2 * math.pi * b) for a, b in zip(u1, u2)]
    np.testing.assert_allclose(z, exp, rtol=1e-13, atol=1e-15)


def test_grid_values():
    assert SecureSampler._grid(1.0) == 2.0**-12
    assert SecureSampler._grid(3.0) == 2.0**-11
    assert SecureSampler._grid(0.75) == 2.0**-13
    assert SecureSampler._grid(8.0) == 2.0**-9


def test_secure_laplace_grid_fallback_exact(fake_urandom):
    scale = 3.0
    g = 2.0 ** (math.floor(math.log2(scale)) - 12)
    t = scale / g
    p = -math.expm1(-1.0 / t)
    x = np.array([0.1234567, -5.5, 2.0])
    fake_urandom(WORDS[:6])
    out = SecureSampler(use_opendp=False).add_laplace(x, scale)

    def geo(w):
        return math.floor(math.log(1.0 - _u53(w)) / math.log1p(-p)) + 1

    exp = [round(xi / g) * g + (geo(a) - geo(b)) * g for xi, a, b in zip(x, WORDS[:3], WORDS[3:6])]
    np.testing.assert_allclose(out, exp, rtol=0, atol=1e-12)
    # output lies on the grid
    assert np.all(out / g == np.round(out / g))


def test_secure_laplace_accepts_list_and_empty(fake_urandom):
    f = fake_urandom([])
    for use in (False, True):
        e = SecureSampler(use_opendp=use).add_laplace(np.array([]), 1.0)
        assert e.shape == (0,) and e.dtype == np.float64
    assert f.calls == []
    fake_urandom(WORDS[:2])
    out = SecureSampler(use_opendp=False).add_laplace([1], 1.0)  # a list of ints, one element
    g = 2.0**-12
    p = -math.expm1(-g)

    def geo(w):
        return math.floor(math.log(1.0 - _u53(w)) / math.log1p(-p)) + 1

    assert out.dtype == np.float64 and out.shape == (1,)
    assert out[0] == pytest.approx(1.0 + (geo(WORDS[0]) - geo(WORDS[1])) * g, abs=1e-12)
    assert out[0] != 1.0
    one = SecureSampler(use_opendp=True).add_laplace(np.array([3.0]), 1000.0)
    assert one.shape == (1,) and one[0] != 3.0


def test_secure_gaussian_single_element():
    one = SecureSampler(use_opendp=True).add_gaussian(np.array([3.0]), np.array([1000.0]))
    assert one.shape == (1,) and one[0] != 3.0
    one = SecureSampler(use_opendp=False).add_gaussian(np.array([3.0]), np.array([1000.0]))
    assert one.shape == (1,) and one[0] != 3.0


def test_secure_laplace_opendp_distribution():
    x = np.full(4000, 5.0)
    out = SecureSampler(use_opendp=True).add_laplace(x, 2.0)
    assert out.dtype == np.float64 and out.shape == (4000,)
    dev = out - 5.0
    # E|Lap(b)| = b, median 0
    assert abs(np.abs(dev).mean() - 2.0) < 0.25
    assert abs(np.median(dev)) < 0.25


def test_secure_gaussian_grid_fallback_exact(fake_urandom):
    x = np.array([1.0, 2.0, 3.0, 4.0])
    scale = np.array([1.0, 3.0, 1.0, 3.0])
    fake_urandom(WORDS[:8])
    out = SecureSampler(use_opendp=False).add_gaussian(x, scale)
    u1 = [1.0 - _u53(w) for w in WORDS[:4]]
    u2 = [_u53(w) for w in WORDS[4:8]]
    zs = [math.sqrt(-2 * math.log(a)) * math.cos(2 * math.pi * b) for a, b in zip(u1, u2)]
    exp = []
    for xi, si, zi in zip(x, scale, zs):
        g = 2.0 ** (math.floor(math.log2(si)) - 12)
        exp.append(round(xi / g) * g + round(zi * si / g) * g)
    np.testing.assert_allclose(out, exp, rtol=0, atol=1e-12)


def test_secure_gaussian_scalar_scale_broadcast_and_empty(fake_urandom):
    f = fake_urandom([])
    for use in (False, True):
        e = SecureSampler(use_opendp=use).add_gaussian(np.array([]), 1.0)
        assert e.shape == (0,) and e.dtype == np.float64
    assert f.calls == []
    fake_urandom(WORDS[:4])
    out = SecureSampler(use_opendp=False).add_gaussian([1, 2], 2.0)
    u1 = [1.0 - _u53(w) for w in WORDS[:2]]
    u2 = [_u53(w) for w in WORDS[2:4]]
    g = 2.0 ** (1 - 12)
    exp = [round(xi / g) * g + round(math.sqrt(-2 * math.log(a)) * math.cos(2 * math.pi * b) * 2.0 / g) * g
           for xi, a, b in zip([1, 2], u1, u2)]
    np.testing.assert_allclose(out, exp, rtol=0, atol=1e-12)


def test_secure_gaussian_opendp_per_scale():
    n = 3000
    x = np.arange(2 * n, dtype=np.float64)
    scale = np.where(np.arange(2 * n) % 2 == 0, 0.01, 5.0)  # interleaved: exercises the per-scale grouping
    out = SecureSampler(use_opendp=True).add_gaussian(x, scale)
    assert out.dtype == np.float64 and out.shape == x.shape
    dev = out - x
    small, big = dev[scale == 0.01], dev[scale == 5.0]
    assert abs(small.std() - 0.01) < 0.002
    assert abs(big.std() - 5.0) < 0.4
    assert abs(big.mean()) < 0.4 and abs(small.mean()) < 0.002


# =============================================================================== base.py


def test_constants():
    assert base.MAX_AUTO_CATEGORIES == 10
    assert base._TINY == 1e-12


def test_answers_counts_and_defaults():
    a = Answers(np.array([0]), np.array([0]), np.array([1.0]), pd.Index(["o1", "o2"]), pd.Index(["s"]))
    assert a.n_objects == 2 and a.n_sources == 1 and a.n_classes == 0
    assert a.classes is None and a.kind == "numeric" and a.extra == {}
    b = Answers(np.array([0]), np.array([0]), np.array([1]), pd.Index(["o"]), pd.Index(["s", "t", "u"]),
                pd.Index(["a", "b", "c", "d"]), "categorical")
    assert b.n_classes == 4 and b.n_sources == 3 and b.n_objects == 1
    b.extra["x"] = 1
    assert a.extra == {}  # default_factory: not shared


def test_value_kind_dtypes():
    vk = base.value_kind
    assert vk(pd.Series([True, False])) == "categorical"
    assert vk(pd.Series(["a", "b"], dtype="category")) == "categorical"
    assert vk(pd.Series([1.0, 2.0], dtype="category")) == "categorical"
    assert vk(np.arange(10)) == "categorical"  # exactly MAX_AUTO_CATEGORIES distinct values
    assert vk(np.arange(11)) == "numeric"
    assert vk(pd.Series(list(range(10)) * 3 + [np.nan] * 5)) == "numeric"  # float dtype (NaN)
    assert vk(np.array([1.5, 2.0])) == "numeric"
    assert vk(np.array([1.0, 2.0])) == "numeric"
    assert vk(pd.Series(["a", "b"])) == "categorical"
    assert vk(pd.Series([], dtype=object)) == "categorical"
    # object column of Python numbers counts as numbers
    assert vk(pd.Series([1, 2, 3], dtype=object)) == "categorical"
    assert vk(pd.Series(list(range(20)), dtype=object)) == "numeric"
    assert vk(pd.Series([1.5, 2, 3], dtype=object)) == "numeric"
    assert vk(pd.Series([np.int64(4), np.float32(2.5)], dtype=object)) == "numeric"
    # bools are not numbers in an object column
    assert vk(pd.Series([True, 2.5, 3.5], dtype=object)) == "categorical"
    assert vk(pd.Series([2.5, "x"], dtype=object)) == "categorical"
    # None dropped before the check
    assert vk(pd.Series([None, 1.5, 2.5], dtype=object)) == "numeric"


def test_value_kind_list_vs_array_inputs():
    # a list goes to pd.Series as is (float with NaN: numeric); a tuple goes through np.asarray (object ints)
    assert base.value_kind([1, 2, None]) == "numeric"
    assert base.value_kind((1, 2, None)) == "categorical"


def test_value_kind_inspects_every_value():
    # a label or a numeric string after 1000 numbers makes the column categorical (it was a bare ValueError)
    assert base.value_kind(pd.Series(list(range(1000)) + ["x"], dtype=object)) == "categorical"
    assert base.value_kind(pd.Series(list(range(1000)) + ["5"], dtype=object)) == "categorical"
    assert base.value_kind(pd.Series(["5"] + list(range(1000)), dtype=object)) == "categorical"
    assert base.value_kind(pd.Series([True] + list(range(1000)), dtype=object)) == "categorical"
    assert base.value_kind(pd.Series([0.5] + list(range(1000)), dtype=object)) == "numeric"


def test_encode_numeric_exact():
    a = encode_answers(["b", "a", "b", "c"], ["w2", "w1", "w1", "w2"], [1.5, 2, 3, 4.25], "numeric")
    assert a.kind == "numeric" and a.classes is None
    assert a.objects.tolist() == ["b", "a", "c"] and a.sources.tolist() == ["w2", "w1"]
    assert a.obj.tolist() == [0, 1, 0, 2] and a.src.tolist() == [0, 1, 1, 0]
    assert a.val.dtype == np.float64 and a.val.tolist() == [1.5, 2.0, 3.0, 4.25]
    assert a.obj.dtype == np.int64 and a.src.dtype == np.int64
    assert isinstance(a.objects, pd.Index) and isinstance(a.sources, pd.Index)


def test_encode_series_with_index_and_object_numbers():
    o = pd.Series(["x", "y"], index=[10, 20])
    s = pd.Series(["s", "s"], index=[5, 6])
    v = pd.Series([1, 2.5], index=[7, 8], dtype=object)
    a = encode_answers(o, s, v, "numeric")
    assert a.val.tolist() == [1.0, 2.5] and a.obj.tolist() == [0, 1]


def test_encode_duplicates_keep_last():
    a = encode_answers(["o1", "o1", "o2", "o1", "o2"], ["s1", "s2", "s1", "s1", "s1"], [1.0, 2.0, 3.0, 4.0, 5.0],
                       "numeric")
    # (o1,s1) answered at rows 0 and 3 -> keep row 3; (o2,s1) rows 2 and 4 -> keep row 4; kept in input order
    assert a.obj.tolist() == [0, 0, 1] and a.src.tolist() == [1, 0, 0] and a.val.tolist() == [2.0, 4.0, 5.0]
    # a duplicate whose key equals another pair's key only if codes were mixed up: (o0,s1) vs (o1,s0)
    b = encode_answers(["a", "a", "b"], ["x", "y", "x"], [1.0, 2.0, 3.0], "numeric")
    assert b.val.tolist() == [1.0, 2.0, 3.0]
    c = encode_answers(["a", "b", "a", "b"], ["x", "y", "y", "x"], [1.0, 2.0, 3.0, 4.0], "numeric")
    assert sorted(zip(c.obj.tolist(), c.src.tolist(), c.val.tolist())) == [
        (0, 0, 1.0), (0, 1, 3.0), (1, 0, 4.0), (1, 1, 2.0)]


def test_encode_categorical_sorted_classes():
    a = encode_answers(["o1", "o1", "o2"], ["a", "b", "a"], ["z", "m", "a"], "categorical")
    assert a.kind == "categorical"
    assert a.classes.tolist() == ["a", "m", "z"]
    assert a.val.tolist() == [2, 1, 0] and a.val.dtype == np.int64
    b = encode_answers([1, 2, 3], [1, 1, 1], [3.0, 1.0, -2.0], "categorical")
    assert b.classes.tolist() == [-2, 1, 3] and b.val.tolist() == [2, 1, 0]
    assert b.classes.dtype == np.int64


def test_encode_errors():
    with pytest.raises(ArgumentError, match=r"^object, source and value must have the same length, got 2, 1, 2$"):
        encode_answers([1, 2], [1], [1, 2], "numeric")
    with pytest.raises(ArgumentError, match=r"got 2, 2, 1$"):
        encode_answers([1, 2], [1, 2], [1], "numeric")
    with pytest.raises(EmptyInputError, match=r"^mm: the input has no answers$"):
        encode_answers([], [], [], "numeric", method="mm")
    with pytest.raises(EmptyInputError, match=r"^\?: the input has no answers$"):
        encode_answers([], [], [], "numeric")
    with pytest.raises(ArgumentError, match=r"^mm: 2 answers have a NULL object$"):
        encode_answers([None, "a", None], [1, 2, 3], [1.0, 2.0, 3.0], "numeric", method="mm")
    with pytest.raises(ArgumentError, match=r"^mm: 1 answers have a NULL source$"):
        encode_answers(["a", "b"], [1, None], [1.0, 2.0], "numeric", method="mm")
    with pytest.raises(ArgumentError, match=r"^mm: 2 answers have a NULL source$"):
        encode_answers(["a", "b", "c"], [None, 1, np.nan], [1.0, 2.0, 3.0], "numeric", method="mm")
    with pytest.raises(ArgumentError, match=(
            r"^mm: 2 answers have a NULL/NaN value \(first on object 'b'\); "
            r"filter them out or pass dropna=True$")):
        encode_answers(["a", "b", "c"], [1, 2, 3], [1.0, np.nan, None], "numeric", method="mm")
    with pytest.raises(ArgumentError, match=(
            r"^mm: 2 objects have no answers once NULL values are dropped "
            r"\(e.g. \['b', 'c'\]\); there is nothing to infer their truth from$")):
        encode_answers(["a", "b", "c"], [1, 2, 3], [1.0, np.nan, None], "numeric", dropna=True, method="mm")
    with pytest.raises(ArgumentError, match=r"\(e.g. \['a', 'b', 'c', 'd', 'e'\]\)"):
        encode_answers(list("abcdefz"), [1] * 7, [None] * 6 + [1.0], "numeric", dropna=True)


def test_encode_dropna_keeps_rest():
    a = encode_answers(["a", "a", "b", "b"], ["s", "t", "s", "t"], [1.0, None, np.nan, 4.0], "numeric", dropna=True)
    assert a.objects.tolist() == ["a", "b"] and a.sources.tolist() == ["s", "t"]
    assert a.obj.tolist() == [0, 1] and a.src.tolist() == [0, 1] and a.val.tolist() == [1.0, 4.0]


def test_encode_numeric_type_errors():
    with pytest.raises(ArgumentError, match=(
            r"^mm: method 'mm' is numeric but the value column holds (str|object) values such as 'x'; "
            r"use a categorical method \('mv', 'ds', 'crh_categorical', \.\.\.\)$")):
        encode_answers([1, 2], [1, 2], ["x", "y"], "numeric", method="mm")
    with pytest.raises(ArgumentError, match=r"holds bool values such as (np\.)?True"):
        encode_answers([1, 2], [1, 2], [True, False], "numeric", method="mm")
    with pytest.raises(ArgumentError, match=r"holds object values such as 1"):
        encode_answers([1, 2], [1, 2], pd.Series([1, "y"], dtype=object), "numeric")
    # object-dtype Python numbers are accepted and converted
    a = encode_answers([1, 2], [1, 2], pd.Series([1, 2.5], dtype=object), "numeric")
    assert a.val.tolist() == [1.0, 2.5]
    # object ints with bools mixed in: bool is an int, to_numeric gives object -> float conversion works
    b = encode_answers([1, 2, 3], [1, 2, 3], pd.Series([np.int64(3), np.float64(2.5), 7], dtype=object), "numeric")
    assert b.val.tolist() == [3.0, 2.5, 7.0]


def test_encode_numeric_nonfinite():
    with pytest.raises(ArgumentError, match=(
            r"^mm: 2 values are NaN or infinite \(first on object 'b'\)$")):
        encode_answers(["a", "b", "c"], [1, 2, 3], [1.0, np.inf, -np.inf], "numeric", method="mm")


def test_encode_categorical_float_errors():
    with pytest.raises(ArgumentError, match=r"^mm: the value column holds NaN or infinite values$"):
        encode_answers(["a", "b"], [1, 2], [1.0, np.inf], "categorical", method="mm")
    with pytest.raises(ArgumentError, match=(
            r"^mm: method 'mm' is categorical but the value column holds non-integral numbers "
            r"such as (np\.float64\()?2\.5\)?; use a numeric method \('mean', 'median', 'crh', 'catd', 'gtm'\) or cast the labels "
            r"to text$")):
        encode_answers(["a", "b", "c"], [1, 2, 3], [1.0, 2.5, 3.25], "categorical", method="mm")


class _Fixed(base.NumericMethod):
    name = "fixed_numeric"

    def _fit(self, ans):  # integer arrays on purpose: fit_answers must cast them to float
        n = ans.n_objects
        return (np.arange(n) * 3 + 1, np.arange(n) % 2, np.arange(ans.n_sources) * 2, 7.0)


class _FixedCat(base.CategoricalMethod):
    name = "fixed_cat"

    def _fit(self, ans):
        n = ans.n_objects
        self.posteriors_ = np.tile(np.linspace(0, 1, ans.n_classes), (n, 1))
        return (np.full(n, float(ans.n_classes - 1)), np.ones(n), np.ones(ans.n_sources), 3)  # float codes


def test_truth_method_init_validation():
    m = base.TruthMethod()
    assert (m.tol, m.max_iter, m.seed, m.dropna) == (1e-6, 100, None, False)
    m = base.TruthMethod(tol=0, max_iter=np.int64(1), seed=4, dropna=True)
    assert m.tol == 0.0 and isinstance(m.tol, float) and m.max_iter == 1 and type(m.max_iter) is int
    assert m.seed == 4 and m.dropna is True
    with pytest.raises(ArgumentError, match=r"^max_iter must be a positive integer, got 0$"):
        base.TruthMethod(max_iter=0)
    with pytest.raises(ArgumentError, match=r"^max_iter must be a positive integer, got 2\.0$"):
        base.TruthMethod(max_iter=2.0)
    with pytest.raises(ArgumentError, match=r"^tol must be a non-negative number, got -1e-09$"):
        base.TruthMethod(tol=-1e-9)
    with pytest.raises(ArgumentError, match=r"^tol must be a non-negative number, got inf$"):
        base.TruthMethod(tol=float("inf"))
    with pytest.raises(ArgumentError, match=r"tol must be"):
        base.TruthMethod(tol=float("nan"))
    assert base.TruthMethod.name == "" and base.TruthMethod.kind == "" and base.TruthMethod.aliases == ()
    with pytest.raises(NotImplementedError):
        base.TruthMethod()._fit(None)


def test_fit_numeric_decodes_results():
    m = _Fixed(dropna=True).fit(["o2", "o1", "o2", "o1"], ["s1", "s2", "s2", "s1"], [1.0, None, 3.0, 6.0])
    assert m.kind == "numeric"
    assert m.truths_.tolist() == [1.0, 4.0] and m.truths_.index.tolist() == ["o2", "o1"]
    assert m.truths_.name == "truth" and m.truths_.index.name == "object" and m.truths_.dtype == np.float64
    assert m.confidences_.tolist() == [0.0, 1.0] and m.confidences_.name == "confidence"
    assert m.confidences_.dtype == np.float64
    assert m.confidences_.index.name == "object" and m.confidences_.index.tolist() == ["o2", "o1"]
    assert m.source_weights_.tolist() == [0.0, 2.0] and m.source_weights_.dtype == np.float64
    assert m.source_weights_.name == "weight" and m.source_weights_.index.name == "source"
    assert m.source_weights_.index.tolist() == ["s1", "s2"]
    assert m.n_iter_ == 7 and type(m.n_iter_) is int
    assert m.answers_.val.tolist() == [1.0, 3.0, 6.0]


def test_fit_passes_method_name_and_dropna():
    with pytest.raises(ArgumentError, match=r"^fixed_numeric: 1 answers have a NULL/NaN value"):
        _Fixed().fit(["a", "b"], [1, 1], [1.0, None])


def test_fit_frame_columns():
    df = pd.DataFrame({"t": ["x", "y"], "w": ["s", "s"], "v": [2.0, 3.0], "object": [9, 9], "source": [1, 2],
                       "value": [5.0, 6.0]})
    m = _Fixed().fit_frame(df, object="t", source="w", value="v")
    assert m.truths_.index.tolist() == ["x", "y"] and m.answers_.val.tolist() == [2.0, 3.0]
    m2 = _Fixed().fit_frame(df)
    assert m2.truths_.index.tolist() == [9] and m2.source_weights_.index.tolist() == [1, 2]
    assert m2.answers_.val.tolist() == [5.0, 6.0]
    for kw, role, col in ((dict(object="q"), "object", "q"), (dict(source="q"), "source", "q"),
                          (dict(value="q"), "value", "q")):
        with pytest.raises(UnknownColumnError, match=(
                rf"^{role} column '{col}' not in input columns \['t', 'w', 'v', 'object', 'source', 'value'\]$")):
            _Fixed().fit_frame(df, **kw)


def test_fit_categorical_decodes_labels_and_proba():
    m = _FixedCat().fit(["o1", "o2", "o1"], ["a", "a", "b"], ["cat", "ant", "bee"])
    assert m.kind == "categorical"
    assert m.truths_.tolist() == ["cat", "cat"] and m.truths_.index.name == "object" and m.truths_.name == "truth"
    assert m.classes_.tolist() == ["ant", "bee", "cat"]
    p = m.proba_
    assert list(p.columns) == ["ant", "bee", "cat"] and p.index.tolist() == ["o1", "o2"]
    assert p.index.name == "object"
    np.testing.assert_array_equal(p.to_numpy(), [[0.0, 0.5, 1.0], [0.0, 0.5, 1.0]])
    assert m.n_iter_ == 3


def test_register_and_get_method():
    class _Tmp(base.NumericMethod):
        name = "zz_tmp_method"
        aliases = ("zz_alias_one", "zz_alias_two")

    try:
        assert base.register(_Tmp) is _Tmp
        assert base.METHODS["zz_tmp_method"] is _Tmp
        assert base.ALIASES["zz_alias_one"] == "zz_tmp_method" and base.ALIASES["zz_alias_two"] == "zz_tmp_method"
        assert base.get_method("  ZZ_Alias_Two ") is _Tmp
        assert base.get_method("zz_tmp_method") is _Tmp
    finally:
        base.METHODS.pop("zz_tmp_method", None)
        base.ALIASES.pop("zz_alias_one", None)
        base.ALIASES.pop("zz_alias_two", None)
    assert base.get_method("MV").name == "mv"
    assert base.get_method("Majority_Vote").name == "mv"
    methods = ", ".join(sorted(base.METHODS))
    aliases = ", ".join(sorted(base.ALIASES))
    import re
    with pytest.raises(ArgumentError, match="^" + re.escape(
            f"unknown truth-inference method 'Nope'; valid methods: {methods} (aliases: {aliases}) or 'auto'") + "$"):
        base.get_method("Nope")


def test_segment_sum_and_class_votes():
    np.testing.assert_array_equal(base.segment_sum(np.array([0, 2, 2]), np.array([1.5, 2.0, 3.0]), 4),
                                  [1.5, 0.0, 5.0, 0.0])
    a = Answers(np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1]), np.array([2, 0, 2, 2]), pd.Index(["a", "b"]),
                pd.Index(["s", "t"]), pd.Index(["x", "y", "z"]), "categorical")
    np.testing.assert_array_equal(base.class_votes(a), [[1, 0, 1], [0, 0, 2]])
    np.testing.assert_array_equal(base.class_votes(a, np.array([0.5, 2.0, 1.0, 3.0])), [[2.0, 0, 0.5], [0, 0, 4.0]])
    b = Answers(np.array([0]), np.array([0]), np.array([0]), pd.Index(["a", "b"]), pd.Index(["s"]),
                pd.Index(["x", "y"]), "categorical")
    assert base.class_votes(b).shape == (2, 2)  # minlength covers objects without votes
    np.testing.assert_array_equal(base.class_votes(b), [[1, 0], [0, 0]])


def test_normalize_rows():
    out = base.normalize_rows(np.array([[1.0, 3.0], [0.0, 0.0], [2.0, 0.0]]))
    np.testing.assert_array_equal(out, [[0.25, 0.75], [0.5, 0.5], [1.0, 0.0]])
    out3 = base.normalize_rows(np.array([[0.0, 0.0, 0.0]]))
    np.testing.assert_allclose(out3, [[1 / 3, 1 / 3, 1 / 3]])


def _tied_with_max(row):
    """The tie rule, restated: x ties with the row maximum m when |m - x| <= 1e-11 * max(|m|, |x|) + 1e-300."""
    m = max(row)
    return [x == m or abs(m - x) <= 1e-11 * max(abs(m), abs(x)) + 1e-300 for x in row]


def test_argmax_rows():
    # row 3: 0.1 + 0.2 (= 0.30000000000000004) and 0.3 are one ulp apart, tied by the rule
    p = np.array([[0.2, 0.5, 0.5], [0.9, 0.05, 0.05], [0.3, 0.3, 0.3], [0.3, 0.1 + 0.2, 0.2]])
    assert base.argmax_rows(p).tolist() == [1, 0, 0, 0]
    for rng_seed in range(3, 13):
        got = base.argmax_rows(p, np.random.default_rng(rng_seed))
        r = np.random.default_rng(rng_seed).random(p.shape)
        exp = []
        for i in range(len(p)):  # the largest draw among the tied classes, the first on equal draws
            tied = _tied_with_max(p[i].tolist())
            exp.append(max((j for j in range(3) if tied[j]), key=lambda j: (r[i, j], -j)))
        assert got.tolist() == exp
    # ties broken at random: over many seeds every tied class wins sometimes, the non-maximal never
    wins = {base.argmax_rows(p[:1], np.random.default_rng(s))[0] for s in range(40)}
    assert wins == {1, 2}
    # a gap of 5e-10 (1e-9 relative) is 100 times the tie tolerance: never a tie, never flipped
    q = np.array([[0.5, 0.5 - 5e-10]])
    assert base.argmax_rows(q[:, ::-1]).tolist() == [1]
    assert {base.argmax_rows(q, np.random.default_rng(s))[0] for s in range(40)} == {0}


def _loop_confidence(obj, src, val, truth, w_source=None):
    n = max(obj) + 1
    num = [0.0] * n
    den = [0.0] * n
    for o, s, v in zip(obj, src, val):
        w = 1.0 if w_source is None else max(w_source[s], 0.0)
        num[o] += w * (v - truth[o]) ** 2
        den[o] += w
    mean = sum(val) / len(val)
    sd = math.sqrt(sum((v - mean) ** 2 for v in val) / len(val)) or 1.0
    return [1.0 / (1.0 + math.sqrt(num[i] / max(den[i], 1e-12)) / sd) for i in range(n)]


def test_numeric_confidence_loop():
    obj, src, val = [0, 0, 1, 1, 2], [0, 1, 0, 2, 1], [1.0, 3.0, 10.0, 14.0, 5.0]
    a = Answers(np.array(obj), np.array(src), np.array(val), pd.Index(list("abc")), pd.Index(list("xyz")))
    truth = np.array([2.0, 11.0, 4.0])
    np.testing.assert_allclose(base.numeric_confidence(a, truth), _loop_confidence(obj, src, val, truth), rtol=1e-14)
    w = np.array([0.5, -2.0, 0.25])  # negative weight clipped to 0; weights below 1 matter in max(den, tiny)
    np.testing.assert_allclose(base.numeric_confidence(a, truth, w), _loop_confidence(obj, src, val, truth, w),
                               rtol=1e-14)
    # all claims equal -> std 0 -> scale 1
    b = Answers(np.array([0, 0]), np.array([0, 1]), np.array([2.0, 2.0]), pd.Index(["a"]), pd.Index(["x", "y"]))
    np.testing.assert_allclose(base.numeric_confidence(b, np.array([5.0])), [1.0 / (1.0 + 3.0)])
    # an object whose only source has weight 0: rms 0 -> confidence 1
    np.testing.assert_allclose(base.numeric_confidence(a, truth, np.array([1.0, 0.0, 1.0]))[2], 1.0)


# =============================================================================== ldp.py


def _num(obj, src, val, n_obj=None, n_src=None):
    n_obj = n_obj if n_obj is not None else max(obj) + 1
    n_src = n_src if n_src is not None else max(src) + 1
    return Answers(np.array(obj, dtype=np.int64), np.array(src, dtype=np.int64), np.array(val, dtype=np.float64),
                   pd.Index([f"o{i}" for i in range(n_obj)]), pd.Index([f"s{i}" for i in range(n_src)]))


def _cat(obj, src, val, classes, n_obj=None, n_src=None):
    a = _num(obj, src, val, n_obj, n_src)
    return Answers(a.obj, a.src, np.array(val, dtype=np.int64), a.objects, a.sources, pd.Index(classes),
                   "categorical")


def test_check_epsilon():
    assert ldp.check_epsilon(2) == 2.0 and type(ldp.check_epsilon(2)) is float
    assert ldp.check_epsilon("0.5") == 0.5
    assert ldp.check_epsilon(1e-300) == 1e-300
    with pytest.raises(PrivacyError, match=r"^epsilon must be a positive number, got 'abc'$"):
        ldp.check_epsilon("abc")
    with pytest.raises(PrivacyError, match=r"^eps2 must be a positive number, got None$"):
        ldp.check_epsilon(None, "eps2")
    for bad, shown in ((0, "0"), (-1.0, "-1.0"), (float("inf"), "inf"), (float("nan"), "nan")):
        with pytest.raises(PrivacyError, match=rf"^epsilon must be a finite number > 0, got {shown}$"):
            ldp.check_epsilon(bad)
    with pytest.raises(PrivacyError, match=r"^eps2 must be a finite number > 0, got 0$"):
        ldp.check_epsilon(0, name="eps2")


def test_check_delta():
    assert ldp._check_delta("0.25") == 0.25
    assert ldp._check_delta(1e-300) == 1e-300
    with pytest.raises(PrivacyError, match=r"^delta must be a number in \(0, 1\), got 'x'$"):
        ldp._check_delta("x")
    with pytest.raises(PrivacyError, match=r"^delta must be a number in \(0, 1\), got None$"):
        ldp._check_delta(None)
    for bad in (0, 1, 1.5, -0.1):
        with pytest.raises(PrivacyError, match=rf"^delta must be in \(0, 1\), got {bad}$"):
            ldp._check_delta(bad)


def test_report_fields():
    r = ldp._report("mech", 1.5, 0.1, "g", "t", ExperimentSampler(0), extra1=3)
    assert r == {"mechanism": "mech", "epsilon": 1.5, "delta": 0.1, "guarantee": "g", "theorem": "t",
                 "sampler": ExperimentSampler.description, "production_safe": False, "extra1": 3}
    r2 = ldp._report("m", 1.0, 0.0, "g", "t", SecureSampler(use_opendp=False))
    assert r2["production_safe"] is True and r2["sampler"].startswith("grid-snapped")


def test_numeric_domain_cases():
    nd = ldp._numeric_domain
    a = _num([0, 1, 2], [0, 0, 1], [2.0, 5.0, 3.0])
    with pytest.raises(ArgumentError, match=(
            r"^perturb='mm' adds numeric noise and needs numeric answers; the value column holds labels "
            r"\(use perturb='rr', or code the labels as numbers\)$")):
        nd(_cat([0], [0], [0], ["x"]), None, None, False, "mm")
    dom, lo, hi, prov = nd(a, [5, 2, 3, 2, 9], None, True, "mm")
    assert dom.tolist() == [2.0, 3.0, 5.0, 9.0] and dom.dtype == np.float64
    assert (lo, hi, prov) == (2.0, 9.0, "given")
    dom, lo, hi, prov = nd(a, [5, 2, 3], (0, 100), False, "mm")  # domain wins over bounds
    assert dom.tolist() == [2.0, 3.0, 5.0] and (lo, hi) == (2.0, 5.0)
    with pytest.raises(ArgumentError, match=r"^domain must list at least two finite values, got \[5, 5\]$"):
        nd(a, [5, 5], None, False, "mm")
    with pytest.raises(ArgumentError, match=r"^domain must list at least two finite values, got \[2, inf\]$"):
        nd(a, [2, float("inf")], None, False, "mm")
    with pytest.raises(ArgumentError, match=r"^perturb='mm': some answers lie outside the given domain$"):
        nd(a, [2, 3], None, False, "mm")
    dom, lo, hi, prov = nd(a, None, (1, 6), False, "mm")
    assert dom is None and (lo, hi, prov) == (1.0, 6.0, "given") and type(lo) is float
    dom, lo, hi, prov = nd(a, None, (2, 5), False, "mm")  # answers on the bounds are inside
    assert (lo, hi) == (2.0, 5.0)
    for b in ((3, 3), (4, 1), (0, float("inf")), (float("nan"), 1)):
        with pytest.raises(ArgumentError, match=r"^bounds must be \(low, high\) with low < high, got "):
            nd(a, None, b, False, "mm")
    with pytest.raises(ArgumentError, match=r"^perturb='mm' needs a discrete domain: pass domain=\[\.\.\.\]$"):
        nd(a, None, (1, 6), True, "mm")
    with pytest.raises(ArgumentError, match=r"^perturb='mm': some answers lie outside bounds \(3, 6\)$"):
        nd(a, None, (3, 6), False, "mm")
    with pytest.raises(ArgumentError, match=r"^perturb='mm': some answers lie outside bounds \(1, 4\)$"):
        nd(a, None, (1, 4), False, "mm")
    dom, lo, hi, prov = nd(a, None, None, True, "mm")
    assert dom.tolist() == [2.0, 3.0, 4.0, 5.0] and (lo, hi) == (2.0, 5.0)
    assert prov == "data (integer min..max; pass domain= for a data-independent guarantee)"
    c = _num([0, 1], [0, 0], [4.0, 4.0])
    dom, lo, hi, prov = nd(c, None, None, False, "mm")
    assert dom.tolist() == [4.0, 5.0] and (lo, hi) == (4.0, 5.0)
    f = _num([0, 1], [0, 0], [1.5, 4.0])
    dom, lo, hi, prov = nd(f, None, None, False, "mm")
    assert dom is None and (lo, hi) == (1.5, 4.0)
    assert prov == "data (min..max; pass bounds= for a data-independent guarantee)"
    f2 = _num([0], [0], [2.5])
    assert nd(f2, None, None, False, "mm")[1:3] == (2.5, 3.5)
    with pytest.raises(ArgumentError, match=(
            r"^perturb='mm' needs a discrete answer domain: the values are not integers, pass domain=\[\.\.\.\]$")):
        nd(f, None, None, True, "mm")


def test_cells_and_dense_answers():
    a = _num([2, 0, 1], [0, 1, 1], [1.0, 2.0, 3.0], n_obj=3)
    assert ldp._cells(a).tolist() == [2, 3, 4]
    vals = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    d = ldp._dense_answers(a, vals)
    assert d.obj.tolist() == [0, 1, 2, 0, 1, 2] and d.src.tolist() == [0, 0, 0, 1, 1, 1]
    assert d.val.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert d.objects is a.objects and d.sources is a.sources and d.classes is None and d.kind == "numeric"


def _lp_expected(cells, m, n, eps, seed, dom=None, lo=None, hi=None, block_rows=None, null_fill="uniform"):
    """Plain-loop LP (Eq. 6-7) replaying numpy's Generator in the same order as the blocks."""
    rng = np.random.default_rng(seed)
    sens = len(dom) if dom is not None else hi - lo
    scale = sens / eps
    block_rows = block_rows or m
    out = []
    for r0 in range(0, m, block_rows):
        r1 = min(m, r0 + block_rows)
        size = (r1 - r0) * n
        if null_fill == "uniform":
            if dom is not None:
                fill = [dom[i] for i in rng.integers(0, len(dom), size=size)]
            else:
                fill = [lo + (hi - lo) * u for u in rng.random(size)]
        else:
            fill = [float(null_fill)] * size
        for i in range(r0, r1):
            for j in range(n):
                if (i, j) in cells:
                    fill[(i - r0) * n + j] = cells[(i, j)]
        noise = rng.laplace(0.0, scale, size=size)
        out.extend(f + z for f, z in zip(fill, noise))
    return out, scale, sens


LP_CELLS = {(0, 0): 1.0, (0, 2): 3.0, (1, 1): 2.0, (2, 0): 3.0, (3, 2): 1.0}


def _lp_answers():
    src, obj = zip(*LP_CELLS)
    return _num(list(obj), list(src), list(LP_CELLS.values()), n_obj=3, n_src=4)


@pytest.mark.parametrize("block_cells", [4_000_000, 6, 5, 1])
def test_laplace_perturbation_exact_domain(block_cells):
    a = _lp_answers()
    dom = [0.0, 1.0, 2.0, 3.0, 4.0]
    out, rep = ldp.laplace_perturbation(a, 2.0, ExperimentSampler(9), domain=dom, block_cells=block_cells)
    rows = max(1, block_cells // 3)
    exp, scale, sens = _lp_expected(LP_CELLS, 4, 3, 2.0, 9, dom=dom, block_rows=rows)
    np.testing.assert_allclose(out.val, exp, rtol=1e-14, atol=1e-14)
    assert out.obj.tolist() == [0, 1, 2] * 4 and out.src.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert scale == 2.5 and sens == 5
    assert rep == {"mechanism": "laplace", "epsilon": 2.0, "delta": 0.0,
                   "guarantee": "epsilon-cell LDP (each cell of a worker's full task vector, NULLs included)",
                   "theorem": "Sun et al. Theorem 1 (LP, Eq. 6-7)", "sampler": ExperimentSampler.description,
                   "production_safe": False, "scale": 2.5, "sensitivity": 5.0, "domain_source": "given",
                   "cells": 12}


def test_laplace_perturbation_exact_bounds_and_fill():
    a = _lp_answers()
    out, rep = ldp.laplace_perturbation(a, 0.5, ExperimentSampler(4), bounds=(0.5, 6.5), block_cells=7)
    exp, scale, _ = _lp_expected(LP_CELLS, 4, 3, 0.5, 4, lo=0.5, hi=6.5, block_rows=2)
    np.testing.assert_allclose(out.val, exp, rtol=1e-14, atol=1e-13)
    assert rep["scale"] == 12.0 and rep["sensitivity"] == 6.0 and rep["cells"] == 12
    out2, rep2 = ldp.laplace_perturbation(a, 0.5, ExperimentSampler(4), null_fill="-7.5", block_cells=3)
    exp2, _, _ = _lp_expected(LP_CELLS, 4, 3, 0.5, 4, dom=[1.0, 2.0, 3.0], block_rows=1, null_fill=-7.5)
    np.testing.assert_allclose(out2.val, exp2, rtol=1e-14, atol=1e-13)
    assert rep2["domain_source"].startswith("data (integer min..max") and rep2["sensitivity"] == 3.0
    with pytest.raises(ArgumentError, match=r"^null_fill must be 'uniform' or a number, got 'zero'$"):
        ldp.laplace_perturbation(a, 0.5, ExperimentSampler(4), null_fill="zero")
    with pytest.raises(ArgumentError, match=r"^null_fill must be 'uniform' or a number, got None$"):
        ldp.laplace_perturbation(a, 0.5, ExperimentSampler(4), null_fill=None)


def test_laplace_answered_cells_keep_value_with_tiny_noise():
    a = _lp_answers()
    out, _ = ldp.laplace_perturbation(a, 1e12, ExperimentSampler(1), null_fill=0.0, block_cells=4)
    dense = out.val.reshape(4, 3)
    exp = np.zeros((4, 3))
    for (s, o), v in LP_CELLS.items():
        exp[s, o] = v
    np.testing.assert_allclose(dense, exp, atol=1e-9)


def test_laplace_epsilon_validated():
    with pytest.raises(PrivacyError, match=r"^epsilon must be a finite number > 0, got 0$"):
        ldp.laplace_perturbation(_lp_answers(), 0, ExperimentSampler(1))


def test_rr_probabilities_exact():
    e = math.exp(1.5)
    assert ldp.rr_probabilities(1.5, 4) == (e / (4 + e), 1.0 / (4 + e))
    with pytest.raises(PrivacyError):
        ldp.rr_probabilities(-1, 4)


class ScriptedSampler:
    """Duck-typed sampler returning scripted draws; records every request."""

    description = "scripted"
    secure = False

    def __init__(self, uniform=(), integers=(), geometric=()):
        self._u, self._i, self._g = list(uniform), list(integers), list(geometric)
        self.log = []

    def uniform(self, size):
        self.log.append(("uniform", size))
        out = np.asarray(self._u.pop(0), dtype=np.float64)
        assert len(out) == size
        return out

    def integers(self, high, size):
        self.log.append(("integers", high, size))
        out = np.asarray(self._i.pop(0), dtype=np.int64)
        assert len(out) == size
        return out

    def geometric(self, p, size):
        self.log.append(("geometric", p, size))
        head = np.asarray(self._g.pop(0), dtype=np.int64)
        return np.concatenate([head, np.full(size - len(head), 10**6, dtype=np.int64)])[:size]


def test_geometric_positions_scripted():
    s = ScriptedSampler(geometric=[np.full(92, 10), np.full(70, 10)])
    pos = ldp._geometric_positions(s, 0.01, 1000)
    assert pos.tolist() == list(range(9, 1000, 10)) and pos.dtype == np.int64
    # first request: E = 1001 * 0.01, size int(E + 6 sqrt(E) + 64); second from pos 919: E = 81 * 0.01
    e1, e2 = 1001 * 0.01, 81 * 0.01
    assert s.log == [("geometric", 0.01, int(e1 + 6 * math.sqrt(e1) + 64)),
                     ("geometric", 0.01, int(e2 + 6 * math.sqrt(e2) + 64))]
    assert s.log[0][2] == 92 and s.log[1][2] == 70
    s2 = ScriptedSampler(geometric=[[1, 1, 1]])
    assert ldp._geometric_positions(s2, 0.5, 3).tolist() == [0, 1, 2]  # a success at the last position counts
    s3 = ScriptedSampler(geometric=[[3, 1]])
    assert ldp._geometric_positions(s3, 0.5, 3).tolist() == [2]
    s4 = ScriptedSampler()
    for p, total in ((0.0, 10), (0.5, 0), (-0.1, 5), (0.5, -3)):
        e = ldp._geometric_positions(s4, p, total)
        assert e.tolist() == [] and e.dtype == np.int64
    assert s4.log == []


def test_geometric_positions_rate():
    pos = ldp._geometric_positions(ExperimentSampler(2), 0.3, 20000)
    assert len(np.unique(pos)) == len(pos) and pos.min() >= 0 and pos.max() < 20000
    assert abs(len(pos) - 6000) < 4 * math.sqrt(20000 * 0.3 * 0.7)


def test_randomized_response_scripted_numeric():
    # 2 workers x 3 tasks; answered (s0,o0)=0, (s0,o2)=2, (s1,o1)=1; NULL cells 1, 3, 5 (flat source*3+object)
    a = _num([0, 2, 1], [0, 0, 1], [0.0, 2.0, 1.0], n_obj=3, n_src=2)
    eps = 1.0
    e = math.e
    keep, other = e / (3 + e), 1 / (3 + e)
    s = ScriptedSampler(uniform=[[0.0, keep, 0.99]],          # kept: yes (0 < keep), no (keep < keep is false), no
                        integers=[[2, 2, 0], [2]],            # r >= val -> r + 1 (3 = NULL), else r
                        geometric=[[2, 5]])                   # NULL ranks: 1 (-> cell 3); 6 is past the 3 NULLs
    out, rep = ldp.randomized_response(a, eps, s)
    assert s.log[0] == ("uniform", 3) and s.log[1] == ("integers", 3, 3)
    g = s.log[2]
    assert g[0] == "geometric" and g[1] == pytest.approx(3 * other)
    assert s.log[3] == ("integers", 3, 1)
    # (s0,o0) kept 0; (s0,o2): r=2 >= 2 -> NULL; (s1,o1): r=0 < 1 -> 0; NULL cell 3 = (s1,o0) -> value 2
    assert out.obj.tolist() == [0, 1, 0] and out.src.tolist() == [0, 1, 1] and out.val.tolist() == [0.0, 0.0, 2.0]
    assert out.kind == "numeric" and out.classes is None and out.val.dtype == np.float64
    assert out.objects is a.objects and out.sources is a.sources
    assert rep == {"mechanism": "randomized_response", "epsilon": 1.0, "delta": 0.0,
                   "guarantee": "epsilon-cell LDP (each cell of a worker's full task vector, NULLs included)",
                   "theorem": "Sun et al. Eq. (8) (RR extended to NULL)", "sampler": "scripted",
                   "production_safe": False, "keep_probability": keep, "other_probability": other,
                   "domain_size": 3,
                   "domain_source": "data (labels seen; pass domain= for a data-independent guarantee)"
                   if False else "data (integer min..max; pass domain= for a data-independent guarantee)",
                   "answers_sent": 3}


def test_randomized_response_scripted_null_positions():
    # answered cells 0 and 4 of 2x3; NULL cells 1, 2, 3, 5 -> ranks 0..3
    a = _num([0, 1], [0, 1], [5.0, 10.0], n_obj=3, n_src=2)
    s = ScriptedSampler(uniform=[[0.0, 0.0]], integers=[[0, 0], [0, 1, 2, 1]], geometric=[[1, 1, 1, 1]])
    out, rep = ldp.randomized_response(a, 2.0, s, domain=[5, 7.5, 10])
    # every NULL cell becomes a value: ranks 0,1,2,3 -> cells 1,2,3,5
    assert out.obj.tolist() == [0, 1, 1, 2, 0, 2] and out.src.tolist() == [0, 1, 0, 0, 1, 1]
    assert out.val.tolist() == [5.0, 10.0, 5.0, 7.5, 10.0, 7.5]
    assert rep["domain_source"] == "given" and rep["domain_size"] == 3 and rep["answers_sent"] == 6


def test_randomized_response_scripted_categorical():
    a = _cat([0, 1], [0, 0], [1, 0], ["b", "d"], n_obj=2, n_src=1)  # answers 'd', 'b'
    s = ScriptedSampler(uniform=[[0.0, 0.9]], integers=[[0, 1], []], geometric=[[]])
    out, rep = ldp.randomized_response(a, 1.0, s, domain=["a", "c"])
    # classes a, b, c, d: codes of the answers 3 ('d') kept, 1 ('b') replaced by r=1 >= 1 -> 2 ('c')
    assert out.kind == "categorical" and out.classes.tolist() == ["a", "b", "c", "d"]
    assert out.val.tolist() == [3, 2] and out.val.dtype == np.int64 and out.obj.tolist() == [0, 1]
    assert rep["domain_size"] == 4 and rep["domain_source"] == "given"
    s2 = ScriptedSampler(uniform=[[0.0, 0.0]], integers=[[0, 0], []], geometric=[[]])
    out2, rep2 = ldp.randomized_response(a, 1.0, s2)
    assert out2.classes.tolist() == ["b", "d"] and out2.val.tolist() == [1, 0]
    assert rep2["domain_source"] == "data (labels seen; pass domain= for a data-independent guarantee)"
    assert rep2["keep_probability"] == math.e / (2 + math.e)


def test_randomized_response_needs_discrete_numeric():
    a = _num([0, 1], [0, 0], [1.5, 2.0])
    with pytest.raises(ArgumentError, match=r"^perturb='rr' needs a discrete answer domain"):
        ldp.randomized_response(a, 1.0, ExperimentSampler(0))
    with pytest.raises(PrivacyError):
        ldp.randomized_response(a, -1.0, ExperimentSampler(0))


def test_randomized_response_frequencies():
    rng = np.random.default_rng(5)
    m, n, k = 200, 50, 4
    mask = rng.random((m, n)) < 0.3
    s_, o_ = np.nonzero(mask)
    v_ = rng.integers(0, k, len(s_)).astype(float)
    a = _num(o_.tolist(), s_.tolist(), v_.tolist(), n_obj=n, n_src=m)
    eps = 0.7
    out, _ = ldp.randomized_response(a, eps, ExperimentSampler(3), domain=range(k))
    keep, other = math.exp(eps) / (k + math.exp(eps)), 1 / (k + math.exp(eps))
    before = {(s, o): v for s, o, v in zip(s_, o_, v_)}
    after = {(s, o): v for s, o, v in zip(out.src, out.obj, out.val)}
    assert len(after) == len(out.val)
    nnz, nnull = len(before), m * n - len(before)
    kept = sum(1 for c, v in before.items() if after.get(c) == v)
    dropped = sum(1 for c in before if c not in after)
    born = [v for c, v in after.items() if c not in before]
    assert abs(kept / nnz - keep) < 4 * math.sqrt(keep * (1 - keep) / nnz)
    assert abs(dropped / nnz - other) < 4 * math.sqrt(other * (1 - other) / nnz)
    assert abs(len(born) / nnull - k * other) < 4 * math.sqrt(k * other * (1 - k * other) / nnull)
    # a new value is uniform over the k values, including the largest
    counts = np.bincount(np.array(born, dtype=int), minlength=k)
    assert len(counts) == k and counts.min() > 0.7 * len(born) / k
    # a replaced value is never the own value, and every other value appears
    changed = [(before[c], v) for c, v in after.items() if c in before and v != before[c]]
    assert all(0 <= v < k for _, v in changed)
    assert {v for _, v in changed} == set(range(k))


def test_task_profile_matrix_exact():
    v = ldp.task_profile_matrix(4, 3, np.random.default_rng(8))
    raw = np.random.default_rng(8).standard_normal((3, 4))
    for j in range(4):
        col = raw[:, j]
        np.testing.assert_allclose(v[:, j], col / sum(abs(x) for x in col), rtol=1e-15)
    assert v.shape == (3, 4)


def _mf_expected(a, V, eta, ridge):
    m, n = a.n_sources, a.n_objects
    d = V.shape[0]
    out = np.zeros((m, n))
    for i in range(m):
        G = ridge * np.eye(d)
        r = np.zeros(d)
        for o, s, v in zip(a.obj, a.src, a.val):
            if s == i:
                G += np.outer(V[:, o], V[:, o])
                r += v * V[:, o]
        u = np.linalg.solve(G, r - eta[i])
        out[i] = u @ V
    return out.ravel()


MF_ANS = dict(obj=[0, 2, 1, 3, 0, 1, 2], src=[0, 0, 1, 1, 2, 2, 2], val=[1.0, 3.0, 2.0, 0.0, 4.0, 1.0, 2.0])


@pytest.mark.parametrize("block_cells", [4_000_000, 4, 3])
def test_mf_perturbation_exact_given_V(block_cells):
    a = _num(**MF_ANS, n_obj=4, n_src=3)
    V = np.array([[0.5, -0.25, 0.1, 0.6], [0.5, 0.75, -0.9, 0.4]])
    out, rep = ldp.mf_perturbation(a, 2.0, ExperimentSampler(6), V=V, ridge=0.3, domain=range(6),
                                   block_cells=block_cells)
    eta = np.random.default_rng(6).laplace(0.0, 6 / 2.0, size=3 * 2).reshape(3, 2)
    np.testing.assert_allclose(out.val, _mf_expected(a, V, eta, 0.3), rtol=1e-12, atol=1e-12)
    assert out.obj.tolist() == [0, 1, 2, 3] * 3 and out.src.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert rep["mechanism"] == "matrix_factorization" and rep["epsilon"] == 2.0 and rep["delta"] == 0.0
    assert rep["guarantee"] == ("epsilon-cell LDP for the value of each answered cell; which tasks were answered "
                                "is not protected")
    assert rep["theorem"] == "Sun et al. Theorem 4 (MF, Algorithm 2, Eq. 9-10)"
    assert rep["d"] == 2 and type(rep["d"]) is int and rep["ridge"] == 0.3
    assert rep["laplace_scale"] == 3.0 and rep["sensitivity"] == 6.0 and rep["domain_source"] == "given"
    assert rep["cells"] == 12 and rep["production_safe"] is False
    assert rep["note"] == ("ridge keeps the argmin unique for workers with fewer than d answers; the proof of "
                           "Theorem 4 is unchanged since the ridge term cancels between neighbouring vectors")


def test_mf_perturbation_exact_drawn_V_and_bounds():
    a = _num(**MF_ANS, n_obj=4, n_src=3)
    out, rep = ldp.mf_perturbation(a, 0.5, ExperimentSampler(12), d=3, bounds=(-1.0, 5.0))
    rng = np.random.default_rng(12)
    seed = int(rng.integers(2**63))
    raw = np.random.default_rng(seed).standard_normal((3, 4))
    V = raw / np.abs(raw).sum(axis=0)
    eta = rng.laplace(0.0, 6.0 / 0.5, size=3 * 3).reshape(3, 3)
    np.testing.assert_allclose(out.val, _mf_expected(a, V, eta, 0.1), rtol=1e-12, atol=1e-12)
    assert rep["d"] == 3 and rep["ridge"] == 0.1 and rep["sensitivity"] == 6.0 and rep["laplace_scale"] == 12.0
    # v_seed: V from default_rng(v_seed), the sampler only draws eta
    out2, _ = ldp.mf_perturbation(a, 0.5, ExperimentSampler(12), d=2, v_seed=77, domain=range(5))
    raw2 = np.random.default_rng(77).standard_normal((2, 4))
    V2 = raw2 / np.abs(raw2).sum(axis=0)
    eta2 = np.random.default_rng(12).laplace(0.0, 5 / 0.5, size=6).reshape(3, 2)
    np.testing.assert_allclose(out2.val, _mf_expected(a, V2, eta2, 0.1), rtol=1e-12, atol=1e-12)
    out3, _ = ldp.mf_perturbation(a, 0.5, ExperimentSampler(12), d=np.int64(2), v_seed=0, domain=range(5))
    raw3 = np.random.default_rng(0).standard_normal((2, 4))
    np.testing.assert_allclose(out3.val, _mf_expected(a, raw3 / np.abs(raw3).sum(axis=0), eta2, 0.1),
                               rtol=1e-12, atol=1e-12)


def test_mf_perturbation_secure_sampler_random_V():
    a = _num(**MF_ANS, n_obj=4, n_src=3)
    out, rep = ldp.mf_perturbation(a, 1e9, SecureSampler(use_opendp=False), d=2, ridge=0.0, domain=range(5))
    assert out.val.shape == (12,) and np.isfinite(out.val).all() and rep["production_safe"] is True


def test_mf_perturbation_errors():
    a = _num(**MF_ANS, n_obj=4, n_src=3)
    for d in (0, 2.0, "3"):
        with pytest.raises(ArgumentError, match=rf"^mf factorization parameter d must be a positive integer, got "
                                                rf"{re_escape(repr(d))}$"):
            ldp.mf_perturbation(a, 1.0, ExperimentSampler(0), d=d)
    msg = r"^task profile matrix V must be d × n_objects with every column 1-norm <= 1 \(Theorem 4\)$"
    with pytest.raises(PrivacyError, match=msg):
        ldp.mf_perturbation(a, 1.0, ExperimentSampler(0), V=np.full((2, 3), 0.1))
    with pytest.raises(PrivacyError, match=msg):
        ldp.mf_perturbation(a, 1.0, ExperimentSampler(0), V=np.array([[0.5, 0.5, 0.5, 0.5], [0.5, 0.5, 0.5, 0.5 + 1e-8]]))
    # a column of 1-norm exactly 1 (+ rounding) is accepted
    ok = np.array([[0.5, 0.5, 0.5, 0.5], [0.5, 0.5, 0.5, 0.5 + 1e-10]])
    ldp.mf_perturbation(a, 1.0, ExperimentSampler(0), V=ok)
    with pytest.raises(ArgumentError, match=r"^ridge must be >= 0, got -0\.5$"):
        ldp.mf_perturbation(a, 1.0, ExperimentSampler(0), V=ok, ridge=-0.5)
    full = np.array([[1.0, 0.0, 0.5, 0.5], [0.0, 1.0, 0.5, -0.5]])
    out, rep = ldp.mf_perturbation(a, 1.0, ExperimentSampler(0), V=full, ridge=0, domain=range(5))  # ridge 0 allowed
    eta = np.random.default_rng(0).laplace(0.0, 5.0, size=6).reshape(3, 2)
    np.testing.assert_allclose(out.val, _mf_expected(a, full, eta, 0.0), rtol=1e-12, atol=1e-12)
    assert rep["ridge"] == 0.0


def re_escape(s):
    import re
    return re.escape(s)


def test_gamma_s_and_theorem_4_8():
    assert ldp._gamma_s(3.0, 0.95) == 3.0 * math.sqrt(2.0 * math.log(1.0 / (1.0 - 0.95)))
    for b, eta in ((0.0, 0.5), (-1.0, 0.5), (1.0, 0.0), (1.0, 1.0)):
        with pytest.raises(ArgumentError, match=rf"^Lemma 4\.7 needs b > 0 and 0 < eta < 1, got b={b!r}, "
                                                rf"eta={eta!r}$"):
            ldp._gamma_s(b, eta)
    g2 = 2.0**2 * 2.0 * math.log(1.0 / (1.0 - 0.9))
    c = ldp.theorem_4_8_noise_level(0.8, 0.1, 1.5, 2.0, 0.9)
    assert c == pytest.approx(g2 / (2 * 1.5 * 0.8 * math.log(1 / 0.9)), rel=1e-14)
    c_def = ldp.theorem_4_8_noise_level(1.0, 0.2)
    assert c_def == pytest.approx(9.0 * 2.0 * math.log(20.0) / (2 * 1.0 * 1.0 * math.log(1 / 0.8)), rel=1e-14)
    e = ldp.theorem_4_8_epsilon(3.0, 0.1, 1.5, 2.0, 0.9)
    assert e == pytest.approx(g2 / (2 * 1.5 * 3.0 * math.log(1 / 0.9)), rel=1e-14)
    e_def = ldp.theorem_4_8_epsilon(2.0, 0.2)
    assert e_def == pytest.approx(9.0 * 2.0 * math.log(20.0) / (2 * 1.0 * 2.0 * math.log(1 / 0.8)), rel=1e-14)
    with pytest.raises(ArgumentError, match=r"^lambda1 must be > 0, got 0$"):
        ldp.theorem_4_8_noise_level(1.0, 0.1, 0)
    with pytest.raises(ArgumentError, match=r"^c and lambda1 must be > 0$"):
        ldp.theorem_4_8_epsilon(0, 0.1)
    with pytest.raises(ArgumentError, match=r"^c and lambda1 must be > 0$"):
        ldp.theorem_4_8_epsilon(1.0, 0.1, 0)
    with pytest.raises(PrivacyError):
        ldp.theorem_4_8_epsilon(1.0, 0)
    with pytest.raises(PrivacyError):
        ldp.theorem_4_8_noise_level(1.0, 1.0)


def _mixture_delta_reference(eps, sens, mean):
    """Balle-Wang delta of N(0, y) averaged over y ~ Exp(mean), by a trapezoid sum on a log grid."""
    ys = np.exp(np.linspace(math.log(1e-10), math.log(60 * mean), 200001))
    s = np.sqrt(ys)
    from scipy.stats import norm as _n
    dy = _n.cdf(sens / (2 * s) - eps * s / sens) - math.exp(eps) * _n.cdf(-sens / (2 * s) - eps * s / sens)
    f = np.exp(-ys / mean) / mean * dy
    return float(np.sum((f[1:] + f[:-1]) / 2 * np.diff(ys))) + 1e-10 / mean  # delta_y -> 1 below the grid


def test_gaussian_mixture_delta_reference():
    for eps, sens, mean in ((1.0, 1.0, 1.0), (0.5, 2.0, 3.0), (2.0, 3.0, 0.5)):
        got = ldp.gaussian_mixture_delta(eps, sens, mean)
        assert got == pytest.approx(_mixture_delta_reference(eps, sens, mean), rel=1e-5, abs=1e-9)
    assert 0.0 <= ldp.gaussian_mixture_delta(60.0, 1.0, 1e-6) <= 1e-12
    with pytest.raises(PrivacyError):
        ldp.gaussian_mixture_delta(0, 1.0, 1.0)


def test_gaussian_perturbation_exact_c_path():
    a = _num([0, 1, 1, 2], [0, 0, 1, 2], [1.0, 2.0, 3.0, 4.0], n_obj=3, n_src=3)
    eps, dl, lam1, b, eta = 1.2, 0.3, 2.0, 1.5, 0.8
    gamma = b * math.sqrt(2 * math.log(1 / (1 - eta)))
    c_min = gamma**2 / (2 * lam1 * eps * math.log(1 / (1 - dl)))
    c = c_min * 1.5
    out, rep = ldp.gaussian_perturbation(a, eps, dl, ExperimentSampler(21), lambda1=lam1, b=b, eta=eta, c=c)
    rng = np.random.default_rng(21)
    mean_var = c / lam1
    var = rng.exponential(mean_var, size=3)
    z = rng.standard_normal(4)
    exp = [v + zz * math.sqrt(var[s]) for v, zz, s in zip([1.0, 2.0, 3.0, 4.0], z, [0, 0, 1, 2])]
    np.testing.assert_allclose(out.val, exp, rtol=1e-14)
    assert out.obj.tolist() == [0, 1, 1, 2] and out.src.tolist() == [0, 0, 1, 2] and out.kind == "numeric"
    assert out.obj is not a.obj and out.classes is None and out.objects is a.objects
    assert rep["mechanism"] == "gaussian" and rep["epsilon"] == eps and rep["delta"] == dl
    assert rep["guarantee"] == "(epsilon, delta)-LDP per record, as claimed by the crowd-sensing paper"
    assert rep["theorem"] == "Li et al. Theorem 4.8"
    assert rep["lambda1"] == lam1 and rep["lambda2"] == pytest.approx(lam1 / c, rel=1e-14)
    assert rep["c"] == c and rep["b"] == b and rep["eta"] == eta
    assert rep["sensitivity"] == pytest.approx(gamma / lam1, rel=1e-14)
    assert rep["mean_noise_variance"] == pytest.approx(mean_var, rel=1e-14)
    assert rep["delta_exact_mixture"] == pytest.approx(_mixture_delta_reference(eps, gamma / lam1, mean_var),
                                                       rel=1e-5)
    assert rep["caveat"].startswith("Theorem 4.8 bounds the density ratio by exp(Delta^2/(2y)), which does not hold")
    assert rep["caveat"].endswith("NULL cells are not perturbed (only records a user sends are protected).")
    assert "'delta_exact_mixture' is the delta the analytic Gaussian mechanism gives at this epsilon" in rep["caveat"]
    # default c is c_min exactly
    _, rep0 = ldp.gaussian_perturbation(a, eps, dl, ExperimentSampler(21), lambda1=lam1, b=b, eta=eta)
    assert rep0["c"] == pytest.approx(c_min, rel=1e-14)
    # defaults lambda1=1, b=3, eta=0.95
    _, repd = ldp.gaussian_perturbation(a, 1.0, 0.2, ExperimentSampler(1))
    gd = 3.0 * math.sqrt(2 * math.log(20.0))
    assert repd["c"] == pytest.approx(gd**2 / (2 * math.log(1 / 0.8)), rel=1e-14)
    assert repd["lambda1"] == 1.0 and repd["b"] == 3.0 and repd["eta"] == 0.95
    assert repd["sensitivity"] == pytest.approx(gd, rel=1e-14)
    # c just below the bound within the 1e-12 tolerance is accepted; clearly below is refused
    ldp.gaussian_perturbation(a, eps, dl, ExperimentSampler(1), lambda1=lam1, b=b, eta=eta,
                              c=c_min * (1 - 1e-13))
    with pytest.raises(PrivacyError, match=(rf"^noise level c={c_min * 0.5} is below Theorem 4\.8's bound "
                                            rf"{c_min:.6g} for epsilon={eps}, delta={dl}$")):
        ldp.gaussian_perturbation(a, eps, dl, ExperimentSampler(1), lambda1=lam1, b=b, eta=eta, c=c_min * 0.5)


def test_gaussian_perturbation_exact_sensitivity_path():
    a = _num([0, 1, 2], [0, 1, 1], [1.0, 2.0, 3.0], n_obj=3, n_src=2)
    eps, dl, sens = 0.7, 0.05, 2.5
    out, rep = ldp.gaussian_perturbation(a, eps, dl, ExperimentSampler(4), sensitivity=sens, c=123.0)
    lam2 = 2.0 * eps * math.log(1 / (1 - dl)) / sens**2
    rng = np.random.default_rng(4)
    var = rng.exponential(1 / lam2, size=2)
    z = rng.standard_normal(3)
    exp = [v + zz * math.sqrt(var[s]) for v, zz, s in zip([1.0, 2.0, 3.0], z, [0, 1, 1])]
    np.testing.assert_allclose(out.val, exp, rtol=1e-14)
    assert rep["theorem"] == "Li et al. Theorem 4.8 (proof, with the given sensitivity)"
    assert rep["c"] is None and rep["sensitivity"] == 2.5 and rep["lambda2"] == pytest.approx(lam2, rel=1e-14)
    assert rep["mean_noise_variance"] == pytest.approx(1 / lam2, rel=1e-14)
    assert rep["delta_exact_mixture"] == pytest.approx(_mixture_delta_reference(eps, sens, 1 / lam2), rel=1e-5)
    with pytest.raises(ArgumentError, match=r"^sensitivity must be > 0, got 0$"):
        ldp.gaussian_perturbation(a, eps, dl, ExperimentSampler(4), sensitivity=0)
    with pytest.raises(ArgumentError, match=r"^perturb='gaussian' needs numeric answers$"):
        ldp.gaussian_perturbation(_cat([0], [0], [0], ["x"]), eps, dl, ExperimentSampler(4))
    with pytest.raises(PrivacyError, match=r"^delta must be in"):
        ldp.gaussian_perturbation(a, eps, 0, ExperimentSampler(4))


def test_perturbations_table_and_options():
    assert ldp.PERTURBATIONS == {"laplace": "laplace", "lp": "laplace", "rr": "rr", "randomized_response": "rr",
                                 "mf": "mf", "matrix_factorization": "mf", "gaussian": "gaussian"}
    assert ldp.perturbation_options("LP") == ("domain", "bounds", "null_fill", "block_cells")
    assert ldp.perturbation_options("randomized_response") == ("domain",)
    assert ldp.perturbation_options("Matrix_Factorization") == ("d", "ridge", "domain", "bounds", "V", "v_seed",
                                                                "block_cells")
    assert ldp.perturbation_options("gaussian") == ("lambda1", "b", "eta", "sensitivity", "c")
    with pytest.raises(ArgumentError, match=r"^unknown perturb 'xx'; valid: 'laplace', 'rr', 'mf', 'gaussian'$"):
        ldp.perturbation_options("xx")


def test_perturb_dispatch():
    a = _lp_answers()
    for name in ("laplace", "LP"):
        for delta in (None, 0, 0.0):
            out, rep = ldp.perturb(a, name, 2.0, delta, ExperimentSampler(9), domain=[0, 1, 2, 3, 4])
            ref, _ = ldp.laplace_perturbation(a, 2.0, ExperimentSampler(9), domain=[0, 1, 2, 3, 4])
            np.testing.assert_array_equal(out.val, ref.val)
            assert rep["mechanism"] == "laplace"
    s = ScriptedSampler(uniform=[[0.0] * 5], integers=[[0] * 5, []], geometric=[[]])
    out, rep = ldp.perturb(a, "RR", 1.0, None, s)
    assert rep["mechanism"] == "randomized_response" and out.val.tolist() == [1.0, 3.0, 2.0, 3.0, 1.0]
    b = _num(**MF_ANS, n_obj=4, n_src=3)
    out, rep = ldp.perturb(b, "mf", 1.0, 0, ExperimentSampler(1), d=2, v_seed=3)
    ref, _ = ldp.mf_perturbation(b, 1.0, ExperimentSampler(1), d=2, v_seed=3)
    np.testing.assert_array_equal(out.val, ref.val)
    out, rep = ldp.perturb(b, "Gaussian", 1.0, 0.2, ExperimentSampler(1), sensitivity=2.0)
    ref, _ = ldp.gaussian_perturbation(b, 1.0, 0.2, ExperimentSampler(1), sensitivity=2.0)
    np.testing.assert_array_equal(out.val, ref.val)
    with pytest.raises(ArgumentError, match=r"^unknown perturb 'zz'; valid: 'laplace', 'rr', 'mf', 'gaussian'$"):
        ldp.perturb(a, "zz", 1.0, None, ExperimentSampler(1))
    with pytest.raises(PrivacyError, match=r"^perturb='rr' needs epsilon$"):
        ldp.perturb(a, "rr", None, None, ExperimentSampler(1))
    with pytest.raises(PrivacyError, match=r"^perturb='gaussian' needs delta \(0 < delta < 1\)$"):
        ldp.perturb(a, "gaussian", 1.0, None, ExperimentSampler(1))
    with pytest.raises(PrivacyError, match=r"^perturb='LP' is pure epsilon-LDP; delta must be omitted or 0$"):
        ldp.perturb(a, "LP", 1.0, 0.1, ExperimentSampler(1))


def test_secure_noise_casts_int_input_to_float():
    for use in (False, True):
        e = SecureSampler(use_opendp=use).add_laplace(np.array([], dtype=np.int64), 1.0)
        assert e.dtype == np.float64
        e = SecureSampler(use_opendp=use).add_gaussian(np.array([], dtype=np.int64), 1.0)
        assert e.dtype == np.float64
    xi = np.arange(50, dtype=np.int64)
    out = SecureSampler(use_opendp=True).add_gaussian(xi, 3.7)
    assert out.dtype == np.float64 and np.any(out != np.round(out))
    out = SecureSampler(use_opendp=True).add_laplace(xi, 3.7)
    assert out.dtype == np.float64 and np.any(out != np.round(out))


def test_secure_opendp_enables_contrib_itself():
    import opendp.prelude as dp

    dp.disable_features("contrib")
    try:
        out = SecureSampler(use_opendp=True).add_laplace(np.zeros(3), 1.0)
        assert out.shape == (3,)
    finally:
        dp.enable_features("contrib")
    dp.disable_features("contrib")
    try:
        out = SecureSampler(use_opendp=True).add_gaussian(np.zeros(3), 1.0)
        assert out.shape == (3,)
    finally:
        dp.enable_features("contrib")


def test_encode_single_answer_and_collision_free_keys():
    a = encode_answers(["only"], ["w"], [2.5], "numeric")
    assert a.obj.tolist() == [0] and a.val.tolist() == [2.5]
    # 3 objects x 2 sources: key object*2+source never collides (e.g. (a,y) vs (c,x))
    b = encode_answers(["a", "c", "b", "a"], ["y", "x", "x", "x"], [1.0, 2.0, 3.0, 4.0], "numeric")
    assert b.val.tolist() == [1.0, 2.0, 3.0, 4.0] and b.obj.tolist() == [0, 1, 2, 0]


def test_encode_numeric_object_column_inspects_every_value():
    vals = pd.Series([float(i) for i in range(1000)] + ["5"], dtype=object)  # a string at 1000 is refused as at 0
    with pytest.raises(ArgumentError, match=r"method '\?' is numeric but the value column holds object values"):
        encode_answers(list(range(1001)), [0] * 1001, vals, "numeric")
    mixed = pd.Series([float(i) for i in range(1000)] + [np.int64(5)], dtype=object)
    a = encode_answers(list(range(1001)), [0] * 1001, mixed, "numeric")
    assert a.val[-1] == 5.0 and a.val.dtype == np.float64


def test_numeric_domain_two_values():
    a = _num([0, 1], [0, 0], [2.0, 5.0])
    dom, lo, hi, prov = ldp._numeric_domain(a, [5, 2], None, False, "mm")
    assert dom.tolist() == [2.0, 5.0] and (lo, hi, prov) == (2.0, 5.0, "given")


def test_geometric_positions_stops_when_last_success_is_at_total():
    # 91 gaps of 10 then 91: last candidate = -1 + 910 + 91 = 1000 = total -> no further draw
    s = ScriptedSampler(geometric=[np.array([10] * 91 + [91])])
    pos = ldp._geometric_positions(s, 0.01, 1000)
    assert pos.tolist() == list(range(9, 910, 10)) and len(s.log) == 1


def test_laplace_single_object_blocks():
    a = _num([0, 0], [0, 2], [1.0, 2.0], n_obj=1, n_src=3)
    # n = 1: block_cells=3 cells -> one block of 3 workers (3 // 1)
    out, _ = ldp.laplace_perturbation(a, 1.0, ExperimentSampler(5), domain=[0, 1, 2], block_cells=3)
    exp, _, _ = _lp_expected({(0, 0): 1.0, (2, 0): 2.0}, 3, 1, 1.0, 5, dom=[0.0, 1.0, 2.0], block_rows=3)
    np.testing.assert_allclose(out.val, exp, rtol=1e-14, atol=1e-14)


def test_mf_d1_and_norm_tolerance():
    a = _num(**MF_ANS, n_obj=4, n_src=3)
    out, rep = ldp.mf_perturbation(a, 1.0, ExperimentSampler(2), d=1, v_seed=4, domain=range(5))
    raw = np.random.default_rng(4).standard_normal((1, 4))
    eta = np.random.default_rng(2).laplace(0.0, 5.0, size=3).reshape(3, 1)
    np.testing.assert_allclose(out.val, _mf_expected(a, raw / np.abs(raw).sum(axis=0), eta, 0.1), rtol=1e-12)
    assert rep["d"] == 1
    V = np.full((1, 4), 1 + 1e-9)  # 1-norm exactly at the tolerance: accepted
    out, _ = ldp.mf_perturbation(a, 1.0, ExperimentSampler(2), V=V, domain=range(5))
    np.testing.assert_allclose(out.val, _mf_expected(a, V, eta, 0.1), rtol=1e-12)


def test_mechanism_names_in_domain_errors():
    cat = _cat([0], [0], [0], ["x"])
    for fn, name in ((ldp.laplace_perturbation, "laplace"), (ldp.mf_perturbation, "mf"),
                     (ldp.randomized_response, None)):
        if name is None:
            continue
        with pytest.raises(ArgumentError, match=rf"^perturb='{name}' adds numeric noise and needs numeric answers"):
            fn(cat, 1.0, ExperimentSampler(0))
    a = _num([0, 1], [0, 0], [1.0, 2.0])
    with pytest.raises(ArgumentError, match=r"^perturb='laplace': some answers lie outside the given domain$"):
        ldp.laplace_perturbation(a, 1.0, ExperimentSampler(0), domain=[1, 3])
    with pytest.raises(ArgumentError, match=r"^perturb='mf': some answers lie outside bounds \(0, 1\)$"):
        ldp.mf_perturbation(a, 1.0, ExperimentSampler(0), bounds=(0, 1))
    with pytest.raises(ArgumentError, match=r"^perturb='rr' needs a discrete domain: pass domain=\[\.\.\.\]$"):
        ldp._numeric_domain(a, None, (0, 5), True, "rr")
    # LP and MF accept continuous values (need_discrete is False for them)
    f = _num([0, 1], [0, 0], [1.5, 2.0])
    out, rep = ldp.laplace_perturbation(f, 1.0, ExperimentSampler(0))
    assert rep["sensitivity"] == 0.5
    out, rep = ldp.mf_perturbation(f, 1.0, ExperimentSampler(0), d=1)
    assert rep["sensitivity"] == 0.5 and rep["domain_source"].startswith("data (min..max")


def test_geometric_positions_total_one():
    s = ScriptedSampler(geometric=[[1]])
    assert ldp._geometric_positions(s, 0.5, 1).tolist() == [0]


def test_small_positive_parameters_are_valid():
    assert ldp._gamma_s(0.5, 0.5) == 0.5 * math.sqrt(2.0 * math.log(1.0 / (1.0 - 0.5)))
    g2 = ldp._gamma_s(0.5, 0.5) ** 2
    assert ldp.theorem_4_8_epsilon(0.5, 0.1, 0.5, 0.5, 0.5) == pytest.approx(
        g2 / (2 * 0.5 * 0.5 * math.log(1 / 0.9)), rel=1e-14)
    assert ldp.theorem_4_8_noise_level(0.5, 0.1, 0.5, 0.5, 0.5) == pytest.approx(
        g2 / (2 * 0.5 * 0.5 * math.log(1 / 0.9)), rel=1e-14)


def test_gaussian_perturbation_boundaries():
    a = _num([0, 1, 2], [0, 1, 1], [1.0, 2.0, 3.0], n_obj=3, n_src=2)
    out, rep = ldp.gaussian_perturbation(a, 1.0, 0.1, ExperimentSampler(0), sensitivity=0.5)
    assert rep["sensitivity"] == 0.5
    assert out.sources is a.sources and out.objects is a.objects and out.src is not a.src
    assert out.src.tolist() == [0, 1, 1]
    c_min = ldp.theorem_4_8_noise_level(1.0, 0.1, 1.0, 3.0, 0.95)
    _, rep = ldp.gaussian_perturbation(a, 1.0, 0.1, ExperimentSampler(0), c=c_min * (1 - 1e-12))  # exactly at tol
    assert rep["c"] == c_min * (1 - 1e-12)


def test_mixture_delta_clamped_to_one():
    # quad's raw integral overshoots 1 by ~1e-13 here (noise tiny next to the sensitivity): reported as exactly 1
    assert ldp.gaussian_mixture_delta(0.1, 100.0, 1e-4) == 1.0


def test_mf_float32_V_computed_in_double():
    a = _num(**MF_ANS, n_obj=4, n_src=3)
    V32 = np.array([[0.1, -0.3, 0.7, 0.2], [0.3, 0.6, -0.2, 0.7]], dtype=np.float32)
    out, _ = ldp.mf_perturbation(a, 1.0, ExperimentSampler(3), V=V32, domain=range(5))
    eta = np.random.default_rng(3).laplace(0.0, 5.0, size=6).reshape(3, 2)
    np.testing.assert_allclose(out.val, _mf_expected(a, V32.astype(np.float64), eta, 0.1), rtol=1e-13, atol=1e-13)


def test_mf_worker_and_task_without_answers():
    # source s3 and object o4 have no answers (e.g. after filtering): s3 releases u = -eta / ridge times V
    a = _num(**MF_ANS, n_obj=5, n_src=4)
    V = np.array([[0.5, -0.25, 0.1, 0.6, 0.3], [0.5, 0.75, -0.9, 0.4, -0.7]])
    out, rep = ldp.mf_perturbation(a, 1.0, ExperimentSampler(8), V=V, ridge=0.5, domain=range(5))
    eta = np.random.default_rng(8).laplace(0.0, 5.0, size=8).reshape(4, 2)
    exp = _mf_expected(a, V, eta, 0.5)
    np.testing.assert_allclose(out.val, exp, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.val[15:], (-eta[3] / 0.5) @ V, rtol=1e-12)
    assert rep["cells"] == 20 and out.val.shape == (20,)


def test_laplace_default_block_is_four_million_cells():
    # 4,000,001 workers x 1 task: the default block_cells=4_000_000 splits them into a block of 4e6 rows and one
    # of 1 row; the last worker's cell is therefore drawn after the first block's 4e6 fill and noise draws
    m = 4_000_001
    a = Answers(np.array([0], dtype=np.int64), np.array([0], dtype=np.int64), np.array([1.0]), pd.Index(["o"]),
                pd.RangeIndex(m))
    out, rep = ldp.laplace_perturbation(a, 1.0, ExperimentSampler(0), domain=[0.0, 1.0])
    rng = np.random.default_rng(0)
    rng.integers(0, 2, size=4_000_000)
    rng.laplace(0.0, 2.0, size=4_000_000)
    last = [0.0, 1.0][rng.integers(0, 2, size=1)[0]] + rng.laplace(0.0, 2.0, size=1)[0]
    assert out.val[-1] == last and rep["cells"] == m


def test_normalize_rows_sum_below_one():
    np.testing.assert_allclose(base.normalize_rows(np.array([[0.2, 0.3], [0.0, 0.5]])), [[0.4, 0.6], [0.0, 1.0]])


class _FixedRandom:
    """Stand-in for a Generator: argmax_rows only calls rng.random(shape)."""

    def __init__(self, values):
        self.values = np.asarray(values, dtype=np.float64)

    def random(self, shape):
        assert tuple(shape) == self.values.shape
        return self.values


def test_argmax_rows_random_tie_takes_the_largest_draw():
    p = np.array([[0.5, 0.5, 0.1]])
    # the draws themselves are compared (no longer added to p as r * 1e-9, which rounded close draws together and
    # lost them entirely once p is large): the larger draw wins however close, equal draws give the lower code
    r = np.array([[0.3, 0.3 + 1e-12, 0.9]])
    assert base.argmax_rows(p, _FixedRandom(r)).tolist() == [1]
    assert base.argmax_rows(p, _FixedRandom(np.array([[0.3, 0.3, 0.9]]))).tolist() == [0]
    # resolvable difference -> the larger draw wins; the non-maximal class never wins, even with the largest draw
    r2 = np.array([[0.3, 0.6, 0.99]])
    assert base.argmax_rows(p, _FixedRandom(r2)).tolist() == [1]


def test_perturb_rejects_delta_one_for_pure_mechanisms():
    a = _lp_answers()
    for delta in (1, 1.0, 0.5):
        with pytest.raises(PrivacyError, match=r"is pure epsilon-LDP; delta must be omitted or 0$"):
            ldp.perturb(a, "laplace", 1.0, delta, ExperimentSampler(1))


def test_mf_defaults_d10_ridge01():
    a = _num(**MF_ANS, n_obj=4, n_src=3)
    out, rep = ldp.mf_perturbation(a, 1.0, ExperimentSampler(5))
    assert rep["d"] == 10 and rep["ridge"] == 0.1 and rep["sensitivity"] == 5.0  # data domain 0..4
    rng = np.random.default_rng(5)
    raw = np.random.default_rng(int(rng.integers(2**63))).standard_normal((10, 4))
    eta = rng.laplace(0.0, 5.0, size=30).reshape(3, 10)
    np.testing.assert_allclose(out.val, _mf_expected(a, raw / np.abs(raw).sum(axis=0), eta, 0.1), rtol=1e-10,
                               atol=1e-10)


def test_encode_numeric_int_values_become_float64():
    a = encode_answers(["a", "b"], ["s", "s"], pd.Series([3, 7], dtype=np.int64), "numeric")
    assert a.val.dtype == np.float64 and a.val.tolist() == [3.0, 7.0]


def test_encode_categorical_float32_values():
    with pytest.raises(ArgumentError, match=r"non-integral numbers such as (np\.float64\()?2\.5\)?; use a numeric"):
        encode_answers(["a", "b"], [1, 2], pd.Series([1.0, 2.5], dtype=np.float32), "categorical", method="mm")
    a = encode_answers(["a", "b"], [1, 2], pd.Series([3.0, 1.0], dtype=np.float32), "categorical")
    assert a.classes.tolist() == [1, 3] and a.val.tolist() == [1, 0]


def test_encode_duplicates_keep_last_many():
    # 300 (object, source) pairs answered 4 times each in shuffled order: the last row of each pair wins
    rng = np.random.default_rng(0)
    pairs = np.repeat(np.arange(300), 4)
    rng.shuffle(pairs)
    objs = [f"o{p // 3}" for p in pairs]
    srcs = [f"s{p % 3}" for p in pairs]
    vals = np.arange(len(pairs), dtype=np.float64)
    a = encode_answers(objs, srcs, vals, "numeric")
    last = {}
    for i, p in enumerate(pairs):
        last[p] = float(i)
    got = {(a.objects[o], a.sources[s]): v for o, s, v in zip(a.obj, a.src, a.val)}
    assert len(got) == 300 and len(a.val) == 300
    assert got == {(f"o{p // 3}", f"s{p % 3}"): v for p, v in last.items()}
    assert a.val.tolist() == sorted(last.values())  # kept rows stay in input order
