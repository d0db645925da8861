"""Table functions: TRUTH_DISCOVER, PRIVATE_SYNTH and ANONYMIZE. Each binds its named arguments, calls its
algorithm layer on the input rows, logs its privacy report in ``crowddb_releases`` and returns a DataFrame."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from .._duck import registered
from ..catalog import TableRoles
from ..errors import ArgumentError, EmptyInputError, UnknownColumnError
from .context import OperatorContext

#: (context, input rows, named arguments, the input's column roles) -> result rows
TableFunction = Callable[[OperatorContext, pd.DataFrame, dict[str, Any], TableRoles], pd.DataFrame]


def _bind(name: str, named: dict[str, Any], spec: dict[str, tuple[type | tuple[type, ...], Any]]) -> dict[str, Any]:
    """Named arguments checked against ``spec`` (name -> (types, default)); REQUIRED defaults must be given."""
    unknown = set(named) - set(spec)
    if unknown:
        raise ArgumentError(f"{name}: unknown argument(s) {sorted(unknown)}; allowed: {sorted(spec)}")
    _check_values(name, named)
    out = {}
    for arg, (types, default) in spec.items():
        if arg not in named:
            if default is REQUIRED:
                raise ArgumentError(f"{name}: missing argument {arg} := ...")
            out[arg] = default
            continue
        value = named[arg]
        if value is not None and (isinstance(value, bool) and bool not in _tuple(types)
                                  or not isinstance(value, types)):
            raise ArgumentError(f"{name}: argument {arg!r} must be {_describe(types)}, got {value!r}")
        out[arg] = value
    return out


REQUIRED = object()
NUMBER = (int, float)


def _finite(value: Any) -> bool:
    """No NaN or infinity anywhere in a (possibly nested list / struct) argument value."""
    if isinstance(value, float):
        return bool(np.isfinite(value))
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


def _check_values(name: str, named: dict[str, Any]) -> None:
    """Values no table function takes: NaN or infinite numbers, negative seeds."""
    for arg, value in named.items():
        if not _finite(value):
            what = "a finite number" if isinstance(value, float) else "made of finite numbers"
            raise ArgumentError(f"{name}: argument {arg} := {value!r} must be {what} (NaN and infinity are not "
                                "values of any argument); leave the argument out for its default")
    seed = named.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool) and seed < 0:
        raise ArgumentError(f"{name}: seed := {seed} must be a non-negative integer")


def _tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def _describe(types: type | tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true/false", list: "a list",
             dict: "a struct {'key': value, ...}"}
    return " or ".join(dict.fromkeys(names[t] for t in _tuple(types)))


def _require_columns(name: str, frame: pd.DataFrame, columns: dict[str, str]) -> None:
    for role, column in columns.items():
        if column not in frame.columns:
            raise UnknownColumnError(f"{name}: {role} column {column!r} is not in the input (columns: "
                                     f"{list(frame.columns)})")
    if len(frame) == 0:
        raise EmptyInputError(f"{name}: the input has no rows")


def _log_release(ctx: OperatorContext, kind: str, method: str, k: int | None, epsilon: float | None,
                 delta: float | None, params: dict[str, Any], metrics: dict[str, Any]) -> int | None:
    """Append one row to crowddb_releases (not in a dry run); returns its id."""
    if ctx.dry_run:
        return None
    def insert() -> int:  # the id is taken in the inserting transaction (another connection may race for it)
        release_id = ctx.next_id("crowddb_releases", "release_id")
        ctx.con.execute("INSERT INTO crowddb_releases (release_id, kind, method, k, epsilon, delta, params, metrics) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [release_id, kind, method, k, epsilon, delta, json.dumps(params, default=str),
                         json.dumps(metrics, default=str)])
        return release_id

    return ctx.in_own_transaction(insert)


def _seed(ctx: OperatorContext, seed: int | None) -> int | None:
    """The call's seed, else one derived from the connection's seed (None: fresh entropy / secure noise)."""
    if seed is not None:
        return seed
    if ctx.seed is None:
        return None
    return int(np.random.default_rng([ctx.seed, len(ctx.reports) + 1]).integers(2**31))


# ------------------------------------------------------------------------------------------ TRUTH_DISCOVER
def truth_discover(ctx: OperatorContext, frame: pd.DataFrame, named: dict[str, Any], roles: TableRoles
                   ) -> pd.DataFrame:
    """TRUTH_DISCOVER(input, object :=, source :=, value :=, method := 'auto', output := 'objects'|'sources',
    perturb :=, epsilon :=, delta :=, seed :=, tol :=, max_iter :=, <option> := ...): any other named argument is
    an option of the method (e.g. CRH's ``loss := 'absolute'``) or of the perturbation (e.g. MF's ``d := 5``)."""
    from ..truth import discover

    spec = {
        "object": (str, REQUIRED), "source": (str, REQUIRED), "value": (str, REQUIRED), "method": (str, "auto"),
        "output": (str, "objects"), "perturb": (str, None), "epsilon": (NUMBER, None), "delta": (NUMBER, None),
        "seed": (int, None), "tol": (NUMBER, 1e-6), "max_iter": (int, 100)}
    _check_values("TRUTH_DISCOVER", named)  # the method's options too, not only the arguments _bind checks
    options = {k: v for k, v in named.items() if k not in spec}  # checked by discover() against the method
    args = _bind("TRUTH_DISCOVER", {k: v for k, v in named.items() if k in spec}, spec)
    if args["output"] not in ("objects", "sources"):
        raise ArgumentError(f"TRUTH_DISCOVER: output must be 'objects' or 'sources', got {args['output']!r}")
    _require_columns("TRUTH_DISCOVER", frame, {r: args[r] for r in ("object", "source", "value")})
    result = discover(frame, object=args["object"], source=args["source"], value=args["value"],
                      method=args["method"], perturb=args["perturb"], epsilon=args["epsilon"], delta=args["delta"],
                      seed=_seed(ctx, args["seed"]), tol=args["tol"], max_iter=args["max_iter"], options=options)
    report = {"operator": "TRUTH_DISCOVER", "method": result.method, "iterations": result.n_iter,
              "objects": len(result.objects), "sources": len(result.sources)}
    if result.privacy:
        report.update(result.privacy)
    ctx.reports.append(report)
    if result.privacy:
        _log_release(ctx, "perturbation", str(result.privacy.get("mechanism")), None, result.privacy.get("epsilon"),
                     result.privacy.get("delta"), {**{k: v for k, v in args.items() if k != "seed"}, **options}, report)
    out = result.objects if args["output"] == "objects" else result.sources
    if result.privacy:  # the privacy parameters travel next to the result
        out = out.assign(epsilon=result.privacy.get("epsilon"), delta=result.privacy.get("delta"))
    return out.reset_index(drop=True)


# ------------------------------------------------------------------------------------------- PRIVATE_SYNTH
def private_synth(ctx: OperatorContext, frame: pd.DataFrame, named: dict[str, Any], roles: TableRoles
                  ) -> pd.DataFrame:
    """PRIVATE_SYNTH(input, object :=, source :=, value :=, m := 30, k := 5, gamma := 4.0, epsilon0 := 1.0, ...)."""
    from ..synth import synthesize
    from ..synth.accounting import COMPOSITION_DELTA
    from ..synth.weights import HAMPEL_QUANTILES

    args = _bind("PRIVATE_SYNTH", named, {
        "object": (str, REQUIRED), "source": (str, REQUIRED), "value": (str, REQUIRED), "m": (int, 30),
        "k": (int, 5), "gamma": (NUMBER, 4.0), "epsilon0": (NUMBER, 1.0), "method": (str, "priscrowd"),
        "weights": (str, "combined"), "bandwidth": (NUMBER, None), "t": (int, None),
        "small_objects": (str, "withhold"), "epsilon": (NUMBER, None), "max_attempts": (int, None),
        "seed": (int, None), "resolution": (NUMBER, None), "weight_floor": (NUMBER, 0.1),
        "sensitivity": (NUMBER, None), "privacy_test": (bool, True),
        "hampel_quantiles": (list, list(HAMPEL_QUANTILES)), "hampel_center": (str, "median"),
        "global_loss": (str, "sum"), "composition_delta": (NUMBER, COMPOSITION_DELTA)})
    _require_columns("PRIVATE_SYNTH", frame, {r: args[r] for r in ("object", "source", "value")})
    values = frame[args["value"]]
    if not pd.api.types.is_numeric_dtype(values):
        raise ArgumentError(f"PRIVATE_SYNTH: value column {args['value']!r} must be numeric, got {values.dtype}")
    options = {k: v for k, v in args.items() if k not in ("object", "source", "value", "seed")}
    result = synthesize(frame[args["object"]].to_numpy(), frame[args["source"]].to_numpy(),
                        values.to_numpy(dtype=float), seed=_seed(ctx, args["seed"]), **options)
    summary = dict(result.summary)
    report = {"operator": "PRIVATE_SYNTH", **{k: v for k, v in summary.items() if k != "parameters"},
              "guarantee": summary.get("guarantee", summary.get("scope")),
              "table": result.report.drop(columns=["bandwidth"], errors="ignore")}
    # the log's epsilon/delta are the release's guarantee (composed); the per-value figures are in the metrics
    release_id = _log_release(ctx, "synthesis", str(summary.get("method")), args["k"],
                              summary.get("epsilon_release"), summary.get("delta_release"), options,
                              {k: v for k, v in summary.items() if k != "parameters"})
    if release_id is not None:
        log = result.report[["object", "n_claims", "released", "rows", "reached_m", "tried", "rejected", "epsilon",
                             "delta", "guarantee_holds", "reason"]].assign(object=lambda d: d["object"].astype(str))
        with registered(ctx.con, __crowd_synth_log=log):
            ctx.con.execute("INSERT INTO crowddb_synth_objects SELECT ?, * FROM __crowd_synth_log", [release_id])
        report["release_id"] = release_id
    ctx.reports.append(report)
    return result.rows[["object", "value"]].reset_index(drop=True)


# ----------------------------------------------------------------------------------------------- ANONYMIZE
def anonymize_table(ctx: OperatorContext, frame: pd.DataFrame, named: dict[str, Any], roles: TableRoles
                    ) -> pd.DataFrame:
    """ANONYMIZE(input, k := 10, method := 'mondrian', quasi_identifiers := [...], strict, sensitive, l, seed,
    hierarchies := {'column': 'path/to/arx.csv', ...}, keep_key := false): the k-anonymous release itself, rows
    shuffled (order reveals nothing). The input's key (its declared key, else a column named ``id``) identifies rows,
    so it is dropped from the release unless ``keep_key := true`` (for the caller's own joins); the report says
    which column it was and whether it was dropped."""
    from ..anonymize import anonymize

    args = _bind("ANONYMIZE", named, {
        "k": (int, 10), "method": (str, "mondrian"), "quasi_identifiers": (list, None), "strict": (bool, True),
        "sensitive": (str, None), "l": (int, None), "seed": (int, None), "hierarchies": (dict, None),
        "keep_key": (bool, False)})
    hierarchies = args["hierarchies"]
    if hierarchies is not None and not all(isinstance(v, str) for v in hierarchies.values()):
        raise ArgumentError("ANONYMIZE: hierarchies := {'column': 'path/to/hierarchy.csv', ...} takes ARX CSV paths")
    qi = args["quasi_identifiers"]
    if qi is None:
        if not roles.quasi_identifiers:
            raise ArgumentError("ANONYMIZE: pass quasi_identifiers := ['col', ...] (the input declares none)")
        qi = list(roles.quasi_identifiers)
    kinds = {c: v for c, v in roles.kinds.items() if v}
    if args["method"] == "fka":
        raise ArgumentError("ANONYMIZE: method 'fka' needs the crowd; use it through a human operator "
                            "(anonymizer := 'fka')")
    key = _key_column(frame, roles)
    # a key the caller generalizes (a quasi-identifier) or measures diversity on is not a raw identifier here
    used = {str(c).lower() for c in qi if isinstance(c, str)} | {str(args["sensitive"] or "").lower()}
    key_dropped = key is not None and not args["keep_key"] and key.lower() not in used
    if key_dropped:
        frame = frame.drop(columns=[key])
    seed = _seed(ctx, args["seed"])
    release = anonymize(frame, qi, args["k"], method=args["method"], strict=args["strict"],
                        sensitive=args["sensitive"], l=args["l"], kinds=kinds or None, seed=seed,
                        hierarchies=hierarchies)
    metrics = {k: v for k, v in release.metrics.items() if np.isscalar(v)}
    ctx.reports.append({"operator": "ANONYMIZE", **metrics, "guarantee": f"{args['k']}-anonymity over {qi}",
                        "key": key, "key_dropped": key_dropped})
    _log_release(ctx, "anonymization", args["method"], args["k"], None, None,
                 {"quasi_identifiers": qi, "strict": args["strict"], "l": args["l"], "hierarchies": hierarchies,
                  "key": key, "key_dropped": key_dropped},
                 metrics)
    order = np.random.default_rng(seed).permutation(len(release.table))
    return release.table.iloc[order].reset_index(drop=True)


def _key_column(frame: pd.DataFrame, roles: TableRoles) -> str | None:
    """The input's key column as the frame spells it: the declared key, else a column named ``id``; None if the
    input has neither."""
    wanted = (roles.key or "id").lower()
    return next((c for c in frame.columns if isinstance(c, str) and c.lower() == wanted), None)


TABLE_FUNCTIONS: dict[str, TableFunction] = {
    "truth_discover": truth_discover,
    "private_synth": private_synth,
    "anonymize": anonymize_table,
}
