"""Class 2: syntax where sqlglot's reading differs from DuckDB's binding.

The claim attacked (docs/roles.md): lineage follows "CTEs, subqueries, views, unions, stars with EXCLUDE/REPLACE/RENAME,
struct fields, scalar subqueries, window partitions". DuckDB's dialect has constructs a generic SQL reader binds
differently: positional references, set operations BY NAME, column lists on aliases, COLUMNS(), a table alias used
as a row struct, lambda parameters that shadow column names. Each case puts a protected value (a canary marker) in a
column named like a core column. Safe: refused, or that column withheld; no marker reaches a worker.
"""

from __future__ import annotations

import pytest

SHAPE = "SELECT age, sex, education_num, {expr} AS workclass, hours_per_week, job FROM canary c"
OP = "getposition(*, k := 5, assignments := 1)"


def over(source: str) -> str:
    return f"SELECT {OP} AS ans FROM ({source}) t"


def col(expr: str) -> str:
    return over(SHAPE.format(expr=expr))


# canary's columns, in order: pid, age, sex, education_num, workclass, hours_per_week, job, occupation, secret, note
BY_NAME_1 = "SELECT pid, age, sex, education_num, workclass, hours_per_week, job FROM canary WHERE false"
BY_NAME_2 = ("SELECT occupation AS workclass, age, sex, education_num, workclass AS pid, hours_per_week, job "
             "FROM canary")
RENAMED = "canary AS c(pid, age, sex, education_num, occupation, hours_per_week, job, workclass, secret, note)"

