"""The crowddb shell at a terminal, end to end through a pseudo-terminal (pexpect): multi-line statements, dot
commands, Tab completion, a crowd statement's plan and its confirmation, Ctrl-C at the prompt and during a query, the
history file, Ctrl-D and .quit. What it prints is compared once the session is over, with the terminal's control
sequences taken out. Without a terminal: test_cli.py."""

from __future__ import annotations

import io
import re
import shutil
import sys
import time

import duckdb
import pytest

import crowddb
from crowddb.datasets import adult_path
from crowddb.demo import ROLES

pexpect = pytest.importorskip("pexpect")

CROWD = ("SELECT count(*) AS n, count(job) AS answered FROM "
         "(SELECT getposition(*, k := 10) AS job FROM adult LIMIT 500);")  # not chosen by the key (issue 24)
ANSI = re.compile(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07]*\x07|[()][0-9A-Za-z]|[=>])")


@pytest.fixture(scope="module")
def adult_template(tmp_path_factory):
    path = tmp_path_factory.mktemp("adult") / "adult.duckdb"
    with crowddb.connect(path, progress=False) as db:
        db.load_csv("adult", adult_path(), **ROLES)
    return path


class Session:
    """``crowddb ARGS`` at a 40 x 160 terminal, with its own HOME and history file."""

    def __init__(self, tmp_path, *args: str) -> None:
        self.history = tmp_path / "history"
        env = {"HOME": str(tmp_path), "CROWDDB_HISTORY": str(self.history), "TERM": "xterm",
               "PATH": "/usr/bin:/bin", "PROMPT_TOOLKIT_NO_CPR": "1", "COLUMNS": "160", "LINES": "40"}
        self.log = io.StringIO()
        self.child = pexpect.spawn(sys.executable, ["-m", "crowddb.cli", *args], env=env, encoding="utf-8",
                                   dimensions=(40, 160), timeout=30)
        self.child.logfile_read = self.log
        self.prompt()

    def prompt(self) -> None:
        self.child.expect("crowddb>")  # (the terminal draws the space after it with a cursor move)

    def line(self, text: str) -> None:
        self.child.send(text + "\r")

    def statement(self, text: str) -> None:
        self.line(text)
        self.prompt()

    def text(self) -> str:
        """What the terminal showed, without control sequences; a carriage return goes back to the line's start,
        where what follows overwrites it (a progress bar, then the result)."""
        lines = []
        for raw in ANSI.sub("", self.log.getvalue()).split("\n"):
            shown = ""
            for part in raw.split("\r"):
                shown = part + shown[len(part):]
            lines.append(shown.rstrip())
        return "\n".join(lines)

    def exit(self, keys: str) -> int:
        self.child.send(keys)
        self.child.expect(pexpect.EOF)
        self.child.close()
        return self.child.exitstatus


def box(sql: str) -> str:
    return str(duckdb.sql(sql)).rstrip("\n")


def test_a_session(tmp_path, adult_template):
    path = tmp_path / "jobs.duckdb"
    shutil.copy(adult_template, path)
    s = Session(tmp_path, str(path), "--seed", "7")

    s.line("SELECT 40")  # a statement goes on until its ';'
    s.child.expect(r"\.\.>")
    s.line("  + 2 AS answer;")
    s.child.expect("42")
    s.prompt()
    s.statement(".tables")
    s.statement(".roles adult")
    s.child.send("SELECT count(*) AS people FROM adu\t")  # Tab completes the table's name
    s.child.expect("adult")
    s.line(";")
    s.child.expect("30162")  # the cleaned Adult table's rows
    s.prompt()
    s.statement(".nope")

    s.line("SELECT 'a line")  # Ctrl-C at the prompt drops the line
    s.child.sendintr()
    s.prompt()
    s.statement("SELECT 1 AS one;")

    s.line("SELECT count(*) FROM range(10000000000);")  # Ctrl-C during a query stops it
    time.sleep(1.0)
    started = time.monotonic()
    s.child.sendintr()
    s.child.expect("Interrupted.")
    assert time.monotonic() - started < 5
    s.prompt()

    s.line(CROWD)  # a crowd statement: its plan, then the question
    s.child.expect(r"Spend \$6\.50 on 5 HITs\? \[y/N\]")
    s.line("n")
    s.child.expect("Nothing was run.")
    s.prompt()
    s.child.send("\x1b[A")  # Up: the statement again, from the history
    time.sleep(0.3)
    s.line("")
    s.child.expect(r"Spend \$6\.50 on 5 HITs\? \[y/N\]")
    s.line("y")
    s.child.expect("answered")
    s.prompt()
    s.statement("SELECT * FROM nope;")
    assert s.exit("\x04") == 0  # Ctrl-D

    shown = s.text()
    assert "crowddb 0.1.0 (DuckDB " in shown and f"Connected to {path}." in shown
    assert box("SELECT 40 + 2 AS answer") in shown
    assert "\nadult\n" in shown
    assert "quasi_identifier  age, sex, education_num, marital_status, race\n" in shown
    assert box("SELECT 30162::BIGINT AS people") in shown
    assert 'Error: unknown command ".nope": enter ".help" for the list\n' in shown
    assert box("SELECT 1 AS one") in shown  # the dropped line's open quote would have swallowed it
    assert "Interrupted.\n" in shown  # (after the ^C the terminal echoes)
    plan = "getposition (tuple): 500 rows -> 500 items, 0 cached; 5 HITs, 25 assignments, est. $6.50\n"
    assert shown.count(plan) == 2 and "total: 5 HITs, 25 assignments, est. $6.50\n" in shown
    assert box("SELECT 500::BIGINT AS n, 500::BIGINT AS answered") in shown
    assert "Error: Catalog Error: Table with name nope does not exist!" in shown
    with crowddb.connect(path, progress=False, read_only=True) as db:  # "n" bought nothing, "y" once
        assert db.sql("SELECT count(*), sum(hits), sum(cost) FROM crowddb_runs").fetchall() == [(1, 5, 6.5)]

    history = s.history.read_text()
    assert "\n+SELECT 40\n+  + 2 AS answer;\n" in history  # one entry, both lines
    assert history.count(f"\n+{CROWD}\n") == 1 and "\n+.tables\n" in history  # (a repeat is kept once)


def test_quit_and_an_in_memory_database(tmp_path):
    s = Session(tmp_path)
    s.statement(".mode csv")
    s.statement("SELECT 1 AS a, 'x' AS b;")
    s.statement(".budget 0.5")
    assert s.exit(".quit\r") == 0
    shown = s.text()
    assert "Connected to a transient in-memory database." in shown
    assert "\na,b\n1,x\n" in shown
