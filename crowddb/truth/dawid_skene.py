"""Dawid-Skene EM with full confusion matrices, and its one-coin variant (Dawid & Skene, 1979)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from crowddb.truth.base import (
    Answers,
    CategoricalMethod,
    FitResult,
    argmax_rows,
    class_votes,
    normalize_rows,
    register,
    segment_sum,
)

_EPS = 1e-10


def _log_softmax_rows(logp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row-normalize log scores; return posteriors and the log normalizers."""
    m = logp.max(axis=1, keepdims=True)
    e = np.exp(logp - m)
    s = e.sum(axis=1, keepdims=True)
    return e / s, (m + np.log(s)).ravel()


@register
class DawidSkene(CategoricalMethod):
    """Dawid-Skene: per-source K×K confusion matrices and class priors by EM, initialized from majority vote."""

    name = "ds"
    aliases = ("dawid_skene", "dawid-skene", "dawidskene")

    def __init__(self, smoothing: float = 0.0, diag_prior: float = 0.0, **kw) -> None:
        super().__init__(**kw)
        self.smoothing, self.diag_prior = float(smoothing), float(diag_prior)

    @staticmethod
    def _incidence(ans: Answers) -> sp.csr_matrix:
        """Sparse 0/1 (object x (source, label)) incidence: each EM step is one product with it or its transpose."""
        k = ans.n_classes
        # built as CSR directly: the COO route sorts the column indices of every row, which costs more than a few
        # EM iterations; the products read unsorted rows the same way (and would sum repeated entries as COO does)
        obj = ans.obj
        order = None if np.all(obj[1:] >= obj[:-1]) else np.argsort(obj, kind="stable")
        cols = ans.src * k + ans.val
        indptr = np.zeros(ans.n_objects + 1, np.int64)
        np.cumsum(np.bincount(obj, minlength=ans.n_objects), out=indptr[1:])
        return sp.csr_matrix((np.ones(len(cols)), cols if order is None else cols[order], indptr),
                             shape=(ans.n_objects, ans.n_sources * k))

    def _m_step(self, ans: Answers, post: np.ndarray, by_pair: sp.csc_matrix) -> tuple[np.ndarray, np.ndarray]:
        """Priors and confusion matrices from the (classes x objects) posteriors ``post``; the matrices are laid out
        (source, label l, true class k), the layout the E-step reads, so no transpose is copied per iteration."""
        k, w = ans.n_classes, ans.n_sources
        priors = np.clip(post.mean(axis=1), _EPS, None)  # rows of the (K, n) layout: contiguous reductions
        # DS Eq. (2.3): pi[w, true k, label l] ∝ sum over answers of w with label l of T[i, k]; the CSC transpose
        # of the incidence walks the objects in order and scatters into the small (source, label) table, about
        # twice as fast as the CSR (source, label) x object product that gathers posterior rows at random
        cm = np.asarray(by_pair @ post.T).reshape(w, k, k)
        cm += self.smoothing + self.diag_prior * np.eye(k)  # Dirichlet pseudo-counts (MAP estimate), symmetric
        np.clip(cm, _EPS, None, out=cm)
        cm /= cm.sum(axis=1, keepdims=True)  # normalize over the label l (axis 1 in this layout)
        return priors / priors.sum(), cm

    def _e_step(self, ans: Answers, priors: np.ndarray, cm: np.ndarray, by_obj: sp.csr_matrix
                ) -> tuple[np.ndarray, float]:
        """Posteriors as a (classes x objects) array and the marginal log-likelihood."""
        w, k = cm.shape[0], ans.n_classes
        # DS Eq. (2.5): log T[i, k] = log p_k + sum over answers (i, w, l) of log pi[w, k, l]; rows of the
        # (source, label) x true-class table are summed per object through the incidence (no per-answer gather)
        logp = np.ascontiguousarray(np.asarray(by_obj @ np.log(cm).reshape(w * k, k)).T)
        logp += np.log(priors)[:, None]
        # softmax over the K classes in the (K, n) layout: each reduction over K rows of n contiguous values is
        # vectorized, where the (n, K) layout reduces along a short strided axis (several times slower)
        m = logp.max(axis=0)
        logp -= m
        post = np.exp(logp, out=logp)
        s = post.sum(axis=0)
        post /= s
        return post, float((m + np.log(s)).sum())

    def _fit(self, ans: Answers) -> FitResult:
        by_obj = self._incidence(ans)
        by_pair = by_obj.T  # CSC view of the transpose, no copy
        k, n = ans.n_classes, ans.n_objects
        # majority-vote start, counted straight into the (K, n) layout (normalize_rows(class_votes(ans)).T, without
        # the strided (n, K) reductions and the transpose copy); an object without answers starts uniform
        votes = np.bincount(ans.val * n + ans.obj, minlength=k * n).reshape(k, n).astype(np.float64)
        s = votes.sum(axis=0)
        post = np.divide(votes, s, out=np.full((k, n), 1.0 / k), where=s > 0)
        priors, cm = self._m_step(ans, post, by_pair)
        ll_old = -np.inf
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):
            post, ll = self._e_step(ans, priors, cm, by_obj)  # ll: marginal log-likelihood, never decreases
            priors, cm = self._m_step(ans, post, by_pair)
            if (ll - ll_old) / len(ans.val) < self.tol:
                break
            ll_old = ll
        cm = np.ascontiguousarray(cm.transpose(0, 2, 1))  # (source, true k, label l), as documented
        post = np.ascontiguousarray(post.T)
        self.priors_, self.confusion_ = priors, cm
        self.posteriors_ = post
        truth = argmax_rows(post)  # the tie rule: posteriors tied up to rounding give the lowest code
        # source weight: expected accuracy sum_k p_k * pi[w, k, k]
        weights = (np.diagonal(cm, axis1=1, axis2=2) * priors).sum(axis=1)
        return truth, post[np.arange(ans.n_objects), truth], weights, n_iter


