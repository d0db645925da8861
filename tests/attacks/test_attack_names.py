"""Class 4: names that resolve to another table than the one roles (or a ledger, or a budget) were declared on.

Claims attacked: roles are kept per table (docs/roles.md); "Rows are told apart by the table's declared key ... the
same way in every release of the table, through views, CTEs and subqueries" and the guard refuses a release that
would break an earlier one (docs/privacy.md); the epsilon budget is "kept per table and protected unit".

* Roles: a temporary table, a table in another schema or in an ATTACHed database that shares the name ``adult`` and
  is dropped again, or shadows it (temp table, temp view, search_path, USE, a CTE of the same name): the next query
  must still publish Adult under its declared roles (no occupation, no raw quasi-identifier).
* The ledger: three releases of the people over 75, two of them through another spelling of the same table
  (``main.adult``, ``memory.main.adult``, a view or subquery over it). Safe: the guard refuses what would break the
  first release, so the independent composition checker finds no joint class below k, and ``privacy_report``'s
  ``smallest_joint_class`` agrees with it.
* The budget: ``TRUTH_DISCOVER`` over ``main.answers`` or ``(SELECT * FROM main.answers)`` after the budget is spent.
  Safe: refused; no worker's released epsilon exceeds the budget.
"""

from __future__ import annotations

import pytest

from .attacklib import ANSWERS, DISCOVER, budget_findings, ledger_findings

OP = "getposition(*, k := 5, assignments := 1)"
# an explicit answer domain: a table whose roles were lost (no ground truth left) is still published, as it would be
# on a real marketplace, instead of being refused for a reason that has nothing to do with privacy
PUBLISH = "SELECT id, getposition(*, k := 5, assignments := 1, domain := ['yes', 'no']) AS job FROM adult WHERE age > 75"
SWAPPED = "SELECT id, age, sex, education_num, occupation AS workclass, hours_per_week, occupation FROM {src}"

ROLE_CASES = {
    "temp_table_created_and_dropped": ["CREATE TEMP TABLE adult AS SELECT 1 AS z", "DROP TABLE temp.adult"],
    "other_schema_table_created_and_dropped": ["CREATE SCHEMA s", "CREATE TABLE s.adult AS SELECT 1 AS z",
                                               "DROP TABLE s.adult"],
    "other_schema_dropped_cascade": ["CREATE SCHEMA s", "CREATE TABLE s.adult AS SELECT 1 AS z",
                                     "DROP SCHEMA s CASCADE"],
    "attached_table_created_and_dropped": ["ATTACH ':memory:' AS other", "CREATE TABLE other.adult AS SELECT 1 AS z",
                                           "DROP TABLE other.adult"],
    "temp_view_created_and_dropped": ["CREATE TEMP VIEW adult AS SELECT 1 AS z", "DROP VIEW temp.adult"],
    "temp_table_shadows_with_swapped_columns": [
        "CREATE TEMP TABLE adult AS " + SWAPPED.format(src="memory.main.adult")],
    "temp_view_shadows_with_swapped_columns": [
        "CREATE TEMP VIEW adult AS " + SWAPPED.format(src="memory.main.adult")],
    "search_path_schema_shadows": [
        "CREATE SCHEMA s", "CREATE TABLE s.adult AS " + SWAPPED.format(src="main.adult"),
        "SET search_path = 's,main'"],
    "use_attached_catalog_shadows": [
        "ATTACH ':memory:' AS other", "CREATE TABLE other.adult AS " + SWAPPED.format(src="memory.main.adult"),
        "USE other"],
    "table_renamed_and_replaced": [
        "ALTER TABLE adult RENAME TO adult_old", "CREATE TABLE adult AS " + SWAPPED.format(src="adult_old")],
}


DROPS = ["temp_table_created_and_dropped", "other_schema_table_created_and_dropped", "other_schema_dropped_cascade",
         "attached_table_created_and_dropped", "temp_view_created_and_dropped"]


@pytest.mark.parametrize("setup", list(ROLE_CASES.values()), ids=list(ROLE_CASES))
def test_roles_follow_the_name(adult_env, over75, setup):
    env = adult_env
    env.run(*setup, PUBLISH)
    env.verdict(env.findings(over75))


@pytest.mark.parametrize("setup", [ROLE_CASES[c] for c in DROPS], ids=DROPS)
def test_roles_follow_the_name_into_anonymize(adult_env, over75, setup):
    """The same role-dropping dance, then ANONYMIZE naming one quasi-identifier (docs/sql.md: the list may only add to
    the declared ones): the declared quasi-identifiers must all still be generalized."""
    env = adult_env
    env.run(*setup)
    env.release("SELECT * FROM ANONYMIZE((SELECT * FROM adult WHERE age > 75), k := 5, quasi_identifiers := ['age'])",
                5)
    env.verdict(env.class_findings(over75) + env.protected_findings(over75, [], "id"))


