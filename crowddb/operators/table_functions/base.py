"""What every table function shares: its input frozen as Arrow, its rows, report and release, the spec that
declares it (``TableFunctionSpec``), and the helpers that read claims."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
from sqlglot import exp

from ... import _sql
from ..._duck import setting
from ...arguments import NUMBER, check_finite
from ...errors import (
    CrowdDBError,
    EmptyInputError,
    UnknownColumnError,
)
from ...store import TableRoles, composition, privacy
from ..context import OperatorContext


@dataclasses.dataclass
class TableInput:
    """A table function's input: ``snapshot``, the input's rows run once and frozen as Arrow (in the input's order),
    read through ``source`` (a SELECT over it giving each column its DuckDB type; or what makes that SELECT, called
    the first time a column is read through it) as far as the function needs them."""

    con: duckdb.DuckDBPyConnection
    source: exp.Select | Callable[[], exp.Select]
    columns: list[str]
    snapshot: pa.Table
    types: list[duckdb.DuckDBPyType]
    row_refs: np.ndarray | None = None  # each row's rowid in the one table it is of (privacy ledger), if it is
    ledger_table: str | None = None  # that table, as the privacy ledger names it
    widened: int = 0  # rows added (the last ones) to keep earlier classes whole (``Planner._widened_input``)
    #: the joint classes of ``row_refs`` (``composition.joint_classes``) when the planner read them to widen the rows
    joint_classes: pd.DataFrame | None = None
    #: the release on record this call repeats (``repeats.find``): served as it was, nothing computed again
    repeat: Any = None

    def df(self, columns: list[str] | None = None, coded: tuple[str, ...] = ()) -> pd.DataFrame:
        """The input's rows (only ``columns``, in the input's column order, if given) as pandas. Text the snapshot
        holds dictionary-coded (``_duck.snapshot``) reads as pandas' str, or as an unordered Categorical for the
        ``coded`` columns (the same values, each text held once)."""
        keep = set(self.columns if columns is None else columns)
        wanted = [i for i, c in enumerate(self.columns) if c in keep]
        # text and NULL-free plain numbers straight from the snapshot (Arrow gives the dtypes DuckDB's conversion
        # gives: pandas' str, int32/int64, float64, bool); every other type through DuckDB's own conversion (NULLs,
        # decimals, enums, dates)
        direct = {i: self.snapshot.column(i) for i in wanted
                  if self.types[i].id == "varchar" or (self.types[i].id in _PLAIN_NUMBERS
                                                       and self.snapshot.column(i).null_count == 0)}
        columns = {self.columns[i]: (_text(c, self.columns[i] in coded) if self.types[i].id == "varchar"
                                     else _owned(c.to_numpy()))
                   for i, c in direct.items()}
        others = [self.columns[i] for i in wanted if i not in direct]
        if others:
            if callable(self.source):  # registered only now: most inputs are read straight from the snapshot
                self.source = self.source()
            query = exp.select(*(_sql.column(c) for c in others)).from_(
                self.source.subquery(_sql.identifier("__crowd_input")))
            with setting(self.con, "preserve_insertion_order", True):  # the rows line up with the snapshot's
                converted = self.con.execute(query.sql(_sql.DIALECT)).df()
            columns.update(converted.items())
        # every column is the frame's own (made here, or Series pandas tracks): not copied again (10M rows of
        # Adult's quasi-identifiers: 150 MB)
        return pd.DataFrame({self.columns[i]: columns[self.columns[i]] for i in wanted},
                            index=pd.RangeIndex(self.rows), copy=False)

    @property
    def rows(self) -> int:
        return self.snapshot.num_rows


def _owned(values: np.ndarray) -> np.ndarray:
    """``values``, or a copy of them when they are the snapshot's own read-only buffer (one chunk: no copy made)."""
    return values if values.flags.writeable else values.copy()


def _text(column: pa.ChunkedArray, coded: bool) -> pd.Series | pd.Categorical:
    """A text column of the snapshot as pandas: str, or a Categorical when it is dictionary-coded and ``coded``."""
    if not pa.types.is_dictionary(column.type):
        return column.to_pandas()
    if not coded:
        return column.cast(pa.large_string()).to_pandas()  # as a plain export gives it
    if column.null_count:
        return column.to_pandas()
    # the indices are the codes, taken as they are (the chunks of an exported ENUM share one dictionary, which
    # combine_chunks keeps; Arrow's conversion to pandas unifies them chunk by chunk: at 10M rows 0.04 s and 20-30 MB
    # of its memory pool per column, against 0.002 s and the 10 MB of codes)
    whole = column.combine_chunks()
    return pd.Categorical.from_codes(whole.indices.to_numpy(), categories=pd.Index(whole.dictionary.to_pandas()))


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
    #: what the planner keeps, once the release is recorded as a repeat, for the next call that repeats it
    #: (``repeats.keep``); None: nothing to keep
    remember: Any = None


#: (context, input, named arguments, the input's column roles) -> its rows, report and release



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


def _claim_columns(named: dict[str, Any]) -> list[str] | None:
    """The columns TRUTH_DISCOVER and PRIVATE_SYNTH read: object, source and value (None if not all named as text:
    then the whole input is read and the function reports what is wrong)."""
    columns = [named.get(role) for role in _CLAIM_ROLES]
    return columns if all(isinstance(c, str) for c in columns) else None


#: (context, input, named arguments, the input's column roles) -> its rows, report and release
TableFunction = Callable[[OperatorContext, TableInput, dict[str, Any], TableRoles], TableResult]
#: the input columns a table function reads, from its named arguments (None: all of them)
Reads = Callable[[dict[str, Any]], "list[str] | None"]
#: a DP release's charge, declared from the frozen input and the arguments before the function runs (None: the call
#: releases nothing under DP, or its arguments are bad and the function itself says so)
Charges = Callable[[TableInput, dict[str, Any]], "privacy.Charge | None"]
#: a logged act on a table instead of a release (PRIVACY_BUDGET): (store, the table's ledger name, what was asked)
Acts = Callable[[Any, str, ReleaseEntry], None]


def reads_everything(named: dict[str, Any]) -> list[str] | None:
    return None


@dataclasses.dataclass(frozen=True)
class TableFunctionSpec:
    """One table function, declared once: what it reads, what it charges, what it records and how it runs. The
    reserved operator names, the token scan's names and the planner's dispatch all derive from the registered specs
    (``crowddb.operators.table_functions.register``)."""

    name: str                           # as called in SQL (any case): ``SELECT * FROM NAME(input, arg := ...)``
    run: TableFunction
    reads: Reads = reads_everything     # the input columns it reads: only those leave DuckDB
    charge: Charges | None = None       # its DP release's charge on the epsilon budget (checked before it runs)
    traced: bool = False                # it releases stored rows: the k-anonymity ledger records them by identity
    act: Acts | None = None             # a logged act on the input table instead of a release
    table_input: str | None = None      # its input must be one stored table's name: why (a budget is per table)
    roles: bool = True                  # it reads its input's column roles (False: handed none, none looked up)
    coded: bool = False                 # a large input's text of few distinct values is held coded (its
                                        # release carries every column: issue 27, ``_duck.snapshot``)

    @property
    def sql_name(self) -> str:
        return self.name.upper()

