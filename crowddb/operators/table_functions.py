"""Table functions: TRUTH_DISCOVER, PRIVATE_SYNTH and ANONYMIZE. Each binds its named arguments, reads from its
input what its algorithm needs, calls the algorithm layer and returns its rows (a DataFrame, or for ANONYMIZE an Arrow
table DuckDB reads in place), its report and a description of what it released; the planner records the release in
``crowddb_releases`` (a run, not explain()). A function writes nothing itself."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
from sqlglot import exp

from .. import _sql
from .._duck import setting
from ..arguments import NUMBER, REQUIRED, SEED, Param, bind, check_finite
from ..errors import (
    ArgumentError,
    CrowdDBError,
    CrowdDBWarning,
    EmptyInputError,
    PrivacyBudgetError,
    PrivacyError,
    UnknownColumnError,
)
from ..store import TableRoles, composition, privacy
from .context import OperatorContext


@dataclasses.dataclass
class TableInput:
    """A table function's input: ``snapshot``, the input's rows run once and frozen as Arrow (in the input's order),
    read through ``source`` (a SELECT over it giving each column its DuckDB type) as far as the function needs them."""

    con: duckdb.DuckDBPyConnection
    source: exp.Select
    columns: list[str]
    snapshot: pa.Table
    types: list[duckdb.DuckDBPyType]
    row_refs: np.ndarray | None = None  # each row's rowid in the one table it is of (privacy ledger), if it is
    ledger_table: str | None = None  # that table, as the privacy ledger names it
    widened: int = 0  # rows added (the last ones) to keep earlier classes whole (``Planner._widened_input``)

    def df(self, columns: list[str] | None = None) -> pd.DataFrame:
        """The input's rows (only ``columns``, in the input's column order, if given) as pandas."""
        keep = set(self.columns if columns is None else columns)
        wanted = [i for i, c in enumerate(self.columns) if c in keep]
        # text and NULL-free plain numbers straight from the snapshot (Arrow gives the dtypes DuckDB's conversion
        # gives: pandas' str, int32/int64, float64, bool); every other type through DuckDB's own conversion (NULLs,
        # decimals, enums, dates)
        direct = {i: self.snapshot.column(i) for i in wanted
                  if self.types[i].id == "varchar" or (self.types[i].id in _PLAIN_NUMBERS
                                                       and self.snapshot.column(i).null_count == 0)}
        columns = {self.columns[i]: (c.to_pandas() if self.types[i].id == "varchar" else c.to_numpy())
                   for i, c in direct.items()}
        others = [self.columns[i] for i in wanted if i not in direct]
        if others:
            query = exp.select(*(_sql.column(c) for c in others)).from_(
                self.source.subquery(_sql.identifier("__crowd_input")))
            with setting(self.con, "preserve_insertion_order", True):  # the rows line up with the snapshot's
                converted = self.con.execute(query.sql(_sql.DIALECT)).df()
            columns.update(converted.items())
        return pd.DataFrame({self.columns[i]: columns[self.columns[i]] for i in wanted},
                            index=pd.RangeIndex(self.rows))

    @property
    def rows(self) -> int:
        return self.snapshot.num_rows


@dataclasses.dataclass
class ArrowRows:
    """A table function's rows as an immutable Arrow table (or a DataFrame no one else holds) DuckDB reads in place
    (nothing is copied into a table), in its row order: column i reads as ``types[i]`` where Arrow does not carry the
    DuckDB type (None: as read)."""

    table: pa.Table | pd.DataFrame
    types: list[duckdb.DuckDBPyType | None] | None


@dataclasses.dataclass
class ReleaseEntry:
    """What a table function released, for the record in crowddb_releases. The function only describes it; the
    planner's executor writes it (explain() does not), so no function writes to the database itself."""

    kind: str
    method: str
    k: int | None
    epsilon: float | None
    delta: float | None
    params: dict[str, Any]
    metrics: dict[str, Any]
    objects: pd.DataFrame | None = None
    published: composition.Planned | None = None  # an anonymization's rows and boxes, for the privacy ledger


