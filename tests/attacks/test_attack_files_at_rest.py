"""Class 9: files at rest.

Claims attacked: "everything persists in the file: roles, runs, HITs, answers, payments, the privacy ledgers"
(docs/python.md) and the web crowd's market lives "beside the database" (``<db>.market.sqlite``); the database holds
every raw protected value, the market holds what workers may see and the requester's token. On a shared machine any
other local user can read a file created 0644. With the process's umask at the common 022:

* the database file, its write-ahead log, the ledger's key file and the market file (with SQLite's -wal/-shm) must be
  created readable by their owner only (``mode & 0o077 == 0``);
* the requester token (it opens the requester page: answers, payments, worker links) and the workers' link tokens
  must not be stored in clear in the market file.

Safe: every such file has no group/other permission bits; no token appears in clear in the market file's bytes.
"""

from __future__ import annotations

import os
import stat

import pandas as pd
import pytest

import crowddb
from crowddb.errors import CrowdDBError

from .attacklib import CANARY_ROLES, verdict

OP = "getposition(*, k := 5, assignments := 1)"


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def loose(path) -> str | None:
    """'path: mode 0644' when group/other may read or write it, else None."""
    if not os.path.exists(path):
        return None
    mode = stat.S_IMODE(os.stat(path).st_mode)
    return f"{os.path.basename(path)} is created with mode {mode:04o} (readable by other local users)" \
        if mode & 0o077 else None


@pytest.fixture
def file_db(tmp_path, umask_022, canary_frame):
    """A database file with the canary loaded, one crowd release and one epsilon charge on record, left open."""
    path = tmp_path / "crowd.duckdb"
    db = crowddb.connect(str(path), seed=7, progress=False, config={"threads": 1})
    db.load_frame("canary", canary_frame, **CANARY_ROLES)
    db.sql(f"SELECT {OP} AS job FROM canary").fetchall()
    answers = pd.DataFrame({"task": [1, 2, 1], "worker": ["a", "a", "b"], "label": ["x", "y", "x"]})
    db.load_frame("answers", answers)
    db.sql("SELECT * FROM PRIVACY_BUDGET(answers, epsilon := 2)").fetchall()
    db.sql("SELECT * FROM TRUTH_DISCOVER(answers, object := 'task', source := 'worker', value := 'label', "
           "method := 'mv', perturb := 'rr', epsilon := 0.5, seed := 1)").fetchall()
    yield path, db
    db.close()


def test_database_file_mode(request, file_db):
    path, db = file_db
    db.close()
    verdict(request, [f for f in [loose(path)] if f])


def test_database_wal_file_mode(request, file_db):
    path, db = file_db
    db.sql("CREATE TABLE scratch AS SELECT * FROM canary").fetchall()  # something in the write-ahead log
    verdict(request, [f for f in [loose(f"{path}.wal")] if f])


def test_ledger_key_file_mode(request, file_db):
    path, db = file_db
    db.close()
    found = [loose(os.path.join(path.parent, n)) for n in os.listdir(path.parent) if ".key" in n]
    verdict(request, [f for f in found if f])


def test_no_file_beside_the_database_is_readable_by_others(request, file_db):
    path, db = file_db
    db.close()
    found = [loose(os.path.join(path.parent, n)) for n in sorted(os.listdir(path.parent))]
    verdict(request, [f for f in found if f])


@pytest.fixture
def market_db(tmp_path, umask_022, canary_frame):
    """A database file whose crowd is the web crowd (no server): one crowd query posts its HITs to the market and
    stops waiting at once (the answers stay outstanding)."""
    from crowddb.crowd import WebCrowd

    path = tmp_path / "web.duckdb"
    crowd = WebCrowd(serve=False, announce=None, workers=2, timeout=0)
    db = crowddb.connect(str(path), platform=crowd, seed=7, progress=False, config={"threads": 1})
    db.load_frame("canary", canary_frame, **CANARY_ROLES)
    try:
        db.sql(f"SELECT {OP} AS job FROM canary").fetchall()
    except CrowdDBError:
        pass  # AnswersOutstandingError: nobody answered yet; the HITs are posted
    yield path, db, crowd
    db.close()
    crowd.close()


def test_market_file_mode(request, market_db):
    path, _db, _crowd = market_db
    market = f"{path}.market.sqlite"
    findings = [] if os.path.exists(market) else [f"the market was not created at {market}"]
    verdict(request, findings + [f for f in [loose(market)] if f])


def test_market_wal_and_shm_modes(request, market_db):
    path, _db, _crowd = market_db
    verdict(request, [f for f in (loose(f"{path}.market.sqlite-wal"), loose(f"{path}.market.sqlite-shm")) if f])


def _market_bytes(path) -> bytes:
    out = b""
    for suffix in ("", "-wal"):
        p = f"{path}.market.sqlite{suffix}"
        if os.path.exists(p):
            with open(p, "rb") as fh:
                out += fh.read()
    return out


def test_requester_token_not_stored_in_clear(request, market_db):
    path, _db, crowd = market_db
    token = crowd.market.requester_token
    data = _market_bytes(path)
    verdict(request, [(f"the requester token ({len(token)} characters, opens the requester page) is stored in clear in "
                      f"{os.path.basename(path)}.market.sqlite")] if token.encode() in data else [])


def test_worker_link_tokens_are_readable_only_by_the_owner(request, market_db):
    """Worker link tokens stay in the market file in clear by design: the requester page lists the links and
    ``crowddb serve`` (another process) hands them out again. What keeps them from others is the file's mode: a
    token in the file is a leak only if someone else can read the file (its -wal and -shm too)."""
    path, _db, crowd = market_db
    market = crowd.market.path
    findings = [f for f in (loose(p) for p in (market, market + "-wal", market + "-shm") if os.path.exists(p)) if f]
    verdict(request, findings)


def test_in_memory_database_market_is_private(request, umask_022, canary_frame):
    from crowddb.crowd import WebCrowd

    crowd = WebCrowd(serve=False, announce=None, workers=1, timeout=0)
    with crowddb.connect(platform=crowd, seed=7, progress=False, config={"threads": 1}) as db:
        db.load_frame("canary", canary_frame, **CANARY_ROLES)
        try:
            db.sql(f"SELECT {OP} AS job FROM canary").fetchall()
        except CrowdDBError:
            pass
        market = crowd.market.path
        # a file inside a directory only its owner can enter is private whatever its own mode
        findings = [f for f in (loose(market), loose(os.path.dirname(market))) if f] \
            if loose(os.path.dirname(market)) else []
    crowd.close()
    verdict(request, findings)