SHADOW_QUERIES = {
    "cte_named_like_the_table": (
        "WITH adult AS (" + SWAPPED.format(src="main.adult") + f") SELECT id, {OP} AS job FROM adult "
        "WHERE age > 75"),
    "subquery_aliased_like_the_table": (
        f"SELECT id, {OP} AS job FROM (" + SWAPPED.format(src="adult") + ") AS adult WHERE age > 75"),
    "cte_named_like_the_table_in_a_view": (
        "CREATE VIEW v AS WITH adult AS (" + SWAPPED.format(src="main.adult") + ") SELECT * FROM adult", 
        f"SELECT id, {OP} AS job FROM v WHERE age > 75"),
}


@pytest.mark.parametrize("statements", [q if isinstance(q, tuple) else (q,) for q in SHADOW_QUERIES.values()],
                         ids=list(SHADOW_QUERIES))
def test_roles_follow_a_shadowing_name(adult_env, over75, statements):
    env = adult_env
    env.run(*statements)
    env.verdict(env.findings(over75))


# ------------------------------------------------------------------------------------------------- the ledger

RELEASE = "SELECT {OP} AS job FROM {src} WHERE age > 75{where}"
LEDGER_NAMES = {
    "main_dot_adult": ([], "main.adult"),
    "catalog_main_adult": ([], "memory.main.adult"),
    "catalog_dot_adult": ([], "memory.adult"),
    "quoted_upper_case": ([], '"ADULT"'),
    "subquery_over_main_adult": ([], "(SELECT * FROM main.adult) a"),
    "view_over_main_adult": (["CREATE VIEW va AS SELECT * FROM main.adult"], "va"),
    "temp_view_over_adult": (["CREATE TEMP VIEW vt AS SELECT * FROM adult"], "vt"),
    "same_name_control": ([], "adult"),
}


@pytest.mark.parametrize("setup,src", list(LEDGER_NAMES.values()), ids=list(LEDGER_NAMES))
def test_ledger_follows_the_name(token_env, tokened, over75, setup, src):
    """Three releases of the people over 75, the second and third through another spelling of Adult."""
    env = token_env
    env.run(*setup,
            RELEASE.format(OP=OP, src="adult", where=""),
            RELEASE.format(OP=OP, src=src, where=" AND sex = 'Male'"),
            RELEASE.format(OP=OP, src=src, where=" AND education_num > 9"))
    env.verdict(ledger_findings(env, tokened) + env.findings(over75))


def test_ledger_anonymize_through_main_adult(token_env, tokened, over75):
    """A crowd release of the people over 75, then ANONYMIZE of a subset of them through main.adult."""
    env = token_env
    env.run(RELEASE.format(OP=OP, src="adult", where=""))
    env.release("SELECT * FROM ANONYMIZE((SELECT * FROM main.adult WHERE age > 75 AND sex = 'Male'), k := 5)", 5)
    env.release("SELECT * FROM ANONYMIZE((SELECT * FROM main.adult WHERE age > 75 AND education_num > 9), k := 5)",
                5)
    env.verdict(ledger_findings(env, tokened) + env.class_findings(over75))


# ------------------------------------------------------------------------------------------------- the budget

BUDGET_NAMES = {
    "main_dot_answers": ([], "main.answers"),
    "catalog_main_answers": ([], "memory.main.answers"),
    "subquery_over_main_answers": ([], "(SELECT * FROM main.answers)"),
    "subquery_over_answers": ([], "(SELECT * FROM answers)"),
    "view_over_answers": (["CREATE VIEW av AS SELECT * FROM answers"], "av"),
    "quoted_upper_case": ([], '"ANSWERS"'),
    "query_table": ([], "query_table('answers')"),
}


@pytest.mark.parametrize("setup,src", list(BUDGET_NAMES.values()), ids=list(BUDGET_NAMES))
def test_budget_follows_the_name(make_env, setup, src):
    env = make_env({"answers": (ANSWERS, {})})
    first, second = DISCOVER.format(src="answers"), DISCOVER.format(src=src)
    env.run("SELECT * FROM PRIVACY_BUDGET(answers, epsilon := 2)", *setup, first, second, validate=False)
    env.verdict(budget_findings(env, [(first, 0.5), (second, 0.5)]))


