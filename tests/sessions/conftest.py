"""The analyst-sessions suite of issue 25 ("the privacy ledger serves a working day"): the harness and the summary.

A session is what one analyst does in a sitting, written from the documentation (README.md, docs/sql.md,
docs/roles.md, docs/privacy.md, examples/) as a data engineer would work, not from the implementation: a list of
steps run in order on one database (see README.md in this folder).

* ``Q(sql)``: a statement the analyst expects to run. ``kind`` names the refusal of issue 25 it risks (``KINDS``),
  for the per-kind counts; ``advice`` the statements the analyst runs next if it is refused anyway, following the
  refusal's advice (they must run); ``release=k`` marks an ``ANONYMIZE`` whose returned rows are a release at k (kept
  for the composition checker); ``free=True`` a statement the docs say is served from the answers on record (it must
  buy no HIT).
* ``Refused(sql, because=...)``: a statement whose correct answer is a refusal (fewer than k new rows, a budget):
  it must be refused before anything is bought, with a message matching ``because``, and following its advice (the
  ``advice`` statements) must work.
* ``REOPEN``: close the connection and open the database file again (the session's ``file=True``).
* ``Py(label, fn)``: a call of the Python API (``fn(db)``), not counted as a statement.

Each statement's outcome is one of: **ran**; **refused** (a ``crowddb.errors.CrowdDBError`` before anything was
bought: the counts of ``crowddb_runs``, ``crowddb_hits`` and ``crowddb_payments`` are unchanged); **refused after
paying** (a ``CrowdDBError`` after something was bought: always a failure); **crash** (any other exception, a plain
``duckdb.Error`` included: a failure). After the last step, ``db.privacy_report`` must work, and the independent
``tests/composition_checker.py`` (it imports nothing of crowddb) judges every release workers saw
(``crowddb_hit_items``, one release per crowd run) and every ``ANONYMIZE`` result the session returned: every
published row's joint class must hold at least its k. The session's table carries a unique ``token`` column
(``'T' || id``, added before the roles are declared, declared core), so every published record is linked to its row.

A session fails on any statement expected to run that did not, any refusal after paying, any crash, any expected
refusal that ran or was refused for another reason, advice that did not work, a documented cache hit that bought
HITs, and any joint class below k. Nothing is marked xfail. The terminal summary counts, per file and per kind,
statements, ran, refused, refused after paying and crashes, and the refusal rate (the goal of issue 25: at most 3%).
``SESSIONS_VERBOSE=1 pytest -s tests/sessions`` prints every statement's outcome.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import crowddb
from crowddb.datasets import adult_path
from crowddb.demo import ROLES as DEMO_ROLES
from crowddb.errors import CrowdDBError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import composition_checker as cc

# ----------------------------------------------------------------------------------------------------------- roles

README_QIS = ["age", "sex", "education_num"]
#: the README's roles, plus the checker's ``token`` declared core (published raw: perfect linkage made literal)
README_ROLES = {"quasi_identifiers": README_QIS, "sensitive": ["occupation"], "ground_truth": "occupation",
                "key": "id", "core": ["age", "sex", "education_num", "workclass", "hours_per_week", "token"]}
#: crowddb.demo.ROLES (five quasi-identifiers, four sensitive columns), plus ``token`` declared core
DEMO = {**DEMO_ROLES, "core": [*DEMO_ROLES["core"], "token"]}
ROLE_SETS = {"readme": README_ROLES, "demo": DEMO}

#: the kinds of refusal issue 25 measured, by the statements that risk them
KINDS: dict[str | None, str] = {
    "k": "(1) another k over rows already shown",
    "subset": "(2) a subset of rows asked before",
    "part": "(3) part of earlier classes, nothing on record",
    "qis": "(4) same rows and k, other published QIs",
    "group": "(5) a group operator over rows shown before",
    "union": "(6) a release after a UNION ALL read",
    "anonymize": "(7) ANONYMIZE over a crowd run's rows and k",
    "view": "a view of crowd answers after reopening",
    "spelling": "the same rows, FROM adult vs (SELECT * ...) adult",
    "correct": "(8) correct refusal: too few new rows, budget",
    None: "ordinary work (no known risk)",
}

BOUGHT = ("crowddb_runs", "crowddb_hits", "crowddb_payments")  # a change in any count: something was bought
GOAL_RATE = 0.03  # issue 25: at most 3% of statements refused
VERBOSE = bool(os.environ.get("SESSIONS_VERBOSE"))


# ----------------------------------------------------------------------------------------------------------- steps

@dataclass
class Q:
    """A statement the analyst expects to run."""

    sql: str
    kind: str | None = None
    advice: Sequence[str | Q] = ()
    release: int | None = None
    free: bool = False

    def __post_init__(self):
        if self.kind not in KINDS or self.kind == "correct":
            raise ValueError(f"unknown kind {self.kind!r} (use Refused for a correct refusal)")
        if re.search(r"\bANONYMIZE\s*\(", self.sql, re.IGNORECASE) and self.release is None:
            raise ValueError("an ANONYMIZE statement returns a release: say its k (release=...)")
        if isinstance(self.advice, (str, Q)):
            self.advice = (self.advice,)


@dataclass
class Refused:
    """A statement whose correct answer is a refusal; ``advice``: what its message advises, which must work."""

    sql: str
    because: str
    advice: Sequence[str | Q] = ()
    kind: str = "correct"

    def __post_init__(self):
        if isinstance(self.advice, (str, Q)):
            self.advice = (self.advice,)
        if not self.advice:
            raise ValueError("a correct refusal comes with the advice an analyst follows")


@dataclass
class Py:
    """A call of the Python API (not counted as a statement)."""

    label: str
    fn: Callable[[Any], Any]


class _Reopen:
    def __repr__(self) -> str:
        return "REOPEN"


REOPEN = _Reopen()


# ------------------------------------------------------------------------------------------------------- outcomes

@dataclass
class Outcome:
    sql: str
    kind: str | None
    role: str  # 'statement', 'expected refusal', 'advice'
    status: str  # 'ran', 'refused', 'refused after paying', 'crash'
    error: str = ""
    seconds: float = 0.0
    bought_hits: int = 0

    def line(self) -> str:
        text = " ".join(self.sql.split())
        why = f"  <- {self.error}" if self.error else ""
        return f"[{self.status}{' / ' + self.kind if self.kind else ''}] {text[:160]}{why[:400]}"


@dataclass
class SessionRecord:
    file: str
    name: str
    statements: list[Outcome] = field(default_factory=list)
    advice: list[Outcome] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    violations: int = 0
    seconds: float = 0.0


_SESSIONS: dict[str, SessionRecord] = {}


# --------------------------------------------------------------------------------------------------------- harness

def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"


class Session:
    """One analyst's database: Adult (with a ``token`` column) and the roles of ``roles``; the default simulated crowd
    with a seed. ``staging=True`` holds Adult's last rows back in staging tables the analyst inserts later:
    ``late_arrivals`` (4 people aged under 20), ``arrivals_march`` and ``arrivals_april`` (the rest of ids 29001..)."""

    def __init__(self, request, tmp_path: Path, *, roles: str = "readme", file: bool = False, staging: bool = False,
                 seed: int = 7, budget: float | None = None):
        self.request, self.tmp_path = request, tmp_path
        self.roles = ROLE_SETS[roles]
        self.qis = list(self.roles["quasi_identifiers"])
        self.file = file
        self.path = str(tmp_path / "analyst.duckdb") if file else ":memory:"
        self.seed, self.budget = seed, budget
        self.released: list[cc.Release] = []
        nodeid = request.node.nodeid
        self.record = SessionRecord(nodeid.split("::")[0].rsplit("/", 1)[-1], request.node.name)
        _SESSIONS[nodeid] = self.record
        self.db = self._connect()
        self._setup(staging)

    def _connect(self):
        return crowddb.connect(self.path, seed=self.seed, budget=self.budget, progress=False, config={"threads": 1})

    def _setup(self, staging: bool) -> None:
        db = self.db
        db.load_csv("adult", adult_path())  # no roles yet: the token is added first
        db.sql("ALTER TABLE adult ADD COLUMN token VARCHAR")
        db.sql("UPDATE adult SET token = 'T' || id")
        if staging:
            db.sql("CREATE TABLE late_arrivals AS SELECT * FROM adult WHERE id > 29000 AND age < 20 ORDER BY id LIMIT 4")
            db.sql("CREATE TABLE arrivals_march AS SELECT * FROM adult WHERE id BETWEEN 29001 AND 29600 "
                   "AND token NOT IN (SELECT token FROM late_arrivals)")
            db.sql("CREATE TABLE arrivals_april AS SELECT * FROM adult WHERE id > 29600 "
                   "AND token NOT IN (SELECT token FROM late_arrivals)")
            db.sql("DELETE FROM adult WHERE id > 29000")
        db.declare_roles("adult", **self.roles)

    # -- running -------------------------------------------------------------------------------------------------

    def _bought(self) -> tuple[int, ...]:
        return tuple(self.db.con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in BOUGHT)

    def _statement(self, sql: str, kind: str | None, role: str, release: int | None = None) -> Outcome:
        start = time.perf_counter()
        before = self._bought()
        frame = None
        try:
            rel = self.db.sql(sql)
            frame = rel.df() if rel is not None else None
        except CrowdDBError as err:
            try:
                paid = self._bought() != before
            except Exception:  # noqa: BLE001  the connection is unusable: count it as bought, to be safe
                paid = True
            out = Outcome(sql, kind, role, "refused after paying" if paid else "refused", _first_line(err))
        except Exception as err:  # noqa: BLE001  a crash, whatever it is (a plain duckdb.Error included)
            out = Outcome(sql, kind, role, "crash", _first_line(err))
        else:
            out = Outcome(sql, kind, role, "ran")
            if release is not None and frame is not None:
                self.released.append(cc.release_from_frame(f"ANONYMIZE #{len(self.released) + 1}", frame, release,
                                                           " ".join(sql.split())[:200]))
        with _suppress():
            out.bought_hits = self._bought()[1] - before[1]
        out.seconds = time.perf_counter() - start
        if VERBOSE:
            print(f"    {out.seconds:5.1f}s {out.line()}")
        return out

    def _follow(self, advice: Sequence[str | Q], because: str) -> None:
        for step in advice:
            q = step if isinstance(step, Q) else Q(step)
            out = self._statement(q.sql, q.kind, "advice", q.release)
            self.record.advice.append(out)
            if out.status != "ran":
                self.record.problems.append(f"following the advice of the refusal ({because[:160]}) did not work: "
                                            f"{out.line()}")
                return

    def run(self, steps: Sequence[Q | Refused | Py | _Reopen]) -> None:
        start = time.perf_counter()
        problems = self.record.problems
        if VERBOSE:
            print(f"\n  session {self.record.name}")
        for step in steps:
            if isinstance(step, _Reopen):
                assert self.file, "REOPEN needs a session with file=True"
                self.db.close()
                self.db = self._connect()
                if VERBOSE:
                    print("    -- the file is reopened")
            elif isinstance(step, Py):
                try:
                    step.fn(self.db)
                except Exception as err:  # noqa: BLE001
                    problems.append(f"the Python call {step.label} failed: {_first_line(err)}")
            elif isinstance(step, Refused):
                out = self._statement(step.sql, step.kind, "expected refusal")
                self.record.statements.append(out)
                if out.status == "refused" and re.search(step.because, out.error, re.IGNORECASE | re.DOTALL):
                    self._follow(step.advice, out.error)
                elif out.status == "refused":
                    problems.append(f"refused, but not because /{step.because}/: {out.line()}")
                elif out.status == "ran":
                    problems.append(f"ran, though the correct answer is a refusal (/{step.because}/): {out.line()}")
                else:
                    problems.append(out.line())
            else:
                out = self._statement(step.sql, step.kind, "statement", step.release)
                self.record.statements.append(out)
                if out.status == "ran":
                    if step.free and out.bought_hits:
                        problems.append(f"bought {out.bought_hits} HIT(s), though the docs serve it from the answers "
                                        f"on record: {out.line()}")
                else:
                    problems.append(out.line())
                    if out.status == "refused" and step.advice:
                        self._follow(step.advice, out.error)
        self._judge()
        self.record.seconds = time.perf_counter() - start
        with _suppress():
            self.db.close()
        if problems:
            pytest.fail(f"session {self.record.name}: {len(problems)} problem(s)\n  - " + "\n  - ".join(problems),
                        pytrace=False)

    # -- verdicts ------------------------------------------------------------------------------------------------

    def _people(self) -> pd.DataFrame:
        """Every row that ever existed in any table of the session holding a token (a copy's rows are the same people
        as the original's), with its true quasi-identifier values."""
        tables = [t for (t,) in self.db.con.execute(
            "SELECT table_name FROM duckdb_columns() WHERE schema_name = 'main' AND column_name = 'token' "
            "AND NOT internal AND table_name NOT LIKE 'crowddb_%' "
            "AND table_name IN (SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main')").fetchall()]
        parts = []
        for t in tables:
            cols = {c for (c,) in self.db.con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE schema_name = 'main' AND table_name = ?", [t]).fetchall()}
            if set(self.qis) <= cols:
                parts.append(self.db.con.execute(
                    f'SELECT token, {", ".join(self.qis)} FROM main."{t}"').df())
        return pd.concat(parts, ignore_index=True).drop_duplicates("token").reset_index(drop=True)

    def _judge(self) -> None:
        problems = self.record.problems
        try:
            self.db.privacy_report("adult")
        except Exception as err:  # noqa: BLE001
            problems.append(f"db.privacy_report('adult') failed: {_first_line(err)}")
        people = self._people()
        releases = cc.releases_from_hit_items(self.db.con) + self.released
        known = set(people["token"])
        for r in releases:
            linked = sum(rec.get("token") in known for rec in r.records)
            if r.records and linked < len(r.records):
                problems.append(f"{r.name} ({r.shape[:120]}): {len(r.records) - linked} of {len(r.records)} published "
                                "records carry no token of a row (the session must publish the token column)")
        report = cc.check(people, self.qis, releases)
        self.record.violations = len(report.violations)
        if report.violations:
            problems.append(f"composition checker: {report.summary()}")
        if report.uncovered:
            problems.append(f"composition checker: {len(report.uncovered)} published record(s) whose box does not "
                            f"admit their own row, e.g. {report.uncovered[0]}")
        if VERBOSE:
            print(f"    composition checker over {len(releases)} release(s): {report.summary()}")


class _suppress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return exc[0] is not None and issubclass(exc[0], Exception)


@pytest.fixture
def analyst(request, tmp_path):
    """``analyst(steps, roles='readme'|'demo', file=False, staging=False, seed=7, budget=None)`` runs a session."""

    def run(steps, **options):
        Session(request, tmp_path, **options).run(steps)
    return run


# --------------------------------------------------------------------------------------------------------- summary

def _counts(outcomes: list[Outcome]) -> dict[str, int]:
    c = defaultdict(int)
    for o in outcomes:
        c["statements"] += 1
        c[o.status] += 1
    return c


def pytest_terminal_summary(terminalreporter):
    if not _SESSIONS:
        return
    tr = terminalreporter
    failed = {rec.name for nodeid, rec in _SESSIONS.items() if rec.problems}
    tr.section("analyst sessions (issue 25)")
    tr.write_line(f"crowddb under test: {crowddb.__file__}")
    head = f"{'file':30s} {'sessions':>8s} {'failed':>6s} {'stmts':>6s} {'ran':>5s} {'refused':>7s} " \
           f"{'of them correct':>15s} {'after paying':>12s} {'crash':>5s} {'refusal rate':>12s} {'below k':>7s}"
    tr.write_line(head)
    per_file: dict[str, list[SessionRecord]] = defaultdict(list)
    for rec in _SESSIONS.values():
        per_file[rec.file].append(rec)

    def row(label, recs):
        outs = [o for r in recs for o in r.statements]
        c = _counts(outs)
        correct = sum(o.status == "refused" and o.role == "expected refusal" for o in outs)
        refused = c["refused"] + c["refused after paying"]
        rate = refused / c["statements"] if c["statements"] else 0.0
        below = sum(r.violations > 0 for r in recs)
        tr.write_line(f"{label:30s} {len(recs):8d} {sum(r.name in failed for r in recs):6d} {c['statements']:6d} "
                      f"{c['ran']:5d} {refused:7d} {correct:15d} {c['refused after paying']:12d} {c['crash']:5d} "
                      f"{rate:11.1%} {below:7d}")
        return c, refused, rate

    for f in sorted(per_file):
        row(f, per_file[f])
    c, refused, rate = row("total", list(_SESSIONS.values()))

    tr.write_line("")
    tr.write_line(f"{'kind of statement':52s} {'stmts':>6s} {'ran':>5s} {'refused':>7s} {'after paying':>12s} "
                  f"{'crash':>5s}")
    by_kind: dict[str | None, list[Outcome]] = defaultdict(list)
    for rec in _SESSIONS.values():
        for o in rec.statements:
            by_kind[o.kind].append(o)
    for kind, label in KINDS.items():
        outs = by_kind.get(kind, [])
        if not outs:
            continue
        k = _counts(outs)
        tr.write_line(f"{label:52s} {k['statements']:6d} {k['ran']:5d} {k['refused']:7d} "
                      f"{k['refused after paying']:12d} {k['crash']:5d}")
    advice = [o for rec in _SESSIONS.values() for o in rec.advice]
    if advice:
        a = _counts(advice)
        tr.write_line(f"advice followed after a refusal: {a['statements']} statement(s), {a['ran']} ran, "
                      f"{a['refused'] + a['refused after paying']} refused, {a['crash']} crashed")

    tr.write_line("")
    n = c["statements"]
    tr.write_line(f"refusal rate {refused}/{n} = {rate:.1%} (goal: at most {GOAL_RATE:.0%}): "
                  f"{'met' if rate <= GOAL_RATE else 'NOT MET'}; refused after paying: {c['refused after paying']} "
                  f"(goal 0); crashes: {c['crash']} (goal 0); sessions with a joint class below k: "
                  f"{sum(r.violations > 0 for r in _SESSIONS.values())} (goal 0)")
    if failed:
        tr.write_line(f"failing sessions ({len(failed)} of {len(_SESSIONS)}):")
        for rec in _SESSIONS.values():
            if rec.problems:
                first = rec.problems[0].replace("\n", " ")
                more = f" (+{len(rec.problems) - 1} more)" if len(rec.problems) > 1 else ""
                tr.write_line(f"  {rec.file}::{rec.name}: {first[:260]}{more}")


def pytest_sessionfinish(session, exitstatus):
    """The suite as a whole fails when more than 3% of its statements are refused (only when most sessions ran)."""
    if len(_SESSIONS) < 30 or exitstatus != 0:
        return
    outs = [o for rec in _SESSIONS.values() for o in rec.statements]
    refused = sum(o.status in ("refused", "refused after paying") for o in outs)
    if outs and refused / len(outs) > GOAL_RATE:
        session.exitstatus = 1
