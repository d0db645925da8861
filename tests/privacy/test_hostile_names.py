"""A name is only ever a name: hostile table, column, view and CTE names through every public entry point.

Each case opens a database file with a canary table (one row, and a WAL large enough that a CHECKPOINT would show)
and writes a canary file whose first line is a secret. After the case the canary row is there, the WAL was never
truncated (nothing ran CHECKPOINT), explain() left nothing behind, the secret appears in no result and no error, and
every error was a CrowdDBError.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

import crowddb
from crowddb.store import roles_of
from crowddb.cli import main as cli_main
from crowddb.crowd import SimulatedCrowd
from crowddb.errors import ArgumentError, CrowdDBError, PrivacyError, SQLParseError, UnknownOperatorError

SECRET = "CANARY-SECRET-5d41402abc4b2a76"  # the canary file's first line: never read, never shown

HOSTILE = [
    "p; checkpoint",
    "p; commit",
    "p--x",
    "/*c*/_copy",
    "bob's copy",
    "read_text('{canary}')",
    'x"); DROP TABLE canary; --',
    "'); checkpoint; --",
    "SELECT",
    "order",
    "ünï côdé",
    "new\nline",
    "a.b",
    "getposition(*)",
    "ANONYMIZE(",
    "$$ x $$",
    "{canary_csv}",  # DuckDB reads a missing table whose name ends in .csv from the file
]
IDS = ["checkpoint", "commit", "dashdash", "comment", "apostrophe", "read_text", "drop_canary", "quote_checkpoint",
       "SELECT", "order", "unicode", "newline", "dot", "operator_call", "table_function", "dollar", "csv_path"]


def q(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def lit(text: str) -> str:
    """``text`` as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def people(column: str, n: int = 12) -> pd.DataFrame:
    """People whose job is a rule of the (hostile-named) age column."""
    rng = np.random.default_rng(0)
    age = rng.integers(18, 70, n)
    return pd.DataFrame({"id": np.arange(1, n + 1), column: age, "sex": rng.choice(["F", "M"], n),
                         "job": np.where(age >= 40, "driver", "clerk")})


class World:
    """One hostile name, a database file with a canary table, a canary file, and a record of everything seen."""

    def __init__(self, tmp_path: Path, raw: str) -> None:
        self.tmp = tmp_path
        self.canary_txt = tmp_path / "canary.txt"
        self.canary_txt.write_text(f"{SECRET}\nsecond line\n")
        self.canary_csv = tmp_path / "canary.csv"
        self.canary_csv.write_text(f"{SECRET}\n1\n")
        self.name = raw.format(canary=self.canary_txt, canary_csv=self.canary_csv)
        self.path = tmp_path / "hostile.duckdb"
        self.db = crowddb.connect(self.path, platform=SimulatedCrowd(qualities=np.ones(10), seed=1), seed=3,
                                  progress=False, config={"checkpoint_threshold": "1GB"})
        self.db.con.execute("CREATE TABLE canary(x VARCHAR, pad VARCHAR)")
        self.db.con.execute("INSERT INTO canary VALUES ('alive', repeat('x', 200000))")
        self.wal = self.wal_size()
        assert self.wal > 200_000
        self.seen: list[str] = []

    def wal_size(self) -> int:
        wal = Path(f"{self.path}.wal")
        return wal.stat().st_size if wal.exists() else 0

    def run(self, fn):
        """(result, error): the error must be a CrowdDBError; results and messages are kept for the secret check."""
        try:
            result = fn()
        except CrowdDBError as err:
            self.seen.append(f"{type(err).__name__}: {err}")
            return None, err
        except Exception as err:  # noqa: BLE001 - the point: nothing but a CrowdDBError may escape
            pytest.fail(f"{self.name!r}: a raw {type(err).__module__}.{type(err).__name__} escaped: {err}")
        if isinstance(result, (duckdb.DuckDBPyRelation, duckdb.DuckDBPyConnection)):
            result = result.df()
        self.seen.append(result.to_string() if isinstance(result, pd.DataFrame) else str(result))
        return result, None

    def ok(self, fn):
        result, err = self.run(fn)
        assert err is None, f"{self.name!r}: {type(err).__name__}: {err}"
        return result

    def fails(self, fn) -> CrowdDBError:
        result, err = self.run(fn)
        assert err is not None, f"{self.name!r}: expected a CrowdDBError, got {result!r}"
        return err

    def check(self) -> None:
        """The canary survived and was never read; nothing extra ran."""
        con = self.db.con
        assert con.execute("SELECT x FROM canary").fetchall() == [("alive",)]
        assert self.wal_size() >= self.wal, "the WAL was truncated: something ran CHECKPOINT"
        assert not con.execute("SELECT 1 FROM duckdb_tables() WHERE table_name = 'junk'").fetchall()
        assert not any(SECRET in text for text in self.seen), "the canary file was read"
        assert all(table.startswith("__crowd_") for (table,) in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall())


