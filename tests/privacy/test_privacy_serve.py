"""Issue 25: a request over rows shown before is answered safely instead of refused (``crowddb.privacy.serve``).

The plan is pinned on hand-made joint classes (each figure worked out in the comment beside it); the SQL paths are
checked by the independent composition checker (``composition_checker``, imports nothing of crowddb) reading what
workers saw, with a unique ``token`` column published raw so that every record is linked to its row."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from composition_checker import check, release_from_frame, releases_from_hit_items
from conftest import people_frame

import crowddb
from crowddb.anonymize.metrics import compact
from crowddb.errors import PrivacyError
from crowddb.privacy import serve

SIG = "agesexzip"


def classes(rows: dict[str, list[int]], box: dict[str, str], k: dict[str, int] | None = None,
            qis: dict[str, str] | None = None) -> pd.DataFrame:
    """Joint classes as ``store.composition.joint_classes`` gives them: history -> members, with its last box."""
    out = [{"row_ref": r, "history": h, "last_box": box[h], "last_release": f"run:{h}",
            "last_k": (k or {}).get(h, 10), "last_quasi_identifiers": (qis or {}).get(h, SIG), "k": 10}
           for h, members in rows.items() for r in members]
    return pd.DataFrame(out)


# 3 classes of the earlier k=10 release: a (10 rows), b (10), c (12)
A, B, C = list(range(10)), list(range(10, 20)), list(range(20, 32))
EARLIER = classes({"a": A, "b": B, "c": C}, {"a": "[20-29]\x1fM\x1f*", "b": "[30-39]\x1fM\x1f*",
                                            "c": "[40-49]\x1fF\x1f*"})


def test_the_same_k_shows_every_class_in_its_earlier_box():
    plan = serve.plan(np.array(A + B + C), EARLIER, 10, SIG)
    assert plan.boxes.tolist() == ["[20-29]\x1fM\x1f*"] * 10 + ["[30-39]\x1fM\x1f*"] * 10 + ["[40-49]\x1fF\x1f*"] * 12
    assert plan.groups.tolist() == [0] * 10 + [1] * 10 + [2] * 12  # numbered by box text
    assert plan.how == "every row was shown before: in the boxes of run:a, run:b, run:c again"


def test_a_smaller_k_is_served_by_the_earlier_classes_and_a_subset_in_its_boxes():
    plan = serve.plan(np.array(B[:3] + C), EARLIER, 5, SIG)
    assert pd.notna(plan.boxes).all() and plan.boxes[0] == "[30-39]\x1fM\x1f*"


def test_a_plan_in_earlier_boxes_is_labelled_per_box_as_labels_does_per_row():
    # box_labels (each distinct box split once) against labels (each row's texts), on the plan above and on random
    # plans of many boxes, some texts shared by two joint classes (one box printed twice)
    def per_row(plan, n):
        raw = pd.DataFrame({"age": np.zeros(n), "sex": "x", "zip": "y"})
        shown, _ = serve.labels(plan, raw, ["age", "sex", "zip"], None, 10, None)
        tuples = list(zip(*(shown[c] for c in ["zip", "age", "sex"]), strict=True))
        pre = pd.factorize(pd.Series(tuples, dtype=object))[0]  # rows printing the same texts, as first met
        first = np.unique(pre, return_index=True)[1]
        return pre, {c: shown[c].to_numpy(dtype=object)[first] for c in ["zip", "age", "sex"]}

    rng = np.random.default_rng(7)
    plans = [(serve.plan(np.array(C + A + B), EARLIER, 10, SIG), 32)]
    for _ in range(20):
        histories = rng.integers(0, 60, 800)
        texts = {h: f"[{rng.integers(0, 9)}0-{rng.integers(0, 9)}9]\x1f{rng.choice(['M', 'F'])}\x1f*" for h in range(60)}
        rows = {str(h): [int(r) for r in np.flatnonzero(histories == h)] for h in range(60)}
        earlier = classes(rows, {str(h): texts[h] for h in range(60)})
        asked = rng.permutation(np.flatnonzero(np.isin(histories, rng.choice(60, 40, replace=False))))
        plans.append((serve.plan(asked, earlier, 10, SIG), len(asked)))
    for plan, n in plans:
        assert pd.notna(plan.boxes).all()
        pre, texts, metrics = serve.box_labels(plan, n, ["zip", "age", "sex"])
        want_pre, want_texts = per_row(plan, n)
        assert pre.tolist() == want_pre.tolist()
        assert all(texts[c].tolist() == want_texts[c].tolist() for c in ["zip", "age", "sex"])
        assert metrics == {"method": "served", "served": plan.how}


def test_first_occurrences_and_dense_ranks_are_numpys():
    rng = np.random.default_rng(3)
    for n in (0, 1, 5, 1000):
        codes = pd.factorize(rng.integers(0, 50, n))[0]
        assert serve.first_rows(codes).tolist() == np.unique(codes, return_index=True)[1].tolist()
        values = rng.integers(0, 80, n)
        assert compact(values).tolist() == np.unique(values, return_inverse=True)[1].tolist()  # (plan's ranks)


def test_a_larger_k_merges_whole_classes_in_the_order_of_their_boxes():
    # k=20: a (10) and b (10) are merged into one class of 20 (their boxes are first in order); c (12) is short and,
    # the last merged class, joins the one before it: one class of 32
    plan = serve.plan(np.array(A + B + C), EARLIER, 20, SIG)
    assert pd.isna(plan.boxes).all()
    assert set(plan.groups.tolist()) == {0}
    # k=12: a+b (20 >= 12), c alone (12 >= 12)
    plan = serve.plan(np.array(A + B + C), EARLIER, 12, SIG)
    assert plan.groups.tolist() == [0] * 20 + [1] * 12
    assert plan.how == "rows shown before (run:a, run:b, run:c) kept in their joint classes, 1 class(es) merged to hold k"


def test_a_larger_k_than_every_shown_row_is_refused_with_the_k_that_works():
    with pytest.raises(serve.Refused) as refused:
        serve.plan(np.array(A + B + C), EARLIER, 40, SIG)
    assert refused.value.reason == "the rows shown before hold 32 row(s) in their joint classes, fewer than k=40"
    assert refused.value.advice == "ask with k := 32 or less"
    assert serve.plan(np.array(A + B + C), EARLIER, 32, SIG).groups.tolist() == [0] * 32  # the advice works


def test_other_quasi_identifiers_keep_each_class_in_one_box_of_its_own():
    plan = serve.plan(np.array(A + B + C), EARLIER, 10, "agezip")
    assert pd.isna(plan.boxes).all()
    assert plan.groups.tolist() == [0] * 10 + [1] * 10 + [2] * 12  # each class alone (it holds 10 >= k)


def test_new_rows_are_left_to_the_callers_anonymizer():
    plan = serve.plan(np.array(A + [100, 101]), EARLIER, 10, SIG)
    assert plan.groups.tolist() == [0] * 10 + [-1, -1] and plan.new == 2


def test_a_group_and_the_classes_it_touches_are_one_class():
    # two groups: g0 holds rows of a and b, g1 rows of c and two new rows; each classes' earlier box is kept
    rows = np.array(A + B + C + [100, 101])
    groups = np.array([0] * 20 + [1] * 14)
    plan = serve.plan(rows, EARLIER, 10, SIG, groups=groups)
    assert pd.notna(plan.boxes[:20]).all()  # g0: a and b in their boxes
    assert pd.isna(plan.boxes[20:]).all()  # g1 holds new rows: one box over c and them
    assert len(set(plan.groups[20:].tolist())) == 1 and plan.groups[20] not in set(plan.groups[:20].tolist())


def test_widening_adds_the_left_out_rows_of_classes_split_below_k():
    # 3 rows of a (a part of 3 < 10), 7 of c (c keeps 5 < 10 out), all of b: a's and c's other rows are added
    extra = serve.widening(np.array(A[:3] + B + C[:7]), EARLIER, 10)
    assert sorted(extra.tolist()) == A[3:] + C[7:]
    big = classes({"d": list(range(40))}, {"d": "x"})
    assert serve.widening(np.arange(20), big, 10).tolist() == []  # 20 shown, 20 left: both parts hold k


def test_fewer_than_k_new_rows_are_refused_with_a_step_that_works():
    plan = serve.plan(np.array(A + [100, 101]), EARLIER, 10, SIG)
    raw = pd.DataFrame({"age": range(12), "sex": ["M"] * 12, "zip": ["1"] * 12})
    with pytest.raises(serve.Refused) as refused:
        serve.labels(plan, raw, ["age", "sex", "zip"], None, 10, lambda new: None)
    assert refused.value.advice == "ask again when at least 10 new rows are in, or leave them out (WHERE ...)"


# --------------------------------------------------------------------------------------------------- from SQL
ROLES = {"quasi_identifiers": ["age", "sex", "zip"], "sensitive": ["salary"], "ground_truth": "job", "key": "id",
         "core": ["token", "age", "sex", "zip"]}
QIS = ["age", "sex", "zip"]


@pytest.fixture
def db():
    frame = people_frame(200)
    frame["token"] = [f"t{i}" for i in range(len(frame))]
    with crowddb.connect(seed=3, progress=False) as con:
        con.load_frame("people", frame, **ROLES)
        yield con


def verdict(db, *frames) -> str:
    """The independent checker over every crowd run's items and the ANONYMIZE results given (name, frame, k)."""
    table = db.sql("SELECT * FROM people").df()
    releases = releases_from_hit_items(db) + [release_from_frame(n, f, k) for n, f, k in frames]
    return check(table, QIS, releases).summary()


