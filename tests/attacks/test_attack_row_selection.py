"""Class 5: which rows are shown, and the answer domain.

Claims attacked: "sensitive, ground-truth and key columns never leave" (README); the allow list decides column by
column what is published (docs/roles.md). It says nothing about rows: a crowd query whose rows are chosen by a
protected column (``WHERE occupation = ...``, IN / EXISTS / NOT EXISTS subqueries, a join on it, ORDER BY ... LIMIT,
QUALIFY, a sample after such a filter, an md5 prefix of it, a GROUP BY of a group operator) publishes generalized rows
that all share one occupation: every worker who sees an item knows that person's occupation. And ``getposition``
takes its answer choices from the input's ground-truth values, so the answer domain shown with the HIT lists exactly
the occupations of the rows asked about (one value, when they were chosen by it).

Safe: a crowd query whose rows were chosen by a protected column is refused (CrowdDBError); an answer domain is the
whole column's (or the operator's declared list), never the values of the rows shown.
"""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest

OP = "getposition(*, k := 5, assignments := 1)"
BASE = f"SELECT id, {OP} AS job FROM adult a WHERE age > 75 AND {{cond}}"
MD5 = hashlib.md5(b"Exec-managerial").hexdigest()[:3]

SELECTIONS = {
    "where_equals": [BASE.format(cond="occupation = 'Exec-managerial'")],
    "where_in_list": [BASE.format(cond="occupation IN ('Sales')")],
    "where_like_prefix": [BASE.format(cond="occupation LIKE 'Exec%'")],
    "where_derived_length": [BASE.format(cond="length(occupation) = 5")],
    "where_md5_prefix": [BASE.format(cond=f"left(md5(occupation), 3) = '{MD5}'")],
    "where_case_expression": [BASE.format(cond="CASE WHEN occupation = 'Sales' THEN true ELSE false END")],
    "where_not_equal_all_but_one": [BASE.format(cond="occupation NOT IN ('Adm-clerical', 'Craft-repair', "
                                                     "'Exec-managerial', 'Farming-fishing', 'Handlers-cleaners', "
                                                     "'Machine-op-inspct', 'Other-service', 'Priv-house-serv', "
                                                     "'Protective-serv', 'Sales', 'Transport-moving')")],
    "in_subquery": [BASE.format(cond="id IN (SELECT id FROM adult WHERE occupation = 'Sales')")],
    "exists_correlated": [BASE.format(cond="EXISTS (SELECT 1 FROM adult b WHERE b.id = a.id AND "
                                           "b.occupation = 'Sales')")],
    "not_exists_correlated": [BASE.format(cond="NOT EXISTS (SELECT 1 FROM adult b WHERE b.id = a.id AND "
                                               "b.occupation <> 'Sales')")],
    "any_subquery": [BASE.format(cond="id = ANY (SELECT id FROM adult WHERE occupation = 'Sales')")],
    "rowid_in_subquery": [BASE.format(cond="rowid IN (SELECT rowid FROM adult WHERE occupation = 'Sales')")],
    "where_through_variable": ["SET VARIABLE target = 'Sales'",
                               BASE.format(cond="occupation = getvariable('target')")],
    "where_through_macro": ["CREATE MACRO is_sales(r) AS (SELECT occupation = 'Sales' FROM adult b WHERE b.id = r)",
                            BASE.format(cond="is_sales(a.id)")],
    "join_on_filtered_subquery": [
        (f"SELECT a.id, {OP} AS job FROM adult a JOIN (SELECT id AS sid FROM adult WHERE occupation = 'Sales') s "
        "ON a.id = s.sid WHERE a.age > 75")],
    "join_on_the_protected_column": [
        (f"SELECT a.id, {OP} AS job FROM adult a JOIN (SELECT 'Sales' AS o) j ON a.occupation = j.o "
        "WHERE a.age > 75")],
    "semi_join": [
        (f"SELECT a.id, {OP} AS job FROM adult a SEMI JOIN (SELECT id FROM adult WHERE occupation = 'Sales') s "
        "ON a.id = s.id WHERE a.age > 75")],
    "order_by_protected_limit": [
        f"SELECT id, {OP} AS job FROM adult WHERE age > 75 ORDER BY occupation LIMIT 20"],
    "order_by_predicate_limit": [
        f"SELECT id, {OP} AS job FROM adult WHERE age > 75 ORDER BY occupation = 'Sales' DESC, id LIMIT 21"],
    "qualify_window_on_protected": [
        f"SELECT id, {OP} AS job FROM adult WHERE age > 75 QUALIFY dense_rank() OVER (ORDER BY occupation) = 1"],
    "qualify_partition_count": [
        (f"SELECT id, {OP} AS job FROM adult WHERE age > 75 "
        "QUALIFY count(*) OVER (PARTITION BY occupation) = 21 AND occupation = 'Sales'")],
    "sample_after_protected_filter": [
        (f"SELECT id, {OP} AS job FROM (SELECT * FROM adult WHERE age > 75 AND occupation = 'Exec-managerial') "
        "USING SAMPLE reservoir(20 ROWS) REPEATABLE (1)")],
    "cte_filter": [
        f"WITH s AS (SELECT * FROM adult WHERE occupation = 'Sales') SELECT id, {OP} AS job FROM s WHERE age > 75"],
    "view_filter": ["CREATE VIEW sales AS SELECT * FROM adult WHERE occupation = 'Sales'",
                    f"SELECT id, {OP} AS job FROM sales WHERE age > 75"],
    "table_made_by_filter": ["CREATE TABLE sales AS SELECT * FROM adult WHERE occupation = 'Sales'",
                             f"SELECT id, {OP} AS job FROM sales WHERE age > 75"],
    "group_operator_grouped_by_protected": [
        ("SELECT occupation, getcandidate(*, 'teacher', k := 5, assignments := 1) AS pick FROM adult "
        "WHERE age > 75 GROUP BY occupation")],
    "group_operator_grouped_by_derived_protected": [
        ("SELECT left(occupation, 4) AS o4, getcandidate(*, 'teacher', k := 5, assignments := 1) AS pick FROM adult "
        "WHERE age > 75 GROUP BY left(occupation, 4)")],
}


