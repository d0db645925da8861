"""Files at rest (issue 24): the database file crowddb creates and its write-ahead log, the ledger's key file and the
web crowd's market file (with its -wal and -shm) are their owner's only (0600), whatever the umask; the requester
page's token is stored as its SHA-256, never in clear, and shown once when it is made."""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import stat

import httpx
import pandas as pd
import pytest

import crowddb
from crowddb.crowd.platform import HitBatch
from crowddb.crowd.web import server
from crowddb.crowd.web.market import Market

pytestmark = pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")


@pytest.fixture(autouse=True)
def _loose_umask(monkeypatch):
    """The common umask 022, under which files are created world-readable (0644) unless made otherwise."""
    monkeypatch.delenv("CROWDDB_LEDGER_KEY", raising=False)
    old = os.umask(0o022)
    yield
    os.umask(old)


def _modes(folder) -> dict[str, str]:
    return {name: oct(stat.S_IMODE(os.stat(os.path.join(folder, name)).st_mode)) for name in sorted(os.listdir(folder))}


def _batch() -> HitBatch:
    hits = pd.DataFrame({"hit_id": ["R1-00001"], "run_id": 1, "assignments": 1, "round": 1, "question": "Which job?",
                         "domain": [("a", "b")], "reward": 0.2, "fee_rate": 0.3, "target": None})
    items = pd.DataFrame({"hit_id": ["R1-00001"], "item_no": [1], "row_no": [1], "age": ["[20-30]"]})
    return HitBatch(hits, items, ["age"], None)


def test_a_new_database_file_its_wal_and_its_ledger_key_are_0600(tmp_path):
    db = crowddb.connect(tmp_path / "new.duckdb", seed=1)
    assert _modes(tmp_path) == {"new.duckdb": "0o600", "new.duckdb.wal": "0o600"}
    db.load_frame("answers", pd.DataFrame({"object": [1, 1], "source": ["a", "b"], "value": [1.0, 2.0]}))
    db.set_privacy_budget("answers", epsilon=1.0)
    assert _modes(tmp_path) == {"new.duckdb": "0o600", "new.duckdb.key": "0o600", "new.duckdb.wal": "0o600"}
    db.close()
    assert _modes(tmp_path) == {"new.duckdb": "0o600", "new.duckdb.key": "0o600"}


def test_an_existing_database_file_keeps_the_mode_its_owner_gave_it(tmp_path):
    crowddb.connect(tmp_path / "mine.duckdb").close()
    os.chmod(tmp_path / "mine.duckdb", 0o640)
    crowddb.connect(tmp_path / "mine.duckdb").close()
    assert _modes(tmp_path)["mine.duckdb"] == "0o640"


def test_the_market_file_and_its_wal_and_shm_are_0600(tmp_path):
    market = Market(tmp_path / "m.sqlite")
    market.post(_batch())
    _, token = market.add_worker()
    assignment = market.take(token)
    market.submit(token, assignment["assignment_id"], assignment["csrf"], {1: "a"})
    assert _modes(tmp_path) == {"m.sqlite": "0o600", "m.sqlite-shm": "0o600", "m.sqlite-wal": "0o600"}
    market.close()


def test_the_web_crowd_market_beside_a_database_is_0600(tmp_path):
    from crowddb.crowd import WebCrowd

    crowd = WebCrowd(port=0, workers=1, announce=None, serve=False)
    with crowddb.connect(tmp_path / "jobs.duckdb", platform=crowd):
        crowd.market.post(_batch())
    crowd.close()
    modes = _modes(tmp_path)
    assert modes["jobs.duckdb"] == modes["jobs.duckdb.market.sqlite"] == "0o600"
    assert all(mode == "0o600" for mode in modes.values()), modes


def _raw(path) -> bytes:
    return b"".join(open(p, "rb").read() for p in (path, f"{path}-wal") if os.path.exists(p))


