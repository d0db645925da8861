"""Feedback-guided k-anonymity (FKA, §4): crowd answers on synthetic samples steer Mondrian's first cuts.

Departures from the paper, each an option so both versions run (measured by bench/fka_deviations.py, README):
- samples are not published raw when they would single out real people (samples.py; always on);
- ``delta``: 'literal' Eq. 10 (default, the paper) or 'weighted' (ours: each Acc weighted by its row share);
- ``allowable``: 'slabs' (default, ours: both new slabs keep >= ceil(K * sample_ratio) samples; r +0.12..+0.19 on
  Adult) or 'cells' (Definition 3 as printed: every new cell keeps >= K samples);
- ``volume``: 'width' Eq. 12/13 (default, the paper: α/β from range widths) or 'count' (ours: distinct values);
- ``cell_limit``: 400 (default, Table 7's bold value) or any other cell budget (ours was 200);
- ``criterion``: 'counts' Algorithm 1's var(V) of the cells' answer counts (default, the paper) or 'purity' (ours:
  Σ v²/n per cell, the samples' Gini purity; var of counts grows with a cell's squared size, so it prefers cuts that
  slice a thin slab off a large cell whatever the answers; measured by bench/fka_accuracy.py --variants)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from crowddb._random import make_rng
from crowddb.anonymize.encoding import Encoding
from crowddb.anonymize.generalize import Release, code_labels, release_from_groups
from crowddb.anonymize.mondrian import mondrian_groups
from crowddb.anonymize.samples import SampleGuard
from crowddb.anonymize.synth import copula_samples
from crowddb.anonymize.ties import first_best
from crowddb.errors import ArgumentError

Ask = Callable[[np.ndarray, np.ndarray], np.ndarray]
DELTAS = ("literal", "weighted")  # Eq. 10 as printed; ours: Acc weighted by row share
ALLOWABLE = ("slabs", "cells")  # ours (the default, a clear gain): slabs vs ceil(K * sample_ratio); Definition 3
VOLUMES = ("width", "count")  # Eq. 12/13 α/β from range widths as printed; ours: distinct-value counts
CRITERIA = ("counts", "purity")  # Algorithm 1's var(V) of answer counts as printed; ours: per-cell purity Σ v²/n


class CountingAsk:
    """Wraps the crowd callback: protects each box (``guard``), validates each answer vector and counts every tuple
    published."""

    def __init__(self, ask: Ask, guard: SampleGuard | None = None) -> None:
        """Keep the callback; nothing published yet."""
        if not callable(ask):
            raise ArgumentError("method='fka' needs ask=callable(lo, hi) -> one answer per tuple")
        self.ask, self.guard, self.tuples, self.calls = ask, guard, 0, 0

    def __call__(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Publish len(lo) tuples (boxes in the numeric QI coding) and return one integer answer per tuple."""
        if self.guard is not None:
            # not in the paper (§4.1 calls samples dummy records): a box holding 1..k-1 real rows is widened to
            # hold >= k, and the answer on the widened box stands for the sample
            lo, hi, _ = self.guard(lo, hi)
        out = np.asarray(self.ask(lo, hi))
        if out.shape != (len(lo),) or not np.issubdtype(out.dtype, np.integer):
            raise ArgumentError(f"ask must return {len(lo)} integer answers, got shape {out.shape} dtype {out.dtype}")
        self.tuples += len(lo)
        self.calls += 1
        return out.astype(np.int64)


def box_labels(enc: Encoding, lo: np.ndarray, hi: np.ndarray) -> pd.DataFrame:
    """The published text of the boxes ``ask`` gets (in the numeric QI coding): one column per QI, each box shown
    as its range / value-set label (a raw synthetic sample has lo == hi, so it shows its values)."""
    shown = {}
    for j, q in enumerate(enc.qis):
        column = enc.columns[q]
        lo_code = np.searchsorted(column.scale, lo[:, j] - 1e-9, side="left")
        hi_code = np.searchsorted(column.scale, hi[:, j] + 1e-9, side="right") - 1
        labels, inverse, _, _ = code_labels(column, lo_code, np.maximum(hi_code, lo_code))
        shown[q] = np.asarray(labels, dtype=object)[inverse]
    return pd.DataFrame(shown)


