"""PRIVATE_SYNTH: PrisCrowd synthesis of claims, with its worst-case charge declared before it samples."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from ...arguments import NUMBER, REQUIRED, SEED, Param, bind
from ...errors import (
    ArgumentError,
    CrowdDBWarning,
)
from ...store import TableRoles, privacy
from ..context import OperatorContext
from .base import (
    _CLAIM_ROLES,
    ReleaseEntry,
    TableFunctionSpec,
    TableInput,
    TableResult,
    _claim_columns,
    _named,
    _number,
    _read_columns,
    _seed,
    _source_counts,
    _where,
)


def synth_params() -> dict[str, Param]:
    """PRIVATE_SYNTH's named arguments (crowddb/spark/sql.py binds PRIVATE_SYNTH(spark.<name>, ...) with them)."""
    from ...synth.accounting import COMPOSITION_DELTA
    from ...synth.weights import HAMPEL_QUANTILES

    return {
        "object": Param(str, REQUIRED), "source": Param(str, REQUIRED), "value": Param(str, REQUIRED),
        "m": Param(int, 30), "k": Param(int, 5), "gamma": Param(NUMBER, 4.0), "epsilon0": Param(NUMBER, 1.0),
        "method": Param(str, "priscrowd"), "weights": Param(str, "combined"), "bandwidth": Param(NUMBER, None),
        "t": Param(int, None), "small_objects": Param(str, "withhold"), "epsilon": Param(NUMBER, None),
        "max_attempts": Param(int, None), "seed": SEED, "resolution": Param(NUMBER, None),
        "weight_floor": Param(NUMBER, 0.1), "sensitivity": Param(NUMBER, None), "privacy_test": Param(bool, True),
        "hampel_quantiles": Param(list, list(HAMPEL_QUANTILES)), "hampel_center": Param(str, "median"),
        "global_loss": Param(str, "sum"), "composition_delta": Param(NUMBER, COMPOSITION_DELTA)}


def private_synth(ctx: OperatorContext, rows: TableInput, named: dict[str, Any], roles: TableRoles
                  ) -> TableResult:
    """PRIVATE_SYNTH(input, object :=, source :=, value :=, m := 30, k := 5, gamma := 4.0, epsilon0 := 1.0, ...)."""
    from ...synth import synthesize

    args = bind("PRIVATE_SYNTH", named, synth_params())
    frame = _read_columns("PRIVATE_SYNTH", rows, {r: args[r] for r in _CLAIM_ROLES})
    values = frame[args["value"]]
    if not pd.api.types.is_numeric_dtype(values):
        raise ArgumentError(f"PRIVATE_SYNTH: value column {args['value']!r} must be numeric, got {values.dtype}")
    x = values.to_numpy(dtype=float)
    bad = ~np.isfinite(x)
    if bad.any():  # checked here for the SQL hint; synthesize() says it in Python terms
        raise ArgumentError(f"PRIVATE_SYNTH: {int(bad.sum())} claim value(s) are NaN or infinite; filter them first "
                            f"(e.g. {_where(args['value'], 'isfinite')})")
    options = synth_options(args)
    # what the epsilon budget charges (the planner declared and checked this very figure before any noise is drawn:
    # the same function of the same arguments and frozen input), so the release logs what was charged (issue 24)
    charge = private_synth_charge(rows, named)
    with _named("PRIVATE_SYNTH"):
        result = synthesize(frame[args["object"]].to_numpy(), frame[args["source"]].to_numpy(), x,
                            seed=_seed(ctx, args["seed"]), **options)
    report, release = synth_release(args, result.summary, result.report, len(result.rows), charge)
    return TableResult(result.rows[["object", "value"]].reset_index(drop=True), report, release)


def synth_options(args: dict[str, Any]) -> dict[str, Any]:
    """The bound arguments that are synthesize()'s options (all but the columns and the seed)."""
    return {k: v for k, v in args.items() if k not in ("object", "source", "value", "seed")}


