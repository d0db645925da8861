"""Issue 24: ANONYMIZE's arguments may add to the declared roles, never drop them.

``quasi_identifiers := [...]`` adds columns to the declared quasi-identifiers (the effective ones are the union);
a list that leaves a declared one out no longer releases it raw. The key is left out of the release unless
``keep_key := true`` (documented: for the requester's own joins) or the call generalizes it as a quasi-identifier;
measuring l-diversity on it (``sensitive := 'id'``) no longer keeps it.

Each release is judged by the independent scanner (tests/privacy_scanner.py), over the people it was computed from:
no class of the declared quasi-identifiers below k, no key in it.
"""

from __future__ import annotations

import pandas as pd
import pytest
from privacy_scanner import items_from_frame, leaked_protected, small_classes

import crowddb
from crowddb.datasets import adult_path
from crowddb.errors import UnknownColumnError

QIS = ["age", "sex", "education_num"]
ROLES = {"quasi_identifiers": QIS, "sensitive": ["occupation"], "ground_truth": "occupation", "key": "id",
         "core": ["age", "sex", "education_num", "workclass", "hours_per_week"]}
OLD = "(SELECT * FROM adult WHERE age > 75)"
K = 5


@pytest.fixture(scope="module")
def old_people() -> pd.DataFrame:
    frame = pd.read_csv(adult_path())
    return frame[frame["age"] > 75].reset_index(drop=True)


@pytest.fixture
def db():
    with crowddb.connect(seed=7, progress=False) as con:
        con.load_csv("adult", adult_path(), **ROLES)
        yield con


def release(db, args: str = "") -> pd.DataFrame:
    return db.sql(f"SELECT * FROM ANONYMIZE({OLD}, k := {K}{', ' + args if args else ''})").df()


def assert_k_anonymous(frame: pd.DataFrame, people: pd.DataFrame, qis: list[str]) -> None:
    items = items_from_frame(frame)
    small = small_classes(items, people, qis, K)
    assert len(small) == 0, small.head()
    assert not [f for f in leaked_protected(items, people, [], "id") if f["kind"] != "protected"]
    assert "id" not in frame.columns


@pytest.mark.parametrize("given", [
    "['age']", "['age', 'sex']", "[]", "['AGE', 'SEX', 'EDUCATION_NUM']", "['age', 'age']", "['workclass']",
])
def test_a_given_list_adds_to_the_declared_quasi_identifiers(db, old_people, given):
    # (an added quasi-identifier cuts other classes: released after the default release, the guard of k-anonymity
    # across releases would refuse it; it is compared with nothing)
    default = release(db, "seed := 1") if "workclass" not in given else None
    frame = release(db, f"quasi_identifiers := {given}, seed := 1")
    assert_k_anonymous(frame, old_people, QIS)
    report = db.last_report[0]
    effective = {*QIS, *(["workclass"] if "workclass" in given else [])}
    over = report["guarantee"].removeprefix(f"{K}-anonymity over ")
    assert set(eval(over)) == effective and len(eval(over)) == len(effective)  # each once, as the input spells it
    assert sorted(report["declared_quasi_identifiers"]) == sorted(QIS)
    if default is not None:  # the declared ones were generalized as without the argument: the same release
        pd.testing.assert_frame_equal(frame, default)


def test_an_added_quasi_identifier_is_generalized_with_the_declared_ones(db, old_people):
    frame = release(db, "quasi_identifiers := ['workclass']")
    assert_k_anonymous(frame, old_people, [*QIS, "workclass"])
    assert frame.groupby([*QIS, "workclass"]).size().min() >= K


def test_an_unknown_quasi_identifier_is_still_an_error(db):
    with pytest.raises(UnknownColumnError, match=r"unknown quasi-identifier\(s\) \['nonexistent'\]"):
        release(db, "quasi_identifiers := ['nonexistent']")


def test_diversity_measured_on_the_key_leaves_the_key_out(db, old_people):
    frame = release(db, "sensitive := 'id', l := 2")
    assert "id" not in frame.columns and db.last_report[0]["key_dropped"] is True
    assert_k_anonymous(frame, old_people, QIS)


def test_keep_key_keeps_it_as_documented(db, old_people):
    kept = release(db, "keep_key := true")  # the requester's own joins
    assert sorted(kept["id"]) == sorted(old_people["id"]) and db.last_report[0]["key_dropped"] is False


def test_a_key_given_as_a_quasi_identifier_is_generalized(db):
    generalized = release(db, "quasi_identifiers := ['id']")
    assert db.last_report[0]["key_dropped"] is False
    assert generalized.groupby([*QIS, "id"]).size().min() >= K