@pytest.fixture(params=HOSTILE, ids=IDS)
def w(request, tmp_path):
    world = World(tmp_path, request.param)
    yield world
    world.db.close()


def _published(w: World) -> list[dict]:
    return [json.loads(c) for (c,) in w.db.con.execute("SELECT content FROM crowddb_hit_items").fetchall()]


# ----------------------------------------------------------------------------------------------------- tables
def test_load_frame_roles_and_getposition(w):
    name = col = w.name
    w.ok(lambda: w.db.load_frame(name, people(col), quasi_identifiers=[col], ground_truth="job", key="id",
                                 kinds={col: "numeric"}))
    roles = w.ok(lambda: w.db.roles(name))
    assert (roles.table, roles.quasi_identifiers, roles.ground_truth, roles.key) == (name, (col,), "job", "id")
    assert w.ok(lambda: w.db.sql(f"SELECT count(*) FROM {q(name)}").fetchall()) == [(12,)]
    query = f"SELECT id, getposition(*, k := 2) AS pos FROM {q(name)} ORDER BY id"
    plan = w.ok(lambda: w.db.explain(query))
    assert plan.operators[0].input_rows == 12
    got = w.ok(lambda: w.db.sql(query))
    assert len(got) == 12 and got["pos"].notna().all()
    assert len(w.ok(lambda: w.db.execute(query))) == 12
    published = _published(w)
    assert published and all(set(item) == {col, "sex"} for item in published)  # never job, never id
    w.check()


def test_load_csv(w):
    name = col = w.name
    path = w.tmp / "people.csv"
    people(col).to_csv(path, index=False)
    w.ok(lambda: w.db.load_csv(name, path, quasi_identifiers=[col], ground_truth="job", key="id"))
    assert w.ok(lambda: w.db.roles(name)).quasi_identifiers == (col,)
    assert w.ok(lambda: w.db.sql(f"SELECT sum({q(col)}) FROM {q(name)}").fetchall()) == [(int(people(col)[col].sum()),)]
    w.check()


def test_declare_roles_and_numeric_check(w):
    name = col = w.name
    w.ok(lambda: w.db.sql(f"CREATE TABLE {q(name)} ({q(col)} VARCHAR, job VARCHAR)"))
    w.ok(lambda: w.db.execute(f"INSERT INTO {q(name)} VALUES ('31', 'clerk'), ('47', 'driver')"))
    roles = w.ok(lambda: w.db.declare_roles(name, quasi_identifiers=[col], kinds={col: "numeric"},
                                            sensitive=["job"]))
    assert roles.quasi_identifiers == (col,) and roles.sensitive == ("job",)
    w.ok(lambda: w.db.execute(f"INSERT INTO {q(name)} VALUES ('oops', 'clerk')"))
    err = w.fails(lambda: w.db.declare_roles(name, quasi_identifiers=[col], kinds={col: "numeric"}))
    assert isinstance(err, ArgumentError) and "oops" in str(err)
    # roles that outlive their table: reading them names the problem and reads nothing
    w.db.con.execute(f"DROP TABLE {q(name)}")
    w.fails(lambda: roles_of(w.db.con, name))
    w.fails(lambda: w.db.roles(name))
    w.check()


def test_missing_table_names_read_nothing(w):
    """A name that is no table is an error, never SQL: the issue's ANONYMIZE("p; checkpoint") and "p--x"."""
    w.ok(lambda: w.db.load_frame("p", people("age"), quasi_identifiers=["age"], sensitive=["job"]))
    anonymize = f"SELECT count(*) FROM ANONYMIZE({q(w.name)}, k := 2, quasi_identifiers := ['age'])"
    w.fails(lambda: w.db.sql(anonymize))  # a table function's input is a table, view or CTE: never a file
    if not w.name.endswith(".csv"):  # FROM "x.csv" in SQL the user writes is DuckDB's file scan, as in plain DuckDB
        w.fails(lambda: w.db.execute(f"SELECT id, getposition(*) AS pos FROM {q(w.name)}"))
    w.fails(lambda: w.db.declare_roles(w.name, quasi_identifiers=["age"]))
    w.fails(lambda: w.db.roles(w.name))
    rehearsal = ("CREATE TABLE junk AS SELECT 1 AS z; "
                 f"SELECT * FROM ANONYMIZE({q(w.name)}, k := 2, quasi_identifiers := ['age'])")
    w.fails(lambda: w.db.explain(rehearsal))
    w.check()