def synth_release(args: dict[str, Any], summary: dict[str, Any], table: pd.DataFrame, n_rows: int,
                  charge: privacy.Charge | None) -> tuple[dict[str, Any], ReleaseEntry]:
    """PRIVATE_SYNTH's report and release (what is logged: the charged figures, per object the report's ``table``)
    from a synthesis' summary, per-object report and number of rows; warns when no row was released."""
    summary = dict(summary)
    if not n_rows:
        warnings.warn(_nothing_synthesized(table, args), CrowdDBWarning, stacklevel=3)
    epsilon, delta = summary.get("epsilon_release"), summary.get("delta_release")
    if charge is not None:
        # the worst case over max_attempts candidates per object, summed over a source's objects: the realized
        # epsilon_release (the candidates this run happened to try, max over objects) depends on the data through
        # how many were tried, so it is reported, never charged
        charged = charge.summary()
        epsilon, delta = charged["epsilon_max"], charged["delta_max"]
        summary.update(epsilon_charged=epsilon, delta_charged=delta)
        summary["guarantee"] = (f"{summary.get('guarantee', summary.get('scope'))}; charged to the epsilon budget "
                                f"per source: up to ({epsilon:.6g}, {delta:.6g}), {charge.basis} (the release log "
                                "records this figure)")
    figures = {k: v for k, v in summary.items() if k != "parameters"}
    report = {"operator": "PRIVATE_SYNTH", **figures, "guarantee": summary.get("guarantee", summary.get("scope")),
              "table": table.drop(columns=["bandwidth"], errors="ignore")}
    log = table[["object", "n_claims", "released", "rows", "reached_m", "tried", "rejected", "epsilon",
                 "delta", "guarantee_holds", "reason"]].assign(object=lambda d: d["object"].astype(str))
    metrics = dict(figures)
    if charge is not None:  # per source, exactly as the ledger's charge rows hold them
        metrics["charged_per_source"] = {str(u): [float(e), float(d)] for u, e, d in zip(
            charge.per_unit["unit_id"], charge.per_unit["epsilon"], charge.per_unit["delta"])}
    release = ReleaseEntry("synthesis", str(summary.get("method")), args["k"], epsilon, delta, synth_options(args),
                           metrics, objects=log)
    return report, release


def _nothing_synthesized(report: pd.DataFrame, args: dict[str, Any]) -> str:
    """Why PRIVATE_SYNTH released no row, in counts of the objects' reasons, and what to change."""
    reasons = report["reason"].where(report["reason"] != "", "no candidate passed the privacy test")
    why = "; ".join(f"{n} object(s): {reason}" for reason, n in reasons.value_counts(sort=False).items())
    claims = int(report["n_claims"].max()) if len(report) else 0
    return (f"PRIVATE_SYNTH released no rows ({why}). Objects with fewer than k={args['k']} claims are withheld: "
            f"the most claims of one object here is {claims}; lower k (k := {max(claims, 2)}), collect more claims "
            "per object, or pass small_objects := 'release' (no guarantee for them)")


def private_synth_charge(rows: TableInput, named: dict[str, Any]) -> privacy.Charge | None:
    """PRIVATE_SYNTH's charge is an upper bound computed before sampling (the realized epsilon_release depends on how
    many candidates were tried, known only after). Per object with |D_i| >= k claims, one candidate is
    (epsilon_1, delta_1)-DP by Theorem 2 of PrisCrowd (crowddb/synth/accounting.py): epsilon_1 = epsilon0 + log(1 +
    (gamma/t) max c / min c) <= epsilon0 + log(1 + gamma / (t weight_floor)) (the floor bounds max c / min c by
    1 / weight_floor), delta_1 = |D_i| max c exp(-epsilon0 (k - t)) <= |D_i| exp(-epsilon0 (k - t)) (c is normalized,
    so max c <= 1); with an ``epsilon`` target, epsilon_1 <= the target and t <= the least t meeting it at the
    bounded ratio. The object's figure composes max_attempts candidates (the worst case: ``accounting.compose``,
    the tighter of basic and advanced composition, as the release's own figures), and a source adds up the figures
    of the objects it has claims on (the accounting's rule). 'basic' (Laplace): epsilon per claim, n claims n
    epsilon. No guarantee (weight_floor 0, privacy_test false, small_objects 'release', k < 2): an infinite charge,
    refused under any budget. No rho: (epsilon, delta)-DP only."""
    src, obj = named.get("source"), named.get("object")
    counts = _source_counts(rows, src)
    if counts is None or not isinstance(obj, str) or obj not in rows.columns:
        return None
    return synth_charge(named, lambda: counts,
                        lambda figures: _per_source(rows.df([obj, src]), obj, src, figures))


