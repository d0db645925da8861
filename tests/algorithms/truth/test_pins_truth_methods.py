"""Pins exact behaviour of crowddb.truth methods — CRH (numeric squared/absolute, 0-1 loss), the LDP paper's
Algorithm 1 ('ti'), GTM, CATD, GLAD, Dawid-Skene (full and one-coin), ZenCrowd, majority vote / mean / median and the
discover() front — against independent re-computations written in this file as plain Python loops over
(object, source, value) triples (math / statistics only, scipy only for the chi-square quantile and for GLAD's
numerical optimum), on tiny hand-made inputs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.special import gammaincinv

from crowddb.errors import ArgumentError, PrivacyError, UnknownColumnError
from crowddb.truth import discover, get_method
from crowddb.truth.base import encode_answers
from crowddb.truth.catd import CATD
from crowddb.truth.crh import CRH, CRHCategorical, SigmaWeighted, crh_weights, object_std, weighted_mean
from crowddb.truth.dawid_skene import DawidSkene, OneCoinDawidSkene
from crowddb.truth.glad import GLAD
from crowddb.truth.gtm import GTM
from crowddb.truth.voting import MajorityVote, Mean, Median, segment_median, source_accuracy
from crowddb.truth.zencrowd import ZenCrowd

RT = 1e-9


# ----------------------------------------------------------------------------------------- plain-Python helpers


def order_of(xs):
    """Distinct items in order of first appearance (what pd.factorize gives)."""
    out = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out


def pstd(xs):
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


def wmedian(pairs):
    """Weighted median of (value, weight) pairs: smallest value whose cumulative weight reaches half the total;
    when the cumulative weight there is exactly half, the midpoint with the next value."""
    pairs = sorted(pairs, key=lambda p: p[0])
    tot = sum(w for _, w in pairs)
    half = tot / 2.0
    eps = 1e-12 * max(tot, 1.0)
    c, cum = 0.0, []
    for _, w in pairs:
        c += w
        cum.append(c)
    lo = next(i for i in range(len(pairs)) if cum[i] >= half - eps)
    hi = next((i for i in range(len(pairs)) if cum[i] > half + eps), lo)
    if abs(cum[lo] - half) <= 1e-8 + 1e-5 * abs(half):
        return (pairs[lo][0] + pairs[hi][0]) / 2.0
    return pairs[lo][0]


def conf_ref(rows, truth, w=None):
    """crowddb's numeric confidence: 1 / (1 + weighted RMS deviation / global std)."""
    scale = pstd([v for _, _, v in rows]) or 1.0
    out = {}
    for o in order_of([r[0] for r in rows]):
        num = den = 0.0
        for oo, s, v in rows:
            if oo == o:
                ww = 1.0 if w is None else max(w[s], 0.0)
                num += ww * (v - truth[o]) ** 2
                den += ww
        out[o] = 1.0 / (1.0 + math.sqrt(num / max(den, 1e-12)) / scale)
    return out


def per_obj(rows):
    d = {}
    for o, s, v in rows:
        d.setdefault(o, []).append((s, v))
    return d


def per_src(rows):
    d = {}
    for o, s, v in rows:
        d.setdefault(s, []).append((o, v))
    return d


def check_numeric(m, truth, conf, w, n_iter=None, rtol=RT):
    for o, t in truth.items():
        assert m.truths_[o] == pytest.approx(t, rel=rtol, abs=1e-12), o
        assert m.confidences_[o] == pytest.approx(conf[o], rel=rtol, abs=1e-12), o
    for s, x in w.items():
        assert m.source_weights_[s] == pytest.approx(x, rel=rtol, abs=1e-12), s
    assert list(m.truths_.index) == list(truth)
    assert list(m.source_weights_.index) == list(w)
    if n_iter is not None:
        assert m.n_iter_ == n_iter


def fit(cls, rows, **kw):
    o, s, v = zip(*rows)
    return cls(**kw).fit(list(o), list(s), list(v))


# numeric data sets: (object, source, value)
NUM_A = [
    ("x", "s1", 1.0), ("x", "s2", 2.0), ("x", "s3", 4.0), ("x", "s4", 10.0),
    ("y", "s1", 5.0), ("y", "s2", 5.5), ("y", "s3", 4.0), ("y", "s4", 9.0),
    ("z", "s1", 3.0), ("z", "s2", 3.0), ("z", "s3", 2.5),
    ("u", "s2", 7.0),
]
NUM_B = [
    ("a", "p", 10.0), ("a", "q", 11.0), ("a", "r", 30.0),
    ("b", "p", 20.0), ("b", "q", 19.5), ("b", "r", 2.0),
    ("c", "p", 0.0), ("c", "q", 1.0), ("c", "r", 0.5),
    ("d", "q", 4.0), ("d", "r", 8.0),
]
NUM_C = [(o, s, v * 0.013) for o, s, v in NUM_B]  # spread below 1: exercises the 1e-12 scale floors
NUM_C[0] = ("a", "p", 0.2)
# source u answers objects nobody else answers: its residuals are 0, so its loss hits the floors
LONE = NUM_B + [("e", "u", 5.0), ("f", "u", 7.0)]
AGREE = [("a", "s", 1.0), ("a", "t", 1.0), ("b", "s", 3.5), ("b", "t", 3.5), ("c", "t", 2.0)]


# ----------------------------------------------------------------------------------------- CRH


def crh_w_ref(loss):
    total = sum(loss.values())
    if total <= 0:
        return {s: 1.0 for s in loss}
    return {s: math.log(total / max(l, total * 1e-12)) for s, l in loss.items()}


def wmean_ref(rows, w):
    out = {}
    for o, cl in per_obj(rows).items():
        den = sum(w[s] for s, _ in cl)
        if den > 0:
            out[o] = sum(w[s] * v for s, v in cl) / den
        else:
            out[o] = sum(v for _, v in cl) / len(cl)
    return out


def crh_ref(rows, loss="squared", tol=1e-6, max_iter=100):
    po = per_obj(rows)
    srcs = order_of([r[1] for r in rows])
    std = {o: (pstd([v for _, v in cl]) or 1.0) for o, cl in po.items()}
    truth = {o: wmedian([(v, 1.0) for _, v in cl]) for o, cl in po.items()}
    w = {s: 1.0 for s in srcs}
    scale = max(pstd([r[2] for r in rows]), 1e-12)
    it = 0
    for it in range(1, max_iter + 1):
        lo = {s: 0.0 for s in srcs}
        for o, s, v in rows:
            r = v - truth[o]
            lo[s] += (r * r if loss == "squared" else abs(r)) / std[o]
        w = crh_w_ref(lo)
        if loss == "squared":
            new = wmean_ref(rows, w)
        else:
            new = {o: wmedian([(v, w[s]) for s, v in cl]) for o, cl in po.items()}
        delta = max(abs(new[o] - truth[o]) for o in po) / scale
        truth = new
        if delta < tol:
            break
    return truth, conf_ref(rows, truth, w), w, it


@pytest.mark.parametrize("loss", ["squared", "absolute"])
@pytest.mark.parametrize("data", [NUM_A, NUM_B, NUM_C, LONE])
@pytest.mark.parametrize("max_iter,tol", [(1, 1e-6), (2, 1e-6), (100, 1e-6), (100, 1e-2), (100, 1e-4)])
def test_crh_numeric_matches_plain_loop(loss, data, max_iter, tol):
    t, c, w, it = crh_ref(data, loss, tol, max_iter)
    m = fit(CRH, data, loss=loss, tol=tol, max_iter=max_iter)
    check_numeric(m, t, c, w, it)


def test_crh_discover_routes_loss_option_and_kw():
    t, c, w, it = crh_ref(NUM_B, "absolute")
    df = pd.DataFrame(NUM_B, columns=["o", "s", "v"])
    r = discover(df, "o", "s", "v", method="crh", options={"loss": "absolute"})
    assert r.method == "crh" and r.n_iter == it
    assert r.objects["truth"].tolist() == pytest.approx([t[o] for o in "abcd"], rel=RT)
    r2 = discover(df, "o", "s", "v", method="CRH", loss="absolute")
    assert r2.objects["truth"].tolist() == pytest.approx([t[o] for o in "abcd"], rel=RT)
    assert r2.sources["weight"].tolist() == pytest.approx([w[s] for s in "pqr"], rel=RT)


def test_crh_bad_loss_message():
    with pytest.raises(ArgumentError, match=r"^CRH loss must be 'squared' or 'absolute', got 'l1'$"):
        CRH(loss="l1")


def test_crh_weights_closed_form_and_floor():
    loss = np.array([1.0, 2.0, 5.0])
    assert crh_weights(loss) == pytest.approx([math.log(8 / 1), math.log(8 / 2), math.log(8 / 5)], rel=1e-12)
    # a perfect source: loss floored at total * 1e-12
    assert crh_weights(np.array([0.0, 3.0])) == pytest.approx([math.log(1e12), 0.0], rel=1e-12, abs=1e-15)
    assert crh_weights(np.array([0.0, 0.0])).tolist() == [1.0, 1.0]
    # a total below 1 is still a positive total
    assert crh_weights(np.array([0.25, 0.5])) == pytest.approx([math.log(3.0), math.log(1.5)], rel=1e-12)


