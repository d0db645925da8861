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
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from crowddb._random import make_rng
from crowddb.errors import ArgumentError, EmptyInputError
from crowddb.synth.accounting import COMPOSITION_DELTA, choose_t, compose, theorem2
from crowddb.synth.basic import laplace_release
from crowddb.synth.kde import Batch, decimal_resolution, gram, make_batches, silverman_bandwidth
from crowddb.synth.sampler import _decimals, release_batch
from crowddb.synth.weights import GLOBAL_LOSSES, HAMPEL_CENTERS, HAMPEL_QUANTILES, object_weights

METHODS = ("priscrowd", "basic")
WEIGHTS = ("combined", "global", "uniform")
SMALL = ("withhold", "release")
REPORT_COLUMNS = ["object", "n_claims", "released", "rows", "reached_m", "tried", "rejected", "epsilon", "delta",
                  "guarantee_holds", "reason", "t", "bandwidth", "epsilon_object_basic", "delta_object_basic",
                  "epsilon_object_advanced", "delta_object_advanced", "epsilon_object", "delta_object", "composition"]


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
    if method not in METHODS:
        raise ArgumentError(f"method must be one of {METHODS}, got {method!r}")
    if weights not in WEIGHTS:
        raise ArgumentError(f"weights must be one of {WEIGHTS}, got {weights!r}")
    if small_objects not in SMALL:
        raise ArgumentError(f"small_objects must be one of {SMALL}, got {small_objects!r}")
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


def synthesize(objects: Any, sources: Any, values: Any, m: int = 30, k: int = 5, gamma: float = 4.0,
               epsilon0: float = 1.0, method: str = "priscrowd", weights: str = "combined",
               bandwidth: float | Mapping[Any, float] | None = None, t: int | None = None,
               small_objects: str = "withhold", epsilon: float | None = None, max_attempts: int | None = None,
               seed: int | np.random.Generator | None = None, resolution: float | None = None,
               weight_floor: float = 0.1, privacy_test: bool = True,
               sensitivity: float | Mapping[Any, float] | None = None,
               hampel_quantiles: tuple[float, float, float] = HAMPEL_QUANTILES,
               global_loss: str = "sum", hampel_center: str = "median",
               composition_delta: float = COMPOSITION_DELTA) -> SynthResult:
    """Release m synthetic claims per object by PrisCrowd (or Laplace-noised claims for method='basic')."""
    t0 = time.perf_counter()
    _check(m, k, gamma, epsilon0, method, weights, small_objects, epsilon, max_attempts, t, weight_floor,
           composition_delta)
    hq = _quantiles(hampel_quantiles)
    if global_loss not in GLOBAL_LOSSES:
        raise ArgumentError(f"global_loss must be one of {GLOBAL_LOSSES}, got {global_loss!r}")
    if hampel_center not in HAMPEL_CENTERS:
        raise ArgumentError(f"hampel_center must be one of {HAMPEL_CENTERS}, got {hampel_center!r}")
    obj, src, x, labels, n_src = _arrays(objects, sources, values)
    if resolution is not None and not (math.isfinite(resolution) and resolution > 0):
        raise ArgumentError(f"resolution must be > 0, got {resolution!r}")
    cell = float(resolution) if resolution is not None else decimal_resolution(x)
    rng = make_rng(seed)
    n_obj = labels.size
    counts = np.bincount(obj, minlength=n_obj)
    params = {"m": m, "k": k, "gamma": float(gamma), "epsilon0": float(epsilon0), "weights": weights, "t": t,
              "epsilon": epsilon, "small_objects": small_objects, "cell": cell, "weight_floor": weight_floor,
              "privacy_test": privacy_test, "hampel_quantiles": hq,
              "global_loss": global_loss, "hampel_center": hampel_center,
              "composition_delta": float(composition_delta)}
    if method == "basic":
        return _basic(obj, x, labels, counts, cell, epsilon, sensitivity, rng, params)
    attempts = int(max_attempts) if max_attempts is not None else 200 * m
    params["max_attempts"] = attempts
    batches = make_batches(obj, src, x)
    hs = [_bandwidths(b, bandwidth, labels, cell) for b in batches]
    grams = [gram(b.X, b.mask, h) for b, h in zip(batches, hs)]
    cs, _ = object_weights(batches, grams, n_src, weights, weight_floor, hq, global_loss, hampel_center)
    t1 = time.perf_counter()

    # per-object accounting (Theorem 2) and eligibility
    h_obj = np.zeros(n_obj)
    cmax, cmin = np.ones(n_obj), np.ones(n_obj)
    for b, h, c in zip(batches, hs, cs):
        h_obj[b.objs] = h
        cmax[b.objs] = np.max(np.where(b.mask, c, -np.inf), axis=1)
        cmin[b.objs] = np.min(np.where(b.mask, c, np.inf), axis=1)
    with np.errstate(divide="ignore"):  # weight_floor=0 may give min c = 0: epsilon = inf
        ratio = cmax / cmin
        t_obj = choose_t(ratio, k, gamma, epsilon0, epsilon) if t is None else np.full(n_obj, t)
        eps, delta = theorem2(counts, cmax, cmin, k, gamma, epsilon0, np.maximum(t_obj, 1))
    eligible = (counts >= k) & (t_obj >= 1)
    eps, delta = np.where(t_obj >= 1, eps, np.inf), np.where(t_obj >= 1, delta, np.nan)
    run = eligible | (small_objects == "release")
    holds = eligible & privacy_test  # without the test (benchmarks only) Theorem 2 does not apply

    tried, rejected, rows_n = (np.zeros(n_obj, dtype=np.int64) for _ in range(3))
    out_o, out_v, tr = [], [], []
    for b, h, c in zip(batches, hs, cs):
        keep = run[b.objs]
        if not keep.any():
            continue
        sub = Batch(objs=b.objs[keep], X=b.X[keep], mask=b.mask[keep], src=b.src[keep], pos=b.pos[keep])
        rel = release_batch(sub, c[keep], h[keep], cell, m, k, gamma, epsilon0, attempts, rng, test=privacy_test)
        tried[sub.objs] = rel.tried
        rows_n[sub.objs] = rel.accepted
        rejected[sub.objs] = rel.tried - rel.accepted
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
        Xn = np.where(b.mask, b.X, np.nan)
        spread[b.objs] = (np.nanmax(Xn, axis=1) > np.nanmin(Xn, axis=1))
    reasons = []
    for i in range(n_obj):
        r = []
        if counts[i] < k:
            r.append(f"fewer than k={k} claims")
        if k < 2:
            r.append("k=1 admits no t with 1 <= t < k (Theorem 2)")
        elif t_obj[i] < 1:
            r.append(f"no t in 1..{k - 1} meets epsilon <= {epsilon}")
        if not privacy_test:
            r.append("privacy test disabled: no guarantee")
        if not run[i]:
            r.append("withheld")
        elif rows_n[i] < m:
            r.append(f"max_attempts={attempts} reached with {rows_n[i]} of m={m} rows")
        if not spread[i] and bandwidth is None:
            r.append("all claims equal: bandwidth = cell width")
        reasons.append("; ".join(r))
    report = pd.DataFrame({"object": labels, "n_claims": counts, "released": rows_n > 0, "rows": rows_n,
                           "reached_m": rows_n >= m, "tried": tried, "rejected": rejected, "epsilon": eps,
                           "delta": delta, "guarantee_holds": holds, "reason": reasons, "t": t_obj,
                           "bandwidth": h_obj})
    report = _with_composition(report, composition_delta)
    wdf = pd.concat([pd.DataFrame({"object": labels[b.objs[np.nonzero(b.mask)[0]]], "claim": b.pos[b.mask],
                                   "c": c[b.mask]}) for b, c in zip(batches, cs)], ignore_index=True)
    wdf = wdf.sort_values("claim", kind="stable").reset_index(drop=True)
    summary = _summary("priscrowd", report, params)
    summary["seconds"] = {"weights": t1 - t0, "sampling": t2 - t1, "total": time.perf_counter() - t0}
    return SynthResult(rows=rows, report=report, summary=summary, weights=wdf, trace=trace.drop(columns="code"))


