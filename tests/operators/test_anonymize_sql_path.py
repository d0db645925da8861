"""ANONYMIZE through SQL is the algorithm's release, row for row: the input's frozen Arrow columns with each
quasi-identifier as a dictionary of its class's labels, and the rows in the documented shuffle (numpy's permutation
of the seed). Types survive the Arrow round trip; the release does not change when the input does.

The reference is computed here without SQL: ``anonymize()`` on the whole input as pandas, then ``iloc[order]``, the
key dropped; column types other than the generalized quasi-identifiers are the input's own."""

from __future__ import annotations

import datetime

import numpy as np
import pandas as pd
import pyarrow as pa
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


def test_text_gathered_as_dictionaries_reads_the_same(db, monkeypatch):
    """Text columns with few distinct values are gathered as dictionary arrays (a large input's speed): the same
    values, NULLs, ENUM type and order as the plain gather; text with many distinct values is gathered plainly."""
    from crowddb.operators.table_functions import anonymize as tf

    db.execute("CREATE TYPE hue AS ENUM ('red', 'blue')").fetchall()
    db.execute("CREATE TABLE texts AS SELECT id, age, sex, zip, CASE WHEN id % 5 = 0 THEN NULL ELSE hobby END AS h, "
               "CASE id % 2 WHEN 0 THEN 'red' ELSE 'blue' END::hue AS c, 'n' || id AS unique_text FROM people").fetchall()
    db.declare_roles("texts", quasi_identifiers=["age", "sex", "zip"], key="id")
    query = "SELECT * FROM ANONYMIZE(texts, k := 6, seed := 3)"
    gathered = []
    original = tf._gather

    def spy(column, taken):
        out = original(column, taken)
        gathered.append(pa.types.is_dictionary(out.type))
        return out

    monkeypatch.setattr(tf, "_gather", spy)
    plain = db.sql(query)
    plain_rows, plain_types = plain.fetchall(), [str(t) for t in plain.types]
    assert gathered == [False, True, False]  # (DuckDB exports an ENUM as a dictionary already)
    monkeypatch.setattr(tf, "DICTIONARY_FROM", 1)
    gathered.clear()
    coded = db.sql(query)
    assert [str(t) for t in coded.types] == plain_types == ["VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR",
                                                             "ENUM('red', 'blue')", "VARCHAR"]
    assert coded.fetchall() == plain_rows
    assert gathered == [True, True, False]  # h, c: few distinct values; unique_text: one per row
    order = np.random.default_rng(3).permutation(60)
    source = db.con.execute("SELECT h, c, unique_text FROM texts").fetchall()
    assert [r[3:] for r in plain_rows] == [source[i] for i in order]


def test_only_the_algorithms_columns_leave_duckdb(db, monkeypatch):
    """The input reaches Python only as the columns the algorithm reads (here the QIs and the l column)."""
    from crowddb.operators import table_functions

    fetched = []
    original = table_functions.TableInput.df

    def spy(self, columns=None, **kw):
        frame = original(self, columns, **kw)
        fetched.append(list(frame.columns))
        return frame

    monkeypatch.setattr(table_functions.TableInput, "df", spy)
    db.sql("SELECT count(*) FROM ANONYMIZE(people, k := 4, sensitive := 'hobby', l := 2)").fetchall()
    assert fetched == [["age", "sex", "zip", "hobby"]]


def test_the_request_is_checked_once(db, monkeypatch):
    """ANONYMIZE checks its request before it knows whether the release is computed, and the computation does not
    check it again (one pass over the quasi-identifiers' NULLs), on a new release as on one computed again."""
    from crowddb.anonymize import api

    checked = []
    original = api.validate
    monkeypatch.setattr(api, "validate", lambda *args: checked.append(args[1]) or original(*args))
    query = "SELECT count(*) FROM ANONYMIZE(people, k := 4, sensitive := 'hobby', l := 2)"
    assert db.sql(query).fetchall() == [(len(people_frame()),)]
    assert checked == [["age", "sex", "zip"]]
    checked.clear()
    anonymize(people_frame(), ["age", "sex"], 4)  # the function alone still checks
    assert checked == [["age", "sex"]]


def test_unknown_quasi_identifier_names_all_columns(db):
    with pytest.raises(crowddb.errors.UnknownColumnError,
                       match=r"unknown quasi-identifier\(s\) \['nope'\]; columns are \['id', 'age', 'sex', 'zip', "
                             r"'edu', 'hobby', 'job', 'salary'\]"):
        db.sql("SELECT * FROM ANONYMIZE(people, k := 6, quasi_identifiers := ['age', 'nope'])")


def test_every_duckdb_type_survives_the_release(db):
    """Columns ANONYMIZE leaves alone keep their DuckDB type and value, those Arrow carries only losslessly (UUID,
    HUGEINT, JSON, BIT, TIMETZ) and an ENUM, which Arrow turns into text, included."""
    db.execute("CREATE TYPE mood AS ENUM ('sad', 'o''k', 'happy')").fetchall()
    db.execute("CREATE TABLE odd AS SELECT id, age, sex, zip, "
               "CASE id % 3 WHEN 0 THEN 'sad' WHEN 1 THEN 'o''k' ELSE 'happy' END::mood AS m, "
               "('00000000-0000-0000-0000-' || lpad(CAST(id AS VARCHAR), 12, '0'))::UUID AS u, "
               "CAST(id AS HUGEINT) * 100000000000000000000 AS h, ('{\"n\": ' || id || '}')::JSON AS j, "
               "CAST(id % 2 AS VARCHAR)::BIT AS b, ('10:00:00+0' || (id % 5))::TIMETZ AS tz, "
               "[id, id + 1] AS l, {'x': id} AS s FROM people").fetchall()
    db.declare_roles("odd", quasi_identifiers=["age", "sex", "zip"], key="id")
    want = db.con.sql("SELECT m, u, h, j, b, tz, l, s FROM odd")
    got = db.sql("SELECT * FROM ANONYMIZE(odd, k := 6, seed := 5)")
    assert got.columns == ["age", "sex", "zip", "m", "u", "h", "j", "b", "tz", "l", "s"]
    assert [str(t) for t in got.types[3:]] == [str(t) for t in want.types]
    order = np.random.default_rng(5).permutation(60)
    rows = [r[3:] for r in got.fetchall()]
    source = want.fetchall()
    assert rows == [source[i] for i in order]