def test_weighted_mean_and_object_std_plain():
    ans = encode_answers([o for o, _, _ in NUM_A], [s for _, s, _ in NUM_A], [v for _, _, v in NUM_A], "numeric")
    w = {"s1": 0.5, "s2": 0.0, "s3": 2.0, "s4": 1.0}
    got = weighted_mean(ans, np.array([w[s] for s in ans.sources]))
    # weights summing to 0.5 on an object still give the weighted mean (not the plain one)
    ans2 = encode_answers(["p", "p"], ["s1", "s2"], [1.0, 5.0], "numeric")
    assert weighted_mean(ans2, np.array([0.4, 0.1])).tolist() == pytest.approx([(0.4 * 1 + 0.1 * 5) / 0.5], rel=1e-12)
    ref = wmean_ref(NUM_A, w)
    assert got.tolist() == pytest.approx([ref[o] for o in ans.objects], rel=1e-12)
    # u has only s2 with weight 0: falls back to the plain mean 7.0
    assert got[list(ans.objects).index("u")] == 7.0
    std = object_std(ans)
    assert std.tolist() == pytest.approx([pstd([v for _, v in cl]) for cl in per_obj(NUM_A).values()], rel=1e-12,
                                         abs=1e-15)


def test_crh_single_source_gets_zero_weight_and_plain_mean():
    # s and t are perfect on a (loss floored at 1e-12 of the total), u carries the whole loss: weight log(1) = 0;
    # b is answered by u alone, so its weighted mean has no weight and falls back to the plain mean 7
    rows = [("a", "s", 1.0), ("a", "t", 1.0), ("a", "u", 5.0), ("b", "u", 7.0)]
    m = fit(CRH, rows)
    assert m.source_weights_.tolist() == pytest.approx([math.log(1e12), math.log(1e12), 0.0], rel=1e-12)
    assert m.truths_.tolist() == [1.0, 7.0]
    t, c, w, it = crh_ref(rows)
    check_numeric(m, t, c, w, it)


def test_crh_perfect_agreement_weights_one():
    rows = [("a", "s", 2.0), ("a", "t", 2.0), ("b", "s", 5.0), ("b", "t", 5.0)]
    m = fit(CRH, rows)
    assert m.source_weights_.tolist() == [1.0, 1.0]
    assert m.truths_.tolist() == [2.0, 5.0]
    assert m.n_iter_ == 1


# CRH on labels
LAB_A = [
    ("t1", "w1", "a"), ("t1", "w2", "a"), ("t1", "w3", "b"), ("t1", "w4", "c"),
    ("t2", "w1", "b"), ("t2", "w2", "b"), ("t2", "w3", "b"), ("t2", "w4", "a"),
    ("t3", "w1", "c"), ("t3", "w2", "a"), ("t3", "w3", "c"), ("t3", "w4", "c"),
    ("t4", "w1", "a"), ("t4", "w3", "b"), ("t4", "w4", "b"),
    ("t5", "w2", "c"), ("t5", "w4", "a"),
    ("t6", "w1", "b"), ("t6", "w2", "c"),
]
LAB_B = [
    ("q1", "A", "x"), ("q1", "B", "y"), ("q1", "C", "y"),
    ("q2", "A", "y"), ("q2", "B", "y"), ("q2", "C", "x"),
    ("q3", "A", "x"), ("q3", "B", "x"), ("q3", "C", "x"),
    ("q4", "A", "x"), ("q4", "C", "y"),
    ("q5", "B", "x"), ("q5", "C", "y"),
]


def classes_of(rows):
    return sorted(set(r[2] for r in rows))


def votes_ref(rows, w=None):
    ks = classes_of(rows)
    out = {}
    for o, s, v in rows:
        out.setdefault(o, [0.0] * len(ks))
        out[o][ks.index(v)] += 1.0 if w is None else w[s]
    return out


def argmax_first(xs):
    """The tie rule of the label choice, restated: the lowest index among the scores that equal the largest one up to
    |m - x| <= 1e-11 * max(|m|, |x|) + 1e-300 (so a last-bit difference from summation order is a tie)."""
    m = max(xs)
    for i, x in enumerate(xs):
        if x == m or abs(m - x) <= 1e-11 * max(abs(m), abs(x)) + 1e-300:
            return i
    raise AssertionError("unreachable: the maximum ties with itself")


def norm(xs):
    t = sum(xs)
    return [x / t for x in xs] if t > 0 else [1.0 / len(xs)] * len(xs)


def crh01_ref(rows, max_iter=100):
    ks = classes_of(rows)
    srcs = order_of([r[1] for r in rows])
    truth = {o: argmax_first(v) for o, v in votes_ref(rows).items()}
    w = {s: 1.0 for s in srcs}
    it = 0
    for it in range(1, max_iter + 1):
        lo = {s: 0.0 for s in srcs}
        for o, s, v in rows:
            lo[s] += float(ks.index(v) != truth[o])
        w = crh_w_ref(lo)
        votes = votes_ref(rows, w)
        new = {o: argmax_first(v) for o, v in votes.items()}
        changed = sum(new[o] != truth[o] for o in new)
        truth = new
        if changed == 0:
            break
    post = {o: norm(v) for o, v in votes.items()}
    return {o: ks[t] for o, t in truth.items()}, {o: post[o][t] for o, t in truth.items()}, w, it, post


def check_cat(m, truth, conf, w, n_iter=None, post=None, rtol=RT):
    assert list(m.truths_.index) == list(truth)
    assert m.truths_.to_dict() == truth
    for o in truth:
        assert m.confidences_[o] == pytest.approx(conf[o], rel=rtol, abs=1e-12), o
    assert list(m.source_weights_.index) == list(w)
    for s in w:
        assert m.source_weights_[s] == pytest.approx(w[s], rel=rtol, abs=1e-12), s
    if n_iter is not None:
        assert m.n_iter_ == n_iter
    if post is not None:
        for o in truth:
            assert m.proba_.loc[o].tolist() == pytest.approx(post[o], rel=rtol, abs=1e-12), o


@pytest.mark.parametrize("data", [LAB_A, LAB_B])
@pytest.mark.parametrize("max_iter", [1, 100])
def test_crh_categorical_matches_plain_loop(data, max_iter):
    t, c, w, it, post = crh01_ref(data, max_iter)
    m = fit(CRHCategorical, data, max_iter=max_iter)
    check_cat(m, t, c, w, it, post)


# ----------------------------------------------------------------------------------------- 'ti' (Algorithm 1)


def ti_ref(rows, tol=1e-6, max_iter=100):
    srcs = order_of([r[1] for r in rows])
    ps = per_src(rows)
    w = {s: 1.0 / len(srcs) for s in srcs}
    scale = max(pstd([r[2] for r in rows]), 1e-12)
    truth = wmean_ref(rows, w)
    it = 0
    for it in range(1, max_iter + 1):
        sig = {}
        for s in srcs:
            mse = sum((v - truth[o]) ** 2 for o, v in ps[s]) / len(ps[s])
            sig[s] = math.sqrt(max(mse, (1e-6 * scale) ** 2))
        tot = sum(1.0 / x for x in sig.values())
        w = {s: (1.0 / sig[s]) / tot for s in srcs}
        new = wmean_ref(rows, w)
        delta = max(abs(new[o] - truth[o]) for o in truth) / scale
        truth = new
        if delta < tol:
            break
    return truth, conf_ref(rows, truth, w), w, it


@pytest.mark.parametrize("data", [NUM_A, NUM_B, NUM_C, LONE])
@pytest.mark.parametrize("max_iter,tol", [(1, 1e-6), (3, 1e-6), (100, 1e-6), (100, 1e-2), (100, 1e-4)])
def test_ti_matches_plain_loop(data, max_iter, tol):
    t, c, w, it = ti_ref(data, tol, max_iter)
    check_numeric(fit(SigmaWeighted, data, tol=tol, max_iter=max_iter), t, c, w, it)


def test_ti_perfect_source_floor():
    rows = [("a", "s", 1.0), ("a", "t", 1.0), ("b", "s", 4.0), ("b", "t", 4.0), ("c", "s", 2.0), ("c", "t", 3.0)]
    t, c, w, it = ti_ref(rows)
    check_numeric(fit(SigmaWeighted, rows), t, c, w, it)
    one = [("a", "s", 1.0), ("b", "s", 2.0)]
    t, c, w, it = ti_ref(one)
    check_numeric(fit(SigmaWeighted, one), t, c, w, it)


# ----------------------------------------------------------------------------------------- GTM


def gtm_ref(rows, alpha=10.0, beta=10.0, mu0=0.0, sigma0=1.0, tol=1e-6, max_iter=100):
    po = per_obj(rows)
    srcs = order_of([r[1] for r in rows])
    center = {o: wmedian([(v, 1.0) for _, v in cl]) for o, cl in po.items()}
    std = {o: (pstd([v for _, v in cl]) or 1.0) for o, cl in po.items()}
    z = [(o, s, (v - center[o]) / std[o]) for o, s, v in rows]
    n_src = {s: sum(1 for r in rows if r[1] == s) for s in srcs}
    var = {s: 1.0 for s in srcs}
    mu = {o: 0.0 for o in po}
    it = 0
    for it in range(1, max_iter + 1):
        new = {}
        for o in po:
            num = mu0 / sigma0 ** 2 + sum(x / var[s] for oo, s, x in z if oo == o)
            den = 1.0 / sigma0 ** 2 + sum(1.0 / var[s] for oo, s, x in z if oo == o)
            new[o] = num / den
        var = {s: (2 * beta + sum((x - new[o]) ** 2 for o, ss, x in z if ss == s)) / (2 * (alpha + 1) + n_src[s])
               for s in srcs}
        delta = max(abs(new[o] - mu[o]) for o in po)
        mu = new
        if delta < tol:
            break
    truth = {o: center[o] + mu[o] * std[o] for o in po}
    w = {s: 1.0 / var[s] for s in srcs}
    return truth, conf_ref(rows, truth, w), w, it


