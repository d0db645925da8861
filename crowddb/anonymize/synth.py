"""Synthetic QI samples for FKA: a Gaussian copula keeps every marginal and the correlations of the coded QIs."""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr, ndtri
from scipy.stats import rankdata


def normal_scores(codes: np.ndarray) -> np.ndarray:
    """Per column, mid-ranks of the codes mapped through the inverse normal CDF."""
    n = len(codes)
    return ndtri((rankdata(codes, axis=0) - 0.5) / n)


def _corr(x: np.ndarray) -> np.ndarray:
    """Pearson correlation matrix with constant columns given zero correlation."""
    d = x.shape[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.corrcoef(x, rowvar=False).reshape(d, d)
    c = np.where(np.isfinite(c), c, 0.0)
    np.fill_diagonal(c, 1.0)
    return c


def _nearest_pd(c: np.ndarray, eps: float = 1e-3) -> np.ndarray:
    """Closest correlation matrix with eigenvalues >= eps (clip, then rescale the diagonal to 1)."""
    w, v = np.linalg.eigh((c + c.T) / 2)
    c = (v * np.maximum(w, eps)) @ v.T
    s = np.sqrt(np.diag(c))
    return c / np.outer(s, s)


def _draw(sorted_codes: np.ndarray, latent: np.ndarray, n_samples: int, rng: np.random.Generator) -> np.ndarray:
    """Correlated normals pushed through each column's empirical inverse CDF."""
    n, d = sorted_codes.shape
    u = ndtr(rng.standard_normal((n_samples, d)) @ np.linalg.cholesky(latent).T)
    idx = np.minimum((u * n).astype(np.int64), n - 1)
    return np.take_along_axis(sorted_codes, idx, axis=0)


def copula_samples(codes: np.ndarray, n_samples: int, rng: np.random.Generator, calibrate: int = 3) -> np.ndarray:
    """(n_samples, d) synthetic codes with the table's marginals; the latent correlation is calibrated on a pilot
    draw so that the samples' code correlations match the table's (discrete QIs would otherwise dampen them)."""
    d = codes.shape[1]
    sorted_codes = np.sort(codes, axis=0)
    target = _corr(codes.astype(float))
    latent = _nearest_pd(_corr(normal_scores(codes)))
    pilot = min(20000, max(2000, 2 * len(codes)))
    for _ in range(calibrate if d > 1 else 0):
        got = _corr(_draw(sorted_codes, latent, pilot, rng).astype(float))
        latent = _nearest_pd(np.clip(latent + (target - got), -0.999, 0.999))
    return _draw(sorted_codes, latent, n_samples, rng)
