"""ANONYMIZE prints a sensitive column as it is, as k-anonymity publishes it; a column whose values may hold a
quasi-identifier's besides a protected value (concat(edu, secret), a CASE over both, a quasi-identifier equated with
a secret, a column a UNION ... BY NAME misaligns, one of unknown lineage) is withheld from the release and named in
the report, unless the call generalizes it as a quasi-identifier. Before, such a column was judged "withheld" (as
sensitive) and so printed raw: the quasi-identifier beside its class."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest
from pycanon import anonymity

import crowddb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_privacy_grammar import ROLES, canary_frame

K = 5
BASE = "SELECT id, age, sex, edu, city, hobby, note"

CASES = [
    # (the input, the release's columns, the columns withheld)
    (f"{BASE}, concat(edu, secret) AS x FROM canary", ["age", "sex", "edu", "city", "hobby", "note"], ["x"]),
    ("SELECT id, age, sex, city, CASE WHEN secret = 'a' THEN 0 ELSE edu END AS x FROM canary",
     ["age", "sex", "city"], ["x"]),
    ("SELECT a.id, a.age, a.sex, a.edu, a.city FROM canary a LEFT JOIN canary b ON CAST(a.edu AS VARCHAR) = b.secret",
     ["age", "sex", "city"], ["edu"]),
    ((f"{BASE} FROM canary WHERE age < 40 UNION ALL BY NAME "
      "SELECT id, age, sex, secret AS city, edu, hobby, note FROM canary WHERE age >= 40"),
     ["age", "sex", "hobby", "note"], ["edu", "city"]),
    ("WITH c AS (SELECT id, age, sex, edu, concat(edu, secret) AS x FROM canary) SELECT * FROM c",
     ["age", "sex", "edu"], ["x"]),
    # not mixed: a sensitive copy is printed as it is, a column of a quasi-identifier alone is one
    (f"{BASE}, secret FROM canary", ["age", "sex", "edu", "city", "hobby", "note", "secret"], []),
    (f"{BASE}, edu + 0 AS x FROM canary", ["age", "sex", "edu", "city", "hobby", "note", "x"], []),
]


def _release(query: str, extra: str = "") -> tuple[pd.DataFrame, dict]:
    with crowddb.connect(seed=1, progress=False) as db:
        db.load_frame("canary", canary_frame(), **ROLES)
        got = db.sql(f"SELECT * FROM ANONYMIZE(({query}), k := {K}{extra})").df()
        return got, db.last_report[0]


def _k_over_quasi_identifiers(release: pd.DataFrame) -> int:
    """pycanon's k over the release's columns named as the canary's quasi-identifiers (what a reader links on)."""
    qis = [c for c in release.columns if c in ROLES["quasi_identifiers"]]
    return anonymity.k_anonymity(release.astype(str), qis) if qis else len(release)


@pytest.mark.parametrize(("query", "columns", "withheld"), CASES)
def test_a_column_mixing_a_quasi_identifier_with_a_protected_value_is_withheld(query, columns, withheld):
    release, report = _release(query)
    assert list(release.columns) == columns
    assert sorted(report.get("withheld", {})) == sorted(withheld)
    assert len(release) == 60 and _k_over_quasi_identifiers(release) >= K
    assert not release.astype(str).apply(lambda c: c.str.contains(r"^\d+MARKER")).any().any()


def test_a_mixed_column_named_a_quasi_identifier_is_generalized_instead():
    release, report = _release(f"{BASE}, concat(edu, secret) AS x FROM canary",
                               ", quasi_identifiers := ['age', 'sex', 'edu', 'x']")
    assert "withheld" not in report and "x" in release.columns
    assert anonymity.k_anonymity(release.astype(str), ["age", "sex", "edu", "x"]) >= K