@pytest.mark.parametrize("data", [NUM_A, NUM_B, NUM_C, LONE])
@pytest.mark.parametrize("kw", [{}, {"max_iter": 1}, {"max_iter": 2}, {"tol": 1e-2},
                                {"alpha": 2.0, "beta": 0.5, "mu0": 0.3, "sigma0": 2.0},
                                {"alpha": 0.5, "beta": 3.0, "mu0": -1.0, "sigma0": 0.5, "max_iter": 3}])
def test_gtm_matches_plain_loop(data, kw):
    t, c, w, it = gtm_ref(data, **kw)
    check_numeric(fit(GTM, data, **kw), t, c, w, it)


@pytest.mark.parametrize("bad", [{"alpha": 0.0}, {"beta": 0.0}, {"sigma0": 0.0}, {"alpha": -1.0}])
def test_gtm_bad_parameters(bad):
    with pytest.raises(ArgumentError, match=r"^GTM alpha, beta and sigma0 must be positive$"):
        GTM(**bad)


def test_gtm_tiny_positive_parameters_accepted():
    g = GTM(alpha=1e-9, beta=1e-9, sigma0=1e-9)  # positive is enough: the bound is > 0, not >= 1
    assert (g.alpha, g.beta, g.mu0, g.sigma0) == (1e-9, 1e-9, 0.0, 1e-9)


def test_gtm_discover_routes_options():
    kw = {"alpha": 2.0, "beta": 0.5, "mu0": 0.3, "sigma0": 2.0}
    t, c, w, it = gtm_ref(NUM_B, **kw)
    r = discover(pd.DataFrame(NUM_B, columns=["object", "source", "value"]), method="gtm", options=kw)
    assert r.objects["truth"].tolist() == pytest.approx([t[o] for o in "abcd"], rel=RT)
    assert r.n_iter == it


# ----------------------------------------------------------------------------------------- CATD


def catd_ref(rows, alpha=0.05, tol=1e-6, max_iter=100):
    po = per_obj(rows)
    srcs = order_of([r[1] for r in rows])
    n_src = {s: sum(1 for r in rows if r[1] == s) for s in srcs}
    q = {s: 2.0 * gammaincinv(n_src[s] / 2.0, alpha / 2.0) for s in srcs}  # chi-square quantile, closed form
    scale = max(pstd([r[2] for r in rows]), 1e-12)
    truth = {o: wmedian([(v, 1.0) for _, v in cl]) for o, cl in po.items()}
    w = {s: 1.0 for s in srcs}
    it = 0
    for it in range(1, max_iter + 1):
        sse = {s: 0.0 for s in srcs}
        for o, s, v in rows:
            sse[s] += (v - truth[o]) ** 2
        w = {s: q[s] / max(sse[s], (1e-6 * scale) ** 2) for s in srcs}
        new = wmean_ref(rows, w)
        delta = max(abs(new[o] - truth[o]) for o in po) / scale
        truth = new
        if delta < tol:
            break
    return truth, conf_ref(rows, truth, w), w, it


@pytest.mark.parametrize("data", [NUM_A, NUM_B, NUM_C, LONE])
@pytest.mark.parametrize("kw", [{}, {"max_iter": 1}, {"max_iter": 2}, {"tol": 1e-2}, {"alpha": 0.3}, {"tol": 1e-4}])
def test_catd_matches_plain_loop(data, kw):
    t, c, w, it = catd_ref(data, **kw)
    check_numeric(fit(CATD, data, **kw), t, c, w, it, rtol=1e-7)


def test_catd_perfect_source_floor():
    rows = [("a", "s", 1.0), ("a", "t", 1.0), ("a", "u", 3.0), ("b", "s", 4.0), ("b", "t", 4.0), ("b", "u", 1.0)]
    t, c, w, it = catd_ref(rows)
    check_numeric(fit(CATD, rows), t, c, w, it, rtol=1e-7)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 1.5])
def test_catd_bad_alpha(bad):
    with pytest.raises(ArgumentError, match=r"^CATD alpha must be in \(0, 1\), got " + repr(bad) + "$"):
        CATD(alpha=bad)


# ----------------------------------------------------------------------------------------- voting


def test_mean_median_plain():
    m = fit(Mean, NUM_A)
    truth = {o: sum(v for _, v in cl) / len(cl) for o, cl in per_obj(NUM_A).items()}
    check_numeric(m, truth, conf_ref(NUM_A, truth), {s: 1.0 for s in ["s1", "s2", "s3", "s4"]}, 1)
    m = fit(Median, NUM_A)
    truth = {o: wmedian([(v, 1.0) for _, v in cl]) for o, cl in per_obj(NUM_A).items()}
    assert truth == {"x": 3.0, "y": 5.25, "z": 3.0, "u": 7.0}
    check_numeric(m, truth, conf_ref(NUM_A, truth), {s: 1.0 for s in ["s1", "s2", "s3", "s4"]}, 1)


def test_numeric_confidence_constant_values_scale_one():
    rows = [("a", "s", 2.0), ("a", "t", 2.0)]
    m = fit(Mean, rows)
    assert m.confidences_.tolist() == [1.0]


@pytest.mark.parametrize("vals,ws,expect", [
    ([1.0, 2.0, 3.0, 4.0], None, 2.5),
    ([4.0, 1.0, 3.0], None, 3.0),
    ([5.0], None, 5.0),
    ([1.0, 2.0, 3.0], [1.0, 1.0, 2.0], 2.5),
    ([1.0, 2.0, 3.0], [1.0, 2.0, 1.0], 2.0),
    ([1.0, 2.0, 3.0], [3.0, 1.0, 1.0], 1.0),
    ([1.0, 2.0, 3.0, 9.0], [0.0, 0.0, 1.0, 1.0], 6.0),
    ([1.0, 2.0], [0.5, 0.5], 1.5),
    ([1.0, 2.0, 3.0], [0.2, 0.2, 0.4], 2.5),
    ([3.0, 1.0, 2.0], [0.6, 0.3, 0.3], 2.5),
])
def test_segment_median_cases(vals, ws, expect):
    n = len(vals)
    # put the segment second, after a one-claim segment, to exercise the segment offsets
    obj = np.array([0] + [1] * n)
    val = np.array([100.0] + vals)
    w = None if ws is None else np.array([7.0] + ws)
    got = segment_median(obj, val, 2, w)
    assert got.tolist() == [100.0, pytest.approx(expect, rel=1e-12)]
    ref = wmedian(list(zip(vals, ws or [1.0] * n)))
    assert ref == pytest.approx(expect, rel=1e-12)


def test_segment_median_tiny_weights():
    # totals below 1: the tolerance is 1e-12 * max(total, 1)
    obj = np.array([0, 0, 0])
    got = segment_median(obj, np.array([1.0, 2.0, 3.0]), 1, np.array([1e-3, 1e-3, 1e-3]))
    assert got.tolist() == [2.0]
    got = segment_median(obj, np.array([1.0, 2.0, 3.0]), 1, np.array([1e-3, 2e-3, 1e-3]))
    assert got.tolist() == [2.0]


def mv_ref(rows):
    ks = classes_of(rows)
    votes = votes_ref(rows)
    truth = {o: argmax_first(v) for o, v in votes.items()}
    acc = {}
    for s, cl in per_src(rows).items():
        acc[s] = sum(ks.index(v) == truth[o] for o, v in cl) / len(cl)
    post = {o: norm(v) for o, v in votes.items()}
    return {o: ks[t] for o, t in truth.items()}, {o: post[o][t] for o, t in truth.items()}, acc, 1, post


@pytest.mark.parametrize("data", [LAB_A, LAB_B])
def test_majority_vote_plain(data):
    t, c, w, it, post = mv_ref(data)
    check_cat(fit(MajorityVote, data), t, c, w, it, post)


def test_majority_vote_random_ties_reproduce_generator():
    rows = [("a", "s", "x"), ("a", "t", "y"), ("b", "s", "y"), ("b", "t", "x"), ("b", "u", "z"),
            ("c", "s", "z"), ("c", "t", "z"), ("c", "u", "x")]
    for seed in range(6):
        m = fit(MajorityVote, rows, tie="random", seed=seed)
        noise = np.random.default_rng(seed).random((3, 3))
        # tied top classes: a {x, y}, b {x, y, z}; c has one winner
        exp_a = ["x", "y"][int(noise[0, 1] > noise[0, 0])]
        exp_b = ["x", "y", "z"][int(np.argmax(noise[1]))]
        assert m.truths_.tolist() == [exp_a, exp_b, "z"], seed
        assert m.confidences_.tolist() == pytest.approx([0.5, 1 / 3, 2 / 3])
    m = fit(MajorityVote, rows, tie="first")
    assert m.truths_.tolist() == ["x", "x", "z"]


def test_majority_vote_bad_tie():
    with pytest.raises(ArgumentError, match=r"^tie must be 'first' or 'random', got 'coin'$"):
        MajorityVote(tie="coin")


def test_source_accuracy_plain():
    ans = encode_answers(*zip(*LAB_A), "categorical")
    truth = np.array([0, 1, 2, 0, 2, 1])
    got = source_accuracy(ans, truth)
    ks = classes_of(LAB_A)
    tmap = dict(zip(order_of([r[0] for r in LAB_A]), truth))
    exp = [sum(ks.index(v) == tmap[o] for o, v in cl) / len(cl) for cl in per_src(LAB_A).values()]
    assert got.tolist() == pytest.approx(exp, rel=1e-12)


