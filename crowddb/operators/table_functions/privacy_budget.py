"""PRIVACY_BUDGET: a logged act on a table's epsilon budget (set or reset), not a release."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ...arguments import NUMBER, Param, bind
from ...errors import (
    ArgumentError,
)
from ...store import TableRoles, privacy
from ..context import OperatorContext
from .base import (
    ReleaseEntry,
    TableFunctionSpec,
    TableInput,
    TableResult,
)


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



def _budget_act(store, table: str, asked: ReleaseEntry) -> None:
    """Write the act PRIVACY_BUDGET asked for on ``table``'s budget (a run only; explain() writes nothing)."""
    if asked.method == "reset":
        store.reset_privacy_budget(table, asked.params["unit"])
    else:
        store.set_privacy_budget(table, epsilon=asked.epsilon, delta=asked.delta, unit=asked.params["unit"],
                                 composition=asked.params["composition"])


SPEC = TableFunctionSpec("privacy_budget", privacy_budget, reads=lambda named: [], act=_budget_act,
                         table_input="budgets are per table")  # the input is only a name: no row is read