def test_the_release_is_frozen_when_the_input_changes(db):
    """db.sql() returns a lazy relation; the release it reads was made once, so changing the input afterwards
    changes neither its rows nor the pairing of labels and rows."""
    release = db.sql("SELECT * FROM ANONYMIZE(people, k := 6, seed := 4)")
    before = release.fetchall()
    db.execute("UPDATE people SET hobby = 'changed', age = age + 1").fetchall()
    db.execute("DELETE FROM people WHERE id % 2 = 0").fetchall()
    assert release.fetchall() == before
    expected = _reference(people_frame(), ["age", "sex", "zip"], 4, "id", k=6)
    assert [tuple(str(v) for v in r) for r in before] == [tuple(str(v) for v in r) for r in
                                                          expected.itertuples(index=False)]


def test_the_connections_settings_are_left_as_they_were(db):
    """The input is exported with lossless Arrow types and read in order whatever the owner's settings are, and the
    settings are theirs again afterwards."""
    db.con.execute("SET preserve_insertion_order = false").fetchall()
    got = db.sql("SELECT * FROM ANONYMIZE(people, k := 6, seed := 11)").df()
    expected = _reference(people_frame(), ["age", "sex", "zip"], 11, "id", k=6)
    assert got.astype(str).values.tolist() == expected.astype(str).values.tolist()
    assert db.con.execute("SELECT current_setting('preserve_insertion_order'), "
                          "current_setting('arrow_lossless_conversion')").fetchall() == [(False, False)]


def test_the_input_reads_as_duckdb_converts_it(db):
    """What the algorithm reads equals DuckDB's own conversion to pandas, column for column and dtype for dtype
    (text comes straight from the Arrow snapshot; NULLs, decimals, dates, enums and booleans through DuckDB)."""
    from crowddb import _sql
    from crowddb.operators import table_functions

    db.execute("CREATE TABLE mixed AS SELECT * FROM (VALUES (1, 2.5::DECIMAL(5, 2), 'a', true, DATE '2020-01-02', "
               "'x'), (NULL, NULL, NULL, NULL, NULL, 'y'), (3, 1.0, 'b', false, DATE '2021-03-04', 'x')) "
               "v(i, d, s, b, day, t)").fetchall()
    seen = []
    original = table_functions.TableInput.df

    def spy(self, columns=None, **kw):
        frame = original(self, columns, **kw)
        seen.append(frame)
        return frame

    table_functions.TableInput.df = spy
    try:
        db.sql("SELECT * FROM ANONYMIZE(mixed, k := 2, quasi_identifiers := ['t'], sensitive := 'i', l := 1)"
               ).fetchall()
    finally:
        table_functions.TableInput.df = original
    expected = db.con.sql("SELECT i, t FROM mixed").df()  # in the input's column order
    pd.testing.assert_frame_equal(seen[0], expected)
    full = original(table_functions.TableInput(db.con, _sql.select_all("mixed"), ["i", "d", "s", "b", "day", "t"],
                                               db.con.sql("SELECT * FROM mixed").to_arrow_table(),
                                               list(db.con.sql("SELECT * FROM mixed").types)))
    pd.testing.assert_frame_equal(full, db.con.sql("SELECT * FROM mixed").df())
    # NULL-free plain numbers come straight from the snapshot, with the dtypes DuckDB's conversion gives
    numbers = ("SELECT * FROM (VALUES (1::TINYINT, 2::UBIGINT, 1.5::FLOAT, 2.5::DOUBLE, true, 7::INTEGER), "
               "(-1::TINYINT, 3::UBIGINT, -0.5::FLOAT, 1e300::DOUBLE, false, NULL)) v(a, b, c, d, e, f)")
    plain = original(table_functions.TableInput(db.con, _sql.select_all("__never_read"), list("abcdef"),
                                                db.con.sql(numbers).to_arrow_table(), list(db.con.sql(numbers).types)),
                     list("abcde"))  # f holds a NULL: it would go through DuckDB (and its source is never read)
    pd.testing.assert_frame_equal(plain, db.con.sql(numbers).df()[list("abcde")])


def test_a_type_that_cannot_be_spelt_for_its_cast_is_refused():
    """Fail closed: a column Arrow does not carry as itself is cast back; a type sqlglot cannot spell is refused with a
    crowddb error naming the fix, not passed on under another type."""
    from crowddb import _duck

    class Unspellable:
        id = "mystery"

        def __str__(self) -> str:
            return "NOT A ((( TYPE"

    with pytest.raises(crowddb.errors.QueryError, match=r"^a column of type NOT A \(\(\( TYPE does not read back from "
                                                        r"Arrow as itself .*cast it in the input \(e.g. to VARCHAR\)$"):
        _duck._data_type(Unspellable())
    import duckdb

    enum = _duck._data_type(duckdb.connect().sql("SELECT 'a'::ENUM('a', 'b''c') AS e").types[0])
    assert enum.sql("duckdb") == "ENUM('a', 'b''c')"