# ----------------------------------------------------------------------------------------- EM helpers


def softmax_log(xs):
    m = max(xs)
    e = [math.exp(x - m) for x in xs]
    s = sum(e)
    return [x / s for x in e], m + math.log(s)


# ----------------------------------------------------------------------------------------- Dawid-Skene


def ds_m_ref(rows, ks, srcs, post, smoothing, diag_prior):
    K = len(ks)
    objs = list(post)
    pri = [max(sum(post[o][k] for o in objs) / len(objs), 1e-10) for k in range(K)]
    pri = [p / sum(pri) for p in pri]
    cm = {}
    for s in srcs:
        tab = [[0.0] * K for _ in range(K)]
        for o, ss, v in rows:
            if ss == s:
                for k in range(K):
                    tab[k][ks.index(v)] += post[o][k]
        for k in range(K):
            for l in range(K):
                tab[k][l] = max(tab[k][l] + smoothing + (diag_prior if k == l else 0.0), 1e-10)
            t = sum(tab[k])
            tab[k] = [x / t for x in tab[k]]
        cm[s] = tab
    return pri, cm


def ds_ref(rows, smoothing=0.0, diag_prior=0.0, tol=1e-6, max_iter=100):
    ks = classes_of(rows)
    K = len(ks)
    srcs = order_of([r[1] for r in rows])
    post = {o: norm(v) for o, v in votes_ref(rows).items()}
    pri, cm = ds_m_ref(rows, ks, srcs, post, smoothing, diag_prior)
    ll_old = -math.inf
    it = 0
    for it in range(1, max_iter + 1):
        ll = 0.0
        new = {}
        for o in post:
            lp = [math.log(pri[k]) for k in range(K)]
            for oo, s, v in rows:
                if oo == o:
                    for k in range(K):
                        lp[k] += math.log(cm[s][k][ks.index(v)])
            new[o], z = softmax_log(lp)
            ll += z
        post = new
        pri, cm = ds_m_ref(rows, ks, srcs, post, smoothing, diag_prior)
        if (ll - ll_old) / len(rows) < tol:
            break
        ll_old = ll
    truth = {o: argmax_first(p) for o, p in post.items()}
    w = {s: sum(pri[k] * cm[s][k][k] for k in range(K)) for s in srcs}
    return {o: ks[t] for o, t in truth.items()}, {o: post[o][t] for o, t in truth.items()}, w, it, post, pri, cm


@pytest.mark.parametrize("data", [LAB_A, LAB_B])
@pytest.mark.parametrize("kw", [{}, {"max_iter": 1}, {"max_iter": 2}, {"tol": 1e-2}, {"smoothing": 0.5},
                                {"diag_prior": 1.5}, {"smoothing": 0.25, "diag_prior": 2.0, "max_iter": 3}])
def test_dawid_skene_matches_plain_loop(data, kw):
    t, c, w, it, post, pri, cm = ds_ref(data, **kw)
    m = fit(DawidSkene, data, **kw)
    check_cat(m, t, c, w, it, post, rtol=1e-8)
    assert m.priors_.tolist() == pytest.approx(pri, rel=1e-8)
    for i, s in enumerate(order_of([r[1] for r in data])):
        assert m.confusion_[i].tolist() == [pytest.approx(row, rel=1e-8, abs=1e-14) for row in cm[s]]


def test_dawid_skene_discover_auto_and_options():
    df = pd.DataFrame(LAB_B, columns=["object", "source", "value"])
    t, c, w, it, post, pri, cm = ds_ref(LAB_B, smoothing=0.5)
    r = discover(df, options={"smoothing": 0.5})
    assert r.method == "ds" and r.n_iter == it
    assert r.objects["truth"].tolist() == [t[o] for o in ["q1", "q2", "q3", "q4", "q5"]]
    assert r.objects["confidence"].tolist() == pytest.approx([c[o] for o in ["q1", "q2", "q3", "q4", "q5"]], rel=1e-8)


# ----------------------------------------------------------------------------------------- one-coin DS


def onecoin_ref(rows, tol=1e-6, max_iter=100):
    ks = classes_of(rows)
    K = len(ks)
    srcs = order_of([r[1] for r in rows])
    post = {o: norm(v) for o, v in votes_ref(rows).items()}
    n_src = {s: sum(1 for r in rows if r[1] == s) for s in srcs}
    ll_old = -math.inf
    it = 0
    for it in range(1, max_iter + 1):
        pri = [max(sum(p[k] for p in post.values()) / len(post), 1e-10) for k in range(K)]
        pri = [p / sum(pri) for p in pri]
        acc = {s: 0.0 for s in srcs}
        for o, s, v in rows:
            acc[s] += post[o][ks.index(v)]
        acc = {s: min(max(acc[s] / n_src[s], 1e-10), 1 - 1e-10) for s in srcs}
        ll = 0.0
        new = {}
        for o in post:
            lp = [math.log(pri[k]) for k in range(K)]
            for oo, s, v in rows:
                if oo == o:
                    for k in range(K):
                        lp[k] += math.log(acc[s]) if ks.index(v) == k else math.log((1 - acc[s]) / max(K - 1, 1))
            new[o], z = softmax_log(lp)
            ll += z
        post = new
        if abs(ll - ll_old) / len(rows) < tol:
            break
        ll_old = ll
    truth = {o: argmax_first(p) for o, p in post.items()}
    return {o: ks[t] for o, t in truth.items()}, {o: post[o][t] for o, t in truth.items()}, acc, it, post, pri


@pytest.mark.parametrize("data", [LAB_A, LAB_B])
@pytest.mark.parametrize("kw", [{}, {"max_iter": 1}, {"max_iter": 2}, {"tol": 1e-2}])
def test_one_coin_matches_plain_loop(data, kw):
    t, c, w, it, post, pri = onecoin_ref(data, **kw)
    m = fit(OneCoinDawidSkene, data, **kw)
    check_cat(m, t, c, w, it, post, rtol=1e-8)
    assert m.priors_.tolist() == pytest.approx(pri, rel=1e-8)


def test_one_coin_perfect_sources_clip():
    rows = [("a", "s", "x"), ("a", "t", "x"), ("b", "s", "y"), ("b", "t", "y"), ("c", "s", "x"), ("c", "t", "x")]
    t, c, w, it, post, pri = onecoin_ref(rows)
    check_cat(fit(OneCoinDawidSkene, rows), t, c, w, it, post, rtol=1e-8)


# ----------------------------------------------------------------------------------------- ZenCrowd


def zc_ref(rows, init=0.7, tol=1e-6, max_iter=100):
    ks = classes_of(rows)
    K = len(ks)
    srcs = order_of([r[1] for r in rows])
    objs = order_of([r[0] for r in rows])
    n_src = {s: sum(1 for r in rows if r[1] == s) for s in srcs}
    r = {s: init for s in srcs}
    ll_old = -math.inf
    it = 0
    for it in range(1, max_iter + 1):
        rc = {s: min(max(r[s], 1e-10), 1 - 1e-10) for s in srcs}
        post = {}
        ll = 0.0
        for o in objs:
            lp = [0.0] * K
            for oo, s, v in rows:
                if oo == o:
                    for k in range(K):
                        lp[k] += math.log(rc[s]) if ks.index(v) == k else math.log((1 - rc[s]) / max(K - 1, 1))
            post[o], z = softmax_log(lp)
            ll += z
        r = {s: 0.0 for s in srcs}
        for o, s, v in rows:
            r[s] += post[o][ks.index(v)]
        r = {s: r[s] / n_src[s] for s in srcs}
        if abs(ll - ll_old) / len(rows) < tol:
            break
        ll_old = ll
    truth = {o: argmax_first(p) for o, p in post.items()}
    return {o: ks[t] for o, t in truth.items()}, {o: post[o][t] for o, t in truth.items()}, r, it, post


@pytest.mark.parametrize("data", [LAB_A, LAB_B])
@pytest.mark.parametrize("kw", [{}, {"max_iter": 1}, {"max_iter": 2}, {"tol": 1e-2}, {"init_reliability": 0.9},
                                {"init_reliability": 0.4, "max_iter": 3}])
def test_zencrowd_matches_plain_loop(data, kw):
    ref_kw = {("init" if k == "init_reliability" else k): v for k, v in kw.items()}
    t, c, w, it, post = zc_ref(data, **ref_kw)
    check_cat(fit(ZenCrowd, data, **kw), t, c, w, it, post, rtol=1e-8)


def test_zencrowd_perfect_sources_clip():
    rows = [("a", "s", "x"), ("a", "t", "x"), ("b", "s", "y"), ("b", "t", "y")]
    t, c, w, it, post = zc_ref(rows)
    check_cat(fit(ZenCrowd, rows), t, c, w, it, post, rtol=1e-8)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.5, 2.0])
def test_zencrowd_bad_init(bad):
    with pytest.raises(ArgumentError, match=r"^init_reliability must be in \(0, 1\), got " + repr(bad) + "$"):
        ZenCrowd(init_reliability=bad)


# ----------------------------------------------------------------------------------------- GLAD


def log_sig(x):
    return -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))


def glad_e_ref(rows, ks, alpha, b, priors):
    K = len(ks)
    post, ll = {}, 0.0
    for o in order_of([r[0] for r in rows]):
        lp = [math.log(p) for p in priors]
        for oo, s, v in rows:
            if oo == o:
                x = alpha[s] * math.exp(b[o])
                for k in range(K):
                    lp[k] += log_sig(x) if ks.index(v) == k else log_sig(-x) - math.log(max(K - 1, 1))
        post[o], z = softmax_log(lp)
        ll += z
    return post, ll


