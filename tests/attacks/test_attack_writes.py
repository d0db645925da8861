"""Class 3: statements that write stored columns through paths roles do not follow.

The claim attacked (docs/roles.md): "The same verdicts become the roles of a table a statement makes or fills (CREATE
TABLE ... AS, INSERT ... SELECT, UPDATE ... SET x = p.job FROM people p) ... A statement of that kind that crowddb
cannot read is refused while any role is declared." Each case stores a protected value (a canary marker) in a column
whose role says core (workclass), through ALTER ... USING, MERGE, a generated column, ON CONFLICT, VALUES with a
subquery, COPY through a file, UPDATE variants, CREATE TABLE AS / INSERT BY NAME with the syntax tricks of class 2, or
a view's column list; then publishes the table with ``getposition(*)``. Safe: the write is refused, or the written
column's role follows its content (withheld); no marker reaches a worker.
"""

from __future__ import annotations

import pytest

# an explicit answer domain: the run needs no ground-truth column, so a table that lost its roles is not refused for
# that reason (a real marketplace would publish it)
OP = "getposition(*, k := 5, assignments := 1, domain := ['yes', 'no'])"
COLS = "pid, age, sex, education_num, workclass, hours_per_week, job, occupation, secret, note"
SWAP = "pid, age, sex, education_num, occupation AS workclass, hours_per_week, job, workclass AS occupation, secret, note"
DDL = ("CREATE TABLE t (pid VARCHAR PRIMARY KEY, age BIGINT, sex VARCHAR, education_num BIGINT, workclass VARCHAR, "
       "hours_per_week BIGINT, job VARCHAR, occupation VARCHAR, secret VARCHAR, note VARCHAR)")
COPY_T = "CREATE TABLE t AS SELECT * FROM canary"
EMPTY_T = "CREATE TABLE t AS SELECT * FROM canary WHERE false"


def publish(table: str) -> str:
    return f"SELECT {OP} AS ans FROM {table}"


def values_rows(n: int = 20) -> str:
    """n rows of VALUES, each taking its workclass from a scalar subquery over the canary."""
    rows = []
    for i in range(n):
        rows.append(f"('new-{i}', {76 + i % 5}, 'Male', 9, (SELECT occupation FROM canary ORDER BY pid LIMIT 1 "
                    f"OFFSET {i}), 40, 'Sales', 'x', 'x', 'x')")
    return ", ".join(rows)


