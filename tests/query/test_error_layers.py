"""Algorithm layers raise errors that name methods and Python arguments, never SQL functions; the SQL layer (a table
function, a human operator) puts its own name in front, keeping the error's class (issue 14, item 3)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from conftest import people_frame

import crowddb
from crowddb.crowd import SimulatedCrowd
from crowddb.crowd.platform import Collected
from crowddb.errors import ArgumentError, EmptyInputError, PrivacyError
from crowddb.synth import synthesize
from crowddb.truth import discover

SQL_NAMES = re.compile(r"TRUTH_DISCOVER|PRIVATE_SYNTH|ANONYMIZE|:=")

LABELS = pd.DataFrame({"o": ["a", "a", "b"], "s": ["x", None, "y"], "v": ["yes", "no", "yes"]})  # a NULL source
CLAIMS = pd.DataFrame({"o": ["a"] * 6, "s": list("uvwxyz"), "v": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]})

TRUTH_MSG = "mv: 1 answers have a NULL source"
SYNTH_MSG = "t must satisfy 1 <= t < k (Theorem 2), got t=5, k=5"


def _raised(call, cls):
    with pytest.raises(cls) as info:
        call()
    assert type(info.value) is cls  # the same class, not a parent or a wrapper
    return info.value


@pytest.fixture
def sql_db():
    with crowddb.connect(seed=1, progress=False) as db:
        db.load_frame("labels", LABELS)
        db.load_frame("claims", CLAIMS)
        db.load_frame("holes", CLAIMS.assign(v=[1.0, None, 3.0, 4.0, 5.0, 6.0]))
        yield db


# (a) the Python API names no SQL function
def test_python_discover_error_names_the_method_not_sql():
    err = _raised(lambda: discover(LABELS, "o", "s", "v", method="mv"), ArgumentError)
    assert str(err) == TRUTH_MSG and not SQL_NAMES.search(str(err))


def test_python_synthesize_error_names_the_argument_not_sql():
    err = _raised(lambda: synthesize(CLAIMS["o"], CLAIMS["s"], CLAIMS["v"], t=5, k=5), ArgumentError)
    assert str(err) == SYNTH_MSG and not SQL_NAMES.search(str(err))
    err = _raised(lambda: synthesize(["a", "a"], ["x", "y"], [1.0, np.nan]), ArgumentError)
    assert str(err) == ("1 claim value(s) are NaN or infinite; filter them first "
                        "(e.g. keep only the claims where np.isfinite(value))")


# (b) the same bad input through SQL: the same class, the table function's name in front, no chained traceback
def test_sql_truth_discover_prefixes_its_name(sql_db):
    err = _raised(lambda: sql_db.sql("SELECT * FROM TRUTH_DISCOVER(labels, object := 'o', source := 's', "
                                     "value := 'v', method := 'mv')"), ArgumentError)
    assert str(err) == f"TRUTH_DISCOVER: {TRUTH_MSG}"
    assert err.__cause__ is None and err.__suppress_context__


def test_sql_private_synth_prefixes_its_name(sql_db):
    err = _raised(lambda: sql_db.sql("SELECT * FROM PRIVATE_SYNTH(claims, object := 'o', source := 's', "
                                     "value := 'v', t := 5, k := 5)"), ArgumentError)
    assert str(err) == f"PRIVATE_SYNTH: {SYNTH_MSG}"
    assert err.__cause__ is None and err.__suppress_context__


def test_sql_layer_gives_sql_hints_itself(sql_db):
    """Where the algorithm layer's hint is Python (perturb=..., dropna=True, np.isfinite), the SQL layer checks first."""
    err = _raised(lambda: sql_db.sql("SELECT * FROM TRUTH_DISCOVER(labels, object := 'o', source := 's', "
                                     "value := 'v', epsilon := 1)"), PrivacyError)
    assert str(err) == ("TRUTH_DISCOVER: epsilon/delta were given but no perturb mechanism; pass "
                        "perturb := 'laplace'|'rr'|'mf'|'gaussian'")
    err = _raised(lambda: sql_db.sql("SELECT * FROM TRUTH_DISCOVER(holes, object := 'o', source := 's', "
                                     "value := 'v')"), ArgumentError)
    assert str(err) == ("TRUTH_DISCOVER: 1 answers have a NULL/NaN value (first on object 'a'); filter them out "
                        "(e.g. WHERE \"v\" IS NOT NULL)")
    err = _raised(lambda: sql_db.sql("SELECT * FROM PRIVATE_SYNTH(holes, object := 'o', source := 's', "
                                     "value := 'v')"), ArgumentError)
    assert str(err) == ("PRIVATE_SYNTH: 1 claim value(s) are NaN or infinite; filter them first "
                        "(e.g. WHERE isfinite(\"v\"))")


# (c) a human operator whose aggregation fails names the operator, not TRUTH_DISCOVER
class SilentCrowd(SimulatedCrowd):
    """Assignments are submitted but carry no answers: the aggregation has nothing to aggregate."""

    def collect(self, hit_ids, *, progress=None):
        got = super().collect(hit_ids, progress=progress)
        return Collected(got.assignments, got.answers.iloc[:0])


def test_human_operator_aggregation_error_names_the_operator():
    with crowddb.connect(platform=SilentCrowd(qualities=np.ones(10), seed=1), seed=3, progress=False) as db:
        db.load_frame("people", people_frame(), sensitive=["salary"], ground_truth="job", key="id")
        err = _raised(lambda: db.sql("SELECT getposition(age, edu) FROM people"), EmptyInputError)
    assert str(err) == "getposition: aggregating the answers: mv: the input has no answers"
    assert not SQL_NAMES.search(str(err))
    assert err.__cause__ is None and err.__suppress_context__
