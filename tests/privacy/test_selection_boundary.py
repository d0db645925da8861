"""Issue 24, which rows are shown: the rows a crowd operator publishes may not be chosen (nor a group operator's rows
grouped) by a sensitive, ground-truth or key column, directly or through lineage; refused with a PrivacyError before
anything is published or paid, naming the predicate and the column; explain() says the same.

What workers saw is read by the independent scanner (tests/privacy_scanner.py: crowddb_hit_items) and from what the
platform was handed (the recording crowd's batches); crowddb_runs and crowddb_payments show nothing was bought.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest
import sqlglot
from conftest import RecordingCrowd
from privacy_scanner import leaked_protected, published_items, small_classes

import crowddb
from crowddb.datasets import adult_path
from crowddb.errors import PrivacyError
from crowddb.privacy.selection import chosen_by

QIS = ["age", "sex", "education_num"]
ROLES = {"quasi_identifiers": QIS, "sensitive": ["occupation"], "ground_truth": "occupation", "key": "id",
         "core": ["age", "sex", "education_num", "workclass", "hours_per_week"]}
OP = "getposition(*, k := 5, assignments := 1)"
GROUP = "getcandidate(*, 'teacher', k := 5, assignments := 1)"
MD5 = hashlib.md5(b"Sales").hexdigest()[:2]


@pytest.fixture(scope="module")
def adult_frame() -> pd.DataFrame:
    return pd.read_csv(adult_path())


@pytest.fixture
def crowd():
    return RecordingCrowd(qualities=np.full(10, 0.9), seed=1)


@pytest.fixture
def db(crowd):
    with crowddb.connect(platform=crowd, seed=7, progress=False) as con:
        con.load_csv("adult", adult_path(), **ROLES)
        yield con


def nothing_bought(db, crowd) -> None:
    """Nothing reached a worker (the scanner reads no item, the platform got no batch) and nothing was run or paid."""
    assert len(published_items(db)) == 0
    assert crowd.published == []
    assert db.sql("SELECT count(*) FROM crowddb_runs").fetchall() == [(0,)]
    assert db.sql("SELECT count(*) FROM crowddb_payments").fetchall() == [(0,)]


# (statements run first, the query, what the refusal quotes: the predicate as written, the protected column)
REFUSED = {
    "where_equals": ([], f"SELECT id, {OP} FROM adult WHERE occupation = 'Armed-Forces'",
                     "WHERE occupation = 'Armed-Forces'", "the ground truth adult.occupation"),
    "where_in_list_beside_a_qi_filter": ([], f"SELECT id, {OP} FROM adult WHERE age > 70 AND occupation IN ('Sales')",
                                         "WHERE occupation IN ('Sales')", "the ground truth adult.occupation"),
    "where_md5_prefix": ([], f"SELECT id, {OP} FROM adult WHERE md5(occupation) LIKE '{MD5}%'",
                         f"WHERE MD5(occupation) LIKE '{MD5}%'", "the ground truth adult.occupation"),
    "where_case": ([], f"SELECT id, {OP} FROM adult WHERE CASE WHEN occupation = 'Sales' THEN age > 70 END",
                   "WHERE CASE WHEN occupation = 'Sales'", "the ground truth adult.occupation"),
    "where_on_the_key": ([], f"SELECT id, {OP} FROM adult WHERE id <= 500", "WHERE id <= 500", "the key adult.id"),
    "where_on_the_rowid": ([], f"SELECT id, {OP} FROM adult WHERE rowid < 500", "WHERE rowid < 500",
                           "the row identity adult.rowid"),
    "in_subquery": ([], (f"SELECT id, {OP} FROM adult WHERE age > 70 AND age IN (SELECT age FROM adult WHERE "
                        "occupation = 'Sales')"), "age IN (SELECT age FROM adult WHERE occupation = 'Sales')",
                    "the ground truth adult.occupation"),
    "exists": ([], (f"SELECT id, {OP} FROM adult a WHERE EXISTS (SELECT 1 FROM adult b WHERE b.age = a.age AND "
                   "b.sex = a.sex AND b.occupation = 'Sales')"), "b.occupation = 'Sales'",
               "the ground truth adult.occupation"),
    "not_exists": ([], (f"SELECT id, {OP} FROM adult a WHERE NOT EXISTS (SELECT 1 FROM adult b WHERE b.age = a.age "
                       "AND b.occupation <> 'Sales')"), "b.occupation <> 'Sales'",
                   "the ground truth adult.occupation"),
    "join_on": ([], f"SELECT a.id, {OP} FROM adult a JOIN (SELECT 'Sales' AS o) j ON a.occupation = j.o",
                "JOIN ... ON a.occupation = j.o", "the ground truth adult.occupation"),
    "semi_join_on_the_key": ([], (f"SELECT a.id, {OP} FROM adult a SEMI JOIN (SELECT id FROM adult WHERE age > 80) s "
                                 "ON a.id = s.id"), "JOIN ... ON a.id = s.id", "the key adult.id"),
    "anti_join_filtered": ([], (f"SELECT a.id, {OP} FROM adult a ANTI JOIN (SELECT age FROM adult WHERE "
                                "occupation = 'Sales') s ON a.age = s.age"),
                           "WHERE occupation = 'Sales' in the subquery s", "the ground truth adult.occupation"),
    "having_in_a_derived_input": ([], (f"SELECT {OP} FROM (SELECT age, sex, education_num, any_value(workclass) AS "
                                      "workclass FROM adult GROUP BY ALL HAVING max(occupation) = 'Sales') t"),
                                  "HAVING MAX(occupation) = 'Sales' in the subquery t",
                                  "the ground truth adult.occupation"),
    "qualify": ([], f"SELECT id, {OP} FROM adult WHERE age > 70 QUALIFY count(*) OVER (PARTITION BY occupation) > 20",
                "QUALIFY COUNT(*) OVER (PARTITION BY occupation) > 20", "the ground truth adult.occupation"),
    "order_by_limit": ([], f"SELECT id, {OP} FROM adult WHERE age > 70 ORDER BY occupation LIMIT 20",
                       "ORDER BY occupation with a LIMIT", "the ground truth adult.occupation"),
    "order_by_the_key_limit_offset": ([], f"SELECT id, {OP} FROM adult WHERE age < 30 ORDER BY id LIMIT 50 OFFSET 5",
                                      "ORDER BY id with a LIMIT", "the key adult.id"),
    "distinct_on": ([], f"SELECT DISTINCT ON (occupation) id, {OP} FROM adult", "DISTINCT ON (occupation)",
                    "the ground truth adult.occupation"),
    "sample_after_a_filter": ([], (f"SELECT id, {OP} FROM (SELECT * FROM adult WHERE occupation = 'Sales') "
                                  "USING SAMPLE reservoir(50 ROWS) REPEATABLE (1)"),
                              "WHERE occupation = 'Sales' in a subquery", "the ground truth adult.occupation"),
    "tablesample_after_a_filter": ([], (f"SELECT id, {OP} FROM (SELECT * FROM adult TABLESAMPLE 10% WHERE occupation "
                                       "= 'Sales') t"), "WHERE occupation = 'Sales' in the subquery t",
                                   "the ground truth adult.occupation"),
    "cte": ([], f"WITH s AS (SELECT * FROM adult WHERE occupation = 'Sales') SELECT id, {OP} FROM s",
            "WHERE occupation = 'Sales' in the CTE s", "the ground truth adult.occupation"),
    "view": (["CREATE VIEW sales AS SELECT * FROM adult WHERE occupation = 'Sales'"],
             f"SELECT id, {OP} FROM sales WHERE age > 60", "in the view sales", "the ground truth adult.occupation"),
    "derived_column_of_a_subquery": ([], (f"SELECT id, {OP} FROM (SELECT id, age, sex, education_num, workclass, "
                                         "left(md5(occupation), 1) AS h FROM adult) t WHERE h = 'a'"),
                                     "WHERE h = 'a'", "the ground truth adult.occupation (through h)"),
    "window_column_of_a_cte": ([], (f"WITH r AS (SELECT *, row_number() OVER (PARTITION BY occupation ORDER BY age) "
                                   f"AS n FROM adult) SELECT id, {OP} FROM r WHERE n <= 10"), "WHERE n <= 10",
                               "the ground truth adult.occupation (through n)"),
    "union_branch": ([], (f"SELECT {OP} FROM (SELECT age, sex, education_num FROM adult WHERE occupation = 'Sales' "
                         "UNION ALL SELECT age, sex, education_num FROM adult WHERE age > 85) u"),
                     "WHERE occupation = 'Sales' in the subquery u", "the ground truth adult.occupation"),
    "intersect_on_the_key": ([], (f"SELECT {OP} FROM (SELECT id, age, sex, education_num FROM adult INTERSECT "
                                 "SELECT id, age, sex, education_num FROM adult WHERE age > 80) t"),
                             "INTERSECT on id in the subquery t", "the key adult.id"),
    "a_macro": (["CREATE MACRO is_sales(r) AS (SELECT occupation = 'Sales' FROM adult b WHERE b.id = r)"],
                f"SELECT id, {OP} FROM adult a WHERE is_sales(a.id)", "WHERE IS_SALES(a.id)", "is_sales(...)"),
    "a_variable": (["SET VARIABLE target = 'Sales'"], (f"SELECT id, {OP} FROM adult WHERE occupation = "
                                                      "getvariable('target')"), "getvariable", "occupation"),
    "group_by_the_ground_truth": ([], f"SELECT occupation, {GROUP} FROM adult WHERE age > 75 GROUP BY occupation",
                                  "GROUP BY occupation", "the ground truth adult.occupation"),
    "group_by_an_expression_of_it": ([], f"SELECT {GROUP} FROM adult WHERE age > 75 GROUP BY left(occupation, 4)",
                                     "GROUP BY LEFT(occupation, 4)", "the ground truth adult.occupation"),
    "group_by_a_cte_column_derived_from_it": ([], (f"WITH t AS (SELECT *, upper(occupation) AS o FROM adult) "
                                                  f"SELECT {GROUP} FROM t WHERE age > 75 GROUP BY o"), "GROUP BY",
                                              "the ground truth adult.occupation"),
    "group_by_all": ([], f"SELECT occupation, {GROUP} FROM adult WHERE age > 75 GROUP BY ALL", "GROUP BY occupation",
                     "the ground truth adult.occupation"),
    "group_by_the_key": ([], f"SELECT {GROUP} FROM adult WHERE age > 75 GROUP BY id", "GROUP BY id",
                         "the key adult.id"),
}


@pytest.mark.parametrize("before, query, predicate, column", list(REFUSED.values()), ids=list(REFUSED))
def test_rows_chosen_by_a_protected_column_are_refused_before_anything_is_published(db, crowd, before, query,
                                                                                      predicate, column):
    for statement in before:
        db.sql(statement)
    with pytest.raises(PrivacyError) as explained:  # explain() predicts the refusal: the same planning, the same error
        db.explain(query)
    with pytest.raises(PrivacyError) as refused:
        db.sql(query)
    message = str(refused.value)
    assert str(explained.value) == message
    assert predicate in message and column in message, message
    assert ("core or quasi-identifier" in message) and "nothing was published" in message
    nothing_bought(db, crowd)


def test_the_refusal_names_the_predicate_the_column_and_what_is_allowed(db, crowd):
    with pytest.raises(PrivacyError) as refused:
        db.sql("SELECT id, getposition(*) FROM adult WHERE occupation = 'Armed-Forces'")
    assert str(refused.value) == (
        "getposition(...): the rows it would publish are chosen by WHERE occupation = 'Armed-Forces', which reads "
        "the ground truth adult.occupation: workers would learn it from which rows they are shown, though no row "
        "shows it. Choose the rows by core or quasi-identifier columns (or by an operator's answers); nothing was "
        "published")
    nothing_bought(db, crowd)


def test_an_inner_operator_of_a_refused_statement_never_runs(db, crowd):
    """The whole statement is planned before its first operator publishes: the inner call over allowed rows does not
    run when the outer one's rows are chosen by the ground truth."""
    inner = f"SELECT id, age, sex, education_num, workclass, occupation, {OP} AS first FROM adult WHERE age > 80"
    with pytest.raises(PrivacyError, match="WHERE occupation = 'Sales'"):
        db.sql(f"SELECT id, {OP} FROM ({inner}) t WHERE occupation = 'Sales'")
    nothing_bought(db, crowd)


