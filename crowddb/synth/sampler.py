"""Algorithm 1 (§4.3): candidates from the weighted KDE, released only if they pass the randomized privacy test.

Generation probability. A Gaussian kernel gives densities, not probabilities, so candidates live on the data's grid:
a candidate x drawn from N(x_s, h^2) is rounded to the cell j = round(x / cell) (cell = the data's decimal resolution,
see ``kde.decimal_resolution``) and released as j * cell. The probability that seed x_t generates it is the exact
Gaussian mass of that cell, P_t = Phi(((j+1/2) cell - x_t)/h) - Phi(((j-1/2) cell - x_t)/h) (``kde.log_cell_prob``).
Its gamma-bucket is a = floor(-log_gamma P), i.e. gamma^(-a-1) < P <= gamma^(-a). Numerics: for cell/h >= 1e-3 the
mass is taken from the lower tail (no cancellation; masses below ~1e-300 count as 0, a bucket no generating seed can
have); for thinner cells by the midpoint rule with its second-order term (relative error < 1e-7 (1 + z^2)^2).

Test. k~ = k + Lap(1/epsilon0); a = bucket of the generating seed; k' = number of claims whose bucket equals a; the
candidate is released iff k' >= k~. A batch of candidates is tested against all seeds of its objects in one array
operation (objects x candidates x seeds). Candidates are drawn in rounds per object batch; within an object the first
candidates that pass are kept in draw order, exactly as the sequential loop of Algorithm 1 would, and ``tried`` counts
candidates up to the m-th pass.

Termination. An object stops after ``max_attempts`` candidates (default ``200 * m``) even if it has fewer than m rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from crowddb.synth.kde import CELL_BUDGET, THIN_CELL, Batch, log_cell_prob


@dataclass
class Released:
    """Released candidates of one batch: flat rows plus per-object counters."""

    row: np.ndarray  # (r,) batch row of each released value
    value: np.ndarray  # (r,) released value j * cell
    bucket: np.ndarray  # (r,) gamma-bucket a of the generating seed (secret: for verification only)
    k_tilde: np.ndarray  # (r,) noisy threshold the value passed (secret)
    k_prime: np.ndarray  # (r,) k' of the value (secret)
    tried: np.ndarray  # (B,) candidates drawn until the m-th pass or max_attempts
    accepted: np.ndarray  # (B,)


def buckets(log_p: np.ndarray, gamma: float) -> np.ndarray:
    """gamma-bucket a >= 0 (as float) with gamma^(-a-1) < P <= gamma^(-a), from log P (step 2 of the test)."""
    return np.fmin(np.floor(np.minimum(log_p, 0.0) * (-1.0 / math.log(gamma))), 2.0**62)  # P = 0: one far bucket


def privacy_buckets(values: np.ndarray, claims: np.ndarray, h: float, cell: float, gamma: float) -> np.ndarray:
    """(R, n) gamma-buckets of the probability that each claim generates each value's cell."""
    j = np.round(np.asarray(values, float) / cell)
    return buckets(log_cell_prob(j[:, None], cell, np.asarray(claims, float)[None, :], h), gamma).astype(np.int64)


def k_prime(values: np.ndarray, claims: np.ndarray, h: float, cell: float, gamma: float,
            bucket: np.ndarray) -> np.ndarray:
    """k' of step 3 for released ``values`` of one object: claims whose bucket equals the generating bucket a."""
    return (privacy_buckets(values, claims, h, cell, gamma) == np.asarray(bucket)[:, None]).sum(axis=1)


def _decimals(cell: float) -> int:
    """Decimal places of the grid, used to print released values without float noise."""
    return max(0, -math.floor(math.log10(cell) + 1e-9))