def glad_q_ref(rows, ks, post, alpha_prior, b_prior, srcs, objs):
    """GLAD's expected complete log-likelihood (Eq. 4) with Gaussian priors, and its gradient, as plain loops."""
    K = len(ks)
    c = math.log(max(K - 1, 1))

    def negq(theta):
        a = dict(zip(srcs, theta[:len(srcs)]))
        bb = dict(zip(objs, theta[len(srcs):]))
        q = 0.0
        ga = {s: -(a[s] - alpha_prior) for s in srcs}
        gb = {o: -(bb[o] - b_prior) for o in objs}
        for o, s, v in rows:
            p = post[o][ks.index(v)]
            beta = math.exp(bb[o])
            x = a[s] * beta
            q += p * log_sig(x) + (1 - p) * (log_sig(-x) - c)
            g = p - 1.0 / (1.0 + math.exp(-x))
            ga[s] += g * beta
            gb[o] += g * x
        q -= 0.5 * sum((a[s] - alpha_prior) ** 2 for s in srcs) + 0.5 * sum((bb[o] - b_prior) ** 2 for o in objs)
        return -q, -np.array([ga[s] for s in srcs] + [gb[o] for o in objs])

    return negq


def glad_ref(rows, alpha_prior=1.0, b_prior=1.0, m_step_iter=25, learn_priors=False, tol=1e-6, max_iter=100):
    from scipy.optimize import minimize

    ks = classes_of(rows)
    K = len(ks)
    srcs = order_of([r[1] for r in rows])
    objs = order_of([r[0] for r in rows])
    alpha = {s: alpha_prior for s in srcs}
    b = {o: b_prior for o in objs}
    pri = [1.0 / K] * K
    post, ll_old = glad_e_ref(rows, ks, alpha, b, pri)
    it = 0
    for it in range(1, max_iter + 1):
        if learn_priors:
            pri = [max(sum(post[o][k] for o in objs) / len(objs), 1e-10) for k in range(K)]
            pri = [p / sum(pri) for p in pri]
        negq = glad_q_ref(rows, ks, post, alpha_prior, b_prior, srcs, objs)
        x0 = np.array([alpha[s] for s in srcs] + [b[o] for o in objs])
        res = minimize(negq, x0, jac=True, method="L-BFGS-B", options={"maxiter": m_step_iter})
        alpha = dict(zip(srcs, res.x[:len(srcs)]))
        b = dict(zip(objs, res.x[len(srcs):]))
        post, ll = glad_e_ref(rows, ks, alpha, b, pri)
        if abs(ll - ll_old) / len(rows) < tol:
            break
        ll_old = ll
    truth = {o: argmax_first(p) for o, p in post.items()}
    return ({o: ks[t] for o, t in truth.items()}, {o: post[o][t] for o, t in truth.items()}, alpha, it, post,
            {o: math.exp(b[o]) for o in objs})


@pytest.mark.parametrize("data,kw", [
    (LAB_A, {"max_iter": 1}), (LAB_A, {"max_iter": 2}), (LAB_A, {"tol": 1e-2}),
    (LAB_A, {"learn_priors": True, "max_iter": 2, "m_step_iter": 3}),
    (LAB_B, {"max_iter": 1}), (LAB_B, {"max_iter": 3}), (LAB_B, {"tol": 1e-2}),
    (LAB_B, {"alpha_prior": 2.0, "b_prior": -0.5, "m_step_iter": 5, "max_iter": 3}),
    (LAB_B, {"learn_priors": True, "max_iter": 3}),
])
def test_glad_matches_plain_loop(data, kw):
    t, c, w, it, post, betas = glad_ref(data, **kw)
    m = fit(GLAD, data, **kw)
    check_cat(m, t, c, w, it, post, rtol=1e-6)
    assert m.betas_.tolist() == pytest.approx([betas[o] for o in m.truths_.index], rel=1e-6)
    assert m.alphas_.tolist() == pytest.approx([w[s] for s in m.source_weights_.index], rel=1e-6)


def test_glad_e_step_plain_loop():
    ans = encode_answers(*zip(*LAB_A), "categorical")
    srcs, objs, ks = list(ans.sources), list(ans.objects), classes_of(LAB_A)
    alpha = np.array([1.5, -0.7, 0.3, 2.2])
    b = np.array([0.1, -0.4, 0.9, 0.0, -1.2, 0.5])
    pri = np.array([0.2, 0.5, 0.3])
    post, lognorm = GLAD()._e_step(ans, alpha, b, pri)
    ref_post, ref_ll = glad_e_ref(LAB_A, ks, dict(zip(srcs, alpha)), dict(zip(objs, b)), list(pri))
    for i, o in enumerate(objs):
        assert post[i].tolist() == pytest.approx(ref_post[o], rel=1e-12)
    assert float(lognorm.sum()) == pytest.approx(ref_ll, rel=1e-12)


def test_glad_m_step_reaches_the_optimum_of_eq4():
    from scipy.optimize import minimize

    ans = encode_answers(*zip(*LAB_B), "categorical")
    srcs, objs, ks = list(ans.sources), list(ans.objects), classes_of(LAB_B)
    rng = np.random.default_rng(3)
    post = rng.dirichlet([1.0, 1.0], size=len(objs))
    g = GLAD(alpha_prior=0.5, b_prior=0.2, m_step_iter=500)
    a, b = g._m_step(ans, post, np.full(len(srcs), 0.5), np.full(len(objs), 0.2))
    negq = glad_q_ref(LAB_B, ks, {o: list(post[i]) for i, o in enumerate(objs)}, 0.5, 0.2, srcs, objs)
    # the optimum found without the analytic gradient (Nelder-Mead on the plain-loop objective)
    res = minimize(lambda th: negq(th)[0], np.zeros(len(srcs) + len(objs)), method="Nelder-Mead",
                   options={"xatol": 1e-10, "fatol": 1e-13, "maxiter": 40000, "maxfev": 40000})
    assert np.concatenate([a, b]) == pytest.approx(res.x, abs=1e-4)
    # the analytic gradient of the plain loop vanishes there
    assert np.abs(negq(np.concatenate([a, b]))[1]).max() < 2e-4


# ----------------------------------------------------------------------------------------- discover()

from crowddb.truth import discover as discover_mod  # noqa: E402
from crowddb.truth.base import Answers  # noqa: E402
from crowddb.truth.discover import AUTO_METHODS, TruthResult, method_options, resolve_method  # noqa: E402
from crowddb.truth.ldp import perturb as ldp_perturb  # noqa: E402
from crowddb.truth.noise import make_sampler  # noqa: E402

LAB_DF = pd.DataFrame(LAB_B, columns=["object", "source", "value"])
NUM_DF = pd.DataFrame(NUM_B, columns=["object", "source", "value"])


def test_auto_methods_table():
    assert AUTO_METHODS == {"categorical": "ds", "numeric": "crh"}


@pytest.mark.parametrize("name,kind,expect", [
    ("auto", "categorical", DawidSkene), (" AUTO ", "numeric", CRH), ("crh", "categorical", CRHCategorical),
    ("crh", "numeric", CRH), (" Crh_Numeric", "categorical", CRHCategorical), ("crh_numeric", "numeric", CRH),
    ("mv", "categorical", MajorityVote), ("glad", "numeric", GLAD), ("gtm", "categorical", GTM),
    ("crh01", "numeric", CRHCategorical),
])
def test_resolve_method(name, kind, expect):
    assert resolve_method(name, kind) is expect


def test_method_options_per_class():
    assert method_options(CRH) == ("loss",)
    assert method_options(GTM) == ("alpha", "beta", "mu0", "sigma0")
    assert method_options(GLAD) == ("alpha_prior", "b_prior", "m_step_iter", "learn_priors")
    assert method_options(DawidSkene) == ("smoothing", "diag_prior")
    assert method_options(MajorityVote) == ("tie",)
    assert method_options(Mean) == ()
    assert method_options(CRHCategorical) == ()

    class Sub(CRH):  # no __init__ of its own: the parent's options count
        pass

    assert method_options(Sub) == ("loss",)

    class Sub2(Sub):
        def __init__(self, extra=1, *, kwonly=2, **kw):
            super().__init__(**kw)

    assert method_options(Sub2) == ("extra", "kwonly", "loss")


