"""Sessions that ask about the same people at the same k while publishing another set of quasi-identifiers (issue 25,
kind 4): the added quasi-identifiers are generalized inside the earlier boxes, the dropped ones leave the earlier
boxes' projection. Every explicit column list carries ``token`` (the composition checker's linkage: see conftest)."""

from __future__ import annotations

from .conftest import Q


def test_age_workclass_and_hours_first_then_every_core_column(analyst):
    people = "adult WHERE age BETWEEN 35 AND 39 AND workclass = 'Local-gov'"
    analyst([
        Q(f"""SELECT id, getposition(token, age, workclass, hours_per_week, k := 10, assignments := 1) AS job
              FROM {people}"""),
        Q(f"SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM {people}", kind="qis"),
        Q(f"""SELECT id, getposition(token, age, sex, workclass, hours_per_week, k := 10, assignments := 1) AS job
              FROM {people}""", kind="qis"),
        Q(f"""WITH asked AS (SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM {people})
              SELECT job, count(*) AS people FROM asked GROUP BY job ORDER BY people DESC, job""", kind="qis"),
    ])


def test_every_core_column_first_then_just_age_and_hours(analyst):
    people = "adult WHERE workclass = 'Self-emp-not-inc' AND age BETWEEN 40 AND 49"
    analyst([
        Q(f"SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM {people}"),
        Q(f"SELECT id, getposition(token, age, hours_per_week, k := 10, assignments := 1) AS job FROM {people}",
          kind="qis"),
        Q(f"SELECT id, getposition(token, education_num, workclass, k := 10, assignments := 1) AS job FROM {people}",
          kind="qis"),
        Q(f"""WITH asked AS (SELECT id, getposition(token, age, hours_per_week, k := 10, assignments := 1) AS job
                             FROM {people})
              SELECT job, count(*) AS people FROM asked GROUP BY job ORDER BY people DESC, job""", kind="qis"),
    ])


def test_demo_roles_age_sex_and_race_first_then_every_core_column(analyst):
    people = "(SELECT * FROM adult WHERE age BETWEEN 55 AND 59 LIMIT 1500) adult"
    analyst([
        Q(f"SELECT id, getposition(token, age, sex, race, workclass, k := 10, assignments := 1) AS job FROM {people}"),
        Q(f"SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM {people}", kind="qis"),
        Q(f"""SELECT id, getposition(token, education_num, marital_status, hours_per_week, k := 10, assignments := 1)
                     AS job FROM {people}""", kind="qis"),
    ], roles="demo")


def test_a_narrow_subquery_first_then_the_whole_row(analyst):
    where = "education_num >= 14 AND age < 35"
    # the narrow subquery keeps occupation: the ground truth the simulated crowd answers from (never published)
    analyst([
        Q(f"""SELECT id, getposition(*, k := 10, assignments := 1) AS job
              FROM (SELECT id, token, age, workclass, hours_per_week, occupation FROM adult WHERE {where})"""),
        Q(f"SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE {where}", kind="qis"),
        Q(f"""SELECT id, getposition(*, k := 10, assignments := 1) AS job
              FROM (SELECT id, token, age, sex, workclass, occupation FROM adult WHERE {where})""", kind="qis"),
    ])