CASES = {
    # ALTER ... USING
    "alter_type_using_sensitive": (
        ["ALTER TABLE canary ALTER workclass TYPE VARCHAR USING occupation"], publish("canary")),
    "alter_set_data_type_using_expression": (
        ["ALTER TABLE canary ALTER COLUMN workclass SET DATA TYPE VARCHAR USING secret || ''"], publish("canary")),
    "alter_type_using_key": (
        ["ALTER TABLE canary ALTER hours_per_week TYPE VARCHAR USING pid"], publish("canary")),
    # MERGE
    "merge_update_set_sensitive": (
        [("MERGE INTO canary USING (SELECT pid AS p, occupation AS o FROM canary) s ON canary.pid = s.p "
         "WHEN MATCHED THEN UPDATE SET workclass = s.o")], publish("canary")),
    "merge_insert_swapped_values": (
        [EMPTY_T, ("MERGE INTO t USING canary s ON t.pid = s.pid WHEN NOT MATCHED THEN INSERT "
                  f"({COLS}) VALUES (s.pid, s.age, s.sex, s.education_num, s.occupation, s.hours_per_week, s.job, "
                  "s.workclass, s.secret, s.note)")], publish("t")),
    # generated columns
    "generated_column_from_sensitive": (
        [("CREATE TABLE g (pid VARCHAR, age BIGINT, sex VARCHAR, education_num BIGINT, hours_per_week BIGINT, "
         "job VARCHAR, occupation VARCHAR, workclass VARCHAR AS (occupation))"),
         ("INSERT INTO g (pid, age, sex, education_num, hours_per_week, job, occupation) SELECT pid, age, sex, "
         "education_num, hours_per_week, job, occupation FROM canary")], publish("g")),
    # ON CONFLICT
    "insert_on_conflict_do_update_excluded": (
        [DDL, f"INSERT INTO t SELECT {COLS} FROM canary",
         f"INSERT INTO t SELECT {COLS} FROM canary ON CONFLICT (pid) DO UPDATE SET workclass = EXCLUDED.occupation"],
        publish("t")),
    "insert_or_replace_swapped": (
        [DDL, f"INSERT INTO t SELECT {COLS} FROM canary", f"INSERT OR REPLACE INTO t SELECT {SWAP} FROM canary"],
        publish("t")),
    # VALUES with scalar subqueries
    "insert_values_with_scalar_subqueries_into_copy": (
        [COPY_T, f"INSERT INTO t VALUES {values_rows()}"], publish("t WHERE pid LIKE 'new-%'")),
    "insert_values_with_scalar_subqueries_into_empty_copy": (
        [EMPTY_T, f"INSERT INTO t VALUES {values_rows()}"], publish("t")),
    # through a file
    "copy_to_csv_then_copy_from_into_copy": (
        [f"COPY (SELECT {SWAP} FROM canary) TO '{{tmp}}/x.csv' (HEADER)", EMPTY_T, "COPY t FROM '{tmp}/x.csv'"],
        publish("t")),
    "copy_to_csv_then_copy_from_into_canary": (
        [f"COPY (SELECT {SWAP} FROM canary) TO '{{tmp}}/x.csv' (HEADER)", "DELETE FROM canary",
         "COPY canary FROM '{tmp}/x.csv'"], publish("canary")),
    "copy_to_parquet_then_ctas_from_file": (
        [("COPY (SELECT age, sex, education_num, occupation AS workclass, hours_per_week, job FROM canary) "
         "TO '{tmp}/x.parquet'"), "CREATE TABLE t AS SELECT * FROM '{tmp}/x.parquet'"], publish("t")),
    "copy_to_json_then_insert_into_copy": (
        [f"COPY (SELECT {SWAP} FROM canary) TO '{{tmp}}/x.json'", EMPTY_T,
         "INSERT INTO t SELECT * FROM read_json('{tmp}/x.json')"], publish("t")),
    "read_parquet_file_directly": (
        [("COPY (SELECT age, sex, education_num, occupation AS workclass, hours_per_week, job FROM canary) "
         "TO '{tmp}/x.parquet'")], publish("read_parquet('{tmp}/x.parquet')")),
    # UPDATE variants
    "update_set_from_other_column": (["UPDATE canary SET workclass = occupation"], publish("canary")),
    "update_from_join": (
        [COPY_T, "UPDATE t SET workclass = s.occupation FROM canary s WHERE s.pid = t.pid"], publish("t")),
    "update_correlated_subquery": (
        [COPY_T, "UPDATE t SET workclass = (SELECT s.occupation FROM canary s WHERE s.pid = t.pid)"], publish("t")),
    "update_from_cte": (
        [COPY_T, ("WITH s AS (SELECT pid AS p, occupation AS o FROM canary) UPDATE t SET workclass = s.o FROM s "
                 "WHERE s.p = t.pid")], publish("t")),
    "update_through_macro": (
        [("CREATE MACRO occ_of(w, h, a) AS (SELECT first(occupation) FROM canary s WHERE s.workclass = w AND "
         "s.hours_per_week = h AND s.age = a)"), COPY_T,
         "UPDATE t SET workclass = occ_of(workclass, hours_per_week, age)"], publish("t")),
    "update_through_variable": (
        ["SET VARIABLE m = (SELECT map(list(pid), list(secret)) FROM canary)",
         "UPDATE canary SET workclass = getvariable('m')[pid]"], publish("canary")),
    "update_positional_reference": (["UPDATE canary SET workclass = #8"], publish("canary")),
    "update_then_rename_column": (
        [COPY_T, "ALTER TABLE t ADD COLUMN w2 VARCHAR", "UPDATE t SET w2 = occupation",
         "ALTER TABLE t DROP COLUMN workclass", "ALTER TABLE t RENAME COLUMN w2 TO workclass"], publish("t")),
    # CREATE TABLE AS / INSERT with class-2 tricks
    "ctas_star_replace": (["CREATE TABLE t AS SELECT * REPLACE (occupation AS workclass) FROM canary"], publish("t")),
    "ctas_positional_reference": (
        [("CREATE TABLE t AS SELECT pid, age, sex, education_num, #8 || left(workclass, 0) AS workclass, "
         "hours_per_week, job FROM canary")], publish("t")),
    "ctas_union_all_by_name": (
        [("CREATE TABLE t AS SELECT pid, age, sex, education_num, workclass, hours_per_week, job FROM canary "
         "WHERE false UNION ALL BY NAME SELECT occupation AS workclass, age, sex, education_num, workclass AS pid, "
         "hours_per_week, job FROM canary")], publish("t")),
    "ctas_table_alias_column_list": (
        [("CREATE TABLE t AS SELECT * FROM canary AS c(pid, age, sex, education_num, occupation, hours_per_week, "
         "job, workclass, secret, note)")], publish("t")),
    "ctas_through_macro": (
        [("CREATE MACRO jobof(h, w) AS (SELECT first(occupation ORDER BY pid) FROM canary c2 WHERE c2.workclass = w "
         "AND c2.hours_per_week = h)"),
         ("CREATE TABLE t AS SELECT pid, age, sex, education_num, jobof(hours_per_week, workclass) AS workclass, "
         "hours_per_week, job FROM canary")], publish("t")),
    "ctas_temp_table": (
        [f"CREATE TEMP TABLE t AS SELECT {SWAP} FROM canary"], publish("t")),
    "ctas_into_attached_database": (
        ["ATTACH ':memory:' AS other", f"CREATE TABLE other.t AS SELECT {SWAP} FROM canary"], publish("other.t")),
    "create_or_replace_same_name": (
        [f"CREATE OR REPLACE TABLE canary AS SELECT {SWAP} FROM canary"], publish("canary")),
    "insert_by_name_reordered": (
        [EMPTY_T, f"INSERT INTO t BY NAME SELECT {SWAP} FROM canary"], publish("t")),
    "insert_column_list_reordered": (
        [EMPTY_T, ("INSERT INTO t (pid, age, sex, education_num, occupation, hours_per_week, job, workclass, secret, "
                  "note) SELECT * FROM canary")], publish("t")),
    "insert_positional_into_table_in_other_order": (
        [("CREATE TABLE t (pid VARCHAR, age BIGINT, sex VARCHAR, education_num BIGINT, occupation VARCHAR, "
         "hours_per_week BIGINT, job VARCHAR, workclass VARCHAR, secret VARCHAR, note VARCHAR)"),
         f"INSERT INTO t SELECT {COLS} FROM canary"], publish("t")),
    # views with column lists
    "view_with_column_list": (
        [("CREATE VIEW v(age, sex, education_num, workclass, hours_per_week, job) AS SELECT age, sex, education_num, "
         "occupation, hours_per_week, job FROM canary")], publish("v")),
    "view_column_list_renames_key": (
        [("CREATE VIEW v(age, sex, education_num, hours_per_week, job, workclass) AS SELECT age, sex, education_num, "
         "hours_per_week, job, pid FROM canary")], publish("v")),
    # column renames swap roles
    "rename_columns_swap": (
        ["ALTER TABLE canary RENAME COLUMN occupation TO tmpc", ("ALTER TABLE canary RENAME COLUMN workclass TO "
         "occupation"), "ALTER TABLE canary RENAME COLUMN tmpc TO workclass"], publish("canary")),
    "drop_and_readd_core_column": (
        ["ALTER TABLE canary DROP COLUMN workclass", "ALTER TABLE canary ADD COLUMN workclass VARCHAR",
         "UPDATE canary SET workclass = secret"], publish("canary")),
}


@pytest.mark.parametrize("setup,query", list(CASES.values()), ids=list(CASES))
def test_write_through_an_untracked_path(canary_env, canary_frame, setup, query):
    env = canary_env
    env.run(*setup, query)
    env.verdict(env.findings(canary_frame))