def test_columns_inputs():
    exp = discover(NUM_DF, method="mean")
    assert exp.objects["truth"].tolist() == [17.0, 13.833333333333334, 0.5, 6.0]
    for data in [(NUM_DF["object"], NUM_DF["source"], NUM_DF["value"]),
                 [list(NUM_DF["object"]), list(NUM_DF["source"]), list(NUM_DF["value"])],
                 {c: list(NUM_DF[c]) for c in NUM_DF.columns}]:
        got = discover(data, method="mean")
        pd.testing.assert_frame_equal(got.objects, exp.objects)
    # the three-array form keeps each array in its role (sources matter to CRH)
    t, c, w, it = crh_ref(NUM_B)
    got = discover((NUM_DF["object"], NUM_DF["source"], NUM_DF["value"]), method="crh")
    assert got.sources["source"].tolist() == ["p", "q", "r"]
    assert got.sources["weight"].tolist() == pytest.approx([w[s] for s in "pqr"], rel=RT)
    assert got.objects["truth"].tolist() == pytest.approx([t[o] for o in "abcd"], rel=RT)

    class Arrowish:
        def to_pandas(self):
            return NUM_DF.copy()

    class Relation:
        def df(self):
            return NUM_DF.copy()

    pd.testing.assert_frame_equal(discover(Arrowish(), method="mean").objects, exp.objects)
    pd.testing.assert_frame_equal(discover(Relation(), method="mean").objects, exp.objects)
    renamed = NUM_DF.rename(columns={"object": "o", "source": "s", "value": "v"})
    pd.testing.assert_frame_equal(discover(renamed, "o", "s", "v", method="mean").objects, exp.objects)
    # a 4-tuple is not the three-array form
    with pytest.raises(ArgumentError, match=r"^discover\(\) needs a pandas DataFrame, a dict of columns, an Arrow table, a Polars DataFrame or a DuckDB relation, or a tuple \(objects, sources, values\), got tuple$"):
        discover((1, 2, 3, 4))
    with pytest.raises(ArgumentError, match=r"^discover\(\) needs a pandas DataFrame, a dict of columns, an Arrow table, a Polars DataFrame or a DuckDB relation, or a tuple \(objects, sources, values\), got int$"):
        discover(5)


@pytest.mark.parametrize("cols,role,col", [(("o", "source", "value"), "object", "o"),
                                           (("object", "s", "value"), "source", "s"),
                                           (("object", "source", "v"), "value", "v")])
def test_columns_unknown(cols, role, col):
    with pytest.raises(UnknownColumnError,
                       match=rf"^{role} column '{col}' not in input columns \['object', 'source', 'value'\]$"):
        discover(NUM_DF, *cols)


def test_discover_result_fields_and_model():
    t, c, w, it, post, pri, cm = ds_ref(LAB_B)
    r = discover(LAB_DF, method=" DS ", tol=1e-6, max_iter=100)
    assert isinstance(r, TruthResult)
    assert list(r.objects.columns) == ["object", "truth", "confidence"]
    assert list(r.sources.columns) == ["source", "weight"]
    assert r.objects["object"].tolist() == ["q1", "q2", "q3", "q4", "q5"]
    assert r.objects["truth"].tolist() == [t[o] for o in ["q1", "q2", "q3", "q4", "q5"]]
    assert r.sources["source"].tolist() == ["A", "B", "C"]
    assert r.sources["weight"].tolist() == pytest.approx([w[s] for s in "ABC"], rel=1e-8)
    assert r.method == "ds" and r.n_iter == it and r.privacy is None
    assert isinstance(r.model, DawidSkene)
    assert "model" not in repr(r)


@pytest.mark.parametrize("kw", [{"max_iter": 1}, {"max_iter": 2}, {"tol": 1e-2}, {"tol": 0.5}])
def test_discover_passes_tol_and_max_iter(kw):
    t, c, w, it = crh_ref(NUM_A, "squared", **kw)
    r = discover(pd.DataFrame(NUM_A, columns=["object", "source", "value"]), method="crh", **kw)
    assert r.n_iter == it
    assert r.objects["truth"].tolist() == pytest.approx([t[o] for o in "xyzu"], rel=RT)


def test_discover_seed_passed_to_method():
    rows = [("a", "s", "x"), ("a", "t", "y"), ("b", "s", "y"), ("b", "t", "x")]
    df = pd.DataFrame(rows, columns=["object", "source", "value"])
    for seed in range(4):
        noise = np.random.default_rng(seed).random((2, 2))
        exp = [["x", "y"][int(noise[i, 1] > noise[i, 0])] for i in range(2)]
        assert discover(df, method="mv", seed=seed, tie="random").objects["truth"].tolist() == exp


def test_discover_dropna():
    df = pd.DataFrame({"object": ["a", "a", "b", "b"], "source": ["s", "t", "s", "t"],
                       "value": [1.0, np.nan, 2.0, 4.0]})
    with pytest.raises(ArgumentError):
        discover(df, method="mean")
    assert discover(df, method="mean", dropna=True).objects["truth"].tolist() == [1.0, 3.0]


def test_discover_kind_choice():
    # integers with few distinct values are labels under 'auto' -> Dawid-Skene
    ints = pd.DataFrame({"object": [1, 1, 2, 2], "source": ["s", "t", "s", "t"], "value": [1, 2, 2, 2]})
    assert discover(ints).method == "ds"
    # explicit 'crh' on numeric ints is numeric CRH, on bools or text it is CRH with 0-1 loss
    assert discover(ints, method="crh").method == "crh"
    assert discover(ints.assign(value=[True, False, False, False]), method="crh").method == "crh_categorical"
    assert discover(ints.assign(value=["u", "v", "v", "v"]), method="crh").method == "crh_categorical"
    assert discover(ints.assign(value=[0.5, 1.0, 2.0, 2.5]), method="crh").method == "crh"
    assert discover(ints.assign(value=[0.5, 1.0, 2.0, 2.5])).method == "crh"
    # object-dtype numbers under explicit crh: value_kind decides (numbers)
    obj = ints.assign(value=pd.Series([1.5, 2, 3, 4], dtype=object))
    assert discover(obj, method="crh").method == "crh"
    # a non-crh method keeps its own kind
    assert discover(ints, method="mean").method == "mean"
    assert discover(ints.assign(value=[0.0, 1.0, 1.0, 1.0]), method="mv").method == "mv"


def test_discover_auto_with_numeric_perturbation_is_numeric():
    ints = pd.DataFrame({"object": [1, 1, 2, 2, 3, 3], "source": ["s", "t"] * 3, "value": [1, 2, 2, 2, 3, 1]})
    for p in ("laplace", "LP", "mf", "Matrix_Factorization"):
        r = discover(ints, perturb=p, epsilon=1.0, seed=0, options={"bounds": [0, 4]} if p != "laplace" else None,
                     perturb_options={"bounds": (0, 4)} if p == "laplace" else None)
        assert r.method == "crh", p
    r = discover(ints, perturb="gaussian", epsilon=1.0, delta=0.1, seed=0)
    assert r.method == "crh"
    # RR keeps labels: auto stays Dawid-Skene
    assert discover(ints, perturb="rr", epsilon=5.0, seed=0).method == "ds"
    assert discover(ints, perturb="RR", epsilon=5.0, seed=0).method == "ds"


def test_discover_privacy_errors():
    with pytest.raises(PrivacyError, match=r"^epsilon/delta were given but no perturb mechanism; "
                                           r"pass perturb='laplace'\|'rr'\|'mf'\|'gaussian'$"):
        discover(NUM_DF, epsilon=1.0)
    with pytest.raises(PrivacyError, match=r"^epsilon/delta were given but no perturb mechanism"):
        discover(NUM_DF, delta=0.1)
    with pytest.raises(PrivacyError, match=r"^perturb='laplace' needs epsilon$"):
        discover(NUM_DF, perturb="laplace", seed=0)


def test_discover_unknown_options_messages():
    with pytest.raises(ArgumentError, match=r"^unknown perturb_options \['zz'\] for perturb None$"):
        discover(NUM_DF, perturb_options={"zz": 1})
    with pytest.raises(ArgumentError, match=r"^unknown perturb_options \['a', 'zz'\] for perturb 'rr'; "
                                            r"it takes \['domain'\]$"):
        discover(NUM_DF, perturb="rr", epsilon=1.0, perturb_options={"zz": 1, "a": 2})
    with pytest.raises(ArgumentError, match=r"^unknown option 'zz' for method 'crh'; "
                                            r"options of the method: \['loss'\]$"):
        discover(NUM_DF, method="crh", zz=1)
    with pytest.raises(ArgumentError, match=r"^unknown option 'zz' for method 'crh' and perturb "
                                            r"'rr'; options of the method: \['loss'\], of the perturbation: "
                                            r"\['domain'\]$"):
        discover(NUM_DF, method="crh", perturb="rr", epsilon=1.0, options={"zz": 1})


def _compact(ans):
    oc, ou = pd.factorize(ans.obj)
    sc, su = pd.factorize(ans.src)
    return Answers(oc.astype(np.int64), sc.astype(np.int64), ans.val, ans.objects.take(ou), ans.sources.take(su),
                   ans.classes, ans.kind)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_discover_perturbed_matches_manual_pipeline(seed):
    """discover(perturb=...) = encode, perturb with the seeded sampler, drop empty objects/sources, fit, re-add."""
    rows = [(f"o{i}", f"w{j}", ["a", "b", "c"][(i + j) % 3]) for i in range(4) for j in range(3) if (i + j) % 4]
    df = pd.DataFrame(rows, columns=["object", "source", "value"])
    r = discover(df, method="mv", perturb="rr", epsilon=0.2, seed=seed, options={"domain": ["a", "b", "c", "d"]})
    ans = encode_answers(df["object"], df["source"], df["value"], "categorical")
    pans, privacy = ldp_perturb(ans, "rr", 0.2, None, make_sampler(seed), domain=["a", "b", "c", "d"])
    assert r.privacy == privacy
    used_o = set(np.unique(pans.obj))
    m = MajorityVote().fit_answers(_compact(pans) if len(used_o) < 4 or len(set(pans.src)) < 3 else pans)
    assert r.objects["object"].tolist() == ["o0", "o1", "o2", "o3"]
    for i, o in enumerate(["o0", "o1", "o2", "o3"]):
        if i in used_o:
            assert r.objects["truth"][i] == m.truths_[o]
            assert r.objects["confidence"][i] == m.confidences_[o]
        else:
            assert pd.isna(r.objects["truth"][i]) and r.objects["confidence"][i] == 0.0
    assert r.sources["source"].tolist() == list(m.source_weights_.index)
    assert r.sources["weight"].tolist() == m.source_weights_.tolist()


