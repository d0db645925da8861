"""One error hierarchy for crowddb: every error a user can trigger is a CrowdDBError raised at the boundary.

Errors of the SQL surface are DuckDB's too, as a DuckDB user's code expects: a typo in a crowd query is a
``SQLParseError`` and a ``duckdb.ParserException``; a statement DuckDB rejected on crowddb's behalf is a ``QueryError``
of DuckDB's own class (``except duckdb.CatalogException`` catches a missing table in a crowd query as in plain SQL).
This module imports duckdb only for those exception classes."""

from __future__ import annotations

import functools

import duckdb


class CrowdDBError(Exception):
    """Base class of every error crowddb raises on purpose."""


class SQLParseError(CrowdDBError, duckdb.ParserException):
    """The SQL text could not be parsed (also a ``duckdb.ParserException``)."""


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


class QueryError(CrowdDBError, duckdb.Error):
    """DuckDB rejected a query that crowddb ran on the user's behalf; the message is DuckDB's, and ``duckdb_error``
    makes it an instance of DuckDB's class of that error as well."""


@functools.cache
def _with_duckdb_class(cls: type[CrowdDBError], duck: type[duckdb.Error]) -> type[CrowdDBError]:
    """``cls`` that is also DuckDB's ``duck`` (one class per pair, named like both; kept on this module so it
    pickles)."""
    if issubclass(cls, duck):
        return cls
    name = f"{cls.__name__}_{duck.__name__}"
    made = type(name, (cls, duck), {"__module__": __name__, "__doc__": cls.__doc__, "__qualname__": name})
    globals()[name] = made
    return made


def duckdb_error(cls: type[CrowdDBError], err: duckdb.Error) -> CrowdDBError:
    """A crowddb error of class ``cls`` with DuckDB's message that ``except type(err)`` catches too."""
    return _with_duckdb_class(cls, type(err))(str(err))


def from_duckdb(err: duckdb.Error) -> CrowdDBError:
    """DuckDB's error as crowddb's (still catchable as DuckDB's own class): a missing column is an
    UnknownColumnError, anything else a QueryError; crowddb's own errors pass unchanged."""
    if isinstance(err, CrowdDBError):
        return err
    message = str(err).lower()
    if isinstance(err, duckdb.BinderException) and "not found" in message and "column" in message:
        return duckdb_error(UnknownColumnError, err)
    return duckdb_error(QueryError, err)


class StatementRefusedError(PrivacyError):
    """A statement of a kind that could move a protected value past crowddb's roles (MERGE, IMPORT DATABASE, a
    prepared statement, ...) is refused while anything is protected; nothing was run. The message names the way that
    works."""


class PrivacyBudgetError(PrivacyError):
    """A differentially private release would overspend a table's epsilon budget (nothing was released or charged),
    or the budget ledger was written around the API (plain SQL) or edited (its hash chain is broken)."""


class CrowdDBWarning(UserWarning):
    """Something worked but may not be what the user meant (e.g. a release with no rows), said with the reason."""