def _slabs(cuts: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    """Slab index per dimension of each coded point: number of cuts strictly below it (cut c keeps c on the left)."""
    return np.stack([np.searchsorted(c, x[:, j], side="left") for j, c in enumerate(cuts)], axis=1)


def _cell_ids(slab: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Flat grid cell id of each slab vector."""
    return np.ravel_multi_index(tuple(slab.T), shape)


def _variance_numerator(cell: np.ndarray, ans: np.ndarray, n_cells: int, n_ans: int) -> int:
    """n_ans² times the sum over cells of var(V), V = per-answer sample counts of the cell: an exact integer, so
    cuts are ranked without float rounding (a float sum of the cells' variances ranks real ties by its last bit)."""
    v = np.bincount(cell * n_ans + ans, minlength=n_cells * n_ans).reshape(n_cells, n_ans).astype(np.int64)
    # §4.3: var(V) = Σv²/n - (Σv/n)² = (n Σv² - (Σv)²) / n², n = n_ans
    return int((n_ans * (v * v).sum(axis=1) - v.sum(axis=1) ** 2).sum())


def _variance_sum(cell: np.ndarray, ans: np.ndarray, n_cells: int, n_ans: int) -> float:
    """Sum over cells of var(V), V = per-answer sample counts of the cell (§4.3: skewed cells score high)."""
    return _variance_numerator(cell, ans, n_cells, n_ans) / n_ans**2


def _purity(cell: np.ndarray, ans: np.ndarray, n_cells: int, n_ans: int) -> float:
    """Ours: Σ over cells of Σ_r v_r² / n, V = per-answer sample counts of the cell, n = its samples (N minus the
    cells' summed Gini impurity): largest when each cell holds one answer, indifferent to how cell sizes are split."""
    v = np.bincount(cell * n_ans + ans, minlength=n_cells * n_ans).reshape(n_cells, n_ans).astype(np.int64)
    n = v.sum(axis=1)
    full = n > 0
    return float(((v[full] * v[full]).sum(axis=1) / n[full]).sum())


def feedback_histogram(samples: np.ndarray, truth: np.ndarray, m: np.ndarray, n_ans: int, cell_limit: int,
                       min_samples: int, allowable: str = "slabs", criterion: str = "counts") -> list[np.ndarray]:
    """Algorithm 1 BuildHistogram: round-robin grid cuts at the sample value maximizing the cells' answer variance.

    ``allowable`` (Definition 3): 'cells', every cell the cut creates keeps >= min_samples samples (the paper, with
    min_samples = K); 'slabs', both slabs the cut creates keep >= min_samples (ours). ``criterion``: 'counts', §4.3's
    var(V) summed over cells (the paper); 'purity', Σ v²/n summed over cells (ours, ``_purity``)."""
    d = samples.shape[1]
    cuts = [np.zeros(0, np.int64) for _ in range(d)]
    i, stalled = 0, 0
    while stalled < d:  # existsCut: some dimension still has an allowable cut within the cell limit
        j = i % d
        i += 1
        shape = tuple(len(c) + 1 for c in cuts)
        n_cells = int(np.prod(shape)) // shape[j] * (shape[j] + 1)
        found, score = [], []  # allowable cuts and their exact variance numerators, in increasing cut order
        if n_cells <= cell_limit:
            slab = _slabs(cuts, samples)
            for c in np.setdiff1d(np.unique(samples[:, j]), np.r_[cuts[j], m[j] - 1]):
                new = np.sort(np.r_[cuts[j], c])
                s_new = slab.copy()
                s_new[:, j] = np.searchsorted(new, samples[:, j], side="left")
                # Definition 3 (allowable cut for samples)
                k_slab = np.searchsorted(new, c)
                sh = tuple(len(new) + 1 if q == j else shape[q] for q in range(d))
                ids = _cell_ids(s_new, sh)
                if allowable == "cells":  # the paper: each newly generated cell holds >= K samples
                    per = np.bincount(ids, minlength=n_cells).reshape(sh)
                    if per.take([k_slab, k_slab + 1], axis=j).min() < min_samples:
                        continue
                else:  # ours: both new slabs hold >= ceil(K * sample_ratio) samples
                    sizes = np.bincount(s_new[:, j], minlength=len(new) + 1)
                    if sizes[k_slab] < min_samples or sizes[k_slab + 1] < min_samples:
                        continue
                found.append(c)
                if criterion == "purity":  # ours
                    score.append(_purity(ids, truth, n_cells, n_ans))
                else:
                    score.append(_variance_numerator(ids, truth, n_cells, n_ans))
        if not found:
            stalled += 1
            continue
        stalled = 0
        # the largest summed variance (exact: same n_ans² denominator for every cut), the lowest cut on ties
        cuts[j] = np.sort(np.r_[cuts[j], found[first_best(score)]])
    return cuts


@dataclass
class Grid:
    """Histogram cells as nd-arrays: feedback answer counts, sample truth counts, real tuples, volume, sensitive."""

    feedback: np.ndarray  # (*shape, R) crowd answers on anonymized samples
    truth: np.ndarray  # (*shape, R) crowd answers on raw samples (ground truth)
    tuples: np.ndarray  # (*shape,) real rows per cell
    volume: np.ndarray  # (*shape,) α/β weight per cell: its range width (or, ours, its distinct values)
    sensitive: np.ndarray | None  # (*shape, S) which sensitive values occur among the real rows
    prior: np.ndarray  # (R,) overall feedback distribution, used for cells without samples


def _box(a: np.ndarray, lo, hi) -> np.ndarray:
    """Sub-array of the grid array a for slab ranges lo..hi (inclusive) in every dimension."""
    return a[tuple(slice(x, y + 1) for x, y in zip(lo, hi))]


def _accuracy(g: Grid, lo, hi) -> tuple[float, float]:
    """Eq. 11 (Cov term constant): Acc(S) = sum_r P_S(t -> r) P_S(theta(t) -> r); and the row share of S."""
    d = len(lo)
    axes = tuple(range(d))
    truth = _box(g.truth, lo, hi).sum(axis=axes)
    n_t = truth.sum()
    p_true = truth / n_t if n_t else g.prior
    fb = _box(g.feedback, lo, hi)
    n_fb = fb.sum(axis=-1, keepdims=True)
    p_cell = np.where(n_fb > 0, fb / np.maximum(n_fb, 1), g.prior)
    vol = _box(g.volume, lo, hi)[..., None]
    # Eq. 12/13: P(θ(t) -> r) = Σ_c α_c P_c(r), α_c = the cell's share of the box volume (workers assume
    # values uniform in a published range): of its range widths, or (volume='count', ours) of its distinct values
    p_theta = (p_cell * vol).sum(axis=axes) / vol.sum()
    share = _box(g.tuples, lo, hi).sum() / g.tuples.sum()
    return float(p_true @ p_theta), float(share)


def _allowed(g: Grid, lo, hi, k: int, l: int | None) -> bool:
    """A phase-1 partition must hold >= k real rows (and >= l distinct sensitive values)."""
    if _box(g.tuples, lo, hi).sum() < k:
        return False
    if l is not None:
        return int(_box(g.sensitive, lo, hi).any(axis=tuple(range(len(lo)))).sum()) >= l
    return True


def adaptive_partition(g: Grid, k: int, l: int | None, delta: str = "literal") -> list[tuple[np.ndarray, np.ndarray]]:
    """Algorithm 2 phase 1: cut the worst partition where delta (Eq. 10/14) is largest, until no cut is allowable.

    ``delta``: 'literal', Eq. 10 as printed, Acc(S1) + Acc(S2) - Acc(S); 'weighted' (ours), each Acc weighted by
    its share of the real rows (the joint probability of Eq. 9 over the whole release)."""
    if delta not in DELTAS:
        raise ArgumentError(f"delta must be one of {DELTAS}, got {delta!r}")
    shape = g.tuples.shape
    open_ = [(np.zeros(len(shape), np.int64), np.array(shape) - 1)]
    done = []
    while open_:
        # selectWorstPartition: the lowest Acc, the first open partition on ties (ties.py: float sums of cells and
        # answers round differently for boxes that tie in real arithmetic)
        scores = [_accuracy(g, lo, hi)[0] for lo, hi in open_]
        lo, hi = open_.pop(first_best(scores, maximize=False))
        acc, share = _accuracy(g, lo, hi)
        found, gain = [], []  # allowable cuts and their delta, by dimension then position
        for j in range(len(shape)):
            for s in range(lo[j], hi[j]):
                h1, l2 = hi.copy(), lo.copy()
                h1[j], l2[j] = s, s + 1
                if not (_allowed(g, lo, h1, k, l) and _allowed(g, l2, hi, k, l)):
                    continue
                a1, w1 = _accuracy(g, lo, h1)
                a2, w2 = _accuracy(g, l2, hi)
                # Eq. 10: δ = Acc(S1) + Acc(S2) - Acc(S); Eq. 14 is this with x_r, y_r, z_r the cell feedbacks
                # mixed by α, β
                if delta == "weighted":  # ours: each Acc weighted by its row share
                    d_cut = w1 * a1 + w2 * a2 - share * acc
                else:
                    d_cut = a1 + a2 - acc
                found.append(((lo, h1), (l2, hi)))
                gain.append(d_cut)
        if not found:
            done.append((lo, hi))
        else:  # the largest delta, the first cut (lowest dimension, then lowest position) on ties
            open_.extend(found[first_best(gain)])
    return done


def code_widths(col, volume: str = "width") -> np.ndarray:
    """Per code of one QI, its weight in a cell's volume (α/β of Eq. 12/13). 'count' (ours): 1 per distinct value.
    'width' (the paper, α1 = (a2 - a1) / (a3 - a1)): the stretch of the value scale a code owns, up to the next
    distinct value (the last one owns one unit: the gap of an integer column, the smallest gap otherwise), so a slab
    weighs its range width; categorical and ordinal codes are 1 apart, so there both are the value count."""
    m = col.m
    if volume == "count" or m < 2:
        return np.ones(m)
    gaps = np.diff(col.scale)
    last = 1.0 if col.integer or col.kind != "numeric" else float(gaps[gaps > 0].min())
    return np.r_[gaps, last].astype(float)


def _grid(enc: Encoding, cuts, samples, truth, feedback, n_ans, sens, volume: str = "width") -> Grid:
    """Fill the histogram cells from samples, their two kinds of answers, and the real rows."""
    shape = tuple(len(c) + 1 for c in cuts)
    n_cells = int(np.prod(shape))
    cs = _cell_ids(_slabs(cuts, samples), shape)
    fb = np.bincount(cs * n_ans + feedback, minlength=n_cells * n_ans).reshape(*shape, n_ans)
    tr = np.bincount(cs * n_ans + truth, minlength=n_cells * n_ans).reshape(*shape, n_ans)
    cr = _cell_ids(_slabs(cuts, enc.codes), shape)
    tuples = np.bincount(cr, minlength=n_cells).reshape(shape)
    widths = []
    for c, q in zip(cuts, enc.qis):
        w = np.r_[0.0, np.cumsum(code_widths(enc.columns[q], volume))]  # w[i] = weight of codes < i
        edges = np.r_[-1, c, enc.columns[q].m - 1] + 1
        widths.append(np.diff(w[edges]))
    volume = np.ones(shape)
    for j, w in enumerate(widths):
        volume = volume * w.reshape([-1 if q == j else 1 for q in range(len(shape))])
    sens_grid = None
    if sens is not None:
        n_s = int(sens.max()) + 1
        sens_grid = (np.bincount(cr * n_s + sens, minlength=n_cells * n_s) > 0).reshape(*shape, n_s)
    prior = np.bincount(feedback, minlength=n_ans) / len(feedback)
    return Grid(fb, tr, tuples, volume, sens_grid, prior)


def fka(frame: pd.DataFrame, enc: Encoding, k: int, *, ask: Ask | None = None, sample_ratio: float = 0.10,
        cell_limit: int = 400, min_samples: int | None = None, strict: bool = True,
        sensitive: np.ndarray | None = None, l: int | None = None, seed=None, delta: str = "literal",
        allowable: str = "slabs", volume: str = "width", tag: Callable[[pd.DataFrame], np.ndarray] | None = None,
        criterion: str = "counts") -> Release:
    """FKA end to end: copula samples -> crowd truth -> feedback histogram -> crowd feedback -> adaptive
    partitioning -> Mondrian inside each partition. Every crowd tuple goes through ``ask`` and is counted, after
    SampleGuard widened each box that would single out 1..k-1 real rows (crowddb/anonymize/samples.py).

    ``tag`` (an ablation, the paper's experiments, §5.1: "we tag the ground-truth result for each sample"): the raw
    samples' ground truth comes from ``tag(labels)`` (their QI values as ``box_labels`` shows them; one answer
    code per sample, in ``ask``'s coding) instead of the crowd, and they are not published."""
    crowd = CountingAsk(ask, SampleGuard(enc, k))
    if not 0 < sample_ratio <= 1:
        raise ArgumentError(f"sample_ratio must be in (0, 1], got {sample_ratio}")
    if int(cell_limit) < 1:
        raise ArgumentError(f"cell_limit must be >= 1, got {cell_limit}")
    for name, value, allowed in (("delta", delta, DELTAS), ("allowable", allowable, ALLOWABLE),
                                 ("volume", volume, VOLUMES), ("criterion", criterion, CRITERIA)):
        if value not in allowed:
            raise ArgumentError(f"{name} must be one of {allowed}, got {value!r}")
    rng = make_rng(seed)
    n, d = enc.codes.shape
    n_s = max(2, round(sample_ratio * n))
    m = np.array([enc.columns[q].m for q in enc.qis])
    scale = enc.scale_of()
    samples = copula_samples(enc.codes, n_s, rng)  # dummy records, never real rows
    pts = np.stack([scale[j][samples[:, j]] for j in range(d)], axis=1)
    if tag is None:
        truth_raw = crowd(pts, pts)  # §4.1: answers on the raw samples are the ground truth
    else:  # §5.1: the experiments tag each sample with its ground truth; nothing is published
        truth_raw = np.asarray(tag(box_labels(enc, pts, pts)))
        if truth_raw.shape != (n_s,) or not np.issubdtype(truth_raw.dtype, np.integer):
            raise ArgumentError(f"tag must return {n_s} integer answers, got shape {truth_raw.shape}")
        truth_raw = truth_raw.astype(np.int64)
    widened_raw = crowd.guard.widened
    labels, truth = np.unique(truth_raw, return_inverse=True)
    n_ans = len(labels)
    if min_samples is not None:
        min_s = int(min_samples)
    elif allowable == "cells":  # Definition 3: K samples per new cell
        min_s = k
    else:  # ours: the samples a slab of K real rows holds on average
        min_s = max(2, int(np.ceil(k * sample_ratio)))
    cuts = feedback_histogram(samples, truth, m, n_ans, int(cell_limit), min_s, allowable, criterion)
    # publish every sample generalized to its cell's range (§4.3) to collect the feedback probabilities
    slab = _slabs(cuts, samples)
    edges = [np.r_[-1, c, mj - 1] for c, mj in zip(cuts, m)]
    lo_c = np.stack([edges[j][slab[:, j]] + 1 for j in range(d)], axis=1)
    hi_c = np.stack([edges[j][slab[:, j] + 1] for j in range(d)], axis=1)
    lo = np.stack([scale[j][lo_c[:, j]] for j in range(d)], axis=1)
    hi = np.stack([scale[j][hi_c[:, j]] for j in range(d)], axis=1)
    fb_raw = crowd(lo, hi)
    labels = np.union1d(labels, fb_raw)  # workers may answer with labels no raw sample received
    grid = _grid(enc, cuts, samples, np.searchsorted(labels, truth_raw), np.searchsorted(labels, fb_raw),
                 len(labels), sensitive, volume)
    parts = adaptive_partition(grid, k, l, delta)
    # real rows -> phase-1 partition, then Mondrian inside each (Algorithm 2, lines 7-9)
    owner = np.empty(grid.tuples.shape, np.int64)
    for p, (plo, phi) in enumerate(parts):
        owner[tuple(slice(x, y + 1) for x, y in zip(plo, phi))] = p
    init = owner.reshape(-1)[_cell_ids(_slabs(cuts, enc.codes), grid.tuples.shape)]
    groups, glo, ghi = mondrian_groups(enc.codes, scale, k, strict=strict, sensitive=sensitive, l=l, init=init,
                                       return_boxes=True)
    est = sum(a * w for a, w in (_accuracy(grid, plo, phi) for plo, phi in parts))
    extra = {"crowd_tuples": crowd.tuples, "crowd_calls": crowd.calls, "n_samples": n_s,
             "n_cells": int(grid.tuples.size), "n_partitions": len(parts), "estimated_accuracy": est,
             "sample_ratio": sample_ratio, "cell_limit": int(cell_limit), "l": l, "strict": strict,
             "delta": delta, "allowable": allowable, "volume": volume, "min_samples": min_s,
             "samples_widened": crowd.guard.widened, "samples_widened_raw": widened_raw}
    if tag is not None:
        extra["tagged"] = True
    if criterion != "counts":
        extra["criterion"] = criterion
    return release_from_groups(frame, enc, groups, k, "fka", extra, (glo, ghi))