def paid(db) -> int:
    return db.sql("SELECT count(*) FROM crowddb_payments").fetchall()[0][0]


def test_the_same_question_at_another_k_is_served_from_the_record(db):
    db.sql("SELECT token, getposition(*, k := 10) FROM people").df()
    spent = paid(db)
    plan = str(db.explain("SELECT token, getposition(*, k := 25) FROM people"))
    assert "200 rows -> 200 items, 200 cached; 0 HITs" in plan
    db.sql("SELECT token, getposition(*, k := 25) FROM people").df()
    assert paid(db) == spent


def test_k25_after_k10_is_served_and_every_joint_class_holds_25(db):
    db.sql("SELECT token, getposition(*, k := 10) FROM people").df()
    # another answer domain is another question: nothing on record, so the rows are shown again at k = 25
    query = "SELECT token, getposition(*, k := 25, domain := ['teacher', 'driver', 'clerk', 'nurse']) AS p FROM people"
    plan = str(db.explain(query))
    assert "kept in their joint classes" in plan and "would be refused" not in plan
    out = db.sql(query).df()
    assert out["p"].notna().all()
    assert verdict(db).startswith("no violation")
    boxes = db.sql("SELECT box, count(*) AS n FROM crowddb_published WHERE release = 'run:2' GROUP BY box").df()
    assert boxes["n"].min() >= 25


