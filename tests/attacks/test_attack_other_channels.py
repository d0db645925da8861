"""Outside the nine classes: other channels from the database to a worker's screen.

Claims attacked: what a worker reads is the published items, the question and the answer domain (docs/sql.md,
``crowddb_hits``); the operator's arguments override its definition (``domain := [...]``, the job of
``getcandidate(*, 'teacher')``); every anonymizer keeps each published class at k rows or more (docs/roles.md: FKA's
samples "widened to cover k real rows"); ``anonymizer := 'none'`` "is allowed only when no quasi-identifier is
published"; ``PREPARE``/``EXECUTE`` and ``PIVOT`` are plain DuckDB around a crowd query.

Safe: refused, or nothing protected (a canary marker, a raw occupation) in any item, question, answer domain or column
name a worker sees, and no published class below k.
"""

from __future__ import annotations

import pytest

OP = "getposition(*, k := 5, assignments := 1{extra})"


def op(extra: str = "") -> str:
    return OP.format(extra=", " + extra if extra else "")


FKA, DATAFLY, INCOGNITO, NONE = (op(f"anonymizer := '{a}'") for a in ("fka", "datafly", "incognito", "none"))
DOMAIN_SUB = op("domain := (SELECT list(occupation ORDER BY pid)[1:3] FROM canary)")
DOMAIN_VAR = op("domain := getvariable('d')")
DOMAIN_AB = "domain := ['a', 'b']"  # rows without the ground truth: the answers to choose from given

