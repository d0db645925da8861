"""k-anonymity across releases: what every k-anonymous release showed of each base-table row, and the guard that
refuses a release which, together with the earlier ones, would let a worker narrow a row to fewer than k rows.

Threat model (issue 15, README "Privacy across queries"): a worker knows every person's quasi-identifier values,
sees every item of every release, and links one person's items across releases perfectly. What such a worker cannot
tell apart from a published row are the rows with the same *history*: present in the same releases, with the same
published box (the text of its quasi-identifiers) in each. The promise: every published row's history is shared by at
least k rows, k the smallest among the releases that published it.

The ledger: ``crowddb_ledger``, one row per (release, table): the release ('run:<id>' for a crowd run, 'release:<id>'
for ANONYMIZE), its k, and whether its rows could be tied to the table's; ``crowddb_published`` (a view over
``crowddb_ledger_rows`` and ``crowddb_ledger_boxes``, stored as numbers and appended from Arrow), one row per (release,
row): the row's identity (its table's declared key, hashed, else its rowid: ``privacy.tracing.row_identity``, through
views, CTEs and subqueries: ``privacy.tracing.traced``) and its box as published; ``crowddb_row_history``, one row per
published table row: its history (the XOR of a 128-bit hash of each of its entries), the smallest k promised to it and
the release and box it was newest shown in, read through ``crowddb_histories`` (a table's first release appends its
rows alone: while a table has rows from one release, their histories are that release's entries, ``pending``, and
its next release with rows writes them, folded with its own). A release whose rows crowddb cannot tie to one table's
rows (its quasi-identifiers come from a join of tables, an aggregate, a set operation) is recorded without rows: the
guard then refuses every other release of that table, and that release too if the table has others (fail closed).

The guard runs before a release is published (a crowd run: before its HITs are posted; ANONYMIZE: before its rows
are returned) and is one DuckDB statement over the ledger and the planned rows: each row's history so far, the planned
box, the size of every resulting history class and each row's promised k.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import NamedTuple

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .._duck import registered
from .._resources import catalog_ddl
from ..errors import CrowdDBError, PrivacyError
from ..privacy.identity import display
from . import links
from .roles import roles_of

TABLES = ("crowddb_ledger", "crowddb_published", "crowddb_ledger_rows", "crowddb_ledger_boxes",  # written only here
          "crowddb_ledger_numbers", "crowddb_row_history", "crowddb_histories", "crowddb_ledger_tables", links.LINKS)
BOX_SEPARATOR = "\x1f"  # between the published texts of a row's quasi-identifiers (never in rendered text)


def box_text(shown: pd.DataFrame, quasi_identifiers: list[str]) -> pa.Array:
    """Each row's published box: its quasi-identifiers' published texts, in ``quasi_identifiers`` order (sorted by
    name, so two releases that list them differently write the same text)."""
    return box_texts([shown[n].astype(str).to_numpy(dtype=object) for n in sorted(quasi_identifiers)], len(shown))


def box_texts(columns: list, rows: int) -> pa.Array:
    """The box of each of ``rows`` rows from its quasi-identifiers' printed texts, one array per quasi-identifier in
    name order (``box_text``): joined by Arrow, not a Python string per row."""
    if not columns:
        return pa.array([""] * rows, pa.string())
    return pc.binary_join_element_wise(*(pa.array(c, pa.string()) for c in columns), BOX_SEPARATOR)


class Planned(NamedTuple):
    """The rows a release would publish: ``rows`` (row_ref: identity, box_id) and ``boxes`` (box_id, box: the text);
    ``fingerprint``: the set of (row, box text) pairs, hashed (two 64-bit sums, order-free): equal for two releases
    that show the same rows in the same boxes."""

    rows: pa.Table
    boxes: pa.Table
    fingerprint: str
    quasi_identifiers: str = ""  # the boxes' quasi-identifiers (``signature``): a later release may reuse the boxes

    def __len__(self) -> int:
        return self.rows.num_rows


def signature(quasi_identifiers: list[str]) -> str:
    """The set of quasi-identifiers a box is printed over (``box_text``'s order)."""
    return BOX_SEPARATOR.join(sorted(str(q) for q in quasi_identifiers))


def planned(rows: np.ndarray, boxes: np.ndarray, index: np.ndarray | None = None,
            quasi_identifiers: list[str] = ()) -> Planned:
    """The rows a release would publish (identities) and their boxes over ``quasi_identifiers``: ``boxes[index[i]]`` for
    row i when ``index`` is given (a class's box printed once), else ``boxes[i]``. A row shown twice keeps its first
    box (a later knock-out round shows a row as round 1 did)."""
    rows = np.asarray(rows, dtype=np.int64)
    if index is None:
        index, boxes = pd.factorize(pd.Series(boxes.to_numpy(zero_copy_only=False) if isinstance(boxes, pa.Array)
                                              else boxes, dtype=object))
    texts = boxes if isinstance(boxes, pa.Array) else pa.array([str(b) for b in boxes], pa.string())
    if _increasing(rows):  # (a table's rowids as it is scanned: nothing repeats)
        refs, ids = rows, np.asarray(index, dtype=np.int64)
    else:
        first = np.flatnonzero(~pd.Series(rows).duplicated().to_numpy())  # (numpy 2's np.unique is slow on 1M ids)
        refs, ids = rows[first], np.asarray(index, dtype=np.int64)[first]
    # (boxes are distinct texts: pandas' default categorize=True would factorize them first, 5x slower, same hashes)
    per_box = (pd.util.hash_array(texts.to_numpy(zero_copy_only=False), categorize=False) if len(texts)
               else np.zeros(0, dtype=np.uint64))
    pairs = pd.util.hash_array(pd.util.hash_array(refs) ^ per_box[ids])
    fingerprint = f"{len(refs)}:{int(pairs.sum(dtype=np.uint64))}:{int(np.bitwise_xor.reduce(pairs, initial=0))}"
    return Planned(pa.table({"row_ref": refs, "box_id": ids}),
                   pa.table({"box_id": np.arange(len(texts), dtype=np.int64), "box": texts}),
                   fingerprint, signature(list(quasi_identifiers)))


def check(con: duckdb.DuckDBPyConnection, table: str, release: str, k: int, rows: Planned | None) -> str | None:
    """Refuse (PrivacyError) a release of ``table`` with promise ``k`` publishing ``rows`` (row_ref, box; None: the
    release's rows cannot be tied to the table's) if some published row's history class would fall below its k.
    Returns the earlier release it repeats exactly (same rows, same boxes), if any: it shows nothing new."""
    now, ledger = _identified(con, table)
    return _check(con, ledger, release, k, rows, _past(con, ledger, release, now))


def identity(con: duckdb.DuckDBPyConnection, table: str) -> str:
    """How the ledger tells ``table``'s rows apart (``_identified``)."""
    return _identified(con, table)[0]


def _identified(con: duckdb.DuckDBPyConnection, table: str) -> tuple[str, str]:
    """How the ledger tells ``table``'s rows apart (``privacy.tracing.row_identity``): 'key:<column>' or 'rowid'. A table
    that shares another's ledger (``links``) tells its rows apart as its root does when it holds the root's key
    unchanged; else its rows cannot be tied to the root's, and its releases are refused. Also the root (whose
    ledger the table's releases go in)."""
    key = roles_of(con, table).key
    ledger = links.root(con, table)
    if ledger == table.lower():
        return (f"key:{key.lower()}" if key else "rowid"), ledger
    through = links.carried(con, table) or {}
    stored = con.execute("SELECT identity FROM crowddb_ledger_tables WHERE table_name = ?", [ledger]).fetchall()
    root_key = stored[0][0].partition(":")[2] if stored and stored[0][0].startswith("key:") else None
    if root_key is None and not stored:
        root_key = through.get((key or "").lower())  # nothing on record yet: the key it carries is the root's
        with contextlib.suppress(CrowdDBError):  # (the root may be gone: renamed away, dropped)
            root_key = (roles_of(con, ledger).key or "").lower() or root_key
    if key and root_key and through.get(key.lower()) == root_key:
        return f"key:{root_key}", ledger
    raise PrivacyError(
        f"the rows of {display(table)!r} are rows of {display(ledger)!r} (made or filled from them, or renamed), "
        f"whose privacy ledger they share, but {display(table)!r} does not hold {display(ledger)!r}'s key unchanged, "
        "so crowddb cannot tell which of its people a release shows: carry the key into the copy (and declare it "
        "its key), or release the rows from the original table")


class Past(NamedTuple):
    """A table's ledger before a release is recorded: its earlier releases (release, traceable, fingerprint, k), and
    this release's number (``release_no``) if it is on record already (a later round of a crowd run), else None."""

    earlier: list[tuple]
    number: int | None

    @property
    def continuing(self) -> bool:
        return self.number is not None


def _past(con: duckdb.DuckDBPyConnection, table: str, release: str, now: str, stored: str | None = None) -> Past:
    """The table's earlier releases and this release's number if it is on record already (``Past``). Refuses when
    the table's rows are told apart (``now``: ``identity``) otherwise than when its first release was recorded (a key
    declared, dropped or changed since): its rows' histories would not meet. ``stored``: that first identity, when
    the caller has read it."""
    if stored is None:
        found = con.execute("SELECT identity FROM crowddb_ledger_tables WHERE table_name = ?", [table]).fetchall()
        stored = found[0][0] if found else now
    if stored != now:
        raise PrivacyError(f"{display(table)!r}'s rows were told apart by {stored} in its releases on record and by "
                           f"{now} now (its key was declared or changed since): the privacy ledger cannot follow "
                           "them; declare the key it had")
    rows = con.execute("SELECT release, traceable, fingerprint, k, release_no FROM crowddb_ledger WHERE table_name = ? "
                       "ORDER BY release", [table]).fetchall()
    return Past([r[:4] for r in rows if r[0] != release], next((r[4] for r in rows if r[0] == release), None))


def _check(con: duckdb.DuckDBPyConnection, table: str, release: str, k: int, rows: Planned | None,
           past: Past) -> str | None:
    earlier, continuing = past.earlier, past.continuing
    untraceable, others = [r for r, t, _, _ in earlier if not t], [r for r, *_ in earlier]
    if untraceable:
        raise PrivacyError(
            f"{display(table)!r} has an earlier release ({_names(untraceable)}) whose rows crowddb could not tie to the "
            f"table's rows (its quasi-identifiers came from a join of tables, an aggregate or a set operation), so "
            f"no later release of {display(table)!r} can be checked against it; a release of a table with quasi-identifiers "
            "reads its rows one by one (through views, CTEs and subqueries with a WHERE or a LIMIT)")
    if rows is not None and len(rows):
        # a repeat changes no class: every row of it shows the same box in both, and no other row is in either
        # (a k no smaller than the earlier one's, so no row is promised more than its class holds)
        # (a later round of a crowd run is judged in full: what its earlier rounds showed is part of it)
        same = next((r for r, _, f, k_then in earlier if f == rows.fingerprint and k_then <= int(k)), None)
        if same is not None and not continuing:
            return same
        if continuing:  # a later round of a run whose first round repeated an earlier release: its rows, in the
            repeated = _repeated(con, table, release)  # same boxes, are part of that release; nothing new is shown
            if repeated is not None and _within(con, table, repeated, rows):
                return repeated
    if rows is None:
        if others:
            raise PrivacyError(
                f"this release's rows cannot be tied to the rows of {display(table)!r} (its quasi-identifiers come from a join "
                f"of tables, an aggregate or a set operation), and {display(table)!r} has earlier k-anonymous releases "
                f"({_names(others)}) it could be intersected with; read the rows of {display(table)!r} one by one (a WHERE, "
                "a LIMIT, views and CTEs are fine)")
        return None
    if not len(rows):
        return None
    if not earlier and not continuing:  # the table's first release: its classes are its boxes
        sizes = np.bincount(rows.rows.column("box_id").to_numpy(), minlength=rows.boxes.num_rows)
        small = (sizes > 0) & (sizes < int(k))
        if small.any():
            size = int(sizes[small].min())
            raise PrivacyError(f"this release alone shows {int((sizes == size).sum()) * size} row(s) of {display(table)!r} "
                               f"in a group of {size}, fewer than k={int(k)}; nothing was published")
        return None
    with registered(con, __crowd_planned=rows.rows, __crowd_boxes=rows.boxes):
        found = con.execute(_GUARD, [table, release, int(k), past.number]).fetchall()
    if found:
        size, promised, count, sample = found[0]
        involved = [r for (r,) in con.execute(
            "SELECT DISTINCT release FROM crowddb_published WHERE table_name = ? AND release <> ? "
            "AND row_ref IN (SELECT unnest(?::BIGINT[])) ORDER BY release", [table, release, sample]).fetchall()]
        involved = involved or others  # rows new to this release: told apart from the others by them all
        if not involved:  # no earlier release: this one is not k-anonymous by itself (its anonymizer failed)
            raise PrivacyError(f"this release alone shows {count} row(s) of {display(table)!r} in a group of {size}, fewer "
                               f"than k={promised}; nothing was published")
        raise PrivacyError(
            f"this release would let a worker who links releases narrow {count} row(s) of {display(table)!r} to a group of "
            f"{size}, fewer than k={promised}: it would break the k-anonymity of {_names(involved)} (a worker "
            "intersects its classes with this release's, and sees which of their rows it leaves out). Run it over "
            "the same rows, k and anonymizer as that release (a rerun is served from the answers on record)")


def _repeated(con: duckdb.DuckDBPyConnection, table: str, release: str) -> str | None:
    """The earlier release ``release`` (on record already: a crowd run's earlier round) repeats, if it does."""
    found = con.execute("SELECT repeats FROM crowddb_ledger WHERE table_name = ? AND release = ?",
                        [table, release]).fetchall()
    return found[0][0] if found and found[0][0] else None


def _within(con: duckdb.DuckDBPyConnection, table: str, release: str, rows: Planned) -> bool:
    """Does ``release`` show every one of ``rows`` in the box ``rows`` shows it in (a subset shown as it was)?"""
    with registered(con, __crowd_planned=rows.rows, __crowd_boxes=rows.boxes):
        missing = con.execute(
            "SELECT count(*) FROM __crowd_planned p JOIN __crowd_boxes b USING (box_id) WHERE NOT EXISTS "
            "(SELECT 1 FROM crowddb_published x WHERE x.table_name = ? AND x.release = ? AND x.row_ref = p.row_ref "
            "AND x.box = b.box)", [table, release]).fetchall()[0][0]
    return missing == 0


def record(con: duckdb.DuckDBPyConnection, table: str, release: str, k: int, rows: Planned | None) -> None:
    """Check a release (``check``) and put its published rows (None: a release not tied to the table's rows) in
    the ledger, folded into the rows' histories. Called inside the transaction that records the release's HITs (or
    its row in crowddb_releases), which is retried when another connection's release of the same rows commits
    first: check and record are one step, so two concurrent releases are never both judged against the same past."""
    now, table = _identified(con, table)  # a copy's rows are its root's (``links``)
    # first: releases of one table are serialized (a concurrent one conflicts here and is retried, then checked
    # against this one's rows); the identity its first release was recorded under comes back
    # (a table's first release leaves its rows' histories unwritten: ``pending``, crowddb_histories reads them; an
    # UPDATE, then an INSERT for a table new to the ledger, costs a third of an INSERT ... ON CONFLICT, and two
    # connections inserting the same table conflict on its key just the same)
    found = con.execute("UPDATE crowddb_ledger_tables SET releases = releases + 1 WHERE table_name = ? "
                        "RETURNING identity, coalesce(pending, false)", [table]).fetchall()
    if not found:
        con.execute("INSERT INTO crowddb_ledger_tables (table_name, releases, identity, pending) VALUES (?, 1, ?, true)",
                    [table, now]).fetchall()
    ((stored, pending),) = found or [(now, True)]
    past = _past(con, table, release, now, stored)
    repeats = _check(con, table, release, k, rows, past)
    if past.continuing:  # a later round of a crowd run may add rows: the release is no longer what its fingerprint says
        con.execute("UPDATE crowddb_ledger SET fingerprint = NULL WHERE release_no = ?", [past.number]).fetchall()
        number = past.number
    else:
        number = con.execute(
            "INSERT INTO crowddb_ledger (release, table_name, k, traceable, fingerprint, repeats, quasi_identifiers, "
            "release_no) VALUES (?, ?, ?, ?, ?, ?, ?, nextval('crowddb_ledger_numbers')) RETURNING release_no",
            [release, table, int(k), rows is not None, rows.fingerprint if rows is not None else None,
             repeats, rows.quasi_identifiers if rows is not None else None]).fetchall()[0][0]
    if rows is None or not len(rows) or repeats is not None:  # a repeat is on record by reference
        return
    settle = pending and bool(past.earlier)  # another release's rows: the histories are written, folded with this one's
    rows, per_box = _numbered(con, number, rows, past.continuing, release, entries=not pending or settle)
    with registered(con, __crowd_planned=rows.rows,
                    **({} if pending and not settle else {"__crowd_entries": _entries(rows, per_box)})):
        params = [table, int(k), number]
        if settle:  # (before the new entries join the ledger, as a fold: ``mine`` reads it)
            con.execute(_SETTLE, params).fetchall()
            con.execute("UPDATE crowddb_ledger_tables SET pending = false WHERE table_name = ?", [table]).fetchall()
        elif pending:  # the table's one release: each row's history is its entry (crowddb_histories)
            pass
        elif not past.earlier and not past.continuing:  # a first release again (the table's others were forgotten)
            con.execute(_FIRST, params).fetchall()
        else:  # before the new entries join the ledger (``mine`` reads it)
            con.execute(_FOLD, params).fetchall()
        # the rows themselves: three integers each, appended (a later round adds the rows its earlier ones did not show)
        con.execute("INSERT INTO crowddb_ledger_rows SELECT $1, row_ref, box_id FROM __crowd_planned"
                    + (" WHERE row_ref NOT IN (SELECT row_ref FROM crowddb_ledger_rows WHERE release_no = $1)"
                       if past.continuing else ""), [number]).fetchall()


def _entries(rows: Planned, per_box: dict[str, np.ndarray]) -> pa.Table:
    """Each row's ledger entry (``_entry``: a 128-bit hash of the release and its box, as two 64-bit halves ``hi``,
    ``lo``, ``per_box``: ``_box_entries``) beside its identity and box id: hashed once per box by DuckDB, handed to
    each row of the box by numpy (a join of a million rows to their boxes costs more than the hashes)."""
    ids = rows.rows.column("box_id").to_numpy()
    hi = np.zeros(int(per_box["box_id"].max(initial=-1)) + 1, dtype=np.uint64)
    lo = hi.copy()
    hi[per_box["box_id"]], lo[per_box["box_id"]] = per_box["hi"], per_box["lo"]
    return pa.table({"row_ref": rows.rows.column("row_ref"), "hi": hi[ids], "lo": lo[ids], "box_id": ids})


def _box_entries(release: str) -> str:
    """The SQL of each box's entry as its two 64-bit halves (``_entry``, ``release`` a literal of ours)."""
    h = _entry("'" + release.replace("'", "''") + "'")  # (RETURNING takes no parameters; a string literal)
    return f"({h} >> 64)::UBIGINT AS hi, ({h} & {2 ** 64 - 1}::UHUGEINT)::UBIGINT AS lo"


def _numbered(con: duckdb.DuckDBPyConnection, number: int, rows: Planned, continuing: bool, release: str,
              entries: bool = True) -> tuple[Planned, dict[str, np.ndarray] | None]:
    """Put the boxes of ``rows`` on record as boxes of release ``number`` (one row per text) and return ``rows`` with
    the box ids they are stored under. A first round's boxes keep their ids; a later round's text shown by an earlier
    round keeps that round's id (one box, one id), and a new text is numbered after the release's others. Also each
    box's entry (``_box_entries``: box_id, hi, lo), by the statement that stores it when it is new; None without
    ``entries`` (histories left pending)."""
    if not continuing:  # (the entries by the INSERT's RETURNING: one statement, one registration)
        with registered(con, __crowd_boxes=rows.boxes):
            if not entries:
                con.execute("INSERT INTO crowddb_ledger_boxes SELECT ?, box_id, box FROM __crowd_boxes",
                            [number]).fetchall()
                return rows, None
            return rows, con.execute("INSERT INTO crowddb_ledger_boxes SELECT ?, box_id, box FROM __crowd_boxes "
                                     f"RETURNING box_id, {_box_entries(release)}", [number]).fetchnumpy()
    stored = con.execute("SELECT box, box_id FROM crowddb_ledger_boxes WHERE release_no = ?", [number]).fetchall()
    ids = dict(stored)
    texts = rows.boxes.column("box").to_pylist()  # (a round's boxes: one per class, not per row)
    fresh = [t for t in dict.fromkeys(texts) if t not in ids]
    ids.update(zip(fresh, itertools.count(max(ids.values(), default=-1) + 1)))
    if fresh:
        with registered(con, __crowd_fresh=pa.table({"box_id": np.array([ids[t] for t in fresh], dtype=np.int64),
                                                     "box": pa.array(fresh, pa.string())})):
            con.execute("INSERT INTO crowddb_ledger_boxes SELECT ?, box_id, box FROM __crowd_fresh",
                        [number]).fetchall()
    stored_id = np.array([ids[t] for t in texts], dtype=np.int64)
    box_ids = stored_id[rows.rows.column("box_id").to_numpy()]
    shown = list(dict.fromkeys(texts))
    rows = Planned(pa.table({"row_ref": rows.rows.column("row_ref"), "box_id": box_ids}),
                   pa.table({"box_id": np.array([ids[t] for t in shown], dtype=np.int64),
                             "box": pa.array(shown, pa.string())}), rows.fingerprint, rows.quasi_identifiers)
    if not entries:
        return rows, None
    with registered(con, __crowd_boxes=rows.boxes):
        return rows, con.execute(f"SELECT box_id, {_box_entries(release)} FROM __crowd_boxes").fetchnumpy()


def recorded(con: duckdb.DuckDBPyConnection, table: str, rows: np.ndarray, quasi_identifiers: list[str], k: int
             ) -> tuple[str, np.ndarray] | None:
    """Each of ``rows`` (identities) in the box the newest release that published it showed it in, among releases
    over the same quasi-identifiers with a k at least ``k`` (None for a row no release showed: one inserted since),
    in ``rows``' order, and the names of those releases; None if a row shown before was never shown in such a
    release. A release that asks about rows shown before shows them in these boxes (the table's persisted
    partition): the same items again, served from the answers on record, and nothing the guard has to refuse; rows
    new since are put in classes of their own. Read from each row's newest entry (``crowddb_row_history``) when that
    release fits, else from every release of the rows."""
    rows = np.asarray(rows, dtype=np.int64)
    if not len(rows):
        return None
    table, qis = links.root(con, table), signature(quasi_identifiers)
    want = pa.table({"row_ref": rows, "pos": np.arange(len(rows), dtype=np.int64)})
    with registered(con, __crowd_want=want):
        seen, fits = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE l.quasi_identifiers = ? AND l.k >= ?) "
            "FROM crowddb_histories h LEFT JOIN crowddb_ledger l ON l.release_no = h.last_release_no "
            "WHERE h.table_name = ? AND h.row_ref IN (SELECT row_ref FROM __crowd_want)",
            [qis, int(k), table]).fetchall()[0]
        if not seen:
            return None
        if fits == seen:  # every row's newest release fits: its box there
            found = con.sql(
                "SELECT h.box, h.release FROM __crowd_want w LEFT JOIN (SELECT h.row_ref, b.box, l.release "
                f"FROM {_NEWEST} WHERE h.table_name = ?) h USING (row_ref) ORDER BY w.pos",
                params=[table]).to_arrow_table()
        else:
            found = con.sql(
                "SELECT b.box, b.release FROM __crowd_want w LEFT JOIN (SELECT p.row_ref, "
                "arg_max(p.box, l.release_no) AS box, arg_max(p.release, l.release_no) AS release "
                "FROM crowddb_ledger l JOIN crowddb_published p USING (release, table_name) "
                "WHERE l.table_name = ? AND l.quasi_identifiers = ? AND l.k >= ? AND p.row_ref IN "
                "(SELECT row_ref FROM __crowd_want) GROUP BY p.row_ref) b USING (row_ref) ORDER BY w.pos",
                params=[table, qis, int(k)]).to_arrow_table()
    boxes = found.column("box")
    has_box = boxes.is_valid().to_numpy(zero_copy_only=False)
    if fits < seen and len(pd.unique(rows[has_box])) < seen:  # a row shown before only in boxes of other
        return None                                            # quasi-identifiers or a smaller k
    names = ", ".join(sorted({r for r in found.column("release").unique().to_pylist() if r is not None},
                             key=_release_order))
    return names, boxes.to_numpy(zero_copy_only=False).astype(object)


