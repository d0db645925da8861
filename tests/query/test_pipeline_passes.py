"""How many planning passes a statement costs (issue 26): one planner per run for all of a query's statements, one
estimating pass more only when a budget asks for the estimate, none for plain SQL."""

from __future__ import annotations

import numpy as np
import pytest

import crowddb
from crowddb import planner as planner_module
from crowddb.crowd import SimulatedCrowd

from conftest import people_frame


@pytest.fixture
def passes(monkeypatch):
    """Every Planner built, as 'run' or 'estimate'."""
    built: list[str] = []
    original = planner_module.Planner.__init__

    def counting(self, con, registry, ctx, *, estimating=False):
        built.append("estimate" if estimating else "run")
        original(self, con, registry, ctx, estimating=estimating)

    monkeypatch.setattr(planner_module.Planner, "__init__", counting)
    return built


def _db(**options):
    db = crowddb.connect(platform=SimulatedCrowd(qualities=np.ones(10), seed=1), seed=3, progress=False, **options)
    db.load_frame("people", people_frame(), quasi_identifiers=["age", "sex", "zip"], sensitive=["salary"],
                  ground_truth="job", key="id")
    return db


QUERY = ("CREATE TEMP TABLE picked AS SELECT id, getposition(*) AS job FROM people WHERE age < 40; "
         "SELECT job, count(*) FROM picked GROUP BY job ORDER BY job")


def test_a_crowd_query_of_two_statements_is_planned_once(passes):
    with _db() as db:
        db.sql(QUERY).fetchall()
        assert passes == ["run"]


def test_a_budget_adds_one_estimating_pass(passes):
    with _db(budget=100.0) as db:
        db.sql(QUERY).fetchall()
        assert passes == ["run", "estimate"]  # the run's planner binds every call, then the budget's estimate


def test_explain_is_one_estimating_pass_and_plain_sql_none(passes):
    with _db() as db:
        db.explain(QUERY)
        assert passes == ["estimate"]
        db.sql("SELECT count(*) FROM people").fetchall()
        db.sql("CREATE TABLE copy AS SELECT * FROM people")
        assert passes == ["estimate"]


def test_the_tradeoff_of_five_ks_is_one_estimating_pass(passes):
    with _db() as db:
        got = db.tradeoff("SELECT id, getposition(*) AS job FROM people WHERE age < 40")
        assert got["k"].tolist() == [2, 5, 10, 20, 50] and passes == ["estimate"]


@pytest.fixture
def catalog_reads(monkeypatch):
    """Every read of a table's roles and of its ledger root from DuckDB, by the table read."""
    from crowddb.store import links, roles

    reads: list[tuple[str, str]] = []
    for module, name, kind in ((roles, "_roles_of", "roles"), (links, "_root", "root")):
        original = getattr(module, name)

        def counted(con, table, _original=original, _kind=kind):
            reads.append((_kind, table))
            return _original(con, table)

        monkeypatch.setattr(module, name, counted)
    return reads


@pytest.mark.parametrize("statement", [
    "SELECT count(*) FROM ANONYMIZE(people, k := 5)",  # a new release, then a repeat served from its boxes
    "SELECT count(*) FROM ANONYMIZE((SELECT * FROM people WHERE age < 60), k := 5)"])
def test_a_table_function_reads_its_table_s_roles_and_root_once(catalog_reads, statement):
    """A table function's step reads its table's roles and ledger root once each (store/memo.py), where it read them
    three times; the next statement reads them again (a declaration between statements is seen)."""
    with _db() as db:
        for run in range(3):
            catalog_reads.clear()
            assert db.sql(statement).fetchall()[0][0] > 0
            assert sorted(catalog_reads) == [("roles", "people"), ("root", "people")], run
        db.declare_roles("people", quasi_identifiers=["age", "sex"], sensitive=["salary", "zip"], ground_truth="job",
                         key="id")
        db.sql(statement).fetchall()
        assert db.last_report[0]["declared_quasi_identifiers"] == ["age", "sex"]
