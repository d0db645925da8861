"""Privacy accounting of Algorithm 1 by Theorem 2 of the PrisCrowd paper.

For an object with |D_i| >= k claims, sampling weights c, and any integer 1 <= t < k, Algorithm 1 is (epsilon, delta)-DP
with epsilon = epsilon0 + log(1 + (gamma/t) * max c / min c) and delta = |D_i| * max c * exp(-epsilon0 * (k - t)).

Choice of t (when not given): delta grows with t and epsilon falls with t, so every t is one point of a trade-off.
Without an epsilon target we take the t that minimizes delta, t = 1, and report epsilon(1). With a target
``epsilon_max`` we take the smallest t in 1..k-1 with epsilon(t) <= epsilon_max (the least delta that meets the target);
if none exists the object has no guarantee at that target. k = 1 admits no t, hence no guarantee.
As in the paper, c is treated as a fixed input of Algorithm 1: the dependence of c on the data is not accounted for,
and the guarantee is per object (a source with claims on several objects composes over them).

Composition (``compose``). Theorem 2 bounds one run of steps 3-5 of Algorithm 1: one candidate drawn and tested, whose
output is the candidate or "rejected". Every candidate depends on the whole D_i (the seed choice through c, the test's
k' through every claim), and whether it passed is visible (the loop stops at the m-th pass), so an object's release
is the composition of all ``tried`` candidates, the rejected ones included, not of its m released values. Basic
composition: (T epsilon, T delta). Advanced composition (Dwork, Rothblum & Vadhan 2010; Dwork & Roth 2014, Thm 3.20),
for a declared delta' > 0: (sqrt(2 T ln(1/delta')) epsilon + T epsilon (e^epsilon - 1), T delta + delta'). An object's
figure is the one with the smaller epsilon (basic on ties: its delta is smaller). T is the number of candidates this
run drew (it depends on the data: a figure for the realized run; the worst case over runs composes ``max_attempts``).
Objects hold disjoint claim sets and the protected unit is one claim of one object, so the release as a whole is
(max over objects of the composed epsilon, max of the composed delta) (parallel composition); a source with claims on
several objects adds up the figures of those objects.
"""

from __future__ import annotations

import math

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


COMPOSITION_DELTA = 1e-6  # delta' of advanced composition (added once to each object's composed delta)


def compose(epsilon: np.ndarray, delta: np.ndarray, n: np.ndarray, delta_prime: float = COMPOSITION_DELTA
            ) -> dict[str, np.ndarray]:
    """Composition of n (epsilon, delta)-DP runs per object: basic, advanced (delta' added), and the tighter one.

    Returns arrays epsilon_basic, delta_basic, epsilon_advanced, delta_advanced, epsilon, delta and ``composition``
    ('basic' | 'advanced' | 'none' for n = 0). Advanced is taken only when its epsilon is strictly smaller.
    """
    eps, dl = np.asarray(epsilon, float), np.asarray(delta, float)
    n = np.asarray(n, float)
    with np.errstate(invalid="ignore", over="ignore"):  # epsilon = inf (no guarantee) stays inf
        eb, db = n * eps, n * dl
        ea = np.sqrt(2.0 * n * math.log(1.0 / delta_prime)) * eps + n * eps * np.expm1(eps)
        da = n * dl + delta_prime
        adv = (n > 0) & (ea < eb)
    eb, db = np.where(n > 0, eb, 0.0), np.where(n > 0, db, 0.0)
    ea, da = np.where(n > 0, ea, 0.0), np.where(n > 0, da, 0.0)
    return {"epsilon_basic": eb, "delta_basic": db, "epsilon_advanced": ea, "delta_advanced": da,
            "epsilon": np.where(adv, ea, eb), "delta": np.where(adv, da, db),
            "composition": np.where(n > 0, np.where(adv, "advanced", "basic"), "none")}
