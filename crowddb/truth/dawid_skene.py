"""Dawid-Skene EM with full confusion matrices, and its one-coin variant (Dawid & Skene, 1979)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from crowddb.truth.base import Answers, CategoricalMethod, FitResult, class_votes, normalize_rows, register, segment_sum

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
    def _incidence(ans: Answers) -> tuple[sp.csr_matrix, sp.csr_matrix]:
        """Sparse 0/1 incidence of (source, label) pairs and objects, both ways: each EM step is one product."""
        k = ans.n_classes
        by_pair = sp.csr_matrix((np.ones(len(ans.val)), (ans.src * k + ans.val, ans.obj)),
                                shape=(ans.n_sources * k, ans.n_objects))
        return by_pair, by_pair.T.tocsr()

    def _m_step(self, ans: Answers, post: np.ndarray, by_pair: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
        k, w = ans.n_classes, ans.n_sources
        priors = np.clip(post.mean(axis=0), _EPS, None)
        # DS Eq. (2.3): pi[w, true k, label l] ∝ sum over answers of w with label l of T[i, k]
        cm = np.ascontiguousarray(np.asarray(by_pair @ post).reshape(w, k, k).transpose(0, 2, 1))
        cm += self.smoothing + self.diag_prior * np.eye(k)  # Dirichlet pseudo-counts (MAP estimate)
        cm = np.clip(cm, _EPS, None)
        cm /= cm.sum(axis=2, keepdims=True)
        return priors / priors.sum(), cm

    def _e_step(self, ans: Answers, priors: np.ndarray, cm: np.ndarray, by_obj: sp.csr_matrix
                ) -> tuple[np.ndarray, float]:
        w, k = cm.shape[0], ans.n_classes
        # DS Eq. (2.5): log T[i, k] = log p_k + sum over answers (i, w, l) of log pi[w, k, l]; rows of the
        # (source, label) x true-class table are summed per object through the incidence (no per-answer gather)
        logp = np.asarray(by_obj @ np.log(cm).transpose(0, 2, 1).reshape(w * k, k))
        logp += np.log(priors)
        post, lognorm = _log_softmax_rows(logp)
        return post, float(lognorm.sum())

    def _fit(self, ans: Answers) -> FitResult:
        by_pair, by_obj = self._incidence(ans)
        post = normalize_rows(class_votes(ans))
        priors, cm = self._m_step(ans, post, by_pair)
        ll_old = -np.inf
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):
            post, ll = self._e_step(ans, priors, cm, by_obj)  # ll: marginal log-likelihood, never decreases
            priors, cm = self._m_step(ans, post, by_pair)
            if (ll - ll_old) / len(ans.val) < self.tol:
                break
            ll_old = ll
        self.priors_, self.confusion_ = priors, cm
        self.posteriors_ = post
        truth = post.argmax(axis=1)
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
        truth = post.argmax(axis=1)
        return truth, post[np.arange(n), truth], acc, n_iter