def joint_classes(con: duckdb.DuckDBPyConnection, table: str, rows: np.ndarray) -> pd.DataFrame:
    """The joint class of each of ``rows`` (identities) and every other row of those classes: one row per member, in
    no order (``row_ref``, ``history``: its class's number), with the class's newest box (``last_box``,
    ``last_release``, ``last_k``, ``last_quasi_identifiers``) and the smallest k promised to its rows (``k``). Rows no
    release showed are not in it. What a safe release of ``rows`` must keep whole (``privacy.serve``)."""
    rows = np.asarray(rows, dtype=np.int64)
    empty = pd.DataFrame(columns=["row_ref", "history", "last_box", "last_release", "last_k",
                                  "last_quasi_identifiers", "k"])
    if not len(rows) or not _has_history(con, table):
        return empty
    with registered(con, __crowd_want=pa.table({"row_ref": pd.unique(rows)})):
        members = con.sql(
            # each touched history numbered once (exact; a text cast of the UHUGEINT costs seconds per 100k rows,
            # and numbering the members in order of their history a sort of all of them); members in no order
            "WITH touched AS (SELECT history, row_number() OVER () AS number FROM (SELECT DISTINCT history "
            "FROM crowddb_histories WHERE table_name = ? AND row_ref IN (SELECT row_ref FROM __crowd_want))) "
            "SELECT h.row_ref, touched.number AS history, h.last_release_no, h.last_box_id, h.k "
            "FROM crowddb_histories h JOIN touched USING (history) WHERE h.table_name = ?",
            params=[links.root(con, table), links.root(con, table)]).to_arrow_table()
    # the newest box, its release, k and quasi-identifiers repeat on every member of a class: read once per (release,
    # box) and handed to the members as categorical codes (a million strings cost far more to build than codes)
    release_no = pc.fill_null(members.column("last_release_no"), -1).to_numpy().astype(np.int64)
    box_id = pc.fill_null(members.column("last_box_id"), -1).to_numpy().astype(np.int64)
    at, pairs = pd.factorize((release_no << 32) | (box_id & 0xFFFFFFFF))
    with registered(con, __crowd_pairs=pa.table({"i": np.arange(len(pairs)), "release_no": pairs >> 32,
                                                 "box_id": pairs & 0xFFFFFFFF})):
        newest = _categorical(con.sql(
            "SELECT b.box AS last_box, l.release AS last_release, l.k AS last_k, "
            "l.quasi_identifiers AS last_quasi_identifiers FROM __crowd_pairs p "
            "LEFT JOIN crowddb_ledger l ON l.release_no = p.release_no "
            "LEFT JOIN crowddb_ledger_boxes b ON b.release_no = p.release_no AND b.box_id = p.box_id "
            "ORDER BY p.i").to_arrow_table())
    out = {"row_ref": members.column("row_ref").to_numpy(), "history": members.column("history").to_numpy()}
    for name in newest.columns:
        column = newest[name]
        out[name] = (pd.Categorical.from_codes(column.cat.codes.to_numpy()[at], categories=column.cat.categories)
                     if isinstance(column.dtype, pd.CategoricalDtype) else column.to_numpy()[at])
    out["k"] = members.column("k").to_numpy()
    return pd.DataFrame(out)


