"""A large input's text of few distinct values is frozen dictionary-coded (issue 27: the local path's memory), and
nothing a table function reads, or a release shows, changes: the same values, types, order and rows as the plain
snapshot. ``CODED_FROM`` is lowered here so that small tables take the large inputs' path."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from conftest import people_frame

import crowddb
from crowddb import _duck
from crowddb.operators import table_functions

FEW = pa.types.is_dictionary


@pytest.fixture
def con():
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT i, CASE WHEN i % 7 = 0 THEN NULL ELSE ['a', 'it''s', ''][i % 3 + 1] END AS few, "
                "'n' || i AS many, ('{\"n\": ' || (i % 2) || '}')::JSON AS j, (i % 4)::VARCHAR AS same "
                "FROM range(300) r(i)").fetchall()
    return con


def _decoded(table: pa.Table) -> pa.Table:
    """``table`` with every dictionary column as the plain export's text (large_string)."""
    return pa.Table.from_arrays([c.cast(pa.large_string()) if FEW(c.type) else c for c in table.columns],
                                names=table.column_names)


def test_a_large_input_codes_only_text_of_few_values(con, monkeypatch):
    monkeypatch.setattr(_duck, "CODED_FROM", 100)
    query = "SELECT i, few, many, j, same, few FROM t ORDER BY i DESC"  # duplicated names; the query's own order
    plain, plain_types = _duck.snapshot(con, query)
    coded, types = _duck.snapshot(con, query, coded=True)
    assert [str(t) for t in types] == [str(t) for t in plain_types]
    assert coded.column_names == plain.column_names == ["i", "few", "many", "j", "same", "few"]
    # few (3 values and NULL) and same (4 values) are coded; one text per row and JSON (an Arrow extension) are not
    assert [FEW(c.type) for c in coded.columns] == [False, True, False, False, True, True]
    assert coded.column(1).chunk(0).dictionary.to_pylist() == ["", "a", "it's"]  # sorted; NULL stays a NULL
    assert _decoded(coded).equals(plain)
    assert coded.column(1).null_count == plain.column(1).null_count == 43


def test_a_small_input_is_the_plain_export(con, monkeypatch):
    monkeypatch.setattr(_duck, "CODED_FROM", 300)  # exactly the rows: small (the head read is the whole input)
    coded, _ = _duck.snapshot(con, "SELECT * FROM t", coded=True)
    plain, _ = _duck.snapshot(con, "SELECT * FROM t")
    assert coded.equals(plain) and not any(FEW(c.type) for c in coded.columns)


@pytest.mark.parametrize("where", ["", "WHERE false"])
def test_a_small_input_of_every_kind_of_column_is_the_plain_export(where):
    """A small input is read as a stream cut after ``CODED_FROM`` rows (not a LIMIT): the same schema (extension
    types, ENUM as text, nested types), values and order as the plain export, an empty input included."""
    con = duckdb.connect()
    con.execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')").fetchall()
    con.execute(
        "CREATE TABLE k AS SELECT i, (i % 7)::VARCHAR AS s, uuid() AS u, i::HUGEINT * 1000000000000 AS h, "
        "('{\"a\": ' || i || '}')::JSON AS j, '0101'::BIT AS b, '12:00:00+02'::TIMETZ AS tz, "
        "(['sad', 'ok', 'happy'])[1 + i % 3]::mood AS m, {'x': i, 'y': i::VARCHAR} AS st, [i, i + 1] AS l, "
        "MAP {'k': i} AS mp, (i / 3)::DECIMAL(18, 3) AS d, INTERVAL 1 DAY * i AS iv, 'ab'::BLOB AS bl, "
        "CASE WHEN i % 5 = 0 THEN NULL ELSE 'v' || i END AS nul FROM range(500) r(i)").fetchall()
    query = f"SELECT *, rowid FROM k {where} ORDER BY i DESC"
    plain, plain_types = _duck.snapshot(con, query)
    coded, types = _duck.snapshot(con, query, coded=True)
    assert [str(t) for t in types] == [str(t) for t in plain_types]
    assert coded.schema.equals(plain.schema, check_metadata=True)
    assert coded.equals(plain)
    assert coded.num_rows == (0 if where else 500)
    assert con.execute("SELECT count(*) FROM k").fetchall() == [(500,)]  # the stream closed: the connection is free


def test_a_small_input_that_fails_as_it_runs_raises_duckdbs_error(con):
    """The stream reports a failure as Arrow's OSError; the snapshot raises DuckDB's own, as the plain export does."""
    query = ("SELECT i, few FROM t WHERE i < 100 UNION ALL "  # (the second branch fails in the stream's second batch)
             "SELECT i, CASE WHEN i = 250 THEN error('row 250 is bad') END FROM t WHERE i >= 100")
    for coded in (False, True):
        with pytest.raises(duckdb.Error, match="row 250 is bad"):
            _duck.snapshot(con, query, coded=coded)
    assert con.execute("SELECT count(*) FROM t").fetchall() == [(300,)]


def test_rows_that_read_differently_each_time_are_exported_plainly(con, monkeypatch):
    """The distinct values come from one pass and the rows from another: a value the first did not see (an input
    that is not the same twice) makes the cast fail, and the snapshot is then one plain run of the input."""
    monkeypatch.setattr(_duck, "CODED_FROM", 100)

    class Rows(list):
        def fetchall(self):
            return list(self)

    class Forgetful:  # the first pass misses the value 'a' of the column few
        def __init__(self, con):
            self.con = con

        def execute(self, sql, *args):
            found = self.con.execute(sql, *args).fetchall()[0]
            return Rows([([v for v in found[0] if v != "a"], *found[1:])])

        def __getattr__(self, name):
            return getattr(self.con, name)

    query = "SELECT i, few, same FROM t"
    relation = con.sql(query)
    head = relation.limit(101).to_arrow_table()
    assert _duck._coded(Forgetful(con), query, relation, head, [1, 2]) is None
    assert _duck._coded(con, query, relation, head, [1, 2]) is not None


