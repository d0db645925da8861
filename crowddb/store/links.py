"""Rows keep their identity: a table renamed, copied or filled from a protected table's rows shares that table's
privacy ledger and epsilon budget (issue 24).

A worker who links releases does not care under which name the rows were asked about: three releases of the same
people through ``adult``, a copy ``people`` and ``adult`` renamed to ``adults`` are one history. So every table a
statement makes or fills from one table's rows (lineage: ``crowddb.lineage.carry_roles``), and every table renamed,
is linked to that table's root, and the ledger (``composition``) and the budget (``privacy``) keep their records
under the root. ``carried`` says which of the table's columns are unchanged copies of which of the root's: the key
among them tells its rows apart as the root's (a copy without the key cannot be tied to the root's rows, and its
releases are refused), and a charged source column must be one of them (a rewritten worker id is a new unit).
"""

from __future__ import annotations

import json

import duckdb

from . import memo

LINKS = "crowddb_ledger_links"
_DEPTH = 64  # longer chains than any sequence of renames and copies makes: a cycle, read as no link


def root(con: duckdb.DuckDBPyConnection, table: str) -> str:
    """The table whose ledger and budget ``table`` (a key, lower-cased here) shares: itself when it has no link. Read
    once per table-function step (``memo``)."""
    return memo.cached(con, ("root", table.lower()), lambda: _root(con, table.lower()))


def _root(con: duckdb.DuckDBPyConnection, table: str) -> str:
    for _ in range(_DEPTH):
        rows = con.execute(f"SELECT root FROM {LINKS} WHERE table_name = ?", [table]).fetchall()
        if not rows or rows[0][0] == table:
            return table
        table = rows[0][0]
    return table


def carried(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, str] | None:
    """{column of ``table``: the column of its root it is an unchanged copy of} (lower-cased); None when ``table``
    has no link (it is its own root: every column is its own)."""
    table = table.lower()
    out: dict[str, str] | None = None
    for _ in range(_DEPTH):
        rows = con.execute(f"SELECT root, carried FROM {LINKS} WHERE table_name = ?", [table]).fetchall()
        if not rows or rows[0][0] == table:
            return out
        step = json.loads(rows[0][1])
        out = step if out is None else {c: step[r] for c, r in out.items() if r in step}
        table = rows[0][0]
    return out


def link(con: duckdb.DuckDBPyConnection, table: str, source: str, columns: dict[str, str], reason: str) -> None:
    """Link ``table`` to ``source``'s root; ``columns``: {column of ``table``: column of ``source``} it holds
    unchanged (the caller's transaction)."""
    table, source = table.lower(), source.lower()
    top = root(con, source)
    if top == table:  # the rows are back under their own name (a copy made, the table dropped, made again)
        con.execute(f"DELETE FROM {LINKS} WHERE table_name = ?", [table])
        return
    through = carried(con, source)
    mapped = {c.lower(): s.lower() for c, s in columns.items()}
    if through is not None:
        mapped = {c: through[s] for c, s in mapped.items() if s in through}
    con.execute(f"INSERT OR REPLACE INTO {LINKS} VALUES (?, ?, ?, ?)",
                [table, top, json.dumps(mapped, sort_keys=True), reason])


def column_renamed(con: duckdb.DuckDBPyConnection, table: str, old: str, new: str) -> None:
    """A column of ``table`` was renamed: the copy it holds of its root's column is the same under the new name."""
    rows = con.execute(f"SELECT carried FROM {LINKS} WHERE table_name = ?", [table.lower()]).fetchall()
    if rows:
        mapped = json.loads(rows[0][0])
        if old.lower() in mapped:
            mapped[new.lower()] = mapped.pop(old.lower())
            con.execute(f"UPDATE {LINKS} SET carried = ? WHERE table_name = ?",
                        [json.dumps(mapped, sort_keys=True), table.lower()])


def renamed(con: duckdb.DuckDBPyConnection, old: str, new: str, columns: list[str]) -> None:
    """``old`` is now called ``new``: its rows, its records, the links of tables made from it."""
    old, new = old.lower(), new.lower()
    moved = con.execute(f"SELECT root, carried, reason FROM {LINKS} WHERE table_name = ?", [old]).fetchall()
    con.execute(f"DELETE FROM {LINKS} WHERE table_name = ?", [old])
    if moved:
        con.execute(f"INSERT OR REPLACE INTO {LINKS} VALUES (?, ?, ?, ?)", [new, *moved[0]])
    else:  # the records stay under the old key, now the root of the renamed table
        link(con, new, old, {c: c for c in columns}, "renamed")
