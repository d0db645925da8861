"""Table functions: TRUTH_DISCOVER, PRIVATE_SYNTH, ANONYMIZE and PRIVACY_BUDGET, each declared once as a
``TableFunctionSpec`` and registered here. Each binds its named arguments, reads from its input what its algorithm
needs, calls the algorithm layer and returns its rows (a DataFrame, or for ANONYMIZE an Arrow table DuckDB reads in
place), its report and a description of what it released; the planner records the release in ``crowddb_releases``
(a run, not explain()). A function writes nothing itself.

What derives from the registry: the names a human operator may not take (``crowddb.udf``), the names the token scan
looks for (a query calling one is planned), and the planner's dispatch (``spec.run``, ``spec.reads``,
``spec.charge``, ``spec.traced``, ``spec.act``)."""

from __future__ import annotations

from . import anonymize, privacy_budget, private_synth, truth_discover
from .base import (
    ArrowRows,
    ReleaseEntry,
    TableFunction,
    TableFunctionSpec,
    TableInput,
    TableResult,
)
from .charged_unit import check_charged_unit

__all__ = ["TABLE_FUNCTIONS", "ArrowRows", "ReleaseEntry", "TableFunction", "TableFunctionSpec", "TableInput",
           "TableResult", "check_charged_unit", "names", "register", "unregister"]

#: every table function, by its lower-case name
TABLE_FUNCTIONS: dict[str, TableFunctionSpec] = {}
_names: frozenset[str] = frozenset()  # the same object until the registry changes (callers cache on it)


def register(spec: TableFunctionSpec) -> TableFunctionSpec:
    """Make ``spec`` a table function of every connection: callable in SQL, reserved, scanned for, dispatched."""
    global _names
    if not spec.name.isidentifier():
        raise ValueError(f"a table function's name must be an SQL identifier, got {spec.name!r}")
    TABLE_FUNCTIONS[spec.name.lower()] = spec
    _names = frozenset(TABLE_FUNCTIONS)
    return spec


def unregister(name: str) -> None:
    global _names
    TABLE_FUNCTIONS.pop(name.lower(), None)
    _names = frozenset(TABLE_FUNCTIONS)


def names() -> frozenset[str]:
    """The registered table functions' names, lower case."""
    return _names


for _module in (truth_discover, private_synth, anonymize, privacy_budget):
    register(_module.SPEC)