def test_explain_rehearsal_leaves_nothing_behind(w):
    w.ok(lambda: w.db.load_frame(w.name, people("age"), quasi_identifiers=["age"], sensitive=["job"]))
    rehearsal = ("CREATE TABLE junk AS SELECT 1 AS z; "
                 f"SELECT * FROM ANONYMIZE({q(w.name)}, k := 2, quasi_identifiers := ['age'])")
    plan = w.ok(lambda: w.db.explain(rehearsal))
    assert plan.reports and plan.reports[0]["operator"] == "ANONYMIZE"
    w.check()


# -------------------------------------------------------------------------------------------- table functions
def test_anonymize_by_name_and_by_subquery(w):
    name = col = w.name
    w.ok(lambda: w.db.load_frame(name, people(col), quasi_identifiers=[col], sensitive=["job"], key="id"))
    got = w.ok(lambda: w.db.sql(f"SELECT * FROM ANONYMIZE({q(name)}, k := 3, seed := 1)"))
    assert len(got) == 12 and "id" not in got.columns and got.groupby(col).size().min() >= 3
    assert (w.db.last_report[0]["key"], w.db.last_report[0]["key_dropped"]) == ("id", True)
    kept = w.ok(lambda: w.db.sql(f"SELECT * FROM ANONYMIZE((SELECT * FROM {q(name)}), k := 3, "
                                 f"quasi_identifiers := [{lit(col)}], keep_key := true)"))
    assert sorted(kept["id"]) == list(range(1, 13)) and kept.groupby(col).size().min() >= 3
    assert w.ok(lambda: w.db.execute(f"SELECT count(*) FROM ANONYMIZE({q(name)} , k := 4)").fetchall()) == [(12,)]
    w.check()


def test_truth_discover_by_name_and_by_subquery(w):
    name = col = w.name
    answers = pd.DataFrame([(f"t{t}", f"w{k}", "yes" if (t + (k == 4)) % 2 else "no")
                            for t in range(6) for k in range(5)], columns=[col, "worker", "label"])
    w.ok(lambda: w.db.load_frame(name, answers))
    args = f"object := {lit(col)}, source := 'worker', value := 'label', method := 'mv'"
    got = w.ok(lambda: w.db.sql(f"SELECT * FROM TRUTH_DISCOVER({q(name)}, {args}) ORDER BY object"))
    assert list(got["truth"]) == ["no", "yes"] * 3
    sub = w.ok(lambda: w.db.sql(f"SELECT * FROM TRUTH_DISCOVER((SELECT * FROM {q(name)}), {args}) ORDER BY object"))
    assert list(sub["truth"]) == list(got["truth"])
    w.check()


# ------------------------------------------------------------------------------------ views, CTEs, copies
def _base(w: World) -> str:
    """A table `base` whose quasi-identifier is named by the hostile name."""
    w.ok(lambda: w.db.load_frame("base", people(w.name), quasi_identifiers=[w.name], ground_truth="job", key="id"))
    return w.name


def _generalized(w: World, col: str) -> bool:
    """Every HIT published so far showed only ``col`` and sex, and ``col`` generalized (not all raw ages)."""
    published = _published(w)
    return bool(published) and all(set(item) <= {col, "sex"} for item in published) and \
        not all(item[col].isdigit() for item in published)


def test_views(w):
    name, col = w.name, _base(w)
    # the rows after the first two (ids 3..12): a view choosing them by the key would be refused (issue 24)
    w.ok(lambda: w.db.sql(f"CREATE VIEW {q(name)} AS SELECT * FROM base OFFSET 2"))
    assert w.ok(lambda: w.db.roles(name)).table == name
    got = w.ok(lambda: w.db.sql(f"SELECT id, getposition(*, k := 3) AS pos FROM {q(name)}"))
    assert len(got) == 10 and _generalized(w, col)
    released = w.ok(lambda: w.db.sql(f"SELECT * FROM ANONYMIZE({q(name)}, k := 3, seed := 1)"))
    assert "id" not in released.columns and released.groupby(col).size().min() >= 3
    w.check()


