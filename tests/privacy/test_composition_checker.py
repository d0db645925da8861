"""The composition checker itself, on tiny hand-made releases whose joint classes are known exactly."""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest
from composition_checker import ABSENT, Release, check, normalize_box, release_from_frame, releases_from_hit_items

TABLE = pd.DataFrame({
    "token": list("abcdefgh"),
    "age": [21, 22, 23, 24, 35, 36, 37, 38],
    "sex": ["F", "F", "M", "M", "F", "F", "M", "M"],
    "hours": [40, 40, 20, 20, 40, 40, 20, 20],  # not a quasi-identifier
})
QIS = ["age", "sex"]


def rec(token, age, sex="*", **extra):
    return {"token": token, "age": age, "sex": sex, **extra}


def young_old(k=4):
    """Release A: two classes of four, {a,b,c,d} and {e,f,g,h}."""
    return Release("A", k, [rec(t, "[21-24]") for t in "abcd"] + [rec(t, "[35-38]") for t in "efgh"])


def classes(report):
    return {t: set(c) for t, c in report.classes.items()}


def test_one_release_classes_are_its_boxes():
    report = check(TABLE, QIS, [young_old()])
    assert classes(report) == {t: set("abcd") for t in "abcd"} | {t: set("efgh") for t in "efgh"}
    assert report.violations == []
    assert report.promised == {t: 4 for t in "abcdefgh"}
    assert report.candidates == {t: 4 for t in "abcdefgh"}
    assert report.smallest == 4


def test_box_intersection_splits_a_class():
    # B cuts across A's classes by sex: {a,b,e,f} F and {c,d,g,h} M, each 4 rows, k=4 on its own
    b = Release("B", 4, [rec(t, "*", "F") for t in "abef"] + [rec(t, "*", "M") for t in "cdgh"])
    report = check(TABLE, QIS, [young_old(), b])
    assert classes(report) == {"a": {"a", "b"}, "b": {"a", "b"}, "c": {"c", "d"}, "d": {"c", "d"},
                               "e": {"e", "f"}, "f": {"e", "f"}, "g": {"g", "h"}, "h": {"g", "h"}}
    assert {v["token"] for v in report.violations} == set("abcdefgh")
    assert {v["cause"] for v in report.violations} == {"box intersection"}
    v = next(v for v in report.violations if v["token"] == "a")
    assert (v["size"], v["k"], v["own_classes"], v["intersection"]) == (2, 4, {"A": 4, "B": 4}, 2)
    assert report.candidates["a"] == 2  # young and F: a, b


def test_absence_distinguishes_even_with_identical_boxes():
    # B publishes only a, b, c (a WHERE on a non-QI column), with exactly A's box; d is told apart by its absence
    b = Release("B", 3, [rec(t, "[21-24]") for t in "abc"])
    report = check(TABLE, QIS, [young_old(), b])
    assert classes(report)["a"] == {"a", "b", "c"}
    assert classes(report)["d"] == {"d"}
    assert classes(report)["e"] == set("efgh")
    assert report.promised["a"] == 3 and report.promised["d"] == 4
    bad = {v["token"]: v for v in report.violations}
    assert set(bad) == {"d"}  # a, b, c: class 3 >= min(4, 3)
    assert bad["d"]["cause"] == "absence from other releases"
    assert bad["d"]["size"] == 1 and bad["d"]["intersection"] == 4
    # the worker who ignored absence would still see 4 candidates for d
    assert report.candidates["d"] == 4


def test_absence_from_the_first_release_of_a_new_row():
    # a row inserted after A exists only in B: its B class-mates are all in A, so it stands alone
    table = pd.concat([TABLE, pd.DataFrame({"token": ["i"], "age": [22], "sex": ["F"], "hours": [40]})])
    b = Release("B", 4, [rec(t, "[21-24]") for t in "abcdi"])
    report = check(table, QIS, [young_old(), b])
    assert classes(report)["i"] == {"i"}
    assert classes(report)["a"] == set("abcd")
    assert [v["token"] for v in report.violations] == ["i"]
    assert report.violations[0]["cause"] == "absence from other releases"


def test_unpublished_rows_are_in_no_class_and_a_single_release_below_k_is_found():
    a = Release("A", 3, [rec(t, "[21-22]", "F") for t in "ab"] + [rec(t, "[35-38]") for t in "efgh"])
    report = check(TABLE, QIS, [a])
    assert set(report.classes) == set("abefgh")  # c, d never published
    assert classes(report)["a"] == {"a", "b"}
    assert {v["token"] for v in report.violations} == {"a", "b"}
    assert {v["cause"] for v in report.violations} == {"fewer than k in one release"}


