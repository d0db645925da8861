"""The one binder of named arguments (crowddb/arguments.py): what each declared constraint refuses, word for word,
and that a human operator's overrides and a table function's arguments are checked by it alike."""

from __future__ import annotations

import doctest
import math

import pytest

import crowddb
from crowddb import arguments
from crowddb.arguments import NUMBER, REQUIRED, Param, bind
from crowddb.errors import ArgumentError

PARAMS = {
    "k": Param(int, 10, minimum=2),
    "rate": Param(NUMBER, 0.5, check=lambda v: None if v <= 1 else "rate is a share"),
    "mode": Param(str, "a", choices=("a", "b")),
    "name": Param(str, REQUIRED),
    "strict": Param(bool, True),
    "seed": Param(int, None, minimum=0, hint=" (seeds are non-negative integers)"),
    "given": Param(list, None, nullable=False),
}


def test_defaults_and_given_values():
    assert bind("F", {"name": "x", "k": 3, "rate": 1}, PARAMS) == {
        "k": 3, "rate": 1, "mode": "a", "name": "x", "strict": True, "seed": None, "given": None}
    assert bind("F", {"name": "x", "seed": None}, PARAMS)["seed"] is None  # NULL leaves the default


@pytest.mark.parametrize(("named", "message"), [
    ({"name": "x", "k": "3"}, "F: k := '3' must be an integer"),
    ({"name": "x", "k": 2.0}, "F: k := 2.0 must be an integer"),
    ({"name": "x", "k": True}, "F: k := True must be an integer"),
    ({"name": "x", "k": 1}, "F: k := 1 must be at least 2"),
    ({"name": "x", "seed": -1}, "F: seed := -1 must be at least 0 (seeds are non-negative integers)"),
    ({"name": "x", "rate": 1.5}, "F: rate := 1.5: rate is a share"),
    ({"name": "x", "rate": math.inf}, "F: rate := inf must be a finite number (NaN and infinity are not values of "
                                      "any argument); leave the argument out for its default"),
    ({"name": "x", "given": [1.0, math.nan]}, "F: given := [1.0, nan] must be made of finite numbers"),
    ({"name": "x", "given": None}, "F: given := None must be a list"),
    ({"name": "x", "mode": "c"}, "F: mode := 'c' must be one of ['a', 'b']"),
    ({"name": "x", "strict": 1}, "F: strict := 1 must be true/false"),
    ({"name": 3}, "F: name := 3 must be a string"),
    ({}, "F: missing argument name := ..."),
    ({"name": "x", "nope": 1}, "F: unknown argument ['nope']; allowed: ['given', 'k', 'mode', 'name', 'rate', "
                               "'seed', 'strict']"),
    ({"name": "x", "a": 1, "b": 2}, "F: unknown arguments ['a', 'b']"),
])
def test_refusals_name_the_argument_the_value_and_the_rule(named, message):
    with pytest.raises(ArgumentError) as raised:
        bind("F", named, PARAMS)
    assert str(raised.value).startswith(message)


def test_docstring_example_runs():
    assert doctest.testmod(arguments).failed == 0


def test_operators_and_table_functions_speak_alike():
    with crowddb.connect(seed=1, progress=False) as db:
        db.execute("CREATE TABLE t AS SELECT range AS id, range % 50 AS age FROM range(20)").fetchall()
        with pytest.raises(ArgumentError, match=r"^getposition\(\.\.\.\): k := 1 must be at least 2$"):
            db.sql("SELECT getposition(*, k := 1, domain := ['a', 'b']) FROM t")
        with pytest.raises(ArgumentError, match=r"^ANONYMIZE: k := 'x' must be an integer$"):
            db.sql("SELECT * FROM ANONYMIZE(t, k := 'x', quasi_identifiers := ['age'])")
        with pytest.raises(ArgumentError, match=r"^ANONYMIZE: seed := -3 must be at least 0 \(seeds are non-negative"):
            db.sql("SELECT * FROM ANONYMIZE(t, seed := -3, quasi_identifiers := ['age'])")
