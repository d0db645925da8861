"""The ``crowddb`` command without a terminal: SQL from a pipe and from -c (the shell's non-interactive side),
--version, ``sql -``, Ctrl-C during ``sql --web`` (one line, exit 130), ``serve`` refusing a missing database, and the
one payments CSV. The shell at a terminal: test_cli_shell.py."""

from __future__ import annotations

import io
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from decimal import Decimal

import duckdb
import numpy as np
import pandas as pd
import pytest
from conftest import people_frame

import crowddb
from crowddb.cli import main
from crowddb.crowd import SimulatedCrowd
from crowddb.crowd.payments import payments_csv
from crowddb.datasets import adult_path
from crowddb.demo import ROLES
from crowddb.shell import Shell, ends_statement, interrupted_line, last_run, split_statements

# 500 people: 5 HITs of 100 rows, 5 assignments at $0.20 + 30% fee each
CROWD = ("SELECT count(*) AS n, count(job) AS answered FROM "
         "(SELECT getposition(*, k := 10) AS job FROM adult LIMIT 500);")  # not chosen by the key (issue 24)
PLAN = "getposition (tuple): 500 rows -> 500 items, 0 cached; 5 HITs, 25 assignments, est. $6.50"


@pytest.fixture(scope="module")
def adult_template(tmp_path_factory):
    path = tmp_path_factory.mktemp("adult") / "adult.duckdb"
    with crowddb.connect(path, progress=False) as db:
        db.load_csv("adult", adult_path(), **ROLES)
    return path


@pytest.fixture
def adult_db(adult_template, tmp_path):
    path = tmp_path / "jobs.duckdb"
    shutil.copy(adult_template, path)
    return path


