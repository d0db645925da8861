"""Issue 11, property form: whatever shape a crowd query takes, workers never see what the roles forbid.

Hypothesis generates query shapes over a small protected table (projections with expressions, aliases, stars with
EXCLUDE/REPLACE/RENAME; CTEs, subqueries, views, CREATE TABLE AS chains, UNION ALL, a join to a second table equated
on zip; getposition, or getcandidate grouped by a column). Each shape runs as a crowd query on a fresh database; a
refusal (``CrowdDBError``) is fine when nothing was published. What was published is read back with the independent
scanner (``privacy_scanner``): no salary, job or non-core ``city`` value, no key, no class of 1..k-1 input rows (after
intersecting group items' boxes of a grouped quasi-identifier).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from privacy_scanner import describe, group_intersection_small_classes, leaked_protected, published_items, small_classes

import crowddb
from crowddb.errors import CrowdDBError

QIS = ["age", "zip", "sex"]
CORE = ["age", "zip", "sex", "edu", "hobby"]
# never to be seen: sensitive salary, ground truth job, and city (neither core nor a quasi-identifier: not allowed)
FORBIDDEN = ["salary", "job", "city"]


def people(n: int = 120, seed: int = 4) -> pd.DataFrame:
    """People with distinctive keys ('K04217'), salaries ending in .5 and job a rule of age and education."""
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 70, n)
    edu = rng.integers(1, 17, n)
    return pd.DataFrame({
        "id": [f"K{i:05d}" for i in rng.choice(np.arange(10_000, 99_999), n, replace=False)],
        "age": age, "zip": rng.choice(["10001", "10002", "20001", "20002", "30001"], n),
        "sex": rng.choice(["F", "M"], n), "edu": edu, "hobby": rng.choice(["chess", "golf", "none"], n),
        "city": rng.choice(["Springfield", "Shelbyville", "Ogdenville", "Brockway"], n),
        "salary": rng.integers(20_000, 90_000, n) + 0.5,
        "job": np.where(edu >= 13, "teacher", np.where(age >= 40, "driver", "clerk"))})


PEOPLE = people()
OFFICES = pd.DataFrame({"zip": ["10001", "10002", "20001", "20002", "30001"],
                        "office": ["North office", "East office", "Harbor office", "Hill office", "Mill office"]})

# (SQL with {t} for the table qualifier, the QI it is a function of when the scanner can read it back, or None)
EXPRESSIONS = [
    ("upper({t}job)", None), ("lower({t}job)", None), ("{t}job || '-x'", None), ("concat({t}hobby, {t}job)", None),
    ("CASE WHEN {t}job = 'clerk' THEN 'c' ELSE {t}job END", None), ("{t}salary + 0", None),
    ("CAST({t}salary AS VARCHAR)", None), ("{t}id || ''", None), ("upper({t}id)", None), ("lower({t}id)", None),
    ("upper({t}city)", None), ("{t}city || ''", None), ("{t}age + 0", "age"), ("{t}age * 1", "age"),
    ("{t}zip || ''", "zip"), ("upper({t}sex)", "sex"), ("CASE WHEN {t}age > 40 THEN 'old' ELSE 'young' END", None),
    ("upper({t}hobby)", None), ("{t}edu + 1", None), ("{t}job", None), ("{t}salary", None), ("{t}id", None),
    ("{t}age", "age"), ("{t}zip", "zip"), ("{t}city", None),
]
STARS = ["*", "* EXCLUDE (salary)", "* REPLACE (upper(job) AS job)", "* REPLACE (upper(hobby) AS hobby)",
         "* RENAME (job AS j2)", "* RENAME (salary AS pay, age AS years)", "* EXCLUDE (id, salary)"]
WRAPPERS = ["direct", "subquery", "cte", "cte+subquery", "view", "ctas", "ctas chain", "union", "join"]


@st.composite
def shapes(draw):
    wrapper = draw(st.sampled_from(WRAPPERS))
    k = draw(st.sampled_from([3, 4, 6]))
    low = draw(st.integers(18, 40))
    t = "p." if wrapper == "join" else ""
    items, aliases, plain = [], {}, set()
    star = draw(st.sampled_from([None, *STARS]))
    if star is not None:
        items.append(f"{t}{star}")
    else:  # some plain core columns, so most shapes have something to publish
        for column in draw(st.lists(st.sampled_from(CORE), min_size=1, max_size=3, unique=True)):
            items.append(f"{t}{column}")
            plain.add(column)
    for n, i in enumerate(draw(st.lists(st.integers(0, len(EXPRESSIONS) - 1), max_size=4, unique=True))):
        sql, qi = EXPRESSIONS[i]
        sql = sql.format(t=t)
        bare = sql.removeprefix(t)
        alias_kind = draw(st.sampled_from(["none", "opaque", "named"]))
        if alias_kind == "none" and bare in PEOPLE.columns and (star is not None or bare in plain):
            alias_kind = "opaque"  # the same name twice: DuckDB renames the copy, the 'opaque' alias does it here
        if alias_kind == "none":
            items.append(sql)
            if bare in PEOPLE.columns:
                plain.add(bare)
        else:
            alias = f"x{n}" if alias_kind == "opaque" else f"{qi or 'v'}_alias{n}"
            items.append(f"{sql} AS {alias}")
            if qi:
                aliases[alias] = qi
    if star is None and "job" not in plain:  # the simulated crowd answers from the input's ground truth
        items.append(f"{t}job")
    if wrapper == "join" and draw(st.booleans()):
        items.append("o.office")
        if draw(st.booleans()):
            items.append("o.zip AS ozip")
            aliases["ozip"] = "zip"
    operator = draw(st.sampled_from(["getposition", "getposition", "getcandidate"]))
    anonymizer = (draw(st.sampled_from(["mondrian", "mondrian", "mondrian", "fka"])) if operator == "getposition"
                  else "mondrian")
    group = None
    if operator == "getcandidate":
        group = draw(st.sampled_from(["sex", "zip", "hobby"]))
        if star is None and group not in plain:
            items.append(f"{t}{group}")
    projection = ", ".join(items)
    where = f"WHERE {t}age >= {low}"
    if wrapper == "join":
        inner = f"SELECT {projection} FROM people p JOIN offices o ON o.zip = p.zip {where}"
    elif wrapper == "union":
        inner = (f"SELECT {projection} FROM people {where} AND sex = 'F' UNION ALL "
                 f"SELECT {projection} FROM people {where} AND sex = 'M'")
    else:
        inner = f"SELECT {projection} FROM people {where}"
    if operator == "getposition":
        extra = ", anonymizer := 'fka'" if anonymizer == "fka" else ""
        call = f"SELECT getposition(*, k := {k}{extra}) FROM {{src}}"
    else:
        call = f"SELECT {group}, getcandidate(*, 'teacher', k := {k}) FROM {{src}} GROUP BY {group}"
    setup: list[str] = []
    if wrapper == "direct":
        statements = [call.format(src=f"people {where}") if operator == "getposition"
                      else call.format(src=f"(SELECT * FROM people {where}) s")]
    elif wrapper in ("subquery", "union", "join"):
        statements = [call.format(src=f"({inner}) s")]
    elif wrapper == "cte":
        statements = [f"WITH s AS ({inner}) " + call.format(src="s")]
    elif wrapper == "cte+subquery":
        statements = [f"WITH a AS ({inner}) " + call.format(src="(SELECT * FROM a) s")]
    elif wrapper == "view":
        setup = [f"CREATE VIEW v AS {inner}"]
        statements = [call.format(src="v")]
    elif wrapper == "ctas":
        setup = [f"CREATE TABLE c1 AS {inner}"]
        statements = [call.format(src="c1")]
    else:
        setup = [f"CREATE TABLE c1 AS {inner}", "CREATE TABLE c2 AS SELECT * FROM c1"]
        statements = [call.format(src="c2")]
    return {"setup": setup, "statements": statements, "k": k, "low": low, "aliases": aliases,
                "group": group if group in QIS else None, "wrapper": wrapper}


def _frame(low: int) -> pd.DataFrame:
    return PEOPLE[PEOPLE["age"] >= low].reset_index(drop=True)


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(shape=shapes())
def test_no_shape_publishes_what_roles_forbid(shape):
    with crowddb.connect(seed=5, progress=False) as db:
        db.load_frame("people", PEOPLE, quasi_identifiers=QIS, sensitive=["salary"], ground_truth="job", key="id",
                      core=CORE)
        db.load_frame("offices", OFFICES)
        for statement in shape["setup"]:
            db.sql(statement)
        error = None
        try:
            for statement in shape["statements"]:
                db.sql(statement).fetchall()
        except CrowdDBError as err:
            error = err
        items = published_items(db)
        hits = db.sql("SELECT count(*) FROM crowddb_hits").fetchall()[0][0]
    where = f"{shape['setup']} {shape['statements']}"
    if error is not None:
        assert hits == 0 and items.empty, f"refused ({error}) after publishing {hits} HITs: {where}"
        return
    frame = _frame(shape["low"])
    leaks = leaked_protected(items, PEOPLE, FORBIDDEN, "id")
    assert not leaks, f"{describe(leaks)}\n{where}"
    small = small_classes(items, frame, QIS, shape["k"], aliases=shape["aliases"])
    assert small.empty, f"{describe(small)}\n{where}"
    if shape["group"]:
        pinned = group_intersection_small_classes(items, frame, QIS, [shape["group"]], shape["k"],
                                                  aliases=shape["aliases"])
        assert pinned.empty, f"grouped by {shape['group']}: {describe(pinned)}\n{where}"
