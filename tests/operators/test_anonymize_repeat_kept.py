"""ANONYMIZE asked again for a release it served from the ledger's boxes hands back the release it kept
(``operators.table_functions.repeats``) instead of planning and boxing it again (issue 26: a repeat at most 1.3x
``anonymize()`` alone). Pinned: every call of a session gives the same rows, in the same order, the same report and
the same ledger and release rows as the path that computes every release; the kept release is used only while the
request, the rows, their values and the ledger are what they were."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import crowddb
from crowddb.errors import CrowdDBError
from crowddb.operators.table_functions import repeats

QUERY = ("SELECT * FROM ANONYMIZE({source}, k := {k}, quasi_identifiers := ['age', 'zip', 'sex'])")


def _people(n: int = 240, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"id": np.arange(n), "age": rng.integers(18, 80, n), "zip": rng.integers(100, 130, n),
                         "sex": rng.choice(["f", "m"], n), "note": [f"n{i % 17}" for i in range(n)]})


# (statement, is it a plain statement); every ANONYMIZE's rows, report or error is compared
SESSION = [
    (QUERY.format(source="people", k=5), False),  # a new release
    (QUERY.format(source="people", k=5), False),  # a repeat, served from the ledger's boxes (and kept)
    (QUERY.format(source="people", k=5), False),  # the kept release
    (QUERY.format(source="people", k=5), False),
    ("UPDATE people SET note = 'changed' WHERE id = 4", True),  # a column it does not read: still the kept one
    (QUERY.format(source="people", k=5), False),
    ("UPDATE people SET age = age + 1 WHERE id = 3", True),  # a value it reads: computed again
    (QUERY.format(source="people", k=5), False),
    (QUERY.format(source="people", k=5), False),
    ("BEGIN TRANSACTION", True),
    (QUERY.format(source="people", k=5), False),
    ("ROLLBACK", True),
    (QUERY.format(source="people", k=5), False),
    (QUERY.format(source="other", k=5), False),  # another table's release: this one's ledger is as it was
    (QUERY.format(source="people", k=5), False),
    (QUERY.format(source="people", k=5), False),
    (QUERY.format(source="people", k=10), False),  # another request
    (QUERY.format(source="people", k=5), False),
    ("DELETE FROM people WHERE id = 7", True),  # other rows
    (QUERY.format(source="people", k=5), False),
    (QUERY.format(source="(SELECT * FROM people WHERE age > 30)", k=5), False),
    (QUERY.format(source="people", k=5), False),
    (QUERY.format(source="people", k=5), False),
    ("ALTER TABLE people RENAME TO persons", True),  # the same rows under another name share the ledger
    ("CREATE TABLE people AS SELECT * FROM persons", True),
    (QUERY.format(source="people", k=5), False),
    (QUERY.format(source="persons", k=5), False),
    (QUERY.format(source="people", k=5), False),
]


def _run(session: list[tuple[str, bool]]) -> tuple[list, dict[str, list]]:
    out = []
    with crowddb.connect(seed=1, progress=False) as db:
        db.load_frame("people", _people(), key="id")
        db.load_frame("other", _people(seed=4), key="id")
        for statement, plain in session:
            if plain:
                db.sql(statement)
                continue
            try:
                rows = db.sql(statement).fetchall()
                report = {k: v for k, v in db.last_report[0].items()}
                out.append(("rows", rows, report))
            except CrowdDBError as err:
                out.append(("error", type(err).__name__, str(err)))
        tables = {
            "releases": db.sql("SELECT release_id, run_id, kind, method, k, epsilon, delta, params, metrics "
                               "FROM crowddb_releases ORDER BY release_id").fetchall(),
            "ledger": db.sql("SELECT release, table_name, k, traceable, fingerprint, repeats, quasi_identifiers "
                             "FROM crowddb_ledger ORDER BY ALL").fetchall(),
            "histories": db.sql("SELECT table_name, row_ref, history, k FROM crowddb_histories "
                                "ORDER BY ALL").fetchall(),
        }
    return out, tables


def test_a_session_is_the_same_with_and_without_the_kept_releases(monkeypatch):
    hits = []
    find = repeats.find

    def counted(*args):
        found = find(*args)
        hits.append(found is not None)
        return found

    monkeypatch.setattr(repeats, "find", counted)
    fast, fast_tables = _run(SESSION)
    monkeypatch.setattr(repeats, "find", lambda *args: None)  # every release computed
    slow, slow_tables = _run(SESSION)
    assert len(fast) == len(slow)
    for i, (a, b) in enumerate(zip(fast, slow)):
        assert a == b, i
    assert fast_tables == slow_tables
    # the kept release served the third, fourth and sixth call at least, and every later kept repeat
    assert hits[2] and hits[3] and hits[4]
    assert sum(hits) >= 6
    assert any(kind == "rows" and report["method"] == "served" for kind, _, report in fast if kind == "rows")


def test_nothing_is_planned_or_boxed_for_a_kept_repeat(monkeypatch):
    from crowddb.operators.table_functions import anonymize as table_function
    from crowddb.store import composition

    with crowddb.connect(seed=1, progress=False) as db:
        db.load_frame("people", _people(), key="id")
        query = QUERY.format(source="people", k=5)
        first = [db.sql(query).fetchall() for _ in range(2)]
        served = db.last_report[0]

        def never(*args, **kwargs):
            raise AssertionError("computed again")

        for name in ("_kept_classes", "_published"):
            monkeypatch.setattr(table_function, name, never)
        for name in ("joint_classes", "shown_before", "distinct_rows"):
            monkeypatch.setattr(composition, name, never)
        again = db.sql(query).fetchall()
        report = db.last_report[0]
        ledger = db.sql("SELECT release, repeats FROM crowddb_ledger ORDER BY release").fetchall()
    assert again == first[1]
    assert {k: v for k, v in report.items() if k != "release_id"} == {
        k: v for k, v in served.items() if k != "release_id"}
    assert ledger == [("release:1", None), ("release:2", "release:1"), ("release:3", "release:1")]


@pytest.mark.parametrize("change, still_kept", [
    ("INSERT INTO people VALUES (1000, 40, 110, 'f', 'x')", False),
    ("UPDATE people SET sex = 'm' WHERE id = 11", False),
    ("SELECT count(*) FROM ANONYMIZE(people, k := 10, quasi_identifiers := ['age', 'zip', 'sex'])", False),
    ("SELECT count(*) FROM ANONYMIZE((SELECT * FROM people WHERE age > 40), k := 5, "
     "quasi_identifiers := ['age', 'zip'])", False),
    # another table's release changes none of this table's histories (its ledger counters are its own)
    ("SELECT count(*) FROM ANONYMIZE(other, k := 5, quasi_identifiers := ['age', 'zip', 'sex'])", True),
])
def test_a_change_of_the_rows_or_the_ledger_is_computed_again(change, still_kept, monkeypatch):
    found = []
    find = repeats.find
    monkeypatch.setattr(repeats, "find", lambda *args: found.append(find(*args)) or found[-1])
    with crowddb.connect(seed=1, progress=False) as db:
        db.load_frame("people", _people(), key="id")
        db.load_frame("other", _people(seed=4), key="id")
        query = QUERY.format(source="people", k=5)
        kept = [db.sql(query).fetchall() for _ in range(3)][-1]
        assert found[-1] is not None  # the third call: the kept release
        db.sql(change).fetchall()
        found.clear()
        try:
            again = db.sql(query).fetchall()
        except CrowdDBError:
            again = None
    assert len(found) == 1 and (found[0] is not None) == still_kept
    if still_kept:
        assert again == kept


def test_shown_before_read_from_the_joint_classes_is_the_ledgers_answer(monkeypatch):
    """ANONYMIZE asks the ledger whether an earlier release showed its rows only when the planner did not read their
    joint classes already: both answers agree over a session of new releases, repeats, changes and subsets."""
    from crowddb.operators.table_functions import anonymize as table_function
    from crowddb.store import composition

    asked = []
    original = table_function._shown_before

    def both(ctx, rows):
        got = original(ctx, rows)
        want = bool(composition.shown_before(ctx.con, rows.ledger_table, rows.row_refs))
        asked.append((got, want, rows.joint_classes is not None))
        return got

    monkeypatch.setattr(table_function, "_shown_before", both)
    monkeypatch.setattr(repeats, "find", lambda *args: None)  # every release computed
    _run(SESSION)
    assert asked and all(got == want for got, want, _ in asked)
    assert {got for got, _, from_classes in asked if from_classes} == {True, False}
