"""TRUTH_DISCOVER: truth inference over a table of answers, with local DP and its charge."""

from __future__ import annotations

from collections.abc import Callable, Mapping
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
    check_privacy_arguments(args)
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
    report, release = truth_release(args, options, result.method, result.n_iter, len(result.objects),
                                    len(result.sources), result.privacy)
    out = result.objects if args["output"] == "objects" else result.sources
    if result.privacy:  # the privacy parameters travel next to the result
        out = out.assign(epsilon=result.privacy.get("epsilon"), delta=result.privacy.get("delta"))
    return TableResult(out.reset_index(drop=True), report, release)


def check_privacy_arguments(args: Mapping[str, Any]) -> None:
    """TRUTH_DISCOVER's (bound) arguments: epsilon or delta without perturb is refused, in SQL's words."""
    if args["perturb"] is None and (args["epsilon"] is not None or args["delta"] is not None):
        raise PrivacyError("TRUTH_DISCOVER: epsilon/delta were given but no perturb mechanism; pass "
                           "perturb := 'laplace'|'rr'|'mf'|'gaussian'")


def truth_release(args: Mapping[str, Any], options: Mapping[str, Any], method: str, n_iter: int, n_objects: int,
                  n_sources: int, privacy_report: dict[str, Any] | None) -> tuple[dict[str, Any], ReleaseEntry | None]:
    """TRUTH_DISCOVER's report and, when it perturbed (``privacy_report``), the release to record: its arguments
    (the seed left out) and options as parameters, the report as metrics."""
    report = {"operator": "TRUTH_DISCOVER", "method": method, "iterations": n_iter, "objects": n_objects,
              "sources": n_sources}
    if not privacy_report:
        return report, None
    report.update(privacy_report)
    return report, ReleaseEntry("perturbation", str(privacy_report.get("mechanism")), None,
                                privacy_report.get("epsilon"), privacy_report.get("delta"),
                                {**{k: v for k, v in args.items() if k != "seed"}, **options}, dict(report))


def truth_discover_charge(rows: TableInput, named: dict[str, Any]) -> privacy.Charge | None:
    """TRUTH_DISCOVER with ``perturb :=`` is local DP: every answer is perturbed once with (epsilon, delta), so a
    source with n answers in the input spends n epsilon and n delta (sequential composition over its answers, Dwork &
    Roth 2014, Theorem 3.16), and each later call that perturbs its answers again adds again. rho per answer: pure
    epsilon-LDP ('laplace', 'rr', 'mf') epsilon^2 / 2 (Bun & Steinke 2016, Proposition 1.4, via OpenDP); 'gaussian':
    ``privacy.gaussian_rho`` (the classic calibration's rho), n times per source (Bun & Steinke Lemma 2.3). Seeded
    calls are charged like any other."""
    return perturbation_charge(named, lambda: _source_counts(rows, named.get("source")))


def perturbation_charge(named: Mapping[str, Any], source_counts: Callable[[], pd.Series | None]
                        ) -> privacy.Charge | None:
    """``truth_discover_charge`` from the answers per source, ``source_counts()`` (keyed by the source's text, in
    order of first appearance; asked only when the arguments ask for a charge): what crowddb/spark/sql.py charges for
    a Spark table, whose answers it counts in Spark. None when the arguments ask for no charge, or are bad (the
    function itself then says what is wrong)."""
    perturb, epsilon = named.get("perturb"), _number(named.get("epsilon"))
    if not isinstance(perturb, str) or epsilon is None or epsilon <= 0:
        return None
    delta = _number(named.get("delta")) or 0.0
    counts = source_counts()
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