@dataclasses.dataclass
class TableResult:
    """A table function's rows, its report (``db.last_report``) and the release to record, if it made one."""

    rows: pd.DataFrame | ArrowRows
    report: dict[str, Any]
    release: ReleaseEntry | None = None


#: (context, input, named arguments, the input's column roles) -> its rows, report and release
TableFunction = Callable[[OperatorContext, TableInput, dict[str, Any], TableRoles], TableResult]


def _check_values(name: str, named: dict[str, Any]) -> None:
    """No NaN or infinity in any argument, the method's options (passed on unchecked by type) included."""
    for arg, value in named.items():
        check_finite(name, arg, value)


def _read_columns(name: str, rows: TableInput, columns: dict[str, str]) -> pd.DataFrame:
    """The input's ``columns`` (role -> column), each checked to exist, as pandas; an empty input is an error."""
    for role, column in columns.items():
        if column not in rows.columns:
            raise UnknownColumnError(f"{name}: {role} column {column!r} is not in the input (columns: "
                                     f"{list(rows.columns)})")
    frame = rows.df(list(columns.values()))  # only these columns leave DuckDB
    if len(frame) == 0:
        raise EmptyInputError(f"{name}: the input has no rows")
    return frame


def _seed(ctx: OperatorContext, seed: int | None) -> int | None:
    """The call's seed, else one derived from the connection's seed (None: fresh entropy / secure noise)."""
    if seed is not None:
        return seed
    if ctx.seed is None:
        return None
    return int(np.random.default_rng([ctx.seed, len(ctx.reports) + 1]).integers(2**31))


@contextlib.contextmanager
def _named(name: str) -> Iterator[None]:
    """The algorithm layer's errors (which name methods and Python arguments, never SQL) re-raised as the same class
    with the table function's name in front: ``TRUTH_DISCOVER: mv: the input has no answers``."""
    try:
        yield
    except CrowdDBError as err:
        raise type(err)(f"{name}: {err}") from None


def _where(column: str, test: str) -> str:
    """A WHERE clause to suggest: ``test`` is 'IS NOT NULL' or 'isfinite' (the column's name quoted)."""
    name = _sql.column(column).sql(_sql.DIALECT)
    return f"WHERE {name} IS NOT NULL" if test == "IS NOT NULL" else f"WHERE {test}({name})"


_PLAIN_NUMBERS = frozenset({"tinyint", "smallint", "integer", "bigint", "utinyint", "usmallint", "uinteger", "ubigint",
                            "float", "double", "boolean"})
_CLAIM_ROLES = ("object", "source", "value")  # the columns TRUTH_DISCOVER and PRIVATE_SYNTH read


# ------------------------------------------------------------------------------------------ TRUTH_DISCOVER
def truth_discover(ctx: OperatorContext, rows: TableInput, named: dict[str, Any], roles: TableRoles
                   ) -> TableResult:
    """TRUTH_DISCOVER(input, object :=, source :=, value :=, method := 'auto', output := 'objects'|'sources',
    perturb :=, epsilon :=, delta :=, seed :=, tol :=, max_iter :=, <option> := ...): any other named argument is
    an option of the method (e.g. CRH's ``loss := 'absolute'``) or of the perturbation (e.g. MF's ``d := 5``)."""
    from ..truth import discover

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


