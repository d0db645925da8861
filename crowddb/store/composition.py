"""k-anonymity across releases: what every k-anonymous release showed of each base-table row, and the guard that
refuses a release which, together with the earlier ones, would let a worker narrow a row to fewer than k rows.

Threat model (issue 15, README "Privacy across queries"): a worker knows every person's quasi-identifier values,
sees every item of every release, and links one person's items across releases perfectly. What such a worker cannot
tell apart from a published row are the rows with the same *history*: present in the same releases, with the same
published box (the text of its quasi-identifiers) in each. The promise: every published row's history is shared by at
least k rows, k the smallest among the releases that published it.

The ledger: ``crowddb_ledger``, one row per (release, table): the release ('run:<id>' for a crowd run, 'release:<id>'
for ANONYMIZE), its k, and whether its rows could be tied to the table's; ``crowddb_published``, one row per (release,
row): the row (its DuckDB rowid, through views, CTEs and subqueries: ``planner.traced``) and its box as published;
``crowddb_row_history``, one row per published table row: its history (the XOR of a 128-bit hash of each of its
entries) and the smallest k promised to it. A release whose rows crowddb cannot tie to one table's rows (its
quasi-identifiers come from a join of tables, an aggregate, a set operation) is recorded without rows: the guard then
refuses every other release of that table, and that release too if the table has others (fail closed).

The guard runs before a release is published (a crowd run: before its HITs are posted; ANONYMIZE: before its rows
are returned) and is one DuckDB statement over the ledger and the planned rows: each row's history so far, the planned
box, the size of every resulting history class and each row's promised k.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd

from .._duck import registered
from ..errors import PrivacyError

BOX_SEPARATOR = "\x1f"  # between the published texts of a row's quasi-identifiers (never in rendered text)
_HISTORY_SEPARATOR = "\x1e"


def box_text(shown: pd.DataFrame, quasi_identifiers: list[str]) -> np.ndarray:
    """Each row's published box: its quasi-identifiers' published texts, in ``quasi_identifiers`` order (sorted by
    name, so two releases that list them differently write the same text)."""
    names = sorted(quasi_identifiers)
    if not names:
        return np.full(len(shown), "", dtype=object)
    text = shown[names[0]].astype(str).str.cat([shown[n].astype(str) for n in names[1:]], sep=BOX_SEPARATOR) \
        if len(names) > 1 else shown[names[0]].astype(str)
    return text.to_numpy(dtype=object)


def planned(rows: np.ndarray, boxes: np.ndarray) -> pd.DataFrame:
    """The rows a release would publish (rowids) and the box of each; a row shown twice keeps its first box (a
    later knock-out round shows a row as round 1 did)."""
    frame = pd.DataFrame({"row_ref": np.asarray(rows, dtype=np.int64), "box": np.asarray(boxes, dtype=object)})
    return frame.drop_duplicates("row_ref").reset_index(drop=True)


def check(con: duckdb.DuckDBPyConnection, table: str, release: str, k: int, rows: pd.DataFrame | None) -> None:
    """Refuse (PrivacyError) a release of ``table`` with promise ``k`` publishing ``rows`` (row_ref, box; None: the
    release's rows cannot be tied to the table's) if some published row's history class would fall below its k."""
    table = table.lower()  # DuckDB's names are case-insensitive; the ledger keeps them lower-case
    earlier = con.execute("SELECT release, traceable FROM crowddb_ledger WHERE table_name = ? AND release <> ? "
                          "ORDER BY release", [table, release]).fetchall()
    untraceable, others = [r for r, t in earlier if not t], [r for r, _ in earlier]
    if untraceable:
        raise PrivacyError(
            f"{table!r} has an earlier release ({_names(untraceable)}) whose rows crowddb could not tie to the "
            f"table's rows (its quasi-identifiers came from a join of tables, an aggregate or a set operation), so "
            f"no later release of {table!r} can be checked against it; a release of a table with quasi-identifiers "
            "reads its rows one by one (through views, CTEs and subqueries with a WHERE or a LIMIT)")
    if rows is None:
        if others:
            raise PrivacyError(
                f"this release's rows cannot be tied to the rows of {table!r} (its quasi-identifiers come from a join "
                f"of tables, an aggregate or a set operation), and {table!r} has earlier k-anonymous releases "
                f"({_names(others)}) it could be intersected with; read the rows of {table!r} one by one (a WHERE, "
                "a LIMIT, views and CTEs are fine)")
        return
    if not len(rows):
        return
    with registered(con, __crowd_planned=rows):
        found = con.execute(_GUARD, [table, release, int(k)]).fetchall()
    if found:
        size, promised, count, sample = found[0]
        involved = [r for (r,) in con.execute(
            "SELECT DISTINCT release FROM crowddb_published WHERE table_name = ? AND release <> ? "
            "AND row_ref IN (SELECT unnest(?::BIGINT[])) ORDER BY release", [table, release, sample]).fetchall()]
        involved = involved or others  # rows new to this release: told apart from the others by them all
        raise PrivacyError(
            f"this release would let a worker who links releases narrow {count} row(s) of {table!r} to a group of "
            f"{size}, fewer than k={promised}: it would break the k-anonymity of {_names(involved)} (a worker "
            "intersects its classes with this release's, and sees which of their rows it leaves out). Run it over "
            "the same rows, k and anonymizer as that release (a rerun is served from the answers on record)")


