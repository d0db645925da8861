"""Class 7: row identity that does not follow the rows.

Claims attacked (docs/privacy.md): the ledger keeps the k-anonymity promise "for every row ever published", rows told
apart "by the table's declared key (hashed ...), else by DuckDB's rowid, the same way in every release of the table";
the epsilon budget is "kept per table and protected unit". The people are the same whatever the table's name, its key
values or the copy they are read from: a table renamed between releases, its key updated, a copy made by CREATE TABLE
AS or INSERT ... SELECT (key included), a copy in an attached database, a table rewritten in place. Each second
release must be judged against the first.

Safe (ledger): the later releases are refused (or served in the earlier boxes), so the independent composition checker,
which links one person's items across every release by a token published raw, finds no joint class below k.
Safe (budget): no worker's answers are released at more than the budget in total.
"""

from __future__ import annotations

import pytest

from .attacklib import ANSWERS, DISCOVER, budget_findings, ledger_findings

OP = "getposition(*, k := 5, assignments := 1)"
FIRST = f"SELECT {OP} AS job FROM adult WHERE age > 75"


def later(src: str) -> list[str]:
    return [f"SELECT {OP} AS job FROM {src} WHERE age > 75 AND sex = 'Male'",
            f"SELECT {OP} AS job FROM {src} WHERE age > 75 AND education_num > 9"]


LEDGER = {
    "table_renamed": (["ALTER TABLE adult RENAME TO people"], "people"),
    "key_shifted": (["UPDATE adult SET id = id + 1000000"], "adult"),
    "key_negated": (["UPDATE adult SET id = -id"], "adult"),
    "key_column_renamed": (["ALTER TABLE adult RENAME COLUMN id TO person"], "adult"),
    "key_column_dropped": (["ALTER TABLE adult DROP COLUMN id"], "adult"),
    "ctas_copy_with_key": (["CREATE TABLE people AS SELECT * FROM adult"], "people"),
    "insert_select_copy_with_key": (["CREATE TABLE people AS SELECT * FROM adult WHERE false",
                                     "INSERT INTO people SELECT * FROM adult"], "people"),
    "temp_copy": (["CREATE TEMP TABLE people AS SELECT * FROM adult"], "people"),
    "copy_in_attached_database": (["ATTACH ':memory:' AS other",
                                   "CREATE TABLE other.people AS SELECT * FROM adult"], "other.people"),
    "rows_deleted_and_reinserted": (["CREATE TABLE x AS SELECT * FROM adult", "DELETE FROM adult",
                                     "INSERT INTO adult SELECT * FROM x"], "adult"),
    "rewritten_in_place": (["CREATE OR REPLACE TABLE adult AS SELECT * FROM adult"], "adult"),
    "renamed_away_and_back": (["ALTER TABLE adult RENAME TO people", "CREATE TABLE adult AS SELECT * FROM people",
                               "DROP TABLE people"], "adult"),
}


@pytest.mark.parametrize("setup,src", list(LEDGER.values()), ids=list(LEDGER))
def test_ledger_follows_the_people(token_env, tokened, over75, setup, src):
    env = token_env
    env.run(FIRST, *setup, *later(src))
    env.verdict(ledger_findings(env, tokened) + env.findings(over75))


ANON_LATER = {
    "anonymize_over_ctas_copy": (["CREATE TABLE people AS SELECT * FROM adult"],
                                 "(SELECT * FROM people WHERE age > 75 AND sex = 'Male')"),
    "anonymize_over_renamed_table": (["ALTER TABLE adult RENAME TO people"],
                                     "(SELECT * FROM people WHERE age > 75 AND sex = 'Male')"),
    "anonymize_over_query_function": ([], "query('SELECT * FROM adult WHERE age > 75 AND sex = ''Male''')"),
}


@pytest.mark.parametrize("setup,source", list(ANON_LATER.values()), ids=list(ANON_LATER))
def test_ledger_follows_the_people_into_anonymize(token_env, tokened, over75, setup, source):
    env = token_env
    env.run(FIRST, *setup)
    env.release(f"SELECT * FROM ANONYMIZE({source}, k := 5, quasi_identifiers := ['age', 'sex', 'education_num'])",
                5)
    env.verdict(ledger_findings(env, tokened) + env.class_findings(over75))


BUDGET = {
    "answers_renamed": (["ALTER TABLE answers RENAME TO answers2"], "answers2"),
    "ctas_copy": (["CREATE TABLE answers2 AS SELECT * FROM answers"], "answers2"),
    "insert_select_copy": (["CREATE TABLE answers2 AS SELECT * FROM answers WHERE false",
                            "INSERT INTO answers2 SELECT * FROM answers"], "answers2"),
    "copy_in_attached_database": (["ATTACH ':memory:' AS other",
                                   "CREATE TABLE other.answers AS SELECT * FROM answers"], "other.answers"),
    "temp_copy_same_name": (["CREATE TEMP TABLE answers AS SELECT * FROM main.answers"], "answers"),
    "worker_ids_rewritten_in_place": (["UPDATE answers SET worker = worker || '#'"], "answers"),
    "rows_deleted_and_reinserted": (["CREATE TABLE x AS SELECT * FROM answers", "DELETE FROM answers",
                                     "INSERT INTO answers SELECT * FROM x"], "answers"),
    "dropped_and_recreated": (["CREATE TABLE x AS SELECT * FROM answers", "DROP TABLE answers",
                               "CREATE TABLE answers AS SELECT * FROM x"], "answers"),
    "query_function": ([], "query('SELECT * FROM answers')"),
}


@pytest.mark.parametrize("setup,src", list(BUDGET.values()), ids=list(BUDGET))
def test_budget_follows_the_people(make_env, setup, src):
    env = make_env({"answers": (ANSWERS, {})})
    first, second = DISCOVER.format(src="answers"), DISCOVER.format(src=src)
    env.run("SELECT * FROM PRIVACY_BUDGET(answers, epsilon := 2)", first, *setup, second, validate=False)
    env.verdict(budget_findings(env, [(first, 0.5), (second, 0.5)]))
