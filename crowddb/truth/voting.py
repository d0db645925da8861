"""Non-iterative baselines: majority vote (categorical), mean and median (numeric)."""

from __future__ import annotations

import numpy as np

from crowddb._random import make_rng
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


def source_accuracy(ans: Answers, truth: np.ndarray) -> np.ndarray:
    """Share of each source's answers that agree with ``truth`` (class codes)."""
    hit = (ans.val == truth[ans.obj]).astype(np.float64)
    n = segment_sum(ans.src, np.ones(len(hit)), ans.n_sources)
    return segment_sum(ans.src, hit, ans.n_sources) / np.maximum(n, 1)


@register
class MajorityVote(CategoricalMethod):
    """Majority vote: the most frequent label per object; ties go to the smallest label unless ``tie='random'``."""

    name = "mv"
    aliases = ("majority_vote", "majority", "vote")

    def __init__(self, tie: str = "first", **kw) -> None:
        super().__init__(**kw)
        if tie not in ("first", "random"):
            from crowddb.errors import ArgumentError

            raise ArgumentError(f"tie must be 'first' or 'random', got {tie!r}")
        self.tie = tie

    def _fit(self, ans: Answers) -> FitResult:
        votes = class_votes(ans)
        self.posteriors_ = normalize_rows(votes)
        rng = make_rng(self.seed) if self.tie == "random" else None
        truth = argmax_rows(votes, rng)
        conf = self.posteriors_[np.arange(ans.n_objects), truth]
        return truth, conf, source_accuracy(ans, truth), 1


@register
class Mean(NumericMethod):
    """Mean of the claims per object."""

    name = "mean"
    aliases = ("avg", "average")

    def _fit(self, ans: Answers) -> FitResult:
        n = segment_sum(ans.obj, np.ones(len(ans.val)), ans.n_objects)
        truth = segment_sum(ans.obj, ans.val, ans.n_objects) / n
        return truth, numeric_confidence(ans, truth), np.ones(ans.n_sources), 1


def segment_median(obj: np.ndarray, val: np.ndarray, n: int, weights: np.ndarray | None = None) -> np.ndarray:
    """(Weighted) median per segment via one lexsort; the lower median on even counts is averaged with the upper."""
    order = np.lexsort((val, obj))
    o, v = obj[order], val[order]
    w = np.ones(len(v)) if weights is None else weights[order]
    cw = np.cumsum(w)
    tot = segment_sum(o, w, n)
    start = np.concatenate(([0.0], np.cumsum(tot)[:-1]))
    rel = cw - start[o]  # cumulative weight inside the segment
    half = tot[o] / 2.0
    lo_mask = rel >= half - 1e-12 * np.maximum(tot[o], 1.0)
    hi_mask = rel > half + 1e-12 * np.maximum(tot[o], 1.0)
    idx = np.arange(len(v))
    big = len(v)
    lo = np.full(n, big)
    np.minimum.at(lo, o[lo_mask], idx[lo_mask])
    hi = np.full(n, big)
    np.minimum.at(hi, o[hi_mask], idx[hi_mask])
    hi = np.where(hi == big, lo, hi)
    # exactly half the weight at or below lo: the median is the midpoint of lo and the next claim
    exact = np.isclose(rel[lo], half[lo])
    return np.where(exact, (v[lo] + v[hi]) / 2.0, v[lo])


@register
class Median(NumericMethod):
    """Median of the claims per object."""

    name = "median"
    aliases = ("med",)

    def _fit(self, ans: Answers) -> FitResult:
        truth = segment_median(ans.obj, ans.val, ans.n_objects)
        return truth, numeric_confidence(ans, truth), np.ones(ans.n_sources), 1
