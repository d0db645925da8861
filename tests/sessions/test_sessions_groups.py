"""Sessions with group operators over people shown before (issue 25, kind 5): ``getposition`` then ``getcandidate``
over the same people (examples/job_recommendation.py and the demo do exactly this), two ``getcandidate`` questions
over the same groups, and a ``getcandidate`` whose knock-out rounds must never be refused after round 1 was bought."""

from __future__ import annotations

from .conftest import Q


def test_jobs_for_canadians_then_the_best_candidate_per_education(analyst):
    canadians = "adult WHERE native_country = 'Canada'"
    analyst([
        Q(f"SELECT id, getposition(*, k := 25, assignments := 1) AS job FROM {canadians}"),
        Q(f"""SELECT education, getcandidate(*, 'Exec-managerial', k := 25, assignments := 1) AS candidate
              FROM {canadians} GROUP BY education ORDER BY education""", kind="group"),
        # examples/job_recommendation.sql: the people aged 25 to 35 among them, answers joined back to the rows
        Q("""WITH recommended AS (
                 SELECT id, education, getposition(*, k := 25, assignments := 1) AS job
                 FROM adult WHERE age BETWEEN 25 AND 35 AND native_country = 'Canada')
             SELECT job, count(*) AS people, round(avg(a.hours_per_week), 1) AS avg_hours
             FROM recommended r JOIN adult a USING (id) GROUP BY job ORDER BY people DESC, job""", kind="subset"),
        Q(f"""SELECT c.education, a.age, a.hours_per_week
              FROM (SELECT education, getcandidate(*, 'Exec-managerial', k := 25, assignments := 1) AS pick
                    FROM {canadians} GROUP BY education) c
              JOIN adult a ON a.id = c.pick ORDER BY c.education""", kind="group"),
    ])


def test_jobs_for_public_servants_in_their_early_thirties_then_the_best_candidate_per_workclass(analyst):
    people = "adult WHERE age BETWEEN 30 AND 34 AND workclass <> 'Private'"
    analyst([
        Q(f"SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM {people}"),
        # groups of 101 to 283 people: knock-out rounds after round 1
        Q(f"""SELECT workclass, getcandidate(*, 'Exec-managerial', k := 10, assignments := 1) AS pick
              FROM {people} GROUP BY workclass ORDER BY workclass""", kind="group"),
        Q(f"""SELECT b.workclass, a.age, a.education, a.hours_per_week
              FROM (SELECT workclass, getcandidate(*, 'Exec-managerial', k := 10, assignments := 1) AS pick
                    FROM {people} GROUP BY workclass) b
              JOIN adult a ON a.id = b.pick ORDER BY b.workclass""", kind="group"),
        Q(f"""SELECT sex, getcandidate(*, 'Prof-specialty', k := 10, assignments := 1) AS pick
              FROM {people} GROUP BY sex ORDER BY sex""", kind="group"),
    ])


def test_best_candidate_for_three_jobs_over_the_same_education_groups(analyst):
    people = "adult WHERE age BETWEEN 60 AND 64"
    analyst([
        Q(f"""SELECT education, getcandidate(*, 'Exec-managerial', k := 10, assignments := 1) AS pick
              FROM {people} GROUP BY education ORDER BY education"""),
        Q(f"""SELECT education, getcandidate(*, 'Prof-specialty', k := 10, assignments := 1) AS pick
              FROM {people} GROUP BY education ORDER BY education""", kind="group"),
        Q(f"""SELECT education, getcandidate(*, 'Sales', k := 10, assignments := 1) AS pick
              FROM {people} GROUP BY education ORDER BY education""", kind="group"),
        # more workers on the first question: "raising assignments buys only the difference" (docs/sql.md)
        Q(f"""SELECT education, getcandidate(*, 'Exec-managerial', k := 10, assignments := 2) AS pick
              FROM {people} GROUP BY education ORDER BY education""", kind="group"),
    ])


def test_best_candidates_per_workclass_then_jobs_for_the_whole_group(analyst):
    women = "adult WHERE age BETWEEN 45 AND 49 AND sex = 'Female'"
    analyst([
        Q(f"""CREATE TABLE finalists AS
              SELECT workclass, getcandidate(*, 'Exec-managerial', k := 10, assignments := 1) AS pick
              FROM {women} GROUP BY workclass"""),
        Q("""SELECT f.workclass, a.age, a.education_num, a.hours_per_week
             FROM finalists f JOIN adult a ON a.id = f.pick ORDER BY f.workclass"""),
        Q(f"SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM {women}", kind="group"),
        Q(f"""WITH jobs AS (SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM {women})
              SELECT f.workclass, j.job FROM finalists f JOIN jobs j ON j.id = f.pick ORDER BY f.workclass""",
          kind="group"),
    ])


def test_demo_day_jobs_for_the_first_2000_then_the_best_candidate_per_education(analyst):
    # crowddb.demo's session, as a new user retypes it (with the token among the core columns)
    columns = "age, sex, education_num, marital_status, race, workclass, hours_per_week, token, education, id, occupation"
    pick = """SELECT education, getcandidate(*, 'Prof-specialty', assignments := 1) AS candidate, count(*) AS people
              FROM (SELECT {columns} FROM adult LIMIT 2000{offset}) adult
              GROUP BY education ORDER BY people DESC LIMIT 5"""
    analyst([
        Q("""SELECT * FROM (SELECT id, age, education, getposition(*, k := 10, assignments := 1) AS job
                            FROM adult LIMIT 2000) ORDER BY id"""),
        Q("""WITH j AS (SELECT id, age, education, getposition(*, k := 10, assignments := 1) AS job
                        FROM adult LIMIT 2000)
             SELECT count(*) AS asked, avg((j.job = a.occupation)::INT) AS agree FROM j JOIN adult a USING (id)""",
          free=True),
        Q(pick.format(columns=columns, offset=""), kind="group"),
        Q(pick.format(columns=columns, offset=" OFFSET 2000")),
    ], roles="demo")


def test_best_candidate_per_sex_then_per_education_then_jobs_for_local_government_staff(analyst):
    people = "adult WHERE age BETWEEN 35 AND 39 AND workclass = 'Local-gov'"
    analyst([
        Q(f"""SELECT sex, getcandidate(*, 'Craft-repair', k := 10, assignments := 1) AS pick
              FROM {people} GROUP BY sex ORDER BY sex"""),
        Q(f"""SELECT education, getcandidate(*, 'Prof-specialty', k := 10, assignments := 1) AS pick
              FROM {people} GROUP BY education ORDER BY education""", kind="group"),
        Q(f"SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM {people}", kind="group"),
    ])


def test_jobs_for_the_over_70s_then_the_best_candidate_among_the_over_75s(analyst):
    analyst([
        Q("SELECT id, age, getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE age >= 70"),
        Q("""SELECT sex, getcandidate(*, 'Adm-clerical', k := 10, assignments := 1) AS pick
             FROM adult WHERE age >= 75 GROUP BY sex ORDER BY sex""", kind="group"),
        Q("""SELECT sex, getcandidate(*, 'Adm-clerical', k := 10, assignments := 1) AS pick
             FROM adult WHERE age >= 70 GROUP BY sex ORDER BY sex""", kind="group"),
    ])
