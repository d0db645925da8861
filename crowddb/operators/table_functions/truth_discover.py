"""TRUTH_DISCOVER: truth inference over a table of answers, with local DP and its charge."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ...arguments import NUMBER, REQUIRED, SEED, Param, bind
from ...errors import (
    ArgumentError,
    PrivacyError,
)
from ...store import TableRoles, privacy
from ..context import OperatorContext
from .base import (
    _CLAIM_ROLES,
    ReleaseEntry,
    TableFunctionSpec,
    TableInput,
    TableResult,
    _check_values,
    _claim_columns,
    _named,
    _number,
    _read_columns,
    _seed,
    _source_counts,
    _where,
)


def truth_discover(ctx: OperatorContext, rows: TableInput, named: dict[str, Any], roles: TableRoles
                   ) -> TableResult:
    """TRUTH_DISCOVER(input, object :=, source :=, value :=, method := 'auto', output := 'objects'|'sources',
    perturb :=, epsilon :=, delta :=, seed :=, tol :=, max_iter :=, <option> := ...): any other named argument is
    an option of the method (e.g. CRH's ``loss := 'absolute'``) or of the perturbation (e.g. MF's ``d := 5``)."""
    from ...truth import discover

    spec = {
        "object": Param(str, REQUIRED), "source": Param(str, REQUIRED), "value": Param(str, REQUIRED),
        "method": Param(str, "auto"), "output": Param(str, "objects"), "perturb": Param(str, None),
        "epsilon": Param(NUMBER, None), "delta": Param(NUMBER, None), "seed": SEED, "tol": Param(NUMBER, 1e-6),
        "max_iter": Param(int, 100)}
    _check_values("TRUTH_DISCOVER", named)  # the method's options too, not only the arguments bind() checks
    options = {k: v for k, v in named.items() if k not in spec}  # checked by discover() against the method
    args = bind("TRUTH_DISCOVER", {k: v for k, v in named.items() if k in spec}, spec)
    if args["output"] not in ("objects", "sources"):
        raise ArgumentError(f"TRUTH_DISCOVER: output must be 'objects' or 'sources', got {args['output']!r}")
    # checked here, not left to discover(), whose messages suggest Python's perturb=... and dropna=True
    if args["perturb"] is None and (args["epsilon"] is not None or args["delta"] is not None):
        raise PrivacyError("TRUTH_DISCOVER: epsilon/delta were given but no perturb mechanism; pass "
                           "perturb := 'laplace'|'rr'|'mf'|'gaussian'")
    frame = _read_columns("TRUTH_DISCOVER", rows, {r: args[r] for r in _CLAIM_ROLES})
    nulls = frame[args["value"]].isna()
    if nulls.any():
        raise ArgumentError(f"TRUTH_DISCOVER: {int(nulls.sum())} answers have a NULL/NaN value (first on object "
                            f"{frame[args['object']][nulls].iloc[0]!r}); filter them out (e.g. "
                            f"{_where(args['value'], 'IS NOT NULL')})")
    with _named("TRUTH_DISCOVER"):
        result = discover(frame, object=args["object"], source=args["source"], value=args["value"],
                          method=args["method"], perturb=args["perturb"], epsilon=args["epsilon"],
                          delta=args["delta"], seed=_seed(ctx, args["seed"]), tol=args["tol"],
                          max_iter=args["max_iter"], options=options)
    report = {"operator": "TRUTH_DISCOVER", "method": result.method, "iterations": result.n_iter,
              "objects": len(result.objects), "sources": len(result.sources)}
    release = None
    if result.privacy:
        report.update(result.privacy)
        release = ReleaseEntry("perturbation", str(result.privacy.get("mechanism")), None,
                               result.privacy.get("epsilon"), result.privacy.get("delta"),
                               {**{k: v for k, v in args.items() if k != "seed"}, **options}, dict(report))
    out = result.objects if args["output"] == "objects" else result.sources
    if result.privacy:  # the privacy parameters travel next to the result
        out = out.assign(epsilon=result.privacy.get("epsilon"), delta=result.privacy.get("delta"))
    return TableResult(out.reset_index(drop=True), report, release)


def truth_discover_charge(rows: TableInput, named: dict[str, Any]) -> privacy.Charge | None:
    """TRUTH_DISCOVER with ``perturb :=`` is local DP: every answer is perturbed once with (epsilon, delta), so a
    source with n answers in the input spends n epsilon and n delta (sequential composition over its answers, Dwork &
    Roth 2014, Theorem 3.16), and each later call that perturbs its answers again adds again. rho per answer: pure
    epsilon-LDP ('laplace', 'rr', 'mf') epsilon^2 / 2 (Bun & Steinke 2016, Proposition 1.4, via OpenDP); 'gaussian':
    ``privacy.gaussian_rho`` (the classic calibration's rho), n times per source (Bun & Steinke Lemma 2.3). Seeded
    calls are charged like any other."""
    perturb, epsilon = named.get("perturb"), _number(named.get("epsilon"))
    if not isinstance(perturb, str) or epsilon is None or epsilon <= 0:
        return None
    delta = _number(named.get("delta")) or 0.0
    counts = _source_counts(rows, named.get("source"))
    if counts is None:
        return None
    gaussian = perturb.lower() == "gaussian"
    if gaussian and not 0 < delta < 1:
        return None
    rho = privacy.gaussian_rho(epsilon, delta) if gaussian else privacy.pure_rho(epsilon)
    n = counts.to_numpy(dtype=float)
    per_unit = pd.DataFrame({"unit_id": counts.index.astype(str), "epsilon": n * epsilon, "delta": n * delta,
                             "rho": n * rho})
    return privacy.Charge("TRUTH_DISCOVER", "source", per_unit,
                          f"{perturb} local DP: (epsilon={epsilon:g}, delta={delta:g}) per answer, times the source's "
                          "answers")



SPEC = TableFunctionSpec("truth_discover", truth_discover, reads=_claim_columns, charge=truth_discover_charge,
                         roles=False)  # answers have no quasi-identifiers: their roles are never read
