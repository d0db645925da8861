"""Bad input (issue 12): each gets a crowddb.errors error naming the problem and the fix, raised before anything is
published or paid, with the database unchanged (every table, crowddb_* included, compared row by row)."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pandas as pd
import pytest
from conftest import people_frame

import crowddb
from crowddb.cli import main as cli_main
from crowddb.crowd.knowledge import KnowledgeBase
from crowddb.errors import ArgumentError, CrowdDBError
from crowddb.udf import check_override

ROLES = {"quasi_identifiers": ["age", "sex", "zip"], "sensitive": ["salary"], "ground_truth": "job", "key": "id"}


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A database file with people, people whose ground truth is all NULL, crowd answers, and one bought query."""
    path = tmp_path_factory.mktemp("bad_inputs") / "template.duckdb"
    with crowddb.connect(path, seed=3, progress=False) as db:
        db.load_frame("people", people_frame(), **ROLES)
        db.load_frame("people_no_truth", people_frame().assign(job=pd.Series([None] * 60, dtype=object)), **ROLES)
        db.sql(
            "CREATE TABLE answers AS SELECT i % 5 AS task, i % 7 AS worker, "
            "CASE WHEN i % 3 = 0 THEN 'a' ELSE 'b' END AS label, (i % 4) * 1.0 AS num FROM range(70) t(i)"
        )
        db.sql("SELECT id, getposition(*) FROM people WHERE age < 40").fetchall()
    return path


@pytest.fixture
def db(template, tmp_path):
    path = tmp_path / "db.duckdb"
    shutil.copy(template, path)
    with crowddb.connect(path, seed=3, progress=False) as con:
        yield con


def snapshot(db) -> dict:
    """Every table's full contents (sorted rows), and the registered operators."""
    tables = db.con.execute(
        "SELECT database_name, schema_name, table_name FROM duckdb_tables() ORDER BY ALL"
    ).fetchall()
    out = {}
    for database, schema, table in tables:
        name = ".".join('"' + part.replace('"', '""') + '"' for part in (database, schema, table))
        out[(database, schema, table)] = sorted(db.con.execute(f"SELECT * FROM {name}").fetchall(), key=repr)
    out["operators"] = {name: db.registry.get(name) for name in db.registry.names()}
    return out


def _udf(**changes):
    """register_udf with a well-formed definition, one field changed."""
    definition = {
        "name": "fits",
        "kind": "tuple",
        "question": "Does this person fit the job {job}?",
        "arguments": [{"name": "job", "type": "VARCHAR"}],
        "domain": ["yes", "no"],
    }
    definition.update(changes)
    return lambda db, tmp: db.register_udf(definition)


def _empty_folder(db, tmp):
    (tmp / "no_udfs").mkdir()
    db.register_udf(tmp / "no_udfs")


def _empty_csv(db, tmp):
    (tmp / "empty.csv").write_bytes(b"")
    db.load_csv("empty", tmp / "empty.csv")


def _sql(query, params=None):
    return lambda db, tmp: db.sql(query, params).fetchall()


TD = "SELECT * FROM TRUTH_DISCOVER(answers, object := 'task', source := 'worker', value := {value}{more})"
PS = "SELECT * FROM PRIVATE_SYNTH(answers, object := 'task', source := 'worker', value := 'num'{more})"


def case(name, bad, error, phrase):
    """One row: its id, the bad call (db, tmp_path), the error class, a phrase of its message."""
    return pytest.param(bad, error, phrase, id=name)