# ------------------------------------------------------------------------------------------- PRIVATE_SYNTH
def private_synth(ctx: OperatorContext, rows: TableInput, named: dict[str, Any], roles: TableRoles
                  ) -> TableResult:
    """PRIVATE_SYNTH(input, object :=, source :=, value :=, m := 30, k := 5, gamma := 4.0, epsilon0 := 1.0, ...)."""
    from ..synth import synthesize
    from ..synth.accounting import COMPOSITION_DELTA
    from ..synth.weights import HAMPEL_QUANTILES

    args = bind("PRIVATE_SYNTH", named, {
        "object": Param(str, REQUIRED), "source": Param(str, REQUIRED), "value": Param(str, REQUIRED),
        "m": Param(int, 30), "k": Param(int, 5), "gamma": Param(NUMBER, 4.0), "epsilon0": Param(NUMBER, 1.0),
        "method": Param(str, "priscrowd"), "weights": Param(str, "combined"), "bandwidth": Param(NUMBER, None),
        "t": Param(int, None), "small_objects": Param(str, "withhold"), "epsilon": Param(NUMBER, None),
        "max_attempts": Param(int, None), "seed": SEED, "resolution": Param(NUMBER, None),
        "weight_floor": Param(NUMBER, 0.1), "sensitivity": Param(NUMBER, None), "privacy_test": Param(bool, True),
        "hampel_quantiles": Param(list, list(HAMPEL_QUANTILES)), "hampel_center": Param(str, "median"),
        "global_loss": Param(str, "sum"), "composition_delta": Param(NUMBER, COMPOSITION_DELTA)})
    frame = _read_columns("PRIVATE_SYNTH", rows, {r: args[r] for r in _CLAIM_ROLES})
    values = frame[args["value"]]
    if not pd.api.types.is_numeric_dtype(values):
        raise ArgumentError(f"PRIVATE_SYNTH: value column {args['value']!r} must be numeric, got {values.dtype}")
    x = values.to_numpy(dtype=float)
    bad = ~np.isfinite(x)
    if bad.any():  # checked here for the SQL hint; synthesize() says it in Python terms
        raise ArgumentError(f"PRIVATE_SYNTH: {int(bad.sum())} claim value(s) are NaN or infinite; filter them first "
                            f"(e.g. {_where(args['value'], 'isfinite')})")
    options = {k: v for k, v in args.items() if k not in ("object", "source", "value", "seed")}
    # what the epsilon budget charges (the planner declared and checked this very figure before any noise is drawn:
    # the same function of the same arguments and frozen input), so the release logs what was charged (issue 24)
    charge = private_synth_charge(rows, named)
    with _named("PRIVATE_SYNTH"):
        result = synthesize(frame[args["object"]].to_numpy(), frame[args["source"]].to_numpy(), x,
                            seed=_seed(ctx, args["seed"]), **options)
    summary = dict(result.summary)
    if not len(result.rows):
        warnings.warn(_nothing_synthesized(result.report, args), CrowdDBWarning, stacklevel=2)
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
              "table": result.report.drop(columns=["bandwidth"], errors="ignore")}
    log = result.report[["object", "n_claims", "released", "rows", "reached_m", "tried", "rejected", "epsilon",
                         "delta", "guarantee_holds", "reason"]].assign(object=lambda d: d["object"].astype(str))
    metrics = dict(figures)
    if charge is not None:  # per source, exactly as the ledger's charge rows hold them
        metrics["charged_per_source"] = {str(u): [float(e), float(d)] for u, e, d in zip(
            charge.per_unit["unit_id"], charge.per_unit["epsilon"], charge.per_unit["delta"])}
    release = ReleaseEntry("synthesis", str(summary.get("method")), args["k"], epsilon, delta, options, metrics,
                           objects=log)
    return TableResult(result.rows[["object", "value"]].reset_index(drop=True), report, release)


def _nothing_synthesized(report: pd.DataFrame, args: dict[str, Any]) -> str:
    """Why PRIVATE_SYNTH released no row, in counts of the objects' reasons, and what to change."""
    reasons = report["reason"].where(report["reason"] != "", "no candidate passed the privacy test")
    why = "; ".join(f"{n} object(s): {reason}" for reason, n in reasons.value_counts(sort=False).items())
    claims = int(report["n_claims"].max()) if len(report) else 0
    return (f"PRIVATE_SYNTH released no rows ({why}). Objects with fewer than k={args['k']} claims are withheld: "
            f"the most claims of one object here is {claims}; lower k (k := {max(claims, 2)}), collect more claims "
            "per object, or pass small_objects := 'release' (no guarantee for them)")


# ------------------------------------------------------------------------------ epsilon budget: the charges
# A release's charge is declared from its arguments and its frozen input only, before the function runs (so before
# any noise is drawn): the planner checks it against the budget and writes it with the release (store/privacy.py).
# None: the call releases nothing under DP (or its arguments are bad, and the function itself says so).
def _number(value: Any) -> float | None:
    plain = isinstance(value, NUMBER) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if plain else None


