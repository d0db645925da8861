"""Class 6: ANONYMIZE's arguments weaken the declared roles.

Claim attacked (docs/sql.md): ``ANONYMIZE(t, k := 10)`` returns a k-anonymous release, "its declared
quasi-identifiers generalized ... ``quasi_identifiers := [...]`` may add columns to the declared ones, and
``hierarchies := {...}`` gives ARX-style generalization hierarchies". An argument may add, never remove: every class
of the declared quasi-identifiers (age, sex, education_num) in the release holds at least k of the people over 75.
Also attacked: the input argument itself (a quasi-identifier renamed, copied or cast inside the subquery, or read
through ``query()``), and a hierarchy that never generalizes.

Safe: the call is refused, or the release's classes over the declared quasi-identifiers are all >= k (the
independent scanner, over the 169 people over 75); the key is never in the release.
"""

from __future__ import annotations

import pytest

INPUT = "(SELECT * FROM adult WHERE age > 75)"
K = 5


def anon(args: str = "", source: str = INPUT) -> str:
    return f"SELECT * FROM ANONYMIZE({source}, k := {K}{', ' + args if args else ''})"


CASES = {
    "qi_list_only_age": (anon("quasi_identifiers := ['age']"), None, {}),
    "qi_list_age_and_sex": (anon("quasi_identifiers := ['age', 'sex']"), None, {}),
    "qi_list_empty": (anon("quasi_identifiers := []"), None, {}),
    "qi_list_another_column": (anon("quasi_identifiers := ['workclass']"), None, {}),
    "qi_list_upper_case_names": (anon("quasi_identifiers := ['AGE', 'SEX', 'EDUCATION_NUM']"), None, {}),
    "qi_list_duplicates": (anon("quasi_identifiers := ['age', 'age']"), None, {}),
    "qi_list_unknown_column": (anon("quasi_identifiers := ['nonexistent']"), None, {}),
    "hierarchy_that_never_generalizes_sex": (
        anon("hierarchies := {{'sex': '{sex}'}}"), None, {"sex": "Male;Male\nFemale;Female\n"}),
    "hierarchy_that_never_generalizes_age": (
        anon("hierarchies := {{'age': '{age}'}}"), None,
        {"age": "".join(f"{a};{a};{a}\n" for a in range(17, 91))}),
    "hierarchy_with_datafly_identity": (
        anon("method := 'datafly', hierarchies := {{'education_num': '{edu}'}}"), None,
        {"edu": "".join(f"{e};{e}\n" for e in range(1, 17))}),
    "method_none": (anon("method := 'none'"), None, {}),
    "input_renames_a_qi": (
        anon(source="(SELECT age AS years, sex, education_num, workclass, occupation FROM adult WHERE age > 75)"),
        {"years": "age"}, {}),
    "input_copies_a_qi": (
        anon(source="(SELECT *, age AS age_copy, education_num AS edu_copy FROM adult WHERE age > 75)"),
        {"age_copy": "age", "edu_copy": "education_num"}, {}),
    "input_casts_qis_to_text": (
        anon(source="(SELECT * REPLACE (age::VARCHAR AS age, education_num::VARCHAR AS education_num) FROM adult "
                    "WHERE age > 75)"), None, {}),
    "input_derives_a_qi": (
        anon(source="(SELECT *, age + 0 AS a0 FROM adult WHERE age > 75)"), {"a0": "age"}, {}),
    "input_packs_qis_in_a_struct": (
        anon(source="(SELECT id, occupation, {'age': age, 'sex': sex, 'edu': education_num}::VARCHAR AS who "
                    "FROM adult WHERE age > 75)"), None, {}),
    "input_through_query_function": (
        anon(source="query('SELECT * FROM adult WHERE age > 75')"), None, {}),
    "input_through_query_table": (
        anon(source="query_table('adult')"), None, {}),
    "input_view_control": ("CREATE VIEW v75 AS SELECT * FROM adult WHERE age > 75", None, {}),
}


@pytest.mark.parametrize("sql,aliases,files", list(CASES.values()), ids=list(CASES))
def test_anonymize_arguments_keep_the_declared_roles(adult_env, over75, tmp_path, sql, aliases, files):
    env = adult_env
    paths = {}
    for name, text in files.items():
        path = tmp_path / f"{name}.csv"
        path.write_text(text)
        paths[name] = str(path)
    sql = sql.format(**paths) if paths else sql
    if sql.startswith("CREATE VIEW"):
        env.run(sql)
        sql = anon(source="v75")
    env.release(sql, K)
    findings = env.class_findings(over75, K, aliases)
    findings += env.protected_findings(over75, [], "id")
    if "query_table('adult')" in sql and env.released:  # the whole table was read: judge it against all of Adult
        findings += env.class_findings(env.tables["adult"][0], K, aliases)
    if "AS who" in sql and env.released:
        frame = env.released[-1][1]
        if "who" in frame and frame["who"].nunique() > len(frame) / K:
            findings.append(f"the packed quasi-identifiers are released raw: {frame['who'].nunique()} distinct "
                            f"values of 'who' over {len(frame)} rows (e.g. {frame['who'].iloc[0]!r})")
    env.verdict(findings)


def test_issue_example_whole_adult(adult_env, adult_full):
    """The issue's own call: ANONYMIZE(adult, k := 10, quasi_identifiers := ['age']) over all of Adult."""
    env = adult_env
    env.release("SELECT * FROM ANONYMIZE(adult, k := 10, quasi_identifiers := ['age'])", 10)
    env.verdict(env.class_findings(adult_full, 10) + env.protected_findings(adult_full, [], "id"))