CASES = {
    # the question text and the answer domain
    "getcandidate_job_from_a_scalar_subquery": (
        [], ("SELECT workclass, getcandidate(*, (SELECT max(occupation) FROM canary), k := 5, assignments := 1) "
            "AS pick FROM canary GROUP BY workclass"), None),
    "getcandidate_job_from_a_variable": (
        ["SET VARIABLE v = (SELECT max(secret) FROM canary)"],
        ("SELECT workclass, getcandidate(*, getvariable('v'), k := 5, assignments := 1) AS pick FROM canary "
        "GROUP BY workclass"), None),
    "getcandidate_job_from_a_group_aggregate": (
        [], ("SELECT workclass, getcandidate(*, max(occupation), k := 5, assignments := 1) AS pick FROM canary "
            "GROUP BY workclass"), None),
    "domain_from_a_subquery": (
        [], f"SELECT {DOMAIN_SUB} AS a FROM canary",
        None),
    "domain_from_a_variable": (
        ["SET VARIABLE d = (SELECT list(secret ORDER BY pid)[1:3] FROM canary)"],
        f"SELECT {DOMAIN_VAR} AS a FROM canary", None),
    # column names made from data
    "pivot_column_names_from_a_sensitive_column": (
        [], (f"SELECT {op()} AS a FROM (PIVOT (SELECT age, sex, education_num, workclass, hours_per_week, job, "
            "occupation FROM canary) ON occupation USING first(hours_per_week))"), None),
    # explicit operator arguments instead of *
    "explicit_arguments_name_a_sensitive_expression": (
        [], "SELECT getposition(age, sex, upper(occupation), k := 5, assignments := 1) AS a FROM canary", None),
    "explicit_argument_struct_of_the_row": (
        [], "SELECT getposition(c, k := 5, assignments := 1) AS a FROM canary c", None),
    # prepared statements
    "prepare_execute_swapped_column": (
        [(f"PREPARE p AS SELECT {op()} AS a FROM (SELECT age, sex, education_num, occupation AS workclass, "
         "hours_per_week, job FROM canary)")], "EXECUTE p", None),
    # other anonymizers must keep classes >= k too
    "anonymizer_fka": ([], f"SELECT {FKA} AS a FROM canary", None),
    "anonymizer_datafly": ([], f"SELECT {DATAFLY} AS a FROM canary", None),
    "anonymizer_incognito": ([], f"SELECT {INCOGNITO} AS a FROM canary", None),
    "anonymizer_none_with_renamed_qis": (
        [], (f"SELECT {NONE} AS a FROM (SELECT age AS yrs, sex AS gender, "
            "education_num AS schooling, workclass, hours_per_week, job FROM canary)"),
        {"yrs": "age", "gender": "sex", "schooling": "education_num"}),
    "anonymizer_none_with_qis_cast_to_text": (
        [], (f"SELECT {NONE} AS a FROM (SELECT age::VARCHAR || '' AS age, "
            "sex || '' AS sex, education_num::VARCHAR AS education_num, workclass, hours_per_week, job FROM canary)"),
        None),
    "tuples_per_hit_one_k_two": ([], f"SELECT {op('tuples_per_hit := 1')} AS a FROM canary", None),
    # catalog objects and statements whose values come from data (found by a probe of stop 40: withheld)
    "enum_type_made_of_a_sensitive_column": (
        ["CREATE TYPE occupations AS ENUM (SELECT DISTINCT occupation FROM canary)"],
        (f"SELECT {op()} AS a FROM (SELECT age, sex, education_num, "
         "array_to_string(enum_range(NULL::occupations), ',') AS workclass, hours_per_week, job FROM canary)"), None),
    "enum_type_made_of_a_secret_first_value": (
        ["CREATE TYPE secrets AS ENUM (SELECT DISTINCT secret FROM canary)"],
        (f"SELECT {op()} AS a FROM (SELECT age, sex, education_num, enum_first(NULL::secrets) AS workclass, "
         "hours_per_week, job FROM canary)"), None),
    # (found by a probe of stop 43: the members, indexed by a quasi-identifier, were published as a core column)
    "enum_members_indexed_by_a_quasi_identifier": (
        ["CREATE TYPE secret_list AS ENUM (SELECT DISTINCT secret FROM canary)"],
        (f"SELECT {op()} AS a FROM (SELECT age, sex, education_num, enum_range(NULL::secret_list)[c.age % 10 + 1] "
         "AS workclass, hours_per_week, job FROM canary c)"), None),
    "enum_members_by_a_cast_of_a_core_column": (
        ["CREATE TYPE secret_pairs AS ENUM (SELECT DISTINCT secret FROM canary)"],
        (f"SELECT {op()} AS a FROM (SELECT age, sex, education_num, coalesce(try_cast(c.job AS secret_pairs)::VARCHAR, "
         "enum_last(NULL::secret_pairs)::VARCHAR) AS workclass, hours_per_week, job FROM canary c)"), None),
    # a type as a value: the members of an ENUM made of a column, printed by what reads a type (stop 43)
    "make_type_prints_the_members": (
        ["CREATE TYPE secret_names AS ENUM (SELECT DISTINCT secret FROM canary)"],
        (f"SELECT {op()} AS a FROM (SELECT age, sex, education_num, make_type('secret_names')::VARCHAR || "
         "age::VARCHAR AS workclass, hours_per_week, job FROM canary)"), None),
    "a_bound_plan_prints_a_columns_type": (
        ["CREATE TYPE secret_plan AS ENUM (SELECT DISTINCT secret FROM canary)",
         "CREATE TABLE typed (pid VARCHAR, w secret_plan)"],
        (f"SELECT {op()} AS a FROM (SELECT age, sex, education_num, json_serialize_plan('SELECT w FROM typed') || "
         "age::VARCHAR AS workclass, hours_per_week, job FROM canary)"), None),
    "typeof_a_column_altered_to_the_type": (
        ["CREATE TYPE secret_type AS ENUM (SELECT DISTINCT secret FROM canary)",
         "CREATE TABLE altered AS SELECT pid, age, sex, education_num, hours_per_week, job, NULL::VARCHAR AS w "
         "FROM canary", "ALTER TABLE altered ALTER COLUMN w SET DATA TYPE secret_type"],
        (f"SELECT {op()} AS a FROM (SELECT age, sex, education_num, typeof(w) || age::VARCHAR AS workclass, "
         "hours_per_week, job FROM altered)"), None),
    "typeof_a_column_declared_of_the_type": (
        ["CREATE TYPE secret_decl AS ENUM (SELECT DISTINCT secret FROM canary)",
         "CREATE TABLE declared (pid VARCHAR, w secret_decl)", "INSERT INTO declared SELECT pid, NULL FROM canary"],
        (f"SELECT {op()} AS a FROM (SELECT c.age, c.sex, c.education_num, typeof(d.w) AS workclass, "
         "c.hours_per_week, c.job FROM canary c JOIN declared d USING (pid))"), None),
    "summarize_of_the_table": (
        [], (f"SELECT {op(DOMAIN_AB)} AS a FROM (SELECT max AS workclass, 40 AS hours_per_week "
             "FROM (SUMMARIZE canary))"), None),
    "describe_of_a_query": (
        [], (f"SELECT {op(DOMAIN_AB)} AS a FROM (SELECT column_name AS workclass, 40 AS hours_per_week "
             "FROM (DESCRIBE SELECT * FROM canary))"), None),
}


@pytest.mark.parametrize("setup,query,aliases", list(CASES.values()), ids=list(CASES))
def test_other_channel(canary_env, canary_frame, setup, query, aliases):
    env = canary_env
    env.run(*setup, query)
    env.verdict(env.findings(canary_frame, aliases=aliases))


# errors must come before anything is published (docs/python.md: "raised before anything is published or paid");
# a crowd query that publishes and then fails is judged a leak by the harness (a refusal after publication)
LATE = {
    "rowid_in_subquery_on_a_core_filter": (
        "SELECT id, getposition(*, k := 5, assignments := 1) AS job FROM adult a WHERE age > 75 "
        "AND rowid IN (SELECT rowid FROM adult WHERE workclass = 'Private')"),
    "semi_join_on_a_core_filter": (
        "SELECT a.id, getposition(*, k := 5, assignments := 1) AS job FROM adult a SEMI JOIN "
        "(SELECT id FROM adult WHERE workclass = 'Private') s ON a.id = s.id WHERE a.age > 75"),
}


@pytest.mark.parametrize("query", list(LATE.values()), ids=list(LATE))
def test_no_error_after_publication(adult_env, over75, query):
    env = adult_env
    env.run(query)
    env.verdict(env.findings(over75))