def test_anonymize_k5_after_k10_is_the_persisted_partition(db):
    first = db.sql("SELECT * FROM ANONYMIZE(people, k := 10) ORDER BY token").df()
    second = db.sql("SELECT * FROM ANONYMIZE(people, k := 5) ORDER BY token").df()
    pd.testing.assert_frame_equal(first, second)
    assert verdict(db, ("a1", first, 10), ("a2", second, 5)).startswith("no violation")


def test_a_subset_of_an_anonymize_release_asked_of_the_crowd_is_widened_to_whole_classes(db):
    shown = db.sql("SELECT * FROM ANONYMIZE(people, k := 10)").df()
    query = "SELECT token, getposition(*, k := 10) AS p FROM people WHERE hobby = 'chess'"
    chess = db.sql("SELECT count(*) FROM people WHERE hobby = 'chess'").fetchall()[0][0]
    plan = str(db.explain(query))
    assert "row(s) widened to whole classes" in plan and "would be refused" not in plan
    # their share of the HITs beside them: items x assignments / items a HIT x the cost of an assignment
    widened = int(plan.split(" row(s) widened")[0].rsplit("; ", 1)[1])
    op = db.registry.get("getposition")
    cost = widened * op.assignments / op.tuples_per_hit * op.cost_per_assignment
    assert f"(shown, their answers not used, +${cost:,.2f})" in plan
    out = db.sql(query).df()
    assert len(out) == chess and out["p"].notna().all()  # the widened rows' answers are not the query's
    assert verdict(db, ("anonymize", shown, 10)).startswith("no violation")
    spent = paid(db)
    db.sql(query).df()
    assert paid(db) == spent  # a rerun is served from the answers on record


def test_added_quasi_identifiers_are_generalized_inside_the_earlier_classes(db):
    db.sql("SELECT token, getposition(age, sex, token, k := 10) FROM people").df()
    out = db.sql("SELECT token, getposition(*, k := 10) AS p FROM people").df()
    assert out["p"].notna().all()
    assert verdict(db).startswith("no violation")


def test_a_group_operator_over_rows_shown_before_is_served_and_its_knock_out_round_is_never_refused(db):
    db.sql("SELECT token, getposition(*, k := 10) FROM people").df()
    out = db.sql("SELECT hobby, getcandidate(*, 'teacher', tuples_per_hit := 8) AS pick FROM people "
                 "GROUP BY hobby ORDER BY hobby").df()
    assert out["pick"].notna().all()
    assert db.sql("SELECT count(*) FROM crowddb_runs WHERE status <> 'completed'").fetchall() == [(0,)]
    assert verdict(db).startswith("no violation")


def test_fewer_than_k_new_rows_are_refused_before_paying_and_the_advice_works(db):
    db.sql("SELECT token, getposition(*, k := 10) FROM people").df()
    extra = people_frame(205).iloc[200:]  # ids 201..205
    extra["token"] = [f"n{i}" for i in range(len(extra))]
    db.load_frame("extra", extra, **ROLES)  # new rows come with their roles (a DataFrame's lineage is unknown)
    db.sql("INSERT INTO people SELECT * FROM extra")
    spent = paid(db)
    with pytest.raises(PrivacyError, match=r"5 of its rows were inserted after run:1 showed the others, fewer than k=10.* ask again when at "
                                           r"least 10 new rows are in, or leave them out"):
        db.sql("SELECT token, getposition(*, k := 10) FROM people").df()
    assert paid(db) == spent
    more = people_frame(210).iloc[205:]  # ids 206..210: the advice, at least k new rows
    more["token"] = [f"m{i}" for i in range(len(more))]
    db.load_frame("more", more, **ROLES)
    db.sql("INSERT INTO people SELECT * FROM more")
    db.sql("SELECT token, getposition(*, k := 10) FROM people").df()
    assert verdict(db).startswith("no violation")


