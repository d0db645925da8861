"""Small DuckDB connection helpers shared by the catalog, the operators and the SQL surface."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import duckdb
import pandas as pd
import pyarrow as pa
import sqlglot
from sqlglot import exp

from . import _sql
from .errors import QueryError


def in_transaction(con: duckdb.DuckDBPyConnection) -> bool:
    """True inside an explicit transaction (BEGIN ... COMMIT): its statements share one transaction id, while in
    auto-commit mode every statement gets a new one. (Probing with BEGIN would abort the caller's transaction.)"""
    first = con.execute("SELECT txid_current()").fetchall()
    return con.execute("SELECT txid_current()").fetchall() == first


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """One transaction around the block; inside the caller's own transaction, that one (DuckDB does not nest)."""
    if in_transaction(con):
        yield
        return
    con.execute("BEGIN TRANSACTION")
    try:
        yield
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


@contextlib.contextmanager
def registered(con: duckdb.DuckDBPyConnection, **frames: pd.DataFrame) -> Iterator[None]:
    """DataFrames visible to SQL under the given names for the block, and gone after it."""
    for name, frame in frames.items():
        con.register(name, frame)
    try:
        yield
    finally:
        for name in frames:
            con.unregister(name)


@contextlib.contextmanager
def rolled_back(con: duckdb.DuckDBPyConnection, active: bool = True) -> Iterator[None]:
    """A transaction around the block that is always rolled back (nothing when not ``active``): explain() rehearses
    a query's earlier statements in it."""
    if not active:
        yield
        return
    con.execute("BEGIN TRANSACTION")
    try:
        yield
    finally:
        try:
            con.execute("ROLLBACK")
        except duckdb.TransactionException:  # something ended the transaction: what ran before that was kept
            raise QueryError("explain(): the transaction its rehearsal runs in was ended by a statement it ran, so "
                             "what the earlier statements created or changed was not rolled back") from None


@contextlib.contextmanager
def setting(con: duckdb.DuckDBPyConnection, name: str, value: bool) -> Iterator[None]:
    """A boolean DuckDB setting at ``value`` for the block, then back to what the connection's owner had."""
    with settings(con, **{name: value}):
        yield


@contextlib.contextmanager
def settings(con: duckdb.DuckDBPyConnection, **values: bool) -> Iterator[None]:
    """Boolean DuckDB settings at ``values`` for the block, then back to what the connection's owner had: read in
    one statement, changed (and changed back) in one, only those that differ."""
    names = list(values)  # ours, never user text
    was = con.execute(f"SELECT {', '.join('current_setting(?)' for _ in names)}", names).fetchall()[0]
    changed = {n: bool(w) for n, w in zip(names, was) if bool(w) != values[n]}
    if not changed:
        yield
        return
    con.execute("; ".join(f"SET {n} = {'true' if values[n] else 'false'}" for n in changed)).fetchall()
    try:
        yield
    finally:
        con.execute("; ".join(f"SET {n} = {'true' if w else 'false'}" for n, w in changed.items())).fetchall()


def snapshot(con: duckdb.DuckDBPyConnection, query: str, coded: bool = False
             ) -> tuple[pa.Table, list[duckdb.DuckDBPyType]]:
    """The rows of ``query``, run once, as an immutable Arrow table in the query's order, and each column's DuckDB
    type. Exported losslessly (UUID, HUGEINT, JSON, BIT, TIMETZ travel as Arrow extension types and read back as
    themselves); only an ENUM comes back as VARCHAR, which ``arrow_select`` casts back. ``coded``: an input of more
    than ``CODED_FROM`` rows holds its text columns of few distinct values as Arrow dictionary arrays (``_coded``);
    their type is still VARCHAR."""
    relation = con.sql(query)
    types = list(relation.types)
    # the types plain Arrow export turns into others (anywhere in a nested type; a false alarm costs two SETs)
    lossy = any(name in str(t).upper() for t in types for name in _LOSSY_IN_ARROW)
    # text as large_string (64-bit offsets): pandas holds exactly that, so a column read as pandas is the snapshot's
    # own buffers, not a copy (10M rows: 0.2 s and 90 MB per text column saved, and factorizing it is faster)
    text = any(t.id == "varchar" for t in types)
    plain_text = [i for i, t in enumerate(types) if str(t) == "VARCHAR"]  # (JSON: text to DuckDB, not to Arrow)
    with settings(con, preserve_insertion_order=True, **({"arrow_lossless_conversion": True} if lossy else {}),
                  **({"arrow_large_buffer_size": True} if text else {})):
        if not (coded and plain_text):
            return relation.to_arrow_table(), types
        head = _head(relation, CODED_FROM + 1)  # a small input whole: still one run of it
        if head.num_rows <= CODED_FROM:
            return head, types
        return _coded(con, query, relation, head, plain_text) or relation.to_arrow_table(), types


def _head(relation: duckdb.DuckDBPyRelation, rows: int) -> pa.Table:
    """At least the first ``rows`` rows of ``relation`` in its order, or all of them when it holds fewer: its Arrow
    stream read until then and closed (ours: in this DuckDB a LIMIT made the export of Adult's 30,162 rows take 29-34
    ms where the plain export takes 14-22 and the stream 11-15; the stream's batches hold ``rows`` rows at most). A
    query that fails as it runs is read again through the LIMIT, which raises DuckDB's own error (the stream raises
    Arrow's, an OSError, which no caller would read as the statement's)."""
    reader = relation.to_arrow_reader(rows)
    try:
        batches, held = [], 0
        for batch in reader:
            batches.append(batch)
            held += batch.num_rows
            if held >= rows:
                break
        return pa.Table.from_batches(batches, schema=reader.schema)
    except (pa.ArrowException, OSError):
        pass
    finally:
        reader.close()
    return relation.limit(rows).to_arrow_table()


#: from how many rows ``snapshot(..., coded=True)`` holds text of few distinct values dictionary-coded (ours, issue
#: 27: 10M rows of Adult's nine text columns take 1.6 GB as text, 0.1 GB coded; below this the two extra passes cost
#: more than the text)
CODED_FROM = 100_000
#: a text column is coded when the input's first ``CODED_FROM`` rows hold at most this share of distinct values and
#: the whole input at most ``CODED_MAX`` (an ENUM of them is spelt in the statement)
CODED_SHARE = 0.1
CODED_MAX = 1 << 16


def _coded(con: duckdb.DuckDBPyConnection, query: str, relation: duckdb.DuckDBPyRelation, head: pa.Table,
           text: list[int]) -> pa.Table | None:
    """``query``'s rows (more than ``CODED_FROM``, ``head`` their first ones) with each text column of few distinct
    values cast to an ENUM of its distinct values, which DuckDB exports as a dictionary array: one pass for the
    distinct values, one for the rows (ours: DuckDB exports text as text, and a dictionary made in Python from
    exported batches peaks higher; an ENUM of the first rows' values alone missed one of Adult's 41 countries at 10M
    rows, and reading the rows again costs more than the pass). None when no column qualifies, or when the rows hold
    a value the first pass did not see (a query that reads differently each time): then the caller exports it
    plainly."""
    import pyarrow.compute as pc

    few = [i for i in text if pc.count_distinct(head.column(i), mode="all").as_py() <= CODED_SHARE * head.num_rows]
    if not few:
        return None
    names = [f"c{i}" for i in range(len(relation.columns))]  # by position: any names, duplicates too
    source = f"({query}) AS __crowd_input({', '.join(names)})"
    found = con.execute(f"SELECT {', '.join(f'list(DISTINCT {names[i]})' for i in few)} FROM {source}").fetchall()[0]
    enums = {}
    for i, values in zip(few, found):
        values = sorted(v for v in values if v is not None)  # (the ENUM's order: as Python sorts text)
        if len(values) <= CODED_MAX:
            enums[i] = exp.DataType(this=exp.DataType.Type.ENUM, expressions=[exp.Literal.string(v) for v in values])
    if not enums:
        return None
    select = [exp.Cast(this=exp.column(n), to=enums[i]) if i in enums else exp.column(n)
              for i, n in enumerate(names)]
    try:
        table = con.sql(f"SELECT {', '.join(e.sql(_sql.DIALECT) for e in select)} FROM {source}").to_arrow_table()
    except duckdb.ConversionException:  # a value the first pass did not see: the rows differ between runs
        return None
    return table.rename_columns(relation.columns)


def stacked(first: pa.Table, then: pa.Table) -> pa.Table:
    """``first``'s rows, then ``then``'s (the same columns): a text column coded in either (``snapshot``) is coded in
    both, one dictionary type for the two (each part keeps its own dictionary; a reader unifies them)."""
    columns = []
    for a, b in zip(first.columns, then.columns):
        if a.type != b.type and (pa.types.is_dictionary(a.type) or pa.types.is_dictionary(b.type)):
            a, b = a.cast(_CODED_TEXT), b.cast(_CODED_TEXT)
        columns.append(pa.chunked_array([*a.chunks, *b.chunks], a.type))
    return pa.Table.from_arrays(columns, names=first.column_names)


_CODED_TEXT = pa.dictionary(pa.int32(), pa.large_string())


_LOSSY_IN_ARROW = ("UUID", "HUGEINT", "JSON", "BIT", "TIME WITH TIME ZONE")


def arrow_select(con: duckdb.DuckDBPyConnection, name: str, table: pa.Table | pd.DataFrame,
                 types: list[duckdb.DuckDBPyType | None] | None = None) -> tuple[exp.Select, list[str]]:
    """``table`` registered as ``name`` (no copy: DuckDB scans it in place) and a SELECT over it: column i reads as
    ``types[i]`` where Arrow lost that type (None: as read), rows in the table's order. Splicing the SELECT into a
    query makes no catalog entry (no view to create and drop). Returns the SELECT and its columns: DuckDB's names, duplicates made unique as CREATE TABLE AS makes them."""
    con.register(name, table)
    names = list(table.column_names if isinstance(table, pa.Table) else table.columns)
    if types is None and all(isinstance(c, str) for c in names) and len({c.lower() for c in names}) == len(names):
        # nothing to cast and names DuckDB keeps as they are (distinct, whatever their case): no binding needed
        return exp.select(*(_sql.column(c) for c in names)).from_(_sql.table(name)), names
    try:
        relation = con.sql(_sql.select_all(name).sql(_sql.DIALECT))  # bound, not run: DuckDB's column names
        select, columns = [], []
        for column, was, wanted in zip(relation.columns, relation.types, types or [None] * len(relation.columns)):
            ref = _sql.column(column)
            columns.append(column)
            select.append(ref if wanted is None or str(wanted) == str(was) else
                          exp.alias_(exp.Cast(this=ref, to=_data_type(wanted)), _sql.identifier(column)))
        query = exp.select(*select).from_(_sql.table(name))
    except BaseException:
        con.unregister(name)
        raise
    return query, columns


def _data_type(duck: duckdb.DuckDBPyType) -> exp.DataType:
    """A DuckDB type as a sqlglot node; an ENUM's values as string literals (user text, never parsed)."""
    if duck.id == "enum":
        values = dict(duck.children)["values"]
        return exp.DataType(this=exp.DataType.Type.ENUM, expressions=[exp.Literal.string(v) for v in values],
                            nested=False)
    try:
        return exp.DataType.build(str(duck), dialect=_sql.DIALECT)
    except sqlglot.errors.SqlglotError:  # fail closed: a column that cannot keep its type is not passed on
        raise QueryError(f"a column of type {duck} does not read back from Arrow as itself and its type cannot be "
                         "spelt for a cast; cast it in the input (e.g. to VARCHAR)") from None