ALLOWED = {
    "a_quasi_identifier": f"SELECT id, {OP} AS job FROM adult WHERE age > 85",
    "a_core_column": f"SELECT id, {OP} AS job FROM adult WHERE age > 80 AND workclass = 'Self-emp-inc'",
    "a_column_without_a_role": f"SELECT id, {OP} AS job FROM adult WHERE age > 75 AND native_country <> 'Mexico'",
    "the_operators_own_answer": f"SELECT id, {OP} AS job FROM adult WHERE age > 85 AND getposition(*, k := 5, "
                                "assignments := 1) = 'Sales'",
    "order_by_the_key_without_a_limit": f"SELECT id, {OP} AS job FROM adult WHERE age > 85 ORDER BY id",
    "a_limit_without_order": f"SELECT * FROM (SELECT id, {OP} AS job FROM adult WHERE age < 30 LIMIT 40) ORDER BY id",
    "order_by_quasi_identifiers_limit": f"SELECT id, {OP} AS job FROM adult WHERE age < 30 ORDER BY age, "
                                        "education_num LIMIT 40",
    "group_by_a_core_column": f"SELECT workclass, {GROUP} FROM adult WHERE age > 75 GROUP BY workclass",
}


@pytest.mark.parametrize("query", list(ALLOWED.values()), ids=list(ALLOWED))
def test_rows_chosen_by_published_columns_or_answers_are_asked_about(db, crowd, adult_frame, query):
    db.sql(query).df()
    items = published_items(db)  # the scanner: what workers saw holds no occupation, no key, no class below k
    assert len(items) > 0
    assert leaked_protected(items, adult_frame, ["occupation"], "id") == []
    assert len(small_classes(items, adult_frame, QIS, 5)) == 0


