"""Class 1: functions that read more than their arguments.

The claim attacked (docs/roles.md): a published column's lineage is computed through the whole statement, and a column
derived from a sensitive, ground-truth or key column, or of lineage crowddb cannot establish, is withheld. A macro,
a session variable, a table macro or ``query()`` reads tables that never appear among its arguments: the column it
fills looks like a copy of an innocent core column. Safe: the column is withheld or the query refused; nothing
protected (a canary marker, the raw occupation, a raw quasi-identifier) reaches a worker.
"""

from __future__ import annotations

import pytest

# the operator's input: the canary's published shape, one column filled by the attack (and the ground truth, `job`,
# which the simulated crowd answers from and crowddb withholds)
SHAPE = "SELECT age, sex, education_num, {expr} AS workclass, hours_per_week, job FROM canary c"
QUERY = f"SELECT getposition(*, k := 5, assignments := 1) AS ans FROM ({SHAPE}) t"

SECRETOF = "CREATE MACRO secretof(r) AS (SELECT occupation FROM canary c2 WHERE c2.rowid = r)"

CASES = {
    # scalar macros
    "macro_rowid_lookup": ([SECRETOF], QUERY.format(expr="secretof(c.rowid)")),
    "macro_ignores_its_core_argument": (
        ["CREATE MACRO jobof(r, w) AS (SELECT occupation FROM canary c2 WHERE c2.rowid = r)"],
        QUERY.format(expr="jobof(c.rowid, c.workclass)")),
    "macro_lookup_by_core_values": (
        [("CREATE MACRO occ_by(a, s, e, w, h) AS (SELECT first(occupation) FROM canary c2 WHERE c2.age = a "
         "AND c2.sex = s AND c2.education_num = e AND c2.workclass = w AND c2.hours_per_week = h)")],
        QUERY.format(expr="occ_by(c.age, c.sex, c.education_num, c.workclass, c.hours_per_week)")),
    "macro_without_arguments": (
        ["CREATE MACRO all_secrets() AS (SELECT string_agg(occupation, ',') FROM canary)"],
        QUERY.format(expr="all_secrets() || c.workclass")),
    "macro_returning_the_key": (
        ["CREATE MACRO keyof(r) AS (SELECT pid FROM canary c2 WHERE c2.rowid = r)"],
        QUERY.format(expr="keyof(c.rowid)")),
    "macro_returning_a_noncore_column": (
        ["CREATE MACRO noteof(r) AS (SELECT note FROM canary c2 WHERE c2.rowid = r)"],
        QUERY.format(expr="noteof(c.rowid)")),
    "macro_returning_the_whole_row": (
        ["CREATE MACRO rowof(r) AS (SELECT c2 FROM canary c2 WHERE c2.rowid = r)"],
        QUERY.format(expr="rowof(c.rowid)::VARCHAR")),
    "macro_shadowing_builtin_upper": (
        ["CREATE MACRO upper(w) AS (SELECT first(secret) FROM canary c2 WHERE c2.workclass = w)"],
        QUERY.format(expr="upper(c.workclass)")),
    "macro_shadowing_builtin_trim_on_rowid_free_input": (
        ["CREATE MACRO trim(w) AS (SELECT string_agg(occupation, ';') FROM canary c2 WHERE c2.workclass = w)"],
        QUERY.format(expr="trim(c.workclass)")),
    "macro_inside_a_view": (
        [SECRETOF, ("CREATE VIEW v AS SELECT age, sex, education_num, secretof(rowid) AS workclass, hours_per_week, "
                   "job FROM canary")],
        "SELECT getposition(*, k := 5, assignments := 1) AS ans FROM v"),
    "macro_and_query_in_one_script": (
        [], SECRETOF + "; " + QUERY.format(expr="secretof(c.rowid)")),
    "macro_in_a_cte": (
        [SECRETOF],
        "WITH p AS (" + SHAPE.format(expr="secretof(c.rowid)") + ") "
        "SELECT getposition(*, k := 5, assignments := 1) AS ans FROM p"),
    # table macros
    "table_macro_in_scalar_subquery": (
        ["CREATE MACRO secrets() AS TABLE SELECT rowid AS r, occupation AS o FROM canary"],
        QUERY.format(expr="(SELECT o FROM secrets() s WHERE s.r = c.rowid)")),
    "table_macro_as_the_input": (
        [("CREATE MACRO people() AS TABLE SELECT age, sex, education_num, occupation AS workclass, hours_per_week, "
         "job FROM canary")],
        "SELECT getposition(*, k := 5, assignments := 1) AS ans FROM people()"),
    "table_macro_over_query_table": (
        ["CREATE MACRO tab(n) AS TABLE SELECT * FROM query_table(n)"],
        "SELECT getposition(*, k := 5, assignments := 1) AS ans FROM tab('canary')"),
    # session variables
    "variable_list_indexed_by_rowid": (
        ["SET VARIABLE secrets = (SELECT list(occupation ORDER BY rowid) FROM canary)"],
        QUERY.format(expr="getvariable('secrets')[c.rowid + 1]")),
    "variable_map_keyed_by_core_values": (
        [("SET VARIABLE m = (SELECT map(list(k), list(o)) FROM (SELECT age || sex || education_num || hours_per_week "
         "|| workclass AS k, first(occupation) AS o FROM canary GROUP BY k))")],
        QUERY.format(expr="getvariable('m')[c.age || c.sex || c.education_num || c.hours_per_week || c.workclass]")),
    "variable_string_split_by_rowid": (
        ["SET VARIABLE s = (SELECT string_agg(secret, '|' ORDER BY rowid) FROM canary)"],
        QUERY.format(expr="split_part(getvariable('s'), '|', (c.rowid + 1)::INTEGER)")),
    "variable_holding_dynamic_sql_for_query": (
        [("SET VARIABLE q = 'SELECT age, sex, education_num, occupation AS workclass, hours_per_week, job "
         "FROM canary'")],
        "SELECT getposition(*, k := 5, assignments := 1) AS ans FROM query(getvariable('q'))"),
    # query() and query_table()
    "query_function_as_the_input": (
        [], ("SELECT getposition(*, k := 5, assignments := 1) AS ans FROM query('SELECT age, sex, education_num, "
            "occupation AS workclass, hours_per_week, job FROM canary')")),
    "query_table_as_the_input": (
        [], "SELECT getposition(*, k := 5, assignments := 1) AS ans FROM query_table('canary')"),
    "query_function_in_scalar_subquery": (
        [], QUERY.format(expr="(SELECT o FROM query('SELECT rowid AS r, occupation AS o FROM canary') q "
                              "WHERE q.r = c.rowid)")),
    # lambdas and list comprehensions over what a subquery read
    "list_comprehension_over_correlated_subquery": (
        [], QUERY.format(expr="[o FOR o IN (SELECT list(occupation) FROM canary c2 WHERE c2.rowid = c.rowid)][1]")),
    "lambda_over_a_variable": (
        ["SET VARIABLE secrets = (SELECT list(occupation ORDER BY rowid) FROM canary)"],
        QUERY.format(expr="list_transform([c.rowid], lambda x: getvariable('secrets')[x + 1])[1]")),
}