def _source_counts(rows: TableInput, source: Any) -> pd.Series | None:
    """Claims per source (the protected unit) in the frozen input, keyed by the source's text."""
    if not isinstance(source, str) or source not in rows.columns:
        return None
    return rows.df([source])[source].astype(str).value_counts(sort=False)


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
    from ..synth.accounting import COMPOSITION_DELTA, compose

    src, obj = named.get("source"), named.get("object")
    counts = _source_counts(rows, src)
    if counts is None or not isinstance(obj, str) or obj not in rows.columns:
        return None
    method = named.get("method", "priscrowd")
    if method == "basic":
        epsilon = _number(named.get("epsilon", 1.0))
        if epsilon is None or epsilon <= 0:
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
    frame = rows.df([obj, src])
    claims = frame.groupby(obj, sort=False)[src].transform("size").to_numpy()  # |D_i| of each claim's object
    guaranteed = (k >= 2 and floor > 0 and named.get("privacy_test", True) is not False
                  and named.get("small_objects", "withhold") != "release")
    if not guaranteed:
        per_claim = np.full(len(frame), np.inf)
        dl_claim = np.full(len(frame), np.inf)
    else:
        ratio = 1.0 / floor
        t0 = t if t is not None else 1
        if target is not None and t is None:  # the least t meeting the target at the bounded ratio (or k - 1)
            ok = [s for s in range(1, k) if eps0 + math.log1p(gamma / s * ratio) <= target]
            t0 = ok[0] if ok else k - 1
        eps1 = eps0 + math.log1p(gamma / max(t0, 1) * ratio)
        if target is not None:
            eps1 = min(eps1, target)
        dl1 = claims * math.exp(-eps0 * (k - t0))
        figures = compose(np.full(len(frame), eps1), dl1, np.full(len(frame), attempts), delta_prime)
        ran = claims >= k  # smaller objects are withheld: they spend nothing
        per_claim = np.where(ran, figures["epsilon"], 0.0)
        dl_claim = np.where(ran, figures["delta"], 0.0)
    # one figure per (source, object): a source's several claims on one object are one object's release
    pairs = pd.DataFrame({"unit_id": frame[src].astype(str).to_numpy(), "object": frame[obj].astype(str).to_numpy(),
                          "epsilon": per_claim, "delta": dl_claim}).drop_duplicates(["unit_id", "object"])
    per_unit = pairs.groupby("unit_id", sort=False)[["epsilon", "delta"]].sum().reset_index().assign(rho=np.nan)
    return privacy.Charge("PRIVATE_SYNTH", "source", per_unit,
                          f"PrisCrowd worst case: Theorem 2 bound composed over max_attempts={attempts} candidates "
                          "per object, summed over the source's objects")


def check_charged_unit(con: duckdb.DuckDBPyConnection, query: exp.Query, named: dict[str, Any],
                       tables: list[str], operator: str) -> None:
    """Refuse (PrivacyBudgetError, before anything is computed) a charge whose unit column is not an unchanged copy
    of a stored column of the tables it is charged to (through CTEs, subqueries, unions and views; issue 24). The
    budget is kept per unit id, so ``worker || '#'`` or ``upper(worker)`` would make every source a new one, with a
    budget of its own. ``query``: the call's input as written (before it was frozen); ``tables``: the charged base
    tables (none: nothing is charged to a table, nothing to check)."""
    column = named.get("source")
    if not tables or not isinstance(column, str):
        return
    found = _stored_columns(con, query, column, frozenset())
    if isinstance(found, set):
        from ..privacy.identity import display
        from ..store import links

        outside = sorted(f"{display(t)}.{c}" for t, c in found if t.lower() not in {x.lower() for x in tables})
        # a copy's (or a renamed table's) sources are its root's only through the columns it holds unchanged
        rewritten = sorted(f"{display(t)}.{c}" for t, c in found
                           if (links.carried(con, t) is not None and c.lower() not in links.carried(con, t)))
        if not outside and not rewritten:
            return
        found = (f"it is a copy of {', '.join(outside)}, which the budget of "
                 f"{', '.join(display(t) for t in tables)} does not cover"
                 if outside else f"{', '.join(rewritten)} was not copied unchanged from the table whose budget it "
                                 "shares, so its ids are not that table's sources")
    from ..privacy.identity import display

    raise PrivacyBudgetError(
        f"{operator}: source := {column!r} is not a stored column of {', '.join(display(t) for t in tables)}: "
        f"{found}. The privacy budget "
        f"is kept per source id, so a spelling of the source made by an expression would be a new source with a "
        f"budget of its own: pass the stored column itself (e.g. SELECT worker ... with source := 'worker'), "
        "unchanged. Nothing was computed or charged")