def test_a_filter_on_an_earlier_operators_answers_is_not_a_protected_column(db):
    """A CTE's answer column (and a key matched to a group operator's pick) chooses rows by what the crowd said, from
    what it was shown: planned without a refusal (explain() buys nothing, so the later input is not estimated)."""
    asked = f"WITH a AS (SELECT *, {OP} AS job FROM adult WHERE age > 85) "
    plan = db.explain(asked + f"SELECT id, {OP} FROM a WHERE job = 'Sales'")
    assert [o.operator for o in plan.operators] == ["getposition", "getposition"]
    picked = (f"WITH best AS (SELECT workclass, {GROUP} AS pick FROM adult WHERE age > 85 GROUP BY workclass) "
              f"SELECT p.id, getposition(p.*, k := 5) FROM adult p JOIN best b ON b.pick = p.id")
    assert [o.operator for o in db.explain(picked).operators] == ["getcandidate", "getposition"]
    with pytest.raises(PrivacyError, match="the key adult.id"):  # the key against anything but answers still is one
        db.explain(picked.replace("b.pick = p.id", "b.pick = p.id AND p.id > 10"))


@pytest.mark.parametrize("statement, chosen", [
    ("CREATE TABLE s AS SELECT * FROM adult WHERE occupation IN ('Sales', 'Tech-support')",
     "WHERE occupation IN ('Sales', 'Tech-support'), which reads the ground truth adult.occupation"),
    # (ours: a key or rowid marks no table a statement fills: joins on the key combine tables, and a foreign key
    # or a key filter cannot be told from them here; an operator's own clause on the key is still refused)
    ("INSERT INTO s SELECT * FROM adult WHERE age > 80 ORDER BY id LIMIT 5", None),
    ("INSERT INTO s SELECT * FROM adult WHERE age > 80 ORDER BY occupation LIMIT 5",
     "ORDER BY occupation with a LIMIT, which reads the ground truth adult.occupation"),
    ("DELETE FROM adult WHERE occupation <> 'Sales'", "WHERE occupation <> 'Sales', which reads the ground truth"),
    ("CREATE TABLE s AS SELECT * FROM adult WHERE age > 80", None),
    ("DELETE FROM adult WHERE age < 30", None),
])
def test_chosen_by_says_when_a_statement_keeps_rows_chosen_by_a_protected_column(db, statement, chosen):
    """For the statements that make the rows a later operator publishes as they are (``selection.chosen_by``)."""
    tree = sqlglot.parse_one(statement, read="duckdb")
    source = tree.expression if isinstance(tree, (sqlglot.exp.Create, sqlglot.exp.Insert)) else tree
    found = chosen_by(db.con, source)
    assert (found is None) if chosen is None else (chosen in found), found
