"""Data in with its roles: a CSV file or a frame loaded into a table and its column roles declared, in one
transaction (all or nothing). ``CrowdDB.load_csv`` and ``CrowdDB.load_frame`` are these."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import duckdb
from sqlglot import exp

from .. import _sql
from .._duck import registered, transaction
from .._sql import DIALECT
from ..errors import ArgumentError, CrowdDBError, from_duckdb
from ..privacy import identity
from .roles import declare_roles

_FRAMES = itertools.count(1)
#: what load_frame takes: (module prefix, class name) of the frame types DuckDB scans
_FRAME_TYPES = (("pandas", "DataFrame"), ("pyarrow", "Table"), ("pyarrow", "RecordBatch"),
                ("pyarrow", "RecordBatchReader"), ("pyarrow", "Dataset"),
                ("polars", "DataFrame"), ("duckdb", "DuckDBPyRelation"))


def load_csv(con: duckdb.DuckDBPyConnection, table: str, path: str | Path, replace: bool,
             roles: Mapping[str, Any], read_csv_options: Mapping[str, Any]) -> duckdb.DuckDBPyRelation:
    """Load a CSV file into ``table`` and declare its column ``roles`` (``declare_roles``' keywords)."""
    path = Path(path)
    if not path.exists():
        raise ArgumentError(f"no such file: {path}")
    if path.is_dir():
        raise ArgumentError(f"load_csv: {path} is a folder; pass the path of one CSV file")
    size = path.stat().st_size
    if size == 0 or (size < 4096 and not path.read_bytes().strip()):
        raise ArgumentError(f"load_csv: the CSV file {path} is empty (no header, no rows); nothing was loaded. "
                            "Check the path, or write at least a header line")
    options = {k: exp.convert(v) for k, v in read_csv_options.items()}
    reader = exp.Anonymous(this="read_csv", expressions=[exp.convert(str(path))] + [
        exp.PropertyEQ(this=exp.to_identifier(k), expression=v) for k, v in options.items()])
    _refuse_repeated_header(con, reader)
    return _load(con, table, exp.select("*").from_(reader), replace, roles)


def _refuse_repeated_header(con: duckdb.DuckDBPyConnection, reader: exp.Anonymous) -> None:
    """A header that names a column twice (``id,age,age,job``) would load the second copy as ``age_1``, a column
    no role names: a raw copy of a quasi-identifier. Refused before anything is created."""
    try:
        names = [d[0] for d in con.execute(exp.select("*").from_(reader.copy()).limit(0).sql(DIALECT)).description]
        raw = reader.copy()
        raw.set("expressions", [*raw.expressions, exp.PropertyEQ(this=exp.to_identifier("header"),
                                                                  expression=exp.false()),
                                exp.PropertyEQ(this=exp.to_identifier("all_varchar"), expression=exp.true())])
        first = con.execute(exp.select("*").from_(raw).limit(1).sql(DIALECT)).fetchall()
    except duckdb.Error:
        return  # DuckDB reports an unreadable file when it loads it
    if not first or len(first[0]) != len(names):
        return
    texts = [str(v).strip() if v is not None else "" for v in first[0]]
    header = all(n.lower() == t.lower() or n.lower().startswith(t.lower() + "_") for n, t in zip(names, texts))
    if not header or len({t.lower() for t in texts}) == len(texts):
        return  # no header (the first line is data), or a header without repeats
    seen: dict[str, str] = {}
    for text in texts:
        if text.lower() in seen:
            raise ArgumentError(f"the CSV header names column {text!r} twice; DuckDB would load the second copy "
                                "under another name, with none of the roles declared for the first: rename or "
                                "drop the repeated column in the file (or pass names := [...])")
        seen[text.lower()] = text


def load_frame(con: duckdb.DuckDBPyConnection, table: str, frame: Any, replace: bool,
               roles: Mapping[str, Any]) -> duckdb.DuckDBPyRelation:
    """Load a pandas DataFrame (or Arrow table or record batch, polars DataFrame, DuckDB relation) into ``table``
    and declare its column ``roles``."""
    _check_frame(frame)
    view = f"__crowd_frame_{next(_FRAMES)}"
    try:
        with registered(con, **{view: frame}):
            return _load(con, table, _sql.select_all(view), replace, roles)
    except CrowdDBError:
        raise
    except duckdb.Error as err:  # registering a frame DuckDB cannot scan
        raise ArgumentError(f"load_frame: DuckDB cannot read this {type(frame).__name__}: {err}") from None


def _load(con: duckdb.DuckDBPyConnection, table: str, select: exp.Select, replace: bool,
          roles: Mapping[str, Any]) -> duckdb.DuckDBPyRelation:
    if not isinstance(table, str) or not table:
        raise ArgumentError("table name must be a non-empty string")
    # a name, never parsed ("a.b" is one table, "x; checkpoint" runs nothing), in the current database and schema,
    # where an unqualified CREATE TABLE makes it, spelt out: what its roles belong to is exactly this table
    database, schema = con.execute("SELECT current_database(), current_schema()").fetchall()[0]
    made = identity.TableId(database, schema, table, home=database.lower() == identity.home(con).lower())
    create = exp.Create(this=made.ref(), kind="TABLE", expression=select, replace=replace)
    try:
        with transaction(con):  # the table and its roles appear together, or neither does
            con.execute(create.sql(DIALECT))
            declare_roles(con, made.key, **roles, transaction=False)
    except duckdb.Error as err:
        raise from_duckdb(err) from None
    return con.sql(exp.select("*").from_(made.ref()).sql(DIALECT))


def _check_frame(frame: Any) -> None:
    """load_frame's input must be a frame DuckDB scans; anything else is an ArgumentError naming what is taken."""
    for cls in type(frame).__mro__:
        if (cls.__module__.split(".")[0], cls.__name__) in _FRAME_TYPES:
            return
    raise ArgumentError(f"load_frame takes a pandas DataFrame, a pyarrow Table, RecordBatch, RecordBatchReader or "
                        f"Dataset, a polars DataFrame or a DuckDB relation; got {type(frame).__name__}")
