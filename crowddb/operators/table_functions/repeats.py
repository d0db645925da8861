"""A repeat of a k-anonymous release recognised without computing it again.

Asked again for the rows it released, ANONYMIZE shows them in the boxes the ledger has for them (the persisted
partition, ``privacy.serve``): a release computed from the ledger's joint classes of those rows and from their
quasi-identifiers alone, and recorded as a repeat of the earlier one (same rows, same boxes: same fingerprint). Asked
once more with the same request (same arguments and roles), the same rows with the same quasi-identifier values, and a
ledger no release has changed since, it is that release again: this module keeps it (per connection, one per
table) and hands it back, so that the served path reads no joint class, plans nothing and boxes no row. What the
release shows is computed as before (the rows gathered from this call's input, in this call's order), and the ledger
still checks and records it as a repeat.

"No release has changed the ledger" is read from the table's ledger counters (``composition.version``; releases of
other tables change none of its rows' histories): every release recorded bumps its table's count in
crowddb_ledger_tables and adds a crowddb_ledger row, a forgotten run removes one, and the newest row's number tells a
release recorded after a ROLLBACK from the one rolled back (same counts, a larger number from the ledger's
sequence); the links of renamed and copied tables (``store.links``) are read whole (a handful of rows). A release is
kept only when, right after it was recorded, the counters moved by exactly its own record and the ledger holds it as
a repeat (a release that showed anything new changes the joint classes the next call would read).
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ...store import TableRoles, composition

_KEPT_PER_CONNECTION = 4  # releases kept per connection (one per table): each holds its rows' quasi-identifiers


@dataclasses.dataclass
class Remembered:
    """A release served from the persisted partition, as it was computed: what it was asked (``request``), over which
    rows (``row_refs``) with which quasi-identifier values (``read``), in which state of the ledger (``state``);
    ``served``: what the table function needs to show it again (its release, the rows and boxes it publishes)."""

    request: tuple
    row_refs: np.ndarray
    read: pa.Table
    state: tuple
    served: Any


_kept: weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, dict[str, Remembered]] = weakref.WeakKeyDictionary()


def request(named: dict[str, Any], columns: list[str], types: list, roles: TableRoles) -> tuple:
    """What a release depends on besides its rows and the ledger: its arguments, the input's columns and their types,
    the input's roles (quasi-identifiers, kinds, key)."""
    return (repr(sorted(named.items())), tuple(columns), tuple(str(t) for t in types), repr(roles))


def find(con: duckdb.DuckDBPyConnection, table: str, asked: tuple, row_refs: np.ndarray, snapshot: pa.Table,
         state: tuple) -> Remembered | None:
    """The release kept for ``table`` if this call repeats it: the same request, the same rows in the same order
    with the same values in the columns it read, and the ledger in the state it was kept in."""
    kept = _kept.get(con, {}).get(table)
    if (kept is None or kept.request != asked or kept.state != state or len(kept.row_refs) != len(row_refs)
            or not np.array_equal(kept.row_refs, row_refs)):
        return None
    names = kept.read.column_names
    if any(n not in snapshot.column_names for n in names) or not snapshot.select(names).equals(kept.read):
        return None
    return kept


def keep(con: duckdb.DuckDBPyConnection, table: str, release_name: str, before: tuple,
         remembered: Remembered | None) -> None:
    """After ``release_name`` was recorded: keep ``remembered`` (computed in the ledger state ``before``) for the
    next repeat when the ledger holds the release as a repeat and nothing else moved the counters; else forget what
    was kept for ``table``."""
    tables = _kept.setdefault(con, {})
    tables.pop(table, None)
    if remembered is None:
        return
    state, repeat = composition.version_after(con, table, release_name)
    if not repeat or (state[0], state[1], state[3]) != (before[0] + 1, before[1] + 1, before[3]):
        return
    remembered.state = state
    while len(tables) >= _KEPT_PER_CONNECTION:
        tables.pop(next(iter(tables)))
    tables[table] = remembered