def test_a_union_all_of_one_tables_rows_is_traced_and_later_releases_are_checked_against_it(db):
    db.sql("SELECT token, getposition(*, k := 10) AS p FROM (SELECT * FROM people WHERE age < 30 "
           "UNION ALL SELECT * FROM people WHERE age > 60)").df()
    young_old = db.sql("SELECT count(*) FROM people WHERE age < 30 OR age > 60").fetchall()[0][0]
    # each row of the union is on the ledger as the person it is (not 'rows crowddb could not tie')
    assert db.sql("SELECT count(DISTINCT row_ref) FROM crowddb_published WHERE release = 'run:1'").fetchall() == [
        (young_old,)]
    db.sql("SELECT token, getposition(*, k := 10) AS p FROM people WHERE age BETWEEN 40 AND 50").df()
    db.sql("SELECT token, getposition(*, k := 10) AS p FROM people WHERE age < 30").df()
    assert verdict(db).startswith("no violation")


def test_a_union_all_that_reads_a_row_twice_is_refused_and_the_advice_works(db):
    spent = paid(db)
    with pytest.raises(PrivacyError, match=r"row\(s\) of people come twice: .* read each row once \(one WHERE with OR "
                                           r"instead of the UNION ALL\)"):
        db.sql("SELECT token, getposition(*, k := 10) AS p FROM (SELECT * FROM people WHERE age < 40 "
               "UNION ALL SELECT * FROM people WHERE age < 30)").df()
    assert paid(db) == spent
    out = db.sql("SELECT token, getposition(*, k := 10) AS p FROM people WHERE age < 40 OR age < 30").df()
    assert len(out) == db.sql("SELECT count(*) FROM people WHERE age < 40").fetchall()[0][0]
    assert verdict(db).startswith("no violation")


def test_the_docs_subquery_idiom_is_widened_for_tuple_and_group_operators(db):
    people = "(SELECT * FROM people LIMIT 150) people"
    db.sql(f"SELECT token, getposition(*, k := 10) AS p FROM {people}").df()
    young = f"{people} WHERE age < 40"
    # a group operator over part of the earlier classes: the rest of each touched class is shown in groups of its
    # own, whose picks are not the query's
    picks = db.sql(f"SELECT sex, getcandidate(*, 'teacher', tuples_per_hit := 8) AS pick FROM {young} "
                   "GROUP BY sex ORDER BY sex").df()
    assert picks["sex"].tolist() == ["F", "M"]
    chosen = db.sql("SELECT id, sex, age FROM people").df().set_index("id")
    assert (chosen.loc[picks["pick"].astype(int), "age"] < 40).all()  # each pick is one of its group's rows
    assert chosen.loc[picks["pick"].astype(int), "sex"].tolist() == ["F", "M"]
    other = f"SELECT token, getposition(*, k := 10, domain := ['teacher', 'clerk', 'x']) AS p FROM {young}"
    assert "widened to whole classes" in str(db.explain(other))
    out = db.sql(other).df()
    assert len(out) == db.sql(f"SELECT count(*) FROM {young}").fetchall()[0][0]
    assert verdict(db).startswith("no violation")


def test_a_monthly_insert_from_a_staging_table_with_the_same_roles_leaves_the_roles_as_they_were(db):
    before = db.roles("people")
    arrivals = people_frame(230).iloc[200:]
    arrivals["token"] = [f"a{i}" for i in range(len(arrivals))]
    db.load_frame("arrivals", arrivals, **ROLES)
    db.sql("INSERT INTO people SELECT * FROM arrivals")
    assert db.roles("people") == before  # hobby and edu stay columns without a role (they were not core in either)
    db.sql("SELECT token, getposition(*, k := 10) AS p FROM people WHERE hobby = 'chess'").df()  # chosen by them


def test_an_insert_of_a_sensitive_column_into_a_column_without_a_role_still_protects_it(db):
    db.load_frame("copy", people_frame(5).assign(token=list("abcde")), **ROLES)
    assert "hobby" not in db.roles("copy").protected
    db.sql("INSERT INTO copy (id, age, sex, zip, edu, hobby, job, salary, token) "
           "SELECT id + 1000, age, sex, zip, edu, salary::VARCHAR, job, salary, token FROM people")
    assert "hobby" in db.roles("copy").sensitive
