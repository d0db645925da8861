"""Gaussian kernels for PrisCrowd (§4.2): layout by object, bandwidth rule, data resolution, RKHS distances."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)
SILVERMAN_FACTOR = 0.9  # h = 0.9 * min(sd, IQR/1.349) * n^(-1/5)  (Silverman 1986, eq. 3.31)
THIN_CELL = 1e-3  # cell/h below which the cell mass is taken by the midpoint rule
CELL_BUDGET = 2_000_000  # padded elements per object batch (objects x claims x claims)


@dataclass
class Batch:
    """Objects padded to one width: claims X[b, j] of object objs[b] where mask[b, j]."""

    objs: np.ndarray  # (B,) object codes
    X: np.ndarray  # (B, n) claim values, 0 on padding
    mask: np.ndarray  # (B, n) bool
    src: np.ndarray  # (B, n) source codes, 0 on padding
    pos: np.ndarray  # (B, n) index of the claim in the flat input, -1 on padding

    @property
    def counts(self) -> np.ndarray:
        """Number of claims of each object of the batch."""
        return self.mask.sum(axis=1)


def make_batches(obj: np.ndarray, src: np.ndarray, x: np.ndarray, budget: int = CELL_BUDGET) -> list[Batch]:
    """Group flat claims by object code into padded batches of similar size (sorted by size, <= budget cells)."""
    n_obj = int(obj.max()) + 1 if obj.size else 0
    counts = np.bincount(obj, minlength=n_obj)
    order = np.argsort(obj, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    by_size = np.argsort(counts, kind="stable")
    batches: list[Batch] = []
    i = 0
    while i < n_obj:
        width = int(counts[by_size[i]])
        j = i
        while j < n_obj:  # grow the batch while the padded cube fits the budget
            w = int(counts[by_size[j]])
            if j > i and ((j - i + 1) * max(w, 1) ** 2 > budget or w > 1.5 * counts[by_size[i]] + 2):
                break  # keeps the cube within budget and padding below about a third
            width = w
            j += 1
        objs = by_size[i:j]
        width = max(width, 1)
        col = np.arange(width)
        mask = col[None, :] < counts[objs][:, None]
        pos = np.where(mask, order[np.minimum(starts[objs][:, None] + col[None, :], obj.size - 1)], -1)
        X = np.where(mask, x[np.maximum(pos, 0)], 0.0)
        S = np.where(mask, src[np.maximum(pos, 0)], 0)
        batches.append(Batch(objs=objs, X=X, mask=mask, src=S, pos=pos))
        i = j
    return batches


def decimal_resolution(x: np.ndarray, finest: int = -6) -> float:
    """Largest 10^e (e >= finest) of which every claim is an integer multiple: the cell width of the data."""
    x = np.abs(np.asarray(x, dtype=float))
    x = x[x > 0]
    if x.size == 0:
        return 1.0
    top = int(np.floor(np.log10(x.max())))
    for e in range(top, finest - 1, -1):
        q = x / 10.0**e
        if np.all(np.abs(q - np.round(q)) <= 64 * np.finfo(float).eps * q):
            return 10.0**e
    return 10.0**finest


def silverman_bandwidth(X: np.ndarray, mask: np.ndarray, floor: np.ndarray | float) -> np.ndarray:
    """Per-object Silverman bandwidth 0.9*min(sd, IQR/1.349)*n^(-1/5), positive scales only, at least ``floor``."""
    n = mask.sum(axis=1)
    mean = np.where(mask, X, 0.0).sum(axis=1) / np.maximum(n, 1)
    ss = np.where(mask, (X - mean[:, None]) ** 2, 0.0).sum(axis=1)
    sd = np.sqrt(ss / np.maximum(n - 1, 1))
    iqr = (row_percentile(X, mask, 75) - row_percentile(X, mask, 25)) / 1.349
    scale = np.where((iqr > 0) & (iqr < sd), iqr, sd)  # min of the positive scales
    h = SILVERMAN_FACTOR * scale * np.maximum(n, 1) ** -0.2
    return np.maximum(h, floor)  # zero spread (all claims equal) -> the data's cell width


def gram(X: np.ndarray, mask: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Normalized Gaussian Gram matrices exp(-(x_s-x_t)^2/2h^2) per object (kappa(x, x) = 1), 0 on padding."""
    D = (X[:, :, None] - X[:, None, :]) / h[:, None, None]
    K = np.exp(-0.5 * D * D)
    return K * (mask[:, :, None] & mask[:, None, :])


def rkhs_sq_dist(K: np.ndarray, w: np.ndarray) -> np.ndarray:
    """||Phi(x_s) - sum_t w_t Phi(x_t)||^2 = 1 - 2 (Kw)_s + w'Kw per claim, w summing to 1 per object."""
    Kw = np.einsum("bst,bt->bs", K, w)
    wKw = np.einsum("bs,bs->b", w, Kw)
    return np.maximum(1.0 - 2.0 * Kw + wKw[:, None], 0.0)


def log_cell_prob(j: np.ndarray, cell: float, seeds: np.ndarray, h: np.ndarray) -> np.ndarray:
    """log P(N(seed, h^2) lands in the cell [(j-1/2)cell, (j+1/2)cell)) for broadcastable arrays (§4.3)."""
    h = np.asarray(h, dtype=float)
    mid = (j * cell - seeds) / h
    w = cell / h
    wide = w >= THIN_CELL
    if not np.any(wide):
        return _log_thin(mid, w)
    if np.all(wide):
        return _log_mass(mid, w)
    wb = np.broadcast_to(w, mid.shape)
    wide = wb >= THIN_CELL
    out = np.empty(mid.shape)
    out[~wide] = _log_thin(mid[~wide], wb[~wide])
    out[wide] = _log_mass(mid[wide], wb[wide])
    return out


def _log_thin(mid: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Midpoint rule with its 2nd-order term, log(w phi(z) (1 + w^2 (z^2-1)/24)), for cell/h = w < 1e-3."""
    c = w * w / 24.0
    return (np.log(w) - LOG_SQRT_2PI - c) + (c - 0.5) * (mid * mid)


def _log_mass(mid: np.ndarray, w: np.ndarray) -> np.ndarray:
    """log(Phi(z + w/2) - Phi(z - w/2)) taken at -|z| (same mass by symmetry, lower tail: no cancellation)."""
    z = -np.abs(mid)
    with np.errstate(divide="ignore"):  # masses below ~1e-300 give -inf: a bucket no generating seed has
        return np.log(ndtr(z + 0.5 * w) - ndtr(z - 0.5 * w))


def row_percentile(V: np.ndarray, mask: np.ndarray, q: float) -> np.ndarray:
    """Per-row percentile (linear interpolation, as numpy) over the masked entries of V; NaN for empty rows."""
    S = np.sort(np.where(mask, V, np.inf), axis=1)
    n = mask.sum(axis=1)
    pos = np.maximum(n - 1, 0) * (q / 100.0)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(n - 1, 0))
    r = np.arange(V.shape[0])
    v = S[r, lo] + (S[r, hi] - S[r, lo]) * (pos - lo) if V.shape[1] else np.zeros(V.shape[0])
    return np.where(n > 0, v, np.nan)


def mixture_density(grid: np.ndarray, centers: np.ndarray, weights: np.ndarray, h: float) -> np.ndarray:
    """Weighted Gaussian KDE sum_s w_s K_h(x - x_s) on ``grid`` (Eq. 5 with the given weights)."""
    z = (np.asarray(grid)[:, None] - centers[None, :]) / h
    return (np.exp(-0.5 * z * z) @ weights) / (h * np.sqrt(2.0 * np.pi))