CASES = [
    # connect()
    case(
        "connect budget text", lambda db, tmp: crowddb.connect(budget="ten"), ArgumentError, "budget must be a number"
    ),
    case("connect budget NaN", lambda db, tmp: crowddb.connect(budget=float("nan")), ArgumentError, "finite"),
    case("connect budget inf", lambda db, tmp: crowddb.connect(budget=math.inf), ArgumentError, "finite"),
    case(
        "connect platform text",
        lambda db, tmp: crowddb.connect(platform="mturk"),
        ArgumentError,
        "crowddb.Platform instance",
    ),
    case(
        "connect unknown option",
        lambda db, tmp: crowddb.connect(foo=1),
        ArgumentError,
        "unknown option 'foo'; accepted: database, platform, seed, budget",
    ),
    case("connect negative seed", lambda db, tmp: crowddb.connect(seed=-1), ArgumentError, "non-negative integer"),
    # seeds and overrides of a human operator call
    case(
        "getposition seed -1",
        _sql("SELECT getposition(*, seed := -1) FROM people"),
        ArgumentError,
        "non-negative integers",
    ),
    case(
        "getposition budget inf",
        _sql("SELECT getposition(*, budget := 1e999) FROM people"),
        ArgumentError,
        "budget := inf must be a finite number",
    ),
    case(
        "getposition method bogus",
        _sql("SELECT getposition(*, method := 'bogus') FROM people"),
        ArgumentError,
        "aggregation method 'bogus'",
    ),
    case(
        "getposition numeric method",
        _sql("SELECT getposition(*, method := 'mean') FROM people"),
        ArgumentError,
        "aggregation method 'mean'",
    ),
    # table functions
    case(
        "TRUTH_DISCOVER seed -1",
        _sql(TD.format(value="'num'", more=", perturb := 'laplace', epsilon := 1.0, seed := -1")),
        ArgumentError,
        "seed := -1 must be at least 0 (seeds are non-negative integers)",
    ),
    case("PRIVATE_SYNTH seed -1", _sql(PS.format(more=", seed := -1")), ArgumentError, "non-negative"),
    case("ANONYMIZE seed -1", _sql("SELECT * FROM ANONYMIZE(people, seed := -1)"), ArgumentError, "non-negative"),
    case(
        "PRIVATE_SYNTH epsilon inf",
        _sql(PS.format(more=", epsilon := $1"), [math.inf]),
        ArgumentError,
        "epsilon := inf must be a finite number",
    ),
    case(
        "PRIVATE_SYNTH epsilon NaN",
        _sql(PS.format(more=", epsilon := $1"), [math.nan]),
        ArgumentError,
        "must be a finite number",
    ),
    case(
        "TRUTH_DISCOVER rr epsilon NaN",
        _sql(TD.format(value="'label'", more=", perturb := 'rr', epsilon := $1"), [math.nan]),
        ArgumentError,
        "must be a finite number",
    ),
    # operator definitions
    case("udf tuples_per_hit text", _udf(tuples_per_hit="ten"), ArgumentError, "tuples_per_hit must be an integer"),
    case("udf tuples_per_hit None", _udf(tuples_per_hit=None), ArgumentError, "tuples_per_hit must be an integer"),
    case("udf reward text", _udf(reward="0.2"), ArgumentError, "reward must be a finite number"),
    case("udf reward NaN", _udf(reward=math.nan), ArgumentError, "reward must be a finite number"),
    case("udf not a definition", lambda db, tmp: db.register_udf(42), ArgumentError, "register_udf takes"),
    case("udf k text", _udf(k="ten"), ArgumentError, "k must be an integer"),
    case("udf arguments text", _udf(arguments="job"), ArgumentError, "arguments must be a list"),
    case(
        "udf argument without name", _udf(arguments=[{"type": "VARCHAR"}]), ArgumentError, "each argument needs a name"
    ),
    case("udf aggregation bogus", _udf(aggregation="bogus"), ArgumentError, "aggregation method 'bogus'"),
    case(
        "udf question names a missing argument",
        _udf(question="Fits {job} and {nope}?"),
        ArgumentError,
        "the question names {nope}",
    ),
    case("udf named anonymize", _udf(name="anonymize"), ArgumentError, "taken by the table function ANONYMIZE"),
    case("udf named TRUTH_DISCOVER", _udf(name="Truth_Discover"), ArgumentError, "taken by the table function"),
    case("udf named private_synth", _udf(name="PRIVATE_SYNTH"), ArgumentError, "taken by the table function"),
    case(
        "udf empty folder", _empty_folder, ArgumentError, "no human operator definitions (*.toml files) in the folder"
    ),
    # loading data
    case(
        "load_frame of a list",
        lambda db, tmp: db.load_frame("t", [1, 2, 3]),
        ArgumentError,
        "load_frame takes a pandas DataFrame",
    ),
    case("load_csv of an empty file", _empty_csv, ArgumentError, "empty.csv is empty"),
    case(
        "ground truth all NULL",
        _sql("SELECT getposition(*) FROM people_no_truth"),
        ArgumentError,
        "ground-truth column",
    ),
]


@pytest.mark.parametrize("bad, error, phrase", CASES)
def test_bad_input_is_refused_and_changes_nothing(db, tmp_path, bad, error, phrase):
    before = snapshot(db)
    with pytest.raises(error) as raised:
        bad(db, tmp_path)
    assert phrase in str(raised.value), str(raised.value)
    assert snapshot(db) == before