@register
class OneCoinDawidSkene(CategoricalMethod):
    """One-coin Dawid-Skene: one accuracy per source, errors spread evenly over the other K-1 classes."""

    name = "one_coin"
    aliases = ("one_coin_ds", "onecoin", "one-coin", "onecoindawidskene")

    def _fit(self, ans: Answers) -> FitResult:
        k, n = ans.n_classes, ans.n_objects
        post = normalize_rows(class_votes(ans))
        n_src = segment_sum(ans.src, np.ones(len(ans.val)), ans.n_sources)
        ll_old = -np.inf
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):
            priors = np.clip(post.mean(axis=0), _EPS, None)
            priors /= priors.sum()
            # M-step: p_w = mean over w's answers of T[i, l]
            acc = segment_sum(ans.src, post[ans.obj, ans.val], ans.n_sources) / n_src
            acc = np.clip(acc, _EPS, 1 - _EPS)
            log_right, log_wrong = np.log(acc), np.log((1 - acc) / max(k - 1, 1))
            # E-step: log T[i, k] = log p_k + sum_w [l == k] log p_w + [l != k] log((1 - p_w)/(K - 1))
            base = segment_sum(ans.obj, log_wrong[ans.src], n)
            bonus = class_votes(ans, log_right[ans.src] - log_wrong[ans.src])
            logp = base[:, None] + bonus + np.log(priors)
            post, lognorm = _log_softmax_rows(logp)
            ll = float(lognorm.sum())
            if abs(ll - ll_old) / len(ans.val) < self.tol:
                break
            ll_old = ll
        self.posteriors_, self.priors_ = post, priors
        truth = argmax_rows(post)  # the tie rule: posteriors tied up to rounding give the lowest code
        return truth, post[np.arange(n), truth], acc, n_iter
