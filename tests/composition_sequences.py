"""Seeded random sequences of releases over Adult, for the composition checker (issue 15).

A sequence is drawn from its seed alone (``make_sequence``), then run on a fresh ``crowddb.connect(seed=...)`` with
the embedded simulated crowd (``run_sequence``). Its table is a random sample of Adult (``SAMPLE_ROWS`` rows) with a
unique ``token`` column declared core, so every published item carries it raw (perfect linkage made literal). Between
3 and 8 releases, mixing:

* ``getposition`` crowd queries: no WHERE, a WHERE on a quasi-identifier (``age``, ``education_num``, ``sex``) or on
  a column that is not one (``hours_per_week``, ``workclass``); k in 5, 10, 20; sometimes ``ORDER BY token LIMIT n``;
  anonymizer Mondrian or FKA; with or without ``seed :=``;
* reruns of an earlier crowd query: verbatim (with or without its seed), or with another seed;
* now and then a ``getcandidate`` grouped by ``workclass`` (a column that is not a quasi-identifier);
* ``ANONYMIZE`` releases (of the table, or of a subquery with a WHERE), Mondrian, Datafly or Incognito, k 5, 10, 20;
* in most sequences one ``INSERT`` of new Adult rows (with their own tokens) between two releases.

``run_sequence`` returns the final table (every row that ever existed, with its token), the releases as workers saw
them (``composition_checker.Release``: each crowd run's ``crowddb_hit_items``, each ANONYMIZE result), the shape
of each crowd run and the steps crowddb refused (``CrowdDBError``: a refusal is allowed, what it published counts).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from composition_checker import Release, release_from_frame, releases_from_hit_items

import crowddb
from crowddb.datasets import load_adult
from crowddb.errors import CrowdDBError

QIS = ["age", "sex", "education_num", "race"]
CORE = [*QIS, "token", "workclass", "hours_per_week"]
ROLES = {"quasi_identifiers": QIS, "key": "id", "ground_truth": "occupation", "core": CORE}
SAMPLE_ROWS = 400
INSERT_ROWS = (20, 60)

_ADULT: pd.DataFrame | None = None


def adult() -> pd.DataFrame:
    global _ADULT
    if _ADULT is None:
        _ADULT = load_adult()
    return _ADULT


@dataclass
class Step:
    kind: str  # 'crowd', 'anonymize' or 'insert'
    sql: str = ""
    k: int | None = None
    shape: str = ""
    rows: int = 0  # for an insert


@dataclass
class Sequence:
    seed: int
    steps: list[Step] = field(default_factory=list)

    @property
    def n_releases(self) -> int:
        return sum(s.kind != "insert" for s in self.steps)

    def describe(self) -> str:
        return f"sequence {self.seed}: " + " | ".join(s.shape for s in self.steps)


# ------------------------------------------------------------------------------------------------------ drawing

def _where(rng) -> tuple[str, str]:
    """(SQL clause, shape word): none, on a quasi-identifier, or on a column that is not one."""
    kind = rng.choice(["none", "qi", "qi", "nonqi", "nonqi"])
    if kind == "none":
        return "", "all rows"
    if kind == "qi":
        column = rng.choice(["age", "age", "education_num", "sex"])
        if column == "age":
            cut = int(rng.integers(25, 55))
            op = rng.choice(["<", ">="])
            return f"WHERE age {op} {cut}", f"WHERE age {op} {cut} (QI)"
        if column == "education_num":
            cut = int(rng.integers(8, 13))
            return f"WHERE education_num >= {cut}", f"WHERE education_num >= {cut} (QI)"
        sex = rng.choice(["Male", "Female"])
        return f"WHERE sex = '{sex}'", f"WHERE sex = {sex} (QI)"
    if rng.random() < 0.6:
        cut = int(rng.choice([35, 40, 41, 45]))
        op = rng.choice(["<", ">="])
        return f"WHERE hours_per_week {op} {cut}", f"WHERE hours_per_week {op} {cut} (non-QI)"
    workclass = rng.choice(["Private", "Self-emp-not-inc", "Local-gov"])
    op = rng.choice(["=", "<>"])
    return f"WHERE workclass {op} '{workclass}'", f"WHERE workclass {op} {workclass} (non-QI)"


def _crowd_step(rng) -> Step:
    k = int(rng.choice([5, 10, 20]))
    where, where_shape = _where(rng)
    fka = rng.random() < 0.25
    seeded = rng.random() < 0.5
    args = [f"k := {k}"] + (["anonymizer := 'fka'"] if fka else []) + ([f"seed := {int(rng.integers(1, 99))}"]
                                                                         if seeded else [])
    limit, limit_shape = "", ""
    if rng.random() < 0.3:
        n = int(rng.choice([60, 100, 150]))
        limit, limit_shape = f" ORDER BY token LIMIT {n}", f", LIMIT {n}"
    if rng.random() < 0.12 and not fka:
        sql = (f"SELECT workclass, getcandidate(*, 'Prof-specialty', {', '.join(args)}) FROM adult {where} "
               f"GROUP BY workclass")
        shape = f"getcandidate k={k} {where_shape} GROUP BY workclass{', seeded' if seeded else ''}"
        return Step("crowd", sql, k, shape)
    sql = f"SELECT getposition(*, {', '.join(args)}) FROM adult {where}{limit}"
    shape = (f"getposition k={k} {'fka' if fka else 'mondrian'} {where_shape}{limit_shape}"
             f"{', seeded' if seeded else ''}")
    return Step("crowd", sql, k, shape)


def _rerun(rng, earlier: Step) -> Step:
    how = rng.choice(["verbatim", "new seed", "no seed"])
    if how == "verbatim":
        return Step("crowd", earlier.sql, earlier.k, f"rerun verbatim of [{earlier.shape}]")
    base = re.sub(r", seed := \d+", "", earlier.sql)
    if how == "no seed":
        return Step("crowd", base, earlier.k, f"rerun without seed of [{earlier.shape}]")
    seeded = base.replace(f"k := {earlier.k}", f"k := {earlier.k}, seed := {int(rng.integers(100, 199))}", 1)
    return Step("crowd", seeded, earlier.k, f"rerun with a new seed of [{earlier.shape}]")


def _anonymize_step(rng) -> Step:
    k = int(rng.choice([5, 10, 20]))
    method = rng.choice(["mondrian", "mondrian", "datafly", "incognito"])
    if rng.random() < 0.5:
        where, where_shape = _where(rng)
        source = f"(SELECT * FROM adult {where})" if where else "adult"
    else:
        source, where_shape = "adult", "all rows"
    sql = f"SELECT * FROM ANONYMIZE({source}, k := {k}, method := '{method}')"
    return Step("anonymize", sql, k, f"ANONYMIZE k={k} {method} {where_shape}")


def make_sequence(seed: int) -> Sequence:
    """A sequence of 3..8 releases (and maybe one INSERT), drawn from ``seed`` alone."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 9))
    steps: list[Step] = []
    crowd: list[Step] = []
    for _ in range(n):
        roll = rng.random()
        if crowd and roll < 0.25:
            step = _rerun(rng, crowd[int(rng.integers(len(crowd)))])
        elif roll < 0.75 or not crowd and roll < 0.85:
            step = _crowd_step(rng)
        else:
            step = _anonymize_step(rng)
        if step.kind == "crowd":
            crowd.append(step)
        steps.append(step)
    if rng.random() < 0.7:
        rows = int(rng.integers(*INSERT_ROWS))
        at = int(rng.integers(1, len(steps)))
        steps.insert(at, Step("insert", shape=f"INSERT {rows} rows", rows=rows))
    return Sequence(seed, steps)