def _test(j: np.ndarray, seed: np.ndarray, X: np.ndarray, M: np.ndarray, hh: np.ndarray, cell: float,
          gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """(k', a) for candidates j (A, R) of seeds ``seed`` against all claims X (A, n); thin and wide cells apart."""
    thin = (cell / hh[:, 0]) < THIN_CELL
    kp = np.empty(j.shape, dtype=np.int64)
    a = np.empty(j.shape, dtype=np.int64)
    for rows in (np.nonzero(thin)[0], np.nonzero(~thin)[0]):
        if rows.size == 0:
            continue
        bk = buckets(log_cell_prob(j[rows, :, None], cell, X[rows, None, :], hh[rows, :, None]), gamma)
        ab = np.take_along_axis(bk, seed[rows, :, None], axis=2)
        kp[rows] = ((bk == ab) & M[rows, None, :]).sum(axis=2)
        a[rows] = ab[:, :, 0]
    return kp, a


def release_batch(b: Batch, c: np.ndarray, h: np.ndarray, cell: float, m: int, k: int, gamma: float,
                  epsilon0: float, max_attempts: int, rng: np.random.Generator, test: bool = True) -> Released:
    """Run Algorithm 1 for every object (row) of a batch; rows with zero weight mass must not be passed."""
    B, n = b.X.shape
    counts = b.counts
    cum = np.where(b.mask, np.cumsum(c, axis=1), np.inf)
    cum[np.arange(B), counts - 1] = 1.0  # the last seed closes the CDF exactly
    tried = np.zeros(B, dtype=np.int64)
    accepted = np.zeros(B, dtype=np.int64)
    parts: list[tuple[np.ndarray, ...]] = []
    rnd = 0
    while True:
        need, left = m - accepted, max_attempts - tried
        active = np.nonzero((need > 0) & (left > 0))[0]
        if active.size == 0:
            break
        rate = (accepted[active] + 1.0) / (tried[active] + 2.0)  # pass-rate estimate sizes the next round
        R = int(min(math.ceil(1.25 * np.max(need[active] / rate)) + 4, np.max(left[active])))
        R = max(1, min(R, CELL_BUDGET // max(n, 1)))
        active = active[: max(1, CELL_BUDGET // (R * n))]
        A, X, M, hh = active.size, b.X[active], b.mask[active], h[active][:, None]
        u = rng.random((A, R))
        seed = (cum[active][:, None, :] < u[:, :, None]).sum(axis=2)  # step 3: seed s with probability c_s
        x = np.take_along_axis(X, seed, axis=1) + hh * rng.standard_normal((A, R))  # step 4: x ~ K_h(., x_s)
        j = np.round(x / cell)
        if test:  # step 5: the randomized privacy test, all candidates x all seeds at once
            kp, a = _test(j, seed, X, M, hh, cell, gamma)
            kt = k + rng.laplace(0.0, 1.0 / epsilon0, (A, R))
            ok = kp >= kt
        else:
            kp = np.zeros((A, R), dtype=np.int64)
            kt = np.full((A, R), -np.inf)
            a = kp
            ok = np.ones((A, R), dtype=bool)
        ok &= np.arange(R)[None, :] < left[active][:, None]
        cs = np.cumsum(ok, axis=1)
        take = ok & (cs <= need[active][:, None])
        reached = cs[:, -1] >= need[active]
        first_full = np.argmax(cs >= need[active][:, None], axis=1) + 1
        tried[active] += np.where(reached, first_full, np.minimum(R, left[active]))
        accepted[active] += take.sum(axis=1)
        r, col = np.nonzero(take)
        parts.append((active[r], np.full(r.size, rnd), col, j[r, col], a[r, col], kt[r, col], kp[r, col]))
        rnd += 1
    if parts:
        row, rd, col, jj, aa, kt, kp = (np.concatenate(p) for p in zip(*parts))
        order = np.lexsort((col, rd, row))
        row, jj, aa, kt, kp = row[order], jj[order], aa[order], kt[order], kp[order]
    else:
        row, jj, aa, kt, kp = (np.zeros(0, dtype=t) for t in (np.int64, float, np.int64, float, np.int64))
    value = np.round(jj * cell, _decimals(cell))
    return Released(row=row, value=value, bucket=aa, k_tilde=kt, k_prime=kp, tried=tried, accepted=accepted)
