"""What a crowd query would post, cost and release, estimated without publishing, paying or recording anything:
``explain()``, the budget check before a run and the k trade-off all read the same estimate (``estimate``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import duckdb
import pandas as pd
from sqlglot import exp

from .._duck import in_transaction, rolled_back
from .._sql import DIALECT
from ..errors import ArgumentError, PrivacyError, QueryError, from_duckdb
from ..lineage import is_tracked
from ..operators.human import NOT_ESTIMATED, OperatorPlan
from ..operators.purchase import check_query_budget
from ..planner import Planner
from . import guards, roles
from .state import State

#: the ks of the trade-off the requester page plots (``CrowdDB.tradeoff``)
TRADEOFF_KS = (2, 5, 10, 20, 50)
#: explain() runs (then rolls back) the statements that change the database's own contents, so the statements after
#: them see their effect; anything else (COPY TO a file, SET, ATTACH, secrets, transaction control, a SELECT) is not
#: run
_REHEARSED_KINDS = {"TABLE", "VIEW", "SCHEMA", "SEQUENCE", "INDEX", "MACRO", "FUNCTION", "TYPE"}


@dataclasses.dataclass
class QueryPlan:
    """What a query would post to the crowd, operator by operator (``CrowdDB.explain``)."""

    query: str
    operators: list[OperatorPlan]
    reports: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    steps: list[str] = dataclasses.field(default_factory=list)  # the planner's steps, in the order they run

    @property
    def hits(self) -> int:
        return sum(p.hits for p in self.operators)

    @property
    def assignments(self) -> int:
        return sum(p.assignments for p in self.operators)

    @property
    def estimated_cost(self) -> float:
        return round(sum(p.estimated_cost for p in self.operators), 4)

    @property
    def max_cost(self) -> float:
        """The most the query may cost: an accuracy target's calls at every item's max_assignments (issue 28)."""
        return round(sum(p.estimated_cost if p.max_cost is None else p.max_cost for p in self.operators), 4)

    def df(self) -> pd.DataFrame:
        """One row per human operator."""
        return pd.DataFrame([p.as_row() for p in self.operators],
                            columns=[f.name for f in dataclasses.fields(OperatorPlan)])

    def __str__(self) -> str:
        if not self.operators and not self.reports:
            return "no crowd operator: the query runs in DuckDB unchanged"
        lines = [f"plan: {', '.join(f'{i}. {name}' for i, name in enumerate(self.steps, 1))}"] if self.steps else []
        for p in self.operators:
            lines.append(f"{p.operator} ({p.kind}): {p.input_rows} rows -> {p.items} items, {p.cached_items} cached; "
                         f"{p.hits} HITs, {p.assignments} assignments, est. ${p.estimated_cost:,.2f}"
                         + (f" (budget ${p.budget:,.2f})" if p.budget is not None else ""))
            if p.anonymizer == NOT_ESTIMATED:
                lines.append(f"    not estimated: {p.note}")
                continue
            privacy = f"k={p.k}, anonymizer={p.anonymizer}" if p.k else "no quasi-identifier published"
            if p.ncp is not None:
                privacy += f", NCP={p.ncp:.2f}%"
            if p.accuracy_lower is not None:
                privacy += f", accuracy in [{p.accuracy_lower:.3f}, {p.accuracy_upper:.3f}]"
            privacy += f", epsilon={p.epsilon if p.epsilon is not None else '-'}"
            lines.append(f"    privacy: {privacy}" + (f"; {p.note}" if p.note else ""))
            if p.withheld:
                lines.append(f"    withheld: {_withheld_text(p.withheld)}")
        for r in self.reports:
            if r.get("kind") == "accuracy target":  # a human call's run report (issue 28), not a release's
                lines.append(f"{r['operator']}: accuracy := {r['accuracy']:g}"
                             f"{' for each item' if r['each_item'] else ''}, {r['bought']} answers bought in "
                             f"{r['rounds']} rounds for {r['items']} items; {r['uncertain']} stopped uncertain at "
                             f"max_assignments := {r['max_assignments']}"
                             + ("" if r["each_item"] else f", {r['accepted']} accepted below the target")
                             + f"; mean confidence {r['mean_confidence']:.3f}")
                continue
            lines.append(f"{r.get('operator')}: epsilon={r.get('epsilon')}, delta={r.get('delta')}"
                         f" ({r.get('guarantee', '')})")
            for c in r.get("privacy_charge", ()):  # the epsilon budget: what the release would be charged
                lines.append(f"    charge on {c['table']}: " + (f"REFUSED: {c['refused']}" if "refused" in c else
                             f"up to epsilon={c['epsilon_max']:.6g}, delta={c['delta_max']:.6g} per {c['unit']} "
                             f"({c['units']} {c['unit']}s); left after it: epsilon={c['epsilon_left']}, "
                             f"delta={c['delta_left']}"))
        lines.append(f"total: {self.hits} HITs, {self.assignments} assignments, est. ${self.estimated_cost:,.2f}")
        return "\n".join(lines)

    def __repr__(self) -> str:  # the plan itself, as a DuckDB relation's repr is its rows
        return str(self)

    def _repr_html_(self) -> str:
        """A notebook's view: one table row per human operator, the table functions' guarantees, the total."""
        import html

        rows = [{"operator": f"{p.operator} ({p.kind})", "rows": p.input_rows, "items": p.items,
                 "cached": p.cached_items, "HITs": p.hits, "assignments": p.assignments,
                 "est. $": f"{p.estimated_cost:,.2f}", "k": p.k if p.k else "-", "anonymizer": p.anonymizer,
                 "NCP %": "-" if p.ncp is None else f"{p.ncp:.2f}",
                 "note": p.note, "withheld": _withheld_text(p.withheld)} for p in self.operators]
        parts = [f"<p><code>{html.escape(' '.join(self.query.split()))}</code></p>"]
        if self.steps:
            parts.append(f"<p>plan: {html.escape(', '.join(f'{i}. {s}' for i, s in enumerate(self.steps, 1)))}</p>")
        if rows:
            parts.append(pd.DataFrame(rows).to_html(index=False, escape=True))
        for r in self.reports:
            parts.append(f"<p>{html.escape(str(r.get('operator')))}: epsilon={html.escape(str(r.get('epsilon')))}, "
                         f"delta={html.escape(str(r.get('delta')))} ({html.escape(str(r.get('guarantee', '')))})</p>")
        parts.append(f"<p>total: {self.hits} HITs, {self.assignments} assignments, "
                     f"est. ${self.estimated_cost:,.2f}</p>")
        return "".join(parts)


def _withheld_text(withheld: Mapping[str, str]) -> str:
    """The columns lineage keeps out of the HITs, with why; columns left out only for not being core are counted."""
    not_core = [c for c, r in withheld.items() if r.endswith("is not declared core")]
    shown = [f"{c} ({r})" for c, r in withheld.items() if c not in not_core]
    if not_core:
        shown.append(f"{len(not_core)} column{'s' if len(not_core) > 1 else ''} not declared core "
                     f"({', '.join(not_core)})")
    return "; ".join(shown)


def estimate(state: State, query: str, statements: list[exp.Expression], ks: tuple[int, ...] = ()) -> QueryPlan:
    """What ``statements`` (parsed from ``query``, their values bound) would post to the crowd, cost and release:
    every step is run to estimate it, and nothing is bought, published or recorded. A query of several statements
    is rehearsed inside a transaction that is rolled back, so each statement is estimated against what the earlier
    ones create or fill (crowd answers are NULL there). ``ks``: every human call is estimated at each of them
    instead of its own k (the trade-off), in this one pass."""
    guards.refuse_unreadable_commands(state.con, statements)  # what the run would refuse
    guards.refuse_crowd_views(state.registry, statements)
    ctx = state.context(query)
    ctx.ks = tuple(ks)
    planner = Planner(state.con, state.registry, ctx, estimating=True)
    rehearse = len(statements) > 1 and not in_transaction(state.con)
    try:
        with rolled_back(state.con, rehearse):
            for i, statement in enumerate(statements):
                try:
                    planner.validate(statement)
                    guards.check_binds(state.con, state.registry, statement)
                except QueryError as err:
                    if i == 0 or rehearse:
                        raise
                    raise QueryError(f"{err}\n(explain() inside an open transaction cannot rehearse the earlier "
                                     "statements of the query, so this one cannot see what they create)") from None
                try:
                    rewritten = planner.rewrite(statement)
                except duckdb.Error as err:
                    raise from_duckdb(err) from None
                if rehearse and i < len(statements) - 1 and _rehearsable(rewritten):
                    _rehearse(state, rewritten, statement, planner.temp_roles)
    finally:
        planner.drop_temps()
    plan = QueryPlan(query, list(ctx.plans), list(ctx.reports), list(planner.steps))
    state.last_plan = plan
    return plan


def _rehearse(state: State, rewritten: exp.Expression, bound: exp.Expression,
              temp_roles: Mapping[str, Any] | None = None) -> None:
    """Run a statement of a multi-statement query inside explain()'s rolled-back transaction, so the statements
    after it are bound and estimated against the tables it creates or fills (crowd answers are NULL there)."""
    try:
        state.con.execute(rewritten.sql(DIALECT)).fetchall()
    except duckdb.Error as err:
        raise from_duckdb(err) from None
    if is_tracked(bound):
        roles.carry(state.con, [bound], temp_roles)


def _rehearsable(statement: exp.Expression) -> bool:
    """Does explain() run ``statement`` (in its rolled-back transaction) before estimating the next ones?"""
    if isinstance(statement, (exp.Create, exp.Drop)):
        return str(statement.args.get("kind") or "").upper() in _REHEARSED_KINDS
    return isinstance(statement, (exp.Insert, exp.Update, exp.Delete, exp.Alter))


def tradeoff(state: State, query: str, statements: list[exp.Expression], ks: list[int]) -> pd.DataFrame:
    """The k-anonymity trade-off of ``statements``: their estimate with every human operator's k set to each of
    ``ks``, in one estimating pass (the inputs are read once; each call's widening and estimate run per k). One row
    per (k, operator call), in the order of ``ks``; a k a call cannot have (fewer rows than k, the guard) is a row
    saying why, its figures missing; a query that cannot be estimated at all, one such row per k."""
    columns = ["k", "operator", "ncp", "accuracy_lower", "accuracy_upper", "hits", "estimated_cost", "refused"]
    try:  # (estimating rewrites its trees: copies)
        plan = estimate(state, query, [s.copy() for s in statements], ks=tuple(ks))
    except (ArgumentError, PrivacyError) as err:
        return pd.DataFrame([{"k": k, "refused": str(err)} for k in ks], columns=columns)
    order = {k: i for i, k in reversed(list(enumerate(ks)))}  # each k's first place in ks
    rows = []
    for op in sorted(plan.operators, key=lambda p: order.get(p.k, len(ks))):  # (stable: calls in their order)
        refused = op.note.split("would be refused: ", 1)[1] if "would be refused: " in op.note else None
        missing = op.anonymizer == NOT_ESTIMATED and refused is not None
        rows.append({"k": op.k, "operator": op.operator, "refused": refused, **(
            {} if missing else {"ncp": op.ncp, "accuracy_lower": op.accuracy_lower, "accuracy_upper": op.accuracy_upper,
                                "hits": op.hits, "estimated_cost": op.estimated_cost})})
    return pd.DataFrame(rows, columns=columns)


def before_run(state: State, query: str, statements: list[exp.Expression]) -> None:
    """A crowd query's estimate before it runs: refused, before anything is published, when the whole query is
    estimated over the connection's budget; then its k trade-off shown where the platform has a page for it."""
    if state.budget is not None:
        cost = estimate(state, query, [s.copy() for s in statements]).estimated_cost  # (estimating rewrites trees)
        check_query_budget(cost, state.budget)
    show_tradeoff(state, query, statements)


def show_tradeoff(state: State, query: str, statements: list[exp.Expression]) -> None:
    """A platform with a requester page (the web crowd) shows the query's k trade-off there before it runs."""
    if not state.platform.shows_tradeoff or not any(state.reader.asks_humans(s) for s in statements):
        return
    try:
        frame = tradeoff(state, query, statements, list(TRADEOFF_KS))
    except Exception:  # noqa: BLE001 - the panel is an aid: a query it cannot estimate runs without it
        return
    state.platform.show_tradeoff(query, frame)
