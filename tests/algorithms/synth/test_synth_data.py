"""Small generated claim sets shared by the synth tests."""

from __future__ import annotations

import numpy as np


def claims(n_obj: int = 30, n_src: int = 12, bad: tuple[int, ...] = (10, 11), shift: float = 25.0, seed: int = 0):
    """Every source claims every object: truth + N(0, 1) for good sources, + shift for the ``bad`` sources."""
    rng = np.random.default_rng(seed)
    obj = np.repeat(np.arange(n_obj), n_src)
    src = np.tile(np.arange(n_src), n_obj)
    truth = rng.uniform(50, 500, n_obj)
    x = truth[obj] + rng.normal(0, 1, obj.size)
    x[np.isin(src, bad)] += shift
    return obj, src, np.round(x, 1)
