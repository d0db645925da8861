"""Noise samplers for the LDP perturbations: a seeded numpy sampler for experiments, a secure one for releases.

``make_sampler(seed)``:

* ``seed`` given (int or Generator) -> :class:`ExperimentSampler`, numpy's PCG64. Reproducible, for experiments and
  tests only: its floating-point Laplace/Gaussian samples are open to Mironov's floating-point attack and its
  stream is predictable from the seed. Never use a seed for a production release.
* ``seed=None`` -> :class:`SecureSampler`. Uniform bits come from ``os.urandom``; Laplace and Gaussian noise come
  from OpenDP's measurements (``opendp>=0.16``, optional extra ``crowddb[dp]``) which sample exactly on a discrete
  grid and resist floating-point attacks. Without OpenDP it falls back to noise on a power-of-two grid (values are
  rounded to the grid, the noise is an integer multiple of it, drawn from ``os.urandom`` uniforms): this removes the
  low-order-bit leak but, unlike OpenDP, computes the discrete probabilities in floating point.
"""

from __future__ import annotations

import math
import os

import numpy as np

from crowddb._random import make_rng

__all__ = ["ExperimentSampler", "SecureSampler", "make_sampler", "opendp_available"]


def opendp_available() -> bool:
    """True when the ``opendp`` package can be imported."""
    try:
        import opendp  # noqa: F401
    except ImportError:
        return False
    return True


class ExperimentSampler:
    """Seeded numpy sampler: reproducible, NOT for production releases."""

    secure = False
    description = "numpy PCG64 with a seed (reproducible; experiments only, not for production releases)"

    def __init__(self, seed: int | np.random.Generator) -> None:
        self.rng = make_rng(seed)

    def uniform(self, size: int) -> np.ndarray:
        """Uniform floats in [0, 1)."""
        return self.rng.random(size)

    def integers(self, high: int, size: int) -> np.ndarray:
        """Uniform integers in [0, high)."""
        return self.rng.integers(0, high, size=size)

    def geometric(self, p: float, size: int) -> np.ndarray:
        """Number of Bernoulli(p) trials up to and including the first success."""
        return self.rng.geometric(p, size=size)

    def exponential(self, mean: float, size: int) -> np.ndarray:
        """Exponential draws with the given mean (not released, e.g. a user's secret noise variance)."""
        return self.rng.exponential(mean, size=size)

    def normal(self, size: int) -> np.ndarray:
        """Standard normal draws (for data generation, not for privacy noise)."""
        return self.rng.standard_normal(size)

    def add_laplace(self, x: np.ndarray, scale: float) -> np.ndarray:
        """x + Laplace(scale) elementwise."""
        return x + self.rng.laplace(0.0, scale, size=len(x))

    def add_gaussian(self, x: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """x + N(0, scale^2) elementwise, scale per element."""
        return x + self.rng.standard_normal(len(x)) * scale


class SecureSampler:
    """Production sampler: os.urandom uniforms; OpenDP Laplace/Gaussian when installed, else grid noise."""

    secure = True

    def __init__(self, use_opendp: bool | None = None) -> None:
        self.use_opendp = opendp_available() if use_opendp is None else use_opendp
        self.description = (
            "OpenDP measurements (exact discrete sampling) with os.urandom" if self.use_opendp
            else "grid-snapped discrete noise from os.urandom (OpenDP not installed)"
        )

    def uniform(self, size: int) -> np.ndarray:
        """Uniform floats in [0, 1) with 53 random bits each, from os.urandom."""
        raw = np.frombuffer(os.urandom(8 * size), dtype=np.uint64)
        return (raw >> np.uint64(11)).astype(np.float64) * 2.0**-53

    def integers(self, high: int, size: int) -> np.ndarray:
        """Uniform integers in [0, high) (bias < 2^-40 for high < 2^13)."""
        raw = np.frombuffer(os.urandom(8 * size), dtype=np.uint64)
        return (raw % np.uint64(high)).astype(np.int64)

    def geometric(self, p: float, size: int) -> np.ndarray:
        """Trials up to the first success of Bernoulli(p), by inversion of secure uniforms."""
        if p >= 1.0:
            return np.ones(size, dtype=np.int64)
        u = 1.0 - self.uniform(size)  # (0, 1]
        return np.floor(np.log(u) / math.log1p(-p)).astype(np.int64) + 1

    def exponential(self, mean: float, size: int) -> np.ndarray:
        """Exponential draws with the given mean, by inversion of secure uniforms."""
        return -mean * np.log(1.0 - self.uniform(size))

    def normal(self, size: int) -> np.ndarray:
        """Standard normal draws by Box-Muller on secure uniforms."""
        u1, u2 = 1.0 - self.uniform(size), self.uniform(size)
        return np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * u2)

    # ----------------------------------------------------------------- released noise
    @staticmethod
    def _grid(scale: float) -> float:
        return 2.0 ** (math.floor(math.log2(scale)) - 12)

    def add_laplace(self, x: np.ndarray, scale: float) -> np.ndarray:
        """x + Laplace(scale): OpenDP make_laplace on the vector, else discrete Laplace on a 2^k grid."""
        x = np.asarray(x, dtype=np.float64)
        if len(x) == 0:
            return x.copy()
        if self.use_opendp:
            import opendp.prelude as dp

            dp.enable_features("contrib")
            meas = dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T=float, nan=False)),
                                     dp.l1_distance(T=float), scale=float(scale))
            return np.asarray(meas(x.tolist()), dtype=np.float64)
        g = self._grid(scale)
        t = scale / g
        p = -math.expm1(-1.0 / t)  # discrete Laplace(t) = Geometric(p) - Geometric(p)
        z = self.geometric(p, len(x)) - self.geometric(p, len(x))
        return np.round(x / g) * g + z * g

    def add_gaussian(self, x: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """x + N(0, scale^2), scale per element: one OpenDP make_gaussian call per distinct scale, else grid noise."""
        x = np.asarray(x, dtype=np.float64)
        scale = np.broadcast_to(np.asarray(scale, dtype=np.float64), x.shape)
        if len(x) == 0:
            return x.copy()
        if self.use_opendp:
            import opendp.prelude as dp

            dp.enable_features("contrib")
            out = np.empty_like(x)
            uniq, inv = np.unique(scale, return_inverse=True)
            order = np.argsort(inv, kind="stable")
            bounds = np.searchsorted(inv[order], np.arange(len(uniq) + 1))
            space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l2_distance(T=float)
            for j, s in enumerate(uniq):  # one call per source (per distinct secret variance), vectorized inside
                idx = order[bounds[j]:bounds[j + 1]]
                out[idx] = dp.m.make_gaussian(*space, scale=float(s))(x[idx].tolist())
            return out
        g = np.array([self._grid(float(s)) for s in np.unique(scale)])
        gs = g[np.searchsorted(np.unique(scale), scale)]
        z = np.round(self.normal(len(x)) * scale / gs)
        return np.round(x / gs) * gs + z * gs


def make_sampler(seed: int | np.random.Generator | None, *, use_opendp: bool | None = None):
    """ExperimentSampler for a seed (reproducible, not for production), SecureSampler for None."""
    if seed is None:
        return SecureSampler(use_opendp=use_opendp)
    return ExperimentSampler(seed)