# rows an earlier statement chose by the protected column, stored in a table a crowd query then reads whole; the
# answers are given (domain := [...]), so the ground truth's single value left in the table refuses nothing (stop 43:
# all six leaked, and table_made_by_filter above was refused only for its one-value answer domain)
DOMAIN_OP = "getposition(*, k := 5, assignments := 1, domain := ['a', 'b'])"
STORED = {
    "table_made_by_filter_answers_given": [
        "CREATE TABLE sales AS SELECT * FROM adult WHERE occupation = 'Sales'",
        f"SELECT id, {DOMAIN_OP} AS job FROM sales WHERE age > 75"],
    "rows_kept_by_a_delete": [
        "CREATE TABLE kept AS SELECT * FROM adult", "DELETE FROM kept WHERE occupation <> 'Sales'",
        f"SELECT id, {DOMAIN_OP} AS job FROM kept WHERE age > 75"],
    "rows_kept_by_a_delete_using": [
        "CREATE TABLE kept2 AS SELECT * FROM adult",
        "DELETE FROM kept2 USING adult b WHERE kept2.id = b.id AND b.occupation <> 'Sales'",
        f"SELECT id, {DOMAIN_OP} AS job FROM kept2 WHERE age > 75"],
    "rows_inserted_by_a_filter": [
        "CREATE TABLE filled AS SELECT * FROM adult WHERE false",
        "INSERT INTO filled SELECT * FROM adult WHERE occupation = 'Sales'",
        f"SELECT id, {DOMAIN_OP} AS job FROM filled WHERE age > 75"],
    "a_flag_set_by_an_update": [
        "CREATE TABLE flagged AS SELECT * FROM adult", "ALTER TABLE flagged ADD COLUMN flag BOOLEAN DEFAULT false",
        "UPDATE flagged SET flag = true WHERE occupation = 'Sales'",
        f"SELECT id, {DOMAIN_OP} AS job FROM flagged WHERE age > 75 AND flag"],
    "a_flag_set_by_an_update_from": [
        "CREATE TABLE flagged2 AS SELECT id, age, sex, education_num, marital_status, race, workclass, hours_per_week, "
        "false AS flag FROM adult",
        "UPDATE flagged2 SET flag = true FROM adult b WHERE flagged2.id = b.id AND b.occupation = 'Sales'",
        f"SELECT id, {DOMAIN_OP} AS job FROM flagged2 WHERE age > 75 AND flag"],
    "a_copy_of_a_chosen_table": [
        "CREATE TABLE chosen AS SELECT * FROM adult WHERE occupation = 'Sales'",
        "CREATE TABLE copied AS SELECT * FROM chosen", "ALTER TABLE copied RENAME TO renamed",
        f"SELECT id, {DOMAIN_OP} AS job FROM renamed WHERE age > 75"],
}
SELECTIONS.update(STORED)