def _stored_columns(con: duckdb.DuckDBPyConnection, query: exp.Query, column: str,
                    seen: frozenset[str]) -> set[tuple[str, str]] | str:
    """The stored (table, column) pairs output ``column`` of ``query`` is an unchanged copy of (one per branch of a
    union), following views into their definitions; else why it is not one (text for the refusal). Lineage by
    sqlglot's scope and lineage, as crowddb/lineage.py judges what a worker may see."""
    import sqlglot
    from sqlglot.lineage import to_node
    from sqlglot.optimizer.qualify import qualify
    from sqlglot.optimizer.scope import build_scope

    from ..lineage import Lineage, _is_copy, _leaf_column, view_query
    from ..store.roles import relation_kind

    lineage = Lineage(con)
    schema = lineage._schema()
    try:
        tree = qualify(lineage._resolved(query), schema=schema, dialect=_sql.DIALECT, validate_qualify_columns=False,
                       quote_identifiers=True, identify=True)
        root = build_scope(tree)
        at = [i for i, s in enumerate(tree.selects) if s.alias_or_name.lower() == column.lower()]
        node = to_node(at[0], root, dialect=_sql.DIALECT, schema=schema) if root is not None and len(at) == 1 else None
    except (sqlglot.errors.SqlglotError, KeyError, ValueError, TypeError, IndexError):
        node = None
    if node is None:
        return "its lineage cannot be followed"
    if not _is_copy(node):
        return "it is computed by an expression, not copied from a column"
    found: set[tuple[str, str]] = set()
    for leaf in node.walk():
        if leaf.downstream:
            continue
        name = _leaf_column(leaf)
        if not (isinstance(leaf.source, exp.Table) and isinstance(leaf.source.this, exp.Identifier)) or name is None:
            return "it is not read from a table"
        table = lineage._leaf_key(leaf.source)
        kind = relation_kind(con, table)
        if kind == "view" and table.lower() not in seen:
            definition = view_query(con, table)
            inner = "the view's definition cannot be read" if definition is None else _stored_columns(
                con, definition, name, seen | {table.lower()})
            if isinstance(inner, str):
                return f"through view {table}: {inner}"
            found |= inner
        elif kind == "table":
            found.add((table, name))
        else:
            return f"it comes from {table}, which is not a stored table"
    return found


# ---------------------------------------------------------------------------------------- PRIVACY_BUDGET
def privacy_budget(ctx: OperatorContext, rows: TableInput, named: dict[str, Any], roles: TableRoles
                   ) -> TableResult:
    """PRIVACY_BUDGET(table, epsilon := 5, delta := 0, unit := 'source', composition := 'sequential'|'zcdp') sets a
    table's epsilon budget; PRIVACY_BUDGET(table, reset := true) forgets what was spent. Both are logged acts of the
    privacy ledger, written by the planner (not by explain()); the row returned is the request."""
    args = bind("PRIVACY_BUDGET", named, {
        "epsilon": Param(NUMBER, None), "delta": Param(NUMBER, 0.0), "unit": Param(str, "source"),
        "composition": Param(str, "sequential"), "reset": Param(bool, False)})
    if args["reset"] == (args["epsilon"] is not None):
        raise ArgumentError("PRIVACY_BUDGET: pass either epsilon := ... (set the budget) or reset := true")
    privacy._check_unit(args["unit"])
    out = pd.DataFrame([{"act": "reset" if args["reset"] else "budget", "unit": args["unit"],
                         "epsilon": args["epsilon"], "delta": None if args["reset"] else float(args["delta"]),
                         "composition": None if args["reset"] else args["composition"]}])
    report = {"operator": "PRIVACY_BUDGET", **out.iloc[0].to_dict()}
    return TableResult(out, report, ReleaseEntry("privacy_budget", out["act"].iloc[0], None, args["epsilon"],
                                                 args["delta"], dict(args), {}))