def synth_charge(named: dict[str, Any], source_counts: Callable[[], pd.Series | None],
                 per_source: Callable[[Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]], pd.DataFrame]
                 ) -> privacy.Charge | None:
    """``private_synth_charge`` from the claims per source (``source_counts()``, for 'basic': keyed by the source's
    text) or, for PrisCrowd, ``per_source(figures)``: per source (unit_id, epsilon, delta) summed over the distinct
    objects it has claims on of ``figures(|D_i|)``, the object's worst-case (epsilon, delta) as a function of its
    claim count. crowddb/spark/synth.py computes both in Spark for a Spark table."""
    from ...synth.accounting import COMPOSITION_DELTA, compose

    method = named.get("method", "priscrowd")
    if method == "basic":
        epsilon = _number(named.get("epsilon", 1.0))
        counts = source_counts()
        if epsilon is None or epsilon <= 0 or counts is None:
            return None
        n = counts.to_numpy(dtype=float)
        per_unit = pd.DataFrame({"unit_id": counts.index.astype(str), "epsilon": n * epsilon, "delta": 0.0,
                                 "rho": n * privacy.pure_rho(epsilon)})
        return privacy.Charge("PRIVATE_SYNTH", "source", per_unit, f"basic Laplace: epsilon={epsilon:g} per claim")
    m, k = named.get("m", 30), named.get("k", 5)
    gamma, eps0 = _number(named.get("gamma", 4.0)), _number(named.get("epsilon0", 1.0))
    floor, target = _number(named.get("weight_floor", 0.1)), _number(named.get("epsilon"))
    t, attempts = named.get("t"), named.get("max_attempts")
    if not (isinstance(m, int) and isinstance(k, int) and m >= 1 and gamma is not None and eps0 is not None
            and floor is not None) or (t is not None and not isinstance(t, int)):
        return None
    attempts = int(attempts) if isinstance(attempts, int) else 200 * m
    delta_prime = _number(named.get("composition_delta", COMPOSITION_DELTA)) or COMPOSITION_DELTA
    guaranteed = (k >= 2 and floor > 0 and named.get("privacy_test", True) is not False
                  and named.get("small_objects", "withhold") != "release")

    def figures(claims: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The worst-case (epsilon, delta) of an object with ``claims`` claims (elementwise)."""
        if not guaranteed:
            return np.full(len(claims), np.inf), np.full(len(claims), np.inf)
        ratio = 1.0 / floor
        t0 = t if t is not None else 1
        if target is not None and t is None:  # the least t meeting the target at the bounded ratio (or k - 1)
            ok = [s for s in range(1, k) if eps0 + math.log1p(gamma / s * ratio) <= target]
            t0 = ok[0] if ok else k - 1
        eps1 = eps0 + math.log1p(gamma / max(t0, 1) * ratio)
        if target is not None:
            eps1 = min(eps1, target)
        dl1 = claims * math.exp(-eps0 * (k - t0))
        composed = compose(np.full(len(claims), eps1), dl1, np.full(len(claims), attempts), delta_prime)
        ran = claims >= k  # smaller objects are withheld: they spend nothing
        return np.where(ran, composed["epsilon"], 0.0), np.where(ran, composed["delta"], 0.0)

    per_unit = per_source(figures).assign(rho=np.nan)
    return privacy.Charge("PRIVATE_SYNTH", "source", per_unit,
                          f"PrisCrowd worst case: Theorem 2 bound composed over max_attempts={attempts} candidates "
                          "per object, summed over the source's objects")


def _per_source(frame: pd.DataFrame, obj: str, src: str,
                figures: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]) -> pd.DataFrame:
    """Per source (in order of first appearance) the sum of ``figures`` over the distinct objects it claims on."""
    claims = frame.groupby(obj, sort=False)[src].transform("size").to_numpy()  # |D_i| of each claim's object
    per_claim, dl_claim = figures(claims)
    # one figure per (source, object): a source's several claims on one object are one object's release
    pairs = pd.DataFrame({"unit_id": frame[src].astype(str).to_numpy(), "object": frame[obj].astype(str).to_numpy(),
                          "epsilon": per_claim, "delta": dl_claim}).drop_duplicates(["unit_id", "object"])
    return pairs.groupby("unit_id", sort=False)[["epsilon", "delta"]].sum().reset_index()


SPEC = TableFunctionSpec("private_synth", private_synth, reads=_claim_columns, charge=private_synth_charge)
