"""ANONYMIZE through SQL is the algorithm's release, row for row: DuckDB joins the input with each row's class and
each class's labels, and the rows come in the documented shuffle (numpy's permutation of the seed).

The reference is computed here without SQL: ``anonymize()`` on the whole input as pandas, then ``iloc[order]``, the
key dropped; column types other than the generalized quasi-identifiers are the input's own."""

from __future__ import annotations

import datetime

import numpy as np
import pandas as pd
import pytest

import crowddb
from crowddb.anonymize import anonymize

from conftest import people_frame

CASES = [
    ("mondrian", "k := 6", dict(k=6)),
    ("mondrian-relaxed", "k := 5, strict := false", dict(k=5, strict=False)),
    ("l-diverse", "k := 4, sensitive := 'hobby', l := 2", dict(k=4, sensitive="hobby", l=2)),
    ("datafly", "k := 6, method := 'datafly'", dict(k=6, method="datafly")),
    ("incognito", "k := 6, method := 'incognito'", dict(k=6, method="incognito")),
]


def _reference(frame: pd.DataFrame, qi: list[str], seed: int, key: str | None, **kw) -> pd.DataFrame:
    release = anonymize(frame, qi, seed=seed, **kw)
    order = np.random.default_rng(seed).permutation(len(frame))
    table = release.table.iloc[order].reset_index(drop=True)
    return table.drop(columns=[key]) if key else table


@pytest.mark.parametrize(("name", "sql_args", "kw"), CASES, ids=[c[0] for c in CASES])
def test_sql_release_is_the_algorithms_release(db, name, sql_args, kw):
    frame = people_frame()
    got = db.sql(f"SELECT * FROM ANONYMIZE(people, {sql_args}, seed := 11)").df()
    expected = _reference(frame, ["age", "sex", "zip"], 11, "id", **kw)
    assert list(got.columns) == list(expected.columns)
    for column in got.columns:
        assert got[column].astype(str).tolist() == expected[column].astype(str).tolist(), column


def test_untouched_columns_keep_their_types_and_order(db):
    db.execute("CREATE TABLE typed AS SELECT id, age, sex, zip, DATE '2020-01-01' + CAST(id AS INTEGER) AS day, "
               "CAST(salary AS DECIMAL(10, 2)) AS pay, CASE WHEN id % 7 = 0 THEN NULL ELSE edu END AS edu "
               "FROM people").fetchall()
    db.declare_roles("typed", quasi_identifiers=["age", "sex", "zip"], key="id")
    got = db.sql("SELECT * FROM ANONYMIZE(typed, k := 6, seed := 2)")
    assert got.columns == ["age", "sex", "zip", "day", "pay", "edu"]
    assert [str(t) for t in got.types] == ["VARCHAR", "VARCHAR", "VARCHAR", "DATE", "DECIMAL(10,2)", "BIGINT"]
    rows = got.fetchall()
    frame = people_frame()
    order = np.random.default_rng(2).permutation(len(frame))
    source = frame.iloc[order].reset_index(drop=True)
    assert [r[3] for r in rows] == [datetime.date(2020, 1, 1) + datetime.timedelta(days=int(i)) for i in source["id"]]
    assert [r[5] for r in rows] == [None if i % 7 == 0 else int(e) for i, e in zip(source["id"], source["edu"])]


def test_only_the_algorithms_columns_leave_duckdb(db, monkeypatch):
    """The input reaches Python only as the columns the algorithm reads (here the QIs and the l column)."""
    from crowddb.operators import table_functions

    fetched = []
    original = table_functions.TableInput.df

    def spy(self, columns=None):
        frame = original(self, columns)
        fetched.append(list(frame.columns))
        return frame

    monkeypatch.setattr(table_functions.TableInput, "df", spy)
    db.sql("SELECT count(*) FROM ANONYMIZE(people, k := 4, sensitive := 'hobby', l := 2)").fetchall()
    assert fetched == [["age", "sex", "zip", "hobby"]]


def test_unknown_quasi_identifier_names_all_columns(db):
    with pytest.raises(crowddb.errors.UnknownColumnError,
                       match=r"unknown quasi-identifier\(s\) \['nope'\]; columns are \['id', 'age', 'sex', 'zip', "
                             r"'edu', 'hobby', 'job', 'salary'\]"):
        db.sql("SELECT * FROM ANONYMIZE(people, k := 6, quasi_identifiers := ['age', 'nope'])")
