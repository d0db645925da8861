"""CRH (Li et al., SIGMOD 2014) and the reliability-weighted mean of Sun et al. (LDP truth inference, Algorithm 1)."""

from __future__ import annotations

import numpy as np

from crowddb.errors import ArgumentError
from crowddb.truth.base import (
    Answers,
    CategoricalMethod,
    FitResult,
    NumericMethod,
    argmax_rows,
    class_votes,
    normalize_rows,
    numeric_confidence,
    register,
    segment_sum,
)
from crowddb.truth.voting import segment_median

_TINY = 1e-300


def crh_weights(loss: np.ndarray) -> np.ndarray:
    """CRH Eq. (5): w_k = -log(loss_k / sum_k' loss_k'), losses floored so a perfect source gets a finite weight."""
    total = float(loss.sum())
    if total <= 0:
        return np.ones_like(loss)
    floor = total * 1e-12
    return np.log(total / np.maximum(loss, floor))


def weighted_mean(ans: Answers, w_source: np.ndarray) -> np.ndarray:
    """Per-object mean of claims weighted by their source's weight (Eq. 1 of the LDP paper)."""
    w = w_source[ans.src]
    num = segment_sum(ans.obj, w * ans.val, ans.n_objects)
    den = segment_sum(ans.obj, w, ans.n_objects)
    plain = segment_sum(ans.obj, ans.val, ans.n_objects) / segment_sum(ans.obj, np.ones(len(w)), ans.n_objects)
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), plain)


def object_std(ans: Answers) -> np.ndarray:
    """Standard deviation of the claims on each object (0 where one claim)."""
    n = segment_sum(ans.obj, np.ones(len(ans.val)), ans.n_objects)
    m = segment_sum(ans.obj, ans.val, ans.n_objects) / n
    var = segment_sum(ans.obj, (ans.val - m[ans.obj]) ** 2, ans.n_objects) / n
    return np.sqrt(var)


@register
class CRH(NumericMethod):
    """CRH on numbers: source weights from normalized squared (weighted mean) or absolute (weighted median) loss."""

    name = "crh"
    aliases = ("crh_numeric",)

    def __init__(self, loss: str = "squared", **kw) -> None:
        super().__init__(**kw)
        if loss not in ("squared", "absolute"):
            raise ArgumentError(f"CRH loss must be 'squared' or 'absolute', got {loss!r}")
        self.loss = loss

    def _fit(self, ans: Answers) -> FitResult:
        std = object_std(ans)
        std = np.where(std > 0, std, 1.0)
        truth = segment_median(ans.obj, ans.val, ans.n_objects)
        w = np.ones(ans.n_sources)
        scale = max(float(np.std(ans.val)), 1e-12)
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):
            r = ans.val - truth[ans.obj]
            if self.loss == "squared":
                d = r * r / std[ans.obj]  # CRH Eq. (14): normalized squared loss
            else:
                d = np.abs(r) / std[ans.obj]  # CRH Eq. (15): normalized absolute loss
            w = crh_weights(segment_sum(ans.src, d, ans.n_sources))
            if self.loss == "squared":
                new = weighted_mean(ans, w)  # CRH Eq. (16): weighted mean
            else:
                new = segment_median(ans.obj, ans.val, ans.n_objects, w[ans.src])  # CRH Eq. (17): weighted median
            delta = float(np.max(np.abs(new - truth))) / scale
            truth = new
            if delta < self.tol:
                break
        return truth, numeric_confidence(ans, truth, w), w, n_iter


@register
class CRHCategorical(CategoricalMethod):
    """CRH on labels with 0-1 loss: weighted vote, weights from each source's error count (CRH Eq. 5, 12)."""

    name = "crh_categorical"
    aliases = ("crh01", "crh_01", "crh_0_1")

    def _fit(self, ans: Answers) -> FitResult:
        plain = class_votes(ans)
        truth = argmax_rows(plain)
        w = np.ones(ans.n_sources)
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):
            wrong = (ans.val != truth[ans.obj]).astype(np.float64)  # CRH Eq. (12): 0-1 loss
            w = crh_weights(segment_sum(ans.src, wrong, ans.n_sources))
            votes = class_votes(ans, w[ans.src])
            # ours: an object answered only by sources of weight 0 (log(total / loss) = 0 for the source with all the
            # loss) has no weighted vote; it takes its plain vote, as numeric CRH takes the plain mean
            unweighted = votes.sum(axis=1) <= 0
            votes[unweighted] = plain[unweighted]
            # the tie rule: weighted sums tied in exact arithmetic can differ in the last bit by the order of the
            # answers; a plain argmax would let that pick the label, and through the 0-1 loss every later weight
            new = argmax_rows(votes)
            changed = int((new != truth).sum())
            truth = new
            if changed == 0:
                break
        self.posteriors_ = normalize_rows(votes)
        return truth, self.posteriors_[np.arange(ans.n_objects), truth], w, n_iter


@register
class SigmaWeighted(NumericMethod):
    """Truth inference of the LDP paper (Algorithm 1): weighted mean, Eq. (1), with q_i ∝ 1/sigma_i, Eq. (2)."""

    name = "ti"
    aliases = ("sigma_weighted", "algorithm1", "inverse_sigma")

    def _fit(self, ans: Answers) -> FitResult:
        w = np.full(ans.n_sources, 1.0 / ans.n_sources)  # Algorithm 1 line 1: q_i = 1/m
        n_src = segment_sum(ans.src, np.ones(len(ans.val)), ans.n_sources)
        scale = max(float(np.std(ans.val)), 1e-12)
        truth = weighted_mean(ans, w)
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):
            mse = segment_sum(ans.src, (ans.val - truth[ans.obj]) ** 2, ans.n_sources) / n_src
            sigma = np.sqrt(np.maximum(mse, (1e-6 * scale) ** 2))
            w = 1.0 / sigma  # Eq. (2)
            w /= w.sum()
            new = weighted_mean(ans, w)  # Eq. (1)
            delta = float(np.max(np.abs(new - truth))) / scale
            truth = new
            if delta < self.tol:
                break
        return truth, numeric_confidence(ans, truth, w), w, n_iter
