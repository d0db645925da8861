"""The marketplace behind the HIT web page: HITs, workers, assignments and answers in one SQLite file.

Why SQLite and not crowddb's DuckDB file: DuckDB lets one process write a database file, and the page must keep
serving (``crowddb serve``) while a crowddb session in another process publishes and collects. SQLite allows many
processes (WAL journal), and with ``synchronous=FULL`` an answer is on disk when its transaction commits.

The rules a marketplace enforces are held by the database, so they hold under concurrent requests from many threads
and processes: ``UNIQUE(hit_id, slot)`` with a trigger keeping ``slot`` within the HIT's number of assignments (a HIT
gets at most its assignments), ``UNIQUE(hit_id, worker_id)`` (a worker gets at most one assignment of a HIT), the
answers' primary key (an assignment is answered once), and every change is one ``BEGIN IMMEDIATE`` transaction.
A taken assignment not submitted within its lease may be reclaimed by the next worker: the lapsed row moves to
``lapsed`` (so its late submit is refused with a clear message) and the slot gets a new assignment id.

At rest (issue 24): the file is created 0600 before SQLite opens it, and SQLite gives its -wal and -shm the file's
mode. The requester token is stored as its SHA-256 only: the clear token is known to the ``Market`` that made it (and
announced once); ``new_requester_token`` replaces a lost one. Worker tokens stay in clear: the requester page lists
every worker's link, ``crowddb serve`` (another process) announces them, and the study link sends a returning
participant back to their own link; they open one worker's HITs and earnings, and the file is the owner's only.

This module knows nothing of DuckDB or crowddb's tables: it is the marketplace, like a remote service. What the
requester page reads of it for its summary and charts is in ``report.py``; this module holds the rules.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable

import pandas as pd

from ...errors import ArgumentError, PlatformError
from ..platform import Collected, HitBatch

LEASE = 900.0  # seconds a worker holds a taken assignment before it may be reclaimed

SCHEMA = """
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS hits (
    hit_id TEXT PRIMARY KEY,
    run_id INTEGER,
    round INTEGER,
    question TEXT NOT NULL,
    domain TEXT,                          -- JSON list of the answer choices; NULL when the answer is a row or number
    target TEXT,
    kind TEXT NOT NULL CHECK (kind IN ('choice', 'pick_row', 'number')),
    assignments INTEGER NOT NULL CHECK (assignments >= 1),
    reward REAL NOT NULL CHECK (reward >= 0),
    fee_rate REAL NOT NULL CHECK (fee_rate >= 0),
    columns TEXT NOT NULL,                -- JSON list of the published column names, in order
    posted_at REAL NOT NULL,
    done INTEGER NOT NULL DEFAULT 0       -- 1 once all its assignments are submitted
);
CREATE INDEX IF NOT EXISTS hits_open ON hits (done) WHERE done = 0;
CREATE INDEX IF NOT EXISTS hits_run ON hits (run_id);
CREATE TABLE IF NOT EXISTS items (
    hit_id TEXT NOT NULL REFERENCES hits (hit_id),
    item_no INTEGER NOT NULL,
    row_no INTEGER NOT NULL,
    vals TEXT NOT NULL,                   -- JSON list of the published strings, in the HIT's column order
    PRIMARY KEY (hit_id, item_no, row_no)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gold (
    hit_id TEXT NOT NULL REFERENCES hits (hit_id),
    item_no INTEGER NOT NULL,
    answer TEXT NOT NULL,
    PRIMARY KEY (hit_id, item_no)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS workers (
    worker_id TEXT PRIMARY KEY,
    token TEXT NOT NULL UNIQUE,
    participant_id TEXT UNIQUE,
    study_id TEXT,
    session_id TEXT,
    created_at REAL NOT NULL,
    blocked_at REAL,
    gold_seen INTEGER NOT NULL DEFAULT 0,
    gold_right INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS assignments (
    assignment_id TEXT PRIMARY KEY,
    hit_id TEXT NOT NULL REFERENCES hits (hit_id),
    slot INTEGER NOT NULL CHECK (slot >= 1),
    worker_id TEXT NOT NULL REFERENCES workers (worker_id),
    csrf TEXT NOT NULL,
    taken_at REAL NOT NULL,
    lease_until REAL NOT NULL,
    submitted_at REAL,
    UNIQUE (hit_id, slot),
    UNIQUE (hit_id, worker_id)
);
CREATE INDEX IF NOT EXISTS assignments_worker ON assignments (worker_id, submitted_at);
CREATE TRIGGER IF NOT EXISTS assignments_slot_in_range BEFORE INSERT ON assignments
WHEN NEW.slot > (SELECT assignments FROM hits WHERE hit_id = NEW.hit_id)
BEGIN SELECT RAISE(ABORT, 'a HIT gets at most its number of assignments'); END;
CREATE TRIGGER IF NOT EXISTS assignments_slot_fixed BEFORE UPDATE OF slot, hit_id, worker_id ON assignments
BEGIN SELECT RAISE(ABORT, 'an assignment keeps its HIT, slot and worker'); END;
CREATE TRIGGER IF NOT EXISTS assignments_submitted_once BEFORE UPDATE OF submitted_at ON assignments
WHEN OLD.submitted_at IS NOT NULL
BEGIN SELECT RAISE(ABORT, 'an assignment is submitted once'); END;
CREATE TABLE IF NOT EXISTS lapsed (      -- assignments whose lease ran out and whose slot went to another worker
    assignment_id TEXT PRIMARY KEY,
    hit_id TEXT NOT NULL,
    slot INTEGER NOT NULL,
    worker_id TEXT NOT NULL,
    taken_at REAL NOT NULL,
    lease_until REAL NOT NULL,
    reclaimed_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS answers (
    assignment_id TEXT NOT NULL REFERENCES assignments (assignment_id),
    item_no INTEGER NOT NULL,
    answer TEXT NOT NULL,
    PRIMARY KEY (assignment_id, item_no)
) WITHOUT ROWID;
"""
# workers who may not take a HIT: they answered one of its items in an earlier round (an accuracy target's later
# rounds, HitBatch.exclude); created apart from SCHEMA so that a market file from before it gains it too
EXCLUDED = """
CREATE TABLE IF NOT EXISTS excluded (
    hit_id TEXT NOT NULL REFERENCES hits (hit_id),
    worker_id TEXT NOT NULL,
    PRIMARY KEY (hit_id, worker_id)
) WITHOUT ROWID;
"""
# the worker a HIT was built for (an accuracy target's quality-aware rounds, HitBatch.offer): it gets the HIT first
# when it asks for work, and other workers only when no other HIT is open for them; apart from SCHEMA as ``excluded``
OFFERED = """
CREATE TABLE IF NOT EXISTS offered (
    hit_id TEXT PRIMARY KEY REFERENCES hits (hit_id),
    worker_id TEXT NOT NULL
) WITHOUT ROWID;
"""


class MarketError(PlatformError):
    """A request the marketplace refuses; ``status`` is the HTTP status the page answers with."""

    status = 400


class UnknownToken(MarketError):
    """No worker has this token."""

    status = 404


class NotFound(MarketError):
    """No such assignment."""

    status = 404


class Forbidden(MarketError):
    """Another worker's assignment, or a form token that does not match."""

    status = 403


class LeaseLost(MarketError):
    """The assignment's lease ran out and its slot went to another worker: the late submit is refused."""

    status = 409


class InvalidAnswers(MarketError):
    """Items missing or answered outside the domain; ``problems``: item_no -> message for the worker."""

    status = 400

    def __init__(self, problems: dict[int, str]) -> None:
        super().__init__("; ".join(problems.values()))
        self.problems = problems


def _now() -> float:
    return time.time()


class Market:
    """The marketplace state in the SQLite file ``path`` (created when missing).

    ``clock``: a callable returning the time in seconds (tests inject one to expire leases). ``lease``: seconds a
    taken assignment stays the worker's. ``gold_min`` / ``gold_accuracy``: a worker with at least ``gold_min`` gold
    answers whose accuracy on them is below ``gold_accuracy`` is blocked (gets no further assignments).
    """

    def __init__(self, path: str | os.PathLike, *, clock: Callable[[], float] | None = None,
                 lease: float | None = None, gold_min: int | None = None, gold_accuracy: float | None = None) -> None:
        if lease is not None and not lease > 0:
            raise ArgumentError("the lease must be a positive number of seconds")
        if (gold_min is not None and gold_min < 1) or (gold_accuracy is not None and not 0 <= gold_accuracy <= 1):
            raise ArgumentError("gold_min must be at least 1 and gold_accuracy within [0, 1]")
        self.path = os.fspath(path)
        _create_private(self.path)
        self.clock = clock or _now
        self._requester_token: str | None = None  # known only to the Market that made it (stored hashed)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._writer = _writer_lock(self.path)
        self._create_schema(self._con())
        # the rules' numbers: given ones are stored in the file (a server in another process over the same market
        # follows them), missing ones are read from it
        given = {"lease": lease, "gold_min": gold_min, "gold_accuracy": gold_accuracy}
        for key, value in given.items():
            if value is not None:
                self.set_setting(key, repr(value))
        lease = float(self.setting("lease", repr(LEASE)))
        gold_min = int(self.setting("gold_min", "3"))
        gold_accuracy = float(self.setting("gold_accuracy", "0.7"))
        self.lease, self.gold_min, self.gold_accuracy = lease, gold_min, gold_accuracy

    # -- connections and transactions ---------------------------------------------------------------------------

    def _con(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(self.path, timeout=60.0, isolation_level=None, check_same_thread=False)
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=FULL")
            con.execute("PRAGMA foreign_keys=ON")
            con.execute("PRAGMA busy_timeout=60000")
            self._local.con = con
            with self._lock:
                self._connections.append(con)
        return con

    def connection(self) -> sqlite3.Connection:
        """This thread's connection to the market file, for reading it (``report.py``'s queries); every change goes
        through the methods below, which enforce the rules."""
        return self._con()

    class _Tx:
        """One write transaction (BEGIN IMMEDIATE). Writers of one process queue on a lock per market file first:
        SQLite's own busy handler sleeps in growing steps while another connection writes, which under many
        threads makes requests wait far longer than the writes take; between processes it is still what waits.
        ``durable=False`` commits without waiting for the disk (a taken assignment: losing it in a power cut only
        frees its slot); the next durable commit (a submit) syncs it too. A process crash loses neither."""

        def __init__(self, con: sqlite3.Connection, lock: threading.Lock, durable: bool) -> None:
            self.con, self.lock, self.durable = con, lock, durable

        def __enter__(self) -> sqlite3.Connection:
            self.lock.acquire()
            try:
                if not self.durable:
                    self.con.execute("PRAGMA synchronous=NORMAL")
                self.con.execute("BEGIN IMMEDIATE")
            except BaseException:
                self._restore()
                raise
            return self.con

        def __exit__(self, kind, value, tb) -> None:
            try:
                self.con.execute("COMMIT" if kind is None else "ROLLBACK")
            finally:
                self._restore()

        def _restore(self) -> None:
            try:
                if not self.durable:
                    self.con.execute("PRAGMA synchronous=FULL")
            finally:
                self.lock.release()

    def _write(self, con: sqlite3.Connection | None = None, durable: bool = True) -> Market._Tx:
        return Market._Tx(con or self._con(), self._writer, durable)

    def _create_schema(self, con: sqlite3.Connection) -> None:
        exists = con.execute("SELECT 1 FROM sqlite_master WHERE name = 'answers'").fetchone()
        if not exists:
            with self._write(con):
                for statement in _statements(SCHEMA):
                    con.execute(statement)
        with self._write(con):
            con.execute(EXCLUDED)
            con.execute(OFFERED)
            clear = con.execute("SELECT value FROM settings WHERE key = 'requester_token'").fetchone()
            if clear is not None:  # a market file from before the token was hashed: hashed now, the clear one gone
                con.execute("INSERT OR IGNORE INTO settings VALUES ('requester_token_sha256', ?)", (_digest(clear[0]),))
                con.execute("DELETE FROM settings WHERE key = 'requester_token'")
            if con.execute("SELECT 1 FROM settings WHERE key = 'requester_token_sha256'").fetchone() is None:
                token = secrets.token_urlsafe(24)
                con.execute("INSERT INTO settings VALUES ('requester_token_sha256', ?)", (_digest(token),))
                self._requester_token = token
            elif clear is not None:
                self._requester_token = clear[0]  # the requester has it already; this session may tell it again
            con.execute("INSERT OR IGNORE INTO settings VALUES ('market_id', ?)", (secrets.token_hex(8),))
            con.execute("INSERT OR IGNORE INTO settings VALUES ('completion_code', ?)",
                        (secrets.token_hex(4).upper(),))

    def close(self) -> None:
        """Close every connection this market opened (in any thread)."""
        with self._lock:
            for con in self._connections:
                try:
                    con.close()
                except sqlite3.Error:
                    pass
            self._connections.clear()
        self._local = threading.local()

    # -- settings -----------------------------------------------------------------------------------------------

    def setting(self, key: str, default: str | None = None) -> str | None:
        row = self._con().execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return row[0] if row else default

    def set_setting(self, key: str, value: str) -> None:
        with self._write() as con:
            con.execute("INSERT INTO settings VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        (key, value))

    @property
    def requester_token(self) -> str | None:
        """The requester page's token in clear, when this Market made it (the file holds only its SHA-256); None
        otherwise: it was announced when the market was made, and ``new_requester_token`` replaces a lost one."""
        return self._requester_token

    def new_requester_token(self) -> str:
        """A new requester token (its SHA-256 stored): the old requester link stops working. Returns it in clear."""
        token = secrets.token_urlsafe(24)
        self.set_setting("requester_token_sha256", _digest(token))
        self._requester_token = token
        return token

    def requester_ok(self, token: str) -> bool:
        """Is ``token`` the requester's? Compared as SHA-256 digests in constant time."""
        stored = self.setting("requester_token_sha256")
        return stored is not None and hmac.compare_digest(_digest(str(token)), stored)

    @property
    def market_id(self) -> str:
        """A random id of this market file (a server tells it at /healthz, so a platform can see whose it is)."""
        return self.setting("market_id")

    @property
    def completion_code(self) -> str:
        return self.setting("completion_code")

    # -- HITs ---------------------------------------------------------------------------------------------------

    def post(self, batch: HitBatch) -> int:
        """Post the batch's HITs; a HIT id already posted is left alone (idempotent). Returns HITs newly posted."""
        hits = batch.hits
        columns = list(batch.published_columns)
        now = self.clock()
        hit_rows = []
        for row in hits.itertuples(index=False):
            rec = row._asdict()
            domain = rec.get("domain")
            kind = rec.get("kind")
            if not isinstance(kind, str):
                kind = "pick_row" if domain is None or (isinstance(domain, float) and math.isnan(domain)) else "choice"
            if kind == "choice":
                domain_json = json.dumps([str(d) for d in domain])
            else:
                domain_json = None
            target = rec.get("target")
            target = None if target is None or (isinstance(target, float) and math.isnan(target)) else str(target)
            hit_rows.append((str(rec["hit_id"]), _opt_int(rec.get("run_id")), _opt_int(rec.get("round")),
                             str(rec["question"]), domain_json, target, kind,
                             int(rec["assignments"]), float(rec["reward"]), float(rec.get("fee_rate", 0.0) or 0.0),
                             json.dumps(columns), now))
        items = batch.items
        values = items[columns].astype(object).where(items[columns].notna(), "")
        item_rows = [(str(h), int(i), int(r), json.dumps([str(v) for v in vals]))
                     for h, i, r, vals in zip(items["hit_id"], items["item_no"], items["row_no"],
                                              values.itertuples(index=False, name=None))]
        excluded_rows = []
        if batch.exclude is not None and len(batch.exclude):  # a worker who answered one of a HIT's items
            excluded_rows = sorted({(str(h), str(w)) for h, w in zip(batch.exclude["hit_id"],
                                                                     batch.exclude["worker_id"])})
        offered_rows = []
        if batch.offer is not None and len(batch.offer):
            offered_rows = [(str(h), str(w)) for h, w in zip(batch.offer["hit_id"], batch.offer["worker_id"])]
        gold_rows = []
        if batch.gold is not None and len(batch.gold):
            gold_rows = [(str(h), int(i), str(a)) for h, i, a in
                         zip(batch.gold["hit_id"], batch.gold["item_no"], batch.gold["answer"])]
        with self._write() as con:
            new = {h for (h,) in con.execute(
                "SELECT value FROM json_each(?) WHERE value NOT IN (SELECT hit_id FROM hits)",
                (json.dumps([r[0] for r in hit_rows]),))}
            con.executemany("INSERT OR IGNORE INTO hits (hit_id, run_id, round, question, domain, target, kind, "
                            "assignments, reward, fee_rate, columns, posted_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                            [r for r in hit_rows if r[0] in new])
            con.executemany("INSERT OR IGNORE INTO items VALUES (?,?,?,?)", [r for r in item_rows if r[0] in new])
            con.executemany("INSERT OR IGNORE INTO gold VALUES (?,?,?)", [r for r in gold_rows if r[0] in new])
            con.executemany("INSERT OR IGNORE INTO excluded VALUES (?,?)", [r for r in excluded_rows if r[0] in new])
            con.executemany("INSERT OR IGNORE INTO offered VALUES (?,?)", [r for r in offered_rows if r[0] in new])
        return len(new)

    def known(self, hit_ids: Iterable[str]) -> set[str]:
        ids = json.dumps([str(h) for h in hit_ids])
        return {h for (h,) in self._con().execute(
            "SELECT hit_id FROM hits WHERE hit_id IN (SELECT value FROM json_each(?))", (ids,))}

    def hit(self, hit_id: str) -> dict:
        """What a worker sees of a HIT: question, kind, domain, reward, columns and items (published strings only;
        gold answers are never part of it)."""
        con = self._con()
        row = con.execute("SELECT hit_id, question, domain, kind, reward, columns, target FROM hits "
                          "WHERE hit_id = ?", (hit_id,)).fetchone()
        if row is None:
            raise NotFound("no such HIT")
        items: dict[int, list[tuple[int, list[str]]]] = {}
        for item_no, row_no, vals in con.execute(
                "SELECT item_no, row_no, vals FROM items WHERE hit_id = ? ORDER BY item_no, row_no", (hit_id,)):
            items.setdefault(item_no, []).append((row_no, json.loads(vals)))
        return {"hit_id": row[0], "question": row[1], "domain": json.loads(row[2]) if row[2] else None,
                "kind": row[3], "reward": row[4], "columns": json.loads(row[5]),
                "items": [{"item_no": k, "rows": [{"row_no": r, "values": v} for r, v in rows]}
                          for k, rows in items.items()]}

    # -- workers ------------------------------------------------------------------------------------------------

    def _new_worker(self, con: sqlite3.Connection, participant: tuple | None = None) -> tuple[str, str]:
        n = con.execute("SELECT count(*) FROM workers").fetchone()[0] + 1
        while True:
            worker_id, token = f"web-{n:04d}", secrets.token_urlsafe(24)
            try:
                pid, study, session = participant or (None, None, None)
                con.execute("INSERT INTO workers (worker_id, token, participant_id, study_id, session_id, created_at)"
                            " VALUES (?,?,?,?,?,?)", (worker_id, token, pid, study, session, self.clock()))
                return worker_id, token
            except sqlite3.IntegrityError:
                if participant is not None and con.execute(
                        "SELECT 1 FROM workers WHERE participant_id = ?", (participant[0],)).fetchone():
                    raise
                n += 1

    def add_worker(self) -> tuple[str, str]:
        """A new worker: (worker_id, token). The token is the worker's link; it is unguessable."""
        with self._write() as con:
            return self._new_worker(con)

    def worker_for_participant(self, participant_id: str, study_id: str | None = None,
                               session_id: str | None = None) -> tuple[str, str]:
        """The worker of a marketplace participant, created on first visit (one per participant id, however often)."""
        if not participant_id:
            raise ArgumentError("a participant id is needed")
        with self._write() as con:
            row = con.execute("SELECT worker_id, token FROM workers WHERE participant_id = ?",
                              (participant_id,)).fetchone()
            if row is not None:
                return row[0], row[1]
            return self._new_worker(con, (participant_id, study_id, session_id))

    def worker(self, token: str) -> dict:
        """The worker holding ``token``: worker_id, participant_id, blocked, earned, submitted. UnknownToken if none."""
        row = self._con().execute(
            "SELECT w.worker_id, w.participant_id, w.blocked_at IS NOT NULL, "
            "coalesce(sum(h.reward) FILTER (WHERE a.submitted_at IS NOT NULL), 0), "
            "count(a.submitted_at) FROM workers w LEFT JOIN assignments a ON a.worker_id = w.worker_id "
            "LEFT JOIN hits h ON h.hit_id = a.hit_id WHERE w.token = ? GROUP BY w.worker_id", (token,)).fetchone()
        if row is None:
            raise UnknownToken("unknown worker link")
        return {"worker_id": row[0], "participant_id": row[1], "blocked": bool(row[2]), "earned": float(row[3]),
                "submitted": int(row[4])}

    def link_tokens(self) -> dict[str, str]:
        """worker_id -> token of the workers who did not come from a marketplace (handed a link)."""
        return dict(self._con().execute(
            "SELECT worker_id, token FROM workers WHERE participant_id IS NULL ORDER BY worker_id"))

    def tokens(self) -> dict[str, str]:
        """worker_id -> token of every worker (for the requester's worker links)."""
        return dict(self._con().execute("SELECT worker_id, token FROM workers ORDER BY worker_id"))

    # -- taking and submitting ----------------------------------------------------------------------------------

    # a HIT built for this worker first, then the HITs built for nobody, then those built for someone else (each
    # oldest first): a HIT waits for its worker while others have work, and is never left undone for want of it
    _OPEN_HIT = """
        SELECT h.hit_id, h.assignments FROM hits h LEFT JOIN offered o ON o.hit_id = h.hit_id
        WHERE h.done = 0
          AND NOT EXISTS (SELECT 1 FROM assignments a WHERE a.hit_id = h.hit_id AND a.worker_id = :worker)
          AND NOT EXISTS (SELECT 1 FROM excluded e WHERE e.hit_id = h.hit_id AND e.worker_id = :worker)
          AND ((SELECT count(*) FROM assignments a WHERE a.hit_id = h.hit_id) < h.assignments
               OR EXISTS (SELECT 1 FROM assignments a WHERE a.hit_id = h.hit_id AND a.submitted_at IS NULL
                          AND a.lease_until < :now))
        ORDER BY CASE WHEN o.worker_id = :worker THEN 0 WHEN o.worker_id IS NULL THEN 1 ELSE 2 END, h.rowid
        LIMIT 1"""

    def _worker_row(self, con: sqlite3.Connection, token: str) -> tuple[str, float | None]:
        row = con.execute("SELECT worker_id, blocked_at FROM workers WHERE token = ?", (token,)).fetchone()
        if row is None:
            raise UnknownToken("unknown worker link")
        return row

    def take(self, token: str) -> dict | None:
        """The worker's assignment: the one it holds unsubmitted (its lease renewed when it ran out and nobody took
        the slot), else a new one of the oldest HIT it has none of, with a free slot or a slot whose lease ran out
        (reclaimed in the same transaction). None when there is none, or the worker is blocked."""
        now = self.clock()
        with self._write(durable=False) as con:
            worker_id, blocked = self._worker_row(con, token)
            if blocked is not None:
                return None
            held = con.execute("SELECT assignment_id, hit_id, slot, csrf, lease_until FROM assignments "
                               "WHERE worker_id = ? AND submitted_at IS NULL ORDER BY taken_at LIMIT 1",
                               (worker_id,)).fetchone()
            if held is not None:
                lease_until = held[4]
                if lease_until < now:
                    lease_until = now + self.lease
                    con.execute("UPDATE assignments SET lease_until = ? WHERE assignment_id = ?",
                                (lease_until, held[0]))
                return {"assignment_id": held[0], "hit_id": held[1], "slot": held[2], "worker_id": worker_id,
                        "csrf": held[3], "lease_until": lease_until}
            found = con.execute(self._OPEN_HIT, {"worker": worker_id, "now": now}).fetchone()
            if found is None:
                return None
            hit_id, n_slots = found
            used = {s for (s,) in con.execute("SELECT slot FROM assignments WHERE hit_id = ?", (hit_id,))}
            free = [s for s in range(1, n_slots + 1) if s not in used]
            if free:
                slot = free[0]
            else:  # reclaim the slot whose lease ran out longest ago
                old = con.execute("SELECT assignment_id, slot, worker_id, taken_at, lease_until FROM assignments "
                                  "WHERE hit_id = ? AND submitted_at IS NULL AND lease_until < ? "
                                  "ORDER BY lease_until LIMIT 1", (hit_id, now)).fetchone()
                con.execute("INSERT INTO lapsed VALUES (?,?,?,?,?,?,?)",
                            (old[0], hit_id, old[1], old[2], old[3], old[4], now))
                con.execute("DELETE FROM assignments WHERE assignment_id = ?", (old[0],))
                slot = old[1]
            assignment_id = f"{hit_id}-A{slot}-{secrets.token_hex(3)}"
            csrf = secrets.token_urlsafe(18)
            lease_until = now + self.lease
            con.execute("INSERT INTO assignments (assignment_id, hit_id, slot, worker_id, csrf, taken_at, lease_until)"
                        " VALUES (?,?,?,?,?,?,?)", (assignment_id, hit_id, slot, worker_id, csrf, now, lease_until))
            return {"assignment_id": assignment_id, "hit_id": hit_id, "slot": slot, "worker_id": worker_id,
                    "csrf": csrf, "lease_until": lease_until}

    def available(self, token: str) -> bool:
        """Would ``take`` give this worker an assignment now? (reads only)"""
        con = self._con()
        worker_id, blocked = self._worker_row(con, token)
        if blocked is not None:
            return False
        if con.execute("SELECT 1 FROM assignments WHERE worker_id = ? AND submitted_at IS NULL",
                       (worker_id,)).fetchone():
            return True
        return con.execute(self._OPEN_HIT, {"worker": worker_id, "now": self.clock()}).fetchone() is not None

    def assignment(self, token: str, assignment_id: str) -> dict:
        """The worker's own assignment (to show its form again). Forbidden for another worker's, LeaseLost for a
        reclaimed one, NotFound for none."""
        con = self._con()
        worker_id, _ = self._worker_row(con, token)
        return self._own(con, worker_id, assignment_id)

    def _own(self, con: sqlite3.Connection, worker_id: str, assignment_id: str) -> dict:
        row = con.execute("SELECT assignment_id, hit_id, slot, worker_id, csrf, lease_until, submitted_at "
                          "FROM assignments WHERE assignment_id = ?", (assignment_id,)).fetchone()
        if row is None:
            gone = con.execute("SELECT worker_id FROM lapsed WHERE assignment_id = ?", (assignment_id,)).fetchone()
            if gone is None:
                raise NotFound("no such assignment")
            if gone[0] != worker_id:
                raise Forbidden("this assignment is not yours")
            raise LeaseLost("the time to answer this HIT ran out and it went to another worker; your answers were "
                            "not stored and nothing was paid for them")
        if row[3] != worker_id:
            raise Forbidden("this assignment is not yours")
        return {"assignment_id": row[0], "hit_id": row[1], "slot": row[2], "worker_id": row[3], "csrf": row[4],
                "lease_until": row[5], "submitted_at": row[6]}

    def submit(self, token: str, assignment_id: str, csrf: str, answers: dict[int, str]) -> dict:
        """Store the worker's answers to its assignment, all in one committed transaction before returning.

        Refuses (raises) another worker's assignment or a wrong form token (Forbidden), a reclaimed one (LeaseLost),
        missing or out-of-domain answers (InvalidAnswers, naming every item). A second submit of a submitted
        assignment returns the first result, storing and paying nothing again. Scores gold items and blocks a worker
        below the gold accuracy. Returns assignment_id, hit_id, earned (this HIT's reward), total (all the worker
        earned), again (bool), blocked (bool)."""
        now = self.clock()
        with self._write() as con:
            worker_id, blocked = self._worker_row(con, token)
            own = self._own(con, worker_id, assignment_id)
            if not hmac.compare_digest(str(csrf or ""), own["csrf"]):
                raise Forbidden("the form does not match this assignment (reload the page)")
            hit_id = own["hit_id"]
            kind, domain_json, reward = con.execute("SELECT kind, domain, reward FROM hits WHERE hit_id = ?",
                                                    (hit_id,)).fetchone()
            again = own["submitted_at"] is not None
            if not again:
                clean = self._validate(con, hit_id, kind, domain_json, answers)
                con.executemany("INSERT INTO answers VALUES (?,?,?)",
                                [(assignment_id, k, v) for k, v in sorted(clean.items())])
                con.execute("UPDATE assignments SET submitted_at = ? WHERE assignment_id = ?", (now, assignment_id))
                con.execute("UPDATE hits SET done = 1 WHERE hit_id = ? AND assignments <= "
                            "(SELECT count(*) FROM assignments WHERE hit_id = ? AND submitted_at IS NOT NULL)",
                            (hit_id, hit_id))
                gold = dict(con.execute("SELECT item_no, answer FROM gold WHERE hit_id = ?", (hit_id,)))
                if gold:
                    right = sum(clean[k] == v for k, v in gold.items())
                    con.execute("UPDATE workers SET gold_seen = gold_seen + ?, gold_right = gold_right + ? "
                                "WHERE worker_id = ?", (len(gold), right, worker_id))
                    seen, good = con.execute("SELECT gold_seen, gold_right FROM workers WHERE worker_id = ?",
                                             (worker_id,)).fetchone()
                    if blocked is None and seen >= self.gold_min and good / seen < self.gold_accuracy:
                        blocked = now
                        con.execute("UPDATE workers SET blocked_at = ? WHERE worker_id = ?", (now, worker_id))
                        con.execute("DELETE FROM assignments WHERE worker_id = ? AND submitted_at IS NULL",
                                    (worker_id,))
            total = con.execute("SELECT coalesce(sum(h.reward), 0) FROM assignments a JOIN hits h USING (hit_id) "
                                "WHERE a.worker_id = ? AND a.submitted_at IS NOT NULL", (worker_id,)).fetchone()[0]
        return {"assignment_id": assignment_id, "hit_id": hit_id, "earned": float(reward), "total": float(total),
                "again": again, "blocked": blocked is not None}

    @staticmethod
    def _validate(con: sqlite3.Connection, hit_id: str, kind: str, domain_json: str | None,
                  answers: dict[int, str]) -> dict[int, str]:
        rows: dict[int, set[str]] = {}
        for item_no, row_no in con.execute("SELECT item_no, row_no FROM items WHERE hit_id = ?", (hit_id,)):
            rows.setdefault(item_no, set()).add(str(row_no))
        domain = set(json.loads(domain_json)) if domain_json else set()
        given = {}
        for key, value in answers.items():
            try:
                given[int(key)] = "" if value is None else str(value).strip()
            except (TypeError, ValueError):
                continue
        problems, clean = {}, {}
        for item_no in sorted(rows):
            value = given.get(item_no, "")
            if value == "":
                problems[item_no] = (f"Item {item_no}: please enter a number" if kind == "number"
                                     else f"Item {item_no}: please choose an answer")
            elif kind == "choice" and value not in domain:
                problems[item_no] = f"Item {item_no}: the answer is not one of the choices"
            elif kind == "pick_row" and value not in rows[item_no]:
                problems[item_no] = f"Item {item_no}: please choose one of the listed rows"
            elif kind == "number" and not _is_number(value):
                problems[item_no] = f"Item {item_no}: please enter a number"
            else:
                clean[item_no] = value
        if problems:
            raise InvalidAnswers(problems)
        return clean

    # -- what came back -----------------------------------------------------------------------------------------

    def collected(self, hit_ids: Iterable[str]) -> Collected:
        """The submitted assignments of these HITs and their answers (gold items included, numbered as posted)."""
        ids = json.dumps([str(h) for h in hit_ids])
        con = self._con()
        assignments = pd.DataFrame(con.execute(
            "SELECT assignment_id, hit_id, worker_id FROM assignments WHERE submitted_at IS NOT NULL "
            "AND hit_id IN (SELECT value FROM json_each(?)) ORDER BY hit_id, slot", (ids,)).fetchall(),
            columns=["assignment_id", "hit_id", "worker_id"])
        answers = pd.DataFrame(con.execute(
            "SELECT a.assignment_id, a.hit_id, n.item_no, a.worker_id, n.answer FROM assignments a "
            "JOIN answers n USING (assignment_id) WHERE a.submitted_at IS NOT NULL "
            "AND a.hit_id IN (SELECT value FROM json_each(?)) ORDER BY a.hit_id, a.slot, n.item_no", (ids,)).fetchall(),
            columns=["assignment_id", "hit_id", "item_no", "worker_id", "answer"])
        answers["item_no"] = answers["item_no"].astype("int64")
        return Collected(assignments.astype(object), answers)

    def progress(self, hit_ids: Iterable[str]) -> tuple[int, int]:
        """(assignments submitted, assignments asked for) over these HITs."""
        ids = json.dumps([str(h) for h in hit_ids])
        con = self._con()
        total = con.execute("SELECT coalesce(sum(assignments), 0) FROM hits WHERE hit_id IN "
                            "(SELECT value FROM json_each(?))", (ids,)).fetchone()[0]
        submitted = con.execute("SELECT count(*) FROM assignments WHERE submitted_at IS NOT NULL AND hit_id IN "
                                "(SELECT value FROM json_each(?))", (ids,)).fetchone()[0]
        return int(submitted), int(total)

    def finished(self, hit_ids: Iterable[str]) -> list[str]:
        """Those of these HITs that have all their assignments submitted."""
        ids = json.dumps([str(h) for h in hit_ids])
        return [h for (h,) in self._con().execute("SELECT hit_id FROM hits WHERE done = 1 AND hit_id IN "
                                                  "(SELECT value FROM json_each(?)) ORDER BY hit_id", (ids,))]

    def done_hits(self, hit_ids: Iterable[str]) -> int:
        """How many of these HITs have all their assignments submitted."""
        ids = json.dumps([str(h) for h in hit_ids])
        return int(self._con().execute("SELECT count(*) FROM hits WHERE done = 1 AND hit_id IN "
                                       "(SELECT value FROM json_each(?))", (ids,)).fetchone()[0])

    def workers(self) -> pd.DataFrame:
        """worker_id, quality (accuracy on gold items; NaN without any), blocked, participant_id."""
        rows = self._con().execute("SELECT worker_id, CASE WHEN gold_seen > 0 THEN CAST(gold_right AS REAL) / "
                                   "gold_seen END, blocked_at IS NOT NULL, participant_id FROM workers "
                                   "ORDER BY worker_id").fetchall()
        frame = pd.DataFrame(rows, columns=["worker_id", "quality", "blocked", "participant_id"])
        frame = frame.astype({"quality": float, "blocked": bool})
        frame["participant_id"] = frame["participant_id"].astype(object).where(frame["participant_id"].notna(), None)
        return frame

    def earnings(self, run_id: int | None = None) -> pd.DataFrame:
        """What each worker earned from submitted assignments (of run ``run_id``, or all): worker_id,
        participant_id, assignments, reward (US$)."""
        rows = self._con().execute(
            "SELECT w.worker_id, w.participant_id, count(*), sum(h.reward) FROM assignments a "
            "JOIN hits h USING (hit_id) JOIN workers w USING (worker_id) WHERE a.submitted_at IS NOT NULL "
            "AND (:run IS NULL OR h.run_id = :run) GROUP BY w.worker_id ORDER BY w.worker_id",
            {"run": run_id}).fetchall()
        frame = pd.DataFrame(rows, columns=["worker_id", "participant_id", "assignments", "reward"])
        frame = frame.astype({"assignments": "int64", "reward": float})
        frame["participant_id"] = frame["participant_id"].astype(object).where(frame["participant_id"].notna(), None)
        return frame


_WRITERS: dict[str, threading.Lock] = {}
_WRITERS_LOCK = threading.Lock()
if hasattr(os, "register_at_fork"):  # a forked child starts with no writer locks (one held at the fork is not its)
    os.register_at_fork(after_in_child=_WRITERS.clear)


def _writer_lock(path: str) -> threading.Lock:
    """The lock the writers of this process take before writing to the market file ``path``."""
    key = os.path.realpath(path)
    with _WRITERS_LOCK:
        return _WRITERS.setdefault(key, threading.Lock())


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _create_private(path: str) -> None:
    """Create the market file empty with mode 0600 unless it exists (O_EXCL: a file of someone else's is never
    touched), before SQLite opens it: SQLite creates the -wal and -shm with the database file's mode."""
    if path == ":memory:" or path.startswith("file:"):
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        return
    except OSError:  # a missing folder and the like: sqlite3 says so in its own words
        return
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o600)  # whatever the umask
    finally:
        os.close(fd)


def _opt_int(value) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _statements(script: str) -> list[str]:
    """Split the schema into statements (triggers hold inner semicolons: split on those ending a line at depth 0)."""
    out, current = [], []
    for line in script.splitlines():
        current.append(line)
        joined = "\n".join(current).strip()
        if joined and sqlite3.complete_statement(joined):
            out.append(joined)
            current = []
    return out
