"""Issue 16 (the requester page's k trade-off): ``db.tradeoff(query, ks)`` is explain() of the query with every human
operator's k set to each of ks; nothing is published or written."""

from __future__ import annotations

import pytest

from crowddb.errors import ArgumentError

QUERY = "SELECT id, getposition(*, k := 10) AS job FROM people WHERE age < 60"


def test_each_row_is_what_explain_says_for_that_k(db):
    got = db.tradeoff(QUERY, ks=(2, 5, 20))
    assert got["k"].tolist() == [2, 5, 20] and set(got["operator"]) == {"getposition"}
    for k, row in zip((2, 5, 20), got.itertuples()):
        (op,) = db.explain(QUERY.replace("k := 10", f"k := {k}")).operators
        assert (row.ncp, row.accuracy_lower, row.accuracy_upper, row.hits, row.estimated_cost) == (
            op.ncp, op.accuracy_lower, op.accuracy_upper, op.hits, op.estimated_cost)
    assert got["ncp"].tolist() == sorted(got["ncp"])  # coarser classes lose more (these data)
    assert db.sql("SELECT count(*) FROM crowddb_runs").fetchall() == [(0,)]


def test_a_query_without_k_gets_one(db):
    plain = QUERY.replace(", k := 10", "")
    got = db.tradeoff(plain, ks=(3,))
    (op,) = db.explain(QUERY.replace("k := 10", "k := 3")).operators
    assert got["ncp"].tolist() == [op.ncp]


@pytest.mark.parametrize("ks", [(), (1,), (2.5,), (True,)])
def test_bad_ks_are_refused(db, ks):
    with pytest.raises(ArgumentError, match="ks must be integers of at least 2"):
        db.tradeoff(QUERY, ks=ks)


@pytest.mark.parametrize("query", ["SELECT * FROM people",
                                   "SELECT count(*) FROM ANONYMIZE(people, k := 5)"])  # table functions only
def test_a_query_without_human_operators_has_no_tradeoff(db, query):
    with pytest.raises(ArgumentError, match="calls no human operator"):
        db.tradeoff(query)


def test_a_k_that_cannot_be_had_is_a_row_saying_why(db):
    got = db.tradeoff(QUERY, ks=(5, 500))
    assert got["refused"].isna().tolist() == [True, False]
    assert got.loc[1, "refused"].startswith("getposition: its input has ") and "fewer than k=500" in got.loc[1, "refused"]
    assert got.loc[1, ["ncp", "hits"]].isna().all() and got.loc[0, "ncp"] > 0


def test_two_calls_are_traded_off_in_one_pass_as_explain_says_at_each_k(db):
    query = ("SELECT id, getposition(*, k := 10) AS a, getposition(age, sex, zip, assignments := 3) AS b "
             "FROM people WHERE age < 60")
    got = db.tradeoff(query, ks=(20, 5))
    assert got["k"].tolist() == [20, 20, 5, 5] and got["refused"].isna().all()
    for k, pair in ((20, got.iloc[:2]), (5, got.iloc[2:])):
        explained = db.explain(query.replace("k := 10", f"k := {k}").replace("assignments := 3",
                                                                              f"assignments := 3, k := {k}"))
        assert [(p.operator, p.ncp, p.hits, p.estimated_cost) for p in explained.operators] == list(
            pair[["operator", "ncp", "hits", "estimated_cost"]].itertuples(index=False, name=None))