# ----------------------------------------------------------------------------------------------- ANONYMIZE
def anonymize_table(ctx: OperatorContext, rows: TableInput, named: dict[str, Any], roles: TableRoles
                    ) -> TableResult:
    """ANONYMIZE(input, k := 10, method := 'mondrian', quasi_identifiers := [...], strict, sensitive, l, seed,
    hierarchies := {'column': 'path/to/arx.csv', ...}, keep_key := false): the k-anonymous release itself, rows
    shuffled (order reveals nothing). The input's key (its declared key, else a column named ``id``) identifies rows,
    so it is dropped from the release unless ``keep_key := true`` (for the caller's own joins); the report says
    which column it was and whether it was dropped.

    The algorithm reads only its columns (quasi-identifiers, the l-diversity column, hierarchy columns); the
    release is the input's frozen Arrow columns with each quasi-identifier replaced by a dictionary array (each
    class's labels, each row's label index), the rows gathered once in shuffled order."""
    from ..anonymize import anonymize

    args = bind("ANONYMIZE", named, {
        "k": Param(int, 10), "method": Param(str, "mondrian"), "quasi_identifiers": Param(list, None),
        "strict": Param(bool, True), "sensitive": Param(str, None), "l": Param(int, None), "seed": SEED,
        "hierarchies": Param(dict, None), "keep_key": Param(bool, False)})
    hierarchies = args["hierarchies"]
    if hierarchies is not None and not all(isinstance(v, str) for v in hierarchies.values()):
        raise ArgumentError("ANONYMIZE: hierarchies := {'column': 'path/to/hierarchy.csv', ...} takes ARX CSV paths")
    qi = _effective_quasi_identifiers(rows.columns, roles, args["quasi_identifiers"])
    kinds = {c: v for c, v in roles.kinds.items() if v}
    if args["method"] == "fka":
        raise ArgumentError("ANONYMIZE: method 'fka' needs the crowd; use it through a human operator "
                            "(anonymizer := 'fka')")
    key = _key_column(rows.columns, roles)
    # a key the caller generalizes (a quasi-identifier) is not a raw identifier here; one it measures l-diversity on
    # (sensitive := 'id') still is, and is dropped unless keep_key := true says the caller wants it (issue 24)
    key_dropped = key is not None and not args["keep_key"] and key.lower() not in {c.lower() for c in qi}
    seed = _seed(ctx, args["seed"])
    read = [*qi, *([args["sensitive"]] if args["sensitive"] else []), *(hierarchies or {})]
    release = anonymize(rows.df(read), qi, args["k"], method=args["method"], strict=args["strict"],
                        sensitive=args["sensitive"], l=args["l"], kinds=kinds or None, seed=seed,
                        hierarchies=hierarchies)
    published = None
    if rows.row_refs is not None:  # each row's box, as the release prints it (composition.box_text's order)
        composition.distinct_rows("ANONYMIZE", "its input", rows.row_refs)
        published = _published(rows.row_refs, release, qi)
        if rows.ledger_table is not None and composition.shown_before(ctx.con, rows.ledger_table, rows.row_refs):
            release, published = _kept_classes(ctx, rows, release, published, qi, args, kinds, seed)
    metrics = {k: v for k, v in release.metrics.items() if np.isscalar(v)}
    report = {"operator": "ANONYMIZE", **metrics, "guarantee": f"{args['k']}-anonymity over {qi}", "key": key,
              "key_dropped": key_dropped, "declared_quasi_identifiers": list(roles.quasi_identifiers)}
    if rows.widened:  # issue 25: a part of an earlier class below k would tell its rows apart
        report["widened"] = rows.widened
        report["widened_because"] = (f"{rows.widened} row(s) the input leaves out are released with it: they share "
                                     "classes an earlier release showed with its rows, and a part of such a class "
                                     "below k would tell them apart")
    entry = ReleaseEntry("anonymization", args["method"], args["k"], None, None,
                         {"quasi_identifiers": qi, "strict": args["strict"], "l": args["l"],
                          "hierarchies": hierarchies, "key": key, "key_dropped": key_dropped}, metrics)
    entry.published = published
    order = np.random.default_rng(seed).permutation(len(release.groups))
    kept = [c for c in rows.columns if not (key_dropped and c == key)]
    return TableResult(_release_rows(rows, kept, release, order), report, entry)


