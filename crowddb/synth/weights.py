"""Source reliability for the weighted KDE (§4.2): global (Eq. 2), local Hampel IRWLS (Eq. 3), combined (Eq. 4/5).

All distances are RKHS norms of the normalized Gaussian kernel kappa(x, x) = 1, in closed form from the Gram matrix:
||Phi(x_s) - sum_t w_t Phi(x_t)||^2 = 1 - 2 (Kw)_s + w'Kw. They are bounded (by 2), so a claim many bandwidths away
from the others costs about as much as one a few bandwidths away.

Local weights follow robust KDE (Kim & Scott, JMLR 2012) as their code (robkde.m) does: the Hampel thresholds
(q1, q2, q3) of an object are the median, 95th percentile and maximum of the residual norms at its kernel median (the
RKHS M-estimate with rho(r) = r, by KIRWLS from the unweighted KDE); then KIRWLS with the Hampel psi from the
unweighted KDE, l ∝ psi(r)/r. psi is 0 beyond q3, so a local weight, and then c, can be exactly 0; Theorem 2's
epsilon then is infinite, which is what ``floor_weights`` is for. When over half of an object's claims are identical,
the kernel median sits on them and q1 = 0; the limit q1 -> 0+ is taken, which gives those claims nearly all the weight.

Options (not the paper's defaults; ``synthesize`` passes them through):
- ``hampel_quantiles`` (p1, p2, p3), default (50, 95, 100) as robkde.m. Saturated RKHS residuals put most claims at
  nearly the same norm, so with q2 = 95th pct and q3 = max only about 5% of an object's claims are discounted more
  than q1/r (on the Stock-like bench, claims > 100 h away keep 0.82 of a uniform weight). (50, 75, 95) discounts the
  top quarter and zeroes the top 5% (which can include near claims when an object has few claims).
- ``hampel_center``: 'median' (default, robkde.m) or 'kde', residuals at the unweighted KDE (this module's earlier
  rule). On the bench, (50, 75, 95) at 'kde' is best on the outlier-heavy sets (Stock-like Uniform/PrisCrowd ISE
  1.24 vs 1.03; the ceiling with the true good sources is 1.31) but worse in SISE on Population (0.79 vs 0.69).
- ``global_loss``: 'sum' (default, Eq. 2 as printed) or 'mean', each source's loss divided by its number of claims.
  With 'sum' a source's weight falls with its claim count regardless of accuracy (Population: sources with one claim
  g = 8.7, 48% of their claims within 1% of the truth; the two with > 100 claims g = 2.7, 84%).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from crowddb.errors import ArgumentError
from crowddb.synth.kde import Batch, rkhs_sq_dist, row_percentile

# Hampel a < b < c: median, 95th percentile and max of the residual norms at the kernel median (Kim & Scott 2012,
# robust KDE; their code robkde.m/parameter_select), as percentiles of the masked residuals
HAMPEL_QUANTILES = (50.0, 95.0, 100.0)
GLOBAL_LOSSES = ("sum", "mean")  # Eq. (2) as printed | each source's loss per claim (not in the paper)
HAMPEL_CENTERS = ("median", "kde")  # where the residuals that set (q1, q2, q3) are taken: kernel median | plain KDE
R_MIN = 1e-9  # residual norms are <= sqrt(2): the kernel median uses 1/max(r, R_MIN), Hampel q1 >= R_MIN


def _normalize(w: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Rows of ``w`` scaled to sum 1 over ``mask``; rows with no mass become uniform."""
    w = np.where(mask, np.maximum(w, 0.0), 0.0)
    tot = w.sum(axis=1, keepdims=True)
    uniform = mask / np.maximum(mask.sum(axis=1, keepdims=True), 1)
    return np.where(tot > 0, w / np.where(tot > 0, tot, 1.0), uniform)


def global_weights(batches: list[Batch], grams: list[np.ndarray], n_sources: int,
                   max_iter: int = 50, tol: float = 1e-6, loss: str = "sum") -> np.ndarray:
    """Global source weights g_s by iterating Eq. (2) with closed-form RKHS distances to f^g_i; returns (n_sources,).

    Distances are taken in the RKHS of the normalized kernel kappa(x, x) = 1 (the "normalized squared loss" of Eq. 1),
    so objects of any scale or bandwidth weigh alike; start g = 1, stop when max |dg| <= tol * max |g| or max_iter.
    loss='sum' is Eq. (2) as printed: a source's loss sums over its claims, so with equal accuracy a source with more
    claims gets a lower weight. loss='mean' (not in the paper) divides each source's loss by its number of claims.
    """
    if loss not in GLOBAL_LOSSES:
        raise ArgumentError(f"global_loss must be one of {GLOBAL_LOSSES}, got {loss!r}")
    n_claims = np.zeros(n_sources)
    for b in batches:
        n_claims += np.bincount(b.src[b.mask], minlength=n_sources)
    g = np.ones(n_sources)
    # 'mean' (not Eq. 2): each source's summed loss divided by its number of claims
    per_claim = 1.0 / np.maximum(n_claims, 1) if loss == "mean" else np.ones(n_sources)
    for _ in range(max_iter):
        src_loss = np.zeros(n_sources)
        for b, K in zip(batches, grams):
            w = _normalize(g[b.src], b.mask)  # f^g_i = sum_t g_t Phi(x_t) / sum_t g_t
            d = rkhs_sq_dist(K, w)
            src_loss += np.bincount(b.src[b.mask], weights=d[b.mask], minlength=n_sources)
        src_loss *= per_claim
        total = src_loss.sum()
        if total <= 0:
            return np.ones(n_sources)  # every claim equals its object's consensus: no source is worse
        # Eq. (2): g_s = -log(sum_i d_is / sum_s' sum_i d_is'); a zero loss is floored to keep g finite
        new = -np.log(np.maximum(src_loss, 1e-12 * total) / total)
        done = np.max(np.abs(new - g)) <= tol * max(np.max(np.abs(new)), 1e-12)
        g = new
        if done:
            break
    return g