def shown_rows(env) -> tuple[int, Counter, list]:
    """Rows handed to the platform, the ground truths of the rows asked about, and the answer domains shown."""
    truths = Counter()
    items = 0
    domains = []
    for b in env.crowd.batches:
        items += len(b["items"])
        truths.update(t for t in (b["truth"] or []) if t is not None)
        for d in b["hits"]["domain"]:
            if d is not None and tuple(d) not in domains:
                domains.append(tuple(d))
    return items, truths, domains


@pytest.mark.parametrize("statements", list(SELECTIONS.values()), ids=list(SELECTIONS))
def test_rows_chosen_by_a_protected_column_are_refused(adult_env, over75, statements):
    env = adult_env
    env.run(*statements)
    findings = env.findings(over75)
    if env.crowd.batches:
        items, truths, domains = shown_rows(env)
        findings.insert(0, f"a crowd query whose rows were chosen by the protected column occupation was published "
                           f"({items} item rows; the people asked about have occupations {dict(truths)}; answer "
                           f"domain shown to workers: {[list(d) for d in domains] or 'none (pick-a-row)'})")
    env.verdict(findings)


DOMAINS = {
    "qi_point_query_no_protected_column": f"SELECT id, {OP} AS job FROM adult WHERE age = 28 AND sex = 'Male' "
                                          "AND education_num = 15",
    "core_filter_small_group": f"SELECT id, {OP} AS job FROM adult WHERE age > 75 AND workclass = 'Self-emp-inc'",
    "the_readme_release_of_the_people_over_75": f"SELECT id, {OP} AS job FROM adult WHERE age > 75",
}


@pytest.mark.parametrize("query", list(DOMAINS.values()), ids=list(DOMAINS))
def test_answer_domain_comes_from_the_whole_column(adult_env, adult_full, over75, query):
    """The domain shown is the ground-truth column's (all 14 occupations of Adult), not the values of the rows
    asked about (an occupation missing from it is one no shown person has)."""
    env = adult_env
    env.run(query)
    column = set(adult_full["occupation"].dropna().astype(str))
    findings = env.findings(adult_full)
    for d in env.domains():
        if d["domain"] is not None and set(d["domain"]) != column:
            truth = Counter(t for t in d["truth"] or [])
            findings.append(f"HIT {d['hit_id']}: the answer domain shown to workers lists {len(d['domain'])} of the "
                            f"column's {len(column)} occupations, exactly those of the {sum(truth.values())} people "
                            f"asked about ({dict(truth)}); absent: {sorted(column - set(d['domain']))}")
            break
    env.verdict(findings)