# raw quasi-identifiers through a function: the published fields look generalized-or-core, their values are raw
RAW_QI = {
    "macro_returns_raw_age_as_age": (
        ["CREATE MACRO ageof(r) AS (SELECT age FROM canary c2 WHERE c2.rowid = r)"],
        ("SELECT getposition(*, k := 5, assignments := 1) AS ans FROM (SELECT ageof(c.rowid) AS age, sex, "
        "education_num, workclass, hours_per_week, job FROM canary c) t"), None),
    "macro_returns_raw_qis_in_core_columns": (
        ["CREATE MACRO ageof(r) AS (SELECT age FROM canary c2 WHERE c2.rowid = r)",
         "CREATE MACRO eduof(r) AS (SELECT education_num FROM canary c2 WHERE c2.rowid = r)"],
        ("SELECT getposition(*, k := 5, assignments := 1) AS ans FROM (SELECT age, sex, education_num, "
        "eduof(c.rowid)::VARCHAR AS workclass, ageof(c.rowid) AS hours_per_week, job FROM canary c) t"),
        {"workclass": "education_num", "hours_per_week": "age"}),
    "macro_looks_up_raw_age_by_core_values": (
        [("CREATE MACRO ageof(w, h) AS (SELECT first(age ORDER BY age) FROM canary c2 WHERE c2.workclass = w "
         "AND c2.hours_per_week = h)")],
        ("SELECT getposition(*, k := 5, assignments := 1) AS ans FROM (SELECT age, sex, education_num, workclass, "
        "ageof(c.workclass, c.hours_per_week) AS hours_per_week, job FROM canary c) t"),
        {"hours_per_week": "age"}),
    "macro_looks_up_raw_qis_by_core_values": (
        [("CREATE MACRO qis(w, h) AS (SELECT first(age || ' ' || sex || ' ' || education_num ORDER BY age) "
         "FROM canary c2 WHERE c2.workclass = w AND c2.hours_per_week = h)")],
        ("SELECT getposition(*, k := 5, assignments := 1) AS ans FROM (SELECT age, sex, education_num, "
        "split_part(qis(c.workclass, c.hours_per_week), ' ', 1) AS workclass, "
        "split_part(qis(c.workclass, c.hours_per_week), ' ', 3)::INTEGER AS hours_per_week, job FROM canary c) t"),
        {"workclass": "age", "hours_per_week": "education_num"}),
    "variable_returns_raw_sex_and_age": (
        ["SET VARIABLE a = (SELECT list(age ORDER BY rowid) FROM canary)",
         "SET VARIABLE s = (SELECT list(sex ORDER BY rowid) FROM canary)"],
        ("SELECT getposition(*, k := 5, assignments := 1) AS ans FROM (SELECT age, sex, education_num, "
        "getvariable('s')[c.rowid + 1] AS workclass, getvariable('a')[c.rowid + 1] AS hours_per_week, job "
        "FROM canary c) t"),
        {"workclass": "sex", "hours_per_week": "age"}),
}