def test_many_distinct_values_overall_are_not_coded(con, monkeypatch):
    monkeypatch.setattr(_duck, "CODED_FROM", 100)
    monkeypatch.setattr(_duck, "CODED_MAX", 3)  # few has 3 values, same 4
    coded, _ = _duck.snapshot(con, "SELECT few, same FROM t", coded=True)
    assert [FEW(c.type) for c in coded.columns] == [True, False]


def test_stacked_parts_read_as_one(con, monkeypatch):
    monkeypatch.setattr(_duck, "CODED_FROM", 100)
    coded, _ = _duck.snapshot(con, "SELECT i, few FROM t WHERE i < 200", coded=True)
    extra, _ = _duck.snapshot(con, "SELECT i, few FROM t WHERE i >= 295")  # small: plain text, a value of its own
    con.execute("UPDATE t SET few = 'new' WHERE i = 299").fetchall()
    extra_new, _ = _duck.snapshot(con, "SELECT i, few FROM t WHERE i >= 295")
    for more in (extra, extra_new):
        both = _duck.stacked(coded, more)
        assert FEW(both.column(1).type)
        assert both.column(1).to_pylist() == coded.column(1).to_pylist() + more.column(1).to_pylist()
        assert both.column(0).to_pylist() == [*range(200), *range(295, 300)]
    assert _duck.stacked(extra, extra_new).column(1).type == pa.large_string()  # nothing coded: as they were


def _releases(monkeypatch, coded_from: int) -> list:
    """Every row and report of a session of ANONYMIZE calls: a first release, the same again, a subset (rows of
    earlier classes are added back), a larger k, a declared kind and hierarchy-free l-diversity."""
    monkeypatch.setattr(_duck, "CODED_FROM", coded_from)
    out = []
    with crowddb.connect(seed=3, progress=False) as db:
        db.load_frame("people", people_frame())
        db.declare_roles("people", quasi_identifiers=["age", "sex", "zip"], key="id")
        for query in ("SELECT * FROM ANONYMIZE(people, k := 6)",
                      "SELECT * FROM ANONYMIZE(people, k := 6)",
                      "SELECT * FROM ANONYMIZE((SELECT * FROM people WHERE age > 30), k := 6, keep_key := true)",
                      "SELECT * FROM ANONYMIZE(people, k := 12, quasi_identifiers := ['age', 'sex', 'zip', 'job'])",
                      ("SELECT * FROM ANONYMIZE((SELECT id, age, sex, zip, hobby FROM people), k := 4, "
                       "sensitive := 'hobby', l := 2)")):
            relation = db.sql(query)
            out.append(([str(t) for t in relation.types], relation.fetchall(),
                        {k: v for k, v in db.last_report[0].items() if k != "release_id"}))
    return out


def test_anonymize_releases_the_same_whether_its_input_is_coded_or_not(monkeypatch):
    read = []
    original = table_functions.TableInput.df

    def spy(self, columns=None, **kw):
        frame = original(self, columns, **kw)
        read.append({c: str(frame[c].dtype) for c in frame.columns})
        return frame

    monkeypatch.setattr(table_functions.TableInput, "df", spy)
    plain = _releases(monkeypatch, 10**9)
    assert all(dtype != "category" for seen in read for dtype in seen.values())
    read.clear()
    coded = _releases(monkeypatch, 40)  # (60 rows: the first 41 hold at most 4.1 distinct values to be coded)
    assert coded == plain
    # the text quasi-identifiers reached the algorithm as codes; hobby, read for l-diversity, as text
    assert read[0] == {"age": "int64", "sex": "category", "zip": "category"}
    assert read[-1]["hobby"] != "category"
    assert plain[2][2]["widened"] > 0  # (the subset did take the added rows' path)


def test_a_widened_input_is_the_input_then_the_added_rows_by_identity(monkeypatch):
    """ANONYMIZE over rows of earlier classes adds the classes' other rows: after the input's own rows, as read,
    in the order of their identities (a UNION ALL of the two came in no fixed order at 200k rows)."""
    from crowddb import planner

    seen = []
    original = planner.Planner._widened_input

    def spy(self, rows, *args, **kw):
        before = rows.row_refs.copy()
        out = original(self, rows, *args, **kw)
        seen.append((before, out.row_refs, out.widened))
        return out

    monkeypatch.setattr(planner.Planner, "_widened_input", spy)
    with crowddb.connect(seed=3, progress=False) as db:
        db.load_frame("people", people_frame())
        db.declare_roles("people", quasi_identifiers=["age", "sex", "zip"], key="id")
        db.sql("SELECT * FROM ANONYMIZE(people, k := 6)").fetchall()
        db.sql("SELECT * FROM ANONYMIZE((SELECT * FROM people WHERE age > 30 ORDER BY id DESC), k := 6)").fetchall()
        refs = db.con.execute("SELECT (hash(id) >> 1)::BIGINT FROM people WHERE age > 30 ORDER BY id DESC"
                              ).fetchall()
        every = {r for (r,) in db.con.execute("SELECT (hash(id) >> 1)::BIGINT FROM people").fetchall()}
    before, after, widened = seen[-1]
    assert widened > 0 and len(after) == len(before) + widened
    assert after[:len(before)].tolist() == before.tolist() == [r for (r,) in refs]
    added = after[len(before):]
    assert added.tolist() == sorted(added.tolist()) and set(added.tolist()) <= every - set(before.tolist())
    assert np.unique(after).size == len(after)