#: each row's history with the release (``l``) and the box (``b``) it was newest shown in
_NEWEST = ("crowddb_histories h LEFT JOIN crowddb_ledger l ON l.release_no = h.last_release_no "
           "LEFT JOIN crowddb_ledger_boxes b ON b.release_no = h.last_release_no AND b.box_id = h.last_box_id")


def version(con: duckdb.DuckDBPyConnection, table: str) -> tuple:
    """The state of ``table``'s ledger (its root's: ``links``) as counters every release of it moves (equal states:
    no release of it recorded or forgotten between them): its releases recorded (crowddb_ledger_tables), its ledger
    rows, the newest one's number (a sequence: a release recorded after a ROLLBACK has a larger one than the release
    rolled back), and the tables' links, whole. Releases of other tables leave it as it was: they change no history
    of its rows."""
    releases, rows, newest, linked = con.execute(f"SELECT {_VERSION}", [links.root(con, table)]).fetchall()[0]
    return int(releases), int(rows), newest, linked


def version_after(con: duckdb.DuckDBPyConnection, table: str, release: str) -> tuple[tuple, bool]:
    """``version(con, table)`` once ``release`` is recorded, and whether it is on record, for every table it showed,
    as a repeat of an earlier release (it showed nothing new): both in one statement."""
    releases, rows, newest, linked, repeat = con.execute(
        f"SELECT {_VERSION}, (SELECT count(*) > 0 AND count(*) = count(repeats) FROM crowddb_ledger "
        "WHERE release = $2)", [links.root(con, table), release]).fetchall()[0]
    return (int(releases), int(rows), newest, linked), bool(repeat)