def test_discover_perturbation_drops_an_object_and_a_source():
    # find a seed where RR leaves an object and a source without answers, then check the NULL re-adding
    rows = [("o0", "w0", "a"), ("o1", "w1", "b"), ("o2", "w0", "a"), ("o2", "w1", "a")]
    df = pd.DataFrame(rows, columns=["object", "source", "value"])
    ans = encode_answers(df["object"], df["source"], df["value"], "categorical")
    hit = None
    for seed in range(200):
        pans, _ = ldp_perturb(ans, "rr", 0.01, None, make_sampler(seed))
        if len(np.unique(pans.obj)) < 3 and len(np.unique(pans.src)) == 2 and len(pans.val):
            hit = seed
            break
    assert hit is not None
    r = discover(df, method="mv", perturb="rr", epsilon=0.01, seed=hit)
    pans, _ = ldp_perturb(ans, "rr", 0.01, None, make_sampler(hit))
    m = MajorityVote().fit_answers(_compact(pans))
    kept = set(ans.objects[np.unique(pans.obj)])
    for _, row in r.objects.iterrows():
        if row["object"] in kept:
            assert row["truth"] == m.truths_[row["object"]]
            assert row["confidence"] == m.confidences_[row["object"]]
        else:
            assert pd.isna(row["truth"]) and row["confidence"] == 0.0
    assert r.sources["weight"].tolist() == m.source_weights_.tolist()
    # the model was fitted on the compacted answers, which keep their kind and classes
    fitted = r.model.answers_
    assert fitted.kind == "categorical" and list(fitted.classes) == list(pans.classes)
    assert list(fitted.objects) == list(m.answers_.objects) and list(fitted.sources) == list(m.answers_.sources)


def test_discover_source_lost_only():
    # every object keeps an answer but one source loses all of its answers
    rows = [("o0", "w0", "a"), ("o0", "w1", "b"), ("o1", "w0", "b")]
    df = pd.DataFrame(rows, columns=["object", "source", "value"])
    ans = encode_answers(df["object"], df["source"], df["value"], "categorical")
    hit = None
    for seed in range(300):
        pans, _ = ldp_perturb(ans, "rr", 0.01, None, make_sampler(seed))
        if len(np.unique(pans.obj)) == 2 and len(np.unique(pans.src)) == 1:
            hit = seed
            break
    assert hit is not None
    r = discover(df, method="mv", perturb="rr", epsilon=0.01, seed=hit)
    pans, _ = ldp_perturb(ans, "rr", 0.01, None, make_sampler(hit))
    m = MajorityVote().fit_answers(_compact(pans))
    assert len(r.sources) == 1
    assert r.sources["source"].tolist() == list(m.source_weights_.index)
    assert r.objects["truth"].tolist() == [m.truths_[o] for o in r.objects["object"]]


def test_discover_bounds_list_routed_as_tuple():
    df = pd.DataFrame({"object": [1, 1, 2, 2], "source": ["s", "t", "s", "t"], "value": [1.0, 2.0, 3.0, 2.5]})
    a = discover(df, method="mean", perturb="laplace", epsilon=1.0, seed=4, options={"bounds": [0, 5]})
    b = discover(df, method="mean", perturb="laplace", epsilon=1.0, seed=4, perturb_options={"bounds": (0, 5)})
    pd.testing.assert_frame_equal(a.objects, b.objects)
    assert a.privacy == b.privacy
    ans = encode_answers(df["object"], df["source"], df["value"], "numeric")
    pans, priv = ldp_perturb(ans, "laplace", 1.0, None, make_sampler(4), bounds=(0, 5))
    assert a.privacy == priv
    m = Mean().fit_answers(pans)
    assert a.objects["truth"].tolist() == m.truths_.tolist()
    # options override perturb_options of the same name
    c = discover(df, method="mean", perturb="laplace", epsilon=1.0, seed=4, perturb_options={"bounds": (0, 9)},
                 options={"bounds": [0, 5]})
    pd.testing.assert_frame_equal(a.objects, c.objects)


def test_discover_numeric_perturb_on_numeric_method_with_int_labels():
    # a numeric method given integer values with perturb: encoded as numbers
    df = pd.DataFrame({"object": [1, 1, 2, 2], "source": ["s", "t", "s", "t"], "value": [1, 2, 3, 3]})
    r = discover(df, method="crh", perturb="laplace", epsilon=2.0, seed=1, options={"bounds": [0, 4]})
    ans = encode_answers(df["object"], df["source"], df["value"], "numeric")
    pans, _ = ldp_perturb(ans, "laplace", 2.0, None, make_sampler(1), bounds=(0, 4))
    m = CRH().fit_answers(pans)
    assert r.objects["truth"].tolist() == pytest.approx(m.truths_.tolist(), rel=1e-12)


@pytest.mark.parametrize("cls,ref,kw", [
    (CRH, lambda rows, **k: crh_ref(rows, "squared", **k), {}),
    (CRH, lambda rows, **k: crh_ref(rows, "absolute", **k), {"loss": "absolute"}),
    (SigmaWeighted, ti_ref, {}), (CATD, catd_ref, {}), (GTM, gtm_ref, {}),
])
def test_numeric_tol_zero_runs_to_max_iter_on_a_fixed_point(cls, ref, kw):
    """With tol=0 a run that sits on its fixed point (delta exactly 0) still runs max_iter iterations."""
    t, c, w, it = ref(AGREE, tol=0.0, max_iter=7)
    assert it == 7
    check_numeric(fit(cls, AGREE, tol=0.0, max_iter=7, **kw), t, c, w, 7, rtol=1e-7)
    t, c, w, it = ref(AGREE, tol=1e-6, max_iter=7)
    assert it == 1
    check_numeric(fit(cls, AGREE, max_iter=7, **kw), t, c, w, 1, rtol=1e-7)


def _seg1(vals, ws):
    return segment_median(np.zeros(len(vals), dtype=np.int64), np.array(vals, dtype=float), 1,
                          np.array(ws, dtype=float))[0]


@pytest.mark.parametrize("tot", [4.0, 1024.0])
def test_segment_median_tolerance_is_inclusive_at_its_edges(tot):
    half, eps = tot / 2.0, 1e-12 * max(tot, 1.0)
    # cumulative weight exactly half - eps counts as reaching half: midpoint
    a = half - eps
    assert _seg1([1.0, 3.0], [a, tot - a]) == 2.0
    # cumulative weight exactly half + eps is not yet beyond half: midpoint with the next claim
    a = half + eps
    assert _seg1([1.0, 3.0], [a, tot - a]) == 2.0


def test_segment_median_tolerance_scales_with_the_total():
    # total 1000: tolerance 1e-9; 1e-10 below / above half is "exactly half" -> midpoint
    assert _seg1([1.0, 3.0], [500.0 - 1e-10, 500.0 + 1e-10]) == 2.0
    assert _seg1([1.0, 3.0], [500.0 + 1e-10, 500.0 - 1e-10]) == 2.0
    # total 1: tolerance 1e-12 (not 2e-12); 1.5e-12 below / above half is not half
    assert _seg1([1.0, 3.0], [0.5 - 1.5e-12, 0.5 + 1.5e-12]) == 3.0
    assert _seg1([1.0, 3.0], [0.5 + 1.5e-12, 0.5 - 1.5e-12]) == 1.0
    # ... but 0.5e-12 is
    assert _seg1([1.0, 3.0], [0.5 - 0.5e-12, 0.5 + 0.5e-12]) == 2.0
    assert _seg1([1.0, 3.0], [0.5 + 0.5e-12, 0.5 - 0.5e-12]) == 2.0


def test_segment_median_all_zero_weights_gives_smallest_value():
    obj = np.array([0, 0, 0, 1, 1])
    got = segment_median(obj, np.array([5.0, 2.0, 9.0, 4.0, 6.0]), 2, np.array([0.0, 0.0, 0.0, 1.0, 3.0]))
    assert got.tolist() == [2.0, 6.0]


def test_crh_absolute_zero_weight_source_alone_on_an_object():
    # u has weight 0 (it carries all the loss) and is alone on b: b's weighted median is over zero weights
    rows = [("a", "s", 1.0), ("a", "t", 1.0), ("a", "u", 5.0), ("b", "u", 7.0), ("b", "v", 7.0)]
    rows = [("a", "s", 1.0), ("a", "t", 1.0), ("a", "u", 5.0), ("b", "u", 7.0)]
    t, c, w, it = crh_ref(rows, "absolute")
    m = fit(CRH, rows, loss="absolute")
    check_numeric(m, t, c, w, it)
    assert m.truths_.tolist() == [1.0, 7.0]


# a class answered once, by a worker who answers nothing else and is outvoted by three perfect workers:
# its posterior mass, prior and the worker's accuracy fall below the 1e-10 clips
ONE_OUT = [
    ("a", "g1", "x"), ("a", "g2", "x"), ("a", "g3", "x"), ("a", "z", "z"),
    ("b", "g1", "y"), ("b", "g2", "y"), ("b", "g3", "y"),
    ("c", "g1", "x"), ("c", "g2", "x"), ("c", "g3", "x"),
    ("d", "g1", "y"), ("d", "g2", "y"), ("d", "g3", "y"),
]


