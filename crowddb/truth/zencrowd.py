"""ZenCrowd (Demartini et al., WWW 2012): EM over one reliability per source with uniform class priors."""

from __future__ import annotations

import numpy as np

from crowddb.errors import ArgumentError
from crowddb.truth.base import Answers, CategoricalMethod, FitResult, argmax_rows, class_votes, register, segment_sum
from crowddb.truth.dawid_skene import _log_softmax_rows


@register
class ZenCrowd(CategoricalMethod):
    """ZenCrowd: P(truth = k) ∝ prod_w r_w^[l=k] ((1-r_w)/(K-1))^[l!=k], r_w = expected share of w's correct answers."""

    name = "zencrowd"
    aliases = ("zc", "zen_crowd")

    def __init__(self, init_reliability: float = 0.7, **kw) -> None:
        super().__init__(**kw)
        if not 0 < init_reliability < 1:
            raise ArgumentError(f"init_reliability must be in (0, 1), got {init_reliability!r}")
        self.init_reliability = float(init_reliability)

    def _fit(self, ans: Answers) -> FitResult:
        k, n = ans.n_classes, ans.n_objects
        r = np.full(ans.n_sources, self.init_reliability)
        n_src = segment_sum(ans.src, np.ones(len(ans.val)), ans.n_sources)
        ll_old = -np.inf
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):
            rc = np.clip(r, 1e-10, 1 - 1e-10)
            lr, lw = np.log(rc), np.log((1 - rc) / max(k - 1, 1))
            # ZenCrowd E-step (factor graph of Demartini et al., uniform prior over labels)
            logp = segment_sum(ans.obj, lw[ans.src], n)[:, None] + class_votes(ans, (lr - lw)[ans.src])
            post, lognorm = _log_softmax_rows(logp)
            # ZenCrowd M-step: reliability = expected fraction of the source's answers that are correct
            r = segment_sum(ans.src, post[ans.obj, ans.val], ans.n_sources) / n_src
            ll = float(lognorm.sum())
            if abs(ll - ll_old) / len(ans.val) < self.tol:
                break
            ll_old = ll
        self.posteriors_ = post
        truth = argmax_rows(post)  # the tie rule: posteriors tied up to rounding give the lowest code
        return truth, post[np.arange(n), truth], r, n_iter
