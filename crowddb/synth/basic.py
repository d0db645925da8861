"""The paper's Basic baseline (§5): every original claim released with Laplace noise at epsilon.

Sensitivity assumption: a claim of object i is bounded by that object's domain, of width Delta_i. When the caller gives
``sensitivity`` (one number, or one per object) it is that domain width and, as each claim is perturbed once and the
objects' claims are disjoint, every object's release is epsilon-DP per claim (delta = 0). When it is not given,
Delta_i defaults to the range of the object's claims (max - min, at least one data cell): a data-dependent bound, so
the report marks the guarantee as not holding. The release has one noisy row per original claim (m is not used).
"""

from __future__ import annotations

import numpy as np


def laplace_release(obj: np.ndarray, x: np.ndarray, n_obj: int, epsilon: float, sensitivity: np.ndarray | None,
                    cell: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Noisy claims x + Lap(Delta_obj / epsilon) and the per-object Delta used; rows keep the input order."""
    if sensitivity is None:
        hi = np.full(n_obj, -np.inf)
        lo = np.full(n_obj, np.inf)
        np.maximum.at(hi, obj, x)
        np.minimum.at(lo, obj, x)
        delta_i = np.maximum(hi - lo, cell)
    else:
        delta_i = np.broadcast_to(np.asarray(sensitivity, float), (n_obj,)).copy()
    noisy = x + rng.laplace(0.0, 1.0, x.size) * (delta_i[obj] / epsilon)
    return noisy, delta_i