def test_cases_are_crowddb_errors():
    assert all(issubclass(c.values[1], CrowdDBError) for c in CASES)


def test_a_refused_name_leaves_the_table_function_working(db):
    with pytest.raises(ArgumentError):
        db.register_udf({"name": "anonymize", "kind": "tuple", "question": "?", "domain": ["a", "b"]})
    # other people than people's (a copy of people shares its ledger, where a crowd run is on record)
    db.load_frame("people_copy", people_frame(), quasi_identifiers=["age", "sex", "zip"], key="id")
    assert len(db.sql("SELECT * FROM ANONYMIZE(people_copy, k := 5)").fetchall()) == 60


@pytest.mark.parametrize(
    "name, value, phrase",
    [
        ("seed", -1, "non-negative"),
        ("k", 1, "at least 2"),
        ("assignments", 0, "at least 1"),
        ("tuples_per_hit", 0, "at least 1"),
        ("budget", -0.5, "at least 0"),
        ("budget", math.nan, "finite"),
        ("budget", math.inf, "finite"),
        ("reward", math.nan, "finite"),
        ("reward", -1, "at least 0"),
        ("fee", -0.1, "at least 0"),
        ("fee", math.nan, "finite"),
        ("sample_ratio", 0, "(0, 1]"),
        ("sample_ratio", 1.5, "(0, 1]"),
        ("cell_limit", 0, "at least 1"),
        ("method", "bogus", "aggregation method"),
        ("anonymizer", "kanon", "anonymizer := 'kanon' must be one of"),
        ("domain", ["yes"], "two distinct"),
        ("k", "ten", "must be an integer"),
        ("nope", 1, "unknown argument"),
    ],
)
def test_check_override_refuses_out_of_range_values(name, value, phrase):
    with pytest.raises(ArgumentError) as raised:
        check_override(name, value)
    assert phrase in str(raised.value)


@pytest.mark.parametrize(
    "name, value",
    [
        ("seed", 0),
        ("k", 2),
        ("budget", 0),
        ("budget", 2.5),
        ("fee", 0.3),
        ("sample_ratio", 1),
        ("method", "DS"),
        ("method", "auto"),
        ("domain", ["yes", "no"]),
        ("anonymizer", "fka"),
    ],
)
def test_check_override_accepts_values_in_range(name, value):
    check_override(name, value)


def test_a_published_float_column_with_nan_and_inf_is_answered(db):
    frame = people_frame()
    score = (frame["age"] * 1.5).astype(float)
    score[::7] = np.nan
    score[3], score[4] = np.inf, -np.inf
    db.load_frame("scored", frame.assign(score=score), **ROLES)
    got = db.sql("SELECT id, getposition(*) AS job FROM scored ORDER BY id").df()
    assert len(got) == 60 and got["job"].notna().all()
    shown = [c for (c,) in db.sql("SELECT content FROM crowddb_hit_items").fetchall() if '"score":"*"' in c]
    assert shown  # a NaN is published as '*' (nothing known)


def test_knowledge_base_treats_non_finite_numbers_as_missing():
    frame = pd.DataFrame({"x": [1.0, 2.0, np.nan, np.inf, 10.0], "y": [np.nan] * 5, "c": list("aabba")})
    kb = KnowledgeBase(frame, np.array(["one", "two", "nan", "inf", "ten"], dtype=object))
    shown = pd.DataFrame(
        {"x": ["1", "[9-11]", "*", "nan", "inf"], "y": ["*", "1", "nan", "*", "*"], "c": ["a", "a", "*", "b", "a"]}
    )
    got = kb.sample(shown, 20, np.random.default_rng(0))
    assert got.shape == (5, 20)
    assert (got[0] == "one").all() and (got[1] == "ten").all()  # known values beat records missing one
    assert set(got[3]) <= {"two", "nan", "inf"}  # only 'b' records, whatever x is


@pytest.mark.parametrize(
    "argv, phrase",
    [
        (["sql", "SELEC 1 FRM"], "syntax error"),
        (["sql", "SELECT * FROM nope"], "nope does not exist"),
        (["sql", "SELECT getposition(*) FROM nope"], "nope does not exist"),
        (["explain", "SELECT getposition(*, FROM people"], "syntax error at or near"),
        (["sql", "SELECT 1", "--budget", "nan"], "budget must be a finite number"),
    ],
)
def test_cli_prints_one_line_and_exits_2(capsys, argv, phrase):
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("crowddb: ") and phrase in err
    assert len(err.strip().splitlines()) == 1, err
