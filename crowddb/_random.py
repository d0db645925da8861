"""Seeded randomness: every random choice in crowddb draws from a numpy Generator made here."""

from __future__ import annotations

import numpy as np


def make_rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    """Return a Generator for ``seed``: an int seeds PCG64, a Generator is used as is, None draws OS entropy."""
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)
