"""One error hierarchy for crowddb: every error a user can trigger is a CrowdDBError raised at the boundary."""

from __future__ import annotations


class CrowdDBError(Exception):
    """Base class of every error crowddb raises on purpose."""


class SQLParseError(CrowdDBError):
    """The SQL text could not be parsed."""


class UnknownOperatorError(CrowdDBError):
    """A function name looked like a crowd operator but none is registered under it."""


class ArgumentError(CrowdDBError, ValueError):
    """An operator or algorithm got an unknown, missing, mistyped or out-of-range argument."""


class UnknownColumnError(ArgumentError):
    """A named column does not exist in the input."""


class EmptyInputError(ArgumentError):
    """An operator's input has no rows."""


class BudgetExceededError(CrowdDBError):
    """A query's estimated crowd cost exceeds its budget; nothing was published."""


class PrivacyError(CrowdDBError):
    """A privacy requirement (k, l, epsilon, roles) cannot be met for the given input."""


class PlatformError(CrowdDBError):
    """The crowd platform failed to publish HITs or to return assignments."""


class UnknownHITError(PlatformError):
    """The platform does not know (any longer) HITs it was asked to collect: they cannot be collected, ever."""


class AnswersOutstandingError(PlatformError):
    """The query's time ran out while people still had assignments out. Its HITs stay on record as published:
    running the same query again later collects them without buying anything twice."""

    def __init__(self, message: str, *, outstanding: int = 0, total: int = 0) -> None:
        super().__init__(message)
        self.outstanding = outstanding  # assignments not yet submitted
        self.total = total              # assignments the HITs asked for


class QueryError(CrowdDBError):
    """DuckDB rejected a query that crowddb ran on the user's behalf; the message is DuckDB's."""


class PrivacyBudgetError(PrivacyError):
    """A differentially private release would overspend a table's epsilon budget (nothing was released or charged),
    or the budget ledger was written around the API (plain SQL) or edited (its hash chain is broken)."""
