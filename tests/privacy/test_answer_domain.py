"""Issue 24, the answer domain never comes from the rows shown: a tuple operator's answer choices are its own list
(the definition's, or ``domain := [...]``) or every value of the stored ground-truth column its input's ground truth
is an unchanged copy of; never the values of the rows asked about (a HIT over people of one occupation listed only
it). A domain of fewer than two values, or a ground truth crowddb cannot trace to one stored column, is refused.

What workers were shown is read from crowddb_hits (the domain shown with each HIT, as JSON, by plain SQL: nothing of
crowddb's code reads it back) and from the batches the platform was handed.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import RecordingCrowd
from privacy_scanner import published_items

import crowddb
from crowddb.datasets import adult_path
from crowddb.errors import ArgumentError

ROLES = {"quasi_identifiers": ["age", "sex", "education_num"], "sensitive": ["occupation"],
         "ground_truth": "occupation", "key": "id",
         "core": ["age", "sex", "education_num", "workclass", "hours_per_week"]}
OP = "getposition(*, k := 5, assignments := 1)"


@pytest.fixture(scope="module")
def occupations() -> list[str]:
    """Every value of Adult's stored occupation column (independently of crowddb)."""
    return sorted(pd.read_csv(adult_path())["occupation"].dropna().astype(str).unique())


