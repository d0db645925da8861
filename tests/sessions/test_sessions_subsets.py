"""Sessions that ask about part of the people asked about before (issue 25, kind 2): a subset with the same question and
k is served from the answers on record (docs/privacy.md, "the persisted partition"); with a larger k, by merging
whole earlier classes."""

from __future__ import annotations

from .conftest import Q


def test_young_people_then_everyone_under_40(analyst):
    young = "(SELECT * FROM adult WHERE age < 25 LIMIT 1000) adult"  # docs/privacy.md's way of naming people
    under40 = "(SELECT * FROM adult WHERE age < 40 LIMIT 3000) adult"
    analyst([
        Q(f"SELECT id, age, getposition(*, k := 10, assignments := 1) AS job FROM {young}"),
        # everyone under 40 (the first 3000 of them): rows shown before keep their boxes, the others get new classes
        Q(f"SELECT id, age, getposition(*, k := 10, assignments := 1) AS job FROM {under40}"),
        Q(f"""SELECT id, age, getposition(*, k := 10, assignments := 1) AS job
              FROM {under40} WHERE hours_per_week >= 50""", kind="subset", free=True),
        Q(f"""SELECT id, age, getposition(*, k := 10, assignments := 1) AS job
              FROM {under40} WHERE workclass = 'Local-gov'""", kind="subset", free=True),
        Q(f"""SELECT id, age, getposition(*, k := 20, assignments := 1) AS job
              FROM {under40} WHERE sex = 'Female'""", kind="subset"),
        Q(f"""WITH asked AS (SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM {under40})
              SELECT job, count(*) AS people FROM asked GROUP BY job ORDER BY people DESC, job""", free=True),
    ])


def test_the_same_people_named_as_a_table_then_as_the_docs_subquery(analyst):
    # README and docs/sql.md write FROM adult WHERE ...; docs/privacy.md names people (SELECT * FROM adult ...) adult
    sixties = "age BETWEEN 60 AND 64"
    analyst([
        Q(f"SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE {sixties}"),
        Q(f"""SELECT id, getposition(*, k := 10, assignments := 1) AS job
              FROM (SELECT * FROM adult WHERE {sixties}) adult""", kind="spelling", free=True),
        Q(f"""SELECT id, getposition(*, k := 10, assignments := 1) AS job
              FROM (SELECT * FROM adult WHERE {sixties}) adult WHERE sex = 'Female'""", kind="spelling", free=True),
        Q(f"""SELECT job, count(*) AS people
              FROM (SELECT getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE {sixties})
              GROUP BY job ORDER BY people DESC, job""", free=True),
    ])


def test_people_in_their_thirties_then_the_self_employed_and_long_hours_among_them(analyst):
    people = "(SELECT * FROM adult WHERE age BETWEEN 30 AND 39 LIMIT 2500) adult"
    analyst([
        Q(f"SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM {people}"),
        Q(f"""SELECT id, getposition(*, k := 10, assignments := 1) AS job
              FROM {people} WHERE workclass = 'Self-emp-not-inc'""", kind="subset", free=True),
        Q(f"""SELECT id, hours_per_week, getposition(*, k := 10, assignments := 1) AS job
              FROM {people} WHERE hours_per_week >= 60""", kind="subset", free=True),
        Q(f"""SELECT id, getposition(*, k := 20, assignments := 1) AS job
              FROM {people} WHERE workclass = 'Self-emp-not-inc'""", kind="subset",
          advice=f"""SELECT id, getposition(*, k := 10, assignments := 1) AS job
                     FROM {people} WHERE workclass = 'Self-emp-not-inc'"""),
        Q(f"""WITH asked AS (SELECT id, hours_per_week, getposition(*, k := 10, assignments := 1) AS job FROM {people})
              SELECT count(*) AS people, avg(hours_per_week) AS hours FROM asked WHERE job = 'Sales'""", free=True),
    ])


def test_federal_employees_then_the_ones_the_crowd_calls_clerks(analyst):
    analyst([
        Q("SELECT id, age, getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE workclass = 'Federal-gov'"),
        # a WHERE on the operator's own answers (docs/privacy.md): the same items, served from the answers on record
        Q("""SELECT * FROM (SELECT id, age, getposition(*, k := 10, assignments := 1) AS job
                            FROM adult WHERE workclass = 'Federal-gov') WHERE job = 'Adm-clerical'""",
          kind="subset", free=True),
        Q("""SELECT id, age, getposition(*, k := 10, assignments := 1) AS job
             FROM adult WHERE workclass = 'Federal-gov' AND age >= 50""", kind="subset", free=True),
        Q("""CREATE TABLE federal_jobs AS
             SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE workclass = 'Federal-gov'""",
          free=True),
        Q("""SELECT f.job, count(*) AS people, round(avg(a.hours_per_week), 1) AS hours
             FROM federal_jobs f JOIN adult a USING (id) GROUP BY f.job ORDER BY people DESC, f.job"""),
        Q("""SELECT id, getposition(*, k := 20, assignments := 1) AS job
             FROM adult WHERE workclass = 'Federal-gov' AND age >= 50""", kind="subset",
          advice="""SELECT id, getposition(*, k := 10, assignments := 1) AS job
                    FROM adult WHERE workclass = 'Federal-gov' AND age >= 50"""),
    ])


def test_paging_through_people_aged_60_to_64_after_asking_about_all_of_them(analyst):
    people = "(SELECT * FROM adult WHERE age BETWEEN 60 AND 64) adult"
    analyst([
        Q(f"SELECT id, age, getposition(*, k := 10, assignments := 1) AS job FROM {people}"),
        Q(f"SELECT id, age, getposition(*, k := 10, assignments := 1) AS job FROM {people} LIMIT 300",
          kind="subset", free=True),
        Q(f"SELECT id, age, getposition(*, k := 10, assignments := 1) AS job FROM {people} LIMIT 300 OFFSET 300",
          kind="subset", free=True),
        Q(f"SELECT id, age, getposition(*, k := 20, assignments := 1) AS job FROM {people} LIMIT 300 OFFSET 600",
          kind="subset",
          advice=f"SELECT id, age, getposition(*, k := 10, assignments := 1) AS job FROM {people} LIMIT 300 OFFSET 600"),
        Q(f"""SELECT job, count(*) AS people
              FROM (SELECT getposition(*, k := 10, assignments := 1) AS job FROM {people})
              GROUP BY job ORDER BY people DESC, job""", free=True),
    ])


def test_demo_roles_married_people_then_the_graduates_among_them(analyst):
    people = "(SELECT * FROM adult WHERE marital_status = 'Married-civ-spouse' LIMIT 2000) adult"
    analyst([
        Q(f"SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM {people}"),
        Q(f"SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM {people} WHERE education_num >= 13",
          kind="subset", free=True),
        Q(f"SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM {people} WHERE race <> 'White'",
          kind="subset", free=True),
        Q(f"SELECT id, getposition(*, k := 25, assignments := 1) AS job FROM {people} WHERE education_num >= 13",
          kind="subset",
          advice=f"SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM {people} WHERE education_num >= 13"),
    ], roles="demo")