def _published(row_refs: np.ndarray, release, qi: list[str]) -> composition.Planned:
    """The rows ``release`` publishes and each one's box (composition.box_text's order: QIs sorted by name)."""
    names = sorted(qi)
    per_class = pd.DataFrame({q: np.asarray([str(x) for x in release.labels[q][0]], dtype=object)[
        release.labels[q][1]] for q in names})
    return composition.planned(row_refs, composition.box_text(per_class, names), release.pre_class,
                               quasi_identifiers=qi)


def _kept_classes(ctx: OperatorContext, rows: TableInput, release, published: composition.Planned, qi: list[str],
                  args: dict[str, Any], kinds: dict[str, str], seed) -> tuple[Any, composition.Planned]:
    """ANONYMIZE over rows an earlier release showed: the persisted partition when every row was shown over these
    quasi-identifiers at this k or more (each in its earlier box: nothing new is shown, issue 25); else the release
    asked for when the guard accepts it (a partition that keeps every joint class whole); else a release that keeps
    them whole (``privacy.serve``: merged classes for a larger k, added quasi-identifiers generalized over each
    class, new rows anonymized alone by the method asked for), with the guard's reason in the report. l-diversity and
    hierarchies are not kept by such a release: refused then, with the guard's reason."""
    from ..anonymize import anonymize
    from ..anonymize.encoding import encode
    from ..anonymize.generalize import assemble
    from ..privacy import serve

    k = int(args["k"])
    classes = composition.joint_classes(ctx.con, rows.ledger_table, rows.row_refs)
    try:
        plan = serve.plan(rows.row_refs, classes, k, composition.signature(qi))
    except serve.Refused as no_plan:
        plan, why_not = None, no_plan
    guard = "every row was shown before over these quasi-identifiers at this k or more"
    if plan is None or pd.isna(plan.boxes).any():  # not the persisted partition itself: the release asked for, if safe
        try:
            composition.check(ctx.con, rows.ledger_table, "release:next", k, published)
            return release, published
        except PrivacyError as refused:
            if plan is None or args["l"] is not None or args["hierarchies"]:
                raise PrivacyError(f"{refused}" + ("" if plan is not None else f" ({why_not.reason}: "
                                                   f"{why_not.advice})")) from None
            guard = str(refused)
    try:
        frame = rows.df(qi)
        shown, metrics = serve.labels(
            plan, frame, qi, kinds, k,
            lambda new: anonymize(frame[new].reset_index(drop=True), qi, k, method=args["method"],
                                  strict=args["strict"], kinds=kinds or None, seed=seed))
    except serve.Refused as no_plan:
        raise PrivacyError(f"ANONYMIZE: {no_plan.reason}; {guard}. Nothing was released. {no_plan.advice}") from None
    # the release as pre-classes (rows printing the same labels) with each QI's distinct labels
    names = sorted(qi)
    pre_class = pd.factorize(pd.MultiIndex.from_frame(shown[names].astype(str)))[0]
    first = np.unique(pre_class, return_index=True)[1]
    labels = {}
    for q in qi:
        lab, index = np.unique(shown[q].astype(str).to_numpy()[first], return_inverse=True)
        labels[q] = (lab.astype(object), index.astype(np.int64))
    enc = encode(frame, qi, kinds or None)
    served = assemble(frame, enc, pre_class.astype(np.int64), np.zeros((len(first), len(qi))),
                      np.zeros((len(first), len(qi))), [labels[q] for q in qi], k, "served", metrics)
    served.metrics.update(ncp=None, discernibility=None)  # (the boxes are texts here; their loss is not computed)
    served.metrics["served_because"] = guard  # why the release asked for was not made
    return served, _published(rows.row_refs, served, qi)