def _with_composition(report: pd.DataFrame, delta_prime: float) -> pd.DataFrame:
    """The report with each object's (epsilon, delta) composed over its ``tried`` candidates (``compose``)."""
    c = compose(report["epsilon"].to_numpy(float), report["delta"].to_numpy(float), report["tried"].to_numpy(),
                delta_prime)
    return report.assign(epsilon_object_basic=c["epsilon_basic"], delta_object_basic=c["delta_basic"],
                         epsilon_object_advanced=c["epsilon_advanced"], delta_object_advanced=c["delta_advanced"],
                         epsilon_object=c["epsilon"], delta_object=c["delta"], composition=c["composition"])


def _release_figures(method: str, report: pd.DataFrame, params: dict[str, Any]) -> dict[str, Any]:
    """The release-as-a-whole guarantee: max over objects that ran with a guarantee of their composed figures."""
    g = report[report["guarantee_holds"] & (report["tried"] > 0)]
    if not len(g):
        return {"epsilon_release": None, "delta_release": None, "composition_release": None,
                "epsilon_release_basic": None, "epsilon_release_advanced": None,
                "epsilon_release_max_attempts": None, "delta_release_max_attempts": None,
                "guarantee": "no object was released with a guarantee: this release has no (epsilon, delta)"}
    top = g.loc[g["epsilon_object"].idxmax()]
    out = {"epsilon_release": float(g["epsilon_object"].max()), "delta_release": float(g["delta_object"].max()),
           "composition_release": str(top["composition"]),
           "epsilon_release_basic": float(g["epsilon_object_basic"].max()),
           "epsilon_release_advanced": float(g["epsilon_object_advanced"].max())}
    if method == "priscrowd":  # worst case over runs: every guaranteed object drawing max_attempts candidates
        a = int(params["max_attempts"])
        w = compose(g["epsilon"].to_numpy(float), g["delta"].to_numpy(float), np.full(len(g), a),
                    params["composition_delta"])
        out |= {"epsilon_release_max_attempts": float(w["epsilon"].max()),
                "delta_release_max_attempts": float(w["delta"].max())}
        unit = ("one claim of one object replaced; an object's figure composes Theorem 2 over every candidate it "
                "tried, released or rejected; objects are disjoint, so the release is the max over objects; a "
                "source with claims on several objects adds up their figures")
        paper = (f"the per-value (epsilon, delta) = ({_max_fmt(g, 'epsilon')}, {_max_fmt(g, 'delta')}) is the "
                 "paper's Theorem 2 for one released value, not the release's guarantee")
    else:
        out |= {"epsilon_release_max_attempts": None, "delta_release_max_attempts": None}
        unit = "one claim replaced; each claim is noised once (parallel composition)"
        paper = "per value = per object (Laplace mechanism)"
    out["guarantee"] = (f"the release as a whole is ({out['epsilon_release']:.6g}, {out['delta_release']:.6g})-DP "
                        f"({out['composition_release']} composition; {unit}); this is the guarantee; {paper}")
    if not math.isfinite(out["epsilon_release"]):
        out["guarantee"] += ("; epsilon = inf: an object has a sampling weight c = 0 (Theorem 2 gives no finite "
                             "bound; weight_floor > 0 bounds it)")
    elif out["delta_release"] >= 1:
        out["guarantee"] += "; delta >= 1: the figure bounds nothing"
    n_bad = int((report["released"] & ~report["guarantee_holds"]).sum())
    if n_bad:
        out["guarantee"] += f"; {n_bad} object(s) released without a guarantee are not covered"
    return out