@pytest.mark.parametrize("kw", [{}, {"max_iter": 3}, {"tol": 0.0, "max_iter": 40}])
def test_one_coin_clips_on_a_lone_wrong_worker(kw):
    t, c, w, it, post, pri = onecoin_ref(ONE_OUT, **kw)
    m = fit(OneCoinDawidSkene, ONE_OUT, **kw)
    check_cat(m, t, c, w, it, post, rtol=1e-8)
    assert m.priors_.tolist() == pytest.approx(pri, rel=1e-11, abs=0)
    assert m.source_weights_.tolist() == pytest.approx([w[s] for s in ["g1", "g2", "g3", "z"]], rel=1e-8, abs=0)
    assert m.proba_.to_numpy().ravel().tolist() == pytest.approx(
        [p for o in "abcd" for p in post[o]], rel=1e-6, abs=0)


@pytest.mark.parametrize("kw", [{}, {"max_iter": 3}, {"tol": 0.0, "max_iter": 40}])
def test_zencrowd_clips_on_a_lone_wrong_worker(kw):
    t, c, w, it, post = zc_ref(ONE_OUT, **kw)
    m = fit(ZenCrowd, ONE_OUT, **kw)
    check_cat(m, t, c, w, it, post, rtol=1e-8)
    assert m.source_weights_.tolist() == pytest.approx([w[s] for s in ["g1", "g2", "g3", "z"]], rel=1e-6, abs=0)
    assert m.proba_.to_numpy().ravel().tolist() == pytest.approx(
        [p for o in "abcd" for p in post[o]], rel=1e-6, abs=0)


@pytest.mark.parametrize("kw", [{}, {"max_iter": 3}, {"tol": 0.0, "max_iter": 40}])
def test_dawid_skene_clips_on_a_lone_wrong_worker(kw):
    t, c, w, it, post, pri, cm = ds_ref(ONE_OUT, **kw)
    m = fit(DawidSkene, ONE_OUT, **kw)
    check_cat(m, t, c, w, it, post, rtol=1e-8)
    assert m.priors_.tolist() == pytest.approx(pri, rel=1e-11, abs=0)
    assert m.proba_.to_numpy().ravel().tolist() == pytest.approx(
        [p for o in "abcd" for p in post[o]], rel=1e-6, abs=0)


def test_discover_list_options_reach_the_perturbation_as_tuples():
    """A list given for 'bounds' (what SQL passes) becomes a tuple; other options are passed unchanged."""
    df = pd.DataFrame({"object": [1, 1, 2, 2], "source": ["s", "t", "s", "t"], "value": [1.0, 2.0, 3.0, 9.0]})
    with pytest.raises(ArgumentError, match=r"^perturb='laplace': some answers lie outside bounds \(0, 5\)$"):
        discover(df, method="mean", perturb="laplace", epsilon=1.0, seed=0, options={"bounds": [0, 5]})
    with pytest.raises(ArgumentError, match=r"^bounds must be \(low, high\) with low < high, got \(5, 1\)$"):
        discover(df, method="mean", perturb="laplace", epsilon=1.0, seed=0, options={"bounds": [5, 1]})
    with pytest.raises(ArgumentError, match=r"^domain must list at least two finite values, got \[1\.0\]$"):
        discover(df, method="mean", perturb="laplace", epsilon=1.0, seed=0, options={"domain": [1.0]})
    with pytest.raises(ArgumentError, match=r"^domain must list at least two finite values, got \[1\.0\]$"):
        discover(df, method="mean", perturb="laplace", epsilon=1.0, seed=0, perturb_options={"domain": [1.0]})
    # a scalar option (MF's d) is passed as is
    r = discover(df, method="mean", perturb="mf", epsilon=1.0, seed=0, options={"d": 3, "bounds": [0, 10]})
    assert r.privacy["mechanism"] and r.method == "mean"


def test_discover_default_max_iter_is_100():
    r = discover(pd.DataFrame(AGREE, columns=["object", "source", "value"]), method="crh", tol=0.0)
    assert r.n_iter == 100


PERFECT = [(o, w, y) for o, y in zip("abcde", "xyxyy") for w in ("g1", "g2", "g3")]


@pytest.mark.parametrize("cls,ref", [(DawidSkene, ds_ref), (OneCoinDawidSkene, onecoin_ref), (ZenCrowd, zc_ref),
                                     (GLAD, glad_ref)])
def test_em_tol_zero_runs_to_max_iter(cls, ref):
    out = ref(PERFECT, tol=0.0, max_iter=12)
    assert out[3] == 12
    m = fit(cls, PERFECT, tol=0.0, max_iter=12)
    check_cat(m, *out[:5], rtol=1e-6)


def test_discover_errors_name_the_resolved_method():
    empty = pd.DataFrame({"object": [], "source": [], "value": []})
    with pytest.raises(ArgumentError, match=r"^crh: the input has no answers$"):
        discover(empty, method="crh")
    with pytest.raises(ArgumentError, match=r"^ds: 1 answers have a NULL/NaN value"):
        discover(pd.DataFrame({"object": ["a", "a"], "source": ["s", "t"], "value": ["x", None]}))
    with pytest.raises(ArgumentError, match=r"^crh: 1 answers have a NULL/NaN value"):
        discover(pd.DataFrame({"object": ["a", "a"], "source": ["s", "t"], "value": [1.0, None]}), method="crh_numeric")


def test_glad_learnt_priors_are_clipped_at_1e_10():
    """A class with almost no posterior mass keeps a learnt prior of 1e-10 (visible in its tiny posteriors)."""
    kw = {"learn_priors": True, "alpha_prior": 10.0, "max_iter": 3}
    t, c, w, it, post, betas = glad_ref(ONE_OUT, **kw)
    m = fit(GLAD, ONE_OUT, **kw)
    check_cat(m, t, c, w, it, post, rtol=1e-6)
    assert m.proba_.to_numpy().ravel().tolist() == pytest.approx(
        [p for o in "abcd" for p in post[o]], rel=1e-5, abs=0)


# labels on which CRH's 0-1 loss changes the truth in its first two iterations (converges at the third)
LAB_MOVE = [("o0", "w0", "x"), ("o0", "w1", "z"), ("o0", "w2", "y"), ("o1", "w0", "z"), ("o1", "w3", "x"),
            ("o2", "w0", "y"), ("o2", "w2", "z"), ("o2", "w3", "z"), ("o3", "w0", "x"), ("o3", "w1", "y")]


@pytest.mark.parametrize("max_iter", [1, 2, 3, 100])
def test_crh_categorical_stops_at_max_iter_while_changing(max_iter):
    t, c, w, it, post = crh01_ref(LAB_MOVE, max_iter)
    assert it == min(max_iter, 3)
    check_cat(fit(CRHCategorical, LAB_MOVE, max_iter=max_iter), t, c, w, it, post)


def test_weighted_mean_plain_fallback_over_several_claims():
    ans = encode_answers(["p", "p", "q", "q"], ["s1", "s2", "s1", "s3"], [1.0, 4.0, 2.0, 6.0], "numeric")
    # p only has zero-weight sources: plain mean (1 + 4) / 2; q: weighted (0 * 2 + 3 * 6) / 3
    assert weighted_mean(ans, np.array([0.0, 0.0, 3.0])).tolist() == [2.5, 6.0]


def test_log_softmax_rows_normalizes_each_row_by_its_own_max():
    from crowddb.truth.dawid_skene import _log_softmax_rows

    logp = np.array([[0.0, -1.0], [-1000.0, -1001.0], [-5.0, -5.0]])
    post, lognorm = _log_softmax_rows(logp)
    p = 1.0 / (1.0 + math.exp(-1.0))
    assert post.tolist() == [pytest.approx([p, 1 - p], rel=1e-12), pytest.approx([p, 1 - p], rel=1e-12), [0.5, 0.5]]
    z = math.log(1.0 + math.exp(-1.0))
    assert lognorm.tolist() == pytest.approx([z, -1000.0 + z, -5.0 + math.log(2.0)], rel=1e-12)


def test_majority_vote_single_answer_source_accuracy():
    t, c, w, it, post = mv_ref(ONE_OUT)
    assert w["z"] == 0.0 and w["g1"] == 1.0
    check_cat(fit(MajorityVote, ONE_OUT), t, c, w, it, post)
    rows = [("a", "s", "x"), ("a", "t", "x"), ("b", "u", "y"), ("b", "s", "y")]
    m = fit(MajorityVote, rows)
    assert m.source_weights_.tolist() == [1.0, 1.0, 1.0]


def test_glad_default_m_step_iter_is_25():
    # with b_prior=4 the first M-step needs more than 25 L-BFGS iterations, so the cap shows in the result
    t, c, w, it, post, betas = glad_ref(LAB_B, b_prior=4.0, max_iter=2, m_step_iter=25)
    m = fit(GLAD, LAB_B, b_prior=4.0, max_iter=2)
    check_cat(m, t, c, w, it, post, rtol=1e-6)
    assert m.betas_.tolist() == pytest.approx([betas[o] for o in m.truths_.index], rel=1e-6)



def test_crh_categorical_object_of_zero_weight_sources_takes_its_plain_vote():
    """Source u carries all the 0-1 loss, so its CRH weight is log(1) = 0; object b, answered only by u, takes u's
    answer (its plain vote), not class 0 ('x') from an all-zero weighted vote."""
    from crowddb.truth.crh import CRHCategorical

    m = CRHCategorical().fit(["a", "a", "a", "b"], ["s", "t", "u", "u"], ["x", "x", "y", "y"])
    assert m.truths_.to_dict() == {"a": "x", "b": "y"}
    assert m.confidences_.to_dict() == {"a": 1.0, "b": 1.0}
