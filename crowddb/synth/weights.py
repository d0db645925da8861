"""Source reliability for the weighted KDE (§4.2): global (Eq. 2), local Hampel IRWLS (Eq. 3), combined (Eq. 4/5)."""

from __future__ import annotations

import numpy as np

from crowddb.synth.kde import Batch, rkhs_sq_dist, row_percentile

HAMPEL_QUANTILES = (50.0, 75.0, 95.0)  # q1 < q2 < q3 as robust KDE (Kim & Scott 2012, §5): median, 75th, 95th pct


def _normalize(w: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Rows of ``w`` scaled to sum 1 over ``mask``; rows with no mass become uniform."""
    w = np.where(mask, np.maximum(w, 0.0), 0.0)
    tot = w.sum(axis=1, keepdims=True)
    uniform = mask / np.maximum(mask.sum(axis=1, keepdims=True), 1)
    return np.where(tot > 0, w / np.where(tot > 0, tot, 1.0), uniform)


def global_weights(batches: list[Batch], grams: list[np.ndarray], n_sources: int,
                   max_iter: int = 50, tol: float = 1e-6) -> np.ndarray:
    """Global source weights g_s by iterating Eq. (2) with closed-form RKHS distances to f^g_i; returns (n_sources,).

    Distances are taken in the RKHS of the normalized kernel kappa(x, x) = 1 (the "normalized squared loss" of Eq. 1),
    so objects of any scale or bandwidth weigh alike; start g = 1, stop when max |dg| <= tol * max |g| or max_iter.
    """
    g = np.ones(n_sources)
    for _ in range(max_iter):
        loss = np.zeros(n_sources)
        for b, K in zip(batches, grams):
            w = _normalize(g[b.src], b.mask)  # f^g_i = sum_t g_t Phi(x_t) / sum_t g_t
            d = rkhs_sq_dist(K, w)
            loss += np.bincount(b.src[b.mask], weights=d[b.mask], minlength=n_sources)
        total = loss.sum()
        if total <= 0:
            return np.ones(n_sources)  # every claim equals its object's consensus: no source is worse
        # Eq. (2): g_s = -log(sum_i d_is / sum_s' sum_i d_is'); a zero loss is floored to keep g finite
        new = -np.log(np.maximum(loss, 1e-12 * total) / total)
        done = np.max(np.abs(new - g)) <= tol * max(np.max(np.abs(new)), 1e-12)
        g = new
        if done:
            break
    return g


def hampel_phi(r: np.ndarray, q1: np.ndarray, q2: np.ndarray, q3: np.ndarray) -> np.ndarray:
    """IRWLS weight psi(r)/r of the Hampel loss of Eq. (3) (1 near 0, q1/r, linear descent, 0 beyond q3)."""
    r = np.maximum(r, 1e-300)
    lin = q1 * (q3 - r) / np.maximum((q3 - q2) * r, 1e-300)
    return np.where(r <= q1, 1.0, np.where(r <= q2, q1 / r, np.where(r < q3, lin, 0.0)))


def hampel_irwls(K: np.ndarray, mask: np.ndarray, q: tuple[float, float, float] | None = None,
                 max_iter: int = 100, tol: float = 1e-8) -> np.ndarray:
    """Local weights l_i,s per object by IRWLS of Eq. (3): l ∝ psi(r)/r with r the RKHS residual; (B, n)."""
    l = _normalize(np.ones(mask.shape), mask)
    r = np.sqrt(rkhs_sq_dist(K, l))
    if q is None:  # defaults: quantiles of the residuals at the unweighted KDE (Kim & Scott 2012)
        q1, q2, q3 = (row_percentile(r, mask, p)[:, None] for p in HAMPEL_QUANTILES)
    else:
        q1, q2, q3 = (np.full((mask.shape[0], 1), float(v)) for v in q)
    ok = (q3 > q1)  # degenerate residuals (e.g. two claims, or all equal): weights stay uniform
    for _ in range(max_iter):
        phi = np.where(mask & ok, hampel_phi(r, q1, q2, q3), 1.0)
        new = np.where(phi.sum(axis=1, keepdims=True) > 0, _normalize(phi, mask), l)
        done = np.max(np.abs(new - l)) <= tol
        l = new
        if done:
            break
        r = np.sqrt(rkhs_sq_dist(K, l))
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
                   floor: float) -> tuple[list[np.ndarray], np.ndarray]:
    """Sampling weights c per batch for kind 'combined' | 'global' | 'uniform', and the global weights g."""
    g = global_weights(batches, grams, n_sources) if kind != "uniform" else np.ones(n_sources)
    out = []
    for b, K in zip(batches, grams):
        if kind == "uniform":
            c = _normalize(np.ones(b.mask.shape), b.mask)
        elif kind == "global":
            c = _normalize(g[b.src], b.mask)
        else:
            c = combined_weights(hampel_irwls(K, b.mask), g[b.src], b.mask)
        out.append(floor_weights(c, b.mask, floor))
    return out, g