def record(con: duckdb.DuckDBPyConnection, table: str, release: str, k: int, rows: pd.DataFrame | None) -> None:
    """Check a release (``check``) and put its published rows (None: a release not tied to the table's rows) in
    the ledger, folded into the rows' histories. Called inside the transaction that records the release's HITs (or
    its row in crowddb_releases), which is retried when another connection's release of the same rows commits
    first: check and record are one step, so two concurrent releases are never both judged against the same past."""
    check(con, table, release, k, rows)
    table = table.lower()
    con.execute("INSERT INTO crowddb_ledger (release, table_name, k, traceable) VALUES (?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING", [release, table, int(k), rows is not None]).fetchall()
    if rows is None or not len(rows):
        return
    with registered(con, __crowd_planned=rows):
        con.execute(_FOLD, [table, release, int(k)]).fetchall()  # before the new entries join the ledger
        con.execute("INSERT INTO crowddb_published (release, table_name, row_ref, k, box) "
                    "SELECT $2, $1, row_ref, $3, box FROM __crowd_planned WHERE row_ref NOT IN ("
                    "SELECT row_ref FROM crowddb_published WHERE release = $2 AND table_name = $1)",
                    [table, release, int(k)]).fetchall()


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
    con.execute("CREATE TEMP TABLE __crowd_refold AS SELECT DISTINCT table_name, row_ref FROM crowddb_published "
                "WHERE release IN (SELECT unnest(?))", [gone]).fetchall()
    try:
        for statement in ("DELETE FROM crowddb_published WHERE release IN (SELECT unnest(?))",
                          "DELETE FROM crowddb_ledger WHERE release IN (SELECT unnest(?))"):
            con.execute(statement, [gone]).fetchall()
        con.execute("DELETE FROM crowddb_row_history WHERE (table_name, row_ref) IN "
                    "(SELECT (table_name, row_ref) FROM __crowd_refold)").fetchall()
        con.execute(f"INSERT INTO crowddb_row_history SELECT table_name, row_ref, bit_xor({_ENTRY}), min(k) "
                    "FROM crowddb_published WHERE (table_name, row_ref) IN "
                    "(SELECT (table_name, row_ref) FROM __crowd_refold) GROUP BY ALL").fetchall()
    finally:
        con.execute("DROP TABLE IF EXISTS __crowd_refold").fetchall()


def _names(releases: list[str]) -> str:
    shown = ", ".join(releases[:5])
    return shown + (f" and {len(releases) - 5} more" if len(releases) > 5 else "")


# a ledger entry's share of its row's history: a row's history is the XOR over its entries (order does not matter,
# so a history can be folded again from the ledger after entries leave it)
_ENTRY = "md5_number(release || chr(31) || box)"

# the rows this release adds (the ones an earlier round of it showed are in their histories already), each row's
# history after it, the class of every published row (rows with the same history: same releases, same boxes) and the
# smallest k promised to any row of it; a class smaller than that breaks the promise
_NEXT = """
WITH mine AS (
    SELECT row_ref FROM crowddb_published WHERE table_name = $1 AND release = $2),
added AS (
    SELECT row_ref, any_value(box) AS box FROM __crowd_planned WHERE row_ref NOT IN (SELECT row_ref FROM mine)
    GROUP BY row_ref),
now AS (
    SELECT row_ref, history, k FROM crowddb_row_history WHERE table_name = $1),
after AS (
    SELECT coalesce(n.row_ref, a.row_ref) AS row_ref,
           CASE WHEN a.row_ref IS NULL THEN n.history
                ELSE xor(coalesce(n.history, 0::UHUGEINT), md5_number($2 || chr(31) || a.box)) END AS history,
           CASE WHEN a.row_ref IS NULL THEN n.k WHEN n.k IS NULL THEN $3 ELSE least(n.k, $3) END AS k
    FROM now n FULL OUTER JOIN added a ON n.row_ref = a.row_ref)
"""

_GUARD = _NEXT + """,
classes AS (SELECT row_ref, k, count(*) OVER (PARTITION BY history) AS size FROM after)
SELECT size, k, count(*), list(row_ref ORDER BY row_ref)[1:20] FROM classes WHERE size < k
GROUP BY size, k ORDER BY size, k LIMIT 1
"""

_FOLD = "INSERT OR REPLACE INTO crowddb_row_history " + _NEXT + """
SELECT $1, row_ref, history, k FROM after WHERE row_ref IN (SELECT row_ref FROM added)
"""