def test_ctes(w):
    name, col = w.name, _base(w)
    w.ok(lambda: w.db.sql(f"CREATE VIEW {q(name)} AS SELECT * FROM base WHERE id > 2"))
    got = w.ok(lambda: w.db.sql(f"WITH {q(name)} AS (SELECT * FROM base) "
                                f"SELECT id, getposition(*, k := 3) AS pos FROM {q(name)}"))
    assert len(got) == 12 and _generalized(w, col)  # the CTE, not the view of the same name
    released = w.ok(lambda: w.db.sql(f"WITH {q(name)} AS (SELECT * FROM base) SELECT * FROM ANONYMIZE({q(name)}, "
                                     "k := 3, seed := 1)"))
    assert "id" not in released.columns and len(released) == 12 and released.groupby(col).size().min() >= 3
    w.check()


def test_copies_and_renames_keep_roles(w):
    name, col = w.name, _base(w)
    w.ok(lambda: w.db.sql(f"CREATE VIEW {q(name)} AS SELECT * FROM base"))
    for source, copy, run in ((q("base"), f"{name} copy", w.db.sql), (q(name), f"{name} view copy", w.db.execute)):
        w.ok(lambda s=source, c=copy, r=run: r(f"CREATE TABLE {q(c)} AS SELECT * FROM {s} WHERE sex <> 'x--y'"))
        assert w.db.con.execute("SELECT count(*) FROM crowddb_columns WHERE table_name = ?", [copy]).fetchall()[0][0]
        roles = w.ok(lambda c=copy: w.db.roles(c))
        assert (roles.quasi_identifiers, roles.ground_truth, roles.key) == ((col,), "job", "id"), roles
    w.ok(lambda: w.db.sql(f"SELECT getposition(*, k := 3) AS pos FROM {q(name + ' copy')}"))
    assert _generalized(w, col)
    renamed = f"{name} renamed"
    w.ok(lambda: w.db.sql(f"ALTER TABLE {q(name + ' copy')} RENAME TO {q(renamed)}"))
    assert w.ok(lambda: w.db.roles(renamed)).quasi_identifiers == (col,)
    w.ok(lambda: w.db.sql(f"INSERT INTO {q(renamed)} SELECT * FROM base"))
    assert w.ok(lambda: w.db.roles(renamed)).ground_truth == "job"
    w.check()


def test_cli(w, capsys):
    w.ok(lambda: w.db.load_frame(w.name, people("age")))
    w.db.close()
    assert cli_main(["sql", f"SELECT count(*) AS n FROM {q(w.name)}", "--db", str(w.path)]) == 0
    assert "12" in capsys.readouterr().out
    assert cli_main(["sql", f"SELECT * FROM ANONYMIZE({q(w.name + 'x')}, k := 2)", "--db", str(w.path)]) == 2
    assert cli_main(["sql", "SELEC 1", "--db", str(w.path)]) == 2  # a DuckDB error: a message, not a traceback
    err = capsys.readouterr().err
    assert SECRET not in err and "crowddb:" in err
    w.db = crowddb.connect(w.path, progress=False)
    w.wal = 0  # closing a database checkpoints it: the WAL cannot tell here
    w.check()


# ----------------------------------------------------------------------- detection by tokens, not by text
@pytest.fixture
def adult(tmp_path):
    with crowddb.connect(platform=SimulatedCrowd(qualities=np.ones(10), seed=1), seed=3, progress=False) as db:
        db.load_frame("adult", people("age", 30), quasi_identifiers=["age", "sex"], ground_truth="job", key="id")
        yield db


def test_a_quote_or_dashes_in_a_name_hide_no_copy(adult):
    """The issue's `CREATE TABLE "bob's copy" AS SELECT * FROM adult`, with a literal after it."""
    adult.sql("""CREATE TABLE "bob's copy" AS SELECT * FROM adult WHERE sex <> 'none'""")
    adult.execute("""CREATE TABLE "a--b" AS SELECT id AS pid, age, job FROM adult""")
    assert adult.roles("bob's copy").ground_truth == "job" and adult.roles("bob's copy").key == "id"
    assert adult.roles("a--b").key == "pid" and adult.roles("a--b").ground_truth == "job"
    got = adult.sql("""SELECT c.id, getposition(c.age, c.sex, k := 3) AS pos FROM "bob's copy" c""").df()
    assert len(got) == 30
    published = [json.loads(c) for (c,) in adult.sql("SELECT content FROM crowddb_hit_items").fetchall()]
    assert all(set(item) == {"age", "sex"} for item in published)  # no job, no id
    assert not all(item["age"].isdigit() for item in published)  # ages generalized, not raw