class DomainCrowd(RecordingCrowd):
    """Keeps the answer domain of every HIT the platform is handed."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.domains: list[tuple[str, ...] | None] = []

    def publish(self, batch, *, knowledge=None):
        self.domains += [None if d is None else tuple(d) for d in batch.hits["domain"]]
        super().publish(batch, knowledge=knowledge)


@pytest.fixture
def crowd():
    return DomainCrowd(qualities=np.full(10, 0.9), seed=1)


@pytest.fixture
def db(crowd):
    with crowddb.connect(platform=crowd, seed=7, progress=False) as con:
        con.load_csv("adult", adult_path(), **ROLES)
        yield con


def shown_domains(db) -> set[tuple[str, ...]]:
    """The answer domains recorded with the HITs (crowddb_hits.domain, JSON)."""
    rows = db.sql("SELECT domain FROM crowddb_hits WHERE domain IS NOT NULL").fetchall()
    return {tuple(json.loads(d)) for (d,) in rows}


def test_a_hit_over_one_occupation_offers_every_occupation(db, crowd, occupations):
    """The people over 75 who are self-employed (incorporated): their occupations are few; the HIT lists all 14."""
    query = f"SELECT id, {OP} AS job FROM adult WHERE age > 75 AND workclass = 'Self-emp-inc'"
    asked = set(db.sql("SELECT DISTINCT occupation FROM adult WHERE age > 75 AND workclass = 'Self-emp-inc'")
                .df()["occupation"])
    assert len(asked) < len(occupations)  # the rows asked about do not hold every value: the test can fail
    db.sql(query).df()
    assert shown_domains(db) == {tuple(occupations)}
    assert set(crowd.domains) == {tuple(occupations)}
    people = db.sql("SELECT count(*) FROM adult WHERE age > 75 AND workclass = 'Self-emp-inc'").fetchall()[0][0]
    assert len(published_items(db)) == people  # the scanner: one item per person asked about


def test_the_same_question_about_a_subset_is_served_from_the_answers_on_record(db, crowd, occupations):
    """The domain no longer depends on the rows, so asking about a subset of rows asked about before is the same
    questions in the same boxes (the persisted partition): 0 HITs bought, the answers those rows had."""
    everyone = db.sql(f"SELECT id, {OP} AS job FROM adult WHERE age > 75 ORDER BY id").df()
    hits = db.sql("SELECT count(*) FROM crowddb_hits").fetchall()
    subset = db.sql(f"SELECT id, {OP} AS job FROM adult WHERE age > 82 ORDER BY id").df()
    older = set(db.sql("SELECT DISTINCT occupation FROM adult WHERE age > 82").df()["occupation"])
    younger = set(db.sql("SELECT DISTINCT occupation FROM adult WHERE age > 75").df()["occupation"])
    assert older < younger  # before issue 24 the subset's domain was smaller: other questions, bought again
    assert db.sql("SELECT count(*) FROM crowddb_hits").fetchall() == hits
    assert db.last_plan.operators[0].hits == 0 and db.last_plan.operators[0].cached_items == len(subset)
    expected = everyone[everyone["id"].isin(subset["id"])].reset_index(drop=True)
    pd.testing.assert_frame_equal(subset, expected)
    assert db.sql("SELECT run_id, hits FROM crowddb_runs ORDER BY run_id").fetchall()[1] == (2, 0)
    assert shown_domains(db) == {tuple(occupations)}


def test_a_copy_of_the_ground_truth_in_a_derived_input_offers_the_stored_columns_values(db, crowd, occupations):
    db.sql("CREATE VIEW old AS SELECT id, age, sex, education_num, workclass, occupation AS job FROM adult "
           "WHERE age > 85")
    db.sql(f"WITH t AS (SELECT * FROM old) SELECT id, {OP} FROM (SELECT * FROM t) s").df()
    assert shown_domains(db) == {tuple(occupations)}


def test_a_table_made_from_the_column_offers_its_own_stored_values(db):
    db.sql("CREATE TABLE few AS SELECT * FROM adult WHERE age > 80 AND workclass IN ('Private', 'State-gov')")
    values = sorted(db.sql("SELECT DISTINCT occupation FROM few").df()["occupation"])
    db.sql(f"SELECT id, {OP} FROM few").df()
    assert shown_domains(db) == {tuple(values)}


def test_the_definitions_list_and_domain_argument_are_used_as_they_are(db, crowd):
    db.sql(f"SELECT id, {OP[:-1]}, domain := ['Sales', 'Tech-support', 'Other']) FROM adult WHERE age > 85").df()
    db.register_udf({"name": "isboss", "kind": "tuple", "question": "A manager?", "domain": ["yes", "no"]})
    db.sql("SELECT id, isboss(*, k := 5, assignments := 1) FROM adult WHERE age > 85").df()
    assert shown_domains(db) == {("Sales", "Tech-support", "Other"), ("yes", "no")}


def test_a_ground_truth_of_one_value_is_refused_before_anything_is_published(db):
    db.sql("CREATE TABLE sales AS SELECT * FROM adult WHERE age > 60 AND workclass = 'Private' LIMIT 40")
    db.sql("UPDATE sales SET occupation = 'Sales'")
    with pytest.raises(ArgumentError, match=r"every value of the ground-truth column sales\.occupation, which holds 1 "
                                            r"distinct value; a question needs at least two answers"):
        db.sql(f"SELECT id, {OP} FROM sales").df()
    with pytest.raises(ArgumentError, match="at least two answers"):  # explain() refuses it the same way
        db.explain(f"SELECT id, {OP} FROM sales")
    assert db.sql("SELECT count(*) FROM crowddb_hits").fetchall() == [(0,)]
    db.sql(f"SELECT id, {OP[:-1]}, domain := ['Sales', 'Other']) FROM sales").df()  # a list: asked


def test_a_ground_truth_of_two_stored_columns_asks_for_a_domain(db, crowd):
    db.load_csv("adult2", adult_path(), **ROLES)
    query = ("SELECT a.id, getposition(a.*, b.workclass, k := 5, assignments := 1{}) FROM adult a "
             "JOIN adult2 b ON a.age = b.age AND a.sex = b.sex AND a.education_num = b.education_num "
             "AND a.workclass = b.workclass AND a.hours_per_week = b.hours_per_week WHERE a.age > 88")
    with pytest.raises(ArgumentError, match=r"cannot tell which stored column the input's ground truth is a copy of "
                                            r"\(it may come from adult\.occupation, adult2\.occupation\); pass the "
                                            r"answers with domain := \["):
        db.sql(query.format("")).df()
    assert crowd.domains == []
    with pytest.raises(ArgumentError, match="cannot tell which stored column"):  # explain() says it too
        db.explain(query.format(""))
    assert db.explain(query.format(", domain := ['Sales', 'Other']")).operators[0].operator == "getposition"


def test_a_derived_ground_truth_is_not_one_the_domain_can_come_from(db, crowd):
    query = f"SELECT id, {OP} FROM (SELECT id, age, sex, education_num, upper(occupation) AS job FROM adult) t"
    with pytest.raises(ArgumentError, match=r"ground-truth column, and the input has none; declare a ground_truth "
                                            r"column or pass domain := \[\.\.\.\]"):
        db.sql(query + " WHERE age > 85").df()
    assert crowd.domains == []
