"""``synthesize``: PrisCrowd (weighted KDE + Algorithm 1 + Theorem 2) or the Basic baseline over flat claim arrays.

Documented behaviour for edge cases:
- Bandwidth: per object Silverman's rule (``kde.silverman_bandwidth``), never below the data's cell width; an object
  whose claims are all equal (zero spread) gets h = cell width, and the report says so. ``bandwidth`` may be given as
  one positive number or a mapping object -> positive number.
- Cell: ``resolution`` or, by default, the decimal resolution of all claims (``kde.decimal_resolution``).
- Objects with fewer than k claims (Theorem 2 needs |D_i| >= k) and, for k = 1, every object (no integer 1 <= t < k)
  are withheld with ``small_objects='withhold'``; with ``'release'`` they run through the same Algorithm 1 and are
  marked ``guarantee_holds=False``.
- ``weight_floor`` (ours, not in PrisCrowd; default 0.1, 0 = the paper): sampling weights are clipped at
  weight_floor * max c per object, bounding max c / min c by 1/weight_floor and so Theorem 2's epsilon (at most
  epsilon0 + log(1 + 10 gamma / t)). Hampel weights can be exactly 0 (a claim at or beyond q3, which with q3 = max
  residual is often the farthest claim) or nearly so (claims off a majority of identical claims), see ``weights``;
  Theorem 2's epsilon is then infinite or huge. Measured on Population (``bench/synth.py``, ``floor_effect``; m=30,
  k=5, gamma=4, seeds 7-9): the floor changes c on 118 of the 201 objects with >= k claims; without it 61 of them
  have min c = 0 (epsilon = inf) and the per-value median epsilon is 10.95 (4.71 with it); ISE/SISE differ by at
  most 4% and not in one direction (201 objects: 9.19/1.015 with the floor, 9.07/0.992 without; all 1,172 objects
  released: 90.98/13.34 vs 90.38/13.57). The default keeps the floor for the finite epsilon.
- ``hampel_quantiles`` (default (50, 95, 100)), ``hampel_center`` ('median' | 'kde') and ``global_loss`` ('sum' |
  'mean'): how local and global weights are computed; the defaults follow robust KDE's code and Eq. (2) as printed,
  the others are documented with measured effects in ``weights``. Bad values raise ArgumentError.
- Composition (``accounting.compose``): Theorem 2's (epsilon, delta) bounds one candidate; each object's report adds
  its figure over the ``tried`` candidates (released and rejected): ``epsilon_object_basic``/``delta_object_basic``,
  ``epsilon_object_advanced``/``delta_object_advanced`` (advanced composition with delta' = ``composition_delta``,
  default 1e-6) and ``epsilon_object``/``delta_object`` = the one with the smaller epsilon, named in ``composition``.
  The summary's ``epsilon_release``/``delta_release`` (max over the objects that ran with a guarantee) is the
  guarantee of the release as a whole; ``epsilon``/``delta`` stay the paper's per-value figures. For 'basic' every
  claim is noised once and a claim only moves its own output: the object's figure is the per-claim one ('parallel').
- ``epsilon``: for 'basic' the Laplace epsilon (default 1.0); for 'priscrowd' an optional target that picks t
  (see ``accounting``); objects that cannot meet it are withheld (or released without guarantee).
- ``streams`` (ours): 'shared' (default) draws every object from one Generator, objects batched by size (the pins
  hold this); 'object' gives each object its own stream, ``object_stream(seed, label)``, and runs it on its own
  (``release_object``/``basic_object``: its claims ordered by value then source text), with the global weights of
  Eq. (2) summed exactly per source (``exact_global_weights``, math.fsum): an object's rows then depend only on its
  claims, the per-source weights, the cell and the seed, never on the other objects' order or batching. This is
  what crowddb.spark.private_synth computes, row for row; its rows differ from 'shared' ones for the same seed, and
  its g from the batched sums of ``weights.global_weights`` by rounding.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import itertools
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from crowddb._random import make_rng
from crowddb.errors import ArgumentError, EmptyInputError
from crowddb.synth.accounting import COMPOSITION_DELTA, choose_t, compose, theorem2
from crowddb.synth.basic import laplace_release
from crowddb.synth.kde import Batch, decimal_resolution, gram, make_batches, rkhs_sq_dist, silverman_bandwidth
from crowddb.synth.sampler import _decimals, release_batch
from crowddb.synth.weights import (
    GLOBAL_LOSSES,
    HAMPEL_CENTERS,
    HAMPEL_QUANTILES,
    _normalize,
    combined_weights,
    floor_weights,
    global_weights,
    hampel_irwls,
    object_weights,
)

METHODS = ("priscrowd", "basic")
WEIGHTS = ("combined", "global", "uniform")
SMALL = ("withhold", "release")
STREAMS = ("shared", "object")
REPORT_COLUMNS = ["object", "n_claims", "released", "rows", "reached_m", "tried", "rejected", "epsilon", "delta",
                  "guarantee_holds", "reason", "t", "bandwidth", "epsilon_object_basic", "delta_object_basic",
                  "epsilon_object_advanced", "delta_object_advanced", "epsilon_object", "delta_object", "composition"]
# Eq. (2)'s iteration limits of weights.global_weights, which exact_global_weights shares
GLOBAL_MAX_ITER = inspect.signature(global_weights).parameters["max_iter"].default
GLOBAL_TOL = inspect.signature(global_weights).parameters["tol"].default


SCOPE = {
    "priscrowd": "Theorem 2 per candidate of an object: one claim of D_i replaced, c taken as fixed inputs (as in the "
                 "paper); an object composes over every candidate tried (released or rejected); objects are "
                 "disjoint (max over them); a source with claims on several objects adds up their figures",
    "basic": "Laplace mechanism per claim with the stated sensitivity; data-range sensitivity gives no guarantee",
}


@dataclass
class SynthResult:
    """Synthetic rows, the per-object privacy report and an overall summary of one release."""

    rows: pd.DataFrame
    report: pd.DataFrame
    summary: dict[str, Any]
    weights: pd.DataFrame = field(repr=False, default_factory=pd.DataFrame)  # secret: per-claim c (not for release)
    trace: pd.DataFrame = field(repr=False, default_factory=pd.DataFrame)  # secret: bucket/k~/k' per released row


@dataclass(frozen=True)
class Spec:
    """The checked arguments of one release, as given (every object's run reads them), and the data's cell."""

    method: str
    m: int
    k: int
    gamma: float
    epsilon0: float
    weights: str
    t: int | None
    small_objects: str
    epsilon: float | None
    attempts: int
    weight_floor: float
    privacy_test: bool
    hampel_quantiles: tuple[float, float, float]
    global_loss: str
    hampel_center: str
    composition_delta: float
    bandwidth: Any
    sensitivity: Any
    cell: float = 1.0


class _Accounting(NamedTuple):
    """Theorem 2 per object: t, (epsilon, delta), whether it runs and whether its guarantee holds."""

    t: np.ndarray
    eps: np.ndarray
    delta: np.ndarray
    run: np.ndarray
    holds: np.ndarray


@dataclass
class ObjectOut:
    """One object's run (streams='object'): its report's raw fields, released rows and per-claim weights c."""

    fields: dict[str, Any]
    value: np.ndarray
    bucket: np.ndarray
    k_tilde: np.ndarray
    k_prime: np.ndarray
    c: np.ndarray


def _check(m: int, k: int, gamma: float, epsilon0: float, method: str, weights: str, small_objects: str,
           epsilon: float | None, max_attempts: int | None, t: int | None, weight_floor: float,
           composition_delta: float = COMPOSITION_DELTA) -> None:
    """Raise ArgumentError for any out-of-range parameter, naming it."""
    def integer(name: str, v: Any, lo: int) -> None:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ArgumentError(f"{name} must be an integer >= {lo}, got {v!r}")
    integer("m", m, 1)
    integer("k", k, 1)
    if max_attempts is not None:
        integer("max_attempts", max_attempts, 1)
    _one_of("method", method, METHODS)
    _one_of("weights", weights, WEIGHTS)
    _one_of("small_objects", small_objects, SMALL)
    if not (isinstance(gamma, (int, float, np.number)) and math.isfinite(gamma) and gamma > 1):
        raise ArgumentError(f"gamma must be a finite number > 1, got {gamma!r}")
    if not (isinstance(epsilon0, (int, float, np.number)) and math.isfinite(epsilon0) and epsilon0 > 0):
        raise ArgumentError(f"epsilon0 must be a finite number > 0, got {epsilon0!r}")
    if epsilon is not None and not (isinstance(epsilon, (int, float, np.number)) and epsilon > 0):
        raise ArgumentError(f"epsilon must be a number > 0, got {epsilon!r}")
    if t is not None:
        integer("t", t, 1)
        if t >= k:
            raise ArgumentError(f"t must satisfy 1 <= t < k (Theorem 2), got t={t}, k={k}")
    if not 0 <= weight_floor < 1:
        raise ArgumentError(f"weight_floor must be in [0, 1), got {weight_floor!r}")
    if not (isinstance(composition_delta, (int, float, np.number)) and 0 < composition_delta < 1):
        raise ArgumentError(f"composition_delta must be in (0, 1), got {composition_delta!r}")


def _one_of(name: str, value: Any, choices: tuple[str, ...]) -> None:
    """ArgumentError naming ``name`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ArgumentError(f"{name} must be one of {choices}, got {value!r}")


def _quantiles(hampel_quantiles: Any) -> tuple[float, float, float]:
    """Validated Hampel threshold percentiles (p1, p2, p3), 0 <= p1 < p2 < p3 <= 100, as floats."""
    try:
        q = tuple(float(v) for v in hampel_quantiles)
    except (TypeError, ValueError):
        q = ()
    if len(q) != 3 or not all(math.isfinite(v) for v in q) or not 0 <= q[0] < q[1] < q[2] <= 100:
        raise ArgumentError("hampel_quantiles must be three percentiles p1 < p2 < p3 in [0, 100], "
                            f"got {hampel_quantiles!r}")
    return q  # type: ignore[return-value]


def spec_of(m: int = 30, k: int = 5, gamma: float = 4.0, epsilon0: float = 1.0, method: str = "priscrowd",
            weights: str = "combined", bandwidth: float | Mapping[Any, float] | None = None, t: int | None = None,
            small_objects: str = "withhold", epsilon: float | None = None, max_attempts: int | None = None,
            weight_floor: float = 0.1, privacy_test: bool = True,
            sensitivity: float | Mapping[Any, float] | None = None,
            hampel_quantiles: tuple[float, float, float] = HAMPEL_QUANTILES, global_loss: str = "sum",
            hampel_center: str = "median", composition_delta: float = COMPOSITION_DELTA,
            streams: str = "shared") -> Spec:
    """``synthesize``'s arguments checked (ArgumentError naming the bad one) before any data is read; cell 1.0 until
    the data's is known (``dataclasses.replace(spec, cell=...)``)."""
    _check(m, k, gamma, epsilon0, method, weights, small_objects, epsilon, max_attempts, t, weight_floor,
           composition_delta)
    hq = _quantiles(hampel_quantiles)
    _one_of("global_loss", global_loss, GLOBAL_LOSSES)
    _one_of("hampel_center", hampel_center, HAMPEL_CENTERS)
    _one_of("streams", streams, STREAMS)
    attempts = int(max_attempts) if max_attempts is not None else 200 * m
    return Spec(method, m, k, gamma, epsilon0, weights, t, small_objects, epsilon, attempts, weight_floor,
                privacy_test, hq, global_loss, hampel_center, composition_delta, bandwidth, sensitivity)


def check_resolution(resolution: float | None) -> None:
    """ArgumentError unless ``resolution`` is None or a positive number."""
    if resolution is not None and not (math.isfinite(resolution) and resolution > 0):
        raise ArgumentError(f"resolution must be > 0, got {resolution!r}")


def _params(spec: Spec) -> dict[str, Any]:
    """The summary's ``parameters``: 'basic' reports its Laplace epsilon, 'priscrowd' its max_attempts."""
    params = {"m": spec.m, "k": spec.k, "gamma": float(spec.gamma), "epsilon0": float(spec.epsilon0),
              "weights": spec.weights, "t": spec.t, "epsilon": spec.epsilon, "small_objects": spec.small_objects,
              "cell": spec.cell, "weight_floor": spec.weight_floor, "privacy_test": spec.privacy_test,
              "hampel_quantiles": spec.hampel_quantiles, "global_loss": spec.global_loss,
              "hampel_center": spec.hampel_center, "composition_delta": float(spec.composition_delta)}
    if spec.method == "basic":
        params["epsilon"] = _basic_epsilon(spec)
    else:
        params["max_attempts"] = spec.attempts
    return params


def _arrays(objects: Any, sources: Any, values: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Codes for objects and sources, float values; errors for empty, misaligned or non-finite input."""
    o, s = np.asarray(objects, dtype=object).ravel(), np.asarray(sources, dtype=object).ravel()
    try:
        x = np.asarray(values, dtype=float).ravel()
    except (TypeError, ValueError) as e:
        raise ArgumentError(f"value column must be numeric ({e})") from None
    if not (o.size == s.size == x.size):
        raise ArgumentError(f"object, source and value lengths differ ({o.size}, {s.size}, {x.size})")
    if x.size == 0:
        raise EmptyInputError("the input has no claims")
    bad = ~np.isfinite(x)
    if bad.any():
        raise ArgumentError(f"{int(bad.sum())} claim value(s) are NaN or infinite; filter them first "
                            "(e.g. keep only the claims where np.isfinite(value))")
    if pd.isna(pd.Series(o)).any() or pd.isna(pd.Series(s)).any():
        raise ArgumentError("object and source labels must not be NULL")
    oc, ou = pd.factorize(o, sort=False)
    sc, su = pd.factorize(s, sort=False)
    return oc.astype(np.int64), sc.astype(np.int64), x, np.asarray(ou, dtype=object), len(su)


def _bandwidths(b: Batch, bandwidth: Any, labels: np.ndarray, cell: float) -> np.ndarray:
    """Per-object bandwidth of a batch: given number / mapping, else Silverman's rule floored at the cell width."""
    if bandwidth is None:
        return silverman_bandwidth(b.X, b.mask, cell)
    if isinstance(bandwidth, Mapping):
        try:
            h = np.array([float(bandwidth[labels[o]]) for o in b.objs])
        except KeyError as e:
            raise ArgumentError(f"bandwidth mapping has no entry for object {e.args[0]!r}") from None
    else:
        h = np.full(b.objs.size, float(bandwidth))
    if not np.all(np.isfinite(h) & (h > 0)):
        raise ArgumentError(f"bandwidth must be > 0, got {bandwidth!r}")
    return h


# ------------------------------------------------------------------------------------ one stream per object (ours)
def root_seed(seed: Any) -> int:
    """The root of the per-object streams: a non-negative integer seed, or fresh entropy for None."""
    if seed is None:
        return int(np.random.SeedSequence().entropy)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ArgumentError(f"streams='object' derives each object's stream from a non-negative integer seed (or "
                            f"None for fresh entropy), got {seed!r}")
    return int(seed)


def object_stream(seed: int, label: Any) -> np.random.Generator:
    """Object ``label``'s Generator (ours): PCG64 from SeedSequence(seed, spawn_key=the first 16 bytes of
    SHA-256(str(label), UTF-8) as four little-endian uint32), a function of the seed and the label alone."""
    digest = hashlib.sha256(str(label).encode("utf-8", "surrogatepass")).digest()[:16]
    key = tuple(int(w) for w in np.frombuffer(digest, dtype="<u4"))
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))


def canonical_order(values: np.ndarray, source_text: np.ndarray) -> np.ndarray:
    """The order of one object's claims under streams='object': by value, ties by the source's text (claims tied on
    both are identical, so any order of them gives the same run)."""
    return np.lexsort((source_text, values))


def _one(x: np.ndarray) -> Batch:
    """One object's claims as a batch of one row, no padding."""
    n = x.size
    return Batch(objs=np.zeros(1, dtype=np.int64), X=np.asarray(x, dtype=float)[None, :],
                 mask=np.ones((1, n), dtype=bool), src=np.zeros((1, n), dtype=np.int64), pos=np.arange(n)[None, :])


def object_losses(x: np.ndarray, g_claim: np.ndarray, label: Any, spec: Spec) -> np.ndarray:
    """Eq. (2)'s loss of each claim of one object: the RKHS distance to f^g_i = sum_t g_t Phi(x_t) / sum_t g_t."""
    b = _one(x)
    K = gram(b.X, b.mask, _bandwidths(b, spec.bandwidth, np.array([label], dtype=object), spec.cell))
    return rkhs_sq_dist(K, _normalize(np.asarray(g_claim, dtype=float)[None, :], b.mask))[0]


def fsum_segments(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """math.fsum of values[offsets[i]:offsets[i+1]] for each i: exactly rounded, so in no order's debt."""
    v = np.asarray(values, dtype=float)
    return np.array([math.fsum(v[a:b]) for a, b in itertools.pairwise(offsets)], dtype=float)


def source_sums(sid: np.ndarray, d: np.ndarray, n_sources: int) -> np.ndarray:
    """Per source the exact (math.fsum) sum of its claims' losses ``d``; 0 for a source without claims."""
    order = np.argsort(sid, kind="stable")
    s = np.asarray(sid)[order]
    starts = np.concatenate([[0], np.flatnonzero(np.diff(s)) + 1]) if s.size else np.zeros(0, dtype=np.int64)
    out = np.zeros(n_sources)
    out[s[starts]] = fsum_segments(np.asarray(d)[order], np.append(starts, s.size))
    return out


def exact_global_weights(losses: Callable[[np.ndarray], np.ndarray], n_claims: np.ndarray, loss: str
                         ) -> tuple[np.ndarray, int]:
    """Global source weights g by Eq. (2), as ``weights.global_weights`` but with each source's loss summed exactly
    (ours: ``losses(g)`` returns the per-source sums, ``source_sums``; the total is math.fsum), so g does not depend
    on the order of the objects; (g, iterations). Start g = 1, stop when max |dg| <= tol * max |g| or max_iter."""
    n = n_claims.size
    per_claim = 1.0 / np.maximum(n_claims, 1) if loss == "mean" else np.ones(n)  # 'mean': not Eq. 2 (see weights)
    g = np.ones(n)
    for it in range(1, GLOBAL_MAX_ITER + 1):
        src_loss = losses(g) * per_claim
        total = math.fsum(src_loss)
        if total <= 0:
            return np.ones(n), it  # every claim equals its object's consensus: no source is worse
        # Eq. (2): g_s = -log(sum_i d_is / sum_s' sum_i d_is'); a zero loss is floored to keep g finite
        new = -np.log(np.maximum(src_loss, 1e-12 * total) / total)
        done = np.max(np.abs(new - g)) <= GLOBAL_TOL * max(np.max(np.abs(new)), 1e-12)
        g = new
        if done:
            return g, it
    return g, GLOBAL_MAX_ITER


def _batch_weights(b: Batch, K: np.ndarray, g_claim: np.ndarray, spec: Spec) -> np.ndarray:
    """Sampling weights c of a batch from the global weights of its claims' sources (``weights.object_weights``)."""
    if spec.weights == "uniform":
        c = _normalize(np.ones(b.mask.shape), b.mask)
    elif spec.weights == "global":
        c = _normalize(g_claim, b.mask)
    else:
        local = hampel_irwls(K, b.mask, quantiles=spec.hampel_quantiles, center=spec.hampel_center)
        c = combined_weights(local, g_claim, b.mask)  # Eq. (4)/(5): c ∝ sqrt(l g)
    return floor_weights(c, b.mask, spec.weight_floor)


def release_object(x: np.ndarray, g_claim: np.ndarray, label: Any, spec: Spec, rng: np.random.Generator
                   ) -> ObjectOut:
    """PrisCrowd on one object's claims ``x`` (canonical order) with the global weights of their sources: bandwidth,
    weights c (Eq. 4/5), Theorem 2 and Algorithm 1 from ``rng``, as ``synthesize`` runs a batch of one object."""
    b = _one(x)
    h = _bandwidths(b, spec.bandwidth, np.array([label], dtype=object), spec.cell)
    c = _batch_weights(b, gram(b.X, b.mask, h), np.asarray(g_claim, dtype=float)[None, :], spec)
    cmax, cmin = _extremes(b, c)
    acc = _accounting(b.counts, cmax, cmin, spec)
    if acc.run[0]:
        rel = release_batch(b, c, h, spec.cell, spec.m, spec.k, spec.gamma, spec.epsilon0, spec.attempts, rng,
                            test=spec.privacy_test)
        out = (rel.value, rel.bucket, rel.k_tilde, rel.k_prime)
        tried, rows = int(rel.tried[0]), int(rel.accepted[0])
    else:
        out = (np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=np.int64))
        tried = rows = 0
    fields = {"n_claims": x.size, "rows": rows, "tried": tried, "epsilon": acc.eps[0], "delta": acc.delta[0],
              "guarantee_holds": acc.holds[0], "t": acc.t[0], "bandwidth": h[0], "run": acc.run[0],
              "spread": _spread(b)[0]}
    return ObjectOut(fields, *out, c=c[0])


def basic_object(x: np.ndarray, label: Any, spec: Spec, rng: np.random.Generator) -> ObjectOut:
    """The Basic baseline on one object's claims ``x`` (canonical order): each claim plus Laplace noise, the noisy
    values released sorted (ours: the canonical order is by true value, which the release must not show)."""
    sens = _sensitivities(spec.sensitivity, np.array([label], dtype=object))
    noisy, _ = laplace_release(np.zeros(x.size, dtype=np.int64), x, 1, _basic_epsilon(spec), sens, spec.cell, rng)
    value = np.sort(np.round(noisy, _decimals(spec.cell) + 2))  # by value: the claims' order is not released
    empty = np.zeros(0, dtype=np.int64)
    return ObjectOut({"n_claims": x.size, "guarantee_holds": sens is not None}, value, empty, np.zeros(0), empty,
                     c=np.full(x.size, np.nan))


def object_report(labels: np.ndarray, fields: Mapping[str, np.ndarray], spec: Spec) -> pd.DataFrame:
    """The report rows of objects run one by one, from their ``ObjectOut.fields`` stacked per field."""
    counts = np.asarray(fields["n_claims"], dtype=np.int64)
    if spec.method == "basic":
        return _basic_report(labels, counts, _basic_epsilon(spec), bool(np.all(fields["guarantee_holds"])))
    acc = _Accounting(np.asarray(fields["t"], dtype=np.int64), np.asarray(fields["epsilon"], dtype=float),
                      np.asarray(fields["delta"], dtype=float), np.asarray(fields["run"], dtype=bool),
                      np.asarray(fields["guarantee_holds"], dtype=bool))
    return _report_frame(labels, counts, np.asarray(fields["rows"], dtype=np.int64),
                         np.asarray(fields["tried"], dtype=np.int64), acc, np.asarray(fields["bandwidth"], dtype=float),
                         np.asarray(fields["spread"], dtype=bool), spec)


# ------------------------------------------------------------------------------------ synthesize
def synthesize(objects: Any, sources: Any, values: Any, m: int = 30, k: int = 5, gamma: float = 4.0,
               epsilon0: float = 1.0, method: str = "priscrowd", weights: str = "combined",
               bandwidth: float | Mapping[Any, float] | None = None, t: int | None = None,
               small_objects: str = "withhold", epsilon: float | None = None, max_attempts: int | None = None,
               seed: int | np.random.Generator | None = None, resolution: float | None = None,
               weight_floor: float = 0.1, privacy_test: bool = True,
               sensitivity: float | Mapping[Any, float] | None = None,
               hampel_quantiles: tuple[float, float, float] = HAMPEL_QUANTILES,
               global_loss: str = "sum", hampel_center: str = "median",
               composition_delta: float = COMPOSITION_DELTA, streams: str = "shared") -> SynthResult:
    """Release m synthetic claims per object by PrisCrowd (or Laplace-noised claims for method='basic')."""
    t0 = time.perf_counter()
    spec = spec_of(m, k, gamma, epsilon0, method, weights, bandwidth, t, small_objects, epsilon, max_attempts,
                   weight_floor, privacy_test, sensitivity, hampel_quantiles, global_loss, hampel_center,
                   composition_delta, streams)
    obj, src, x, labels, n_src = _arrays(objects, sources, values)
    check_resolution(resolution)
    cell = float(resolution) if resolution is not None else decimal_resolution(x)
    spec = dataclasses.replace(spec, cell=cell)
    params = _params(spec)
    if streams == "object":
        return _by_object(obj, src, x, labels, n_src, _source_text(sources), spec, params, root_seed(seed), t0)
    rng = make_rng(seed)
    n_obj = labels.size
    counts = np.bincount(obj, minlength=n_obj)
    if method == "basic":
        return _basic(obj, x, labels, counts, spec, rng, params)
    batches = make_batches(obj, src, x)
    hs = [_bandwidths(b, bandwidth, labels, cell) for b in batches]
    grams = [gram(b.X, b.mask, h) for b, h in zip(batches, hs)]
    cs, _ = object_weights(batches, grams, n_src, weights, weight_floor, spec.hampel_quantiles, global_loss,
                           hampel_center)
    t1 = time.perf_counter()

    # per-object accounting (Theorem 2) and eligibility
    h_obj = np.zeros(n_obj)
    cmax, cmin = np.ones(n_obj), np.ones(n_obj)
    for b, h, c in zip(batches, hs, cs):
        h_obj[b.objs] = h
        cmax[b.objs], cmin[b.objs] = _extremes(b, c)
    acc = _accounting(counts, cmax, cmin, spec)

    tried, rows_n = (np.zeros(n_obj, dtype=np.int64) for _ in range(2))
    out_o, out_v, tr = [], [], []
    for b, h, c in zip(batches, hs, cs):
        keep = acc.run[b.objs]
        if not keep.any():
            continue
        sub = Batch(objs=b.objs[keep], X=b.X[keep], mask=b.mask[keep], src=b.src[keep], pos=b.pos[keep])
        rel = release_batch(sub, c[keep], h[keep], cell, m, k, gamma, epsilon0, spec.attempts, rng,
                            test=privacy_test)
        tried[sub.objs] = rel.tried
        rows_n[sub.objs] = rel.accepted
        out_o.append(sub.objs[rel.row])
        out_v.append(rel.value)
        tr.append(pd.DataFrame({"code": sub.objs[rel.row], "value": rel.value, "bucket": rel.bucket,
                                "k_tilde": rel.k_tilde, "k_prime": rel.k_prime}))

    t2 = time.perf_counter()
    oc = np.concatenate(out_o) if out_o else np.zeros(0, dtype=np.int64)
    vals = np.concatenate(out_v) if out_v else np.zeros(0)
    order = np.argsort(oc, kind="stable")  # objects in order of first appearance in the input
    rows = pd.DataFrame({"object": labels[oc[order]], "value": vals[order]})
    trace = pd.concat(tr, ignore_index=True) if tr else pd.DataFrame(columns=["code", "value", "bucket"])
    trace = trace.iloc[np.argsort(trace["code"].to_numpy(), kind="stable")].reset_index(drop=True)
    trace.insert(0, "object", labels[trace["code"].to_numpy(dtype=np.int64)])
    trace["bandwidth"] = h_obj[trace["code"].to_numpy(dtype=np.int64)]

    spread = np.zeros(n_obj, dtype=bool)
    for b in batches:
        spread[b.objs] = _spread(b)
    report = _report_frame(labels, counts, rows_n, tried, acc, h_obj, spread, spec)
    wdf = pd.concat([pd.DataFrame({"object": labels[b.objs[np.nonzero(b.mask)[0]]], "claim": b.pos[b.mask],
                                   "c": c[b.mask]}) for b, c in zip(batches, cs)], ignore_index=True)
    wdf = wdf.sort_values("claim", kind="stable").reset_index(drop=True)
    summary = _summary("priscrowd", report, params)
    summary["seconds"] = {"weights": t1 - t0, "sampling": t2 - t1, "total": time.perf_counter() - t0}
    return SynthResult(rows=rows, report=report, summary=summary, weights=wdf, trace=trace.drop(columns="code"))


def _extremes(b: Batch, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(max c, min c) of each object of a batch, over its claims."""
    return np.max(np.where(b.mask, c, -np.inf), axis=1), np.min(np.where(b.mask, c, np.inf), axis=1)


def _spread(b: Batch) -> np.ndarray:
    """Whether each object of a batch has two different claims."""
    Xn = np.where(b.mask, b.X, np.nan)
    return np.nanmax(Xn, axis=1) > np.nanmin(Xn, axis=1)


def _accounting(counts: np.ndarray, cmax: np.ndarray, cmin: np.ndarray, spec: Spec) -> _Accounting:
    """Theorem 2 per object (t chosen or given), eligibility (|D_i| >= k and a t), who runs, whose guarantee holds."""
    k = spec.k
    with np.errstate(divide="ignore"):  # weight_floor=0 may give min c = 0: epsilon = inf
        ratio = cmax / cmin
        t_obj = (choose_t(ratio, k, spec.gamma, spec.epsilon0, spec.epsilon) if spec.t is None
                 else np.full(counts.size, spec.t))
        eps, delta = theorem2(counts, cmax, cmin, k, spec.gamma, spec.epsilon0, np.maximum(t_obj, 1))
    eligible = (counts >= k) & (t_obj >= 1)
    eps, delta = np.where(t_obj >= 1, eps, np.inf), np.where(t_obj >= 1, delta, np.nan)
    run = eligible | (spec.small_objects == "release")
    holds = eligible & spec.privacy_test  # without the test (benchmarks only) Theorem 2 does not apply
    return _Accounting(t_obj, eps, delta, run, holds)


def _report_frame(labels: np.ndarray, counts: np.ndarray, rows_n: np.ndarray, tried: np.ndarray,
                  acc: _Accounting, h_obj: np.ndarray, spread: np.ndarray, spec: Spec) -> pd.DataFrame:
    """PrisCrowd's per-object report: counts, Theorem 2's figures, why an object is short or withheld, composition."""
    k, m, epsilon = spec.k, spec.m, spec.epsilon
    reasons = []
    for i in range(labels.size):
        r = []
        if counts[i] < k:
            r.append(f"fewer than k={k} claims")
        if k < 2:
            r.append("k=1 admits no t with 1 <= t < k (Theorem 2)")
        elif acc.t[i] < 1:
            r.append(f"no t in 1..{k - 1} meets epsilon <= {epsilon}")
        if not spec.privacy_test:
            r.append("privacy test disabled: no guarantee")
        if not acc.run[i]:
            r.append("withheld")
        elif rows_n[i] < m:
            r.append(f"max_attempts={spec.attempts} reached with {rows_n[i]} of m={m} rows")
        if not spread[i] and spec.bandwidth is None:
            r.append("all claims equal: bandwidth = cell width")
        reasons.append("; ".join(r))
    report = pd.DataFrame({"object": labels, "n_claims": counts, "released": rows_n > 0, "rows": rows_n,
                           "reached_m": rows_n >= m, "tried": tried, "rejected": tried - rows_n,
                           "epsilon": acc.eps, "delta": acc.delta, "guarantee_holds": acc.holds, "reason": reasons,
                           "t": acc.t, "bandwidth": h_obj})
    return _with_composition(report, spec.composition_delta)


def _source_text(sources: Any) -> np.ndarray:
    """str() of each claim's source (the tie order of streams='object'), from the distinct sources of ``_arrays``."""
    codes, uniques = pd.factorize(np.asarray(sources, dtype=object).ravel(), sort=False)
    return np.array([str(u) for u in uniques] or [""], dtype=str)[codes]


def _by_object(obj: np.ndarray, src: np.ndarray, x: np.ndarray, labels: np.ndarray, n_src: int,
               source_text: np.ndarray, spec: Spec, params: dict[str, Any], seed: int, t0: float) -> SynthResult:
    """streams='object' (ours): every object on its own, from its own stream (``object_stream``)."""
    params["streams"] = "object"
    n_obj = labels.size
    counts = np.bincount(obj, minlength=n_obj)
    order = np.lexsort((source_text, x, obj))  # by object, then each object's canonical order
    cuts = np.cumsum(counts)[:-1]
    xs, ss = np.split(x[order], cuts), np.split(src[order], cuts)
    g = np.ones(n_src)
    if spec.method == "priscrowd" and spec.weights != "uniform":
        flat = src[order]

        def losses(g: np.ndarray) -> np.ndarray:
            d = [object_losses(xs[i], g[ss[i]], labels[i], spec) for i in range(n_obj)]
            return source_sums(flat, np.concatenate(d), g.size)
        g, _ = exact_global_weights(losses, np.bincount(src, minlength=g.size), spec.global_loss)
    t1 = time.perf_counter()
    if spec.method == "basic":
        outs = [basic_object(xs[i], labels[i], spec, object_stream(seed, labels[i])) for i in range(n_obj)]
    else:
        outs = [release_object(xs[i], g[ss[i]], labels[i], spec, object_stream(seed, labels[i]))
                for i in range(n_obj)]
    t2 = time.perf_counter()
    report = object_report(labels, {f: [o.fields[f] for o in outs] for f in outs[0].fields}, spec)
    n_rows = np.array([o.value.size for o in outs])
    rows = pd.DataFrame({"object": np.repeat(labels, n_rows), "value": np.concatenate([o.value for o in outs])})
    summary = _summary(spec.method, report, params)
    if spec.method == "basic":
        return SynthResult(rows=rows, report=report, summary=summary)
    trace = rows.assign(bucket=np.concatenate([o.bucket for o in outs]),
                        k_tilde=np.concatenate([o.k_tilde for o in outs]),
                        k_prime=np.concatenate([o.k_prime for o in outs]),
                        bandwidth=np.repeat(report["bandwidth"].to_numpy(), n_rows))
    wdf = pd.DataFrame({"object": labels[obj[order]], "claim": order, "c": np.concatenate([o.c for o in outs])})
    wdf = wdf.sort_values("claim", kind="stable").reset_index(drop=True)
    summary["seconds"] = {"weights": t1 - t0, "sampling": t2 - t1, "total": time.perf_counter() - t0}
    return SynthResult(rows=rows, report=report, summary=summary, weights=wdf, trace=trace)


def _with_composition(report: pd.DataFrame, delta_prime: float) -> pd.DataFrame:
    """The report with each object's (epsilon, delta) composed over its ``tried`` candidates (``compose``)."""
    c = compose(report["epsilon"].to_numpy(float), report["delta"].to_numpy(float), report["tried"].to_numpy(),
                delta_prime)
    return report.assign(epsilon_object_basic=c["epsilon_basic"], delta_object_basic=c["delta_basic"],
                         epsilon_object_advanced=c["epsilon_advanced"], delta_object_advanced=c["delta_advanced"],
                         epsilon_object=c["epsilon"], delta_object=c["delta"], composition=c["composition"])


# ------------------------------------------------------------------------------------ the summary, from mergeable parts
def summary_parts(report: pd.DataFrame, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """The counts and maxima of some report rows that ``summary_from_parts`` reads: computed on any split of a
    report's rows (Spark's partitions) and merged (``merge_parts``), they give the summary of the whole report."""
    g1 = report[report["guarantee_holds"] & report["released"]]
    g = report[report["guarantee_holds"] & (report["tried"] > 0)]
    parts: dict[str, Any] = {
        "objects": len(report), "objects_released": int(report["released"].sum()),
        "objects_withheld": int((report["tried"] == 0).sum()),
        "objects_without_guarantee_released": int((report["released"] & ~report["guarantee_holds"]).sum()),
        "objects_short_of_m": int(((report["tried"] > 0) & ~report["reached_m"]).sum()),
        "rows": int(report["rows"].sum()), "tried": int(report["tried"].sum()),
        "rejected": int(report["rejected"].sum()), "guaranteed_released": len(g1), "guaranteed_run": len(g)}
    for key, frame, col in (("epsilon", g1, "epsilon"), ("delta", g1, "delta"), ("epsilon_release", g, "epsilon_object"),
                            ("delta_release", g, "delta_object"), ("epsilon_release_basic", g, "epsilon_object_basic"),
                            ("epsilon_release_advanced", g, "epsilon_object_advanced")):
        parts[key] = float(frame[col].max()) if len(frame) else None
    parts["composition_release"] = str(g.loc[g["epsilon_object"].idxmax(), "composition"]) if len(g) else None
    parts["epsilon_release_max_attempts"] = parts["delta_release_max_attempts"] = None
    if method == "priscrowd" and len(g):  # worst case over runs: every guaranteed object drawing max_attempts
        w = compose(g["epsilon"].to_numpy(float), g["delta"].to_numpy(float),
                    np.full(len(g), int(params["max_attempts"])), params["composition_delta"])
        parts["epsilon_release_max_attempts"] = float(w["epsilon"].max())
        parts["delta_release_max_attempts"] = float(w["delta"].max())
    return parts


def merge_parts(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """``summary_parts`` of disjoint row sets merged: counts added, maxima taken (NaN skipped, as pandas); the
    composition of the largest epsilon_release, ties between parts broken by the name (ours: pandas takes the first
    row, which an unordered set of rows has not; tied objects of different compositions are not seen in practice)."""
    out: dict[str, Any] = {}
    for key in parts[0]:
        vals = [p[key] for p in parts if p[key] is not None]
        if key == "composition_release":
            continue
        if not vals:
            out[key] = None
        elif isinstance(vals[0], int):
            out[key] = int(sum(vals))
        else:
            out[key] = float(np.fmax.reduce(np.asarray(vals, dtype=float)))
    top = [p for p in parts if p["epsilon_release"] is not None]
    tied = [p["composition_release"] for p in top if p["epsilon_release"] == out["epsilon_release"]]
    out["composition_release"] = min(tied or [p["composition_release"] for p in top] or [None])
    return out


def summary_from_parts(method: str, parts: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """Overall figures: epsilon/delta = max over released objects whose guarantee holds (per value, the paper's);
    epsilon_release/delta_release = the release's guarantee (``_release_figures``)."""
    return {
        "method": method, "epsilon": parts["epsilon"], "delta": parts["delta"],
        **_release_figures(method, parts),
        **{key: parts[key] for key in ("objects", "objects_released", "objects_withheld",
                                       "objects_without_guarantee_released", "objects_short_of_m", "rows", "tried",
                                       "rejected")},
        "parameters": params,
        "scope": SCOPE[method],
    }


def _summary(method: str, report: pd.DataFrame, params: dict[str, Any]) -> dict[str, Any]:
    """The summary of a whole report (``summary_from_parts`` of its one part)."""
    return summary_from_parts(method, summary_parts(report, method, params), params)


def _release_figures(method: str, parts: dict[str, Any]) -> dict[str, Any]:
    """The release-as-a-whole guarantee: max over objects that ran with a guarantee of their composed figures."""
    if not parts["guaranteed_run"]:
        return {"epsilon_release": None, "delta_release": None, "composition_release": None,
                "epsilon_release_basic": None, "epsilon_release_advanced": None,
                "epsilon_release_max_attempts": None, "delta_release_max_attempts": None,
                "guarantee": "no object was released with a guarantee: this release has no (epsilon, delta)"}
    out = {key: parts[key] for key in ("epsilon_release", "delta_release", "composition_release",
                                       "epsilon_release_basic", "epsilon_release_advanced")}
    out |= {"epsilon_release_max_attempts": parts["epsilon_release_max_attempts"],
            "delta_release_max_attempts": parts["delta_release_max_attempts"]}
    if method == "priscrowd":
        unit = ("one claim of one object replaced; an object's figure composes Theorem 2 over every candidate it "
                "tried, released or rejected; objects are disjoint, so the release is the max over objects; a "
                "source with claims on several objects adds up their figures")
        per_value = [f"{parts[key]:.6g}" if parts["guaranteed_released"] else "-" for key in ("epsilon", "delta")]
        paper = (f"the per-value (epsilon, delta) = ({per_value[0]}, {per_value[1]}) is the "
                 "paper's Theorem 2 for one released value, not the release's guarantee")
    else:
        unit = "one claim replaced; each claim is noised once (parallel composition)"
        paper = "per value = per object (Laplace mechanism)"
    out["guarantee"] = (f"the release as a whole is ({out['epsilon_release']:.6g}, {out['delta_release']:.6g})-DP "
                        f"({out['composition_release']} composition; {unit}); this is the guarantee; {paper}")
    if not math.isfinite(out["epsilon_release"]):
        out["guarantee"] += ("; epsilon = inf: an object has a sampling weight c = 0 (Theorem 2 gives no finite "
                             "bound; weight_floor > 0 bounds it)")
    elif out["delta_release"] >= 1:
        out["guarantee"] += "; delta >= 1: the figure bounds nothing"
    n_bad = parts["objects_without_guarantee_released"]
    if n_bad:
        out["guarantee"] += f"; {n_bad} object(s) released without a guarantee are not covered"
    return out


# ------------------------------------------------------------------------------------ Basic
def _basic_epsilon(spec: Spec) -> float:
    """Basic's Laplace epsilon: the given one, else 1.0."""
    return 1.0 if spec.epsilon is None else float(spec.epsilon)


def _sensitivities(sensitivity: Any, labels: np.ndarray) -> np.ndarray | None:
    """Basic's per-object sensitivity (a number or a mapping object -> number), None for the data range."""
    if isinstance(sensitivity, Mapping):
        try:
            sens = np.array([float(sensitivity[lab]) for lab in labels])
        except KeyError as e:
            raise ArgumentError(f"sensitivity mapping has no entry for object {e.args[0]!r}") from None
    else:
        sens = None if sensitivity is None else np.full(labels.size, float(sensitivity))
    if sens is not None and not np.all(np.isfinite(sens) & (sens > 0)):
        raise ArgumentError(f"sensitivity must be > 0, got {sensitivity!r}")
    return sens


def _basic(obj: np.ndarray, x: np.ndarray, labels: np.ndarray, counts: np.ndarray, spec: Spec,
           rng: np.random.Generator, params: dict[str, Any]) -> SynthResult:
    """Basic baseline: Laplace noise on every original claim (see ``basic``)."""
    eps = _basic_epsilon(spec)
    sens = _sensitivities(spec.sensitivity, labels)
    noisy, _ = laplace_release(obj, x, labels.size, eps, sens, spec.cell, rng)
    order = np.argsort(obj, kind="stable")
    rows = pd.DataFrame({"object": labels[obj[order]], "value": np.round(noisy[order], _decimals(spec.cell) + 2)})
    report = _basic_report(labels, counts, eps, sens is not None)
    return SynthResult(rows=rows, report=report, summary=_summary("basic", report, params))


def _basic_report(labels: np.ndarray, counts: np.ndarray, eps: float, holds: bool) -> pd.DataFrame:
    """Basic's per-object report: every claim released once at eps (parallel composition)."""
    report = pd.DataFrame({"object": labels, "n_claims": counts, "released": counts > 0, "rows": counts,
                           "reached_m": True, "tried": counts, "rejected": 0, "epsilon": eps, "delta": 0.0,
                           "guarantee_holds": holds,
                           "reason": "" if holds else "sensitivity = range of the object's claims (data-dependent)",
                           "t": 0, "bandwidth": np.nan})
    return report.assign(epsilon_object_basic=eps, delta_object_basic=0.0, epsilon_object_advanced=np.nan,
                         delta_object_advanced=np.nan, epsilon_object=eps, delta_object=0.0, composition="parallel")