@pytest.mark.parametrize("setup,query", list(CASES.values()), ids=list(CASES))
def test_function_reads_more_than_its_arguments(canary_env, canary_frame, setup, query):
    env = canary_env
    env.run(*setup, query)
    env.verdict(env.findings(canary_frame))


@pytest.mark.parametrize("setup,query,aliases", list(RAW_QI.values()), ids=list(RAW_QI))
def test_function_publishes_a_raw_quasi_identifier(canary_env, canary_frame, setup, query, aliases):
    env = canary_env
    env.run(*setup, query)
    env.verdict(env.findings(canary_frame, aliases=aliases))


# the issue's own examples, on Adult with the README's roles
ADULT = {
    "issue_jobof_rowid_workclass": (
        ["CREATE MACRO jobof(r, w) AS (SELECT occupation FROM adult a2 WHERE a2.rowid = r)"],
        ("SELECT id, getposition(*, k := 5, assignments := 1) FROM (SELECT id, age, sex, education_num, "
        "jobof(rowid, workclass) AS workclass, hours_per_week, occupation FROM adult WHERE age > 75) t")),
    "issue_set_variable_jobs": (
        ["SET VARIABLE jobs = (SELECT list(occupation ORDER BY rowid) FROM adult)"],
        ("SELECT id, getposition(*, k := 5, assignments := 1) FROM (SELECT id, age, sex, education_num, "
        "getvariable('jobs')[rowid + 1] AS workclass, hours_per_week, occupation FROM adult WHERE age > 75) t")),
    "issue_macro_returning_raw_age": (
        [("CREATE MACRO ageof(w, h) AS (SELECT first(age ORDER BY age) FROM adult a2 WHERE a2.age > 75 "
         "AND a2.workclass = w AND a2.hours_per_week = h)")],
        ("SELECT id, getposition(*, k := 5, assignments := 1) FROM (SELECT id, age, sex, education_num, workclass, "
        "ageof(workclass, hours_per_week) AS hours_per_week, occupation FROM adult WHERE age > 75) t")),
    "issue_jobof_with_domain_and_no_ground_truth": (
        ["CREATE MACRO jobof(r, w) AS (SELECT occupation FROM adult a2 WHERE a2.rowid = r)"],
        ("SELECT id, getposition(*, k := 5, assignments := 1, domain := ['yes', 'no']) FROM (SELECT id, age, sex, "
        "education_num, jobof(rowid, workclass) AS workclass, hours_per_week FROM adult WHERE age > 75) t")),
}


@pytest.mark.parametrize("setup,query", list(ADULT.values()), ids=list(ADULT))
def test_issue_examples_on_adult(adult_env, over75, setup, query):
    env = adult_env
    env.run(*setup, query)
    env.verdict(env.findings(over75, aliases={"hours_per_week": "age"} if "ageof" in query else None))