@pytest.mark.parametrize("select", [
    """SELECT "it's", getposition(*, k := 2) AS p FROM "it's" """,
    """SELECT "a--b", getposition(*, k := 2) AS p FROM "it's" """,
    """SELECT "it's" /* 'x */, getposition /* ( */ (*, k := 2) AS p FROM "it's" -- getposition(""",
    """SELECT "it's", GETPOSITION (*, k := 2) AS p FROM "it's" WHERE 'getposition(' <> $$ANONYMIZE($$""",
])
def test_an_operator_behind_quotes_or_comments_is_found(adult, select):
    frame = people("it's").assign(**{"a--b": 1})
    adult.load_frame("it's", frame, quasi_identifiers=["it's"], ground_truth="job")
    got = adult.sql(select).df()
    assert len(got) == 12 and got["p"].notna().all()


@pytest.mark.parametrize("text", [
    "SELECT 'getposition(*)' AS s",
    "SELECT $$ANONYMIZE(adult)$$ AS s",
    "SELECT 1 AS s -- getposition(*)",
    "SELECT 1 AS \"getposition(*)\"",
    "SELECT 1 AS getposition",
])
def test_operator_names_in_literals_comments_and_names_are_plain_sql(adult, text):
    assert len(adult.sql(text).fetchall()) == 1
    assert adult.explain(text).operators == []


def test_a_statement_crowddb_cannot_read_is_refused_while_roles_are_declared(adult):
    pivot = "CREATE TABLE by_sex AS PIVOT adult ON sex USING count(*)"
    with pytest.raises(PrivacyError, match="declare_roles"):
        adult.sql(pivot)
    with pytest.raises(PrivacyError, match="roles"):
        adult.execute(pivot)
    assert not adult.sql("SELECT 1 FROM duckdb_tables() WHERE table_name = 'by_sex'").fetchall()
    adult.con.execute(pivot)  # the way round it the message names
    adult.sql("DELETE FROM crowddb_columns")  # nothing declared: DuckDB judges the SQL itself
    adult.sql("CREATE TABLE by_sex_2 AS PIVOT adult ON sex USING count(*)")
    assert adult.sql("SELECT count(*) FROM by_sex_2").fetchall() == [(30,)]


@pytest.mark.parametrize("statement", [
    "EXPLAIN ANALYZE CREATE TABLE c AS SELECT * FROM adult",  # sqlglot keeps what follows EXPLAIN as one string
    "PREPARE fill AS INSERT INTO t SELECT * FROM adult",
    "CREATE TABLE c AS PIVOT adult ON sex USING count(*)",
])
def test_a_copy_behind_a_command_sqlglot_does_not_parse_is_refused(adult, statement):
    adult.con.execute("CREATE TABLE t (id BIGINT, age BIGINT, sex VARCHAR, job VARCHAR)")
    with pytest.raises(PrivacyError, match="crowddb refuses this (EXPLAIN|PREPARE|MULTI) statement while roles"):
        adult.sql(statement)
    assert not adult.sql("SELECT 1 FROM duckdb_tables() WHERE table_name = 'c'").fetchall()
    assert not adult.sql("SELECT 1 FROM duckdb_prepared_statements() WHERE name = 'fill'").fetchall()


def test_text_the_tokenizer_cannot_read_is_refused_when_it_names_an_operator(adult):
    with pytest.raises(SQLParseError, match="getposition"):
        adult.sql("SELECT getposition(*) FROM adult WHERE sex = 'F")
    with pytest.raises(Exception) as raised:  # no operator named: DuckDB's own error, as for any plain SQL
        adult.sql("SELECT 'F")
    assert not isinstance(raised.value, SQLParseError)


def test_an_unknown_function_is_still_reported(adult):
    with pytest.raises(UnknownOperatorError):
        adult.sql("SELECT getpositon(*) FROM adult")


def test_load_frame_takes_frames_only(adult):
    with pytest.raises(ArgumentError, match="pandas DataFrame"):
        adult.load_frame("t", [1, 2, 3])
    with pytest.raises(ArgumentError, match="pandas DataFrame"):
        adult.load_frame("t", {"a": [1]})
    pa = pytest.importorskip("pyarrow")
    adult.load_frame("arrow", pa.table({"a": [1, 2]}))
    adult.load_frame("rel", adult.con.sql("SELECT 1 AS a"))
    assert adult.sql("SELECT count(*) FROM arrow, rel").fetchall() == [(2,)]
