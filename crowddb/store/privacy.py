"""The epsilon budget (issue 15, point 3): what differentially private releases spent, per table and protected unit,
and the check that refuses a release which would overspend, before any noise is drawn.

The ledger is ``crowddb_privacy_ledger`` (sql/catalog.sql), append-only and hash-chained: 'budget' rows (a limit per
table and unit, ``set_budget``), 'reset' rows (``reset``: what was spent before is forgotten, and that is on record)
and 'charge' rows (one per release, table and unit id: e.g. one source's (epsilon, delta, rho)), written by
``record`` in the same transaction as the release's row of crowddb_releases (``Store.log_charged_release``).

Composition (per unit id, over the charges since the last reset):
- 'sequential' (default): epsilon and delta add up (basic composition, Dwork & Roth 2014, Theorem 3.16).
- 'zcdp': rho adds up (Bun & Steinke 2016, Lemma 2.3), converted to (epsilon, delta) at the budget's delta by
  OpenDP's accountant (``make_zCDP_to_approxDP``, the conversion of Canonne, Kamath & Steinke 2020, Proposition 12).
  Only releases with a rho may be charged under it (pure epsilon-DP: rho = epsilon^2 / 2, Bun & Steinke Proposition
  1.4; Gaussian: ``gaussian_rho``).
The report shows both totals whatever the budget's composition.

The chain is keyed (issue 24): each row's hash is HMAC-SHA256 under a secret kept outside the database file
(``ledger_key``: ``CROWDDB_LEDGER_KEY``, else ``<database file>.key`` created 0600 beside it, else for an in-memory
database a random key of this process), so whoever can edit the file but not read the key cannot recompute it. Every
charge and every act verifies it first (``verify``); a chain sealed by an older crowddb without a key is verified once
with plain SHA-256 and re-sealed in the transaction of the next act, which records a 'rekey' act (``_reseal``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import hmac
import math
import os
import secrets
import time
from collections.abc import Callable, Sequence
from fractions import Fraction

import duckdb
import numpy as np
import pandas as pd

from .._duck import in_transaction, registered, transaction
from ..errors import ArgumentError, PrivacyBudgetError, QueryError
from ..privacy.identity import display
from ..truth.noise import opendp_available
from . import links

LEDGER = "crowddb_privacy_ledger"
HEAD = "crowddb_privacy_ledger_head"  # the sealed head: where the chain ends (a cut-off end shows)
SPENT_VIEW = "crowddb_privacy_spent"
UNITS = ("source",)  # the protected unit a charge is declared in: one source (worker) of the claims
COMPOSITIONS = ("sequential", "zcdp")
ZCDP_DELTA = 1e-6  # the delta at which a zCDP total is shown when the budget names none
_GENESIS = "0" * 64
_COLUMNS = ["seq", "act", "table_name", "unit", "unit_id", "release_id", "epsilon", "delta", "rho", "composition",
            "prev_hash", "hash"]

#: test hook (the SIGKILL test): called inside the release's transaction between its release row and its charges
AFTER_RELEASE_HOOK: Callable[[], None] | None = None


@dataclasses.dataclass
class Charge:
    """What a release will spend, declared from its arguments and frozen input before any noise is drawn: per unit
    id (``per_unit``: unit_id, epsilon, delta, rho; rho NaN where the release has none), and how it was computed."""

    operator: str
    unit: str
    per_unit: pd.DataFrame
    basis: str

    def summary(self) -> dict[str, float | int | None]:
        p = self.per_unit
        rho = p["rho"].to_numpy(float)
        return {"units": len(p), "epsilon_max": float(p["epsilon"].max()) if len(p) else 0.0,
                "delta_max": float(p["delta"].max()) if len(p) else 0.0,
                "rho_max": None if not len(p) or np.isnan(rho).any() else float(rho.max())}


# --------------------------------------------------------------------------------------------------- accounting
def gaussian_rho(epsilon: float, delta: float) -> float:
    """rho of a Gaussian mechanism calibrated to (epsilon, delta) by the classic rule sigma = Delta sqrt(2 ln(1.25 /
    delta)) / epsilon (Dwork & Roth 2014, Theorem A.1): rho = Delta^2 / (2 sigma^2) (Bun & Steinke 2016, Proposition
    1.6) = epsilon^2 / (4 ln(1.25 / delta))."""
    return epsilon * epsilon / (4.0 * math.log(1.25 / delta))


def pure_rho(epsilon: float) -> float:
    """rho of a pure epsilon-DP mechanism, by OpenDP's ``make_pureDP_to_zCDP`` (= epsilon^2 / 2, Bun & Steinke 2016,
    Proposition 1.4); without the ``dp`` extra, the same figure by the same outward rounding (``_pure_to_zcdp``)."""
    epsilon = float(epsilon)
    return float(_opendp_pure_to_zcdp(epsilon) if opendp_available() else _pure_to_zcdp(epsilon))


@functools.lru_cache(maxsize=1024)
def _opendp_pure_to_zcdp(epsilon: float) -> float:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    # a Laplace mechanism of scale 1/epsilon on a sensitivity-1 input is epsilon-DP; its zCDP image is the conversion
    meas = dp.m.make_laplace(dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float), scale=1.0 / epsilon)
    return float(dp.c.make_pureDP_to_zCDP(meas).map(1.0))


def _round_up(value: Fraction) -> float:
    """The smallest float not below the exact rational ``value`` (an accountant rounds toward spending more)."""
    x = float(value)
    return x if Fraction(x) >= value else math.nextafter(x, math.inf)


def _pure_to_zcdp(epsilon: float) -> float:
    """OpenDP's conversion without OpenDP, bit for bit (tested against it): the Laplace scale 1/epsilon rounded to
    nearest, its epsilon 1/scale rounded up, rho = epsilon^2 / 2 (Bun & Steinke Proposition 1.4) rounded up."""
    eps = _round_up(1 / Fraction(1.0 / epsilon))
    return _round_up(Fraction(eps) ** 2) / 2


@functools.lru_cache(maxsize=1024)
def zcdp_epsilon(rho: float, delta: float) -> float:
    """The epsilon of a rho-zCDP total at ``delta``, by OpenDP's ``make_zCDP_to_approxDP`` (Canonne, Kamath & Steinke
    2020, Proposition 12: inf over alpha > 1 of rho alpha + (ln(1/delta) + (alpha-1) ln(1-1/alpha) - ln alpha) /
    (alpha-1)); without the ``dp`` extra, ``_cks_epsilon``. rho = 0 spends nothing."""
    if rho <= 0:
        return 0.0
    if not opendp_available():
        return _cks_epsilon(float(rho), float(delta))
    import opendp.prelude as dp

    dp.enable_features("contrib")
    # a Gaussian mechanism of scale 1/sqrt(2 rho) on a sensitivity-1 input is exactly rho-zCDP
    meas = dp.m.make_gaussian(dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float),
                              scale=1.0 / math.sqrt(2.0 * rho))
    return float(dp.c.make_zCDP_to_approxDP(meas).map(1.0).epsilon(delta))


def _cks_epsilon(rho: float, delta: float) -> float:
    """Canonne, Kamath & Steinke 2020, Proposition 12, minimized over alpha = 1 + e^t by scipy's bounded Brent search,
    then raised by one part in 1e9 (ours: a numerical minimum may sit a few ulps below OpenDP's, and an accountant
    must not report less than was spent; tested to lie within that margin above OpenDP's figure)."""
    from scipy.optimize import minimize_scalar

    log_inv_delta = math.log(1.0 / delta)

    def bound(t: float) -> float:
        alpha = 1.0 + math.exp(t)
        return rho * alpha + (log_inv_delta + (alpha - 1.0) * math.log1p(-1.0 / alpha) - math.log(alpha)) / (alpha - 1.0)

    best = minimize_scalar(bound, bounds=(-30.0, 30.0), method="bounded", options={"xatol": 1e-12})
    return float(best.fun) * (1.0 + 1e-9)


# ------------------------------------------------------------------------------------------------- the ledger
def _text(v: object) -> str:
    kind = type(v)  # the types DuckDB reads back first: the chain is recomputed over every row at each verify
    if kind is str:
        return v
    if kind is int:
        return str(v)
    if kind is float:
        return "" if math.isnan(v) else repr(v)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return str(v)


def _content(row: Sequence) -> str:
    """A ledger row's content as hashed: every column but created_at and the hashes, NULLs as empty, floats by repr
    (DuckDB keeps a DOUBLE exactly, so the text is the same when read back)."""
    return "|".join(map(_text, row))


def _chain(secret: bytes | None, prev: str, content: str) -> str:
    """The next link of the chain: HMAC-SHA256 under ``secret`` (None: the unkeyed SHA-256 of ledgers written before
    the chain was keyed, computed only to verify such a ledger once before it is re-sealed)."""
    message = f"{prev}|{content}".encode()
    if secret is None:
        return hashlib.sha256(message).hexdigest()
    return hmac.digest(secret, message, "sha256").hex()


def _head_mac(secret: bytes, seq: int, last: str) -> str:
    """The head's seal: that the chain ends at row ``seq`` whose hash is ``last``. A chain alone cannot show that rows
    were cut off its end (what is left still verifies); a head naming the newest row, sealed under the key, does."""
    return hmac.digest(secret, f"head|{seq}|{last}".encode(), "sha256").hex()


# --------------------------------------------------------------------------------------------- the ledger's key
KEY_ENV = "CROWDDB_LEDGER_KEY"
KEY_SUFFIX = ".key"
# a new key of a database file stays <file>.key.pending until the chain sealed with it is known committed (the next
# verify outside a transaction): a ROLLBACK or a crash before that leaves no <file>.key, so "a key file and no chain
# sealed under it" always means the chain was edited (emptied, or recomputed without the key), never an act undone
PENDING_SUFFIX = ".key.pending"
_PROCESS_KEY = secrets.token_bytes(32)  # an in-memory database's: it lives as long as the database does
_REKEY = "rekey"


@dataclasses.dataclass(frozen=True)
class LedgerKey:
    """The secret the chain is sealed with, where it lives (named in messages), and the pending key file it was read
    from (``PENDING_SUFFIX``), if so."""

    secret: bytes = dataclasses.field(repr=False)
    where: str
    pending: str | None = None


def database_file(con: duckdb.DuckDBPyConnection) -> str | None:
    """The file of the connection's current database (which holds the ledger); None when it is in memory."""
    rows = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchall()
    return str(rows[0][0]) if rows and rows[0][0] else None


def _env_key() -> bytes | None:
    text = os.environ.get(KEY_ENV)
    if text is None:
        return None
    if not text.strip():
        raise PrivacyBudgetError(f"{KEY_ENV} is set but empty: set it to the privacy ledger's key (hex digits or any "
                                 "string), or unset it to use the key file beside the database")
    try:
        return bytes.fromhex(text.strip())  # hex digits: the bytes they spell
    except ValueError:
        return text.encode()  # any other string: its UTF-8 bytes


def _read_key_file(path: str) -> bytes:
    text = ""
    for _ in range(400):  # another process may have just created it (empty) and not yet written it: wait for that
        with open(path, encoding="ascii", errors="replace") as f:
            text = f.read().strip()
        if text:
            break
        time.sleep(0.005)
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        secret = b""
    if len(secret) != 32:
        raise PrivacyBudgetError(f"the privacy ledger's key file {path} is damaged (it should hold 64 hex digits): "
                                 "restore it from a backup, so the ledger can be verified and charged again")
    return secret


def _create_key_file(path: str) -> bytes:
    """A new random key in ``path``, created atomically with mode 0600 (O_CREAT | O_EXCL: never over a key that
    exists); if another process created it first, that key."""
    secret = secrets.token_bytes(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        return _read_key_file(path)
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o600)  # 0600 whatever the umask (which can only have taken bits away)
        os.write(fd, f"{secret.hex()}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return secret


def ledger_key(con: duckdb.DuckDBPyConnection) -> LedgerKey | None:
    """The key the ledger is sealed with: ``CROWDDB_LEDGER_KEY`` if set (hex digits are read as the bytes they spell,
    any other string as its UTF-8); else, for a database file, ``<file>.key`` beside it; for an in-memory database, a
    random key of this process. None: a database file with no key file."""
    env = _env_key()
    if env is not None:
        return LedgerKey(env, f"the key in {KEY_ENV}")
    db = database_file(con)
    if db is None:
        return LedgerKey(_PROCESS_KEY, "this process's key (an in-memory database)")
    path = db + KEY_SUFFIX
    return LedgerKey(_read_key_file(path), path) if os.path.exists(path) else None


def _pending_key(con: duckdb.DuckDBPyConnection, *, create: bool) -> LedgerKey | None:
    """A database file's pending key (``PENDING_SUFFIX``), made when ``create`` and missing; None without one, and
    when the key comes from the environment or the database is in memory (they have no key files)."""
    db = database_file(con)
    if db is None or os.environ.get(KEY_ENV) is not None:
        return None
    pending = db + PENDING_SUFFIX
    if os.path.exists(pending):
        return LedgerKey(_read_key_file(pending), db + KEY_SUFFIX, pending)
    return LedgerKey(_create_key_file(pending), db + KEY_SUFFIX, pending) if create else None


def _settle(con: duckdb.DuckDBPyConnection, key: LedgerKey) -> None:
    """A pending key whose chain is committed (it verifies, and no transaction is open) becomes the key file: a hard
    link (never over an existing key file), then the pending name removed."""
    if key.pending is None or in_transaction(con):
        return
    try:
        os.link(key.pending, key.where)
    except FileExistsError:  # another process promoted it; a different (or damaged) key file: keep both
        try:
            same = hmac.compare_digest(_read_key_file(key.where), key.secret)
        except (OSError, PrivacyBudgetError):
            same = False
        if not same:
            return
    except OSError:  # a file system without hard links: a rename (there is no key file, so it replaces nothing)
        with contextlib.suppress(OSError):
            os.rename(key.pending, key.where)
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(key.pending)


def settle(con: duckdb.DuckDBPyConnection) -> None:
    """After an act's transaction: a key it made (pending until its chain is committed) becomes ``<file>.key``, so the
    key file is there as soon as the act returns. Cheap when there is no pending key (one stat)."""
    db = database_file(con)
    if db is not None and os.path.exists(db + PENDING_SUFFIX) and not in_transaction(con):
        verify(con)  # promotes the pending key when the committed chain verifies under it


# ----------------------------------------------------------------------------------------- verifying the chain
def _rows(con: duckdb.DuckDBPyConnection, after: int = 0) -> list[tuple]:
    return con.execute(f"SELECT {', '.join(_COLUMNS)} FROM {LEDGER} WHERE seq > ? ORDER BY seq", [after]).fetchall()


# What this process verified of a ledger, so that a charge (which verifies it before anything is computed, again in
# its transaction, and before appending) does not recompute the whole chain in Python each time (about a second per
# 100,000 rows). Per database: the rows 1..seq verified, their SHA-256 fingerprint taken by DuckDB over every column
# the chain covers (JSON: one text per row, unambiguous), the newest one's hash and the key's digest. A verify whose
# rows 1..seq have that fingerprint (the same values: an edit of any of them changes it) checks only the rows after
# them. Inside one transaction nothing but its own appends can change the ledger, so a verify that finds the newest
# row the transaction last verified or wrote is done.
_VERIFIED: dict[str, tuple[int, str, str, str]] = {}
_IN_TRANSACTION: dict[tuple[str, int], tuple[int, int, str, LedgerKey]] = {}  # per ledger and connection
_FINGERPRINT = (f"SELECT sha256(coalesce(string_agg(to_json(struct_pack({', '.join(_COLUMNS)}))::VARCHAR, chr(10) "
                f"ORDER BY seq), '')) FROM {LEDGER} WHERE seq <= ?")


def _ledger_id(con: duckdb.DuckDBPyConnection) -> str:
    return database_file(con) or f"memory:{id(con)}"


def _transaction_id(con: duckdb.DuckDBPyConnection) -> int | None:
    """The open transaction's id; None in auto-commit mode (every statement a transaction of its own)."""
    first = con.execute("SELECT txid_current()").fetchall()[0][0]
    return int(first) if con.execute("SELECT txid_current()").fetchall()[0][0] == first else None


def _fingerprint(con: duckdb.DuckDBPyConnection, upto: int) -> str:
    return str(con.execute(_FINGERPRINT, [upto]).fetchall()[0][0])


def _remember(con: duckdb.DuckDBPyConnection, seq: int, last: str, key: LedgerKey) -> None:
    """The chain up to row ``seq`` (hash ``last``) verified under ``key`` (or written under it by this transaction)."""
    ledger = _ledger_id(con)
    tx = _transaction_id(con)
    if tx is not None:
        _IN_TRANSACTION[ledger, id(con)] = (tx, seq, last, key)
    _VERIFIED[ledger] = (seq, last, _fingerprint(con, seq), hashlib.sha256(key.secret).hexdigest())


def _verified_since(con: duckdb.DuckDBPyConnection, head: tuple | None) -> LedgerKey | None:
    """The key, when what this process verified is unchanged and the rows after it, and the head, verify under it;
    None: verify everything (``verify``'s full path, which also says what is wrong)."""
    ledger = _ledger_id(con)
    newest = con.execute(f"SELECT seq, hash FROM {LEDGER} ORDER BY seq DESC LIMIT 1").fetchall()
    done = _IN_TRANSACTION.get((ledger, id(con)))
    if done is not None and newest and done[0] == _transaction_id(con) and (done[1], done[2]) == newest[0]:
        return done[3]
    known = _VERIFIED.get(ledger)
    key = ledger_key(con) or _pending_key(con, create=False)
    if known is None or key is None or head is None:
        return None
    seq, last, fingerprint, digest = known
    if not hmac.compare_digest(hashlib.sha256(key.secret).hexdigest(), digest) or _fingerprint(con, seq) != fingerprint:
        return None
    prev = last
    for i, row in enumerate(_rows(con, after=seq), seq + 1):
        if row[0] != i or row[-2] != prev or not hmac.compare_digest(_chain(key.secret, prev, _content(row[:-2])),
                                                                     str(row[-1])):
            return None
        prev, seq = str(row[-1]), i
    if head[0] != seq or head[1] != prev or not hmac.compare_digest(str(head[2]), _head_mac(key.secret, seq, prev)):
        return None
    _remember(con, seq, prev, key)
    return key


def _head(con: duckdb.DuckDBPyConnection) -> tuple | None:
    try:
        rows = con.execute(f"SELECT seq, hash, mac FROM {HEAD}").fetchall()
    except duckdb.CatalogException:  # a read-only database last opened by a crowddb without the head
        return None
    return rows[0] if len(rows) == 1 else (None, None, None) if rows else None


def _first_break(rows: list[tuple], secret: bytes | None) -> int | None:
    """The 1-based position of the first row whose seq, prev_hash or hash does not follow from the rows before it under
    ``secret`` (None: the unkeyed chain); None when the whole chain holds."""
    prev = _GENESIS
    for i, row in enumerate(rows, 1):
        if row[0] != i or row[-2] != prev or not hmac.compare_digest(_chain(secret, prev, _content(row[:-2])),
                                                                     str(row[-1])):
            return i
        prev = row[-1]
    return None


def _holds(rows: list[tuple], head: tuple | None, secret: bytes) -> bool:
    """The chain verifies under ``secret`` and its sealed head names its newest row (nothing was cut off its end)."""
    if not rows:
        return head is None
    if head is None or _first_break(rows, secret) is not None:
        return False
    seq, last = rows[-1][0], str(rows[-1][-1])
    return head[0] == seq and head[1] == last and hmac.compare_digest(str(head[2]), _head_mac(secret, seq, last))


def _refusal(what: str) -> PrivacyBudgetError:
    return PrivacyBudgetError(f"the privacy ledger ({LEDGER}) {what}, so what was spent cannot be trusted and no "
                              "charge or budget act is accepted; restore the database file from a backup")


def _missing_key(db: str) -> PrivacyBudgetError:
    return PrivacyBudgetError(
        f"the privacy ledger ({LEDGER}) is sealed with a key that is not here: {db}{KEY_SUFFIX} (beside the database "
        f"file) is missing and {KEY_ENV} is not set, so what was spent cannot be verified and no charge or budget act "
        f"is accepted. Restore {db}{KEY_SUFFIX} from a backup, or set {KEY_ENV} to the key it was sealed with; if the "
        "key is lost for good, crowddb.store.privacy.reseal(db.con, unverified=True) re-seals the ledger as it stands "
        "under a new key and records that it could not be verified")


def verify(con: duckdb.DuckDBPyConnection, *, seal: bool = False) -> LedgerKey | None:
    """Check the keyed hash chain and its sealed head; raise PrivacyBudgetError naming the first row that does not
    match (a row changed, deleted or inserted around the API), rows cut off its end, a chain recomputed or a ledger
    emptied without the key, or a missing key. Returns the key the chain is sealed with (None: nothing is sealed).

    A ledger an older crowddb sealed without a key (plain SHA-256, no head, no 'rekey' act) is taken as such only
    while no key exists for the database (no key file; an in-memory database): ``seal`` (an act is about to be
    appended, in the caller's transaction) verifies it once that way and re-seals it with the key (``_reseal``, a
    'rekey' act). With ``CROWDDB_LEDGER_KEY`` nothing outside the database tells it from a chain recomputed without
    the key, so it is refused until ``reseal`` is called for it."""
    head = _head(con)
    fast = _verified_since(con, head)
    if fast is not None:
        _settle(con, fast)
        return fast
    rows, key = _rows(con), ledger_key(con)
    db, env = database_file(con), os.environ.get(KEY_ENV) is not None
    has_key_file = key is not None and db is not None and not env  # made once a chain under it was committed
    if not rows:
        if head is not None:
            raise _refusal("lost its rows outside crowddb (its sealed head names a newest row that is gone)")
        if has_key_file:
            raise _refusal(f"is empty, but {key.where} shows a ledger was kept: it was emptied outside crowddb")
        return None
    for candidate in (key, _pending_key(con, create=False)):
        if candidate is not None and _holds(rows, head, candidate.secret):
            _remember(con, rows[-1][0], str(rows[-1][-1]), candidate)
            _settle(con, candidate)
            return candidate
    legacy = head is None and not any(row[1] == _REKEY for row in rows)  # how an older crowddb left it
    if legacy and _first_break(rows, None) is None:
        if env:
            raise PrivacyBudgetError(
                f"the privacy ledger ({LEDGER}) is sealed without a key: either a crowddb before keyed ledgers wrote "
                f"it, and crowddb.store.privacy.reseal(db.con) verifies it and re-seals it with the key in {KEY_ENV} "
                "(once), or someone recomputed its chain without the key, and the database file should be restored "
                "from a backup")
        if has_key_file:
            raise _refusal(f"was changed outside crowddb: its chain was recomputed without the key ({key.where})")
        if not seal:
            return None
        made = key or _pending_key(con, create=True)
        _reseal(con, made, "sha256")
        return made
    if key is None and not legacy:
        raise _missing_key(str(db))
    bad = _first_break(rows, None if key is None else key.secret)
    if bad is None:
        raise _refusal(f"lost rows at its end, or its head was changed, outside crowddb (its newest row is seq "
                       f"{rows[-1][0]}, which its sealed head does not name)")
    row = rows[bad - 1]
    what = f"was changed outside crowddb at seq {row[0]} (row {bad}): its hash chain does not match"
    if key is not None and bad == 1 and row[0] == 1 and row[-2] == _GENESIS:  # perhaps the wrong key, not an edit
        what += f" (or {key.where} is not the key it was sealed with: put that key back)"
    raise _refusal(what)


def reseal(con: duckdb.DuckDBPyConnection, *, unverified: bool = False) -> None:
    """Re-seal the ledger with its key (``ledger_key``; a new one for a database file without a key file) and record a
    'rekey' act, in one transaction. Without ``unverified``: only a ledger an older crowddb sealed without a key
    (it verifies with plain SHA-256), which is needed once when the key comes from ``CROWDDB_LEDGER_KEY``. With
    ``unverified=True``: the ledger as it stands, whatever its chain (its key is lost for good); the 'rekey' act says
    it was not verified, and what was spent before it can no longer be vouched for."""
    rows, head = _rows(con), _head(con)
    key = ledger_key(con)
    if key is not None and _holds(rows, head, key.secret):
        return  # sealed under its key already
    if not unverified:
        bad = _first_break(rows, None)
        if bad is not None or head is not None:
            raise _refusal(f"does not verify unkeyed either (first at row {bad or len(rows)}): it was changed "
                           "outside crowddb; if you know that, reseal(con, unverified=True) starts from it as it is")
    _reseal(con, key or _pending_key(con, create=True), "unverified" if unverified else "sha256")


def _reseal(con: duckdb.DuckDBPyConnection, key: LedgerKey, how: str) -> None:
    """Every row's prev_hash and hash recomputed under ``key``, a 'rekey' act appended (its unit_id says how the old
    chain was checked: 'sha256', verified unkeyed; 'unverified') and the head sealed, in one transaction (the
    caller's, if open)."""
    with transaction(con):
        prev, out = _GENESIS, []
        for row in _rows(con):
            h = _chain(key.secret, prev, _content(row[:-2]))
            out.append((row[0], prev, h))
            prev = h
        # renumbered 1..n in order (an unverified ledger may have gaps), as the chain expects
        frame = pd.DataFrame([(i, *r) for i, r in enumerate(out, 1)], columns=["new", "seq", "prev_hash", "hash"])
        if len(frame) and (frame["new"] != frame["seq"]).any():
            frame = _renumbered(con, frame, key)
        with registered(con, __crowd_privacy_seal=frame):
            con.execute(f"UPDATE {LEDGER} SET prev_hash = s.prev_hash, hash = s.hash FROM __crowd_privacy_seal s "
                        f"WHERE {LEDGER}.seq = s.seq").fetchall()
        _write(con, key, [[_REKEY, "*", "*", how, None, None, None, None, None]])
    _settle(con, key)


def _renumbered(con: duckdb.DuckDBPyConnection, frame: pd.DataFrame, key: LedgerKey) -> pd.DataFrame:
    """Rows with gaps in seq (rows deleted outside crowddb, re-sealed unverified) renumbered 1..n, their chain
    recomputed over the new numbers; returns the seal frame keyed by the new seq."""
    with registered(con, __crowd_privacy_renumber=frame[["new", "seq"]]):
        con.execute(f"UPDATE {LEDGER} SET seq = -r.new FROM __crowd_privacy_renumber r "
                    f"WHERE {LEDGER}.seq = r.seq").fetchall()
        con.execute(f"UPDATE {LEDGER} SET seq = -seq WHERE seq < 0").fetchall()
    prev, out = _GENESIS, []
    for row in _rows(con):
        h = _chain(key.secret, prev, _content(row[:-2]))
        out.append((row[0], row[0], prev, h))
        prev = h
    return pd.DataFrame(out, columns=["new", "seq", "prev_hash", "hash"])


def _append(con: duckdb.DuckDBPyConnection, rows: list[list]) -> None:
    """Append ``rows`` (act, table, unit, unit_id, release_id, epsilon, delta, rho, composition) with their seq and
    keyed hash chain, after verifying the chain (re-sealing an unkeyed one first); the caller holds the transaction
    (the last row's seq and hash are read inside it). The first act of a database file makes its key (pending until
    committed)."""
    key = verify(con, seal=True) or ledger_key(con) or _pending_key(con, create=True)
    _write(con, key, rows)


def _write(con: duckdb.DuckDBPyConnection, key: LedgerKey, rows: list[list]) -> None:
    last = con.execute(f"SELECT seq, hash FROM {LEDGER} ORDER BY seq DESC LIMIT 1").fetchall()
    seq, prev = (int(last[0][0]), str(last[0][1])) if last else (0, _GENESIS)
    out = []
    for row in rows:
        seq += 1
        full = [seq, *row]
        h = _chain(key.secret, prev, _content(full))
        out.append([*full, prev, h])
        prev = h
    frame = pd.DataFrame(out, columns=_COLUMNS, dtype=object)  # object: a None stays NULL (not NaN) in DuckDB
    with registered(con, __crowd_privacy_rows=frame):
        con.execute(f"INSERT INTO {LEDGER} ({', '.join(_COLUMNS)}) SELECT {', '.join(_COLUMNS)} "
                    "FROM __crowd_privacy_rows").fetchall()
    con.execute(f"DELETE FROM {HEAD}").fetchall()
    con.execute(f"INSERT INTO {HEAD} (seq, hash, mac) VALUES (?, ?, ?)",
                [seq, prev, _head_mac(key.secret, seq, prev)]).fetchall()
    tx = _transaction_id(con)
    if tx is not None:  # the chain this transaction verified, extended by its own rows
        _IN_TRANSACTION[_ledger_id(con), id(con)] = (tx, seq, prev, key)


def private_files(database: str) -> None:
    """Files at rest (issue 24): the database file crowddb.connect just created, and its write-ahead log, readable and
    writable by their owner only (0600), before any of the caller's rows are written to them. Not a file (in memory,
    a remote database): nothing to do."""
    for path in (database, f"{database}.wal"):
        if os.path.isfile(path) and not os.path.islink(path):
            with contextlib.suppress(OSError):
                os.chmod(path, 0o600)


def refuse_in_transaction(con: duckdb.DuckDBPyConnection, operator: str) -> None:
    """A charged release is refused inside the caller's transaction (BEGIN ... COMMIT), before anything is computed
    (issue 24), as crowd operators are: a ROLLBACK would take back the charge but not what the caller saw, and the same
    answers could then be spent again for free."""
    if in_transaction(con):
        raise QueryError(f"{operator} charges the privacy budget for what it releases, and inside BEGIN ... COMMIT a "
                         "ROLLBACK would take back the charge but not what you saw of the result: run it outside "
                         "BEGIN ... COMMIT (nothing was computed or charged)")


def _check_unit(unit: str) -> str:
    if unit not in UNITS:
        raise ArgumentError(f"unknown protected unit {unit!r}; valid: {list(UNITS)} (a charge is declared per source, "
                            "the worker whose answers a release reads)")
    return unit


def set_budget(con: duckdb.DuckDBPyConnection, table: str, *, epsilon: float, delta: float = 0.0,
               unit: str = "source", composition: str = "sequential") -> None:
    """Append a 'budget' act (the caller's transaction)."""
    _check_unit(unit)
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ArgumentError(f"the budget's epsilon must be a finite number > 0, got {epsilon!r}")
    if not (isinstance(delta, (int, float)) and 0 <= delta < 1):
        raise ArgumentError(f"the budget's delta must be in [0, 1), got {delta!r}")
    if composition not in COMPOSITIONS:
        raise ArgumentError(f"composition must be one of {list(COMPOSITIONS)}, got {composition!r}")
    if composition == "zcdp" and delta <= 0:
        raise ArgumentError("composition := 'zcdp' converts rho to epsilon at the budget's delta: pass delta > 0 "
                            "(e.g. delta := 1e-6)")
    _append(con, [["budget", links.root(con, table), unit, None, None, float(epsilon), float(delta), None,
                   composition]])


def reset(con: duckdb.DuckDBPyConnection, table: str, unit: str = "source") -> None:
    """Append a 'reset' act: charges before it no longer count (they stay on record)."""
    _check_unit(unit)
    _append(con, [["reset", links.root(con, table), unit, None, None, None, None, None, None]])


def has_acts(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """Whether ``table`` (through its root) has a budget, a reset or a charge on record."""
    return bool(con.execute(f"SELECT count(*) FROM {LEDGER} WHERE table_name = ?",
                            [links.root(con, table)]).fetchall()[0][0])


def has_charges(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """Whether releases were charged to ``table`` (through its root)."""
    return bool(con.execute(f"SELECT count(*) FROM {LEDGER} WHERE act = 'charge' AND table_name = ?",
                            [links.root(con, table)]).fetchall()[0][0])


def budget_of(con: duckdb.DuckDBPyConnection, table: str, unit: str) -> tuple[float, float, str] | None:
    rows = con.execute(f"SELECT epsilon, delta, composition FROM {LEDGER} WHERE act = 'budget' AND table_name = ? "
                       "AND unit = ? ORDER BY seq DESC LIMIT 1", [links.root(con, table), unit]).fetchall()
    return (float(rows[0][0]), float(rows[0][1]), str(rows[0][2])) if rows else None


def _spent(con: duckdb.DuckDBPyConnection, table: str, unit: str, ids: pd.DataFrame) -> pd.DataFrame:
    """Per unit id of ``ids``: epsilon, delta, rho (NaN if a charge had none) spent since the last reset."""
    with registered(con, __crowd_privacy_ids=ids[["unit_id"]]):
        return con.execute(
            f"SELECT i.unit_id, coalesce(sum(l.epsilon), 0) AS epsilon, coalesce(sum(l.delta), 0) AS delta, "
            f"CASE WHEN bool_and(l.rho IS NOT NULL) OR count(l.seq) = 0 THEN coalesce(sum(l.rho), 0) END AS rho "
            f"FROM __crowd_privacy_ids i LEFT JOIN {LEDGER} l ON l.unit_id = i.unit_id AND l.act = 'charge' "
            f"AND l.table_name = ? AND l.unit = ? AND l.seq > (SELECT coalesce(max(seq), 0) FROM {LEDGER} "
            f"WHERE act = 'reset' AND table_name = ? AND unit = ?) GROUP BY i.unit_id",
            [links.root(con, table), unit, links.root(con, table), unit]).df()


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def check(con: duckdb.DuckDBPyConnection, tables: Sequence[str], charge: Charge) -> list[dict]:
    """Refuse ``charge`` (PrivacyBudgetError naming spent, asked and left) if it would overspend the budget of any
    of ``tables`` for its unit; else return, per table, what it asks and what is left after it. Reads only; the
    ledger's chain is verified first (an edited ledger, or one whose key is missing, refuses every charge)."""
    verify(con)
    out = []
    asked = charge.per_unit.reset_index(drop=True)
    for table in tables:
        budget = budget_of(con, table, charge.unit)
        spent = _spent(con, table, charge.unit, asked).set_index("unit_id").loc[asked["unit_id"]].reset_index()
        total_eps = spent["epsilon"].to_numpy(float) + asked["epsilon"].to_numpy(float)
        total_dl = spent["delta"].to_numpy(float) + asked["delta"].to_numpy(float)
        total_rho = spent["rho"].to_numpy(float) + asked["rho"].to_numpy(float)  # NaN where a charge has none
        entry = {"table": table.lower(), "unit": charge.unit, "operator": charge.operator, "basis": charge.basis,
                 **charge.summary(), "budget_epsilon": None, "budget_delta": None, "composition": None,
                 "epsilon_left": None, "delta_left": None}
        if budget is not None and len(asked):
            b_eps, b_dl, composition = budget
            if composition == "zcdp":
                if np.isnan(total_rho).any():
                    raise PrivacyBudgetError(
                        f"{charge.operator}: the budget of {display(table)!r} per {charge.unit} composes in zCDP, but this "
                        f"release has no rho ({charge.basis}); nothing was released or charged. Set the budget with "
                        "composition := 'sequential' to charge it")
                used = np.array([zcdp_epsilon(float(r), b_dl) for r in total_rho])
                before = np.array([zcdp_epsilon(float(r), b_dl) for r in spent["rho"].to_numpy(float)])
                over = used > b_eps * (1 + 1e-12)
                left_eps, left_dl = b_eps - used, np.full(len(used), b_dl)
                worst = int(np.argmax(used - b_eps))
                spent_text = (f"rho={_fmt(spent['rho'].iloc[worst])} (epsilon={_fmt(before[worst])} at "
                              f"delta={_fmt(b_dl)})")
                asked_text = f"rho={_fmt(asked['rho'].iloc[worst])}"
                left_text = f"epsilon={_fmt(b_eps - before[worst])} at delta={_fmt(b_dl)}"
            else:
                over = (total_eps > b_eps * (1 + 1e-12)) | (total_dl > b_dl * (1 + 1e-12) + 1e-300)
                left_eps, left_dl = b_eps - total_eps, b_dl - total_dl
                worst = int(np.argmax(np.maximum(total_eps / b_eps, np.where(b_dl > 0, total_dl / max(b_dl, 1e-300),
                                                                            np.where(total_dl > 0, np.inf, 0)))))
                spent_text = f"epsilon={_fmt(spent['epsilon'].iloc[worst])}, delta={_fmt(spent['delta'].iloc[worst])}"
                asked_text = f"epsilon={_fmt(asked['epsilon'].iloc[worst])}, delta={_fmt(asked['delta'].iloc[worst])}"
                left_text = (f"epsilon={_fmt(b_eps - spent['epsilon'].iloc[worst])}, "
                             f"delta={_fmt(b_dl - spent['delta'].iloc[worst])}")
            if over.any():
                raise PrivacyBudgetError(
                    f"{charge.operator} would overspend the privacy budget of {display(table)!r} (epsilon={_fmt(b_eps)}, "
                    f"delta={_fmt(b_dl)} per {charge.unit}, {composition} composition): {charge.unit} "
                    f"{asked['unit_id'].iloc[worst]!r} has spent {spent_text}, this release asks {asked_text}, "
                    f"{left_text} is left ({int(over.sum())} of {len(asked)} {charge.unit}s would overspend). "
                    f"Nothing was released or charged. Ask for less (a smaller epsilon, fewer answers per "
                    f"{charge.unit}), or reset the budget with db.reset_privacy_budget({display(table)!r}) (a logged act)")
            entry.update(budget_epsilon=b_eps, budget_delta=b_dl, composition=composition,
                         epsilon_left=float(np.min(left_eps)), delta_left=float(np.min(left_dl)))
        out.append(entry)
    return out


def record(con: duckdb.DuckDBPyConnection, tables: Sequence[str], charge: Charge, release_id: int) -> None:
    """The charge's rows for ``release_id``, one per table and unit id (the caller's transaction, the release's)."""
    p = charge.per_unit
    rows = [["charge", links.root(con, t), charge.unit, str(u), int(release_id), float(e), float(d),
             None if np.isnan(r) else float(r), None]
            for t in tables for u, e, d, r in zip(p["unit_id"], p["epsilon"], p["delta"], p["rho"].astype(float))]
    if rows:
        _append(con, rows)


# ------------------------------------------------------------------------------------------------- the report
REPORT_COLUMNS = ["release_id", "kind", "method", "created_at", "unit", "units", "epsilon", "delta", "rho",
                  "epsilon_spent", "delta_spent", "rho_spent", "epsilon_zcdp", "zcdp_delta", "budget_epsilon",
                  "budget_delta", "composition", "epsilon_left", "delta_left", "after_reset", "smallest_joint_class",
                  "ledger_release", "k", "rows", "repeats"]


def report(con: duckdb.DuckDBPyConnection, table: str) -> pd.DataFrame:
    """Every charged release of ``table``, in order: its largest charge to one unit (epsilon, delta, rho), and after
    it, over the units, the most any one unit has spent (sequentially: epsilon_spent, delta_spent; in zCDP:
    rho_spent and epsilon_zcdp, its epsilon at zcdp_delta) and the least left of the budget as it is now.
    ``after_reset``: the release counts (no reset since). ``smallest_joint_class``: the k-anonymity side's hook (the
    smallest joint class across the table's k-anonymous releases), None here. Verifies the hash chain first."""
    verify(con)
    t = links.root(con, table)  # a renamed table's or a copy's charges are its root's (``links``)
    charges = con.execute(
        f"SELECT l.seq, l.unit, l.unit_id, l.release_id, l.epsilon, l.delta, l.rho, r.kind, r.method, r.created_at, "
        f"(SELECT count(*) FROM {LEDGER} x WHERE x.act = 'reset' AND x.table_name = l.table_name "
        f"AND x.unit = l.unit AND x.seq < l.seq) AS epoch "
        f"FROM {LEDGER} l LEFT JOIN crowddb_releases r ON r.release_id = l.release_id "
        f"WHERE l.act = 'charge' AND l.table_name = ? ORDER BY l.seq", [t]).df()
    if not len(charges):
        return pd.DataFrame(columns=REPORT_COLUMNS)
    out = []
    for unit, of_unit in charges.groupby("unit", sort=False):
        budget = budget_of(con, t, str(unit))
        resets = con.execute(f"SELECT count(*) FROM {LEDGER} WHERE act = 'reset' AND table_name = ? AND unit = ?",
                             [t, unit]).fetchall()[0][0]
        zdelta = budget[1] if budget is not None and budget[1] > 0 else ZCDP_DELTA
        for _epoch, of_epoch in of_unit.groupby("epoch", sort=True):
            running: dict[str, list[float]] = {}  # unit id -> [epsilon, delta, rho (NaN once a charge has none)]
            for release_id, rel in of_epoch.groupby("release_id", sort=False):
                for u, e, d, r in zip(rel["unit_id"], rel["epsilon"], rel["delta"], rel["rho"]):
                    acc = running.setdefault(u, [0.0, 0.0, 0.0])
                    acc[0] += float(e)
                    acc[1] += float(d)
                    acc[2] += float(r) if r is not None and not pd.isna(r) else math.nan
                totals = np.array(list(running.values()))
                eps_spent, dl_spent = float(totals[:, 0].max()), float(totals[:, 1].max())
                rho_spent = None if np.isnan(totals[:, 2]).any() else float(totals[:, 2].max())
                rho = rel["rho"].astype(float)
                first = rel.iloc[0]
                out.append({
                    "release_id": int(release_id), "kind": first["kind"], "method": first["method"],
                    "created_at": first["created_at"], "unit": unit, "units": len(rel),
                    "epsilon": float(rel["epsilon"].max()), "delta": float(rel["delta"].max()),
                    "rho": None if rho.isna().any() else float(rho.max()),
                    "epsilon_spent": eps_spent, "delta_spent": dl_spent, "rho_spent": rho_spent,
                    "epsilon_zcdp": None if rho_spent is None else zcdp_epsilon(rho_spent, zdelta),
                    "zcdp_delta": zdelta,
                    "budget_epsilon": None if budget is None else budget[0],
                    "budget_delta": None if budget is None else budget[1],
                    "composition": None if budget is None else budget[2],
                    "epsilon_left": None if budget is None else budget[0] - (
                        eps_spent if budget[2] == "sequential" or rho_spent is None
                        else zcdp_epsilon(rho_spent, zdelta)),
                    "delta_left": None if budget is None else budget[1] - dl_spent,
                    "after_reset": int(_epoch) == int(resets), "smallest_joint_class": None})
    return pd.DataFrame(out, columns=REPORT_COLUMNS).sort_values("release_id", kind="stable").reset_index(drop=True)