def test_text_not_semantics_and_syntax_normalized():
    # same people, different print: [21-24] vs [20-24] are two boxes; {F,M} vs {M,F} is one box; '*' for a missing QI
    b = Release("B", 2, [rec("a", "[21-24]", "{F,M}"), rec("b", "[21-24]", "{M, f}"),
                         {"token": "c", "age": "[21-24]"}, rec("d", "[20-24]")])
    report = check(TABLE, QIS, [b])
    assert classes(report)["a"] == {"a", "b"}
    assert classes(report)["c"] == {"c"}  # sex missing reads '*', not {F,M}
    assert classes(report)["d"] == {"d"}
    assert normalize_box("[3-3]") == normalize_box("3") == normalize_box("{3}")
    assert normalize_box("{b,a}") == normalize_box("{A, B}")
    assert normalize_box(None) != normalize_box("*")


def test_records_of_nobody_and_uncovered_boxes():
    b = Release("B", 1, [rec("a", "[21-24]", "F"), rec(None, "[21-24]", "F"), rec("zz", "[21-24]", "F"),
                         rec("e", "[21-24]", "F")])  # e is 35: its box does not cover it
    report = check(TABLE, QIS, [b])
    assert report.nobody == 2
    assert [u["token"] for u in report.uncovered] == ["e"]


def test_two_boxes_of_one_row_in_one_release():
    # a row shown twice in one release with different boxes: both boxes are its entry
    b = Release("B", 1, [rec("a", "[21-24]"), rec("a", "[21-22]"), rec("b", "[21-24]"), rec("b", "[21-22]"),
                         rec("c", "[21-24]")])
    report = check(TABLE, QIS, [b])
    assert classes(report)["a"] == {"a", "b"}
    assert classes(report)["c"] == {"c"}
    assert report.signatures["c"] == (frozenset({(("range", 21.0, 24.0), ("any",))}),)
    assert report.candidates["a"] == 2


def test_three_releases_with_an_absence_in_the_middle():
    b = Release("B", 2, [rec(t, "[21-24]") for t in "ab"])
    c = Release("C", 2, [rec(t, "[21-24]") for t in "abcd"])
    report = check(TABLE, QIS, [young_old(), b, c])
    assert report.signatures["c"][1] is ABSENT
    assert classes(report)["a"] == {"a", "b"}
    assert classes(report)["c"] == {"c", "d"}
    assert report.violations == []  # classes of 2 >= min k 2


def test_aliases_and_the_tie_via_token_must_be_unique():
    b = Release("B", 2, [{"token": t, "years": "[21-24]", "sex": "*"} for t in "abcd"])
    report = check(TABLE, QIS, [b], aliases={"years": "age"})
    assert report.candidates["a"] == 4
    with pytest.raises(ValueError, match="unique"):
        check(pd.concat([TABLE, TABLE]), QIS, [b])


def test_reading_hit_items_and_frames():
    con = duckdb.connect()
    con.execute("CREATE TABLE crowddb_runs (run_id BIGINT, operator VARCHAR, query VARCHAR, k INTEGER)")
    con.execute("CREATE TABLE crowddb_hits (hit_id VARCHAR, run_id BIGINT)")
    con.execute("CREATE TABLE crowddb_hit_items (hit_id VARCHAR, item_no INTEGER, item_key VARCHAR, "
                "occurrence INTEGER, content VARCHAR)")
    con.execute("INSERT INTO crowddb_runs VALUES (1, 'getposition', 'q1', 2), (2, 'getcandidate', 'q2', 3), "
                "(3, 'getposition', 'cached', 5)")
    con.execute("INSERT INTO crowddb_hits VALUES ('h1', 1), ('h2', 1), ('h3', 2)")
    items = [("h1", 1, '{"age":"[21-24]","sex":"*","token":"a"}'), ("h1", 2, '{"age":"[21-24]","sex":"*","token":"b"}'),
             ("h2", 1, '{"age":"[21-24]","sex":"*"}'),
             ("h3", 1, '[{"age":"[21-24]","sex":"*","token":"a"},{"age":"[35-38]","sex":"*","token":"e"}]')]
    con.executemany("INSERT INTO crowddb_hit_items VALUES (?, ?, 'x', 0, ?)", items)
    releases = releases_from_hit_items(con)
    assert [(r.name, r.k, len(r.records)) for r in releases] == [("run 1", 2, 3), ("run 2", 3, 2)]
    frame = pd.DataFrame({"age": ["[35-38]"] * 2, "sex": ["*"] * 2, "token": ["e", "f"], "hours": [40, 40]})
    anon = release_from_frame("ANONYMIZE", frame, 2)
    report = check(TABLE, QIS, [*releases, anon])
    assert report.nobody == 1
    assert classes(report) == {"a": {"a"}, "b": {"b"}, "e": {"e"}, "f": {"f"}}
    assert {v["token"]: v["k"] for v in report.violations} == {"a": 2, "b": 2, "e": 2, "f": 2}
