"""GLAD: generative model of labels, abilities and difficulties (Whitehill et al., NIPS 2009)."""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, log_expit

from crowddb.truth.base import Answers, CategoricalMethod, FitResult, argmax_rows, class_votes, register, segment_sum
from crowddb.truth.dawid_skene import _log_softmax_rows


@register
class GLAD(CategoricalMethod):
    """GLAD: P(answer correct) = sigmoid(alpha_source * beta_object), beta = exp(b) > 0; EM with L-BFGS M-steps."""

    name = "glad"
    aliases = ()

    def __init__(self, alpha_prior: float = 1.0, b_prior: float = 1.0, m_step_iter: int = 25,
                 learn_priors: bool = False, **kw) -> None:
        super().__init__(**kw)
        self.alpha_prior, self.b_prior, self.m_step_iter = float(alpha_prior), float(b_prior), int(m_step_iter)
        self.learn_priors = learn_priors

    def _e_step(self, ans: Answers, alpha: np.ndarray, b: np.ndarray, priors: np.ndarray):
        k, n = ans.n_classes, ans.n_objects
        x = alpha[ans.src] * np.exp(b[ans.obj])
        lr, lw = log_expit(x), log_expit(-x) - np.log(max(k - 1, 1))
        # GLAD Eq. (3): log P(z_j = k | L) = log p_k + sum_i [l_ij = k] log s(a_i b_j) + [l_ij != k] log((1-s)/(K-1))
        logp = segment_sum(ans.obj, lw, n)[:, None] + class_votes(ans, lr - lw) + np.log(priors)
        return _log_softmax_rows(logp)

    def _m_step(self, ans: Answers, post: np.ndarray, alpha: np.ndarray, b: np.ndarray):
        k, ns = ans.n_classes, ans.n_sources
        p = post[ans.obj, ans.val]  # posterior that each answer is correct
        c = np.log(max(k - 1, 1))

        def negq(theta: np.ndarray):
            a, bb = theta[:ns], theta[ns:]
            beta = np.exp(bb)
            x = a[ans.src] * beta[ans.obj]
            # GLAD Eq. (4): Q = sum p log s(x) + (1-p) log((1-s(x))/(K-1)) + log priors
            q = np.sum(p * log_expit(x) + (1 - p) * (log_expit(-x) - c))
            q -= 0.5 * np.sum((a - self.alpha_prior) ** 2) + 0.5 * np.sum((bb - self.b_prior) ** 2)
            g = p - expit(x)  # dQ/dx
            ga = segment_sum(ans.src, g * beta[ans.obj], ns) - (a - self.alpha_prior)
            gb = segment_sum(ans.obj, g * x, len(bb)) - (bb - self.b_prior)
            return -q, -np.concatenate([ga, gb])

        res = minimize(negq, np.concatenate([alpha, b]), jac=True, method="L-BFGS-B",
                       options={"maxiter": self.m_step_iter})
        return res.x[:ns], res.x[ns:]

    def _fit(self, ans: Answers) -> FitResult:
        alpha = np.full(ans.n_sources, self.alpha_prior)
        b = np.full(ans.n_objects, self.b_prior)
        priors = np.full(ans.n_classes, 1.0 / ans.n_classes)  # uniform class priors, learnt only if learn_priors
        post, lognorm = self._e_step(ans, alpha, b, priors)
        ll_old = float(lognorm.sum())
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):
            if self.learn_priors:
                priors = np.clip(post.mean(axis=0), 1e-10, None)
                priors /= priors.sum()
            alpha, b = self._m_step(ans, post, alpha, b)
            post, lognorm = self._e_step(ans, alpha, b, priors)
            ll = float(lognorm.sum())
            if abs(ll - ll_old) / len(ans.val) < self.tol:
                break
            ll_old = ll
        self.posteriors_, self.alphas_, self.betas_ = post, alpha, np.exp(b)
        truth = argmax_rows(post)  # the tie rule: posteriors tied up to rounding give the lowest code
        return truth, post[np.arange(ans.n_objects), truth], alpha, n_iter
