"""Sessions that mix ANONYMIZE releases and crowd runs over the same people: part of an ANONYMIZE release asked of the
crowd (issue 25, kind 3: widen to whole touched classes) and ANONYMIZE over exactly a crowd run's rows and k (kind 7:
the run's partition again, items served from the cache counted as shown)."""

from __future__ import annotations

from .conftest import Q


def test_partner_release_of_the_over_60s_then_the_crowd_asked_about_the_over_70s(analyst):
    analyst([
        Q("SELECT * FROM ANONYMIZE((SELECT * FROM adult WHERE age >= 60), k := 10)", release=10),
        # refused, the message says: "Run it over the same rows, k and anonymizer as that release" (the over-60s)
        Q("SELECT id, age, getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE age >= 70", kind="part",
          advice="SELECT id, age, getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE age >= 60"),
        Q("""SELECT id, age, getposition(*, k := 10, assignments := 1) AS job
             FROM adult WHERE age >= 60 AND workclass = 'Self-emp-not-inc'""", kind="part"),
        Q("""SELECT job, count(*) AS people
             FROM (SELECT getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE age >= 70)
             GROUP BY job ORDER BY people DESC, job""", kind="part"),
    ])


def test_partner_release_of_women_in_their_late_forties_then_the_crowd_asked_about_public_servants(analyst):
    women = "age BETWEEN 45 AND 49 AND sex = 'Female'"
    analyst([
        Q(f"SELECT * FROM ANONYMIZE((SELECT * FROM adult WHERE {women}), k := 10)", release=10),
        Q(f"""SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM adult
              WHERE {women} AND workclass IN ('State-gov', 'Local-gov', 'Federal-gov')""", kind="part",
          advice=f"SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE {women}"),
        Q(f"""SELECT id, hours_per_week, getposition(*, k := 10, assignments := 1) AS job FROM adult
              WHERE {women} AND hours_per_week < 35""", kind="part"),
        Q(f"""SELECT id, getposition(*, k := 5, assignments := 1) AS job FROM adult
              WHERE {women} AND workclass IN ('State-gov', 'Local-gov', 'Federal-gov')""", kind="part"),
    ])


def test_crowd_run_then_anonymize_exactly_its_rows_at_its_k(analyst):
    analyst([
        Q("SELECT id, age, getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE age BETWEEN 60 AND 64"),
        Q("SELECT * FROM ANONYMIZE((SELECT * FROM adult WHERE age BETWEEN 60 AND 64), k := 10)", release=10,
          kind="anonymize"),
        Q("SELECT id, age, getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE age BETWEEN 60 AND 64",
          free=True),
        Q("""SELECT * FROM ANONYMIZE((SELECT * FROM adult WHERE age BETWEEN 60 AND 64 AND workclass = 'Private'),
                                     k := 10)""", release=10, kind="part"),
    ])


def test_crowd_run_partly_served_from_the_cache_then_anonymize_its_rows(analyst):
    analyst([
        Q("SELECT id, age, getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE age < 20"),
        # the under-22s: the under-20s are served from the answers on record, the 20- and 21-year-olds are new
        Q("SELECT id, age, getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE age < 22"),
        Q("SELECT * FROM ANONYMIZE((SELECT * FROM adult WHERE age < 22), k := 10)", release=10, kind="anonymize"),
        Q("SELECT * FROM ANONYMIZE((SELECT * FROM adult WHERE age < 20), k := 10)", release=10, kind="anonymize"),
    ])


def test_demo_roles_anonymize_the_self_employed_then_ask_the_crowd_about_them(analyst):
    analyst([
        Q("SELECT * FROM ANONYMIZE((SELECT * FROM adult WHERE workclass = 'Self-emp-inc'), k := 10)", release=10),
        Q("""SELECT id, getposition(*, k := 10, assignments := 1) AS job
             FROM adult WHERE workclass = 'Self-emp-inc'""", kind="anonymize"),
        Q("SELECT * FROM ANONYMIZE((SELECT * FROM adult WHERE workclass = 'Self-emp-inc'), k := 10)", release=10),
        Q("""SELECT id, getposition(*, k := 10, assignments := 1) AS job
             FROM adult WHERE workclass = 'Self-emp-inc' AND sex = 'Female'""", kind="part"),
    ], roles="demo")