def test_the_requester_token_is_stored_hashed_and_shown_once(tmp_path):
    path = tmp_path / "m.sqlite"
    made = Market(path)
    token = made.requester_token
    assert len(token) == 32  # secrets.token_urlsafe(24)
    settings = dict(sqlite3.connect(path).execute("SELECT key, value FROM settings"))
    assert "requester_token" not in settings
    assert settings["requester_token_sha256"] == hashlib.sha256(token.encode()).hexdigest()
    assert token.encode() not in _raw(path)  # not in the file or its log, in any form but its digest
    other = Market(path)  # another session, or `crowddb serve`: it cannot show the token, and checks it by digest
    assert other.requester_token is None
    assert other.requester_ok(token) and not other.requester_ok(token[:-1]) and not other.requester_ok("")
    made.close()
    other.close()


def test_the_page_accepts_the_token_by_its_digest(tmp_path):
    from starlette.testclient import TestClient

    from crowddb.crowd.web.app import create_app

    made = Market(tmp_path / "m.sqlite")
    token = made.requester_token
    other = Market(tmp_path / "m.sqlite")
    with TestClient(create_app(other)) as client:
        assert client.get(f"/r/{token}").status_code == 200
        assert client.get(f"/r/{token}/payments.csv?run=1").status_code == 200
        assert client.get(f"/r/{hashlib.sha256(token.encode()).hexdigest()}").status_code == 404  # not the digest
        assert client.get(f"/r/{token}x").status_code == 404
    made.close()
    other.close()


def test_a_market_file_with_a_clear_token_is_hashed_when_opened(tmp_path):
    path = tmp_path / "old.sqlite"
    Market(path).close()
    with contextlib.closing(sqlite3.connect(path)) as con, con:  # as a crowddb before issue 24 left it
        con.execute("DELETE FROM settings WHERE key = 'requester_token_sha256'")
        con.execute("INSERT INTO settings VALUES ('requester_token', 'the-old-clear-token')")
    market = Market(path)
    assert market.requester_token == "the-old-clear-token"  # the requester has it: it still works
    settings = dict(sqlite3.connect(path).execute("SELECT key, value FROM settings"))
    assert "requester_token" not in settings
    assert settings["requester_token_sha256"] == hashlib.sha256(b"the-old-clear-token").hexdigest()
    market.close()


def test_a_crowd_that_did_not_make_the_market_announces_a_new_requester_link(tmp_path):
    from crowddb.crowd import WebCrowd

    told: list[str] = []
    first = WebCrowd(port=0, market=tmp_path / "m.sqlite", workers=2, announce=told.append)
    first.publish(_batch())
    old_link = first.requester_url
    assert old_link in told[0] and httpx.get(old_link).status_code == 200
    assert first.requester_url == old_link  # the same for as long as this crowd lives
    first.close()
    again = WebCrowd(port=0, market=tmp_path / "m.sqlite", workers=2, announce=told.append)
    again.publish(_batch())
    new_link = again.requester_url
    assert new_link != old_link and new_link in told[1]
    assert httpx.get(new_link).status_code == 200
    assert httpx.get(old_link.replace(old_link.split("/r/")[0], again.url)).status_code == 404  # it stopped working
    worker_links = again.worker_links()  # worker tokens stay in clear: the page lists them, serve announces them
    assert len(worker_links) == 2 and all(link in told[1] for link in worker_links)
    again.close()


def test_the_server_command_prints_a_working_requester_link(tmp_path, monkeypatch, capsys):
    path = tmp_path / "m.sqlite"
    made = Market(path)
    monkeypatch.setattr(server, "serve", lambda app, host, port: None)
    server.main(["--market", str(path), "--port", "8999"])
    link = capsys.readouterr().out.strip().split()[-1]
    token = link.rsplit("/r/", 1)[1]
    assert link.startswith("http://127.0.0.1:8999/r/") and token != made.requester_token
    assert made.requester_ok(token) and not made.requester_ok(made.requester_token)  # a new token replaced it
    made.close()