CASES = {
    # positional references
    "positional_reference": col("#8 || left(c.workclass, 0)"),
    "positional_reference_alone": col("#9"),
    "positional_reference_in_cte": (
        f"WITH p AS (SELECT age, sex, education_num, #8 AS workclass, hours_per_week, job FROM canary) "
        f"SELECT {OP} AS ans FROM p"),
    # set operations by name
    "union_all_by_name_reordered": over(f"{BY_NAME_1} UNION ALL BY NAME {BY_NAME_2}"),
    "union_by_name_reordered": over(f"{BY_NAME_1} UNION BY NAME {BY_NAME_2}"),
    "union_all_by_name_branch_order_swapped": over(
        "SELECT age, sex, education_num, workclass, hours_per_week, job FROM canary WHERE false UNION ALL BY NAME "
        "SELECT age, sex, education_num, hours_per_week AS workclass, occupation AS hours_per_week, job FROM canary"),
    # column lists that rename
    "table_alias_column_list_swaps_names": over(
        f"SELECT age, sex, education_num, workclass, hours_per_week, job FROM {RENAMED}"),
    "subquery_alias_column_list": over(
        "SELECT * FROM (SELECT age, sex, education_num, occupation, hours_per_week, job FROM canary) "
        "AS s(age, sex, education_num, workclass, hours_per_week, job)"),
    "cte_column_list": (
        "WITH p(age, sex, education_num, workclass, hours_per_week, job) AS (SELECT age, sex, education_num, "
        f"occupation, hours_per_week, job FROM canary) SELECT {OP} AS ans FROM p"),
    # stars and COLUMNS()
    "star_replace": over("SELECT * REPLACE (occupation AS workclass) FROM canary"),
    "star_rename_swap": over("SELECT * RENAME (occupation AS workclass, workclass AS occupation) FROM canary"),
    "columns_regex_aliased": over(
        "SELECT age, sex, education_num, COLUMNS('^occ') AS 'workclass', hours_per_week, job FROM canary"),
    "columns_lambda_aliased": over(
        "SELECT age, sex, education_num, COLUMNS(lambda n: n = 'secret') AS 'workclass', hours_per_week, job "
        "FROM canary"),
    "columns_unpacked_into_concat": col("concat(*COLUMNS('^(workclass|occupation)$'))"),
    # structs
    "struct_pack_field": col("(struct_pack(w := c.workclass, o := c.occupation)).o"),
    "struct_literal_field": col("{'w': c.workclass, 'o': c.occupation}.o"),
    "struct_extract_by_position": col("struct_extract(row(c.workclass, c.occupation), 2)"),
    "unnest_struct_names_the_column": over(
        "SELECT age, sex, education_num, hours_per_week, job, unnest({'workclass': occupation}) FROM canary"),
    "struct_star_expansion": over(
        "SELECT s.*, job FROM (SELECT {'age': age, 'sex': sex, 'education_num': education_num, "
        "'workclass': occupation, 'hours_per_week': hours_per_week} AS s, job FROM canary)"),
    "table_alias_as_row_struct": col("c::VARCHAR"),
    "table_alias_struct_extract": col("struct_extract(c, 'secret')"),
    # lambdas and comprehensions
    "lambda_parameter_shadows_core_column": col("list_transform([c.occupation], lambda workclass: workclass)[1]"),
    "lambda_ignores_its_parameter": col("list_transform([c.workclass], lambda x: c.occupation)[1]"),
    "list_comprehension_parameter_shadows": col("[workclass FOR workclass IN [c.secret]][1]"),
    "list_reduce_parameters_shadow": col("list_reduce([c.workclass, c.occupation], lambda workclass, hours_per_week: "
                                         "hours_per_week)"),
    # aliases and identifiers
    "lateral_alias_reference": over(
        "SELECT age, sex, education_num, occupation AS o2, o2 AS workclass, hours_per_week, job FROM canary"),
    "quoted_identifier_other_case": col('c."OCCUPATION"'),
    "lateral_join_subquery": over(
        "SELECT c.age, c.sex, c.education_num, l.workclass, c.hours_per_week, c.job FROM canary c, "
        "LATERAL (SELECT c.occupation AS workclass) l"),
    "natural_join_brings_the_column": over(
        "SELECT * FROM (SELECT pid, age, sex, education_num, hours_per_week, job FROM canary) NATURAL JOIN "
        "(SELECT pid, occupation AS workclass FROM canary)"),
    "positional_join": over(
        "SELECT c.age, c.sex, c.education_num, p.workclass, c.hours_per_week, c.job FROM canary c "
        "POSITIONAL JOIN (SELECT occupation AS workclass FROM canary) p"),
    "unpivot_value_column": over(
        "SELECT age, sex, education_num, workclass, hours_per_week, job FROM (UNPIVOT (SELECT age, sex, "
        "education_num, hours_per_week, job, occupation FROM canary) ON occupation INTO NAME n VALUE workclass)"),
    "from_first_syntax": over("FROM canary SELECT age, sex, education_num, secret AS workclass, hours_per_week, job"),
    "correlated_scalar_subquery_without_from": col("(SELECT c.occupation)"),
    "row_cast_to_named_struct": col("CAST(ROW(c.occupation) AS STRUCT(workclass VARCHAR)).workclass"),
    # JSON, maps, unions and text formatting (found by a probe of stop 40: withheld or refused)
    "json_object_field": col("json_object('o', c.occupation)->>'o'"),
    "to_json_of_the_row": col("to_json(c)::VARCHAR"),
    "map_key_from_a_sensitive_column": col("map([c.occupation], [1])::VARCHAR"),
    "union_value_extracted": col("union_extract(union_value(k := c.secret), 'k')"),
    "format_and_printf": col("format('{}', c.occupation) || printf('%s', c.pid)"),
    "greatest_of_a_core_and_a_sensitive_column": col("greatest(c.workclass, c.secret)"),
    "values_row_in_a_scalar_subquery": col("(SELECT v FROM (VALUES (c.occupation)) x(v))"),
    "histogram_over_a_window": col("histogram(c.occupation) OVER ()::VARCHAR"),
    "lag_over_an_order": col("lag(c.secret) OVER (ORDER BY c.age)"),
    "asof_join_brings_the_column": over(
        "SELECT c.age, c.sex, c.education_num, d.occupation AS workclass, c.hours_per_week, c.job "
        "FROM canary c ASOF JOIN canary d ON c.pid = d.pid AND c.age >= d.age"),
    "recursive_cte_seeded_with_a_sensitive_column": (
        "WITH RECURSIVE r(age, sex, education_num, workclass, hours_per_week, job, n) AS ("
        "SELECT age, sex, education_num, secret, hours_per_week, job, 1 FROM canary UNION ALL "
        "SELECT age, sex, education_num, workclass, hours_per_week, job, n + 1 FROM r WHERE n < 1) "
        f"SELECT {OP} AS ans FROM r"),
}


@pytest.mark.parametrize("query", list(CASES.values()), ids=list(CASES))
def test_syntax_read_differently(canary_env, canary_frame, query):
    env = canary_env
    env.run(query)
    env.verdict(env.findings(canary_frame))


# a raw quasi-identifier under a core column's name, by the same tricks
RAW_QI = {
    "positional_reference_raw_age": (col("#2::VARCHAR"), {"workclass": "age"}),
    "table_alias_column_list_raw_age": (over(
        "SELECT age, sex, education_num, workclass, hours_per_week, job FROM canary AS c(pid, hours_per_week, sex, "
        "education_num, workclass, age, job, occupation, secret, note)"), {"hours_per_week": "age"}),
    "union_all_by_name_raw_age": (over(
        "SELECT pid, age, sex, education_num, workclass, hours_per_week, job FROM canary WHERE false "
        "UNION ALL BY NAME SELECT age AS hours_per_week, sex, education_num, workclass, hours_per_week AS pid, "
        "age, job FROM canary"), {"hours_per_week": "age"}),
}


@pytest.mark.parametrize("query,aliases", list(RAW_QI.values()), ids=list(RAW_QI))
def test_syntax_publishes_a_raw_quasi_identifier(canary_env, canary_frame, query, aliases):
    env = canary_env
    env.run(query)
    env.verdict(env.findings(canary_frame, aliases=aliases))
