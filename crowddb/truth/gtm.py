"""GTM: Gaussian truth model (Zhao & Han, QDB 2012), EM on per-object standardized claims."""

from __future__ import annotations

import numpy as np

from crowddb.errors import ArgumentError
from crowddb.truth.base import Answers, FitResult, NumericMethod, numeric_confidence, register, segment_sum
from crowddb.truth.crh import object_std
from crowddb.truth.voting import segment_median


@register
class GTM(NumericMethod):
    """GTM: truths ~ N(mu0, sigma0^2), source variances ~ InvGamma(alpha, beta), claims ~ N(truth, sigma_s^2)."""

    name = "gtm"
    aliases = ("gaussian_truth_model",)

    def __init__(self, alpha: float = 10.0, beta: float = 10.0, mu0: float = 0.0, sigma0: float = 1.0, **kw) -> None:
        super().__init__(**kw)
        if alpha <= 0 or beta <= 0 or sigma0 <= 0:
            raise ArgumentError("GTM alpha, beta and sigma0 must be positive")
        self.alpha, self.beta, self.mu0, self.sigma0 = float(alpha), float(beta), float(mu0), float(sigma0)

    def _fit(self, ans: Answers) -> FitResult:
        n = ans.n_objects
        center = segment_median(ans.obj, ans.val, n)
        std = object_std(ans)
        std = np.where(std > 0, std, 1.0)
        z = (ans.val - center[ans.obj]) / std[ans.obj]  # claims standardized per object, as GTM does
        n_src = segment_sum(ans.src, np.ones(len(z)), ans.n_sources)
        var = np.ones(ans.n_sources)
        mu = np.zeros(n)
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):
            prec = 1.0 / var
            # GTM E-step: mu_e = (mu0/sigma0^2 + sum_s x_se/sigma_s^2) / (1/sigma0^2 + sum_s 1/sigma_s^2)
            num = self.mu0 / self.sigma0**2 + segment_sum(ans.obj, z * prec[ans.src], n)
            den = 1.0 / self.sigma0**2 + segment_sum(ans.obj, prec[ans.src], n)
            new = num / den
            # GTM M-step: sigma_s^2 = (2 beta + sum_e (x_se - mu_e)^2) / (2 (alpha + 1) + n_s)
            var = (2 * self.beta + segment_sum(ans.src, (z - new[ans.obj]) ** 2, ans.n_sources)) / (
                2 * (self.alpha + 1) + n_src
            )
            delta = float(np.max(np.abs(new - mu)))
            mu = new
            if delta < self.tol:
                break
        truth = center + mu * std
        w = 1.0 / var
        return truth, numeric_confidence(ans, truth, w), w, n_iter
