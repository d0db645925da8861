"""The shipped examples run as a new user runs them: each script as its own process on a fresh database, the SQL
file through the CLI (on a database holding the Adult table, and after the Python example on the same file, as its
header says)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import crowddb
from crowddb.datasets import adult_path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PY = sorted(EXAMPLES.glob("*.py"))
SQL = sorted(EXAMPLES.glob("*.sql"))

def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600)


def test_every_example_is_tested():
    assert [p.name for p in PY] == ["job_recommendation.py"]
    assert [p.name for p in SQL] == ["job_recommendation.sql"]


@pytest.mark.parametrize("script", PY, ids=lambda p: p.name)
def test_python_example_runs(script, tmp_path):
    out = run([sys.executable, str(script), str(tmp_path / "jobs.duckdb")], tmp_path)
    assert "PrivacyError" not in out.stderr, out.stderr[-2000:]
    assert out.returncode == 0, out.stderr[-2000:]
    assert "getposition (tuple)" in out.stdout and "getcandidate" in out.stdout


@pytest.mark.parametrize("script", SQL, ids=lambda p: p.name)
def test_sql_example_on_a_database_holding_adult(script, tmp_path):
    """The SQL file declares its roles itself: it needs only the Adult table (loaded without roles here)."""
    db_path = tmp_path / "jobs.duckdb"
    with crowddb.connect(str(db_path), progress=False) as db:
        db.load_csv("adult", adult_path())
    out = run([sys.executable, "-m", "crowddb.cli", "sql", script.read_text(), "--db", str(db_path)], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["job", "people", "avg_hours"]
    with crowddb.connect(str(db_path), progress=False) as db:
        asked = db.sql("SELECT count(*) FROM adult WHERE age BETWEEN 25 AND 35 AND native_country = 'Canada'")
        people = sum(int(line.split()[-2]) for line in lines[1:])
        assert people == asked.fetchall()[0][0]  # every person asked about is in one job's count
        roles = db.sql("SELECT count(*) FROM crowddb_columns WHERE table_name = 'adult'").fetchall()[0][0]
        assert roles == 11  # the file's INSERT INTO crowddb_columns


@pytest.mark.parametrize("script", SQL, ids=lambda p: p.name)
def test_sql_example_after_the_python_one(script, tmp_path):
    db_path = tmp_path / "jobs.duckdb"
    first = run([sys.executable, str(EXAMPLES / "job_recommendation.py"), str(db_path)], tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    out = run([sys.executable, "-m", "crowddb.cli", "sql", script.read_text(), "--db", str(db_path)], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[0].split() == ["job", "people", "avg_hours"]