def _release_rows(rows: TableInput, columns: list[str], release, order: np.ndarray) -> ArrowRows:
    """The release as Arrow, output row j being input row order[j]: the input's ``columns`` gathered in that order,
    each quasi-identifier a dictionary array of its labels (each class's labels; each row's index into them)."""
    order = np.asarray(order, dtype=np.int64)
    pre_class = pa.array(release.pre_class.astype(np.int32, copy=False)[order])  # each row's index into the labels
    taken = pa.array(order)
    arrays, types = [], []
    for c in columns:
        if c in release.labels:
            labels, index = release.labels[c]  # distinct labels, each pre-class's label
            per_class = pa.array([str(x) for x in labels], pa.string()).take(pa.array(index))
            arrays.append(pa.DictionaryArray.from_arrays(pre_class, per_class))
            types.append(None)
        else:
            i = rows.columns.index(c)
            arrays.append(rows.snapshot.column(i).take(taken))  # one vectorized gather (DuckDB reads it in order)
            types.append(rows.types[i])
    return ArrowRows(pa.Table.from_arrays(arrays, names=columns), types)


def _effective_quasi_identifiers(columns: list[str], roles: TableRoles, given: list | None) -> list[str]:
    """ANONYMIZE's quasi-identifiers: those ``quasi_identifiers := [...]`` names, then every declared one it leaves
    out (issue 24: the argument may add columns, never drop a declared one, which would be released raw), each once
    and spelt as the input spells it (names match case-insensitively, as DuckDB's do). The given order comes first:
    a list that names every declared one generalizes exactly as before."""
    declared = list(roles.quasi_identifiers)
    if not declared and not given:
        raise ArgumentError("ANONYMIZE: pass quasi_identifiers := ['col', ...] (the input declares none)")
    if any(not isinstance(c, str) for c in given or []):
        raise ArgumentError(f"ANONYMIZE: quasi_identifiers := [...] takes column names, got {given!r}")
    by_lower = {c.lower(): c for c in columns if isinstance(c, str)}
    missing = [c for c in [*(given or []), *declared] if c.lower() not in by_lower]
    if missing:  # named against all the input's columns, before only the read ones are fetched
        raise UnknownColumnError(f"unknown quasi-identifier(s) {missing}; columns are {list(columns)}")
    return list(dict.fromkeys(by_lower[c.lower()] for c in [*(given or []), *declared]))


def _key_column(columns: list[str], roles: TableRoles) -> str | None:
    """The input's key column as the input spells it: the declared key, else a column named ``id``; None if the
    input has neither."""
    wanted = (roles.key or "id").lower()
    return next((c for c in columns if isinstance(c, str) and c.lower() == wanted), None)


def _claim_columns(named: dict[str, Any]) -> list[str] | None:
    """The columns TRUTH_DISCOVER and PRIVATE_SYNTH read: object, source and value (None if not all named as text:
    then the whole input is read and the function reports what is wrong)."""
    columns = [named.get(role) for role in _CLAIM_ROLES]
    return columns if all(isinstance(c, str) for c in columns) else None


TABLE_FUNCTIONS: dict[str, TableFunction] = {
    "truth_discover": truth_discover,
    "private_synth": private_synth,
    "anonymize": anonymize_table,
    "privacy_budget": privacy_budget,
}

#: a DP release's charge, declared before it runs (``privacy.Charge``; None: no DP release)
CHARGES: dict[str, Callable[[TableInput, dict[str, Any]], privacy.Charge | None]] = {
    "truth_discover": truth_discover_charge,
    "private_synth": private_synth_charge,
}

#: the input columns a table function reads, from its named arguments (None: all of them; ANONYMIZE's release
#: carries every column)
READS: dict[str, Callable[[dict[str, Any]], list[str] | None]] = {
    "truth_discover": _claim_columns,
    "private_synth": _claim_columns,
    "anonymize": lambda named: None,
    "privacy_budget": lambda named: [],  # the input is only a name: no row is read
}
