"""Sessions that read two cohorts of one table with UNION ALL (issue 25, kind 6): the rows of each branch are the
table's own rows, read one by one, so the release is traceable and the table stays usable for later releases."""

from __future__ import annotations

from .conftest import Q


def test_the_youngest_and_the_oldest_in_one_union_all_then_more_questions(analyst):
    analyst([
        Q("""SELECT id, age, getposition(*, k := 10, assignments := 1) AS job
             FROM (SELECT * FROM adult WHERE age < 20 UNION ALL SELECT * FROM adult WHERE age >= 70)"""),
        Q("SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE age BETWEEN 50 AND 52",
          kind="union"),
        Q("SELECT id, age, getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE age < 20", kind="union"),
        Q("SELECT * FROM ANONYMIZE((SELECT * FROM adult WHERE age BETWEEN 60 AND 64), k := 10)", release=10,
          kind="union"),
    ])


def test_federal_staff_then_federal_and_incorporated_self_employed_in_one_union_all(analyst):
    analyst([
        Q("SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE workclass = 'Federal-gov'"),
        Q("""SELECT id, workclass, getposition(*, k := 10, assignments := 1) AS job
             FROM (SELECT * FROM adult WHERE workclass = 'Federal-gov'
                   UNION ALL
                   SELECT * FROM adult WHERE workclass = 'Self-emp-inc')""", kind="union",
          # "read the rows of 'adult' one by one (a WHERE, a LIMIT, views and CTEs are fine)"
          advice="""SELECT id, workclass, getposition(*, k := 10, assignments := 1) AS job
                    FROM adult WHERE workclass IN ('Federal-gov', 'Self-emp-inc')"""),
        Q("SELECT id, getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE workclass = 'Self-emp-inc'",
          kind="union"),
        Q("""SELECT id, getposition(*, k := 10, assignments := 1) AS job
             FROM adult WHERE workclass = 'Local-gov' AND age < 30""", kind="union"),
    ])


def test_anonymize_a_union_all_of_two_age_bands_then_ask_the_crowd(analyst):
    analyst([
        Q("""SELECT * FROM ANONYMIZE((SELECT * FROM adult WHERE age < 20
                                     UNION ALL SELECT * FROM adult WHERE age >= 70), k := 10)""", release=10),
        Q("SELECT id, age, getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE age >= 70", kind="union"),
        Q("SELECT id, age, getposition(*, k := 10, assignments := 1) AS job FROM adult WHERE age BETWEEN 60 AND 64",
          kind="union"),
    ])
