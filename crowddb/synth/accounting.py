"""Privacy accounting of Algorithm 1 by Theorem 2 of the PrisCrowd paper.

For an object with |D_i| >= k claims, sampling weights c, and any integer 1 <= t < k, Algorithm 1 is (epsilon, delta)-DP
with epsilon = epsilon0 + log(1 + (gamma/t) * max c / min c) and delta = |D_i| * max c * exp(-epsilon0 * (k - t)).

Choice of t (when not given): delta grows with t and epsilon falls with t, so every t is one point of a trade-off.
Without an epsilon target we take the t that minimizes delta, t = 1, and report epsilon(1). With a target
``epsilon_max`` we take the smallest t in 1..k-1 with epsilon(t) <= epsilon_max (the least delta that meets the target);
if none exists the object has no guarantee at that target. k = 1 admits no t, hence no guarantee.
As in the paper, c is treated as a fixed input of Algorithm 1: the dependence of c on the data is not accounted for,
and the guarantee is per object (a source with claims on several objects composes over them).
"""

from __future__ import annotations

import numpy as np


def theorem2(n: np.ndarray, c_max: np.ndarray, c_min: np.ndarray, k: int, gamma: float, epsilon0: float,
             t: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """(epsilon, delta) of Theorem 2 for objects with |D_i| = n and weight extremes c_max, c_min at integer t."""
    t = np.asarray(t, dtype=float)
    eps = epsilon0 + np.log1p(gamma / t * np.asarray(c_max, float) / np.asarray(c_min, float))
    delta = np.asarray(n, float) * np.asarray(c_max, float) * np.exp(-epsilon0 * (k - t))
    return eps, delta


def choose_t(ratio: np.ndarray, k: int, gamma: float, epsilon0: float, epsilon_max: float | None = None) -> np.ndarray:
    """t per object: 1 (least delta) without a target, else the least t with epsilon(t) <= epsilon_max; 0 = none."""
    ratio = np.asarray(ratio, dtype=float)
    if k < 2:
        return np.zeros(ratio.shape, dtype=int)
    if epsilon_max is None:
        return np.ones(ratio.shape, dtype=int)
    ts = np.arange(1, k)
    eps = epsilon0 + np.log1p(gamma / ts[None, :] * ratio.reshape(-1, 1))  # epsilon(t) falls with t
    ok = eps <= epsilon_max
    return np.where(ok.any(axis=1), ts[np.argmax(ok, axis=1)], 0).reshape(ratio.shape)
