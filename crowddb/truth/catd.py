"""CATD: confidence-aware truth discovery for long-tail sources (Li et al., VLDB 2014)."""

from __future__ import annotations

import numpy as np
from scipy.stats import chi2

from crowddb.errors import ArgumentError
from crowddb.truth.base import Answers, FitResult, NumericMethod, numeric_confidence, register, segment_sum
from crowddb.truth.crh import weighted_mean
from crowddb.truth.voting import segment_median


@register
class CATD(NumericMethod):
    """CATD: w_s = chi2(alpha/2, n_s) / sum of squared residuals, so sources with few claims are not over-trusted."""

    name = "catd"
    aliases = ("confidence_aware",)

    def __init__(self, alpha: float = 0.05, **kw) -> None:
        super().__init__(**kw)
        if not 0 < alpha < 1:
            raise ArgumentError(f"CATD alpha must be in (0, 1), got {alpha!r}")
        self.alpha = float(alpha)

    def _fit(self, ans: Answers) -> FitResult:
        n_src = segment_sum(ans.src, np.ones(len(ans.val)), ans.n_sources)
        q = chi2.ppf(self.alpha / 2.0, n_src)  # CATD Eq. (8): lower alpha/2 quantile with |claims| degrees of freedom
        scale = max(float(np.std(ans.val)), 1e-12)
        truth = segment_median(ans.obj, ans.val, ans.n_objects)
        w = np.ones(ans.n_sources)
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):
            sse = segment_sum(ans.src, (ans.val - truth[ans.obj]) ** 2, ans.n_sources)
            w = q / np.maximum(sse, (1e-6 * scale) ** 2)  # CATD Eq. (9): w_s ∝ chi2 quantile / residual sum
            new = weighted_mean(ans, w)  # CATD Eq. (3): weighted mean truth
            delta = float(np.max(np.abs(new - truth))) / scale
            truth = new
            if delta < self.tol:
                break
        return truth, numeric_confidence(ans, truth, w), w, n_iter