def hampel_phi(r: np.ndarray, q1: np.ndarray, q2: np.ndarray, q3: np.ndarray) -> np.ndarray:
    """IRWLS weight psi(r)/r of the Hampel loss of Eq. (3): 1 below q1, q1/r, linear descent to 0 at q3, 0 beyond."""
    r = np.maximum(r, 1e-300)
    lin = q1 * (q3 - r) / np.maximum((q3 - q2) * r, 1e-300)
    # psi(r) = r | q1 | q1 (q3 - r)/(q3 - q2) | 0 on [0,q1) [q1,q2) [q2,q3) [q3,inf)  (derivative of Eq. 3's loss)
    return np.where(r < q1, 1.0, np.where(r < q2, q1 / r, np.where(r < q3, lin, 0.0)))


def hampel_rho(r: np.ndarray, q1: np.ndarray, q2: np.ndarray, q3: np.ndarray) -> np.ndarray:
    """The Hampel loss of Eq. (3) (the IRWLS objective J(l), used for its stopping rule)."""
    top = q1 * (q2 + q3 - q1) / 2.0
    desc = q1 * (r - q3) ** 2 / np.where(q3 > q2, 2.0 * (q2 - q3), -1.0) + top  # Eq. (3), q2 <= r < q3 (if any)
    return np.where(r < q1, r * r / 2.0, np.where(r < q2, q1 * r - q1 * q1 / 2.0, np.where(r < q3, desc, top)))


def _residuals(K: np.ndarray, w: np.ndarray) -> np.ndarray:
    """RKHS residual norms ||Phi(x_s) - sum_t w_t Phi(x_t)|| in closed form from the Gram matrix."""
    return np.sqrt(rkhs_sq_dist(K, w))