def crowddb_cli(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """The command as a user runs it, input from a pipe (or none: not a terminal either)."""
    return subprocess.run([sys.executable, "-m", "crowddb.cli", *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout, stdin=None if stdin is not None else subprocess.DEVNULL, check=False)


def box(sql: str) -> str:
    """A result as DuckDB prints the relation."""
    return str(duckdb.sql(sql)).rstrip("\n")


def run_shell(monkeypatch, capsys, text: str, *args: str) -> tuple[int, str, str]:
    """``crowddb ARGS`` in this process, ``text`` on its standard input (a pipe)."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------------------------------ reading SQL
def test_a_statement_ends_at_a_semicolon_outside_strings_and_comments():
    assert ends_statement("SELECT 1;") and ends_statement("SELECT 1; -- done") and ends_statement("SELECT\n1\n;")
    assert ends_statement("SELECT 'a;b' /* ; */;") and ends_statement("SELECT $$x;$$;")
    for text in ("SELECT 1", "SELECT 'a;", "SELECT 1 -- ;", "SELECT /* ; ", 'SELECT "a;', "SELECT $$ ;", "", "  "):
        assert not ends_statement(text), text
    assert split_statements("SELECT 1; SELECT 'a;b' -- c;\n; ;\nSELECT 3") == ["SELECT 1", "SELECT 'a;b' -- c;",
                                                                                  "SELECT 3"]


# ----------------------------------------------------------------------------------------------- the process
def test_version():
    done = crowddb_cli("--version")
    version = f"crowddb {crowddb.__version__} (DuckDB {duckdb.__version__})\n"
    assert (done.returncode, done.stdout, done.stderr) == (0, version, "")


def test_sql_from_a_pipe_runs_every_statement_and_exits_1_if_one_failed():
    piped = "SELECT 40\n  + 2 AS answer;\nSELECT * FROM nope;\nSELECT 'a;b' AS s; -- a ; in a comment\n"
    done = crowddb_cli(stdin=piped)
    assert done.returncode == 1
    assert done.stdout == box("SELECT 40 + 2 AS answer") + "\n" + box("SELECT 'a;b' AS s") + "\n"
    assert done.stderr.startswith("Error: Catalog Error: Table with name nope does not exist!")
    assert len(done.stderr.splitlines()) == 1
    clean = crowddb_cli(stdin="SELECT 1 AS one;\nSELECT 2 AS two")  # the last statement needs no ';'
    assert (clean.returncode, clean.stdout, clean.stderr) == (0, box("SELECT 1 AS one") + "\n" +
                                                              box("SELECT 2 AS two") + "\n", "")


def test_c_runs_and_exits_on_a_file(tmp_path):
    path = str(tmp_path / "t.duckdb")
    made = crowddb_cli(path, "-c", "CREATE TABLE t AS SELECT 1 AS x; INSERT INTO t VALUES (2); SELECT sum(x) AS s "
                                   "FROM t")
    assert (made.returncode, made.stdout, made.stderr) == (0, box("SELECT 3::HUGEINT AS s") + "\n", "")
    listed = crowddb_cli(path, "-c", ".tables")
    assert (listed.returncode, listed.stdout) == (0, "t\n")
    failed = crowddb_cli(path, "-c", "SELECT x FROM nope; SELECT 1")  # the rest of a failed input is not run
    assert (failed.returncode, failed.stdout) == (1, "")


def test_sql_dash_reads_the_query_from_standard_input():
    done = crowddb_cli("sql", "-", stdin="SELECT 40 + 2 AS answer\n")
    assert done.returncode == 0 and done.stdout.split() == ["answer", "42"]


def test_serve_refuses_a_missing_database_unless_create(tmp_path):
    missing = tmp_path / "nothere.duckdb"
    done = crowddb_cli("serve", "--db", str(missing))
    assert done.returncode == 2
    assert done.stderr == (f"crowddb: ArgumentError: no database file {str(missing)!r}: give the file your crowd "
                           "queries run on (crowddb sql ... --db FILE), or add --create to serve a new one\n")
    assert list(tmp_path.iterdir()) == []  # no market file either
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "crowddb.cli", "serve", "--db", str(missing), "--create",
                               "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().startswith(f"HIT page: requester page http://127.0.0.1:{port}/r/")
    finally:
        server.kill()
        server.wait(10)


def test_ctrl_c_during_sql_web_prints_what_was_bought_and_what_stays_published(tmp_path):
    path = tmp_path / "web.duckdb"
    with crowddb.connect(path, progress=False) as db:
        db.load_frame("people", people_frame(30), quasi_identifiers=["age", "zip"], sensitive=["salary"],
                      ground_truth="job", key="id")
    query = ("SELECT id, getposition(age, zip, edu, k := 5, tuples_per_hit := 10, assignments := 3) AS job "
             "FROM people ORDER BY id")
    run = subprocess.Popen([sys.executable, "-m", "crowddb.cli", "sql", query, "--db", str(path), "--web", "--port",
                            "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    market = f"{path}.market.sqlite"
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:  # the HITs are on the page: the command waits for people
            try:
                if sqlite3.connect(market).execute("SELECT count(*) FROM hits").fetchall() == [(3,)]:
                    break
            except sqlite3.Error:
                pass
            time.sleep(0.05)
        time.sleep(0.5)  # (and marked published in the database)
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=30)
    finally:
        run.kill()
    assert run.returncode == 130
    assert err == ("crowddb: interrupted: run 1 bought nothing; 3 HITs (9 assignments) stay published: running the "
                   "same query again collects their answers without paying for them again (`crowddb serve --db "
                   f"{path}` keeps their page up meanwhile).\n")
    with crowddb.connect(path, progress=False) as db:
        assert db.sql("SELECT status, count(*) FROM crowddb_hits GROUP BY ALL").fetchall() == [("published", 3)]


# ------------------------------------------------------------------------------------- the shell, non-interactive
def test_modes_and_dot_commands(monkeypatch, capsys, tmp_path):
    path = str(tmp_path / "m.duckdb")

    def shell(text: str) -> list[str]:
        code, out, err = run_shell(monkeypatch, capsys, text, path)
        assert (code, err) == (0, "")
        return out.splitlines()

    assert shell(".mode csv\nSELECT 1 AS a, NULL AS b, 'x,\"y' AS c UNION ALL SELECT 2, 3, 'z';\n.mode") == [
        "a,b,c", '1,,"x,""y"', "2,3,z", "csv"]
    assert shell(".mode line\nSELECT 1 AS a, 'long' AS bbbb UNION ALL SELECT 22, NULL;") == [
        "   a = 1", "bbbb = long", "", "   a = 22", "bbbb = NULL"]
    assert shell(".mode markdown\nSELECT 1 AS a, 'long' AS bbbb;") == ["| a | bbbb |", "|---|------|", "| 1 | long |"]
    assert shell(".mode table\nSELECT 1 AS a, NULL AS bbbb;") == [
        "+---+------+", "| a | bbbb |", "+---+------+", "| 1 | NULL |", "+---+------+"]
    assert shell("CREATE TABLE people AS SELECT 1 AS id;\nINSERT INTO people VALUES (2);\n.tables") == ["people"]
    every = " ".join(shell(".tables all")).split()  # crowddb's catalog too
    assert {"crowddb_columns", "crowddb_runs", "crowddb_hits", "people"} <= set(every)
    assert shell(".roles people") == ["people: no roles declared (crowd operators may publish every column)"]
    assert shell(".budget\n.budget 2.5\n.budget") == ["$1.00: a crowd statement estimated above it asks first",
                                                      "$2.50: a crowd statement estimated above it asks first"]
    assert [line.split()[0] for line in shell(".help")] == [".budget", ".exit", ".explain", ".help", ".mode", ".open",
                                                           ".quit", ".roles", ".tables"]
    assert shell(f".open {tmp_path / 'other.duckdb'}\n.tables\n.open {path}\n.tables") == ["people"]


def test_dot_command_errors_are_one_line_and_the_input_goes_on(monkeypatch, capsys):
    code, out, err = run_shell(monkeypatch, capsys, ".nope\n.mode fancy\n.roles nope\nSELECT 1 AS one;\n.quit\n"
                                                    "SELECT 2 AS two;\n")
    assert code == 1 and out == box("SELECT 1 AS one") + "\n"  # .quit: what follows is not run
    assert err.splitlines() == ['Error: unknown command ".nope": enter ".help" for the list',
                                "Error: usage: .mode box|csv|line|markdown|table",
                                "Error: UnknownColumnError: no table or view named 'nope'"]


def test_roles_of_a_table(monkeypatch, capsys, adult_db):
    code, out, err = run_shell(monkeypatch, capsys, ".roles adult\n", str(adult_db))
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "quasi_identifier  age, sex, education_num, marital_status, race",
        "sensitive         occupation, income, capital_gain, capital_loss",
        "ground_truth      occupation",
        "key               id",
        "core              age, sex, education_num, marital_status, race, workclass, hours_per_week"]


def test_a_crowd_statement_over_the_threshold_is_refused_without_a_terminal(monkeypatch, capsys, adult_db):
    code, out, err = run_shell(monkeypatch, capsys, CROWD + "\nSELECT 1 AS one;\n", str(adult_db))
    assert code == 1 and out == box("SELECT 1 AS one") + "\n"
    assert PLAN in err.splitlines()  # the plan is shown (on stderr: stdout holds the results)
    assert err.splitlines()[-1] == ("Error: spending $6.50 on 5 HITs is over the $1.00 threshold and there is no "
                                    "terminal to ask: nothing was run (--yes runs it)")
    with crowddb.connect(adult_db, progress=False) as db:
        assert db.sql("SELECT count(*) FROM crowddb_runs").fetchall() == [(0,)]
    code, out, err = run_shell(monkeypatch, capsys, ".budget 7\n" + CROWD, str(adult_db), "--seed", "7")
    assert code == 0 and out == box("SELECT 500::BIGINT AS n, 500::BIGINT AS answered") + "\n"
    code, out, err = run_shell(monkeypatch, capsys, CROWD, str(adult_db), "--yes", "--mode", "csv")
    assert (code, out) == (0, "n,answered\n500,500\n")  # bought once: the rerun is served from the answers
    assert "500 rows -> 500 items, 500 cached; 0 HITs" in err


def test_explain_on_prints_every_plan(monkeypatch, capsys):
    code, out, err = run_shell(monkeypatch, capsys, ".explain on\nSELECT 1 AS one;\n.explain off\nSELECT 2 AS two;")
    assert (code, err) == (0, "")
    assert out == ("no crowd operator: the query runs in DuckDB unchanged\n" + box("SELECT 1 AS one") + "\n" +
                   box("SELECT 2 AS two") + "\n")


def test_completion_of_names_operators_functions_keywords_and_dot_commands(tmp_path):
    from crowddb.shell import _completions

    shell = Shell(str(tmp_path / "c.duckdb"))
    try:
        shell.run("CREATE TABLE people (id INT, age INT, agency VARCHAR);")

        def words(text: str) -> list[str]:
            return [w for w, _, _ in _completions(shell, text)]

        assert words("SELECT ag") == ["age", "agency", "aggregate"]  # columns first, then keywords
        assert words("SELECT * FROM peo") == ["people"]
        assert words("SELECT getpos") == ["getposition"]
        assert words("SELECT * FROM truth_") == ["truth_discover"] and words("FROM PRIV") == [
            "PRIVACY_BUDGET", "PRIVATE_SYNTH", "PRIVILEGES"]
        assert words("SELE") == ["SELECT"] and words("sele") == ["select"]
        assert words(".ro") == [".roles"] and words(".mode c") == ["csv"] and words(".roles p") == ["people"]
        assert words(".explain o") == ["on", "off"] and words(".t") == [".tables"]
        assert ("people", -3, "table") in list(_completions(shell, "SELECT * FROM peo"))
    finally:
        shell.close()


# ------------------------------------------------------------------------------------------- Ctrl-C, its report
class StopsAtSecondCollect(SimulatedCrowd):
    """Ctrl-C while the second batch of HITs waits for people: the first was bought, the second is published."""

    def collect(self, hit_ids, **kw):
        self.collects = getattr(self, "collects", 0) + 1
        if self.collects == 2:
            raise KeyboardInterrupt
        return super().collect(hit_ids, **kw)


def test_ctrl_c_during_a_crowd_statement_says_what_was_bought_and_what_stays_published(tmp_path, capsys):
    shell = Shell(str(tmp_path / "i.duckdb"))
    shell.db.close()
    shell.db = crowddb.connect(tmp_path / "i.duckdb", platform=StopsAtSecondCollect(qualities=np.ones(6), seed=1),
                               seed=2, progress=False)
    try:
        for name, seed in (("a", 0), ("b", 1)):
            shell.db.load_frame(name, people_frame(20, seed), quasi_identifiers=["age", "zip"], ground_truth="job",
                                key="id")
        shell.yes = True
        since = last_run(shell.db)
        shell.run("CREATE TABLE ja AS SELECT id, getposition(age, zip, edu, k := 4, tuples_per_hit := 10, "
                  "assignments := 3) AS job FROM a;\nSELECT id, getposition(age, zip, edu, k := 4, tuples_per_hit := "
                  "10, assignments := 2) AS job FROM b;")
        err = capsys.readouterr().err.splitlines()  # the plans, then the report on the statement's own runs
        assert err[-1] == ("Interrupted: run 2 bought nothing; 2 HITs (4 assignments) stay published: running the "
                           "same query again collects their answers without paying for them again.")
        assert err.count("total: 2 HITs, 6 assignments, est. $1.56") == 1
        assert interrupted_line(shell.db, since) == (
            "runs 1, 2 bought 2 HITs (6 assignments, $1.56); 2 HITs (4 assignments) stay published: running the "
            "same query again collects their answers without paying for them again.")
        assert interrupted_line(shell.db, last_run(shell.db)) == "nothing was bought or published."
        assert shell.stopped and not shell.failed  # not at a terminal: Ctrl-C ends the input (exit code 130)
    finally:
        shell.close()


# ------------------------------------------------------------------------------------------------------ payments
def test_one_payments_csv_for_the_cli_and_the_page():
    earnings = pd.DataFrame({"worker_id": ["W2", "W1", "W3"], "participant_id": [None, "5f1a", np.nan],
                             "assignments": [2, 3, 1], "reward": [0.4000000000000001, Decimal("0.6000"), 0.005]})
    assert payments_csv(earnings) == ("participant_id,amount,worker_id,assignments\n5f1a,0.60,W1,3\n,0.40,W2,2\n"
                                      ",0.01,W3,1\n")
    assert payments_csv(earnings.iloc[:0]) == "participant_id,amount,worker_id,assignments\n"
