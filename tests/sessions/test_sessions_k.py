"""Sessions that ask again over rows already shown, at another k (issue 25, kind 1): a larger k is served by merging
whole earlier classes, a smaller one by the earlier classes themselves."""

from __future__ import annotations

from .conftest import Q


def test_young_people_at_k10_then_the_partner_asks_for_k25(analyst):
    analyst([
        Q("SELECT id, age, getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE age < 20"),
        Q("""WITH asked AS (SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE age < 20)
             SELECT job, count(*) AS people FROM asked GROUP BY job ORDER BY people DESC, job""", free=True),
        # the partner who receives the answers wants k = 25
        Q("SELECT id, age, getposition(*, k := 25, assignments := 1) AS job FROM adult WHERE age < 20", kind="k",
          advice="SELECT id, age, getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE age < 20"),
        Q("SELECT id, getposition(*, k := 25, assignments := 1) AS job FROM adult WHERE age < 20 AND sex = 'Female'",
          kind="k"),
        Q("""SELECT job, count(*) AS people
             FROM (SELECT getposition(*, k := 25, assignments := 1) AS job FROM adult WHERE age < 20)
             GROUP BY job ORDER BY people DESC, job""", kind="k"),
    ])


def test_k25_for_a_report_then_a_cheaper_k10_over_the_same_people(analyst):
    analyst([
        Q("SELECT id, getposition(*, k := 25, assignments := 1) AS job FROM adult WHERE age BETWEEN 50 AND 52"),
        Q("SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE age BETWEEN 50 AND 52",
          kind="k"),
        Q("""SELECT id, hours_per_week, getposition(*, k := 10, assignments := 1) AS job
             FROM adult WHERE age BETWEEN 50 AND 52 AND hours_per_week >= 45""", kind="k"),
        Q("""SELECT id, getposition(*, k := 5, assignments := 1) AS job
             FROM adult WHERE age BETWEEN 50 AND 52 AND sex = 'Female'""", kind="k"),
        Q("""WITH asked AS (SELECT id, getposition(*, k := 10, assignments := 1) AS job
                            FROM adult WHERE age BETWEEN 50 AND 52)
             SELECT job, count(*) AS people FROM asked GROUP BY job ORDER BY people DESC, job""", kind="k"),
    ])


def test_partner_gets_anonymize_at_k10_then_the_team_asks_for_k5(analyst):
    analyst([
        Q("SELECT * FROM ANONYMIZE((SELECT * FROM adult WHERE age >= 60), k := 10)", release=10),
        Q("SELECT * FROM ANONYMIZE((SELECT * FROM adult WHERE age >= 60), k := 5)", release=5, kind="k",
          advice=Q("SELECT * FROM ANONYMIZE((SELECT * FROM adult WHERE age >= 60), k := 10)", release=10)),
        Q("SELECT * FROM ANONYMIZE((SELECT * FROM adult WHERE age >= 60 AND workclass <> 'Private'), k := 5)",
          release=5, kind="k"),
        Q("SELECT * FROM ANONYMIZE((SELECT * FROM adult WHERE age >= 60), k := 10)", release=10),
    ])


def test_anonymize_at_k10_then_coarser_releases_at_k25_and_k50(analyst):
    analyst([
        Q("SELECT * FROM ANONYMIZE((SELECT * FROM adult WHERE workclass = 'Federal-gov'), k := 10)", release=10),
        Q("SELECT * FROM ANONYMIZE((SELECT * FROM adult WHERE workclass = 'Federal-gov'), k := 25)", release=25,
          kind="k", advice=Q("SELECT * FROM ANONYMIZE((SELECT * FROM adult WHERE workclass = 'Federal-gov'), k := 10)",
                             release=10)),
        Q("SELECT * FROM ANONYMIZE((SELECT * FROM adult WHERE workclass = 'Federal-gov'), k := 50)", release=50,
          kind="k"),
        Q("""SELECT id, getposition(*, k := 25, assignments := 1) AS job
             FROM adult WHERE workclass = 'Federal-gov'""", kind="k"),
    ])


def test_demo_roles_first_thousand_people_at_k5_then_k10_then_k20(analyst):
    people = "(SELECT * FROM adult LIMIT 1000) adult"  # the first 1000 rows, as docs/privacy.md writes it
    analyst([
        Q(f"SELECT id, getposition(*, k := 5, assignments := 1) AS job FROM {people}"),
        Q(f"SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM {people}", kind="k",
          advice=f"SELECT id, getposition(*, k := 5, assignments := 1) AS job FROM {people}"),
        Q(f"SELECT id, getposition(*, k := 20, assignments := 1) AS job FROM {people}", kind="k"),
        Q(f"""WITH j AS (SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM {people})
              SELECT job, count(*) AS people FROM j GROUP BY job ORDER BY people DESC, job""", kind="k"),
        Q(f"""SELECT id, getposition(*, k := 20, assignments := 1) AS job
              FROM {people} WHERE marital_status = 'Never-married'""", kind="k"),
    ], roles="demo")