def _row_mean(v: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean of the masked entries of each row (0 for empty rows)."""
    return np.where(mask, v, 0.0).sum(axis=1) / np.maximum(mask.sum(axis=1), 1)


def _kirwls(K: np.ndarray, mask: np.ndarray, phi: Callable[[np.ndarray, np.ndarray], np.ndarray],
            rho: Callable[[np.ndarray, np.ndarray], np.ndarray], max_iter: int, tol: float
            ) -> tuple[np.ndarray, np.ndarray]:
    """Kernelized IRWLS (Kim & Scott 2012) for every object: weights (B, n) and residual norms at them.

    Start at the unweighted KDE; each round w_s = phi(r_s) / sum_t phi(r_t) with r_s = ||Phi(x_s) - sum_t w_t Phi(x_t)||
    in closed form from K; an object stops when the mean loss rho changes by at most tol (relative), or after
    max_iter rounds, independently of the other objects of its batch. phi(r, rows) and rho(r, rows) take the
    residuals of the given batch rows. A round that would give an object no weight at all keeps its weights.
    """
    B = mask.shape[0]
    w = _normalize(np.ones(mask.shape), mask)
    r = _residuals(K, w)
    everything = np.arange(B)
    J = _row_mean(rho(r, everything), mask)
    live = np.ones(B, dtype=bool)
    rows, Ks, Ms = everything, K, mask
    for _ in range(max_iter):
        if not live.any():
            break
        if live.sum() <= 0.75 * rows.size:  # drop converged objects from the arrays once enough have stopped
            rows = np.nonzero(live)[0]
            Ks, Ms = K[rows], mask[rows]
        v = np.where(Ms, phi(r[rows], rows), 0.0)
        mass = v.sum(axis=1, keepdims=True) > 0
        new_w = np.where(mass, _normalize(v, Ms), w[rows])  # w^(k+1)_s = phi(r_s) / sum_s' phi(r_s')
        new_r = _residuals(Ks, new_w)
        new_J = _row_mean(rho(new_r, rows), Ms)
        upd = rows[live[rows]]
        sel = live[rows]
        conv = np.abs(new_J - J[rows]) <= tol * np.maximum(J[rows], 1e-300)
        w[upd], r[upd], J[upd] = new_w[sel], new_r[sel], new_J[sel]
        live[rows[sel & conv]] = False
    return w, r


def kernel_median_residuals(K: np.ndarray, mask: np.ndarray, max_iter: int = 100, tol: float = 1e-8) -> np.ndarray:
    """Residual norms at the kernel median, the RKHS M-estimate with rho(r) = r (IRWLS weights 1/r); (B, n).

    Kim & Scott's parameter selection (their robkde.m): KIRWLS with the absolute loss from the unweighted KDE.
    """
    _, r = _kirwls(K, mask, lambda r, rows: 1.0 / np.maximum(r, R_MIN), lambda r, rows: r, max_iter, tol)
    return r


def hampel_thresholds(K: np.ndarray, mask: np.ndarray,
                      quantiles: tuple[float, float, float] = HAMPEL_QUANTILES,
                      center: str = "median") -> tuple[np.ndarray, ...]:
    """(q1, q2, q3) per object: percentiles of the residual norms at the kernel median (or, center='kde', at the
    unweighted KDE), each (B, 1)."""
    if center not in HAMPEL_CENTERS:
        raise ArgumentError(f"hampel_center must be one of {HAMPEL_CENTERS}, got {center!r}")
    r = kernel_median_residuals(K, mask) if center == "median" else _residuals(K, _normalize(np.ones(mask.shape), mask))
    return tuple(row_percentile(r, mask, p)[:, None] for p in quantiles)


def hampel_irwls(K: np.ndarray, mask: np.ndarray, q: tuple[float, float, float] | None = None,
                 max_iter: int = 100, tol: float = 1e-8,
                 quantiles: tuple[float, float, float] = HAMPEL_QUANTILES, center: str = "median") -> np.ndarray:
    """Local weights l_i,s per object by IRWLS of Eq. (3) as robust KDE (Kim & Scott 2012, KIRWLS); (B, n).

    l_s ∝ psi(r_s)/r_s (Hampel psi) from the unweighted KDE until the mean Hampel loss settles (``_kirwls``).
    q = (q1, q2, q3) for every object, or None for ``hampel_thresholds`` per object. Objects whose thresholds are
    degenerate (q3 <= q1, e.g. two claims or all claims equal) keep uniform weights. q1 is at least R_MIN: when more
    than half of the claims are identical q1 = 0 and the weights tend to all mass on those claims.
    """
    if q is None:
        q1, q2, q3 = hampel_thresholds(K, mask, quantiles, center)
    else:
        q1, q2, q3 = (np.full((mask.shape[0], 1), float(v)) for v in q)
    # q1 = 0 (over half of the claims identical: the kernel median sits on them) would make psi = 0 everywhere; take
    # the limit q1 -> 0+ instead (weights ∝ 1/r below q2, Hampel's descent above), regularized at R_MIN
    q1 = np.maximum(q1, R_MIN)
    q2 = np.maximum(q2, q1)
    ok = q3 > q1

    def phi(r: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Hampel psi(r)/r, or 1 (uniform weights) for degenerate thresholds."""
        return np.where(ok[rows], hampel_phi(r, q1[rows], q2[rows], q3[rows]), 1.0)

    def rho(r: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Hampel loss of Eq. (3) at the rows' thresholds."""
        return hampel_rho(r, q1[rows], q2[rows], q3[rows])

    l, _ = _kirwls(K, mask, phi, rho, max_iter, tol)
    return l


def combined_weights(local: np.ndarray, g_claim: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Eq. (4)'s solution c_i,s = sqrt(l_i,s g_s) / sum_t sqrt(l_i,t g_t) (the weights of Eq. 5)."""
    return _normalize(np.sqrt(np.maximum(local, 0.0) * np.maximum(g_claim, 0.0)), mask)


def floor_weights(c: np.ndarray, mask: np.ndarray, floor: float) -> np.ndarray:
    """Clip c from below at floor * max c per object and renormalize, so max c / min c <= 1/floor (Theorem 2)."""
    if floor <= 0:
        return c
    top = np.max(np.where(mask, c, 0.0), axis=1, keepdims=True)
    return _normalize(np.maximum(c, floor * top), mask)


def object_weights(batches: list[Batch], grams: list[np.ndarray], n_sources: int, kind: str,
                   floor: float, hampel_quantiles: tuple[float, float, float] = HAMPEL_QUANTILES,
                   global_loss: str = "sum", hampel_center: str = "median") -> tuple[list[np.ndarray], np.ndarray]:
    """Sampling weights c per batch for kind 'combined' | 'global' | 'uniform', and the global weights g."""
    g = global_weights(batches, grams, n_sources, loss=global_loss) if kind != "uniform" else np.ones(n_sources)
    out = []
    for b, K in zip(batches, grams):
        if kind == "uniform":
            c = _normalize(np.ones(b.mask.shape), b.mask)
        elif kind == "global":
            c = _normalize(g[b.src], b.mask)
        else:
            l = hampel_irwls(K, b.mask, quantiles=hampel_quantiles, center=hampel_center)
            c = combined_weights(l, g[b.src], b.mask)  # Eq. (4)/(5): c ∝ sqrt(l g)
        out.append(floor_weights(c, b.mask, floor))
    return out, g