def _max_fmt(g: pd.DataFrame, col: str) -> str:
    """Max of a per-value column over the released guaranteed objects, formatted (or '-')."""
    r = g[g["released"]][col]
    return f"{float(r.max()):.6g}" if len(r) else "-"


def _summary(method: str, report: pd.DataFrame, params: dict[str, Any]) -> dict[str, Any]:
    """Overall figures: epsilon/delta = max over released objects whose guarantee holds (per value, the paper's);
    epsilon_release/delta_release = the release's guarantee (``_release_figures``)."""
    g = report[report["guarantee_holds"] & report["released"]]
    return {
        "method": method,
        "epsilon": float(g["epsilon"].max()) if len(g) else None,
        "delta": float(g["delta"].max()) if len(g) else None,
        **_release_figures(method, report, params),
        "objects": len(report),
        "objects_released": int(report["released"].sum()),
        "objects_withheld": int((report["tried"] == 0).sum()),
        "objects_without_guarantee_released": int((report["released"] & ~report["guarantee_holds"]).sum()),
        "objects_short_of_m": int(((report["tried"] > 0) & ~report["reached_m"]).sum()),
        "rows": int(report["rows"].sum()),
        "tried": int(report["tried"].sum()),
        "rejected": int(report["rejected"].sum()),
        "parameters": params,
        "scope": SCOPE[method],
    }


def _basic(obj: np.ndarray, x: np.ndarray, labels: np.ndarray, counts: np.ndarray, cell: float,
           epsilon: float | None, sensitivity: Any, rng: np.random.Generator, params: dict[str, Any]) -> SynthResult:
    """Basic baseline: Laplace noise on every original claim (see ``basic``)."""
    eps = 1.0 if epsilon is None else float(epsilon)
    params["epsilon"] = eps
    n_obj = labels.size
    if isinstance(sensitivity, Mapping):
        try:
            sens = np.array([float(sensitivity[lab]) for lab in labels])
        except KeyError as e:
            raise ArgumentError(f"sensitivity mapping has no entry for object {e.args[0]!r}") from None
    else:
        sens = None if sensitivity is None else np.full(n_obj, float(sensitivity))
    if sens is not None and not np.all(np.isfinite(sens) & (sens > 0)):
        raise ArgumentError(f"sensitivity must be > 0, got {sensitivity!r}")
    noisy, _ = laplace_release(obj, x, n_obj, eps, sens, cell, rng)
    order = np.argsort(obj, kind="stable")
    rows = pd.DataFrame({"object": labels[obj[order]], "value": np.round(noisy[order], _decimals(cell) + 2)})
    holds = sens is not None
    report = pd.DataFrame({"object": labels, "n_claims": counts, "released": counts > 0, "rows": counts,
                           "reached_m": True, "tried": counts, "rejected": 0, "epsilon": eps, "delta": 0.0,
                           "guarantee_holds": holds,
                           "reason": "" if holds else "sensitivity = range of the object's claims (data-dependent)",
                           "t": 0, "bandwidth": np.nan})
    report = report.assign(epsilon_object_basic=eps, delta_object_basic=0.0, epsilon_object_advanced=np.nan,
                           delta_object_advanced=np.nan, epsilon_object=eps, delta_object=0.0, composition="parallel")
    return SynthResult(rows=rows, report=report, summary=_summary("basic", report, params))