# ------------------------------------------------------------------------------------------------------ running

def _sample(seed: int, inserts: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(10_000 + seed)
    pool = adult()
    picked = rng.choice(len(pool), SAMPLE_ROWS + inserts, replace=False)
    base = pool.iloc[picked[:SAMPLE_ROWS]].reset_index(drop=True)
    extra = pool.iloc[picked[SAMPLE_ROWS:]].reset_index(drop=True)
    base = base.assign(token=[f"T{seed:03d}-{i:04d}" for i in range(len(base))])
    extra = extra.assign(token=[f"N{seed:03d}-{i:04d}" for i in range(len(extra))])
    return base, extra


@dataclass
class Outcome:
    sequence: Sequence
    table: pd.DataFrame
    releases: list[Release]
    runs: dict  # run_id -> shape
    refused: list = field(default_factory=list)  # (step index, error text): a release crowddb refused


def run_sequence(sequence: Sequence) -> Outcome:
    inserts = sum(s.rows for s in sequence.steps)
    base, extra = _sample(sequence.seed, inserts)
    table = base
    anonymized: list[Release] = []
    runs: dict = {}
    refused: list = []
    with crowddb.connect(seed=sequence.seed, progress=False) as db:
        db.load_frame("adult", base, **ROLES)

        def last_run():
            return db.sql("SELECT coalesce(max(run_id), 0) FROM crowddb_runs").fetchall()[0][0]

        for i, step in enumerate(sequence.steps):
            if step.kind == "insert":
                db.load_frame("adult_new", extra, **ROLES)
                db.sql("INSERT INTO adult SELECT * FROM adult_new")
                db.sql("DROP TABLE adult_new")
                table = pd.concat([base, extra], ignore_index=True)
                continue
            before = last_run()
            try:  # issue 15 may refuse a release that would break an earlier one; what it published still counts
                frame = db.sql(step.sql).df()
            except CrowdDBError as error:
                refused.append((i, str(error)))
                frame = None
            if step.kind == "anonymize" and frame is not None:
                anonymized.append(release_from_frame(f"anonymize {i}", frame, step.k, step.shape))
            for run_id in range(before + 1, last_run() + 1):  # whatever a crowd run published is read back below
                runs[run_id] = step.shape
        crowd = releases_from_hit_items(db)
    for release in crowd:
        run_id = int(release.name.split()[1])
        release.shape = runs.get(run_id, release.shape)
    return Outcome(sequence, table, [*crowd, *anonymized], runs, refused)