# the counters ``version`` reads ($1: the table's ledger root)
_VERSION = ("(SELECT coalesce(sum(releases), 0) FROM crowddb_ledger_tables WHERE table_name = $1), "
            "(SELECT count(*) FROM crowddb_ledger WHERE table_name = $1), "
            "(SELECT max(release_no) FROM crowddb_ledger WHERE table_name = $1), "
            f"(SELECT list(l ORDER BY l.table_name) FROM {links.LINKS} l)")


def _has_history(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """Has any release of ``table`` (its ledger root) put rows on record? One row of crowddb_ledger_tables says so
    (``record`` bumps it in the transaction that writes the histories): a table never released has nothing to
    look up."""
    return bool(con.execute("SELECT count(*) FROM crowddb_ledger_tables WHERE table_name = ?",
                            [links.root(con, table)]).fetchall()[0][0])


def _categorical(table: pa.Table) -> pd.DataFrame:
    """``table`` as pandas with its text columns dictionary-encoded (categoricals): a joint class's box, release and
    quasi-identifiers repeat on every member, and a million strings cost far more to build than their codes."""
    import pyarrow.compute as pc

    out = {}
    for name, column in zip(table.column_names, table.columns):
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            out[name] = column.to_numpy()
            continue
        encoded = pc.dictionary_encode(column.combine_chunks())
        codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
        texts = pd.Index(encoded.dictionary.to_numpy(zero_copy_only=False), dtype=object)  # (built in C++)
        out[name] = pd.Categorical.from_codes(codes, categories=texts)
    return pd.DataFrame(out)


def _release_order(name: str) -> tuple[str, int]:
    """'run:10' after 'run:9'."""
    kind, _, number = name.partition(":")
    return (kind, int(number)) if number.isdigit() else (kind, 0)


def releases(con: duckdb.DuckDBPyConnection, table: str) -> pd.DataFrame:
    """The table's k-anonymous releases in order: name, k, whether its rows were tied to the table's, the release
    it repeats, when, and how many rows it showed (a repeat: those of the release it repeats)."""
    return con.execute(
        "SELECT l.release AS ledger_release, l.k, l.traceable, l.repeats, l.created_at, "
        "(SELECT count(*) FROM crowddb_ledger_rows r JOIN crowddb_ledger s USING (release_no) "
        "WHERE s.table_name = l.table_name AND s.release = coalesce(l.repeats, l.release)) AS rows "
        "FROM crowddb_ledger l WHERE l.table_name = ? ORDER BY l.created_at, l.release_no",
        [links.root(con, table)]).df()


def _increasing(rows: np.ndarray) -> bool:
    """Are ``rows`` strictly increasing (so none repeats)? One vectorized pass: a table's rowids read in scan order
    are, and finding duplicates by hashing costs 20-50 times as much."""
    return bool(len(rows) < 2 or (rows[1:] > rows[:-1]).all())


def distinct_rows(what: str, table: str, rows: np.ndarray) -> None:
    """Refuse rows whose identities repeat (a declared key that is not unique): the ledger could not tell them apart,
    and would record one box for two people."""
    rows = np.asarray(rows, dtype=np.int64)
    if not _increasing(rows) and len(pd.unique(rows)) < len(rows):
        repeated = int(len(rows) - len(pd.unique(rows)))
        raise PrivacyError(f"{what}: {repeated} row(s) of {table} come twice: the query reads one row more than once "
                           "(a UNION ALL of overlapping parts, say), or rows share a key value, and the privacy ledger "
                           "records one box per person; read each row once (one WHERE with OR instead of the UNION "
                           "ALL), or declare a unique key")


def on_record(con: duckdb.DuckDBPyConnection, table: str, release: str) -> bool:
    """Is ``release`` of ``table`` (its ledger root) on record?"""
    return bool(con.execute("SELECT count(*) FROM crowddb_ledger WHERE table_name = ? AND release = ?",
                            [links.root(con, table), release]).fetchall()[0][0])


def shows_exactly(con: duckdb.DuckDBPyConnection, table: str, release: str, rows: np.ndarray) -> bool:
    """Did ``release`` of ``table`` show exactly the rows ``rows`` (identities): every one of them, and no other?"""
    rows = pd.unique(np.asarray(rows, dtype=np.int64))
    with registered(con, __crowd_want=pa.table({"row_ref": rows})):
        shown, wanted = con.execute(
            "SELECT count(*), count(w.row_ref) FROM crowddb_ledger_rows r JOIN crowddb_ledger l USING (release_no) "
            "LEFT JOIN __crowd_want w USING (row_ref) WHERE l.table_name = ? AND l.release = ?",
            [links.root(con, table), release]).fetchall()[0]
    return shown == wanted == len(rows)


def has_releases(con: duckdb.DuckDBPyConnection, tables: tuple[str, ...]) -> bool:
    """Whether any of ``tables`` has a k-anonymous release on record."""
    return bool(con.execute("SELECT count(*) FROM crowddb_ledger WHERE table_name IN (SELECT unnest(?))",
                            [[links.root(con, t) for t in tables]]).fetchall()[0][0])


def shown_before(con: duckdb.DuckDBPyConnection, table: str, rows: np.ndarray) -> int:
    """How many of ``rows`` (identities of rows of ``table``) an earlier release showed."""
    rows = np.asarray(rows, dtype=np.int64)
    if not len(rows) or not _has_history(con, table):
        return 0
    with registered(con, __crowd_want=pa.table({"row_ref": pd.unique(rows)})):
        return int(con.execute("SELECT count(*) FROM crowddb_histories WHERE table_name = ? AND row_ref IN "
                               "(SELECT row_ref FROM __crowd_want)", [links.root(con, table)]).fetchall()[0][0])


def smallest_class(con: duckdb.DuckDBPyConnection, table: str) -> tuple[int | None, int]:
    """The smallest joint class among the published rows of ``table`` (rows with the same history) and how many
    rows are in classes of that size; (None, 0) when nothing of it was published."""
    found = con.execute("SELECT size, count(*) * size FROM (SELECT count(*) AS size FROM crowddb_histories "
                        "WHERE table_name = ? GROUP BY history) GROUP BY size ORDER BY size LIMIT 1",
                        [links.root(con, table)]).fetchall()
    return (int(found[0][0]), int(found[0][1])) if found else (None, 0)


def forget_unposted(con: duckdb.DuckDBPyConnection, runs: list[int]) -> None:
    """A run none of whose HITs reached the platform published nothing: it leaves the ledger, and the histories of
    its rows are folded again from what is left. (A run that posted some of its HITs keeps all its rows: the ledger
    may say more was shown than was, never less.)"""
    if not runs:
        return
    gone = con.execute("SELECT list('run:' || r) FROM unnest(?::BIGINT[]) t(r) WHERE r NOT IN "
                       "(SELECT run_id FROM crowddb_hits)", [list(runs)]).fetchall()[0][0] or []
    if not gone:
        return
    numbers = [n for (n,) in con.execute("SELECT release_no FROM crowddb_ledger WHERE release IN (SELECT unnest(?))",
                                         [gone]).fetchall()]
    con.execute("CREATE TEMP TABLE __crowd_refold AS SELECT DISTINCT l.table_name, r.row_ref FROM crowddb_ledger_rows r "
                "JOIN crowddb_ledger l USING (release_no) WHERE release_no IN (SELECT unnest(?::INTEGER[]))",
                [numbers]).fetchall()
    try:
        for statement in ("DELETE FROM crowddb_ledger_rows WHERE release_no IN (SELECT unnest(?::INTEGER[]))",
                          "DELETE FROM crowddb_ledger_boxes WHERE release_no IN (SELECT unnest(?::INTEGER[]))",
                          "DELETE FROM crowddb_ledger WHERE release_no IN (SELECT unnest(?::INTEGER[]))"):
            con.execute(statement, [numbers]).fetchall()
        con.execute("DELETE FROM crowddb_row_history WHERE (table_name, row_ref) IN "
                    "(SELECT (table_name, row_ref) FROM __crowd_refold)").fetchall()
        con.execute("INSERT INTO crowddb_row_history (table_name, row_ref, history, k, last_release_no, last_box_id) "
                    f"SELECT l.table_name, r.row_ref, bit_xor({_entry('l.release').replace('box', 'b.box')}), "
                    "min(l.k), max(l.release_no), arg_max(r.box_id, l.release_no) "
                    "FROM crowddb_ledger_rows r JOIN crowddb_ledger l USING (release_no) "
                    "JOIN crowddb_ledger_boxes b USING (release_no, box_id) WHERE (l.table_name, r.row_ref) IN "
                    "(SELECT (table_name, row_ref) FROM __crowd_refold) GROUP BY ALL").fetchall()
    finally:
        con.execute("DROP TABLE IF EXISTS __crowd_refold").fetchall()


def migrate(con: duckdb.DuckDBPyConnection) -> None:
    """Move a ledger written by crowddb 0.x before the ledger was stored as numbers (``crowddb_published`` a table of
    text rows, each row's newest release and box as text in ``crowddb_row_history``) into the tables the catalog
    creates now, in one transaction; nothing to do in a database created since. The histories are kept as they are
    (the same hashes of the same texts)."""
    kind = con.execute("SELECT table_type FROM information_schema.tables WHERE table_schema = current_schema() "
                       "AND table_name = 'crowddb_published'").fetchall()
    if not kind or kind[0][0] != "BASE TABLE":
        return
    con.execute("BEGIN TRANSACTION").fetchall()
    try:
        for statement in _MIGRATE:
            con.execute(statement).fetchall()
        con.execute(catalog_ddl()).fetchall()  # the view, where the table was
        con.execute("COMMIT").fetchall()
    except BaseException:
        con.execute("ROLLBACK").fetchall()
        raise


def _names(releases: list[str]) -> str:
    shown = ", ".join(releases[:5])
    return shown + (f" and {len(releases) - 5} more" if len(releases) > 5 else "")




def _entry(release: str) -> str:
    """A ledger entry's share of its row's history (``release``: its SQL): a row's history is the XOR over its
    entries (order does not matter, so a history can be folded again from the ledger after entries leave it)."""
    return f"md5_number({release} || chr(31) || box)"


def _folded(k: str) -> str:
    """A row's history and k after a release (``a``: the entry it adds, NULL for a row it does not show) is folded
    into what it was (``n``: NULL for a row no release showed): the XOR of its entries, the smallest k (``k``: the
    release's, a parameter's SQL)."""
    return (f"CASE WHEN a.row_ref IS NULL THEN n.history ELSE xor(coalesce(n.history, 0::UHUGEINT), a.h) END "
            f"AS history, CASE WHEN a.row_ref IS NULL THEN n.k WHEN n.k IS NULL THEN {k} ELSE least(n.k, {k}) END AS k")


# the rows this release adds (the ones an earlier round of it showed are in their histories already: ``mine``, $4
# its number, NULL before it is on record), each row's history after it, the class of every published row (rows
# with the same history: same releases, same boxes) and the smallest k promised to any row of it; a class smaller
# than that breaks the promise
_NEXT = f"""
WITH mine AS (
    SELECT row_ref FROM crowddb_ledger_rows WHERE release_no = $4),
boxes AS (  -- each box's share of a history, hashed once per box
    SELECT box_id, box, {_entry("$2")} AS h FROM __crowd_boxes),
added AS (
    SELECT p.row_ref, b.h, b.box_id FROM __crowd_planned p JOIN boxes b USING (box_id)
    WHERE p.row_ref NOT IN (SELECT row_ref FROM mine)),
now AS (
    SELECT row_ref, history, k FROM crowddb_histories WHERE table_name = $1),
after AS (
    SELECT coalesce(n.row_ref, a.row_ref) AS row_ref, {_folded("$3")}
    FROM now n FULL OUTER JOIN added a ON n.row_ref = a.row_ref)
"""

_GUARD = _NEXT + """,
classes AS (SELECT row_ref, k, count(*) OVER (PARTITION BY history) AS size FROM after)
SELECT size, k, count(*), list(row_ref ORDER BY row_ref)[1:20] FROM classes WHERE size < k
GROUP BY size, k ORDER BY size, k LIMIT 1
"""

# the rows this release adds fold its entry into their histories: one MERGE (the rows on record updated, the new
# ones inserted; cheaper than an UPDATE and an INSERT that each join the release's rows, and than INSERT OR REPLACE,
# which deletes and re-inserts every row of a key index); $1 the table, $2 the release's k, $3 its number
_ENTRY = "(hi::UHUGEINT << 64) | lo::UHUGEINT"
_FOLD = f"""
MERGE INTO crowddb_row_history AS r
USING (SELECT row_ref, {_ENTRY} AS h, box_id FROM __crowd_entries
       WHERE row_ref NOT IN (SELECT row_ref FROM crowddb_ledger_rows WHERE release_no = $3)) AS a
ON r.table_name = $1 AND r.row_ref = a.row_ref
WHEN MATCHED THEN UPDATE SET history = xor(r.history, a.h), k = least(r.k, $2), last_release_no = $3,
    last_box_id = a.box_id
WHEN NOT MATCHED THEN INSERT (table_name, row_ref, history, k, last_release_no, last_box_id)
    VALUES ($1, a.row_ref, a.h, $2, $3, a.box_id)
"""

# a table's one release's histories (``pending``: read through crowddb_histories until now) written with the
# entries of the rows a second release adds folded in (``_NEXT``'s ``after``, with each row's newest box): one INSERT
# where the histories written first and then folded by ``_FOLD`` would update every row again; $1 the table, $2 the
# release's k, $3 its number
_SETTLE = f"""
INSERT INTO crowddb_row_history (table_name, row_ref, history, k, last_release_no, last_box_id)
SELECT $1, coalesce(n.row_ref, a.row_ref), {_folded("$2")},
       CASE WHEN a.row_ref IS NULL THEN n.last_release_no ELSE $3 END,
       CASE WHEN a.row_ref IS NULL THEN n.last_box_id ELSE a.box_id END
FROM (SELECT row_ref, history, k, last_release_no, last_box_id FROM crowddb_histories WHERE table_name = $1) n
FULL OUTER JOIN (SELECT row_ref, {_ENTRY} AS h, box_id FROM __crowd_entries
                 WHERE row_ref NOT IN (SELECT row_ref FROM crowddb_ledger_rows WHERE release_no = $3)) a
ON n.row_ref = a.row_ref
"""

_FIRST = f"""
INSERT INTO crowddb_row_history (table_name, row_ref, history, k, last_release_no, last_box_id)
SELECT $1, row_ref, {_ENTRY}, $2, $3, box_id FROM __crowd_entries
"""

# crowddb_ledger numbered in the order releases were recorded, each release's distinct box texts numbered, its rows
# appended as numbers, the histories' newest release and box as numbers; then the old table goes (the catalog puts
# the view in its place)
_MIGRATE = [
    ("UPDATE crowddb_ledger AS l SET release_no = o.n FROM (SELECT release, table_name, "
     "nextval('crowddb_ledger_numbers') AS n FROM (SELECT release, table_name FROM crowddb_ledger "
     "ORDER BY created_at, release)) o WHERE l.release = o.release AND l.table_name = o.table_name"),
    ("INSERT INTO crowddb_ledger_boxes SELECT l.release_no, (row_number() OVER (PARTITION BY l.release_no ORDER BY "
     "p.box) - 1)::INTEGER, p.box FROM (SELECT DISTINCT release, table_name, box FROM crowddb_published) p "
     "JOIN crowddb_ledger l USING (release, table_name)"),
    ("INSERT INTO crowddb_ledger_rows SELECT l.release_no, p.row_ref, b.box_id FROM crowddb_published p "
     "JOIN crowddb_ledger l USING (release, table_name) JOIN crowddb_ledger_boxes b "
     "ON b.release_no = l.release_no AND b.box = p.box"),
    ("UPDATE crowddb_row_history AS h SET last_release_no = l.release_no, last_box_id = b.box_id "
     "FROM crowddb_ledger l, crowddb_ledger_boxes b WHERE l.table_name = h.table_name AND l.release = h.last_release "
     "AND b.release_no = l.release_no AND b.box = h.last_box"),
    *(f"ALTER TABLE crowddb_row_history DROP COLUMN IF EXISTS {c}"
      for c in ("last_release", "last_box", "last_k", "last_quasi_identifiers")),
    "DROP TABLE crowddb_published",
]
